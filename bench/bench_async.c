/* bench_async.c - 1 KiB gets per second on loopback from one thread with
 * 1, 16 and 256 requests in flight: blocking calls (hpl_get, or
 * hpl_get_many of that many ids: the only way a blocking caller has
 * several in flight from one thread) against the async calls driven by a
 * plain epoll loop (hpl_async_fd, hpl_async_poll), which is also the
 * example of such a loop that docs/async.md describes.
 *
 * usage: bench_async [--gets N]   (gets per measurement, default 50000)
 * Starts its own local cluster (1 store); prints a table; asserts nothing. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

#define NOBJ 4096
#define OBJ_SIZE 1024

static char ids[NOBJ][32];

static void die_rc(hpl_client *c, int rc, const char *what) {
  if (!rc) return;
  fprintf(stderr, "bench_async: %s: %s (%s)\n", what, hpl_strerror(rc), hpl_errdetail(c));
  exit(1);
}

/* n blocking gets, `depth` ids per call. Returns gets/s. */
static double blocking(hpl_client *c, size_t n, size_t depth) {
  hpl_buf *bufs[256];
  int rcs[256];
  const char *batch[256];
  uint64_t t0 = hpl__now_ns();
  for (size_t done = 0; done < n; done += depth) {
    for (size_t j = 0; j < depth; j++) batch[j] = ids[(done + j) % NOBJ];
    if (depth == 1) die_rc(c, hpl_get(c, batch[0], 10000, &bufs[0]), "get");
    else die_rc(c, hpl_get_many(c, batch, depth, 10000, bufs, rcs), "get_many");
    for (size_t j = 0; j < depth; j++) hpl_release(c, bufs[j]);
  }
  return (double)n / ((double)(hpl__now_ns() - t0) / 1e9);
}

/* n async gets, `depth` kept in flight, from an epoll loop. Returns gets/s. */
static double async_loop(hpl_client *c, size_t n, size_t depth) {
  int fd;
  die_rc(c, hpl_async_fd(c, &fd), "async fd");
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die_rc(c, HPL_ESYS, "epoll");
  size_t submitted = 0, done = 0;
  uint64_t t0 = hpl__now_ns();
  for (; submitted < depth && submitted < n; submitted++)
    die_rc(c, hpl_async_get(c, ids[submitted % NOBJ], 10000, submitted), "submit");
  hpl_completion comps[64];
  while (done < n) {
    /* the loop: wait for the descriptor, at most until the next deadline */
    struct epoll_event out;
    int64_t t = hpl_async_timeout_ms(c);
    epoll_wait(ep, &out, 1, t < 0 ? -1 : (int)t);
    int k;
    while ((k = hpl_async_poll(c, comps, 64)) > 0) {
      for (int i = 0; i < k; i++) {
        if (comps[i].status) {
          fprintf(stderr, "bench_async: get %llu: %s\n", (unsigned long long)comps[i].tag,
                  comps[i].detail);
          exit(1);
        }
        hpl_release(c, comps[i].buf);
        done++;
        if (submitted < n) { /* keep `depth` in flight */
          die_rc(c, hpl_async_get(c, ids[submitted % NOBJ], 10000, submitted), "submit");
          submitted++;
        }
      }
      if (k < 64) break;
    }
    die_rc(c, k < 0 ? k : 0, "poll");
  }
  double rate = (double)n / ((double)(hpl__now_ns() - t0) / 1e9);
  close(ep);
  return rate;
}

int main(int argc, char **argv) {
  size_t n = 50000;
  static struct option opts[] = {{"gets", 1, 0, 'n'}, {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
    if (ch == 'n' && atol(optarg) > 0) n = (size_t)atol(optarg);
    else {
      fprintf(stderr, "usage: bench_async [--gets N]\n");
      return 2;
    }
  }
  hpl__lc_opts o = {.nodes = 1, .memory = 256ull << 20};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_async: %s\n", err);
    return 1;
  }
  hpl_client *c, *ca;
  die_rc(NULL, hpl_connect(hpl__lc_socket(lc, 0), 5000, &c), "connect");
  die_rc(NULL, hpl_connect(hpl__lc_socket(lc, 0), 5000, &ca), "connect");
  static uint8_t data[OBJ_SIZE];
  memset(data, 7, sizeof data);
  for (size_t i = 0; i < NOBJ; i++) {
    snprintf(ids[i], sizeof ids[i], "ba/%zu", i);
    die_rc(c, hpl_put(c, ids[i], data, sizeof data, 5000), "put");
  }
  printf("hoplite bench_async: 1 KiB gets of local objects, 1 store on this machine, one "
         "thread, %zu gets each\n\n%-10s %16s %16s %8s\n", n, "in flight", "blocking get/s",
         "async get/s", "ratio");
  const size_t depths[] = {1, 16, 256};
  const char *only = getenv("BENCH_ASYNC_DEPTH"); /* profiling one depth */
  for (size_t d = 0; d < 3; d++) {
    if (only && (size_t)atol(only) != depths[d]) continue;
    blocking(c, n / 10, depths[d]); /* warm-up */
    double b = blocking(c, n, depths[d]);
    async_loop(ca, n / 10, depths[d]);
    double a = async_loop(ca, n, depths[d]);
    printf("%-10zu %16.0f %16.0f %8.2f\n", depths[d], b, a, a / b);
  }
  printf("\n(blocking with more than 1 in flight: hpl_get_many of that many ids per call)\n");
  hpl_close(c);
  hpl_close(ca);
  hpl__lc_stop(lc);
  return 0;
}
