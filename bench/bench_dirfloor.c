/* bench_dirfloor.c - the floor under the directory's single-request rate:
 * many client processes, each sending one small request at a time to one
 * server process over loopback, with no hoplite code on either side.
 *
 *   bench_dirfloor [--clients N] [--secs S] [--rounds R] [--servers epoll,esends,uring]
 *
 * Every client is a process of its own with one TCP connection (TCP_NODELAY),
 * writing a 40-byte request and reading a 160-byte reply, asleep in the
 * kernel while it waits; all start at one time (clock_nanosleep, absolute)
 * and stop S seconds later (default 3). Server kinds, alternating round by
 * round (R rounds, default 2) so the machine's speed weighs on both alike:
 *  - epoll: one thread, epoll_wait for up to 64 ready connections, then one
 *    read and one write per request: the directory's own pattern (libuv
 *    reads a ready stream once and writes a reply at once or at the end of
 *    the loop turn);
 *  - esends: the epoll server with each loop turn's replies handed to the
 *    kernel together: one io_uring_enter with a send per reply
 *    (MSG_DONTWAIT: each completes or fails at once), the reads as epoll's;
 *  - uring: one thread, io_uring: every reply's send and the next request's
 *    recv are queued and handed to the kernel in one io_uring_enter per loop
 *    turn, which also waits for the next completions (no polling thread:
 *    the server sleeps while idle).
 * Prints per kind and round: requests per second, the server's CPU per
 * request (its whole CPU time from wait4 over the requests it answered),
 * the clients' CPU per request, and the server's rate on one core
 * (1 / its CPU per request): what any directory with that server loop could
 * answer if its own work per request cost nothing. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REQ_BYTES 40
#define REP_BYTES 160
#define MAX_CLIENTS 256

typedef enum { SRV_EPOLL, SRV_EPOLL_SENDS, SRV_URING, SRV_KINDS } srv_kind;
static const char *const srv_names[SRV_KINDS] = {"epoll", "esends", "uring"};

static double ts_sec(const struct timeval *t) {
  return (double)t->tv_sec + (double)t->tv_usec * 1e-6;
}

static double rusage_cpu(const struct rusage *r) {
  return ts_sec(&r->ru_utime) + ts_sec(&r->ru_stime);
}

/* Accepts n connections on ls into fds; exits the process on failure. */
static void accept_all(int ls, int *fds, int n) {
  int one = 1;
  for (int i = 0; i < n; i++) {
    fds[i] = accept(ls, NULL, NULL);
    if (fds[i] < 0) _exit(1);
    setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  close(ls);
}

/* A ring for the servers; exits the process on failure. */
static void ring_init(struct io_uring *ring) {
  struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN};
  if (io_uring_queue_init_params(4 * MAX_CLIENTS, ring, &p) != 0) {
    memset(&p, 0, sizeof p);
    if (io_uring_queue_init_params(4 * MAX_CLIENTS, ring, &p) != 0) _exit(1);
  }
}

/* The epoll servers: a read per ready connection, and its reply written at
 * once (epoll) or, with `batched` (esends), the loop turn's replies handed
 * to the kernel together in one io_uring_enter (MSG_DONTWAIT: each
 * completes or fails at once, none is left pending). Returns when every
 * client has closed; the count of requests answered in *served. */
static void serve_epoll_any(int ls, int n, uint64_t *served, int batched) {
  int fds[MAX_CLIENTS], ep = epoll_create1(0), open_n = n;
  if (ep < 0) _exit(1);
  accept_all(ls, fds, n);
  for (int i = 0; i < n; i++) {
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e)) _exit(1);
  }
  struct io_uring ring;
  if (batched) ring_init(&ring);
  char buf[4096], rep[REP_BYTES];
  memset(rep, 'r', sizeof rep);
  struct epoll_event ev[64];
  while (open_n > 0) {
    int k = epoll_wait(ep, ev, 64, -1);
    unsigned sends = 0;
    for (int j = 0; j < k; j++) {
      int fd = fds[ev[j].data.u32];
      ssize_t r = read(fd, buf, sizeof buf);
      if (r <= 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        open_n--;
      } else if (batched) {
        io_uring_prep_send(io_uring_get_sqe(&ring), fd, rep, sizeof rep,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        sends++;
      } else {
        if (write(fd, rep, sizeof rep) != (ssize_t)sizeof rep) _exit(1);
        (*served)++;
      }
    }
    if (!sends) continue;
    if (io_uring_submit_and_wait(&ring, sends) < 0) _exit(1);
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      if (cqe->res != REP_BYTES) _exit(1);
      seen++;
    }
    io_uring_cq_advance(&ring, seen);
    *served += seen;
  }
  if (batched) io_uring_queue_exit(&ring);
}

static void serve_epoll(int ls, int n, uint64_t *served) { serve_epoll_any(ls, n, served, 0); }

static void serve_epoll_sends(int ls, int n, uint64_t *served) {
  serve_epoll_any(ls, n, served, 1);
}

/* The io_uring server: completions of a loop turn queue their sends and
 * re-armed recvs, which go to the kernel together with the next wait. */
static void serve_uring(int ls, int n, uint64_t *served) {
  int fds[MAX_CLIENTS], open_n = n;
  static char bufs[MAX_CLIENTS][512];
  char rep[REP_BYTES];
  memset(rep, 'r', sizeof rep);
  accept_all(ls, fds, n);
  struct io_uring ring;
  ring_init(&ring);
  for (int i = 0; i < n; i++) {
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    io_uring_prep_recv(s, fds[i], bufs[i], sizeof bufs[i], 0);
    io_uring_sqe_set_data64(s, (uint64_t)i << 1);
  }
  while (open_n > 0) {
    if (io_uring_submit_and_wait(&ring, 1) < 0 && errno != EINTR) _exit(1);
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      seen++;
      uint64_t d = io_uring_cqe_get_data64(cqe);
      int i = (int)(d >> 1);
      if (d & 1) { /* a send */
        if (cqe->res != REP_BYTES) _exit(1);
        continue;
      }
      if (cqe->res <= 0) {
        close(fds[i]);
        open_n--;
        continue;
      }
      struct io_uring_sqe *s = io_uring_get_sqe(&ring);
      io_uring_prep_send(s, fds[i], rep, sizeof rep, MSG_NOSIGNAL);
      io_uring_sqe_set_data64(s, ((uint64_t)i << 1) | 1);
      s = io_uring_get_sqe(&ring);
      io_uring_prep_recv(s, fds[i], bufs[i], sizeof bufs[i], 0);
      io_uring_sqe_set_data64(s, (uint64_t)i << 1);
      (*served)++;
    }
    io_uring_cq_advance(&ring, seen);
  }
  io_uring_queue_exit(&ring);
}

/* One client: sequential requests from start to stop; its count in *done. */
static void client(const struct sockaddr_in *a, const struct timespec *start, double secs,
                   uint64_t *done) {
  int c = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof *a)) _exit(1);
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, start, NULL) == EINTR) {
  }
  double stop = (double)start->tv_sec + (double)start->tv_nsec * 1e-9 + secs;
  char q[REQ_BYTES] = {0}, buf[REP_BYTES];
  uint64_t k = 0;
  for (;;) {
    if ((k & 63) == 0) {
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      if ((double)t.tv_sec + (double)t.tv_nsec * 1e-9 >= stop) break;
    }
    if (write(c, q, sizeof q) != (ssize_t)sizeof q) _exit(1);
    for (size_t got = 0; got < sizeof buf;) {
      ssize_t r = read(c, buf + got, sizeof buf - got);
      if (r <= 0) _exit(1);
      got += (size_t)r;
    }
    k++;
  }
  *done = k;
  close(c);
  _exit(0);
}

/* One round of one server kind; prints its row. 0 or -1. */
static int round_run(srv_kind kind, int round, int n, double secs, uint64_t *shm) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, MAX_CLIENTS) ||
      getsockname(ls, (struct sockaddr *)&a, &al))
    return -1;
  memset(shm, 0, sizeof(uint64_t) * (MAX_CLIENTS + 1));
  pid_t srv = fork();
  if (srv == 0) {
    static void (*const serve[SRV_KINDS])(int, int, uint64_t *) = {serve_epoll, serve_epoll_sends,
                                                                   serve_uring};
    serve[kind](ls, n, &shm[MAX_CLIENTS]);
    _exit(0);
  }
  close(ls);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  start.tv_nsec += 300 * 1000000L; /* every client connected and asleep by then */
  start.tv_sec += start.tv_nsec / 1000000000L;
  start.tv_nsec %= 1000000000L;
  pid_t pids[MAX_CLIENTS];
  for (int i = 0; i < n; i++)
    if ((pids[i] = fork()) == 0) client(&a, &start, secs, &shm[i]);
  double ccpu = 0, scpu = 0;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    struct rusage r;
    int st;
    if (wait4(pids[i], &st, 0, &r) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
    ccpu += rusage_cpu(&r);
  }
  struct rusage r;
  int st;
  if (wait4(srv, &st, 0, &r) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
  scpu = rusage_cpu(&r);
  if (bad) {
    fprintf(stderr, "bench_dirfloor: a %s round failed\n", srv_names[kind]);
    return -1;
  }
  uint64_t total = 0;
  for (int i = 0; i < n; i++) total += shm[i];
  if (total == 0 || total != shm[MAX_CLIENTS]) {
    fprintf(stderr, "bench_dirfloor: clients counted %llu, the server %llu\n",
            (unsigned long long)total, (unsigned long long)shm[MAX_CLIENTS]);
    return -1;
  }
  double per = scpu / (double)total * 1e6;
  printf("%-6s %5d %7d %10.0f %12.2f %12.2f %12.0f %9.2f\n", srv_names[kind], round, n,
         (double)total / secs, per, ccpu / (double)total * 1e6, 1e6 / per, scpu / secs);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  int n = 16, rounds = 2, use[SRV_KINDS] = {1, 1, 1};
  double secs = 3;
  static const struct option lo[] = {{"clients", 1, 0, 'n'}, {"secs", 1, 0, 's'},
                                     {"rounds", 1, 0, 'r'},  {"servers", 1, 0, 'k'},
                                     {0, 0, 0, 0}};
  for (int ch; (ch = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
    switch (ch) {
      case 'n': n = atoi(optarg); break;
      case 's': secs = atof(optarg); break;
      case 'r': rounds = atoi(optarg); break;
      case 'k':
        for (int k = 0; k < SRV_KINDS; k++) use[k] = strstr(optarg, srv_names[k]) != NULL;
        break;
      default:
        fprintf(stderr, "usage: bench_dirfloor [--clients N] [--secs S] [--rounds R] "
                        "[--servers epoll,esends,uring]\n");
        return 2;
    }
  }
  if (n < 1 || n > MAX_CLIENTS || secs <= 0 || rounds < 1) {
    fprintf(stderr, "bench_dirfloor: clients 1-%d, secs > 0, rounds >= 1\n", MAX_CLIENTS);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  uint64_t *shm = mmap(NULL, sizeof(uint64_t) * (MAX_CLIENTS + 1), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shm == MAP_FAILED) return 1;
  printf("%-6s %5s %7s %10s %12s %12s %12s %9s\n", "server", "round", "clients", "req_per_s",
         "server_us", "clients_us", "server_1core", "srv_cores");
  for (int r = 1; r <= rounds; r++)
    for (int k = 0; k < SRV_KINDS; k++)
      if (use[k] && round_run((srv_kind)k, r, n, secs, shm)) return 1;
  return 0;
}
