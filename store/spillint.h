/*
 * spillint.h - what the spill module's files share (spill.c: the loop's
 * side; spillapi.c: the calls; spilljob.c: the I/O jobs; spilldir.c: the
 * spill area): its records and the jobs they queue. Nothing outside the
 * module includes it.
 */
#ifndef HPL_STORE_SPILLINT_H
#define HPL_STORE_SPILLINT_H

#include <stdint.h>
#include <uthash.h>
#include <uv.h>

#include "spill.h"

#define HPL__SPILL_PREFIX "hpl-spill-"
#define HPL__SPILL_LOCK "lock"
#define HPL__SPILL_PROBE "probe"
#define HPL__SPILL_STALE_S 10 /* an unlocked subdirectory this old is a dead store's */
#define HPL__SPILL_DRAIN 64   /* callbacks per loop iteration */

enum { HPL__R_QUEUED, HPL__R_RUNNING, HPL__R_UNLINK, HPL__R_DONE };
enum { HPL__F_WRITING, HPL__F_READY };

typedef struct hpl__sp_req hpl__sp_req;

typedef struct hpl__sp_file {
  UT_hash_handle hh;
  uint64_t id;
  hpl__spill *sp;
  uint64_t size;
  uint64_t disk;       /* bytes on disk so far */
  int state;           /* HPL__F_WRITING, HPL__F_READY */
  int in_table;        /* named by its id */
  int on_disk;         /* created, counted in files_live */
  int unlinking;       /* its own unlink job runs */
  int unlink_err;      /* errno of that job */
  unsigned nreads;     /* read requests holding it */
  hpl__sp_req *writer; /* its write request, until that one's callback */
  uv_work_t work;      /* the unlink job */
  char path[];
} hpl__sp_file;

struct hpl__sp_req {
  UT_hash_handle hh;
  uint64_t id;
  hpl__spill *sp;
  hpl__sp_file *f; /* NULL once the request no longer holds it */
  uint64_t file;
  int write;
  int state;
  int cancelled;
  int closing; /* cancelled by close */
  int busy;    /* counted in the busy time */
  uint8_t *buf;
  uint64_t off; /* file offset of buf[0] */
  uint64_t len;
  uint64_t done; /* bytes moved */
  hpl__spill_cb cb;
  void *arg;
  int status, err;
  uint64_t fail_at;         /* file offset of the failure */
  int eof;                  /* a read found the file shorter */
  int unlink_err;           /* a failed write's partial file could not be removed */
  char *path;               /* copy: the file may be gone when the detail is made */
  hpl__sp_req *prev, *next; /* ready queue or done list */
  uv_work_t work;
  /* the running job: set on the loop */
  uint64_t j_off, j_len;
  int j_create, j_direct;
  /* set by the job */
  int j_err, j_created, j_refused, j_eof;
  uint64_t j_moved, j_direct_bytes, j_ns;
};

struct hpl__spill {
  uv_loop_t *loop;
  uv_idle_t idle; /* delivers the done list */
  int idle_on;
  char *root;     /* the directory given to open */
  char *subdir;   /* ours, inside it */
  int lock_fd;
  int direct;
  int closing, final_queued;
  uint64_t next_file, next_req;
  hpl__sp_file *files; /* by id */
  hpl__sp_req *reqs;   /* by id: every request whose callback has not run */
  hpl__sp_req *ready;  /* QUEUED, in order */
  hpl__sp_req *done;   /* DONE, in order */
  unsigned io_jobs;    /* I/O jobs in the pool */
  unsigned jobs_out;   /* all jobs in the pool (I/O, unlink, clean-up) */
  unsigned wr_pending, rd_pending;
  uint64_t wr_since, rd_since;
  hpl__spill_counters c;
  uv_work_t clean_work;
  uint64_t clean_removed;
  uv_work_t final_work;
  char errdetail[512];
};

/* spilljob.c (thread pool): one chunk of a request (r->j_*); a failed
 * write's partial file, and a removed file, unlinked. */
void hpl__spill_io_run(uv_work_t *w);
void hpl__spill_req_unlink_run(uv_work_t *w);
void hpl__spill_file_unlink_run(uv_work_t *w);

/* spilldir.c (thread pool): the subdirectories of dead stores removed
 * (queued by hpl__spill_open); ours and everything in it removed (at the
 * end of close). */
void hpl__spill_clean_run(uv_work_t *w);
void hpl__spill_final_run(uv_work_t *w);

/* spill.c (loop): the clean-up job is done; closing and nothing left:
 * remove our files and directory, then free. */
void hpl__spill_clean_done(uv_work_t *w, int status);
void hpl__spill_maybe_final(hpl__spill *sp);

/* spill.c (loop), for spillapi.c's calls: a new request starts counting in
 * the busy time; a request is done (its callback runs from the done list);
 * free job slots go to the requests at the head of the ready queue; a
 * request is cancelled (its callback says so); a removed, written file is
 * unlinked once no read holds it. */
void hpl__spill_busy_begin(hpl__sp_req *r);
void hpl__spill_req_to_done(hpl__sp_req *r);
void hpl__spill_pump(hpl__spill *sp);
void hpl__spill_req_cancel(hpl__sp_req *r);
void hpl__spill_file_maybe_unlink(hpl__sp_file *f);

#endif
