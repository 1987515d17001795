/* metricsrv.c - the /metrics endpoint on libmicrohttpd, fed by the loop
 * (see metricsrv.h). */
#include "metricsrv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"

struct hpl__msrv {
  /* set at start, read-only afterwards (both threads) */
  uv_loop_t *loop;
  hpl__metrics_render render;
  void *arg;
  char labels[256]; /* node="..." */
  int need_token;
  char token[HPL__METRICS_TOKEN_LEN + 1];
  struct MHD_Daemon *d;
  /* loop thread only */
  uv_async_t async;    /* a scrape asks for a snapshot */
  uv_timer_t lag_timer;
  int open_handles;    /* closed at stop; freed when none is left */
  uint64_t lag_due_ns; /* when the lag timer should fire (uv_hrtime clock) */
  uint64_t lag_last_ns;
  hpl__hist lag;
  uint64_t renders, render_failures;
  /* under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* the loop answered, or closing */
  uint64_t asked;    /* scrapes that asked for a snapshot */
  uint64_t answered; /* the latest snapshot covers scrapes up to this one */
  char *text;        /* that snapshot (NULL: rendering failed) */
  size_t len;
  int closing;
  /* atomics, bumped on the HTTP thread */
  uint64_t denied, timeouts;
};

/* ------------------------------------------------------------------ options */

int hpl__metrics_parse_listen(hpl__metrics_cfg *c, const char *arg) {
  char host[sizeof c->host];
  int port;
  struct in_addr a;
  if (hpl__parse_hostport(arg, "127.0.0.1", host, sizeof host, &port)) return -1;
  if (!strcmp(host, "localhost")) snprintf(host, sizeof host, "127.0.0.1");
  if (inet_pton(AF_INET, host, &a) != 1) return -1;
  memcpy(c->host, host, sizeof host);
  c->port = port;
  c->on = 1;
  return 0;
}

int hpl__metrics_exposure(const char *prog, const hpl__metrics_cfg *c, const hpl__auth *a,
                          int insecure) {
  if (!c->on && c->port_file) {
    fprintf(stderr, "%s: --metrics-port-file needs --metrics-listen\n", prog);
    return 2;
  }
  if (!c->on || a->on || insecure || hpl__is_loopback(c->host)) return -1;
  fprintf(stderr,
          "%s: --metrics-listen %s:%d is beyond loopback and the cluster has no secret: anyone "
          "who reaches it could read this server's metrics. Give the cluster a secret "
          "(--auth-file FILE; scrapers then send the token `hoplite secret --metrics-token "
          "FILE` prints), listen on 127.0.0.1, or pass --insecure if this network is trusted\n",
          prog, c->host, c->port);
  return 2;
}

/* ------------------------------------------------------------------ loop side */

/* The metrics this module keeps, after the server's. */
static void render_own(hpl__msrv *m, hpl__mbuf *b) {
  hpl__m_family(b, "hoplite_event_loop_lag_seconds", "histogram",
                "How late a timer due every 100 ms fired: time the event loop was busy");
  hpl__m_hist(b, "hoplite_event_loop_lag_seconds", m->labels, &m->lag);
  hpl__m_family(b, "hoplite_event_loop_lag_last_seconds", "gauge",
                "The event loop's lag at the latest 100 ms tick");
  hpl__m_seconds(b, "hoplite_event_loop_lag_last_seconds", m->labels, m->lag_last_ns);
  hpl__m_family(b, "hoplite_metrics_scrapes_total", "counter",
                "Snapshots rendered for /metrics (this one included)");
  hpl__m_sample(b, "hoplite_metrics_scrapes_total", m->labels, m->renders, 0);
  hpl__m_family(b, "hoplite_metrics_denied_total", "counter",
                "/metrics requests refused for a missing or wrong bearer token");
  hpl__m_sample(b, "hoplite_metrics_denied_total", m->labels,
                __atomic_load_n(&m->denied, __ATOMIC_RELAXED), 0);
  hpl__m_family(b, "hoplite_metrics_timeouts_total", "counter",
                "/metrics requests answered 503: the event loop did not render in time");
  hpl__m_sample(b, "hoplite_metrics_timeouts_total", m->labels,
                __atomic_load_n(&m->timeouts, __ATOMIC_RELAXED), 0);
}

/* A scrape asked: render a snapshot and hand it over. uv_async_send
 * coalesces, so one rendering answers every scrape that asked so far. */
static void on_async(uv_async_t *h) {
  hpl__msrv *m = h->data;
  pthread_mutex_lock(&m->mu);
  uint64_t upto = m->asked;
  pthread_mutex_unlock(&m->mu);
  if (upto == m->answered) return; /* a coalesced wake-up already served */
  m->renders++;
  hpl__mbuf b;
  hpl__mbuf_init(&b, HPL__METRICS_MAX_BYTES);
  m->render(m->arg, &b);
  render_own(m, &b);
  if (b.failed) {
    if (m->render_failures++ % 100 == 0)
      HPL__LOG_WARN("metrics: the snapshot does not fit in %u bytes (or no memory)",
                    HPL__METRICS_MAX_BYTES);
    hpl__mbuf_free(&b);
  }
  pthread_mutex_lock(&m->mu);
  free(m->text);
  m->text = b.p; /* NULL if it failed */
  m->len = b.len;
  m->answered = upto;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

static void on_lag_timer(uv_timer_t *t) {
  hpl__msrv *m = t->data;
  uint64_t now = uv_hrtime();
  uint64_t lag = now > m->lag_due_ns ? now - m->lag_due_ns : 0;
  hpl__hist_observe(&m->lag, lag);
  m->lag_last_ns = lag;
  m->lag_due_ns = now + HPL__METRICS_LAG_MS * 1000000ull;
  uv_timer_start(t, on_lag_timer, HPL__METRICS_LAG_MS, 0);
}

/* ------------------------------------------------------------------ HTTP side */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *body,
                             const char *hname, const char *hvalue) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  if (hname) MHD_add_response_header(r, hname, hvalue);
  enum MHD_Result rc = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  return rc;
}

/* "Bearer TOKEN" with our token (scheme case-insensitive; constant-time
 * comparison of the token). */
static int authorized(const hpl__msrv *m, struct MHD_Connection *conn) {
  const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;
  h += 7;
  while (*h == ' ') h++;
  size_t n = strlen(h);
  while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
  return n == HPL__METRICS_TOKEN_LEN && sodium_memcmp(h, m->token, HPL__METRICS_TOKEN_LEN) == 0;
}

/* Ask the loop for a snapshot; a copy of it (malloc'd) or NULL with *code
 * saying why (503: the loop did not answer in time or is stopping; 500:
 * the snapshot could not be made). */
static char *snapshot(hpl__msrv *m, size_t *len, unsigned *code) {
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  dl.tv_sec += HPL__METRICS_WAIT_MS / 1000;
  dl.tv_nsec += (long)(HPL__METRICS_WAIT_MS % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
  char *out = NULL;
  *code = MHD_HTTP_SERVICE_UNAVAILABLE;
  pthread_mutex_lock(&m->mu);
  if (!m->closing) {
    uint64_t seq = ++m->asked;
    uv_async_send(&m->async); /* the handle outlives the HTTP thread (see stop) */
    int rc = 0;
    while (m->answered < seq && !m->closing && rc != ETIMEDOUT)
      rc = pthread_cond_timedwait(&m->cv, &m->mu, &dl);
    if (m->answered >= seq && !m->closing) {
      *code = MHD_HTTP_INTERNAL_SERVER_ERROR;
      if (m->text && (out = malloc(m->len ? m->len : 1))) {
        memcpy(out, m->text, m->len);
        *len = m->len;
      }
    } else if (!m->closing) {
      __atomic_fetch_add(&m->timeouts, 1, __ATOMIC_RELAXED);
    }
  }
  pthread_mutex_unlock(&m->mu);
  return out;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version, (void)upload_data;
  static int seen;
  hpl__msrv *m = cls;
  if (!*con_cls) { /* headers only so far: answer once the request is whole */
    *con_cls = &seen;
    return MHD_YES;
  }
  if (*upload_data_size) { /* a body: nothing here takes one; discard it */
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (m->need_token && !authorized(m, conn)) {
    __atomic_fetch_add(&m->denied, 1, __ATOMIC_RELAXED);
    return reply(conn, MHD_HTTP_UNAUTHORIZED, "a bearer token is required\n",
                 MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"hoplite metrics\"");
  }
  if (strcmp(url, "/metrics") != 0)
    return reply(conn, MHD_HTTP_NOT_FOUND, "not found\n", NULL, NULL);
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
    return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n", MHD_HTTP_HEADER_ALLOW, "GET");
  size_t len = 0;
  unsigned code;
  char *text = snapshot(m, &len, &code);
  if (!text)
    return reply(conn, code,
                 code == MHD_HTTP_SERVICE_UNAVAILABLE ? "the server did not answer in time\n"
                                                      : "no snapshot (too large or no memory)\n",
                 NULL, NULL);
  struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          "text/plain; version=0.0.4; charset=utf-8");
  enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return rc;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char line[512];
  vsnprintf(line, sizeof line, fmt, ap);
  size_t n = strlen(line);
  while (n && line[n - 1] == '\n') line[--n] = 0;
  HPL__LOG_WARN("metrics: %s", line); /* one write(2): safe from this thread */
}

/* ------------------------------------------------------------------ start, stop */

static void on_handle_closed(uv_handle_t *h) {
  hpl__msrv *m = h->data;
  if (--m->open_handles > 0) return;
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  free(m->text);
  sodium_memzero(m->token, sizeof m->token);
  free(m);
}

void hpl__msrv_stop(hpl__msrv *m) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->closing = 1;
  pthread_cond_broadcast(&m->cv); /* a scrape waiting gives up now */
  pthread_mutex_unlock(&m->mu);
  if (m->d) MHD_stop_daemon(m->d); /* joins the HTTP thread: no uv_async_send after this */
  m->d = NULL;
  uv_close((uv_handle_t *)&m->async, on_handle_closed);
  uv_close((uv_handle_t *)&m->lag_timer, on_handle_closed);
}

/* Write "<port>\n" to path through a rename. 0 or -1. */
static int write_port_file(const char *path, int port) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  int bad = fprintf(f, "%d\n", port) < 0;
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

int hpl__msrv_start(uv_loop_t *loop, const hpl__metrics_cfg *cfg, const hpl__auth *a,
                    const char *node, hpl__metrics_render render, void *arg, hpl__msrv **out) {
  *out = NULL;
  if (!cfg->on) return 0;
  hpl__msrv *m = calloc(1, sizeof *m);
  if (!m) return HPL_ENOMEM;
  m->loop = loop;
  m->render = render;
  m->arg = arg;
  if (hpl__m_label(m->labels, sizeof m->labels, "node", node) != 0) {
    HPL__LOG_ERROR("metrics: the node name is too long for a label");
    free(m);
    return HPL_EINVAL;
  }
  m->need_token = a->on;
  if (a->on && hpl__metrics_token(a, m->token) != 0) {
    free(m);
    return HPL_ESYS;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&m->mu, NULL);
  uv_async_init(loop, &m->async, on_async);
  uv_timer_init(loop, &m->lag_timer);
  m->async.data = m->lag_timer.data = m;
  m->open_handles = 2;
  /* neither keeps the loop alive: the server ends when its own work does */
  uv_unref((uv_handle_t *)&m->async);
  uv_unref((uv_handle_t *)&m->lag_timer);
  m->lag_due_ns = uv_hrtime() + HPL__METRICS_LAG_MS * 1000000ull;
  uv_timer_start(&m->lag_timer, on_lag_timer, HPL__METRICS_LAG_MS, 0);

  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)cfg->port);
  inet_pton(AF_INET, cfg->host, &sa.sin_addr); /* checked when parsed */
  /* the HTTP thread takes no signals: they stay with the loop's thread */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  m->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                          on_request, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                          /* idle connections (anyone who can reach the port may
                           * open them) must not keep scrapes out: many slots,
                           * each idle one cut after 3 s (a scrape takes ms);
                           * 1024 x the memory limit below is 32 MiB at most */
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)3,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_END);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  const union MHD_DaemonInfo *di =
      m->d ? MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
  int port = di ? di->port : 0;
  if (!m->d || !port) {
    HPL__LOG_ERROR("metrics: cannot listen on %s:%d%s", cfg->host, cfg->port,
                   m->d ? "" : " (in use, or not this host's address?)");
    hpl__msrv_stop(m);
    return HPL_ESYS;
  }
  if (cfg->port_file && write_port_file(cfg->port_file, port) != 0) {
    HPL__LOG_ERROR("metrics: cannot write the port file %s: %s", cfg->port_file, strerror(errno));
    hpl__msrv_stop(m);
    return HPL_ESYS;
  }
  HPL__LOG_INFO("metrics on http://%s:%d/metrics%s", cfg->host, port,
                a->on ? " (bearer token required: hoplite secret --metrics-token FILE)" : "");
  *out = m;
  return 0;
}
