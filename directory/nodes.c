/* nodes.c - the directory's node registry and liveness (see nodes.h). */
#include "nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "acquire.h"
#include "cost.h"
#include "hoplite.h"
#include "locs.h"
#include "log.h"
#include "ring.h"
#include "reduce.h"
#include "status.h"
#include "util.h"
#include "xlog.h"

dir_node *dir_node_find(dir_server *s, uint64_t id) {
  dir_node *n = NULL;
  HASH_FIND(hh, s->nodes, &id, sizeof id, n);
  return n;
}

int dir_node_usable(uint64_t node, void *srv) {
  dir_node *n = dir_node_find(srv, node);
  return n && !n->draining;
}

int dir_node_send(dir_server *s, uint64_t id, unsigned type, uint64_t req,
                  const ProtobufCMessage *m) {
  dir_node *n = dir_node_find(s, id);
  if (!n || !n->conn) return HPL_ENOTFOUND;
  return hpl__conn_send(n->conn->c, type, req, m, NULL, 0, 0, NULL, NULL);
}

void dir_node_heard(dir_server *s, dir_node *n) {
  n->last_seen_ms = hpl__now_ms();
  n->probe_heard = 1;
  if (n->unresponsive) {
    n->unresponsive = 0;
    LOG_INFO("node %016llx (%s) answers again: it may serve as before", (unsigned long long)n->id,
             n->name);
    dir_reduce_node_back(s, n->id);
  }
}

/* How long a probe of `n` may take: the configured time, plus what its
 * heartbeats say it needs when its loop or its link is busy (4 standard
 * deviations of their interval, twice its last round trip), at most 8x the
 * configured time. A node on a loaded machine is not judged silent for a
 * jitter it always shows. */
static uint64_t probe_timeout(const dir_server *s, const dir_node *n) {
  double base = s->cfg.probe_ms, t = base;
  if (n->hb_n >= 8 && n->hb_var > 0) t += 4 * sqrt(n->hb_var);
  t += 2.0 * n->rtt_us / 1000.0;
  return t > 8 * base ? (uint64_t)(8 * base) : (uint64_t)t;
}

int dir_node_suspected(uint64_t node, void *srv) {
  dir_node *n = dir_node_find(srv, node);
  return n && n->unresponsive;
}

int dir_node_reported_crawl(const dir_node *n, uint64_t now, uint64_t ms) {
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
int dir_node_crawling(uint64_t node, void *srv) {
  dir_node *n = dir_node_find(srv, node);
  uint64_t now = hpl__now_ms();
  if (dir_node_reported_crawl(n, now, DIR_CRAWLING_MS)) return 1;
  if (!blamed_recently(n, now)) return 0;
  return !blamed_recently(dir_node_find(srv, n->blamed_by), now);
}

/* ------------------------------------------------------------------ silent senders */

/* Receivers of an unresponsive node move on (dtab_node_unresponsive
 * callback): a partition or a stopped process closes no stream. */
static void move_off_cb(dir_obj *o, uint64_t receiver, void *arg) {
  dir_server *s = arg;
  if (receiver == s->gone_reporter) return; /* it gets its answer */
  Hplpb__UpstreamNote u = HPLPB__UPSTREAM_NOTE__INIT;
  u.id = o->id;
  u.peer = s->gone_node;
  u.suspect = 1;
  dir_node_send(s, receiver, HPL__MSG_UPSTREAM_GONE, 0, &u.base);
}

/* n did not answer its probe in time: a sender of last resort, and every
 * receiver pulling from it moves (but `reporter`, answered directly). */
static void mark_unresponsive(dir_server *s, dir_node *n, uint64_t reporter, uint64_t now) {
  n->unresponsive = 1;
  n->hb_outage = 1;
  s->ctr.suspects++;
  LOG_WARN("node %016llx (%s) is reported silent and did not answer a probe in %llu ms: "
           "a sender of last resort until heard again", (unsigned long long)n->id, n->name,
           (unsigned long long)(now - n->probe_ms));
  s->gone_node = n->id;
  s->gone_reporter = reporter;
  dtab_node_unresponsive(&s->tab, n->id, move_off_cb, s);
  s->gone_reporter = 0;
  dir_reduce_node_unresponsive(s, n->id);
}

/* A probe out, not answered (yet). */
static int probe_open(const dir_node *n) {
  return n->probe_ms && !n->unresponsive && !n->probe_heard;
}

static void probe_check(uv_timer_t *t);

/* Probes are judged when due, after one more poll of the sockets (as the
 * liveness sweep does: answers that arrived while the loop was busy are
 * read first). */
static void probe_judge(uv_timer_t *t) {
  dir_server *s = t->data;
  uint64_t now = hpl__now_ms(), next = 0;
  dir_node *n, *tmp;
  HASH_ITER(hh, s->nodes, n, tmp) {
    if (!probe_open(n)) continue;
    uint64_t due = n->probe_ms + n->probe_to;
    if (due <= now) mark_unresponsive(s, n, 0, now);
    else if (!next || due < next) next = due;
  }
  if (next) uv_timer_start(&s->probe_timer, probe_check, next - now, 0);
}

static void probe_check(uv_timer_t *t) {
  uv_timer_start(t, probe_judge, 1, 0); /* runs after the next poll */
}

int dir_node_verdict(dir_server *s, dir_node *n, uint64_t reporter, uint64_t *wait_ms) {
  uint64_t now = hpl__now_ms(), to = n->probe_ms ? n->probe_to : 0;
  *wait_ms = 0;
  if (n->unresponsive) return DIR_SILENT;
  if (n->probe_ms && now - n->probe_ms < 2 * to) {
    if (n->probe_heard) return DIR_ALIVE;
    if (now - n->probe_ms < to) {
      *wait_ms = n->probe_ms + to - now;
      return DIR_PROBING;
    }
    mark_unresponsive(s, n, reporter, now);
    return DIR_SILENT;
  }
  Hplpb__Heartbeat p = HPLPB__HEARTBEAT__INIT;
  p.node_id = n->id;
  if (dir_node_send(s, n->id, HPL__MSG_PROBE, 0, &p.base) == 0) s->ctr.probes++;
  n->probe_ms = now;
  n->probe_heard = 0;
  n->probe_to = to = probe_timeout(s, n);
  *wait_ms = to;
  if (!uv_is_active((uv_handle_t *)&s->probe_timer))
    uv_timer_start(&s->probe_timer, probe_check, to, 0);
  return DIR_PROBING;
}

void dir_node_measure(dir_server *s, dir_node *n) {
  uint64_t now = hpl__now_ns() / 1000;
  if (n->measure_sent_us && now - n->measure_sent_us < DIR_MEASURE_EVERY_MS * 1000ull) return;
  Hplpb__Heartbeat p = HPLPB__HEARTBEAT__INIT;
  p.node_id = n->id;
  if (dir_node_send(s, n->id, HPL__MSG_PROBE, 0, &p.base) != 0) return;
  s->ctr.measures++;
  n->measure_sent_us = now;
  n->measure_rtt_us = 0;
}

uint32_t dir_node_link_delay_us(const dir_node *n, uint64_t now_us) {
  uint64_t d = dir_node_delay_us(n, now_us / 1000);
  if (n->measure_sent_us && now_us - n->measure_sent_us < 1000000) {
    uint64_t m = n->measure_rtt_us ? n->measure_rtt_us : now_us - n->measure_sent_us;
    if (m > d) d = m;
  }
  return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

uint64_t dir_node_timeout_ms(const dir_server *s, const dir_node *n) {
  uint64_t hi = s->cfg.heartbeat_timeout_ms, lo = 3ull * s->cfg.heartbeat_ms;
  if (lo > hi) lo = hi;
  if (n->hb_n < 8) return hi;
  double sd = n->hb_var > 0 ? sqrt(n->hb_var) : 0;
  double t = n->hb_mean + 8 * sd + s->cfg.heartbeat_ms / 2.0;
  if (t < (double)lo) return lo;
  if (t > (double)hi) return hi;
  return (uint64_t)t;
}

/* A heartbeat arrived: the interval statistics. They describe the jitter
 * of a working node, which sets its probe and heartbeat timeouts; an
 * outage is not jitter. A node stopped or cut off for a few seconds would
 * otherwise leave one huge interval, then a burst of near-zero ones (its
 * queued heartbeats), in the EWMAs, and its probes would get the 8x cap
 * (800 ms) for the next half minute: seen after a cut in the fault runs.
 * So an interval that spans a probe it failed, or that is over twice the
 * mean and 6 standard deviations over it, is an outage; it and the
 * heartbeats arriving within one mean interval after it are not counted. */
static void note_heartbeat(dir_node *n, uint64_t now) {
  int outage = n->hb_outage;
  n->hb_outage = 0;
  if (n->hb_last_ms && now > n->hb_last_ms) {
    double x = (double)(now - n->hb_last_ms);
    if (outage || (n->hb_n >= 2 && x > 2 * n->hb_mean &&
                   x > n->hb_mean + 6 * sqrt(n->hb_var > 0 ? n->hb_var : 0))) {
      n->hb_backlog_until_ms = now + (uint64_t)n->hb_mean;
    } else if (now >= n->hb_backlog_until_ms) {
      if (n->hb_n == 0) {
        n->hb_mean = x;
        n->hb_var = 0;
      } else {
        double d = x - n->hb_mean;
        n->hb_mean += 0.1 * d;
        n->hb_var = 0.9 * (n->hb_var + 0.1 * d * d);
      }
      n->hb_n++;
    }
  }
  n->hb_last_ms = now;
}

/* ------------------------------------------------------------------ a node's end */

/* dtab_node_gone callback: (object, server). */
static void object_changed_cb(dir_obj *o, void *arg) {
  dir_server *s = arg;
  dtab_changed(&s->tab, o);
}

/* Copies pulling from a dead node hear it from us: a partitioned node's
 * streams do not end with an EOF. (dtab_node_gone callback.) */
static void upstream_gone_cb(dir_obj *o, uint64_t receiver, void *arg) {
  dir_server *s = arg;
  Hplpb__UpstreamNote u = HPLPB__UPSTREAM_NOTE__INIT;
  u.id = o->id;
  u.peer = s->gone_node;
  dir_node_send(s, receiver, HPL__MSG_UPSTREAM_GONE, 0, &u.base);
}

/* The node leaves its connection: what it waited for there is void (a
 * store re-sends its pending requests on its next connection), and
 * nothing may be sent to it on that connection any more. The connection
 * itself is closed by the caller (or is closing already). */
static void node_unplug(dir_server *s, dir_node *n) {
  dir_acquire_drop_node(s, n);
  if (n->conn) n->conn->node = NULL;
  n->conn = NULL;
}

/* Every copy node `id` held is gone, and so are its reduce slots. */
static void node_copies_gone(dir_server *s, uint64_t id) {
  dir_xlog(s, HPL__XFER_NODE_GONE, "", id, 0);
  s->gone_node = id;
  dtab_node_gone(&s->tab, id, upstream_gone_cb, object_changed_cb, s);
  dir_reduce_node_gone(s, id);
  dir_ring_node_gone(s, id);
}

/* The node is dead (or left): forget it. */
static void node_gone(dir_server *s, dir_node *n, const char *why) {
  LOG_WARN("node %016llx (%s, %s:%d) gone: %s", (unsigned long long)n->id, n->name, n->addr,
           n->port, why);
  s->ctr.nodes_dead++;
  node_unplug(s, n);
  HASH_DEL(s->nodes, n);
  dir_status_node_gone(s, n, why);
  uint64_t id = n->id;
  free(n);
  uint64_t t0 = hpl__now_ns(), copies = dtab_node_count(&s->tab, id);
  node_copies_gone(s, id);
  LOG_INFO("node %016llx: %llu copies dropped in %.3f ms", (unsigned long long)id,
           (unsigned long long)copies, (double)(hpl__now_ns() - t0) / 1e6);
}

void dir_nodes_conn_closed(dir_server *s, dir_conn *dc, int status) {
  dir_node *n = dc->node;
  if (!n) return;
  if (s->stopping) {
    node_unplug(s, n);
    return;
  }
  node_gone(s, n, status == 0 ? "connection closed" : hpl_strerror(status));
}

/* ------------------------------------------------------------------ handlers */

void dir_nodes_on_register(dir_server *s, const dir_frame *f) {
  Hplpb__RegisterReq *m = (Hplpb__RegisterReq *)f->msg;
  dir_conn *dc = f->dc;
  if (m->node_id == 0 || !m->addr || strlen(m->addr) >= sizeof(((dir_node *)0)->addr) ||
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
  dir_node *n = dir_node_find(s, m->node_id);
  if (n && n->conn && n->conn != dc) {
    /* the node reconnected before we noticed the old connection died */
    dir_conn *old = n->conn;
    node_unplug(s, n);
    hpl__conn_close(old->c, 0);
    if (m->incarnation && m->incarnation == n->incarnation) {
      /* the same store process: its copies are where they were (what
       * changed meanwhile it re-sends: requests it queued, then HELD); only
       * what it was doing over the old connection is void */
      LOG_INFO("node %016llx reconnected", (unsigned long long)m->node_id);
      s->ctr.reconnects++;
      dir_reduce_node_gone(s, n->id);
      dir_ring_node_gone(s, n->id);
    } else {
      LOG_INFO("node %016llx re-registered as a new store process",
               (unsigned long long)m->node_id);
      node_copies_gone(s, n->id);
    }
  }
  if (!n) {
    n = calloc(1, sizeof *n);
    if (!n) {
      hpl__conn_reply(dc->c, f->req, HPL_ENOMEM, "out of memory");
      return;
    }
    n->id = m->node_id;
    HASH_ADD(hh, s->nodes, id, sizeof n->id, n);
  }
  snprintf(n->addr, sizeof n->addr, "%s", m->addr);
  snprintf(n->name, sizeof n->name, "%s", m->name ? m->name : "");
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
  n->unresponsive = 0;
  dc->node = n;
  dir_locs_held(s, n->id, m->held, m->n_held);
  LOG_INFO("node %016llx (%s) registered: data %s:%d, %zu objects re-reported",
           (unsigned long long)n->id, n->name, n->addr, n->port, m->n_held);
  Hplpb__RegisterRep r = HPLPB__REGISTER_REP__INIT;
  r.inline_max = s->cfg.inline_max;
  r.heartbeat_ms = s->cfg.heartbeat_ms;
  r.max_senders = s->cfg.max_senders;
  r.instance = s->instance;
  r.quiet_notes = 1;
  r.rings = !s->cfg.no_rings;
  r.publish = !s->cfg.no_publish;
  hpl__conn_send(dc->c, HPL__MSG_REGISTER_REP, f->req, &r.base, NULL, 0, 0, NULL, NULL);
  dir_reduce_node_registered(s, n->id);
}

/* Epochs of the smallest one-way delay: a minimum older than two of them
 * is forgotten (clock drift, a path that changed). */
#define OWD_EPOCH_MS 30000

static void note_owd(dir_node *n, uint64_t sent_us) {
  if (!sent_us) return;
  uint64_t now_ms = hpl__now_ms();
  int64_t owd = (int64_t)(hpl__now_ns() / 1000 - sent_us); /* clocks may differ: relative only */
  if (!n->owd_epoch_ms) {
    n->owd_min[0] = n->owd_min[1] = owd;
    n->owd_epoch_ms = now_ms;
  } else if (now_ms - n->owd_epoch_ms >= OWD_EPOCH_MS) {
    n->owd_min[1] = n->owd_min[0];
    n->owd_min[0] = owd;
    n->owd_epoch_ms = now_ms;
  }
  if (owd < n->owd_min[0]) n->owd_min[0] = owd;
  int64_t base = n->owd_min[0] < n->owd_min[1] ? n->owd_min[0] : n->owd_min[1];
  int64_t q = owd - base;
  n->queue_us = q <= 0 ? 0 : q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
}

uint32_t dir_node_delay_us(const dir_node *n, uint64_t now_ms) {
  uint64_t d = n->rtt_us;
  if (n->queue_us > d) d = n->queue_us;
  if (n->hb_n >= 2 && n->hb_last_ms && now_ms > n->hb_last_ms) {
    double late = (double)(now_ms - n->hb_last_ms) - n->hb_mean;
    if (late > 0 && late * 1000.0 > (double)d) d = (uint64_t)(late * 1000.0);
  }
  return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

void dir_nodes_on_heartbeat(dir_server *s, const dir_frame *f) {
  Hplpb__Heartbeat *hb = (Hplpb__Heartbeat *)f->msg;
  note_owd(f->dc->node, hb->sent_us);
  dir_node *n = f->dc->node;
  if (!f->req && n->measure_sent_us && !n->measure_rtt_us) { /* a probe's answer */
    uint64_t now = hpl__now_ns() / 1000;
    n->measure_rtt_us = now > n->measure_sent_us ? now - n->measure_sent_us : 1;
  }
  /* a probe's answer (not a request) is not a heartbeat of the schedule */
  if (f->req) note_heartbeat(f->dc->node, hpl__now_ms());
  if (f->req && hb->stats) dir_status_heartbeat(s, f->dc->node, hb); /* `hoplite status` */
  dir_cost_note_rtt(s, hb->rtt_us);
  if (hb->rtt_us) f->dc->node->rtt_us = hb->rtt_us;
  if (f->req) hpl__conn_reply(f->dc->c, f->req, 0, NULL);
}

void dir_nodes_on_quiet(dir_server *s, const dir_frame *f) {
  const Hplpb__Heartbeat *m = (const Hplpb__Heartbeat *)f->msg;
  dir_node *n = dir_node_find(s, m->node_id);
  uint64_t wait;
  if (!n || n == f->dc->node) return;
  s->ctr.quiet_notes++;
  /* a probe goes out unless one is (or was just) out; a verdict on one
   * that went unanswered counts as any */
  dir_node_verdict(s, n, 0, &wait); /* the noting node has asked nothing: it moves too */
}

void dir_nodes_on_drain(dir_server *s, const dir_frame *f) {
  dir_node *n = f->dc->node;
  LOG_INFO("node %016llx (%s) is leaving: no new receivers for it", (unsigned long long)n->id,
           n->name);
  n->draining = 1;
  hpl__conn_reply(f->dc->c, f->req, 0, NULL);
}

/* ------------------------------------------------------------------ liveness */

/* A sweep this much later than due means the loop stalled. */
#define SWEEP_SLACK_MS 50

/* The sweep runs every heartbeat interval. Two things make a silent-looking
 * node not silent: when the sweep runs late, the loop was busy (or the
 * process stopped), and that delay is not the nodes' silence, so every
 * node's last-seen time moves on by it; and libuv runs timers before it
 * polls the sockets, so heartbeats that arrived during a stall are still
 * unread when the sweep runs. A node that looks dead is therefore only
 * suspected, and judged again by `confirm` after the loop has polled its
 * sockets once more. Whatever keeps the loop busy, no node is declared dead
 * because of it. */
/* How long the node has been silent (0 if heard after `now` was read). */
static uint64_t silent_ms(const dir_node *n, uint64_t now) {
  return now > n->last_seen_ms ? now - n->last_seen_ms : 0;
}

static void confirm(uv_timer_t *t) {
  dir_server *s = t->data;
  uint64_t now = hpl__now_ms();
  dir_node *n, *tmp;
  HASH_ITER(hh, s->nodes, n, tmp) {
    if (!n->suspect) continue;
    n->suspect = 0;
    if (silent_ms(n, now) <= dir_node_timeout_ms(s, n)) continue;
    char why[64];
    snprintf(why, sizeof why, "no heartbeat for %llu ms", (unsigned long long)silent_ms(n, now));
    if (n->conn) hpl__conn_close(n->conn->c, HPL_ETIMEDOUT);
    node_gone(s, n, why);
  }
}

static void sweep(uv_timer_t *t) {
  dir_server *s = t->data;
  uint64_t now = hpl__now_ms();
  dir_node *n, *tmp;
  uint64_t due = s->sweep_due_ms;
  s->sweep_due_ms = now + s->cfg.heartbeat_ms;
  if (due && now > due + SWEEP_SLACK_MS) {
    uint64_t late = now - due;
    s->ctr.sweep_stalls++;
    s->ctr.stall_ms += late;
    LOG_INFO("the directory's loop was busy or stopped for %llu ms: liveness discounts it",
             (unsigned long long)late);
    HASH_ITER(hh, s->nodes, n, tmp) {
      n->last_seen_ms += late;
      if (n->last_seen_ms > now) n->last_seen_ms = now; /* heard during the stall */
    }
  }
  int suspects = 0;
  HASH_ITER(hh, s->nodes, n, tmp) {
    if (silent_ms(n, now) <= dir_node_timeout_ms(s, n)) continue;
    n->suspect = 1;
    suspects++;
  }
  /* a timer due in 1 ms runs after the next poll of the sockets */
  if (suspects) uv_timer_start(&s->confirm, confirm, 1, 0);
}

void dir_liveness_start(dir_server *s) {
  uv_timer_init(s->loop, &s->sweep);
  s->sweep.data = s;
  uv_timer_init(s->loop, &s->confirm);
  s->confirm.data = s;
  uv_timer_init(s->loop, &s->probe_timer);
  s->probe_timer.data = s;
  uv_timer_init(s->loop, &s->crawl_timer);
  s->crawl_timer.data = s;
  dir_acquire_crawl_start(s);
  s->sweep_due_ms = hpl__now_ms() + s->cfg.heartbeat_ms;
  uv_timer_start(&s->sweep, sweep, s->cfg.heartbeat_ms, s->cfg.heartbeat_ms);
}

void dir_liveness_stop(dir_server *s) {
  uv_close((uv_handle_t *)&s->sweep, NULL);
  uv_close((uv_handle_t *)&s->confirm, NULL);
  uv_close((uv_handle_t *)&s->probe_timer, NULL);
  uv_close((uv_handle_t *)&s->crawl_timer, NULL);
  dir_acquire_crawl_stop(s);
}

void dir_nodes_free(dir_server *s) {
  dir_node *n, *tmp;
  HASH_ITER(hh, s->nodes, n, tmp) {
    HASH_DEL(s->nodes, n);
    dir_status_node_free(n);
    free(n);
  }
}
