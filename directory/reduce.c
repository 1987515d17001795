/* reduce.c - reduce records: REDUCE requests (checks, a new reduce, an
 * allreduce participant joining), the watches on sources, finishing, the
 * finished reduces kept for a while, REDUCE_INFO waiters, and a reduce's
 * end when its target is deleted (see reduce.h; the tree itself is
 * reduce_tree.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "ops.h"
#include "reduce_int.h"
#include "ring.h"
#include "util.h"

/* Finished reduces are kept so hpl_reduce_sources and allreduce joins keep
 * working after the end, but only this many (oldest dropped first, when a
 * new reduce starts: never while a caller walks the reduces). */
#define DR_KEEP_FINISHED 4096
/* REDUCE_DONE notes kept for nodes that register later: how many, and for
 * how long (stores re-register within a few seconds of a restart; a store
 * later than that ends its orphans by their own timer) */
#define DR_AWAY_ENDS 32
#define DR_AWAY_END_MS 30000

/* A REDUCE_DONE note: reduce `rid` into `target` ended while no directory
 * knew it. */
typedef struct dir_away_end {
  uint64_t rid, at_ms; /* at_ms 0: an unused entry */
  char *target;        /* owned */
} dir_away_end;

dir_reduce *dr_find(dir_server *s, const char *target) {
  dir_reduce *r = NULL;
  HASH_FIND_STR(s->reduces, target, r);
  return r;
}

int dir_reduce_known(dir_server *s, const char *target) { return dr_find(s, target) != NULL; }

/* ------------------------------------------------------------------ source watches */

/* Watch source i (object o): its changes reach dir_reduce_check. Returns 0
 * or HPL_ENOMEM. */
static int watch_source(dir_reduce *r, int i, dir_obj *o) {
  dr_watch *w = calloc(1, sizeof *w);
  if (!w) return HPL_ENOMEM;
  w->r = r;
  w->idx = i;
  dr_watch *head = o->watchers;
  DL_PREPEND(head, w);
  o->watchers = head;
  return 0;
}

static void unwatch_sources(dir_reduce *r) {
  for (size_t i = 0; i < r->nsrc; i++) {
    dir_obj *o = dtab_find(&r->srv->tab, r->src[i]);
    if (!o) continue;
    dr_watch *head = o->watchers, *w, *tmp;
    DL_FOREACH_SAFE(head, w, tmp) {
      if (w->r != r) continue;
      DL_DELETE(head, w);
      free(w);
    }
    o->watchers = head;
    dtab_gc(&r->srv->tab, o);
  }
}

/* ------------------------------------------------------------------ info waiters */

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

/* Unlink an info waiter from its reduce and free it. */
static void info_drop(dr_info *w) {
  DL_DELETE(w->r->infos, w);
  w->dc->ninfos--;
  hpl__otimer_free(&w->timer, w);
}

static void info_timeout(void *owner) {
  dr_info *w = owner;
  char detail[360];
  snprintf(detail, sizeof detail, "reduce into '%s' did not finish in time (%u of %u sources ready)",
           w->r->target, w->r->nfilled, w->r->k);
  hpl__conn_reply(w->dc->c, w->req, HPL_ETIMEDOUT, detail);
  info_drop(w);
}

void dir_reduce_on_info(dir_server *s, const dir_frame *f) {
  Hplpb__IdReq *m = (Hplpb__IdReq *)f->msg;
  dir_reduce *r = dr_find(s, m->id);
  if (!r) {
    char detail[320];
    snprintf(detail, sizeof detail, "no reduce into '%s'", m->id);
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOTFOUND, detail);
    return;
  }
  if (r->done || m->timeout_ms == 0) {
    if (!r->done) {
      hpl__conn_reply(f->dc->c, f->req, HPL_ETIMEDOUT, "the reduce is still running");
      return;
    }
    info_answer(r, f->dc, f->req);
    return;
  }
  if (f->dc->ninfos >= HPL__MAX_WAITING_PER_PEER) {
    hpl__conn_reply(f->dc->c, f->req, HPL_EUNAVAIL, "too many REDUCE_INFO requests waiting");
    return;
  }
  dr_info *w = calloc(1, sizeof *w);
  if (!w) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  w->r = r;
  w->dc = f->dc;
  w->req = f->req;
  f->dc->ninfos++;
  DL_PREPEND(r->infos, w);
  if (m->timeout_ms > 0)
    hpl__otimer_start(s->loop, &w->timer, w, (uint64_t)m->timeout_ms, info_timeout);
}

void dir_reduce_conn_closed(dir_server *s, dir_conn *dc) {
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces, r, tmp) {
    dr_info *w, *wtmp;
    DL_FOREACH_SAFE(r->infos, w, wtmp) if (w->dc == dc) info_drop(w);
  }
}

/* ------------------------------------------------------------------ life cycle */

static void reduce_free(dir_reduce *r) {
  dir_server *s = r->srv;
  if (r->done) {
    DL_DELETE2(s->reduces_done, r, fin_prev, fin_next);
    s->nreduces_done--;
  }
  HASH_DEL(s->reduces, r);
  if (!r->done) unwatch_sources(r);
  while (r->infos) {
    dr_info *w = r->infos;
    hpl__conn_reply(w->dc->c, w->req, HPL_ECANCELED, "the reduce was dropped");
    info_drop(w);
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

/* Drop the oldest finished reduces beyond the cap. */
static void reduce_trim(dir_server *s) {
  while (s->nreduces_done > DR_KEEP_FINISHED && s->reduces_done) reduce_free(s->reduces_done);
}

void dr_finish(dir_reduce *r, int status, const char *detail) {
  if (r->done) return;
  dir_server *s = r->srv;
  r->done = 1;
  r->status = status;
  DL_APPEND2(s->reduces_done, r, fin_prev, fin_next);
  s->nreduces_done++;
  snprintf(r->detail, sizeof r->detail, "%s", detail ? detail : "");
  unwatch_sources(r);
  dr_send_end(r);
  while (r->infos) {
    dr_info *w = r->infos;
    info_answer(r, w->dc, w->req);
    info_drop(w);
  }
  free(r->acc);
  r->acc = NULL;
  if (status == 0) {
    LOG_INFO("reduce '%s' done: %u sources, %llu bytes, %d-ary tree, %llu ms", r->target, r->k,
             (unsigned long long)r->size, r->plan.degree,
             (unsigned long long)(hpl__now_ms() - r->start_ms));
    return;
  }
  LOG_WARN("reduce '%s' failed: %s", r->target, r->detail);
  /* gets of the target anywhere report the failure */
  dir_obj *o = dtab_get(&s->tab, r->target);
  if (o && o->state != OBJ_READY) {
    o->state = OBJ_FAILED;
    o->fail_status = status;
    free(o->fail_detail);
    o->fail_detail = strdup(r->detail);
    dtab_changed(&s->tab, o);
  }
}

void dir_reduce_target_deleted(dir_server *s, const char *target) {
  dir_ring_target_deleted(s, target);
  dir_reduce *r = dr_find(s, target);
  if (!r) return;
  if (!r->done) dr_finish(r, HPL_ECANCELED, "the target was deleted");
  reduce_free(r);
}

void dir_reduce_free_all(dir_server *s) {
  dir_ring_free_all(s);
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces, r, tmp) reduce_free(r);
  for (int i = 0; s->away_ends && i < DR_AWAY_ENDS; i++) free(s->away_ends[i].target);
  free(s->away_ends);
  s->away_ends = NULL;
}

/* REDUCE_END for a reduce that ended while no directory knew it, to node
 * `node` (its tasks of that reduce end; other reduces' tasks stay). */
static void send_away_end(dir_server *s, uint64_t node, const dir_away_end *e) {
  Hplpb__ReduceEnd m = HPLPB__REDUCE_END__INIT;
  m.rid = e->rid;
  m.target = e->target;
  m.detail = "";
  dir_node_send(s, node, HPL__MSG_REDUCE_END, 0, &m.base);
}

void dir_reduce_on_done(dir_server *s, const dir_frame *f) {
  Hplpb__ReduceEnd *m = (Hplpb__ReduceEnd *)f->msg;
  if (!m->rid || !hpl__id_valid(m->target)) return;
  dir_reduce *r = dr_find(s, m->target);
  if (r && r->rid == m->rid) return; /* adopted here: its own end goes out */
  if (!s->away_ends && !(s->away_ends = calloc(DR_AWAY_ENDS, sizeof *s->away_ends))) return;
  dir_away_end *e = &s->away_ends[0];
  for (int i = 0; i < DR_AWAY_ENDS; i++) {
    dir_away_end *x = &s->away_ends[i];
    if (x->at_ms && x->rid == m->rid) return; /* said already */
    if (x->at_ms < e->at_ms) e = x;            /* the oldest (or an unused) entry */
  }
  char *target = strdup(m->target);
  if (!target) return;
  free(e->target);
  *e = (dir_away_end){.rid = m->rid, .at_ms = hpl__now_ms(), .target = target};
  s->ctr.reduce_done_notes++;
  LOG_INFO("reduce '%s' (instance %016llx) finished at its sink %016llx while no directory knew "
           "it; its tasks end", m->target, (unsigned long long)m->rid,
           (unsigned long long)f->dc->node->id);
  dir_node *n, *tmp;
  DIR_NODES_ITER(s, n, tmp)
    if (n->conn && n->id != f->dc->node->id) send_away_end(s, n->id, e);
}

/* ------------------------------------------------------------------ requests */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int same_request(dir_reduce *r, Hplpb__ReduceReq *m, uint32_t k) {
  if (r->nsrc != m->n_sources || r->k != k || r->op != (int)m->op || r->dtype != (int)m->dtype ||
      r->src_off != m->src_offset || r->src_len != m->src_length)
    return 0;
  for (size_t i = 0; i < r->nsrc; i++)
    if (strcmp(r->src[i], m->sources[i]) != 0) return 0;
  return 1;
}

static void reduce_reply2(const dir_frame *f, int status, const char *detail, int joined,
                          uint64_t sink, int adopted) {
  Hplpb__ReduceRep m = HPLPB__REDUCE_REP__INIT;
  m.status = status;
  m.detail = (char *)(detail ? detail : "");
  m.joined = joined;
  m.sink_node = sink;
  m.adopted = adopted;
  hpl__conn_send(f->dc->c, HPL__MSG_REDUCE_REP, f->req, &m.base, NULL, 0, 0, NULL, NULL);
}

static void reduce_reply(const dir_frame *f, int status, const char *detail, int joined,
                         uint64_t sink) {
  reduce_reply2(f, status, detail, joined, sink, 0);
}

static int cmp_ready(const void *a, const void *b, void *arg) {
  dir_reduce *r = arg;
  dir_obj *x = dtab_find(&r->srv->tab, r->src[*(const int *)a]);
  dir_obj *y = dtab_find(&r->srv->tab, r->src[*(const int *)b]);
  return x->ready_seq < y->ready_seq ? -1 : x->ready_seq > y->ready_seq;
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

int dr_source_check(const dir_obj *o, int dtype, uint64_t off, uint64_t len, char *detail,
                    size_t dlen) {
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

/* The sources ready already must agree in size (and fit the dtype and the
 * range). */
static int sizes_check(dir_server *s, Hplpb__ReduceReq *m, char *detail, size_t dlen) {
  uint64_t size = 0;
  int have = 0;
  for (size_t i = 0; i < m->n_sources; i++) {
    dir_obj *o = dtab_find(&s->tab, m->sources[i]);
    if (!dr_src_ready(o)) continue;
    int rc = dr_source_check(o, (int)m->dtype, m->src_offset, m->src_length, detail, dlen);
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

/* A new reduce record for request m (not yet in the table), or NULL. */
static dir_reduce *reduce_new(dir_server *s, Hplpb__ReduceReq *m, uint32_t k, uint64_t sink) {
  size_t n = m->n_sources;
  dir_reduce *r = calloc(1, sizeof *r);
  if (!r || !(r->target = strdup(m->target)) || !(r->src = calloc(n, sizeof *r->src)) ||
      !(r->src_state = calloc(n, sizeof *r->src_state)) ||
      !(r->arr_seq = calloc(n, sizeof *r->arr_seq))) {
    if (r) {
      free(r->target);
      free(r->src);
      free(r->src_state);
      free(r);
    }
    return NULL;
  }
  r->srv = s;
  r->rid = hpl__random_u64();
  r->nsrc = n;
  r->k = k;
  r->op = (int)m->op;
  r->dtype = (int)m->dtype;
  r->src_off = m->src_offset;
  r->src_len = m->src_length;
  r->sink = sink;
  r->start_ms = hpl__now_ms();
  for (size_t i = 0; i < n; i++) {
    if ((r->src[i] = strdup(m->sources[i]))) continue;
    while (i > 0) free(r->src[--i]);
    free(r->target);
    free(r->src);
    free(r->src_state);
    free(r->arr_seq);
    free(r);
    return NULL;
  }
  return r;
}

/* A restarted directory takes over the tree the sink says is running
 * (m->adopt_*): it must name num_objects distinct sources of the request.
 * Returns 0 (r is adopted: its slots hold those sources) or -1. */
/* Trees of at most this many slots are adopted (matching the names costs
 * slots x sources comparisons on the loop); larger ones start over. */
#define DR_ADOPT_MAX 1024

static int adopt(dir_reduce *r, Hplpb__ReduceReq *m) {
  if (m->n_adopt_sources != r->k || r->nsrc > DR_ADOPT_MAX ||
      !(r->slots = calloc(r->k, sizeof *r->slots)))
    return -1;
  for (uint32_t j = 0; j < r->k; j++) {
    size_t i = 0;
    while (i < r->nsrc && strcmp(r->src[i], m->adopt_sources[j]) != 0) i++;
    if (i == r->nsrc || r->src_state[i] == DR_IN_TREE) { /* unknown, or twice */
      for (size_t x = 0; x < r->nsrc; x++) r->src_state[x] = DR_WAITING;
      free(r->slots);
      r->slots = NULL;
      return -1;
    }
    r->src_state[i] = DR_IN_TREE;
    r->slots[j] = (dr_slot){.filled = 1, .src = (int)i};
  }
  r->nfilled = r->k;
  r->rid = m->adopt_rid;
  r->tgen = m->adopt_gen;
  r->adopted = 1;
  r->srv->ctr.reduces_adopted++;
  LOG_INFO("reduce '%s': adopted the running tree of the previous directory (%u sources)",
           r->target, r->k);
  return 0;
}

void dir_reduce_on_request(dir_server *s, const dir_frame *f) {
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
  if (dir_ring_clash(s, m->target)) {
    snprintf(detail, sizeof detail, "a ring allreduce into '%s' runs", m->target);
    reduce_reply(f, HPL_EEXIST, detail, 0, 0);
    return;
  }
  dir_reduce *r = dr_find(s, m->target);
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
  dir_obj *t = dtab_find(&s->tab, m->target);
  if (t && t->state != OBJ_PENDING) {
    snprintf(detail, sizeof detail, "object '%s' exists already", m->target);
    reduce_reply(f, HPL_EEXIST, detail, 0, 0);
    return;
  }
  if ((rc = sizes_check(s, m, detail, sizeof detail))) {
    reduce_reply(f, rc, detail, 0, 0);
    return;
  }
  reduce_trim(s);
  if (!(r = reduce_new(s, m, k, f->dc->node->id))) {
    reduce_reply(f, HPL_ENOMEM, "out of memory", 0, 0);
    return;
  }
  HASH_ADD_KEYPTR(hh, s->reduces, r->target, strlen(r->target), r);
  /* if the target id had waiters (gets before the reduce), they wait on */
  if (t) t->state = OBJ_PENDING;
  for (size_t i = 0; i < n; i++) {
    dir_obj *o = dtab_get(&s->tab, r->src[i]);
    if (o) watch_source(r, (int)i, o);
  }
  if (m->adopt_rid && adopt(r, m) == 0) {
    reduce_reply2(f, 0, NULL, 0, r->sink, 1);
    dr_send_all(r, HPL__MSG_REDUCE_ADOPTED, r->rid);
    return;
  }
  if (m->adopt_rid) {
    /* the old tree cannot be adopted: it ends everywhere, and the target's
     * bytes start over in a generation the sink has not seen */
    LOG_INFO("reduce '%s': the previous directory's tree is not adopted (%zu of %u sources "
             "known); starting over", r->target, m->n_adopt_sources, r->k);
    dr_send_all(r, HPL__MSG_REDUCE_END, m->adopt_rid);
    r->tgen = m->adopt_gen + 1;
  }
  reduce_reply(f, 0, NULL, 0, r->sink);
  dr_arrive_ready(r);
}

void dr_arrive_ready(dir_reduce *r) {
  int ready[r->nsrc ? r->nsrc : 1];
  size_t nr = 0;
  for (size_t i = 0; i < r->nsrc; i++)
    if (dr_src_ready(dtab_find(&r->srv->tab, r->src[i]))) ready[nr++] = (int)i;
  /* sources ready already arrive in the order they became ready */
  qsort_r(ready, nr, sizeof *ready, cmp_ready, r);
  for (size_t i = 0; i < nr && !r->done; i++) dr_arrival(r, ready[i]);
}

/* Node `node` registered: it learns which running reduces a restarted
 * directory adopted (REDUCE_ADOPTED), so their tasks there go on, and
 * which ones finished while no directory knew (REDUCE_DONE notes). */
static void node_registered(dir_server *s, uint64_t node) {
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces, r, tmp) {
    if (r->done || !r->adopted) continue;
    Hplpb__ReduceEnd m = HPLPB__REDUCE_END__INIT;
    m.rid = r->rid;
    m.target = r->target;
    m.detail = "";
    dir_node_send(s, node, HPL__MSG_REDUCE_ADOPTED, 0, &m.base);
  }
  uint64_t now = hpl__now_ms();
  for (int i = 0; s->away_ends && i < DR_AWAY_ENDS; i++) {
    const dir_away_end *e = &s->away_ends[i];
    if (e->at_ms && now - e->at_ms < DR_AWAY_END_MS) send_away_end(s, node, e);
  }
}

size_t dir_reduce_running(dir_server *s, dir_reduce_view *out, size_t max) {
  uint64_t now = hpl__now_ms();
  size_t n = 0;
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces, r, tmp) {
    if (r->done) continue;
    if (n < max)
      out[n] = (dir_reduce_view){.target = r->target, .sink = r->sink, .joined = r->nfilled,
                                 .needed = r->k, .sources = (uint32_t)r->nsrc,
                                 .elapsed_ms = now - r->start_ms,
                                 .size = r->have_size ? r->size : 0};
    n++;
  }
  return n;
}

void dir_reduce_on_node(dir_server *s, const dir_node_event *e, void *arg) {
  (void)arg;
  switch (e->type) {
    case DIR_NODE_TASKS_VOID: dir_reduce_node_gone(s, e->id); break;
    case DIR_NODE_UNRESPONSIVE: dir_reduce_node_unresponsive(s, e->id); break;
    case DIR_NODE_BACK: dir_reduce_node_back(s, e->id); break;
    case DIR_NODE_WELCOMED: node_registered(s, e->id); break;
    default: break;
  }
}
