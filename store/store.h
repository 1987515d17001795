/*
 * store.h - the process's own state (struct hpl__store): what every module of
 * hoplite-store may read and nothing more. It holds the event loop, the
 * configuration, the node id, the process-wide flags (stopping,
 * draining), the metrics (counters and request histograms; gauges are
 * read from the modules that count them) and one pointer to each module's context. A module's context is
 * its own struct, defined in its .c file and reached only through its
 * header; the order modules may call each other is in server.h.
 *
 * Callers: every module of the store (server.c owns the struct).
 */
#ifndef HPL_STORE_STORE_H
#define HPL_STORE_STORE_H

#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "faults.h"
#include "metrics.h"
#include "metricsrv.h"
#include "pool.h"

typedef struct hpl__store hpl__store;
struct hpl__obj;

/* hpl__store_config.trim_ms: not set (hpl__store_start picks 10 s, or never with prefault) */
#define HPL__STORE_TRIM_DEFAULT UINT32_MAX
#define HPL__PULL_WINDOW_DEFAULT UINT64_MAX /* hpl__store_start: from link_rate */
#define HPL__INLINE_INFLIGHT_DEFAULT UINT64_MAX /* hpl__store_start: from link_rate */

#define HPL__STORE_MAX_DIRS 8 /* --directory addresses (standby directories) */

typedef struct hpl__store_config {
  char dir_host[256];        /* the directory tried now: one of dirs (dlconn.c rotates) */
  int dir_port;
  char dir_hosts[HPL__STORE_MAX_DIRS][256]; /* every --directory address, in order */
  int dir_ports[HPL__STORE_MAX_DIRS];
  int ndirs;
  char socket_path[108];
  uint64_t memory;           /* pool capacity */
  char data_host[64];        /* data port bind address ("": by the directory's) */
  int data_port;             /* 0: any */
  char data_addr[64];        /* advertised address ("" = the one facing the directory) */
  uint32_t data_adv_port;    /* advertised data port (0: the bound one; a forwarder's) */
  char name[64];
  const char *ready_file;    /* written once registered: "<data_port>\n" */
  uint64_t chunk;            /* largest write of a data stream */
  int prefault;
  int sendfile;              /* --sendfile: streams leave the pool with sendfile(2) */
  int no_fanout;             /* --no-fanout: every corked write its own system call */
  uint64_t link_rate;        /* --link-rate: this host's link, bits/s (0: not given;
                                streams leave unpaced) */
  uint32_t stall_timeout_ms; /* pull with no bytes this long is abandoned (0: never) */
  uint32_t inbound_pulls;    /* --inbound-pulls: large copies pulled at once, the rest
                                queue (pullslot.c; 0: no limit) */
  uint32_t fill_hold_ms;     /* --fill-hold-ms: while no slot is held, the first copies wait
                                this long at most for their ask round's answers
                                (pullslot.c; 0: never) */
  uint64_t inline_inflight;  /* --inline-inflight: bytes of INLINE_PUTs out at once; a
                                small put past it is served from here (putseal.c; 0: no limit;
                                HPL__INLINE_INFLIGHT_DEFAULT: from link_rate) */
  uint64_t pull_window;      /* --pull-window: receive buffer of the connections copies are
                                pulled on (dconns.c; 0: the kernel sizes it;
                                HPL__PULL_WINDOW_DEFAULT: from link_rate) */
  uint32_t data_idle_ms;     /* --data-idle-ms: a data connection whose pull ended whole is
                                kept this long for the next pull from its sender
                                (dconns.c; 0: every pull connects anew) */
  double straggler_ratio;    /* a complete sender delivering below this fraction of */
  uint32_t straggler_ms;     /*   our usual rate for this long is replaced (0: off) */
  uint32_t grace_ms;         /* SIGTERM: time to finish serving before leaving */
  hpl__store_faults faults;
  int integrity;             /* --integrity: digests of local puts (HPL__DIGEST_*) */
  hpl__auth auth;            /* the cluster secret (auth.on 0: none, loopback only) */
  int insecure;              /* --insecure: no exposure or socket-directory checks (peers'
                                credentials are checked all the same) */
  int64_t allow_gid;         /* local clients of this group are allowed too (-1: none) */
  uint32_t max_uid_clients;  /* local clients of one user at most */
  uint32_t max_conns;        /* open data-port connections, and local clients, at most */
  uint64_t out_max;          /* output queued per connection at most (uvconn.h; 0: default) */
  uint32_t out_stall_ms;     /* ... for how long a peer may stay past it (0: default) */
  uint64_t out_total;        /* all connections' output at most (0: default) */
  uint32_t trim_ms;          /* free pool pages go back to the kernel once no allocation
                                was freed for this long (0: never; HPL__STORE_TRIM_DEFAULT:
                                10 s, or never with prefault) */
  uint64_t trim_keep;        /*   ...all but the lowest this many free bytes (warm) */
  char spill_dir[256];       /* idle primary copies are written here when the pool is
                                full ("": never) */
  uint32_t room_wait_ms;     /* a buffer that does not fit waits this long at most for
                                room (also when the client set no timeout) */
  hpl__metrics_cfg metrics;  /* --metrics-listen (off unless given) */
} hpl__store_config;

typedef struct hpl__store_counters {
  uint64_t data_bytes_sent, data_bytes_received, pulls_served, pulls_made, pulls_queued, pull_slots_lent, pull_failures,
      pull_fill_holds, /* first fills that waited for their ask round (pullslot.c) */
      data_conns_opened,  /* data connections a pull opened (puller.c) */
      data_conns_reused,  /* pulls that took an idle one instead (dconns.c) */
      data_conns_windowed, /* ...opened with cfg.pull_window as their receive buffer */
      data_conns_retried, /* ...whose idle one closed before the reply: pulled anew */
      corrupt_units, /* received units that failed their digests (objdig.c, puller.c) */
      inline_gets, inline_puts, local_gets, remote_gets, puts, deletes, bytes_resent,
      creates_memfd, /* CREATEs whose bytes were copied from the client's memfd (put.c) */
      grants_taken,   /* GRANTs pulled on: a client's get needed no ACQUIRE (fetch.c) */
      grants_ignored, /* GRANTs for an object held or asked for already */
      inline_deferred, /* small puts registered here, not inline (putseal.c) */
      grant_waits_expired, /* granted GETs whose GRANT did not come in time: asked */
      pull_resumes, bytes_kept_on_resume, stalls, stragglers, restarts, auth_failures,
      stragglers_early,  /* crawls judged early: half (a reduce stream's: a quarter) of
                            --straggler-ms (puller.c) */
      reduce_crawl_reports, /* reduce streams reported crawling to the directory */
      dir_registrations, /* times this store registered with the directory */
      dir_terms_refused, /* directories refused for a term older than one seen (deposed) */
      dir_probe_moves,   /* moves to another directory found leading while ours was silent */
      held_report_objects, held_report_ms, /* the last full re-report (dlheld.c): a gauge */
      pull_suspects,     /* streams silent for their quiet window (sender suspected) */
      quiet_notes,       /* ...for half of it: the directory told to probe the sender */
      suspect_moves,     /*   ...that moved to another sender on the directory's word */
      clients_refused, conns_refused,
      owned_deletes,      /* objects deleted because the client owning them left */
      ttl_deletes,        /* objects deleted because their TTL ran out */
      deletes_dropped_here, /* DELETEs whose answer dropped our own copy (no DROP came) */
      handoff_tombs_dropped,   /* deletes forgotten before their time (handoff.c: full) */
      handoff_reduces_dropped, /* reduces made here forgotten (handoff.c: full) */
      handoff_tombs_sent,      /* deletes re-reported at registrations (dlheld.c) */
      handoff_reduces_sent,    /* reduces made here re-reported at registrations */
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
      spill_corrupt,            /* spilled copies dropped: a unit read back failed its digest */
      ring_tasks,     /* ring allreduces this node took part in (ring.c) */
      rings_done,     /*   ...whose target it completed */
      ring_failures,  /*   ...whose part here failed, or that ended before it was done */
      ring_fallbacks; /* allreduces asked for a ring that ran none (reduced as usual) */
} hpl__store_counters;

struct hpl__store {
  uv_loop_t *loop;
  hpl__store_config cfg;
  uint64_t node_id;
  uint64_t start_ms;
  uint64_t netns; /* inode of this process's network namespace, 0 if unknown */
  int stopping;
  int draining; /* SIGTERM: leaving once current streams are served */
  /* metrics (stmetrics.c lists them) */
  hpl__store_counters ctr;
  hpl__hist get_hist; /* client GETs: arrival to answer (get.c) */
  hpl__hist put_hist; /* puts: CREATE or PUT to the seal's answer (put.c) */
  uint64_t inline_out; /* putseal.c's: bytes of its INLINE_PUTs not answered yet */
  /* server.c: leaving */
  uv_timer_t grace;
  uv_signal_t sigint, sigterm;
  /* each module's context, made by its start (NULL before) */
  hpl__pool *pool;                /* pool.c */
  struct hpl__spill *spill;       /* spill.c: cfg.spill_dir's files (NULL: off; room.c opens) */
  struct hpl__objects *objects;   /* objects.c */
  struct hpl__dconns *dconns;     /* dconns.c */
  struct hpl__pullers *pullers;   /* puller.c */
  struct hpl__dataport *dataport; /* dataport.c */
  struct hpl__dirlink *dl;        /* dirlink.c */
  struct hpl__rooms *rooms;       /* room.c */
  struct hpl__lifetime *lt;       /* lifetime.c */
  struct hpl__fetches *fetches;   /* fetch.c */
  struct hpl__rd_tasks *tasks;    /* rdtask.c */
  struct hpl__rd_sinks *sinks;    /* rdsink.c */
  struct hpl__handoff *handoff;   /* handoff.c */
  struct hpl__rings *rings;       /* ring.c */
  struct hpl__stmetrics *metrics; /* stmetrics.c */
  struct hpl__clients *clients;   /* clients.c */
};

#endif
