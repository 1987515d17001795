/* objects.c - the store's object table, references, progress, watchers,
 * waiters and the presence filter (see objects.h). */
#include "objects.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"

st_obj *store_find(store *s, const char *id) {
  st_obj *o = NULL;
  HASH_FIND_STR(s->objs, id, o);
  return o;
}

st_obj *store_find_inst(store *s, uint64_t inst) {
  st_obj *o = NULL;
  HASH_FIND(hh_inst, s->insts, &inst, sizeof inst, o);
  return o;
}

st_obj *store_find_internal(store *s, const char *key) {
  st_obj *o = NULL;
  HASH_FIND_STR(s->internal, key, o);
  return o;
}

/* ------------------------------------------------------------------ presence filter */

/* A counter per slot of the ids in s->objs. A saturated counter stays
 * saturated (it only ever means "maybe here"). */
static void filter_count(store *s, const char *id, int delta) {
  if (!s->filter) return;
  uint8_t *c = &s->filter[hpl__filter_slot(id, STORE_FILTER_SLOTS)];
  uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
  if (v == UINT8_MAX || (delta < 0 && v == 0)) return;
  __atomic_store_n(c, (uint8_t)(v + delta), __ATOMIC_RELEASE);
}

void store_objects_init(store *s) {
  s->filter_fd = -1;
  int fd = memfd_create("hoplite-filter", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, STORE_FILTER_SLOTS) != 0) {
    LOG_WARN("no presence filter (%s): clients ask this store for every get", strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  void *p = mmap(NULL, STORE_FILTER_SLOTS, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return;
  }
  s->filter_fd = fd;
  s->filter = p;
}

void store_objects_free(store *s) {
  st_obj *o, *tmp;
  HASH_ITER(hh, s->objs, o, tmp) store_obj_detach(s, o);
  if (s->filter) munmap(s->filter, STORE_FILTER_SLOTS);
  if (s->filter_fd >= 0) close(s->filter_fd);
  s->filter = NULL;
  s->filter_fd = -1;
}

int store_filter_fd(const store *s) { return s->filter ? s->filter_fd : -1; }

/* ------------------------------------------------------------------ life cycle */

static st_obj *obj_alloc(store *s, const char *id, int state) {
  st_obj *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->id = strdup(id);
  if (!o->id) {
    free(o);
    return NULL;
  }
  o->inst = ++s->next_inst;
  o->state = state;
  o->in_table = 1;
  o->created_ms = hpl__now_ms();
  return o;
}

st_obj *store_obj_new(store *s, const char *id, int state) {
  st_obj *o = obj_alloc(s, id, state);
  if (!o) return NULL;
  HASH_ADD_KEYPTR(hh, s->objs, o->id, strlen(o->id), o);
  filter_count(s, o->id, 1);
  HASH_ADD(hh_inst, s->insts, inst, sizeof o->inst, o);
  return o;
}

st_obj *store_obj_new_internal(store *s, const char *key, uint64_t size, char *detail,
                               size_t dlen) {
  st_obj *o = obj_alloc(s, key, OBJ_PULLING);
  if (!o) {
    snprintf(detail, dlen, "out of memory");
    return NULL;
  }
  o->internal = 1;
  if (store_obj_alloc(s, o, size, detail, dlen) != 0) {
    free(o->id);
    free(o);
    return NULL;
  }
  HASH_ADD_KEYPTR(hh, s->internal, o->id, strlen(o->id), o);
  HASH_ADD(hh_inst, s->insts, inst, sizeof o->inst, o);
  return o;
}

static void obj_free(store *s, st_obj *o) {
  HASH_DELETE(hh_inst, s->insts, o);
  if (o->data && o->size) hpl__pool_free(s->pool, o->data);
  free(o->id);
  free(o);
}

/* Tell watchers something changed. The list is one-shot: each watcher that
 * still cares registers again from its callback. */
static void obj_notify(st_obj *o) {
  st_watch *w = o->watchers;
  o->watchers = NULL;
  while (w) {
    st_watch *next = w->next;
    w->next = NULL;
    w->fn(w);
    w = next;
  }
}

void store_watch(st_obj *o, st_watch *w) {
  st_watch *x;
  LL_FOREACH(o->watchers, x) if (x == w) return;
  LL_PREPEND(o->watchers, w);
}

void store_unwatch(st_obj *o, st_watch *w) {
  st_watch *x;
  LL_FOREACH(o->watchers, x) if (x == w) {
    LL_DELETE(o->watchers, w);
    w->next = NULL;
    return;
  }
}

void store_obj_detach(store *s, st_obj *o) {
  if (!o->in_table) return;
  if (o->internal) {
    HASH_DEL(s->internal, o);
  } else {
    HASH_DEL(s->objs, o);
    filter_count(s, o->id, -1);
  }
  o->in_table = 0;
  obj_notify(o);
  if (o->refs == 0) obj_free(s, o);
}

void store_obj_ref(st_obj *o) { o->refs++; }

void store_obj_unref(store *s, st_obj *o) {
  if (--o->refs == 0 && !o->in_table) obj_free(s, o);
}

int store_obj_alloc(store *s, st_obj *o, uint64_t size, char *detail, size_t dlen) {
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

void store_obj_progress(store *s, st_obj *o, uint64_t progress) {
  (void)s;
  if (progress <= o->progress) return;
  o->progress = progress;
  obj_notify(o);
}

/* Take every waiter off and tell it (the list may change meanwhile). */
static void tell_waiters(st_obj *o, int status, const char *detail) {
  while (o->waiters) {
    st_waiter *w = o->waiters;
    DL_DELETE(o->waiters, w);
    w->done(w, status, detail);
  }
}

void store_obj_sealed(store *s, st_obj *o) {
  (void)s;
  o->state = OBJ_SEALED;
  o->progress = o->size;
  tell_waiters(o, 0, NULL);
  obj_notify(o);
}

void store_obj_fail(store *s, st_obj *o, int status, const char *detail) {
  (void)s;
  tell_waiters(o, status, detail);
}

void store_wait(st_obj *o, st_waiter *w) {
  w->obj = o;
  DL_APPEND(o->waiters, w);
}

void store_unwait(st_waiter *w) { DL_DELETE(w->obj->waiters, w); }

uint64_t store_obj_deadline(const st_obj *o) {
  uint64_t d = 0;
  if (!o->waiters) return UINT64_MAX;
  const st_waiter *w;
  DL_FOREACH(o->waiters, w) if (w->deadline_ms > d) d = w->deadline_ms;
  return d;
}
