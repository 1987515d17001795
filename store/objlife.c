/* objlife.c - an object record's life once it is made (see objects.h):
 * references, the idle list and its listener, the buffer in the pool (its
 * allocation, dropping it for a spill file, free pages given back),
 * watchers, progress and waiters, and the record's end. The table itself
 * (lookups, walks, making records, the presence filter) is objects.c's. */
#include "objects.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "objint.h"
#include "spill.h"
#include "util.h"

/* ------------------------------------------------------------------ the idle list */

/* Room may have been made (memory freed, or an object went idle): tell
 * the listener, which acts later on the loop. */
static void tell_changed(hpl__store *s) {
  if (s->objects && s->objects->changed) s->objects->changed(s);
}

void hpl__objects_listen(hpl__store *s, void (*changed)(hpl__store *s),
                         void (*wanted)(hpl__store *s, hpl__obj *o)) {
  if (!s->objects) return;
  s->objects->changed = changed;
  s->objects->wanted = wanted;
}

void hpl__obj_want(hpl__store *s, hpl__obj *o) {
  if (o->state == HPL__OBJ_SPILLED && s->objects && s->objects->wanted) s->objects->wanted(s, o);
}

static void idle_add(hpl__store *s, hpl__obj *o) {
  hpl__objects *t = s->objects;
  if (o->on_idle || !t || !o->in_table || o->internal || o->refs || o->state != HPL__OBJ_SEALED)
    return;
  DL_APPEND2(t->idle_first, o, lru_prev, lru_next);
  t->idle_bytes += o->size;
  o->on_idle = 1;
  tell_changed(s);
}

void hpl__obj_idle_del(hpl__store *s, hpl__obj *o) {
  hpl__objects *t = s->objects;
  if (!o->on_idle || !t) return;
  DL_DELETE2(t->idle_first, o, lru_prev, lru_next);
  o->lru_prev = o->lru_next = NULL;
  t->idle_bytes -= o->size;
  o->on_idle = 0;
}

hpl__obj *hpl__obj_idle_oldest(hpl__store *s) { return s->objects ? s->objects->idle_first : NULL; }
hpl__obj *hpl__obj_idle_newer(const hpl__obj *o) { return o->lru_next; }
uint64_t hpl__obj_idle_bytes(const hpl__store *s) {
  return s->objects ? s->objects->idle_bytes : 0;
}

/* ------------------------------------------------------------------ the buffer, its spill file */

/* Free pool pages go back to the kernel: a walk of the free list, a
 * bounded part per loop turn. */
static void trim_cb(uv_timer_t *t) {
  hpl__store *s = t->data;
  int more = 0;
  uint64_t n = hpl__pool_trim(s->pool, s->cfg.trim_keep, 64, &more);
  s->ctr.pool_trimmed_bytes += n;
  if (more) {
    uv_timer_start(t, trim_cb, 0, 0); /* the rest on the next turn */
    return;
  }
  s->ctr.pool_trims++;
}

/* An allocation went back to the pool: once frees pause for cfg.trim_ms,
 * the free pages go back to the kernel. */
static void pool_freed(hpl__store *s) {
  hpl__objects *t = s->objects;
  if (!s->cfg.trim_ms || s->stopping || !t) return;
  if (!t->trim_live) {
    if (uv_timer_init(s->loop, &t->trim) != 0) return;
    t->trim.data = s;
    t->trim_live = 1;
  }
  uv_timer_start(&t->trim, trim_cb, s->cfg.trim_ms, 0);
}

int hpl__obj_set_file(hpl__store *s, hpl__obj *o, uint64_t file) {
  hpl__obj_filerec *f = calloc(1, sizeof *f);
  if (!f || !s->objects) {
    free(f);
    return HPL_ENOMEM;
  }
  f->inst = o->inst;
  f->file = file;
  HASH_ADD(hh, s->objects->files, inst, sizeof f->inst, f);
  o->on_disk = 1;
  return 0;
}

static hpl__obj_filerec *file_of(hpl__store *s, const hpl__obj *o) {
  hpl__obj_filerec *f = NULL;
  if (o->on_disk && s->objects) HASH_FIND(hh, s->objects->files, &o->inst, sizeof o->inst, f);
  return f;
}

uint64_t hpl__obj_file(hpl__store *s, const hpl__obj *o) {
  hpl__obj_filerec *f = file_of(s, o);
  return f ? f->file : 0;
}

void hpl__obj_drop_buffer(hpl__store *s, hpl__obj *o) {
  if (!o->on_disk || !o->data) return;
  hpl__obj_idle_del(s, o);
  if (o->size) {
    hpl__pool_free(s->pool, o->data);
    pool_freed(s);
  }
  o->data = NULL;
  o->progress = 0; /* until it is back (a stream waits for it) */
  o->state = HPL__OBJ_SPILLED;
  tell_changed(s);
}

/* The record's end (see objint.h). */
void hpl__obj_free(hpl__store *s, hpl__obj *o) {
  if (s->objects) hpl__objidx_del(&s->objects->by_inst, o);
  hpl__obj_filerec *f = file_of(s, o);
  if (f) {
    if (s->spill) hpl__spill_remove(s->spill, f->file);
    HASH_DEL(s->objects->files, f);
    free(f);
  }
  if (o->data && o->size) {
    hpl__pool_free(s->pool, o->data);
    pool_freed(s);
    tell_changed(s);
  }
  free(o->dig); /* objdig.c's, one flat allocation */
  free(o);
}

/* ------------------------------------------------------------------ watchers, refs, waiters */

/* Tell watchers something changed. The list is one-shot: each watcher that
 * still cares registers again from its callback. */
static void obj_notify(hpl__obj *o) {
  hpl__watch *w = o->watchers;
  o->watchers = NULL;
  while (w) {
    hpl__watch *next = w->next;
    w->next = NULL;
    w->fn(w);
    w = next;
  }
}

void hpl__obj_watch(hpl__obj *o, hpl__watch *w) {
  hpl__watch *x;
  LL_FOREACH(o->watchers, x) if (x == w) return;
  LL_PREPEND(o->watchers, w);
}

void hpl__obj_unwatch(hpl__obj *o, hpl__watch *w) {
  hpl__watch *x;
  LL_FOREACH(o->watchers, x) if (x == w) {
    LL_DELETE(o->watchers, w);
    w->next = NULL;
    return;
  }
}

void hpl__obj_ref(hpl__store *s, hpl__obj *o) {
  if (o->refs++ == 0) hpl__obj_idle_del(s, o);
}

void hpl__obj_unref(hpl__store *s, hpl__obj *o) {
  if (--o->refs) return;
  if (!o->in_table)
    hpl__obj_free(s, o);
  else
    idle_add(s, o);
}

int hpl__obj_alloc(hpl__store *s, hpl__obj *o, uint64_t size, char *detail, size_t dlen) {
  o->size = size;
  if (size == 0) {
    o->data = hpl__pool_base(s->pool);
    return 0;
  }
  o->data = hpl__pool_alloc(s->pool, size);
  if (o->data) return 0;
  char a[32], b[32], c[32], d[32];
  snprintf(detail, dlen,
           "store '%s' cannot fit %s for '%s': pool %s, %s in use, largest free range %s",
           s->cfg.name, hpl__fmt_bytes(size, a, sizeof a), o->id,
           hpl__fmt_bytes(hpl__pool_capacity(s->pool), b, sizeof b),
           hpl__fmt_bytes(hpl__pool_used(s->pool), c, sizeof c),
           hpl__fmt_bytes(hpl__pool_largest_free(s->pool), d, sizeof d));
  return HPL_ENOMEM;
}

void hpl__obj_notify(hpl__obj *o) { obj_notify(o); }

void hpl__obj_progress(hpl__store *s, hpl__obj *o, uint64_t progress) {
  (void)s;
  if (progress <= o->progress) return;
  o->progress = progress;
  obj_notify(o);
}

/* Take every waiter off and tell it (the list may change meanwhile). */
static void tell_waiters(hpl__obj *o, int status, const char *detail) {
  while (o->waiters) {
    hpl__waiter *w = o->waiters;
    DL_DELETE(o->waiters, w);
    w->done(w, status, detail);
  }
}

void hpl__obj_sealed(hpl__store *s, hpl__obj *o) {
  o->state = HPL__OBJ_SEALED;
  o->progress = o->size;
  if (!o->sealed_ms) o->sealed_ms = hpl__now_ms();
  tell_waiters(o, 0, NULL);
  obj_notify(o);
  idle_add(s, o);
}

void hpl__obj_fail(hpl__store *s, hpl__obj *o, int status, const char *detail) {
  (void)s;
  tell_waiters(o, status, detail);
}

void hpl__obj_wait(hpl__obj *o, hpl__waiter *w) {
  w->obj = o;
  DL_APPEND(o->waiters, w);
}

void hpl__obj_unwait(hpl__waiter *w) { DL_DELETE(w->obj->waiters, w); }

uint64_t hpl__obj_deadline(const hpl__obj *o) {
  uint64_t d = 0;
  if (!o->waiters) return UINT64_MAX;
  const hpl__waiter *w;
  DL_FOREACH(o->waiters, w) if (w->deadline_ms > d) d = w->deadline_ms;
  return d;
}
