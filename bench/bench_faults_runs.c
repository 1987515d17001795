/* bench_faults_runs.c - what bench_faults runs: a --scenario (three kills
 * at a fixed moment of a fixed chain), or the random runs - the no-fault
 * time of each op and size, then per run an op, a size, a fault kind,
 * victims, a moment and a duration drawn from --seed - adding each run's
 * outcome up for the report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "benchstat.h"
#include "bench_faults.h"

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

int hpl__bf_scenario(hpl__bf_cfg *g) {
  int op = !strcmp(g->scenario, "reduce-subset");
  int pause = !strcmp(g->scenario, "bcast-midchain-pause");
  if (!op && !pause && strcmp(g->scenario, "bcast-midchain")) hpl__bf_die("unknown --scenario");
  uint64_t size = g->sizes[0];
  double nf = hpl__bf_median3(g, op, size, g->hosts - 1);
  double frac = op ? 0.4 : 0.5;
  double ratios[5];
  int bad = 0;
  for (int r = 0; r < 3; r++) {
    int victims[1] = {-2};
    if (hpl__bf_restarted) hpl__bf_warm_up(g, op, size, g->hosts - 1, 1);
    hpl__bf_outcome oc = hpl__bf_run_one(g, op, size, r, pause ? HPL__FK_PAUSE : HPL__FK_KILL, 1,
                                         victims, frac, nf, g->hosts - 1, pause ? g->pause_min : 0);
    ratios[r] = oc.secs / nf;
    char closed[48] = "";
    if (!pause && oc.kill_close_s >= 0)
      snprintf(closed, sizeof closed, ", its sockets closed %.1f ms later", 1e3 * oc.kill_close_s);
    else if (!pause)
      snprintf(closed, sizeof closed, ", its close not measured");
    printf("%s %llu B: %s node %d (depth %d) at %.0f%% (done at %.4f s%s): %.3f s vs %.3f s "
           "no-fault = %.2fx; completed %d, wrong %d, lost %d, hangs %d\n",
           g->scenario, (unsigned long long)size, pause ? "paused" : "killed", victims[0],
           oc.victim_depth, frac * 100, oc.fault_done, closed, oc.secs, nf, ratios[r], oc.completed, oc.wrong, oc.lost,
           oc.hangs);
    bad |= oc.wrong || oc.hangs || oc.lost || oc.other;
    if (g->out)
      fprintf(g->out, "%s\t%llu\t%d\t%.4f\t%.4f\t%.3f\t%d\t%d\t%d\t%d\t%.4f\t%d\t%.4f\n",
              g->scenario, (unsigned long long)size, g->hosts, oc.secs, nf, ratios[r], oc.completed,
              oc.wrong, oc.lost, oc.hangs, oc.fault_done, oc.victim_depth,
              pause ? 0.0 : oc.kill_close_s);
  }
  qsort(ratios, 3, sizeof *ratios, hpl__bench_cmp_double);
  printf("%s: median time over no-fault %.2fx (runs: %.2f %.2f %.2f)\n", g->scenario, ratios[1],
         ratios[0], ratios[1], ratios[2]);
  return bad;
}

int hpl__bf_random_runs(hpl__bf_cfg *g) {
  /* no-fault times */
  /* srckill runs broadcasts even with --ops reduce */
  double nf[2][16];
  for (int op = 0; op < 2; op++)
    for (int k = 0; k < g->nsizes; k++) {
      if ((op == 0 && !g->do_bcast && !(g->faults & HPL__FK_SRCKILL)) || (op == 1 && !g->do_reduce))
        continue;
      nf[op][k] = hpl__bf_median3(g, op, g->sizes[k], g->hosts - 1);
      printf("no-fault %-6s %10llu B: %.3f s\n", op ? "reduce" : "bcast",
             (unsigned long long)g->sizes[k], nf[op][k]);
    }
  hpl__bf_tally t = {0};
  t.ratio = calloc((size_t)g->runs, sizeof *t.ratio);
  t.rec = calloc((size_t)g->runs, sizeof *t.rec);
  for (int f = 0; f < HPL__BF_NFK; f++) t.kratio[f] = calloc((size_t)g->runs, sizeof **t.kratio);
  for (int run = 0; run < g->runs; run++) {
    int op = g->do_bcast && g->do_reduce ? (int)(rnd(&g->seed) % 2) : g->do_reduce;
    int k = (int)(rnd(&g->seed) % (uint64_t)g->nsizes);
    int kinds[HPL__BF_NFK], nk = 0;
    for (int f = 0; f < HPL__BF_NFK; f++)
      if (g->faults & (1 << f)) kinds[nk++] = 1 << f;
    int kind = kinds[rnd(&g->seed) % (uint64_t)nk];
    double cut_s = 0.5 + 2.5 * (double)(rnd(&g->seed) % 1000) / 1000.0;
    if (kind == HPL__FK_PAUSE)
      cut_s = g->pause_min +
              (g->pause_max - g->pause_min) * (double)(rnd(&g->seed) % 1000) / 1000.0;
    if (kind == HPL__FK_DIRKILL) cut_s = g->dir_down;
    int nkill = kind == HPL__FK_KILL && (double)(rnd(&g->seed) % 1000) / 1000.0 < g->two_kill ? 2 : 1;
    if (kind == HPL__FK_CORRUPT) nkill = 0; /* nothing happens at a time: the victim lies throughout */
    int victims[2];
    victims[0] = 1 + (int)(rnd(&g->seed) % (uint64_t)(g->hosts - 1));
    do victims[1] = 1 + (int)(rnd(&g->seed) % (uint64_t)(g->hosts - 1));
    while (victims[1] == victims[0]);
    double frac = 0.1 + 0.8 * (double)(rnd(&g->seed) % 1000) / 1000.0;
    if (kind == HPL__FK_DIRKILL) victims[0] = -1;
    uint64_t old_term = 0;
    if (kind == HPL__FK_DIRHOST) { /* the leading directory's host */
      int l = hpl__hd_leader(hpl__bf_hd, 10000, &old_term);
      if (l < 0) hpl__bf_die("no directory leads before a dirhost run");
      victims[0] = hpl__hd_host(hpl__bf_hd, l);
    }
    if (kind == HPL__FK_SRCKILL) {
      op = 0; /* broadcast only */
      victims[0] = 0;
    }
    int kr = g->hosts - (nkill ? nkill : 1); /* spares for every victim (a liar's too) */
    hpl__bf_warm_restarted(g, kr);
    uint64_t caught = kind == HPL__FK_CORRUPT ? hpl__bf_corrupt_caught(g) : 0;
    hpl__bf_outcome oc =
        hpl__bf_run_one(g, op, g->sizes[k], run, kind, nkill, victims, frac, nf[op][k], kr, cut_s);
    t.ratio[run] = oc.secs / nf[op][k];
    int kf = hpl__bf_fk_index(kind);
    t.kratio[kf][t.kn[kf]++] = t.ratio[run];
    t.rec[run] = (hpl__bf_runrec){.kf = kf, .k = k, .op = op, .secs = oc.secs, .nf = nf[op][k],
                        .ratio = t.ratio[run], .frac = frac,
                        .acted = oc.fault_done / nf[op][k]};
    oc.lost += oc.unstated; /* an object no longer known with a complete copy */
    int ok = oc.hangs == 0 && oc.wrong == 0 && oc.lost == 0 && oc.other == 0;
    t.runs_ok += ok;
    t.runs++;
    t.done += oc.completed;
    t.hang += oc.hangs;
    t.wrong += oc.wrong;
    t.lost += oc.lost;
    t.other += oc.other;
    t.unlisted += oc.unlisted;
    hpl__bf_report_run(g, run, op, k, kind, nkill, victims, frac, cut_s, nf[op][k], old_term,
                       caught, &oc, ok, t.ratio[run]);
  }
  hpl__bf_report_summary(g, &t);
  int status = t.hang || t.wrong || t.lost || t.other;
  free(t.ratio);
  free(t.rec);
  for (int f = 0; f < HPL__BF_NFK; f++) free(t.kratio[f]);
  return status;
}
