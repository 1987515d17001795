/* objtab_ix.c - the object table's indexes of locations (see objects.h):
 * the per-node index (each node's objects in a vector, a location
 * remembering its place, so a node's loss costs what it held) and a large
 * object's indexes (its locations by node, its idle ones in a heap). The
 * records, the id hash and the ordered index are objtab.c's. */
#include "objects.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "objtab_int.h"

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
