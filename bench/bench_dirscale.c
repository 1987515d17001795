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
 * heartbeats at the interval the directory gives). Then the phases
 * (bench_dirscale_phase.c):
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
int hpl__ds_failures; /* checks that failed (hpl__ds_check), runs that could not start */

/* ------------------------------------------------------------------ the directory's facts */

/* The CPU time of every thread of process pid so far (us), from
 * /proc/PID/task/TID/schedstat (nanoseconds on the CPU; /proc/PID/stat
 * counts 10 ms ticks, too coarse for a window of a few milliseconds). */
uint64_t hpl__ds_proc_cpu_us(pid_t pid) {
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

static hpl__ds_row rows[64];
static int nrows;

hpl__ds_row *hpl__ds_new_row(int n, const char *phase) {
  hpl__ds_row *w = &rows[nrows < 63 ? nrows++ : 63];
  memset(w, 0, sizeof *w);
  w->n = n;
  snprintf(w->phase, sizeof w->phase, "%s", phase);
  w->load = loadavg();
  return w;
}

static void tsv_row(const hpl__ds_row *w) {
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

static void print_row(const hpl__ds_row *w) {
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

void hpl__ds_check(int ok, const char *fmt, int n, const char *phase, unsigned long long v) {
  if (ok) return;
  hpl__ds_failures++;
  printf("CHECK FAILED (%d nodes, %s): ", n, phase);
  printf(fmt, v);
  printf("\n");
}

/* ------------------------------------------------------------------ one N */

static void one_n(int n) {
  char args[256], err[512];
  int len = snprintf(args, sizeof args, "--max-connections %d", n + 64);
  if (hpl__ds.hb_ms) snprintf(args + len, sizeof args - (size_t)len, " --heartbeat-ms %d", hpl__ds.hb_ms);
  hpl__lc_opts o = {.nodes = 0, .dir_args = args, .timeout_ms = 30000};
  hpl__lc *lc = NULL;
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_dirscale: %s\n", err);
    hpl__ds_failures++;
    return;
  }
  pid_t dir = hpl__lc_dir_pid(lc);
  char nofile[32];
  proc_nofile(dir, nofile, sizeof nofile);
  printf("%d nodes: directory pid %d, its open-files limit %s, load %.2f\n", n, (int)dir, nofile,
         loadavg());
  uint64_t t0 = hpl__now_ms(), c0 = hpl__ds_proc_cpu_us(dir);
  hpl__ds_run *r = hpl__ds_start(hpl__lc_dir_port(lc), hpl__lc_secret(lc), n);
  if (!r) {
    hpl__ds_failures++;
    hpl__lc_stop(lc);
    return;
  }
  int reg = hpl__ds_wait_registered(r, 300000);
  printf("  registered %d of %d in %.2f s (directory CPU %.2f s; heartbeat every %u ms), "
         "directory RSS %.1f MiB\n", reg, n, (double)(hpl__now_ms() - t0) / 1000.0,
         (double)(hpl__ds_proc_cpu_us(dir) - c0) / 1e6, hpl__ds_hb_ms(r),
         (double)proc_rss_kb(dir) / 1024.0);
  hpl__ds_check(reg == n, "%llu nodes not registered", n, "register",
                (unsigned long long)(n - reg));
  if (reg == n) {
    hpl__ds_run_for(r, 1000); /* heartbeats settle */
    hpl__ds_phases(r, dir, n);
  }
  uint64_t dead = hpl__ds_dir_counter(r, "dir_nodes_dead");
  uint64_t stalls = hpl__ds_dir_counter(r, "dir_sweep_stalls");
  hpl__ds_stats *st = hpl__ds_stats_of(r);
  printf("  directory: %llu nodes declared dead, %llu loop stalls seen by its sweep, RSS %.1f "
         "MiB, %.1f s CPU in all\n", (unsigned long long)dead, (unsigned long long)stalls,
         (double)proc_rss_kb(dir) / 1024.0, (double)hpl__ds_proc_cpu_us(dir) / 1e6);
  for (int i = 0; i < nrows; i++)
    if (rows[i].n == n) rows[i].dead = dead;
  hpl__ds_check(dead == 0, "%llu nodes declared dead", n, "all", (unsigned long long)dead);
  hpl__ds_check(st->closed == 0, "%llu connections closed by the directory", n, "all",
                (unsigned long long)st->closed);
  hpl__ds_check(st->hb_late == 0, "%llu heartbeats unanswered for 3 intervals", n, "all",
                (unsigned long long)st->hb_late);
  char lerr[256];
  if (hpl__lc_check(lc, lerr, sizeof lerr)) {
    printf("CHECK FAILED: the directory died: %s\n", lerr);
    hpl__ds_failures++;
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
  if (hpl__ds_failures) printf("%d check(s) failed\n", hpl__ds_failures);
  return hpl__ds.check && hpl__ds_failures ? 1 : 0;
}
