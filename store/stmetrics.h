/*
 * stmetrics.h - the store's metrics: the one list of its counters and gauges
 * (what COUNTERS answers and /metrics shows, with their exposition names),
 * the latency histograms get.c and put.c record into (store.h), and
 * the /metrics endpoint (--metrics-listen, src/server/metricsrv.h).
 *
 * Exposition: hoplite_store_* with the label node="<--name>", the request
 * histograms hoplite_store_get_seconds (a client's GET from its arrival to
 * its answer, errors and timeouts included; a GET whose client left before
 * the answer is not counted) and hoplite_store_put_seconds (a put from its
 * CREATE or PUT arriving to the answer of its seal, successful puts only:
 * the client's writing between CREATE and SEAL is included), then
 * metricsrv.c's loop-lag and scrape metrics.
 *
 * Callers: clients.c (COUNTERS), server.c (start, stop, free); get.c and put.c
 * record into the histograms of struct hpl__store (store.h) directly.
 */
#ifndef HPL_STORE_METRICS_H
#define HPL_STORE_METRICS_H

#include <stddef.h>

#include "metrics.h"
#include "store.h"

/* Room for the list hpl__stmetrics_collect writes. */
#define HPL__STORE_METRICS_MAX 96

/* Every counter and gauge of the store, now, into out[HPL__STORE_METRICS_MAX]
 * (only: NULL), or just the one named `only` (none if there is no such
 * name). Returns how many. The pool's resident bytes cost an fstat per pool
 * chunk: they are read only when the whole list or that gauge is asked. */
size_t hpl__stmetrics_collect(hpl__store *s, hpl__metric *out, const char *only);

/* Make the module's context and start the /metrics endpoint if cfg.metrics
 * asks for one. `clients` (may be NULL: 0) counts the local clients
 * connected for the clients gauge (hpl__clients_count, a module above this
 * one). 0 or an HPL_E* code (logged). */
int hpl__stmetrics_start(hpl__store *s, size_t (*clients)(const hpl__store *s));

/* Stop the endpoint (idempotent; on the loop, before the loop ends); free
 * the module's context once the loop has ended. */
void hpl__stmetrics_stop(hpl__store *s);
void hpl__stmetrics_free(hpl__store *s);

#endif
