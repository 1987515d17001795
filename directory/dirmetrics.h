/*
 * dirmetrics.h - the directory's metrics: the one list of its counters and
 * gauges (what COUNTERS answers and /metrics shows, with their exposition
 * names), the latency histograms server.c and acquire.c record into
 * (hpl__dir_server), and the /metrics endpoint (--metrics-listen,
 * src/server/metricsrv.h).
 *
 * Exposition: hoplite_directory_* with the label node="directory";
 * hoplite_directory_request_seconds{type="acquire",...}: the time the loop
 * spent handling one message of each type that arrived (the handler's run,
 * the replies it queued included; types never seen are left out);
 * hoplite_directory_acquire_wait_seconds: ACQUIREs that could not be
 * answered at once (object not there yet, no sender free, a ring
 * predecessor awaited) from their arrival to their answer or timeout, at
 * the millisecond clock's resolution; then metricsrv.c's loop-lag and
 * scrape metrics.
 *
 * With --etcd, the leader lease's state (ha.h: hpl__ha_info) is among the
 * gauges and counters (dir_term, dir_lease_*); without it they are 0.
 *
 * Callers: admin.c (COUNTERS), server.c (start, stop, request timing),
 * acquire.c (waits: hpl__dir_server.acquire_wait_hist).
 */
#ifndef HPL_DIR_METRICS_H
#define HPL_DIR_METRICS_H

#include <stddef.h>

#include "metrics.h"
#include "server.h"

/* Room for the list hpl__dir_metrics_collect writes. */
#define HPL__DIR_METRICS_MAX 80

/* Every counter and gauge of the directory, now, into
 * out[HPL__DIR_METRICS_MAX]. Returns how many. */
size_t hpl__dir_metrics_collect(hpl__dir_server *s, hpl__metric *out);

/* Start the /metrics endpoint if cfg.metrics asks for one. 0 or an HPL_E*
 * code (logged). */
int hpl__dir_metrics_start(hpl__dir_server *s);

/* Stop it (idempotent; on the loop, before the loop ends). */
void hpl__dir_metrics_stop(hpl__dir_server *s);

#endif
