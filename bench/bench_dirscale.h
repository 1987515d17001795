/*
 * bench_dirscale.h - what the files of the bench_dirscale program share:
 * bench_dirscale.c (options, the directory's facts, the table, one N,
 * main), bench_dirscale_phase.c (the phases, the tree the answers form)
 * and bench_dirscale_node.c with bench_dirscale_fetch.c (the emulated
 * store nodes: one authenticated connection each to a real
 * hoplite-directory, their registration, heartbeats and fetches, on one
 * epoll loop; bench_dirscale_int.h). Not a library.
 *
 * The nodes move no data: a fetch's bytes "arrive" by a model (a copy is
 * complete xfer_ms after its answer, and never earlier than hop_ms after
 * its sender's copy), so only the directory's side of a broadcast is real.
 */
#ifndef HPL_BENCH_DIRSCALE_H
#define HPL_BENCH_DIRSCALE_H

#include <stdint.h>
#include <sys/types.h>

#include "frame.h"


/* ---- options (bench_dirscale.c) */

typedef struct hpl__ds_opts {
  int nodes[8], nnodes;   /* --nodes 100,1000,10000 */
  int idle_s;             /* --idle-secs: the idle phase's window */
  int spread_s;           /* --spread-secs: the spread broadcast's arrival window */
  double xfer_ms, hop_ms; /* the model of a copy's bytes (above) */
  uint64_t size;          /* --size: the object's size as told to the directory */
  int objects, per_node;  /* --objects M --per-node K: the many-objects phase */
  int phase_timeout_s;    /* --phase-timeout: a phase gives up after this */
  int hb_ms;              /* --heartbeat-ms for the directory (0: its default) */
  const char *phases;     /* --phases idle,once,spread,many */
  const char *out;        /* --out FILE: TSV rows */
  int check;              /* --check: exit 1 unless every assertion held */
} hpl__ds_opts;

extern hpl__ds_opts hpl__ds;

/* ---- the table (bench_dirscale.c), filled by the phases */

/* One row: a phase at one N. */
typedef struct hpl__ds_row {
  int n;
  char phase[16];
  double load, secs;
  uint64_t decisions, refused, unfinished;
  double rate, cpu_pct, us_per_dec, us_per_hb;
  double acq_p50, acq_p99, hb_p50, hb_p99;
  int depth_max, fan_max, senders;
  double depth_mean;
  uint64_t unreached;
  double bcast_s;
  uint64_t hb_late, closed, dead;
} hpl__ds_row;

/* A new row for `phase` at n nodes (zeroed, the load average now). */
hpl__ds_row *hpl__ds_new_row(int n, const char *phase);
/* Unless ok: one more failure, and "CHECK FAILED (n nodes, phase): "
 * with fmt printed with v. */
void hpl__ds_check(int ok, const char *fmt, int n, const char *phase, unsigned long long v);
/* Checks that failed, and runs that could not start (main's exit status). */
extern int hpl__ds_failures;
/* The CPU time of every thread of process pid so far (us). */
uint64_t hpl__ds_proc_cpu_us(pid_t pid);

/* ---- latency histogram (bench_dirscale_node.c): 10 us buckets up to
 * 100 ms, then 10 ms up to 100 s */

#define HPL__DS_H_FINE 10000
#define HPL__DS_H_COARSE 10000
typedef struct hpl__ds_hist {
  uint64_t n, max_us;
  uint32_t fine[HPL__DS_H_FINE], coarse[HPL__DS_H_COARSE];
} hpl__ds_hist;

void hpl__ds_h_add(hpl__ds_hist *h, uint64_t us);
/* The p-th quantile (0..1), in ms. */
double hpl__ds_h_pct(const hpl__ds_hist *h, double p);

/* ---- the nodes (bench_dirscale_node.c) */

/* One fetch: a node's copy of one object. */
enum { HPL__DSF_IDLE, HPL__DSF_ASKED, HPL__DSF_RECEIVING, HPL__DSF_COMPLETE, HPL__DSF_FAILED };

typedef struct hpl__ds_fetch {
  uint32_t node, obj;
  uint8_t state;
  uint32_t gen;          /* bumped when it asks again (stale wake-ups are ignored) */
  uint32_t asks;         /* ACQUIREs sent */
  uint64_t ask_at_ns;    /* when it is to ask (scheduled) */
  uint64_t asked_ns, answered_ns, done_ns;
  uint64_t sender;       /* node id named (0: none) */
  int32_t status;        /* the last refusal, 0 if none */
  int32_t waiters;       /* fetches waiting for this one's completion (list head, -1) */
} hpl__ds_fetch;

/* What a run of nodes counts. */
typedef struct hpl__ds_stats {
  uint64_t hb_sent, hb_answered, hb_late; /* late: unanswered for 3 intervals */
  uint64_t answers, refusals, moves, probes, drops, closed, completes;
  hpl__ds_hist hb_lat, acq_lat; /* heartbeat and ACQUIRE reply latency */
} hpl__ds_stats;

typedef struct hpl__ds_run hpl__ds_run;

/* Open n connections to the directory on `port` (127.0.0.1) as nodes
 * "ds-<i>" with the cluster secret file `secret` (handshake, then REGISTER,
 * pipelined). Returns the run, or NULL (what failed is printed). */
hpl__ds_run *hpl__ds_start(int port, const char *secret, int n);
/* Close every connection and free. */
void hpl__ds_stop(hpl__ds_run *r);

/* Run the loop until every node registered or timeout_ms: returns the
 * number registered. */
int hpl__ds_wait_registered(hpl__ds_run *r, int64_t timeout_ms);
/* Run the loop (heartbeats, answers) for ms. */
void hpl__ds_run_for(hpl__ds_run *r, int64_t ms);
/* The heartbeat interval the directory gave (ms). */
uint32_t hpl__ds_hb_ms(const hpl__ds_run *r);

/* A new set of `nobjs` objects of `size` bytes, object j's origin on node
 * src[j] (LOC_ADD complete, origin; waited for). Forgets the fetches of
 * the set before. 0, or -1 (refused: printed). */
int hpl__ds_objects(hpl__ds_run *r, const char *prefix, int nobjs, const int *src, uint64_t size);
/* Node `node` is to fetch object `obj` at `at_ns` (hpl__now_ns clock). */
void hpl__ds_want(hpl__ds_run *r, int node, int obj, uint64_t at_ns);
/* Run until every fetch wanted is complete or failed, or timeout_ms.
 * Returns the number not finished. */
int hpl__ds_wait_fetches(hpl__ds_run *r, int64_t timeout_ms);

/* The fetches of the current set (nfetch of them; owned by r). */
const hpl__ds_fetch *hpl__ds_fetches(const hpl__ds_run *r, int *nfetch);
/* The fetch of node `node` for object `obj`, or NULL. */
const hpl__ds_fetch *hpl__ds_fetch_of(const hpl__ds_run *r, int node, int obj);
/* Node i's id, and the index of node id (-1: not one of ours). */
uint64_t hpl__ds_node_id(const hpl__ds_run *r, int i);
int hpl__ds_node_index(const hpl__ds_run *r, uint64_t id);

hpl__ds_stats *hpl__ds_stats_of(hpl__ds_run *r);
/* Zero the counters and histograms. */
void hpl__ds_stats_reset(hpl__ds_run *r);
/* A directory counter (COUNTERS on node 0's connection), or UINT64_MAX. */
uint64_t hpl__ds_dir_counter(hpl__ds_run *r, const char *name);

/* ---- the phases (bench_dirscale_phase.c) */

/* The phases --phases names, in order, against the directory `dir` that
 * the n nodes of r registered with: a row each. */
void hpl__ds_phases(hpl__ds_run *r, pid_t dir, int n);

#endif
