/* bench_coll_procs.c - where bench_coll's jobs run: threads of this
 * process, or with --procs one worker process per node (this program
 * re-run with --worker, driven through pipes, meeting the driver at a
 * shared gate); starting a repetition's jobs and collecting their results
 * and the CPU the machine spent meanwhile. */
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"
#include "bench_shuffle.h"
#include "bench_coll.h"
#include "benchpin.h"
#include "benchstat.h"

static void pgate_lock(struct hpl__bc_pgate *pg) {
  if (pthread_mutex_lock(&pg->mu) == EOWNERDEAD) pthread_mutex_consistent(&pg->mu);
}

/* A worker: its job's timed part has returned (its result follows the
 * driver's word). */
static void pgate_done(struct hpl__bc_pgate *pg) {
  pgate_lock(pg);
  if (--pg->pending == 0) pthread_cond_signal(&pg->cv);
  pthread_mutex_unlock(&pg->mu);
}

static struct hpl__bc_pgate *pgate_new(int *fdp) {
  int fd = memfd_create("bench_coll-gate", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, sizeof(struct hpl__bc_pgate)) != 0) hpl__bc_die("cannot make the workers' gate");
  struct hpl__bc_pgate *pg = mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (pg == MAP_FAILED) hpl__bc_die("cannot map the workers' gate");
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
static void pgate_wait(hpl__bc_cfg *g) {
  struct hpl__bc_pgate *pg = g->pg;
  pgate_lock(pg);
  while (pg->pending > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += 1;
    int rc = pthread_cond_timedwait(&pg->cv, &pg->mu, &ts);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&pg->mu);
    if (rc != ETIMEDOUT) continue;
    for (int i = 0; i < g->hosts; i++)
      if (waitpid(g->w[i].pid, NULL, WNOHANG) != 0) hpl__bc_die("a worker is gone");
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
 * the timed part; then, once the driver says every participant is done
 * (one byte), its jres (end time, rc) on stdout and the check (an int). */
int hpl__bc_worker_main(int idx, const char *sock) {
  struct hpl__bc_pgate *pg = mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0);
  if (pg == MAP_FAILED) hpl__bc_die("a worker cannot map the driver's gate (fd 3)");
  close(3);
  hpl__bc_join_host(idx);
  hpl_client *c;
  if (hpl_connect(sock, 10000, &c)) {
    fprintf(stderr, "bench_coll: worker %d cannot connect to %s\n", idx, sock);
    return 1;
  }
  hpl__bc_job j;
  int trace = getenv("HPL_BENCH_TRACE") != NULL;
  hpl__bench_usage use = {0}, u0 = {0}; /* the timed parts' (HPL_BENCH_TRACE only) */
  uint64_t jobs = 0;
  while (full_read(0, &j, sizeof j) == 0 && j.kind != HPL__BC_JOB_QUIT) {
    hpl__bc_jres r = {0};
    hpl_buf *b = NULL;
    if (trace) u0 = hpl__bench_usage_now();
    r.rc = hpl__bc_job_timed(c, &j, &b, &r.end_ns);
    /* the fair rule: once its part returned, a worker makes no system call
     * but the wait until every participant is done (the gate takes none
     * unless it is the last), as an MPI rank only sleeps to its quiet end.
     * The result goes to the driver after that. */
    char go;
    pgate_done(pg);
    if (full_read(0, &go, 1)) break;
    if (trace) /* from the sleep to the start until now: the wait blocks, costing ~nothing */
      hpl__bench_usage_add(&use, u0, hpl__bench_usage_now());
    jobs++;
    if (r.rc) snprintf(r.err, sizeof r.err, "%s", hpl_errdetail(c));
    if (full_write(1, &r, sizeof r)) break;
    int bad = 0;
    if (r.rc == 0) {
      bad = hpl__bc_job_bad(c, &j, b);
      hpl_release(c, b);
    }
    if (full_write(1, &bad, sizeof bad)) break;
  }
  if (trace && jobs)
    fprintf(stderr,
            "bench_coll: worker %d: %llu jobs, each from its sleep to the word after its end: %.1f us of CPU "
            "(%.1f in user space), %.2f minor faults, %.2f + %.2f context switches (given up + "
            "taken)\n",
            idx, (unsigned long long)jobs, (double)use.cpu_ns / 1e3 / (double)jobs,
            (double)use.user_us / (double)jobs, (double)use.minflt / (double)jobs,
            (double)use.nvcsw / (double)jobs, (double)use.nivcsw / (double)jobs);
  hpl__bsh_free(idx);
  hpl_close(c);
  return 0;
}

void hpl__bc_start_workers(hpl__bc_cfg *g, hpl__lc *lc) {
  extern char **environ;
  g->pg = pgate_new(&g->pgfd);
  for (int i = 0; i < g->hosts; i++) {
    int in[2], out[2];
    if (pipe(in) || pipe(out)) hpl__bc_die("pipe failed");
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
      hpl__bc_die("cannot start a worker process");
    posix_spawn_file_actions_destroy(&fa);
    if (g->pin && hpl__bench_pin(g->w[i].pid, i)) /* as a launcher binds ranks */
      fprintf(stderr, "bench_coll: --pin: %s\n", strerror(errno));
    close(in[0]);
    close(out[1]);
    g->w[i].wfd = in[1];
    g->w[i].rfd = out[0];
  }
}

void hpl__bc_stop_workers(hpl__bc_cfg *g) {
  for (int i = 0; i < g->hosts; i++) {
    hpl__bc_job q = {.kind = HPL__BC_JOB_QUIT};
    full_write(g->w[i].wfd, &q, sizeof q);
    close(g->w[i].wfd);
    close(g->w[i].rfd);
    waitpid(g->w[i].pid, NULL, 0);
  }
  munmap(g->pg, sizeof *g->pg);
  close(g->pgfd);
}

/* Start jobs ps[0..n) (threads, or commands to their nodes' workers). */
void hpl__bc_launch(hpl__bc_cfg *g, hpl__bc_part *ps, int n, hpl__bc_gate *gt) {
  if (!g->procs) {
    *gt = (hpl__bc_gate){.n = n};
    pthread_mutex_init(&gt->mu, NULL);
    pthread_cond_init(&gt->cv, NULL);
    for (int i = 0; i < n; i++) {
      ps[i].gt = gt;
      pthread_create(&ps[i].th, NULL, hpl__bc_part_thread, &ps[i]);
    }
    return;
  }
  pgate_lock(g->pg);
  g->pg->pending = n;
  pthread_mutex_unlock(&g->pg->mu);
  for (int i = 0; i < n; i++)
    if (full_write(g->w[ps[i].j.idx].wfd, &ps[i].j, sizeof ps[i].j)) hpl__bc_die("a worker is gone");
}

/* Wait for them; returns the latest end time (at least `start`), or 0 if
 * any failed or got wrong bytes (reported on stderr). The CPU the machine
 * spent from the start until the last participant was done is added to
 * g->cpu_busy and g->cpu_total; b0 and t0 were read from /proc/stat at
 * `pre`, before the sleep to the start. */
uint64_t hpl__bc_collect(hpl__bc_cfg *g, hpl__bc_part *ps, int n, hpl__bc_gate *gt,
                         uint64_t start, uint64_t pre, uint64_t b0, uint64_t t0) {
  uint64_t b1, t1, post;
  if (!g->procs) {
    pthread_mutex_lock(&gt->mu);
    while (gt->done < gt->n) pthread_cond_wait(&gt->cv, &gt->mu);
    hpl__bc_cpu_sample(&b1, &t1);
    post = hpl__now_ns();
    gt->open = 1;
    pthread_cond_broadcast(&gt->cv);
    pthread_mutex_unlock(&gt->mu);
    for (int i = 0; i < n; i++) pthread_join(ps[i].th, NULL);
    pthread_cond_destroy(&gt->cv);
    pthread_mutex_destroy(&gt->mu);
  } else {
    pgate_wait(g); /* every participant's part has returned */
    hpl__bc_cpu_sample(&b1, &t1);
    post = hpl__now_ns();
    for (int i = 0; i < n; i++) /* everyone is done: results, then checks */
      if (full_write(g->w[ps[i].j.idx].wfd, "c", 1)) hpl__bc_die("a worker is gone");
    for (int i = 0; i < n; i++)
      if (full_read(g->w[ps[i].j.idx].rfd, &ps[i].r, sizeof ps[i].r)) hpl__bc_die("a worker is gone");
    for (int i = 0; i < n; i++)
      if (full_read(g->w[ps[i].j.idx].rfd, &ps[i].r.bad, sizeof ps[i].r.bad)) hpl__bc_die("a worker is gone");
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

