/* reduce.c - the reduce module's requests and the events it hears (see
 * reduce.h): REDUCE (checks, a new reduce, an allreduce participant
 * joining, a restarted directory adopting the running tree), REDUCE_FAIL
 * (a slot's stream failed, went silent or crawls), REDUCE_DONE (a reduce
 * that ended while no directory knew it), object changes (sources that
 * became ready, a target that is complete) and a node's life. The
 * decisions are reduce_tree.c's and reduce_crawl.c's, the records
 * reduce_rec.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "ops.h"
#include "reduce_int.h"
#include "util.h"


void hpl__dir_reduce_on_done(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__ReduceEnd *m = (Hplpb__ReduceEnd *)f->msg;
  if (!m->rid || !hpl__id_valid(m->target)) return;
  hpl__dir_reduce *r = hpl__dir_reduce_find(s, m->target);
  if (r && r->rid == m->rid) return; /* adopted here: its own end goes out */
  if (hpl__dir_reduce_end_everywhere(s, m->rid, m->target, f->dc->node->id) != 1) return;
  s->ctr.reduce_done_notes++;
  HPL__LOG_INFO(
      "reduce '%s' (instance %016llx) finished at its sink %016llx while no directory knew "
      "it; its tasks end",
      m->target, (unsigned long long)m->rid, (unsigned long long)f->dc->node->id);
}

/* ------------------------------------------------------------------ requests */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int same_request(hpl__dir_reduce *r, Hplpb__ReduceReq *m, uint32_t k) {
  if (r->nsrc != m->n_sources || r->k != k || r->op != (int)m->op || r->dtype != (int)m->dtype ||
      r->src_off != m->src_offset || r->src_len != m->src_length)
    return 0;
  for (size_t i = 0; i < r->nsrc; i++)
    if (strcmp(r->src[i], m->sources[i]) != 0) return 0;
  return 1;
}

static void reduce_reply2(const hpl__dir_frame *f, int status, const char *detail, int joined,
                          uint64_t sink, int adopted) {
  Hplpb__ReduceRep m = HPLPB__REDUCE_REP__INIT;
  m.status = status;
  m.detail = (char *)(detail ? detail : "");
  m.joined = joined;
  m.sink_node = sink;
  m.adopted = adopted;
  hpl__conn_send(f->dc->c, HPL__MSG_REDUCE_REP, f->req, &m.base, NULL, 0, 0, NULL, NULL);
}

static void reduce_reply(const hpl__dir_frame *f, int status, const char *detail, int joined,
                         uint64_t sink) {
  reduce_reply2(f, status, detail, joined, sink, 0);
}

/* What is wrong with a reduce request for k of its sources (written into
 * detail), as a negative code; 0 if nothing is: a valid target, 1..65536
 * distinct valid sources other than the target, a known op and dtype, and
 * a source range in whole elements. */
static int request_check(Hplpb__ReduceReq *m, uint32_t k, char *detail, size_t dlen) {
  size_t n = m->n_sources;
  if (!hpl__id_valid(m->target) || n == 0 || n > 65536 || k > n || m->op > 3 ||
      !hpl_dtype_size((int)m->dtype)) {
    snprintf(detail, dlen, "bad reduce: need a valid target, 1..65536 sources, "
             "num_objects <= sources (%u > %zu?), a known op and dtype", k, n);
    return HPL_EINVAL;
  }
  size_t es = hpl_dtype_size((int)m->dtype);
  if (m->src_offset % es || m->src_length % es) {
    snprintf(detail, dlen, "bad reduce into '%s': the range (offset %llu, length %llu) is not "
             "in whole elements of %s (%zu bytes)", m->target,
             (unsigned long long)m->src_offset, (unsigned long long)m->src_length,
             hpl__dtype_name((int)m->dtype), es);
    return HPL_EINVAL;
  }
  char **sorted = malloc(n * sizeof *sorted);
  if (!sorted) {
    snprintf(detail, dlen, "out of memory");
    return HPL_ENOMEM;
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
    snprintf(detail, dlen, "bad reduce into '%s': %s", m->target, bad);
    return HPL_EINVAL;
  }
  return 0;
}

/* The sources ready already must agree in size (and fit the dtype and the
 * range). */
static int sizes_check(hpl__dir_server *s, Hplpb__ReduceReq *m, char *detail, size_t dlen) {
  uint64_t size = 0;
  int have = 0;
  for (size_t i = 0; i < m->n_sources; i++) {
    hpl__dir_obj *o = hpl__dtab_find(&s->tab, m->sources[i]);
    if (!dr_src_ready(o)) continue;
    int rc =
        hpl__dir_reduce_source_check(o, (int)m->dtype, m->src_offset, m->src_length, detail, dlen);
    if (rc) return rc;
    if (have && o->size != size) {
      snprintf(detail, dlen, "sources differ in size (%llu and %llu bytes, '%s')",
               (unsigned long long)size, (unsigned long long)o->size, o->id);
      return HPL_EMISMATCH;
    }
    size = o->size;
    have = 1;
  }
  return 0;
}

/* Trees of at most this many slots are adopted (matching the names costs
 * slots x sources comparisons on the loop); larger ones start over. */
#define DR_ADOPT_MAX 1024

/* A restarted directory takes over the tree the sink says is running
 * (m->adopt_*): it must name num_objects distinct sources of the request.
 * Returns 0 (r is adopted: its slots hold those sources) or -1. */
static int adopt(hpl__dir_reduce *r, Hplpb__ReduceReq *m) {
  if (m->n_adopt_sources != r->k || r->nsrc > DR_ADOPT_MAX ||
      !(r->slots = calloc(r->k, sizeof *r->slots)))
    return -1;
  for (uint32_t j = 0; j < r->k; j++) {
    size_t i = 0;
    while (i < r->nsrc && strcmp(r->src[i], m->adopt_sources[j]) != 0) i++;
    if (i == r->nsrc || r->src_state[i] == HPL__DR_IN_TREE) { /* unknown, or twice */
      for (size_t x = 0; x < r->nsrc; x++) hpl__dir_reduce_set_src(r, x, HPL__DR_WAITING);
      free(r->slots);
      r->slots = NULL;
      return -1;
    }
    hpl__dir_reduce_set_src(r, i, HPL__DR_IN_TREE);
    r->slots[j] = (hpl__dr_slot){.filled = 1, .src = (int)i};
  }
  r->nfilled = r->k;
  r->rid = m->adopt_rid;
  r->tgen = m->adopt_gen;
  hpl__dir_reduce_set_life(r, HPL__DR_ADOPTED);
  r->srv->ctr.reduces_adopted++;
  HPL__LOG_INFO("reduce '%s': adopted the running tree of the previous directory (%u sources)",
                r->target, r->k);
  return 0;
}

void hpl__dir_reduce_on_request(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__ReduceReq *m = (Hplpb__ReduceReq *)f->msg;
  char detail[400];
  size_t n = m->n_sources;
  uint32_t k = m->num_objects ? m->num_objects : (uint32_t)n;
  if (!f->dc->node) {
    reduce_reply(f, HPL_EINVAL, "reduce before REGISTER", 0, 0);
    return;
  }
  int rc = request_check(m, k, detail, sizeof detail);
  if (rc) {
    reduce_reply(f, rc, detail, 0, 0);
    return;
  }
  struct hpl__dir_reduces *st = s->reduces;
  if (st->before_start && st->before_start(s, m->target, st->before_start_arg)) {
    snprintf(detail, sizeof detail, "a ring allreduce into '%s' runs", m->target);
    reduce_reply(f, HPL_EEXIST, detail, 0, 0);
    return;
  }
  hpl__dir_reduce *r = hpl__dir_reduce_find(s, m->target);
  if (r) {
    if (same_request(r, m, k)) { /* an allreduce participant joins */
      r->joins++;
      reduce_reply(f, 0, NULL, 1, r->sink);
      return;
    }
    snprintf(detail, sizeof detail, "a different reduce into '%s' exists", m->target);
    reduce_reply(f, HPL_EEXIST, detail, 0, 0);
    return;
  }
  hpl__dir_obj *t = hpl__dtab_find(&s->tab, m->target);
  if (t && t->state != HPL__OBJ_PENDING) {
    snprintf(detail, sizeof detail, "object '%s' exists already", m->target);
    reduce_reply(f, HPL_EEXIST, detail, 0, 0);
    return;
  }
  if ((rc = sizes_check(s, m, detail, sizeof detail))) {
    reduce_reply(f, rc, detail, 0, 0);
    return;
  }
  hpl__dir_reduce_trim(s);
  if (!(r = hpl__dir_reduce_new(s, m, k, f->dc->node->id))) {
    reduce_reply(f, HPL_ENOMEM, "out of memory", 0, 0);
    return;
  }
  /* if the target id had waiters (gets before the reduce), they wait on */
  if (t) t->state = HPL__OBJ_PENDING;
  if (m->adopt_rid && adopt(r, m) == 0) {
    reduce_reply2(f, 0, NULL, 0, r->sink, 1);
    hpl__dir_reduce_send_all(r, HPL__MSG_REDUCE_ADOPTED, r->rid);
    return;
  }
  if (m->adopt_rid) {
    /* the old tree cannot be adopted: it ends everywhere, and the target's
     * bytes start over in a generation the sink has not seen */
    HPL__LOG_INFO("reduce '%s': the previous directory's tree is not adopted (%zu of %u sources "
                  "known); starting over", r->target, m->n_adopt_sources, r->k);
    hpl__dir_reduce_end_everywhere(s, m->adopt_rid, r->target, 0);
    r->tgen = m->adopt_gen + 1;
  }
  reduce_reply(f, 0, NULL, 0, r->sink);
  hpl__dir_reduce_arrive_ready(r);
}

/* Node n registered: it learns which running reduces a restarted
 * directory adopted (REDUCE_ADOPTED), so their tasks there go on, and
 * which old instances ended while it was away (REDUCE_END: its tasks of
 * those end; reduce_msg.c keeps them). */
static void node_registered(hpl__dir_server *s, hpl__dir_node *n) {
  hpl__dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces->by_target, r, tmp)
    if (r->life == HPL__DR_ADOPTED)
      hpl__dir_reduce_send_end_to(n, HPL__MSG_REDUCE_ADOPTED, r->rid, r->target);
  hpl__dir_reduce_tell_ends(s, n);
}

/* ------------------------------------------------------------------ object changes */

void hpl__dir_reduce_on_change(hpl__dir_obj *o, void *srv) {
  hpl__dir_server *s = srv;
  if (o->watchers && dr_src_ready(o)) {
    /* arrival handling may unwatch: walk a snapshot */
    hpl__dr_watch *head = o->watchers, *w;
    int n = 0;
    DL_COUNT(head, w, n);
    struct {
      hpl__dir_reduce *r;
      int idx;
    } v[n ? n : 1];
    n = 0;
    DL_FOREACH(head, w) v[n].r = w->r, v[n++].idx = w->idx;
    for (int i = 0; i < n; i++) hpl__dir_reduce_arrival(v[i].r, v[i].idx);
  }
  hpl__dir_reduce *r = hpl__dir_reduce_find(s, o->id);
  if (r && r->life != HPL__DR_DONE && !r->inline_mode && dr_src_ready(o))
    hpl__dir_reduce_finish(r, 0, NULL);
}

/* ------------------------------------------------------------------ a node's life */

/* Node `node` is gone (its tasks are void): reduces it sinks fail, its
 * slots are refilled. */
static void node_gone(hpl__dir_server *s, uint64_t node) {
  hpl__dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces->by_target, r, tmp) {
    if (r->life == HPL__DR_DONE) continue;
    if (r->sink == node) {
      hpl__dir_reduce_finish(r, HPL_ELOST, "the node producing the target is gone");
      continue;
    }
    if (!dr_tree_runs(r)) continue;
    for (uint32_t i = 0; i < r->k && r->life != HPL__DR_DONE; i++)
      if (r->slots[i].filled && r->slots[i].node == node)
        hpl__dir_reduce_slot_failed(r, (int)i, "node gone");
  }
}

/* Node `node`, judged unresponsive, answers again: reduces waiting for a
 * source they lost on it (no spare was left) take it back. */
static void node_back(hpl__dir_server *s, uint64_t node) {
  hpl__dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces->by_target, r, tmp) {
    if (!dr_tree_runs(r) || r->nfilled == r->k) continue;
    int lost_here = 0;
    for (size_t i = 0; i < r->nsrc && !lost_here; i++) {
      if (r->src_state[i] != HPL__DR_LOST) continue;
      hpl__dir_obj *o = hpl__dtab_find(&s->tab, r->src[i]);
      hpl__dir_loc *l = o ? hpl__dtab_loc(o, node) : NULL;
      lost_here = l && l->complete;
    }
    if (lost_here) {
      HPL__LOG_INFO("reduce '%s': node %016llx answers again; its sources count again", r->target,
                    (unsigned long long)node);
      hpl__dir_reduce_arrive_ready(r);
    }
  }
}

/* A silent report older than this no longer counts when the probe fails. */
#define DR_SILENT_FRESH_MS 1000

/* Node `node` did not answer a probe: the slots on it whose output was
 * reported silent lately are replaced now (not at the next report). */
static void node_unresponsive(hpl__dir_server *s, uint64_t node) {
  uint64_t now = hpl__now_ms();
  hpl__dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces->by_target, r, tmp) {
    if (!dr_tree_runs(r)) continue;
    for (uint32_t i = 0; i < r->k && r->life != HPL__DR_DONE; i++) {
      hpl__dr_slot *sl = &r->slots[i];
      if (!sl->filled || sl->node != node || !sl->silent_ms ||
          now - sl->silent_ms > DR_SILENT_FRESH_MS)
        continue;
      hpl__dir_reduce_slot_failed(r, (int)i, "its node does not answer");
      hpl__dir_reduce_end_task_at(r, node);
    }
  }
}

/* ------------------------------------------------------------------ failures */

void hpl__dir_reduce_on_fail(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__ReduceFailNote *m = (Hplpb__ReduceFailNote *)f->msg;
  hpl__dir_reduce *r = hpl__id_valid(m->target) ? hpl__dir_reduce_find(s, m->target) : NULL;
  if (m->sink) { /* the sink cannot make the target: nobody may wait for it */
    if (!r || r->life == HPL__DR_DONE || r->sink != f->dc->node->id || (m->rid && r->rid != m->rid))
      return;
    char why[400];
    snprintf(why, sizeof why, "the sink %016llx cannot make the target: %s",
             (unsigned long long)r->sink, m->detail ? m->detail : "");
    int st = m->status < 0 && m->status > -100 ? m->status : HPL_ENOMEM;
    hpl__dir_reduce_finish(r, st, why);
    return;
  }
  if (r && r->life == HPL__DR_ADOPTED && r->rid == m->rid) {
    /* where the adopted tree's slots run is unknown: a new tree */
    char why[300];
    snprintf(why, sizeof why, "%s reported by %016llx", m->silent ? "a silent stream" : "a failure",
             (unsigned long long)f->dc->node->id);
    hpl__dir_reduce_unadopt(r, why);
    return;
  }
  if (!r || r->life != HPL__DR_RUNNING || r->rid != m->rid || m->slot >= r->k) return;
  hpl__dr_slot *sl = &r->slots[m->slot];
  if (!sl->filled || sl->gen != m->gen) return; /* stale: that output was already replaced */
  if (m->silent) {
    /* only a slot whose node does not answer is replaced; one that does
     * waits for its own inputs, whose receivers report them */
    hpl__dir_node *n = hpl__dir_node_find(s, sl->node);
    uint64_t wait;
    s->ctr.silent_reports++;
    sl->silent_ms = hpl__now_ms();
    if (n && hpl__dir_node_verdict(s, n, f->dc->node->id, &wait) != HPL__DIR_SILENT) return;
    /* a verdict reached just now has replaced every slot of the node with
     * a fresh silent report (node_unresponsive), this one too:
     * its generation moved on, and failing it again would fail its new node */
    if (sl->gen != m->gen) return;
    uint64_t old = sl->node;
    hpl__dir_reduce_slot_failed(r, (int)m->slot, "its node does not answer");
    hpl__dir_reduce_end_task_at(r, old);
    return;
  }
  if (m->slow) {
    hpl__dir_reduce_crawl_report(r, (int)m->slot, f->dc->node->id, m->rate);
    return;
  }
  if (m->corrupt) {
    hpl__dir_reduce_slot_corrupt(r, (int)m->slot, f->dc->node->id, m->corrupt_unit, m->detail);
    return;
  }
  char why[300];
  snprintf(why, sizeof why, "reported by %016llx: %s", (unsigned long long)f->dc->node->id,
           m->detail ? m->detail : "");
  hpl__dir_reduce_slot_failed(r, (int)m->slot, why);
}

void hpl__dir_reduce_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg) {
  (void)arg;
  switch (e->type) {
    case HPL__DIR_NODE_TASKS_VOID: node_gone(s, e->id); break;
    case HPL__DIR_NODE_UNRESPONSIVE: node_unresponsive(s, e->id); break;
    case HPL__DIR_NODE_BACK: node_back(s, e->id); break;
    case HPL__DIR_NODE_WELCOMED: node_registered(s, e->node); break;
    default: break;
  }
}

void hpl__dir_reduce_free_all(hpl__dir_server *s) {
  if (!s->reduces) return;
  hpl__dir_reduce_free_ends(s);
  hpl__dir_reduce_free_recs(s);
}
