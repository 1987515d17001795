/*
 * nodes.h - the directory's node registry and liveness.
 *
 * Owns dir_server.nodes (one dir_node per registered store, by id), the
 * link between a node and its connection (node->conn / dc->node), the
 * liveness sweep, and a node's end: when its connection closes, when it is
 * silent for heartbeat_timeout_ms, or when it re-registers on another
 * connection, its waiters are dropped (acquire.c), its copies removed
 * (objects.c), copies pulling from it told (UPSTREAM_GONE) and its reduce
 * slots failed (reduce_tree.c).
 *
 * Callers: server.c (dispatch, connection close, start/stop/free); any
 * module that looks a node up or sends to one (acquire.c, admin.c,
 * reduce*.c).
 */
#ifndef HPL_DIR_NODES_H
#define HPL_DIR_NODES_H

#include <stdint.h>

#include "server.h"

typedef struct dir_node {
  uint64_t id;
  UT_hash_handle hh;
  char addr[64];
  int port;
  char name[64];
  dir_conn *conn;         /* its connection (NULL only while the server stops) */
  uint64_t last_seen_ms;  /* last frame from it (moved on by the directory's own stalls) */
  uint64_t incarnation;   /* its store process (RegisterReq.incarnation; 0: not told) */
  int grants;             /* its store takes GRANTs (RegisterReq.grants) */
  int suspect;            /* looked silent to the last sweep: judged again after a poll */
  int unresponsive;       /* did not answer a probe in time: a sender of last resort
                             until heard again */
  uint64_t probe_ms;      /* when the last probe was sent (0: none) */
  uint64_t probe_to;      /* ... and how long it has to answer (dir_node_probe_ms) */
  int probe_heard;        /* a frame from it was read after that probe went out (not
                             last_seen_ms >= probe_ms: a heartbeat read in the same
                             millisecond, before the probe, is no answer) */
  uint64_t crawl_report_ms; /* when it last reported its own sender crawling (a partial
                              one, or a complete one as a straggler) */
  uint64_t blamed_ms;      /* when a receiver last reported it, as a partial sender, crawling */
  uint64_t blamed_by;      /* that receiver */
  uint64_t bypass_ms;      /* when it last moved off a partial sender that crawled itself */
  /* a measurement (dir_node_measure): a PROBE nothing is judged on; its
   * answer's round trip, as the directory saw it, includes the queues on
   * both directions of the node's link */
  uint64_t measure_sent_us; /* when the last went out (0: none) */
  uint64_t measure_rtt_us;  /* its round trip (0: not answered yet) */
  /* heartbeat arrival statistics (the adaptive timeout) */
  uint32_t rtt_us;        /* its last heartbeat's round trip, as it reported it (0: none) */
  uint64_t hb_last_ms;
  double hb_mean, hb_var; /* EWMAs of the interval and its squared deviation, ms */
  uint32_t hb_n;
  /* heartbeats arriving before this time are the backlog of an outage (a
   * pause, a partition): they teach the statistics nothing */
  uint64_t hb_backlog_until_ms;
  int hb_outage; /* it was judged unresponsive since its last heartbeat */
  /* one-way delay variation of its heartbeats (Heartbeat.sent_us): the
   * smallest (arrival - sent) of this and the previous epoch, and how far
   * the latest is above it: the queue in front of its heartbeats, us */
  int64_t owd_min[2];
  uint64_t owd_epoch_ms;
  uint32_t queue_us;
  int draining;           /* leaving: serves no new receivers */
  struct dir_node_stats *stats; /* status.c: what its latest heartbeat said (NULL: nothing) */
  struct dir_waiter *waiters; /* acquire.c: its ACQUIREs waiting for a sender */
  uint32_t nwaiters;
} dir_node;

/* How long its heartbeats wait in front of the directory now, us: the
 * largest of its reported round trip, the one-way queue (sent_us) and how
 * overdue its next scheduled heartbeat is. A node whose link crawls under
 * bulk bytes stands out at once. */
uint32_t dir_node_delay_us(const dir_node *n, uint64_t now_ms);

/* The registered node `id`, or NULL. */
dir_node *dir_node_find(dir_server *s, uint64_t id);

/* dtab's sender filter (dtab.usable, with `srv` the dir_server): a copy on
 * `node` may take new receivers only if the node is registered and not
 * draining. */
int dir_node_usable(uint64_t node, void *srv);

/* Send a one-way message (or a request with id `req`) to node `id` on its
 * connection. Returns 0, HPL_ENOTFOUND if the node is not connected, or
 * what hpl__conn_send returns (the message is not sent then). `m` is
 * packed before the call returns. */
int dir_node_send(dir_server *s, uint64_t id, unsigned type, uint64_t req,
                  const ProtobufCMessage *m);

/* A frame arrived from `n`: it is alive (and no longer unresponsive: the
 * reduces that lost a source on it take it back, dir_reduce_node_back). */
void dir_node_heard(dir_server *s, dir_node *n);

/* dtab's suspicion filter (dtab.suspected, `srv` the dir_server): the
 * node did not answer a probe and has not been heard since. */
int dir_node_suspected(uint64_t node, void *srv);

/* Whether `n` reported its own partial sender crawling less than `ms` ago
 * (NULL: no). */
int dir_node_reported_crawl(const dir_node *n, uint64_t now, uint64_t ms);

/* dtab's crawl filter (dtab.crawling, `srv` the dir_server): within
 * DIR_CRAWLING_MS the node reported its own sender crawling, or a receiver
 * that no node reported in that time reported it crawling. */
#define DIR_CRAWLING_MS 1000
int dir_node_crawling(uint64_t node, void *srv);

/* A receiver reports that `n` has sent it nothing for a while. Returns
 * DIR_ALIVE if n answered a recent probe, DIR_SILENT if it is unresponsive
 * (this call may be the one that finds it so: then every receiver pulling
 * from it is told to move, except `reporter`), or DIR_PROBING with
 * *wait_ms until the verdict (a probe is sent if none is out). */
enum { DIR_ALIVE, DIR_SILENT, DIR_PROBING };
int dir_node_verdict(dir_server *s, dir_node *n, uint64_t reporter, uint64_t *wait_ms);

/* Ask n for a fresh sample of its link's queues: a PROBE that no verdict
 * depends on (n is never judged unresponsive for it). At most one per
 * DIR_MEASURE_EVERY_MS per node; a no-op otherwise. */
#define DIR_MEASURE_EVERY_MS 200
void dir_node_measure(dir_server *s, dir_node *n);

/* How much delay n's link adds now, in microseconds: its heartbeats'
 * (dir_node_delay_us) or, if a measurement went out within the last
 * second, its round trip - or, still unanswered, the time since it went
 * out (a lower bound), whichever is more. */
uint32_t dir_node_link_delay_us(const dir_node *n, uint64_t now_us);

/* How long `n` may be silent before it is declared dead: mean interval +
 * 8 x its jitter + half an interval, between 3 heartbeat intervals and
 * heartbeat_timeout_ms (that until 8 heartbeats were seen). */
uint64_t dir_node_timeout_ms(const dir_server *s, const dir_node *n);

/* Handlers (server.c's dispatch table). REGISTER: a store joins, or
 * rejoins after a reconnect; a connection registers one node only.
 * HEARTBEAT: liveness and the latency measurement. DRAIN: the node leaves
 * and takes no new receivers. */
void dir_nodes_on_register(dir_server *s, const dir_frame *f);
void dir_nodes_on_heartbeat(dir_server *s, const dir_frame *f);
void dir_nodes_on_drain(dir_server *s, const dir_frame *f);
/* QUIET: a receiver has had nothing from node_id for half its quiet
 * window: the node is probed now (dir_node_verdict), so that the verdict
 * on the silent report that may follow needs no wait of its own. */
void dir_nodes_on_quiet(dir_server *s, const dir_frame *f);

/* Connection `dc` closed (with `status`, 0 for a local close): its node,
 * if any, is gone - unless the server is stopping, when the node only
 * loses its connection and its waiters. */
void dir_nodes_conn_closed(dir_server *s, dir_conn *dc, int status);

/* Start the liveness sweep (every heartbeat_ms) / close its timer. */
void dir_liveness_start(dir_server *s);
void dir_liveness_stop(dir_server *s);

/* Free every node (at the end, after the loop; waiters are gone by then). */
void dir_nodes_free(dir_server *s);

#endif
