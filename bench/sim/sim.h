/*
 * sim.h - hpsim, the discrete-event simulator of issue 45: what its files
 * share. ONE concern: the simulator's types and the calls between its files.
 * Callers: the .c files of bench/sim/ only (hpsim is a bench tool, not part of a server).
 *
 * The files, bottom-up (each calls only the ones before it):
 *   simcore.c  the virtual clock and the event heap (an indexed binary heap:
 *              one entry per timer at most, so memory is bounded by the
 *              number of timers, never by the number of reschedules)
 *   simnet.c   hosts (uplink, downlink, latency), streams between them as
 *              fluid flows, max-min sharing of each link, chunk-level
 *              pipelining behind a partial copy
 *   simdir.c   the directory: ONE server queue charging CPU per request,
 *              around the directory's REAL object table and sender choice
 *              (directory/objtab.c, objects.c, objpick.c, linked as is)
 *   simstore.c the stores: a get's steps (ACQUIRE, connect, PULL, stream,
 *              LOC_COMPLETE), silence detection and the move on a verdict
 *   simrun.c   one broadcast run to its end, its figures and table row
 *   simvalid.c `validate`: simulated next to the measured 8-host runs
 *   simmain.c  the scale runs, the sim_small checks, the CLI
 *   simred.c, simredrun.c  reduce and allreduce (their own section below)
 *   simcompare.c `compare`: simulated next to one session's measured rows
 *   simcpu.c   the emulation machine's CPU under a plain TCP chain (compare's
 *              chain rows) and `touchcost`
 *
 * Time is in seconds (double) everywhere in the simulator; byte counts are
 * doubles in the fluid model (exact to 2^53 bytes).
 */
#ifndef HPL_SIM_H
#define HPL_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "objects.h"

/* One assertion of a `check` command (a ctest): when `c` is false, print
 * "FAIL: " and the message, and set `flag` (the command's exit status). */
#define HPL__SIM_CHECK(flag, c, ...)  \
  do {                                \
    if (!(c)) {                       \
      printf("FAIL: " __VA_ARGS__);   \
      printf("\n");                   \
      (flag) = 1;                     \
    }                                 \
  } while (0)

/* ------------------------------------------------------------------ simcore.c */

/* A timer: an event owner's one slot in the heap (idx 0: not scheduled). */
typedef struct hpl__sim_timer {
  double at;
  uint64_t seq; /* when it was (re)scheduled: equal times fire in that order */
  uint32_t idx;
  void (*fn)(struct hpl__sim_timer *t);
} hpl__sim_timer;

typedef struct hpl__sim_clock {
  double now;
  hpl__sim_timer **heap; /* 1-based */
  uint32_t n, cap;
  uint64_t events;
  uint64_t seq;
  int stop;          /* set to end hpl__sim_run early (a wall-time limit) */
} hpl__sim_clock;

/* Start/stop a clock at time 0 (free releases the heap only; timers are the
 * owners'). hpl__sim_at (re)schedules t at absolute time `at` (never before
 * now); hpl__sim_cancel unschedules it (no-op if it is not). hpl__sim_run
 * fires timers in time order until none is left, c->stop is set, or now
 * would pass `until` (then now = until). Errors: an allocation failure aborts (a bench tool). */
void hpl__sim_clock_init(hpl__sim_clock *c);
void hpl__sim_clock_free(hpl__sim_clock *c);
void hpl__sim_at(hpl__sim_clock *c, hpl__sim_timer *t, double at);
void hpl__sim_cancel(hpl__sim_clock *c, hpl__sim_timer *t);
void hpl__sim_run(hpl__sim_clock *c, double until);

/* ------------------------------------------------------------------ simnet.c */

struct hpl__sim_flow;

typedef struct hpl__sim_host {
  double up, down;            /* link goodput, bytes/s */
  struct hpl__sim_flow *outs; /* streams this host sends (its uplink's flows) */
  uint32_t nout;
  struct hpl__sim_flow *in;   /* the one stream into this host's copy (or NULL) */
  /* the host's copy of the object being simulated */
  double got;      /* bytes arrived, as of got_at */
  double got_at;
  double rate_in;  /* d(got)/dt now */
  int complete;    /* all bytes held (and servable) */
  int stopped;     /* killed or paused: sends and receives nothing */
  /* The group: this host's streams that run at one shared rate (from a
   * complete copy to a running receiver whose downlink is the group's
   * demand). Their bytes are kept as a virtual service V(t) = the bytes
   * each got since the group began (V + share x (now - V_at)), so a change
   * of the share costs O(1) instead of a settle and reschedule per stream,
   * and their ends are a heap by the V at which each completes. */
  double V, V_at, share, gdemand;
  struct hpl__sim_flow **gheap; /* 1-based; by vjoin - base (smallest ends first) */
  uint32_t gn, gcap;
  uint32_t gfwd;               /* group receivers that forward (their streams follow the share) */
  hpl__sim_timer gtm;          /* the group's next end */
} hpl__sim_host;

typedef struct hpl__sim_flow {
  struct hpl__sim_flow *snext, *sprev; /* the sender's list */
  hpl__sim_host *src, *dst;
  uint32_t src_i, dst_i;
  double rate;
  int tracking;      /* caught up with a partial sender: bound to its rate */
  int grouped;       /* in its sender's group: rate = src->share, bytes from src->V */
  uint32_t gidx;     /* its place in the sender's group heap */
  double vjoin, base; /* the sender's V and dst's bytes when it joined */
  hpl__sim_timer tm; /* catch-up or end of its bytes */
  void *owner;       /* the store model's pull (simstore.c) */
} hpl__sim_flow;

typedef struct hpl__sim_net {
  hpl__sim_clock *clk;
  hpl__sim_host *hosts;
  uint32_t nhosts;
  double size;    /* the object's bytes */
  double unit;    /* the pipelining unit: a partial copy serves whole verified units */
  double lat;     /* one-way latency, s */
  /* A receiving process's first `touch` bytes also fault its read buffer
   * in (fresh pages, a first-touch cost per byte): until it holds them its
   * intake is at most touch_down bytes/s (0: no such phase; simcpu.c) */
  double touch, touch_down;
  /* the stream's bytes are all in (the store model adds the latency) */
  void (*arrived)(hpl__sim_flow *f);
  uint64_t recomputes, rate_changes;
  uint32_t max_fanout; /* most streams one host sent at once */
  double src_bytes; /* bytes host 0 (the source) sent */
  double bytes;     /* bytes every host sent */
} hpl__sim_net;

/* Hosts 0..n-1, all with the same rates (bits/s scaled by eff, the share of
 * the line rate TCP's goodput reaches). Host 0 holds the object. */
void hpl__sim_net_init(hpl__sim_net *n, hpl__sim_clock *c, uint32_t nhosts, double bits,
                       double eff, double lat, double size, double unit);
void hpl__sim_net_free(hpl__sim_net *n);
/* Bytes held at dst now / servable to a receiver now. */
double hpl__sim_got(const hpl__sim_net *n, const hpl__sim_host *h);
double hpl__sim_servable(const hpl__sim_net *n, const hpl__sim_host *h);
/* A stream of the object from src to dst, starting from the bytes dst
 * holds. Returns it (owned by the net until hpl__sim_flow_end). */
hpl__sim_flow *hpl__sim_flow_start(hpl__sim_net *n, uint32_t src, uint32_t dst, void *owner);
/* End a stream (its bytes so far stay at dst) and free it. */
void hpl__sim_flow_end(hpl__sim_net *n, hpl__sim_flow *f);
/* A host stops or resumes (kill, SIGSTOP/SIGCONT): its streams in and out
 * carry nothing meanwhile. */
void hpl__sim_host_stop(hpl__sim_net *n, uint32_t h, int stopped);
/* dst's copy is complete (its last bytes landed): servable in full. */
void hpl__sim_host_complete(hpl__sim_net *n, uint32_t h);

/* ------------------------------------------------------------------ simdir.c */

typedef struct hpl__sim_params {
  uint32_t nodes;       /* hosts, the source included */
  double bits;          /* line rate, bits/s */
  double eff;           /* TCP goodput share of the line rate */
  double lat;           /* one-way latency, s */
  double size;          /* object bytes */
  double unit;          /* pipelining unit (bytes); 0: the store's for this size (hpl__digest_unit) */
  double arrive_over;   /* receivers ask spread evenly over this many s (0: at once) */
  double dir_cpu;       /* fixed directory CPU per request, s */
  int dir_measured;     /* also charge the measured CPU of the real decision code */
  uint32_t max_senders; /* the directory's --max-senders */
  double fail_frac;     /* share of receivers killed/paused mid-broadcast */
  int fail_pause;       /* 0: killed, 1: paused for pause_s */
  double fail_at;       /* when (s after the start) */
  uint32_t fail_depth;  /* >0: fail the one receiver streaming at this chain depth instead */
  double pause_s;
  double kill_close;    /* a killed store's sockets close this long after the kill
                           (the kernel tears its pool's mappings down first) */
  double dead_after;    /* the directory declares a silent node dead after this */
  double probe_s;       /* the probe timeout (directory/nodestat.c) */
  double restart_at;    /* the directory restarts then (0: never), all its state lost */
  double lease_s;       /* ...and answers again this much later (lease + election) */
  double reconnect_s;   /* a store finds the new directory within this (dlprobe.c tick) */
  int no_held_upstream; /* stores re-report complete copies only (no held_partials) */
  double cpu_cap;       /* bytes/s a store's CPU can take in: its share of the
                           cores over its CPU per byte (0: no limit; compare) */
  double touch_bytes;   /* a receiver's first bytes that fault its buffer in (0: none) */
  double touch_cap;     /* ...and what its CPU takes in meanwhile, bytes/s (simcpu.c) */
  double wall_limit;    /* stop a run after this much wall time (0: none) */
  uint64_t seed;
  int verbose;
} hpl__sim_params;

typedef struct hpl__sim_dir hpl__sim_dir;
struct hpl__sim_world;

/* A request to the directory (its bytes arrive after the latency; it
 * waits in the directory's queue, costs CPU, then runs `fn`). */
typedef enum {
  HPL__SIM_REQ_ACQUIRE,  /* a get asks for a sender */
  HPL__SIM_REQ_SILENT,   /* a receiver reports its sender silent (AcquireReq.suspect) */
  HPL__SIM_REQ_COMPLETE, /* LOC_COMPLETE */
  HPL__SIM_REQ_SUSPECT,  /* a stream quiet for its whole window: AcquireReq.suspect
                            naming the sender (peer); answered "move" or "stay" */
  HPL__SIM_REQ_GONE,     /* the node's connection closed (a kill) or its heartbeats
                            timed out: it is dead (nodes.c hpl__dir_node_gone) */
  HPL__SIM_REQ_HELD,     /* after (re)registering: the node re-reports its copy
                            (store/dlheld.c); peer = its upstream, UINT32_MAX: complete */
} hpl__sim_req_kind;

hpl__sim_dir *hpl__sim_dir_new(struct hpl__sim_world *w);
void hpl__sim_dir_free(hpl__sim_dir *d);
/* Queue a request from `node` (it reaches the directory one latency later). */
void hpl__sim_dir_send(hpl__sim_dir *d, hpl__sim_req_kind k, uint32_t node, uint32_t peer);
/* The directory's probe of `node` went unanswered / the node is declared
 * dead (its copies removed, hpl__dtab_node_gone). */
void hpl__sim_dir_suspect(hpl__sim_dir *d, uint32_t node);
void hpl__sim_dir_node_dead(hpl__sim_dir *d, uint32_t node);

typedef struct hpl__sim_dirstats {
  uint64_t requests, decisions, waits, moves;
  double busy;        /* CPU charged, s */
  double real_cpu;    /* CPU the real decision code took (measured), s */
  double max_pick;    /* the dearest single call, s */
  double max_queue;   /* longest time a request waited in the queue, s */
  double last_end;    /* when the last request's CPU ended */
} hpl__sim_dirstats;
const hpl__sim_dirstats *hpl__sim_dir_stats(const hpl__sim_dir *d);
/* A paused node is heard again (nodelive.c hpl__dir_node_heard): no longer suspected. */
void hpl__sim_dir_back(hpl__sim_dir *d, uint32_t node);
/* The directory process dies now: its table, queue, waiters and probes are
 * lost, and requests reaching it are dropped until `up` (a new one leads). */
void hpl__sim_dir_restart(hpl__sim_dir *d, double up);
/* Whether the directory is down now. */
int hpl__sim_dir_down(const hpl__sim_dir *d);

/* ------------------------------------------------------------------ simstore.c */

typedef struct hpl__sim_world {
  hpl__sim_params p;
  hpl__sim_clock clk;
  hpl__sim_net net;
  hpl__sim_dir *dir;
  struct hpl__sim_store *stores;
  uint32_t done, failed; /* receivers complete / stopped for good */
  uint32_t drawn;        /* receivers failed (drawn among those streaming at fail_at) */
  uint32_t rereports;    /* stores that registered again and re-reported their copy */
  double last_done;
  double slowest;        /* the longest get of a receiver that did not fail (survivors) */
  double slowest_failed; /* ...and of one that was paused (its own get) */
  uint64_t moves;        /* receivers that changed sender */
  uint32_t *copies;      /* streams each receiver started (copies sent to it) */
  int aborted;           /* the wall limit was hit */
} hpl__sim_world;

/* The directory's answer to `node`'s request: pull from `sender` (from the
 * bytes it holds), wait, stay with the sender it has, or fail. */
void hpl__sim_store_answer(hpl__sim_world *w, uint32_t node, uint32_t sender);
void hpl__sim_store_stay(hpl__sim_world *w, uint32_t node, double retry);
/* A suspect report's answer: move off the silent sender to `sender`. */
void hpl__sim_store_move(hpl__sim_world *w, uint32_t node, uint32_t sender);
/* The directory is back (a restart) or declared `node` dead (a pause past
 * dead_after): the store registers again, re-reports its copy (with its
 * upstream if it is streaming in) and re-sends a pending ACQUIRE. */
void hpl__sim_store_reconnect(hpl__sim_world *w, uint32_t node);
/* Set the world up, run it to the end, free it. Returns 0, or -1 when
 * receivers were left unfinished (stuck) or the wall limit was hit. */
int hpl__sim_world_run(hpl__sim_world *w);
void hpl__sim_world_free(hpl__sim_world *w);
/* How many copies of the object left the source (bytes sent / size). */
double hpl__sim_source_copies(const hpl__sim_world *w);
/* Hops from the source of node's copy, as last assigned. */
uint32_t hpl__sim_depth(const hpl__sim_world *w, uint32_t node);

/* ------------------------------------------------------------------ simrun.c, simvalid.c */

/* How long a killed store's sockets stay open (kill -9 to EOF at a peer),
 * measured on its own (bench/results/sim-killclose-2026-11-30.txt): a
 * store with bench_faults' pool (4 x 256 MiB + 128 MiB, --prefault),
 * nothing else running: 44-45 ms; while an 8-host 256 MiB broadcast ran
 * on the same VM, as in the fault runs: 58-258 ms, median 164 ms (17
 * kills). The exiting process unmaps its pool before it closes its files. */
#define KILL_CLOSE_QUIET 0.045
#define KILL_CLOSE_LOADED 0.164
#define KILL_CLOSE_MIN 0.058
#define KILL_CLOSE_MAX 0.258

/* What one simulated broadcast gives (simrun.c). */
typedef struct hpl__sim_result {
  double t, tfailed, last, sbg, bound, src_copies, dps, dcpu, real_cpu, max_pick, max_queue, cmean, wall;
  uint32_t dmax, cmax, fanout, failed, drawn, rereports;
  double dmean;
  uint64_t decisions, waits, moves, events, rate_changes;
  int rc;
} hpl__sim_result;

/* The defaults of a run: 8 hosts at 1 Gbit/s, 64 MiB, as the emulated
 * cluster (bench/cluster.sh) measured. */
hpl__sim_params hpl__sim_defaults(void);
/* Simulate p to its end and collect the figures (the world is freed). */
hpl__sim_result hpl__sim_run_one(const hpl__sim_params *p);
/* The scale table's header and one row of it (stdout). */
void hpl__sim_row_header(void);
void hpl__sim_row(const hpl__sim_params *p, const hpl__sim_result *r, const char *fail);
/* hpsim validate: the tables against bench/results; returns the exit status. */
int hpl__sim_validate(void);
/* The fault scenario's survivors' time: an 8-host broadcast (p's rate and
 * size) with the receiver at chain depth `depth` killed (its sockets
 * closing `kill_close` s later) or paused for pause_s, at `at` (simvalid.c). */
double hpl__sim_fault_run(double size, int pause, double at, double pause_s, uint32_t depth,
                          double bits, double kill_close);

/* ------------------------------------------------------------------ simcpu.c */

/* The CPU of bench/p2p.c's relays on the emulation machine, at `share` of
 * the cores each: p's cpu_cap (plain TCP per byte) and its first-touch
 * phase (touch_bytes, touch_cap). hpl__sim_touchcost: `hpsim touchcost`,
 * the first-touch cost measured now (returns the exit status). */
void hpl__sim_chain_cpu(hpl__sim_params *p, double share);
int hpl__sim_touchcost(void);

/* ------------------------------------------------------------------ simcompare.c */

/* hpsim compare FILE...: every same-session row of FILE (written by
 * bench/sim/validate_session.sh) beside its simulation; returns 0 when
 * every row is within 5 %, 1 when one is not, 2 on a bad file. */
int hpl__sim_compare(int argc, char **argv);

/* ------------------------------------------------------------------ simred.c, simredrun.c
 * Reduce and allreduce (the reduce helper's part of hpsim). simred.c: the
 * data path of a static tree, chain or ring as per-unit pipelines (each
 * stream a pipe at its max-min share, each node's CPU a server); the plan
 * is the REAL hpl__plan_make (src/common/planner.c). simredrun.c: the
 * reduce/allreduce commands, the validation table, the scale runs, the
 * sim_reduce_small checks. */

typedef enum {
  HPL__SIMRED_REDUCE,       /* a reduce tree into the sink (host 0) */
  HPL__SIMRED_ALLREDUCE,    /* a ring (directory/ring.c, store/ring.c) */
  HPL__SIMRED_ALLREDUCE_NR, /* --no-rings: the reduce, then its target along the chain */
} hpl__simred_kind;

typedef struct hpl__simred_params {
  hpl__simred_kind kind;
  uint32_t k;        /* sources, one per host; host 0 is the sink and holds source 0 */
  double size;       /* bytes of each source (and of the result) */
  double unit;       /* the forwarding/verifying unit; 0: the store's for this size (hpl__digest_unit) */
  double rate;       /* each link's goodput, bytes/s (up and down) */
  double lat;        /* one-way latency, s */
  double plan_lat, plan_bw; /* the directory's cost model (its defaults, or "auto") */
  double c_hash;     /* CPU s per byte hashed (0: integrity off) */
  double c_comb;     /* CPU s per byte combined (hpl__reduce_apply) */
  double c_base;     /* CPU s per byte a store receives (copies, the kernel's TCP) */
  double cpu_share;  /* the cores each host's store gets (8 emulated hosts on 2 cores: 0.25) */
  double dir_cpu;    /* the directory's CPU per arrival (s), besides the measured fill */
  double start;      /* s before the first byte moves (REDUCE, answers, connections) */
  int degree;        /* 0: the planner's choice; else this degree (what-if runs) */
} hpl__simred_params;

typedef struct hpl__simred_result {
  double t;          /* the last participant's result complete, s */
  double bound;      /* bytes per busiest link / rate + the fill along the deepest path */
  int degree, depth; /* the plan's: fan-in and the longest path from a leaf to the sink */
  double plan_cost;  /* the planner's T(d) */
  uint64_t decisions; /* directory decisions (arrivals into slots, ring placements) */
  double dir_busy;   /* directory CPU charged (fixed + the fill rule's measured), s */
  double cpu_max;    /* the busiest host's CPU time, s */
  double link_bytes; /* bytes on the busiest link */
  double counted;    /* sources counted into the result (k if every one counted once) */
  uint32_t once_ok;  /* 1 if every source was counted exactly once at every participant */
} hpl__simred_result;

/* Simulate one reduce or allreduce. Returns 0, -1 on a bad parameter (k < 2,
 * size < unit, a ring outside directory/ring.c's limits asked with kind
 * ALLREDUCE falls back to ALLREDUCE_NR as the directory declines it).
 * Allocation failures abort (a bench tool). */
int hpl__simred_run(const hpl__simred_params *p, hpl__simred_result *r);

/* CPU s per byte of sha256 digests and of a float32 sum, measured now
 * with the real code (hpl__digest_bytes, hpl__reduce_apply). */
void hpl__simred_calibrate(double *c_hash, double *c_comb);

/* The parameters of the 8 emulated hosts on 2 cores at 1 Gbit/s, 64 MiB,
 * sha256, with the CPU costs measured now (once per process) or as set by
 * hpl__simred_set_costs, and a switch of the integrity (the unit and the
 * digests' cost) (simredrun.c). */
hpl__simred_params hpl__simred_defaults(void);
void hpl__simred_integrity(hpl__simred_params *p, int on);

/* Use these CPU costs (s per byte of sha256 digests and of a float32 sum)
 * instead of measuring them: a session's own, recorded when its rows were
 * measured (`hpsim calib`, compare's calib row), so that comparing the same
 * rows twice gives the same figures. Before the first hpl__simred_defaults. */
void hpl__simred_set_costs(double c_hash, double c_comb);
/* Whether the costs in use were set (1) or measured in this process (0). */
int hpl__simred_costs(double *c_hash, double *c_comb);

/* hpsim reduce|allreduce ... (simmain.c dispatches argv from the command on). */
int hpl__simred_main(int argc, char **argv);

#endif
