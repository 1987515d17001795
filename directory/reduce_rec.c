/* reduce_rec.c - the reduce records (see reduce_int.h): the module's table
 * by target, a reduce's life, the watches on its sources, its end
 * (finishing, the finished reduces kept for a while, a deleted target),
 * REDUCE_INFO waiters, the view `hoplite status` shows, and finished
 * reduces a sink re-reports to a new directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "reduce_int.h"
#include "util.h"
#include "xlog.h"

/* Finished reduces are kept so hpl_reduce_sources and allreduce joins keep
 * working after the end, but only this many (oldest dropped first, when a
 * new reduce starts: never while a caller walks the reduces). */
#define DR_KEEP_FINISHED 4096

int hpl__dir_reduce_init(hpl__dir_server *s) {
  s->reduces = calloc(1, sizeof *s->reduces);
  return s->reduces ? 0 : HPL_ENOMEM;
}

void hpl__dir_reduce_before_start(hpl__dir_server *s,
                                  int (*fn)(hpl__dir_server *s, const char *target, void *arg),
                                  void *arg) {
  s->reduces->before_start = fn;
  s->reduces->before_start_arg = arg;
}

hpl__dir_reduce *hpl__dir_reduce_find(hpl__dir_server *s, const char *target) {
  hpl__dir_reduce *r = NULL;
  HASH_FIND_STR(s->reduces->by_target, target, r);
  return r;
}

int hpl__dir_reduce_known(hpl__dir_server *s, const char *target) {
  return hpl__dir_reduce_find(s, target) != NULL;
}

static const char *const life_names[] = {"open", "adopted", "running", "done"};
static const char *const src_names[] = {"waiting", "in the tree", "spare", "lost"};

void hpl__dir_reduce_set_life(hpl__dir_reduce *r, hpl__dr_life to) {
  if (r->life == to) return;
  HPL__LOG_DEBUG("reduce '%s': %s -> %s", r->target, life_names[r->life], life_names[to]);
  r->life = to;
}

void hpl__dir_reduce_set_src(hpl__dir_reduce *r, size_t i, hpl__dr_src to) {
  if (r->src_state[i] == to) return;
  HPL__LOG_DEBUG("reduce '%s': source '%s' %s -> %s", r->target, r->src[i],
                 src_names[r->src_state[i]], src_names[to]);
  r->src_state[i] = to;
}

/* ------------------------------------------------------------------ source watches */

/* Watch source i (object o): its changes reach hpl__dir_reduce_on_change.
 * Returns 0 or HPL_ENOMEM. */
static int watch_source(hpl__dir_reduce *r, int i, hpl__dir_obj *o) {
  hpl__dr_watch *w = calloc(1, sizeof *w);
  if (!w) return HPL_ENOMEM;
  w->r = r;
  w->idx = i;
  hpl__dr_watch *head = o->watchers;
  DL_PREPEND(head, w);
  o->watchers = head;
  return 0;
}

static void unwatch_sources(hpl__dir_reduce *r) {
  for (size_t i = 0; i < r->nsrc; i++) {
    hpl__dir_obj *o = hpl__dtab_find(&r->srv->tab, r->src[i]);
    if (!o) continue;
    hpl__dr_watch *head = o->watchers, *w, *tmp;
    DL_FOREACH_SAFE(head, w, tmp) {
      if (w->r != r) continue;
      DL_DELETE(head, w);
      free(w);
    }
    o->watchers = head;
    hpl__dtab_gc(&r->srv->tab, o);
  }
}

/* ------------------------------------------------------------------ info waiters */

static void info_answer(hpl__dir_reduce *r, hpl__dir_conn *dc, uint64_t req) {
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
static void info_drop(hpl__dr_info *w) {
  DL_DELETE(w->r->infos, w);
  w->dc->ninfos--;
  hpl__otimer_free(&w->timer, w);
}

static void info_timeout(void *owner) {
  hpl__dr_info *w = owner;
  char detail[360];
  snprintf(detail, sizeof detail,
           "reduce into '%s' did not finish in time (%u of %u sources ready)", w->r->target,
           w->r->nfilled, w->r->k);
  hpl__conn_reply(w->dc->c, w->req, HPL_ETIMEDOUT, detail);
  info_drop(w);
}

void hpl__dir_reduce_on_info(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__IdReq *m = (Hplpb__IdReq *)f->msg;
  hpl__dir_reduce *r = hpl__dir_reduce_find(s, m->id);
  if (!r) {
    char detail[320];
    snprintf(detail, sizeof detail, "no reduce into '%s'", m->id);
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOTFOUND, detail);
    return;
  }
  if (r->life == HPL__DR_DONE || m->timeout_ms == 0) {
    if (r->life != HPL__DR_DONE) {
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
  hpl__dr_info *w = calloc(1, sizeof *w);
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

void hpl__dir_reduce_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc) {
  hpl__dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces->by_target, r, tmp) {
    hpl__dr_info *w, *wtmp;
    DL_FOREACH_SAFE(r->infos, w, wtmp) if (w->dc == dc) info_drop(w);
  }
}

/* ------------------------------------------------------------------ life cycle */

hpl__dir_reduce *hpl__dir_reduce_new(hpl__dir_server *s, Hplpb__ReduceReq *m, uint32_t k,
                                     uint64_t sink) {
  size_t n = m->n_sources;
  hpl__dir_reduce *r = calloc(1, sizeof *r);
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
  HASH_ADD_KEYPTR(hh, s->reduces->by_target, r->target, strlen(r->target), r);
  for (size_t i = 0; i < n; i++) {
    hpl__dir_obj *o = hpl__dtab_get(&s->tab, r->src[i]);
    if (o) watch_source(r, (int)i, o);
  }
  return r;
}

static void reduce_free(hpl__dir_reduce *r) {
  struct hpl__dir_reduces *st = r->srv->reduces;
  if (r->life == HPL__DR_DONE) {
    DL_DELETE2(st->done, r, fin_prev, fin_next);
    st->ndone--;
  }
  HASH_DEL(st->by_target, r);
  if (r->life != HPL__DR_DONE) unwatch_sources(r);
  while (r->infos) {
    hpl__dr_info *w = r->infos;
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

void hpl__dir_reduce_trim(hpl__dir_server *s) {
  struct hpl__dir_reduces *st = s->reduces;
  while (st->ndone > DR_KEEP_FINISHED && st->done) reduce_free(st->done);
}

/* The reduce failed: gets of its target anywhere report the failure,
 * unless a complete copy of it exists. The sink's copy was partial (its
 * origin location made the object READY), and so are the copies receivers
 * pull from it or from each other: none of them can finish. Their
 * locations go (a receiver pulling one is told its sender is gone, so its
 * store asks again at once and gets the failure instead of waiting for a
 * stream that stalls), the generation moves on (a copy of the failed one
 * is void) and the object is FAILED: waiting ACQUIREs and PEEKs are
 * answered now (hpl__dtab_changed). */
static void target_failed(hpl__dir_reduce *r, int status) {
  hpl__dir_server *s = r->srv;
  hpl__dir_obj *o = hpl__dtab_get(&s->tab, r->target);
  if (!o || hpl__dtab_ready(o)) return;
  char why[sizeof r->detail + HPL_ID_MAX + 32];
  snprintf(why, sizeof why, "reduce '%s' failed: %s", r->target, r->detail);
  o->state = HPL__OBJ_FAILED;
  o->fail_status = status;
  free(o->fail_detail);
  o->fail_detail = strdup(why);
  o->gen++;
  hpl__dir_loc *l, *next;
  LL_FOREACH_SAFE(o->locs, l, next) {
    if (l->complete) continue;
    uint64_t node = l->node, up = l->upstream;
    hpl__dir_xlog(s, HPL__XFER_REMOVE, o->id, node, up);
    hpl__dtab_loc_remove(&s->tab, o, node);
    if (!up || node == r->sink) continue;
    Hplpb__UpstreamNote u = HPLPB__UPSTREAM_NOTE__INIT;
    u.id = o->id;
    u.peer = up;
    hpl__dir_node_send(s, node, HPL__MSG_UPSTREAM_GONE, 0, &u.base);
  }
  hpl__dtab_changed(&s->tab, o);
}

void hpl__dir_reduce_finish(hpl__dir_reduce *r, int status, const char *detail) {
  if (r->life == HPL__DR_DONE) return;
  hpl__dir_server *s = r->srv;
  int adopted = r->life == HPL__DR_ADOPTED;
  hpl__dir_reduce_set_life(r, HPL__DR_DONE);
  r->status = status;
  DL_APPEND2(s->reduces->done, r, fin_prev, fin_next);
  s->reduces->ndone++;
  snprintf(r->detail, sizeof r->detail, "%s", detail ? detail : "");
  unwatch_sources(r);
  hpl__dir_reduce_send_end(r, adopted);
  while (r->infos) {
    hpl__dr_info *w = r->infos;
    info_answer(r, w->dc, w->req);
    info_drop(w);
  }
  free(r->acc);
  r->acc = NULL;
  if (status == 0) {
    HPL__LOG_INFO("reduce '%s' done: %u sources, %llu bytes, %d-ary tree, %llu ms", r->target, r->k,
                  (unsigned long long)r->size, r->plan.degree,
                  (unsigned long long)(hpl__now_ms() - r->start_ms));
    return;
  }
  HPL__LOG_WARN("reduce '%s' failed: %s", r->target, r->detail);
  target_failed(r, status);
}

void hpl__dir_reduce_target_deleted(hpl__dir_server *s, const char *target) {
  hpl__dir_reduce *r = hpl__dir_reduce_find(s, target);
  if (!r) return;
  if (r->life != HPL__DR_DONE) hpl__dir_reduce_finish(r, HPL_ECANCELED, "the target was deleted");
  reduce_free(r);
}

size_t hpl__dir_reduce_running(hpl__dir_server *s, hpl__dir_reduce_view *out, size_t max) {
  uint64_t now = hpl__now_ms();
  size_t n = 0;
  hpl__dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces->by_target, r, tmp) {
    if (r->life == HPL__DR_DONE) continue;
    if (n < max)
      out[n] = (hpl__dir_reduce_view){.target = r->target, .sink = r->sink, .joined = r->nfilled,
                                      .needed = r->k, .sources = (uint32_t)r->nsrc,
                                      .elapsed_ms = now - r->start_ms, .size = r->size};
    n++;
  }
  return n;
}

void hpl__dir_reduce_free_recs(hpl__dir_server *s) {
  struct hpl__dir_reduces *st = s->reduces;
  hpl__dir_reduce *r, *tmp;
  HASH_ITER(hh, st->by_target, r, tmp) reduce_free(r);
  free(st);
  s->reduces = NULL;
}

/* ------------------------------------------------------------------ learned from a sink */

/* Whether used[0..nused) are distinct indices into n sources. */
static int used_valid(const uint32_t *used, size_t nused, size_t n) {
  uint8_t *seen = calloc(n, 1);
  int ok = seen != NULL;
  for (size_t j = 0; ok && j < nused; j++) {
    ok = used[j] < n && !seen[used[j]];
    if (ok) seen[used[j]] = 1;
  }
  free(seen);
  return ok;
}

int hpl__dir_reduce_remember(hpl__dir_server *s, const Hplpb__ReduceReq *req,
                             const uint32_t *used, size_t nused, uint64_t sink) {
  size_t n = req->n_sources;
  uint32_t k = req->num_objects ? req->num_objects : (uint32_t)n;
  if (!hpl__id_valid(req->target) || n == 0 || n > 65536 || k > n || nused != k ||
      req->op > 3 || !hpl_dtype_size((int)req->dtype))
    return HPL_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!hpl__id_valid(req->sources[i]) || !strcmp(req->sources[i], req->target))
      return HPL_EINVAL;
  if (!used_valid(used, nused, n)) return HPL_EINVAL;
  if (hpl__dir_reduce_find(s, req->target)) return HPL_EEXIST;
  hpl__dir_reduce_trim(s);
  hpl__dir_reduce *r = hpl__dir_reduce_new(s, (Hplpb__ReduceReq *)req, k, sink);
  if (!r) return HPL_ENOMEM;
  if (!(r->slots = calloc(k, sizeof *r->slots))) {
    reduce_free(r);
    return HPL_ENOMEM;
  }
  for (uint32_t j = 0; j < k; j++) {
    r->slots[j] = (hpl__dr_slot){.filled = 1, .src = (int)used[j]};
    hpl__dir_reduce_set_src(r, used[j], HPL__DR_IN_TREE);
  }
  r->nfilled = k;
  /* finished as the sink saw it: no tree runs, nothing is watched */
  hpl__dir_reduce_set_life(r, HPL__DR_DONE);
  r->status = 0;
  DL_APPEND2(s->reduces->done, r, fin_prev, fin_next);
  s->reduces->ndone++;
  unwatch_sources(r);
  HPL__LOG_INFO("reduce '%s' finished under a former directory: its %u sources learned from "
                "node %016llx", r->target, k, (unsigned long long)sink);
  return 0;
}
