/* objects.c - the store's object table, references, progress, watchers,
 * waiters and the presence filter (see objects.h). */
#include "objects.h"

#include <errno.h>
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
#include "spill.h"
#include "util.h"

/* ------------------------------------------------------------------ indexes
 *
 * An index is an open-addressing table of record pointers with linear
 * probing and a tag byte per slot: TAG_EMPTY, TAG_GONE (a removed entry: a
 * probe goes on past it) or TAG_USED with 7 bits of the key's hash, so a
 * probe reads records only on a tag match (1 in 128 for another key).
 * Keys are unique (callers check before adding); a record's key is its id,
 * or its instance handle for the index by handle.
 *
 * Resizing is incremental. When an array would pass 3/4 full (live and
 * removed entries), or falls below 1/8 live, a new array is made for twice
 * the live entries and becomes `cur`; the old one is drained into it from
 * slot 0 up, a few slots per operation on the index (lookups included),
 * and given back once drained. Meanwhile lookups and removals consult both (a
 * drained slot is marked TAG_GONE, so probes through it still reach the
 * entries after it). An insert drains enough that the old array is empty
 * before `cur` fills (see idx_step_for_insert), so a resize never runs in
 * one go. Arrays of 64 KiB or more are mapped afresh (their zeroed pages
 * come on first touch, never all at once) and unmapped a slice at a time
 * once drained. */

#define TAG_EMPTY 0x00
#define TAG_GONE 0x01
#define TAG_USED 0x80
#define IDX_MIN 16       /* slots in the smallest array */
#define IDX_STEP 64      /* old slots drained per operation, at least */
#define IDX_MAP (64u << 10) /* arrays of this many bytes or more are mmapped */
#define IDX_UNMAP (1u << 20) /* bytes of a drained mapped array unmapped per operation */

typedef struct idx_arr {
  uint8_t *tag;  /* cap tags, then (aligned) cap record pointers: one allocation */
  st_obj **rec;
  size_t cap;    /* 0 (no array) or a power of two */
  size_t live;   /* TAG_USED slots */
  size_t gone;   /* TAG_GONE slots */
} idx_arr;

typedef struct idx {
  idx_arr cur;   /* where entries are added */
  idx_arr old;   /* being drained into cur (cap 0: none) */
  size_t drain;  /* old's slots below this are drained */
  uint8_t *dead; /* a drained mapped array, unmapped from its end a slice */
  size_t dead_len; /*   per operation (NULL: none) */
  int by_inst;   /* keyed by instance handle, else by id */
} idx;

/* The module's context (s->objects), made by store_objects_init. */
typedef struct st_objects {
  idx by_id;        /* objects in the table (store_find) */
  idx by_inst;      /* every object until freed (store_find_inst) */
  idx internal;     /* reduce streams in the table (store_find_internal) */
  st_obj *first, *last; /* objects in by_id, oldest first (walks) */
  st_walk *walks;   /* open walks */
  st_obj *idle_first, *idle_last; /* the idle list, least recently used first */
  uint64_t idle_bytes;
  struct obj_file *files; /* spill files by instance (few objects have one) */
  uint64_t next_inst;     /* the last instance handle given */
  int filter_fd;          /* presence filter shared read-only with clients (-1: none) */
  uint8_t *filter;
  uv_timer_t trim; /* gives free pool pages back once frees pause (cfg.trim_ms) */
  int trim_live;   /* the timer is initialised */
  /* the listener (room.c): pool memory was freed or an object went idle;
   * a spilled object's bytes are wanted */
  void (*room_changed)(store *s);
  void (*wanted)(store *s, st_obj *o);
} st_objects;

typedef struct obj_file {
  uint64_t inst, file;
  UT_hash_handle hh;
} obj_file;

static uint64_t mix64(uint64_t x) { /* murmur3's finaliser */
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static uint64_t hash_id(const char *id) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, finalised: slots use the low bits */
  for (const unsigned char *p = (const unsigned char *)id; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
  return mix64(h);
}

static uint64_t hash_of(const idx *x, const st_obj *o) {
  return x->by_inst ? mix64(o->inst) : hash_id(o->id);
}

static uint8_t tag_of(uint64_t h) { return (uint8_t)(TAG_USED | (h >> 57)); }

static size_t arr_bytes(size_t cap, size_t *rec_off) {
  *rec_off = (cap + sizeof(st_obj *) - 1) & ~(sizeof(st_obj *) - 1);
  return *rec_off + cap * sizeof(st_obj *);
}

/* A zeroed array of `cap` slots (a power of two). 0 or -1 (no memory). */
static int arr_alloc(idx_arr *a, size_t cap) {
  size_t off, bytes = arr_bytes(cap, &off);
  void *p;
  if (bytes >= IDX_MAP) {
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = NULL;
  } else {
    p = calloc(1, bytes);
  }
  if (!p) return -1;
  *a = (idx_arr){.tag = p, .rec = (st_obj **)((uint8_t *)p + off), .cap = cap};
  return 0;
}

static void arr_free(idx_arr *a) {
  if (a->cap) {
    size_t off, bytes = arr_bytes(a->cap, &off);
    if (bytes >= IDX_MAP)
      munmap(a->tag, bytes);
    else
      free(a->tag);
  }
  *a = (idx_arr){0};
}

/* Give back an array taken out of use: a small one at once, a mapped one
 * a slice per operation (idx_step): unmapping megabytes of touched pages
 * takes milliseconds. */
static void arr_retire(idx *x, idx_arr *a) {
  size_t off, bytes = arr_bytes(a->cap, &off);
  if (!a->cap || bytes < IDX_MAP) {
    arr_free(a);
    return;
  }
  if (x->dead) munmap(x->dead, x->dead_len); /* the previous one is not gone yet: rare */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  x->dead = a->tag;
  x->dead_len = (bytes + page - 1) / page * page;
  *a = (idx_arr){0};
}

/* Slots for n entries: a power of two, at most half full. */
static size_t cap_for(size_t n) {
  size_t c = IDX_MIN;
  while (c < 2 * n) c *= 2;
  return c;
}

/* Add o (hash h) to a: it has a free slot (live + gone < cap). */
static void arr_put(idx_arr *a, st_obj *o, uint64_t h) {
  size_t m = a->cap - 1, i = h & m;
  while (a->tag[i] & TAG_USED) i = (i + 1) & m;
  if (a->tag[i] == TAG_GONE) a->gone--;
  a->tag[i] = tag_of(h);
  a->rec[i] = o;
  a->live++;
}

/* The slot holding the key (id, or inst), or SIZE_MAX. */
static size_t arr_find(const idx *x, const idx_arr *a, uint64_t h, const char *id, uint64_t inst) {
  if (!a->cap) return SIZE_MAX;
  size_t m = a->cap - 1, i = h & m;
  uint8_t t = tag_of(h);
  for (;;) {
    uint8_t g = a->tag[i];
    if (g == TAG_EMPTY) return SIZE_MAX;
    if (g == t && (x->by_inst ? a->rec[i]->inst == inst : !strcmp(a->rec[i]->id, id))) return i;
    i = (i + 1) & m;
  }
}

/* Empty slot i. A slot followed by an empty one can be empty itself (no
 * probe needs to pass it), and so can the removed slots just before it. */
static void arr_clear(idx_arr *a, size_t i) {
  size_t m = a->cap - 1;
  a->live--;
  if (a->tag[(i + 1) & m] != TAG_EMPTY) {
    a->tag[i] = TAG_GONE;
    a->gone++;
    return;
  }
  a->tag[i] = TAG_EMPTY;
  for (size_t j = (i - 1) & m; a->tag[j] == TAG_GONE; j = (j - 1) & m) {
    a->tag[j] = TAG_EMPTY;
    a->gone--;
  }
}

/* The work every operation does: unmap a slice of a retired array, move up
 * to n slots of the old array into cur, retire it once drained. */
static void idx_step(idx *x, size_t n) {
  if (x->dead) {
    size_t k = x->dead_len > IDX_UNMAP ? IDX_UNMAP : x->dead_len;
    x->dead_len -= k;
    munmap(x->dead + x->dead_len, k);
    if (!x->dead_len) x->dead = NULL;
  }
  if (!x->old.cap) return;
  idx_arr *o = &x->old;
  size_t end = x->drain + n < o->cap ? x->drain + n : o->cap;
  for (size_t i = x->drain; i < end && o->live; i++) {
    if (!(o->tag[i] & TAG_USED)) continue;
    st_obj *r = o->rec[i];
    arr_put(&x->cur, r, hash_of(x, r));
    o->tag[i] = TAG_GONE; /* not emptied: probes of later entries pass here */
    o->live--;
    o->gone++;
  }
  x->drain = end;
  if (x->drain == o->cap || !o->live) {
    arr_retire(x, o);
    x->drain = 0;
  }
}

/* Start moving to a new array sized for the live entries (the current
 * one becomes the old one), but not below 1/64 of the current one: a much
 * smaller array would take few inserts before it fills, and each would
 * have to drain a large share of the old one (see idx_step_for_insert;
 * with this floor, at most 256 slots). -1 if there is no memory for it. */
static int idx_resize(idx *x, size_t live) {
  idx_arr n;
  size_t cap = cap_for(live);
  while (cap < x->cur.cap / 64) cap *= 2;
  if (arr_alloc(&n, cap) != 0) return -1;
  x->old = x->cur;
  x->cur = n;
  x->drain = 0;
  if (!x->old.live) arr_retire(x, &x->old);
  return 0;
}

/* Before an insert while the old array drains: the inserts cur can take
 * before passing 3/4 (counting the old array's entries, which all come to
 * cur) must outlast the old slots left, so drain at least that share. */
static void idx_step_for_insert(idx *x) {
  if (!x->old.cap) {
    idx_step(x, 0);
    return;
  }
  size_t left = x->old.cap - x->drain;
  size_t fill = x->cur.live + x->cur.gone + x->old.live;
  size_t lim = x->cur.cap / 4 * 3;
  size_t room = lim > fill ? lim - fill : 0;
  size_t n = room ? (left + room - 1) / room : left;
  idx_step(x, n > IDX_STEP ? n : IDX_STEP);
}

/* Add o (not in x). 0, or -1 when there is no room and no memory to grow. */
static int idx_add(idx *x, st_obj *o) {
  idx_step_for_insert(x);
  size_t live = x->cur.live + x->old.live;
  if (!x->cur.cap) {
    if (arr_alloc(&x->cur, IDX_MIN) != 0) return -1;
  } else if (!x->old.cap && (x->cur.live + x->cur.gone + 1) * 4 > x->cur.cap * 3) {
    /* past 3/4: a bigger (or, if mostly removed entries, cleaner) array;
     * without memory for it, keep filling this one while a slot is left */
    if (idx_resize(x, live + 1) != 0 && x->cur.live + x->cur.gone + 2 > x->cur.cap) return -1;
  } else if (x->cur.live + x->cur.gone + 2 > x->cur.cap) {
    /* cannot happen (idx_step_for_insert); but never fill the last slot */
    idx_step(x, x->old.cap);
    if (idx_resize(x, live + 1) != 0) return -1;
  }
  arr_put(&x->cur, o, hash_of(x, o));
  return 0;
}

/* Find by id (or by inst if x is by_inst). */
static st_obj *idx_get(idx *x, const char *id, uint64_t inst) {
  idx_step(x, IDX_STEP);
  uint64_t h = x->by_inst ? mix64(inst) : hash_id(id);
  size_t i = arr_find(x, &x->cur, h, id, inst);
  if (i != SIZE_MAX) return x->cur.rec[i];
  i = arr_find(x, &x->old, h, id, inst);
  return i != SIZE_MAX ? x->old.rec[i] : NULL;
}

/* Remove o (a no-op if it is not in x); shrink when mostly empty. */
static void idx_del(idx *x, st_obj *o) {
  uint64_t h = hash_of(x, o);
  idx_arr *a = &x->cur;
  size_t i = arr_find(x, a, h, o->id, o->inst);
  if (i == SIZE_MAX) i = arr_find(x, a = &x->old, h, o->id, o->inst);
  if (i == SIZE_MAX || a->rec[i] != o) return;
  arr_clear(a, i);
  idx_step(x, IDX_STEP);
  if (!x->old.cap && x->cur.cap > IDX_MIN && x->cur.live * 8 < x->cur.cap)
    (void)idx_resize(x, x->cur.live); /* without memory: stay as it is */
}

static void idx_free(idx *x) {
  arr_free(&x->cur);
  arr_free(&x->old);
  if (x->dead) munmap(x->dead, x->dead_len);
  x->dead = NULL;
  x->drain = x->dead_len = 0;
}

st_obj *store_find(store *s, const char *id) {
  return s->objects ? idx_get(&s->objects->by_id, id, 0) : NULL;
}

st_obj *store_find_inst(store *s, uint64_t inst) {
  return s->objects ? idx_get(&s->objects->by_inst, NULL, inst) : NULL;
}

st_obj *store_find_internal(store *s, const char *key) {
  return s->objects ? idx_get(&s->objects->internal, key, 0) : NULL;
}

size_t store_obj_count(const store *s) {
  return s->objects ? s->objects->by_id.cur.live + s->objects->by_id.old.live : 0;
}

void store_obj_index_size(const store *s, size_t *slots, size_t *bytes) {
  size_t n = 0, b = 0, off;
  if (s->objects) {
    const idx *all[] = {&s->objects->by_id, &s->objects->by_inst, &s->objects->internal};
    for (int i = 0; i < 3; i++) {
      const idx_arr *arrs[] = {&all[i]->cur, &all[i]->old};
      for (int j = 0; j < 2; j++) {
        n += arrs[j]->cap;
        b += arrs[j]->cap ? arr_bytes(arrs[j]->cap, &off) : 0;
      }
    }
  }
  if (slots) *slots = n;
  if (bytes) *bytes = b;
}

/* ------------------------------------------------------------------ walks */

void store_walk_begin(store *s, st_walk *w) {
  st_objects *t = s->objects;
  *w = (st_walk){.at = t ? t->first : NULL, .open = t != NULL}; /* no tables: no objects */
  if (t) DL_APPEND(t->walks, w);
}

void store_walk_end(store *s, st_walk *w) {
  if (!w->open) return;
  if (s->objects) DL_DELETE(s->objects->walks, w);
  w->open = 0;
  w->at = NULL;
}

st_obj *store_walk_next(store *s, st_walk *w) {
  st_obj *o = w->open ? w->at : NULL;
  if (o)
    w->at = o->next;
  else
    store_walk_end(s, w);
  return o;
}

/* o joins the list of objects (at the end): walks that were at the end
 * will return it. */
static void list_add(st_objects *t, st_obj *o) {
  o->prev = t->last;
  o->next = NULL;
  if (t->last)
    t->last->next = o;
  else
    t->first = o;
  t->last = o;
  st_walk *w;
  DL_FOREACH(t->walks, w) if (!w->at) w->at = o;
}

/* o leaves the list: walks about to return it move past it. */
static void list_del(st_objects *t, st_obj *o) {
  st_walk *w;
  DL_FOREACH(t->walks, w) if (w->at == o) w->at = o->next;
  if (o->prev)
    o->prev->next = o->next;
  else
    t->first = o->next;
  if (o->next)
    o->next->prev = o->prev;
  else
    t->last = o->prev;
  o->prev = o->next = NULL;
}

/* ------------------------------------------------------------------ the idle list */

/* Room may have been made (memory freed, or an object went idle): tell
 * whoever waits for it (room.c), which acts later on the loop. */
static void room_changed(store *s) {
  if (s->objects && s->objects->room_changed) s->objects->room_changed(s);
}

void store_objects_listen(store *s, void (*changed)(store *s),
                          void (*wanted)(store *s, st_obj *o)) {
  if (!s->objects) return;
  s->objects->room_changed = changed;
  s->objects->wanted = wanted;
}

void store_obj_want(store *s, st_obj *o) {
  if (o->state == OBJ_SPILLED && s->objects && s->objects->wanted) s->objects->wanted(s, o);
}

static void idle_add(store *s, st_obj *o) {
  st_objects *t = s->objects;
  if (o->on_idle || !t || !o->in_table || o->internal || o->refs || o->state != OBJ_SEALED)
    return;
  o->lru_prev = t->idle_last;
  o->lru_next = NULL;
  if (t->idle_last)
    t->idle_last->lru_next = o;
  else
    t->idle_first = o;
  t->idle_last = o;
  t->idle_bytes += o->size;
  o->on_idle = 1;
  room_changed(s);
}

static void idle_del(store *s, st_obj *o) {
  st_objects *t = s->objects;
  if (!o->on_idle || !t) return;
  if (o->lru_prev)
    o->lru_prev->lru_next = o->lru_next;
  else
    t->idle_first = o->lru_next;
  if (o->lru_next)
    o->lru_next->lru_prev = o->lru_prev;
  else
    t->idle_last = o->lru_prev;
  o->lru_prev = o->lru_next = NULL;
  t->idle_bytes -= o->size;
  o->on_idle = 0;
}

st_obj *store_idle_oldest(store *s) { return s->objects ? s->objects->idle_first : NULL; }
st_obj *store_idle_newer(const st_obj *o) { return o->lru_next; }
uint64_t store_idle_bytes(const store *s) { return s->objects ? s->objects->idle_bytes : 0; }

/* ------------------------------------------------------------------ presence filter */

/* A counter per slot of the ids in the table. A saturated counter stays
 * saturated (it only ever means "maybe here"). */
static void filter_count(store *s, const char *id, int delta) {
  if (!s->objects || !s->objects->filter) return;
  uint8_t *c = &s->objects->filter[hpl__filter_slot(id, STORE_FILTER_SLOTS)];
  uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
  if (v == UINT8_MAX || (delta < 0 && v == 0)) return;
  __atomic_store_n(c, (uint8_t)(v + delta), __ATOMIC_RELEASE);
}

int store_objects_init(store *s) {
  st_objects *t = s->objects = calloc(1, sizeof *s->objects);
  if (!t) return HPL_ENOMEM;
  t->by_inst.by_inst = 1;
  t->filter_fd = -1;
  int fd = memfd_create("hoplite-filter", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, STORE_FILTER_SLOTS) != 0) {
    LOG_WARN("no presence filter (%s): clients ask this store for every get", strerror(errno));
    if (fd >= 0) close(fd);
    return 0;
  }
  void *p = mmap(NULL, STORE_FILTER_SLOTS, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return 0;
  }
  t->filter_fd = fd;
  t->filter = p;
  return 0;
}

void store_objects_stop(store *s) {
  st_objects *t = s->objects;
  if (!t) return;
  if (t->trim_live) uv_close((uv_handle_t *)&t->trim, NULL);
  t->trim_live = 0;
}

void store_objects_free(store *s) {
  st_objects *t = s->objects;
  if (t) {
    t->walks = NULL; /* their owners are gone by now: forgotten, not touched */
    while (t->first) store_obj_detach(s, t->first);
    /* reduce streams: out of the table, freed unless still referenced */
    for (idx_arr *a = &t->internal.cur; a; a = a == &t->internal.cur ? &t->internal.old : NULL)
      for (size_t i = 0; i < a->cap; i++) {
        if (!(a->tag[i] & TAG_USED)) continue;
        st_obj *o = a->rec[i];
        o->in_table = 0;
        if (o->refs == 0) {
          if (o->data && o->size) hpl__pool_free(s->pool, o->data);
          free(o);
        }
      }
    obj_file *f, *ftmp;
    HASH_ITER(hh, t->files, f, ftmp) {
      HASH_DEL(t->files, f);
      free(f);
    }
    idx_free(&t->by_id);
    idx_free(&t->by_inst);
    idx_free(&t->internal);
    if (t->filter) munmap(t->filter, STORE_FILTER_SLOTS);
    if (t->filter_fd >= 0) close(t->filter_fd);
    free(t);
    s->objects = NULL; /* records still referenced are freed without the tables */
  }
}

int store_filter_fd(const store *s) {
  return s->objects && s->objects->filter ? s->objects->filter_fd : -1;
}

/* ------------------------------------------------------------------ life cycle */

/* A record (id inside) with a fresh instance handle, in no index. */
/* A new object named `id`, with room for `slack` more characters. */
static st_obj *obj_alloc(store *s, const char *id, int state, size_t slack) {
  size_t len = strlen(id);
  st_obj *o = malloc(offsetof(st_obj, id) + len + slack + 1);
  if (!o) return NULL;
  memset(o, 0, offsetof(st_obj, id));
  memcpy(o->id, id, len + 1);
  o->id_room = (uint16_t)(len + slack);
  o->inst = ++s->objects->next_inst;
  o->state = (uint8_t)state;
  o->in_table = 1;
  return o;
}

st_obj *store_obj_new(store *s, const char *id, int state) {
  st_objects *t = s->objects;
  st_obj *o = t ? obj_alloc(s, id, state, 0) : NULL;
  if (!o) return NULL;
  if (idx_add(&t->by_id, o) != 0) {
    free(o);
    return NULL;
  }
  if (idx_add(&t->by_inst, o) != 0) {
    idx_del(&t->by_id, o);
    free(o);
    return NULL;
  }
  list_add(t, o);
  filter_count(s, o->id, 1);
  return o;
}

st_obj *store_obj_prep_internal(store *s, const char *key) {
  st_obj *o = s->objects ? obj_alloc(s, key, OBJ_PULLING, STORE_KEY_SLACK) : NULL;
  if (!o) return NULL;
  o->internal = 1;
  o->in_table = 0;
  return o;
}

int store_obj_publish_internal(store *s, st_obj *o) {
  st_objects *t = s->objects;
  if (!t || o->in_table || !o->internal || !o->data || store_find_internal(s, o->id)) return -1;
  if (idx_add(&t->internal, o) != 0) return -1;
  if (idx_add(&t->by_inst, o) != 0) {
    idx_del(&t->internal, o);
    return -1;
  }
  o->in_table = 1;
  return 0;
}

st_obj *store_obj_new_internal(store *s, const char *key, uint64_t size, char *detail,
                               size_t dlen) {
  st_obj *o = store_obj_prep_internal(s, key);
  if (!o) {
    snprintf(detail, dlen, "out of memory");
    return NULL;
  }
  if (store_obj_alloc(s, o, size, detail, dlen) != 0) {
    free(o);
    return NULL;
  }
  if (store_obj_publish_internal(s, o) != 0) {
    if (o->data && o->size) hpl__pool_free(s->pool, o->data);
    free(o);
    snprintf(detail, dlen, "out of memory");
    return NULL;
  }
  return o;
}

int store_obj_rekey_internal(store *s, st_obj *o, const char *key) {
  st_objects *t = s->objects;
  size_t len = strlen(key);
  if (!t || !o->internal || !o->in_table || len > o->id_room || store_find_internal(s, key))
    return -1;
  char old[512];
  snprintf(old, sizeof old, "%s", o->id);
  idx_del(&t->internal, o);
  memcpy(o->id, key, len + 1);
  if (idx_add(&t->internal, o) == 0) return 0;
  memcpy(o->id, old, strlen(old) + 1); /* no memory: back under the old key */
  if (idx_add(&t->internal, o) != 0) o->in_table = 0; /* out of the table, as if detached */
  return -1;
}

/* Free pool pages go back to the kernel: a walk of the free list, a
 * bounded part per loop turn. */
static void trim_cb(uv_timer_t *t) {
  store *s = t->data;
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
static void pool_freed(store *s) {
  st_objects *t = s->objects;
  if (!s->cfg.trim_ms || s->stopping || !t) return;
  if (!t->trim_live) {
    if (uv_timer_init(s->loop, &t->trim) != 0) return;
    t->trim.data = s;
    t->trim_live = 1;
  }
  uv_timer_start(&t->trim, trim_cb, s->cfg.trim_ms, 0);
}

int store_obj_set_file(store *s, st_obj *o, uint64_t file) {
  obj_file *f = calloc(1, sizeof *f);
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

static obj_file *file_of(store *s, const st_obj *o) {
  obj_file *f = NULL;
  if (o->on_disk && s->objects) HASH_FIND(hh, s->objects->files, &o->inst, sizeof o->inst, f);
  return f;
}

uint64_t store_obj_file(store *s, const st_obj *o) {
  obj_file *f = file_of(s, o);
  return f ? f->file : 0;
}

void store_obj_drop_buffer(store *s, st_obj *o) {
  if (!o->on_disk || !o->data) return;
  idle_del(s, o);
  if (o->size) {
    hpl__pool_free(s->pool, o->data);
    pool_freed(s);
  }
  o->data = NULL;
  o->progress = 0; /* until it is back (a stream waits for it) */
  o->state = OBJ_SPILLED;
  room_changed(s);
}

static void obj_free(store *s, st_obj *o) {
  if (s->objects) idx_del(&s->objects->by_inst, o);
  obj_file *f = file_of(s, o);
  if (f) {
    if (s->spill) hpl__spill_remove(s->spill, f->file);
    HASH_DEL(s->objects->files, f);
    free(f);
  }
  if (o->data && o->size) {
    hpl__pool_free(s->pool, o->data);
    pool_freed(s);
    room_changed(s);
  }
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
  st_objects *t = s->objects;
  if (o->internal) {
    idx_del(&t->internal, o);
  } else {
    idx_del(&t->by_id, o);
    list_del(t, o);
    idle_del(s, o);
    filter_count(s, o->id, -1);
  }
  o->in_table = 0;
  obj_notify(o);
  if (o->refs == 0) obj_free(s, o);
}

void store_obj_ref(store *s, st_obj *o) {
  if (o->refs++ == 0) idle_del(s, o);
}

void store_obj_unref(store *s, st_obj *o) {
  if (--o->refs) return;
  if (!o->in_table)
    obj_free(s, o);
  else
    idle_add(s, o);
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
  o->state = OBJ_SEALED;
  o->progress = o->size;
  tell_waiters(o, 0, NULL);
  obj_notify(o);
  idle_add(s, o);
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
