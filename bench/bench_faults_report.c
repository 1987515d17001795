/* bench_faults_report.c - what bench_faults prints of its random runs:
 * each run's line (what was done to whom, and when), then the summary:
 * totals, per fault kind, and per kind and size against the issue's
 * target (with the floor a late reduce cannot beat), and the leak check;
 * the --out TSV lines of each. */
#include <stdio.h>
#include <stdlib.h>

#include "hoplite.h"
#include "benchstat.h"
#include "bench_faults.h"

/* The p90 index in a sorted array of n > 0 values (as the overall summary). */
static int p90_at(int n) { return (n * 9) / 10 < n ? (n * 9) / 10 : n - 1; }

/* A reduce that loses a contributing source at fraction `acted` of its
 * no-fault time `nofault` (when the fault had acted: a cut or a slowdown
 * acts when its command is done, not at the drawn moment) must recompute
 * the result from byte 0 without it: the sink receives the bytes it had
 * again, so even with instant detection it needs about (1 + acted) x
 * no-fault; for dirhost, plus the lease (no new leader re-plans it
 * sooner). 0 where that does not apply (broadcasts; dirkill and srckill
 * lose no source). */
static double reduce_floor(const hpl__bf_cfg *g, const hpl__bf_runrec *r) {
  if (r->op != 1 || !((1 << r->kf) & (HPL__FK_KILL | HPL__FK_CUT | HPL__FK_PAUSE | HPL__FK_SLOW |
                                      HPL__FK_DIRHOST)))
    return 0;
  double lease = (1 << r->kf) & HPL__FK_DIRHOST ? (g->lease_ms ? g->lease_ms : 1000) / 1000.0 : 0;
  return (1 + r->acted) * r->nf + lease;
}

/* The slack over 1.3 x no-fault: 0.5 s (the fault issues' target), 1 s for
 * dirhost (the standby directories' issue: a failover fits in it). */
static double target_slack(int kf) { return (1 << kf) & HPL__FK_DIRHOST ? 1.0 : 0.5; }

/* The target: survivors' time <= 1.3 x no-fault + the slack. */
static double target_limit(int kf, double nofault) { return 1.3 * nofault + target_slack(kf); }

void hpl__bf_report_run(const hpl__bf_cfg *g, int run, int op, int k, int kind, int nkill,
                        const int *victims, double frac, double cut_s, double nofault,
                        uint64_t old_term, uint64_t caught, const hpl__bf_outcome *oc, int ok,
                        double ratio) {
  char vs[32], extra[160] = "";
  double param = 0; /* the TSV's last column */
  if (nkill == 2) snprintf(vs, sizeof vs, "kill:%d,%d", victims[0], victims[1]);
  else if (kind == HPL__FK_DIRKILL) snprintf(vs, sizeof vs, "dirkill:dir");
  else snprintf(vs, sizeof vs, "%s:%d", hpl__bf_fk_names[hpl__bf_fk_index(kind)], victims[0]);
  if (kind == HPL__FK_CUT || kind == HPL__FK_PAUSE || kind == HPL__FK_DIRKILL) param = cut_s;
  else if (kind == HPL__FK_SLOW) param = g->slow_factor;
  else if (kind == HPL__FK_SRCKILL) param = oc->kill_secs;
  if (op == 1 && kind == HPL__FK_CUT)
    snprintf(extra, sizeof extra, " (cut %.1f s; cut by %.3f s)", cut_s, oc->fault_done);
  else if (op == 1 && kind == HPL__FK_SLOW)
    snprintf(extra, sizeof extra, " (slowed %.0fx; tc ran %.2f-%.2f s)", g->slow_factor,
             oc->fault_at, oc->fault_done);
  else if (kind == HPL__FK_CORRUPT)
    snprintf(extra, sizeof extra, " (%llu bad units caught)",
             (unsigned long long)(hpl__bf_corrupt_caught(g) - caught));
  else if (kind == HPL__FK_CUT)
    snprintf(extra, sizeof extra,
             " (cut %.1f s; cut by %.3f s; the cut host itself done at %.3f s)", cut_s,
             oc->fault_done, oc->victim_secs);
  else if (kind == HPL__FK_SLOW)
    snprintf(extra, sizeof extra,
             " (slowed %.0fx; tc ran %.2f-%.2f s; the slow host itself done at %.3f s)",
             g->slow_factor, oc->fault_at, oc->fault_done, oc->victim_secs);
  else if (op == 0 && kind == HPL__FK_PAUSE)
    snprintf(extra, sizeof extra, " (stopped %.1f s; the stopped store itself done at %.3f s)",
             cut_s, oc->victim_secs);
  else if (kind == HPL__FK_PAUSE)
    snprintf(extra, sizeof extra, " (stopped %.1f s)", cut_s);
  else if (kind == HPL__FK_DIRKILL && hpl__bf_hd)
    snprintf(extra, sizeof extra, " (leading directory down %.1f s; host %d leads, term %llu)",
             cut_s, oc->new_leader_host, (unsigned long long)oc->new_term);
  else if (kind == HPL__FK_DIRKILL)
    snprintf(extra, sizeof extra, " (directory down %.1f s)", cut_s);
  else if (kind == HPL__FK_DIRHOST)
    snprintf(extra, sizeof extra,
             " (leader's host %d cut by %.3f s, term %llu; host %d leads after, term %llu%s;"
             " healed at %.3f s, host %d itself done at %.3f s)",
             victims[0], oc->fault_done, (unsigned long long)old_term, oc->new_leader_host,
             (unsigned long long)oc->new_term,
             oc->new_term > old_term && oc->new_leader_host != victims[0] ? "" : ": no failover",
             oc->heal_secs, victims[0], op == 0 ? oc->victim_secs : 0.0);
  else if (kind == HPL__FK_SRCKILL && oc->kill_secs >= 0)
    snprintf(extra, sizeof extra,
             " (node 0 killed at %.3f s, when node %d held the first complete copy)",
             oc->kill_secs, oc->holder);
  else if (kind == HPL__FK_SRCKILL)
    snprintf(extra, sizeof extra, " (node 0 not killed: no receiver completed)");
  printf("run %2d %-6s %10llu B %-11s at %3.0f%%: %.3f s (%.2fx no-fault) %s "
         "[done %d wrong %d lost %d hang %d]%s%s\n",
         run, op ? "reduce" : "bcast", (unsigned long long)g->sizes[k], vs, frac * 100, oc->secs,
         ratio, ok ? "ok" : "FAILED", oc->completed, oc->wrong, oc->lost, oc->hangs, extra,
         oc->unlisted ? " (sources unknown: the restarted directory forgot the reduce)" : "");
  fflush(stdout);
  double lim = target_limit(hpl__bf_fk_index(kind), nofault);
  if (g->out)
    fprintf(g->out, "run\t%d\t%s\t%llu\t%s\t%.2f\t%.4f\t%.3f\t%d\t%d\t%d\t%d"
            "\t%s\t%.4f\t%.4f\t%.4f\t%.3f\t%.4f\n", run,
            op ? "reduce" : "bcast", (unsigned long long)g->sizes[k], vs, frac, oc->secs,
            ratio, oc->completed, oc->wrong, oc->lost, oc->hangs, hpl__bf_fk_names[hpl__bf_fk_index(kind)], nofault, lim,
            oc->secs - lim, param, oc->fault_done);
}

void hpl__bf_report_summary(const hpl__bf_cfg *g, hpl__bf_tally *t) {
  qsort(t->ratio, (size_t)g->runs, sizeof *t->ratio, hpl__bench_cmp_double);
  printf("\nSUMMARY: runs %d, completed %d (runs), survivors done %d, hangs %d, wrong bytes %d, "
         "lost-object errors %d (none excused: a source or spare always survives), other errors %d;"
         " time over no-fault: median %.2fx, p90 %.2fx, max %.2fx\n",
         t->runs, t->runs_ok, t->done, t->hang, t->wrong, t->lost, t->other,
         t->ratio[g->runs / 2], t->ratio[p90_at(g->runs)], t->ratio[g->runs - 1]);
  if (t->unlisted)
    printf("  %d reduce(s) finished while the directory was down and the restarted directory did"
           " not know them (hpl_reduce_sources: no such reduce); their bytes were checked"
           " against any %s of the sources\n", t->unlisted, "k");
  if (g->out)
    fprintf(g->out, "summary\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\n", t->runs, t->runs_ok,
            t->hang, t->wrong, t->lost, t->other, t->ratio[g->runs / 2], t->ratio[p90_at(g->runs)],
            t->ratio[g->runs - 1]);
  for (int f = 0; f < HPL__BF_NFK; f++) {
    if (!t->kn[f]) continue;
    qsort(t->kratio[f], (size_t)t->kn[f], sizeof **t->kratio, hpl__bench_cmp_double);
    printf("  %-7s runs %2d: survivors' time over no-fault median %.2fx, p90 %.2fx, max %.2fx\n",
           hpl__bf_fk_names[f], t->kn[f], t->kratio[f][t->kn[f] / 2], t->kratio[f][p90_at(t->kn[f])],
           t->kratio[f][t->kn[f] - 1]);
  }
  /* per kind and size (both ops together): the ratio, and the target */
  printf("per fault kind and size (target: survivors' time <= 1.3 x no-fault + 0.5 s; dirhost "
         "+ 1 s):\n");
  double *rs = calloc((size_t)g->runs, sizeof *rs);
  int missed = 0, missed_floor = 0;
  for (int f = 0; f < HPL__BF_NFK; f++)
    for (int k = 0; k < g->nsizes; k++) {
      int n = 0, over = 0, floored = 0, over_floor = 0;
      double worst = -1e300;
      for (int r = 0; r < g->runs; r++) {
        if (t->rec[r].kf != f || t->rec[r].k != k) continue;
        rs[n++] = t->rec[r].ratio;
        double lim = target_limit(f, t->rec[r].nf), slack = target_slack(f);
        double ex = t->rec[r].secs - lim, floor_s = reduce_floor(g, &t->rec[r]);
        over += ex > 0;
        if (ex > worst) worst = ex;
        /* over the target, but a reduce whose floor alone is over it */
        if (ex > 0 && floor_s > 0 && floor_s > lim) {
          floored++;
          over_floor += t->rec[r].secs > floor_s + slack;
        } else {
          missed_floor += ex > 0;
        }
      }
      if (!n) continue;
      qsort(rs, (size_t)n, sizeof *rs, hpl__bench_cmp_double);
      missed += over;
      printf("  %-7s %10llu B runs %3d: median %.2fx, p90 %.2fx; over the limit %d, worst "
             "time - limit %+.3f s",
             hpl__bf_fk_names[f], (unsigned long long)g->sizes[k], n, rs[n / 2], rs[p90_at(n)], over,
             worst);
      if (floored)
        printf(" (%d of them reduces faulted so late that (1 + the moment the fault acted) x"
               " no-fault (+ the lease for dirhost) is over the limit; %d of those over that floor + %.1f s)", floored,
               over_floor, target_slack(f));
      missed_floor += over_floor;
      printf("\n");
      if (g->out)
        fprintf(g->out, "kindsize\t%s\t%llu\t%d\t%.3f\t%.3f\t%d\t%.4f\n", hpl__bf_fk_names[f],
                (unsigned long long)g->sizes[k], n, rs[n / 2], rs[p90_at(n)], over, worst);
    }
  printf("  runs over the target: %d of %d (over it and, for a late reduce, over its floor + "
         "the slack: %d)\n", missed, g->runs, missed_floor);
  free(rs);
  int leaks = hpl__bf_leak_check(g);
  if (g->out) fprintf(g->out, "leaks\t%d\n", leaks);
}
