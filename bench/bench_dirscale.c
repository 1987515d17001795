/* bench_dirscale.c - the real hoplite-directory at 100 to 10 000 store nodes.
 *
 *   bench_dirscale [--nodes 100,1000,10000] [--phases idle,once,spread,many]
 *                  [--idle-secs 5] [--spread-secs 10] [--xfer-ms 1000]
 *                  [--hop-ms 2] [--size 1G] [--objects 1000] [--per-node 10]
 *                  [--phase-timeout 300] [--heartbeat-ms MS] [--out FILE]
 *                  [--check]
 *
 * For each N: starts a directory (hpl__lc, no stores; RLIMIT_NOFILE raised
 * to its hard limit first, so the directory inherits it, and
 * --max-connections N + 64), and opens N connections to it as store nodes
 * (bench_dirscale_node.c: the handshake with a node credential, REGISTER,
 * heartbeats at the interval the directory gives). Then:
 *   idle    the directory's CPU for heartbeats alone (--idle-secs);
 *   once    one object (origin node 0) fetched by the N-1 others, all
 *           asking at once;
 *   spread  the same, their ACQUIREs spread evenly over --spread-secs;
 *   many    --objects objects (origins spread over the nodes), each node
 *           fetching --per-node of them, all at once: the directory's
 *           decisions per second when it is the bottleneck.
 * No bytes move: a copy is complete --xfer-ms after its answer and not
 * before --hop-ms after its sender's (bench_dirscale.h); each completion
 * is a LOC_NOTE the directory handles as a real one.
 * Reports per phase: decisions (ACQUIREs answered with a sender) and their
 * rate, the directory's CPU (every thread's schedstat in /proc, per decision and as a share
 * of one core), ACQUIRE and heartbeat reply latency (p50/p99), the tree
 * the answers form (who was named sender for whom: depth, fan-out, nodes
 * it reaches from the origin), the modelled broadcast time, and the load
 * average when the phase began. --check: exit 1 unless every receiver got
 * a sender, the answers form a tree reaching every node from the origin,
 * and no node was declared dead or closed (the ctest). */
#include <dirent.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

#include "bench_dirscale.h"

hpl__ds_opts hpl__ds = {.idle_s = 5, .spread_s = 10, .xfer_ms = 1000, .hop_ms = 2,
                        .size = 1ull << 30, .objects = 1000, .per_node = 10,
                        .phase_timeout_s = 300, .phases = "idle,once,spread,many"};

static FILE *tsv;
static int failures;

/* ------------------------------------------------------------------ the directory's facts */

/* The CPU time of every thread of process pid so far (us), from
 * /proc/PID/task/TID/schedstat (nanoseconds on the CPU; /proc/PID/stat
 * counts 10 ms ticks, too coarse for a window of a few milliseconds). */
static uint64_t proc_cpu_us(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  uint64_t ns = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p2[128];
    snprintf(p2, sizeof p2, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
    FILE *f = fopen(p2, "r");
    unsigned long long run = 0;
    if (f && fscanf(f, "%llu", &run) == 1) ns += run;
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return ns / 1000;
}

static uint64_t proc_rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  uint64_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = strtoull(line + 6, NULL, 10);
  if (f) fclose(f);
  return kb;
}

static void proc_nofile(pid_t pid, char *out, size_t len) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
  FILE *f = fopen(path, "r");
  snprintf(out, len, "?");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Max open files", 14)) {
      unsigned long long soft, hard;
      if (sscanf(line + 14, "%llu %llu", &soft, &hard) == 2) snprintf(out, len, "%llu", soft);
    }
  if (f) fclose(f);
}

static double loadavg(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f && fscanf(f, "%lf", &l) != 1) l = -1;
  if (f) fclose(f);
  return l;
}

/* ------------------------------------------------------------------ one row of the table */

typedef struct row {
  int n;
  char phase[16];
  double load, secs;
  uint64_t decisions, refused, unfinished;
  double rate, cpu_pct, us_per_dec, us_per_hb;
  double acq_p50, acq_p99, hb_p50, hb_p99;
  int depth_max, fan_max, senders;
  double depth_mean;
  uint64_t unreached;
  double bcast_s;
  uint64_t hb_late, closed, dead;
} row;

static row rows[64];
static int nrows;

static void tsv_row(const row *w) {
  if (!tsv) return;
  fprintf(tsv, "%d\t%s\t%.2f\t%.3f\t%llu\t%llu\t%llu\t%.1f\t%.1f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t"
          "%.3f\t%d\t%.1f\t%d\t%d\t%llu\t%.3f\t%llu\t%llu\t%llu\n",
          w->n, w->phase, w->load, w->secs, (unsigned long long)w->decisions,
          (unsigned long long)w->refused, (unsigned long long)w->unfinished, w->rate, w->cpu_pct,
          w->us_per_dec, w->us_per_hb, w->acq_p50, w->acq_p99, w->hb_p50, w->hb_p99, w->depth_max,
          w->depth_mean, w->fan_max, w->senders, (unsigned long long)w->unreached, w->bcast_s,
          (unsigned long long)w->hb_late, (unsigned long long)w->closed,
          (unsigned long long)w->dead);
  fflush(tsv);
}

static void print_row(const row *w) {
  printf("%6d %-7s %5.2f %8llu %9.0f %6.1f %9.1f %8.3f %8.3f %7.3f %7.3f %6d %7.1f %4d %6llu "
         "%7.2f %4llu/%llu/%llu\n",
         w->n, w->phase, w->load, (unsigned long long)w->decisions, w->rate, w->cpu_pct,
         w->us_per_dec, w->acq_p50, w->acq_p99, w->hb_p50, w->hb_p99, w->depth_max,
         w->depth_mean, w->fan_max, (unsigned long long)w->unreached, w->bcast_s,
         (unsigned long long)w->hb_late, (unsigned long long)w->closed,
         (unsigned long long)w->dead);
}

static void print_header(void) {
  printf("%6s %-7s %5s %8s %9s %6s %9s %8s %8s %7s %7s %6s %7s %4s %6s %7s %s\n", "nodes",
         "phase", "load", "decide", "decide/s", "cpu%", "us/dec", "acq50ms", "acq99ms", "hb50ms",
         "hb99ms", "depth", "dmean", "fan", "unrch", "bcast_s", "late/closed/dead");
}

static void check(int ok, const char *fmt, int n, const char *phase, unsigned long long v) {
  if (ok) return;
  failures++;
  printf("CHECK FAILED (%d nodes, %s): ", n, phase);
  printf(fmt, v);
  printf("\n");
}

/* ------------------------------------------------------------------ the tree */

/* The tree object `obj`'s answers form: each receiver's parent is the
 * sender it was last named. Fills depth and fan-out; counts the nodes not
 * reached from the origin (no answer, a chain that does not end at the
 * origin, or a cycle). */
static void tree(hpl__ds_run *r, int n, int obj, int origin, row *w) {
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

static void fill_lat(hpl__ds_run *r, row *w) {
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
static uint64_t answers_window(hpl__ds_run *r, const hpl__ds_stats *st, row *w, int left,
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

static void phase_idle(hpl__ds_run *r, pid_t dir, int n, row *w) {
  hpl__ds_stats_reset(r);
  uint64_t c0 = proc_cpu_us(dir), t0 = hpl__now_ns() / 1000;
  hpl__ds_run_for(r, (int64_t)hpl__ds.idle_s * 1000);
  uint64_t c1 = proc_cpu_us(dir), t1 = hpl__now_ns() / 1000;
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
static void phase_bcast(hpl__ds_run *r, pid_t dir, int n, int spread_s, row *w) {
  static int seq;
  char prefix[32];
  snprintf(prefix, sizeof prefix, "b%d-", ++seq);
  int src = 0;
  if (hpl__ds_objects(r, prefix, 1, &src, hpl__ds.size) != 0) {
    failures++;
    return;
  }
  hpl__ds_stats_reset(r);
  uint64_t c0 = proc_cpu_us(dir), t0 = hpl__now_ns() + 20000000ull; /* 20 ms on */
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
  c_ans = proc_cpu_us(dir);
  t_ans = hpl__now_ns();
  int left = hpl__ds_wait_fetches(r, (int64_t)(end > hpl__now_ms() ? end - hpl__now_ms() : 0));
  uint64_t c1 = proc_cpu_us(dir);
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
  check(st->refusals == 0 && left == 0, "%llu receivers without a complete copy", n, w->phase,
        (unsigned long long)(st->refusals + (uint64_t)left));
  check(w->unreached == 0, "%llu receivers not reached from the origin by the senders named", n,
        w->phase, (unsigned long long)w->unreached);
}

/* --objects objects, each node fetching --per-node of them at once. */
static void phase_many(hpl__ds_run *r, pid_t dir, int n, row *w) {
  int m = hpl__ds.objects, k = hpl__ds.per_node;
  if ((uint64_t)m * (uint64_t)n > 50000000ull) m = (int)(50000000ull / (uint64_t)n);
  int *src = malloc((size_t)m * sizeof *src);
  for (int o = 0; o < m; o++) src[o] = o % n;
  static int seq;
  char prefix[32];
  snprintf(prefix, sizeof prefix, "m%d-", ++seq);
  if (hpl__ds_objects(r, prefix, m, src, hpl__ds.size) != 0) {
    failures++;
    free(src);
    return;
  }
  hpl__ds_stats_reset(r);
  uint64_t c0 = proc_cpu_us(dir), t0 = hpl__now_ns() + 20000000ull, wanted = 0;
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
  uint64_t c_ans = proc_cpu_us(dir), t_ans = hpl__now_ns();
  int left = hpl__ds_wait_fetches(r, (int64_t)(end > hpl__now_ms() ? end - hpl__now_ms() : 0));
  (void)answers_window(r, st, w, left, t0, t_ans, c0, c_ans);
  double win = w->secs;
  printf("  many: %d objects, %llu fetches: %llu answers in %.2f s (%.0f/s), %llu refused, %d "
         "unfinished\n", m, (unsigned long long)wanted, (unsigned long long)st->answers, win,
         w->rate, (unsigned long long)st->refusals, left);
  check(st->refusals == 0 && left == 0, "%llu fetches without a complete copy", n, "many",
        (unsigned long long)(st->refusals + (uint64_t)left));
  free(src);
}

/* ------------------------------------------------------------------ one N */

static int has_phase(const char *name) {
  char buf[128];
  snprintf(buf, sizeof buf, ",%s,", hpl__ds.phases);
  char want[32];
  snprintf(want, sizeof want, ",%s,", name);
  return strstr(buf, want) != NULL;
}

static row *new_row(int n, const char *phase) {
  row *w = &rows[nrows < 63 ? nrows++ : 63];
  memset(w, 0, sizeof *w);
  w->n = n;
  snprintf(w->phase, sizeof w->phase, "%s", phase);
  w->load = loadavg();
  return w;
}

static void one_n(int n) {
  char args[256], err[512];
  int len = snprintf(args, sizeof args, "--max-connections %d", n + 64);
  if (hpl__ds.hb_ms) snprintf(args + len, sizeof args - (size_t)len, " --heartbeat-ms %d", hpl__ds.hb_ms);
  hpl__lc_opts o = {.nodes = 0, .dir_args = args, .timeout_ms = 30000};
  hpl__lc *lc = NULL;
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_dirscale: %s\n", err);
    failures++;
    return;
  }
  pid_t dir = hpl__lc_dir_pid(lc);
  char nofile[32];
  proc_nofile(dir, nofile, sizeof nofile);
  printf("%d nodes: directory pid %d, its open-files limit %s, load %.2f\n", n, (int)dir, nofile,
         loadavg());
  uint64_t t0 = hpl__now_ms(), c0 = proc_cpu_us(dir);
  hpl__ds_run *r = hpl__ds_start(hpl__lc_dir_port(lc), hpl__lc_secret(lc), n);
  if (!r) {
    failures++;
    hpl__lc_stop(lc);
    return;
  }
  int reg = hpl__ds_wait_registered(r, 300000);
  printf("  registered %d of %d in %.2f s (directory CPU %.2f s; heartbeat every %u ms), "
         "directory RSS %.1f MiB\n", reg, n, (double)(hpl__now_ms() - t0) / 1000.0,
         (double)(proc_cpu_us(dir) - c0) / 1e6, hpl__ds_hb_ms(r),
         (double)proc_rss_kb(dir) / 1024.0);
  check(reg == n, "%llu nodes not registered", n, "register", (unsigned long long)(n - reg));
  if (reg == n) {
    hpl__ds_run_for(r, 1000); /* heartbeats settle */
    idle_cpu_per_s = 0;
    if (has_phase("idle")) phase_idle(r, dir, n, new_row(n, "idle"));
    if (has_phase("once")) phase_bcast(r, dir, n, 0, new_row(n, "once"));
    if (has_phase("spread")) phase_bcast(r, dir, n, hpl__ds.spread_s, new_row(n, "spread"));
    if (has_phase("many")) phase_many(r, dir, n, new_row(n, "many"));
  }
  uint64_t dead = hpl__ds_dir_counter(r, "dir_nodes_dead");
  uint64_t stalls = hpl__ds_dir_counter(r, "dir_sweep_stalls");
  hpl__ds_stats *st = hpl__ds_stats_of(r);
  printf("  directory: %llu nodes declared dead, %llu loop stalls seen by its sweep, RSS %.1f "
         "MiB, %.1f s CPU in all\n", (unsigned long long)dead, (unsigned long long)stalls,
         (double)proc_rss_kb(dir) / 1024.0, (double)proc_cpu_us(dir) / 1e6);
  for (int i = 0; i < nrows; i++)
    if (rows[i].n == n) rows[i].dead = dead;
  check(dead == 0, "%llu nodes declared dead", n, "all", (unsigned long long)dead);
  check(st->closed == 0, "%llu connections closed by the directory", n, "all",
        (unsigned long long)st->closed);
  check(st->hb_late == 0, "%llu heartbeats unanswered for 3 intervals", n, "all",
        (unsigned long long)st->hb_late);
  char lerr[256];
  if (hpl__lc_check(lc, lerr, sizeof lerr)) {
    printf("CHECK FAILED: the directory died: %s\n", lerr);
    failures++;
  }
  hpl__ds_stop(r);
  hpl__lc_stop(lc);
}

static int parse_list(const char *s, int *out, int max) {
  char buf[128];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", s);
  for (char *t = strtok(buf, ","); t && n < max; t = strtok(NULL, ","))
    if ((out[n++] = atoi(t)) < 2) return -1;
  return n;
}

int main(int argc, char **argv) {
  static struct option opts[] = {
      {"nodes", 1, 0, 'n'},       {"phases", 1, 0, 'p'},   {"idle-secs", 1, 0, 'i'},
      {"spread-secs", 1, 0, 's'}, {"xfer-ms", 1, 0, 'x'},  {"hop-ms", 1, 0, 'h'},
      {"size", 1, 0, 'S'},        {"objects", 1, 0, 'm'},  {"per-node", 1, 0, 'k'},
      {"phase-timeout", 1, 0, 't'}, {"heartbeat-ms", 1, 0, 'H'}, {"out", 1, 0, 'o'},
      {"check", 0, 0, 'c'},       {0, 0, 0, 0}};
  hpl__ds.nnodes = parse_list("100,1000,10000", hpl__ds.nodes, 8);
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
      case 'n':
        if ((hpl__ds.nnodes = parse_list(optarg, hpl__ds.nodes, 8)) < 1) goto usage;
        break;
      case 'p': hpl__ds.phases = optarg; break;
      case 'i': hpl__ds.idle_s = atoi(optarg); break;
      case 's': hpl__ds.spread_s = atoi(optarg); break;
      case 'x': hpl__ds.xfer_ms = atof(optarg); break;
      case 'h': hpl__ds.hop_ms = atof(optarg); break;
      case 'S':
        if (hpl__parse_size(optarg, &hpl__ds.size) || !hpl__ds.size) goto usage;
        break;
      case 'm': hpl__ds.objects = atoi(optarg); break;
      case 'k': hpl__ds.per_node = atoi(optarg); break;
      case 't': hpl__ds.phase_timeout_s = atoi(optarg); break;
      case 'H': hpl__ds.hb_ms = atoi(optarg); break;
      case 'o': hpl__ds.out = optarg; break;
      case 'c': hpl__ds.check = 1; break;
      default:
      usage:
        fprintf(stderr, "usage: bench_dirscale [--nodes 100,1000,10000] [--phases "
                        "idle,once,spread,many] [--idle-secs S] [--spread-secs S] [--xfer-ms MS] "
                        "[--hop-ms MS] [--size BYTES] [--objects M] [--per-node K] "
                        "[--phase-timeout S] [--heartbeat-ms MS] [--out FILE] [--check]\n");
        return 2;
    }
  }
  if (hpl__ds.objects < 1 || hpl__ds.per_node < 1 || hpl__ds.xfer_ms <= 0) goto usage;
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* every node is a descriptor here and at the directory, which inherits
   * this limit: raise it to the hard limit */
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  int need = 0;
  for (int i = 0; i < hpl__ds.nnodes; i++) need = hpl__ds.nodes[i] > need ? hpl__ds.nodes[i] : need;
  if ((rlim_t)need + 128 > rl.rlim_cur) {
    fprintf(stderr, "bench_dirscale: %d nodes need %d open files here and at the directory; the "
                    "hard limit is %llu (ulimit -Hn)\n", need, need + 128,
            (unsigned long long)rl.rlim_max);
    return 1;
  }
  if (hpl__ds.out && !(tsv = fopen(hpl__ds.out, "a"))) {
    perror(hpl__ds.out);
    return 1;
  }
  printf("bench_dirscale: %ld cores, load %.2f; copies modelled: %.0f ms each, %.1f ms behind "
         "their sender; object %llu bytes\n", sysconf(_SC_NPROCESSORS_ONLN), loadavg(),
         hpl__ds.xfer_ms, hpl__ds.hop_ms, (unsigned long long)hpl__ds.size);
  for (int i = 0; i < hpl__ds.nnodes; i++) one_n(hpl__ds.nodes[i]);
  printf("\n");
  print_header();
  for (int i = 0; i < nrows; i++) {
    print_row(&rows[i]);
    tsv_row(&rows[i]);
  }
  printf("(decide: ACQUIREs answered with a sender; idle rows: heartbeats/s in decide/s and us "
         "per heartbeat in us/dec; cpu%%: the directory's share of one core over the answers' "
         "window; us/dec: its CPU per decision less the idle phase's heartbeat cost)\n");
  if (tsv) fclose(tsv);
  if (failures) printf("%d check(s) failed\n", failures);
  return hpl__ds.check && failures ? 1 : 0;
}
