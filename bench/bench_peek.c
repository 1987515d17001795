/* bench_peek.c - CPU and time of a small remote request, against the floor
 * of any request/reply design on the same machine in the same run.
 *
 *   bench_peek [N] [ROUNDS]
 *
 * Three kinds of sequential requests, one at a time from one client, N each,
 * alternating round by round (ROUNDS, default 3) so the machine's speed
 * weighs on all alike:
 *  - floor: a bare TCP request (40 bytes) and reply (160 bytes) over
 *    loopback between two processes, the server an epoll loop, each side
 *    one write and one read per request and asleep in the kernel while it
 *    waits (no hoplite code: what any design with a server process pays);
 *  - get:  hpl_get of a 100-byte object this node does not hold (a direct
 *    read from the directory: PEEK, a reply with the bytes), then release;
 *  - stat: hpl_stat of it (a direct STAT to the directory).
 * The cluster has a secret (as deployed): frames carry MACs. Prints, per
 * kind and round, microseconds per request: wall time, the client's CPU,
 * the server's (the directory; for the floor its server process), their
 * sum, and the sum over the floor's of the same round. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"

#define OBJS 200
#define REQ_BYTES 40
#define REP_BYTES 160

static double cpu_of(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char *ok = fgets(buf, sizeof buf, f);
  fclose(f);
  char *p = ok ? strrchr(buf, ')') : NULL;
  if (!p) return -1;
  unsigned long ut = 0, st = 0;
  /* fields 14 and 15 (utime, stime) after the command's closing ')' */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The floor's server: one connection, epoll, a read and a write per request. */
static void floor_serve(int ls) {
  int c = accept(ls, NULL, NULL), one = 1, ep = epoll_create1(0);
  if (c < 0 || ep < 0) _exit(1);
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct epoll_event e = {.events = EPOLLIN};
  epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
  char buf[4096], rep[REP_BYTES];
  memset(rep, 'r', sizeof rep);
  for (;;) {
    if (epoll_wait(ep, &e, 1, -1) < 0) continue;
    ssize_t r = read(c, buf, sizeof buf);
    if (r <= 0) _exit(0);
    if (write(c, rep, sizeof rep) != (ssize_t)sizeof rep) _exit(1);
  }
}

/* The floor's client side; the server's pid in *srv. -1 on failure. */
static int floor_open(pid_t *srv) {
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &al))
    return -1;
  if ((*srv = fork()) == 0) floor_serve(ls);
  close(ls);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) != 0) return -1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return c;
}

static int floor_one(int c) {
  char q[REQ_BYTES] = {0}, buf[REP_BYTES];
  if (write(c, q, sizeof q) != (ssize_t)sizeof q) return -1;
  for (size_t got = 0; got < sizeof buf;) {
    ssize_t r = read(c, buf + got, sizeof buf - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000, rounds = argc > 2 ? atoi(argv[2]) : 3;
  hpl__lc_opts o = {.nodes = 2, .memory = 64ull << 20};
  hpl__lc *lc;
  char err[256], id[64], data[100];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  hpl_client *a, *b;
  if (hpl_connect(hpl__lc_socket(lc, 0), 5000, &a) || hpl_connect(hpl__lc_socket(lc, 1), 5000, &b))
    return 1;
  memset(data, 'x', sizeof data);
  for (int i = 0; i < OBJS; i++) {
    snprintf(id, sizeof id, "peek/%d", i);
    if (hpl_put(a, id, data, sizeof data, 5000)) return 1;
  }
  pid_t fsrv;
  int fc = floor_open(&fsrv);
  if (fc < 0) return 1;
  pid_t d = hpl__lc_dir_pid(lc);
  printf("%-6s %5s %9s %11s %11s %9s %9s\n", "kind", "round", "wall_us", "client_us",
         "server_us", "sum_us", "x_floor");
  for (int r = 0; r <= rounds; r++) { /* round 0 warms up, unprinted */
    double floor_sum = 0;
    for (int kind = 0; kind < 3; kind++) {
      pid_t srv = kind == 0 ? fsrv : d;
      int reps = r == 0 ? 2000 : n;
      double s0 = cpu_of(srv), c0 = self_cpu(), t0 = now();
      for (int i = 0; i < reps; i++) {
        snprintf(id, sizeof id, "peek/%d", i % OBJS);
        hpl_buf *buf;
        int rc = kind == 0   ? floor_one(fc)
                 : kind == 1 ? hpl_get(b, id, 5000, &buf)
                             : hpl_stat(b, id, 5000, NULL, NULL, NULL, NULL);
        if (rc != 0) {
          fprintf(stderr, "request failed: %s\n", kind ? hpl_errdetail(b) : "floor");
          return 1;
        }
        if (kind == 1) hpl_release(b, buf);
      }
      double t = now() - t0, sc = cpu_of(srv) - s0, cc = self_cpu() - c0;
      double sum = (sc + cc) / reps * 1e6;
      if (kind == 0) floor_sum = sum;
      if (r > 0)
        printf("%-6s %5d %9.1f %11.2f %11.2f %9.2f %9.2f\n",
               kind == 0 ? "floor" : kind == 1 ? "get" : "stat", r, t / reps * 1e6,
               cc / reps * 1e6, sc / reps * 1e6, sum, sum / floor_sum);
    }
  }
  close(fc);
  waitpid(fsrv, NULL, 0);
  hpl_close(a);
  hpl_close(b);
  hpl__lc_stop(lc);
  return 0;
}
