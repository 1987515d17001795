/*
 * bench_coll.h - what the files of the bench_coll program share (the
 * program's usage and output are described at the top of bench_coll.c):
 *   bench_coll.c         options, main and the driver (cluster, sizes)
 *   bench_coll_job.c     one participant's part of a repetition (a job)
 *   bench_coll_procs.c   where jobs run (threads, or worker processes with
 *                        --procs): starting them and collecting results
 *   bench_coll_reps.c    one repetition of each op, and the reduce sources
 *   bench_coll_report.c  the CPU counted and the output lines
 * bench_shuffle.c is the shuffle participant's part (bench_shuffle.h).
 * Not a library: a failure that leaves the benchmark meaningless exits the
 * program (hpl__bc_die), as the single file did.
 */
#ifndef HPL_BENCH_COLL_H
#define HPL_BENCH_COLL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "hoplite.h"
#include "localcluster.h"

#define HPL__BC_MAXN 64

/* ---- options (bench_coll.c) */

typedef struct hpl__bc_cfg {
  const char *op, *impl, *netns, *rate, *store_args, *dir_args;
  const char *addrs[HPL__BC_MAXN];
  uint64_t sizes[32];
  int nsizes, hosts, reps, header;
  int procs, put_timed; /* --procs, --put-timed */
  int nice, set_nice;   /* --server-nice: the servers' nice value */
  int pace;             /* --pace: the stores get --link-rate <rate> */
  int pin;              /* --pin: worker i runs on CPU i mod the CPUs (with --procs) */
  int overlap;          /* --overlap: shuffle gets submitted before the puts */
  int noprio;           /* --no-control-prio: HOPLITE_CONTROL_PRIO=0 for the run */
  int dir_host;         /* --dir-host: the emulated host the directory runs on (0; from
                           --hosts on: a host with no store, impl "+dirhost") */
  uint64_t memory;
  FILE *out, *extra;
  struct hpl__bc_worker *w;     /* --procs: one per node */
  struct hpl__bc_pgate *pg;     /* --procs: the workers' shared count of running jobs */
  int pgfd;             /* --procs: its memfd (close-on-exec; fd 3 in the workers) */
  uint64_t cpu_busy, cpu_total; /* /proc/stat ticks within the timed parts */
  uint64_t store_cpu_us;        /* the stores' own CPU (their cpu_us counters) over them */
} hpl__bc_cfg;

/* Print "bench_coll: msg" on stderr and exit(1). */
void hpl__bc_die(const char *msg);

/* ---- one participant's part of a repetition (bench_coll_job.c)
 *
 * A job runs in a thread of this process or, with --procs, in a worker
 * process (its command and results go through pipes as fixed-size structs;
 * the worker is this program, so both ends agree on the layout). */

enum { HPL__BC_JOB_QUIT = 0, HPL__BC_JOB_GET = 1, HPL__BC_JOB_REDUCE = 2, HPL__BC_JOB_ALLREDUCE = 3, HPL__BC_JOB_ALLREDUCE_RS = 4,
       HPL__BC_JOB_SHUFFLE_PREP = 5, HPL__BC_JOB_SHUFFLE = 6 }; /* shuffle: bench_shuffle.h */

typedef struct hpl__bc_job {
  int kind;
  int idx;           /* node */
  int hosts;         /* reduce: sources are bench/OP/src/SIZE/0..hosts-1 */
  int rep;           /* shuffle: the repetition */
  char id[64];       /* JOB_GET: the object; reduce: the target */
  char op[16];
  uint64_t size;
  uint64_t sum;      /* JOB_GET: checksum of the expected bytes */
  uint64_t start_ns; /* when to start (CLOCK_MONOTONIC) */
} hpl__bc_job;

typedef struct hpl__bc_jres {
  int rc;
  int bad;
  uint64_t end_ns;
  char err[240];
} hpl__bc_jres;

/* --netns: the emulated hosts' prefix (hpl__bc_join_host), or NULL */
extern const char *hpl__bc_host_prefix;
/* Put the calling thread into emulated host i's network namespace, where a
 * client on that host lives: its library may then reach the directory
 * directly (small objects). The store connection is a Unix socket path and
 * works from any namespace. */
void hpl__bc_join_host(int i);

/* The timed part of job j through client c: *b holds the result on
 * success (the caller releases it); returns 0 or an HPL_E* code. */
int hpl__bc_job_timed(hpl_client *c, const hpl__bc_job *j, hpl_buf **b, uint64_t *end_ns);
/* 1 if the result b of j's timed part is wrong (checks every byte). */
int hpl__bc_job_bad(hpl_client *c, const hpl__bc_job *j, hpl_buf *b);
/* Element k of reduce source i (see bench_coll_job.c). */
float hpl__bc_reduce_elem(int i, size_t k);

/* Threads' meeting point after their timed parts: they check their bytes
 * only once the driver has read the clock and the CPU counters. */
typedef struct hpl__bc_gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, done, open;
} hpl__bc_gate;

/* A participant as a thread. */
typedef struct hpl__bc_part {
  pthread_t th;
  hpl__bc_gate *gt;
  hpl_client *c;
  hpl__bc_job j;
  hpl__bc_jres r;
} hpl__bc_part;

/* A participant's thread (arg: its hpl__bc_part): the job's timed part,
 * then, once the gate opens, its check into p->r. */
void *hpl__bc_part_thread(void *arg);

/* ---- where jobs run (bench_coll_procs.c) */

/* A participant as a process (--procs). */
struct hpl__bc_worker {
  pid_t pid;
  int wfd, rfd; /* commands to it, results from it */
};

/* --procs: how many of the launched jobs are still running, in a shared
 * memfd every worker maps (its fd 3). A worker puts its result in its pipe
 * and then counts itself done; only the last one wakes the driver, so the
 * driver sleeps through the timed part instead of waking once per
 * participant while others still run (threads do the same with `gate`).
 * The mutex is robust: a worker killed while holding it cannot block the
 * driver. */
struct hpl__bc_pgate {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  int pending;
};

/* --procs: start one worker process per node (this program, --worker I)
 * connected to node I's store of lc; exits on failure. */
void hpl__bc_start_workers(hpl__bc_cfg *g, hpl__lc *lc);
/* --procs: tell every worker to quit and reap it. */
void hpl__bc_stop_workers(hpl__bc_cfg *g);
/* A worker process's main (--worker idx --socket sock); its exit status. */
int hpl__bc_worker_main(int idx, const char *sock);
/* Start jobs ps[0..n) (threads, or commands to their nodes' workers). */
void hpl__bc_launch(hpl__bc_cfg *g, hpl__bc_part *ps, int n, hpl__bc_gate *gt);
/* Wait for them: the latest end time, or 0 if any failed (see bench_coll_procs.c). */
uint64_t hpl__bc_collect(hpl__bc_cfg *g, hpl__bc_part *ps, int n, hpl__bc_gate *gt,
                         uint64_t start, uint64_t pre, uint64_t b0, uint64_t t0);

/* ---- one repetition (bench_coll_reps.c): the sample in seconds, < 0 on error */

/* Put node i's reduce source of `size` bytes (exits on failure); drop them. */
void hpl__bc_reduce_sources(hpl__bc_cfg *g, hpl_client **cs, uint64_t size);
void hpl__bc_drop_sources(hpl__bc_cfg *g, hpl_client **cs, uint64_t size);
double hpl__bc_reduce_once(hpl__bc_cfg *g, hpl_client **cs, uint64_t size, int rep);
/* *src_bytes: what left node 0's data port; data/sum: the object's bytes. */
double hpl__bc_bcast_once(hpl__bc_cfg *g, hpl_client **cs, uint64_t size, int rep,
                          uint64_t *src_bytes, const uint8_t *data, uint64_t sum);
double hpl__bc_shuffle_once(hpl__bc_cfg *g, hpl_client **cs, uint64_t size, int rep);

/* ---- the CPU counted and the output (bench_coll_report.c) */

/* The machine's busy and total ticks so far (/proc/stat; 0 if unknown). */
void hpl__bc_cpu_sample(uint64_t *busy, uint64_t *total);
/* Bytes per second of a tc rate; 0 for "none" or a bad rate. */
double hpl__bc_parse_rate(const char *s);
/* Print line on stdout and append it to --out. */
void hpl__bc_emit(hpl__bc_cfg *g, const char *line);
/* The output of one size: samples v[0..n) (sorted here), bad: a repetition
 * failed, srcb_total: node 0's data bytes over the n, B: the links' bytes
 * per second (0: none). Resets g's CPU counts. 1 if the size failed. */
int hpl__bc_report_size(hpl__bc_cfg *g, uint64_t size, double *v, int n, int bad,
                        uint64_t srcb_total, double B);

#endif
