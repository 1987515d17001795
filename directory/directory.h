/*
 * directory.h - hoplite-directory: one per cluster, one event loop.
 * Nodes register over TCP; the directory keeps the object table
 * (objects.h), answers where to pull objects from, serves small objects
 * inline, and detects dead nodes.
 */
#ifndef HPL_DIRECTORY_H
#define HPL_DIRECTORY_H

#include <stdint.h>
#include <uv.h>

#include "objects.h"
#include "uvconn.h"

typedef struct dir_config {
  char listen_host[256];
  int listen_port;
  const char *port_file;      /* write the bound port here once listening */
  uint32_t inline_max;        /* objects of at most this many bytes are inline */
  uint64_t inline_memory;     /* cap on all inline bytes held */
  uint32_t max_senders;       /* receivers one copy may serve at once */
  uint32_t heartbeat_ms;      /* stores send a heartbeat this often */
  uint32_t heartbeat_timeout_ms; /* a node silent this long is dead */
  double reduce_latency_s;    /* cost model L (reduce planner) */
  double reduce_bandwidth;    /* cost model B, bytes/s */
  int latency_auto, bandwidth_auto; /* use what is measured once known */
} dir_config;

void dir_config_defaults(dir_config *c);

typedef struct dir_node {
  uint64_t id;
  UT_hash_handle hh;
  char addr[64];
  int port;
  char name[64];
  struct dir_conn *conn;
  uint64_t last_seen_ms;
  int draining; /* leaving: serves no new receivers */
} dir_node;

typedef struct dir_conn {
  hpl__conn *c;
  dir_node *node;             /* NULL until REGISTER */
  struct dir_waiter *waiters; /* ACQUIREs pending on this connection */
  struct dir_server *srv;
  struct dir_conn *prev, *next; /* all connections, for shutdown */
} dir_conn;

typedef struct dir_waiter {
  struct dir_waiter *next;  /* in the object's list */
  struct dir_waiter *cnext; /* in the connection's list */
  struct dir_server *srv;
  dir_obj *obj;
  dir_conn *dc;
  uint64_t req_id;
  uint64_t node;
  uint64_t avoid; /* sender the asker reported as failed */
  uint64_t since_ms;    /* when the ACQUIRE arrived */
  uint64_t deadline_ms; /* when it times out, 0 for never */
  int ring_wait;        /* waiting for an allreduce ring predecessor */
  uv_timer_t timer;
  int has_timer;
} dir_waiter;

/* A delete waiting for every holder to acknowledge its DROP. */
typedef struct dir_delete {
  uint64_t op; /* request id of the DROPs */
  UT_hash_handle hh;
  struct dir_server *srv;
  dir_conn *dc; /* the deleter (NULL once it disconnected) */
  uint64_t req;
  int pending;
  uv_timer_t timer;
} dir_delete;

/* One entry of the transfer record (a ring of the latest entries). */
typedef struct dir_xfer {
  uint64_t seq, t_us;
  int kind;
  char *id;
  uint64_t receiver, sender;
} dir_xfer;

#define DIR_XFER_CAP 65536

typedef struct dir_counters {
  uint64_t acquires, inline_served, peeks_served, senders_assigned, ring_assigned, waits, lost_replies, nodes_dead,
      reduce_resets;
} dir_counters;

typedef struct dir_server {
  uv_loop_t *loop;
  dir_config cfg;
  uv_tcp_t listener;
  uv_timer_t sweep;
  uv_signal_t sigint, sigterm;
  dtab tab;
  dir_node *nodes;
  dir_conn *conns;
  dir_delete *deletes;
  uint64_t next_op;
  struct dir_reduce *reduces; /* reduce.c, by target */
  dir_xfer *xlog; /* ring of DIR_XFER_CAP entries */
  uint64_t xseq;  /* entries ever recorded */
  uint64_t instance; /* random per start: stores notice a restart */
  double lat_measured, bw_measured; /* EWMAs: heartbeat rtt/2, pull rates (0: none yet) */
  dir_counters ctr;
  int stopping;
} dir_server;

/* Bind, listen and install timers/signals. Returns 0 or a negative code. */
int dir_server_start(dir_server *s, uv_loop_t *loop, const dir_config *cfg);

/* Free everything once the loop has ended. */
void dir_server_free(dir_server *s);

/* Re-examine an object after a change: answer waiters that can now be
 * served (or must fail), and tell reduces that watch it. */
void dir_object_changed(dir_server *s, dir_obj *o);

/* Node lookup for replies. */
dir_node *dir_node_find(dir_server *s, uint64_t id);

/* Cost model parameters for the planner: measured when configured "auto"
 * and measured already, else the configured values. */
double dir_cost_latency(dir_server *s);
double dir_cost_bandwidth(dir_server *s);

/* Record an event in the transfer record (hpl_transfers). */
void dir_xlog(dir_server *s, int kind, const char *id, uint64_t receiver, uint64_t sender);

/* reduce.c */
void dir_reduce_on_fail(dir_server *s, dir_conn *dc, Hplpb__ReduceFailNote *m);
void dir_reduce_node_gone(dir_server *s, uint64_t node);
void dir_reduce_on_request(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__ReduceReq *m);
void dir_reduce_on_info(dir_server *s, dir_conn *dc, uint64_t req, Hplpb__IdReq *m);
void dir_reduce_check(dir_server *s, dir_obj *o);
void dir_reduce_conn_closed(dir_server *s, dir_conn *dc);
void dir_reduce_target_deleted(dir_server *s, const char *target);
void dir_reduce_free_all(dir_server *s);
/* How long a participant of an allreduce waits for its ring predecessor
 * to ask for the target before the ordinary sender rule applies. */
#define DIR_RING_WAIT_MS 50
/* The sender an allreduce participant should pull the target `o` from (see
 * reduce.c). Returns 1 with *from set (an idle copy to assign), 2 if the
 * asker should wait (until since_ms + DIR_RING_WAIT_MS at most), 0 for no
 * preference. */
int dir_reduce_ring_sender(dir_server *s, dir_obj *o, uint64_t asker, uint64_t avoid,
                           uint64_t since_ms, dir_loc **from);

#endif
