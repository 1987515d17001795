/* objpick.c - sender choice over an object's locations (see objects.h:
 * hpl__dtab_pick_sender, _pick_instead, _pick_bypass, _idle_sender,
 * _idle_complete): the rule as a scan of the copies, each chain resolved
 * once per pick, and the O(1) amortized pick for a new asker of a large
 * object, from its idle index and chain summaries (objtab_ix.c). A choice is
 * recorded with hpl__dtab_assign (objects.c). */
#include "objects.h"

#include <stdlib.h>
#include <string.h>

#include "hoplite.h"

/* A copy that can take one more receiver now: below the per-copy limit, on
 * a usable (live, not draining) node. */
static int loc_idle(const hpl__dtab *t, const hpl__dir_loc *l) {
  return !l->unlisted && l->serving < t->max_senders &&
         (!t->usable || t->usable(l->node, t->usable_arg));
}

/* A copy only worth using when nothing else can serve: it is the avoided
 * sender, pulls (transitively) from it, or from a suspected node, or is on
 * one. */
static int loc_last_resort(const hpl__dtab *t, hpl__dir_obj *o, const hpl__dir_loc *l,
                           uint64_t avoid) {
  uint64_t cur = l->node;
  for (uint32_t hops = 0; cur && hops <= o->nlocs; hops++) {
    if (cur == avoid || (t->suspected && t->suspected(cur, t->usable_arg))) return 1;
    const hpl__dir_loc *u = hpl__dtab_loc(o, cur);
    cur = u ? u->upstream : 0;
  }
  return 0;
}

/* One location's standing in a pick (pick_marks). */
typedef struct pick_mark {
  hpl__dir_loc *l;
  int32_t up;    /* the upstream's location (index), -1 if none listed */
  uint8_t state; /* 0 not seen, 1 being resolved, 2 resolved */
  uint8_t dep;   /* pulls (transitively) from the asker */
  uint8_t last;  /* a last-resort copy (loc_last_resort) */
} pick_mark;

static int bad_node(const hpl__dtab *t, uint64_t node, uint64_t avoid) {
  return node == avoid || (t->suspected && t->suspected(node, t->usable_arg));
}

/* Every location of o in list order, with what hpl__dtab_depends_on(o,
 * l->node, asker) and loc_last_resort(t, o, l, avoid) say of it, found in
 * one pass: each upstream is looked up once, in a table of o's locations
 * by node, and each chain is resolved once for all the locations on it.
 * Walking every chain from every location cost O(locations x depth) list
 * scans of O(locations) each per pick: a broadcast's chain of N receivers
 * took O(N^3) per decision (1 000 receivers asking at once: minutes of
 * the directory's CPU). A cycle (sender choice never makes one; a
 * re-report can) is judged as a walk goes round it. Returns the count, or
 * -1 without memory;
 * *out is the caller's to free. */
static int pick_marks(const hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid,
                      pick_mark **out) {
  int n = 0;
  for (hpl__dir_loc *l = o->locs; l; l = l->next) n++;
  size_t cap = 16;
  while (cap < 2 * (size_t)n) cap *= 2;
  pick_mark *m = calloc((size_t)n + 1, sizeof *m);
  int32_t *slot = malloc(cap * sizeof *slot), *stack = malloc(((size_t)n + 1) * sizeof *stack);
  if (!m || !slot || !stack) {
    free(m);
    free(slot);
    free(stack);
    return -1;
  }
  memset(slot, 0xff, cap * sizeof *slot);
  int i = 0;
  for (hpl__dir_loc *l = o->locs; l; l = l->next, i++) {
    m[i].l = l;
    size_t h = (size_t)((l->node * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
    while (slot[h] >= 0) h = (h + 1) & (cap - 1);
    slot[h] = i;
  }
  for (i = 0; i < n; i++) {
    uint64_t up = m[i].l->upstream;
    m[i].up = -1;
    if (!up) continue;
    size_t h = (size_t)((up * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
    for (; slot[h] >= 0; h = (h + 1) & (cap - 1))
      if (m[slot[h]].l->node == up) {
        m[i].up = slot[h];
        break;
      }
  }
  for (i = 0; i < n; i++) {
    /* down the chain to a resolved location (or its end), then back up */
    int top = 0, cur = i;
    while (cur >= 0 && m[cur].state == 0) {
      m[cur].state = 1;
      stack[top++] = cur;
      cur = m[cur].up;
    }
    if (cur >= 0 && m[cur].state == 1) {
      /* a cycle (only re-reports can make one), from cur to the top: every
       * member's chain goes round all of them, as hpl__dtab_depends_on and
       * loc_last_resort walk it */
      int first = top;
      uint8_t dep = 0, last = 0;
      do {
        pick_mark *k = &m[stack[--first]];
        dep |= k->l->node == asker;
        last |= bad_node(t, k->l->node, avoid);
      } while (stack[first] != cur);
      for (int j = first; j < top; j++) {
        m[stack[j]].dep = dep;
        m[stack[j]].last = last;
        m[stack[j]].state = 2;
      }
      top = first;
    }
    while (top > 0) {
      pick_mark *k = &m[stack[--top]];
      uint64_t up = k->l->upstream;
      const pick_mark *u = k->up >= 0 ? &m[k->up] : NULL; /* resolved by now */
      k->dep = k->l->node == asker || (up && (up == asker || (u && u->dep)));
      k->last = bad_node(t, k->l->node, avoid) ||
                (up && (u ? u->last : bad_node(t, up, avoid)));
      k->state = 2;
    }
  }
  free(slot);
  free(stack);
  *out = m;
  return n;
}

/* ------------------------------------------------------------------ the O(1) pick */
static int node_clean(const hpl__dtab *t, uint64_t node) {
  return node && !(t->suspected && t->suspected(node, t->usable_arg));
}

/* A summary that holds: current links, no node suspected since, and clean
 * (a chain found with a suspected node may be clean again: no call tells). */
static int summary_holds(const hpl__dtab *t, const hpl__dir_obj *o, const hpl__dir_loc *l) {
  const hpl__dir_locx *x = l->x;
  return x->pgen == o->ix->cgen && x->psusp == (uint32_t)t->suspect_gen && x->pclean;
}

/* l's chain summary (hpl__dir_locx.pend, pclean; o has its indexes) made
 * current: up the chain to a location whose summary holds (or the end), then
 * down, each made from its upstream's. A chain grows at its end: O(1) per
 * pick, O(depth) once after a link changed. -1 on a chain longer than the
 * list (a cycle, which sender choice never makes) or without memory. */
static int path_summary(hpl__dtab *t, hpl__dir_obj *o, hpl__dir_loc *l) {
  hpl__dir_loc *local[64], **stk = local;
  uint32_t n = 0, cap = 64;
  for (hpl__dir_loc *x = l; x && !summary_holds(t, o, x);) {
    if (n == o->nlocs) goto fail;
    if (n == cap) {
      hpl__dir_loc **v = malloc(2 * (size_t)cap * sizeof *v);
      if (!v) goto fail;
      memcpy(v, stk, cap * sizeof *v);
      if (stk != local) free(stk);
      stk = v;
      cap *= 2;
    }
    stk[n++] = x;
    x = x->upstream ? hpl__dtab_loc(o, x->upstream) : NULL;
  }
  while (n > 0) {
    hpl__dir_loc *x = stk[--n], *u = x->upstream ? hpl__dtab_loc(o, x->upstream) : NULL;
    x->x->pend = u ? u->x->pend : x->upstream;
    x->x->pclean = node_clean(t, x->node) &&
                   (u ? u->x->pclean : !x->upstream || node_clean(t, x->upstream));
    x->x->pgen = o->ix->cgen;
    x->x->psusp = (uint32_t)t->suspect_gen;
  }
  if (stk != local) free(stk);
  return 0;
fail:
  if (stk != local) free(stk);
  return -1;
}

#define PICK_FAST_LOOK 16 /* idle copies a fast pick looks at before it scans */

/* The copy pick's scan would choose as `best`, from the idle index, for a
 * new asker (no location of o: a copy depends on it only if its chain ends
 * naming it), no avoided sender, a large object. The index yields idle
 * copies in the scan's preference (complete first, then list order), each
 * judged as the scan would. NULL when it cannot tell (another case, a
 * suspected node on a chain, nothing good among the first PICK_FAST_LOOK
 * idle copies): the caller scans, deciding the same in O(copies). */
static hpl__dir_loc *pick_fast(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid) {
  if (avoid || !asker || !hpl__dtab_idle_ready(t, o) || hpl__dtab_loc(o, asker)) return NULL;
  if (t->suspected != t->suspect_seen || t->usable_arg != t->suspect_seen_arg) {
    t->suspect_seen = t->suspected; /* a filter installed or replaced */
    t->suspect_seen_arg = t->usable_arg;
    hpl__dtab_suspicion_changed(t);
  }
  hpl__dir_loc *seen[PICK_FAST_LOOK], *best = NULL;
  int n = 0;
  while (!best && n < PICK_FAST_LOOK) {
    hpl__dir_loc *l = hpl__dtab_idle_take(o);
    if (!l) break;
    if (l->serving >= t->max_senders) continue; /* busy now: leaves the index */
    seen[n++] = l;
    if (l->unlisted || (t->usable && !t->usable(l->node, t->usable_arg))) continue;
    if (path_summary(t, o, l) != 0) break;
    if (l->x->pend == asker) continue; /* pulls (transitively) from the asker */
    if (!l->x->pclean) break;          /* a last resort: the scan weighs those */
    if (t->distrusted && t->distrusted(l->node, t->usable_arg)) continue;
    best = l;
  }
  while (n > 0) hpl__dtab_idle_note(o, seen[--n]); /* back in: their room is there */
  return best;
}

/* hpl__dtab_pick_sender's choice; with `strict`, never a last-resort copy, and
 * 1 rather than a wait when no other copy is idle. */
static int pick(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid, int strict,
                uint64_t *sender) {
  if (o->state == HPL__OBJ_FAILED) return o->fail_status;
  if (o->state == HPL__OBJ_LOST || hpl__dtab_check_lost(t, o)) return HPL_ELOST;
  if (o->state == HPL__OBJ_PENDING) return 1;
  hpl__dir_loc *fast = pick_fast(t, o, asker, avoid);
  if (fast) {
    *sender = fast->node;
    return hpl__dtab_assign(t, o, asker, fast);
  }
  pick_mark *marks = NULL;
  int nm = pick_marks(t, o, asker, avoid, &marks);
  if (nm < 0) return HPL_ENOMEM;
  hpl__dir_loc *best = NULL, *fallback = NULL, *spare = NULL;
  int viable = 0, others = 0; /* a copy that could serve later, once idle; one not last-resort */
  for (int i = 0; i < nm; i++) {
    hpl__dir_loc *l = marks[i].l;
    if (l->node == asker || l->unlisted) continue;
    if (marks[i].dep) continue;
    viable = 1;
    int last = marks[i].last;
    others |= !last;
    if (!loc_idle(t, l)) continue;
    if (last) {
      if (!fallback || (l->complete && !fallback->complete)) fallback = l;
      continue;
    }
    if (t->distrusted && t->distrusted(l->node, t->usable_arg)) {
      if (!spare || (l->complete && !spare->complete)) spare = l;
      continue;
    }
    if (!best || (l->complete && !best->complete)) best = l;
    if (best->complete) break;
  }
  free(marks);
  if (!best && !strict) best = spare; /* rather than wait */
  if (strict && !best) return 1;
  /* a last-resort copy only if nothing else could ever serve */
  if (!best && fallback && !others) best = fallback;
  if (!best) {
    if (viable) return 1;
    hpl__dir_loc *self = hpl__dtab_loc(o, asker);
    if (self && (self->complete || self->origin)) return HPL_ESTATE;
    /* everything left pulls (transitively) from the asker */
    o->state = HPL__OBJ_LOST;
    return HPL_ELOST;
  }
  *sender = best->node;
  return hpl__dtab_assign(t, o, asker, best);
}

int hpl__dtab_pick_sender(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid,
                          uint64_t *sender) {
  return pick(t, o, asker, avoid, 0, sender);
}

int hpl__dtab_pick_instead(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid,
                           uint64_t *sender) {
  return pick(t, o, asker, avoid, 1, sender);
}

/* hpl__dtab_pick_bypass's order: an idle complete copy; an idle partial one
 * (one that moved off the slow node before us, or one ahead of it: it has
 * the bytes before ours and gets the rest at full speed); the slow node's
 * own sender (the slow node takes little of its bandwidth); then any, a
 * busy complete copy included. Several receivers behind a slow node that
 * report it at once so re-form their chain around it instead of all
 * sharing one complete copy's uplink (which made each a straggler in turn
 * at 1/n of the rate). */
static int bypass_rank(const hpl__dtab *t, const hpl__dir_loc *l, uint64_t slow_upstream) {
  /* a node that crawls itself (slow, or behind a slow node) comes last: when
   * a chain node slows, the receivers behind it all report at once, and one
   * moved onto another of them crawls on */
  int last = t->crawling && t->crawling(l->node, t->usable_arg) ? -4 : 0;
  if (t->distrusted && t->distrusted(l->node, t->usable_arg)) last -= 8;
  if (l->serving == 0) return last + (l->complete ? 3 : 2);
  return last + (l->node == slow_upstream ? 1 : 0);
}

int hpl__dtab_pick_bypass(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t slow,
                          uint64_t *sender) {
  hpl__dir_loc *best = NULL, *sl = hpl__dtab_loc(o, slow);
  uint64_t up = sl ? sl->upstream : 0;
  for (hpl__dir_loc *l = o->locs; l; l = l->next) {
    if (l->node == asker || l->unlisted || hpl__dtab_depends_on(o, l->node, asker)) continue;
    if (loc_last_resort(t, o, l, slow) || (t->usable && !t->usable(l->node, t->usable_arg)))
      continue;
    int rank = bypass_rank(t, l, up), brank = best ? bypass_rank(t, best, up) : -100;
    if (rank > brank || (rank == brank && l->serving < best->serving)) best = l;
  }
  if (!best) return 1;
  *sender = best->node;
  return hpl__dtab_assign(t, o, asker, best);
}

hpl__dir_loc *hpl__dtab_idle_sender(hpl__dtab *t, hpl__dir_obj *o, uint64_t node, uint64_t asker) {
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  if (!l || node == asker || !loc_idle(t, l)) return NULL;
  return hpl__dtab_depends_on(o, node, asker) ? NULL : l;
}

int hpl__dtab_idle_complete(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid) {
  for (hpl__dir_loc *l = o->locs; l; l = l->next) {
    if (l->node != asker && l->node != avoid && l->complete && loc_idle(t, l)) return 1;
  }
  return 0;
}
