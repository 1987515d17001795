/* cost.c - the reduce cost model's parameters, configured or measured
 * (see cost.h). */
#include "cost.h"

double dir_cost_latency(dir_server *s) {
  return s->cfg.latency_auto && s->lat_measured > 0 ? s->lat_measured : s->cfg.reduce_latency_s;
}

double dir_cost_bandwidth(dir_server *s) {
  return s->cfg.bandwidth_auto && s->bw_measured > 0 ? s->bw_measured : s->cfg.reduce_bandwidth;
}

void dir_cost_note_rtt(dir_server *s, uint32_t rtt_us) {
  if (!rtt_us) return;
  double l = (double)rtt_us / 2e6; /* half a round trip, smoothed */
  s->lat_measured = s->lat_measured > 0 ? 0.9 * s->lat_measured + 0.1 * l : l;
}

void dir_cost_note_rate(dir_server *s, uint64_t rate) {
  if (!rate) return;
  double b = (double)rate;
  s->bw_measured = s->bw_measured > 0 ? 0.8 * s->bw_measured + 0.2 * b : b;
}
