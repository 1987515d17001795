/* bench_coll.c - hoplite collectives on a cluster of real processes, on
 * loopback or on the emulated hosts of bench/cluster.sh.
 *
 *   bench_coll --op bcast [--sizes 1K,1M,64M] [--hosts N] [--reps R]
 *              [--netns PREFIX --addrs A0,A1,...] [--rate 1gbit|none]
 *              [--memory BYTES] [--store-args "..."] [--dir-args "..."]
 *              [--impl NAME] [--no-header] [--out FILE] [--extra-out FILE]
 *
 * Timing, as bench/README-bench.md: the driver picks a start time a few ms
 * ahead on CLOCK_MONOTONIC (one clock for every namespace), every
 * participant sleeps until it (clock_nanosleep, absolute), runs its part,
 * and reads the clock when done; a sample is the latest finish minus the
 * start. Bytes are verified at every participant in every repetition, after
 * the timed part. One warm-up repetition is not counted.
 *
 * bcast: node 0 holds a sealed object; nodes 1..N-1 get it concurrently.
 * The object is deleted between repetitions so each one broadcasts again.
 *
 * reduce: every node holds a source (f32, small integers so any order sums
 * exactly); node 0 reduces them (sum) into a target and gets it.
 * allreduce: every node calls hpl_allreduce with the same arguments.
 * Sources stay across repetitions; targets are deleted between them.
 *
 * Output (stdout, and appended to --out): TSV rows
 *   op size hosts impl median_s min_s max_s ratio_to_bound cpu_pct
 * and, to --extra-out, per size: op size hosts impl source_bytes_sent copies
 * (bytes that left node 0's data port per repetition, in object copies).
 * With HPL_BENCH_TRACE set, reduce/allreduce print every node's finish time
 * per repetition to stderr. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

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

typedef struct part {
  pthread_barrier_t *done; /* every participant finished its timed part */
  hpl_client *c;
  int idx;
  const char *id;
  uint64_t size;
  uint64_t want_sum;
  uint64_t start_ns;
  uint64_t end_ns;
  int rc;
  int bad;
  char err[256];
} part;

static void *bcast_receiver(void *arg) {
  part *p = arg;
  hpl_buf *b = NULL;
  join_host(p->idx);
  hpl__sleep_until_ns(p->start_ns);
  p->rc = hpl_get(p->c, p->id, 300000, &b);
  p->end_ns = hpl__now_ns();
  /* verify only once everyone is done: checking early would take CPU from
   * receivers still in the pipeline */
  pthread_barrier_wait(p->done);
  if (p->rc) {
    snprintf(p->err, sizeof p->err, "%s", hpl_errdetail(p->c));
    return NULL;
  }
  p->bad = hpl_buf_size(b) != p->size || hpl__checksum(hpl_buf_data(b), p->size) != p->want_sum;
  hpl_release(p->c, b);
  return NULL;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
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
  uint64_t memory;
  FILE *out, *extra;
} cfg;

static void emit(cfg *g, const char *line) {
  fputs(line, stdout);
  fflush(stdout);
  if (g->out) {
    fputs(line, g->out);
    fflush(g->out);
  }
}

/* ---- reduce / allreduce */

typedef struct rpart {
  pthread_barrier_t *done;
  hpl_client *c;
  int idx;
  const char *target;
  const char *const *srcs;
  int n;
  int all; /* allreduce: every participant; else only node 0 runs */
  uint64_t size;
  const float *want;
  uint64_t start_ns, end_ns;
  int rc, bad;
  char err[256];
} rpart;

static void *reduce_part(void *arg) {
  rpart *p = arg;
  hpl_buf *b = NULL;
  join_host(p->idx);
  hpl__sleep_until_ns(p->start_ns);
  if (p->all) {
    p->rc = hpl_allreduce(p->c, p->target, p->srcs, (size_t)p->n, 0, HPL_OP_SUM, HPL_DT_F32,
                          300000, &b);
  } else {
    p->rc = hpl_reduce(p->c, p->target, p->srcs, (size_t)p->n, 0, HPL_OP_SUM, HPL_DT_F32, 300000);
    if (p->rc == 0) p->rc = hpl_get(p->c, p->target, 300000, &b);
  }
  p->end_ns = hpl__now_ns();
  pthread_barrier_wait(p->done);
  if (p->rc) {
    snprintf(p->err, sizeof p->err, "%s", hpl_errdetail(p->c));
    return NULL;
  }
  p->bad = hpl_buf_size(b) != p->size || memcmp(hpl_buf_data(b), p->want, p->size) != 0;
  hpl_release(p->c, b);
  return NULL;
}

static const char *const *reduce_sources(cfg *g, hpl_client **cs, uint64_t size, float **want) {
  static char ids[MAXN][64];
  static const char *srcs[MAXN];
  size_t n = size / 4;
  float *w = calloc(n ? n : 1, 4), *d = malloc(size ? size : 1);
  if (!w || !d) die("out of memory");
  for (int i = 0; i < g->hosts; i++) {
    snprintf(ids[i], sizeof ids[i], "bench/%s/src/%llu/%d", g->op, (unsigned long long)size, i);
    srcs[i] = ids[i];
    for (size_t j = 0; j < n; j++) {
      d[j] = (float)(i + (int)(j % 7));
      w[j] += d[j];
    }
    int rc = hpl_put(cs[i], ids[i], d, size, 300000);
    if (rc) {
      fprintf(stderr, "bench_coll: put source: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[i]));
      exit(1);
    }
  }
  free(d);
  *want = w;
  return srcs;
}

static void drop_sources(cfg *g, hpl_client **cs, const char *const *srcs) {
  for (int i = 0; i < g->hosts; i++) hpl_delete(cs[i], srcs[i], 30000);
}

static double reduce_once(cfg *g, hpl_client **cs, uint64_t size, int rep,
                          const char *const *srcs, const float *want) {
  char target[64];
  snprintf(target, sizeof target, "bench/%s/t/%llu/%d", g->op, (unsigned long long)size, rep);
  int all = !strcmp(g->op, "allreduce");
  int np = all ? g->hosts : 1;
  rpart ps[MAXN];
  pthread_t th[MAXN];
  pthread_barrier_t done;
  pthread_barrier_init(&done, NULL, (unsigned)np);
  uint64_t start = hpl__now_ns() + 20 * 1000000ull;
  for (int i = 0; i < np; i++) {
    ps[i] = (rpart){.done = &done, .c = cs[i], .idx = i, .target = target, .srcs = srcs, .n = g->hosts,
                    .all = all, .size = size, .want = want, .start_ns = start};
    pthread_create(&th[i], NULL, reduce_part, &ps[i]);
  }
  uint64_t last = start;
  int failed = 0;
  for (int i = 0; i < np; i++) {
    pthread_join(th[i], NULL);
    if (ps[i].rc || ps[i].bad) {
      fprintf(stderr, "bench_coll: node %d: %s %s\n", i,
              ps[i].rc ? hpl_strerror(ps[i].rc) : "WRONG RESULT", ps[i].err);
      failed = 1;
    }
    if (ps[i].end_ns > last) last = ps[i].end_ns;
  }
  if (getenv("HPL_BENCH_TRACE")) {
    fprintf(stderr, "bench_coll: rep %d ends (ms):", rep);
    for (int i = 0; i < np; i++) fprintf(stderr, " %d:%.1f", i, (double)(ps[i].end_ns - start) / 1e6);
    fprintf(stderr, "\n");
  }
  pthread_barrier_destroy(&done);
  int rc = hpl_delete(cs[0], target, 30000);
  if (rc) fprintf(stderr, "bench_coll: delete: %s\n", hpl_strerror(rc));
  return failed ? -1 : (double)(last - start) / 1e9;
}

/* One broadcast of `size` bytes. Returns the sample in seconds, <0 on error. */
static double bcast_once(cfg *g, hpl_client **cs, uint64_t size, int rep, uint64_t *src_bytes,
                         const uint8_t *data, uint64_t sum) {
  char id[64];
  snprintf(id, sizeof id, "bench/bcast/%llu/%d", (unsigned long long)size, rep);
  int rc = hpl_put(cs[0], id, data, size, 300000);
  if (rc) {
    fprintf(stderr, "bench_coll: put: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[0]));
    return -1;
  }
  uint64_t sent0 = 0, sent1 = 0;
  hpl_counter(cs[0], "data_bytes_sent", 5000, &sent0);
  part ps[MAXN];
  pthread_t th[MAXN];
  uint64_t start = hpl__now_ns() + 20 * 1000000ull;
  pthread_barrier_t done;
  pthread_barrier_init(&done, NULL, (unsigned)(g->hosts - 1));
  for (int i = 1; i < g->hosts; i++) {
    ps[i] = (part){.done = &done, .c = cs[i], .idx = i, .id = id, .size = size, .want_sum = sum,
                   .start_ns = start};
    pthread_create(&th[i], NULL, bcast_receiver, &ps[i]);
  }
  uint64_t last = start;
  int failed = 0;
  for (int i = 1; i < g->hosts; i++) {
    pthread_join(th[i], NULL);
    if (ps[i].rc || ps[i].bad) {
      fprintf(stderr, "bench_coll: node %d: %s %s\n", i,
              ps[i].rc ? hpl_strerror(ps[i].rc) : "WRONG BYTES", ps[i].err);
      failed = 1;
    }
    if (ps[i].end_ns > last) last = ps[i].end_ns;
  }
  pthread_barrier_destroy(&done);
  hpl_counter(cs[0], "data_bytes_sent", 5000, &sent1);
  *src_bytes = sent1 - sent0;
  rc = hpl_delete(cs[0], id, 30000);
  if (rc) fprintf(stderr, "bench_coll: delete: %s\n", hpl_strerror(rc));
  return failed ? -1 : (double)(last - start) / 1e9;
}

static int run(cfg *g) {
  hpl__lc_opts o = {.nodes = g->hosts,
                   .memory = g->memory,
                   .netns_prefix = g->netns,
                   .host_addrs = g->netns ? g->addrs : NULL,
                   .store_args = g->store_args,
                   .dir_args = g->dir_args,
                   .log_level = "warn",
                   .timeout_ms = 20000};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_coll: cannot start the cluster: %s\n", err);
    return 1;
  }
  hpl_client *cs[MAXN];
  for (int i = 0; i < g->hosts; i++)
    if (hpl_connect(hpl__lc_socket(lc, i), 10000, &cs[i])) die("cannot connect to a store");
  double B = parse_rate(g->rate);
  char line[512];
  if (g->header) emit(g, "op\tsize\thosts\timpl\tmedian_s\tmin_s\tmax_s\tratio_to_bound\tcpu_pct\n");
  int status = 0;
  for (int k = 0; k < g->nsizes; k++) {
    uint64_t size = g->sizes[k];
    int is_bcast = !strcmp(g->op, "bcast");
    uint8_t *data = NULL;
    uint64_t sum = 0;
    float *want = NULL;
    const char *const *srcs = NULL;
    if (is_bcast) {
      data = malloc(size ? size : 1);
      if (!data) die("out of memory");
      hpl__fill_pattern(data, size, size ^ 0x5eed);
      sum = hpl__checksum(data, size);
    } else {
      srcs = reduce_sources(g, cs, size, &want);
    }
    double v[256];
    uint64_t srcb = 0, srcb_total = 0;
    uint64_t b0, t0, b1, t1;
    cpu_sample(&b0, &t0);
    int n = 0, bad = 0;
    for (int r = -1; r < g->reps && r < 256; r++) {
      double s = is_bcast ? bcast_once(g, cs, size, r, &srcb, data, sum)
                          : reduce_once(g, cs, size, r, srcs, want);
      if (s < 0) {
        bad = 1;
        break;
      }
      if (r >= 0) {
        v[n++] = s;
        srcb_total += srcb;
      }
    }
    cpu_sample(&b1, &t1);
    free(data);
    free(want);
    if (srcs) drop_sources(g, cs, srcs);
    double cpu = t1 > t0 ? 100.0 * (double)(b1 - b0) / (double)(t1 - t0) : 0;
    if (bad || n == 0) {
      snprintf(line, sizeof line, "%s\t%llu\t%d\t%s\tFAIL\tFAIL\tFAIL\tNA\t%.1f\n", g->op,
               (unsigned long long)size, g->hosts, g->impl, cpu);
      emit(g, line);
      status = 1;
      continue;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    char ratio[32] = "NA";
    if (B > 0 && size > 0) snprintf(ratio, sizeof ratio, "%.3f", med / ((double)size / B));
    snprintf(line, sizeof line, "%s\t%llu\t%d\t%s\t%.6f\t%.6f\t%.6f\t%s\t%.1f\n", g->op,
             (unsigned long long)size, g->hosts, g->impl, med, v[0], v[n - 1], ratio, cpu);
    emit(g, line);
    double copies = size ? (double)srcb_total / n / (double)size : 0;
    fprintf(stderr, "bench_coll: %s %llu B to %d receivers: median %.6f s, node 0 sent %.2f copies\n",
            g->op, (unsigned long long)size, g->hosts - 1, med, copies);
    if (g->extra && is_bcast) {
      fprintf(g->extra, "%s\t%llu\t%d\t%s\t%llu\t%.3f\n", g->op, (unsigned long long)size,
              g->hosts, g->impl, (unsigned long long)(srcb_total / (uint64_t)n), copies);
      fflush(g->extra);
    }
  }
  for (int i = 0; i < g->hosts; i++) hpl_close(cs[i]);
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
      {"out", 1, 0, 'O'},        {"extra-out", 1, 0, 'E'}, {0, 0, 0, 0}};
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
      case 'D': g.dir_args = optarg; break;
      case 'i': g.impl = optarg; break;
      case 'H': g.header = 0; break;
      case 'O':
        if (!(g.out = fopen(optarg, "a"))) die("cannot open --out");
        break;
      case 'E':
        if (!(g.extra = fopen(optarg, "a"))) die("cannot open --extra-out");
        break;
      default: die("see the comment at the top of bench/bench_coll.c for usage");
    }
  }
  if (strcmp(g.op, "bcast") && strcmp(g.op, "reduce") && strcmp(g.op, "allreduce"))
    die("--op must be bcast, reduce or allreduce");
  if (g.hosts < 2 || g.hosts > MAXN) die("--hosts must be 2..64");
  if (g.reps < 1) g.reps = 1;
  char *sz = strdup(sizes);
  for (char *t = strtok(sz, ","); t && g.nsizes < 32; t = strtok(NULL, ","))
    if (hpl__parse_size(t, &g.sizes[g.nsizes++])) die("bad size in --sizes");
  uint64_t maxs = 0;
  for (int k = 0; k < g.nsizes; k++)
    if (g.sizes[k] > maxs) maxs = g.sizes[k];
  /* bcast: a copy and a spare; reduce: source, stream, target (and a
   * forwarded copy for allreduce) */
  if (!g.memory) g.memory = (strcmp(g.op, "bcast") ? 4 : 3) * maxs + (128ull << 20);
  if (g.netns) {
    if (!addrs) die("--netns needs --addrs");
    char *a = strdup(addrs);
    int n = 0;
    for (char *t = strtok(a, ","); t && n < MAXN; t = strtok(NULL, ",")) g.addrs[n++] = t;
    if (n < g.hosts) die("--addrs lists fewer hosts than --hosts");
  }
  return run(&g);
}
