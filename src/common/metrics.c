/* metrics.c - the exposition text, histograms, the bearer token (see
 * metrics.h). */
#include "metrics.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Hplpb__CountersRep *hpl__metrics_counters_rep(const hpl__metric *v, size_t n) {
  hpl__counter *c = malloc((n ? n : 1) * sizeof *c);
  if (!c) return NULL;
  for (size_t i = 0; i < n; i++) {
    c[i].name = v[i].name;
    c[i].value = v[i].value;
  }
  Hplpb__CountersRep *r = hpl__counters_rep(c, n);
  free(c);
  return r;
}

/* ------------------------------------------------------------------ histograms */

static const uint64_t bounds_ns[HPL__HIST_BUCKETS] = {
    100000ull,    250000ull,    500000ull,     1000000ull,    2500000ull,   5000000ull,
    10000000ull,  25000000ull,  50000000ull,   100000000ull,  250000000ull, 500000000ull,
    1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull};

void hpl__hist_observe(hpl__hist *h, uint64_t ns) {
  int i = 0;
  while (i < HPL__HIST_BUCKETS && ns > bounds_ns[i]) i++;
  h->n[i]++;
  h->count++;
  h->sum_ns += ns;
}

uint64_t hpl__hist_bound_ns(int i) { return bounds_ns[i]; }

/* ------------------------------------------------------------------ text */

void hpl__mbuf_init(hpl__mbuf *b, size_t max) {
  memset(b, 0, sizeof *b);
  b->max = max;
}

void hpl__mbuf_free(hpl__mbuf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

void hpl__mbuf_printf(hpl__mbuf *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    size_t room = b->cap - b->len;
    va_list ap;
    va_start(ap, fmt);
    int n = room ? vsnprintf(b->p + b->len, room, fmt, ap) : -2;
    va_end(ap);
    if (n == -1) {
      b->failed = 1;
      return;
    }
    if (n >= 0 && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    /* grow: at least double, at least what this line needs, at most max */
    size_t need = b->len + (n > 0 ? (size_t)n : 256) + 1;
    size_t cap = b->cap ? 2 * b->cap : 4096;
    if (cap < need) cap = need;
    if (cap > b->max + 1) cap = b->max + 1;
    char *p = need <= cap ? realloc(b->p, cap) : NULL;
    if (!p) {
      b->failed = 1;
      if (b->cap) b->p[b->len] = 0;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

int hpl__m_label(char *out, size_t cap, const char *key, const char *value) {
  size_t o = strlen(out);
  size_t start = o;
  int n = snprintf(out + o, cap - o, "%s%s=\"", o ? "," : "", key);
  if (n < 0 || (size_t)n >= cap - o) goto full;
  o += (size_t)n;
  for (const char *c = value; *c; c++) {
    const char *esc = *c == '\\' ? "\\\\" : *c == '"' ? "\\\"" : *c == '\n' ? "\\n" : NULL;
    size_t l = esc ? 2 : 1;
    if (o + l + 1 >= cap) goto full;
    if (esc)
      memcpy(out + o, esc, 2);
    else
      out[o] = *c;
    o += l;
  }
  if (o + 2 > cap) goto full;
  out[o++] = '"';
  out[o] = 0;
  return 0;
full:
  out[start] = 0;
  return -1;
}

void hpl__m_family(hpl__mbuf *b, const char *name, const char *type, const char *help) {
  hpl__mbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_head(hpl__mbuf *b, const char *name, const char *suffix, const char *labels) {
  hpl__mbuf_printf(b, "%s%s%s%s%s ", name, suffix, *labels ? "{" : "", labels, *labels ? "}" : "");
}

void hpl__m_sample(hpl__mbuf *b, const char *name, const char *labels, uint64_t value, int milli) {
  sample_head(b, name, "", labels);
  if (milli)
    hpl__mbuf_printf(b, "%llu.%03llu\n", (unsigned long long)(value / 1000),
                     (unsigned long long)(value % 1000));
  else
    hpl__mbuf_printf(b, "%llu\n", (unsigned long long)value);
}

/* ns as seconds, exactly (9 decimals). */
static void put_seconds(hpl__mbuf *b, uint64_t ns) {
  hpl__mbuf_printf(b, "%llu.%09llu", (unsigned long long)(ns / 1000000000ull),
                   (unsigned long long)(ns % 1000000000ull));
}

void hpl__m_seconds(hpl__mbuf *b, const char *name, const char *labels, uint64_t ns) {
  sample_head(b, name, "", labels);
  put_seconds(b, ns);
  hpl__mbuf_printf(b, "\n");
}

void hpl__m_hist(hpl__mbuf *b, const char *name, const char *labels, const hpl__hist *h) {
  static const char *le[HPL__HIST_BUCKETS] = {"0.0001", "0.00025", "0.0005", "0.001",
                                               "0.0025", "0.005",   "0.01",   "0.025",
                                               "0.05",   "0.1",     "0.25",   "0.5",
                                               "1",      "2.5",     "5",      "10"};
  const char *sep = *labels ? "," : "";
  uint64_t cum = 0;
  for (int i = 0; i < HPL__HIST_BUCKETS; i++) {
    cum += h->n[i];
    hpl__mbuf_printf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, labels, sep, le[i],
                     (unsigned long long)cum);
  }
  cum += h->n[HPL__HIST_BUCKETS];
  /* +Inf is the count by definition (the buckets were not read atomically
   * with it: the same thread writes both, so they agree) */
  hpl__mbuf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                   (unsigned long long)cum);
  sample_head(b, name, "_sum", labels);
  put_seconds(b, h->sum_ns);
  hpl__mbuf_printf(b, "\n");
  sample_head(b, name, "_count", labels);
  hpl__mbuf_printf(b, "%llu\n", (unsigned long long)h->count);
}

void hpl__m_list(hpl__mbuf *b, const char *prefix, const char *labels, const hpl__metric *v,
                 size_t n) {
  char name[128];
  for (size_t i = 0; i < n; i++) {
    if (!v[i].prom) continue;
    snprintf(name, sizeof name, "%s%s", prefix, v[i].prom);
    hpl__m_family(b, name, v[i].kind == HPL__M_GAUGE ? "gauge" : "counter", v[i].help);
    hpl__m_sample(b, name, labels, v[i].value, v[i].milli);
  }
}

/* ------------------------------------------------------------------ token */

int hpl__metrics_token(const hpl__auth *a, char out[HPL__METRICS_TOKEN_LEN + 1]) {
  _Static_assert(HPL__METRICS_TOKEN_LEN / 2 == sizeof a->metrics_key, "token size");
  if (sodium_init() < 0 || !a->on) return -1;
  sodium_bin2hex(out, HPL__METRICS_TOKEN_LEN + 1, a->metrics_key, sizeof a->metrics_key);
  return 0;
}
