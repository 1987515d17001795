/* simcompare.c - hpsim compare FILE... (see sim.h): the simulator judged
 * against measurements of the same session. bench/sim/validate_session.sh
 * measures the 8-host rows and writes them here as tab-separated lines
 * ('#' starts a comment):
 *
 *   coll  OP SIZE RATE INTEGRITY MEDIAN_S MIN_S MAX_S CPU_S_PER_GIB [BG_MS]
 *   fault KIND SIZE RATE MEASURED_S NOFAULT_S ACTED_S DEPTH CLOSE_S PAUSE_S
 *   chain SIZE RATE MEDIAN_S MIN_S MAX_S
 *   machine FLOOR_US
 *   calib HASH_S_PER_B COMB_S_PER_B
 *
 * A calib row (`hpsim calib`, written when the rows were measured) fixes
 * the digest and combine costs the reduce model charges; without one they
 * are measured when compare runs, and move with the VM's speed from one
 * run of compare to the next.
 * OP is bcast, reduce or allreduce; INTEGRITY sha256 or off; CPU_S_PER_GIB
 * the machine's CPU per GiB moved (bench_coll's stderr, "-" if unknown);
 * BG_MS (optional, "-" if unknown) the CPU of the VM's memory monitor
 * (the kernel thread kdamond.0) within a timed repetition, median in ms:
 * it runs in bursts every ~0.55 s, and a reduce's links nearly stop while
 * it does (bench/results/sim-kdamond-2026-12-03.md). It is printed beside
 * the row, not simulated;
 * KIND kill or pause, ACTED_S when the fault acted, DEPTH the victim's
 * hops from the source, CLOSE_S a kill's measured socket close. A chain
 * row is the emulated network alone: a plain TCP chain through the 8 hosts
 * (bench/p2p_check.sh, every host forwarding bytes as they arrive, no
 * hoplite code), simulated as a broadcast whose copies forward every byte
 * at once (a unit of 1 byte), each relay process on a quarter of the
 * machine's cores with the plain TCP path's CPU per byte and the first
 * touch of its read buffer (simcpu.c). It judges the network model (rates,
 * goodput, sharing, fill) apart from the stores; it is printed in a table
 * of its own and not counted with the hoplite rows. A machine row is the VM's state
 * when the session began: bench_peek's bare request/reply floor on
 * loopback, in µs summed over both sides, printed above the tables. The
 * CPU-loaded rows move with it, the code held fixed
 * (bench/results/sim-vm-day-2026-11-30.md).
 *
 * What is taken from the session, and from where:
 *  - a reduce's or allreduce's store CPU per byte (simred's c_base) from
 *    the integrity-off row of the same op, size and rate, as the machine's
 *    CPU per GiB moved less the combine (the digests' cost is measured by
 *    hpsim itself when it starts); without that row, simredrun.c's figure
 *    of 2026-11-29;
 *  - a fault's moment, the victim's depth and a kill's close, per run.
 * Every other parameter is the simulator's default (none fitted). A coll
 * row is judged by its time; a fault row by its time over the no-fault
 * time of the same scenario, so the day's speed of the no-fault run is not
 * counted twice (its time is printed too).
 *
 * A second column takes each coll row's CPU from the row itself (its
 * machine CPU per GiB moved, all of it charged to the stores, each store
 * a quarter of the 2 cores): the CPU a run used is an input there, its
 * time the output, as a trace-driven simulation does. It tests the
 * model's structure (pipelines, shares, fill) on the rows the testbed's
 * CPU bounds, where the cost per byte itself could not be predicted
 * (it rises with the load; bench/results/sim-validation-2026-11-30b.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "util.h"

#define MAXROWS 256
#define LIMIT 0.05 /* the bar: within 5 % */
#define GIB (1024.0 * 1024 * 1024)

typedef enum { ROW_COLL, ROW_FAULT, ROW_CHAIN, ROW_MACHINE, ROW_CALIB } row_kind;

typedef struct crow {
  row_kind kind;
  char op[16], integ[16], rate_s[16];
  double size, bits, median, min, max, cpu_gib;
  double bg_ms; /* coll rows: the VM's memory monitor per repetition (< 0: unknown) */
  double c_hash, c_comb; /* calib rows: s per byte of digests and of the combine */
  /* fault rows */
  int pause;
  double measured, nofault, acted, close, pause_s;
  uint32_t depth;
} crow;

static int parse_line(char *l, crow *r) {
  char *f[12];
  int n = 0;
  for (char *t = strtok(l, "\t\n"); t && n < 12; t = strtok(NULL, "\t\n")) f[n++] = t;
  if (n == 0) return 0;
  memset(r, 0, sizeof *r);
  uint64_t bits = 0;
  if (!strcmp(f[0], "calib") && n == 3) {
    r->kind = ROW_CALIB;
    r->c_hash = atof(f[1]);
    r->c_comb = atof(f[2]);
    return r->c_hash > 0 && r->c_hash < 1e-6 && r->c_comb > 0 && r->c_comb < 1e-6 ? 1 : -1;
  }
  if (!strcmp(f[0], "machine") && n == 2) {
    r->kind = ROW_MACHINE;
    r->median = atof(f[1]);
    return r->median > 0 ? 1 : -1;
  }
  if (!strcmp(f[0], "chain") && n == 6) {
    r->kind = ROW_CHAIN;
    snprintf(r->op, sizeof r->op, "chain");
    r->size = atof(f[1]);
    snprintf(r->rate_s, sizeof r->rate_s, "%s", f[2]);
    r->median = atof(f[3]);
    r->min = atof(f[4]);
    r->max = atof(f[5]);
  } else if (!strcmp(f[0], "coll") && (n == 9 || n == 10)) {
    r->kind = ROW_COLL;
    snprintf(r->op, sizeof r->op, "%s", f[1]);
    r->size = atof(f[2]);
    snprintf(r->rate_s, sizeof r->rate_s, "%s", f[3]);
    snprintf(r->integ, sizeof r->integ, "%s", f[4]);
    r->median = atof(f[5]);
    r->min = atof(f[6]);
    r->max = atof(f[7]);
    r->cpu_gib = strcmp(f[8], "-") ? atof(f[8]) : 0;
    r->bg_ms = n == 10 && strcmp(f[9], "-") ? atof(f[9]) : -1;
  } else if (!strcmp(f[0], "fault") && n == 10) {
    r->kind = ROW_FAULT;
    r->pause = !strcmp(f[1], "pause");
    snprintf(r->op, sizeof r->op, "%s", f[1]);
    r->size = atof(f[2]);
    snprintf(r->rate_s, sizeof r->rate_s, "%s", f[3]);
    r->measured = atof(f[4]);
    r->nofault = atof(f[5]);
    r->acted = atof(f[6]);
    r->depth = (uint32_t)atoi(f[7]);
    r->close = atof(f[8]);
    r->pause_s = atof(f[9]);
  } else {
    return -1;
  }
  if (hpl__parse_rate(r->rate_s, &bits) != 0 || bits == 0 || r->size <= 0) return -1;
  r->bits = (double)bits;
  return 1;
}

/* The integrity-off row measured with r (same op, size, rate), or NULL. */
static const crow *off_twin(const crow *rows, int n, const crow *r) {
  for (int i = 0; i < n; i++)
    if (rows[i].kind == ROW_COLL && !strcmp(rows[i].integ, "off") && !strcmp(rows[i].op, r->op) &&
        rows[i].size == r->size && rows[i].bits == r->bits && rows[i].cpu_gib > 0)
      return &rows[i];
  return NULL;
}

/* The simulated time of a coll row. own_cpu: the stores' CPU per byte is
 * the row's own (CPU_S_PER_GIB), else the session's integrity-off twin's
 * (reduces) or none (broadcasts). */
static double sim_coll(const crow *rows, int n, const crow *r, int own_cpu, char *from,
                       size_t fromlen) {
  int sha = strcmp(r->integ, "off") != 0;
  snprintf(from, fromlen, "-");
  if (own_cpu && !(r->cpu_gib > 0)) return NAN;
  if (!strcmp(r->op, "bcast")) {
    hpl__sim_params p = hpl__sim_defaults();
    p.size = r->size;
    p.bits = r->bits;
    p.unit = sha ? 0 : 64 * 1024; /* sha: the store's unit for the size */
    /* a store's share of the cores, as the reduce model gives it */
    if (own_cpu) p.cpu_cap = hpl__simred_defaults().cpu_share / (r->cpu_gib / GIB);
    return hpl__sim_run_one(&p).t;
  }
  hpl__simred_params p = hpl__simred_defaults();
  p.kind = !strcmp(r->op, "reduce") ? HPL__SIMRED_REDUCE : HPL__SIMRED_ALLREDUCE;
  p.size = r->size;
  p.rate = r->bits * hpl__sim_defaults().eff / 8; /* TCP goodput, as the broadcasts */
  hpl__simred_integrity(&p, sha);
  const crow *off = off_twin(rows, n, r);
  if (own_cpu) { /* every byte received costs the row's CPU per GiB moved */
    p.c_hash = p.c_comb = 0;
    p.c_base = r->cpu_gib / GIB;
  } else if (off) {
    double b = off->cpu_gib / GIB - p.c_comb;
    p.c_base = b > 0 ? b : 0;
    snprintf(from, fromlen, "off row: %.3f s/GiB", off->cpu_gib);
  }
  hpl__simred_result res;
  if (hpl__simred_run(&p, &res) != 0) return NAN;
  return res.t;
}

/* The chain rows: the emulated network alone against the network model. */
static void compare_chains(const crow *rows, int n) {
  int chains = 0, over = 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    const crow *r = &rows[i];
    if (r->kind != ROW_CHAIN) continue;
    if (!chains++)
      printf("\n| the network alone: plain TCP chain (8 hosts) | measured s (min-max) | "
             "simulated s | error |\n|---|---|---|---|\n");
    hpl__sim_params p = hpl__sim_defaults();
    p.size = r->size;
    p.bits = r->bits;
    p.unit = 1; /* a forwarder writes on every byte that arrives */
    /* ...on the machine's 2 cores, a quarter each (simcpu.c) */
    hpl__sim_chain_cpu(&p, hpl__simred_defaults().cpu_share);
    double t = hpl__sim_run_one(&p).t, e = (t - r->median) / r->median;
    over += !(fabs(e) <= LIMIT);
    if (fabs(e) > worst) worst = fabs(e);
    printf("| chain %.0f MiB, %s | %.4f (%.4f-%.4f) | %.4f | %+.1f %% |\n", r->size / (1 << 20),
           r->rate_s, r->median, r->min, r->max, t, 100 * e);
  }
  if (chains)
    printf("\nthe network alone: %d of %d chains outside %.0f %%; worst %.1f %% (not counted "
           "above)\n", over, chains, 100 * LIMIT, 100 * worst);
}

static int compare_rows(const crow *rows, int n) {
  int over = 0, colls = 0, faults = 0, over_own = 0;
  double worst = 0, worst_own = 0;
  for (int i = 0; i < n; i++)
    if (rows[i].kind == ROW_MACHINE)
      printf("the machine when the session began: a bare request/reply floor of %.1f us summed "
             "(bench_peek; the quiet days' 9.6-13.8 us). On a slower VM the CPU-loaded rows run "
             "4-20 %% slower with the code held fixed (bench/results/sim-vm-day-2026-11-30.md).\n\n",
             rows[i].median);
  double ch, cc;
  int set = hpl__simred_costs(&ch, &cc);
  printf("digests %.3f ns/B and combine %.3f ns/B, %s\n\n", ch * 1e9, cc * 1e9,
         set ? "as recorded with the rows (calib)"
             : "measured now (no calib row: they move with the VM's speed)");
  printf("| measured row (8 hosts) | measured s (min-max) | simulated s | error | store CPU from | "
         "simulated, the row's own CPU | error | kdamond ms per rep |\n"
         "|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    const crow *r = &rows[i];
    if (r->kind != ROW_COLL) continue;
    char from[64], unused[64];
    double t = sim_coll(rows, n, r, 0, from, sizeof from), e = (t - r->median) / r->median;
    double t2 = sim_coll(rows, n, r, 1, unused, sizeof unused), e2 = (t2 - r->median) / r->median;
    colls++;
    over += !(fabs(e) <= LIMIT);
    if (fabs(e) > worst) worst = fabs(e);
    over_own += !(fabs(e2) <= LIMIT);
    if (fabs(e2) > worst_own) worst_own = fabs(e2);
    char bg[32] = "-";
    if (r->bg_ms >= 0) snprintf(bg, sizeof bg, "%.0f", r->bg_ms);
    printf("| %s %.0f MiB, %s, %s | %.4f (%.4f-%.4f) | %.4f | %+.1f %% | %s | %.4f (%.3f s/GiB) | "
           "%+.1f %% | %s |\n", r->op, r->size / (1 << 20), r->rate_s, r->integ, r->median, r->min,
           r->max, t, 100 * e, from, t2, r->cpu_gib, 100 * e2, bg);
  }
  printf("\n| fault run (8 hosts) | measured s | no-fault s | measured / no-fault | simulated s | "
         "simulated no-fault s | simulated / no-fault | error of the ratio | error of the time |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    const crow *r = &rows[i];
    if (r->kind != ROW_FAULT) continue;
    hpl__sim_params q = hpl__sim_defaults();
    q.size = r->size;
    q.bits = r->bits;
    double nfs = hpl__sim_run_one(&q).t;
    double x = hpl__sim_fault_run(r->size, r->pause, r->acted * nfs / r->nofault, r->pause_s,
                                  r->depth ? r->depth : 1, r->bits, r->pause ? 0 : r->close);
    double mr = r->measured / r->nofault, er = (x / nfs - mr) / mr;
    faults++;
    over += !(fabs(er) <= LIMIT);
    if (fabs(er) > worst) worst = fabs(er);
    printf("| %s %.0f MiB, %s, depth %u, at %.3f s%s | %.4f | %.4f | %.3f | %.4f | %.4f | %.3f | "
           "%+.1f %% | %+.1f %% |\n",
           r->op, r->size / (1 << 20), r->rate_s, r->depth, r->acted,
           r->pause ? "" : " (closed after its measured close)", r->measured, r->nofault, mr, x,
           nfs, x / nfs, 100 * er, 100 * (x - r->measured) / r->measured);
  }
  printf("\n%d rows and %d fault runs; %d outside %.0f %%; worst %.1f %%\n", colls, faults, over,
         100 * LIMIT, 100 * worst);
  printf("with each row's own CPU (trace-driven; the fault runs as above): %d of the %d rows "
         "outside %.0f %%; worst %.1f %%\n", over_own, colls, 100 * LIMIT, 100 * worst_own);
  compare_chains(rows, n);
  return over ? 1 : 0;
}

int hpl__sim_compare(int argc, char **argv) {
  static crow rows[MAXROWS];
  int n = 0;
  if (argc < 2) {
    fprintf(stderr, "usage: hpsim compare FILE... (bench/sim/validate_session.sh writes them)\n");
    return 2;
  }
  for (int a = 1; a < argc; a++) {
    FILE *fp = fopen(argv[a], "r");
    if (!fp) {
      fprintf(stderr, "hpsim compare: cannot open %s\n", argv[a]);
      return 2;
    }
    char line[512];
    int ln = 0;
    while (fgets(line, sizeof line, fp)) {
      ln++;
      if (line[0] == '#' || line[0] == '\n') continue;
      if (n == MAXROWS) {
        fprintf(stderr, "hpsim compare: more than %d rows\n", MAXROWS);
        fclose(fp);
        return 2;
      }
      int rc = parse_line(line, &rows[n]);
      if (rc < 0) {
        fprintf(stderr, "hpsim compare: %s:%d: not a coll, fault, chain, machine or calib row\n",
                argv[a], ln);
        fclose(fp);
        return 2;
      }
      n += rc;
    }
    fclose(fp);
  }
  for (int i = 0; i < n; i++) /* the session's own costs: the first calib row */
    if (rows[i].kind == ROW_CALIB) {
      hpl__simred_set_costs(rows[i].c_hash, rows[i].c_comb);
      break;
    }
  return compare_rows(rows, n);
}
