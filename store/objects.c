/* objects.c - the store's object table (see objects.h): its context,
 * lookups, walks, making records and taking them out of the table, and the
 * presence filter. A record's life once made (references, the idle list,
 * its buffer and spill file, watchers and waiters) is objlife.c's; the
 * indexes are objidx.c's. */
#include "objects.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "objidx.h"
#include "objint.h"
#include "util.h"

hpl__obj *hpl__obj_find(hpl__store *s, const char *id) {
  return s->objects ? hpl__objidx_get(&s->objects->by_id, id, 0) : NULL;
}

void hpl__obj_unlisted(hpl__store *s, const char *id) {
  hpl__obj *o = hpl__obj_find(s, id);
  if (o) o->unlisted = 1;
}

hpl__obj *hpl__obj_find_inst(hpl__store *s, uint64_t inst) {
  return s->objects ? hpl__objidx_get(&s->objects->by_inst, NULL, inst) : NULL;
}

hpl__obj *hpl__obj_find_internal(hpl__store *s, const char *key) {
  return s->objects ? hpl__objidx_get(&s->objects->internal, key, 0) : NULL;
}

size_t hpl__obj_count(const hpl__store *s) {
  return s->objects ? hpl__objidx_live(&s->objects->by_id) : 0;
}

void hpl__obj_index_size(const hpl__store *s, size_t *slots, size_t *bytes) {
  size_t n = 0, b = 0;
  if (s->objects) {
    hpl__objidx_size(&s->objects->by_id, &n, &b);
    hpl__objidx_size(&s->objects->by_inst, &n, &b);
    hpl__objidx_size(&s->objects->internal, &n, &b);
  }
  if (slots) *slots = n;
  if (bytes) *bytes = b;
}

/* ------------------------------------------------------------------ walks */

void hpl__obj_walk_begin(hpl__store *s, hpl__walk *w) {
  hpl__objects *t = s->objects;
  *w = (hpl__walk){.at = t ? t->first : NULL, .open = t != NULL}; /* no tables: no objects */
  if (t) DL_APPEND(t->walks, w);
}

void hpl__obj_walk_end(hpl__store *s, hpl__walk *w) {
  if (!w->open) return;
  if (s->objects) DL_DELETE(s->objects->walks, w);
  w->open = 0;
  w->at = NULL;
}

hpl__obj *hpl__obj_walk_next(hpl__store *s, hpl__walk *w) {
  hpl__obj *o = w->open ? w->at : NULL;
  if (o)
    w->at = o->next;
  else
    hpl__obj_walk_end(s, w);
  return o;
}

/* o joins the list of objects (at the end): walks that were at the end
 * will return it. */
static void list_add(hpl__objects *t, hpl__obj *o) {
  DL_APPEND(t->first, o);
  hpl__walk *w;
  DL_FOREACH(t->walks, w) if (!w->at) w->at = o;
}

/* o leaves the list: walks about to return it move past it. */
static void list_del(hpl__objects *t, hpl__obj *o) {
  hpl__walk *w;
  DL_FOREACH(t->walks, w) if (w->at == o) w->at = o->next;
  DL_DELETE(t->first, o);
  o->prev = o->next = NULL;
}

/* ------------------------------------------------------------------ presence filter */

/* A counter per slot of the ids in the table. A saturated counter stays
 * saturated (it only ever means "maybe here"). */
static void filter_count(hpl__store *s, const char *id, int delta) {
  if (!s->objects || !s->objects->filter) return;
  uint8_t *c = &s->objects->filter[hpl__filter_slot(id, HPL__STORE_FILTER_SLOTS)];
  uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
  if (v == UINT8_MAX || (delta < 0 && v == 0)) return;
  __atomic_store_n(c, (uint8_t)(v + delta), __ATOMIC_RELEASE);
}

int hpl__objects_init(hpl__store *s) {
  hpl__objects *t = s->objects = calloc(1, sizeof *s->objects);
  if (!t) return HPL_ENOMEM;
  t->by_inst.by_inst = 1;
  t->filter_fd = -1;
  int fd = memfd_create("hoplite-filter", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, HPL__STORE_FILTER_SLOTS) != 0) {
    HPL__LOG_WARN("no presence filter (%s): clients ask this store for every get", strerror(errno));
    if (fd >= 0) close(fd);
    return 0;
  }
  void *p = mmap(NULL, HPL__STORE_FILTER_SLOTS, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return 0;
  }
  /* clients map it read-only, and cannot do otherwise (as the pool) */
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
    HPL__LOG_WARN("cannot seal the presence filter (%s): clients could write it",
                  strerror(errno));
  t->filter_fd = fd;
  t->filter = p;
  return 0;
}

void hpl__objects_stop(hpl__store *s) {
  hpl__objects *t = s->objects;
  if (!t) return;
  if (t->trim_live) uv_close((uv_handle_t *)&t->trim, NULL);
  t->trim_live = 0;
}

/* hpl__objects_free: a reduce stream leaves the table; freed unless
 * still referenced (its last unref frees it then). */
static void stream_forget(hpl__obj *o, void *arg) {
  hpl__store *s = arg;
  o->in_table = 0;
  if (o->refs == 0) {
    if (o->data && o->size) hpl__pool_free(s->pool, o->data);
    free(o);
  }
}

void hpl__objects_free(hpl__store *s) {
  hpl__objects *t = s->objects;
  if (t) {
    t->walks = NULL; /* their owners are gone by now: forgotten, not touched */
    while (t->first) hpl__obj_detach(s, t->first);
    /* reduce streams: out of the table, freed unless still referenced */
    hpl__objidx_each(&t->internal, stream_forget, s);
    hpl__obj_filerec *f, *ftmp;
    HASH_ITER(hh, t->files, f, ftmp) {
      HASH_DEL(t->files, f);
      free(f);
    }
    hpl__objidx_free(&t->by_id);
    hpl__objidx_free(&t->by_inst);
    hpl__objidx_free(&t->internal);
    if (t->filter) munmap(t->filter, HPL__STORE_FILTER_SLOTS);
    if (t->filter_fd >= 0) close(t->filter_fd);
    free(t);
    s->objects = NULL; /* records still referenced are freed without the tables */
  }
}

int hpl__obj_filter_fd(const hpl__store *s) {
  return s->objects && s->objects->filter ? s->objects->filter_fd : -1;
}

/* ------------------------------------------------------------------ life cycle */

/* A record (id inside) with a fresh instance handle, in no index. */
/* A new object named `id`, with room for `slack` more characters. */
static hpl__obj *obj_alloc(hpl__store *s, const char *id, int state, size_t slack) {
  size_t len = strlen(id);
  hpl__obj *o = malloc(offsetof(hpl__obj, id) + len + slack + 1);
  if (!o) return NULL;
  memset(o, 0, offsetof(hpl__obj, id));
  memcpy(o->id, id, len + 1);
  o->id_room = (uint16_t)(len + slack);
  o->inst = ++s->objects->next_inst;
  o->state = (uint8_t)state;
  o->in_table = 1;
  return o;
}

hpl__obj *hpl__obj_new(hpl__store *s, const char *id, int state) {
  hpl__objects *t = s->objects;
  hpl__obj *o = t ? obj_alloc(s, id, state, 0) : NULL;
  if (!o) return NULL;
  if (hpl__objidx_add(&t->by_id, o) != 0) {
    free(o);
    return NULL;
  }
  if (hpl__objidx_add(&t->by_inst, o) != 0) {
    hpl__objidx_del(&t->by_id, o);
    free(o);
    return NULL;
  }
  list_add(t, o);
  filter_count(s, o->id, 1);
  return o;
}

hpl__obj *hpl__obj_prep_internal(hpl__store *s, const char *key) {
  hpl__obj *o = s->objects ? obj_alloc(s, key, HPL__OBJ_PULLING, HPL__STORE_KEY_SLACK) : NULL;
  if (!o) return NULL;
  o->internal = 1;
  o->in_table = 0;
  return o;
}

int hpl__obj_publish_internal(hpl__store *s, hpl__obj *o) {
  hpl__objects *t = s->objects;
  if (!t || o->in_table || !o->internal || !o->data || hpl__obj_find_internal(s, o->id)) return -1;
  if (hpl__objidx_add(&t->internal, o) != 0) return -1;
  if (hpl__objidx_add(&t->by_inst, o) != 0) {
    hpl__objidx_del(&t->internal, o);
    return -1;
  }
  o->in_table = 1;
  return 0;
}

hpl__obj *hpl__obj_new_internal(hpl__store *s, const char *key, uint64_t size, char *detail,
                                size_t dlen) {
  hpl__obj *o = hpl__obj_prep_internal(s, key);
  if (!o) {
    snprintf(detail, dlen, "out of memory");
    return NULL;
  }
  if (hpl__obj_alloc(s, o, size, detail, dlen) != 0) {
    free(o);
    return NULL;
  }
  if (hpl__obj_publish_internal(s, o) != 0) {
    if (o->data && o->size) hpl__pool_free(s->pool, o->data);
    free(o);
    snprintf(detail, dlen, "out of memory");
    return NULL;
  }
  return o;
}

int hpl__obj_rekey_internal(hpl__store *s, hpl__obj *o, const char *key) {
  hpl__objects *t = s->objects;
  size_t len = strlen(key);
  if (!t || !o->internal || !o->in_table || len > o->id_room || hpl__obj_find_internal(s, key))
    return -1;
  char old[512];
  snprintf(old, sizeof old, "%s", o->id);
  hpl__objidx_del(&t->internal, o);
  memcpy(o->id, key, len + 1);
  if (hpl__objidx_add(&t->internal, o) == 0) return 0;
  memcpy(o->id, old, strlen(old) + 1); /* no memory: back under the old key */
  if (hpl__objidx_add(&t->internal, o) != 0) o->in_table = 0; /* out of the table, as if detached */
  return -1;
}

void hpl__obj_detach(hpl__store *s, hpl__obj *o) {
  if (!o->in_table) return;
  hpl__objects *t = s->objects;
  if (o->internal) {
    hpl__objidx_del(&t->internal, o);
  } else {
    hpl__objidx_del(&t->by_id, o);
    list_del(t, o);
    hpl__obj_idle_del(s, o);
    filter_count(s, o->id, -1);
  }
  o->in_table = 0;
  hpl__obj_notify(o);
  if (o->refs == 0) hpl__obj_free(s, o);
}
