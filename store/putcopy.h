/*
 * putcopy.h - copying a local client's bytes from its own memory into an
 * object's buffer (process_vm_readv, or memcpy from the client's creation
 * memfd mapped read-only). A client never writes the pool: the
 * pool's memory is sealed against every writer but the store (pool.h), so
 * an object a client puts is copied in by the store, from the address the
 * client named in its CREATE, in the process that connected (SO_PEERCRED).
 * The kernel checks that the store may read that process (same user and
 * the client dumpable, as for ptrace), so a client can only ever make the
 * store read its own memory.
 *
 * A client that wrote its bytes into a memfd of its own (hpl_create's
 * buffer) names that descriptor: the store takes a duplicate of it
 * (pidfd_getfd, the same permission check), maps it read-only once
 * (hpl__pcstage, kept per client for its next creations) and copies with
 * memcpy, about twice as fast as process_vm_readv. Only a memfd sealed
 * against shrinking is taken, so the mapping can never lose its pages
 * under a copy (no SIGBUS in the store).
 *
 * Small copies run at once on the event loop (no longer than copying a
 * PUT's payload); larger ones run on libuv's thread pool (hpl__pcopier).
 *
 * Callers: put.c.
 */
#ifndef HPL_STORE_PUTCOPY_H
#define HPL_STORE_PUTCOPY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

/* A copier's steps of at most HPL__PCOPY_SMALL run on the loop; up to
 * HPL__PCOPY_INLINE, the loop copies one part while the thread pool
 * copies the others (a step is done sooner; the loop is busy no longer
 * than a PUT's payload takes to copy). */
#define HPL__PCOPY_SMALL (64u << 10)
#define HPL__PCOPY_INLINE (1u << 20)

/* A client's creation memfd, mapped read-only by the store. Referenced:
 * the client's cache holds one reference, each copier using it another. */
typedef struct hpl__pcstage hpl__pcstage;

/* The stage holding the client's bytes [off, off + n) in its descriptor
 * fd (process pid): *cache if it is the same memfd (its inode) and large
 * enough, else the memfd mapped anew, which replaces *cache (the old one
 * unreferenced). On success (0) *out is referenced for the caller
 * (hpl__pcstage_unref). Errors (nothing changed, why[] says what): HPL_EINVAL
 * (no such descriptor, not a memfd sealed F_SEAL_SHRINK, the range past
 * its end, or the kernel refused pidfd_getfd), HPL_ESYS (mmap failed),
 * HPL_ENOMEM. Callers fall back to process_vm_readv on failure. */
int hpl__pcstage_get(hpl__pcstage **cache, pid_t pid, int fd, uint64_t off, uint64_t n,
                     hpl__pcstage **out, char *why, size_t wlen);
/* The mapping's first byte (the memfd's byte 0). */
const uint8_t *hpl__pcstage_bytes(const hpl__pcstage *st);
/* Drop a reference; the last one unmaps. NULL is a no-op. */
void hpl__pcstage_unref(hpl__pcstage *st);

/* Copy n bytes at address src of process pid into dst, now. 0, or
 * HPL_EINVAL (the client's memory is not readable there: a bad address,
 * or the kernel refused: errno's text in detail) or HPL_ECONN (the
 * process is gone). */
int hpl__pcopy_now(pid_t pid, uint64_t src, uint8_t *dst, uint64_t n, char *detail, size_t dlen);

/* A copy on the thread pool: done(j, status, detail) runs on the loop when
 * it is over (status as hpl__pcopy_now). The caller owns j, which must stay
 * at its address until done() ran; dst must stay valid until then. */
typedef struct hpl__pcopy {
  uv_work_t work;
  pid_t pid;
  const uint8_t *map; /* set: src is an offset in this mapping (memcpy), not an address */
  uint64_t src;
  uint8_t *dst;
  uint64_t n;
  int status;
  char detail[160];
  void *arg;
  void (*done)(struct hpl__pcopy *j, int status, const char *detail);
} hpl__pcopy;

/* Start j (its pid, src, dst, n, done and arg set by the caller). 0, or
 * HPL_ESYS when libuv refused the job (done() will not run). */
int hpl__pcopy_start(uv_loop_t *loop, hpl__pcopy *j);

/* A copier: one object's bytes, copied from the client as the client says
 * more of them are final. Steps of HPL__PCOPY_FIRST bytes at first, then
 * doubling up to HPL__PCOPY_STEP, each split among HPL__PCOPY_JOBS jobs on
 * the thread pool (one process_vm_readv moves about half what a memcpy
 * does, the kernel pinning and copying page by page: two in parallel more
 * than make up for it); see HPL__PCOPY_SMALL for steps the loop copies.
 * With a stage, steps of up to HPL__PCOPY_INLINE are copied by the loop
 * alone (a memcpy of 1 MiB takes what half of it takes process_vm_readv).
 * The owner sets loop, pid, src (and stage), dst, arg and advanced, the rest zeroed,
 * and keeps the copier at its address (and dst valid) while jobs are out. */
#define HPL__PCOPY_JOBS 2
#define HPL__PCOPY_FIRST (4u << 20)
#define HPL__PCOPY_STEP (64u << 20)
typedef struct hpl__pcopier {
  uv_loop_t *loop;
  pid_t pid;
  hpl__pcstage *stage; /* set: src is the bytes' offset in this client memfd,
                          copied with memcpy; referenced, the owner unrefs it
                          once no job is out */
  uint64_t src;  /* the bytes' address in the client (or offset in stage) */
  uint8_t *dst;  /* and in the pool */
  uint64_t copied; /* bytes [0, copied) are in */
  uint64_t want;   /* copy up to here (hpl__pcopier_run) */
  int out;         /* jobs out (0: idle) */
  int rc;          /* a copy failed (sticky): its code, why in why[] */
  char why[160];
  uint64_t step;   /* bytes of the step out */
  int step_rc;     /* the first failure among the step's jobs */
  char step_why[160];
  hpl__pcopy job[HPL__PCOPY_JOBS];
  void *arg;
  /* on the loop, when a step's jobs are all back: copied grew, or rc is
   * set; the owner calls hpl__pcopier_run again to go on */
  void (*advanced)(struct hpl__pcopier *k);
} hpl__pcopier;

/* Have copier k (pid set) copy from the client's memfd: its descriptor fd
 * holds the bytes [off, off + n). Takes the stage with hpl__pcstage_get
 * (cache: the client's; same errors, k then unchanged: it copies with
 * process_vm_readv) and sets k->stage (referenced) and k->src = off. */
int hpl__pcopier_use_memfd(hpl__pcopier *k, hpl__pcstage **cache, int fd, uint64_t off,
                           uint64_t n, char *why, size_t wlen);

/* Copy on towards k->want: steps run at once while they are small, until
 * one is queued (advanced() follows), everything wanted is in, or a copy
 * fails (k->rc). A no-op while jobs are out or after a failure. */
void hpl__pcopier_run(hpl__pcopier *k);

#endif
