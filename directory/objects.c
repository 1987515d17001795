/* objects.c - locations over the object table: copies added, completed,
 * re-reported, removed, unlisted, assigned a sender; a node's loss (see
 * objects.h; the table's storage is objtab.c, sender choice objpick.c). */
#include "objects.h"

#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "hoplite.h"

/* Every change below of a location's upstream, serving count or complete
 * flag is told to the object's indexes (objtab_ix.c). */
static void loc_release_upstream(hpl__dir_obj *o, hpl__dir_loc *l) {
  if (!l->upstream) return;
  hpl__dir_loc *up = hpl__dtab_loc(o, l->upstream);
  if (up && up->serving > 0) {
    up->serving--;
    hpl__dtab_idle_note(o, up);
  }
  if (!up && o->ix && o->ix->ndangle) o->ix->ndangle--;
  l->upstream = 0;
  hpl__dtab_links_changed(o);
}


static int obj_has_complete(const hpl__dir_obj *o) {
  for (const hpl__dir_loc *l = o->locs; l; l = l->next)
    if (l->complete && !l->unlisted) return 1;
  return 0;
}

static int obj_dead(const hpl__dir_obj *o) {
  return o->state == HPL__OBJ_LOST || o->state == HPL__OBJ_FAILED;
}

int hpl__dtab_ready(const hpl__dir_obj *o) {
  return o->state == HPL__OBJ_READY && (o->is_inline || obj_has_complete(o));
}

int hpl__dtab_add_loc(hpl__dtab *t, hpl__dir_obj *o, uint64_t node, uint64_t size, int complete,
                      int origin) {
  if (o->has_size && o->size != size && !obj_dead(o)) return HPL_EMISMATCH;
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  if (origin) {
    if (o->state == HPL__OBJ_READY && (o->is_inline || (l == NULL && o->locs) ||
                                       (l && !l->origin)))
      return HPL_EEXIST;
    if (obj_dead(o)) {
      /* a new put revives a lost id: forget the stale partial copies */
      hpl__dir_loc *n;
      while ((n = o->locs)) {
        DL_DELETE(o->locs, n);
        hpl__dtab_loc_free(t, o, n);
      }
      l = NULL;
    }
  }
  if (!l) {
    l = hpl__dtab_loc_new(t, o, node);
    if (!l) return HPL_ENOMEM;
  }
  if (origin) l->origin = 1;
  o->size = size;
  o->has_size = 1;
  if (complete && !l->complete) {
    l->complete = 1;
    hpl__dtab_idle_note(o, l);
    loc_release_upstream(o, l);
    if (!o->ready_seq) o->ready_seq = ++t->seq;
  }
  if (complete || origin) o->state = HPL__OBJ_READY;
  return 0;
}

int hpl__dtab_set_inline(hpl__dtab *t, hpl__dir_obj *o, uint8_t *data, uint64_t len) {
  if (o->state == HPL__OBJ_READY) return HPL_EEXIST;
  if (o->has_size && o->size != len && !obj_dead(o)) return HPL_EMISMATCH;
  free(o->inl);
  o->inl = data;
  o->is_inline = 1;
  o->size = len;
  o->has_size = 1;
  o->state = HPL__OBJ_READY;
  if (!o->ready_seq) o->ready_seq = ++t->seq;
  t->inline_bytes += len;
  return 0;
}

int hpl__dtab_loc_complete(hpl__dtab *t, hpl__dir_obj *o, uint64_t node, uint64_t size) {
  int first = !o->is_inline && !obj_has_complete(o);
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  if (!l) {
    if (o->has_size && o->size != size) return 0;
    l = hpl__dtab_loc_new(t, o, node);
    if (!l) return 0;
    o->size = size;
    o->has_size = 1;
  }
  if (l->complete) return 0;
  l->complete = 1;
  hpl__dtab_idle_note(o, l);
  loc_release_upstream(o, l);
  if (l->unlisted) return 0; /* its node's own get is done; it serves nobody */
  o->state = HPL__OBJ_READY;
  if (!o->ready_seq) o->ready_seq = ++t->seq;
  return first;
}

int hpl__dtab_loc_partial(hpl__dtab *t, hpl__dir_obj *o, uint64_t node, uint64_t size,
                          uint64_t upstream) {
  if (o->has_size && o->size != size) return HPL_EMISMATCH;
  if (upstream == node) return HPL_EINVAL;
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  if (!l && !(l = hpl__dtab_loc_new(t, o, node))) return HPL_ENOMEM;
  o->size = size;
  o->has_size = 1;
  if (l->complete) return 0;
  loc_release_upstream(o, l);
  l->upstream = upstream;
  hpl__dtab_links_changed(o);
  hpl__dir_loc *up = hpl__dtab_loc(o, upstream);
  if (up)
    up->serving++;
  else if (o->ix)
    o->ix->ndangle++;
  hpl__dtab_recount_serving(o, l);
  return 0;
}

void hpl__dtab_recount_serving(hpl__dir_obj *o, hpl__dir_loc *l) {
  uint32_t n = 0;
  for (const hpl__dir_loc *d = o->locs; d; d = d->next) n += d->upstream == l->node;
  l->serving = n;
  hpl__dtab_idle_note(o, l);
}

int hpl__dtab_loc_remove(hpl__dtab *t, hpl__dir_obj *o, uint64_t node) {
  hpl__dir_loc *d, *l = hpl__dtab_loc(o, node);
  if (!l) return 0;
  loc_release_upstream(o, l);
  /* copies pulling from this one lose their upstream */
  LL_FOREACH(o->locs, d)
    if (d->upstream == node) d->upstream = 0;
  hpl__dtab_links_changed(o);
  DL_DELETE(o->locs, l);
  hpl__dtab_loc_free(t, o, l);
  return 1;
}

uint64_t hpl__dtab_loc_unlist(hpl__dtab *t, hpl__dir_obj *o, uint64_t node,
                              void (*gone)(hpl__dir_obj *o, uint64_t receiver, void *arg),
                              void *arg) {
  (void)t;
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  if (!l) return 0;
  uint64_t up = l->upstream;
  l->unlisted = 1;
  loc_release_upstream(o, l);
  for (hpl__dir_loc *d = o->locs; d; d = d->next) {
    if (d->upstream != node) continue;
    d->upstream = 0;
    if (gone) gone(o, d->node, arg);
  }
  hpl__dtab_links_changed(o);
  l->serving = 0;
  hpl__dtab_idle_note(o, l);
  return up;
}

int hpl__dtab_depends_on(hpl__dir_obj *o, uint64_t from, uint64_t target) {
  uint64_t cur = from;
  /* a chain longer than the location list would be a cycle: stop there */
  for (uint32_t hops = 0; cur && hops <= o->nlocs; hops++) {
    if (cur == target) return 1;
    hpl__dir_loc *l = hpl__dtab_loc(o, cur);
    if (!l) return 0;
    cur = l->upstream;
  }
  return 0;
}

int hpl__dtab_check_lost(hpl__dtab *t, hpl__dir_obj *o) {
  (void)t;
  if (o->is_inline) return 0;
  if (o->state == HPL__OBJ_PENDING || o->state == HPL__OBJ_FAILED) return 0;
  for (hpl__dir_loc *l = o->locs; l; l = l->next)
    if ((l->complete || l->origin) && !l->unlisted) return 0;
  o->state = HPL__OBJ_LOST;
  return 1;
}

void hpl__dtab_release_upstream(hpl__dir_obj *o, uint64_t node) {
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  if (l) loc_release_upstream(o, l);
}

void hpl__dtab_node_unresponsive(hpl__dtab *t, uint64_t node,
                                 void (*down)(hpl__dir_obj *o, uint64_t receiver, void *arg),
                                 void *arg) {
  uint64_t n;
  hpl__dtab_suspicion_changed(t);
  hpl__dir_obj **v = hpl__dtab_node_objects(t, node, &n);
  for (uint64_t i = 0; v && i < n; i++) {
    hpl__dir_obj *o = v[i];
    hpl__dir_loc *me = hpl__dtab_loc(o, node);
    if (me) loc_release_upstream(o, me);
    for (hpl__dir_loc *l = o->locs; l; l = l->next)
      if (l->upstream == node && down) down(o, l->node, arg);
  }
}

int hpl__dtab_assign(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, hpl__dir_loc *from) {
  hpl__dir_loc *me = hpl__dtab_loc(o, asker);
  if (!me) {
    me = hpl__dtab_loc_new(t, o, asker);
    if (!me) return HPL_ENOMEM;
  } else {
    loc_release_upstream(o, me);
    hpl__dtab_links_changed(o); /* copies may pull from it */
  }
  me->complete = 0;
  hpl__dtab_idle_note(o, me);
  me->upstream = from->node;
  from->serving++;
  return 0;
}

void hpl__dtab_node_gone(hpl__dtab *t, uint64_t node,
                         void (*down)(hpl__dir_obj *o, uint64_t receiver, void *arg),
                         void (*fn)(hpl__dir_obj *o, void *arg), void *arg) {
  /* every object that names the node is in its index: a copy pulling from
   * the node pulls from a location the node has (removing a location clears
   * the upstream of its receivers) */
  uint64_t n;
  hpl__dir_obj **v;
  while ((v = hpl__dtab_node_objects(t, node, &n)) && n > 0) {
    hpl__dir_obj *o = v[n - 1];
    for (hpl__dir_loc *l = o->locs; l; l = l->next)
      if (l->upstream == node && l->node != node && down) down(o, l->node, arg);
    hpl__dtab_loc_remove(t, o, node); /* takes it out of the node's index */
    hpl__dtab_check_lost(t, o);
    if (fn) fn(o, arg);
  }
}

void hpl__dtab_forget(hpl__dtab *t, hpl__dir_obj *o) {
  while (o->locs) hpl__dtab_loc_remove(t, o, o->locs->node);
  if (o->is_inline) {
    t->inline_bytes -= o->size;
    free(o->inl);
    o->inl = NULL;
    o->is_inline = 0;
  }
  o->has_size = 0;
  o->size = 0;
  o->ready_seq = 0;
  o->publisher = 0;
  free(o->dig);
  o->dig = NULL;
  o->state = HPL__OBJ_PENDING;
  hpl__dtab_gc(t, o);
}
