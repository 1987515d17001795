/* reduce_rec.c - the reduce records (see reduce_int.h): the module's table
 * by target, a reduce's life, the watches on its sources, its end
 * (finishing, the finished reduces kept for a while, a deleted target),
 * REDUCE_INFO waiters and the view `hoplite status` shows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "reduce_int.h"
#include "util.h"

/* Finished reduces are kept so hpl_reduce_sources and allreduce joins keep
 * working after the end, but only this many (oldest dropped first, when a
 * new reduce starts: never while a caller walks the reduces). */
#define DR_KEEP_FINISHED 4096

int dir_reduce_init(dir_server *s) {
  s->reduces = calloc(1, sizeof *s->reduces);
  return s->reduces ? 0 : HPL_ENOMEM;
}

void dir_reduce_before_start(dir_server *s, int (*fn)(dir_server *s, const char *target,
                                                      void *arg),
                             void *arg) {
  s->reduces->before_start = fn;
  s->reduces->before_start_arg = arg;
}

dir_reduce *dr_find(dir_server *s, const char *target) {
  dir_reduce *r = NULL;
  HASH_FIND_STR(s->reduces->by_target, target, r);
  return r;
}

int dir_reduce_known(dir_server *s, const char *target) { return dr_find(s, target) != NULL; }

static const char *const life_names[] = {"open", "adopted", "running", "done"};
static const char *const src_names[] = {"waiting", "in the tree", "spare", "lost"};

void dr_set_life(dir_reduce *r, dr_life to) {
  if (r->life == to) return;
  LOG_DEBUG("reduce '%s': %s -> %s", r->target, life_names[r->life], life_names[to]);
  r->life = to;
}

void dr_set_src(dir_reduce *r, size_t i, dr_src to) {
  if (r->src_state[i] == to) return;
  LOG_DEBUG("reduce '%s': source '%s' %s -> %s", r->target, r->src[i],
            src_names[r->src_state[i]], src_names[to]);
  r->src_state[i] = to;
}

/* ------------------------------------------------------------------ source watches */

/* Watch source i (object o): its changes reach dir_reduce_on_change.
 * Returns 0 or HPL_ENOMEM. */
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
  if (r->life == DR_DONE || m->timeout_ms == 0) {
    if (r->life != DR_DONE) {
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
  HASH_ITER(hh, s->reduces->by_target, r, tmp) {
    dr_info *w, *wtmp;
    DL_FOREACH_SAFE(r->infos, w, wtmp) if (w->dc == dc) info_drop(w);
  }
}

/* ------------------------------------------------------------------ life cycle */

dir_reduce *dr_new(dir_server *s, Hplpb__ReduceReq *m, uint32_t k, uint64_t sink) {
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
  HASH_ADD_KEYPTR(hh, s->reduces->by_target, r->target, strlen(r->target), r);
  for (size_t i = 0; i < n; i++) {
    dir_obj *o = dtab_get(&s->tab, r->src[i]);
    if (o) watch_source(r, (int)i, o);
  }
  return r;
}

static void reduce_free(dir_reduce *r) {
  struct dir_reduces *st = r->srv->reduces;
  if (r->life == DR_DONE) {
    DL_DELETE2(st->done, r, fin_prev, fin_next);
    st->ndone--;
  }
  HASH_DEL(st->by_target, r);
  if (r->life != DR_DONE) unwatch_sources(r);
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

void dr_trim(dir_server *s) {
  struct dir_reduces *st = s->reduces;
  while (st->ndone > DR_KEEP_FINISHED && st->done) reduce_free(st->done);
}

void dr_finish(dir_reduce *r, int status, const char *detail) {
  if (r->life == DR_DONE) return;
  dir_server *s = r->srv;
  int adopted = r->life == DR_ADOPTED;
  dr_set_life(r, DR_DONE);
  r->status = status;
  DL_APPEND2(s->reduces->done, r, fin_prev, fin_next);
  s->reduces->ndone++;
  snprintf(r->detail, sizeof r->detail, "%s", detail ? detail : "");
  unwatch_sources(r);
  dr_send_end(r, adopted);
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
  dir_reduce *r = dr_find(s, target);
  if (!r) return;
  if (r->life != DR_DONE) dr_finish(r, HPL_ECANCELED, "the target was deleted");
  reduce_free(r);
}

size_t dir_reduce_running(dir_server *s, dir_reduce_view *out, size_t max) {
  uint64_t now = hpl__now_ms();
  size_t n = 0;
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces->by_target, r, tmp) {
    if (r->life == DR_DONE) continue;
    if (n < max)
      out[n] = (dir_reduce_view){.target = r->target, .sink = r->sink, .joined = r->nfilled,
                                 .needed = r->k, .sources = (uint32_t)r->nsrc,
                                 .elapsed_ms = now - r->start_ms,
                                 .size = r->have_size ? r->size : 0};
    n++;
  }
  return n;
}

void dr_free_all(dir_server *s) {
  struct dir_reduces *st = s->reduces;
  dir_reduce *r, *tmp;
  HASH_ITER(hh, st->by_target, r, tmp) reduce_free(r);
  free(st);
  s->reduces = NULL;
}
