/*
 * server.h - hoplite-store: one per node, one event loop, one `store`.
 *
 * This header owns the process's top-level state (struct store), its
 * configuration and counters, and its life cycle (start, drain, stop,
 * free). Every module of the store receives the `store *`; each module's
 * own state hangs off it in the block marked with the module's name and is
 * touched by that module only.
 *
 * Modules, from the bottom up (a module calls only modules listed before
 * it, never one listed after it):
 *   pool.c      the shared-memory pool (jemalloc arena over a memfd)
 *   faults.c    deterministic fault points for failure-injection tests
 *   objects.c   the object table: ids, buffers, references, progress,
 *               watchers and waiters; the presence filter
 *   stmetrics.c the one list of counters (COUNTERS, /metrics), the request
 *               histograms, the /metrics endpoint
 *   puller.c    the generic puller: one byte stream from a peer's data port
 *   dataport.c  the data port: serving streams (also of partial copies)
 *   dirlink.c   the connection to the directory: requests, heartbeats,
 *               reconnects, re-registration
 *   room.c      waiting for room in the pool; letting idle copies go
 *   session.c   a local client's session: references, holds, replies
 *   lifetime.c  objects put with a lifetime: owned by their client, or a TTL
 *   fetch.c     getting an object this node lacks (fetchsm.c: its states)
 *   get.c       a client's GET: answer, or wait while fetch brings it
 *   put.c       a client's put: create, write, seal or abort
 *   rdtask.c    this node's slots of reduce trees
 *   rdsink.c    the reduce target at the node that asked for it
 *   clients.c   the local socket: accept, HELLO, dispatch
 *   server.c    start, signals, drain, stop (this header)
 *   main.c      the command line
 */
#ifndef HPL_STORE_SERVER_H
#define HPL_STORE_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "faults.h"
#include "metricsrv.h"
#include "pool.h"

typedef struct store store;
struct st_obj;

/* store_config.trim_ms: not set (store_start picks 10 s, or never with prefault) */
#define STORE_TRIM_DEFAULT UINT32_MAX

typedef struct store_config {
  char dir_host[256];
  int dir_port;
  char socket_path[108];
  uint64_t memory;           /* pool capacity */
  char data_host[64];        /* data port bind address ("": by the directory's) */
  int data_port;             /* 0: any */
  char data_addr[64];        /* advertised address ("" = the one facing the directory) */
  char name[64];
  const char *ready_file;    /* written once registered: "<data_port>\n" */
  uint64_t chunk;            /* largest write of a data stream */
  int prefault;
  int sendfile;              /* --sendfile: streams leave the pool with sendfile(2) */
  uint64_t link_rate;        /* --link-rate: this host's link, bits/s (0: not given;
                                streams leave unpaced) */
  uint32_t stall_timeout_ms; /* pull with no bytes this long is abandoned (0: never) */
  double straggler_ratio;    /* a complete sender delivering below this fraction of */
  uint32_t straggler_ms;     /*   our usual rate for this long is replaced (0: off) */
  uint32_t grace_ms;         /* SIGTERM: time to finish serving before leaving */
  store_faults faults;
  hpl__auth auth;            /* the cluster secret (auth.on 0: none, loopback only) */
  int insecure;              /* --insecure: no exposure or local-peer checks */
  int64_t allow_gid;         /* local clients of this group are allowed too (-1: none) */
  uint32_t max_conns;        /* open data-port connections, and local clients, at most */
  uint32_t trim_ms;          /* free pool pages go back to the kernel once no allocation
                                was freed for this long (0: never; STORE_TRIM_DEFAULT:
                                10 s, or never with prefault) */
  uint64_t trim_keep;        /*   ...all but the lowest this many free bytes (warm) */
  char spill_dir[256];       /* idle primary copies are written here when the pool is
                                full ("": never) */
  uint32_t room_wait_ms;     /* a buffer that does not fit waits this long at most for
                                room (also when the client set no timeout) */
  hpl__metrics_cfg metrics;  /* --metrics-listen (off unless given) */
} store_config;

/* Defaults for every field (2 GiB pool, 4 MiB chunks, ...). */
void store_config_defaults(store_config *c);

typedef struct store_counters {
  uint64_t data_bytes_sent, data_bytes_received, pulls_served, pulls_made, pull_failures,
      inline_gets, inline_puts, local_gets, remote_gets, puts, deletes, bytes_resent,
      grants_taken,   /* GRANTs pulled on: a client's get needed no ACQUIRE (fetch.c) */
      grants_ignored, /* GRANTs for an object held or asked for already */
      grant_waits_expired, /* granted GETs whose GRANT did not come in time: asked */
      pull_resumes, bytes_kept_on_resume, stalls, stragglers, restarts, auth_failures,
      stragglers_early,  /* crawls judged early: half (a reduce stream's: a quarter) of
                            --straggler-ms (puller.c) */
      reduce_crawl_reports, /* reduce streams reported crawling to the directory */
      dir_registrations, /* times this store registered with the directory */
      pull_suspects,     /* streams silent for their quiet window (sender suspected) */
      quiet_notes,       /* ...for half of it: the directory told to probe the sender */
      suspect_moves,     /*   ...that moved to another sender on the directory's word */
      clients_refused, conns_refused,
      owned_deletes,      /* objects deleted because the client owning them left */
      ttl_deletes,        /* objects deleted because their TTL ran out */
      pool_trims,         /* walks that gave free pool pages back to the kernel */
      pool_trimmed_bytes, /*   ...and the bytes they punched (holes again included) */
      evictions,          /* idle secondary copies let go to make room */
      evicted_bytes,
      evict_refusals,     /* copies offered that the directory kept (last copy, serving) */
      room_waits,         /* buffers that waited for room */
      room_timeouts,      /*   ...and found none in time (HPL_ENOMEM) */
      orphans_ended,      /* reduce tasks a restarted directory did not adopt, ended */
      reduce_resumes,     /* reduce tasks that took a failed node's slot over mid-stream */
      reduce_resumed_bytes, /*   ...and the output bytes they did not make again */
      reduce_rebases,     /* resumed tasks that had to make skipped bytes after all */
      reduce_child_moves, /* children's (or the root's) streams pulled on from a resumed
                             slot's new node */
      sendfile_bytes,     /* stream bytes sent with sendfile(2) (no user-space copy) */
      paced_conns,        /* data-port connections paced to --link-rate (dataport.c) */
      pace_failures,      /*   ...and those the kernel would not pace (sent unpaced) */
      spilled, spilled_bytes,   /* objects written to spill files (their buffers freed) */
      spill_dropped,            /* buffers freed of objects already on disk */
      restored, restored_bytes, /* objects read back into the pool */
      spill_errors,             /* writes or reads of spill files that failed */
      ring_tasks,     /* ring allreduces this node took part in (ring.c) */
      rings_done,     /*   ...whose target it completed */
      ring_failures,  /*   ...whose part here failed, or that ended before it was done */
      ring_fallbacks; /* allreduces asked for a ring that ran none (reduced as usual) */
} store_counters;

struct store {
  uv_loop_t *loop;
  store_config cfg;
  hpl__pool *pool;
  struct hpl__spill *spill; /* cfg.spill_dir's spill files (NULL: off) */
  uint64_t node_id;
  uint64_t start_ms;
  uint32_t inline_max;  /* the directory's, from registration */
  uint32_t max_senders; /* the directory's, from registration */
  int dir_quiet_notes;   /* ... and whether it takes QUIET notes (puller.c) */
  int dir_rings;         /* ... and RING requests (ring.c) */
  int dir_publish;       /* ... and clients' PUBLISH (told in the clients' Hello) */
  store_counters ctr;
  int stopping;
  int draining; /* SIGTERM: leaving once current streams are served */
  uv_timer_t grace;
  uv_signal_t sigint, sigterm;
  uint64_t netns; /* inode of this process's network namespace, 0 if unknown */
  /* objects.c */
  struct st_objects *objects; /* the tables (NULL until the first object) */
  uv_timer_t trim; /* gives free pool pages back once frees pause (cfg.trim_ms) */
  int trim_live;   /* the timer is initialised */
  uint64_t next_inst;
  void (*room_changed)(store *s); /* room.c's: pool memory was freed or an object went
                                     idle (see store_idle_oldest) */
  int filter_fd;           /* presence filter shared read-only with clients */
  uint8_t *filter;
  /* puller.c */
  struct st_puller *pullers;
  double rate_ewma;      /* bytes/s of recent pulls from complete senders */
  double last_pull_rate; /* of the pull that just completed (0: not measured) */
  unsigned straggler_streak; /* senders judged stragglers since a pull last went at a
                                healthy rate: our own link may be the slow one, so
                                each one widens the window (puller.c) */
  /* dataport.c */
  uv_tcp_t data_listener;
  int data_port_bound;
  struct st_sender *senders;
  uint32_t nsenders;
  void (*data_idle)(store *s); /* a stream ended and none is left */
  void (*want_bytes)(store *s, struct st_obj *o); /* room.c's: a stream waits for a spilled copy */
  void (*root_released)(store *s, const char *target); /* rdsink.c's: a moved root's last
                                                           combine step is done */
  /* dirlink.c */
  struct dirlink *dl;
  /* fetch.c */
  struct st_fetch *fetches;
  /* rdtask.c */
  struct rd_task *tasks;
  uv_timer_t rd_orphans; /* ends tasks a restarted directory did not adopt (data: set once
                            initialised) */
  void (*reduce_shed)(store *s); /* rdtask.c's: room is wanted; orphaned tasks that only
                                    hold memory end */
  /* rdsink.c */
  struct rd_sink *sinks;
  /* ring.c */
  struct rg_task *rings; /* by target */
  /* lifetime.c */
  struct st_lifetime *lt; /* deletes due: owned objects of clients that left, TTLs */
  uv_timer_t lt_timer;    /* the one timer: the earliest deadline, or at once */
  int lt_live;
  /* room.c */
  struct st_room *rooms;  /* waiting for room, in arrival order */
  uv_timer_t room_timer;  /* runs the queue: at once after a change, else at the next deadline */
  int room_live;
  uint64_t evict_bytes;   /* bytes offered in EVICTs not answered yet */
  int evict_asks;         /* EVICTs out */
  int room_kicked;        /* something changed since the queue last ran */
  uint64_t spill_inflight; /* bytes being written to spill files */
  /* stmetrics.c (the histograms are recorded by get.c and put.c) */
  hpl__hist get_hist;     /* client GETs: arrival to answer */
  hpl__hist put_hist;     /* puts: CREATE or PUT to the seal's answer */
  struct hpl__msrv *msrv; /* the /metrics endpoint (NULL: none) */
  /* clients.c */
  uv_pipe_t client_listener;
  struct st_client *clients;
  uint32_t nclients;
  uint64_t next_client;
};

/* Start everything (pool, data port, local socket, directory link,
 * signals) on `loop`. *s is cleared first; cfg is copied. Returns 0 or an
 * HPL_E* code (the reason is logged). */
int store_start(store *s, uv_loop_t *loop, const store_config *cfg);

/* Close every handle so the loop can end (idempotent). */
void store_stop(store *s);

/* Free everything once the loop has ended (after store_stop). */
void store_free(store *s);

/* SIGTERM: stop taking work, finish serving streams (grace period), leave. */
void store_drain(store *s);

#endif
