/* bench_coll.c - hoplite collectives on a cluster of real processes, on
 * loopback or on the emulated hosts of bench/cluster.sh.
 *
 *   bench_coll --op bcast|reduce|allreduce|allreduce-rs|shuffle
 *              [--sizes 1K,1M,64M] [--hosts N] [--reps R]
 *              [--netns PREFIX --addrs A0,A1,...] [--rate 1gbit|none]
 *              [--memory BYTES] [--store-args "..."] [--dir-args "..."]
 *              [--impl NAME] [--no-header] [--out FILE] [--extra-out FILE]
 *              [--procs] [--put-timed] [--pace] [--server-nice N] [--store-arg WORD]
 *
 * Timing, as bench/README-bench.md: the driver picks a start time a few ms
 * ahead on CLOCK_MONOTONIC (one clock for every namespace), every
 * participant sleeps until it (clock_nanosleep, absolute), runs its part,
 * and reads the clock when done; a sample is the latest finish minus the
 * start. The driver (this process's main thread) stays out of the timed
 * part unless it puts: it does not wake at the start, reads /proc/stat
 * before it, and is woken only by the last participant to finish. Bytes
 * are verified at every participant in every repetition, after the timed
 * part. One warm-up repetition is not counted.
 *
 * bcast: node 0 holds a sealed object; nodes 1..N-1 get it concurrently.
 * The object is deleted between repetitions so each one broadcasts again.
 * With --put-timed the put is part of the sample: the receivers ask for the
 * object 5 ms before the start (their gets wait for it), node 0's client
 * puts it at the start.
 *
 * Participants are threads of this process by default. With --procs each
 * node's participant is a process of its own (this program re-run as
 * `bench_coll --worker I --socket PATH [--netns PREFIX]`, inside host I's
 * namespace, driven through a pipe), as task workers are: a thread of one
 * process shares that process's wake-ups and connections, which hides what
 * a separate process pays. The put (node 0) stays in this process, itself
 * a separate process from every receiver, whose main thread joins host 0's
 * namespace once the cluster and the workers are started.
 *
 * --store-arg WORD (repeatable) appends WORD to the stores' arguments, so a
 * mode given as one string of words (run_coll.sh --extra-mode) can add one,
 * e.g. --store-arg --integrity=fast.
 *
 * --pace tells every store its link's rate (--link-rate, the --rate given
 * here), so its streams leave paced (store/dataport.c); the impl name
 * gets "+paced".
 *
 * --server-nice N sets the nice value of every thread of the directory and
 * the stores once they are up (as a unit's Nice= would; below 0 needs
 * CAP_SYS_NICE): an experiment on who gets a CPU first when every
 * participant wakes at once on a machine with fewer CPUs than processes.
 *
 * reduce: every node holds a source (f32, small integers so any order sums
 * exactly); node 0 reduces them (sum) into a target and gets it.
 * allreduce: every node calls hpl_allreduce with the same arguments.
 * allreduce-rs (an experiment towards a reduce-scatter + allgather
 * allreduce, built from the public API): node i range-reduces slice i of
 * the sources (hpl_reduce_range; it starts that reduce, so the slice is
 * produced at node i), gets all slices (hpl_get_many), and assembles them
 * into an object of its own (hpl_create, one copy, hpl_seal). The timed
 * part covers all of that, the copy included.
 * Sources stay across repetitions; targets are deleted between them.
 *
 * shuffle (issue 42; the participant's part is bench_shuffle.c): every node
 * puts one partition of SIZE bytes for every other node (hpl_put_many) and
 * gets the hosts-1 partitions addressed to it (hpl_get_many; gets wait for
 * partitions not put yet). Filling the partitions' bytes is an untimed job
 * before each repetition; the makers delete them after it. The ratio's
 * bound is (hosts-1) * SIZE / B, what each node receives.
 *
 * Output (stdout, and appended to --out): TSV rows
 *   op size hosts impl median_s min_s max_s ratio_to_bound cpu_pct
 * (cpu_pct: the machine's busy share while the timed parts ran, "-" when
 * they were too short for /proc/stat's 10 ms ticks; stderr also
 * gives it as CPU seconds per GiB that crossed a link)
 * where impl gets "+procs" and "+put" appended for those modes.
 * and, to --extra-out, per size: op size hosts impl source_bytes_sent copies
 * (bytes that left node 0's data port per repetition, in object copies).
 * With HPL_BENCH_TRACE set, every op prints every node's finish time
 * per repetition to stderr. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <dirent.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"
#include "benchstat.h"
#include "bench_shuffle.h"

#define MAXN 64

/* Put the calling thread into emulated host i's network namespace, where a
 * client on that host lives: its library may then reach the directory
 * directly (small objects). The store connection is a Unix socket path and
 * works from any namespace. */
static const char *host_prefix;
static void join_host(int i) {
  if (host_prefix && hpl__lc_enter_host(host_prefix, i) != 0)
    fprintf(stderr, "bench_coll: cannot enter host %d's namespace: %s\n", i, strerror(errno));
}

static void cpu_sample(uint64_t *busy, uint64_t *total) {
  FILE *f = fopen("/proc/stat", "r");
  unsigned long long v[10] = {0};
  *busy = *total = 0;
  if (!f) return;
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
             &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]) >= 8) {
    for (int i = 0; i < 8; i++) *total += v[i];
    *busy = *total - v[3] - v[4];
  }
  fclose(f);
}

/* bytes per second of a tc rate; 0 for "none" or a bad rate */
static double parse_rate(const char *s) {
  uint64_t bps = 0;
  return hpl__parse_rate(s, &bps) ? 0 : (double)bps / 8;
}

static void die(const char *msg) {
  fprintf(stderr, "bench_coll: %s\n", msg);
  exit(1);
}

typedef struct cfg {
  const char *op, *impl, *netns, *rate, *store_args, *dir_args;
  const char *addrs[MAXN];
  uint64_t sizes[32];
  int nsizes, hosts, reps, header;
  int procs, put_timed; /* --procs, --put-timed */
  int nice, set_nice;   /* --server-nice: the servers' nice value */
  int pace;             /* --pace: the stores get --link-rate <rate> */
  uint64_t memory;
  FILE *out, *extra;
  struct worker *w;     /* --procs: one per node */
  struct pgate *pg;     /* --procs: the workers' shared count of running jobs */
  int pgfd;             /* --procs: its memfd (close-on-exec; fd 3 in the workers) */
  uint64_t cpu_busy, cpu_total; /* /proc/stat ticks within the timed parts */
  uint64_t store_cpu_us;        /* the stores' own CPU (their cpu_us counters) over them */
} cfg;

static void emit(cfg *g, const char *line) {
  fputs(line, stdout);
  fflush(stdout);
  if (g->out) {
    fputs(line, g->out);
    fflush(g->out);
  }
}


/* ---- one participant's part of a repetition
 *
 * A job runs in a thread of this process or, with --procs, in a worker
 * process (its command and results go through pipes as fixed-size structs;
 * the worker is this program, so both ends agree on the layout). */

enum { JOB_QUIT = 0, JOB_GET = 1, JOB_REDUCE = 2, JOB_ALLREDUCE = 3, JOB_ALLREDUCE_RS = 4,
       JOB_SHUFFLE_PREP = 5, JOB_SHUFFLE = 6 }; /* shuffle: bench_shuffle.h */

typedef struct job {
  int kind;
  int idx;           /* node */
  int hosts;         /* reduce: sources are bench/OP/src/SIZE/0..hosts-1 */
  int rep;           /* shuffle: the repetition */
  char id[64];       /* JOB_GET: the object; reduce: the target */
  char op[16];
  uint64_t size;
  uint64_t sum;      /* JOB_GET: checksum of the expected bytes */
  uint64_t start_ns; /* when to start (CLOCK_MONOTONIC) */
} job;

typedef struct jres {
  int rc;
  int bad;
  uint64_t end_ns;
  char err[240];
} jres;

/* Slice i of n of `size` bytes of f32: its offset and length. */
static void rs_slice(uint64_t size, int n, int i, uint64_t *off, uint64_t *len) {
  uint64_t per = size / 4 / (uint64_t)n * 4;
  *off = per * (uint64_t)i;
  *len = i == n - 1 ? size - *off : per;
}

/* allreduce-rs (see the top): *b is this node's assembled copy. */
static int allreduce_rs(hpl_client *c, const job *j, const char *const *srcs, hpl_buf **b) {
  int n = j->hosts, rc;
  uint64_t off, len;
  char sids[MAXN][96], aid[96];
  const char *sp[MAXN];
  for (int i = 0; i < n; i++) {
    snprintf(sids[i], sizeof sids[i], "%s/s%d", j->id, i);
    sp[i] = sids[i];
  }
  rs_slice(j->size, n, j->idx, &off, &len);
  rc = hpl_reduce_range(c, sp[j->idx], srcs, (size_t)n, 0, HPL_OP_SUM, HPL_DT_F32, off, len,
                        300000);
  if (rc) return rc;
  hpl_buf *parts[MAXN];
  int rcs[MAXN];
  rc = hpl_get_many(c, sp, (size_t)n, 300000, parts, rcs);
  if (rc) {
    for (int i = 0; i < n; i++)
      if (rcs[i] == 0) hpl_release(c, parts[i]);
    return rc;
  }
  hpl_buf *w = NULL;
  snprintf(aid, sizeof aid, "%s/a%d", j->id, j->idx);
  rc = hpl_create(c, aid, j->size, 300000, &w);
  for (int i = 0; i < n; i++) {
    if (rc == 0) {
      rs_slice(j->size, n, i, &off, &len);
      if (hpl_buf_size(parts[i]) == len)
        memcpy((uint8_t *)hpl_buf_data(w) + off, hpl_buf_data(parts[i]), len);
      else
        rc = HPL_EMISMATCH;
    }
    hpl_release(c, parts[i]);
  }
  if (rc) {
    if (w) hpl_abort(c, w);
    return rc;
  }
  if ((rc = hpl_seal(c, w, 300000))) return rc;
  return hpl_get(c, aid, 300000, b);
}

/* The timed part: *b holds the result on success. */
static int job_timed(hpl_client *c, const job *j, hpl_buf **b, uint64_t *end_ns) {
  int rc;
  if (j->kind == JOB_SHUFFLE_PREP) { /* untimed: start_ns is 0 */
    rc = hpl__bsh_prepare(j->idx, j->hosts, j->rep, j->size);
    *end_ns = hpl__now_ns();
    return rc;
  }
  hpl__sleep_until_ns(j->start_ns);
  if (j->kind == JOB_SHUFFLE) {
    rc = hpl__bsh_run(c, j->idx, 300000);
  } else if (j->kind == JOB_GET) {
    rc = hpl_get(c, j->id, 300000, b);
  } else {
    char ids[MAXN][64];
    const char *srcs[MAXN];
    for (int i = 0; i < j->hosts; i++) {
      snprintf(ids[i], sizeof ids[i], "bench/%s/src/%llu/%d", j->op, (unsigned long long)j->size, i);
      srcs[i] = ids[i];
    }
    if (j->kind == JOB_ALLREDUCE_RS) {
      rc = allreduce_rs(c, j, srcs, b);
    } else if (j->kind == JOB_ALLREDUCE) {
      rc = hpl_allreduce(c, j->id, srcs, (size_t)j->hosts, 0, HPL_OP_SUM, HPL_DT_F32, 300000, b);
    } else {
      rc = hpl_reduce(c, j->id, srcs, (size_t)j->hosts, 0, HPL_OP_SUM, HPL_DT_F32, 300000);
      if (rc == 0) rc = hpl_get(c, j->id, 300000, b);
    }
  }
  *end_ns = hpl__now_ns();
  return rc;
}

/* Source i of a reduce holds i + (k % 7) at element k (small integers: any
 * order of summing is exact), so the sum at k is hosts * (k % 7) +
 * hosts * (hosts - 1) / 2. */
static float reduce_elem(int i, size_t k) { return (float)(i + (int)(k % 7)); }

/* 1 if the result of a job's timed part is wrong. */
static int job_bad(hpl_client *c, const job *j, hpl_buf *b) {
  if (j->kind == JOB_SHUFFLE_PREP) return 0;
  if (j->kind == JOB_SHUFFLE) return hpl__bsh_check(c, j->idx) != 0;
  if (hpl_buf_size(b) != j->size) return 1;
  if (j->kind == JOB_GET) return hpl__checksum(hpl_buf_data(b), j->size) != j->sum;
  const float *v = hpl_buf_data(b);
  float base = (float)(j->hosts * (j->hosts - 1) / 2);
  for (size_t k = 0; k < j->size / 4; k++)
    if (v[k] != (float)j->hosts * (float)(k % 7) + base) return 1;
  return 0;
}

/* Threads' meeting point after their timed parts: they check their bytes
 * only once the driver has read the clock and the CPU counters. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, done, open;
} gate;

/* A participant as a thread. */
typedef struct part {
  pthread_t th;
  gate *gt;
  hpl_client *c;
  job j;
  jres r;
} part;

static void *part_thread(void *arg) {
  part *p = arg;
  hpl_buf *b = NULL;
  join_host(p->j.idx);
  p->r.rc = job_timed(p->c, &p->j, &b, &p->r.end_ns);
  /* verify only once everyone is done: checking early would take CPU from
   * participants still in the pipeline */
  pthread_mutex_lock(&p->gt->mu);
  if (++p->gt->done == p->gt->n) /* the last one wakes the driver: nobody */
    pthread_cond_broadcast(&p->gt->cv); /* else takes a CPU while others run */
  while (!p->gt->open) pthread_cond_wait(&p->gt->cv, &p->gt->mu);
  pthread_mutex_unlock(&p->gt->mu);
  if (p->r.rc) {
    snprintf(p->r.err, sizeof p->r.err, "%s", hpl_errdetail(p->c));
    return NULL;
  }
  p->r.bad = job_bad(p->c, &p->j, b);
  hpl_release(p->c, b);
  return NULL;
}

/* A participant as a process (--procs). */
struct worker {
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
struct pgate {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  int pending;
};

static void pgate_lock(struct pgate *pg) {
  if (pthread_mutex_lock(&pg->mu) == EOWNERDEAD) pthread_mutex_consistent(&pg->mu);
}

/* A worker: its job is done (its result already in its pipe). */
static void pgate_done(struct pgate *pg) {
  pgate_lock(pg);
  if (--pg->pending == 0) pthread_cond_signal(&pg->cv);
  pthread_mutex_unlock(&pg->mu);
}

static struct pgate *pgate_new(int *fdp) {
  int fd = memfd_create("bench_coll-gate", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, sizeof(struct pgate)) != 0) die("cannot make the workers' gate");
  struct pgate *pg = mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (pg == MAP_FAILED) die("cannot map the workers' gate");
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&pg->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&pg->cv, &ca);
  pthread_condattr_destroy(&ca);
  *fdp = fd; /* the workers get it as their fd 3 (start_workers) */
  return pg;
}

/* The driver: sleep until every launched job is done. A worker that exits
 * meanwhile (checked once a second) is fatal, as a closed pipe is. */
static void pgate_wait(cfg *g) {
  struct pgate *pg = g->pg;
  pgate_lock(pg);
  while (pg->pending > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += 1;
    int rc = pthread_cond_timedwait(&pg->cv, &pg->mu, &ts);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&pg->mu);
    if (rc != ETIMEDOUT) continue;
    for (int i = 0; i < g->hosts; i++)
      if (waitpid(g->w[i].pid, NULL, WNOHANG) != 0) die("a worker is gone");
  }
  pthread_mutex_unlock(&pg->mu);
}

static int full_write(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

static int full_read(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    ssize_t k = read(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

/* The worker's side: run jobs from stdin until JOB_QUIT or EOF. For each:
 * the timed part, its jres (end time, rc) on stdout, then, once the driver
 * says every participant is done (one byte), the check (an int). */
static int worker_main(int idx, const char *sock) {
  struct pgate *pg = mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0);
  if (pg == MAP_FAILED) die("a worker cannot map the driver's gate (fd 3)");
  close(3);
  join_host(idx);
  hpl_client *c;
  if (hpl_connect(sock, 10000, &c)) {
    fprintf(stderr, "bench_coll: worker %d cannot connect to %s\n", idx, sock);
    return 1;
  }
  job j;
  while (full_read(0, &j, sizeof j) == 0 && j.kind != JOB_QUIT) {
    jres r = {0};
    hpl_buf *b = NULL;
    r.rc = job_timed(c, &j, &b, &r.end_ns);
    if (r.rc) snprintf(r.err, sizeof r.err, "%s", hpl_errdetail(c));
    char go;
    if (full_write(1, &r, sizeof r)) break;
    pgate_done(pg);
    if (full_read(0, &go, 1)) break;
    int bad = 0;
    if (r.rc == 0) {
      bad = job_bad(c, &j, b);
      hpl_release(c, b);
    }
    if (full_write(1, &bad, sizeof bad)) break;
  }
  hpl__bsh_free(idx);
  hpl_close(c);
  return 0;
}

static void start_workers(cfg *g, hpl__lc *lc) {
  extern char **environ;
  g->pg = pgate_new(&g->pgfd);
  for (int i = 0; i < g->hosts; i++) {
    int in[2], out[2];
    if (pipe(in) || pipe(out)) die("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    /* last, as one of the closed ends may be fd 3; dup2 onto itself
     * clears close-on-exec too */
    posix_spawn_file_actions_adddup2(&fa, g->pgfd, 3);
    char idx[16];
    snprintf(idx, sizeof idx, "%d", i);
    char *argv[] = {"bench_coll", "--worker", idx, "--socket", (char *)hpl__lc_socket(lc, i),
                    g->netns ? "--netns" : NULL, (char *)g->netns, NULL};
    if (posix_spawn(&g->w[i].pid, "/proc/self/exe", &fa, NULL, argv, environ))
      die("cannot start a worker process");
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    g->w[i].wfd = in[1];
    g->w[i].rfd = out[0];
  }
}

static void stop_workers(cfg *g) {
  for (int i = 0; i < g->hosts; i++) {
    job q = {.kind = JOB_QUIT};
    full_write(g->w[i].wfd, &q, sizeof q);
    close(g->w[i].wfd);
    close(g->w[i].rfd);
    waitpid(g->w[i].pid, NULL, 0);
  }
  munmap(g->pg, sizeof *g->pg);
  close(g->pgfd);
}

/* Start jobs ps[0..n) (threads, or commands to their nodes' workers). */
static void launch(cfg *g, part *ps, int n, gate *gt) {
  if (!g->procs) {
    *gt = (gate){.n = n};
    pthread_mutex_init(&gt->mu, NULL);
    pthread_cond_init(&gt->cv, NULL);
    for (int i = 0; i < n; i++) {
      ps[i].gt = gt;
      pthread_create(&ps[i].th, NULL, part_thread, &ps[i]);
    }
    return;
  }
  pgate_lock(g->pg);
  g->pg->pending = n;
  pthread_mutex_unlock(&g->pg->mu);
  for (int i = 0; i < n; i++)
    if (full_write(g->w[ps[i].j.idx].wfd, &ps[i].j, sizeof ps[i].j)) die("a worker is gone");
}

/* Wait for them; returns the latest end time (at least `start`), or 0 if
 * any failed or got wrong bytes (reported on stderr). The CPU the machine
 * spent from the start until the last participant was done is added to
 * g->cpu_busy and g->cpu_total; b0 and t0 were read from /proc/stat at
 * `pre`, before the sleep to the start. */
static uint64_t collect(cfg *g, part *ps, int n, gate *gt, uint64_t start, uint64_t pre,
                        uint64_t b0, uint64_t t0) {
  uint64_t b1, t1, post;
  if (!g->procs) {
    pthread_mutex_lock(&gt->mu);
    while (gt->done < gt->n) pthread_cond_wait(&gt->cv, &gt->mu);
    cpu_sample(&b1, &t1);
    post = hpl__now_ns();
    gt->open = 1;
    pthread_cond_broadcast(&gt->cv);
    pthread_mutex_unlock(&gt->mu);
    for (int i = 0; i < n; i++) pthread_join(ps[i].th, NULL);
    pthread_cond_destroy(&gt->cv);
    pthread_mutex_destroy(&gt->mu);
  } else {
    pgate_wait(g); /* every result is in its pipe now */
    cpu_sample(&b1, &t1);
    post = hpl__now_ns();
    for (int i = 0; i < n; i++)
      if (full_read(g->w[ps[i].j.idx].rfd, &ps[i].r, sizeof ps[i].r)) die("a worker is gone");
    for (int i = 0; i < n; i++) /* everyone is done: check */
      if (full_write(g->w[ps[i].j.idx].wfd, "c", 1)) die("a worker is gone");
    for (int i = 0; i < n; i++)
      if (full_read(g->w[ps[i].j.idx].rfd, &ps[i].r.bad, sizeof ps[i].r.bad)) die("a worker is gone");
  }
  /* b0 and t0 were read at `pre`, before the sleep to the start (reading
   * /proc/stat at the start would take a CPU from the participants just
   * woken): the idle lead is scaled out of the total */
  g->cpu_busy += b1 - b0;
  uint64_t total = t1 - t0;
  if (post > start && post > pre)
    total = (uint64_t)((double)total * (double)(post - start) / (double)(post - pre));
  g->cpu_total += total > b1 - b0 ? total : b1 - b0; /* ticks are 10 ms: never above 100 % */
  uint64_t last = start;
  int failed = 0;
  for (int i = 0; i < n; i++) {
    if (ps[i].r.rc || ps[i].r.bad) {
      fprintf(stderr, "bench_coll: node %d: %s %s\n", ps[i].j.idx,
              ps[i].r.rc ? hpl_strerror(ps[i].r.rc) : "WRONG BYTES", ps[i].r.err);
      failed = 1;
    }
    if (ps[i].r.end_ns > last) last = ps[i].r.end_ns;
  }
  return failed ? 0 : last;
}

/* ---- reduce / allreduce */

static void reduce_sources(cfg *g, hpl_client **cs, uint64_t size) {
  size_t n = size / 4;
  float *d = malloc(size ? size : 1);
  if (!d) die("out of memory");
  for (int i = 0; i < g->hosts; i++) {
    char id[64];
    snprintf(id, sizeof id, "bench/%s/src/%llu/%d", g->op, (unsigned long long)size, i);
    for (size_t k = 0; k < n; k++) d[k] = reduce_elem(i, k);
    int rc = hpl_put(cs[i], id, d, size, 300000);
    if (rc) {
      fprintf(stderr, "bench_coll: put source: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[i]));
      exit(1);
    }
  }
  free(d);
}

static void drop_sources(cfg *g, hpl_client **cs, uint64_t size) {
  for (int i = 0; i < g->hosts; i++) {
    char id[64];
    snprintf(id, sizeof id, "bench/%s/src/%llu/%d", g->op, (unsigned long long)size, i);
    hpl_delete(cs[i], id, 30000);
  }
}

/* The CPU time all the stores have used so far (us): unlike /proc/stat, not
 * swayed by whatever else runs on the machine. */
static uint64_t stores_cpu_us(const cfg *g, hpl_client **cs) {
  uint64_t sum = 0, v;
  for (int i = 0; i < g->hosts; i++)
    if (hpl_counter(cs[i], "cpu_us", 5000, &v) == 0) sum += v;
  return sum;
}

/* With HPL_BENCH_TRACE set: every participant's finish (ms after the start). */
static void trace_ends(int rep, const part *ps, int n, uint64_t start) {
  if (!getenv("HPL_BENCH_TRACE")) return;
  fprintf(stderr, "bench_coll: rep %d ends (ms):", rep);
  for (int i = 0; i < n; i++)
    fprintf(stderr, " %d:%.2f", ps[i].j.idx, (double)(ps[i].r.end_ns - start) / 1e6);
  fprintf(stderr, "\n");
}

/* The timed part of a repetition in which this thread has no part: the
 * participants ps[0..n) run from `start` on (this thread does not wake
 * then: it would take a CPU from them), the stores' CPU is counted. The
 * latest finish (0: one failed). */
static uint64_t run_timed(cfg *g, hpl_client **cs, part *ps, int n, uint64_t start, int rep) {
  gate done;
  uint64_t b0, t0, scpu0 = stores_cpu_us(g, cs);
  launch(g, ps, n, &done);
  cpu_sample(&b0, &t0);
  uint64_t pre = hpl__now_ns();
  uint64_t last = collect(g, ps, n, &done, start, pre, b0, t0);
  g->store_cpu_us += stores_cpu_us(g, cs) - scpu0;
  trace_ends(rep, ps, n, start);
  return last;
}

static double reduce_once(cfg *g, hpl_client **cs, uint64_t size, int rep) {
  int rs = !strcmp(g->op, "allreduce-rs");
  int all = rs || !strcmp(g->op, "allreduce");
  int np = all ? g->hosts : 1;
  part ps[MAXN];
  uint64_t start = hpl__now_ns() + 20 * 1000000ull;
  for (int i = 0; i < np; i++) {
    ps[i] = (part){.c = cs[i],
                   .j = {.kind = rs ? JOB_ALLREDUCE_RS : all ? JOB_ALLREDUCE : JOB_REDUCE,
                         .idx = i, .hosts = g->hosts,
                         .size = size, .start_ns = start}};
    snprintf(ps[i].j.id, sizeof ps[i].j.id, "bench/%s/t/%llu/%d", g->op, (unsigned long long)size, rep);
    snprintf(ps[i].j.op, sizeof ps[i].j.op, "%s", g->op);
  }
  uint64_t last = run_timed(g, cs, ps, np, start, rep);
  int rc = 0;
  if (rs) { /* the slices and every node's assembled copy */
    for (int i = 0; i < np; i++) {
      char id[128];
      snprintf(id, sizeof id, "%s/s%d", ps[0].j.id, i);
      rc |= hpl_delete(cs[i], id, 30000);
      snprintf(id, sizeof id, "%s/a%d", ps[0].j.id, i);
      rc |= hpl_delete(cs[i], id, 30000);
    }
  } else {
    rc = hpl_delete(cs[0], ps[0].j.id, 30000);
  }
  if (rc) fprintf(stderr, "bench_coll: delete: %s\n", hpl_strerror(rc));
  return last ? (double)(last - start) / 1e9 : -1;
}

/* One broadcast of `size` bytes. Returns the sample in seconds, <0 on error. */
static double bcast_once(cfg *g, hpl_client **cs, uint64_t size, int rep, uint64_t *src_bytes,
                         const uint8_t *data, uint64_t sum) {
  char id[64];
  snprintf(id, sizeof id, "bench/bcast/%llu/%d", (unsigned long long)size, rep);
  uint64_t sent0 = 0, sent1 = 0;
  int rc;
  if (!g->put_timed) {
    rc = hpl_put(cs[0], id, data, size, 300000);
    if (rc) {
      fprintf(stderr, "bench_coll: put: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[0]));
      return -1;
    }
  }
  hpl_counter(cs[0], "data_bytes_sent", 5000, &sent0);
  uint64_t scpu0 = stores_cpu_us(g, cs);
  part ps[MAXN];
  gate done;
  uint64_t start = hpl__now_ns() + 20 * 1000000ull, b0, t0;
  /* --put-timed: the receivers are already waiting when the put starts */
  uint64_t ask = g->put_timed ? start - 5 * 1000000ull : start;
  for (int i = 1; i < g->hosts; i++) {
    ps[i - 1] = (part){.c = cs[i], .j = {.kind = JOB_GET, .idx = i, .size = size, .sum = sum,
                                         .start_ns = ask}};
    snprintf(ps[i - 1].j.id, sizeof ps[i - 1].j.id, "%s", id);
  }
  launch(g, ps, g->hosts - 1, &done);
  cpu_sample(&b0, &t0);
  uint64_t pre = hpl__now_ns();
  if (g->put_timed) { /* else this thread has no part and sleeps through the start */
    hpl__sleep_until_ns(start);
    rc = hpl_put(cs[0], id, data, size, 300000);
    if (rc) fprintf(stderr, "bench_coll: put: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[0]));
  }
  uint64_t last = collect(g, ps, g->hosts - 1, &done, start, pre, b0, t0);
  g->store_cpu_us += stores_cpu_us(g, cs) - scpu0;
  trace_ends(rep, ps, g->hosts - 1, start);
  hpl_counter(cs[0], "data_bytes_sent", 5000, &sent1);
  *src_bytes = sent1 - sent0;
  rc = hpl_delete(cs[0], id, 30000);
  if (rc) fprintf(stderr, "bench_coll: delete: %s\n", hpl_strerror(rc));
  return last ? (double)(last - start) / 1e9 : -1;
}

/* One shuffle of partitions of `size` bytes (bench_shuffle.h): every node
 * first fills its partitions (untimed, a job of its own), then at the start
 * puts them and gets its own. The makers delete them afterwards. Returns
 * the sample in seconds, <0 on error. */
static double shuffle_once(cfg *g, hpl_client **cs, uint64_t size, int rep) {
  part ps[MAXN];
  gate done;
  int n = g->hosts;
  for (int i = 0; i < n; i++)
    ps[i] = (part){.c = cs[i], .j = {.kind = JOB_SHUFFLE_PREP, .idx = i, .hosts = n,
                                     .rep = rep, .size = size}};
  /* the fill is not timed: its CPU is not counted either */
  uint64_t busy = g->cpu_busy, total = g->cpu_total;
  launch(g, ps, n, &done);
  int ok = collect(g, ps, n, &done, 0, 0, 0, 0) != 0;
  g->cpu_busy = busy;
  g->cpu_total = total;
  if (!ok) return -1;
  uint64_t start = hpl__now_ns() + 20 * 1000000ull;
  for (int i = 0; i < n; i++) {
    ps[i].j.kind = JOB_SHUFFLE;
    ps[i].j.start_ns = start;
    ps[i].r = (jres){0};
  }
  uint64_t last = run_timed(g, cs, ps, n, start, rep);
  for (int i = 0; i < n; i++) { /* every receiver has released its copies */
    int rc = hpl__bsh_drop(cs[i], i, n, rep);
    if (rc) fprintf(stderr, "bench_coll: delete node %d's partitions: %s (%s)\n", i,
                    hpl_strerror(rc), hpl_errdetail(cs[i]));
  }
  return last ? (double)(last - start) / 1e9 : -1;
}

/* --server-nice: every thread of process `pid` gets nice value `nice`
 * (setpriority(PRIO_PROCESS) moves one thread on Linux, and the servers
 * start their threads before we get here). 0 or -1. */
static int renice_all(pid_t pid, int nice) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  int rc = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (setpriority(PRIO_PROCESS, (id_t)atoi(e->d_name), nice)) rc = -1;
  }
  closedir(d);
  return rc;
}

static int run(cfg *g) {
  hpl__lc_opts o = {.nodes = g->hosts,
                   .memory = g->memory,
                   .netns_prefix = g->netns,
                   .host_addrs = g->netns ? g->addrs : NULL,
                   .store_args = g->store_args,
                   .dir_args = g->dir_args,
                   .log_level = getenv("HPL_BENCH_LOG_LEVEL") ? getenv("HPL_BENCH_LOG_LEVEL")
                                                              : "warn",
                   /* kept (with the servers' logs) when given */
                   .work_dir = getenv("HPL_BENCH_WORK_DIR"),
                   .timeout_ms = 20000};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_coll: cannot start the cluster: %s\n", err);
    return 1;
  }
  if (g->set_nice) {
    int bad = renice_all(hpl__lc_dir_pid(lc), g->nice);
    for (int i = 0; i < g->hosts; i++) bad |= renice_all(hpl__lc_store_pid(lc, i), g->nice);
    if (bad) fprintf(stderr, "bench_coll: --server-nice %d: %s\n", g->nice, strerror(errno));
  }
  hpl_client *cs[MAXN];
  for (int i = 0; i < g->hosts; i++)
    if (hpl_connect(hpl__lc_socket(lc, i), 10000, &cs[i])) die("cannot connect to a store");
  struct worker ws[MAXN];
  if (g->procs) {
    g->w = ws;
    start_workers(g, lc);
  }
  /* this thread is node 0's client (the put): it lives on host 0, as the
   * root of an MPI broadcast does, so its library reaches the directory
   * directly like any worker's there */
  join_host(0);
  char impl[96];
  snprintf(impl, sizeof impl, "%s%s%s%s", g->impl, g->procs ? "+procs" : "",
           g->put_timed ? "+put" : "", g->pace ? "+paced" : "");
  g->impl = impl;
  double B = parse_rate(g->rate);
  char line[512];
  if (g->header) emit(g, "op\tsize\thosts\timpl\tmedian_s\tmin_s\tmax_s\tratio_to_bound\tcpu_pct\n");
  int status = 0;
  for (int k = 0; k < g->nsizes; k++) {
    uint64_t size = g->sizes[k];
    int is_bcast = !strcmp(g->op, "bcast"), is_shuffle = !strcmp(g->op, "shuffle");
    uint8_t *data = NULL;
    uint64_t sum = 0;
    if (is_bcast) {
      data = malloc(size ? size : 1);
      if (!data) die("out of memory");
      hpl__fill_pattern(data, size, size ^ 0x5eed);
      sum = hpl__checksum(data, size);
    } else if (!is_shuffle) {
      reduce_sources(g, cs, size);
    }
    double v[256];
    uint64_t srcb = 0, srcb_total = 0;
    int n = 0, bad = 0;
    for (int r = -1; r < g->reps && r < 256; r++) {
      double s = is_bcast     ? bcast_once(g, cs, size, r, &srcb, data, sum)
                 : is_shuffle ? shuffle_once(g, cs, size, r)
                              : reduce_once(g, cs, size, r);
      if (s < 0) {
        bad = 1;
        break;
      }
      if (r >= 0) {
        v[n++] = s;
        srcb_total += srcb;
      } else {
        g->cpu_busy = g->cpu_total = g->store_cpu_us = 0; /* the warm-up does not count */
      }
    }
    free(data);
    if (!is_bcast && !is_shuffle) drop_sources(g, cs, size);
    /* CPU over the timed parts only (puts before the start, checks and
     * deletes after it are not counted); per GiB that reached a receiver */
    double cpu = g->cpu_total ? 100.0 * (double)g->cpu_busy / (double)g->cpu_total : 0;
    /* /proc/stat counts 10 ms ticks: a share over less than 100 of them
     * (timed parts of under 0.5 s in all on 2 CPUs) says nothing */
    char cpu_txt[16] = "-";
    if (g->cpu_total >= 100) snprintf(cpu_txt, sizeof cpu_txt, "%.1f", cpu);
    double cpu_s = (double)g->cpu_busy / (double)sysconf(_SC_CLK_TCK);
    uint64_t store_us = g->store_cpu_us;
    g->store_cpu_us = 0;
    /* bytes that crossed a link per repetition: each receiver's copy (bcast),
     * each non-sink source once (reduce), twice for allreduce, every node's
     * partition for every other node (shuffle) */
    double moved = (double)size * (g->hosts - 1) *
                   (!strncmp(g->op, "allreduce", 9) ? 2 : is_shuffle ? g->hosts : 1) * n;
    g->cpu_busy = g->cpu_total = 0;
    if (bad || n == 0) {
      snprintf(line, sizeof line, "%s\t%llu\t%d\t%s\tFAIL\tFAIL\tFAIL\tNA\t%s\n", g->op,
               (unsigned long long)size, g->hosts, g->impl, cpu_txt);
      emit(g, line);
      status = 1;
      continue;
    }
    qsort(v, (size_t)n, sizeof *v, hpl__bench_cmp_double);
    double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    char ratio[32] = "NA";
    /* the bound: S/B, for a shuffle the (hosts-1) partitions each node receives */
    double bound = (double)size * (is_shuffle ? g->hosts - 1 : 1) / B;
    if (B > 0 && size > 0) snprintf(ratio, sizeof ratio, "%.3f", med / bound);
    snprintf(line, sizeof line, "%s\t%llu\t%d\t%s\t%.6f\t%.6f\t%.6f\t%s\t%s\n", g->op,
             (unsigned long long)size, g->hosts, g->impl, med, v[0], v[n - 1], ratio, cpu_txt);
    emit(g, line);
    double copies = size ? (double)srcb_total / n / (double)size : 0;
    fprintf(stderr,
            "bench_coll: %s %llu B to %d receivers%s: median %.6f s, node 0 sent %.2f copies, "
            "CPU %.3f s per GiB moved (%s%% of the machine while timed; the stores' own: "
            "%.3f s per GiB)\n",
            g->op, (unsigned long long)size, g->hosts - 1, is_shuffle ? " from every node" : "",
            med, copies,
            moved > 0 ? cpu_s / (moved / (1 << 30)) : 0, cpu_txt,
            moved > 0 ? (double)store_us / 1e6 / (moved / (1 << 30)) : 0);
    if (g->extra && is_bcast) {
      fprintf(g->extra, "%s\t%llu\t%d\t%s\t%llu\t%.3f\n", g->op, (unsigned long long)size,
              g->hosts, g->impl, (unsigned long long)(srcb_total / (uint64_t)n), copies);
      fflush(g->extra);
    }
  }
  if (g->procs) stop_workers(g);
  if (g->pace) { /* the stores did pace their streams */
    uint64_t paced = 0, failed = 0, v;
    for (int i = 0; i < g->hosts; i++) {
      if (hpl_counter(cs[i], "paced_conns", 5000, &v) == 0) paced += v;
      if (hpl_counter(cs[i], "pace_failures", 5000, &v) == 0) failed += v;
    }
    fprintf(stderr, "bench_coll: --pace: %llu data connections paced, %llu not\n",
            (unsigned long long)paced, (unsigned long long)failed);
    if (!paced || failed) status = 1;
  }
  for (int i = 0; i < g->hosts; i++) {
    hpl__bsh_free(i); /* a shuffle's partitions made by threads */
    hpl_close(cs[i]);
  }
  if (hpl__lc_check(lc, err, sizeof err)) {
    fprintf(stderr, "bench_coll: %s\n", err);
    status = 1;
  }
  hpl__lc_stop(lc);
  return status;
}

int main(int argc, char **argv) {
  cfg g = {.op = "bcast", .impl = "hoplite", .rate = "none", .hosts = 4, .reps = 5, .header = 1};
  const char *sizes = "1K,1M,64M", *addrs = NULL;
  static struct option opts[] = {
      {"op", 1, 0, 'o'},         {"sizes", 1, 0, 's'},     {"hosts", 1, 0, 'n'},
      {"reps", 1, 0, 'r'},       {"netns", 1, 0, 'N'},     {"addrs", 1, 0, 'a'},
      {"rate", 1, 0, 'R'},       {"memory", 1, 0, 'm'},    {"store-args", 1, 0, 'S'},
      {"dir-args", 1, 0, 'D'},   {"impl", 1, 0, 'i'},      {"no-header", 0, 0, 'H'},
      {"out", 1, 0, 'O'},        {"extra-out", 1, 0, 'E'}, {"procs", 0, 0, 'P'},
      {"put-timed", 0, 0, 'T'},  {"worker", 1, 0, 'W'},    {"socket", 1, 0, 'k'},
      {"server-nice", 1, 0, 'V'}, {"pace", 0, 0, 'p'},   {"store-arg", 1, 0, 'A'},
      {0, 0, 0, 0}};
  int worker = -1;
  char more[512] = ""; /* --store-arg: appended to --store-args, one word each */
  size_t nmore = 0;
  const char *sock = NULL;
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
      case 'o': g.op = optarg; break;
      case 's': sizes = optarg; break;
      case 'n': g.hosts = atoi(optarg); break;
      case 'r': g.reps = atoi(optarg); break;
      case 'N': g.netns = host_prefix = optarg; break;
      case 'a': addrs = optarg; break;
      case 'R': g.rate = optarg; break;
      case 'm':
        if (hpl__parse_size(optarg, &g.memory)) die("bad --memory");
        break;
      case 'S': g.store_args = optarg; break;
      case 'A': {
        int w = snprintf(more + nmore, sizeof more - nmore, " %s", optarg);
        if (w < 0 || (size_t)w >= sizeof more - nmore) die("--store-arg: too many");
        nmore += (size_t)w;
        break;
      }
      case 'D': g.dir_args = optarg; break;
      case 'i': g.impl = optarg; break;
      case 'H': g.header = 0; break;
      case 'P': g.procs = 1; break;
      case 'T': g.put_timed = 1; break;
      case 'p': g.pace = 1; break;
      case 'W': worker = atoi(optarg); break;
      case 'k': sock = optarg; break;
      case 'V':
        g.nice = atoi(optarg);
        g.set_nice = 1;
        break;
      case 'O':
        if (!(g.out = fopen(optarg, "a"))) die("cannot open --out");
        break;
      case 'E':
        if (!(g.extra = fopen(optarg, "a"))) die("cannot open --extra-out");
        break;
      default: die("see the comment at the top of bench/bench_coll.c for usage");
    }
  }
  if (worker >= 0) {
    if (!sock) die("--worker needs --socket");
    return worker_main(worker, sock);
  }
  if (g.put_timed && strcmp(g.op, "bcast")) die("--put-timed is for --op bcast");
  if (strcmp(g.op, "bcast") && strcmp(g.op, "reduce") && strcmp(g.op, "allreduce") &&
      strcmp(g.op, "allreduce-rs") && strcmp(g.op, "shuffle"))
    die("--op must be bcast, reduce, allreduce, allreduce-rs or shuffle");
  if (g.hosts < 2 || g.hosts > MAXN) die("--hosts must be 2..64");
  char store_args[1100];
  if (g.pace || nmore) {
    uint64_t bps;
    if (g.pace && hpl__parse_rate(g.rate, &bps)) die("--pace needs a --rate (the links' rate)");
    if (snprintf(store_args, sizeof store_args, "%s%s%s%s", g.store_args ? g.store_args : "",
                 more, g.pace ? " --link-rate " : "", g.pace ? g.rate : "") >=
        (int)sizeof store_args)
      die("--store-args too long");
    g.store_args = store_args + (store_args[0] == ' '); /* (no --store-args: no leading blank) */
  }
  if (g.reps < 1) g.reps = 1;
  char *sz = strdup(sizes);
  for (char *t = strtok(sz, ","); t && g.nsizes < 32; t = strtok(NULL, ","))
    if (hpl__parse_size(t, &g.sizes[g.nsizes++])) die("bad size in --sizes");
  uint64_t maxs = 0;
  for (int k = 0; k < g.nsizes; k++)
    if (g.sizes[k] > maxs) maxs = g.sizes[k];
  /* bcast: a copy and a spare; reduce: source, stream, target (and a
   * forwarded copy for allreduce); allreduce-rs: source, slice streams,
   * the slices, the assembled copy and room to spare; shuffle: the node's
   * hosts-1 partitions, the hosts-1 it gets, and two spare */
  if (!g.memory)
    g.memory = (!strcmp(g.op, "bcast")          ? 3
                : !strcmp(g.op, "allreduce-rs") ? 6
                : !strcmp(g.op, "shuffle")      ? 2 * (uint64_t)g.hosts
                                                : 4) * maxs +
               (128ull << 20);
  if (g.netns) {
    if (!addrs) die("--netns needs --addrs");
    char *a = strdup(addrs);
    int n = 0;
    for (char *t = strtok(a, ","); t && n < MAXN; t = strtok(NULL, ",")) g.addrs[n++] = t;
    if (n < g.hosts) die("--addrs lists fewer hosts than --hosts");
  }
  return run(&g);
}
