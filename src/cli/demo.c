/* demo.c - `hoplite demo`: the README's main job. Starts a local cluster,
 * broadcasts objects from node 0 to every other node and prints what
 * happened and how fast. */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

typedef struct demo_rx {
  hpl_client *c;
  const char *id;
  uint64_t start_ns, end_ns;
  uint64_t sum;
  int rc;
  int direct; /* read from the directory by the client itself */
  char err[256];
} demo_rx;

static void *demo_get(void *arg) {
  demo_rx *r = arg;
  hpl_buf *b;
  r->rc = hpl_get(r->c, r->id, 60000, &b);
  r->end_ns = hpl__now_ns();
  if (r->rc) {
    snprintf(r->err, sizeof r->err, "%s", hpl_errdetail(r->c));
    return NULL;
  }
  r->sum = hpl__checksum(hpl_buf_data(b), hpl_buf_size(b));
  r->direct = !hpl_buf_shared(b);
  hpl_release(r->c, b);
  return NULL;
}

static uint64_t counter(hpl_client *c, const char *name) {
  uint64_t v = 0;
  hpl_counter(c, name, 5000, &v);
  return v;
}

/* Broadcast `size` bytes from node 0 to all others; print a report.
 * Returns 0 if every receiver got the right bytes. */
static int demo_broadcast(hpl_client **cs, int n, const char *id, uint64_t size) {
  char b1[32], b2[32];
  uint8_t *data = malloc(size ? size : 1);
  if (!data) return 1;
  hpl__fill_pattern(data, size, 42);
  uint64_t want = hpl__checksum(data, size);
  uint64_t sent0 = counter(cs[0], "data_bytes_sent");
  uint64_t t0 = hpl__now_ns();
  int rc = hpl_put(cs[0], id, data, size, 30000);
  uint64_t t1 = hpl__now_ns();
  free(data);
  if (rc) {
    printf("  put failed: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[0]));
    return 1;
  }
  double put_s = (double)(t1 - t0) / 1e9;
  printf("\n[%s] put %s on node-0 in %.3f ms (%.2f GB/s)\n", id,
         hpl__fmt_bytes(size, b1, sizeof b1), put_s * 1e3,
         put_s > 0 ? (double)size / put_s / 1e9 : 0);
  printf("  %d concurrent gets on node-1..node-%d:\n", n - 1, n - 1);
  demo_rx rx[64];
  pthread_t th[64];
  uint64_t inl0[64], rcv0[64];
  for (int i = 1; i < n; i++) {
    inl0[i] = counter(cs[i], "inline_gets");
    rcv0[i] = counter(cs[i], "data_bytes_received");
  }
  uint64_t start = hpl__now_ns();
  for (int i = 1; i < n; i++) {
    rx[i] = (demo_rx){.c = cs[i], .id = id, .start_ns = start};
    pthread_create(&th[i], NULL, demo_get, &rx[i]);
  }
  int bad = 0;
  uint64_t last = start;
  for (int i = 1; i < n; i++) {
    pthread_join(th[i], NULL);
    if (rx[i].end_ns > last) last = rx[i].end_ns;
  }
  printf("  %-8s %10s %12s %10s %s\n", "node", "get (ms)", "GB/s", "bytes ok", "how");
  for (int i = 1; i < n; i++) {
    double s = (double)(rx[i].end_ns - start) / 1e9;
    if (rx[i].rc) {
      printf("  node-%-3d FAILED: %s (%s)\n", i, hpl_strerror(rx[i].rc), rx[i].err);
      bad = 1;
      continue;
    }
    int ok = rx[i].sum == want;
    bad |= !ok;
    uint64_t inl = counter(cs[i], "inline_gets") - inl0[i];
    uint64_t rcv = counter(cs[i], "data_bytes_received") - rcv0[i];
    char how[96];
    if (rx[i].direct)
      snprintf(how, sizeof how, "inline, read from the directory by the client");
    else if (inl)
      snprintf(how, sizeof how, "inline, served by the directory via the store");
    else
      snprintf(how, sizeof how, "pulled %s from a peer's data port",
               hpl__fmt_bytes(rcv, b1, sizeof b1));
    printf("  node-%-3d %10.3f %12.2f %10s %s\n", i, s * 1e3, s > 0 ? (double)size / s / 1e9 : 0,
           ok ? "yes" : "NO", how);
  }
  double all = (double)(last - start) / 1e9;
  uint64_t sent = counter(cs[0], "data_bytes_sent") - sent0;
  printf("  all %d receivers done in %.3f ms; node-0 sent %s over its data port (%.2f copies)\n",
         n - 1, all * 1e3, hpl__fmt_bytes(sent, b2, sizeof b2),
         size ? (double)sent / (double)size : 0.0);
  return bad;
}

/* Every node holds an f32 array; node-0 reduces them (sum) and checks the
 * result; then every node runs an allreduce of the same arrays. */
static int demo_reduce(hpl_client **cs, int n, uint64_t size) {
  char b1[32];
  size_t count = (size_t)(size / 4);
  float *d = malloc(count * 4);
  char ids[16][32];
  const char *srcs[16];
  if (!d) return 1;
  for (int i = 0; i < n; i++) {
    snprintf(ids[i], sizeof ids[i], "demo/grad-%d", i);
    srcs[i] = ids[i];
    for (size_t j = 0; j < count; j++) d[j] = (float)(i + (int)(j % 5));
    int rc = hpl_put(cs[i], ids[i], d, count * 4, 30000);
    if (rc) {
      printf("  put failed: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[i]));
      free(d);
      return 1;
    }
  }
  free(d);
  printf("\n[demo/sum] every node put an f32 array of %s; node-0 reduces them (sum)\n",
         hpl__fmt_bytes(count * 4, b1, sizeof b1));
  uint64_t t0 = hpl__now_ns();
  int rc = hpl_reduce(cs[0], "demo/sum", srcs, (size_t)n, 0, HPL_OP_SUM, HPL_DT_F32, 30000);
  hpl_buf *b = NULL;
  if (!rc) rc = hpl_get(cs[0], "demo/sum", 60000, &b);
  double s = (double)(hpl__now_ns() - t0) / 1e9;
  if (rc) {
    printf("  reduce failed: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[0]));
    return 1;
  }
  const float *r = hpl_buf_data(b);
  int ok = hpl_buf_size(b) == count * 4;
  float base = (float)(n * (n - 1) / 2);
  for (size_t j = 0; ok && j < count; j++) ok = r[j] == base + (float)(n * (int)(j % 5));
  printf("  result at node-0 in %.3f ms (%.2f GB/s of input per source): first elements %.0f %.0f "
         "%.0f ..., %s\n",
         s * 1e3, s > 0 ? (double)(count * 4) / s / 1e9 : 0, r[0], r[1], r[2],
         ok ? "correct" : "WRONG");
  hpl_release(cs[0], b);
  char *which = NULL;
  if (hpl_reduce_sources(cs[0], "demo/sum", 5000, &which) == 0) {
    printf("  sources in tree (arrival) order:");
    for (char *l = strtok(which, "\n"); l; l = strtok(NULL, "\n")) printf(" %s", l);
    printf("\n");
    hpl_free(which);
  }
  return ok ? 0 : 1;
}

int hpl__cli_demo(int argc, char **argv) {
  int nodes = 3;
  uint64_t size = 100ull << 20;
  static struct option opts[] = {{"nodes", 1, 0, 'n'}, {"size", 1, 0, 's'}, {0, 0, 0, 0}};
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "n:s:", opts, NULL)) != -1) {
    switch (ch) {
      case 'n': nodes = atoi(optarg); break;
      case 's':
        if (hpl__parse_size(optarg, &size)) {
          fprintf(stderr, "hoplite demo: bad --size '%s'\n", optarg);
          return 2;
        }
        break;
      default: fprintf(stderr, "usage: hoplite demo [--nodes N] [--size BYTES]\n"); return 2;
    }
  }
  if (nodes < 2 || nodes > 16) {
    fprintf(stderr, "hoplite demo: --nodes must be 2..16\n");
    return 2;
  }
  char b[32];
  printf("hoplite demo: starting a local cluster (1 directory + %d stores on 127.0.0.1)...\n",
         nodes);
  hpl__lc_opts o = {.nodes = nodes, .memory = 2 * size + (256ull << 20)};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "hoplite demo: cannot start the cluster: %s\n", err);
    return 1;
  }
  printf("  directory on 127.0.0.1:%d; stores node-0..node-%d with %s pools; logs in %s\n",
         hpl__lc_dir_port(lc), nodes - 1, hpl__fmt_bytes(o.memory, b, sizeof b),
         hpl__lc_work_dir(lc));
  hpl_client *cs[16];
  int bad = 0;
  for (int i = 0; i < nodes; i++) {
    int rc = hpl_connect(hpl__lc_socket(lc, i), 5000, &cs[i]);
    if (rc) {
      fprintf(stderr, "hoplite demo: cannot connect to node-%d: %s\n", i, hpl_strerror(rc));
      hpl__lc_stop(lc);
      return 1;
    }
  }
  bad |= demo_broadcast(cs, nodes, "demo/small", 1024);
  bad |= demo_broadcast(cs, nodes, "demo/large", size);
  bad |= demo_reduce(cs, nodes, size / 4 < (64ull << 20) ? size / 4 : (64ull << 20));
  printf("\n%s\n", bad ? "demo FAILED"
                        : "demo OK: every receiver got the right bytes and the reduce is right");
  for (int i = 0; i < nodes; i++) hpl_close(cs[i]);
  hpl__lc_stop(lc);
  return bad;
}
