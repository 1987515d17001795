/* nodelive.c - the directory's judgement of its nodes' liveness: the
 * heartbeat sweep, probes of reported senders and their verdicts, and the
 * state machines they move (see nodes.h). The registry, the handlers and a
 * node's end are nodes.c's. */
#include "nodes.h"

#include <stdio.h>

#include "hoplite.h"
#include "log.h"
#include "nodes_int.h"
#include "util.h"

/* ------------------------------------------------------------------ state machines */

static const char *const live_names[] = {"alive", "suspect"};
static const char *const probe_names[] = {"none", "out", "unanswered"};

static void live_set(hpl__dir_node *n, hpl__dir_node_live st) {
  if (n->live == st) return;
  HPL__LOG_DEBUG("node %016llx liveness: %s -> %s", (unsigned long long)n->id, live_names[n->live],
                 live_names[st]);
  n->live = st;
}

void hpl__dir_node_probe_set(hpl__dir_node *n, hpl__dir_node_probe st) {
  if (n->probe == st) return;
  HPL__LOG_DEBUG("node %016llx probe: %s -> %s", (unsigned long long)n->id, probe_names[n->probe],
                 probe_names[st]);
  n->probe = st;
}

/* ------------------------------------------------------------------ silent senders */

/* Receivers of an unresponsive node move on (hpl__dtab_node_unresponsive
 * callback): a partition or a stopped process closes no stream. */
static void move_off_cb(hpl__dir_obj *o, uint64_t receiver, void *arg) {
  hpl__dir_nodes_gone_arg *a = arg;
  if (receiver == a->reporter) return; /* it gets its answer */
  Hplpb__UpstreamNote u = HPLPB__UPSTREAM_NOTE__INIT;
  u.id = o->id;
  u.peer = a->node;
  u.suspect = 1;
  hpl__dir_node_send(a->s, receiver, HPL__MSG_UPSTREAM_GONE, 0, &u.base);
}

/* n did not answer its probe in time: a sender of last resort, and every
 * receiver pulling from it moves (but `reporter`, answered directly). */
static void mark_unresponsive(hpl__dir_server *s, hpl__dir_node *n, uint64_t reporter,
                              uint64_t now) {
  hpl__dir_node_probe_set(n, HPL__DIR_PROBE_UNANSWERED);
  n->hb_outage = 1;
  s->ctr.suspects++;
  HPL__LOG_WARN("node %016llx (%s) is reported silent and did not answer a probe in %llu ms: "
                "a sender of last resort until heard again", (unsigned long long)n->id, n->name,
                (unsigned long long)(now - n->probe_ms));
  hpl__dir_nodes_gone_arg a = {.s = s, .node = n->id, .reporter = reporter};
  hpl__dtab_node_unresponsive(&s->tab, n->id, move_off_cb, &a);
  hpl__dir_nodes_emit_simple(s, HPL__DIR_NODE_UNRESPONSIVE, n, n->id);
}

void hpl__dir_node_heard(hpl__dir_server *s, hpl__dir_node *n) {
  n->last_seen_ms = hpl__now_ms();
  if (n->probe == HPL__DIR_PROBE_NONE) return;
  int back = n->probe == HPL__DIR_PROBE_UNANSWERED;
  hpl__dir_node_probe_set(n, HPL__DIR_PROBE_NONE); /* read after the probe went out: an answer */
  if (!back) return;
  HPL__LOG_INFO("node %016llx (%s) answers again: it may serve as before",
                (unsigned long long)n->id, n->name);
  hpl__dir_nodes_emit_simple(s, HPL__DIR_NODE_BACK, n, n->id);
}

static void probe_check(uv_timer_t *t);

/* Probes are judged when due, after one more poll of the sockets (as the
 * liveness sweep does: answers that arrived while the loop was busy are
 * read first). */
static void probe_judge(uv_timer_t *t) {
  hpl__dir_server *s = t->data;
  uint64_t now = hpl__now_ms(), next = 0;
  hpl__dir_node *n, *tmp;
  HASH_ITER(hh, s->nodes->by_id, n, tmp) {
    if (n->probe != HPL__DIR_PROBE_OUT) continue;
    uint64_t due = n->probe_ms + n->probe_to;
    if (due <= now) mark_unresponsive(s, n, 0, now);
    else if (!next || due < next) next = due;
  }
  if (next) uv_timer_start(&s->nodes->probe_timer, probe_check, next - now, 0);
}

static void probe_check(uv_timer_t *t) {
  uv_timer_start(t, probe_judge, 1, 0); /* runs after the next poll */
}

int hpl__dir_node_verdict(hpl__dir_server *s, hpl__dir_node *n, uint64_t reporter,
                          uint64_t *wait_ms) {
  uint64_t now = hpl__now_ms(), to = n->probe_ms ? n->probe_to : 0;
  *wait_ms = 0;
  if (n->probe == HPL__DIR_PROBE_UNANSWERED) return HPL__DIR_SILENT;
  if (n->probe_ms && now - n->probe_ms < 2 * to) {
    /* heard after the probe went out (not last_seen_ms >= probe_ms: a
     * heartbeat read in the same millisecond, before the probe, is no
     * answer) */
    if (n->probe == HPL__DIR_PROBE_NONE) return HPL__DIR_ALIVE;
    if (now - n->probe_ms < to) {
      *wait_ms = n->probe_ms + to - now;
      return HPL__DIR_PROBING;
    }
    mark_unresponsive(s, n, reporter, now);
    return HPL__DIR_SILENT;
  }
  Hplpb__Heartbeat p = HPLPB__HEARTBEAT__INIT;
  p.node_id = n->id;
  if (hpl__dir_node_send_to(n, HPL__MSG_PROBE, 0, &p.base) == 0) s->ctr.probes++;
  n->probe_ms = now;
  hpl__dir_node_probe_set(n, HPL__DIR_PROBE_OUT);
  n->probe_to = to = hpl__dir_node_probe_timeout(&s->cfg, n);
  *wait_ms = to;
  if (!uv_is_active((uv_handle_t *)&s->nodes->probe_timer))
    uv_timer_start(&s->nodes->probe_timer, probe_check, to, 0);
  return HPL__DIR_PROBING;
}

void hpl__dir_node_measure(hpl__dir_server *s, hpl__dir_node *n) {
  uint64_t now = hpl__now_ns() / 1000;
  if (n->measure_sent_us && now - n->measure_sent_us < HPL__DIR_MEASURE_EVERY_MS * 1000ull) return;
  Hplpb__Heartbeat p = HPLPB__HEARTBEAT__INIT;
  p.node_id = n->id;
  if (hpl__dir_node_send_to(n, HPL__MSG_PROBE, 0, &p.base) != 0) return;
  s->ctr.measures++;
  n->measure_sent_us = now;
  n->measure_rtt_us = 0;
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
static uint64_t silent_ms(const hpl__dir_node *n, uint64_t now) {
  return now > n->last_seen_ms ? now - n->last_seen_ms : 0;
}

static void confirm(uv_timer_t *t) {
  hpl__dir_server *s = t->data;
  uint64_t now = hpl__now_ms();
  hpl__dir_node *n, *tmp;
  HASH_ITER(hh, s->nodes->by_id, n, tmp) {
    if (n->live != HPL__DIR_LIVE_SUSPECT) continue;
    if (silent_ms(n, now) <= hpl__dir_node_timeout_ms(&s->cfg, n)) {
      live_set(n, HPL__DIR_LIVE_ALIVE);
      continue;
    }
    char why[64];
    snprintf(why, sizeof why, "no heartbeat for %llu ms", (unsigned long long)silent_ms(n, now));
    if (n->conn) hpl__conn_close(n->conn->c, HPL_ETIMEDOUT);
    hpl__dir_node_gone(s, n, why);
  }
}

static void sweep(uv_timer_t *t) {
  hpl__dir_server *s = t->data;
  struct hpl__dir_nodes *st = s->nodes;
  uint64_t now = hpl__now_ms();
  hpl__dir_node *n, *tmp;
  uint64_t due = st->sweep_due_ms;
  st->sweep_due_ms = now + s->cfg.heartbeat_ms;
  if (due && now > due + SWEEP_SLACK_MS) {
    uint64_t late = now - due;
    s->ctr.sweep_stalls++;
    s->ctr.stall_ms += late;
    HPL__LOG_INFO("the directory's loop was busy or stopped for %llu ms: liveness discounts it",
                  (unsigned long long)late);
    HASH_ITER(hh, st->by_id, n, tmp) {
      n->last_seen_ms += late;
      if (n->last_seen_ms > now) n->last_seen_ms = now; /* heard during the stall */
    }
  }
  int suspects = 0;
  HASH_ITER(hh, st->by_id, n, tmp) {
    if (silent_ms(n, now) <= hpl__dir_node_timeout_ms(&s->cfg, n)) continue;
    live_set(n, HPL__DIR_LIVE_SUSPECT);
    suspects++;
  }
  /* a timer due in 1 ms runs after the next poll of the sockets */
  if (suspects) uv_timer_start(&st->confirm, confirm, 1, 0);
}

void hpl__dir_liveness_start(hpl__dir_server *s) {
  struct hpl__dir_nodes *st = s->nodes;
  uv_timer_init(s->loop, &st->sweep);
  st->sweep.data = s;
  uv_timer_init(s->loop, &st->confirm);
  st->confirm.data = s;
  uv_timer_init(s->loop, &st->probe_timer);
  st->probe_timer.data = s;
  st->sweep_due_ms = hpl__now_ms() + s->cfg.heartbeat_ms;
  uv_timer_start(&st->sweep, sweep, s->cfg.heartbeat_ms, s->cfg.heartbeat_ms);
}

void hpl__dir_liveness_stop(hpl__dir_server *s) {
  uv_close((uv_handle_t *)&s->nodes->sweep, NULL);
  uv_close((uv_handle_t *)&s->nodes->confirm, NULL);
  uv_close((uv_handle_t *)&s->nodes->probe_timer, NULL);
}
