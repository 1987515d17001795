/*
 * bench_faults.h - what the files of the bench_faults program share (the
 * program's usage and output are described at the top of bench_faults.c):
 *   bench_faults.c         options and main: start the cluster, run, stop
 *   bench_faults_cluster.c the cluster under test: handles, live stores,
 *                          restarts, registrations, the leak check
 *   bench_faults_part.c    a participant's get or reduce and its check;
 *                          the objects a run puts
 *   bench_faults_inject.c  the fault kinds and how each is injected
 *   bench_faults_ha.c      the standby directories of --faults dirhost
 *   bench_faults_run.c     one run (and the untimed warm-ups around it)
 *   bench_faults_runs.c    the random runs and the scenarios
 *   bench_faults_report.c  each random run's line and the summaries
 * Not a library: every function here exits the program on a failure that
 * leaves the benchmark meaningless (hpl__bf_die), as the single file did.
 */
#ifndef HPL_BENCH_FAULTS_H
#define HPL_BENCH_FAULTS_H

#include <stdint.h>
#include <stdio.h>

#include "hoplite.h"
#include "hadirs.h"
#include "localcluster.h"

#define HPL__BF_MAXN 32

/* ---- options (bench_faults.c) */

typedef struct hpl__bf_cfg {
  int hosts, runs, nsizes, do_bcast, do_reduce;
  double two_kill, slow_factor;
  double pause_min, pause_max; /* --pause-s */
  double dir_down;             /* --dir-down */
  unsigned lease_ms;           /* --lease-ms: the standby directories' (dirhost; default 1000) */
  int faults; /* HPL__FK_* bits */
  int src_copies; /* --src-copies */
  uint64_t sizes[16];
  const char *netns, *rate, *store_args, *scenario, *cluster_sh;
  const char *work_dir; /* --work-dir: kept after the run (logs) */
  const char *addrs[HPL__BF_MAXN];
  uint64_t seed;
  FILE *out;
} hpl__bf_cfg;

/* Print "bench_faults: m" on stderr and exit(1). */
void hpl__bf_die(const char *m);

/* ---- the fault kinds (bench_faults_inject.c) */

enum {
  HPL__FK_KILL = 1,
  HPL__FK_CUT = 2,
  HPL__FK_SLOW = 4,
  HPL__FK_PAUSE = 8,
  HPL__FK_DIRKILL = 16,
  HPL__FK_SRCKILL = 32,
  HPL__FK_CORRUPT = 64,
  HPL__FK_DIRHOST = 128
};
#define HPL__BF_NFK 8
/* The kinds' names (--faults, the output), indexed by bit number. */
extern const char *const hpl__bf_fk_names[HPL__BF_NFK];
/* HPL__FK_* bit -> index into hpl__bf_fk_names */
int hpl__bf_fk_index(int kind);

/* ---- the cluster under test (bench_faults_cluster.c; set up by main) */

extern hpl__lc *hpl__bf_lc;
/* --faults dirhost: etcd and two standby directories (hadirs.h); every
 * kind then runs against them (dirkill kills the leading one); NULL
 * otherwise */
extern hpl__hd *hpl__bf_hd;
extern hpl_client *hpl__bf_cs[HPL__BF_MAXN]; /* node i's client; NULL while it is dead */
extern int hpl__bf_alive[HPL__BF_MAXN];
/* Stores restarted since the last warm-up (hpl__bf_restart_dead sets it,
 * hpl__bf_warm_up clears it). */
extern int hpl__bf_restarted;

/* Restart every dead store and reconnect to it; exits on a failure. */
void hpl__bf_restart_dead(hpl__bf_cfg *g);
/* The first live store's client (node 0's store may be dead after
 * srckill), or NULL; owned by the cluster. */
hpl_client *hpl__bf_any_live(const hpl__bf_cfg *g);
/* Every live store's "dir_registrations" counter into v[] (0 if unknown). */
void hpl__bf_registrations(const hpl__bf_cfg *g, uint64_t *v);
/* Wait (at most timeout_ms) until every live store registered again since
 * `before` (hpl__bf_registrations); the number of stores that did not. */
int hpl__bf_wait_registered(const hpl__bf_cfg *g, const uint64_t *before, int64_t timeout_ms);
/* After the last run: print a LEAK line per store with pool memory still
 * allocated; returns how many there are. */
int hpl__bf_leak_check(const hpl__bf_cfg *g);

/* ---- participants (bench_faults_part.c) */

typedef struct hpl__bf_part {
  int node;
  int op; /* 0 bcast receiver, 1 reduce sink */
  const char *id;
  const char *const *srcs;
  int nsrc, k;
  uint64_t size, sum;
  uint64_t start_ns, end_ns;
  int64_t timeout_ms;
  int rc, bad;
  int unlisted; /* reduce: hpl_reduce_sources did not know it (checked against any k of N) */
  int finished; /* set (atomically) when the thread is done */
  char why[160]; /* bad: what was wrong */
  char included[1024];
} hpl__bf_part;

/* A participant's thread (arg: its hpl__bf_part): sleep until start_ns,
 * get (or reduce, then get) the object, check its bytes into rc/bad/why. */
void *hpl__bf_part_main(void *arg);
/* Node `node` puts `size` pattern bytes (hpl__fill_pattern, seed) as `id`;
 * exits on failure. */
void hpl__bf_put_pattern(int node, const char *id, uint64_t size, uint64_t seed);
/* Node `node` puts reduce source `id`: f32 element j = node + (j % 5);
 * exits on failure. */
void hpl__bf_put_source(int node, const char *id, uint64_t size);
/* --src-copies: node i+1 (mod hosts) gets a copy of source sids[i], all at
 * once; exits on failure. */
void hpl__bf_copy_sources(const hpl__bf_cfg *g, char (*sids)[96]);

/* ---- one run (bench_faults_run.c) */

typedef struct hpl__bf_outcome {
  double secs;        /* start to last survivor (the cut or slowed host's own get excluded) */
  double victim_secs; /* cut/slow: start to the victim's own completion */
  double kill_secs;   /* srckill: start to the kill of node 0 (-1: not killed) */
  /* start to the fault command's start and to its end (kill -9, SIGSTOP, the
   * cluster.sh command that cuts or slows): the fault has acted by fault_done */
  double fault_at, fault_done;
  double kill_close_s; /* kill: the first victim's connections closed this long after
                          its SIGKILL (-1: not measured) */
  int holder;         /* srckill: the receiver seen holding the first complete copy */
  int victim_depth;   /* a mid-chain victim (victims[0] = -2): its hops from node 0
                         in the directory's record when it was picked (0: unknown) */
  int completed, hangs, wrong, lost, lost_excused, other;
  int unlisted; /* reduces whose sources the (restarted) directory did not know */
  /* standby directories (dirkill, dirhost): who leads after the run, its
   * term; dirhost: when the cut host was healed (its survivors done) */
  int new_leader_host;
  uint64_t new_term;
  double heal_secs;
  int unstated; /* objects without a complete copy afterwards (hpl_stat) */
} hpl__bf_outcome;

/* Run op on `size` bytes with fault `kind` (see bench_faults_run.c). */
hpl__bf_outcome hpl__bf_run_one(hpl__bf_cfg *g, int op, uint64_t size, int run, int kind,
                                int nkill, int *victims, double kill_frac, double nofault,
                                int k_reduce, double cut_s);
/* Untimed no-fault runs (n of them); clears hpl__bf_restarted. */
void hpl__bf_warm_up(hpl__bf_cfg *g, int op, uint64_t size, int k, int n);
/* If stores were restarted: an untimed reduce and broadcast of the largest size. */
void hpl__bf_warm_restarted(hpl__bf_cfg *g, int k_reduce);
/* The no-fault time of op and size: the median of 3 (after 2 untimed). */
double hpl__bf_median3(hpl__bf_cfg *g, int op, uint64_t size, int k);

/* ---- injecting faults (bench_faults_inject.c) */

/* Restart every store with its corrupt fault point (HPL__FK_CORRUPT). */
void hpl__bf_corrupt_setup(hpl__bf_cfg *g);
/* Received units that failed their digests, summed over the live stores. */
uint64_t hpl__bf_corrupt_caught(const hpl__bf_cfg *g);
/* Run `cluster.sh VERB HOST [ARG]` for the emulated cluster; nonzero on failure. */
int hpl__bf_cluster_cmd(const hpl__bf_cfg *g, const char *verb, int host, const char *arg);

/* The srckill watcher (a thread: hpl__bf_watch_main): kills node 0 as soon
 * as one of the participants ps[0..np) holds a complete copy of id. */
typedef struct hpl__bf_watcher {
  const char *id;
  hpl__bf_part *ps;
  int np;
  uint64_t start_ns, deadline_ns;
  uint64_t kill_ns; /* 0: not killed */
  int holder;
} hpl__bf_watcher;
void *hpl__bf_watch_main(void *arg);

/* At `kill_frac` of `nofault` seconds after `start`, apply fault `kind`
 * to victims[0..nkill) (-2: the middle of the chain of `id`, written back),
 * for `cut_s` seconds where it has a duration. Sets oc->fault_at and oc->fault_done; exits on a failed
 * command. */
void hpl__bf_inject(hpl__bf_cfg *g, int op, const char *id, int kind, int nkill, int *victims,
                    double kill_frac, double nofault, uint64_t start, double cut_s,
                    hpl__bf_outcome *oc);

/* ---- standby directories (bench_faults_ha.c) */

/* --faults dirhost: start etcd and two standby directories and point o at
 * them (o->dir_list; o->work_dir, made into work[0..wlen) when not given).
 * 0, or 1 after printing why. */
int hpl__bf_ha_start(hpl__bf_cfg *g, hpl__lc_opts *o, char *work, size_t wlen);
/* dirhost, once the survivors are done: wait for a leader on another host
 * than `host`, then heal host's cut (a failover missing: oc->other++). */
void hpl__bf_heal_dirhost(hpl__bf_cfg *g, int host, hpl__bf_outcome *oc, uint64_t start);
/* After a fault of the leading standby directory: who leads, restart an
 * exited directory, check that `id` is known with a complete copy. */
void hpl__bf_ha_after(hpl__bf_cfg *g, hpl__bf_outcome *oc, int op, const char *id);

/* ---- the runs (bench_faults_runs.c) and their report (bench_faults_report.c) */

/* --scenario: three runs of it; nonzero if any went wrong. */
int hpl__bf_scenario(hpl__bf_cfg *g);
/* The random runs and their summary; nonzero if any went wrong. */
int hpl__bf_random_runs(hpl__bf_cfg *g);

/* One random run, kept for the summaries. */
typedef struct hpl__bf_runrec {
  int kf, k;             /* fault kind index, size index */
  int op;                /* 0 bcast, 1 reduce */
  double secs, nf, ratio;
  double frac;           /* the fault's moment, as a fraction of the no-fault time */
  double acted;          /* when the fault had acted (outcome.fault_done, never before the
                            drawn moment), as a fraction of the no-fault time */
} hpl__bf_runrec;

/* What the random runs add up (hpl__bf_random_runs fills it). */
typedef struct hpl__bf_tally {
  int runs, done, hang, wrong, lost, other, unlisted, runs_ok;
  double *ratio;            /* [g->runs] */
  hpl__bf_runrec *rec;      /* [g->runs] */
  double *kratio[HPL__BF_NFK]; /* per kind: [g->runs], kn[] of them used */
  int kn[HPL__BF_NFK];
} hpl__bf_tally;

/* Print random run `run`'s line (and its --out line). */
void hpl__bf_report_run(const hpl__bf_cfg *g, int run, int op, int k, int kind, int nkill,
                        const int *victims, double frac, double cut_s, double nofault,
                        uint64_t old_term, uint64_t caught, const hpl__bf_outcome *oc, int ok,
                        double ratio);
/* Print the summary of the random runs (and its --out lines), the leak
 * check included; sorts t's arrays. */
void hpl__bf_report_summary(const hpl__bf_cfg *g, hpl__bf_tally *t);

#endif
