/*
 * server.h - the hoplite-directory server: its configuration, the state the
 * modules of directory/ share (hpl__dir_server), connections, and the shape of a
 * request handler. One per cluster, one event loop, single-threaded.
 *
 * Modules, bottom-up: each calls only modules listed before it, never one
 * listed after it; a lower module tells the ones above it through
 * callbacks they installed in its own state (server.c wires them at
 * start). Each header says what the module owns and who calls it.
 *   ha.c           the leader lease in etcd (--etcd): standing by, renewing
 *                  (its own thread), fencing (no knowledge of the others)
 *   objtab.c       the object table's storage: records, the id hash, the
 *                  ordered index (objtab_ix.c: the per-node index, a large
 *                  object's indexes) (no I/O)
 *   objects.c      locations over it; an object change is
 *                  its event (hpl__dtab_on_change) (no I/O)
 *   objpick.c      sender choice over the locations: the scan, and the
 *                  O(1) pick for a new asker of a large object (no I/O)
 *   xlog.c         the transfer record (TRANSFERS)
 *   cost.c         the reduce cost model's parameters (configured/measured)
 *   tombs.c        deleted ids remembered for a while
 *   nodestat.c     a node's heartbeat statistics and link delays (no I/O)
 *   nodes.c        the node registry and liveness (REGISTER, HEARTBEAT,
 *                  DRAIN, QUIET, a node's end; nodelive.c: the sweep,
 *                  probes and verdicts); a node's life is its events
 *                  (hpl__dir_nodes_subscribe)
 *   digests.c      object digests kept from the origin, handed out with
 *                  senders; receivers' corrupt reports
 *   reduce_msg.c   what the stores are told about a reduce
 *   reduce_rec.c   reduce records: life, watches, finishing, REDUCE_INFO
 *   reduce_tree.c  a reduce tree's decisions: plan, arrivals, failed slots,
 *                  the allreduce chain's sender
 *   reduce_crawl.c which node of a crawling reduce tree is slow
 *   reduce.c       REDUCE, REDUCE_FAIL, REDUCE_DONE; the events reduces hear
 *   ring.c         ring allreduce groups (RING, RING_NOTE)
 *   acquire_pick.c the answer to one ACQUIRE now, a PEEK's grant
 *   acquire_move.c receivers reporting a silent or crawling sender
 *   acquire.c      ACQUIRE and PEEK, their waiters, the events they hear
 *   status.c       the cluster at a glance (STATUS: nodes, transfers, reduces)
 *   dirmetrics.c   the one list of counters (COUNTERS, /metrics), the
 *                  request histograms, the /metrics endpoint
 *   admin.c        STAT, LIST, COUNTERS, DELETE (with its DROP round)
 *   publish.c      clients' PUBLISH of small objects: the named store, quotas,
 *                  orphans forgotten
 *   locs.c         locations stores report (LOC_ADD, LOC_NOTE, INLINE_PUT,
 *                  HELD, EVICT, objects re-reported at REGISTER)
 *   server.c       listener, connections, the dispatch table, signals,
 *                  start/free, and the wiring of the subscriptions
 *   main.c         the command line
 *
 * Every function of every module runs on the loop thread, but for ha.c's
 * lease thread (it shares only its own record, under its lock).
 */
#ifndef HPL_DIR_SERVER_H
#define HPL_DIR_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <uthash.h>

#include "auth.h"
#include "metricsrv.h"
#include "objects.h"
#include "uvconn.h"

typedef struct hpl__dir_config {
  char listen_host[256];
  int listen_port;
  const char *port_file;      /* write the bound port here once listening */
  uint32_t inline_max;        /* objects of at most this many bytes are inline */
  uint64_t inline_memory;     /* cap on all inline bytes held */
  uint32_t max_senders;       /* receivers one copy may serve at once */
  uint32_t heartbeat_ms;      /* stores send a heartbeat this often */
  uint32_t heartbeat_timeout_ms; /* a node silent this long is dead, at most (the
                                    timeout adapts to each node's heartbeat jitter,
                                    between 3 heartbeats and this) */
  int no_rings;               /* --no-rings: allreduces are reduce + broadcast (ring.c) */
  int no_grants;              /* --no-grants: a PEEK never grants (acquire.c) */
  int no_publish;             /* --no-publish: clients' PUBLISH is ignored (publish.c) */
  int delete_any;             /* --delete-any: any node may delete any object (admin.c) */
  uint64_t publish_quota;     /* bytes published per node and not confirmed (0: default) */
  int no_fanout;              /* --no-fanout: every reply its own write (fanout.h) */
  int fanout_thread;          /* --fanout-thread: a helper thread, not io_uring */
  uint32_t probe_ms;          /* a node reported silent that does not answer a
                                 probe within this long is suspected */
  double reduce_latency_s;          /* cost model L (reduce planner) */
  double reduce_bandwidth;          /* cost model B, bytes/s */
  int latency_auto, bandwidth_auto; /* use what is measured once known */
  hpl__auth auth;                   /* the cluster secret (auth.on 0: none, loopback only) */
  uint32_t max_conns;               /* open connections at most; more are closed at once */
  uint64_t out_max;                 /* output queued per connection at most (uvconn.h; 0: default) */
  uint32_t out_stall_ms;            /* ... for how long a peer may stay past it (0: default) */
  uint64_t out_total;               /* all connections' output at most (0: default) */
  hpl__metrics_cfg metrics;         /* --metrics-listen (off unless given) */
  /* standby directories (ha.h; main.c fills these once this one leads) */
  const char *etcd;                 /* --etcd (NULL: one directory, no lease) */
  const char *ha_prefix;            /* --ha-prefix */
  uint32_t lease_ms;                /* --lease-ms */
  char advertise[280];              /* --advertise HOST:PORT ("": the listen address) */
  uint64_t term;                    /* this leader's term (0: no lease) */
  struct hpl__ha *ha;               /* its lease, for status and metrics (NULL: none) */
} hpl__dir_config;

/* Fill *c with the defaults (the command line's documented values). */
void hpl__dir_config_defaults(hpl__dir_config *c);

/* What COUNTERS reports (admin.c); each module bumps its own. */
typedef struct hpl__dir_counters {
  uint64_t acquires, inline_served, peeks_served, peek_waits, peeks_granted, direct_stats,
      senders_assigned,
      ring_assigned, waits,
      lost_replies, nodes_dead,
      corrupt_reports, /* receivers' reports of a unit that failed its digest */ reduce_resets, auth_failures, conns_refused,
      held_taken,   /* copies confirmed or adopted by HELD */
      held_digests, /* objects whose digests a HELD brought back (after a restart) */
      digest_conflicts, /* HELD digests that disagreed with those kept (digests.c) */
      held_dropped, /* HELD entries answered with DROP (deleted while away) */
      tombstones,   /* deletes remembered (tombs.h: late re-reports are dropped) */
      tombs_learned,   /* ...of them re-reported by stores (HeldNote.tombs) */
      reduces_learned, /* finished reduces re-reported by their sinks (HeldNote.reduces) */
      reconnects,   /* a live node's store came back on a new connection */
      sweep_stalls, /* liveness sweeps that ran late because the loop was busy */
      stall_ms,     /* how late, in all */
      silent_reports, /* receivers' reports of a silent sender */
      quiet_notes,    /* receivers' early notes of a quiet sender (QUIET) */
      reduces_adopted, /* running trees of a previous directory instance taken over */
      reduce_done_notes, /* reduces a sink said finished while no directory knew them */
      reduce_stragglers, /* reduce slots replaced because their node crawled */
      reduce_lost_reused, /* sources put back into a tree for want of a spare */
      reduce_resumes, /* failed slots that went on from where they stopped (another copy) */
      reduces_inline, /* reduces of small objects done here (no tree) */
      probes,         /* probes sent to reported senders */
      measures,       /* probes sent to measure links (reduce crawls) */
      suspects,       /* senders that did not answer a probe in time */
      suspect_moves,  /* receivers moved off a suspected sender */
      slow_moves,     /* receivers moved off a partial sender slow by itself */
      evictions_granted, /* copies stores were let evict (EVICT) */
      rings_formed,    /* ring allreduces that formed (ring.c) */
      rings_declined,  /* ...that could not form: their clients reduced as usual */
      rings_done,      /* ...completed at every member */
      rings_abandoned, /* ...that ended when a member failed or left */
      publishes,           /* small objects clients PUBLISHed (served before their store's put) */
      publishes_ignored,   /* ...not taken (exists, off, too large, cache full) */
      publishes_confirmed, /* ...their store's INLINE_PUT confirmed */
      publishes_retracted, /* ...their store's put failed: forgotten again */
      publishes_orphaned,  /* ...their client left and no store put them in 10 s */
      takeovers_refused,   /* REGISTERs as a live node's id (or name) from another process */
      deletes_refused,     /* DELETEs of objects another live node made (admin.c) */
      deletes_dropped_by_asker; /* copies a DELETE's own store dropped on the answer (no DROP) */
} hpl__dir_counters;

/* One accepted connection: a store's control link (once it REGISTERs,
 * `node` is set and node->conn points back here) or a client's / tool's
 * (never registered). */
typedef struct hpl__dir_conn {
  hpl__conn *c;
  uint32_t ninfos;       /* reduce_rec.c: its REDUCE_INFO requests waiting */
  void *peeks;           /* acquire.c: its PEEKs waiting for their objects */
  uint32_t npeeks;
  struct hpl__dir_node *node; /* NULL until REGISTER; while set, node->conn == this */
  struct hpl__dir_server *srv;
  char peer[64];                     /* the peer's address (numeric; "?" if unknown) */
  struct hpl__dir_conn *prev, *next; /* hpl__dir_server.conns (utlist DL) */
  uint64_t pub_bytes;    /* publish.c: bytes it published that no store confirmed yet */
  uint32_t pub_n;        /* ... in this many objects */
} hpl__dir_conn;

typedef struct hpl__dir_server {
  /* the process's own */
  uv_loop_t *loop;
  hpl__dir_config cfg;
  uv_tcp_t listener;
  uv_signal_t sigint, sigterm;
  hpl__dir_conn *conns;               /* every open connection */
  uint32_t nconns;
  uint64_t instance;             /* random per start: stores notice a restart */
  uint64_t start_ms;             /* when the server started (status uptime) */
  int stopping;                  /* a signal ended the server: connections close */
  hpl__dir_counters ctr;         /* every module bumps its own */
  /* dirmetrics.c (recorded by server.c and acquire.c) */
  hpl__hist req_hist[HPL__MSG_MAX_ + 1]; /* handling time by message type */
  hpl__hist acquire_wait_hist;           /* ACQUIREs that waited: arrival to answer */
  struct hpl__msrv *msrv;                /* the /metrics endpoint (NULL: none) */
  /* the modules' state, each reached only through its module's header */
  hpl__dtab tab;                      /* objects.h: the object table (and its subscribers) */
  struct hpl__dir_xlog_ring *xlog;    /* xlog.c: the transfer record */
  struct hpl__dir_cost *cost;         /* cost.c: the measured cost model parameters */
  struct hpl__dir_nodes *nodes;       /* nodes.c: the registry, liveness, event subscribers */
  struct hpl__dir_tombs *tombs;       /* tombs.c: ids deleted lately */
  struct hpl__dir_reduces *reduces;   /* reduce*.c: the reduces, the finished ones, a timer */
  struct hpl__dir_ring *rings;        /* ring.c: ring allreduce groups, by target (uthash) */
  struct hpl__dir_acquire *acquire;   /* acquire*.c: broadcast crawl reports and their timer */
  struct hpl__dir_admin *admin;       /* admin.c: deletes waiting for DROP acks */
  struct hpl__dir_gone *gone;         /* status.c: the nodes declared dead lately (a ring) */
  struct hpl__dir_publish *publish;   /* publish.c: publishes not confirmed, quotas, a timer */
} hpl__dir_server;

/* A request as the dispatcher (server.c) hands it to a module's handler,
 * after the table's rules held: a registered node where one is needed
 * (then dc->node is set), a valid object id where the message names one,
 * and a payload only where the type allows one. `msg` is of the protobuf
 * type of the message type the handler is registered for; it and the
 * payload are valid during the call only. */
typedef struct hpl__dir_frame {
  hpl__dir_conn *dc;
  uint64_t req;           /* request id: replies echo it (0: none wanted) */
  ProtobufCMessage *msg;
  const uint8_t *payload;
  uint64_t plen;
} hpl__dir_frame;

typedef void (*hpl__dir_handler)(hpl__dir_server *s, const hpl__dir_frame *f);

/* Start the server on `loop` (*s is cleared first, *cfg copied): bind and
 * listen, write the port file, start liveness and the signal handlers.
 * Returns 0, or HPL_EINVAL (bad address), HPL_ESYS (cannot listen or
 * write the port file), HPL_ENOMEM; after a failure the process exits
 * (handles opened so far are not closed). */
int hpl__dir_server_start(hpl__dir_server *s, uv_loop_t *loop, const hpl__dir_config *cfg);

/* Serve an already connected stream (the listener's accepts; tests and
 * fuzz targets hand in one end of a socketpair as a uv_pipe_t). Takes `t`
 * (malloc'd, initialised): it is closed if it cannot be served. `peer`
 * names it in logs. */
void hpl__dir_server_serve(hpl__dir_server *s, uv_stream_t *t, const char *peer);

/* Free everything once the loop has ended (after SIGINT/SIGTERM). */
void hpl__dir_server_free(hpl__dir_server *s);

#endif
