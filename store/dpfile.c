/* dpfile.c - the data port's streams of spilled copies, read from their
 * spill files into two buffers in turn, so the next read overlaps the
 * current write (see dpint.h); the pool is not touched. Each buffer holds
 * whole verification units and is checked against the object's digests
 * (on the thread pool) before any of it is sent: a unit that fails ends
 * the stream and the copy is dropped as corrupt (hpl__dataport_corrupt). */
#include <stdlib.h>
#include <uv.h>

#include "digest.h"
#include "dpint.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "spill.h"

/* A stream read from a spill file: two buffers, each being read, ready,
 * or being written, so the next read overlaps the current write. It
 * outlives its sender while a read or a write still uses a buffer. */
#define FS_SLOTS 2
typedef struct fs_slot {
  struct hpl__fstream *fs;
  uint8_t *buf;
  uint64_t off, len; /* object bytes [off, off + len): off a unit boundary */
  uint64_t req;  /* the read's (while reading) */
  int state;     /* FS_FREE, FS_READING, FS_CHECKING, FS_READY, FS_WRITING */
  int bad;       /* the check found unit bad_unit wrong */
  uint64_t bad_unit;
  uv_work_t check; /* the digest check (thread pool) */
} fs_slot;
enum { FS_FREE, FS_READING, FS_CHECKING, FS_READY, FS_WRITING };

typedef struct hpl__fstream {
  hpl__sender *sd; /* NULL once the connection closed */
  hpl__store *s;
  hpl__obj *obj;   /* referenced while the stream lives (checks read its digests) */
  uint64_t file;
  uint64_t cap;   /* bytes a buffer holds: chunk rounded up to whole units */
  uint64_t next;  /* the next offset to read */
  int busy;       /* slots reading, checking or writing */
  fs_slot slot[FS_SLOTS];
} hpl__fstream;

static void fs_pump(hpl__fstream *fs);

static void fs_free_maybe(hpl__fstream *fs) {
  if (fs->sd || fs->busy) return;
  for (int i = 0; i < FS_SLOTS; i++) free(fs->slot[i].buf);
  if (fs->obj) hpl__obj_unref(fs->s, fs->obj);
  free(fs);
}

static void check_run(uv_work_t *w) {
  fs_slot *k = w->data;
  hpl__obj *o = k->fs->obj;
  k->bad = !hpl__objdig_check_span(o->dig, o->size, k->buf, k->off, k->len, &k->bad_unit);
}

/* A buffer was checked against the digests: send it, or end the stream
 * and drop the copy. */
static void check_done(uv_work_t *w, int status) {
  fs_slot *k = w->data;
  hpl__fstream *fs = k->fs;
  hpl__sender *sd = fs->sd;
  if (!sd || status) {
    k->state = FS_FREE;
    fs->busy--;
    if (sd) hpl__conn_close(sd->c, HPL_ESYS);
    fs_free_maybe(fs);
    return;
  }
  if (k->bad) {
    k->state = FS_FREE;
    fs->busy--;
    HPL__LOG_WARN("stream of '%s' to %016llx ended: unit %llu of its spill file does not match "
                  "its digest", fs->obj->id, (unsigned long long)sd->peer,
                  (unsigned long long)k->bad_unit);
    hpl__obj *o = fs->obj;
    hpl__store *s = fs->s;
    hpl__obj_ref(s, o);
    hpl__conn_close(sd->c, HPL_ECORRUPT);
    hpl__dataport_corrupt(s, o, k->bad_unit);
    hpl__obj_unref(s, o);
    return;
  }
  k->state = FS_READY;
  fs_pump(fs);
}

static void fs_write_done(hpl__conn *c, int status, void *arg) {
  (void)c;
  fs_slot *k = arg;
  hpl__fstream *fs = k->fs;
  k->state = FS_FREE;
  fs->busy--;
  if (status || !fs->sd) {
    fs_free_maybe(fs);
    return;
  }
  fs_pump(fs);
}

static void fs_read_done(void *arg, int status, int err, const char *detail) {
  (void)err;
  fs_slot *k = arg;
  hpl__fstream *fs = k->fs;
  hpl__sender *sd = fs->sd;
  k->state = status ? FS_FREE : FS_READY;
  if (status) fs->busy--;
  if (!sd) {
    if (!status) {
      k->state = FS_FREE;
      fs->busy--;
    }
    fs_free_maybe(fs);
    return;
  }
  if (status) {
    sd->s->ctr.spill_errors++;
    HPL__LOG_WARN("stream of '%s' from its spill file failed: %s", sd->obj->id,
                  *detail ? detail : hpl_strerror(status));
    hpl__conn_close(sd->c, HPL_ESYS);
    return;
  }
  const hpl__objdig *d = fs->obj->dig;
  if (d && d->known > hpl__digest_unit_of(fs->obj->size, k->off)) { /* checked before it is sent */
    k->state = FS_CHECKING;
    k->check.data = k;
    if (uv_queue_work(sd->s->loop, &k->check, check_run, check_done) == 0) return;
    k->state = FS_FREE;
    fs->busy--;
    HPL__LOG_WARN("stream of '%s' from its spill file: cannot queue its digest check",
                  sd->obj->id);
    hpl__conn_close(sd->c, HPL_ESYS);
    return;
  }
  fs_pump(fs);
}

/* Write what is read, in order; read ahead into free buffers; finish. */
static void fs_pump(hpl__fstream *fs) {
  hpl__sender *sd = fs->sd;
  hpl__store *s = sd->s;
  if (hpl__conn_closing(sd->c)) return;
  for (int progress = 1; progress;) {
    progress = 0;
    for (int i = 0; i < FS_SLOTS; i++) {
      fs_slot *k = &fs->slot[i];
      uint64_t stop = k->off + k->len < sd->end ? k->off + k->len : sd->end;
      if (k->state != FS_READY || k->off > sd->pos || stop <= sd->pos) continue;
      uint64_t n = stop - sd->pos;
      if (hpl__conn_write(sd->c, k->buf + (sd->pos - k->off), (size_t)n, fs_write_done, k) != 0)
        return;
      k->state = FS_WRITING;
      sd->pos += n;
      s->ctr.data_bytes_sent += n;
      progress = 1;
    }
  }
  for (int i = 0; i < FS_SLOTS && fs->next < sd->end; i++) {
    fs_slot *k = &fs->slot[i];
    if (k->state != FS_FREE) continue;
    /* whole units (the last one may end at the object's end), so each can
     * be checked before any of it is sent */
    uint64_t size = fs->obj->size;
    uint64_t unit = hpl__digest_unit(size);
    uint64_t want = sd->end % unit ? sd->end + (unit - sd->end % unit) : sd->end;
    if (want > size) want = size;
    k->off = fs->next;
    k->len = want - k->off < fs->cap ? want - k->off : fs->cap;
    if (hpl__spill_read(s->spill, fs->file, k->off, k->buf, k->len, fs_read_done, k, &k->req)) {
      HPL__LOG_WARN("cannot stream '%s' from its spill file: %s", sd->obj->id,
                    hpl__spill_errdetail(s->spill));
      hpl__conn_close(sd->c, HPL_ESYS);
      return;
    }
    k->state = FS_READING;
    fs->busy++;
    fs->next += k->len;
  }
  if (sd->pos == sd->end && !fs->busy) {
    s->ctr.pulls_served++;
    HPL__LOG_DEBUG("served '%s' [%llu, %llu) to %016llx from its spill file", sd->obj->id,
                   (unsigned long long)sd->offset, (unsigned long long)sd->end,
                   (unsigned long long)sd->peer);
    sd->fs = NULL;
    fs->sd = NULL;
    fs_free_maybe(fs);
    hpl__dataport_stream_end(sd);
  }
}

void hpl__dataport_file_detach(hpl__sender *sd) {
  hpl__fstream *fs = sd->fs;
  if (!fs) return;
  sd->fs = NULL;
  fs->sd = NULL;
  for (int i = 0; i < FS_SLOTS; i++)
    if (fs->slot[i].state == FS_READING) hpl__spill_cancel(sd->s->spill, fs->slot[i].req);
  fs_free_maybe(fs);
}

int hpl__dataport_file_start(hpl__sender *sd, hpl__obj *o) {
  hpl__store *s = sd->s;
  uint64_t file = s->spill ? hpl__obj_file(s, o) : 0;
  if (!file) return -1;
  hpl__fstream *fs = calloc(1, sizeof *fs);
  if (!fs) return -1;
  fs->s = s;
  fs->cap = (s->cfg.chunk + HPL__DIGEST_UNIT - 1) / HPL__DIGEST_UNIT * HPL__DIGEST_UNIT;
  for (int i = 0; i < FS_SLOTS; i++) {
    fs->slot[i].fs = fs;
    if (!(fs->slot[i].buf = malloc(fs->cap))) {
      fs_free_maybe(fs);
      return -1;
    }
  }
  fs->obj = o;
  hpl__obj_ref(s, o);
  fs->sd = sd;
  fs->file = file;
  sd->fs = fs;
  return 0;
}

void hpl__dataport_file_pump(hpl__sender *sd) {
  hpl__obj *o = sd->fs->obj; /* from the start of the unit it stopped in */
  hpl__digest_unit_span(o->size, hpl__digest_unit_of(o->size, sd->pos), &sd->fs->next, NULL);
  fs_pump(sd->fs);
}
