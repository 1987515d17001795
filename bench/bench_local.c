/* bench_local.c - local put, create and get through the public API, for
 * comparing commits: hpl_create + fill (memset) + hpl_seal, hpl_put of
 * bytes already written, and hpl_get + hpl_release of the object, each
 * followed by an untimed hpl_delete. One store; sizes 1 KiB, 1 MiB and
 * 256 MiB unless --size is given.
 *
 * usage: bench_local [--reps N] [--size BYTES] [--store-args "ARGS"]
 * (e.g. --store-args --integrity=off: the copy alone, without the origin's
 * digests). Starts its own local cluster (1 store, 1 GiB pool); prints one line per
 * size and operation (median, min, max); asserts nothing. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"
#include "benchstat.h"

static void die_rc(hpl_client *c, int rc, const char *what) {
  if (!rc) return;
  fprintf(stderr, "bench_local: %s: %s (%s)\n", what, hpl_strerror(rc), hpl_errdetail(c));
  exit(1);
}

static void report(const char *what, uint64_t size, double *v, int n) {
  double med = hpl__bench_median(v, n); /* (sorts v: min and max at its ends) */
  const char *unit = med >= 1000 ? "ms" : "us";
  double k = med >= 1000 ? 1e-3 : 1;
  printf("%-7s %10llu B  median %9.2f %s  min %9.2f  max %9.2f  (%d runs)\n", what,
         (unsigned long long)size, med * k, unit, v[0] * k, v[n - 1] * k, n);
}

static void one_size(hpl_client *c, uint64_t size, int reps) {
  double *t = calloc((size_t)reps, sizeof *t), *ts = calloc((size_t)reps, sizeof *ts);
  uint8_t *src = malloc(size);
  if (!t || !ts || !src) exit(1);
  memset(src, 7, size);
  char id[64];
  double cold = 0;
  /* create, fill, seal (one run first, untimed: pages faulted in) */
  for (int r = -1; r < reps; r++) {
    snprintf(id, sizeof id, "c-%llu-%d", (unsigned long long)size, r);
    uint64_t t0 = hpl__now_ns();
    hpl_buf *b;
    die_rc(c, hpl_create(c, id, size, 30000, &b), "create");
    memset(hpl_buf_data(b), r & 0xff, size);
    uint64_t t1 = hpl__now_ns();
    die_rc(c, hpl_seal(c, b, 30000), "seal");
    double us = (double)(hpl__now_ns() - t0) / 1e3;
    if (r >= 0) t[r] = us, ts[r] = (double)(hpl__now_ns() - t1) / 1e3;
    else cold = us;
    die_rc(c, hpl_delete(c, id, 30000), "delete");
  }
  report("create", size, t, reps);
  report("  seal", size, ts, reps); /* of which the hpl_seal call */
  printf("create  %10llu B  first (cold pages) %9.2f us\n", (unsigned long long)size, cold);
  for (int r = -1; r < reps; r++) {
    snprintf(id, sizeof id, "p-%llu-%d", (unsigned long long)size, r);
    src[0] = (uint8_t)r;
    uint64_t t0 = hpl__now_ns();
    die_rc(c, hpl_put(c, id, src, size, 30000), "put");
    if (r >= 0) t[r] = (double)(hpl__now_ns() - t0) / 1e3;
    die_rc(c, hpl_delete(c, id, 30000), "delete");
  }
  report("put", size, t, reps);
  snprintf(id, sizeof id, "g-%llu", (unsigned long long)size);
  die_rc(c, hpl_put(c, id, src, size, 30000), "put");
  for (int r = -1; r < reps; r++) {
    uint64_t t0 = hpl__now_ns();
    hpl_buf *b;
    die_rc(c, hpl_get(c, id, 30000, &b), "get");
    hpl_release(c, b);
    if (r >= 0) t[r] = (double)(hpl__now_ns() - t0) / 1e3;
  }
  report("get", size, t, reps);
  die_rc(c, hpl_delete(c, id, 30000), "delete");
  free(src);
  free(t);
  free(ts);
}

int main(int argc, char **argv) {
  int reps = 0;
  uint64_t size = 0;
  const char *store_args = NULL;
  static struct option opts[] = {{"reps", 1, 0, 'r'}, {"size", 1, 0, 's'},
                                 {"store-args", 1, 0, 'a'}, {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "r:s:a:", opts, NULL)) != -1) {
    if (ch == 'a') store_args = optarg;
    else if (ch == 'r') reps = atoi(optarg);
    else if (ch == 's') size = strtoull(optarg, NULL, 0);
    else {
      fprintf(stderr, "usage: bench_local [--reps N] [--size BYTES] [--store-args ARGS]\n");
      return 2;
    }
  }
  hpl__lc_opts o = {.nodes = 1, .memory = 1ull << 30, .store_args = store_args};
  hpl__lc *lc;
  char err[256];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_local: cluster: %s\n", err);
    return 1;
  }
  hpl_client *c;
  die_rc(NULL, hpl_connect(hpl__lc_socket(lc, 0), 5000, &c), "connect");
  uint64_t sizes[] = {1024, 1ull << 20, 256ull << 20};
  for (int i = 0; i < 3; i++) {
    if (size && sizes[i] != size && i) continue;
    uint64_t sz = size ? size : sizes[i];
    one_size(c, sz, reps ? reps : sz >= (64ull << 20) ? 10 : 200);
    if (size) break;
  }
  hpl_close(c);
  hpl__lc_stop(lc);
  return 0;
}
