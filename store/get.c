/* get.c - a client's GET: answer, or wait while the object comes (see
 * get.h). */
#include "get.h"

#include <stdio.h>
#include <stdlib.h>
#include <utlist.h>

#include "fetch.h"
#include "hoplite.h"
#include "objects.h"
#include "room.h"
#include "util.h"
#include "uvtimer.h"

/* A GET waiting for its object: on the object's waiter list and on the
 * client's list. */
typedef struct hpl__get_waiter {
  hpl__waiter w;                         /* first: objlife.c hands this back */
  struct hpl__get_waiter *cprev, *cnext; /* the client's list (utlist) */
  hpl__stclient *cl;
  uint64_t req;
  uint64_t t0; /* uv_hrtime() at its arrival (get_hist) */
  hpl__otimer timer;
} hpl__get_waiter;

/* A GET that arrived at t0 is answered: its latency (s->get_hist). */
static void answered(hpl__stclient *cl, uint64_t t0) {
  if (!cl->closed) hpl__hist_observe(&cl->s->get_hist, uv_hrtime() - t0);
}

/* Reply with the object held for the client (one more hold). */
static void reply_held(hpl__store *s, hpl__stclient *cl, uint64_t req, hpl__obj *o, uint64_t t0) {
  if (cl->closed) return;
  answered(cl, t0);
  /* the client maps the pool's chunks read-only: the ones it lacks first */
  uint32_t gens[HPL__POOL_MAX_CHUNKS];
  size_t ngens = 0;
  char why[200];
  uint64_t off = (uint64_t)(o->data - hpl__pool_base(s->pool));
  Hplpb__GetRep r = HPLPB__GET_REP__INIT;
  if (hpl__session_chunks(cl, off, o->size, gens, &ngens, why, sizeof why) != 0) {
    r.status = HPL_ESYS;
    r.detail = why;
    hpl__session_send(cl, HPL__MSG_GET_REP, req, &r.base);
    return;
  }
  if (hpl__session_hold(cl, o) != 0) {
    hpl__session_reply(cl, req, HPL_ENOMEM, "out of memory");
    return;
  }
  r.offset = off;
  r.size = o->size;
  r.handle = o->inst;
  r.chunk_gen = gens;
  r.n_chunk_gen = ngens;
  hpl__session_send(cl, HPL__MSG_GET_REP, req, &r.base);
}

static void reply_err(hpl__stclient *cl, uint64_t req, int status, const char *detail,
                      uint64_t t0) {
  answered(cl, t0);
  Hplpb__GetRep r = HPLPB__GET_REP__INIT;
  r.status = status;
  r.detail = (char *)(detail ? detail : "");
  hpl__session_send(cl, HPL__MSG_GET_REP, req, &r.base);
}

/* An object nobody waits for, that is not coming, is not kept. */
static void forget_if_unwanted(hpl__store *s, hpl__obj *o) {
  if (o->in_table && o->state == HPL__OBJ_FETCHING && !o->waiters && !o->fetch && o->refs == 0)
    hpl__obj_detach(s, o);
}

/* Off both lists; the waiter is freed. */
static void waiter_end(hpl__get_waiter *g) {
  DL_DELETE2(g->cl->waiters, g, cprev, cnext);
  g->cl->nwaiters--;
  hpl__otimer_free(&g->timer, g);
}

/* objlife.c: the object is here (status 0) or will not come. */
static void waiter_done(hpl__waiter *w, int status, const char *detail) {
  hpl__get_waiter *g = (hpl__get_waiter *)w;
  if (status == 0)
    reply_held(g->cl->s, g->cl, g->req, w->obj, g->t0);
  else
    reply_err(g->cl, g->req, status, detail, g->t0);
  waiter_end(g);
}

static void waiter_timeout(void *arg) {
  hpl__get_waiter *g = arg;
  hpl__obj *o = g->w.obj;
  hpl__store *s = g->cl->s;
  char detail[320];
  snprintf(detail, sizeof detail, "object '%s' not available within the timeout (%s)", o->id,
           o->state == HPL__OBJ_FETCHING   ? "it does not exist yet"
           : o->state == HPL__OBJ_CREATING ? "it is still being written"
           : o->state == HPL__OBJ_SPILLED  ? "it is being read back from disk"
                                      : "it is still arriving");
  reply_err(g->cl, g->req, HPL_ETIMEDOUT, detail, g->t0);
  hpl__obj_unwait(&g->w);
  waiter_end(g);
  forget_if_unwanted(s, o);
}

void hpl__get_request(hpl__store *s, hpl__stclient *cl, uint64_t req, const char *id,
                      int64_t timeout_ms, int granted) {
  uint64_t t0 = uv_hrtime();
  hpl__obj *o = hpl__obj_find(s, id);
  if (o && o->state == HPL__OBJ_SEALED) {
    s->ctr.local_gets++;
    reply_held(s, cl, req, o, t0);
    return;
  }
  if (timeout_ms == 0) {
    char detail[320];
    snprintf(detail, sizeof detail, "object '%s' is not in this store (timeout 0)", id);
    reply_err(cl, req, HPL_ETIMEDOUT, detail, t0);
    return;
  }
  if (cl->nwaiters >= HPL__MAX_WAITING_PER_PEER) {
    reply_err(cl, req, HPL_EUNAVAIL, "too many GETs of this client waiting already", t0);
    return;
  }
  hpl__get_waiter *g = calloc(1, sizeof *g);
  if (!o && g) {
    if ((o = hpl__obj_new(s, id, HPL__OBJ_FETCHING))) s->ctr.remote_gets++;
  }
  if (!o || !g) {
    free(g);
    reply_err(cl, req, HPL_ENOMEM, "out of memory", t0);
    return;
  }
  g->cl = cl;
  g->t0 = t0;
  g->req = req;
  g->w.deadline_ms = hpl__deadline_ms(timeout_ms < 0 ? -1 : timeout_ms);
  g->w.done = waiter_done;
  hpl__obj_wait(o, &g->w);
  DL_APPEND2(cl->waiters, g, cprev, cnext);
  cl->nwaiters++;
  if (timeout_ms > 0)
    hpl__otimer_start(s->loop, &g->timer, g, (uint64_t)timeout_ms, waiter_timeout);
  if (o->state == HPL__OBJ_FETCHING && !o->fetch) {
    if (granted)
      hpl__fetch_start_granted(s, o);
    else
      hpl__fetch_start(s, o);
  }
  if (o->state == HPL__OBJ_SPILLED) hpl__room_restore(s, o);
}

void hpl__get_client_gone(hpl__store *s, hpl__stclient *cl) {
  while (cl->waiters) {
    hpl__get_waiter *g = cl->waiters;
    hpl__obj *o = g->w.obj;
    hpl__obj_unwait(&g->w);
    waiter_end(g);
    forget_if_unwanted(s, o);
  }
}
