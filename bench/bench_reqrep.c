/* bench_reqrep.c - the latency floor of any request/reply design on the
 * emulated hosts: N-1 clients, one per host namespace, each send one small
 * request to a single epoll server on host 0 and read a reply of SIZE
 * bytes. No hoplite code: plain sockets, every process (thread) sleeping
 * in the kernel while it waits, as hoplite's do.
 *
 *   bench_reqrep --netns PREFIX --addrs A0,A1,... --hosts N
 *                [--sizes 1K,64K] [--reps R] [--rate 1gbit] [--out FILE]
 *                [--procs]
 *
 * Sizes above 64 KiB (inline objects' limit) are skipped.
 * A small hoplite get that is not local costs at least this pattern (the
 * store asks the directory, which answers), so its figure is a lower bound
 * for hoplite's small broadcast, measured with bench_coll's timing: a start
 * time 20 ms ahead on CLOCK_MONOTONIC, every client sleeps until it
 * (clock_nanosleep, absolute), a sample is the latest finish minus the
 * start. Bytes are checked. Output: TSV rows as bench_coll's, implementation
 * "tcp-reqrep", to stdout and appended to --out.
 *
 * Clients are threads of this process by default. With --procs each client
 * is a process of its own (forked, then in its host's namespace), as
 * bench_coll --procs runs hoplite's receivers: a separate process pays its
 * own wake-ups, which threads of one process share. The implementation is
 * then "tcp-reqrep+procs". The rounds are driven through a process-shared
 * barrier (futex: every waiter sleeps) in shared memory.
 *
 * With $HOPLITE_TRACE set, the clients and the server record the same
 * events as hoplite's small get (get, peek.send, d.peek, d.peekrep,
 * peek.got, get.done; src/common/trace.h) under the id
 * "bench/reqrep/SIZE/ROUND", so bench/hops.py lays the floor's hops beside
 * a traced bench_coll's.
 *
 * Needs root (setns) and the namespaces of bench/cluster.sh; every client
 * joins its host's network namespace before it opens a socket, so traffic
 * stays in them. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "localcluster.h"
#include "trace.h"
#include "util.h"
#include "benchfloor.h"
#include "benchpin.h"
#include "benchstat.h"

#define MAXN 64
#define MAXREPS 1000
#define MAXSIZE (1u << 20)
#define SMALL_MAX (64u << 10) /* larger sizes in --sizes are skipped */

static const char *prefix;
static char addrs[MAXN][64];
static int hosts, reps = 30, procs;
static uint16_t port;
static int tracing; /* $HOPLITE_TRACE is set: the ids below are made only then */

/* What the driver and the clients share: in shared memory with --procs (the
 * clients are forked), so the barrier is process-shared either way. */
typedef struct shared {
  pthread_barrier_t bar;
  uint64_t start_ns[MAXREPS];
  uint64_t end_ns[MAXN][MAXREPS];
  uint32_t cur_size;
  int round; /* the round under way (the server's trace ids) */
  int failed;
} shared;
static shared *sh;

static void die(const char *what) {
  fprintf(stderr, "bench_reqrep: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void enter_host(int i) {
  if (hpl__lc_enter_host(prefix, i) != 0) die("cannot enter the host's network namespace");
}

/* Host 0: answer each 4-byte request (a size) with that many bytes of 0x5a.
 * Requests are tiny and come one per client per round, so a blocking
 * reply on a readable socket is what a directory's loop does too. */
static void *server(void *arg) {
  int lfd = *(int *)arg;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  uint8_t *reply = malloc(MAXSIZE);
  if (!reply) die("malloc");
  memset(reply, 0x5a, MAXSIZE);
  int open_conns = 0, seen = 0;
  while (!seen || open_conns > 0) {
    struct epoll_event evs[MAXN];
    int n = epoll_wait(ep, evs, MAXN, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("epoll_wait");
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) continue;
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        open_conns++;
        seen = 1;
        continue;
      }
      uint32_t want;
      char id[64] = "";
      int bad = hpl__floor_io(fd, &want, sizeof want, 0) != 0 || want > MAXSIZE;
      if (!bad) {
        if (tracing)
          snprintf(id, sizeof id, "bench/reqrep/%u/%d", want, __atomic_load_n(&sh->round, __ATOMIC_RELAXED));
        hpl__trace("d.peek", id);
        bad = hpl__floor_io(fd, reply, want, 1) != 0;
        hpl__trace("d.peekrep", id);
      }
      if (bad) {
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        open_conns--;
      }
    }
  }
  free(reply);
  close(ep);
  return NULL;
}

static void *client(void *arg) {
  int idx = (int)(intptr_t)arg;
  enter_host(idx);
  /* HPL_BENCH_PIN=1: a client process on CPU idx mod the CPUs (benchpin.h) */
  if (procs && hpl__bench_pin_wanted() && hpl__bench_pin(0, idx) != 0) perror("bench_reqrep: HPL_BENCH_PIN");
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (fd < 0 || inet_pton(AF_INET, addrs[0], &sa.sin_addr) != 1) die("client socket");
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  uint8_t *buf = malloc(MAXSIZE);
  if (!buf) die("malloc");
  int usage = procs && getenv("HPL_BENCH_TRACE");
  hpl__bench_usage use = {0}, u0 = {0}; /* the timed parts' (HPL_BENCH_TRACE, --procs) */
  for (int r = 0; r <= reps; r++) { /* round 0 warms up */
    pthread_barrier_wait(&sh->bar);
    uint32_t size = sh->cur_size;
    char id[64] = "";
    if (tracing) snprintf(id, sizeof id, "bench/reqrep/%u/%d", size, r);
    if (usage) u0 = hpl__bench_usage_now();
    hpl__sleep_until_ns(sh->start_ns[r]);
    hpl__trace("get", id);
    int bad = hpl__floor_io(fd, &size, sizeof size, 1) != 0;
    hpl__trace("peek.send", id);
    bad = bad || hpl__floor_io(fd, buf, size, 0) != 0;
    hpl__trace("peek.got", id);
    sh->end_ns[idx][r] = hpl__now_ns();
    hpl__trace("get.done", id);
    /* the fair rule: nothing but the wait until every client is done */
    pthread_barrier_wait(&sh->bar);
    if (usage) /* the wait blocks, costing ~nothing */
      hpl__bench_usage_add(&use, u0, hpl__bench_usage_now());
    for (uint32_t i = 0; !bad && i < size; i++) bad = buf[i] != 0x5a;
    if (bad) __atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
  }
  if (usage)
    fprintf(stderr,
            "bench_reqrep: client %d: %d requests, each from its sleep to its end: %.1f us of CPU "
            "(%.1f in user space), %.2f minor faults, %.2f + %.2f context switches (given up + "
            "taken)\n",
            idx, reps + 1, (double)use.cpu_ns / 1e3 / (reps + 1), (double)use.user_us / (reps + 1),
            (double)use.minflt / (reps + 1), (double)use.nvcsw / (reps + 1),
            (double)use.nivcsw / (reps + 1));
  free(buf);
  close(fd);
  return NULL;
}

/* One size: a server thread, hosts-1 clients (threads, or processes with
 * --procs), reps rounds. */
static int run_size(uint64_t size64, void *arg) {
  const hpl__floor_run *a = arg;
  double rate_Bps = a->rate_Bps;
  FILE *out = a->out;
  if (size64 > SMALL_MAX) return 0; /* a latency floor: small objects only */
  uint32_t size = (uint32_t)size64;
  pthread_t srv, cl[MAXN];
  pid_t pid[MAXN] = {0};
  int lfd;
  {
    enter_host(0); /* this thread: the listening socket lives on host 0 */
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    if (lfd < 0 || inet_pton(AF_INET, addrs[0], &sa.sin_addr) != 1) die("server socket");
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, MAXN) != 0) die("bind");
    socklen_t sl = sizeof sa;
    getsockname(lfd, (struct sockaddr *)&sa, &sl);
    port = ntohs(sa.sin_port);
  }
  sh->cur_size = size;
  sh->failed = 0;
  /* the clients and this thread */
  if (hpl__floor_barrier(&sh->bar, (unsigned)hosts) != 0) die("pthread_barrier_init");
  /* processes first: a fork copies only the calling thread. Nothing buffered
   * may be written twice; a client dies with this process; a client that
   * dies leaves the barrier short, so the whole size has a deadline. */
  fflush(NULL);
  if (procs) alarm(60 + (unsigned)reps);
  for (int i = 1; i < hosts && procs; i++) {
    pid[i] = fork();
    if (pid[i] < 0) die("fork");
    if (pid[i] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(lfd);
      client((void *)(intptr_t)i);
      _exit(0);
    }
  }
  pthread_create(&srv, NULL, server, &lfd);
  for (int i = 1; i < hosts && !procs; i++)
    pthread_create(&cl[i], NULL, client, (void *)(intptr_t)i);
  double samples[MAXREPS];
  int trace_reps = getenv("HPL_BENCH_TRACE") != NULL;
  for (int r = 0; r <= reps; r++) {
    sh->start_ns[r] = hpl__now_ns() + 20 * 1000000ull;
    __atomic_store_n(&sh->round, r, __ATOMIC_RELAXED); /* (the server's trace ids) */
    pthread_barrier_wait(&sh->bar); /* clients read start_ns[r] after this */
    pthread_barrier_wait(&sh->bar); /* ... and are done */
    uint64_t last = sh->start_ns[r];
    for (int i = 1; i < hosts; i++)
      if (sh->end_ns[i][r] > last) last = sh->end_ns[i][r];
    if (r > 0) samples[r - 1] = (double)(last - sh->start_ns[r]) / 1e9;
    if (trace_reps) { /* as bench_coll's: where each round's timed part lies */
      fprintf(stderr, "bench_reqrep: rep %d from %llu ns (monotonic) ends (ms):", r - 1,
              (unsigned long long)sh->start_ns[r]);
      for (int i = 1; i < hosts; i++)
        fprintf(stderr, " %d:%.3f", i, (double)(sh->end_ns[i][r] - sh->start_ns[r]) / 1e6);
      fputc('\n', stderr);
    }
  }
  for (int i = 1; i < hosts; i++) {
    int st = 0;
    if (!procs) {
      pthread_join(cl[i], NULL);
    } else if (waitpid(pid[i], &st, 0) != pid[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "bench_reqrep: client %d failed\n", i);
      sh->failed = 1;
    }
  }
  alarm(0);
  pthread_join(srv, NULL);
  close(lfd);
  pthread_barrier_destroy(&sh->bar);
  if (sh->failed) {
    fprintf(stderr, "bench_reqrep: wrong or missing bytes\n");
    return -1;
  }
  qsort(samples, (size_t)reps, sizeof *samples, hpl__bench_cmp_double);
  double med = samples[reps / 2], bound = rate_Bps > 0 ? (double)size / rate_Bps : 0;
  char line[256];
  int pinned = procs && hpl__bench_pin_wanted();
  snprintf(line, sizeof line, "bcast\t%u\t%d\ttcp-reqrep%s%s\t%.6f\t%.6f\t%.6f\t%.3f\t-\n", size,
           hosts, procs ? "+procs" : "", pinned ? "+pin" : "", med, samples[0], samples[reps - 1],
           bound > 0 ? med / bound : 0);
  fputs(line, stdout);
  if (out) fputs(line, out);
  return 0;
}

int main(int argc, char **argv) {
  tracing = getenv("HOPLITE_TRACE") != NULL;
  hpl__floor_opts o = {.sizes = "1K,64K", .rate = "1gbit", .reps = reps};
  static const struct option lo[] = {{"netns", 1, 0, 'n'}, {"addrs", 1, 0, 'a'},
                                     {"hosts", 1, 0, 'h'}, {"sizes", 1, 0, 's'},
                                     {"reps", 1, 0, 'r'},  {"out", 1, 0, 'o'},
                                     {"rate", 1, 0, 't'},  {"procs", 0, 0, 'p'},
                                     {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    if (hpl__floor_opt(&o, ch, optarg)) continue;
    if (ch == 'p') {
      procs = 1;
      continue;
    }
    fprintf(stderr, "usage: bench_reqrep --netns PREFIX --addrs A0,A1,... --hosts N "
                    "[--sizes 1K,64K] [--reps R] [--rate 1gbit] [--out FILE] [--procs]\n");
    return 2;
  }
  prefix = o.prefix, hosts = o.hosts, reps = o.reps;
  if (!prefix || !o.addr_list || hosts < 2 || hosts > MAXN || reps < 1 || reps >= MAXREPS) {
    fprintf(stderr, "bench_reqrep: need --netns, --addrs and 2..%d --hosts, 1..%d --reps\n", MAXN,
            MAXREPS - 1);
    return 2;
  }
  hpl__floor_run a;
  if (hpl__floor_setup("bench_reqrep", &o, addrs, MAXN, &a)) return 2;
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) die("mmap");
  int rc = hpl__floor_sizes("bench_reqrep", o.sizes, run_size, &a);
  if (a.out) fclose(a.out);
  return rc;
}
