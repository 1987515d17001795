/* reduce_tree.c - the decisions of a reduce's tree (see reduce.h and
 * reduce_int.h): the plan made at the first arrival (or the reduce done
 * here when small), which slot an arriving source fills and on which node,
 * what replaces a failed slot (another copy of its source, a spare, a
 * source lost earlier) and what restarts with it, an adopted tree that
 * must start over, and the allreduce chain's sender. What the stores are
 * told is reduce_msg.c's; the records are reduce_rec.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "cost.h"
#include "digests.h"
#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "ops.h"
#include "reduce_int.h"
#include "util.h"
#include "xlog.h"

int hpl__dir_reduce_source_check(const hpl__dir_obj *o, int dtype, uint64_t off, uint64_t len,
                                 char *detail, size_t dlen) {
  size_t es = hpl_dtype_size(dtype);
  if (o->size % es) {
    snprintf(detail, dlen, "source '%s' has %llu bytes, not a multiple of %s (%zu)", o->id,
             (unsigned long long)o->size, hpl__dtype_name(dtype), es);
    return HPL_EMISMATCH;
  }
  if (off > o->size || len > o->size - off) {
    if (len)
      snprintf(detail, dlen, "the range [%llu, %llu) goes beyond source '%s' (%llu bytes)",
               (unsigned long long)off, (unsigned long long)off + len, o->id,
               (unsigned long long)o->size);
    else
      snprintf(detail, dlen, "the range's offset %llu is beyond source '%s' (%llu bytes)",
               (unsigned long long)off, o->id, (unsigned long long)o->size);
    return HPL_EINVAL;
  }
  return 0;
}

/* ------------------------------------------------------------------ arrivals */

/* Whether slot `slot` runs a task: its output is a stream, or it is the
 * root and writes the target at the sink itself. */
static int runs_task(hpl__dir_reduce *r, int slot) {
  return dr_slot_streams(r, slot) || (slot == r->plan.root && r->slots[slot].node == r->sink);
}


/* A node to run source `o`'s slot: one with a complete copy, preferring
 * `prefer`, then nodes not yet running a slot of this reduce. */
static int lied_here(const hpl__dir_reduce *r, uint64_t node) {
  for (uint32_t i = 0; i < r->nliars; i++)
    if (r->liars[i] == node) return 1;
  return 0;
}

static uint64_t pick_node(hpl__dir_reduce *r, hpl__dir_obj *o, uint64_t prefer) {
  uint64_t any = 0, fresh = 0;
  for (hpl__dir_loc *l = o->locs; l; l = l->next) {
    if (!l->complete || l->unlisted || !hpl__dir_node_find(r->srv, l->node)) continue;
    if (lied_here(r, l->node)) continue; /* its stream would fail again */
    if (l->node == prefer) return l->node;
    if (!any) any = l->node;
    int used = 0;
    for (uint32_t i = 0; i < r->k; i++) used |= r->slots[i].filled && r->slots[i].node == l->node;
    if (!used && !fresh) fresh = l->node;
  }
  return fresh ? fresh : any;
}

/* Put source i (object o) into the empty slot and tell the nodes concerned. */
static void slot_fill(hpl__dir_reduce *r, int slot, int i, hpl__dir_obj *o) {
  int root = r->plan.root;
  hpl__dr_slot *sl = &r->slots[slot];
  sl->filled = 1;
  sl->src = i;
  sl->silent_ms = 0;
  sl->corrupt = 0;
  sl->node = pick_node(r, o, slot == root ? r->sink : 0);
  hpl__dir_reduce_set_src(r, (size_t)i, HPL__DR_IN_TREE);
  r->nfilled++;
  HPL__LOG_DEBUG("reduce '%s': '%s' takes slot %d on %016llx", r->target, o->id, slot,
                 (unsigned long long)sl->node);
  /* the sink hears of the root, and again once every source is in */
  if (slot == root || (r->nfilled == r->k && r->slots[root].filled)) hpl__dir_reduce_send_sink(r);
  if (runs_task(r, slot)) hpl__dir_reduce_send_task(r, slot, 0);
  int p = r->plan.parent[slot];
  if (p >= 0 && r->slots[p].filled) hpl__dir_reduce_send_task(r, p, 0);
}

/* The first source arrived (object o): its size is the sources', its
 * range's the target's; plan the tree. Returns 0, or finishes r and
 * returns -1. */
static int plan(hpl__dir_reduce *r, hpl__dir_obj *o) {
  hpl__dir_server *s = r->srv;
  char detail[400];
  int rc = hpl__dir_reduce_source_check(o, r->dtype, r->src_off, r->src_len, detail, sizeof detail);
  if (rc) {
    hpl__dir_reduce_finish(r, rc, detail);
    return -1;
  }
  r->src_size = o->size;
  r->size = r->src_len ? r->src_len : o->size - r->src_off;
  /* the directory holds the sources then (their bytes at the offset are
   * combined here), and the result */
  r->inline_mode = r->size <= s->cfg.inline_max && r->src_size <= s->cfg.inline_max;
  s->ctr.reduces_inline += (uint64_t)r->inline_mode;
  double L = hpl__dir_cost_latency(s), B = hpl__dir_cost_bandwidth(s);
  if (hpl__plan_make((int)r->k, (double)r->size, L, B, &r->plan) != 0 ||
      !(r->slots = calloc(r->k, sizeof *r->slots))) {
    hpl__dir_reduce_finish(r, HPL_ENOMEM, "out of memory");
    return -1;
  }
  hpl__dir_reduce_set_life(r, HPL__DR_RUNNING);
  char range[80] = "";
  if (dr_slice(r))
    snprintf(range, sizeof range, " (bytes [%llu, %llu) of %llu)", (unsigned long long)r->src_off,
             (unsigned long long)(r->src_off + r->size), (unsigned long long)r->src_size);
  HPL__LOG_INFO("reduce '%s': %u of %zu sources, %llu bytes%s, %s %s, %s (%d-ary; L %.0f us, "
                "B %.0f MB/s)", r->target, r->k, r->nsrc, (unsigned long long)r->size, range,
                hpl__op_name(r->op), hpl__dtype_name(r->dtype),
                r->inline_mode ? "reduced at the directory"
                : r->plan.degree == 1 ? "chain"
                                 : "tree",
                r->plan.degree, L * 1e6, B / 1e6);
  return 0;
}

/* Inline mode: source i (object o, held by the directory) joins the
 * running result; the last one makes the target. */
static void arrival_inline(hpl__dir_reduce *r, int i, hpl__dir_obj *o) {
  hpl__dir_server *s = r->srv;
  hpl__dir_reduce_set_src(r, (size_t)i, HPL__DR_IN_TREE);
  if (!o->is_inline) {
    char detail[400];
    snprintf(detail, sizeof detail, "source '%s' is small but not held by the directory "
             "(its inline cache is full)", o->id);
    hpl__dir_reduce_finish(r, HPL_EUNAVAIL, detail);
    return;
  }
  if (!r->acc && !(r->acc = malloc(r->size ? r->size : 1))) {
    hpl__dir_reduce_finish(r, HPL_ENOMEM, "out of memory");
    return;
  }
  const uint8_t *bytes = o->inl + r->src_off; /* the range (sizes checked on arrival) */
  if (r->nfilled == 0)
    memcpy(r->acc, bytes, r->size);
  else
    hpl__reduce_apply(r->op, r->dtype, r->acc, bytes, r->size);
  hpl__dr_slot *sl = &r->slots[r->nfilled++];
  sl->filled = 1;
  sl->src = i;
  if (r->nfilled < r->k) return;
  hpl__dir_obj *t = hpl__dtab_get(&s->tab, r->target);
  uint8_t *res = r->acc;
  r->acc = NULL;
  int rc = t ? hpl__dtab_set_inline(&s->tab, t, res, r->size) : HPL_ENOMEM;
  if (rc) {
    free(res);
    hpl__dir_reduce_finish(r, rc, "cannot store the result");
    return;
  }
  hpl__dir_reduce_send_sink(r);
  hpl__dtab_changed(&s->tab, t);
  hpl__dir_reduce_finish(r, 0, NULL);
}

void hpl__dir_reduce_arrival(hpl__dir_reduce *r, int i) {
  hpl__dir_server *s = r->srv;
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, r->src[i]);
  if (r->life == HPL__DR_DONE ||
      (r->src_state[i] != HPL__DR_WAITING && r->src_state[i] != HPL__DR_LOST) || !dr_src_ready(o))
    return;
  /* a source lost to a failure counts again once a copy is back */
  if (r->src_state[i] == HPL__DR_LOST && !pick_node(r, o, 0)) return;
  r->arr_seq[i] = ++r->arrivals;
  if (r->life == HPL__DR_ADOPTED) return; /* the old directory's tree runs without it */
  if (r->life == HPL__DR_OPEN) {
    if (plan(r, o)) return;
  } else if (o->size != r->src_size) {
    char detail[400];
    snprintf(detail, sizeof detail, "source '%s' has %llu bytes, the others %llu", o->id,
             (unsigned long long)o->size, (unsigned long long)r->src_size);
    hpl__dir_reduce_finish(r, HPL_EMISMATCH, detail);
    return;
  }
  if (r->nfilled == r->k) {
    hpl__dir_reduce_set_src(r, (size_t)i, HPL__DR_SPARE);
    return;
  }
  if (r->inline_mode) {
    arrival_inline(r, i, o);
    return;
  }
  /* tree: the sink's own source takes the root; the others fill slots in
   * in-order as they arrive; the root takes the last place otherwise */
  int root = r->plan.root, slot = -1;
  hpl__dir_loc *at_sink = hpl__dtab_loc(o, r->sink);
  int sink_has = at_sink && at_sink->complete;
  if (sink_has && !r->slots[root].filled) {
    slot = root;
  } else {
    for (uint32_t c = 0; c < r->k; c++)
      if ((int)c != root && !r->slots[c].filled) {
        slot = (int)c;
        break;
      }
    if (slot < 0) slot = root;
  }
  slot_fill(r, slot, i, o);
}

static int cmp_ready(const void *a, const void *b, void *arg) {
  hpl__dir_reduce *r = arg;
  hpl__dir_obj *x = hpl__dtab_find(&r->srv->tab, r->src[*(const int *)a]);
  hpl__dir_obj *y = hpl__dtab_find(&r->srv->tab, r->src[*(const int *)b]);
  return x->ready_seq < y->ready_seq ? -1 : x->ready_seq > y->ready_seq;
}

void hpl__dir_reduce_arrive_ready(hpl__dir_reduce *r) {
  int ready[r->nsrc ? r->nsrc : 1];
  size_t nr = 0;
  for (size_t i = 0; i < r->nsrc; i++)
    if (dr_src_ready(hpl__dtab_find(&r->srv->tab, r->src[i]))) ready[nr++] = (int)i;
  /* sources ready already arrive in the order they became ready */
  qsort_r(ready, nr, sizeof *ready, cmp_ready, r);
  for (size_t i = 0; i < nr && r->life != HPL__DR_DONE; i++) hpl__dir_reduce_arrival(r, ready[i]);
}

/* ------------------------------------------------------------------ failures */

/* The target's partial copies elsewhere hold bytes of an older generation. */
static void target_restart(hpl__dir_reduce *r) {
  hpl__dir_obj *t = hpl__dtab_find(&r->srv->tab, r->target);
  if (!t) return;
  t->gen = r->tgen;
  hpl__dir_digests_restart(t);
  hpl__dir_loc *l, *next;
  LL_FOREACH_SAFE(t->locs, l, next) {
    if (l->node == r->sink || l->complete) continue;
    hpl__dir_xlog(r->srv, HPL__XFER_REMOVE, t->id, l->node, l->upstream);
    hpl__dtab_loc_remove(&r->srv->tab, t, l->node);
  }
}

/* A live node, other than slot f's, with a complete copy of its source
 * (0: none). Best the node of f's parent (f's output then stays on that
 * node, no link carries it), then one running no slot of this reduce
 * (its links carry nothing else of it), then any: there the slot's output
 * shares the uplink with the node's own slot's. */
uint64_t hpl__dir_reduce_other_copy(hpl__dir_reduce *r, int f) {
  hpl__dir_server *s = r->srv;
  hpl__dr_slot *sl = &r->slots[f];
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, r->src[sl->src]);
  int p = r->plan.parent[f];
  uint64_t parent = p >= 0 && r->slots[p].filled ? r->slots[p].node : 0, best = 0;
  int best_rank = 0;
  for (hpl__dir_loc *l = o ? o->locs : NULL; l; l = l->next) {
    if (!l->complete || l->unlisted || l->node == sl->node || !hpl__dir_node_find(s, l->node))
      continue;
    int busy = 0;
    for (uint32_t i = 0; i < r->k && !busy; i++)
      busy = (int)i != f && r->slots[i].filled && r->slots[i].node == l->node;
    int rank = l->node == parent ? 3 : busy ? 1 : 2;
    if (rank > best_rank) best_rank = rank, best = l->node;
  }
  return best;
}

/* The spare source that arrived first and has a copy on a live node (its
 * index, and its object in *obj), or -1. */
int hpl__dir_reduce_earliest_spare(hpl__dir_reduce *r, hpl__dir_obj **obj) {
  int best = -1;
  for (size_t i = 0; i < r->nsrc; i++)
    if (r->src_state[i] == HPL__DR_SPARE && (best < 0 || r->arr_seq[i] < r->arr_seq[best])) {
      hpl__dir_obj *c = hpl__dtab_find(&r->srv->tab, r->src[i]);
      if (c && pick_node(r, c, 0)) best = (int)i, *obj = c;
    }
  return best;
}

/* Last resort for an empty slot: a source taken out of the tree earlier
 * (its node crawled or did not answer, or its stream broke) whose copy is
 * still on a live node, other than source `except` (the one failing now);
 * the earliest to arrive. Its index and object in *obj, or -1. Without it
 * a second failure with no spare left the slot waiting for good. */
int hpl__dir_reduce_earliest_lost_held(hpl__dir_reduce *r, int except, hpl__dir_obj **obj) {
  int best = -1;
  for (size_t i = 0; i < r->nsrc; i++)
    if ((int)i != except && r->src_state[i] == HPL__DR_LOST &&
        (best < 0 || r->arr_seq[i] < r->arr_seq[best])) {
      hpl__dir_obj *c = hpl__dtab_find(&r->srv->tab, r->src[i]);
      if (c && dr_src_ready(c) && pick_node(r, c, 0)) best = (int)i, *obj = c;
    }
  return best;
}

/* Slot f (failed on node `old`) can resume on node `alt`, which holds
 * another copy of the same source: its parent runs a task on a live node
 * other than `old`, so the bytes of f's output the parent already has stay
 * right (the same sources, combined in the same order) and only the rest
 * is made again. The root's "parent" is the sink's pull of it (rdsink.c),
 * when neither node is the sink (a root at the sink writes the target
 * itself). */
static int can_resume(hpl__dir_reduce *r, int f, uint64_t old, uint64_t alt) {
  int p = r->plan.parent[f];
  if (!alt) return 0;
  if (p < 0) /* the root: the sink pulls it on, unless it would run at the sink */
    return alt != r->sink && old != r->sink;
  if (!r->slots[p].filled || r->slots[p].node == old) return 0;
  return hpl__dir_node_find(r->srv, r->slots[p].node) != NULL;
}

void hpl__dir_reduce_slot_corrupt(hpl__dir_reduce *r, int f, uint64_t reporter, uint64_t unit,
                                  const char *detail) {
  hpl__dir_server *s = r->srv;
  hpl__dr_slot *sl = &r->slots[f];
  if (r->life == HPL__DR_DONE || !sl->filled) return;
  s->ctr.corrupt_reports++;
  hpl__dir_node *n = hpl__dir_node_find(s, sl->node);
  if (n) n->corrupt_reports++;
  if (!lied_here(r, sl->node) && r->nliars < HPL__DIR_REDUCE_LIARS_MAX)
    r->liars[r->nliars++] = sl->node;
  char why[600];
  snprintf(why, sizeof why, "unit %llu of its stream failed its digest at %016llx (%s)",
           (unsigned long long)unit, (unsigned long long)reporter, detail ? detail : "");
  uint64_t alt = hpl__dir_reduce_other_copy(r, f);
  uint64_t old = sl->node;
  if (can_resume(r, f, old, alt)) {
    sl->corrupt = 0;
    hpl__dir_reduce_slot_failed(r, f, why); /* resumes on alt */
    hpl__dir_reduce_end_task_at(r, old);    /* (its output's pool memory goes) */
    return;
  }
  hpl__dir_obj *spare_obj = NULL;
  if (++sl->corrupt >= HPL__DIR_REDUCE_CORRUPT_MAX &&
      hpl__dir_reduce_earliest_spare(r, &spare_obj) >= 0) {
    /* the node keeps lying: a spare source takes the slot (the ancestors
     * start over, as for a failed node) */
    hpl__dir_reduce_slot_failed(r, f, why);
    hpl__dir_reduce_end_task_at(r, old);
    return;
  }
  if (sl->corrupt >= HPL__DIR_REDUCE_CORRUPT_MAX) {
    char d[800];
    snprintf(d, sizeof d,
             "node %016llx sent units of its reduce stream (slot %d, source '%s') that failed "
             "their digests %u times, and no other copy of that source can take over: %s",
             (unsigned long long)sl->node, f, r->src[sl->src], sl->corrupt, why);
    HPL__LOG_WARN("reduce '%s': %s", r->target, d);
    hpl__dir_reduce_finish(r, HPL_ECORRUPT, d);
    return;
  }
  HPL__LOG_WARN("reduce '%s': slot %d ('%s' on %016llx): %s; no other copy to resume from: "
                "its receiver pulls the stream again", r->target, f, r->src[sl->src],
                (unsigned long long)sl->node, why);
  if (f == r->plan.root)
    hpl__dir_reduce_send_sink(r);
  else
    hpl__dir_reduce_send_task(r, r->plan.parent[f], 0);
}

/* Slot f lost its node (dead) or its stream failed. If another copy of its
 * source can take it over where it stopped (can_resume), only the slot
 * gets a new generation: its new task starts at the byte its parent's
 * stream reached, and the parent pulls the rest from there. Otherwise give
 * the slot another copy of its source, else a spare source, else leave it
 * empty for the next arrival; every ancestor restarts from byte 0 (new
 * generation) since its partial result included the failed slot's output,
 * and so does the target (new generation: copies of the old bytes are
 * void). Messages go out in this order: the sink resets its target, the
 * refilled slot gets its task, then every ancestor gets its new task. */
void hpl__dir_reduce_slot_failed(hpl__dir_reduce *r, int f, const char *why) {
  hpl__dir_server *s = r->srv;
  hpl__dr_slot *sl = &r->slots[f];
  if (r->life == HPL__DR_DONE || !sl->filled) return;
  int root = r->plan.root;
  uint64_t old = sl->node;
  int src = sl->src;
  uint64_t alt = hpl__dir_reduce_other_copy(r, f);
  if (can_resume(r, f, old, alt)) {
    s->ctr.reduce_resumes++;
    HPL__LOG_WARN(
        "reduce '%s': slot %d ('%s' on %016llx) failed (%s); it resumes on %016llx, "
        "which holds another copy",
        r->target, f, r->src[src], (unsigned long long)old, why, (unsigned long long)alt);
    sl->gen++;
    sl->silent_ms = 0;
    sl->node = alt;
    if (runs_task(r, f)) hpl__dir_reduce_send_task(r, f, 1);
    if (f == root) /* the sink pulls the rest from alt */
      hpl__dir_reduce_send_sink(r);
    else /* the parent does */
      hpl__dir_reduce_send_task(r, r->plan.parent[f], 0);
    return;
  }
  s->ctr.reduce_resets++;
  HPL__LOG_WARN("reduce '%s': slot %d ('%s' on %016llx) failed (%s)", r->target, f, r->src[src],
                (unsigned long long)old, why);
  hpl__dir_xlog(s, HPL__XFER_RESET, r->target, old, 0);
  sl->gen++;
  sl->silent_ms = 0;
  for (int a = r->plan.parent[f]; a >= 0; a = r->plan.parent[a]) r->slots[a].gen++;
  r->tgen++;
  int refill = -1;
  hpl__dir_obj *ro = NULL;
  if (!alt) {
    hpl__dir_reduce_set_src(r, (size_t)src, HPL__DR_LOST);
    sl->filled = 0;
    r->nfilled--;
    refill = hpl__dir_reduce_earliest_spare(r, &ro);
    if (refill >= 0) {
      HPL__LOG_INFO("reduce '%s': spare '%s' replaces '%s'", r->target, r->src[refill],
                    r->src[src]);
    } else if ((refill = hpl__dir_reduce_earliest_lost_held(r, src, &ro)) >= 0) {
      s->ctr.reduce_lost_reused++;
      HPL__LOG_INFO("reduce '%s': no spare; '%s', out of the tree since an earlier failure, "
                    "replaces '%s'", r->target, r->src[refill], r->src[src]);
    } else {
      HPL__LOG_INFO("reduce '%s': slot %d waits for a source", r->target, f);
    }
  }
  /* 1. the sink drops the old bytes of the target (and learns the root if
   *    it is still in place); nobody may pull the old bytes any more */
  target_restart(r);
  hpl__dir_reduce_send_sink(r);
  /* 2. the failed slot again */
  if (alt) {
    sl->node = alt;
    if (f == root) hpl__dir_reduce_send_sink(r);
    if (runs_task(r, f)) hpl__dir_reduce_send_task(r, f, 0);
  } else if (refill >= 0) {
    slot_fill(r, f, refill, ro);
  }
  /* 3. every ancestor restarts */
  for (int a = r->plan.parent[f]; a >= 0; a = r->plan.parent[a])
    if (r->slots[a].filled && runs_task(r, a)) hpl__dir_reduce_send_task(r, a, 0);
}

void hpl__dir_reduce_unadopt(hpl__dir_reduce *r, const char *why) {
  hpl__dir_server *s = r->srv;
  HPL__LOG_WARN("reduce '%s': the adopted tree failed (%s); starting over", r->target, why);
  s->ctr.reduce_resets++;
  /* (kept for the nodes still to register: their tasks of it end too) */
  hpl__dir_reduce_end_everywhere(s, r->rid, r->target, 0);
  hpl__dir_reduce_set_life(r, HPL__DR_OPEN);
  r->rid = hpl__random_u64();
  r->tgen++;
  free(r->slots);
  r->slots = NULL;
  hpl__plan_free(&r->plan); /* (an adopted tree was never planned here) */
  r->nfilled = 0;
  for (size_t i = 0; i < r->nsrc; i++)
    if (r->src_state[i] != HPL__DR_LOST) hpl__dir_reduce_set_src(r, i, HPL__DR_WAITING);
  target_restart(r);
  hpl__dir_reduce_arrive_ready(r);
}

/* ------------------------------------------------------------------ allreduce */

/* Allreduce: the broadcast of the target runs along the reduce chain.
 * In a chain, slot i's reduce output goes to slot i+1. If slot i+1 also
 * pulls the target from slot i (and slot 0 from the sink), every host
 * sends to one host only and receives from one host only: the reduce and
 * the broadcast share each link without a second sender crowding a
 * receiver's port. Only for chains (large objects) with joined
 * participants, and only while waiting for the predecessor is short. */
int hpl__dir_reduce_ring_sender(hpl__dir_server *s, hpl__dir_obj *o, uint64_t asker, uint64_t avoid,
                                uint64_t since_ms, hpl__dir_loc **from) {
  hpl__dir_reduce *r = hpl__dir_reduce_find(s, o->id);
  /* (a plan of degree 1 was made: running, or done since) */
  if (!r || r->inline_mode || r->plan.degree != 1 || !r->slots || !r->joins ||
      (r->life == HPL__DR_DONE && r->status) || asker == r->sink || o->state != HPL__OBJ_READY)
    return 0;
  uint32_t i = 0;
  while (i < r->k && !(r->slots[i].filled && r->slots[i].node == asker)) i++;
  if (i == r->k) return 0;
  uint64_t pred = i == 0 ? r->sink : r->slots[i - 1].filled ? r->slots[i - 1].node : 0;
  if (!pred || pred == asker || pred == avoid) return 0;
  hpl__dir_loc *l = hpl__dtab_idle_sender(&s->tab, o, pred, asker);
  if (l) {
    *from = l;
    return 1;
  }
  if (hpl__dtab_loc(o, pred)) return 0; /* busy or unusable: the ordinary rule */
  /* the predecessor has not asked yet: wait for it, briefly */
  hpl__dir_node *n = hpl__dir_node_find(s, pred);
  if (n && n->conn && !n->draining && hpl__now_ms() < since_ms + HPL__DIR_RING_WAIT_MS) return 2;
  return 0;
}
