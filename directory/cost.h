/*
 * cost.h - the parameters of the reduce planner's cost model (src/common/planner.h):
 * per-hop latency L and link bandwidth B, configured or, when configured
 * "auto", measured (half the heartbeat round trip stores report; the rate
 * of pulls from complete senders).
 *
 * Owns its state (hpl__dir_server.cost). Callers: nodes.c (heartbeats), locs.c
 * (completed pulls), reduce_tree.c (planning), ring.c (its forming
 * window), server.c (init, free).
 */
#ifndef HPL_DIR_COST_H
#define HPL_DIR_COST_H

#include <stdint.h>

#include "server.h"

/* The module's state, allocated here: 0 or HPL_ENOMEM; freed at the end. */
int hpl__dir_cost_init(hpl__dir_server *s);
void hpl__dir_cost_free(hpl__dir_server *s);

/* L in seconds / B in bytes per second: measured when configured "auto"
 * and measured already, else the configured value. */
double hpl__dir_cost_latency(hpl__dir_server *s);
double hpl__dir_cost_bandwidth(hpl__dir_server *s);

/* A store's heartbeat round trip (0: not measured, ignored). */
void hpl__dir_cost_note_rtt(hpl__dir_server *s, uint32_t rtt_us);

/* A pull from a complete sender ran at `rate` bytes/s (0: ignored). */
void hpl__dir_cost_note_rate(hpl__dir_server *s, uint64_t rate);

#endif
