/* acquire.c - ACQUIRE and PEEK (see acquire.h): the requests, their
 * waiters (in arrival order on the object, with deadlines and allreduce
 * ring waits), serving them when their object changes, and dropping them
 * when their node or connection goes. The answer itself is
 * acquire_pick.c's; reports of a silent or crawling sender are
 * acquire_move.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "acquire_int.h"
#include "digests.h"
#include "hoplite.h"
#include "log.h"
#include "reduce.h"
#include "trace.h"
#include "util.h"
#include "uvtimer.h"

int hpl__dir_acquire_init(hpl__dir_server *s) {
  s->acquire = calloc(1, sizeof *s->acquire);
  return s->acquire ? 0 : HPL_ENOMEM;
}

void hpl__dir_acquire_free(hpl__dir_server *s) {
  if (!s->acquire) return;
  hpl__dir_acquire_crawl_free(s);
  free(s->acquire);
  s->acquire = NULL;
}

typedef struct hpl__dir_waiter {
  struct hpl__dir_waiter *oprev, *onext; /* the object's list, in arrival order */
  struct hpl__dir_waiter *nprev, *nnext; /* the asking node's list (a PEEK: its connection's) */
  hpl__dir_server *srv;
  hpl__dir_obj *obj;
  hpl__dir_node *node;       /* the asker: answered on node->conn; NULL for a PEEK */
  hpl__dir_conn *peeker;     /* a PEEK's connection (a client reading directly) */
  uint64_t req_id;
  uint64_t avoid;       /* sender the asker reported as failed */
  uint64_t since_ms;    /* when the ACQUIRE arrived */
  uint64_t deadline_ms; /* when it times out, 0 for never */
  int ring_wait;        /* waiting for an allreduce ring predecessor */
  uint64_t grant_node;  /* a PEEK: the client's store (PeekReq.node) */
  hpl__otimer timer;
} hpl__dir_waiter;

/* Unlink a waiter from its object and its node and free it (the object
 * stays, even if nothing refers to it any more). */
static void waiter_drop(hpl__dir_waiter *w) {
  hpl__dir_waiter *ol = w->obj->waiters;
  DL_DELETE2(ol, w, oprev, onext);
  w->obj->waiters = ol;
  if (w->node) {
    DL_DELETE2(w->node->waiters, w, nprev, nnext);
    w->node->nwaiters--;
  } else {
    hpl__dir_waiter *pl = w->peeker->peeks;
    DL_DELETE2(pl, w, nprev, nnext);
    w->peeker->peeks = pl;
    w->peeker->npeeks--;
  }
  hpl__otimer_free(&w->timer, w);
}

/* A waiting ACQUIRE is answered now (dirmetrics.h: acquire_wait_hist). */
static void waited(const hpl__dir_waiter *w) {
  uint64_t now = hpl__now_ms();
  hpl__hist_observe(&w->srv->acquire_wait_hist,
                    (now > w->since_ms ? now - w->since_ms : 0) * 1000000ull);
}

/* Drop a waiter, and its object if nothing refers to it any more. */
static void waiter_end(hpl__dir_waiter *w) {
  hpl__dir_server *s = w->srv;
  hpl__dir_obj *o = w->obj;
  waiter_drop(w);
  hpl__dtab_gc(&s->tab, o);
}

/* A PEEK's answer: the bytes if `o` is inline and ready, else
 * HPL_ENOTFOUND (with the size when the object exists: the client asks its
 * store, which pulls it; granted if peek_grant named the sender to store
 * `node` already) or `miss` (e.g. HPL_ETIMEDOUT). */
static void peek_reply(hpl__dir_server *s, hpl__dir_conn *dc, uint64_t req, hpl__dir_obj *o,
                       int miss, uint64_t node) {
  hpl__conn *c = dc->c;
  Hplpb__PeekRep r = HPLPB__PEEK_REP__INIT;
  hpl__trace("d.peekrep", o ? o->id : NULL);
  if (o && o->is_inline && o->state == HPL__OBJ_READY) {
    r.size = o->size;
    r.inline_ = 1;
    hpl__dir_digests_fill(o, &r.digest_algo, &r.digests, &r.digest_root);
    s->ctr.peeks_served++;
    hpl__conn_send(c, HPL__MSG_PEEK_REP, req, &r.base, o->inl, o->size, 1, NULL, NULL);
    return;
  }
  r.status = miss;
  r.size = o && o->has_size ? o->size : 0;
  r.granted = o && miss == HPL_ENOTFOUND && hpl__dir_acquire_peek_grant(s, dc, o, node);
  hpl__conn_send(c, HPL__MSG_PEEK_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* A waiting PEEK can be answered once its object is ready (with its bytes,
 * or, for a large object, with "ask your store"), failed or lost. */
static int peek_due(const hpl__dir_obj *o) {
  return o->state == HPL__OBJ_READY || o->state == HPL__OBJ_FAILED || o->state == HPL__OBJ_LOST;
}

/* ------------------------------------------------------------------ waiters */

static void waiter_timeout(void *owner);

/* (Re)start the waiter's timer for its next event: the deadline, or the
 * end of a ring wait if that comes first. */
static void waiter_arm(hpl__dir_waiter *w) {
  uint64_t at = w->deadline_ms;
  if (w->ring_wait && (!at || w->since_ms + HPL__DIR_RING_WAIT_MS < at))
    at = w->since_ms + HPL__DIR_RING_WAIT_MS;
  if (!at) {
    hpl__otimer_stop(&w->timer);
    return;
  }
  uint64_t now = hpl__now_ms();
  hpl__otimer_start(w->srv->loop, &w->timer, w, at > now ? at - now : 0, waiter_timeout);
}

static void waiter_timeout(void *owner) {
  hpl__dir_waiter *w = owner;
  if (w->peeker) {
    peek_reply(w->srv, w->peeker, w->req_id, w->obj, HPL_ETIMEDOUT, 0);
    waiter_end(w);
    return;
  }
  if (!w->deadline_ms || hpl__now_ms() < w->deadline_ms) {
    /* the ring wait is over: the ordinary rule now */
    if (hpl__dir_acquire_try(w->srv, w->node, w->req_id, w->obj, w->avoid, w->since_ms,
                             &w->ring_wait)) {
      waited(w);
      waiter_end(w);
    } else {
      waiter_arm(w);
    }
    return;
  }
  char detail[320];
  snprintf(detail, sizeof detail, "object '%s' did not become available in time", w->obj->id);
  hpl__dir_acquire_reply_err(w->node, w->req_id, HPL_ETIMEDOUT, detail);
  waited(w);
  waiter_end(w);
}

/* One pass over o's waiters in arrival order (one that must keep waiting
 * does not stop the others). Returns 1 if another pass may serve more: some
 * were served while an allreduce participant still waits for its ring
 * predecessor, whose new copy may be one of them. */
static int serve_waiters(hpl__dir_server *s, hpl__dir_obj *o) {
  int served = 0, ring = 0;
  hpl__dir_waiter *w, *next;
  DL_FOREACH_SAFE2((hpl__dir_waiter *)o->waiters, w, next, onext) {
    if (w->peeker) {
      if (peek_due(o)) {
        peek_reply(s, w->peeker, w->req_id, o, HPL_ENOTFOUND, w->grant_node);
        waiter_drop(w);
      }
      continue;
    }
    if (hpl__dir_acquire_try(s, w->node, w->req_id, o, w->avoid, w->since_ms, &w->ring_wait)) {
      waited(w);
      waiter_drop(w);
      served = 1;
    } else {
      ring |= w->ring_wait;
    }
  }
  return served && ring;
}

static int has_ring_waiter(const hpl__dir_obj *o) {
  const hpl__dir_waiter *w;
  DL_FOREACH2((const hpl__dir_waiter *)o->waiters, w, onext)
    if (w->ring_wait) return 1;
  return 0;
}

static void serve(hpl__dir_server *s, hpl__dir_obj *o) {
  while (serve_waiters(s, o)) {
  }
}

void hpl__dir_acquire_on_change(hpl__dir_obj *o, void *srv) { serve(srv, o); }

void hpl__dir_acquire_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg) {
  (void)arg;
  hpl__dir_node *n = e->node;
  while (n->waiters) waiter_end(n->waiters);
  hpl__dir_acquire_drop_crawl_reports(s, n->id); /* its crawl reports: no answer either */
}

void hpl__dir_acquire_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc) {
  while (dc->peeks) waiter_end(dc->peeks);
}

/* ------------------------------------------------------------------ handlers */

void hpl__dir_acquire_on_acquire(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__AcquireReq *m = (Hplpb__AcquireReq *)f->msg;
  hpl__dir_node *asker = f->dc->node;
  uint64_t req = f->req;
  s->ctr.acquires++;
  hpl__trace("d.acquire", m->id);
  hpl__dir_obj *o = hpl__dtab_get(&s->tab, m->id);
  if (!o) {
    hpl__dir_acquire_reply_err(asker, req, HPL_ENOMEM, "out of memory");
    return;
  }
  if (m->suspect && m->failed_peer) {
    hpl__dir_acquire_on_silent_sender(s, asker, req, o, m);
    hpl__dtab_gc(&s->tab, o);
    return;
  }
  if (m->only_complete) {
    hpl__dir_acquire_on_crawling_sender(s, asker, req, o, m);
    return;
  }
  if (m->failed_peer && m->corrupt) /* its copy goes: then as any failed sender */
    hpl__dir_digests_corrupt(s, asker, o, m->failed_peer, m->corrupt_unit);
  if (m->failed_peer) {
    /* the asker's stream from this peer broke or crawled: free the slot it
     * held and avoid that sender this time. Its copy stays listed while the
     * node lives; a dead node's copies are dropped when it is declared dead. */
    HPL__LOG_INFO("node %016llx reports sender %016llx failed for '%s' at %llu bytes",
                  (unsigned long long)asker->id, (unsigned long long)m->failed_peer, m->id,
                  (unsigned long long)m->progress);
    hpl__dtab_release_upstream(o, asker->id);
  }
  uint64_t now = hpl__now_ms();
  /* a straggler from a complete copy: the asker crawls (its own link, most
   * likely); the receivers below it then wait for it to move rather than
   * all jump onto the copy it leaves (crawl_verdict) */
  if (m->failed_peer && m->crawled) asker->crawl_report_ms = now;
  int ring_wait = 0;
  if (hpl__dir_acquire_try(s, asker, req, o, m->failed_peer, now, &ring_wait)) {
    /* a new partial copy: a ring successor may be waiting for it */
    if (has_ring_waiter(o)) serve(s, o);
    hpl__dtab_gc(&s->tab, o);
    return;
  }
  if (m->timeout_ms == 0) { /* no waiting, for a ring predecessor either */
    if (!(ring_wait && hpl__dir_acquire_try(s, asker, req, o, m->failed_peer, 0, NULL)))
      hpl__dir_acquire_reply_err(asker, req, HPL_ETIMEDOUT, "object not available");
    hpl__dtab_gc(&s->tab, o);
    return;
  }
  if (asker->nwaiters >= HPL__MAX_WAITING_PER_PEER) {
    hpl__dir_acquire_reply_err(asker, req, HPL_EUNAVAIL,
                               "too many ACQUIREs of this node waiting already");
    hpl__dtab_gc(&s->tab, o);
    return;
  }
  hpl__dir_waiter *w = calloc(1, sizeof *w);
  if (!w) {
    hpl__dir_acquire_reply_err(asker, req, HPL_ENOMEM, "out of memory");
    return;
  }
  w->srv = s;
  w->obj = o;
  w->node = asker;
  w->req_id = req;
  w->avoid = m->failed_peer;
  w->since_ms = now;
  w->ring_wait = ring_wait;
  w->deadline_ms = m->timeout_ms > 0 ? now + (uint64_t)m->timeout_ms : 0;
  hpl__dir_waiter *ol = o->waiters;
  DL_APPEND2(ol, w, oprev, onext);
  o->waiters = ol;
  DL_APPEND2(asker->waiters, w, nprev, nnext);
  asker->nwaiters++;
  waiter_arm(w);
  s->ctr.waits++;
}

/* A client's direct read of a small object: the bytes if the directory
 * holds them inline, else status HPL_ENOTFOUND and the client asks its store.
 * No location is recorded: the client keeps a private copy. A PEEK with a
 * timeout for an object that is not there yet waits (at most that long, at
 * most HPL__MAX_WAITING_PER_PEER per connection), so a client already
 * waiting when a small object is put gets its bytes pushed straight from
 * the directory. */
void hpl__dir_acquire_on_peek(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__PeekReq *m = (Hplpb__PeekReq *)f->msg;
  hpl__trace("d.peek", m->id);
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, m->id);
  if ((o && peek_due(o)) || m->timeout_ms <= 0 || f->dc->npeeks >= HPL__MAX_WAITING_PER_PEER) {
    peek_reply(s, f->dc, f->req, o, HPL_ENOTFOUND, m->node);
    return;
  }
  if (!o && !(o = hpl__dtab_get(&s->tab, m->id))) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  hpl__dir_waiter *w = calloc(1, sizeof *w);
  if (!w) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    hpl__dtab_gc(&s->tab, o);
    return;
  }
  uint64_t now = hpl__now_ms();
  w->srv = s;
  w->obj = o;
  w->peeker = f->dc;
  w->grant_node = m->node;
  w->req_id = f->req;
  w->since_ms = now;
  w->deadline_ms = now + (uint64_t)(m->timeout_ms > 60000 ? 60000 : m->timeout_ms);
  hpl__dir_waiter *ol = o->waiters;
  DL_APPEND2(ol, w, oprev, onext);
  o->waiters = ol;
  hpl__dir_waiter *pl = f->dc->peeks;
  DL_APPEND2(pl, w, nprev, nnext);
  f->dc->peeks = pl;
  f->dc->npeeks++;
  s->ctr.peek_waits++;
  waiter_arm(w);
}
