/* nodestat.c - a node's heartbeat statistics and link delays (see
 * nodes.h): the interval EWMAs behind the adaptive timeouts, the one-way
 * delay of its heartbeats, the delay its link adds. Arithmetic over a
 * hpl__dir_node's numbers only: no I/O, no timers, no other module. */
#include "nodes.h"

#include <math.h>

#include "util.h"

uint64_t hpl__dir_node_probe_timeout(const hpl__dir_config *cfg, const hpl__dir_node *n) {
  /* the configured time, plus what its heartbeats say it needs when its
   * loop or its link is busy (4 standard deviations of their interval,
   * twice its last round trip): a node on a loaded machine is not judged
   * silent for a jitter it always shows */
  double base = cfg->probe_ms, t = base;
  if (n->hb_n >= 8 && n->hb_var > 0) t += 4 * sqrt(n->hb_var);
  t += 2.0 * n->rtt_us / 1000.0;
  return t > 8 * base ? (uint64_t)(8 * base) : (uint64_t)t;
}

uint64_t hpl__dir_node_timeout_ms(const hpl__dir_config *cfg, const hpl__dir_node *n) {
  uint64_t hi = cfg->heartbeat_timeout_ms, lo = 3ull * cfg->heartbeat_ms;
  if (lo > hi) lo = hi;
  if (n->hb_n < 8) return hi;
  double sd = n->hb_var > 0 ? sqrt(n->hb_var) : 0;
  double t = n->hb_mean + 8 * sd + cfg->heartbeat_ms / 2.0;
  if (t < (double)lo) return lo;
  if (t > (double)hi) return hi;
  return (uint64_t)t;
}

/* The interval statistics describe the jitter of a working node, which
 * sets its probe and heartbeat timeouts; an outage is not jitter. A node
 * stopped or cut off for a few seconds would otherwise leave one huge
 * interval, then a burst of near-zero ones (its queued heartbeats), in the
 * EWMAs, and its probes would get the 8x cap (800 ms) for the next half
 * minute: seen after a cut in the fault runs. So an interval that spans a
 * probe it failed, or that is over twice the mean and 6 standard
 * deviations over it, is an outage; it and the heartbeats arriving within
 * one mean interval after it are not counted. */
void hpl__dir_node_note_heartbeat(hpl__dir_node *n, uint64_t now) {
  int outage = n->hb_outage;
  n->hb_outage = 0;
  if (n->hb_last_ms && now > n->hb_last_ms) {
    double x = (double)(now - n->hb_last_ms);
    if (outage || (n->hb_n >= 2 && x > 2 * n->hb_mean &&
                   x > n->hb_mean + 6 * sqrt(n->hb_var > 0 ? n->hb_var : 0))) {
      n->hb_backlog_until_ms = now + (uint64_t)n->hb_mean;
    } else if (now >= n->hb_backlog_until_ms) {
      if (n->hb_n == 0) {
        n->hb_mean = x;
        n->hb_var = 0;
      } else {
        double d = x - n->hb_mean;
        n->hb_mean += 0.1 * d;
        n->hb_var = 0.9 * (n->hb_var + 0.1 * d * d);
      }
      n->hb_n++;
    }
  }
  n->hb_last_ms = now;
}

/* Epochs of the smallest one-way delay: a minimum older than two of them
 * is forgotten (clock drift, a path that changed). */
#define OWD_EPOCH_MS 30000

void hpl__dir_node_note_owd(hpl__dir_node *n, uint64_t sent_us) {
  if (!sent_us) return;
  uint64_t now_ms = hpl__now_ms();
  int64_t owd = (int64_t)(hpl__now_ns() / 1000 - sent_us); /* clocks may differ: relative only */
  if (!n->owd_epoch_ms) {
    n->owd_min[0] = n->owd_min[1] = owd;
    n->owd_epoch_ms = now_ms;
  } else if (now_ms - n->owd_epoch_ms >= OWD_EPOCH_MS) {
    n->owd_min[1] = n->owd_min[0];
    n->owd_min[0] = owd;
    n->owd_epoch_ms = now_ms;
  }
  if (owd < n->owd_min[0]) n->owd_min[0] = owd;
  int64_t base = n->owd_min[0] < n->owd_min[1] ? n->owd_min[0] : n->owd_min[1];
  int64_t q = owd - base;
  n->queue_us = q <= 0 ? 0 : q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
}

uint32_t hpl__dir_node_delay_us(const hpl__dir_node *n, uint64_t now_ms) {
  uint64_t d = n->rtt_us;
  if (n->queue_us > d) d = n->queue_us;
  if (n->hb_n >= 2 && n->hb_last_ms && now_ms > n->hb_last_ms) {
    double late = (double)(now_ms - n->hb_last_ms) - n->hb_mean;
    if (late > 0 && late * 1000.0 > (double)d) d = (uint64_t)(late * 1000.0);
  }
  return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

uint32_t hpl__dir_node_link_delay_us(const hpl__dir_node *n, uint64_t now_us) {
  uint64_t d = hpl__dir_node_delay_us(n, now_us / 1000);
  if (n->measure_sent_us && now_us - n->measure_sent_us < 1000000) {
    uint64_t m = n->measure_rtt_us ? n->measure_rtt_us : now_us - n->measure_sent_us;
    if (m > d) d = m;
  }
  return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}
