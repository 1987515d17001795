/*
 * nodes.h - the directory's node module: the registry of stores (one
 * hpl__dir_node per registered store, by id), the link between a node and its
 * connection (node->conn / dc->node), liveness (the heartbeat sweep,
 * probes and their verdicts) and a node's end.
 *
 * It knows nothing of the modules above it. They hear of a node's life
 * through the events below, to which they subscribe at server start
 * (server.c wires them; the subscriptions are kept in this module's own
 * state), and they call down into it to look a node up, send to it or ask
 * for a verdict on it. What a node's end does to the object table (its
 * copies dropped, copies pulling from it told with UPSTREAM_GONE) is done
 * here, through objects.h, whose own change events reach the waiters.
 *
 * Files: nodes.c (registry, REGISTER / HEARTBEAT / DRAIN / QUIET, a
 * node's end, the events), nodelive.c (liveness: the sweep, probes and
 * their verdicts), nodes_int.h (what those two share), nodestat.c
 * (heartbeat statistics and link delays: arithmetic only). Callers:
 * server.c (dispatch, connection close, start/stop/free, the
 * subscriptions); every module that looks a node up
 * or sends to one (acquire*.c, admin.c, locs.c, reduce*.c, ring.c,
 * status.c, dirmetrics.c).
 */
#ifndef HPL_DIR_NODES_H
#define HPL_DIR_NODES_H

#include <stdint.h>

#include "server.h"

/* A node's liveness as the heartbeat sweep sees it (one machine, set in
 * nodelive.c only, each transition logged at debug level). A node declared
 * dead, or whose connection closed, has no state here: it is forgotten
 * (freed after HPL__DIR_NODE_DEAD; the "gone" warning logs its end). */
typedef enum hpl__dir_node_live {
  HPL__DIR_LIVE_ALIVE,   /* heard within its timeout (hpl__dir_node_timeout_ms) */
  HPL__DIR_LIVE_SUSPECT, /* silent past it at the last sweep: judged again after
                            the loop polled its sockets once more */
} hpl__dir_node_live;

/* A node's answer to probes (one machine, set through nodelive.c's
 * hpl__dir_node_probe_set only). A receiver that reports its sender silent
 * gets a verdict from it (hpl__dir_node_verdict). */
typedef enum hpl__dir_node_probe {
  HPL__DIR_PROBE_NONE,       /* no probe out: none sent, or heard since the last */
  HPL__DIR_PROBE_OUT,        /* a probe went out (probe_ms) and nothing was heard since */
  HPL__DIR_PROBE_UNANSWERED, /* it did not answer within probe_to: a sender of last
                                resort until heard again */
} hpl__dir_node_probe;

typedef struct hpl__dir_node {
  uint64_t id;
  UT_hash_handle hh;
  char addr[64];
  int port;
  char name[64];
  hpl__dir_conn *conn;    /* its connection (NULL only while the server stops) */
  uint64_t last_seen_ms;  /* last frame from it (moved on by the directory's own stalls) */
  uint64_t incarnation;   /* its store process (RegisterReq.incarnation; 0: not told) */
  int grants;             /* its store takes GRANTs (RegisterReq.grants) */
  int draining;           /* it said it leaves (DRAIN): serves no new receivers. Its own
                             announcement, beside its liveness: a draining node is
                             judged like any other */
  hpl__dir_node_live live;
  hpl__dir_node_probe probe;
  uint64_t probe_ms;      /* when the last probe was sent (0: none) */
  uint64_t probe_to;      /* ... and how long it has to answer (probe timeout) */
  /* a measurement (hpl__dir_node_measure): a PROBE nothing is judged on; its
   * answer's round trip, as the directory saw it, includes the queues on
   * both directions of the node's link */
  uint64_t measure_sent_us; /* when the last went out (0: none) */
  uint64_t measure_rtt_us;  /* its round trip (0: not answered yet) */
  /* heartbeat arrival statistics (nodestat.c: the adaptive timeout) */
  uint32_t rtt_us;        /* its last heartbeat's round trip, as it reported it (0: none) */
  uint64_t hb_last_ms;
  double hb_mean, hb_var; /* EWMAs of the interval and its squared deviation, ms */
  uint32_t hb_n;
  /* heartbeats arriving before this time are the backlog of an outage (a
   * pause, a partition): they teach the statistics nothing */
  uint64_t hb_backlog_until_ms;
  int hb_outage; /* it did not answer a probe since its last heartbeat */
  /* one-way delay variation of its heartbeats (Heartbeat.sent_us): the
   * smallest (arrival - sent) of this and the previous epoch, and how far
   * the latest is above it: the queue in front of its heartbeats, us */
  int64_t owd_min[2];
  uint64_t owd_epoch_ms;
  uint32_t queue_us;
  /* Owned by the modules above (this one never reads them): */
  struct hpl__dir_node_stats *stats; /* status.c: what its latest heartbeat said (NULL: nothing) */
  struct hpl__dir_waiter *waiters;   /* acquire.c: its ACQUIREs waiting for a sender */
  uint32_t nwaiters;
  /* acquire_move.c: what receivers reported of broadcast chains through it */
  uint64_t crawl_report_ms; /* when it last reported its own sender crawling (a partial
                               one, or a complete one as a straggler) */
  uint64_t blamed_ms;      /* when a receiver last reported it, as a partial sender, crawling */
  uint64_t blamed_by;      /* that receiver */
  uint64_t bypass_ms;      /* when it last moved off a partial sender that crawled itself */
  uint32_t corrupt_reports; /* digests.c: units it sent that failed their digests */
} hpl__dir_node;

/* ------------------------------------------------------------------ events */

/* What happens to a node, in the order a module above hears of it. */
typedef enum hpl__dir_node_ev {
  HPL__DIR_NODE_JOINED,       /* it registered (new, or again on a new connection); its
                                 REGISTER_REP is not sent yet. held / nheld: the complete
                                 copies it re-reports */
  HPL__DIR_NODE_WELCOMED,     /* ...its REGISTER_REP went out */
  HPL__DIR_NODE_STATS,        /* a scheduled heartbeat carried its stats (hb) */
  HPL__DIR_NODE_UNRESPONSIVE, /* verdict: it did not answer a probe in time (the receivers
                                 pulling from it were told to move already) */
  HPL__DIR_NODE_BACK,         /* heard again after HPL__DIR_NODE_UNRESPONSIVE */
  HPL__DIR_NODE_UNPLUGGED,    /* it leaves its connection (it is dead, it reconnected, or the
                                 server stops): what it asked for there is void, and nothing
                                 may be sent to it there any more */
  HPL__DIR_NODE_DEAD,         /* declared dead, or its connection closed (why); the node is
                                 freed once the subscribers ran */
  HPL__DIR_NODE_TASKS_VOID,   /* what it was running for others (reduce slots, ring parts) is
                                 void: it reconnected (the same store process), re-registered
                                 as a new process, or is dead. node is NULL (it may be gone);
                                 its copies are dropped already unless it only reconnected */
  HPL__DIR_NODE_NEVENTS
} hpl__dir_node_ev;

/* The mask bit of event `e` for hpl__dir_nodes_subscribe. */
#define HPL__DIR_NODE_EV(e) (1u << (e))
_Static_assert(HPL__DIR_NODE_NEVENTS <= 32, "a node event's mask bit fits in an unsigned");

typedef struct hpl__dir_node_event {
  hpl__dir_node_ev type;
  uint64_t id;                     /* the node's */
  hpl__dir_node *node;             /* NULL for HPL__DIR_NODE_TASKS_VOID */
  const char *why;                 /* HPL__DIR_NODE_DEAD */
  const Hplpb__Heartbeat *hb;      /* HPL__DIR_NODE_STATS */
  Hplpb__HeldObject *const *held;  /* HPL__DIR_NODE_JOINED */
  size_t nheld;
} hpl__dir_node_event;

/* A subscriber; `e` and what it points to are valid during the call only. */
typedef void (*hpl__dir_node_fn)(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg);

/* Call fn(s, e, arg) for every event whose HPL__DIR_NODE_EV bit is in `events`,
 * after the subscribers before it (subscription order is delivery order).
 * At most HPL__DIR_NODES_MAX_SUBS subscribers. Returns 0, or -1 when full. */
#define HPL__DIR_NODES_MAX_SUBS 8
int hpl__dir_nodes_subscribe(hpl__dir_server *s, unsigned events, hpl__dir_node_fn fn, void *arg);

/* ------------------------------------------------------------------ the registry */

/* The module's state (hpl__dir_server.nodes), allocated here: 0 or HPL_ENOMEM. */
int hpl__dir_nodes_init(hpl__dir_server *s);

/* The registered node `id`, or NULL. */
hpl__dir_node *hpl__dir_node_find(hpl__dir_server *s, uint64_t id);

/* The registered nodes: how many, and the first of them in no particular
 * order (then n->hh.next). HPL__DIR_NODES_ITER(s, n, tmp) walks them, n may be
 * freed by the body (as HASH_ITER). */
uint32_t hpl__dir_nodes_count(hpl__dir_server *s);
hpl__dir_node *hpl__dir_nodes_first(hpl__dir_server *s);
#define HPL__DIR_NODES_ITER(s, n, tmp) HASH_ITER(hh, hpl__dir_nodes_first(s), n, tmp)

/* dtab's sender filter (dtab.usable, with `srv` the hpl__dir_server): a copy on
 * `node` may take new receivers only if the node is registered and not
 * draining. */
int hpl__dir_node_usable(uint64_t node, void *srv);

/* dtab's suspicion filter (dtab.suspected, `srv` the hpl__dir_server): the
 * node did not answer a probe and has not been heard since. */
int hpl__dir_node_suspected(uint64_t node, void *srv);

/* Send a one-way message (or a request with id `req`) to node `n` on its
 * connection. Returns 0, HPL_ENOTFOUND if the node is not connected, or
 * what hpl__conn_send returns (the message is not sent then). `m` is
 * packed before the call returns. */
int hpl__dir_node_send_to(hpl__dir_node *n, unsigned type, uint64_t req,
                          const ProtobufCMessage *m);

/* The same to the registered node `id` (HPL_ENOTFOUND if there is none). */
int hpl__dir_node_send(hpl__dir_server *s, uint64_t id, unsigned type, uint64_t req,
                       const ProtobufCMessage *m);

/* The liveness a node shows (`hoplite status`): "draining", "suspected"
 * (did not answer a probe, or silent past its timeout), "silent" (missed
 * two heartbeats; not judged yet) or "alive". */
const char *hpl__dir_node_state_name(hpl__dir_server *s, const hpl__dir_node *n, uint64_t now_ms);

/* ------------------------------------------------------------------ liveness */

/* A frame arrived from `n`: it is alive (and answers probes again: a node
 * that was unresponsive is back, HPL__DIR_NODE_BACK). */
void hpl__dir_node_heard(hpl__dir_server *s, hpl__dir_node *n);

/* A receiver reports that `n` has sent it nothing for a while. Returns
 * HPL__DIR_ALIVE if n answered a recent probe, HPL__DIR_SILENT if it is unresponsive
 * (this call may be the one that finds it so: then every receiver pulling
 * from it is told to move, except `reporter`, and HPL__DIR_NODE_UNRESPONSIVE
 * goes out), or HPL__DIR_PROBING with *wait_ms until the verdict (a probe is
 * sent if none is out). */
enum { HPL__DIR_ALIVE, HPL__DIR_SILENT, HPL__DIR_PROBING };
int hpl__dir_node_verdict(hpl__dir_server *s, hpl__dir_node *n, uint64_t reporter,
                          uint64_t *wait_ms);

/* Ask n for a fresh sample of its link's queues: a PROBE that no verdict
 * depends on (n is never judged unresponsive for it). At most one per
 * HPL__DIR_MEASURE_EVERY_MS per node; a no-op otherwise. */
#define HPL__DIR_MEASURE_EVERY_MS 200
void hpl__dir_node_measure(hpl__dir_server *s, hpl__dir_node *n);

/* Start the liveness sweep (every heartbeat_ms) and the probe timer /
 * close them (the server stops). */
void hpl__dir_liveness_start(hpl__dir_server *s);
void hpl__dir_liveness_stop(hpl__dir_server *s);

/* ------------------------------------------------------------------ nodestat.c */

/* How long its heartbeats wait in front of the directory now, us: the
 * largest of its reported round trip, the one-way queue (sent_us) and how
 * overdue its next scheduled heartbeat is. A node whose link crawls under
 * bulk bytes stands out at once. */
uint32_t hpl__dir_node_delay_us(const hpl__dir_node *n, uint64_t now_ms);

/* How much delay n's link adds now, in microseconds: its heartbeats'
 * (hpl__dir_node_delay_us) or, if a measurement went out within the last
 * second, its round trip - or, still unanswered, the time since it went
 * out (a lower bound), whichever is more. */
uint32_t hpl__dir_node_link_delay_us(const hpl__dir_node *n, uint64_t now_us);

/* How long `n` may be silent before it is declared dead: mean interval +
 * 8 x its jitter + half an interval, between 3 heartbeat intervals and
 * heartbeat_timeout_ms (that until 8 heartbeats were seen). */
uint64_t hpl__dir_node_timeout_ms(const hpl__dir_config *cfg, const hpl__dir_node *n);

/* How long a probe of `n` may take: probe_ms, plus what its heartbeats say
 * it needs when its loop or its link is busy, at most 8 x probe_ms. */
uint64_t hpl__dir_node_probe_timeout(const hpl__dir_config *cfg, const hpl__dir_node *n);

/* A scheduled heartbeat arrived at `now_ms`: the interval statistics (an
 * outage's interval and backlog are left out). */
void hpl__dir_node_note_heartbeat(hpl__dir_node *n, uint64_t now_ms);

/* A heartbeat sent at `sent_us` (its clock; 0: not told) arrived: the
 * one-way delay's variation, queue_us. */
void hpl__dir_node_note_owd(hpl__dir_node *n, uint64_t sent_us);

/* ------------------------------------------------------------------ handlers, end */

/* Handlers (server.c's dispatch table). REGISTER: a store joins, or
 * rejoins after a reconnect; a connection registers one node only.
 * HEARTBEAT: liveness and the latency measurement. DRAIN: the node leaves
 * and takes no new receivers. QUIET: a receiver has had nothing from
 * node_id for half its quiet window: the node is probed now
 * (hpl__dir_node_verdict), so that the verdict on the silent report that may
 * follow needs no wait of its own. */
void hpl__dir_nodes_on_register(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_nodes_on_heartbeat(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_nodes_on_drain(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_nodes_on_quiet(hpl__dir_server *s, const hpl__dir_frame *f);

/* Connection `dc` closed (with `status`, 0 for a local close): its node,
 * if any, is dead - unless the server is stopping, when the node is only
 * unplugged. */
void hpl__dir_nodes_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc, int status);

/* Free every node and the module's state (at the end, after the loop;
 * what the modules above hung on the nodes is freed already). */
void hpl__dir_nodes_free(hpl__dir_server *s);

#endif
