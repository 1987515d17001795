/* spillapi.c - the spill module's calls (see spill.h): write, read,
 * cancel, remove, close, and what it tells of its files, its counters and
 * its last error. Reads and writes become requests queued on the loop's
 * side (spill.c). */
#include "spill.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "spillint.h"

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
 * API (hpl__spill_open: spilldir.c)
 * ---------------------------------------------------------------------- */

void hpl__spill_close(hpl__spill *sp) {
  if (!sp || sp->closing) return;
  sp->closing = 1;
  hpl__sp_req *r, *tmp;
  HASH_ITER(hh, sp->reqs, r, tmp) {
    if (!r->cancelled) r->closing = 1;
    hpl__spill_req_cancel(r);
  }
  hpl__spill_maybe_final(sp);
}

/* A new request (not yet queued). */
static hpl__sp_req *req_new(hpl__spill *sp, hpl__sp_file *f, int write, void *buf, uint64_t off,
                            uint64_t len, hpl__spill_cb cb, void *arg) {
  hpl__sp_req *r = calloc(1, sizeof *r);
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
  hpl__sp_file *f = calloc(1, sizeof *f + plen);
  if (!f) return spill_fail(sp, HPL_ENOMEM, "spill write: out of memory");
  f->id = ++sp->next_file;
  f->sp = sp;
  f->size = len;
  f->state = HPL__F_WRITING;
  snprintf(f->path, plen, "%s/%016llx", sp->subdir, (unsigned long long)f->id);
  hpl__sp_req *r = req_new(sp, f, 1, (void *)buf, 0, len, cb, arg);
  if (!r) {
    free(f);
    return spill_fail(sp, HPL_ENOMEM, "spill write: out of memory");
  }
  f->writer = r;
  f->in_table = 1;
  HASH_ADD(hh, sp->files, id, sizeof f->id, f);
  HASH_ADD(hh, sp->reqs, id, sizeof r->id, r);
  hpl__spill_busy_begin(r);
  r->state = HPL__R_QUEUED;
  DL_APPEND(sp->ready, r);
  hpl__spill_pump(sp);
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
  hpl__sp_file *f;
  HASH_FIND(hh, sp->files, &file, sizeof file, f);
  if (!f)
    return spill_fail(sp, HPL_ENOTFOUND, "spill read: no spill file %016llx",
                      (unsigned long long)file);
  if (f->state != HPL__F_READY)
    return spill_fail(sp, HPL_ESTATE, "spill read: %s is still being written", f->path);
  if (off > f->size || len > f->size - off)
    return spill_fail(sp, HPL_EINVAL, "spill read of [%llu, +%llu) from %s: beyond its %llu bytes",
                      (unsigned long long)off, (unsigned long long)len, f->path,
                      (unsigned long long)f->size);
  hpl__sp_req *r = req_new(sp, f, 0, buf, off, len, cb, arg);
  if (!r) return spill_fail(sp, HPL_ENOMEM, "spill read: out of memory");
  f->nreads++;
  HASH_ADD(hh, sp->reqs, id, sizeof r->id, r);
  hpl__spill_busy_begin(r);
  if (len == 0) {
    hpl__spill_req_to_done(r);
  } else {
    r->state = HPL__R_QUEUED;
    DL_APPEND(sp->ready, r);
    hpl__spill_pump(sp);
  }
  if (req) *req = r->id;
  return HPL_OK;
}

int hpl__spill_cancel(hpl__spill *sp, uint64_t req) {
  if (!sp) return HPL_EINVAL;
  hpl__sp_req *r;
  HASH_FIND(hh, sp->reqs, &req, sizeof req, r);
  if (!r)
    return spill_fail(sp, HPL_ENOTFOUND, "spill cancel: no pending request %llu",
                      (unsigned long long)req);
  hpl__spill_req_cancel(r);
  return HPL_OK;
}

int hpl__spill_remove(hpl__spill *sp, uint64_t file) {
  if (!sp) return HPL_EINVAL;
  hpl__sp_file *f;
  HASH_FIND(hh, sp->files, &file, sizeof file, f);
  if (!f)
    return spill_fail(sp, HPL_ENOTFOUND, "spill remove: no spill file %016llx",
                      (unsigned long long)file);
  HASH_DEL(sp->files, f);
  f->in_table = 0;
  hpl__sp_req *r, *tmp;
  HASH_ITER(hh, sp->reqs, r, tmp) {
    if (r->file == file) hpl__spill_req_cancel(r);
  }
  hpl__spill_file_maybe_unlink(f);
  return HPL_OK;
}

int hpl__spill_file_size(const hpl__spill *sp, uint64_t file, uint64_t *size) {
  hpl__sp_file *f;
  if (!sp || !size) return HPL_EINVAL;
  HASH_FIND(hh, sp->files, &file, sizeof file, f);
  if (!f) return HPL_ENOTFOUND;
  *size = f->size;
  return HPL_OK;
}

int hpl__spill_file_path(const hpl__spill *sp, uint64_t file, char *buf, size_t len) {
  hpl__sp_file *f;
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
