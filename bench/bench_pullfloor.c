/* bench_pullfloor.c - the floor of a receiver-driven shuffle with a
 * directory on the emulated hosts: every host puts one partition per peer
 * and pulls its own partition from every peer, finding each through a
 * directory, with plain sockets and no hoplite code.
 *
 *   bench_pullfloor --netns PREFIX --addrs A0,A1,... --hosts N
 *                   [--sizes 64K,1M] [--reps R] [--rate 1gbit] [--out FILE]
 *                   [--window BYTES] [--inflight K] [--worker-proc] [--sha256]
 *
 * It is what any design in which receivers pull objects whose location a
 * directory keeps must do at least, with nothing else: no digests, no
 * shared memory, no store process beside the worker, connections opened
 * before the timing, one process per host (the worker and its server in
 * one loop), and a directory process on host 0 (where bench_coll puts
 * hoplite's):
 *  - a host's "put": one message telling the directory that its
 *    partitions for rep r are there (LOC);
 *  - its gets: one message asking for the places of its partitions (LOOK);
 *    the directory answers each source as soon as its LOC is in, and the
 *    host then sends a PULL to that source, which writes the partition
 *    back on the same connection (nonblocking, the rest when the socket
 *    takes it). With --inflight K at most K pulls of a host are under way
 *    at once, the next one in pairwise order (peer idx+1, idx+2, ...) as
 *    one ends, so partitions converging on a host can be limited as
 *    MPI's pairwise exchange limits them (default: all at once).
 * Control connections (the directory's, and the pulls' requests) are
 * marked as hoplite marks its own (hpl__sock_control), and the pulls'
 * connections get the receive buffer hoplite's stores give theirs when
 * told the link's rate (--window; default 1.25 ms of --rate, at least
 * 32 KiB, as store/dconns.c; 0: the kernel sizes it), so partitions
 * converging on a host do not overflow its switch queue. So hoplite's shuffle
 * against this row is what hoplite adds to its design's hops; this row
 * against MPI_Alltoall (one eager send per partition) is what asking and
 * pulling cost in themselves.
 *
 * Two options add what hoplite's design adds on purpose: --worker-proc
 * makes each host's worker a process of its own (bench_pullfloor_roles.c)
 * that copies its partitions into memory shared with the server, then asks
 * it to put them and to get its own, one datagram each way per call, as a
 * task runtime's worker asks its node's store; --sha256 hashes every
 * partition at its origin before the directory hears of it and again
 * where it lands, before it counts, as hoplite's default digests do.
 *
 * Timing as bench_coll's rule: a start time 20 ms ahead on
 * CLOCK_MONOTONIC, every host sleeps until it (clock_nanosleep, absolute);
 * a host's part ends when its last partition is in; it then only serves
 * its peers' pulls, as a store would, until every host is done. A sample
 * is the latest end minus the start. Bytes are checked after every round,
 * outside the timing. Output: TSV rows as bench_coll's (op "shuffle",
 * implementation "tcp-pullfloor"), to stdout and appended to --out; on
 * stderr the CPU of all its processes per GiB moved.
 *
 * Needs root (setns) and the namespaces of bench/cluster.sh; every process
 * joins its host's network namespace before it opens a socket. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "bench_pullfloor.h"
#include "benchfloor.h"
#include "benchstat.h"
#include "localcluster.h"
#include "util.h"

static const char *prefix;
static char addrs[MAXN][64];
static int hosts, reps = 10;
static long window = -1; /* the pulls' receive buffer (bytes; 0: the kernel's) */
static int max_inflight = MAXN; /* pulls under way at once per host */
static int worker_proc; /* --worker-proc: each host's worker is a process of its own */
static int sha256;      /* --sha256: partitions hashed at the put, checked where they land */
static shared *sh;

static void enter_host(int i) {
  if (hpl__lc_enter_host(prefix, i) != 0) hpl__pf_die("cannot enter the host's network namespace");
}

static int listen_on(const char *addr, uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  if (fd < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1) hpl__pf_die("socket");
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, MAXN * 2) != 0) hpl__pf_die("bind");
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  *port = ntohs(sa.sin_port);
  return fd;
}

static int dial(const char *addr, uint16_t port, int control, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (fd < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1) hpl__pf_die("socket");
  if (rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) != 0)
    hpl__pf_die("SO_RCVBUF");
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) hpl__pf_die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (control) hpl__sock_control(fd);
  return fd;
}

/* epoll tags: what a ready descriptor is */
enum { T_DIR = 1, T_PULL = 2, T_SERVE = 3, T_WORKER = 4 };
#define TAG(t, i) (((uint64_t)(t) << 32) | (uint32_t)(i))

/* Pull what the directory has named, peers in pairwise order (idx+1,
 * idx+2, ...), while fewer than --inflight pulls are under way. */
static void pull_next(int idx, int r, const int *pfd, uint8_t *known, int *inflight) {
  for (int s = 1; s < hosts && *inflight < max_inflight; s++) {
    int j = (idx + s) % hosts;
    if (known[j] != 1) continue;
    pull p = {(uint32_t)r, (uint32_t)idx};
    if (hpl__floor_io(pfd[j], &p, sizeof p, 1) != 0) hpl__pf_die("write a pull");
    known[j] = 2;
    (*inflight)++;
  }
}

/* The put of host idx's partitions as far as the directory goes: with
 * --sha256 their digests first (the receivers' reference), then LOC (and
 * with it the LOOK, look != 0). */
static void put_loc(int idx, uint8_t *const *part, uint64_t size, int dfd, const msg *m, int look) {
  for (int j = 0; sha256 && j < hosts; j++)
    if (j != idx) SHA256(part[j], size, sh->digest[idx][j]);
  if (hpl__floor_io(dfd, (void *)m, sizeof *m * (look ? 2 : 1), 1) != 0)
    hpl__pf_die("write to the directory");
}

/* Host `to` got wrong bytes from host `from`: the run fails, naming the
 * first such pair found. */
static void note_bad(int to, int from) {
  int zero = 0;
  if (__atomic_compare_exchange_n(&sh->failed, &zero, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    sh->bad_to = to, sh->bad_from = from;
}

/* With --sha256: host idx's partition from host i must hash to what its
 * origin made of it. */
static void check_digest(int idx, int i, const uint8_t *got, uint64_t size) {
  uint8_t d[32];
  if (sha256 && memcmp(SHA256(got, size, d), sh->digest[i][idx], sizeof d) != 0) note_bad(idx, i);
}

/* Host idx: its server and its worker in one loop. */
static void host(int idx, uint64_t size) {
  enter_host(idx);
  int lfd = listen_on(addrs[idx], &sh->data_port[idx]);
  uint8_t *part[MAXN] = {0}, *got[MAXN] = {0}, *want = malloc(size);
  for (int j = 0; j < hosts; j++) {
    if (j == idx) continue;
    /* --worker-proc: the worker writes the partitions where this process sends them from */
    part[j] = worker_proc ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                          : malloc(size);
    if (!part[j] || part[j] == MAP_FAILED || !(got[j] = malloc(size))) hpl__pf_die("memory");
  }
  if (!want) hpl__pf_die("malloc");
  /* HPL_PULLFLOOR_MIXUP=1 (for the test that the check catches it): host 0
   * gives each peer the bytes meant for the next one */
  int mixup = idx == 0 && getenv("HPL_PULLFLOOR_MIXUP");
  int wsv[2] = {-1, -1};
  pid_t wpid = -1;
  if (worker_proc) {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, wsv) != 0) hpl__pf_die("socketpair");
    if ((wpid = fork()) < 0) hpl__pf_die("fork");
    if (wpid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(wsv[0]), close(lfd);
      pthread_barrier_wait(&sh->bar); /* every port is published */
      hpl__pf_worker(sh, idx, hosts, reps, wsv[1], part, size, mixup);
      _exit(0);
    }
    close(wsv[1]);
  }
  pthread_barrier_wait(&sh->bar); /* every port is published */
  int dfd = dial(addrs[0], sh->dir_port, 1, 0), pfd[MAXN], sfd[MAXN];
  for (int j = 0; j < hosts; j++)
    pfd[j] = j == idx ? -1 : dial(addrs[j], sh->data_port[j], 1, (int)window);
  for (int k = 0; k < hosts - 1; k++) {
    if ((sfd[k] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0) hpl__pf_die("accept");
    int one = 1;
    setsockopt(sfd[k], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(sfd[k], F_SETFL, O_NONBLOCK);
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG(T_DIR, 0)};
  epoll_ctl(ep, EPOLL_CTL_ADD, dfd, &ev);
  for (int j = 0; j < hosts; j++) {
    if (j == idx) continue;
    ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = TAG(T_PULL, j)};
    epoll_ctl(ep, EPOLL_CTL_ADD, pfd[j], &ev);
  }
  for (int k = 0; k < hosts - 1; k++) {
    ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = TAG(T_SERVE, k)};
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd[k], &ev);
  }
  if (worker_proc) {
    ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = TAG(T_WORKER, 0)};
    epoll_ctl(ep, EPOLL_CTL_ADD, wsv[0], &ev);
  }
  uint64_t cpu = 0;
  for (int r = 0; r <= reps; r++) { /* round 0 warms up */
    for (int j = 0; !worker_proc && j < hosts; j++)
      if (j != idx) hpl__fill_pattern(part[j], size, hpl__pf_seed(r, idx, mixup ? (j + 1) % hosts : j, size));
    pthread_barrier_wait(&sh->bar); /* ready */
    pthread_barrier_wait(&sh->bar); /* start_ns[r] is set */
    uint64_t c0 = hpl__bench_cpu_ns();
    msg m[2] = {{MSG_LOC, (uint32_t)r, (uint32_t)idx}, {MSG_LOOK, (uint32_t)r, (uint32_t)idx}};
    if (!worker_proc) { /* the host's own worker: put and get at once */
      hpl__sleep_until_ns(sh->start_ns[r]);
      put_loc(idx, part, size, dfd, m, 1);
    }
    uint64_t recv_off[MAXN] = {0}, send_off[MAXN] = {0};
    int send_to[MAXN], nrecv = 0, nserved = 0; /* send_to: the pull being served, or -1 */
    uint8_t waits_out[MAXN] = {0}; /* EPOLLOUT is asked for (a partition's rest) */
    uint8_t known[MAXN] = {0}; /* 1: the directory named it, 2: pulled */
    int inflight = 0;
    uint8_t wbuf[sizeof(where) * MAXN];
    size_t wfill = 0;
    for (int k = 0; k < hosts - 1; k++) send_to[k] = -1;
    while (nrecv < hosts - 1 || nserved < hosts - 1) {
      struct epoll_event evs[MAXN * 2 + 1];
      int n = epoll_wait(ep, evs, MAXN * 2 + 1, 10000);
      if (n == 0) hpl__pf_die("no progress for 10 s");
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) hpl__pf_die("epoll_wait");
      for (int e = 0; e < n; e++) {
        int t = (int)(evs[e].data.u64 >> 32), i = (int)(uint32_t)evs[e].data.u64;
        if (t == T_WORKER) { /* its put, then its get: each a message to the directory */
          wmsg w;
          if (recv(wsv[0], &w, sizeof w, 0) != (ssize_t)sizeof w || w.rep != (uint32_t)r ||
              (w.kind != WM_PUT && w.kind != WM_GET))
            hpl__pf_die("bad message from the worker");
          if (w.kind == WM_PUT) put_loc(idx, part, size, dfd, &m[0], 0);
          else if (hpl__floor_io(dfd, &m[1], sizeof m[1], 1) != 0) hpl__pf_die("write to the directory");
          wmsg ok = {WM_OK, (uint32_t)r};
          if (w.kind == WM_PUT && send(wsv[0], &ok, sizeof ok, 0) != (ssize_t)sizeof ok)
            hpl__pf_die("answer the worker");
        } else if (t == T_DIR) { /* places of partitions: pull each */
          ssize_t k = read(dfd, wbuf + wfill, sizeof wbuf - wfill);
          if (k <= 0) hpl__pf_die("directory closed");
          wfill += (size_t)k;
          size_t off = 0;
          for (; wfill - off >= sizeof(where); off += sizeof(where)) {
            where w;
            memcpy(&w, wbuf + off, sizeof w);
            if (w.rep != (uint32_t)r || w.from >= (uint32_t)hosts || w.from == (uint32_t)idx)
              hpl__pf_die("directory: bad answer");
            known[w.from] = 1;
          }
          memmove(wbuf, wbuf + off, wfill - off);
          wfill -= off;
          pull_next(idx, r, pfd, known, &inflight);
        } else if (t == T_PULL) { /* a partition's bytes */
          ssize_t k = read(pfd[i], got[i] + recv_off[i], size - recv_off[i]);
          if (k <= 0) hpl__pf_die("peer closed");
          recv_off[i] += (uint64_t)k;
          if (recv_off[i] < size) continue;
          check_digest(idx, i, got[i], size);
          wmsg done = {WM_DONE, (uint32_t)r}; /* --worker-proc: it takes the end time */
          if (++nrecv == hosts - 1 && !worker_proc) sh->end_ns[idx][r] = hpl__now_ns();
          else if (nrecv == hosts - 1 && send(wsv[0], &done, sizeof done, 0) != (ssize_t)sizeof done)
            hpl__pf_die("tell the worker");
          inflight--;
          pull_next(idx, r, pfd, known, &inflight);
        } else { /* a peer's pull, or room to write the rest of its partition */
          if (send_to[i] < 0) {
            pull p;
            ssize_t k = read(sfd[i], &p, sizeof p); /* 8 bytes: one segment */
            if (k == 0) hpl__pf_die("peer closed");
            if (k < 0 && errno == EAGAIN) continue;
            if (k != (ssize_t)sizeof p || p.rep != (uint32_t)r || p.to >= (uint32_t)hosts ||
                p.to == (uint32_t)idx)
              hpl__pf_die("bad pull");
            send_to[i] = (int)p.to;
          }
          int to = send_to[i];
          while (send_off[i] < size) {
            ssize_t k = write(sfd[i], part[to] + send_off[i], size - send_off[i]);
            if (k < 0 && errno == EAGAIN) break;
            if (k <= 0) hpl__pf_die("write a partition");
            send_off[i] += (uint64_t)k;
          }
          int out = send_off[i] < size;
          if (!out) nserved++, send_to[i] = -1;
          if (out != waits_out[i]) { /* the poll set changes only when it must */
            ev = (struct epoll_event){.events = out ? EPOLLOUT : EPOLLIN,
                                      .data.u64 = TAG(T_SERVE, i)};
            epoll_ctl(ep, EPOLL_CTL_MOD, sfd[i], &ev);
            waits_out[i] = (uint8_t)out;
          }
        }
      }
    }
    cpu += r > 0 ? hpl__bench_cpu_ns() - c0 : 0;
    pthread_barrier_wait(&sh->bar); /* every host is done */
    for (int j = 0; j < hosts; j++) {
      if (j == idx) continue;
      hpl__fill_pattern(want, size, hpl__pf_seed(r, j, idx, size));
      if (memcmp(want, got[j], size) != 0) note_bad(idx, j);
    }
  }
  sh->cpu_ns[idx] = cpu;
  close(ep), close(dfd), close(lfd);
  int wst = 0;
  if (wpid > 0 && (waitpid(wpid, &wst, 0) != wpid || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0))
    hpl__pf_die("the worker failed");
  for (int j = 0; j < hosts; j++) {
    if (j == idx) continue;
    close(pfd[j]), free(got[j]);
    if (worker_proc) munmap(part[j], size);
    else free(part[j]);
  }
  for (int k = 0; k < hosts - 1; k++) close(sfd[k]);
  free(want);
}

/* One size: a directory process, a process per host, reps + 1 rounds. */
static int run_size(uint64_t size, void *arg) {
  const hpl__floor_run *a = arg;
  double rate_Bps = a->rate_Bps;
  FILE *out = a->out;
  if (size == 0 || size > MAXSIZE) {
    fprintf(stderr, "bench_pullfloor: a size of 1 B to 64 MiB, not %llu\n", (unsigned long long)size);
    return 2;
  }
  enter_host(0); /* this thread: the directory's listening socket lives on host 0 */
  int lfd = listen_on(addrs[0], &sh->dir_port);
  memset(sh->cpu_ns, 0, sizeof sh->cpu_ns);
  memset(sh->wcpu_ns, 0, sizeof sh->wcpu_ns);
  sh->failed = 0;
  if (hpl__floor_barrier(&sh->bar, (unsigned)hosts * (worker_proc ? 2 : 1) + 1) != 0) hpl__pf_die("pthread_barrier_init");
  fflush(NULL);
  alarm(120 + (unsigned)reps * 10); /* a process that dies leaves the barrier short */
  pid_t pid[MAXN + 1];
  for (int i = 0; i <= hosts; i++) {
    if ((pid[i] = fork()) < 0) hpl__pf_die("fork");
    if (pid[i] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (i == hosts) hpl__pf_directory(sh, hosts, lfd);
      else close(lfd), host(i, size);
      _exit(0);
    }
  }
  close(lfd);
  pthread_barrier_wait(&sh->bar); /* ports published */
  double samples[MAXREPS];
  for (int r = 0; r <= reps; r++) {
    pthread_barrier_wait(&sh->bar); /* the hosts are ready */
    sh->start_ns[r] = hpl__now_ns() + 20 * 1000000ull;
    pthread_barrier_wait(&sh->bar); /* ... and read the start */
    pthread_barrier_wait(&sh->bar); /* ... and are done */
    uint64_t last = sh->start_ns[r];
    for (int i = 0; i < hosts; i++)
      if (sh->end_ns[i][r] > last) last = sh->end_ns[i][r];
    if (r > 0) samples[r - 1] = (double)(last - sh->start_ns[r]) / 1e9;
    if (getenv("HPL_BENCH_TRACE")) /* bench_coll's line: windows for perf -k CLOCK_MONOTONIC */
      fprintf(stderr, "bench_pullfloor: rep %d from %llu ns (monotonic) ends (ms): 0:%.3f\n", r,
              (unsigned long long)sh->start_ns[r], (double)(last - sh->start_ns[r]) / 1e6);
  }
  int bad = 0;
  for (int i = 0; i <= hosts; i++) {
    int st = 0;
    if (waitpid(pid[i], &st, 0) != pid[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  alarm(0);
  pthread_barrier_destroy(&sh->bar);
  if (bad || sh->failed) {
    if (bad)
      fprintf(stderr, "bench_pullfloor: a process failed\n");
    else
      fprintf(stderr, "bench_pullfloor: host %d got wrong bytes from host %d\n", sh->bad_to,
              sh->bad_from);
    return -1;
  }
  qsort(samples, (size_t)reps, sizeof *samples, hpl__bench_cmp_double);
  double med = samples[reps / 2], bound = rate_Bps > 0 ? (double)size * (hosts - 1) / rate_Bps : 0;
  uint64_t cpu = 0;
  for (int i = 0; i <= MAXN; i++) cpu += sh->cpu_ns[i] + (i < MAXN ? sh->wcpu_ns[i] : 0);
  double gib = (double)size * hosts * (hosts - 1) * reps / (1024.0 * 1024 * 1024);
  char line[256];
  char impl[48] = "tcp-pullfloor", lim[24] = "";
  if (max_inflight < hosts - 1) snprintf(lim, sizeof lim, "+inflight%d", max_inflight);
  snprintf(impl, sizeof impl, "tcp-pullfloor%s%s%s", worker_proc ? "+worker" : "",
           sha256 ? "+sha256" : "", lim);
  snprintf(line, sizeof line, "shuffle\t%llu\t%d\t%s\t%.6f\t%.6f\t%.6f\t%.3f\t-\n",
           (unsigned long long)size, hosts, impl, med, samples[0], samples[reps - 1],
           bound > 0 ? med / bound : 0);
  fputs(line, stdout);
  if (out) fputs(line, out);
  fprintf(stderr, "bench_pullfloor: %llu B: CPU of all processes %.3f s per GiB moved (directory %.3f)\n",
          (unsigned long long)size, (double)cpu / 1e9 / gib, (double)sh->cpu_ns[MAXN] / 1e9 / gib);
  return 0;
}

int main(int argc, char **argv) {
  hpl__floor_opts o = {.sizes = "64K,1M", .rate = "1gbit", .reps = reps};
  static const struct option lo[] = {{"netns", 1, 0, 'n'}, {"addrs", 1, 0, 'a'},
                                     {"hosts", 1, 0, 'h'}, {"sizes", 1, 0, 's'},
                                     {"reps", 1, 0, 'r'},  {"out", 1, 0, 'o'},
                                     {"rate", 1, 0, 't'},  {"window", 1, 0, 'w'},
                                     {"inflight", 1, 0, 'i'}, {"worker-proc", 0, 0, 'W'}, {"sha256", 0, 0, 'S'},
                                     {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    if (hpl__floor_opt(&o, ch, optarg)) continue;
    if (ch == 'w') {
      window = atol(optarg);
      continue;
    }
    if (ch == 'i') {
      max_inflight = atoi(optarg);
      continue;
    }
    if (ch == 'W' || ch == 'S') {
      *(ch == 'W' ? &worker_proc : &sha256) = 1;
      continue;
    }
    fprintf(stderr, "usage: bench_pullfloor --netns PREFIX --addrs A0,A1,... --hosts N "
                    "[--sizes 64K,1M] [--reps R] [--rate 1gbit] [--out FILE] "
                    "[--window BYTES] [--inflight K] [--worker-proc] [--sha256]\n");
    return 2;
  }
  prefix = o.prefix, hosts = o.hosts, reps = o.reps;
  if (!prefix || !o.addr_list || hosts < 2 || hosts > MAXN || reps < 1 || reps > MAXREPS ||
      max_inflight < 1) {
    fprintf(stderr, "bench_pullfloor: need --netns, --addrs, 2..%d --hosts, 1..%d --reps\n", MAXN,
            MAXREPS);
    return 2;
  }
  hpl__floor_run a;
  if (hpl__floor_setup("bench_pullfloor", &o, addrs, MAXN, &a)) return 2;
  if (window < 0) { /* store/dconns.c's default */
    window = (long)(a.rate_Bps * 1.25e-3);
    if (a.rate_Bps > 0 && window < (32 << 10)) window = 32 << 10;
  }
  if (window > (1 << 30)) window = 1 << 30;
  fprintf(stderr, "bench_pullfloor: the pulls' receive buffer: %ld bytes%s\n", window,
          window ? "" : " (the kernel's)");
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) hpl__pf_die("mmap");
  int rc = hpl__floor_sizes("bench_pullfloor", o.sizes, run_size, &a);
  if (a.out) fclose(a.out);
  return rc;
}
