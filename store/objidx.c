/* objidx.c - the object table's indexes: open addressing with tags,
 * resized incrementally (see objidx.h). */
#include "objidx.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TAG_EMPTY 0x00
#define TAG_GONE 0x01
#define TAG_USED 0x80
#define IDX_MIN 16       /* slots in the smallest array */
#define IDX_STEP 64      /* old slots drained per operation, at least */
#define IDX_MAP (64u << 10) /* arrays of this many bytes or more are mmapped */
#define IDX_UNMAP (1u << 20) /* bytes of a drained mapped array unmapped per operation */

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

static uint64_t hash_of(const hpl__objidx *x, const hpl__obj *o) {
  return x->by_inst ? mix64(o->inst) : hash_id(o->id);
}

static uint8_t tag_of(uint64_t h) { return (uint8_t)(TAG_USED | (h >> 57)); }

static size_t arr_bytes(size_t cap, size_t *rec_off) {
  *rec_off = (cap + sizeof(hpl__obj *) - 1) & ~(sizeof(hpl__obj *) - 1);
  return *rec_off + cap * sizeof(hpl__obj *);
}

/* A zeroed array of `cap` slots (a power of two). 0 or -1 (no memory). */
static int arr_alloc(hpl__objidx_arr *a, size_t cap) {
  size_t off, bytes = arr_bytes(cap, &off);
  void *p;
  if (bytes >= IDX_MAP) {
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = NULL;
  } else {
    p = calloc(1, bytes);
  }
  if (!p) return -1;
  *a = (hpl__objidx_arr){.tag = p, .rec = (hpl__obj **)((uint8_t *)p + off), .cap = cap};
  return 0;
}

static void arr_free(hpl__objidx_arr *a) {
  if (a->cap) {
    size_t off, bytes = arr_bytes(a->cap, &off);
    if (bytes >= IDX_MAP)
      munmap(a->tag, bytes);
    else
      free(a->tag);
  }
  *a = (hpl__objidx_arr){0};
}

/* Give back an array taken out of use: a small one at once, a mapped one
 * a slice per operation (idx_step): unmapping megabytes of touched pages
 * takes milliseconds. */
static void arr_retire(hpl__objidx *x, hpl__objidx_arr *a) {
  size_t off, bytes = arr_bytes(a->cap, &off);
  if (!a->cap || bytes < IDX_MAP) {
    arr_free(a);
    return;
  }
  if (x->dead) munmap(x->dead, x->dead_len); /* the previous one is not gone yet: rare */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  x->dead = a->tag;
  x->dead_len = (bytes + page - 1) / page * page;
  *a = (hpl__objidx_arr){0};
}

/* Slots for n entries: a power of two, at most half full. */
static size_t cap_for(size_t n) {
  size_t c = IDX_MIN;
  while (c < 2 * n) c *= 2;
  return c;
}

/* Add o (hash h) to a: it has a free slot (live + gone < cap). */
static void arr_put(hpl__objidx_arr *a, hpl__obj *o, uint64_t h) {
  size_t m = a->cap - 1, i = h & m;
  while (a->tag[i] & TAG_USED) i = (i + 1) & m;
  if (a->tag[i] == TAG_GONE) a->gone--;
  a->tag[i] = tag_of(h);
  a->rec[i] = o;
  a->live++;
}

/* The slot holding the key (id, or inst), or SIZE_MAX. */
static size_t arr_find(const hpl__objidx *x, const hpl__objidx_arr *a, uint64_t h, const char *id,
                       uint64_t inst) {
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
static void arr_clear(hpl__objidx_arr *a, size_t i) {
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
static void idx_step(hpl__objidx *x, size_t n) {
  if (x->dead) {
    size_t k = x->dead_len > IDX_UNMAP ? IDX_UNMAP : x->dead_len;
    x->dead_len -= k;
    munmap(x->dead + x->dead_len, k);
    if (!x->dead_len) x->dead = NULL;
  }
  if (!x->old.cap) return;
  hpl__objidx_arr *o = &x->old;
  size_t end = x->drain + n < o->cap ? x->drain + n : o->cap;
  for (size_t i = x->drain; i < end && o->live; i++) {
    if (!(o->tag[i] & TAG_USED)) continue;
    hpl__obj *r = o->rec[i];
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
static int idx_resize(hpl__objidx *x, size_t live) {
  hpl__objidx_arr n;
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
static void idx_step_for_insert(hpl__objidx *x) {
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

int hpl__objidx_add(hpl__objidx *x, hpl__obj *o) {
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

hpl__obj *hpl__objidx_get(hpl__objidx *x, const char *id, uint64_t inst) {
  idx_step(x, IDX_STEP);
  uint64_t h = x->by_inst ? mix64(inst) : hash_id(id);
  size_t i = arr_find(x, &x->cur, h, id, inst);
  if (i != SIZE_MAX) return x->cur.rec[i];
  i = arr_find(x, &x->old, h, id, inst);
  return i != SIZE_MAX ? x->old.rec[i] : NULL;
}

void hpl__objidx_del(hpl__objidx *x, hpl__obj *o) {
  uint64_t h = hash_of(x, o);
  hpl__objidx_arr *a = &x->cur;
  size_t i = arr_find(x, a, h, o->id, o->inst);
  if (i == SIZE_MAX) i = arr_find(x, a = &x->old, h, o->id, o->inst);
  if (i == SIZE_MAX || a->rec[i] != o) return;
  arr_clear(a, i);
  idx_step(x, IDX_STEP);
  if (!x->old.cap && x->cur.cap > IDX_MIN && x->cur.live * 8 < x->cur.cap)
    (void)idx_resize(x, x->cur.live); /* without memory: stay as it is */
}

void hpl__objidx_free(hpl__objidx *x) {
  arr_free(&x->cur);
  arr_free(&x->old);
  if (x->dead) munmap(x->dead, x->dead_len);
  x->dead = NULL;
  x->drain = x->dead_len = 0;
}

size_t hpl__objidx_live(const hpl__objidx *x) { return x->cur.live + x->old.live; }

void hpl__objidx_size(const hpl__objidx *x, size_t *slots, size_t *bytes) {
  size_t off;
  const hpl__objidx_arr *arrs[] = {&x->cur, &x->old};
  for (int j = 0; j < 2; j++) {
    *slots += arrs[j]->cap;
    *bytes += arrs[j]->cap ? arr_bytes(arrs[j]->cap, &off) : 0;
  }
}

void hpl__objidx_each(hpl__objidx *x, void (*fn)(hpl__obj *o, void *arg), void *arg) {
  for (hpl__objidx_arr *a = &x->cur; a; a = a == &x->cur ? &x->old : NULL)
    for (size_t i = 0; i < a->cap; i++)
      if (a->tag[i] & TAG_USED) fn(a->rec[i], arg);
}
