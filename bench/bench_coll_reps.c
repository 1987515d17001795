/* bench_coll_reps.c - one repetition of each bench_coll op: a broadcast
 * (the put timed or not), a reduce or allreduce (and the reduce sources
 * kept across repetitions), a shuffle; each times its participants from a
 * common start, counts the stores' CPU and deletes what it made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "util.h"
#include "bench_shuffle.h"
#include "bench_coll.h"

/* ---- reduce / allreduce */

void hpl__bc_reduce_sources(hpl__bc_cfg *g, hpl_client **cs, uint64_t size) {
  size_t n = size / 4;
  float *d = malloc(size ? size : 1);
  if (!d) hpl__bc_die("out of memory");
  for (int i = 0; i < g->hosts; i++) {
    char id[64];
    snprintf(id, sizeof id, "bench/%s/src/%llu/%d", g->op, (unsigned long long)size, i);
    for (size_t k = 0; k < n; k++) d[k] = hpl__bc_reduce_elem(i, k);
    int rc = hpl_put(cs[i], id, d, size, 300000);
    if (rc) {
      fprintf(stderr, "bench_coll: put source: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[i]));
      exit(1);
    }
  }
  free(d);
}

void hpl__bc_drop_sources(hpl__bc_cfg *g, hpl_client **cs, uint64_t size) {
  for (int i = 0; i < g->hosts; i++) {
    char id[64];
    snprintf(id, sizeof id, "bench/%s/src/%llu/%d", g->op, (unsigned long long)size, i);
    hpl_delete(cs[i], id, 30000);
  }
}

/* The CPU time all the stores have used so far (us): unlike /proc/stat, not
 * swayed by whatever else runs on the machine. */
static uint64_t stores_cpu_us(const hpl__bc_cfg *g, hpl_client **cs) {
  uint64_t sum = 0, v;
  for (int i = 0; i < g->hosts; i++)
    if (hpl_counter(cs[i], "cpu_us", 5000, &v) == 0) sum += v;
  return sum;
}

/* With HPL_BENCH_TRACE set: the start (CLOCK_MONOTONIC, to line up with
 * perf record -k CLOCK_MONOTONIC) and every participant's finish (ms after it). */
static void trace_ends(int rep, const hpl__bc_part *ps, int n, uint64_t start) {
  if (!getenv("HPL_BENCH_TRACE")) return;
  fprintf(stderr, "bench_coll: rep %d from %llu ns (monotonic) ends (ms):", rep,
          (unsigned long long)start);
  for (int i = 0; i < n; i++)
    fprintf(stderr, " %d:%.2f", ps[i].j.idx, (double)(ps[i].r.end_ns - start) / 1e6);
  fprintf(stderr, "\n");
}

/* The timed part of a repetition in which this thread has no part: the
 * participants ps[0..n) run from `start` on (this thread does not wake
 * then: it would take a CPU from them), the stores' CPU is counted. The
 * latest finish (0: one failed). */
static uint64_t run_timed(hpl__bc_cfg *g, hpl_client **cs, hpl__bc_part *ps, int n, uint64_t start, int rep) {
  hpl__bc_gate done;
  uint64_t b0, t0, scpu0 = stores_cpu_us(g, cs);
  hpl__bc_launch(g, ps, n, &done);
  hpl__bc_cpu_sample(&b0, &t0);
  uint64_t pre = hpl__now_ns();
  uint64_t last = hpl__bc_collect(g, ps, n, &done, start, pre, b0, t0);
  g->store_cpu_us += stores_cpu_us(g, cs) - scpu0;
  trace_ends(rep, ps, n, start);
  return last;
}

double hpl__bc_reduce_once(hpl__bc_cfg *g, hpl_client **cs, uint64_t size, int rep) {
  int rs = !strcmp(g->op, "allreduce-rs");
  int all = rs || !strcmp(g->op, "allreduce");
  int np = all ? g->hosts : 1;
  hpl__bc_part ps[HPL__BC_MAXN];
  uint64_t start = hpl__now_ns() + 20 * 1000000ull;
  for (int i = 0; i < np; i++) {
    ps[i] = (hpl__bc_part){.c = cs[i],
                   .j = {.kind = rs ? HPL__BC_JOB_ALLREDUCE_RS : all ? HPL__BC_JOB_ALLREDUCE : HPL__BC_JOB_REDUCE,
                         .idx = i, .hosts = g->hosts,
                         .size = size, .start_ns = start}};
    snprintf(ps[i].j.id, sizeof ps[i].j.id, "bench/%s/t/%llu/%d", g->op, (unsigned long long)size, rep);
    snprintf(ps[i].j.op, sizeof ps[i].j.op, "%s", g->op);
  }
  uint64_t last = run_timed(g, cs, ps, np, start, rep);
  int rc = 0;
  if (rs) { /* the slices and every node's assembled copy */
    for (int i = 0; i < np; i++) {
      char id[128];
      snprintf(id, sizeof id, "%s/s%d", ps[0].j.id, i);
      rc |= hpl_delete(cs[i], id, 30000);
      snprintf(id, sizeof id, "%s/a%d", ps[0].j.id, i);
      rc |= hpl_delete(cs[i], id, 30000);
    }
  } else {
    rc = hpl_delete(cs[0], ps[0].j.id, 30000);
  }
  if (rc) fprintf(stderr, "bench_coll: delete: %s\n", hpl_strerror(rc));
  return last ? (double)(last - start) / 1e9 : -1;
}

/* One broadcast of `size` bytes. Returns the sample in seconds, <0 on error. */
double hpl__bc_bcast_once(hpl__bc_cfg *g, hpl_client **cs, uint64_t size, int rep, uint64_t *src_bytes,
                         const uint8_t *data, uint64_t sum) {
  char id[64];
  snprintf(id, sizeof id, "bench/bcast/%llu/%d", (unsigned long long)size, rep);
  uint64_t sent0 = 0, sent1 = 0;
  int rc;
  if (!g->put_timed) {
    rc = hpl_put(cs[0], id, data, size, 300000);
    if (rc) {
      fprintf(stderr, "bench_coll: put: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[0]));
      return -1;
    }
  }
  hpl_counter(cs[0], "data_bytes_sent", 5000, &sent0);
  uint64_t scpu0 = stores_cpu_us(g, cs);
  hpl__bc_part ps[HPL__BC_MAXN];
  hpl__bc_gate done;
  uint64_t start = hpl__now_ns() + 20 * 1000000ull, b0, t0;
  /* --put-timed: the receivers are already waiting when the put starts */
  uint64_t ask = g->put_timed ? start - 5 * 1000000ull : start;
  for (int i = 1; i < g->hosts; i++) {
    ps[i - 1] = (hpl__bc_part){.c = cs[i], .j = {.kind = HPL__BC_JOB_GET, .idx = i, .size = size, .sum = sum,
                                         .start_ns = ask}};
    snprintf(ps[i - 1].j.id, sizeof ps[i - 1].j.id, "%s", id);
  }
  hpl__bc_launch(g, ps, g->hosts - 1, &done);
  hpl__bc_cpu_sample(&b0, &t0);
  uint64_t pre = hpl__now_ns();
  if (g->put_timed) { /* else this thread has no part and sleeps through the start */
    hpl__sleep_until_ns(start);
    rc = hpl_put(cs[0], id, data, size, 300000);
    if (rc) fprintf(stderr, "bench_coll: put: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(cs[0]));
  }
  uint64_t last = hpl__bc_collect(g, ps, g->hosts - 1, &done, start, pre, b0, t0);
  g->store_cpu_us += stores_cpu_us(g, cs) - scpu0;
  trace_ends(rep, ps, g->hosts - 1, start);
  hpl_counter(cs[0], "data_bytes_sent", 5000, &sent1);
  *src_bytes = sent1 - sent0;
  rc = hpl_delete(cs[0], id, 30000);
  if (rc) fprintf(stderr, "bench_coll: delete: %s\n", hpl_strerror(rc));
  return last ? (double)(last - start) / 1e9 : -1;
}

/* One shuffle of partitions of `size` bytes (bench_shuffle.h): every node
 * first fills its partitions (untimed, a job of its own), then at the start
 * puts them and gets its own. The makers delete them afterwards. Returns
 * the sample in seconds, <0 on error. */
double hpl__bc_shuffle_once(hpl__bc_cfg *g, hpl_client **cs, uint64_t size, int rep) {
  hpl__bc_part ps[HPL__BC_MAXN];
  hpl__bc_gate done;
  int n = g->hosts;
  for (int i = 0; i < n; i++)
    ps[i] = (hpl__bc_part){.c = cs[i], .j = {.kind = HPL__BC_JOB_SHUFFLE_PREP, .idx = i, .hosts = n,
                                     .rep = rep, .size = size}};
  /* the fill is not timed: its CPU is not counted either */
  uint64_t busy = g->cpu_busy, total = g->cpu_total;
  hpl__bc_launch(g, ps, n, &done);
  int ok = hpl__bc_collect(g, ps, n, &done, 0, 0, 0, 0) != 0;
  g->cpu_busy = busy;
  g->cpu_total = total;
  if (!ok) return -1;
  uint64_t start = hpl__now_ns() + 20 * 1000000ull;
  for (int i = 0; i < n; i++) {
    ps[i].j.kind = HPL__BC_JOB_SHUFFLE;
    ps[i].j.start_ns = start;
    ps[i].r = (hpl__bc_jres){0};
  }
  uint64_t last = run_timed(g, cs, ps, n, start, rep);
  for (int i = 0; i < n; i++) { /* every receiver has released its copies */
    int rc = hpl__bsh_drop(cs[i], i, n, rep);
    if (rc) fprintf(stderr, "bench_coll: delete node %d's partitions: %s (%s)\n", i,
                    hpl_strerror(rc), hpl_errdetail(cs[i]));
  }
  return last ? (double)(last - start) / 1e9 : -1;
}
