/* cost.c - the reduce cost model's parameters, configured or measured
 * (see cost.h). */
#include "cost.h"

#include <stdlib.h>

#include "hoplite.h"

/* The module's state (dir_server.cost): EWMAs of half the heartbeat round
 * trip and of pull rates (0: none yet). */
struct dir_cost {
  double lat_measured, bw_measured;
};

int dir_cost_init(dir_server *s) {
  s->cost = calloc(1, sizeof *s->cost);
  return s->cost ? 0 : HPL_ENOMEM;
}

void dir_cost_free(dir_server *s) {
  free(s->cost);
  s->cost = NULL;
}

double dir_cost_latency(dir_server *s) {
  double m = s->cost->lat_measured;
  return s->cfg.latency_auto && m > 0 ? m : s->cfg.reduce_latency_s;
}

double dir_cost_bandwidth(dir_server *s) {
  double m = s->cost->bw_measured;
  return s->cfg.bandwidth_auto && m > 0 ? m : s->cfg.reduce_bandwidth;
}

void dir_cost_note_rtt(dir_server *s, uint32_t rtt_us) {
  if (!rtt_us) return;
  double l = (double)rtt_us / 2e6; /* half a round trip, smoothed */
  s->cost->lat_measured = s->cost->lat_measured > 0 ? 0.9 * s->cost->lat_measured + 0.1 * l : l;
}

void dir_cost_note_rate(dir_server *s, uint64_t rate) {
  if (!rate) return;
  double b = (double)rate;
  s->cost->bw_measured = s->cost->bw_measured > 0 ? 0.8 * s->cost->bw_measured + 0.2 * b : b;
}
