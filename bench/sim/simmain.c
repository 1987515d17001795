/* simmain.c - hpsim's command line (see sim.h): one run, the scale table,
 * the small self-check ctest runs (sim_small), and the validation table
 * (simvalid.c).
 *
 *   hpsim [run] [--nodes N] [--gbit R] [--size BYTES[KMG]] [--lat-us U]
 *         [--unit BYTES[KMG]] [--eff E] [--arrive S] [--dir-cpu-us U]
 *         [--measured] [--max-senders K] [--kill F | --pause F]
 *         [--fail-at S] [--pause-s S] [--dead-after S] [--kill-close S]
 *         [--restart-at S] [--lease-s S] [--no-held-upstream 1] [--wall S] [-v]
 *   hpsim validate     simulated against measured (bench/results)
 *   hpsim compare FILE...  against one session's rows (simcompare.c,
 *                      bench/sim/validate_session.sh)
 *   hpsim scale        1 GiB to 100/1 000/10 000 nodes, failures
 *   hpsim check        64 nodes, asserts (exit 1 on a failed check)
 *   hpsim touchcost    a read into fresh pages, as a p2p relay's (simcpu.c)
 *   hpsim calib        the digest and combine costs now, as compare's calib row
 *   hpsim reduce|allreduce|allreduce-noring ...   see simredrun.c
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

/* ------------------------------------------------------------------ scale */

static void scale_one(hpl__sim_params p, const char *fail) {
  hpl__sim_result r = hpl__sim_run_one(&p);
  hpl__sim_row(&p, &r, fail);
}

/* A scale run's parameters: 1 GiB, 25 µs latency, `nodes` at `bits`/s. */
static hpl__sim_params scale_params(uint32_t nodes, double bits, int measured, double wall) {
  hpl__sim_params p = hpl__sim_defaults();
  p.nodes = nodes;
  p.bits = bits;
  p.size = 1024.0 * (1 << 20);
  p.lat = 25e-6;
  p.dir_measured = measured;
  p.wall_limit = wall;
  return p;
}

static int scale(int argc, char **argv) {
  double wall_limit = argc > 0 ? atof(argv[0]) : 120;
  int measured = argc > 1 ? atoi(argv[1]) : 1;
  hpl__sim_row_header();
  uint32_t ns[] = {100, 1000, 10000};
  double gb[] = {10e9, 25e9};
  for (int a = 0; a < 2; a++)
    for (size_t g = 0; g < 2; g++)
      for (size_t k = 0; k < 3; k++) {
        hpl__sim_params p = scale_params(ns[k], gb[g], measured, wall_limit);
        p.arrive_over = a ? 10 : 0;
        scale_one(p, "-");
      }
  /* failures at 1 000 nodes, drawn among the receivers streaming at 0.4 s
   * (the label gives how many were drawn), all at once and arriving */
  for (int a = 0; a < 2; a++)
    for (int pause = 0; pause < 2; pause++)
      for (int f = 0; f < 2; f++) {
        hpl__sim_params p = scale_params(1000, 10e9, measured, wall_limit);
        p.fail_frac = f ? 0.05 : 0.01;
        p.fail_pause = pause;
        p.fail_at = 0.4;
        p.arrive_over = a ? 10 : 0;
        hpl__sim_result r = hpl__sim_run_one(&p);
        char what[32];
        snprintf(what, sizeof what, "%s%d%%:%u", pause ? "pause" : "kill", f ? 5 : 1, r.drawn);
        hpl__sim_row(&p, &r, what);
      }
  /* the directory restarted at 0.4 s (a new one answers lease_s later),
   * the stores re-reporting their copies with their senders (HeldObject.
   * upstream), and without (complete copies only: what an older store does) */
  for (int a = 0; a < 2; a++)
    for (int old = 0; old < 2; old++) {
      hpl__sim_params p = scale_params(1000, 10e9, measured, wall_limit);
      p.restart_at = 0.4;
      p.no_held_upstream = old;
      p.arrive_over = a ? 10 : 0;
      scale_one(p, old ? "dirrst-noup" : "dirrestart");
    }
  return 0;
}

/* ------------------------------------------------------------------ check (ctest) */

static int failed;
#define CHECK(c, ...) HPL__SIM_CHECK(failed, c, __VA_ARGS__)

static int check(void) {
  /* 64 nodes at 10 Gbit/s, 256 MiB, fixed directory cost (deterministic) */
  hpl__sim_params p = hpl__sim_defaults();
  p.nodes = 64;
  p.bits = 10e9;
  p.size = 256.0 * (1 << 20);
  p.lat = 25e-6;
  hpl__sim_row_header();
  hpl__sim_result r = hpl__sim_run_one(&p);
  hpl__sim_row(&p, &r, "-");
  CHECK(r.rc == 0, "all-at-once: not every receiver finished");
  CHECK(r.t >= r.sbg, "all-at-once: faster than S/B (%.4f < %.4f)", r.t, r.sbg);
  CHECK(r.t <= 1.05 * r.bound, "all-at-once: %.4f s over 1.05 x the bound %.4f", r.t, r.bound);
  CHECK(fabs(r.src_copies - 1.0) < 0.01, "all-at-once: the source sent %.3f copies, not 1",
        r.src_copies);
  CHECK(r.cmax == 1, "all-at-once: a receiver got %u streams, not 1", r.cmax);
  CHECK(r.dmax == 63, "all-at-once: chain depth %u, the real pick makes one chain of 63", r.dmax);
  CHECK(r.decisions == 63, "all-at-once: %llu decisions for 63 receivers",
        (unsigned long long)r.decisions);
  /* arriving over 2 s: copies complete meanwhile and serve */
  p.arrive_over = 2;
  r = hpl__sim_run_one(&p);
  hpl__sim_row(&p, &r, "-");
  CHECK(r.rc == 0, "arriving: not every receiver finished");
  CHECK(r.dmax < 63, "arriving: depth %u, complete copies should shorten the chain", r.dmax);
  /* a slow directory (5 ms a request): its busy share is of the run, at
   * most 100 % (it was busy / the slowest get: over 100 % when arriving) */
  p.dir_cpu = 5e-3;
  r = hpl__sim_run_one(&p);
  hpl__sim_row(&p, &r, "dir5ms");
  CHECK(r.dcpu <= 1.0 && r.dcpu > 0.05, "slow directory: busy share %.1f %%", 100 * r.dcpu);
  p.dir_cpu = hpl__sim_defaults().dir_cpu;
  /* 5 % killed, 5 % paused mid-broadcast, drawn among the receivers
   * streaming then: every live receiver finishes, the survivors soon */
  p.arrive_over = 0;
  p.fail_frac = 0.05;
  p.fail_at = 0.1;
  for (int pause = 0; pause < 2; pause++) {
    const char *k = pause ? "pause" : "kill";
    p.fail_pause = pause;
    r = hpl__sim_run_one(&p);
    hpl__sim_row(&p, &r, pause ? "pause5%" : "kill5%");
    CHECK(r.rc == 0, "%s: a receiver never finished", k);
    CHECK(r.drawn == 3, "%s: %u failed, not 3 of the 63 streaming at 0.1 s", k, r.drawn);
    CHECK(r.moves > 0, "%s: nobody moved off a failed sender", k);
    CHECK(r.failed == (pause ? 0u : 3u), "%s: %u receivers lost", k, r.failed);
    /* a killed store's connection closes: the directory drops it at once,
     * so nobody is sent to it again (each was: a loop of refused connects) */
    CHECK(r.decisions <= 63 + 3 * 4, "%s: %llu decisions for 63 receivers and 3 failures", k,
          (unsigned long long)r.decisions);
    /* survivors wait for a detection, not for the pause to end */
    CHECK(r.t < r.bound + (pause ? 0.6 : 0.1), "%s: survivors took %.3f s (bound %.3f)", k, r.t,
          r.bound);
    if (pause)
      CHECK(r.tfailed > p.pause_s && r.rereports == 3,
            "pause: the paused stores' own gets (%.3f s) and re-registrations (%u, past "
            "dead_after: 3)", r.tfailed, r.rereports);
  }
  /* a star (--max-senders above the nodes): 399 streams share the source's
   * uplink; a new stream changes the group's one share, not 398 rates */
  {
    hpl__sim_params q = hpl__sim_defaults();
    q.nodes = 400;
    q.bits = 10e9;
    q.size = 16.0 * (1 << 20);
    q.lat = 25e-6;
    q.max_senders = 100000;
    hpl__sim_result s = hpl__sim_run_one(&q);
    hpl__sim_row(&q, &s, "star");
    double t = 399 * s.sbg;
    CHECK(s.rc == 0 && s.fanout == 399, "star: fan-out %u, not 399", s.fanout);
    CHECK(s.t > t && s.t < 1.01 * t, "star: %.3f s, not 399 x S/B = %.3f s", s.t, t);
    CHECK(s.rate_changes < 4 * 400, "star: %llu rate changes (one per stream at each start: "
          "n^2/2 = 80 000)", (unsigned long long)s.rate_changes);
  }
  /* the directory restarted mid-broadcast: the streams go on, every store
   * registers again and re-reports its copy, gets asked meanwhile wait for
   * the new directory (lease_s) and are answered from the re-formed table */
  p.fail_frac = 0;
  p.fail_pause = 0;
  p.restart_at = 0.1;
  r = hpl__sim_run_one(&p);
  hpl__sim_row(&p, &r, "dirrestart");
  CHECK(r.rc == 0 && r.rereports == 64, "restart: %u of 64 stores re-registered", r.rereports);
  CHECK(r.t <= 1.01 * r.bound && r.moves == 0 && fabs(r.src_copies - 1.0) < 0.01,
        "restart at once: %.4f s (bound %.4f), %llu moves, %.3f source copies", r.t, r.bound,
        (unsigned long long)r.moves, r.src_copies);
  p.arrive_over = 2;
  p.restart_at = 0.5;
  r = hpl__sim_run_one(&p);
  hpl__sim_row(&p, &r, "dirrestart");
  CHECK(r.rc == 0, "restart, arriving: a receiver never finished");
  CHECK(r.t > p.lease_s && r.t < r.bound + p.lease_s + p.reconnect_s + 0.1,
        "restart, arriving: the slowest get took %.3f s (bound %.3f + lease %.1f)", r.t, r.bound,
        p.lease_s);
  printf(failed ? "sim_small: FAILED\n" : "sim_small: ok\n");
  return failed;
}

/* ------------------------------------------------------------------ run */

static double size_arg(const char *s) {
  char *e;
  double v = strtod(s, &e);
  if (*e == 'K' || *e == 'k') v *= 1024;
  else if (*e == 'M' || *e == 'm') v *= 1 << 20;
  else if (*e == 'G' || *e == 'g') v *= 1 << 30;
  return v;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "validate") == 0) return hpl__sim_validate();
  if (argc > 1 && strcmp(argv[1], "compare") == 0) return hpl__sim_compare(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "scale") == 0) return scale(argc - 2, argv + 2);
  if (argc > 1 && strcmp(argv[1], "check") == 0) return check();
  if (argc > 1 && strcmp(argv[1], "touchcost") == 0) return hpl__sim_touchcost();
  if (argc > 1 && strcmp(argv[1], "calib") == 0) { /* compare's calib row, measured now */
    double h, c;
    hpl__simred_calibrate(&h, &c);
    printf("calib\t%.6e\t%.6e\n", h, c);
    return 0;
  }
  if (argc > 1 && (strcmp(argv[1], "reduce") == 0 || strcmp(argv[1], "allreduce") == 0 ||
                   strcmp(argv[1], "allreduce-noring") == 0))
    return hpl__simred_main(argc - 1, argv + 1); /* simredrun.c */
  hpl__sim_params p = hpl__sim_defaults();
  const char *fail = "-";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
    if (strcmp(a, "run") == 0) continue;
    if (strcmp(a, "-v") == 0) { p.verbose++; continue; }
    if (strcmp(a, "--measured") == 0) { p.dir_measured = 1; continue; }
    i++;
    if (strcmp(a, "--nodes") == 0) p.nodes = (uint32_t)atoi(v);
    else if (strcmp(a, "--gbit") == 0) p.bits = atof(v) * 1e9;
    else if (strcmp(a, "--size") == 0) p.size = size_arg(v);
    else if (strcmp(a, "--unit") == 0) p.unit = size_arg(v);
    else if (strcmp(a, "--lat-us") == 0) p.lat = atof(v) * 1e-6;
    else if (strcmp(a, "--eff") == 0) p.eff = atof(v);
    else if (strcmp(a, "--arrive") == 0) p.arrive_over = atof(v);
    else if (strcmp(a, "--dir-cpu-us") == 0) p.dir_cpu = atof(v) * 1e-6;
    else if (strcmp(a, "--max-senders") == 0) p.max_senders = (uint32_t)atoi(v);
    else if (strcmp(a, "--kill") == 0) p.fail_frac = atof(v), fail = "kill";
    else if (strcmp(a, "--pause") == 0) p.fail_frac = atof(v), p.fail_pause = 1, fail = "pause";
    else if (strcmp(a, "--fail-at") == 0) p.fail_at = atof(v);
    else if (strcmp(a, "--pause-s") == 0) p.pause_s = atof(v);
    else if (strcmp(a, "--wall") == 0) p.wall_limit = atof(v);
    else if (strcmp(a, "--restart-at") == 0) p.restart_at = atof(v), fail = "dirrestart";
    else if (strcmp(a, "--lease-s") == 0) p.lease_s = atof(v);
    else if (strcmp(a, "--no-held-upstream") == 0) p.no_held_upstream = atoi(v);
    else if (strcmp(a, "--dead-after") == 0) p.dead_after = atof(v);
    else if (strcmp(a, "--kill-close") == 0) p.kill_close = atof(v);
    else {
      fprintf(stderr, "hpsim: unknown option '%s' (see bench/sim/simmain.c)\n", a);
      return 2;
    }
  }
  if (p.nodes < 2) {
    fprintf(stderr, "hpsim: --nodes must be at least 2\n");
    return 2;
  }
  hpl__sim_row_header();
  hpl__sim_result r = hpl__sim_run_one(&p);
  hpl__sim_row(&p, &r, fail);
  printf("events %llu, directory decisions %llu (waits %llu), real decision CPU %.3f s, "
         "last copy at %.4f s, failed %u (drawn among streaming; a paused one's own get %.4f s), "
         "re-registered %u, wall %.2f s\n",
         (unsigned long long)r.events, (unsigned long long)r.decisions,
         (unsigned long long)r.waits, r.real_cpu, r.last, r.drawn, r.tfailed, r.rereports, r.wall);
  return r.rc ? 1 : 0;
}
