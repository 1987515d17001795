/*
 * metricsrv.h - a server's /metrics endpoint (--metrics-listen HOST:PORT):
 * libmicrohttpd on a thread of its own answers GET /metrics with the text
 * the server's loop renders, and measures the loop's lag.
 *
 * Threads. The server's libuv loop is single-threaded and its state is
 * read on that thread only. A scrape, on MHD's thread, asks the loop for a
 * snapshot (uv_async_send) and waits on a condition variable for at most
 * HPL__METRICS_WAIT_MS; the loop renders the text (the server's render
 * function, then the loop-lag and scrape metrics this module keeps) into a
 * fresh buffer and hands it over under the mutex. A loop that does not
 * answer in time gets the scraper a 503; the loop never waits for the HTTP
 * side. MHD runs one internal polling thread, so scrapes are served one at
 * a time.
 *
 * Loop lag: a timer due every 100 ms records how late it fires (a
 * histogram and the last value): the time the loop was busy elsewhere.
 *
 * Access: only GET /metrics (404 other paths, 405 other methods), a
 * response of at most HPL__METRICS_MAX_BYTES. With a cluster secret every
 * request must carry "Authorization: Bearer TOKEN" (hpl__metrics_token;
 * `hoplite secret --metrics-token FILE` prints it), on loopback too, like
 * every TCP port of such a cluster (401 otherwise, compared in constant
 * time). Without a secret the endpoint is open, and may listen beyond
 * loopback only with --insecure (hpl__metrics_exposure).
 *
 * Callers: src/server/srvmain.c (options), store/metrics.c and
 * directory/metrics.c (start, stop, rendering).
 */
#ifndef HPL_METRICSRV_H
#define HPL_METRICSRV_H

#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "metrics.h"

#define HPL__METRICS_WAIT_MS 2000
#define HPL__METRICS_MAX_BYTES (4u << 20)
#define HPL__METRICS_LAG_MS 100

/* --metrics-listen and --metrics-port-file (srvmain.c parses them). */
typedef struct hpl__metrics_cfg {
  int on;                /* --metrics-listen given */
  char host[64];         /* numeric IPv4 ("localhost" is taken as 127.0.0.1) */
  int port;              /* 0: the kernel picks one (see port_file) */
  const char *port_file; /* write the bound port here once listening (NULL: none) */
} hpl__metrics_cfg;

/* Parse "HOST:PORT" (HOST a dotted IPv4 address or localhost; ":PORT"
 * alone means 127.0.0.1) into *c. 0 or -1. */
int hpl__metrics_parse_listen(hpl__metrics_cfg *c, const char *arg);

/* The exposure rule for the metrics port: loopback, or a secret (then the
 * bearer token is required), or --insecure. Returns -1 to go on, or 2
 * after printing why not (also for --metrics-port-file without
 * --metrics-listen). */
int hpl__metrics_exposure(const char *prog, const hpl__metrics_cfg *c, const hpl__auth *a,
                          int insecure);

typedef struct hpl__msrv hpl__msrv;

/* Writes the server's own metrics into b, on the loop thread. */
typedef void (*hpl__metrics_render)(void *arg, hpl__mbuf *b);

/* Start serving on `loop` as cfg says (nothing if !cfg->on: *out = NULL,
 * returns 0). `node` is the node label's value; `a` the cluster secret
 * (a->on 0: no token). render(arg, b) is called on the loop for each
 * scrape. The handles it adds do not keep the loop alive. Returns 0 (*out
 * owned by the caller, hpl__msrv_stop), or HPL_ESYS (cannot listen or
 * write the port file; logged), HPL_ENOMEM. */
int hpl__msrv_start(uv_loop_t *loop, const hpl__metrics_cfg *cfg, const hpl__auth *a,
                    const char *node, hpl__metrics_render render, void *arg, hpl__msrv **out);

/* Stop serving, on the loop thread: a scrape waiting is released at once
 * (its connection closes with the HTTP server), the HTTP thread is joined,
 * the handles are closed and everything is freed once they are. NULL is a
 * no-op. */
void hpl__msrv_stop(hpl__msrv *m);

#endif
