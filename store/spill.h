/*
 * spill.h - spill files: whole buffers written to files in a spill
 * directory and read back, in whole or in ranges.
 *
 * The store spills objects here when its pool is full and restores them
 * (or streams ranges of them to a peer) later. This module knows nothing
 * about objects: it writes a buffer to a new file, reads a range of a file
 * into a buffer, removes files, and counts.
 *
 * Threads. Every call is made on the thread running `loop` (the store's
 * event loop), and every callback runs there. The file system is touched
 * only by jobs on libuv's thread pool (uv_queue_work), never on the loop,
 * except by hpl__spill_open (see there). A job moves at most
 * HPL__SPILL_CHUNK bytes, and at most HPL__SPILL_JOBS of this module's I/O
 * jobs are in the pool at once (other modules, e.g. reduce kernels, share
 * the pool: with the default pool of 4 threads, two stay theirs); further
 * work waits in a queue on the loop, served round robin one chunk at a
 * time, so a 4 MiB range read is not stuck behind a 1 GiB write.
 *
 * Placement. open() makes a private subdirectory "hpl-spill-PID-RANDOM"
 * in `dir` and keeps an flock on its "lock" file for its lifetime. Files
 * are named by their id (16 hex digits) inside it. Stores sharing `dir`
 * therefore never collide; open() also removes the subdirectories of dead
 * stores (named hpl-spill-*, lock not held, older than 10 s) and nothing
 * else.
 *
 * I/O. Sequential, in chunks of HPL__SPILL_CHUNK. The part of a chunk where
 * buffer address, file offset and length are 4096-aligned goes through
 * O_DIRECT (pool allocations of large objects are page-aligned, so all of
 * such an object but its unaligned tail); the rest (a small object, an
 * unaligned tail, a range read at an odd offset) goes through the page
 * cache. O_DIRECT is not used at all when the file system refuses it at
 * open (EINVAL: tmpfs before Linux 6.6) or at the first transfer, or with
 * HPL__SPILL_BUFFERED; hpl__spill_direct() says which, and the counters
 * split the bytes moved each way.
 *
 * No fsync: spill files are scratch. They need not survive a crash (a
 * restarted store deletes them), and the O_DIRECT part is on the device
 * when its job returns anyway.
 *
 * Ids. Files and requests are named by 64-bit ids, never 0 and never
 * reused within one hpl__spill. An id that names nothing (any more) is
 * refused with HPL_ENOTFOUND, so stale ids are harmless.
 *
 * Errors. Calls return 0 or a negative HPL_E* code; the detail of the last
 * failed call is hpl__spill_errdetail(). Asynchronous failures reach the
 * callback as (status, errno, detail), e.g. HPL_ESYS, ENOSPC,
 * "spill write of 64.0 MiB to /var/tmp/hpl-spill-12-ab/0000000000000003
 * failed at offset 48.0 MiB: No space left on device".
 *
 * Callers: room.c (spilling idle copies, reading them back), objlife.c
 * (a spilled object's file goes with it), dpfile.c (streaming a spilled
 * copy to a peer), tests/test_spill.c, bench/bench_spill.c.
 */
#ifndef HPL_STORE_SPILL_H
#define HPL_STORE_SPILL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct hpl__spill hpl__spill;

#define HPL__SPILL_CHUNK (16u << 20) /* most bytes one job moves */
#define HPL__SPILL_JOBS 2            /* most I/O jobs in the thread pool at once */
#define HPL__SPILL_ALIGN 4096        /* alignment O_DIRECT is used with */
/* Largest file (4 EiB: any offset + length stays inside off_t). */
#define HPL__SPILL_MAX_SIZE (1ull << 62)

/* Flags of hpl__spill_open. */
#define HPL__SPILL_BUFFERED 1u /* never use O_DIRECT */

/* Completion of a write or read. status is 0, HPL_ECANCELED (the request
 * was cancelled, its file removed, or the spill closed), or HPL_ESYS with
 * sys_errno the errno that failed it (0 otherwise). detail is "" on
 * success, else a sentence naming the operation, size, path and reason;
 * it is valid during the call only. */
typedef void (*hpl__spill_cb)(void *arg, int status, int sys_errno, const char *detail);

/* Open a spill area in `dir`: create `dir` if missing (and its missing
 * parents, mode 0700), make the private subdirectory (proves `dir` is
 * writable), probe O_DIRECT, and queue the removal of dead stores'
 * subdirectories (a job; close waits for it).
 * Blocks for a few file-system calls (mkdir, open, flock, unlink of a probe
 * file): call it at start-up, before the loop runs.
 * flags: 0 or HPL__SPILL_BUFFERED.
 * Returns 0 and *out (owned by the caller: hpl__spill_close), or
 * HPL_EINVAL (loop, dir or out NULL, dir empty or too long, unknown flags),
 * HPL_ESYS (errno kept: dir cannot be created or written, ...) or
 * HPL_ENOMEM, with a detail in detail[dlen] (may be NULL) naming the path
 * and reason; nothing is left behind then. */
int hpl__spill_open(uv_loop_t *loop, const char *dir, unsigned flags, hpl__spill **out,
                    char *detail, size_t dlen);

/* Close: every request still pending is cancelled (its callback runs with
 * HPL_ECANCELED, on the loop, after close returned, once its running job
 * has returned), then a job removes every file this spill made and its
 * subdirectory, then the memory is freed. The loop must run until that
 * happened (uv_run returns only after: the jobs and a handle keep the loop
 * alive). After this call `sp` must not be used, also not from those
 * callbacks. NULL is a no-op. */
void hpl__spill_close(hpl__spill *sp);

/* Write buf[0, len) to a new spill file (len 0 makes an empty file).
 * On success *file is the new file's id and *req (may be NULL) the id of
 * the request, and cb(arg, ...) runs exactly once, on the loop, never from
 * inside this call: with 0 when the whole file is written, after which the
 * file can be read; with an error after the partial file was removed (the
 * file id then names nothing). `buf` belongs to the module until cb runs
 * (also after a cancel): do not change or free it before.
 * Returns HPL_EINVAL (buf NULL with len > 0, len > HPL__SPILL_MAX_SIZE,
 * cb NULL, file NULL), HPL_ESTATE (closing) or HPL_ENOMEM; cb is then
 * never called. */
int hpl__spill_write(hpl__spill *sp, const void *buf, uint64_t len, hpl__spill_cb cb, void *arg,
                     uint64_t *file, uint64_t *req);

/* Read bytes [off, off+len) of a written file into buf. As for writes: on
 * success *req (may be NULL) is set, cb runs exactly once, later, and
 * `buf` belongs to the module until then. A range read may run
 * concurrently with other reads of the same file.
 * Returns HPL_EINVAL (buf NULL with len > 0, off+len beyond the file or
 * overflowing, cb NULL), HPL_ENOTFOUND (no such file), HPL_ESTATE (the
 * file's write has not completed, or closing) or HPL_ENOMEM; cb is then
 * never called. */
int hpl__spill_read(hpl__spill *sp, uint64_t file, uint64_t off, void *buf, uint64_t len,
                    hpl__spill_cb cb, void *arg, uint64_t *req);

/* Drop interest in a request. Returns 0: its callback runs exactly once,
 * later, with HPL_ECANCELED, whatever stage the request had reached (also
 * if its I/O had just finished); it runs once no job touches the buffer
 * any more, so the buffer may be freed then. A cancelled write removes its
 * file (the file id names nothing from now on). Cancelling an already
 * cancelled request returns 0 and changes nothing.
 * Returns HPL_ENOTFOUND when `req` names no pending request (its callback
 * has already run): nothing happens. */
int hpl__spill_cancel(hpl__spill *sp, uint64_t req);

/* Remove a file: the id names nothing from now on; the file is unlinked by
 * a job once no job reads or writes it. Every request on it whose callback
 * has not run yet is cancelled (as hpl__spill_cancel), its write included
 * (the file may be removed before its write's callback). Returns 0 or
 * HPL_ENOTFOUND. */
int hpl__spill_remove(hpl__spill *sp, uint64_t file);

/* Size of a file (written or being written) in *size.
 * Returns 0 or HPL_ENOTFOUND. */
int hpl__spill_file_size(const hpl__spill *sp, uint64_t file, uint64_t *size);

/* Path of a file into buf[len] (for messages and tests).
 * Returns 0, HPL_ENOTFOUND or HPL_EINVAL (buf too small). */
int hpl__spill_file_path(const hpl__spill *sp, uint64_t file, char *buf, size_t len);

/* The private subdirectory (owned by sp). */
const char *hpl__spill_dir(const hpl__spill *sp);

/* 1 if aligned transfers use O_DIRECT, 0 if everything goes through the
 * page cache (flag, refused at open, or refused by a later transfer). */
int hpl__spill_direct(const hpl__spill *sp);

/* Detail of the last failed call on sp ("" if none); owned by sp, valid
 * until the next call. */
const char *hpl__spill_errdetail(const hpl__spill *sp);

/* Counters. Busy times are wall time during which at least one write
 * (read) request was pending, so bytes / busy time is the throughput the
 * caller saw; io times are the sum of the jobs' own durations (they exceed
 * wall time when jobs run in parallel). */
typedef struct hpl__spill_counters {
  uint64_t bytes_written;  /* bytes written by jobs (also of writes that then failed) */
  uint64_t bytes_read;     /* bytes read by jobs */
  uint64_t files_live;     /* files of this spill on disk now (being written, written,
                              or waiting to be unlinked) */
  uint64_t bytes_live;     /* bytes in those files */
  uint64_t write_busy_ns;  /* wall time with a write pending */
  uint64_t read_busy_ns;   /* wall time with a read pending */
  uint64_t write_io_ns;    /* summed duration of write jobs */
  uint64_t read_io_ns;     /* summed duration of read jobs */
  uint64_t direct_bytes;   /* bytes moved with O_DIRECT */
  uint64_t buffered_bytes; /* bytes moved through the page cache */
  uint64_t writes;         /* writes completed (status 0) */
  uint64_t reads;          /* reads completed (status 0) */
  uint64_t cancelled;      /* requests completed with HPL_ECANCELED */
  uint64_t errors;         /* requests failed with HPL_ESYS, and failed unlinks */
  uint64_t jobs;           /* I/O jobs run */
  uint64_t jobs_max;       /* most I/O jobs in the pool at once (<= HPL__SPILL_JOBS) */
  uint64_t job_bytes_max;  /* most bytes one job moved (<= HPL__SPILL_CHUNK) */
  uint64_t stale_removed;  /* dead stores' subdirectories removed by open() */
} hpl__spill_counters;

void hpl__spill_counters_get(const hpl__spill *sp, hpl__spill_counters *out);

#endif
