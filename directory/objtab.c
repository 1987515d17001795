/* objtab.c - the directory's object table storage (see objects.h): compact
 * records (links, record and id in one allocation, the first location
 * inside), the id hash (chained, grown incrementally), the ordered index (a
 * skip list by id) and the object change event's subscribers. The per-node
 * index and a large object's indexes are objtab_ix.c's; objects.c builds
 * locations and sender choice on top. */
#include "objects.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "objtab_int.h"

#define HT_MIN 1024
#define REHASH_STEP 64 /* buckets moved per operation while growing */

static uint32_t id_hash(const char *id, size_t len) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)id[i]) * 0x100000001b3ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return (uint32_t)h;
}

/* The links of the ordered index sit just before the record. */
static hpl__dir_obj **links(const hpl__dir_obj *o) { return (hpl__dir_obj **)o - o->levels; }
static void obj_block_free(hpl__dir_obj *o) { free(links(o)); }

void hpl__dtab_init(hpl__dtab *t, uint32_t max_senders) {
  memset(t, 0, sizeof *t);
  t->max_senders = max_senders ? max_senders : 1;
  t->rehash = -1;
  t->levels = 1;
  t->rng = 0x853c49e6748fea9bull;
}

/* ------------------------------------------------------------------ the id hash */

/* Move a few buckets of the old table into the new one. */
static void rehash_step(hpl__dtab *t, int steps) {
  if (t->rehash < 0) return;
  while (steps-- > 0 && (uint64_t)t->rehash < t->hsize[0]) {
    hpl__dir_obj *o, *next;
    LL_FOREACH_SAFE2(t->ht[0][t->rehash], o, next, hnext) {
      LL_PREPEND2(t->ht[1][o->hash & (t->hsize[1] - 1)], o, hnext);
      t->hused[0]--;
      t->hused[1]++;
    }
    t->ht[0][t->rehash++] = NULL;
  }
  if ((uint64_t)t->rehash == t->hsize[0]) { /* done: the new table is the table */
    free(t->ht[0]);
    t->ht[0] = t->ht[1];
    t->hsize[0] = t->hsize[1];
    t->hused[0] = t->hused[1];
    t->ht[1] = NULL;
    t->hsize[1] = t->hused[1] = 0;
    t->rehash = -1;
  }
}

/* Room for one more: the first table, or a bigger one to grow into. */
static int hash_reserve(hpl__dtab *t) {
  if (!t->ht[0]) {
    if (!(t->ht[0] = calloc(HT_MIN, sizeof *t->ht[0]))) return -1;
    t->hsize[0] = HT_MIN;
    return 0;
  }
  if (t->rehash >= 0 || t->hused[0] < t->hsize[0]) return 0;
  hpl__dir_obj **nt = calloc(t->hsize[0] * 2, sizeof *nt);
  if (!nt) return 0; /* keep the longer chains rather than fail */
  t->ht[1] = nt;
  t->hsize[1] = t->hsize[0] * 2;
  t->rehash = 0;
  return 0;
}

static hpl__dir_obj *hash_find(hpl__dtab *t, const char *id, size_t len, uint32_t h) {
  rehash_step(t, 1);
  for (int k = 0; k < 2; k++) {
    if (!t->ht[k]) continue;
    hpl__dir_obj *o;
    LL_FOREACH2(t->ht[k][h & (t->hsize[k] - 1)], o, hnext)
      if (o->hash == h && !strncmp(o->id, id, len) && !o->id[len]) return o;
  }
  return NULL;
}

static void hash_add(hpl__dtab *t, hpl__dir_obj *o) {
  rehash_step(t, REHASH_STEP);
  int k = t->rehash >= 0 ? 1 : 0;
  LL_PREPEND2(t->ht[k][o->hash & (t->hsize[k] - 1)], o, hnext);
  t->hused[k]++;
}

/* One walk of o's chain finds the link to it and unlinks it there. */
static void hash_del(hpl__dtab *t, hpl__dir_obj *o) {
  for (int k = 0; k < 2; k++) {
    if (!t->ht[k]) continue;
    hpl__dir_obj **pp = &t->ht[k][o->hash & (t->hsize[k] - 1)];
    while (*pp && *pp != o) pp = &(*pp)->hnext;
    if (!*pp) continue; /* in the other table */
    *pp = o->hnext;
    t->hused[k]--;
    return;
  }
}

/* ------------------------------------------------------------------ the ordered index */

static int random_levels(hpl__dtab *t) {
  int lv = 1;
  for (;;) { /* p = 1/4 per level */
    t->rng = t->rng * 6364136223846793005ull + 1442695040888963407ull;
    if (lv == HPL__DTAB_LEVELS || ((t->rng >> 33) & 3)) return lv;
    lv++;
  }
}

/* The object's links at level i (the head's for NULL). */
static hpl__dir_obj **link_at(hpl__dtab *t, hpl__dir_obj *o, int i) {
  return o ? &links(o)[i] : &t->head[i];
}

/* update[i]: the last object before `key` at level i (NULL: the head). */
static void find_before(hpl__dtab *t, const char *key, int after, hpl__dir_obj **update) {
  hpl__dir_obj *x = NULL;
  for (int i = t->levels - 1; i >= 0; i--) {
    hpl__dir_obj *n;
    while ((n = *link_at(t, x, i)) && (after ? strcmp(n->id, key) <= 0 : strcmp(n->id, key) < 0))
      x = n;
    update[i] = x;
  }
}

static void index_add(hpl__dtab *t, hpl__dir_obj *o) {
  hpl__dir_obj *update[HPL__DTAB_LEVELS];
  find_before(t, o->id, 0, update);
  for (int i = t->levels; i < o->levels; i++) update[i] = NULL;
  if (o->levels > t->levels) t->levels = o->levels;
  for (int i = 0; i < o->levels; i++) {
    links(o)[i] = *link_at(t, update[i], i);
    *link_at(t, update[i], i) = o;
  }
}

static void index_del(hpl__dtab *t, hpl__dir_obj *o) {
  hpl__dir_obj *update[HPL__DTAB_LEVELS];
  find_before(t, o->id, 0, update);
  for (int i = 0; i < o->levels; i++)
    if (*link_at(t, update[i], i) == o) *link_at(t, update[i], i) = links(o)[i];
  while (t->levels > 1 && !t->head[t->levels - 1]) t->levels--;
}

hpl__dir_obj *hpl__dtab_first(hpl__dtab *t, const char *key, int after) {
  hpl__dir_obj *update[HPL__DTAB_LEVELS];
  find_before(t, key ? key : "", after, update);
  return *link_at(t, update[0], 0);
}

hpl__dir_obj *hpl__dtab_next(const hpl__dir_obj *o) { return links(o)[0]; }

/* ------------------------------------------------------------------ records */

hpl__dir_obj *hpl__dtab_find(hpl__dtab *t, const char *id) {
  size_t len = strlen(id);
  return hash_find(t, id, len, id_hash(id, len));
}

hpl__dir_obj *hpl__dtab_get(hpl__dtab *t, const char *id) {
  size_t len = strlen(id);
  uint32_t h = id_hash(id, len);
  hpl__dir_obj *o = hash_find(t, id, len, h);
  if (o || len > HPL_ID_MAX || hash_reserve(t) != 0) return o;
  int lv = random_levels(t);
  hpl__dir_obj **block = malloc(sizeof(hpl__dir_obj *) * (size_t)lv + sizeof *o + len + 1);
  if (!block) return NULL;
  o = (hpl__dir_obj *)(block + lv);
  memset(o, 0, sizeof *o);
  o->levels = (uint8_t)lv;
  o->hash = h;
  o->state = HPL__OBJ_PENDING;
  memcpy(o->id, id, len + 1);
  hash_add(t, o);
  index_add(t, o);
  t->nobjs++;
  return o;
}

static void obj_free(hpl__dtab *t, hpl__dir_obj *o) {
  hpl__dir_loc *l;
  while ((l = o->locs)) {
    DL_DELETE(o->locs, l);
    hpl__dtab_loc_free(t, o, l);
  }
  /* (its indexes went with its last location) */
  free(o->inl);
  free(o->fail_detail);
  free(o->dig);
  obj_block_free(o);
}

void hpl__dtab_remove(hpl__dtab *t, hpl__dir_obj *o) {
  hash_del(t, o);
  index_del(t, o);
  if (o->is_inline) t->inline_bytes -= o->size;
  t->nobjs--;
  obj_free(t, o);
}

void hpl__dtab_gc(hpl__dtab *t, hpl__dir_obj *o) {
  if (o->state == HPL__OBJ_PENDING && !o->locs && !o->waiters && !o->watchers && !o->is_inline)
    hpl__dtab_remove(t, o);
}

int hpl__dtab_on_change(hpl__dtab *t, void (*fn)(hpl__dir_obj *o, void *arg), void *arg) {
  if (t->nsubs == HPL__DTAB_MAX_SUBS) return -1;
  t->on_change[t->nsubs].fn = fn;
  t->on_change[t->nsubs].arg = arg;
  t->nsubs++;
  return 0;
}

void hpl__dtab_changed(hpl__dtab *t, hpl__dir_obj *o) {
  for (int i = 0; i < t->nsubs; i++) t->on_change[i].fn(o, t->on_change[i].arg);
  hpl__dtab_gc(t, o);
}

void hpl__dtab_clear(hpl__dtab *t) {
  hpl__dir_obj *o = t->head[0];
  while (o) {
    hpl__dir_obj *next = hpl__dtab_next(o);
    obj_free(t, o);
    o = next;
  }
  free(t->ht[0]);
  free(t->ht[1]);
  hpl__dtab_node *n, *tmp;
  HASH_ITER(hh, t->nodes, n, tmp) {
    HASH_DEL(t->nodes, n);
    free(n->objs);
    free(n);
  }
  /* an empty table with the same settings and subscribers */
  const hpl__dtab keep = *t;
  hpl__dtab_init(t, keep.max_senders);
  t->usable = keep.usable;
  t->suspected = keep.suspected;
  t->crawling = keep.crawling;
  t->distrusted = keep.distrusted;
  t->usable_arg = keep.usable_arg;
  t->suspect_gen = keep.suspect_gen + 1;
  memcpy(t->on_change, keep.on_change, sizeof t->on_change);
  t->nsubs = keep.nsubs;
}
