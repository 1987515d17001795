/* directory.c - the hoplite-directory server (see directory.h). */
#include "directory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"

void dir_config_defaults(dir_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->listen_host, sizeof c->listen_host, "0.0.0.0");
  c->listen_port = 7700;
  c->inline_max = HPL__DEFAULT_INLINE_MAX;
  c->inline_memory = 1ull << 30;
  c->max_senders = 1;
  c->heartbeat_ms = 500;
  c->heartbeat_timeout_ms = 3000;
  c->reduce_latency_s = 200e-6;
  c->reduce_bandwidth = 125e6;
}

double dir_cost_latency(dir_server *s) {
  return s->cfg.latency_auto && s->lat_measured > 0 ? s->lat_measured : s->cfg.reduce_latency_s;
}

double dir_cost_bandwidth(dir_server *s) {
  return s->cfg.bandwidth_auto && s->bw_measured > 0 ? s->bw_measured : s->cfg.reduce_bandwidth;
}

dir_node *dir_node_find(dir_server *s, uint64_t id) {
  dir_node *n = NULL;
  HASH_FIND(hh, s->nodes, &id, sizeof id, n);
  return n;
}

/* ------------------------------------------------------------------ transfer record */

void dir_xlog(dir_server *s, int kind, const char *id, uint64_t receiver, uint64_t sender) {
  if (!s->xlog) return;
  dir_xfer *x = &s->xlog[s->xseq % DIR_XFER_CAP];
  free(x->id);
  x->seq = s->xseq++;
  x->t_us = hpl__now_ns() / 1000;
  x->kind = kind;
  x->id = strdup(id ? id : "");
  x->receiver = receiver;
  x->sender = sender;
}

/* Record that node's copy of o ends as `kind` (DONE or REMOVE). */
static void xlog_loc_end(dir_server *s, dir_obj *o, uint64_t node, int kind) {
  dir_loc *l = dtab_loc(o, node);
  if (!l || (kind == HPL__XFER_DONE && l->complete)) return;
  dir_xlog(s, kind, o->id, node, l->upstream);
}

static void on_transfers(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__TransfersReq *m) {
  enum { MAX_ENTRIES = 40000 };
  uint64_t first = s->xseq > DIR_XFER_CAP ? s->xseq - DIR_XFER_CAP : 0;
  uint64_t from = m->since < first ? first : m->since;
  size_t n = from < s->xseq ? (size_t)(s->xseq - from) : 0;
  if (n > MAX_ENTRIES) n = MAX_ENTRIES;
  Hplpb__Transfer *ts = calloc(n ? n : 1, sizeof *ts);
  Hplpb__Transfer **ps = calloc(n ? n : 1, sizeof *ps);
  if (!ts || !ps) {
    free(ts);
    free(ps);
    hpl__conn_reply(dc->c, req, HPL_ENOMEM, "out of memory");
    return;
  }
  for (size_t i = 0; i < n; i++) {
    dir_xfer *x = &s->xlog[(from + i) % DIR_XFER_CAP];
    hplpb__transfer__init(&ts[i]);
    ts[i].seq = x->seq;
    ts[i].t_us = x->t_us;
    ts[i].kind = (uint32_t)x->kind;
    ts[i].id = x->id;
    ts[i].receiver = x->receiver;
    ts[i].sender = x->sender;
    ps[i] = &ts[i];
  }
  Hplpb__TransfersRep r = HPLPB__TRANSFERS_REP__INIT;
  r.n_transfers = n;
  r.transfers = ps;
  r.next = from + n;
  if (from > m->since) r.detail = "older entries were overwritten";
  hpl__conn_send(dc->c, HPL__MSG_TRANSFERS_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
  free(ts);
  free(ps);
}

/* ------------------------------------------------------------------ waiters */

static void waiter_closed(uv_handle_t *h) { free(h->data); }

/* Unlink a waiter from its object and connection and free it. */
static void waiter_drop(dir_waiter *w) {
  dir_waiter **pp;
  for (pp = (dir_waiter **)&w->obj->waiters; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  for (pp = &w->dc->waiters; *pp; pp = &(*pp)->cnext)
    if (*pp == w) {
      *pp = w->cnext;
      break;
    }
  if (w->has_timer) {
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, waiter_closed);
  } else {
    free(w);
  }
}

static void acquire_reply_err(dir_conn *dc, uint64_t req, int status, const char *detail) {
  Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
  r.status = status;
  r.detail = (char *)detail;
  hpl__conn_send(dc->c, HPL__MSG_ACQUIRE_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* Answer an ACQUIRE for `o` from `dc` if possible. Returns 1 if answered,
 * 0 if the asker must keep waiting; *ring_wait (if not NULL) is set when it
 * waits for its allreduce ring predecessor (since_ms: when it asked; 0
 * disables that preference). */
static int acquire_try(dir_server *s, dir_conn *dc, uint64_t req, dir_obj *o, uint64_t avoid,
                       uint64_t since_ms, int *ring_wait) {
  uint64_t asker = dc->node->id;
  if (ring_wait) *ring_wait = 0;
  if (o->is_inline) {
    Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
    r.size = o->size;
    r.inline_ = 1;
    r.gen = o->gen;
    hpl__conn_send(dc->c, HPL__MSG_ACQUIRE_REP, req, &r.base, o->inl, o->size, 1, NULL, NULL);
    /* remember the holder so a delete reaches it */
    dtab_add_loc(&s->tab, o, asker, o->size, 1, 0);
    s->ctr.inline_served++;
    return 1;
  }
  uint64_t sender = 0;
  dir_loc *from = NULL;
  int ring = since_ms ? dir_reduce_ring_sender(s, o, asker, avoid, since_ms, &from) : 0;
  if (ring == 2) {
    if (ring_wait) *ring_wait = 1;
    return 0;
  }
  int rc;
  if (ring == 1) {
    sender = from->node;
    rc = dtab_assign(o, asker, from);
    s->ctr.ring_assigned++;
  } else {
    rc = dtab_pick_sender(&s->tab, o, asker, avoid, &sender);
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
    acquire_reply_err(dc, req, rc, detail);
    return 1;
  }
  dir_node *n = dir_node_find(s, sender);
  if (!n) { /* cannot happen: locations only name live nodes */
    dtab_loc_remove(&s->tab, o, sender);
    acquire_reply_err(dc, req, HPL_EUNAVAIL, "sender vanished");
    return 1;
  }
  Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
  r.size = o->size;
  r.sender_node = n->id;
  r.sender_addr = n->addr;
  r.sender_port = (uint32_t)n->port;
  r.gen = o->gen;
  dir_loc *sl = dtab_loc(o, sender);
  r.sender_complete = sl && sl->complete;
  hpl__conn_send(dc->c, HPL__MSG_ACQUIRE_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
  s->ctr.senders_assigned++;
  dir_xlog(s, HPL__XFER_ASSIGN, o->id, asker, sender);
  LOG_DEBUG("acquire '%s': node %016llx pulls from %016llx", o->id, (unsigned long long)asker,
            (unsigned long long)sender);
  return 1;
}

static void waiter_timeout(uv_timer_t *t);

/* (Re)start the waiter's timer for its next event: the deadline, or the
 * end of a ring wait if that comes first. */
static void waiter_arm(dir_waiter *w) {
  uint64_t at = w->deadline_ms;
  if (w->ring_wait && (!at || w->since_ms + DIR_RING_WAIT_MS < at))
    at = w->since_ms + DIR_RING_WAIT_MS;
  if (!at) {
    if (w->has_timer) uv_timer_stop(&w->timer);
    return;
  }
  if (!w->has_timer) {
    uv_timer_init(w->srv->loop, &w->timer);
    w->timer.data = w;
    w->has_timer = 1;
  }
  uint64_t now = hpl__now_ms();
  uv_timer_start(&w->timer, waiter_timeout, at > now ? at - now : 0, 0);
}

static void waiter_timeout(uv_timer_t *t) {
  dir_waiter *w = t->data;
  if (!w->deadline_ms || hpl__now_ms() < w->deadline_ms) {
    /* the ring wait is over: the ordinary rule now */
    if (acquire_try(w->srv, w->dc, w->req_id, w->obj, w->avoid, w->since_ms, &w->ring_wait)) {
      dir_obj *o = w->obj;
      dir_server *s = w->srv;
      waiter_drop(w);
      dtab_gc(&s->tab, o);
      return;
    }
    waiter_arm(w);
    return;
  }
  char detail[320];
  snprintf(detail, sizeof detail, "object '%s' did not become available in time", w->obj->id);
  acquire_reply_err(w->dc, w->req_id, HPL_ETIMEDOUT, detail);
  dir_obj *o = w->obj;
  dir_server *s = w->srv;
  waiter_drop(w);
  dtab_gc(&s->tab, o);
}

/* One pass over o's waiters in arrival order (one that must keep waiting
 * does not stop the others). Returns 1 if another pass may serve more: some
 * were served while an allreduce participant still waits for its ring
 * predecessor, whose new copy may be one of them. */
static int serve_waiters(dir_server *s, dir_obj *o) {
  int served = 0, ring = 0;
  for (dir_waiter *w = o->waiters, *next; w; w = next) {
    next = w->next;
    if (acquire_try(s, w->dc, w->req_id, o, w->avoid, w->since_ms, &w->ring_wait)) {
      waiter_drop(w);
      served = 1;
    } else {
      ring |= w->ring_wait;
    }
  }
  return served && ring;
}

static int has_ring_waiter(const dir_obj *o) {
  for (const dir_waiter *w = o->waiters; w; w = w->next)
    if (w->ring_wait) return 1;
  return 0;
}

void dir_object_changed(dir_server *s, dir_obj *o) {
  while (serve_waiters(s, o)) {
  }
  dir_reduce_check(s, o);
  dtab_gc(&s->tab, o);
}

/* dtab's sender filter: draining nodes take no new receivers. */
static int node_usable(uint64_t node, void *arg) {
  dir_node *n = dir_node_find(arg, node);
  return n && !n->draining;
}

/* dtab_node_gone callback: (object, server). */
static void object_changed_cb(dir_obj *o, void *arg) { dir_object_changed(arg, o); }

/* ------------------------------------------------------------------ handlers */

static void on_register(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__RegisterReq *m) {
  if (m->node_id == 0 || !m->addr || strlen(m->addr) >= sizeof(((dir_node *)0)->addr) ||
      m->data_port == 0 || m->data_port > 65535) {
    hpl__conn_reply(dc->c, req, HPL_EINVAL, "bad registration");
    return;
  }
  dir_node *n = dir_node_find(s, m->node_id);
  if (n && n->conn && n->conn != dc) {
    /* the node reconnected before we noticed the old connection died */
    LOG_INFO("node %016llx re-registered on a new connection", (unsigned long long)m->node_id);
    dir_conn *old = n->conn;
    old->node = NULL;
    hpl__conn_close(old->c, 0);
    dir_xlog(s, HPL__XFER_NODE_GONE, "", n->id, 0);
    dtab_node_gone(&s->tab, n->id, object_changed_cb, s);
    dir_reduce_node_gone(s, n->id);
  }
  if (!n) {
    n = calloc(1, sizeof *n);
    if (!n) {
      hpl__conn_reply(dc->c, req, HPL_ENOMEM, "out of memory");
      return;
    }
    n->id = m->node_id;
    HASH_ADD(hh, s->nodes, id, sizeof n->id, n);
  }
  snprintf(n->addr, sizeof n->addr, "%s", m->addr);
  snprintf(n->name, sizeof n->name, "%s", m->name ? m->name : "");
  n->port = (int)m->data_port;
  n->conn = dc;
  n->draining = 0;
  n->last_seen_ms = hpl__now_ms();
  dc->node = n;
  for (size_t i = 0; i < m->n_held; i++) {
    Hplpb__HeldObject *h = m->held[i];
    if (!h->complete || !hpl__id_valid(h->id)) continue;
    dir_obj *o = dtab_get(&s->tab, h->id);
    if (!o) continue;
    dtab_loc_complete(&s->tab, o, n->id, h->size);
    dir_object_changed(s, o);
  }
  LOG_INFO("node %016llx (%s) registered: data %s:%d, %zu objects re-reported",
           (unsigned long long)n->id, n->name, n->addr, n->port, m->n_held);
  Hplpb__RegisterRep r = HPLPB__REGISTER_REP__INIT;
  r.inline_max = s->cfg.inline_max;
  r.heartbeat_ms = s->cfg.heartbeat_ms;
  r.max_senders = s->cfg.max_senders;
  r.instance = s->instance;
  hpl__conn_send(dc->c, HPL__MSG_REGISTER_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

static void on_loc_add(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__LocAddReq *m) {
  dir_obj *o = dtab_get(&s->tab, m->id);
  if (!o) {
    hpl__conn_reply(dc->c, req, HPL_ENOMEM, "out of memory");
    return;
  }
  if (o->state == OBJ_LOST && m->origin) dir_xlog(s, HPL__XFER_DELETE, o->id, 0, 0); /* revived */
  int rc = dtab_add_loc(&s->tab, o, dc->node->id, m->size, m->complete, m->origin);
  char detail[320] = "";
  if (rc == HPL_EEXIST)
    snprintf(detail, sizeof detail, "object '%s' already exists in the cluster", m->id);
  else if (rc == HPL_EMISMATCH)
    snprintf(detail, sizeof detail, "object '%s' exists with size %llu, not %llu", m->id,
             (unsigned long long)o->size, (unsigned long long)m->size);
  hpl__conn_reply(dc->c, req, rc, detail);
  dir_object_changed(s, o);
}

static void on_loc_note(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__LocNote *m) {
  dir_obj *o = dtab_find(&s->tab, m->id);
  if (req) hpl__conn_reply(dc->c, req, 0, NULL); /* the sender waits for it */
  if (!o) return;
  uint64_t node = dc->node->id;
  if (m->kind == HPL__LOC_COMPLETE) {
    if (m->rate) {
      double b = (double)m->rate;
      s->bw_measured = s->bw_measured > 0 ? 0.8 * s->bw_measured + 0.2 * b : b;
    }
    xlog_loc_end(s, o, node, HPL__XFER_DONE);
    dtab_loc_complete(&s->tab, o, node, o->size);
  } else if (m->kind == HPL__LOC_REMOVE) {
    xlog_loc_end(s, o, node, HPL__XFER_REMOVE);
    dtab_loc_remove(&s->tab, o, node);
    if (o->state == OBJ_READY && !o->locs && !o->is_inline)
      o->state = OBJ_PENDING; /* an aborted put, nothing left: as if never put */
    else
      dtab_check_lost(&s->tab, o);
  }
  dir_object_changed(s, o);
}

static void on_inline_put(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__InlinePutReq *m,
                          const uint8_t *payload, uint64_t plen) {
  if (plen != m->size || plen > s->cfg.inline_max) {
    hpl__conn_reply(dc->c, req, HPL_EINVAL, "inline put: size does not match payload or limit");
    return;
  }
  if (s->tab.inline_bytes + plen > s->cfg.inline_memory) {
    hpl__conn_reply(dc->c, req, HPL_EUNAVAIL, "directory inline cache full");
    return;
  }
  dir_obj *o = dtab_get(&s->tab, m->id);
  uint8_t *copy = malloc(plen ? plen : 1);
  if (!o || !copy) {
    free(copy);
    hpl__conn_reply(dc->c, req, HPL_ENOMEM, "out of memory");
    return;
  }
  if (plen) memcpy(copy, payload, plen);
  int rc = dtab_set_inline(&s->tab, o, copy, plen);
  if (rc) {
    free(copy);
    char detail[320];
    snprintf(detail, sizeof detail, "object '%s' already exists in the cluster", m->id);
    hpl__conn_reply(dc->c, req, rc, detail);
    return;
  }
  dtab_add_loc(&s->tab, o, dc->node->id, plen, 1, 0);
  hpl__conn_reply(dc->c, req, 0, NULL);
  dir_object_changed(s, o);
}

static void on_acquire(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__AcquireReq *m) {
  s->ctr.acquires++;
  dir_obj *o = dtab_get(&s->tab, m->id);
  if (!o) {
    acquire_reply_err(dc, req, HPL_ENOMEM, "out of memory");
    return;
  }
  if (m->only_complete) {
    /* a crawling partial sender: move only to an idle complete copy */
    dir_loc *me = dtab_loc(o, dc->node->id);
    int movable = !o->is_inline && me && !me->complete && me->upstream == m->failed_peer &&
                  dtab_idle_complete(&s->tab, o, dc->node->id, m->failed_peer);
    if (movable)
      LOG_INFO("node %016llx moves off crawling partial sender %016llx for '%s' at %llu bytes",
               (unsigned long long)dc->node->id, (unsigned long long)m->failed_peer, m->id,
               (unsigned long long)m->progress);
    if (!movable || !acquire_try(s, dc, req, o, m->failed_peer, 0, NULL))
      acquire_reply_err(dc, req, HPL_EUNAVAIL, "no idle complete copy; keep the current sender");
    return;
  }
  if (m->failed_peer) {
    /* the asker's stream from this peer broke or crawled: free the slot it
     * held and avoid that sender this time. Its copy stays listed while the
     * node lives; a dead node's copies are dropped when it is declared dead. */
    LOG_INFO("node %016llx reports sender %016llx failed for '%s' at %llu bytes",
             (unsigned long long)dc->node->id, (unsigned long long)m->failed_peer, m->id,
             (unsigned long long)m->progress);
    dtab_release_upstream(o, dc->node->id);
  }
  uint64_t now = hpl__now_ms();
  int ring_wait = 0;
  if (acquire_try(s, dc, req, o, m->failed_peer, now, &ring_wait)) {
    /* a new partial copy: a ring successor may be waiting for it */
    if (has_ring_waiter(o))
      while (serve_waiters(s, o)) {
      }
    dtab_gc(&s->tab, o);
    return;
  }
  if (m->timeout_ms == 0) { /* no waiting, for a ring predecessor either */
    if (!(ring_wait && acquire_try(s, dc, req, o, m->failed_peer, 0, NULL)))
      acquire_reply_err(dc, req, HPL_ETIMEDOUT, "object not available");
    dtab_gc(&s->tab, o);
    return;
  }
  dir_waiter *w = calloc(1, sizeof *w);
  if (!w) {
    acquire_reply_err(dc, req, HPL_ENOMEM, "out of memory");
    return;
  }
  w->srv = s;
  w->obj = o;
  w->dc = dc;
  w->req_id = req;
  w->node = dc->node->id;
  w->avoid = m->failed_peer;
  w->since_ms = now;
  w->ring_wait = ring_wait;
  w->deadline_ms = m->timeout_ms > 0 ? now + (uint64_t)m->timeout_ms : 0;
  dir_waiter **pp = (dir_waiter **)&o->waiters;
  while (*pp) pp = &(*pp)->next;
  *pp = w;
  w->cnext = dc->waiters;
  dc->waiters = w;
  waiter_arm(w);
  s->ctr.waits++;
}

/* A client's direct read of a small object: the bytes if the directory
 * holds them inline, else status HPL_ENOTFOUND and the client asks its store.
 * No location is recorded: the client keeps a private copy. */
static void on_peek(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__IdReq *m) {
  Hplpb__PeekRep r = HPLPB__PEEK_REP__INIT;
  dir_obj *o = dtab_find(&s->tab, m->id);
  if (o && o->is_inline && o->state == OBJ_READY) {
    r.size = o->size;
    r.inline_ = 1;
    s->ctr.peeks_served++;
    hpl__conn_send(dc->c, HPL__MSG_PEEK_REP, req, &r.base, o->inl, o->size, 1, NULL, NULL);
    return;
  }
  r.status = HPL_ENOTFOUND;
  r.size = o ? o->size : 0;
  hpl__conn_send(dc->c, HPL__MSG_PEEK_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

static void on_stat(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__IdReq *m) {
  Hplpb__StatRep r = HPLPB__STAT_REP__INIT;
  dir_obj *o = dtab_find(&s->tab, m->id);
  char detail[320] = "";
  if (!o || o->state == OBJ_PENDING) {
    r.status = HPL_ENOTFOUND;
    snprintf(detail, sizeof detail, "no object '%s'", m->id);
  } else if (o->state == OBJ_LOST) {
    r.status = HPL_ELOST;
    snprintf(detail, sizeof detail, "object '%s' lost", m->id);
  } else {
    r.size = o->size;
    r.inline_ = o->is_inline;
    for (dir_loc *l = o->locs; l; l = l->next) {
      r.copies++;
      r.complete += l->complete;
    }
  }
  r.detail = detail;
  hpl__conn_send(dc->c, HPL__MSG_STAT_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

static void delete_closed(uv_handle_t *h) { free(h->data); }

static void delete_finish(dir_delete *d) {
  dir_server *s = d->srv;
  HASH_DEL(s->deletes, d);
  if (d->dc) hpl__conn_reply(d->dc->c, d->req, 0, NULL);
  uv_timer_stop(&d->timer);
  uv_close((uv_handle_t *)&d->timer, delete_closed);
}

static void delete_timeout(uv_timer_t *t) {
  dir_delete *d = t->data;
  LOG_WARN("delete: %d holder(s) did not acknowledge in time", d->pending);
  delete_finish(d);
}

/* A holder acknowledged a DROP. */
static void delete_ack(dir_server *s, uint64_t op) {
  dir_delete *d = NULL;
  HASH_FIND(hh, s->deletes, &op, sizeof op, d);
  if (d && --d->pending <= 0) delete_finish(d);
}

/* Delete: every holder drops its copy before the deleter hears back, so
 * once hpl_delete returns no store serves the old bytes to new gets. */
static void on_delete(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__IdReq *m) {
  dir_obj *o = dtab_find(&s->tab, m->id);
  if (!o || o->state == OBJ_PENDING) {
    char detail[320];
    snprintf(detail, sizeof detail, "no object '%s'", m->id);
    dir_reduce_target_deleted(s, m->id); /* a reduce that never produced it */
    hpl__conn_reply(dc->c, req, HPL_ENOTFOUND, detail);
    return;
  }
  dir_delete *d = calloc(1, sizeof *d);
  if (!d) {
    hpl__conn_reply(dc->c, req, HPL_ENOMEM, "out of memory");
    return;
  }
  d->op = ++s->next_op;
  d->srv = s;
  d->dc = dc;
  d->req = req;
  Hplpb__DropNote note = HPLPB__DROP_NOTE__INIT;
  note.id = o->id;
  for (dir_loc *l = o->locs; l; l = l->next) {
    dir_node *n = dir_node_find(s, l->node);
    if (n && n->conn &&
        hpl__conn_send(n->conn->c, HPL__MSG_DROP, d->op, &note.base, NULL, 0, 0, NULL, NULL) == 0)
      d->pending++;
  }
  dir_xlog(s, HPL__XFER_DELETE, o->id, 0, 0);
  dir_reduce_target_deleted(s, o->id);
  while (o->locs) dtab_loc_remove(&s->tab, o, o->locs->node);
  if (o->is_inline) {
    s->tab.inline_bytes -= o->size;
    free(o->inl);
    o->inl = NULL;
    o->is_inline = 0;
  }
  o->has_size = 0;
  o->size = 0;
  o->ready_seq = 0;
  o->state = OBJ_PENDING; /* waiters (if any) wait for a new put */
  dtab_gc(&s->tab, o);
  HASH_ADD(hh, s->deletes, op, sizeof d->op, d);
  uv_timer_init(s->loop, &d->timer);
  d->timer.data = d;
  if (d->pending == 0) {
    delete_finish(d);
    return;
  }
  uv_timer_start(&d->timer, delete_timeout, 2 * s->cfg.heartbeat_timeout_ms, 0);
}

static int cmp_info(const void *a, const void *b) {
  const Hplpb__ObjInfo *x = *(Hplpb__ObjInfo *const *)a, *y = *(Hplpb__ObjInfo *const *)b;
  return strcmp(x->id, y->id);
}

static void on_list(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__ListReq *m) {
  Hplpb__ListRep r = HPLPB__LIST_REP__INIT;
  size_t cap = (size_t)s->tab.nobjs, n = 0, bytes = 0;
  Hplpb__ObjInfo *infos = calloc(cap ? cap : 1, sizeof *infos);
  Hplpb__ObjInfo **ptrs = calloc(cap ? cap : 1, sizeof *ptrs);
  const char *prefix = m->prefix ? m->prefix : "";
  size_t plen = strlen(prefix);
  if (!infos || !ptrs) {
    free(infos);
    free(ptrs);
    hpl__conn_reply(dc->c, req, HPL_ENOMEM, "out of memory");
    return;
  }
  dir_obj *o, *tmp;
  HASH_ITER(hh, s->tab.objs, o, tmp) {
    if (o->state != OBJ_READY || strncmp(o->id, prefix, plen) != 0) continue;
    if (n == cap || bytes + strlen(o->id) + 32 > HPL__MAX_MSG_CTRL - 1024) {
      r.status = HPL_ETOOBIG;
      r.detail = "listing truncated";
      break;
    }
    Hplpb__ObjInfo *i = &infos[n];
    hplpb__obj_info__init(i);
    i->id = o->id;
    i->size = o->size;
    i->inline_ = o->is_inline;
    for (dir_loc *l = o->locs; l; l = l->next) {
      i->copies++;
      i->complete += l->complete;
    }
    ptrs[n++] = i;
    bytes += strlen(o->id) + 32;
  }
  qsort(ptrs, n, sizeof *ptrs, cmp_info);
  r.n_objects = n;
  r.objects = ptrs;
  hpl__conn_send(dc->c, HPL__MSG_LIST_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
  free(infos);
  free(ptrs);
}

static void on_counters(dir_server *s, dir_conn *dc, uint64_t req) {
  struct {
    const char *name;
    uint64_t v;
  } vals[] = {
      {"dir_nodes", HASH_COUNT(s->nodes)},      {"dir_objects", s->tab.nobjs},
      {"dir_inline_bytes", s->tab.inline_bytes}, {"dir_acquires", s->ctr.acquires},
      {"dir_inline_served", s->ctr.inline_served}, {"dir_senders_assigned", s->ctr.senders_assigned},
      {"dir_ring_assigned", s->ctr.ring_assigned}, {"dir_peeks_served", s->ctr.peeks_served},
      {"dir_waits", s->ctr.waits},              {"dir_lost_replies", s->ctr.lost_replies},
      {"dir_nodes_dead", s->ctr.nodes_dead},
  };
  size_t n = sizeof vals / sizeof vals[0];
  Hplpb__Counter cs[sizeof vals / sizeof vals[0]];
  Hplpb__Counter *ps[sizeof vals / sizeof vals[0]];
  for (size_t i = 0; i < n; i++) {
    hplpb__counter__init(&cs[i]);
    cs[i].name = (char *)vals[i].name;
    cs[i].value = vals[i].v;
    ps[i] = &cs[i];
  }
  Hplpb__CountersRep r = HPLPB__COUNTERS_REP__INIT;
  r.n_counters = n;
  r.counters = ps;
  hpl__conn_send(dc->c, HPL__MSG_COUNTERS_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* Requests that name an object carry an id the directory must check. */
static const char *frame_id(unsigned type, ProtobufCMessage *m) {
  switch (type) {
    case HPL__MSG_LOC_ADD: return ((Hplpb__LocAddReq *)m)->id;
    case HPL__MSG_LOC_NOTE: return ((Hplpb__LocNote *)m)->id;
    case HPL__MSG_INLINE_PUT: return ((Hplpb__InlinePutReq *)m)->id;
    case HPL__MSG_ACQUIRE: return ((Hplpb__AcquireReq *)m)->id;
    case HPL__MSG_STAT:
    case HPL__MSG_PEEK:
    case HPL__MSG_DELETE:
    case HPL__MSG_REDUCE_INFO: return ((Hplpb__IdReq *)m)->id;
    default: return "x";
  }
}

static void dir_on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                         const uint8_t *payload, uint64_t plen) {
  dir_conn *dc = hpl__conn_data(c);
  dir_server *s = dc->srv;
  if (!hpl__id_valid(frame_id(h->type, m))) {
    hpl__conn_reply(c, h->req_id, HPL_EINVAL, "invalid object id");
    return;
  }
  if (plen && h->type != HPL__MSG_INLINE_PUT) {
    hpl__conn_fail(c, "unexpected payload");
    return;
  }
  int needs_node = h->type == HPL__MSG_LOC_ADD || h->type == HPL__MSG_LOC_NOTE ||
                   h->type == HPL__MSG_INLINE_PUT || h->type == HPL__MSG_ACQUIRE ||
                   h->type == HPL__MSG_HEARTBEAT || h->type == HPL__MSG_REDUCE_FAIL ||
                   h->type == HPL__MSG_DRAIN;
  if (needs_node && !dc->node) {
    hpl__conn_fail(c, "request before REGISTER");
    return;
  }
  if (dc->node) dc->node->last_seen_ms = hpl__now_ms();
  switch (h->type) {
    case HPL__MSG_REGISTER: on_register(s, dc, h->req_id, (Hplpb__RegisterReq *)m); break;
    case HPL__MSG_HEARTBEAT: {
      uint32_t rtt = ((Hplpb__Heartbeat *)m)->rtt_us;
      if (rtt) { /* half a round trip, smoothed */
        double l = (double)rtt / 2e6;
        s->lat_measured = s->lat_measured > 0 ? 0.9 * s->lat_measured + 0.1 * l : l;
      }
      if (h->req_id) hpl__conn_reply(c, h->req_id, 0, NULL);
      break;
    }
    case HPL__MSG_LOC_ADD: on_loc_add(s, dc, h->req_id, (Hplpb__LocAddReq *)m); break;
    case HPL__MSG_LOC_NOTE: on_loc_note(s, dc, h->req_id, (Hplpb__LocNote *)m); break;
    case HPL__MSG_INLINE_PUT:
      on_inline_put(s, dc, h->req_id, (Hplpb__InlinePutReq *)m, payload, plen);
      break;
    case HPL__MSG_ACQUIRE: on_acquire(s, dc, h->req_id, (Hplpb__AcquireReq *)m); break;
    case HPL__MSG_STAT: on_stat(s, dc, h->req_id, (Hplpb__IdReq *)m); break;
    case HPL__MSG_PEEK: on_peek(s, dc, h->req_id, (Hplpb__IdReq *)m); break;
    case HPL__MSG_DELETE: on_delete(s, dc, h->req_id, (Hplpb__IdReq *)m); break;
    case HPL__MSG_LIST: on_list(s, dc, h->req_id, (Hplpb__ListReq *)m); break;
    case HPL__MSG_COUNTERS: on_counters(s, dc, h->req_id); break;
    case HPL__MSG_TRANSFERS: on_transfers(s, dc, h->req_id, (Hplpb__TransfersReq *)m); break;
    case HPL__MSG_REDUCE: dir_reduce_on_request(s, dc, h->req_id, (Hplpb__ReduceReq *)m); break;
    case HPL__MSG_REDUCE_INFO: dir_reduce_on_info(s, dc, h->req_id, (Hplpb__IdReq *)m); break;
    case HPL__MSG_REDUCE_FAIL: dir_reduce_on_fail(s, dc, (Hplpb__ReduceFailNote *)m); break;
    case HPL__MSG_DRAIN:
      LOG_INFO("node %016llx (%s) is leaving: no new receivers for it",
               (unsigned long long)dc->node->id, dc->node->name);
      dc->node->draining = 1;
      hpl__conn_reply(c, h->req_id, 0, NULL);
      break;
    case HPL__MSG_REPLY: delete_ack(s, h->req_id); break; /* a holder dropped its copy */
    default: {
      char why[64];
      snprintf(why, sizeof why, "unexpected %s message", hpl__msg_name(h->type));
      hpl__conn_fail(c, why);
    }
  }
}

/* Copies pulling from a dead node hear it from us: a partitioned node's
 * streams do not end with an EOF. */
static void notify_upstream_gone(dir_server *s, uint64_t dead) {
  dir_obj *o, *tmp;
  HASH_ITER(hh, s->tab.objs, o, tmp) {
    for (dir_loc *l = o->locs; l; l = l->next) {
      if (l->upstream != dead || l->node == dead) continue;
      dir_node *n = dir_node_find(s, l->node);
      if (!n || !n->conn) continue;
      Hplpb__UpstreamNote u = HPLPB__UPSTREAM_NOTE__INIT;
      u.id = o->id;
      u.peer = dead;
      hpl__conn_send(n->conn->c, HPL__MSG_UPSTREAM_GONE, 0, &u.base, NULL, 0, 0, NULL, NULL);
    }
  }
}

static void node_gone(dir_server *s, dir_node *n, const char *why) {
  LOG_WARN("node %016llx (%s, %s:%d) gone: %s", (unsigned long long)n->id, n->name, n->addr,
           n->port, why);
  s->ctr.nodes_dead++;
  notify_upstream_gone(s, n->id);
  dir_xlog(s, HPL__XFER_NODE_GONE, "", n->id, 0);
  HASH_DEL(s->nodes, n);
  uint64_t id = n->id;
  free(n);
  dtab_node_gone(&s->tab, id, object_changed_cb, s);
  dir_reduce_node_gone(s, id);
}

static void dir_on_close(hpl__conn *c, int status) {
  dir_conn *dc = hpl__conn_data(c);
  dir_server *s = dc->srv;
  while (dc->waiters) {
    dir_waiter *w = dc->waiters;
    dir_obj *o = w->obj;
    waiter_drop(w);
    dtab_gc(&s->tab, o);
  }
  if (dc->node && dc->node->conn == dc && !s->stopping)
    node_gone(s, dc->node, status == 0 ? "connection closed" : hpl_strerror(status));
  dir_delete *d, *dtmp;
  HASH_ITER(hh, s->deletes, d, dtmp) if (d->dc == dc) d->dc = NULL;
  dir_reduce_conn_closed(s, dc);
  if (dc->prev) dc->prev->next = dc->next; else s->conns = dc->next;
  if (dc->next) dc->next->prev = dc->prev;
  free(dc);
}

static void dir_on_accept(uv_stream_t *server, int status) {
  dir_server *s = server->data;
  if (status < 0) {
    LOG_WARN("accept: %s", uv_strerror(status));
    return;
  }
  uv_tcp_t *t = malloc(sizeof *t);
  dir_conn *dc = calloc(1, sizeof *dc);
  if (!t || !dc) {
    free(t);
    free(dc);
    return;
  }
  uv_tcp_init(s->loop, t);
  if (uv_accept(server, (uv_stream_t *)t) != 0) {
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    free(dc);
    return;
  }
  uv_tcp_nodelay(t, 1);
  dc->srv = s;
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char host[64] = "?", label[96];
  if (uv_tcp_getpeername(t, (struct sockaddr *)&ss, &len) == 0)
    uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
  snprintf(label, sizeof label, "dir<-%s", host);
  hpl__conn_opts o = {.lim = {.max_msg = HPL__MAX_MSG_CTRL,
                             .max_payload = s->cfg.inline_max,
                             .max_type = HPL__MSG_MAX_},
                     .stream_payloads = 0,
                     .on_frame = dir_on_frame,
                     .on_close = dir_on_close,
                     .data = dc,
                     .label = label};
  dc->next = s->conns;
  if (s->conns) s->conns->prev = dc;
  s->conns = dc;
  dc->c = hpl__conn_new((uv_stream_t *)t, &o);
  if (!dc->c) { /* the stream is closed; unlink */
    s->conns = dc->next;
    if (s->conns) s->conns->prev = NULL;
    free(dc);
  }
}

static void dir_sweep(uv_timer_t *t) {
  dir_server *s = t->data;
  uint64_t now = hpl__now_ms();
  dir_node *n, *tmp;
  HASH_ITER(hh, s->nodes, n, tmp) {
    if (now - n->last_seen_ms <= s->cfg.heartbeat_timeout_ms) continue;
    dir_conn *dc = n->conn;
    char why[64];
    snprintf(why, sizeof why, "no heartbeat for %llu ms",
             (unsigned long long)(now - n->last_seen_ms));
    if (dc) {
      dc->node = NULL;
      hpl__conn_close(dc->c, HPL_ETIMEDOUT);
    }
    node_gone(s, n, why);
  }
}

static void dir_on_signal(uv_signal_t *sig, int signum) {
  dir_server *s = sig->data;
  LOG_INFO("signal %d: shutting down", signum);
  s->stopping = 1;
  uv_close((uv_handle_t *)&s->listener, NULL);
  uv_close((uv_handle_t *)&s->sweep, NULL);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  /* closing a connection drops its waiters and their timers */
  for (dir_conn *dc = s->conns; dc; dc = dc->next) hpl__conn_close(dc->c, 0);
  dir_delete *d, *dtmp;
  HASH_ITER(hh, s->deletes, d, dtmp) delete_finish(d);
}

int dir_server_start(dir_server *s, uv_loop_t *loop, const dir_config *cfg) {
  memset(s, 0, sizeof *s);
  s->loop = loop;
  s->cfg = *cfg;
  dtab_init(&s->tab, cfg->max_senders);
  s->tab.usable = node_usable;
  s->tab.usable_arg = s;
  s->instance = hpl__random_u64();
  s->xlog = calloc(DIR_XFER_CAP, sizeof *s->xlog);
  if (!s->xlog) return HPL_ENOMEM;
  struct sockaddr_in addr;
  int rc = uv_ip4_addr(cfg->listen_host, cfg->listen_port, &addr);
  if (rc) {
    LOG_ERROR("bad listen address %s: %s", cfg->listen_host, uv_strerror(rc));
    return HPL_EINVAL;
  }
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  if ((rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0)) ||
      (rc = uv_listen((uv_stream_t *)&s->listener, 512, dir_on_accept))) {
    LOG_ERROR("cannot listen on %s:%d: %s", cfg->listen_host, cfg->listen_port, uv_strerror(rc));
    return HPL_ESYS;
  }
  struct sockaddr_storage ss;
  int len = sizeof ss;
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
  int port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  LOG_INFO("listening on %s:%d (inline max %u B, max senders per copy %u, heartbeat %u/%u ms)",
           cfg->listen_host, port, cfg->inline_max, cfg->max_senders, cfg->heartbeat_ms,
           cfg->heartbeat_timeout_ms);
  if (cfg->port_file) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", cfg->port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, cfg->port_file)) {
      LOG_ERROR("cannot write port file %s", cfg->port_file);
      return HPL_ESYS;
    }
  }
  uv_timer_init(loop, &s->sweep);
  s->sweep.data = s;
  uv_timer_start(&s->sweep, dir_sweep, cfg->heartbeat_ms, cfg->heartbeat_ms);
  uv_signal_init(loop, &s->sigint);
  uv_signal_init(loop, &s->sigterm);
  s->sigint.data = s->sigterm.data = s;
  uv_signal_start(&s->sigint, dir_on_signal, SIGINT);
  uv_signal_start(&s->sigterm, dir_on_signal, SIGTERM);
  return 0;
}

void dir_server_free(dir_server *s) {
  dir_reduce_free_all(s);
  dtab_clear(&s->tab);
  for (size_t i = 0; s->xlog && i < DIR_XFER_CAP; i++) free(s->xlog[i].id);
  free(s->xlog);
  s->xlog = NULL;
  dir_node *n, *tmp;
  HASH_ITER(hh, s->nodes, n, tmp) {
    HASH_DEL(s->nodes, n);
    free(n);
  }
}
