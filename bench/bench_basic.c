/* bench_basic.c - single-machine figures of the foundation: a put that a
 * receiver on the other store already waits for (into fresh pool pages:
 * the receiver pulls while the put still copies), local put throughput,
 * local get latency (zero-copy: independent of size), remote get of an
 * inline object, remote get throughput over loopback.
 *
 * usage: bench_basic [--reps N] [--size BYTES]
 * Starts its own local cluster (2 stores); prints a table; asserts nothing. */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"
#include "benchstat.h"

static void die_rc(hpl_client *c, int rc, const char *what) {
  if (!rc) return;
  fprintf(stderr, "bench_basic: %s: %s (%s)\n", what, hpl_strerror(rc), hpl_errdetail(c));
  exit(1);
}

/* The receiver of the first put: gets it, notes when it had the bytes. */
typedef struct waiter {
  hpl_client *c;
  const char *id;
  uint64_t size, sum, done_ns;
  int rc;
} waiter;

static void *wait_get(void *arg) {
  waiter *w = arg;
  hpl_buf *buf;
  w->rc = hpl_get(w->c, w->id, 60000, &buf);
  w->done_ns = hpl__now_ns();
  if (w->rc) return NULL;
  if (hpl_buf_size(buf) != w->size || hpl__checksum(hpl_buf_data(buf), w->size) != w->sum)
    w->rc = HPL_EPROTO;
  hpl_release(w->c, buf);
  return NULL;
}

int main(int argc, char **argv) {
  int reps = 20;
  uint64_t size = 100ull << 20;
  static struct option opts[] = {{"reps", 1, 0, 'r'}, {"size", 1, 0, 's'}, {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "r:s:", opts, NULL)) != -1) {
    if (ch == 'r') reps = atoi(optarg);
    else if (ch == 's' && hpl__parse_size(optarg, &size) == 0) continue;
    else {
      fprintf(stderr, "usage: bench_basic [--reps N] [--size BYTES]\n");
      return 2;
    }
  }
  if (reps < 3) reps = 3;
  hpl__lc_opts o = {.nodes = 2, .memory = 4 * size + (256ull << 20)};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_basic: %s\n", err);
    return 1;
  }
  hpl_client *a, *b;
  die_rc(NULL, hpl_connect(hpl__lc_socket(lc, 0), 5000, &a), "connect");
  die_rc(NULL, hpl_connect(hpl__lc_socket(lc, 1), 5000, &b), "connect");
  uint8_t *data = malloc(size);
  hpl__fill_pattern(data, size, 1);
  double *v = calloc((size_t)reps, sizeof *v);
  char id[64], sz[32];
  hpl__fmt_bytes(size, sz, sizeof sz);
  printf("hoplite bench_basic: 1 directory + 2 stores on 127.0.0.1, %d repetitions, medians\n\n",
         reps);
  printf("%-44s %14s %12s\n", "measurement", "value", "unit");

  /* the first put (fresh pool pages) while a receiver on the other store
   * waits for it: one sample, as pages are fresh only once */
  waiter w = {.c = b, .id = "put/streamed", .size = size, .sum = hpl__checksum(data, size)};
  pthread_t wt;
  if (pthread_create(&wt, NULL, wait_get, &w)) die_rc(NULL, HPL_ENOMEM, "thread");
  struct timespec pause = {0, 100000000}; /* the get is waiting by then */
  nanosleep(&pause, NULL);
  uint64_t t0 = hpl__now_ns();
  die_rc(a, hpl_put(a, w.id, data, size, 60000), "put");
  double put_s = (double)(hpl__now_ns() - t0) / 1e9;
  pthread_join(wt, NULL);
  die_rc(b, w.rc, "get of the streamed put");
  printf("%-44s %14.1f %12s\n", "first put, a remote receiver waiting: put", put_s * 1e3, "ms");
  printf("%-44s %14.1f %12s\n", "  the receiver has the bytes after",
         (double)(w.done_ns - t0) / 1e6, "ms");
  die_rc(a, hpl_delete(a, w.id, 5000), "delete");

  /* local put: the first into fresh pool pages, then into reused pages */
  t0 = hpl__now_ns();
  die_rc(a, hpl_put(a, "put/cold", data, size, 60000), "put");
  double cold = (double)(hpl__now_ns() - t0) / 1e9;
  die_rc(a, hpl_delete(a, "put/cold", 5000), "delete");
  for (int i = 0; i < reps; i++) {
    snprintf(id, sizeof id, "put/%d", i);
    t0 = hpl__now_ns();
    die_rc(a, hpl_put(a, id, data, size, 60000), "put");
    v[i] = (double)(hpl__now_ns() - t0) / 1e9;
    die_rc(a, hpl_delete(a, id, 5000), "delete");
  }
  double warm = hpl__bench_median(v, reps);
  printf("%-44s %14.2f %12s\n", "local put, first touch of pool pages", (double)size / cold / 1e9,
         "GB/s");
  printf("%-44s %14.2f %12s\n", "local put, reused pool pages", (double)size / warm / 1e9, "GB/s");

  /* local get latency, small and large */
  die_rc(a, hpl_put(a, "get/small", data, 1024, 5000), "put");
  die_rc(a, hpl_put(a, "get/large", data, size, 60000), "put");
  const char *ids[2] = {"get/small", "get/large"};
  double lat[2];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < reps * 10; i++) {
      hpl_buf *buf;
      t0 = hpl__now_ns();
      die_rc(a, hpl_get(a, ids[k], 5000, &buf), "get");
      double s = (double)(hpl__now_ns() - t0) / 1e9;
      hpl_release(a, buf);
      if (i % 10 == 0) v[i / 10] = s;
    }
    lat[k] = hpl__bench_median(v, reps);
  }
  printf("%-44s %14.1f %12s\n", "local get latency, 1 KiB", lat[0] * 1e6, "us");
  char line[80];
  snprintf(line, sizeof line, "local get latency, %s", sz);
  printf("%-44s %14.1f %12s\n", line, lat[1] * 1e6, "us");

  /* remote get of an inline object (served by the directory) */
  for (int i = 0; i < reps; i++) {
    snprintf(id, sizeof id, "inline/%d", i);
    die_rc(a, hpl_put(a, id, data, 1024, 5000), "put");
    hpl_buf *buf;
    t0 = hpl__now_ns();
    die_rc(b, hpl_get(b, id, 5000, &buf), "get");
    v[i] = (double)(hpl__now_ns() - t0) / 1e9;
    hpl_release(b, buf);
  }
  printf("%-44s %14.1f %12s\n", "remote get latency, 1 KiB inline", hpl__bench_median(v, reps) * 1e6, "us");
  uint64_t rx;
  hpl_counter(b, "data_bytes_received", 5000, &rx);
  printf("%-44s %14llu %12s\n", "  (data-port bytes received by the getter)", (unsigned long long)rx,
         "B");

  /* remote get throughput */
  int n = reps < 8 ? reps : 8;
  for (int i = 0; i < n; i++) {
    snprintf(id, sizeof id, "remote/%d", i);
    die_rc(a, hpl_put(a, id, data, size, 60000), "put");
    hpl_buf *buf;
    t0 = hpl__now_ns();
    die_rc(b, hpl_get(b, id, 60000, &buf), "get");
    v[i] = (double)(hpl__now_ns() - t0) / 1e9;
    if (i == 0 && hpl__checksum(hpl_buf_data(buf), size) != hpl__checksum(data, size)) {
      fprintf(stderr, "bench_basic: wrong bytes\n");
      return 1;
    }
    hpl_release(b, buf);
    die_rc(a, hpl_delete(a, id, 5000), "delete"); /* by its maker (directory/admin.c) */
  }
  snprintf(line, sizeof line, "remote get throughput, %s, loopback", sz);
  printf("%-44s %14.2f %12s\n", line, (double)size / hpl__bench_median(v, n) / 1e9, "GB/s");
  hpl_close(a);
  hpl_close(b);
  hpl__lc_stop(lc);
  free(data);
  free(v);
  return 0;
}
