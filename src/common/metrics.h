/*
 * metrics.h - the servers' metrics as the Prometheus text exposition format
 * (version 0.0.4) writes them, and the pieces that feed it. Pure: no event
 * loop, no socket, no thread (src/server/metricsrv.h serves the text over HTTP).
 *
 *  - hpl__metric: one named value with its exposition name, kind (counter
 *    or gauge), unit scale and help text. A server collects one list of
 *    them (store/metrics.c, directory/metrics.c); the COUNTERS request and
 *    /metrics both read that list, so the two never disagree.
 *  - hpl__hist: a latency histogram with fixed buckets (100 us .. 10 s);
 *    recording is a few integer operations, on the loop thread.
 *  - hpl__mbuf: a bounded text buffer the exposition is written into, with
 *    writers for a family's HELP/TYPE lines, a sample, and a histogram's
 *    _bucket/_sum/_count series. Label values are escaped as the format
 *    requires (\\, \", \n).
 *  - the metrics bearer token, derived from the cluster secret.
 *
 * Callers: srvmain/metricsrv (serving), store/metrics.c and
 * directory/metrics.c (the servers' lists), src/cli/cli.c (`hoplite secret
 * --metrics-token`), tests.
 */
#ifndef HPL_METRICS_H
#define HPL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "proto.h"

enum { HPL__M_COUNTER = 0, HPL__M_GAUGE = 1 };

/* One value a server reports. `name` is its COUNTERS name (unchanged since
 * COUNTERS existed); `prom` its exposition name after the server's prefix
 * ("hoplite_store_", "hoplite_directory_"), NULL for COUNTERS only. A
 * counter's prom name ends in _total; units are in the name (_bytes,
 * _seconds). `milli`: the value counts thousandths of the named unit (ms of
 * a _seconds metric) and is printed divided by 1000. Strings are static. */
typedef struct hpl__metric {
  const char *name;
  uint64_t value;
  const char *prom;
  int kind;   /* HPL__M_COUNTER or HPL__M_GAUGE */
  int milli;
  const char *help;
} hpl__metric;

/* A COUNTERS_REP of the n metrics' names and values (hpl__counters_rep:
 * one malloc'd block, free() after sending). NULL on no memory. */
Hplpb__CountersRep *hpl__metrics_counters_rep(const hpl__metric *v, size_t n);

/* ---- histograms */

/* Upper bounds of the buckets, in ns: 100us 250us 500us 1ms 2.5ms 5ms 10ms
 * 25ms 50ms 100ms 250ms 500ms 1s 2.5s 5s 10s, then +Inf. */
#define HPL__HIST_BUCKETS 16

typedef struct hpl__hist {
  uint64_t n[HPL__HIST_BUCKETS + 1]; /* per bucket, not cumulative; [16]: above 10 s */
  uint64_t count;
  uint64_t sum_ns;
} hpl__hist;

/* Record one observation of `ns` nanoseconds. */
void hpl__hist_observe(hpl__hist *h, uint64_t ns);
/* The upper bound of bucket i (< HPL__HIST_BUCKETS) in ns. */
uint64_t hpl__hist_bound_ns(int i);

/* ---- the exposition text */

typedef struct hpl__mbuf {
  char *p;    /* malloc'd, NUL-terminated while not failed */
  size_t len, cap;
  size_t max; /* the text may not grow beyond this many bytes */
  int failed; /* out of memory or beyond max: the text is incomplete */
} hpl__mbuf;

/* An empty buffer that may grow to `max` bytes (nothing is allocated yet). */
void hpl__mbuf_init(hpl__mbuf *b, size_t max);
/* Append printf-style; on failure b->failed is set and later appends are
 * no-ops. */
void hpl__mbuf_printf(hpl__mbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Free the text (the buffer may be initialised again). */
void hpl__mbuf_free(hpl__mbuf *b);

/* Write `key="value"` (value escaped for the exposition format) into
 * out[cap], after a comma if `out` already holds a label. Returns 0, or -1
 * if it does not fit (out is left as it was). */
int hpl__m_label(char *out, size_t cap, const char *key, const char *value);

/* A family's "# HELP" and "# TYPE" lines; `type` is "counter", "gauge" or
 * "histogram". The help text must not contain a newline or backslash. */
void hpl__m_family(hpl__mbuf *b, const char *name, const char *type, const char *help);
/* One sample: name{labels} value (labels without braces, may be ""). The
 * value is printed as an integer, or with milli as value/1000. */
void hpl__m_sample(hpl__mbuf *b, const char *name, const char *labels, uint64_t value, int milli);
/* A sample whose value is a duration in ns, printed in seconds. */
void hpl__m_seconds(hpl__mbuf *b, const char *name, const char *labels, uint64_t ns);
/* A histogram's series: name_bucket{labels,le="..."} (cumulative, the
 * last le="+Inf"), name_sum{labels} (seconds), name_count{labels}. */
void hpl__m_hist(hpl__mbuf *b, const char *name, const char *labels, const hpl__hist *h);
/* Every metric of v[n] that has an exposition name: family lines and one
 * sample, named prefix + prom, with `labels`. */
void hpl__m_list(hpl__mbuf *b, const char *prefix, const char *labels, const hpl__metric *v,
                 size_t n);

/* ---- the bearer token */

#define HPL__METRICS_TOKEN_LEN 64 /* hex digits */

/* The token a scraper presents (Authorization: Bearer TOKEN) to a server
 * of the cluster with secret `a`: 64 hex digits of a 256-bit BLAKE2b keyed
 * with the secret over the fixed context "hoplite metrics token v1", so it
 * opens /metrics and nothing else (the secret cannot be recovered from it).
 * out gets the digits and a NUL. Returns 0, or -1 if libsodium cannot
 * start. */
int hpl__metrics_token(const hpl__auth *a, char out[HPL__METRICS_TOKEN_LEN + 1]);

#endif
