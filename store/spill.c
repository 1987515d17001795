/* spill.c - spill files (see spill.h).
 *
 * Requests. A write or read is a request (sp_req) in one of four stages:
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
 * Files. A file (sp_file) is in the table from its write until removed or
 * its write fails. A file being written belongs to its write request,
 * which unlinks and frees it if it fails; a written file is unlinked by
 * its own job once removed and no read holds it.
 *
 * Jobs touch only their own request or file and the immutable path; all
 * other state is the loop's.
 */
#include "spill.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "util.h"

#define SPILL_PREFIX "hpl-spill-"
#define SPILL_LOCK "lock"
#define SPILL_PROBE "probe"
#define SPILL_STALE_S 10 /* an unlocked subdirectory this old is a dead store's */
#define SPILL_DRAIN 64   /* callbacks per loop iteration */

enum { R_QUEUED, R_RUNNING, R_UNLINK, R_DONE };
enum { F_WRITING, F_READY };

typedef struct sp_req sp_req;

typedef struct sp_file {
  UT_hash_handle hh;
  uint64_t id;
  hpl__spill *sp;
  uint64_t size;
  uint64_t disk;     /* bytes on disk so far */
  int state;         /* F_WRITING, F_READY */
  int in_table;      /* named by its id */
  int on_disk;       /* created, counted in files_live */
  int unlinking;     /* its own unlink job runs */
  int unlink_err;    /* errno of that job */
  unsigned nreads;   /* read requests holding it */
  sp_req *writer;    /* its write request, until that one's callback */
  uv_work_t work;    /* the unlink job */
  char path[];
} sp_file;

struct sp_req {
  UT_hash_handle hh;
  uint64_t id;
  hpl__spill *sp;
  sp_file *f; /* NULL once the request no longer holds it */
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
  uint64_t fail_at; /* file offset of the failure */
  int eof;          /* a read found the file shorter */
  int unlink_err;   /* a failed write's partial file could not be removed */
  char *path;       /* copy: the file may be gone when the detail is made */
  sp_req *prev, *next; /* ready queue or done list */
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
  sp_file *files; /* by id */
  sp_req *reqs;   /* by id: every request whose callback has not run */
  sp_req *ready;  /* QUEUED, in order */
  sp_req *done;   /* DONE, in order */
  unsigned io_jobs;  /* I/O jobs in the pool */
  unsigned jobs_out; /* all jobs in the pool (I/O, unlink, clean-up) */
  unsigned wr_pending, rd_pending;
  uint64_t wr_since, rd_since;
  hpl__spill_counters c;
  uv_work_t clean_work;
  uint64_t clean_removed;
  uv_work_t final_work;
  char errdetail[512];
};

static void spill_pump(hpl__spill *sp);
static void spill_maybe_final(hpl__spill *sp);
static void req_finish(sp_req *r, int status, int err);

static int spill_fail(hpl__spill *sp, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int spill_fail(hpl__spill *sp, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sp->errdetail, sizeof sp->errdetail, fmt, ap);
  va_end(ap);
  return rc;
}

/* ------------------------------------------------------------------------
 * Jobs (thread pool): plain system calls on paths and buffers
 * ---------------------------------------------------------------------- */

/* Move n bytes between fd at off and buf; *moved counts what was moved.
 * Returns 0, an errno, -1 when a read met the end of the file, or -2 when
 * an O_DIRECT transfer (`direct`) came back short of a whole block, so the
 * rest cannot go direct. */
static int xfer(int fd, int write, int direct, uint8_t *buf, uint64_t off, uint64_t n,
                uint64_t *moved) {
  uint64_t k = 0;
  int e = 0;
  while (k < n) {
    if (direct && k % HPL__SPILL_ALIGN) {
      e = -2;
      break;
    }
    size_t want = n - k > (1u << 30) ? (1u << 30) : (size_t)(n - k);
    ssize_t got = write ? pwrite(fd, buf + k, want, (off_t)(off + k))
                        : pread(fd, buf + k, want, (off_t)(off + k));
    if (got < 0) {
      if (errno == EINTR) continue;
      e = errno;
      break;
    }
    if (got == 0) {
      e = write ? EIO : -1;
      break;
    }
    k += (uint64_t)got;
  }
  *moved += k;
  return e;
}

/* One chunk of a request: [j_off, j_off + j_len) of the file. The part
 * where buffer and file offset are congruent modulo HPL__SPILL_ALIGN, cut
 * to whole blocks, goes through an O_DIRECT descriptor; the head and tail
 * around it through a buffered one. */
static void io_run(uv_work_t *w) {
  sp_req *r = w->data;
  uint64_t t0 = hpl__now_ns();
  const char *path = r->f->path;
  uint8_t *buf = r->buf + (r->j_off - r->off);
  uint64_t off = r->j_off, n = r->j_len;
  int acc = r->write ? O_WRONLY : O_RDONLY;
  int bfd = -1, dfd = -1, e = 0;

  uint64_t head = n, mid = 0;
  if (r->j_direct && ((uintptr_t)buf - (uintptr_t)off) % HPL__SPILL_ALIGN == 0) {
    head = (HPL__SPILL_ALIGN - off % HPL__SPILL_ALIGN) % HPL__SPILL_ALIGN;
    if (head > n) head = n;
    mid = (n - head) & ~(uint64_t)(HPL__SPILL_ALIGN - 1);
  }
  uint64_t tail = n - head - mid;

  if (r->j_create) {
    bfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (bfd < 0) {
      e = errno;
      goto out;
    }
    r->j_created = 1;
  }
  if (mid) {
    dfd = open(path, acc | O_DIRECT | O_CLOEXEC);
    if (dfd < 0) {
      if (errno != EINVAL) {
        e = errno;
        goto out;
      }
      r->j_refused = 1; /* the file system refuses O_DIRECT: all buffered */
      head = n;
      mid = tail = 0;
    }
  }
  if ((head || tail || r->j_refused) && bfd < 0) {
    bfd = open(path, acc | O_CLOEXEC);
    if (bfd < 0) {
      e = errno;
      goto out;
    }
  }

  if (head && (e = xfer(bfd, r->write, 0, buf, off, head, &r->j_moved)) != 0) goto out;
  if (mid) {
    uint64_t m = 0;
    e = xfer(dfd, r->write, 1, buf + head, off + head, mid, &m);
    r->j_moved += m;
    r->j_direct_bytes += m;
    if ((e == EINVAL && m == 0) || e == -2) {
      /* EINVAL at once: accepted at open, refused for transfers (a block
       * size above ours); -2: a short transfer (end of file, a size
       * limit) left us off the block grid. The rest goes buffered, where
       * the end of file or the real error shows. */
      if (e == EINVAL) r->j_refused = 1;
      if (bfd < 0 && (bfd = open(path, acc | O_CLOEXEC)) < 0) {
        e = errno;
        goto out;
      }
      e = xfer(bfd, r->write, 0, buf + head + m, off + head + m, mid - m, &r->j_moved);
    }
    if (e) goto out;
  }
  if (tail) e = xfer(bfd, r->write, 0, buf + head + mid, off + head + mid, tail, &r->j_moved);

out:
  if (dfd >= 0) close(dfd);
  if (bfd >= 0 && close(bfd) != 0 && r->write && e == 0 && errno != EINTR) e = errno;
  if (e == -1) {
    r->j_eof = 1;
    e = EIO;
  }
  r->j_err = e;
  r->j_ns = hpl__now_ns() - t0;
}

static int unlink_path(const char *path) {
  return unlink(path) == 0 || errno == ENOENT ? 0 : errno;
}

static void req_unlink_run(uv_work_t *w) {
  sp_req *r = w->data;
  r->unlink_err = unlink_path(r->f->path);
}

static void file_unlink_run(uv_work_t *w) {
  sp_file *f = w->data;
  f->unlink_err = unlink_path(f->path);
}

/* Unlink every entry of directory fd `dfd` (ours, or a dead store's). */
static void remove_entries(int dfd) {
  int fd = dup(dfd);
  if (fd < 0) return;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    unlinkat(dfd, e->d_name, 0);
  }
  closedir(d);
}

/* Remove the subdirectories of dead stores: named hpl-spill-*, not ours,
 * lock file not locked (or missing), and untouched for SPILL_STALE_S (a
 * store is between mkdir and flock for microseconds only). */
static void clean_run(uv_work_t *w) {
  hpl__spill *sp = w->data;
  DIR *d = opendir(sp->root);
  if (!d) return;
  int rfd = dirfd(d);
  const char *own = strrchr(sp->subdir, '/') + 1;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, SPILL_PREFIX, strlen(SPILL_PREFIX)) != 0 || strcmp(e->d_name, own) == 0)
      continue;
    int sfd = openat(rfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0) continue;
    struct stat st;
    int stale = 0;
    int lk = openat(sfd, SPILL_LOCK, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (lk >= 0) {
      if (flock(lk, LOCK_EX | LOCK_NB) == 0 && fstat(lk, &st) == 0 &&
          now - st.st_mtime >= SPILL_STALE_S)
        stale = 1;
    } else if (errno == ENOENT && fstat(sfd, &st) == 0 && now - st.st_mtime >= SPILL_STALE_S) {
      stale = 1;
    }
    if (stale) {
      remove_entries(sfd);
      if (unlinkat(rfd, e->d_name, AT_REMOVEDIR) == 0) sp->clean_removed++;
    }
    if (lk >= 0) close(lk); /* releases the flock */
    close(sfd);
  }
  closedir(d);
}

/* Our subdirectory and everything in it (the lock file too: the flock is
 * held until the descriptor closes, after the rmdir). */
static void final_run(uv_work_t *w) {
  hpl__spill *sp = w->data;
  int dfd = open(sp->subdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    remove_entries(dfd);
    close(dfd);
  }
  rmdir(sp->subdir);
  if (sp->lock_fd >= 0) close(sp->lock_fd);
  sp->lock_fd = -1;
}

/* ------------------------------------------------------------------------
 * Loop side
 * ---------------------------------------------------------------------- */

static void busy_begin(sp_req *r) {
  hpl__spill *sp = r->sp;
  r->busy = 1;
  if (r->write) {
    if (sp->wr_pending++ == 0) sp->wr_since = uv_hrtime();
  } else {
    if (sp->rd_pending++ == 0) sp->rd_since = uv_hrtime();
  }
}

static void busy_end(sp_req *r) {
  hpl__spill *sp = r->sp;
  if (!r->busy) return;
  r->busy = 0;
  if (r->write) {
    if (--sp->wr_pending == 0) sp->c.write_busy_ns += uv_hrtime() - sp->wr_since;
  } else {
    if (--sp->rd_pending == 0) sp->c.read_busy_ns += uv_hrtime() - sp->rd_since;
  }
}

static void file_free(sp_file *f) {
  if (f->in_table) HASH_DEL(f->sp->files, f);
  free(f);
}

static void file_unlink_done(uv_work_t *w, int status) {
  sp_file *f = w->data;
  hpl__spill *sp = f->sp;
  sp->jobs_out--;
  if (status != 0 || f->unlink_err) sp->c.errors++;
  sp->c.files_live--;
  sp->c.bytes_live -= f->disk;
  file_free(f);
  spill_maybe_final(sp);
}

/* A removed, written file: unlink it once no read holds it. */
static void file_maybe_unlink(sp_file *f) {
  hpl__spill *sp = f->sp;
  if (f->in_table || f->writer || f->nreads || f->unlinking) return;
  if (!f->on_disk) {
    file_free(f);
    return;
  }
  f->unlinking = 1;
  f->work.data = f;
  if (uv_queue_work(sp->loop, &f->work, file_unlink_run, file_unlink_done) == 0) {
    sp->jobs_out++;
    return;
  }
  sp->c.errors++; /* left for close to remove */
  sp->c.files_live--;
  sp->c.bytes_live -= f->disk;
  file_free(f);
}

static void spill_drain(uv_idle_t *h);

static void req_to_done(sp_req *r) {
  hpl__spill *sp = r->sp;
  r->state = R_DONE;
  busy_end(r);
  if (!r->write && r->f) {
    sp_file *f = r->f;
    r->f = NULL;
    f->nreads--;
    file_maybe_unlink(f);
  }
  DL_APPEND(sp->done, r);
  if (!sp->idle_on) {
    sp->idle_on = 1;
    uv_idle_start(&sp->idle, spill_drain);
  }
}

static void req_unlink_done(uv_work_t *w, int status) {
  sp_req *r = w->data;
  hpl__spill *sp = r->sp;
  sp_file *f = r->f;
  sp->jobs_out--;
  if (status != 0 && !r->unlink_err) r->unlink_err = ECANCELED;
  if (r->unlink_err) sp->c.errors++;
  sp->c.files_live--;
  sp->c.bytes_live -= f->disk;
  r->f = NULL;
  file_free(f);
  req_to_done(r);
  spill_maybe_final(sp);
}

/* A request's I/O is over: status 0, HPL_ECANCELED or HPL_ESYS (err). A
 * write that did not succeed takes its file out of the table and unlinks
 * it before its callback. */
static void req_finish(sp_req *r, int status, int err) {
  hpl__spill *sp = r->sp;
  r->status = status;
  r->err = err;
  if (!r->write || status == 0) {
    req_to_done(r);
    return;
  }
  sp_file *f = r->f;
  if (f->in_table) {
    HASH_DEL(sp->files, f);
    f->in_table = 0;
  }
  if (!f->on_disk) {
    r->f = NULL;
    file_free(f);
    req_to_done(r);
    return;
  }
  r->state = R_UNLINK;
  r->work.data = r;
  if (uv_queue_work(sp->loop, &r->work, req_unlink_run, req_unlink_done) == 0) {
    sp->jobs_out++;
    return;
  }
  r->unlink_err = EAGAIN; /* left for close to remove */
  sp->c.errors++;
  sp->c.files_live--;
  sp->c.bytes_live -= f->disk;
  r->f = NULL;
  file_free(f);
  req_to_done(r);
}

static void io_done(uv_work_t *w, int status) {
  sp_req *r = w->data;
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
    r->state = R_QUEUED;
    DL_APPEND(sp->ready, r);
  }
  spill_pump(sp);
  spill_maybe_final(sp);
}

/* Give free job slots to the requests at the head of the ready queue. */
static void spill_pump(hpl__spill *sp) {
  while (sp->io_jobs < HPL__SPILL_JOBS && sp->ready) {
    sp_req *r = sp->ready;
    DL_DELETE(sp->ready, r);
    uint64_t left = r->len - r->done;
    r->j_off = r->off + r->done;
    r->j_len = left > HPL__SPILL_CHUNK ? HPL__SPILL_CHUNK : left;
    r->j_create = r->write && !r->f->on_disk;
    r->j_direct = sp->direct;
    r->j_err = r->j_created = r->j_refused = r->j_eof = 0;
    r->j_moved = r->j_direct_bytes = r->j_ns = 0;
    r->state = R_RUNNING;
    r->work.data = r;
    int rc = uv_queue_work(sp->loop, &r->work, io_run, io_done);
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

static void req_cancel(sp_req *r) {
  hpl__spill *sp = r->sp;
  if (r->cancelled) return;
  r->cancelled = 1;
  switch (r->state) {
  case R_QUEUED:
    DL_DELETE(sp->ready, r);
    req_finish(r, HPL_ECANCELED, 0);
    break;
  case R_RUNNING:
    uv_cancel((uv_req_t *)&r->work); /* fails (harmlessly) once the job runs */
    break;
  case R_UNLINK:
    r->status = HPL_ECANCELED;
    r->err = 0;
    break;
  case R_DONE:
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
static void req_detail(const sp_req *r, char *out, size_t len) {
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
  for (int n = 0; n < SPILL_DRAIN && sp->done; n++) {
    sp_req *r = sp->done;
    DL_DELETE(sp->done, r);
    HASH_DEL(sp->reqs, r);
    if (r->status == 0) {
      if (r->write) {
        r->f->state = F_READY;
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
  spill_maybe_final(sp);
}

static void spill_free_cb(uv_handle_t *h) {
  hpl__spill *sp = h->data;
  sp_file *f, *tmp;
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

static void clean_done(uv_work_t *w, int status) {
  hpl__spill *sp = w->data;
  sp->jobs_out--;
  sp->c.stale_removed += sp->clean_removed;
  spill_maybe_final(sp);
}

/* Closing and nothing left: remove our files and directory, then free. */
static void spill_maybe_final(hpl__spill *sp) {
  if (!sp->closing || sp->final_queued || sp->jobs_out || sp->done || sp->reqs) return;
  sp->final_queued = 1;
  sp->final_work.data = sp;
  if (uv_queue_work(sp->loop, &sp->final_work, final_run, final_done) == 0) {
    sp->jobs_out++;
    return;
  }
  uv_close((uv_handle_t *)&sp->idle, spill_free_cb); /* files stay behind */
}

/* ------------------------------------------------------------------------
 * API
 * ---------------------------------------------------------------------- */

static void set_detail(char *detail, size_t dlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_detail(char *detail, size_t dlen, const char *fmt, ...) {
  if (!detail || dlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, dlen, fmt, ap);
  va_end(ap);
}

/* mkdir -p with mode 0700 for what it creates. Returns 0 or -1 (errno). */
static int mkdir_p(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int rc = mkdir(path, 0700);
    *p = '/';
    if (rc != 0 && errno != EEXIST) return -1;
  }
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return -1;
  return 0;
}

int hpl__spill_open(uv_loop_t *loop, const char *dir, unsigned flags, hpl__spill **out,
                    char *detail, size_t dlen) {
  set_detail(detail, dlen, "%s", "");
  if (!loop || !dir || !out) {
    set_detail(detail, dlen, "spill open: loop, directory and out are required");
    return HPL_EINVAL;
  }
  *out = NULL;
  size_t n = strlen(dir);
  if (n == 0 || n > PATH_MAX - 64) {
    set_detail(detail, dlen, "spill directory '%.64s%s': %s", dir, n > 64 ? "..." : "",
               n == 0 ? "empty path" : "path too long");
    return HPL_EINVAL;
  }
  if (flags & ~HPL__SPILL_BUFFERED) {
    set_detail(detail, dlen, "spill open: unknown flags 0x%x", flags);
    return HPL_EINVAL;
  }
  char *root = strdup(dir);
  char *sub = malloc(n + 64);
  char path[PATH_MAX];
  if (!root || !sub) {
    free(root);
    free(sub);
    set_detail(detail, dlen, "spill open: out of memory");
    return HPL_ENOMEM;
  }
  while (n > 1 && root[n - 1] == '/') root[--n] = '\0';

  int e = 0, lock_fd = -1, direct = 0;
  struct stat st;
  if (mkdir_p(root) != 0 || stat(root, &st) != 0) {
    e = errno;
    set_detail(detail, dlen, "cannot create spill directory %s: %s", root, strerror(e));
    goto fail;
  }
  if (!S_ISDIR(st.st_mode)) {
    e = ENOTDIR;
    set_detail(detail, dlen, "spill directory %s is not a directory", root);
    goto fail;
  }
  for (int tries = 0;; tries++) {
    snprintf(sub, n + 64, "%s/" SPILL_PREFIX "%d-%08x", root, (int)getpid(),
             (unsigned)hpl__random_u64());
    if (mkdir(sub, 0700) == 0) break;
    if (errno != EEXIST || tries == 16) {
      e = errno;
      set_detail(detail, dlen, "spill directory %s is not writable: cannot create %s: %s", root,
                 sub, strerror(e));
      goto fail;
    }
  }
  snprintf(path, sizeof path, "%s/" SPILL_LOCK, sub);
  lock_fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    e = errno;
    set_detail(detail, dlen, "spill directory %s: cannot create and lock %s: %s", root, path,
               strerror(e));
    goto fail_sub;
  }
  if (!(flags & HPL__SPILL_BUFFERED)) {
    snprintf(path, sizeof path, "%s/" SPILL_PROBE, sub);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      direct = 1;
      close(fd);
    } else if (errno != EINVAL) {
      e = errno;
      set_detail(detail, dlen, "spill directory %s is not writable: cannot create %s: %s", root,
                 path, strerror(e));
      unlink(path);
      goto fail_sub;
    }
    unlink(path); /* a file system refusing O_DIRECT may have created it */
  }

  hpl__spill *sp = calloc(1, sizeof *sp);
  if (!sp) {
    e = ENOMEM;
    set_detail(detail, dlen, "spill open: out of memory");
    goto fail_sub;
  }
  sp->loop = loop;
  sp->root = root;
  sp->subdir = sub;
  sp->lock_fd = lock_fd;
  sp->direct = direct;
  uv_idle_init(loop, &sp->idle);
  sp->idle.data = sp;
  sp->clean_work.data = sp;
  if (uv_queue_work(loop, &sp->clean_work, clean_run, clean_done) == 0) sp->jobs_out++;
  *out = sp;
  return HPL_OK;

fail_sub:
  if (lock_fd >= 0) close(lock_fd);
  snprintf(path, sizeof path, "%s/" SPILL_LOCK, sub);
  unlink(path);
  rmdir(sub);
fail:
  free(root);
  free(sub);
  errno = e;
  return e == ENOMEM ? HPL_ENOMEM : HPL_ESYS;
}

void hpl__spill_close(hpl__spill *sp) {
  if (!sp || sp->closing) return;
  sp->closing = 1;
  sp_req *r, *tmp;
  HASH_ITER(hh, sp->reqs, r, tmp) {
    if (!r->cancelled) r->closing = 1;
    req_cancel(r);
  }
  spill_maybe_final(sp);
}

/* A new request (not yet queued). */
static sp_req *req_new(hpl__spill *sp, sp_file *f, int write, void *buf, uint64_t off,
                       uint64_t len, hpl__spill_cb cb, void *arg) {
  sp_req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->path = strdup(f->path);
  if (!r->path) {
    free(r);
    return NULL;
  }
  r->id = ++sp->next_req;
  r->sp = sp;
  r->f = f;
  r->file = f->id;
  r->write = write;
  r->buf = buf;
  r->off = off;
  r->len = len;
  r->cb = cb;
  r->arg = arg;
  return r;
}

int hpl__spill_write(hpl__spill *sp, const void *buf, uint64_t len, hpl__spill_cb cb, void *arg,
                     uint64_t *file, uint64_t *req) {
  if (!sp) return HPL_EINVAL;
  if (sp->closing) return spill_fail(sp, HPL_ESTATE, "spill write: the spill is closing");
  if (!cb || !file || (!buf && len > 0))
    return spill_fail(sp, HPL_EINVAL, "spill write: callback, file and buffer are required");
  if (len > HPL__SPILL_MAX_SIZE)
    return spill_fail(sp, HPL_EINVAL, "spill write of %llu bytes: larger than 2^62",
                      (unsigned long long)len);
  size_t plen = strlen(sp->subdir) + 18;
  sp_file *f = calloc(1, sizeof *f + plen);
  if (!f) return spill_fail(sp, HPL_ENOMEM, "spill write: out of memory");
  f->id = ++sp->next_file;
  f->sp = sp;
  f->size = len;
  f->state = F_WRITING;
  snprintf(f->path, plen, "%s/%016llx", sp->subdir, (unsigned long long)f->id);
  sp_req *r = req_new(sp, f, 1, (void *)buf, 0, len, cb, arg);
  if (!r) {
    free(f);
    return spill_fail(sp, HPL_ENOMEM, "spill write: out of memory");
  }
  f->writer = r;
  f->in_table = 1;
  HASH_ADD(hh, sp->files, id, sizeof f->id, f);
  HASH_ADD(hh, sp->reqs, id, sizeof r->id, r);
  busy_begin(r);
  r->state = R_QUEUED;
  DL_APPEND(sp->ready, r);
  spill_pump(sp);
  *file = f->id;
  if (req) *req = r->id;
  return HPL_OK;
}

int hpl__spill_read(hpl__spill *sp, uint64_t file, uint64_t off, void *buf, uint64_t len,
                    hpl__spill_cb cb, void *arg, uint64_t *req) {
  if (!sp) return HPL_EINVAL;
  if (sp->closing) return spill_fail(sp, HPL_ESTATE, "spill read: the spill is closing");
  if (!cb || (!buf && len > 0))
    return spill_fail(sp, HPL_EINVAL, "spill read: callback and buffer are required");
  sp_file *f;
  HASH_FIND(hh, sp->files, &file, sizeof file, f);
  if (!f)
    return spill_fail(sp, HPL_ENOTFOUND, "spill read: no spill file %016llx",
                      (unsigned long long)file);
  if (f->state != F_READY)
    return spill_fail(sp, HPL_ESTATE, "spill read: %s is still being written", f->path);
  if (off > f->size || len > f->size - off)
    return spill_fail(sp, HPL_EINVAL, "spill read of [%llu, +%llu) from %s: beyond its %llu bytes",
                      (unsigned long long)off, (unsigned long long)len, f->path,
                      (unsigned long long)f->size);
  sp_req *r = req_new(sp, f, 0, buf, off, len, cb, arg);
  if (!r) return spill_fail(sp, HPL_ENOMEM, "spill read: out of memory");
  f->nreads++;
  HASH_ADD(hh, sp->reqs, id, sizeof r->id, r);
  busy_begin(r);
  if (len == 0) {
    req_to_done(r);
  } else {
    r->state = R_QUEUED;
    DL_APPEND(sp->ready, r);
    spill_pump(sp);
  }
  if (req) *req = r->id;
  return HPL_OK;
}

int hpl__spill_cancel(hpl__spill *sp, uint64_t req) {
  if (!sp) return HPL_EINVAL;
  sp_req *r;
  HASH_FIND(hh, sp->reqs, &req, sizeof req, r);
  if (!r)
    return spill_fail(sp, HPL_ENOTFOUND, "spill cancel: no pending request %llu",
                      (unsigned long long)req);
  req_cancel(r);
  return HPL_OK;
}

int hpl__spill_remove(hpl__spill *sp, uint64_t file) {
  if (!sp) return HPL_EINVAL;
  sp_file *f;
  HASH_FIND(hh, sp->files, &file, sizeof file, f);
  if (!f)
    return spill_fail(sp, HPL_ENOTFOUND, "spill remove: no spill file %016llx",
                      (unsigned long long)file);
  HASH_DEL(sp->files, f);
  f->in_table = 0;
  sp_req *r, *tmp;
  HASH_ITER(hh, sp->reqs, r, tmp) {
    if (r->file == file) req_cancel(r);
  }
  file_maybe_unlink(f);
  return HPL_OK;
}

int hpl__spill_file_size(const hpl__spill *sp, uint64_t file, uint64_t *size) {
  sp_file *f;
  if (!sp || !size) return HPL_EINVAL;
  HASH_FIND(hh, sp->files, &file, sizeof file, f);
  if (!f) return HPL_ENOTFOUND;
  *size = f->size;
  return HPL_OK;
}

int hpl__spill_file_path(const hpl__spill *sp, uint64_t file, char *buf, size_t len) {
  sp_file *f;
  if (!sp || !buf) return HPL_EINVAL;
  HASH_FIND(hh, sp->files, &file, sizeof file, f);
  if (!f) return HPL_ENOTFOUND;
  if ((size_t)snprintf(buf, len, "%s", f->path) >= len) return HPL_EINVAL;
  return HPL_OK;
}

const char *hpl__spill_dir(const hpl__spill *sp) { return sp->subdir; }

int hpl__spill_direct(const hpl__spill *sp) { return sp->direct; }

const char *hpl__spill_errdetail(const hpl__spill *sp) { return sp ? sp->errdetail : ""; }

void hpl__spill_counters_get(const hpl__spill *sp, hpl__spill_counters *out) {
  *out = sp->c;
  uint64_t now = uv_hrtime();
  if (sp->wr_pending) out->write_busy_ns += now - sp->wr_since;
  if (sp->rd_pending) out->read_busy_ns += now - sp->rd_since;
}
