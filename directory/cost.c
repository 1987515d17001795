/* cost.c - the reduce cost model's parameters, configured or measured
 * (see cost.h). */
#include "cost.h"

#include <stdlib.h>

#include "hoplite.h"

/* The module's state (hpl__dir_server.cost): EWMAs of half the heartbeat round
 * trip and of pull rates (0: none yet). */
struct hpl__dir_cost {
  double lat_measured, bw_measured;
};

int hpl__dir_cost_init(hpl__dir_server *s) {
  s->cost = calloc(1, sizeof *s->cost);
  return s->cost ? 0 : HPL_ENOMEM;
}

void hpl__dir_cost_free(hpl__dir_server *s) {
  free(s->cost);
  s->cost = NULL;
}

double hpl__dir_cost_latency(hpl__dir_server *s) {
  double m = s->cost->lat_measured;
  return s->cfg.latency_auto && m > 0 ? m : s->cfg.reduce_latency_s;
}

double hpl__dir_cost_bandwidth(hpl__dir_server *s) {
  double m = s->cost->bw_measured;
  return s->cfg.bandwidth_auto && m > 0 ? m : s->cfg.reduce_bandwidth;
}

void hpl__dir_cost_note_rtt(hpl__dir_server *s, uint32_t rtt_us) {
  if (!rtt_us) return;
  double l = (double)rtt_us / 2e6; /* half a round trip, smoothed */
  s->cost->lat_measured = s->cost->lat_measured > 0 ? 0.9 * s->cost->lat_measured + 0.1 * l : l;
}

void hpl__dir_cost_note_rate(hpl__dir_server *s, uint64_t rate) {
  if (!rate) return;
  double b = (double)rate;
  s->cost->bw_measured = s->cost->bw_measured > 0 ? 0.8 * s->cost->bw_measured + 0.2 * b : b;
}
