/* bench_dirscale_phase.c - bench_dirscale's phases against one directory
 * (see bench_dirscale.h): idle (heartbeats alone), once and spread (one
 * object from node 0 to every other node), many (--objects objects, each
 * node fetching --per-node of them); what each row measures (decisions
 * and their rate, the directory's CPU, reply latencies) and the tree the
 * answers form. The table they fill and main are bench_dirscale.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "hoplite.h"
#include "util.h"

#include "bench_dirscale.h"

/* ------------------------------------------------------------------ the tree */

/* The tree object `obj`'s answers form: each receiver's parent is the
 * sender it was last named. Fills depth and fan-out; counts the nodes not
 * reached from the origin (no answer, a chain that does not end at the
 * origin, or a cycle). */
static void tree(hpl__ds_run *r, int n, int obj, int origin, hpl__ds_row *w) {
  int *parent = malloc((size_t)n * sizeof *parent), *depth = malloc((size_t)n * sizeof *depth);
  int *kids = calloc((size_t)n, sizeof *kids);
  for (int i = 0; i < n; i++) {
    const hpl__ds_fetch *f = hpl__ds_fetch_of(r, i, obj);
    parent[i] = f && f->sender ? hpl__ds_node_index(r, f->sender) : -1;
    depth[i] = -1;
    if (parent[i] >= 0) kids[parent[i]]++;
  }
  depth[origin] = 0;
  uint64_t unreached = 0, sum = 0, reached = 0;
  int maxd = 0;
  for (int i = 0; i < n; i++) {
    if (!hpl__ds_fetch_of(r, i, obj)) continue; /* not a receiver of it */
    /* walk up to a node of known depth (at most n hops: more is a cycle) */
    int cur = i, hops = 0;
    while (cur >= 0 && depth[cur] < 0 && hops <= n) {
      cur = parent[cur];
      hops++;
    }
    if (cur < 0 || depth[cur] < 0) {
      unreached++;
      continue;
    }
    int d = depth[cur] + hops;
    for (int c = i; c != cur; c = parent[c]) depth[c] = d--;
    sum += (uint64_t)depth[i];
    reached++;
    if (depth[i] > maxd) maxd = depth[i];
  }
  int fan = 0, senders = 0;
  for (int i = 0; i < n; i++) {
    if (kids[i] > fan) fan = kids[i];
    senders += kids[i] > 0;
  }
  w->depth_max = maxd;
  w->depth_mean = reached ? (double)sum / (double)reached : 0;
  w->fan_max = fan;
  w->senders = senders;
  w->unreached = unreached;
  free(parent);
  free(depth);
  free(kids);
}

/* ------------------------------------------------------------------ the phases */

static double idle_cpu_per_s; /* the idle phase's directory CPU, us per second (this N) */

static void fill_lat(hpl__ds_run *r, hpl__ds_row *w) {
  hpl__ds_stats *st = hpl__ds_stats_of(r);
  w->acq_p50 = hpl__ds_h_pct(&st->acq_lat, 0.5);
  w->acq_p99 = hpl__ds_h_pct(&st->acq_lat, 0.99);
  w->hb_p50 = hpl__ds_h_pct(&st->hb_lat, 0.5);
  w->hb_p99 = hpl__ds_h_pct(&st->hb_lat, 0.99);
  w->hb_late = st->hb_late;
  w->closed = st->closed;
}

/* A phase's decisions: answers, refusals and the unfinished into w; the
 * answers' window (from t0 to the last answer, else t_ans), their rate, the
 * directory's CPU share over it and its CPU per decision less what
 * heartbeats cost meanwhile (idle_cpu_per_s), the latencies. Returns when
 * the last fetch that was asked for completed (0: none). */
static uint64_t answers_window(hpl__ds_run *r, const hpl__ds_stats *st, hpl__ds_row *w, int left,
                               uint64_t t0, uint64_t t_ans, uint64_t c0, uint64_t c_ans) {
  int nf;
  const hpl__ds_fetch *f = hpl__ds_fetches(r, &nf);
  uint64_t last_done = 0, last_ans = 0;
  for (int k = 0; k < nf; k++) {
    if (f[k].done_ns > last_done && f[k].ask_at_ns) last_done = f[k].done_ns;
    if (f[k].answered_ns > last_ans) last_ans = f[k].answered_ns;
  }
  w->decisions = st->answers;
  w->refused = st->refusals;
  w->unfinished = (uint64_t)left;
  double win = (double)((last_ans ? last_ans : t_ans) - t0) / 1e9;
  w->secs = win;
  w->rate = win > 0 ? (double)st->answers / win : 0;
  double span = (double)(t_ans - t0 + 20000000ull) / 1e9; /* t0 was 20 ms ahead */
  double cpu = (double)(c_ans - c0) - idle_cpu_per_s * span;
  w->cpu_pct = (double)(c_ans - c0) / span / 1e4;
  w->us_per_dec = st->answers ? (cpu > 0 ? cpu : 0) / (double)st->answers : 0;
  fill_lat(r, w);
  return last_done;
}

static void phase_idle(hpl__ds_run *r, pid_t dir, int n, hpl__ds_row *w) {
  hpl__ds_stats_reset(r);
  uint64_t c0 = hpl__ds_proc_cpu_us(dir), t0 = hpl__now_ns() / 1000;
  hpl__ds_run_for(r, (int64_t)hpl__ds.idle_s * 1000);
  uint64_t c1 = hpl__ds_proc_cpu_us(dir), t1 = hpl__now_ns() / 1000;
  hpl__ds_stats *st = hpl__ds_stats_of(r);
  w->secs = (double)(t1 - t0) / 1e6;
  idle_cpu_per_s = (double)(c1 - c0) / w->secs;
  w->cpu_pct = idle_cpu_per_s / 1e4;
  w->decisions = 0;
  w->us_per_hb = st->hb_answered ? (double)(c1 - c0) / (double)st->hb_answered : 0;
  w->rate = (double)st->hb_answered / w->secs; /* heartbeats/s in this row */
  w->us_per_dec = w->us_per_hb;
  fill_lat(r, w);
  printf("  idle: %llu heartbeats answered in %.1f s (%.0f/s), directory %.2f%% of a core, "
         "%.1f us per heartbeat\n", (unsigned long long)st->hb_answered, w->secs, w->rate,
         w->cpu_pct, w->us_per_hb);
  (void)n;
}

/* One object from node 0 to every other node, asked at once (spread_s 0)
 * or spread evenly over spread_s seconds. */
static void phase_bcast(hpl__ds_run *r, pid_t dir, int n, int spread_s, hpl__ds_row *w) {
  static int seq;
  char prefix[32];
  snprintf(prefix, sizeof prefix, "b%d-", ++seq);
  int src = 0;
  if (hpl__ds_objects(r, prefix, 1, &src, hpl__ds.size) != 0) {
    hpl__ds_failures++;
    return;
  }
  hpl__ds_stats_reset(r);
  uint64_t c0 = hpl__ds_proc_cpu_us(dir), t0 = hpl__now_ns() + 20000000ull; /* 20 ms on */
  for (int i = 1; i < n; i++)
    hpl__ds_want(r, i, 0, t0 + (spread_s ? (uint64_t)spread_s * 1000000000ull * (uint64_t)(i - 1) /
                                                (uint64_t)(n - 1)
                                          : 0));
  /* the decisions' window: until every receiver has its answer */
  uint64_t end = hpl__now_ms() + (uint64_t)hpl__ds.phase_timeout_s * 1000, c_ans = 0, t_ans = 0;
  hpl__ds_stats *st = hpl__ds_stats_of(r);
  while (hpl__now_ms() < end) {
    hpl__ds_run_for(r, 5);
    if (st->answers + st->refusals >= (uint64_t)(n - 1)) break;
  }
  c_ans = hpl__ds_proc_cpu_us(dir);
  t_ans = hpl__now_ns();
  int left = hpl__ds_wait_fetches(r, (int64_t)(end > hpl__now_ms() ? end - hpl__now_ms() : 0));
  uint64_t c1 = hpl__ds_proc_cpu_us(dir);
  uint64_t last_done = answers_window(r, st, w, left, t0, t_ans, c0, c_ans);
  double win = w->secs;
  w->bcast_s = last_done > t0 ? (double)(last_done - t0) / 1e9 : 0;
  tree(r, n, 0, 0, w);
  printf("  %s: %llu answers in %.2f s (%.0f/s), %llu refused, %d unfinished; directory %.1f s "
         "CPU for the answers, %.1f s with the completions; tree depth %d (mean %.1f), fan-out "
         "%d, %d senders, %llu unreached; modelled broadcast %.2f s\n",
         w->phase, (unsigned long long)st->answers, win, w->rate,
         (unsigned long long)st->refusals, left, (double)(c_ans - c0) / 1e6,
         (double)(c1 - c0) / 1e6, w->depth_max, w->depth_mean, w->fan_max, w->senders,
         (unsigned long long)w->unreached, w->bcast_s);
  hpl__ds_check(st->refusals == 0 && left == 0, "%llu receivers without a complete copy", n,
                w->phase, (unsigned long long)(st->refusals + (uint64_t)left));
  hpl__ds_check(w->unreached == 0,
                "%llu receivers not reached from the origin by the senders named", n, w->phase,
                (unsigned long long)w->unreached);
}

/* --objects objects, each node fetching --per-node of them at once. */
static void phase_many(hpl__ds_run *r, pid_t dir, int n, hpl__ds_row *w) {
  int m = hpl__ds.objects, k = hpl__ds.per_node;
  if ((uint64_t)m * (uint64_t)n > 50000000ull) m = (int)(50000000ull / (uint64_t)n);
  int *src = malloc((size_t)m * sizeof *src);
  for (int o = 0; o < m; o++) src[o] = o % n;
  static int seq;
  char prefix[32];
  snprintf(prefix, sizeof prefix, "m%d-", ++seq);
  if (hpl__ds_objects(r, prefix, m, src, hpl__ds.size) != 0) {
    hpl__ds_failures++;
    free(src);
    return;
  }
  hpl__ds_stats_reset(r);
  uint64_t c0 = hpl__ds_proc_cpu_us(dir), t0 = hpl__now_ns() + 20000000ull, wanted = 0;
  int stride = m / k > 0 ? m / k : 1;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < k && j < m; j++) {
      int o = (i + 1 + j * stride) % m;
      if (src[o] == i || hpl__ds_fetch_of(r, i, o)) continue;
      hpl__ds_want(r, i, o, t0);
      wanted++;
    }
  uint64_t end = hpl__now_ms() + (uint64_t)hpl__ds.phase_timeout_s * 1000;
  hpl__ds_stats *st = hpl__ds_stats_of(r);
  while (hpl__now_ms() < end && st->answers + st->refusals < wanted) hpl__ds_run_for(r, 5);
  uint64_t c_ans = hpl__ds_proc_cpu_us(dir), t_ans = hpl__now_ns();
  int left = hpl__ds_wait_fetches(r, (int64_t)(end > hpl__now_ms() ? end - hpl__now_ms() : 0));
  (void)answers_window(r, st, w, left, t0, t_ans, c0, c_ans);
  double win = w->secs;
  printf("  many: %d objects, %llu fetches: %llu answers in %.2f s (%.0f/s), %llu refused, %d "
         "unfinished\n", m, (unsigned long long)wanted, (unsigned long long)st->answers, win,
         w->rate, (unsigned long long)st->refusals, left);
  hpl__ds_check(st->refusals == 0 && left == 0, "%llu fetches without a complete copy", n,
                "many", (unsigned long long)(st->refusals + (uint64_t)left));
  free(src);
}

/* ------------------------------------------------------------------ which phases */

static int has_phase(const char *name) {
  char buf[128];
  snprintf(buf, sizeof buf, ",%s,", hpl__ds.phases);
  char want[32];
  snprintf(want, sizeof want, ",%s,", name);
  return strstr(buf, want) != NULL;
}

void hpl__ds_phases(hpl__ds_run *r, pid_t dir, int n) {
  idle_cpu_per_s = 0;
  if (has_phase("idle")) phase_idle(r, dir, n, hpl__ds_new_row(n, "idle"));
  if (has_phase("once")) phase_bcast(r, dir, n, 0, hpl__ds_new_row(n, "once"));
  if (has_phase("spread")) phase_bcast(r, dir, n, hpl__ds.spread_s, hpl__ds_new_row(n, "spread"));
  if (has_phase("many")) phase_many(r, dir, n, hpl__ds_new_row(n, "many"));
}
