/* reduce.c - the directory's part of reduces: dynamic reduce trees.
 *
 * A reduce of `sources` into `target` at the sink node becomes a tree of
 * k = num_objects slots, planned (src/planner.c) when the first source is
 * ready and its size known. Slots are numbered in in-order and filled in
 * the order sources become ready, so the tree's in-order traversal is the
 * arrival order - with one exception: a source held by the sink takes the
 * root slot, so the result does not cross the sink's link twice. Later
 * sources are spares (subset reduce). Each slot with children runs a task
 * on the node holding its source; the directory tells it its children as
 * they are assigned. The root streams the result into the target at the
 * sink; the sink reports the target complete like any copy, which ends the
 * reduce. Objects of at most inline_max bytes are reduced here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "directory.h"
#include "hoplite.h"
#include "log.h"
#include "ops.h"
#include "planner.h"
#include "util.h"

typedef struct dir_reduce dir_reduce;

typedef struct dr_slot {
  int filled;
  int src;       /* index into sources */
  uint64_t node; /* where it runs */
  uint32_t gen;
} dr_slot;

typedef struct dr_info {
  struct dr_info *next;
  struct dir_reduce *r;
  dir_conn *dc;
  uint64_t req;
  uv_timer_t timer;
  int has_timer;
} dr_info;

/* A source watch: hangs off the source object's `watchers`. */
typedef struct dr_watch {
  struct dr_watch *next;
  struct dir_reduce *r;
  int idx;
} dr_watch;

struct dir_reduce {
  UT_hash_handle hh;
  dir_server *srv;
  uint64_t rid; /* this instance: stream keys and store tasks carry it */
  uint32_t tgen; /* generation of the target's bytes */
  uint64_t arrivals;
  uint64_t *arr_seq; /* per source: arrival order (0: not arrived) */
  char *target;
  char **src;
  size_t nsrc;
  int *src_state; /* 0 waiting, 1 in the tree, 2 spare, 3 lost to a failure */
  uint32_t k;
  int op, dtype;
  uint64_t sink;
  uint64_t size;
  int have_size;
  int inline_mode;
  uint8_t *acc; /* inline mode: running result */
  hpl__plan plan;
  int planned;
  dr_slot *slots;
  uint32_t nfilled;
  uint32_t joins; /* participants that joined (allreduce): they get the target */
  int done;   /* finished or failed */
  int status; /* 0 or the failure */
  char detail[320];
  dr_info *infos;
  uint64_t start_ms;
  struct dir_reduce *fin_next; /* finished reduces, oldest first */
};

/* Finished reduces are kept so hpl_reduce_sources and allreduce joins keep
 * working after the end, but only this many (oldest dropped first). */
#define DR_KEEP_FINISHED 4096
static dir_reduce *fin_head, *fin_tail;
static size_t fin_count;

static int src_ready(dir_obj *o) { return o && dtab_ready(o); }

/* ------------------------------------------------------------------ messages */

static void send_to_node(dir_server *s, uint64_t node, unsigned type, const ProtobufCMessage *m) {
  dir_node *n = dir_node_find(s, node);
  if (n && n->conn) hpl__conn_send(n->conn->c, type, 0, m, NULL, 0, 0, NULL, NULL);
}

/* What a parent pulls to get slot `c`'s output. */
static void child_info(dir_reduce *r, int c, Hplpb__ReduceChild *out, char *key, size_t klen) {
  dir_server *s = r->srv;
  dr_slot *sl = &r->slots[c];
  dir_node *n = dir_node_find(s, sl->node);
  hplpb__reduce_child__init(out);
  out->slot = (uint32_t)c;
  out->gen = sl->gen;
  out->node = sl->node;
  out->addr = n ? n->addr : "";
  out->port = n ? (uint32_t)n->port : 0;
  if (r->plan.nchild[c] == 0) {
    snprintf(key, klen, "%s", r->src[sl->src]);
    out->internal = 0;
  } else {
    snprintf(key, klen, "r:%llx.%u:%u:%s", (unsigned long long)r->rid, (unsigned)c, sl->gen,
             r->target);
    out->internal = 1;
  }
  out->key = key;
}

/* (Re)send slot `sl`'s task to its node, with every child known so far. */
static void send_task(dir_reduce *r, int slot) {
  dr_slot *sl = &r->slots[slot];
  int d = r->plan.degree, nc = r->plan.nchild[slot];
  Hplpb__ReduceChild ch[nc ? nc : 1];
  Hplpb__ReduceChild *chp[nc ? nc : 1];
  char keys[nc ? nc : 1][340];
  size_t n = 0;
  for (int i = 0; i < nc; i++) {
    int c = r->plan.child[slot * d + i];
    if (!r->slots[c].filled) continue;
    child_info(r, c, &ch[n], keys[n], sizeof keys[n]);
    ch[n].index = (uint32_t)i;
    chp[n] = &ch[n];
    n++;
  }
  Hplpb__ReduceTask t = HPLPB__REDUCE_TASK__INIT;
  t.rid = r->rid;
  t.target = r->target;
  t.slot = (uint32_t)slot;
  t.gen = sl->gen;
  t.source = r->src[sl->src];
  t.op = (uint32_t)r->op;
  t.dtype = (uint32_t)r->dtype;
  t.size = r->size;
  t.nchildren = (uint32_t)nc;
  t.n_children = n;
  t.children = chp;
  t.to_target = slot == r->plan.root && sl->node == r->sink;
  send_to_node(r->srv, sl->node, HPL__MSG_REDUCE_TASK, &t.base);
}

/* Tell the sink where the result comes from (the root slot is filled). */
static void send_sink(dir_reduce *r) {
  Hplpb__ReduceSink m = HPLPB__REDUCE_SINK__INIT;
  m.rid = r->rid;
  m.gen = r->tgen;
  m.target = r->target;
  m.size = r->size;
  Hplpb__ReduceChild root;
  char key[340];
  if (r->inline_mode) {
    m.fetch = 1;
  } else if (!r->slots[r->plan.root].filled) {
    /* no root yet (it failed): only the generation says "start over" */
  } else if (r->slots[r->plan.root].node == r->sink) {
    m.local = 1;
  } else {
    child_info(r, r->plan.root, &root, key, sizeof key);
    m.root = &root;
  }
  send_to_node(r->srv, r->sink, HPL__MSG_REDUCE_SINK, &m.base);
}

static void send_end(dir_reduce *r) {
  Hplpb__ReduceEnd m = HPLPB__REDUCE_END__INIT;
  m.rid = r->rid;
  m.target = r->target;
  m.status = r->status;
  m.detail = r->detail;
  /* every node that runs a slot, and the sink, once each */
  uint64_t sent[r->k + 1];
  size_t ns = 0;
  for (uint32_t i = 0; i <= r->k; i++) {
    uint64_t node = i < r->k ? (r->slots && r->slots[i].filled ? r->slots[i].node : 0) : r->sink;
    if (!node) continue;
    int dup = 0;
    for (size_t j = 0; j < ns; j++) dup |= sent[j] == node;
    if (dup) continue;
    sent[ns++] = node;
    send_to_node(r->srv, node, HPL__MSG_REDUCE_END, &m.base);
  }
}

/* ------------------------------------------------------------------ info waiters */

static void info_closed(uv_handle_t *h) { free(h->data); }

static void info_free(dr_info *w) {
  if (w->has_timer) {
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, info_closed);
  } else {
    free(w);
  }
}

static void info_unlink(dr_info *w) {
  for (dr_info **pp = &w->r->infos; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      return;
    }
}

static void info_answer(dir_reduce *r, dir_conn *dc, uint64_t req) {
  Hplpb__ReduceInfoRep m = HPLPB__REDUCE_INFO_REP__INIT;
  m.status = r->status;
  m.detail = r->detail;
  char *ids[r->k ? r->k : 1];
  size_t n = 0;
  for (uint32_t i = 0; r->slots && i < r->k; i++)
    if (r->slots[i].filled) ids[n++] = r->src[r->slots[i].src];
  m.n_sources = n;
  m.sources = ids;
  hpl__conn_send(dc->c, HPL__MSG_REDUCE_INFO_REP, req, &m.base, NULL, 0, 0, NULL, NULL);
}

static void info_timeout(uv_timer_t *t) {
  dr_info *w = t->data;
  char detail[360];
  snprintf(detail, sizeof detail, "reduce into '%s' did not finish in time (%u of %u sources ready)",
           w->r->target, w->r->nfilled, w->r->k);
  hpl__conn_reply(w->dc->c, w->req, HPL_ETIMEDOUT, detail);
  info_unlink(w);
  info_free(w);
}

/* ------------------------------------------------------------------ life cycle */

static dir_reduce *reduce_find(dir_server *s, const char *target) {
  dir_reduce *r = NULL;
  HASH_FIND_STR(s->reduces, target, r);
  return r;
}

static void unwatch_sources(dir_reduce *r) {
  for (size_t i = 0; i < r->nsrc; i++) {
    dir_obj *o = dtab_find(&r->srv->tab, r->src[i]);
    if (!o) continue;
    for (dr_watch **pp = (dr_watch **)&o->watchers; *pp;) {
      dr_watch *w = *pp;
      if (w->r == r) {
        *pp = w->next;
        free(w);
      } else {
        pp = &w->next;
      }
    }
    dtab_gc(&r->srv->tab, o);
  }
}

static void reduce_free(dir_reduce *r);

/* Drop the oldest finished reduces beyond the cap (not `keep`). */
static void reduce_trim(void) {
  while (fin_count > DR_KEEP_FINISHED && fin_head) reduce_free(fin_head);
}

/* The reduce is over: tell everyone, answer info requests. */
static void reduce_finish(dir_reduce *r, int status, const char *detail) {
  if (r->done) return;
  r->done = 1;
  r->status = status;
  r->fin_next = NULL;
  if (fin_tail) fin_tail->fin_next = r; else fin_head = r;
  fin_tail = r;
  fin_count++;
  snprintf(r->detail, sizeof r->detail, "%s", detail ? detail : "");
  unwatch_sources(r);
  send_end(r);
  while (r->infos) {
    dr_info *w = r->infos;
    r->infos = w->next;
    info_answer(r, w->dc, w->req);
    info_free(w);
  }
  free(r->acc);
  r->acc = NULL;
  if (status == 0) {
    reduce_trim();
    LOG_INFO("reduce '%s' done: %u sources, %llu bytes, %d-ary tree, %llu ms", r->target, r->k,
             (unsigned long long)r->size, r->plan.degree,
             (unsigned long long)(hpl__now_ms() - r->start_ms));
    return;
  }
  LOG_WARN("reduce '%s' failed: %s", r->target, r->detail);
  reduce_trim();
  /* gets of the target anywhere report the failure */
  dir_obj *o = dtab_get(&r->srv->tab, r->target);
  if (o && o->state != OBJ_READY) {
    o->state = OBJ_FAILED;
    o->fail_status = status;
    free(o->fail_detail);
    o->fail_detail = strdup(r->detail);
    dir_object_changed(r->srv, o);
  }
}

static void fin_unlink(dir_reduce *r) {
  for (dir_reduce **pp = &fin_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->fin_next)
    if (*pp == r) {
      *pp = r->fin_next;
      if (fin_tail == r) fin_tail = prev;
      fin_count--;
      return;
    }
}

static void reduce_free(dir_reduce *r) {
  dir_server *s = r->srv;
  if (r->done) fin_unlink(r);
  HASH_DEL(s->reduces, r);
  if (!r->done) unwatch_sources(r);
  while (r->infos) {
    dr_info *w = r->infos;
    r->infos = w->next;
    hpl__conn_reply(w->dc->c, w->req, HPL_ECANCELED, "the reduce was dropped");
    info_free(w);
  }
  for (size_t i = 0; i < r->nsrc; i++) free(r->src[i]);
  free(r->src);
  free(r->src_state);
  free(r->arr_seq);
  free(r->slots);
  free(r->acc);
  hpl__plan_free(&r->plan);
  free(r->target);
  free(r);
}

/* A node to run source `o`'s slot: one with a complete copy, preferring
 * `prefer`, then nodes not yet running a slot of this reduce. */
static uint64_t pick_node(dir_reduce *r, dir_obj *o, uint64_t prefer) {
  uint64_t any = 0, fresh = 0;
  for (dir_loc *l = o->locs; l; l = l->next) {
    if (!l->complete || !dir_node_find(r->srv, l->node)) continue;
    if (l->node == prefer) return l->node;
    if (!any) any = l->node;
    int used = 0;
    for (uint32_t i = 0; i < r->k; i++) used |= r->slots[i].filled && r->slots[i].node == l->node;
    if (!used && !fresh) fresh = l->node;
  }
  return fresh ? fresh : any;
}

static void slot_fill(dir_reduce *r, int slot, int i, dir_obj *o);
static void target_restart(dir_reduce *r);

/* Source i of r became ready. */
static void reduce_arrival(dir_reduce *r, int i) {
  dir_server *s = r->srv;
  dir_obj *o = dtab_find(&s->tab, r->src[i]);
  if (r->done || (r->src_state[i] != 0 && r->src_state[i] != 3) || !src_ready(o)) return;
  /* a source lost to a failure counts again once a copy is back */
  if (r->src_state[i] == 3 && !pick_node(r, o, 0)) return;
  r->arr_seq[i] = ++r->arrivals;
  size_t es = hpl_dtype_size(r->dtype);
  char detail[400];
  if (!r->have_size) {
    if (o->size % es) {
      snprintf(detail, sizeof detail, "source '%s' has %llu bytes, not a multiple of %s (%zu)",
               o->id, (unsigned long long)o->size, hpl__dtype_name(r->dtype), es);
      reduce_finish(r, HPL_EMISMATCH, detail);
      return;
    }
    r->size = o->size;
    r->have_size = 1;
    r->inline_mode = r->size <= s->cfg.inline_max;
    double L = dir_cost_latency(s), B = dir_cost_bandwidth(s);
    if (hpl__plan_make((int)r->k, (double)r->size, L, B, &r->plan) != 0 ||
        !(r->slots = calloc(r->k, sizeof *r->slots))) {
      reduce_finish(r, HPL_ENOMEM, "out of memory");
      return;
    }
    r->planned = 1;
    LOG_INFO("reduce '%s': %u of %zu sources, %llu bytes, %s %s, %s (%d-ary; L %.0f us, "
             "B %.0f MB/s)", r->target, r->k, r->nsrc, (unsigned long long)r->size,
             hpl__op_name(r->op), hpl__dtype_name(r->dtype),
             r->inline_mode ? "reduced at the directory"
             : r->plan.degree == 1 ? "chain"
                                   : "tree",
             r->plan.degree, L * 1e6, B / 1e6);
  } else if (o->size != r->size) {
    snprintf(detail, sizeof detail, "source '%s' has %llu bytes, the others %llu", o->id,
             (unsigned long long)o->size, (unsigned long long)r->size);
    reduce_finish(r, HPL_EMISMATCH, detail);
    return;
  }
  if (r->nfilled == r->k) {
    r->src_state[i] = 2; /* a spare */
    return;
  }
  if (r->inline_mode) {
    r->src_state[i] = 1;
    if (!o->is_inline) {
      snprintf(detail, sizeof detail, "source '%s' is small but not held by the directory "
               "(its inline cache is full)", o->id);
      reduce_finish(r, HPL_EUNAVAIL, detail);
      return;
    }
    if (!r->acc && !(r->acc = malloc(r->size ? r->size : 1))) {
      reduce_finish(r, HPL_ENOMEM, "out of memory");
      return;
    }
    if (r->nfilled == 0)
      memcpy(r->acc, o->inl, r->size);
    else
      hpl__reduce_apply(r->op, r->dtype, r->acc, o->inl, r->size);
    dr_slot *sl = &r->slots[r->nfilled++];
    sl->filled = 1;
    sl->src = i;
    if (r->nfilled < r->k) return;
    dir_obj *t = dtab_get(&s->tab, r->target);
    uint8_t *res = r->acc;
    r->acc = NULL;
    int rc = t ? dtab_set_inline(&s->tab, t, res, r->size) : HPL_ENOMEM;
    if (rc) {
      free(res);
      reduce_finish(r, rc, "cannot store the result");
      return;
    }
    send_sink(r);
    dir_object_changed(s, t);
    reduce_finish(r, 0, NULL);
    return;
  }
  /* tree: the sink's own source takes the root; the others fill slots in
   * in-order as they arrive; the root takes the last place otherwise */
  int root = r->plan.root, slot = -1;
  dir_loc *at_sink = dtab_loc(o, r->sink);
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

/* Put source i (object o) into the empty slot and tell the nodes concerned. */
static void slot_fill(dir_reduce *r, int slot, int i, dir_obj *o) {
  int root = r->plan.root;
  dr_slot *sl = &r->slots[slot];
  sl->filled = 1;
  sl->src = i;
  sl->node = pick_node(r, o, slot == root ? r->sink : 0);
  r->src_state[i] = 1;
  r->nfilled++;
  LOG_DEBUG("reduce '%s': '%s' takes slot %d on %016llx", r->target, o->id, slot,
            (unsigned long long)sl->node);
  if (slot == root) send_sink(r);
  if (r->plan.nchild[slot] > 0 || (slot == root && sl->node == r->sink)) send_task(r, slot);
  int p = r->plan.parent[slot];
  if (p >= 0 && r->slots[p].filled) send_task(r, p);
}

/* Called for every object change: sources that became ready, and the
 * target becoming complete. */
void dir_reduce_check(dir_server *s, dir_obj *o) {
  if (o->watchers && src_ready(o)) {
    /* arrival handling may unwatch: walk a snapshot */
    int n = 0;
    for (dr_watch *w = o->watchers; w; w = w->next) n++;
    struct {
      dir_reduce *r;
      int idx;
    } v[n ? n : 1];
    n = 0;
    for (dr_watch *w = o->watchers; w; w = w->next) v[n].r = w->r, v[n++].idx = w->idx;
    for (int i = 0; i < n; i++) reduce_arrival(v[i].r, v[i].idx);
  }
  dir_reduce *r = reduce_find(s, o->id);
  if (r && !r->done && !r->inline_mode && src_ready(o)) reduce_finish(r, 0, NULL);
}

/* ------------------------------------------------------------------ failures */

/* Slot f lost its node (dead) or its stream failed. Give the slot another
 * copy of its source, else a spare source, else leave it empty for the
 * next arrival; every ancestor restarts from byte 0 (new generation) since
 * its partial result included the failed slot's output, and so does the
 * target (new generation: copies of the old bytes are void).
 * Messages go out in this order: the sink resets its target, the refilled
 * slot gets its task, then every ancestor gets its new task. */
static void slot_failed(dir_reduce *r, int f, const char *why) {
  dir_server *s = r->srv;
  dr_slot *sl = &r->slots[f];
  if (r->done || !sl->filled) return;
  s->ctr.reduce_resets++;
  int root = r->plan.root;
  uint64_t old = sl->node;
  int src = sl->src;
  LOG_WARN("reduce '%s': slot %d ('%s' on %016llx) failed (%s)", r->target, f, r->src[src],
           (unsigned long long)old, why);
  dir_xlog(s, HPL__XFER_RESET, r->target, old, 0);
  sl->gen++;
  for (int a = r->plan.parent[f]; a >= 0; a = r->plan.parent[a]) r->slots[a].gen++;
  r->tgen++;
  /* another complete copy of the same source on a live node? */
  dir_obj *o = dtab_find(&s->tab, r->src[src]);
  uint64_t alt = 0;
  for (dir_loc *l = o ? o->locs : NULL; l && !alt; l = l->next)
    if (l->complete && l->node != old && dir_node_find(s, l->node)) alt = l->node;
  int refill = -1;
  dir_obj *ro = NULL;
  if (!alt) {
    r->src_state[src] = 3;
    sl->filled = 0;
    r->nfilled--;
    for (size_t i = 0; i < r->nsrc; i++) /* the earliest spare */
      if (r->src_state[i] == 2 && (refill < 0 || r->arr_seq[i] < r->arr_seq[refill])) {
        dir_obj *c = dtab_find(&s->tab, r->src[i]);
        if (c && pick_node(r, c, 0)) refill = (int)i, ro = c;
      }
    if (refill >= 0)
      LOG_INFO("reduce '%s': spare '%s' replaces '%s'", r->target, r->src[refill], r->src[src]);
    else
      LOG_INFO("reduce '%s': slot %d waits for a source", r->target, f);
  }
  /* 1. the sink drops the old bytes of the target (and learns the root if
   *    it is still in place); nobody may pull the old bytes any more */
  target_restart(r);
  send_sink(r);
  /* 2. the failed slot again */
  if (alt) {
    sl->node = alt;
    if (f == root) send_sink(r);
    if (r->plan.nchild[f] > 0 || (f == root && sl->node == r->sink)) send_task(r, f);
  } else if (refill >= 0) {
    slot_fill(r, f, refill, ro);
  }
  /* 3. every ancestor restarts */
  for (int a = r->plan.parent[f]; a >= 0; a = r->plan.parent[a])
    if (r->slots[a].filled && (r->plan.nchild[a] > 0 || (a == root && r->slots[a].node == r->sink)))
      send_task(r, a);
}

/* The target's partial copies elsewhere hold bytes of an older generation. */
static void target_restart(dir_reduce *r) {
  dir_obj *t = dtab_find(&r->srv->tab, r->target);
  if (!t) return;
  t->gen = r->tgen;
  for (dir_loc *l = t->locs, *next; l; l = next) {
    next = l->next;
    if (l->node == r->sink || l->complete) continue;
    dir_xlog(r->srv, HPL__XFER_REMOVE, t->id, l->node, l->upstream);
    dtab_loc_remove(&r->srv->tab, t, l->node);
  }
}

void dir_reduce_node_gone(dir_server *s, uint64_t node) {
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces, r, tmp) {
    if (r->done) continue;
    if (r->sink == node) {
      reduce_finish(r, HPL_ELOST, "the node producing the target is gone");
      continue;
    }
    if (!r->planned || r->inline_mode) continue;
    for (uint32_t i = 0; i < r->k && !r->done; i++)
      if (r->slots[i].filled && r->slots[i].node == node) slot_failed(r, (int)i, "node gone");
  }
}

void dir_reduce_on_fail(dir_server *s, dir_conn *dc, Hplpb__ReduceFailNote *m) {
  dir_reduce *r = hpl__id_valid(m->target) ? reduce_find(s, m->target) : NULL;
  if (!r || r->done || r->rid != m->rid || !r->planned || m->slot >= r->k) return;
  dr_slot *sl = &r->slots[m->slot];
  if (!sl->filled || sl->gen != m->gen) return; /* stale: that output was already replaced */
  char why[300];
  snprintf(why, sizeof why, "reported by %016llx: %s", (unsigned long long)dc->node->id,
           m->detail ? m->detail : "");
  slot_failed(r, (int)m->slot, why);
}

/* ------------------------------------------------------------------ requests */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int same_request(dir_reduce *r, Hplpb__ReduceReq *m, uint32_t k) {
  if (r->nsrc != m->n_sources || r->k != k || r->op != (int)m->op || r->dtype != (int)m->dtype)
    return 0;
  for (size_t i = 0; i < r->nsrc; i++)
    if (strcmp(r->src[i], m->sources[i]) != 0) return 0;
  return 1;
}

static void reduce_reply(dir_conn *dc, uint64_t req, int status, const char *detail, int joined,
                         uint64_t sink) {
  Hplpb__ReduceRep m = HPLPB__REDUCE_REP__INIT;
  m.status = status;
  m.detail = (char *)(detail ? detail : "");
  m.joined = joined;
  m.sink_node = sink;
  hpl__conn_send(dc->c, HPL__MSG_REDUCE_REP, req, &m.base, NULL, 0, 0, NULL, NULL);
}

static int cmp_ready(const void *a, const void *b, void *arg) {
  dir_reduce *r = arg;
  dir_obj *x = dtab_find(&r->srv->tab, r->src[*(const int *)a]);
  dir_obj *y = dtab_find(&r->srv->tab, r->src[*(const int *)b]);
  return x->ready_seq < y->ready_seq ? -1 : x->ready_seq > y->ready_seq;
}

void dir_reduce_on_request(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__ReduceReq *m) {
  char detail[400];
  size_t n = m->n_sources;
  uint32_t k = m->num_objects ? m->num_objects : (uint32_t)n;
  if (!dc->node) {
    reduce_reply(dc, req, HPL_EINVAL, "reduce before REGISTER", 0, 0);
    return;
  }
  if (!hpl__id_valid(m->target) || n == 0 || n > 65536 || k > n || m->op > 3 ||
      !hpl_dtype_size((int)m->dtype)) {
    snprintf(detail, sizeof detail, "bad reduce: need a valid target, 1..65536 sources, "
             "num_objects <= sources (%u > %zu?), a known op and dtype", k, n);
    reduce_reply(dc, req, HPL_EINVAL, detail, 0, 0);
    return;
  }
  /* valid, distinct ids, none of them the target */
  char **sorted = malloc(n * sizeof *sorted);
  if (!sorted) {
    reduce_reply(dc, req, HPL_ENOMEM, "out of memory", 0, 0);
    return;
  }
  memcpy(sorted, m->sources, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_str);
  const char *bad = NULL;
  for (size_t i = 0; i < n && !bad; i++) {
    if (!hpl__id_valid(sorted[i])) bad = "an invalid source id";
    else if (i && !strcmp(sorted[i], sorted[i - 1])) bad = "a source listed twice";
    else if (!strcmp(sorted[i], m->target)) bad = "the target among the sources";
  }
  free(sorted);
  if (bad) {
    snprintf(detail, sizeof detail, "bad reduce into '%s': %s", m->target, bad);
    reduce_reply(dc, req, HPL_EINVAL, detail, 0, 0);
    return;
  }
  dir_reduce *r = reduce_find(s, m->target);
  if (r) {
    if (same_request(r, m, k)) { /* an allreduce participant joins */
      r->joins++;
      reduce_reply(dc, req, 0, NULL, 1, r->sink);
      return;
    }
    snprintf(detail, sizeof detail, "a different reduce into '%s' exists", m->target);
    reduce_reply(dc, req, HPL_EEXIST, detail, 0, 0);
    return;
  }
  dir_obj *t = dtab_find(&s->tab, m->target);
  if (t && t->state != OBJ_PENDING) {
    snprintf(detail, sizeof detail, "object '%s' exists already", m->target);
    reduce_reply(dc, req, HPL_EEXIST, detail, 0, 0);
    return;
  }
  /* sizes known now must agree */
  uint64_t size = 0;
  int have = 0;
  size_t es = hpl_dtype_size((int)m->dtype);
  for (size_t i = 0; i < n; i++) {
    dir_obj *o = dtab_find(&s->tab, m->sources[i]);
    if (!src_ready(o)) continue;
    if (o->size % es) {
      snprintf(detail, sizeof detail, "source '%s' has %llu bytes, not a multiple of %s (%zu)",
               o->id, (unsigned long long)o->size, hpl__dtype_name((int)m->dtype), es);
      reduce_reply(dc, req, HPL_EMISMATCH, detail, 0, 0);
      return;
    }
    if (have && o->size != size) {
      snprintf(detail, sizeof detail, "sources differ in size (%llu and %llu bytes, '%s')",
               (unsigned long long)size, (unsigned long long)o->size, o->id);
      reduce_reply(dc, req, HPL_EMISMATCH, detail, 0, 0);
      return;
    }
    size = o->size;
    have = 1;
  }
  r = calloc(1, sizeof *r);
  if (!r || !(r->target = strdup(m->target)) || !(r->src = calloc(n, sizeof *r->src)) ||
      !(r->src_state = calloc(n, sizeof *r->src_state)) ||
      !(r->arr_seq = calloc(n, sizeof *r->arr_seq))) {
    if (r) {
      free(r->target);
      free(r->src);
      free(r->src_state);
      free(r);
    }
    reduce_reply(dc, req, HPL_ENOMEM, "out of memory", 0, 0);
    return;
  }
  r->srv = s;
  r->rid = hpl__random_u64();
  r->nsrc = n;
  r->k = k;
  r->op = (int)m->op;
  r->dtype = (int)m->dtype;
  r->sink = dc->node->id;
  r->start_ms = hpl__now_ms();
  for (size_t i = 0; i < n; i++) r->src[i] = strdup(m->sources[i]);
  HASH_ADD_KEYPTR(hh, s->reduces, r->target, strlen(r->target), r);
  /* if the target id had waiters (gets before the reduce), they wait on */
  if (t) t->state = OBJ_PENDING;
  int ready[n];
  size_t nr = 0;
  for (size_t i = 0; i < n; i++) {
    dir_obj *o = dtab_get(&s->tab, r->src[i]);
    dr_watch *w = calloc(1, sizeof *w);
    if (!o || !w) {
      free(w);
      continue;
    }
    w->r = r;
    w->idx = (int)i;
    w->next = o->watchers;
    o->watchers = w;
    if (src_ready(o)) ready[nr++] = (int)i;
  }
  reduce_reply(dc, req, 0, NULL, 0, r->sink);
  /* sources ready already arrive in the order they became ready */
  qsort_r(ready, nr, sizeof *ready, cmp_ready, r);
  for (size_t i = 0; i < nr && !r->done; i++) reduce_arrival(r, ready[i]);
}

/* Allreduce: the broadcast of the target runs along the reduce chain.
 * In a chain, slot i's reduce output goes to slot i+1. If slot i+1 also
 * pulls the target from slot i (and slot 0 from the sink), every host
 * sends to one host only and receives from one host only: the reduce and
 * the broadcast share each link without a second sender crowding a
 * receiver's port. Only for chains (large objects) with joined
 * participants, and only while waiting for the predecessor is short. */
int dir_reduce_ring_sender(dir_server *s, dir_obj *o, uint64_t asker, uint64_t avoid,
                           uint64_t since_ms, dir_loc **from) {
  dir_reduce *r = reduce_find(s, o->id);
  if (!r || r->inline_mode || !r->planned || !r->slots || r->plan.degree != 1 || !r->joins ||
      (r->done && r->status) || asker == r->sink || o->state != OBJ_READY)
    return 0;
  uint32_t i = 0;
  while (i < r->k && !(r->slots[i].filled && r->slots[i].node == asker)) i++;
  if (i == r->k) return 0;
  uint64_t pred = i == 0 ? r->sink : r->slots[i - 1].filled ? r->slots[i - 1].node : 0;
  if (!pred || pred == asker || pred == avoid) return 0;
  dir_loc *l = dtab_idle_sender(&s->tab, o, pred, asker);
  if (l) {
    *from = l;
    return 1;
  }
  if (dtab_loc(o, pred)) return 0; /* busy or unusable: the ordinary rule */
  /* the predecessor has not asked yet: wait for it, briefly */
  dir_node *n = dir_node_find(s, pred);
  if (n && n->conn && !n->draining && hpl__now_ms() < since_ms + DIR_RING_WAIT_MS) return 2;
  return 0;
}

void dir_reduce_on_info(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__IdReq *m) {
  dir_reduce *r = reduce_find(s, m->id);
  if (!r) {
    char detail[320];
    snprintf(detail, sizeof detail, "no reduce into '%s'", m->id);
    hpl__conn_reply(dc->c, req, HPL_ENOTFOUND, detail);
    return;
  }
  if (r->done || m->timeout_ms == 0) {
    if (!r->done) {
      hpl__conn_reply(dc->c, req, HPL_ETIMEDOUT, "the reduce is still running");
      return;
    }
    info_answer(r, dc, req);
    return;
  }
  dr_info *w = calloc(1, sizeof *w);
  if (!w) {
    hpl__conn_reply(dc->c, req, HPL_ENOMEM, "out of memory");
    return;
  }
  w->r = r;
  w->dc = dc;
  w->req = req;
  w->next = r->infos;
  r->infos = w;
  if (m->timeout_ms > 0) {
    uv_timer_init(s->loop, &w->timer);
    w->timer.data = w;
    w->has_timer = 1;
    uv_timer_start(&w->timer, info_timeout, (uint64_t)m->timeout_ms, 0);
  }
}

void dir_reduce_conn_closed(dir_server *s, dir_conn *dc) {
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces, r, tmp) {
    for (dr_info **pp = &r->infos; *pp;) {
      dr_info *w = *pp;
      if (w->dc == dc) {
        *pp = w->next;
        info_free(w);
      } else {
        pp = &w->next;
      }
    }
  }
}

void dir_reduce_target_deleted(dir_server *s, const char *target) {
  dir_reduce *r = reduce_find(s, target);
  if (!r) return;
  if (!r->done) reduce_finish(r, HPL_ECANCELED, "the target was deleted");
  reduce_free(r);
}

void dir_reduce_free_all(dir_server *s) {
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces, r, tmp) reduce_free(r);
}
