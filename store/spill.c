/* spill.c - spill files (see spill.h): the loop's side - requests, the
 * queue of jobs, callbacks. The calls are spillapi.c's, the jobs
 * spilljob.c's (I/O) and spilldir.c's (the spill area).
 *
 * Requests. A write or read is a request (hpl__sp_req) in one of four stages:
 *   QUEUED   in the ready queue, waiting for one of the HPL__SPILL_JOBS
 *            job slots;
 *   RUNNING  one job of it (at most HPL__SPILL_CHUNK bytes) is in the
 *            thread pool; when it returns, the request finishes or goes
 *            back to the tail of the ready queue (round robin);
 *   UNLINK   a write that failed or was cancelled: a job unlinks its
 *            partial file, so the callback sees the disk space back;
 *   DONE     in the done list, waiting for its callback.
 * A request has at most one job in the pool at a time, so its uv_work_t
 * and the job's in/out fields (j_*) are its own. Callbacks run only from
 * an idle handle that drains the done list, never from inside a call, so
 * a callback may call anything here (close included).
 *
 * Files. A file (hpl__sp_file) is in the table from its write until removed or
 * its write fails. A file being written belongs to its write request,
 * which unlinks and frees it if it fails; a written file is unlinked by
 * its own job once removed and no read holds it.
 *
 * Jobs touch only their own request or file and the immutable path; all
 * other state is the loop's.
 */
#include "spill.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "spillint.h"
#include "util.h"

static void req_finish(hpl__sp_req *r, int status, int err);

/* ------------------------------------------------------------------------
 * Loop side
 * ---------------------------------------------------------------------- */

void hpl__spill_busy_begin(hpl__sp_req *r) {
  hpl__spill *sp = r->sp;
  r->busy = 1;
  if (r->write) {
    if (sp->wr_pending++ == 0) sp->wr_since = uv_hrtime();
  } else {
    if (sp->rd_pending++ == 0) sp->rd_since = uv_hrtime();
  }
}

static void busy_end(hpl__sp_req *r) {
  hpl__spill *sp = r->sp;
  if (!r->busy) return;
  r->busy = 0;
  if (r->write) {
    if (--sp->wr_pending == 0) sp->c.write_busy_ns += uv_hrtime() - sp->wr_since;
  } else {
    if (--sp->rd_pending == 0) sp->c.read_busy_ns += uv_hrtime() - sp->rd_since;
  }
}

static void file_free(hpl__sp_file *f) {
  if (f->in_table) HASH_DEL(f->sp->files, f);
  free(f);
}

static void file_unlink_done(uv_work_t *w, int status) {
  hpl__sp_file *f = w->data;
  hpl__spill *sp = f->sp;
  sp->jobs_out--;
  if (status != 0 || f->unlink_err) sp->c.errors++;
  sp->c.files_live--;
  sp->c.bytes_live -= f->disk;
  file_free(f);
  hpl__spill_maybe_final(sp);
}

/* A removed, written file: unlink it once no read holds it. */
void hpl__spill_file_maybe_unlink(hpl__sp_file *f) {
  hpl__spill *sp = f->sp;
  if (f->in_table || f->writer || f->nreads || f->unlinking) return;
  if (!f->on_disk) {
    file_free(f);
    return;
  }
  f->unlinking = 1;
  f->work.data = f;
  if (uv_queue_work(sp->loop, &f->work, hpl__spill_file_unlink_run, file_unlink_done) == 0) {
    sp->jobs_out++;
    return;
  }
  sp->c.errors++; /* left for close to remove */
  sp->c.files_live--;
  sp->c.bytes_live -= f->disk;
  file_free(f);
}

static void spill_drain(uv_idle_t *h);

void hpl__spill_req_to_done(hpl__sp_req *r) {
  hpl__spill *sp = r->sp;
  r->state = HPL__R_DONE;
  busy_end(r);
  if (!r->write && r->f) {
    hpl__sp_file *f = r->f;
    r->f = NULL;
    f->nreads--;
    hpl__spill_file_maybe_unlink(f);
  }
  DL_APPEND(sp->done, r);
  if (!sp->idle_on) {
    sp->idle_on = 1;
    uv_idle_start(&sp->idle, spill_drain);
  }
}

static void req_unlink_done(uv_work_t *w, int status) {
  hpl__sp_req *r = w->data;
  hpl__spill *sp = r->sp;
  hpl__sp_file *f = r->f;
  sp->jobs_out--;
  if (status != 0 && !r->unlink_err) r->unlink_err = ECANCELED;
  if (r->unlink_err) sp->c.errors++;
  sp->c.files_live--;
  sp->c.bytes_live -= f->disk;
  r->f = NULL;
  file_free(f);
  hpl__spill_req_to_done(r);
  hpl__spill_maybe_final(sp);
}

/* A request's I/O is over: status 0, HPL_ECANCELED or HPL_ESYS (err). A
 * write that did not succeed takes its file out of the table and unlinks
 * it before its callback. */
static void req_finish(hpl__sp_req *r, int status, int err) {
  hpl__spill *sp = r->sp;
  r->status = status;
  r->err = err;
  if (!r->write || status == 0) {
    hpl__spill_req_to_done(r);
    return;
  }
  hpl__sp_file *f = r->f;
  if (f->in_table) {
    HASH_DEL(sp->files, f);
    f->in_table = 0;
  }
  if (!f->on_disk) {
    r->f = NULL;
    file_free(f);
    hpl__spill_req_to_done(r);
    return;
  }
  r->state = HPL__R_UNLINK;
  r->work.data = r;
  if (uv_queue_work(sp->loop, &r->work, hpl__spill_req_unlink_run, req_unlink_done) == 0) {
    sp->jobs_out++;
    return;
  }
  r->unlink_err = EAGAIN; /* left for close to remove */
  sp->c.errors++;
  sp->c.files_live--;
  sp->c.bytes_live -= f->disk;
  r->f = NULL;
  file_free(f);
  hpl__spill_req_to_done(r);
}

static void io_done(uv_work_t *w, int status) {
  hpl__sp_req *r = w->data;
  hpl__spill *sp = r->sp;
  sp->io_jobs--;
  sp->jobs_out--;
  if (status == 0) {
    hpl__spill_counters *c = &sp->c;
    c->jobs++;
    if (r->j_moved > c->job_bytes_max) c->job_bytes_max = r->j_moved;
    c->direct_bytes += r->j_direct_bytes;
    c->buffered_bytes += r->j_moved - r->j_direct_bytes;
    if (r->j_refused) sp->direct = 0;
    if (r->write) {
      c->bytes_written += r->j_moved;
      c->write_io_ns += r->j_ns;
      if (r->j_created) {
        r->f->on_disk = 1;
        c->files_live++;
      }
      r->f->disk += r->j_moved;
      c->bytes_live += r->j_moved;
    } else {
      c->bytes_read += r->j_moved;
      c->read_io_ns += r->j_ns;
    }
    r->done += r->j_moved;
  }
  if (r->cancelled || status != 0) {
    req_finish(r, HPL_ECANCELED, 0);
  } else if (r->j_err) {
    r->fail_at = r->j_off + r->j_moved;
    r->eof = r->j_eof;
    req_finish(r, HPL_ESYS, r->j_err);
  } else if (r->done == r->len && (!r->write || r->f->on_disk)) {
    req_finish(r, 0, 0);
  } else {
    r->state = HPL__R_QUEUED;
    DL_APPEND(sp->ready, r);
  }
  hpl__spill_pump(sp);
  hpl__spill_maybe_final(sp);
}

/* Give free job slots to the requests at the head of the ready queue. */
void hpl__spill_pump(hpl__spill *sp) {
  while (sp->io_jobs < HPL__SPILL_JOBS && sp->ready) {
    hpl__sp_req *r = sp->ready;
    DL_DELETE(sp->ready, r);
    uint64_t left = r->len - r->done;
    r->j_off = r->off + r->done;
    r->j_len = left > HPL__SPILL_CHUNK ? HPL__SPILL_CHUNK : left;
    r->j_create = r->write && !r->f->on_disk;
    r->j_direct = sp->direct;
    r->j_err = r->j_created = r->j_refused = r->j_eof = 0;
    r->j_moved = r->j_direct_bytes = r->j_ns = 0;
    r->state = HPL__R_RUNNING;
    r->work.data = r;
    int rc = uv_queue_work(sp->loop, &r->work, hpl__spill_io_run, io_done);
    if (rc != 0) {
      r->fail_at = r->j_off;
      req_finish(r, HPL_ESYS, -rc);
      continue;
    }
    sp->io_jobs++;
    sp->jobs_out++;
    if (sp->io_jobs > sp->c.jobs_max) sp->c.jobs_max = sp->io_jobs;
  }
}

void hpl__spill_req_cancel(hpl__sp_req *r) {
  hpl__spill *sp = r->sp;
  if (r->cancelled) return;
  r->cancelled = 1;
  switch (r->state) {
  case HPL__R_QUEUED:
    DL_DELETE(sp->ready, r);
    req_finish(r, HPL_ECANCELED, 0);
    break;
  case HPL__R_RUNNING:
    uv_cancel((uv_req_t *)&r->work); /* fails (harmlessly) once the job runs */
    break;
  case HPL__R_UNLINK:
    r->status = HPL_ECANCELED;
    r->err = 0;
    break;
  case HPL__R_DONE:
    if (r->write && r->status == 0) {
      /* written but not yet told: the file goes, as for any cancelled write */
      DL_DELETE(sp->done, r);
      req_finish(r, HPL_ECANCELED, 0);
    } else {
      r->status = HPL_ECANCELED;
      r->err = 0;
    }
    break;
  }
}

/* The callback's detail: "" on success. */
static void req_detail(const hpl__sp_req *r, char *out, size_t len) {
  char size[32], at[32];
  const char *op = r->write ? "write" : "read";
  const char *dir = r->write ? "to" : "from";
  out[0] = '\0';
  if (r->status == 0) return;
  hpl__fmt_bytes(r->len, size, sizeof size);
  char what[64];
  if (r->write || r->off == 0)
    snprintf(what, sizeof what, "%s", size);
  else
    snprintf(what, sizeof what, "%s at offset %llu", size, (unsigned long long)r->off);
  if (r->status == HPL_ECANCELED) {
    snprintf(out, len, "spill %s of %s %s %s cancelled%s", op, what, dir, r->path,
             r->closing ? ": the spill is closing" : "");
    return;
  }
  hpl__fmt_bytes(r->fail_at, at, sizeof at);
  int k = snprintf(out, len, "spill %s of %s %s %s failed at offset %s: %s", op, what, dir,
                   r->path, at, r->eof ? "the file ends early" : strerror(r->err));
  if (r->unlink_err && k > 0 && (size_t)k < len)
    snprintf(out + k, len - (size_t)k, "; removing the partial file failed too: %s",
             strerror(r->unlink_err));
}

/* Run the callbacks of finished requests (a bounded batch per loop
 * iteration). A callback may add to or cancel from the list: the head is
 * taken afresh each time. */
static void spill_drain(uv_idle_t *h) {
  hpl__spill *sp = h->data;
  char detail[PATH_MAX + 256];
  for (int n = 0; n < HPL__SPILL_DRAIN && sp->done; n++) {
    hpl__sp_req *r = sp->done;
    DL_DELETE(sp->done, r);
    HASH_DEL(sp->reqs, r);
    if (r->status == 0) {
      if (r->write) {
        r->f->state = HPL__F_READY;
        r->f->writer = NULL;
        sp->c.writes++;
      } else {
        sp->c.reads++;
      }
    } else if (r->status == HPL_ECANCELED) {
      sp->c.cancelled++;
    } else {
      sp->c.errors++;
    }
    req_detail(r, detail, sizeof detail);
    r->cb(r->arg, r->status, r->err, detail);
    free(r->path);
    free(r);
  }
  if (!sp->done && sp->idle_on) {
    sp->idle_on = 0;
    uv_idle_stop(&sp->idle);
  }
  hpl__spill_maybe_final(sp);
}

static void spill_free_cb(uv_handle_t *h) {
  hpl__spill *sp = h->data;
  hpl__sp_file *f, *tmp;
  HASH_ITER(hh, sp->files, f, tmp) {
    HASH_DEL(sp->files, f);
    free(f);
  }
  if (sp->lock_fd >= 0) close(sp->lock_fd);
  free(sp->root);
  free(sp->subdir);
  free(sp);
}

static void final_done(uv_work_t *w, int status) {
  hpl__spill *sp = w->data;
  sp->jobs_out--;
  uv_close((uv_handle_t *)&sp->idle, spill_free_cb);
}

void hpl__spill_clean_done(uv_work_t *w, int status) {
  hpl__spill *sp = w->data;
  sp->jobs_out--;
  sp->c.stale_removed += sp->clean_removed;
  hpl__spill_maybe_final(sp);
}

void hpl__spill_maybe_final(hpl__spill *sp) {
  if (!sp->closing || sp->final_queued || sp->jobs_out || sp->done || sp->reqs) return;
  sp->final_queued = 1;
  sp->final_work.data = sp;
  if (uv_queue_work(sp->loop, &sp->final_work, hpl__spill_final_run, final_done) == 0) {
    sp->jobs_out++;
    return;
  }
  uv_close((uv_handle_t *)&sp->idle, spill_free_cb); /* files stay behind */
}
