/* nodes.c - the directory's node registry, the events that tell the
 * modules above about a node's life, the handlers of what nodes send, and
 * a node's end (see nodes.h). Liveness (the sweep, probes, verdicts) is
 * nodelive.c's. */
#include "nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "hoplite.h"
#include "log.h"
#include "nodes_int.h"
#include "util.h"
#include "xlog.h"

int hpl__dir_nodes_init(hpl__dir_server *s) {
  s->nodes = calloc(1, sizeof *s->nodes);
  return s->nodes ? 0 : HPL_ENOMEM;
}

int hpl__dir_nodes_subscribe(hpl__dir_server *s, unsigned events, hpl__dir_node_fn fn, void *arg) {
  struct hpl__dir_nodes *st = s->nodes;
  if (st->nsubs == HPL__DIR_NODES_MAX_SUBS) return -1;
  st->subs[st->nsubs].events = events;
  st->subs[st->nsubs].fn = fn;
  st->subs[st->nsubs].arg = arg;
  st->nsubs++;
  return 0;
}

/* Tell the subscribers of e->type, in subscription order. */
static void emit(hpl__dir_server *s, const hpl__dir_node_event *e) {
  struct hpl__dir_nodes *st = s->nodes;
  for (int i = 0; i < st->nsubs; i++)
    if (st->subs[i].events & HPL__DIR_NODE_EV(e->type)) st->subs[i].fn(s, e, st->subs[i].arg);
}

/* An event about node n (or, n NULL, about node `id`) with nothing else. */
void hpl__dir_nodes_emit_simple(hpl__dir_server *s, hpl__dir_node_ev type, hpl__dir_node *n,
                                uint64_t id) {
  hpl__dir_node_event e = {.type = type, .id = id, .node = n};
  emit(s, &e);
}

/* ------------------------------------------------------------------ the registry */

hpl__dir_node *hpl__dir_node_find(hpl__dir_server *s, uint64_t id) {
  hpl__dir_node *n = NULL;
  HASH_FIND(hh, s->nodes->by_id, &id, sizeof id, n);
  return n;
}

uint32_t hpl__dir_nodes_count(hpl__dir_server *s) { return HASH_COUNT(s->nodes->by_id); }

hpl__dir_node *hpl__dir_nodes_first(hpl__dir_server *s) { return s->nodes->by_id; }

int hpl__dir_node_usable(uint64_t node, void *srv) {
  hpl__dir_node *n = hpl__dir_node_find(srv, node);
  return n && !n->draining;
}

int hpl__dir_node_suspected(uint64_t node, void *srv) {
  hpl__dir_node *n = hpl__dir_node_find(srv, node);
  return n && n->probe == HPL__DIR_PROBE_UNANSWERED;
}

int hpl__dir_node_send_to(hpl__dir_node *n, unsigned type, uint64_t req,
                          const ProtobufCMessage *m) {
  if (!n->conn) return HPL_ENOTFOUND;
  return hpl__conn_send(n->conn->c, type, req, m, NULL, 0, 0, NULL, NULL);
}

int hpl__dir_node_send(hpl__dir_server *s, uint64_t id, unsigned type, uint64_t req,
                       const ProtobufCMessage *m) {
  hpl__dir_node *n = hpl__dir_node_find(s, id);
  return n ? hpl__dir_node_send_to(n, type, req, m) : HPL_ENOTFOUND;
}

const char *hpl__dir_node_state_name(hpl__dir_server *s, const hpl__dir_node *n, uint64_t now) {
  if (n->draining) return "draining";
  if (n->probe == HPL__DIR_PROBE_UNANSWERED || n->live == HPL__DIR_LIVE_SUSPECT) return "suspected";
  if (now > n->last_seen_ms && now - n->last_seen_ms > 2ull * s->cfg.heartbeat_ms) return "silent";
  return "alive";
}

/* ------------------------------------------------------------------ a node's end */

/* Copies pulling from a dead node hear it from us: a partitioned node's
 * streams do not end with an EOF. (hpl__dtab_node_gone callback.) */
static void upstream_gone_cb(hpl__dir_obj *o, uint64_t receiver, void *arg) {
  hpl__dir_nodes_gone_arg *a = arg;
  Hplpb__UpstreamNote u = HPLPB__UPSTREAM_NOTE__INIT;
  u.id = o->id;
  u.peer = a->node;
  hpl__dir_node_send(a->s, receiver, HPL__MSG_UPSTREAM_GONE, 0, &u.base);
}

/* hpl__dtab_node_gone callback: the object changed (its subscribers hear). */
static void object_changed_cb(hpl__dir_obj *o, void *arg) {
  hpl__dir_nodes_gone_arg *a = arg;
  hpl__dtab_changed(&a->s->tab, o);
}

/* The node leaves its connection: what it waited for there is void (a
 * store re-sends its pending requests on its next connection), and
 * nothing may be sent to it on that connection any more. The connection
 * itself is closed by the caller (or is closing already). */
static void node_unplug(hpl__dir_server *s, hpl__dir_node *n) {
  hpl__dir_nodes_emit_simple(s, HPL__DIR_NODE_UNPLUGGED, n, n->id);
  if (n->conn) n->conn->node = NULL;
  n->conn = NULL;
}

/* Every copy node `id` held is gone, and so is what it ran for others. */
static void node_copies_gone(hpl__dir_server *s, uint64_t id) {
  hpl__dir_xlog(s, HPL__XFER_NODE_GONE, "", id, 0);
  hpl__dir_nodes_gone_arg a = {.s = s, .node = id};
  hpl__dtab_node_gone(&s->tab, id, upstream_gone_cb, object_changed_cb, &a);
  hpl__dir_nodes_emit_simple(s, HPL__DIR_NODE_TASKS_VOID, NULL, id);
}

/* The node is dead (or left): forget it. */
void hpl__dir_node_gone(hpl__dir_server *s, hpl__dir_node *n, const char *why) {
  HPL__LOG_WARN("node %016llx (%s, %s:%d) gone: %s", (unsigned long long)n->id, n->name, n->addr,
                n->port, why);
  s->ctr.nodes_dead++;
  node_unplug(s, n);
  HASH_DEL(s->nodes->by_id, n);
  hpl__dir_node_event e = {.type = HPL__DIR_NODE_DEAD, .id = n->id, .node = n, .why = why};
  emit(s, &e);
  uint64_t id = n->id;
  free(n);
  uint64_t t0 = hpl__now_ns(), copies = hpl__dtab_node_count(&s->tab, id);
  node_copies_gone(s, id);
  HPL__LOG_INFO("node %016llx: %llu copies dropped in %.3f ms", (unsigned long long)id,
                (unsigned long long)copies, (double)(hpl__now_ns() - t0) / 1e6);
}

void hpl__dir_nodes_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc, int status) {
  hpl__dir_node *n = dc->node;
  if (!n) return;
  if (s->stopping) {
    node_unplug(s, n);
    return;
  }
  hpl__dir_node_gone(s, n, status == 0 ? "connection closed" : hpl_strerror(status));
}

/* ------------------------------------------------------------------ handlers */

/* A live node other than `id` registered as `name` (NULL: none). Walks
 * every node: registrations are rare. */
static const hpl__dir_node *name_taken(hpl__dir_server *s, const char *name, uint64_t id) {
  for (const hpl__dir_node *n = s->nodes->by_id; n; n = n->hh.next)
    if (n->conn && n->id != id && !strcmp(n->name, name)) return n;
  return NULL;
}

void hpl__dir_nodes_on_register(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__RegisterReq *m = (Hplpb__RegisterReq *)f->msg;
  hpl__dir_conn *dc = f->dc;
  if (m->node_id == 0 || !m->addr || strlen(m->addr) >= sizeof(((hpl__dir_node *)0)->addr) ||
      m->data_port == 0 || m->data_port > 65535) {
    hpl__conn_reply(dc->c, f->req, HPL_EINVAL, "bad registration");
    return;
  }
  if (dc->node && dc->node->id != m->node_id) {
    char detail[96];
    snprintf(detail, sizeof detail, "bad registration: this connection is node %016llx",
             (unsigned long long)dc->node->id);
    hpl__conn_reply(dc->c, f->req, HPL_EINVAL, detail);
    return;
  }
  /* with a secret, a node is the name its key proved (auth.h), whatever
   * the request says, and only a node's key registers */
  const char *name = m->name ? m->name : "";
  if (s->cfg.auth.on) {
    if (hpl__conn_role(dc->c) != HPL__ROLE_NODE) {
      hpl__conn_reply(dc->c, f->req, HPL_EAUTH, "only a store's node credential registers");
      return;
    }
    name = hpl__conn_peer_name(dc->c);
    const hpl__dir_node *twin = name_taken(s, name, m->node_id);
    if (twin) {
      s->ctr.takeovers_refused++;
      HPL__LOG_WARN("refused a registration as node %s from %s: node %016llx has that name and "
                    "is live on another connection", name, dc->peer, (unsigned long long)twin->id);
      char detail[200];
      snprintf(detail, sizeof detail, "node %s is live on another connection: one store per "
               "node name (it may register once that connection is gone)", name);
      hpl__conn_reply(dc->c, f->req, HPL_EEXIST, detail);
      return;
    }
  }
  hpl__dir_node *n = hpl__dir_node_find(s, m->node_id);
  if (n && n->conn && n->conn != dc && !(m->incarnation && m->incarnation == n->incarnation)) {
    /* a live node's id from another process: node ids are random per
     * store process, so this is not that node coming back (it would give
     * its incarnation) but a peer trying to speak for it */
    s->ctr.takeovers_refused++;
    HPL__LOG_WARN("refused a registration as node %016llx from %s: that node is live on "
                  "another connection (another store process)",
                  (unsigned long long)m->node_id, dc->peer);
    char detail[160];
    snprintf(detail, sizeof detail, "node %016llx is live on another connection: a store "
             "registers under its own id", (unsigned long long)m->node_id);
    hpl__conn_reply(dc->c, f->req, HPL_EEXIST, detail);
    return;
  }
  if (n && n->conn && n->conn != dc) {
    /* the node reconnected before we noticed the old connection died */
    hpl__dir_conn *old = n->conn;
    node_unplug(s, n);
    hpl__conn_close(old->c, 0);
    /* the same store process (checked above): its copies are where they
     * were (what changed meanwhile it re-sends: requests it queued, then
     * HELD); only what it was doing over the old connection is void */
    HPL__LOG_INFO("node %016llx reconnected", (unsigned long long)m->node_id);
    s->ctr.reconnects++;
    hpl__dir_nodes_emit_simple(s, HPL__DIR_NODE_TASKS_VOID, NULL, n->id);
  }
  if (!n) {
    n = calloc(1, sizeof *n);
    if (!n) {
      hpl__conn_reply(dc->c, f->req, HPL_ENOMEM, "out of memory");
      return;
    }
    n->id = m->node_id;
    HASH_ADD(hh, s->nodes->by_id, id, sizeof n->id, n);
  }
  snprintf(n->addr, sizeof n->addr, "%s", m->addr);
  snprintf(n->name, sizeof n->name, "%s", name);
  n->port = (int)m->data_port;
  n->incarnation = m->incarnation;
  n->grants = m->grants;
  n->conn = dc;
  n->draining = 0;
  n->last_seen_ms = hpl__now_ms();
  n->hb_last_ms = 0; /* the gap before this registration is no interval */
  n->owd_epoch_ms = 0; /* a new connection (maybe a new process): a new baseline */
  n->queue_us = 0;
  n->probe_ms = 0;
  hpl__dir_node_probe_set(n, HPL__DIR_PROBE_NONE);
  dc->node = n;
  hpl__dir_node_event e = {.type = HPL__DIR_NODE_JOINED, .id = n->id, .node = n, .held = m->held,
                           .nheld = m->n_held};
  emit(s, &e);
  HPL__LOG_INFO("node %016llx (%s) registered: data %s:%d, %zu objects re-reported",
                (unsigned long long)n->id, n->name, n->addr, n->port, m->n_held);
  Hplpb__RegisterRep r = HPLPB__REGISTER_REP__INIT;
  r.inline_max = s->cfg.inline_max;
  r.heartbeat_ms = s->cfg.heartbeat_ms;
  r.max_senders = s->cfg.max_senders;
  r.instance = s->instance;
  r.term = s->cfg.term;
  r.quiet_notes = 1;
  r.rings = !s->cfg.no_rings;
  r.publish = !s->cfg.no_publish;
  hpl__conn_send(dc->c, HPL__MSG_REGISTER_REP, f->req, &r.base, NULL, 0, 0, NULL, NULL);
  hpl__dir_nodes_emit_simple(s, HPL__DIR_NODE_WELCOMED, n, n->id);
}

void hpl__dir_nodes_on_heartbeat(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__Heartbeat *hb = (Hplpb__Heartbeat *)f->msg;
  hpl__dir_node *n = f->dc->node;
  hpl__dir_node_note_owd(n, hb->sent_us);
  if (!f->req && n->measure_sent_us && !n->measure_rtt_us) { /* a probe's answer */
    uint64_t now = hpl__now_ns() / 1000;
    n->measure_rtt_us = now > n->measure_sent_us ? now - n->measure_sent_us : 1;
  }
  /* a probe's answer (not a request) is not a heartbeat of the schedule */
  if (f->req) hpl__dir_node_note_heartbeat(n, hpl__now_ms());
  if (f->req && hb->stats) { /* `hoplite status` */
    hpl__dir_node_event e = {.type = HPL__DIR_NODE_STATS, .id = n->id, .node = n, .hb = hb};
    emit(s, &e);
  }
  hpl__dir_cost_note_rtt(s, hb->rtt_us);
  if (hb->rtt_us) n->rtt_us = hb->rtt_us;
  if (f->req) hpl__conn_reply(f->dc->c, f->req, 0, NULL);
}

void hpl__dir_nodes_on_quiet(hpl__dir_server *s, const hpl__dir_frame *f) {
  const Hplpb__Heartbeat *m = (const Hplpb__Heartbeat *)f->msg;
  hpl__dir_node *n = hpl__dir_node_find(s, m->node_id);
  uint64_t wait;
  if (!n || n == f->dc->node) return;
  s->ctr.quiet_notes++;
  /* a probe goes out unless one is (or was just) out; a verdict on one
   * that went unanswered counts as any */
  hpl__dir_node_verdict(s, n, 0, &wait); /* the noting node has asked nothing: it moves too */
}

void hpl__dir_nodes_on_drain(hpl__dir_server *s, const hpl__dir_frame *f) {
  (void)s;
  hpl__dir_node *n = f->dc->node;
  HPL__LOG_INFO("node %016llx (%s) is leaving: no new receivers for it", (unsigned long long)n->id,
                n->name);
  n->draining = 1;
  hpl__conn_reply(f->dc->c, f->req, 0, NULL);
}

void hpl__dir_nodes_free(hpl__dir_server *s) {
  if (!s->nodes) return;
  hpl__dir_node *n, *tmp;
  HASH_ITER(hh, s->nodes->by_id, n, tmp) {
    HASH_DEL(s->nodes->by_id, n);
    free(n);
  }
  free(s->nodes);
  s->nodes = NULL;
}
