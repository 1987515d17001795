/* acquire.c - sender choice for ACQUIRE and PEEK, and the waiters of the
 * ACQUIREs that cannot be answered yet (see acquire.h). */
#include "acquire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "reduce.h"
#include "trace.h"
#include "util.h"
#include "uvtimer.h"
#include "xlog.h"

/* A node that reported its own partial sender crawling this recently is
 * taken to be slow because of that sender, not by itself. */
#define DIR_CRAWL_MEMORY_MS 5000
/* A node that moved off a sender crawling by itself is given this long to
 * recover before the receivers below it blame it. */
#define DIR_BYPASS_GRACE_MS 1500
/* Crawl reports are judged together, this long after the first: when a
 * chain node slows, every receiver below it reports within a few tens of
 * milliseconds, and judged one by one each would find the others not yet
 * crawling and move (a cascade of moves, some onto the slow node). */
#define DIR_CRAWL_BATCH_MS 60
/* How far up a chain a crawl's origin is looked for. */
#define DIR_CHAIN_WALK_MAX 64

/* A crawl report waiting for its batch (on_crawling_sender). Names, not
 * pointers: the node or the object may be gone when the batch runs. */
typedef struct dir_crawl_rep {
  struct dir_crawl_rep *next;
  uint64_t asker, peer, req, progress;
  int innocent, peer_crawls; /* the verdict, made before any move of the batch */
  char id[];
} dir_crawl_rep;

typedef struct dir_waiter {
  struct dir_waiter *oprev, *onext; /* the object's list, in arrival order */
  struct dir_waiter *nprev, *nnext; /* the asking node's list (a PEEK: its connection's) */
  dir_server *srv;
  dir_obj *obj;
  dir_node *node;       /* the asker: answered on node->conn; NULL for a PEEK */
  dir_conn *peeker;     /* a PEEK's connection (a client reading directly) */
  uint64_t req_id;
  uint64_t avoid;       /* sender the asker reported as failed */
  uint64_t since_ms;    /* when the ACQUIRE arrived */
  uint64_t deadline_ms; /* when it times out, 0 for never */
  int ring_wait;        /* waiting for an allreduce ring predecessor */
  uint64_t grant_node;  /* a PEEK: the client's store (PeekReq.node) */
  hpl__otimer timer;
} dir_waiter;

/* Unlink a waiter from its object and its node and free it (the object
 * stays, even if nothing refers to it any more). */
static void waiter_drop(dir_waiter *w) {
  dir_waiter *ol = w->obj->waiters;
  DL_DELETE2(ol, w, oprev, onext);
  w->obj->waiters = ol;
  if (w->node) {
    DL_DELETE2(w->node->waiters, w, nprev, nnext);
    w->node->nwaiters--;
  } else {
    dir_waiter *pl = w->peeker->peeks;
    DL_DELETE2(pl, w, nprev, nnext);
    w->peeker->peeks = pl;
    w->peeker->npeeks--;
  }
  hpl__otimer_free(&w->timer, w);
}

/* A waiting ACQUIRE is answered now (dirmetrics.h: acquire_wait_hist). */
static void waited(const dir_waiter *w) {
  uint64_t now = hpl__now_ms();
  hpl__hist_observe(&w->srv->acquire_wait_hist,
                    (now > w->since_ms ? now - w->since_ms : 0) * 1000000ull);
}

/* Drop a waiter, and its object if nothing refers to it any more. */
static void waiter_end(dir_waiter *w) {
  dir_server *s = w->srv;
  dir_obj *o = w->obj;
  waiter_drop(w);
  dtab_gc(&s->tab, o);
}

static void reply_err(dir_node *asker, uint64_t req, int status, const char *detail) {
  Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
  r.status = status;
  r.detail = (char *)detail;
  hpl__conn_send(asker->conn->c, HPL__MSG_ACQUIRE_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* Tell `asker` the sender just assigned to it: as the answer to its
 * ACQUIRE `req`, or (type GRANT, req 0) unasked. 0, or -1 if the sender is
 * unknown (its location is dropped; the caller answers). */
static int send_sender(dir_server *s, dir_node *asker, unsigned type, uint64_t req, dir_obj *o,
                       uint64_t sender) {
  dir_node *n = dir_node_find(s, sender);
  if (!n) { /* cannot happen: locations only name live nodes */
    dtab_loc_remove(&s->tab, o, sender);
    return -1;
  }
  Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
  r.size = o->size;
  r.sender_node = n->id;
  r.sender_addr = n->addr;
  r.sender_port = (uint32_t)n->port;
  r.gen = o->gen;
  dir_loc *sl = dtab_loc(o, sender);
  r.sender_complete = sl && sl->complete;
  if (type == HPL__MSG_GRANT) r.id = o->id;
  hpl__conn_send(asker->conn->c, type, req, &r.base, NULL, 0, 0, NULL, NULL);
  return 0;
}

/* Answer with the sender just assigned to the asker. */
static void reply_sender(dir_server *s, dir_node *asker, uint64_t req, dir_obj *o,
                         uint64_t sender) {
  if (send_sender(s, asker, HPL__MSG_ACQUIRE_REP, req, o, sender) != 0) {
    reply_err(asker, req, HPL_EUNAVAIL, "sender vanished");
    return;
  }
  s->ctr.senders_assigned++;
  dir_xlog(s, HPL__XFER_ASSIGN, o->id, asker->id, sender);
  LOG_DEBUG("acquire '%s': node %016llx pulls from %016llx", o->id, (unsigned long long)asker->id,
            (unsigned long long)sender);
}

/* Answer an ACQUIRE for `o` from `asker` if possible. Returns 1 if
 * answered, 0 if the asker must keep waiting; *ring_wait (if not NULL) is
 * set when it waits for its allreduce ring predecessor (since_ms: when it
 * asked; 0 disables that preference). */
static int acquire_try(dir_server *s, dir_node *asker, uint64_t req, dir_obj *o, uint64_t avoid,
                       uint64_t since_ms, int *ring_wait) {
  hpl__conn *c = asker->conn->c;
  if (ring_wait) *ring_wait = 0;
  if (o->is_inline) {
    Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
    r.size = o->size;
    r.inline_ = 1;
    r.gen = o->gen;
    hpl__conn_send(c, HPL__MSG_ACQUIRE_REP, req, &r.base, o->inl, o->size, 1, NULL, NULL);
    /* remember the holder so a delete reaches it */
    dtab_add_loc(&s->tab, o, asker->id, o->size, 1, 0);
    s->ctr.inline_served++;
    return 1;
  }
  dir_loc *me = dtab_loc(o, asker->id);
  if (me && me->granted) {
    /* a sender was granted to the asker (peek_grant) and its store asked
     * before the GRANT reached it (it then ignores the GRANT): the same
     * sender again, whose slot the asker holds, unless it reports it */
    me->granted = 0;
    if (!avoid && !me->complete && me->upstream) {
      reply_sender(s, asker, req, o, me->upstream);
      return 1;
    }
  }
  uint64_t sender = 0;
  dir_loc *from = NULL;
  int ring = since_ms ? dir_reduce_ring_sender(s, o, asker->id, avoid, since_ms, &from) : 0;
  if (ring == 2) {
    if (ring_wait) *ring_wait = 1;
    return 0;
  }
  int rc;
  if (ring == 1) {
    sender = from->node;
    rc = dtab_assign(&s->tab, o, asker->id, from);
    s->ctr.ring_assigned++;
  } else {
    rc = dtab_pick_sender(&s->tab, o, asker->id, avoid, &sender);
  }
  if (rc == 1) return 0;
  if (rc < 0) {
    char detail[320];
    if (rc == HPL_ELOST) {
      snprintf(detail, sizeof detail, "object '%s' lost: no copy that can finish remains", o->id);
      s->ctr.lost_replies++;
    } else if (o->state == OBJ_FAILED) {
      snprintf(detail, sizeof detail, "%s", o->fail_detail ? o->fail_detail : hpl_strerror(rc));
    } else {
      snprintf(detail, sizeof detail, "cannot find a sender for '%s'", o->id);
    }
    reply_err(asker, req, rc, detail);
    return 1;
  }
  reply_sender(s, asker, req, o, sender);
  return 1;
}

/* A PEEK of `o`, which is not inline, on connection `dc` from a client of
 * store `node`: name a sender to that store now (GRANT), as the store's own
 * ACQUIRE would, so that the client's GET does not cost another round trip
 * to the directory. Only when that store takes grants, is on the reader's
 * host (its address is the one the PEEK came from: a reader cannot make a
 * store elsewhere fetch) and holds no copy yet, no allreduce ring order
 * applies, and a sender can be assigned at once; else 0, and the store
 * asks as usual. */
static int peek_grant(dir_server *s, const dir_conn *dc, dir_obj *o, uint64_t node) {
  dir_node *n = node ? dir_node_find(s, node) : NULL;
  if (s->cfg.no_grants || !n || !n->conn || !n->grants || n->draining || o->is_inline ||
      o->state != OBJ_READY || strcmp(n->addr, dc->peer) != 0 || dtab_loc(o, node))
    return 0;
  dir_loc *from = NULL;
  if (dir_reduce_ring_sender(s, o, node, 0, hpl__now_ms(), &from) != 0) return 0;
  uint64_t sender = 0;
  if (dtab_pick_sender(&s->tab, o, node, 0, &sender) != 0) return 0;
  if (send_sender(s, n, HPL__MSG_GRANT, 0, o, sender) != 0) {
    dtab_loc_remove(&s->tab, o, node); /* undo the assignment: the store asks */
    return 0;
  }
  dir_loc *l = dtab_loc(o, node);
  if (l) l->granted = 1;
  s->ctr.senders_assigned++;
  s->ctr.peeks_granted++;
  dir_xlog(s, HPL__XFER_ASSIGN, o->id, node, sender);
  LOG_DEBUG("peek '%s': granted to node %016llx, which pulls from %016llx", o->id,
            (unsigned long long)node, (unsigned long long)sender);
  return 1;
}

/* A PEEK's answer: the bytes if `o` is inline and ready, else
 * HPL_ENOTFOUND (with the size when the object exists: the client asks its
 * store, which pulls it; granted if peek_grant named the sender to store
 * `node` already) or `miss` (e.g. HPL_ETIMEDOUT). */
static void peek_reply(dir_server *s, dir_conn *dc, uint64_t req, dir_obj *o, int miss,
                       uint64_t node) {
  hpl__conn *c = dc->c;
  Hplpb__PeekRep r = HPLPB__PEEK_REP__INIT;
  hpl__trace("d.peekrep", o ? o->id : NULL);
  if (o && o->is_inline && o->state == OBJ_READY) {
    r.size = o->size;
    r.inline_ = 1;
    s->ctr.peeks_served++;
    hpl__conn_send(c, HPL__MSG_PEEK_REP, req, &r.base, o->inl, o->size, 1, NULL, NULL);
    return;
  }
  r.status = miss;
  r.size = o && o->has_size ? o->size : 0;
  r.granted = o && miss == HPL_ENOTFOUND && peek_grant(s, dc, o, node);
  hpl__conn_send(c, HPL__MSG_PEEK_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* A waiting PEEK can be answered once its object is ready (with its bytes,
 * or, for a large object, with "ask your store"), failed or lost. */
static int peek_due(const dir_obj *o) {
  return o->state == OBJ_READY || o->state == OBJ_FAILED || o->state == OBJ_LOST;
}

/* ------------------------------------------------------------------ waiters */

static void waiter_timeout(void *owner);

/* (Re)start the waiter's timer for its next event: the deadline, or the
 * end of a ring wait if that comes first. */
static void waiter_arm(dir_waiter *w) {
  uint64_t at = w->deadline_ms;
  if (w->ring_wait && (!at || w->since_ms + DIR_RING_WAIT_MS < at))
    at = w->since_ms + DIR_RING_WAIT_MS;
  if (!at) {
    hpl__otimer_stop(&w->timer);
    return;
  }
  uint64_t now = hpl__now_ms();
  hpl__otimer_start(w->srv->loop, &w->timer, w, at > now ? at - now : 0, waiter_timeout);
}

static void waiter_timeout(void *owner) {
  dir_waiter *w = owner;
  if (w->peeker) {
    peek_reply(w->srv, w->peeker, w->req_id, w->obj, HPL_ETIMEDOUT, 0);
    waiter_end(w);
    return;
  }
  if (!w->deadline_ms || hpl__now_ms() < w->deadline_ms) {
    /* the ring wait is over: the ordinary rule now */
    if (acquire_try(w->srv, w->node, w->req_id, w->obj, w->avoid, w->since_ms, &w->ring_wait)) {
      waited(w);
      waiter_end(w);
    } else {
      waiter_arm(w);
    }
    return;
  }
  char detail[320];
  snprintf(detail, sizeof detail, "object '%s' did not become available in time", w->obj->id);
  reply_err(w->node, w->req_id, HPL_ETIMEDOUT, detail);
  waited(w);
  waiter_end(w);
}

/* One pass over o's waiters in arrival order (one that must keep waiting
 * does not stop the others). Returns 1 if another pass may serve more: some
 * were served while an allreduce participant still waits for its ring
 * predecessor, whose new copy may be one of them. */
static int serve_waiters(dir_server *s, dir_obj *o) {
  int served = 0, ring = 0;
  for (dir_waiter *w = o->waiters, *next; w; w = next) {
    next = w->onext;
    if (w->peeker) {
      if (peek_due(o)) {
        peek_reply(s, w->peeker, w->req_id, o, HPL_ENOTFOUND, w->grant_node);
        waiter_drop(w);
      }
      continue;
    }
    if (acquire_try(s, w->node, w->req_id, o, w->avoid, w->since_ms, &w->ring_wait)) {
      waited(w);
      waiter_drop(w);
      served = 1;
    } else {
      ring |= w->ring_wait;
    }
  }
  return served && ring;
}

static int has_ring_waiter(const dir_obj *o) {
  for (const dir_waiter *w = o->waiters; w; w = w->onext)
    if (w->ring_wait) return 1;
  return 0;
}

static void serve(dir_server *s, dir_obj *o) {
  while (serve_waiters(s, o)) {
  }
}

void dir_acquire_on_change(dir_obj *o, void *srv) { serve(srv, o); }

void dir_acquire_on_node(dir_server *s, const dir_node_event *e, void *arg) {
  (void)arg;
  if (e->type != DIR_NODE_UNPLUGGED) return;
  dir_node *n = e->node;
  while (n->waiters) waiter_end(n->waiters);
  dir_crawl_rep *r, *tmp; /* its crawl reports: no answer either */
  LL_FOREACH_SAFE(s->crawl_reps, r, tmp) {
    if (r->asker != n->id) continue;
    LL_DELETE(s->crawl_reps, r);
    free(r);
  }
}

void dir_acquire_conn_closed(dir_server *s, dir_conn *dc) {
  while (dc->peeks) waiter_end(dc->peeks);
}

/* ------------------------------------------------------------------ silent senders */

/* "Stay with your sender; report it again after retry_ms if it is still
 * silent": an answer naming no sender. */
static void reply_stay(dir_node *asker, uint64_t req, uint64_t retry_ms) {
  Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
  r.retry_ms = (uint32_t)(retry_ms > UINT32_MAX ? UINT32_MAX : retry_ms);
  hpl__conn_send(asker->conn->c, HPL__MSG_ACQUIRE_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* The asker's sender `peer` has delivered nothing for a while (the asker
 * keeps its stream meanwhile). The culprit may be the sender (stopped, cut
 * off) or, for a partial copy, the sender's own upstream: a probe tells
 * them apart. A sender that does not answer is replaced by a copy that does
 * not depend on it; one that answers keeps its receiver (its own receiver
 * side reports its upstream), unless its copy is complete (then the path
 * between the two is at fault) or the asker has reported the same stall
 * twice already. */
static void on_silent_sender(dir_server *s, dir_node *asker, uint64_t req, dir_obj *o,
                             const Hplpb__AcquireReq *m) {
  uint64_t peer = m->failed_peer, wait = 0, sender = 0;
  s->ctr.silent_reports++;
  dir_loc *me = dtab_loc(o, asker->id);
  if (o->is_inline || (me && (me->complete || (me->upstream && me->upstream != peer)))) {
    reply_stay(asker, req, 0); /* a stale report: the asker has moved already */
    return;
  }
  dir_node *pn = dir_node_find(s, peer);
  int verdict = pn ? dir_node_verdict(s, pn, asker->id, &wait) : DIR_SILENT;
  if (verdict == DIR_PROBING) {
    reply_stay(asker, req, wait + 5);
    return;
  }
  if (verdict == DIR_ALIVE) {
    dir_loc *pl = dtab_loc(o, peer);
    if (pl && !pl->complete && m->insist < 2) {
      reply_stay(asker, req, 0);
      return;
    }
  }
  int rc = dtab_pick_instead(&s->tab, o, asker->id, peer, &sender);
  if (rc != 0) {
    /* nothing better idle now: keep the stream, report again later */
    reply_stay(asker, req, 0);
    return;
  }
  s->ctr.suspect_moves++;
  LOG_INFO("node %016llx moves off silent sender %016llx for '%s' at %llu bytes: now %016llx",
           (unsigned long long)asker->id, (unsigned long long)peer, o->id,
           (unsigned long long)m->progress, (unsigned long long)sender);
  reply_sender(s, asker, req, o, sender);
}

/* Whether `n` reported its own partial sender crawling less than `ms` ago
 * (NULL: no). */
static int reported_crawl(const dir_node *n, uint64_t now, uint64_t ms) {
  return n && n->crawl_report_ms && now - n->crawl_report_ms < ms;
}

static int blamed_recently(const dir_node *n, uint64_t now) {
  return n && n->blamed_ms && now - n->blamed_ms < DIR_CRAWLING_MS;
}

/* A node crawls if it reported its own sender crawling, or a receiver
 * reported it - unless that receiver is itself reported by its own
 * receivers: a slow host reports its sender and is reported by the nodes
 * below it, and the sender it blames is most likely fine (if it is not,
 * the receivers that move onto it report it in turn). */
int dir_acquire_crawling(uint64_t node, void *srv) {
  dir_node *n = dir_node_find(srv, node);
  uint64_t now = hpl__now_ms();
  if (reported_crawl(n, now, DIR_CRAWLING_MS)) return 1;
  if (!blamed_recently(n, now)) return 0;
  return !blamed_recently(dir_node_find(srv, n->blamed_by), now);
}

/* The verdict on report `r` (see crawl_decide): whether its sender may
 * only be as slow as its upstream - some node further up its chain
 * reported its own input crawling (the slowness starts there, or above) -
 * or has just moved off the topmost crawling node and recovers. */
static void crawl_verdict(dir_server *s, dir_crawl_rep *r, uint64_t now) {
  dir_obj *o = dtab_find(&s->tab, r->id);
  dir_node *peer = dir_node_find(s, r->peer);
  r->peer_crawls = reported_crawl(peer, now, DIR_CRAWL_MEMORY_MS);
  int above = 0;
  dir_loc *l = o ? dtab_loc(o, r->peer) : NULL;
  for (int k = 0; l && !l->complete && l->upstream && !above && k < DIR_CHAIN_WALK_MAX; k++) {
    above = reported_crawl(dir_node_find(s, l->upstream), now, DIR_CRAWL_MEMORY_MS);
    l = dtab_loc(o, l->upstream);
  }
  r->innocent = above || (peer && peer->bypass_ms && now - peer->bypass_ms < DIR_BYPASS_GRACE_MS);
}

/* Carry out report `r`: the asker's partial sender crawls. The sender may
 * only be as slow as its upstream (crawl_verdict): a node further up the
 * chain reported its own input crawling - the receiver right below the
 * topmost such node moves, the others wait for it - or the sender has just
 * moved off that node (it is given DIR_BYPASS_GRACE_MS to recover); then
 * the asker moves only to an idle complete copy. Otherwise the sender is
 * the topmost crawling node of its chain: the slow link is its own or the
 * one into it, and both are slow in the usual case of a slow host, which
 * reports its own sender too (moving it does not help the ones below it).
 * So the asker moves to a copy that does not depend on the sender, busy or
 * not: the slow node takes little of a shared sender's bandwidth. */
static void crawl_decide(dir_server *s, dir_crawl_rep *r, uint64_t now) {
  dir_node *asker = dir_node_find(s, r->asker);
  if (!asker || !asker->conn) return; /* gone: nobody to answer */
  dir_obj *o = dtab_find(&s->tab, r->id);
  uint64_t sender = 0;
  dir_loc *me = o ? dtab_loc(o, asker->id) : NULL;
  int ours = o && !o->is_inline && me && !me->complete && me->upstream == r->peer;
  if (ours && dtab_idle_complete(&s->tab, o, asker->id, r->peer)) {
    LOG_INFO("node %016llx moves off crawling partial sender %016llx for '%s' at %llu bytes",
             (unsigned long long)asker->id, (unsigned long long)r->peer, r->id,
             (unsigned long long)r->progress);
    if (acquire_try(s, asker, r->req, o, r->peer, 0, NULL)) {
      if (r->peer_crawls) asker->bypass_ms = now;
      return;
    }
  } else if (ours && !r->innocent &&
             dtab_pick_bypass(&s->tab, o, asker->id, r->peer, &sender) == 0) {
    LOG_INFO("node %016llx moves off slow partial sender %016llx for '%s' at %llu bytes: now "
             "%016llx", (unsigned long long)asker->id, (unsigned long long)r->peer, r->id,
             (unsigned long long)r->progress, (unsigned long long)sender);
    s->ctr.slow_moves++;
    if (r->peer_crawls) asker->bypass_ms = now;
    reply_sender(s, asker, r->req, o, sender);
    return;
  }
  reply_err(asker, r->req, HPL_EUNAVAIL, "no better copy; keep the current sender");
}

/* The batch is due: every verdict first (on the chains as they were
 * reported), then the moves, in arrival order. */
static void crawl_batch(uv_timer_t *t) {
  dir_server *s = t->data;
  dir_crawl_rep *list = s->crawl_reps, *r, *tmp;
  s->crawl_reps = NULL;
  uint64_t now = hpl__now_ms();
  LL_FOREACH(list, r) crawl_verdict(s, r, now);
  LL_FOREACH_SAFE(list, r, tmp) {
    crawl_decide(s, r, now);
    dir_obj *o = dtab_find(&s->tab, r->id);
    if (o) dtab_gc(&s->tab, o);
    free(r);
  }
}

/* A receiver reports its partial sender crawling: noted at once (the
 * reporter crawls; the sender is blamed), judged with the reports that
 * come within DIR_CRAWL_BATCH_MS. */
static void on_crawling_sender(dir_server *s, dir_node *asker, uint64_t req, dir_obj *o,
                               const Hplpb__AcquireReq *m) {
  uint64_t now = hpl__now_ms();
  asker->crawl_report_ms = now;
  dir_node *peer = dir_node_find(s, m->failed_peer);
  if (peer) {
    peer->blamed_ms = now;
    peer->blamed_by = asker->id;
  }
  size_t len = strlen(o->id) + 1;
  dir_crawl_rep *r = malloc(sizeof *r + len);
  if (!r) {
    reply_err(asker, req, HPL_ENOMEM, "out of memory");
    return;
  }
  *r = (dir_crawl_rep){.asker = asker->id, .peer = m->failed_peer, .req = req,
                       .progress = m->progress};
  memcpy(r->id, o->id, len);
  LL_APPEND(s->crawl_reps, r);
  if (!uv_is_active((uv_handle_t *)&s->bcrawl_timer))
    uv_timer_start(&s->bcrawl_timer, crawl_batch, DIR_CRAWL_BATCH_MS, 0);
}

void dir_acquire_crawl_start(dir_server *s) {
  uv_timer_init(s->loop, &s->bcrawl_timer);
  s->bcrawl_timer.data = s;
}

void dir_acquire_crawl_stop(dir_server *s) {
  uv_close((uv_handle_t *)&s->bcrawl_timer, NULL);
}

void dir_acquire_free(dir_server *s) {
  dir_crawl_rep *r, *tmp;
  LL_FOREACH_SAFE(s->crawl_reps, r, tmp) free(r);
  s->crawl_reps = NULL;
}

/* ------------------------------------------------------------------ handlers */

void dir_acquire_on_acquire(dir_server *s, const dir_frame *f) {
  Hplpb__AcquireReq *m = (Hplpb__AcquireReq *)f->msg;
  dir_node *asker = f->dc->node;
  uint64_t req = f->req;
  s->ctr.acquires++;
  dir_obj *o = dtab_get(&s->tab, m->id);
  if (!o) {
    reply_err(asker, req, HPL_ENOMEM, "out of memory");
    return;
  }
  if (m->suspect && m->failed_peer) {
    on_silent_sender(s, asker, req, o, m);
    dtab_gc(&s->tab, o);
    return;
  }
  if (m->only_complete) {
    on_crawling_sender(s, asker, req, o, m);
    return;
  }
  if (m->failed_peer) {
    /* the asker's stream from this peer broke or crawled: free the slot it
     * held and avoid that sender this time. Its copy stays listed while the
     * node lives; a dead node's copies are dropped when it is declared dead. */
    LOG_INFO("node %016llx reports sender %016llx failed for '%s' at %llu bytes",
             (unsigned long long)asker->id, (unsigned long long)m->failed_peer, m->id,
             (unsigned long long)m->progress);
    dtab_release_upstream(o, asker->id);
  }
  uint64_t now = hpl__now_ms();
  /* a straggler from a complete copy: the asker crawls (its own link, most
   * likely); the receivers below it then wait for it to move rather than
   * all jump onto the copy it leaves (crawl_verdict) */
  if (m->failed_peer && m->crawled) asker->crawl_report_ms = now;
  int ring_wait = 0;
  if (acquire_try(s, asker, req, o, m->failed_peer, now, &ring_wait)) {
    /* a new partial copy: a ring successor may be waiting for it */
    if (has_ring_waiter(o)) serve(s, o);
    dtab_gc(&s->tab, o);
    return;
  }
  if (m->timeout_ms == 0) { /* no waiting, for a ring predecessor either */
    if (!(ring_wait && acquire_try(s, asker, req, o, m->failed_peer, 0, NULL)))
      reply_err(asker, req, HPL_ETIMEDOUT, "object not available");
    dtab_gc(&s->tab, o);
    return;
  }
  if (asker->nwaiters >= HPL__MAX_WAITING_PER_PEER) {
    reply_err(asker, req, HPL_EUNAVAIL, "too many ACQUIREs of this node waiting already");
    dtab_gc(&s->tab, o);
    return;
  }
  dir_waiter *w = calloc(1, sizeof *w);
  if (!w) {
    reply_err(asker, req, HPL_ENOMEM, "out of memory");
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
  dir_waiter *ol = o->waiters;
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
void dir_acquire_on_peek(dir_server *s, const dir_frame *f) {
  Hplpb__PeekReq *m = (Hplpb__PeekReq *)f->msg;
  hpl__trace("d.peek", m->id);
  dir_obj *o = dtab_find(&s->tab, m->id);
  if ((o && peek_due(o)) || m->timeout_ms <= 0 || f->dc->npeeks >= HPL__MAX_WAITING_PER_PEER) {
    peek_reply(s, f->dc, f->req, o, HPL_ENOTFOUND, m->node);
    return;
  }
  if (!o && !(o = dtab_get(&s->tab, m->id))) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  dir_waiter *w = calloc(1, sizeof *w);
  if (!w) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    dtab_gc(&s->tab, o);
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
  dir_waiter *ol = o->waiters;
  DL_APPEND2(ol, w, oprev, onext);
  o->waiters = ol;
  dir_waiter *pl = f->dc->peeks;
  DL_APPEND2(pl, w, nprev, nnext);
  f->dc->peeks = pl;
  f->dc->npeeks++;
  s->ctr.peek_waits++;
  waiter_arm(w);
}
