/* bench_coll_report.c - what bench_coll counts and prints: the machine's
 * CPU ticks (/proc/stat), the links' rate, and per size the TSV row
 * (stdout and --out), the CPU per GiB moved (stderr) and the source's
 * copies (--extra-out). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hoplite.h"
#include "util.h"
#include "benchstat.h"
#include "bench_coll.h"

void hpl__bc_cpu_sample(uint64_t *busy, uint64_t *total) {
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
double hpl__bc_parse_rate(const char *s) {
  uint64_t bps = 0;
  return hpl__parse_rate(s, &bps) ? 0 : (double)bps / 8;
}

void hpl__bc_emit(hpl__bc_cfg *g, const char *line) {
  fputs(line, stdout);
  fflush(stdout);
  if (g->out) {
    fputs(line, g->out);
    fflush(g->out);
  }
}

int hpl__bc_report_size(hpl__bc_cfg *g, uint64_t size, double *v, int n, int bad,
                        uint64_t srcb_total, double B) {
  int is_bcast = !strcmp(g->op, "bcast"), is_shuffle = !strcmp(g->op, "shuffle");
  char line[512];
  /* CPU over the timed parts only (puts before the start, checks and
   * deletes after it are not counted); per GiB that reached a receiver */
  double cpu = g->cpu_total ? 100.0 * (double)g->cpu_busy / (double)g->cpu_total : 0;
  /* /proc/stat counts 10 ms ticks: a share over less than 100 of them
   * (timed parts of under 0.5 s in all on 2 CPUs) says nothing */
  char cpu_txt[16] = "-";
  if (g->cpu_total >= 100) snprintf(cpu_txt, sizeof cpu_txt, "%.1f", cpu);
  double cpu_s = (double)g->cpu_busy / (double)sysconf(_SC_CLK_TCK);
  uint64_t store_us = g->store_cpu_us;
  g->store_cpu_us = 0;
  /* bytes that crossed a link per repetition: each receiver's copy (bcast),
   * each non-sink source once (reduce), twice for allreduce, every node's
   * partition for every other node (shuffle) */
  double moved = (double)size * (g->hosts - 1) *
                 (!strncmp(g->op, "allreduce", 9) ? 2 : is_shuffle ? g->hosts : 1) * n;
  g->cpu_busy = g->cpu_total = 0;
  if (bad || n == 0) {
    snprintf(line, sizeof line, "%s\t%llu\t%d\t%s\tFAIL\tFAIL\tFAIL\tNA\t%s\n", g->op,
             (unsigned long long)size, g->hosts, g->impl, cpu_txt);
    hpl__bc_emit(g, line);
    return 1;
  }
  qsort(v, (size_t)n, sizeof *v, hpl__bench_cmp_double);
  double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  char ratio[32] = "NA";
  /* the bound: S/B, for a shuffle the (hosts-1) partitions each node receives */
  double bound = (double)size * (is_shuffle ? g->hosts - 1 : 1) / B;
  if (B > 0 && size > 0) snprintf(ratio, sizeof ratio, "%.3f", med / bound);
  snprintf(line, sizeof line, "%s\t%llu\t%d\t%s\t%.6f\t%.6f\t%.6f\t%s\t%s\n", g->op,
           (unsigned long long)size, g->hosts, g->impl, med, v[0], v[n - 1], ratio, cpu_txt);
  hpl__bc_emit(g, line);
  double copies = size ? (double)srcb_total / n / (double)size : 0;
  fprintf(stderr,
          "bench_coll: %s %llu B to %d receivers%s: median %.6f s, node 0 sent %.2f copies, "
          "CPU %.3f s per GiB moved (%s%% of the machine while timed; the stores' own: "
          "%.3f s per GiB)\n",
          g->op, (unsigned long long)size, g->hosts - 1, is_shuffle ? " from every node" : "",
          med, copies,
          moved > 0 ? cpu_s / (moved / (1 << 30)) : 0, cpu_txt,
          moved > 0 ? (double)store_us / 1e6 / (moved / (1 << 30)) : 0);
  if (g->extra && is_bcast) {
    fprintf(g->extra, "%s\t%llu\t%d\t%s\t%llu\t%.3f\n", g->op, (unsigned long long)size,
            g->hosts, g->impl, (unsigned long long)(srcb_total / (uint64_t)n), copies);
    fflush(g->extra);
  }
  return 0;
}
