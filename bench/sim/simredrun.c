/* simredrun.c - hpsim's reduce and allreduce commands (see sim.h, section
 * simred): one run, the validation table against the 8-host emulated
 * measurements, the 1 000-source scale runs, and the sim_reduce_small checks.
 *
 *   hpsim reduce|allreduce|allreduce-noring [--k N] [--gbit R] [--size B[KMG]]
 *         [--lat-us U] [--unit B[KMG]] [--integrity off|sha256] [--cpu-share C]
 *         [--auto] [--degree D]
 *   hpsim reduce validate    simulated against measured (bench/results)
 *   hpsim reduce scale       1 000 sources, 256 MiB, 10 and 25 Gbit/s
 *   hpsim reduce check       64 sources, asserts (exit 1 on a failed check)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

#define EFF 0.956 /* TCP goodput share of the line rate, as simmain.c */
#define MIB (1024.0 * 1024.0)

static double c_hash_m, c_comb_m; /* measured at start (hpl__simred_calibrate) or set */
static int costs_set;

void hpl__simred_set_costs(double c_hash, double c_comb) {
  c_hash_m = c_hash;
  c_comb_m = c_comb;
  costs_set = 1;
}

int hpl__simred_costs(double *c_hash, double *c_comb) {
  if (!c_hash_m) hpl__simred_calibrate(&c_hash_m, &c_comb_m);
  *c_hash = c_hash_m;
  *c_comb = c_comb_m;
  return costs_set;
}

/* The store's own CPU per byte it receives, besides digests and combines:
 * from the integrity-off 8-host reduce of 256 MiB
 * (integrity-final-reduce-1gbit.tsv, off+procs: 34.9 % and 30.7 % of the
 * machine's 2 cores over 2.2513 s and 2.2500 s), i.e. the CPU the whole
 * machine spent per byte the 7 receiving stores took in (kernel TCP over
 * the emulated links included), less the combine's share. A CPU figure,
 * not a time: the times it predicts are the sha256 rows' and the scale's. */
static double c_base(void) {
  double cpu_s = (0.349 * 2 * 2.251289 + 0.307 * 2 * 2.250032) / 2;
  double b = cpu_s / (7 * 256 * MIB) - c_comb_m;
  return b > 0 ? b : 0;
}

hpl__simred_params hpl__simred_defaults(void) {
  if (!c_hash_m) hpl__simred_calibrate(&c_hash_m, &c_comb_m);
  hpl__simred_params p = {0};
  p.kind = HPL__SIMRED_REDUCE;
  p.k = 8;
  p.size = 64 * MIB;
  p.unit = 0; /* hpl__digest_unit(size) */
  p.rate = 1e9 * EFF / 8;
  p.lat = 50e-6;
  p.plan_lat = 200e-6; /* directory/server.c: --reduce-latency 200 us */
  p.plan_bw = 125e6;   /* ...--reduce-bandwidth 125 MB/s */
  p.c_hash = c_hash_m;
  p.c_comb = c_comb_m;
  p.c_base = c_base();
  p.cpu_share = 2.0 / 8; /* 8 emulated hosts on the VM's 2 cores */
  p.dir_cpu = 10e-6;     /* bench_dir's cost of a request, as simdir.c */
  /* REDUCE to the directory and the tasks back, a connection and a PULL
   * (3 round trips, as simstore.c) */
  p.start = 2 * p.lat + p.dir_cpu + 3 * 2 * p.lat;
  return p;
}

void hpl__simred_integrity(hpl__simred_params *p, int on) {
  p->c_hash = on ? c_hash_m : 0;
  p->unit = on ? 0 : 64 * 1024; /* on: the store's unit for the size; off: libuv's 64 KiB reads */
}

static const char *kind_name(hpl__simred_kind k) {
  return k == HPL__SIMRED_REDUCE ? "reduce" : k == HPL__SIMRED_ALLREDUCE ? "allreduce" : "allreduce-nr";
}

/* ------------------------------------------------------------------ validate */

typedef struct vcase {
  hpl__simred_kind kind;
  double mib, gbit;
  int sha;
  double measured;
  const char *source;
} vcase;

static int validate(void) {
  static const vcase v[] = {
      {HPL__SIMRED_REDUCE, 64, 1, 0, 0.568390,
       "reduce-1gbit.tsv hoplite+procs 2026-11-27, median of 4 runs (before integrity)"},
      {HPL__SIMRED_REDUCE, 256, 1, 0, 2.263100,
       "reduce-1gbit.tsv hoplite+procs 2026-11-27, median of 4 runs (before integrity)"},
      {HPL__SIMRED_REDUCE, 256, 1, 0, 2.250661, "integrity-final-reduce-1gbit.tsv off+procs x2"},
      {HPL__SIMRED_REDUCE, 256, 1, 1, 2.635203, "integrity-final-reduce-1gbit.tsv sha256+procs x2"},
      {HPL__SIMRED_ALLREDUCE, 64, 1, 0, 1.014558,
       "allreduce-1gbit.tsv hoplite+procs, median of 3 runs (before integrity)"},
      {HPL__SIMRED_ALLREDUCE, 256, 1, 0, 3.970041,
       "allreduce-1gbit.tsv hoplite+procs, median of 3 runs (before integrity)"},
      {HPL__SIMRED_ALLREDUCE, 64, 1, 0, 1.003828, "integrity-final-allreduce-1gbit.tsv off+procs x2"},
      {HPL__SIMRED_ALLREDUCE, 256, 1, 0, 3.962302, "integrity-final-allreduce-1gbit.tsv off+procs x2"},
      {HPL__SIMRED_ALLREDUCE, 64, 1, 1, 1.248655,
       "integrity-final-allreduce-1gbit.tsv sha256+procs x2"},
      {HPL__SIMRED_ALLREDUCE, 256, 1, 1, 4.926792,
       "integrity-final-allreduce-1gbit.tsv sha256+procs x2"},
      {HPL__SIMRED_ALLREDUCE_NR, 64, 1, 0, 1.140720,
       "allreduce-1gbit.tsv hoplite-noring+procs, median of 4 runs (before integrity)"},
      {HPL__SIMRED_ALLREDUCE_NR, 256, 1, 0, 4.524906,
       "allreduce-1gbit.tsv hoplite-noring+procs, median of 4 runs (before integrity)"},
      {HPL__SIMRED_REDUCE, 64, 0.2, 1, 3.033037, "sim-measured-200mbit-2026-11-30.tsv (sha256)"},
      {HPL__SIMRED_REDUCE, 256, 0.2, 1, 11.607280, "sim-measured-200mbit-2026-11-30.tsv (sha256)"},
      {HPL__SIMRED_ALLREDUCE, 64, 0.2, 1, 5.060482, "sim-measured-200mbit-2026-11-30.tsv (sha256)"},
      {HPL__SIMRED_ALLREDUCE, 256, 0.2, 1, 21.396274,
       "sim-measured-200mbit-2026-11-30.tsv (sha256)"},
  };
  printf("calibrated: sha256 %.3f ns/B, f32 sum %.3f ns/B, store base %.3f ns/B, "
         "0.25 core per emulated host\n\n", c_hash_m * 1e9, c_comb_m * 1e9, c_base() * 1e9);
  printf("| case (8 hosts) | integrity | measured s | simulated s | error | bound s | plan | "
         "measured in |\n|---|---|---|---|---|---|---|---|\n");
  double worst = 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    hpl__simred_params p = hpl__simred_defaults();
    p.kind = v[i].kind;
    p.size = v[i].mib * MIB;
    p.rate = v[i].gbit * 1e9 * EFF / 8;
    hpl__simred_integrity(&p, v[i].sha);
    hpl__simred_result r;
    if (hpl__simred_run(&p, &r)) return 1;
    double err = 100 * (r.t - v[i].measured) / v[i].measured;
    if (fabs(err) > worst) worst = fabs(err);
    char plan[48];
    if (p.kind == HPL__SIMRED_ALLREDUCE) snprintf(plan, sizeof plan, "ring of %u", p.k);
    else snprintf(plan, sizeof plan, "%s, depth %d", r.degree == 1 ? "chain" : "tree", r.depth);
    printf("| %s %g MiB, %g Gbit/s | %s | %.4f | %.4f | %+.1f %% | %.4f | %s | %s |\n",
           kind_name(p.kind), v[i].mib, v[i].gbit, v[i].sha ? "sha256" : "off", v[i].measured,
           r.t, err, r.bound, plan, v[i].source);
  }
  printf("\nworst error %.1f %%\n", worst);
  return 0;
}

/* ------------------------------------------------------------------ scale */

static double wall(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void row_head(void) {
  printf("%-13s %6s %5s %6s %-9s %5s %9s %9s %6s %4s %6s %9s %8s %8s %8s %6s\n", "op", "k", "gbit",
         "size", "plan", "share", "time_s", "bound_s", "x_bnd", "deg", "depth", "dec/s",
         "dir_cpu", "host_core", "once", "wall_s");
}

static void row(const hpl__simred_params *p, const hpl__simred_result *r, const char *plan,
                double w) {
  printf("%-13s %6u %5g %5gM %-9s %5.2f %9.4f %9.4f %6.3f %4d %6d %9.0f %7.3f%% %7.1f%% %8s %6.2f\n",
         kind_name(p->kind), p->k, p->rate * 8 / EFF / 1e9, p->size / MIB, plan, p->cpu_share, r->t,
         r->bound, r->t / r->bound, r->degree, r->depth, r->decisions / r->t,
         100 * r->dir_busy / r->t, 100 * r->cpu_max / r->t, r->once_ok ? "yes" : "NO", w);
  fflush(stdout);
}

static int scale(void) {
  row_head();
  hpl__simred_kind kinds[] = {HPL__SIMRED_REDUCE, HPL__SIMRED_ALLREDUCE, HPL__SIMRED_ALLREDUCE_NR};
  double gb[] = {10, 25};
  /* per kind and rate: sha256 on one core per store, on its thread pool's
   * 4, integrity off on one core; then the plan with --reduce-latency and
   * --reduce-bandwidth "auto" (the true values) */
  static const struct { int sha; double share; int aut; } var[] = {
      {1, 1, 0}, {1, 4, 0}, {0, 1, 0}, {1, 4, 1}};
  for (size_t g = 0; g < 2; g++)
    for (size_t k = 0; k < 3; k++)
      for (size_t v = 0; v < sizeof var / sizeof var[0]; v++) {
        if (kinds[k] == HPL__SIMRED_ALLREDUCE && var[v].aut) continue; /* a ring has no plan */
        hpl__simred_params p = hpl__simred_defaults();
        p.kind = kinds[k];
        p.k = 1000;
        p.size = 256 * MIB;
        p.rate = gb[g] * 1e9 * EFF / 8;
        p.lat = 25e-6;
        p.start = 2 * p.lat + p.dir_cpu + 3 * 2 * p.lat;
        p.cpu_share = var[v].share;
        hpl__simred_integrity(&p, var[v].sha);
        if (var[v].aut) p.plan_lat = p.lat, p.plan_bw = p.rate;
        hpl__simred_result r;
        double w0 = wall();
        if (hpl__simred_run(&p, &r)) return 1;
        char plan[16];
        snprintf(plan, sizeof plan, "%s%s", kinds[k] == HPL__SIMRED_ALLREDUCE ? "ring" : var[v].aut ? "auto" : "deflt",
                 var[v].sha ? "" : ",off");
        row(&p, &r, plan, wall() - w0);
      }
  /* what-if: the same reduce with a tree of degree 2, 3 and 4 forced
   * (hpl__plan_build), sha256 on 4 cores */
  for (size_t g = 0; g < 2; g++)
    for (int d = 2; d <= 4; d++) {
      hpl__simred_params p = hpl__simred_defaults();
      p.k = 1000;
      p.size = 256 * MIB;
      p.rate = gb[g] * 1e9 * EFF / 8;
      p.lat = 25e-6;
      p.start = 2 * p.lat + p.dir_cpu + 3 * 2 * p.lat;
      p.cpu_share = 4;
      p.degree = d;
      hpl__simred_result r;
      double w0 = wall();
      if (hpl__simred_run(&p, &r)) return 1;
      char plan[16];
      snprintf(plan, sizeof plan, "forced%d", d);
      row(&p, &r, plan, wall() - w0);
    }
  return 0;
}

/* ------------------------------------------------------------------ check (ctest) */

static int failed;
#define CHECK(c, ...) HPL__SIM_CHECK(failed, c, __VA_ARGS__)

static int check(void) {
  /* fixed CPU costs (deterministic): sha256 0.5 ns/B, sum 0.1, base 0.5 */
  row_head();
  hpl__simred_kind kinds[] = {HPL__SIMRED_REDUCE, HPL__SIMRED_ALLREDUCE, HPL__SIMRED_ALLREDUCE_NR};
  for (int i = 0; i < 3; i++) {
    hpl__simred_params p = hpl__simred_defaults();
    p.kind = kinds[i];
    p.k = 64;
    p.size = 64 * MIB;
    p.rate = 10e9 * EFF / 8;
    p.lat = 25e-6;
    p.c_hash = 0.5e-9, p.c_comb = 0.1e-9, p.c_base = 0.5e-9;
    p.cpu_share = 4;
    hpl__simred_result r;
    CHECK(hpl__simred_run(&p, &r) == 0, "%s: the run failed", kind_name(p.kind));
    row(&p, &r, i == 1 ? "ring" : "deflt", 0);
    double sb = p.size / p.rate;
    CHECK(r.once_ok, "%s: a source was not counted exactly once (%g counted)", kind_name(p.kind),
          r.counted);
    CHECK(r.t >= (i == 0 ? 1 : 2 * 63.0 / 64) * sb, "%s: %.4f s, faster than its bytes allow",
          kind_name(p.kind), r.t);
    CHECK(r.t <= 1.05 * r.bound, "%s: %.4f s, over 1.05 x the bound %.4f", kind_name(p.kind), r.t,
          r.bound);
    if (i == 0) {
      CHECK(r.degree == 1 && r.depth == 64, "reduce: plan degree %d depth %d, the planner makes a "
            "chain of 64 for 64 MiB", r.degree, r.depth);
      CHECK(r.link_bytes == p.size, "reduce: %.0f bytes on the busiest link", r.link_bytes);
    }
  }
  /* a small object: the planner picks a tree, a parent's downlink is shared */
  hpl__simred_params p = hpl__simred_defaults();
  p.k = 64;
  p.size = 256 * 1024;
  p.rate = 10e9 * EFF / 8;
  p.c_hash = 0.5e-9, p.c_comb = 0.1e-9, p.c_base = 0.5e-9;
  hpl__simred_result r;
  CHECK(hpl__simred_run(&p, &r) == 0, "small: the run failed");
  row(&p, &r, "deflt", 0);
  CHECK(r.degree > 1 && r.depth < 10, "small: degree %d depth %d, expected a shallow tree", r.degree,
        r.depth);
  CHECK(r.once_ok, "small: a source was not counted exactly once");
  CHECK(r.t >= r.degree * p.size / p.rate, "small: %.6f s, faster than %d streams into a parent",
        r.t, r.degree);
  printf(failed ? "sim_reduce_small: FAILED\n" : "sim_reduce_small: ok\n");
  return failed;
}

/* ------------------------------------------------------------------ one run */

static double size_arg(const char *s) {
  char *e;
  double v = strtod(s, &e);
  if (*e == 'K' || *e == 'k') v *= 1024;
  else if (*e == 'M' || *e == 'm') v *= MIB;
  else if (*e == 'G' || *e == 'g') v *= 1024 * MIB;
  return v;
}

int hpl__simred_main(int argc, char **argv) {
  if (!c_hash_m) hpl__simred_calibrate(&c_hash_m, &c_comb_m);
  if (argc > 1 && strcmp(argv[1], "validate") == 0) return validate();
  if (argc > 1 && strcmp(argv[1], "scale") == 0) return scale();
  if (argc > 1 && strcmp(argv[1], "check") == 0) return check();
  hpl__simred_params p = hpl__simred_defaults();
  p.kind = strcmp(argv[0], "reduce") == 0           ? HPL__SIMRED_REDUCE
           : strcmp(argv[0], "allreduce") == 0      ? HPL__SIMRED_ALLREDUCE
                                                    : HPL__SIMRED_ALLREDUCE_NR;
  int aut = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
    if (strcmp(a, "--auto") == 0) { aut = 1; continue; }
    i++;
    if (strcmp(a, "--k") == 0) p.k = (uint32_t)atoi(v);
    else if (strcmp(a, "--gbit") == 0) p.rate = atof(v) * 1e9 * EFF / 8;
    else if (strcmp(a, "--size") == 0) p.size = size_arg(v);
    else if (strcmp(a, "--unit") == 0) p.unit = size_arg(v);
    else if (strcmp(a, "--lat-us") == 0) p.lat = atof(v) * 1e-6;
    else if (strcmp(a, "--cpu-share") == 0) p.cpu_share = atof(v);
    else if (strcmp(a, "--base-cpu") == 0) /* s per GiB moved, an integrity-off run's */
      p.c_base = fmax(0, atof(v) / (1024.0 * MIB) - c_comb_m);
    else if (strcmp(a, "--degree") == 0) p.degree = atoi(v);
    else if (strcmp(a, "--integrity") == 0) hpl__simred_integrity(&p, strcmp(v, "off") != 0);
    else {
      fprintf(stderr, "hpsim %s: unknown option '%s' (see bench/sim/simredrun.c)\n", argv[0], a);
      return 2;
    }
  }
  if (aut) p.plan_lat = p.lat, p.plan_bw = p.rate;
  hpl__simred_result r;
  if (hpl__simred_run(&p, &r)) {
    fprintf(stderr, "hpsim %s: bad parameters (k >= 2, size >= unit)\n", argv[0]);
    return 2;
  }
  row_head();
  row(&p, &r, p.kind == HPL__SIMRED_ALLREDUCE ? "ring" : aut ? "auto" : "deflt", 0);
  return 0;
}
