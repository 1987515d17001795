/* objtab.c - the directory's object table storage (see objects.h): compact
 * records (links, record and id in one allocation, the first location
 * inside), the id hash (chained, grown incrementally), the ordered index (a
 * skip list by id), the per-node index (each node's objects in a vector,
 * a location remembering its place, so a node's loss costs what it held),
 * a large object's indexes (its locations by node, its idle ones in a heap)
 * and the object change event's subscribers. objects.c builds locations
 * and sender choice on top. */
#include "objects.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"

/* A node's index: the objects it has a location in. */
typedef struct hpl__dtab_node {
  uint64_t node;
  UT_hash_handle hh;
  hpl__dir_obj **objs;
  uint64_t n, cap;
} hpl__dtab_node;

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

/* ------------------------------------------------------------------ a large object's indexes */

static size_t node_slot(uint64_t node, uint32_t mask) {
  return (size_t)((node * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

static void lh_put(hpl__dir_objix *ix, hpl__dir_loc *l) {
  size_t h = node_slot(l->node, ix->lh_mask);
  l->x->hn = ix->lh[h];
  ix->lh[h] = l;
}

/* The node hash at twice its size (without memory: the old one stays). */
static int lh_grow(hpl__dir_obj *o) {
  hpl__dir_objix *ix = o->ix;
  uint32_t cap = (ix->lh_mask + 1) * 2;
  hpl__dir_loc **nt = cap ? calloc(cap, sizeof *nt) : NULL;
  if (!nt) return -1;
  free(ix->lh);
  ix->lh = nt;
  ix->lh_mask = cap - 1;
  for (hpl__dir_loc *l = o->locs; l; l = l->next) lh_put(ix, l);
  return 0;
}

static void idle_drop(hpl__dir_objix *ix) {
  for (uint32_t i = 0; i < ix->nidle; i++) ix->idle[i]->ipos = 0;
  free(ix->idle);
  ix->idle = NULL;
  ix->nidle = ix->idle_cap = ix->idle_max = 0;
}

/* Drop o's indexes: lookups walk the list again, picks scan it. */
static void ix_drop(hpl__dir_obj *o) {
  if (!o->ix) return;
  idle_drop(o->ix);
  for (hpl__dir_loc *l = o->locs; l; l = l->next) {
    free(l->x);
    l->x = NULL;
  }
  free(o->ix->lh);
  free(o->ix);
  o->ix = NULL;
}

/* Build o's indexes (HPL__DTAB_LOC_INDEX_MIN copies): seqs in list order, the
 * node hash, ndangle. Without memory, none (tried again at the next copy). */
static void ix_build(hpl__dir_obj *o) {
  uint32_t cap = 64;
  while (cap < o->nlocs) cap *= 2;
  if (!(o->ix = calloc(1, sizeof *o->ix)) || !(o->ix->lh = calloc(cap, sizeof *o->ix->lh))) {
    free(o->ix);
    o->ix = NULL;
    return;
  }
  o->ix->lh_mask = cap - 1;
  o->ix->cgen = 1; /* a new summary (pgen 0) is stale */
  for (hpl__dir_loc *l = o->locs; l; l = l->next) {
    if (!(l->x = calloc(1, sizeof *l->x))) {
      ix_drop(o);
      return;
    }
    l->x->seq = o->ix->loc_seq++;
    lh_put(o->ix, l);
  }
  for (hpl__dir_loc *l = o->locs; l; l = l->next)
    o->ix->ndangle += l->upstream && !hpl__dtab_loc(o, l->upstream);
}

hpl__dir_loc *hpl__dtab_loc(hpl__dir_obj *o, uint64_t node) {
  if (o->ix) {
    for (hpl__dir_loc *l = o->ix->lh[node_slot(node, o->ix->lh_mask)]; l; l = l->x->hn)
      if (l->node == node) return l;
    return NULL;
  }
  for (hpl__dir_loc *l = o->locs; l; l = l->next)
    if (l->node == node) return l;
  return NULL;
}

/* The idle index's order: complete copies first, then the list's order. */
static int idle_before(const hpl__dir_loc *a, const hpl__dir_loc *b) {
  if (a->complete != b->complete) return a->complete;
  return a->x->seq < b->x->seq;
}

static void idle_set(hpl__dir_objix *ix, uint32_t i, hpl__dir_loc *l) {
  ix->idle[i] = l;
  l->ipos = i + 1;
}

static void idle_fix(hpl__dir_objix *ix, uint32_t i) {
  hpl__dir_loc *l = ix->idle[i];
  while (i > 0 && idle_before(l, ix->idle[(i - 1) / 2])) { /* up */
    idle_set(ix, i, ix->idle[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  for (;;) { /* down */
    uint32_t c = 2 * i + 1;
    if (c >= ix->nidle) break;
    if (c + 1 < ix->nidle && idle_before(ix->idle[c + 1], ix->idle[c])) c++;
    if (!idle_before(ix->idle[c], l)) break;
    idle_set(ix, i, ix->idle[c]);
    i = c;
  }
  idle_set(ix, i, l);
}

static void idle_del(hpl__dir_objix *ix, hpl__dir_loc *l) {
  uint32_t i = l->ipos - 1;
  l->ipos = 0;
  hpl__dir_loc *last = ix->idle[--ix->nidle];
  if (i == ix->nidle) return;
  idle_set(ix, i, last);
  idle_fix(ix, i);
}

void hpl__dtab_idle_note(hpl__dir_obj *o, hpl__dir_loc *l) {
  hpl__dir_objix *ix = o->ix;
  if (!ix || !ix->idle_max) return;
  if (l->ipos) {
    idle_fix(ix, l->ipos - 1);
    return;
  }
  if (l->serving >= ix->idle_max) return;
  if (ix->nidle == ix->idle_cap) {
    uint32_t cap = ix->idle_cap ? ix->idle_cap * 2 : 64;
    hpl__dir_loc **v = cap ? realloc(ix->idle, cap * sizeof *v) : NULL;
    if (!v) {
      idle_drop(ix);
      return;
    }
    ix->idle = v;
    ix->idle_cap = cap;
  }
  idle_set(ix, ix->nidle++, l);
  idle_fix(ix, ix->nidle - 1);
}

int hpl__dtab_idle_ready(hpl__dtab *t, hpl__dir_obj *o) {
  if (!o->ix) return 0;
  if (o->ix->idle_max == t->max_senders) return 1;
  idle_drop(o->ix);
  o->ix->idle_max = t->max_senders;
  for (hpl__dir_loc *l = o->locs; l && o->ix->idle_max; l = l->next) hpl__dtab_idle_note(o, l);
  return o->ix->idle_max != 0;
}

hpl__dir_loc *hpl__dtab_idle_take(hpl__dir_obj *o) {
  if (!o->ix || !o->ix->idle_max || o->ix->nidle == 0) return NULL;
  hpl__dir_loc *l = o->ix->idle[0];
  idle_del(o->ix, l);
  return l;
}

void hpl__dtab_links_changed(hpl__dir_obj *o) {
  if (!o->ix || ++o->ix->cgen != 0) return;
  /* wrapped: no summary may look current */
  for (hpl__dir_loc *l = o->locs; l; l = l->next) l->x->pgen = 0;
  o->ix->cgen = 1;
}

void hpl__dtab_suspicion_changed(hpl__dtab *t) { t->suspect_gen++; }

/* l joins o's indexes (built at HPL__DTAB_LOC_INDEX_MIN copies; dropped if
 * l's record cannot be had). */
static void ix_add(hpl__dir_obj *o, hpl__dir_loc *l) {
  if (!o->ix) {
    if (o->nlocs >= HPL__DTAB_LOC_INDEX_MIN) ix_build(o);
    return;
  }
  hpl__dir_objix *ix = o->ix;
  if (!(l->x = calloc(1, sizeof *l->x))) {
    ix_drop(o);
    return;
  }
  if ((l->x->seq = ix->loc_seq++) == UINT32_MAX) { /* renumber in list order */
    uint32_t k = 0;
    for (hpl__dir_loc *x = o->locs; x; x = x->next) x->x->seq = k++;
    ix->loc_seq = k;
    idle_drop(ix);
  }
  if (o->nlocs <= ix->lh_mask + 1 || lh_grow(o) != 0) lh_put(ix, l);
  hpl__dtab_idle_note(o, l);
  /* copies said to pull from this node (while it held none) now pull from
   * this location: chains through it changed */
  if (ix->ndangle) {
    uint32_t k = 0;
    for (hpl__dir_loc *x = o->locs; x; x = x->next) k += x->upstream == l->node;
    ix->ndangle -= k < ix->ndangle ? k : ix->ndangle;
    if (k) hpl__dtab_links_changed(o);
  }
}

/* l leaves o's indexes (dropped with its last location). */
static void ix_del(hpl__dir_obj *o, hpl__dir_loc *l) {
  if (!o->ix) return;
  if (l->ipos) idle_del(o->ix, l);
  hpl__dir_loc **pp = &o->ix->lh[node_slot(l->node, o->ix->lh_mask)];
  while (*pp && *pp != l) pp = &(*pp)->x->hn;
  if (*pp) *pp = l->x->hn;
  free(l->x);
  l->x = NULL;
  hpl__dtab_links_changed(o);
  if (o->nlocs == 1) ix_drop(o);
}

/* ------------------------------------------------------------------ the per-node index */

static hpl__dtab_node *node_find(hpl__dtab *t, uint64_t node) {
  hpl__dtab_node *n = NULL;
  HASH_FIND(hh, t->nodes, &node, sizeof node, n);
  return n;
}

uint64_t hpl__dtab_node_count(hpl__dtab *t, uint64_t node) {
  hpl__dtab_node *n = node_find(t, node);
  return n ? n->n : 0;
}

hpl__dir_obj **hpl__dtab_node_objects(hpl__dtab *t, uint64_t node, uint64_t *count) {
  hpl__dtab_node *n = node_find(t, node);
  *count = n ? n->n : 0;
  return n ? n->objs : NULL;
}

hpl__dir_loc *hpl__dtab_loc_new(hpl__dtab *t, hpl__dir_obj *o, uint64_t node) {
  hpl__dtab_node *n = node_find(t, node);
  if (!n) {
    if (!(n = calloc(1, sizeof *n))) return NULL;
    n->node = node;
    HASH_ADD(hh, t->nodes, node, sizeof n->node, n);
  }
  if (n->n == n->cap) {
    uint64_t cap = n->cap ? n->cap * 2 : 16;
    hpl__dir_obj **v = realloc(n->objs, cap * sizeof *v);
    if (!v) return NULL;
    n->objs = v;
    n->cap = cap;
  }
  hpl__dir_loc *l;
  if (!o->loc0_used) {
    l = &o->loc0;
    o->loc0_used = 1;
  } else if (!(l = malloc(sizeof *l))) {
    return NULL;
  }
  memset(l, 0, sizeof *l);
  l->node = node;
  l->nidx = (uint32_t)n->n;
  n->objs[n->n++] = o;
  DL_APPEND(o->locs, l);
  o->nlocs++;
  ix_add(o, l);
  return l;
}

void hpl__dtab_loc_free(hpl__dtab *t, hpl__dir_obj *o, hpl__dir_loc *l) {
  hpl__dtab_node *n = node_find(t, l->node);
  if (n && l->nidx < n->n && n->objs[l->nidx] == o) {
    /* the last entry takes its place; its location learns where it is */
    hpl__dir_obj *last = n->objs[--n->n];
    if (last != o || l->nidx != n->n) {
      n->objs[l->nidx] = last;
      hpl__dir_loc *x = hpl__dtab_loc(last, l->node);
      if (x) x->nidx = l->nidx;
    }
    if (n->n == 0) {
      HASH_DEL(t->nodes, n);
      free(n->objs);
      free(n);
    } else if (n->cap > 64 && n->n < n->cap / 4) {
      hpl__dir_obj **v = realloc(n->objs, (n->cap / 2) * sizeof *v);
      if (v) {
        n->objs = v;
        n->cap /= 2;
      }
    }
  }
  ix_del(o, l);
  o->nlocs--;
  if (l == &o->loc0)
    o->loc0_used = 0;
  else
    free(l);
}
