/* simrun.c - one broadcast simulated and its figures (see sim.h): the
 * parameters' defaults, a run of the world to its end with what the tables
 * print (time against the bound, chain depth and fan-out, the directory's
 * decisions and CPU), and a table row. Called by simvalid.c and simmain.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digest.h"
#include "sim.h"

#define CONNECT_RTTS 3 /* as simstore.c */

hpl__sim_params hpl__sim_defaults(void) {
  hpl__sim_params p = {0};
  p.nodes = 8;
  p.bits = 1e9;
  p.eff = 0.956; /* TCP goodput at MTU 1500 (bench/results/README.md: 1.046 x S/B) */
  p.lat = 50e-6;
  p.size = 64.0 * (1 << 20);
  p.unit = 0; /* hpl__digest_unit(size): --integrity sha256 (the default) */
  p.dir_cpu = 10e-6;
  p.max_senders = 1; /* directory/server.c: max_senders = 1 */
  p.fail_at = 0.3;
  p.pause_s = 2.0;
  p.kill_close = KILL_CLOSE_QUIET;
  p.dead_after = 1.5;  /* nodestat.c: 3 x heartbeat_ms (500 ms) for a steady node */
  p.probe_s = 0.1 + 4 * 50e-6; /* nodestat.c: probe_ms 100 + 2 x RTT */
  p.lease_s = 0.5;     /* a new leader after the lease and election (issue 45's default) */
  p.reconnect_s = 0.1; /* store/dlprobe.c: the next directory is tried every heartbeat/5 */
  return p;
}

static double wall(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

hpl__sim_result hpl__sim_run_one(const hpl__sim_params *p) {
  hpl__sim_world w;
  memset(&w, 0, sizeof w);
  w.p = *p;
  if (!(w.p.unit > 0)) w.p.unit = (double)hpl__digest_unit((uint64_t)p->size);
  w.p.probe_s = 0.1 + 4 * p->lat;
  p = &w.p;
  double w0 = wall();
  hpl__sim_result r = {0};
  r.rc = hpl__sim_world_run(&w);
  r.wall = wall() - w0;
  double B = p->bits * p->eff / 8;
  r.t = w.slowest; /* at once: the last survivor's time; arriving: the slowest get */
  r.tfailed = w.slowest_failed;
  r.last = w.last_done;
  r.sbg = p->size / B;
  uint64_t dsum = 0, csum = 0, nrec = 0;
  for (uint32_t i = 1; i < p->nodes; i++) {
    uint32_t d = hpl__sim_depth(&w, i);
    if (d > r.dmax) r.dmax = d;
    dsum += d;
    csum += w.copies[i];
    nrec++;
    if (w.copies[i] > r.cmax) r.cmax = w.copies[i];
  }
  r.dmean = nrec ? (double)dsum / nrec : 0;
  r.cmean = nrec ? (double)csum / nrec : 0;
  /* the bound: the first answer and connection, S/B, and the fill of the
   * chain actually formed: each hop one unit and one latency behind */
  double start = 2 * p->lat + p->dir_cpu + CONNECT_RTTS * 2 * p->lat;
  r.bound = start + r.sbg + r.dmax * (p->unit / B + p->lat) + p->lat;
  r.src_copies = hpl__sim_source_copies(&w);
  const hpl__sim_dirstats *ds = hpl__sim_dir_stats(w.dir);
  r.decisions = ds->decisions;
  r.waits = ds->waits;
  /* per second of the run (from the first ask to the last copy complete,
   * or to the end of the directory's last request if that is later: the
   * last LOC_COMPLETEs queue behind a saturated directory), not of the
   * slowest get: with arrivals spread over 10 s the slowest get is a
   * fraction of the run, and busy / get time read 200-474 % */
  double span = ds->last_end > r.last ? ds->last_end : r.last;
  r.dps = span > 0 ? ds->decisions / span : 0;
  r.dcpu = span > 0 ? ds->busy / span : 0;
  r.real_cpu = ds->real_cpu;
  r.max_pick = ds->max_pick;
  r.max_queue = ds->max_queue;
  r.fanout = w.net.max_fanout;
  r.moves = w.moves;
  r.failed = w.failed;
  r.drawn = w.drawn;
  r.rereports = w.rereports;
  r.events = w.clk.events;
  r.rate_changes = w.net.rate_changes;
  hpl__sim_world_free(&w);
  return r;
}

void hpl__sim_row_header(void) {
  printf("%-7s %5s %6s %6s %-11s %9s %9s %6s %5s %6s %4s %7s %9s %7s %9s %8s %6s %5s %7s\n", "nodes",
         "gbit", "size", "arrive", "fail", "time_s", "bound_s", "x_bnd", "depth", "d_mean",
         "fan", "src_cp", "dec/s", "dir_cpu", "max_pick", "max_q_s", "cp/rcv", "moves", "wall_s");
}

void hpl__sim_row(const hpl__sim_params *p, const hpl__sim_result *r, const char *fail) {
  char sz[16];
  if (p->size >= (1 << 30)) snprintf(sz, sizeof sz, "%gG", p->size / (1 << 30));
  else if (p->size >= (1 << 20)) snprintf(sz, sizeof sz, "%gM", p->size / (1 << 20));
  else snprintf(sz, sizeof sz, "%gK", p->size / 1024);
  printf("%-7u %5g %6s %6g %-11s %9.4f %9.4f %6.3f %5u %6.1f %4u %7.3f %9.0f %6.1f%% %8.2fms "
         "%8.4f %6.2f %5llu %7.2f%s\n",
         p->nodes, p->bits / 1e9, sz, p->arrive_over, fail, r->t, r->bound, r->t / r->bound,
         r->dmax, r->dmean, r->fanout, r->src_copies, r->dps, 100 * r->dcpu, 1e3 * r->max_pick,
         r->max_queue, r->cmean, (unsigned long long)r->moves, r->wall,
         r->rc ? "  UNFINISHED" : "");
  fflush(stdout);
}
