/* test_metrics.c - the servers' /metrics (--metrics-listen), scraped over
 * real TCP connections from real processes: the exposition text parsed
 * line by line (every line a comment or `name{labels} value`, every
 * sample's family typed once, before its samples), the values checked
 * against what the test did (bytes received by the store that pulled,
 * request histograms cumulative and counting the requests made, loop lag,
 * node labels, the directory's own metrics), the bearer token rule of a
 * cluster with a secret (401 without it or with a wrong one, on loopback
 * too; `hoplite secret --metrics-token` prints the right one), 404/405,
 * an open endpoint without a secret, the servers refusing bad or exposed
 * addresses (exit 2), and a clean exit after SIGTERM with the endpoint
 * running. The exposition writer and histogram are also checked alone. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <unistd.h>

#include "auth.h"
#include "harness.h"
#include "hoplite.h"
#include "localcluster.h"
#include "metrics.h"
#include "metricsrv.h"
#include "util.h"

#define MB (1024 * 1024)

static const char *bin_dir(void) {
  return getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR;
}

/* ------------------------------------------------------------------ HTTP by hand */

typedef struct http_rep {
  int status;
  char *head; /* status line and headers */
  char *body;
} http_rep;

static void http_free(http_rep *r) {
  free(r->head);
  free(r->body);
  memset(r, 0, sizeof *r);
}

/* One request to 127.0.0.1:port (Connection: close), the whole answer read
 * (status 0: the server closed without answering). `auth`: an
 * Authorization header value, or NULL. */
static http_rep http(int port, const char *method, const char *path, const char *auth) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
    fail_msg("connect to metrics port %d: %s", port, strerror(errno));
  struct timeval tv = {.tv_sec = (time_t)(th_ms(10000) / 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char req[512];
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s%s%s"
                   "Connection: close\r\n\r\n",
                   method, path, port, auth ? "Authorization: " : "", auth ? auth : "",
                   auth ? "\r\n" : "");
  assert_int_equal(write(fd, req, (size_t)n), n);
  size_t len = 0, cap = 1 << 16;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (len == cap) buf = realloc(buf, (cap *= 2) + 1);
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0) fail_msg("reading the answer from port %d: %s", port, strerror(errno));
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  buf[len] = 0;
  http_rep rep = {0};
  if (len == 0) { /* closed without an answer: status 0 */
    rep.head = buf;
    rep.body = strdup("");
    return rep;
  }
  char *sep = strstr(buf, "\r\n\r\n");
  if (!sep || sscanf(buf, "HTTP/1.%*d %d", &rep.status) != 1)
    fail_msg("not an HTTP answer: '%.200s'", buf);
  *sep = 0;
  rep.head = strdup(buf);
  rep.body = strdup(sep + 4);
  free(buf);
  return rep;
}

/* The value of header `name` in the answer's head (static buffer), or NULL. */
static const char *header(const http_rep *r, const char *name) {
  static char v[256];
  size_t nl = strlen(name);
  for (const char *l = strstr(r->head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
    const char *h = l + 2;
    if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
      h += nl + 1;
      while (*h == ' ') h++;
      size_t e = strcspn(h, "\r\n");
      snprintf(v, sizeof v, "%.*s", (int)e, h);
      return v;
    }
  }
  return NULL;
}

/* ------------------------------------------------------------------ the exposition parsed */

#define MAX_LABELS 4
typedef struct sample {
  char name[128];
  int nlabels;
  char key[MAX_LABELS][32], val[MAX_LABELS][128];
  double value;
} sample;

typedef struct family {
  char name[128], type[16];
} family;

typedef struct expo {
  sample *s;
  size_t n;
  family f[512];
  size_t nf;
} expo;

static const family *family_of(const expo *e, const char *name) {
  for (size_t i = 0; i < e->nf; i++)
    if (!strcmp(e->f[i].name, name)) return &e->f[i];
  return NULL;
}

static int name_char(int c, int first) {
  return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (!first && c >= '0' && c <= '9');
}

/* One sample line into *s: name, optional {k="v",...}, value. Returns 0 or
 * -1 (*why says what was wrong). */
static int parse_sample(const char *l, sample *s, const char **why) {
  memset(s, 0, sizeof *s);
  size_t i = 0;
  if (!name_char(l[0], 1)) return *why = "bad metric name", -1;
  while (name_char(l[i], 0) && i < sizeof s->name - 1) s->name[i] = l[i], i++;
  if (l[i] == '{') {
    i++;
    while (l[i] != '}') {
      if (s->nlabels == MAX_LABELS) return *why = "too many labels", -1;
      char *k = s->key[s->nlabels], *v = s->val[s->nlabels];
      size_t kl = 0, vl = 0;
      if (!name_char(l[i], 1) || l[i] == ':') return *why = "bad label name", -1;
      while (name_char(l[i], 0) && l[i] != ':' && kl < 31) k[kl++] = l[i++];
      if (l[i++] != '=' || l[i++] != '"') return *why = "label without =\"", -1;
      while (l[i] != '"') {
        if (!l[i] || vl >= 127) return *why = "unterminated label value", -1;
        if (l[i] == '\\') {
          i++;
          if (l[i] != '\\' && l[i] != '"' && l[i] != 'n') return *why = "bad escape", -1;
          v[vl++] = l[i] == 'n' ? '\n' : l[i];
          i++;
        } else {
          v[vl++] = l[i++];
        }
      }
      i++;
      s->nlabels++;
      if (l[i] == ',') i++;
      else if (l[i] != '}') return *why = "expected , or }", -1;
    }
    i++;
  }
  if (l[i++] != ' ') return *why = "no space before the value", -1;
  char *end;
  s->value = strtod(l + i, &end);
  if (end == l + i) return *why = "bad value", -1;
  if (*end == ' ') { /* an optional timestamp */
    strtoll(end + 1, &end, 10);
  }
  if (*end) return *why = "junk after the value", -1;
  return 0;
}

/* Parse a whole exposition; fails the test at the first bad line. */
static void parse_expo(const char *text, expo *e) {
  memset(e, 0, sizeof *e);
  size_t cap = 256;
  e->s = malloc(cap * sizeof *e->s);
  int lineno = 0;
  for (const char *l = text; *l;) {
    const char *nl = strchr(l, '\n');
    if (!nl) fail_msg("line %d does not end with a newline", lineno + 1);
    char line[1024];
    size_t len = (size_t)(nl - l);
    assert_true(len < sizeof line);
    memcpy(line, l, len);
    line[len] = 0;
    l = nl + 1;
    lineno++;
    if (!*line) continue;
    if (line[0] == '#') {
      char name[128], type[32];
      if (!strncmp(line, "# TYPE ", 7)) {
        if (sscanf(line, "# TYPE %127s %31s", name, type) != 2)
          fail_msg("line %d: bad TYPE: %s", lineno, line);
        if (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram"))
          fail_msg("line %d: unexpected type %s", lineno, type);
        if (family_of(e, name)) fail_msg("line %d: %s typed twice", lineno, name);
        for (size_t i = 0; i < e->n; i++) {
          const char *sn = e->s[i].name, *rest = sn + strlen(name);
          if (!strncmp(sn, name, strlen(name)) &&
              (!*rest || !strcmp(rest, "_bucket") || !strcmp(rest, "_sum") ||
               !strcmp(rest, "_count")))
            fail_msg("line %d: TYPE of %s after its samples", lineno, name);
        }
        assert_true(e->nf < sizeof e->f / sizeof e->f[0]);
        snprintf(e->f[e->nf].name, sizeof e->f[0].name, "%s", name);
        snprintf(e->f[e->nf].type, sizeof e->f[0].type, "%s", type);
        e->nf++;
      } else if (strncmp(line, "# HELP ", 7) != 0) {
        fail_msg("line %d: unexpected comment: %s", lineno, line);
      }
      continue;
    }
    if (e->n == cap) e->s = realloc(e->s, (cap *= 2) * sizeof *e->s);
    const char *why = "";
    if (parse_sample(line, &e->s[e->n], &why))
      fail_msg("line %d: %s: '%s'", lineno, why, line);
    /* its family: the name itself, or a histogram's _bucket/_sum/_count */
    sample *s = &e->s[e->n];
    const family *f = family_of(e, s->name);
    if (!f) {
      static const char *sfx[] = {"_bucket", "_sum", "_count"};
      for (int k = 0; k < 3 && !f; k++) {
        size_t nl2 = strlen(s->name), sl = strlen(sfx[k]);
        if (nl2 > sl && !strcmp(s->name + nl2 - sl, sfx[k])) {
          char base[128];
          snprintf(base, sizeof base, "%.*s", (int)(nl2 - sl), s->name);
          f = family_of(e, base);
          if (f && strcmp(f->type, "histogram")) f = NULL;
        }
      }
    }
    if (!f) {
      fail_msg("line %d: sample of a family with no TYPE: %s", lineno, line);
      return;
    }
    if (!strcmp(f->type, "counter") && strlen(s->name) > 6 &&
        strcmp(s->name + strlen(s->name) - 6, "_total"))
      fail_msg("line %d: counter %s does not end in _total", lineno, s->name);
    e->n++;
  }
}

static const char *label(const sample *s, const char *key) {
  for (int i = 0; i < s->nlabels; i++)
    if (!strcmp(s->key[i], key)) return s->val[i];
  return NULL;
}

/* The sample `name` whose label `key` is `val` (key NULL: any); NULL if none. */
static const sample *find(const expo *e, const char *name, const char *key, const char *val) {
  for (size_t i = 0; i < e->n; i++) {
    const char *v = key ? label(&e->s[i], key) : NULL;
    if (!strcmp(e->s[i].name, name) && (!key || (v && !strcmp(v, val)))) return &e->s[i];
  }
  return NULL;
}

static double value(const expo *e, const char *name, const char *key, const char *val) {
  const sample *s = find(e, name, key, val);
  if (!s) fail_msg("no sample %s{%s=\"%s\"}", name, key ? key : "", val ? val : "");
  return s->value;
}

/* Histogram `name` (its series with label key=val, key NULL: the only
 * one): buckets in increasing le, cumulative, +Inf last and equal to
 * _count; _sum >= 0. Returns _count. */
static uint64_t check_hist(const expo *e, const char *name, const char *key, const char *val) {
  char bname[160], cname[160], sname[160];
  snprintf(bname, sizeof bname, "%s_bucket", name);
  snprintf(cname, sizeof cname, "%s_count", name);
  snprintf(sname, sizeof sname, "%s_sum", name);
  const family *f = family_of(e, name);
  if (!f || strcmp(f->type, "histogram")) fail_msg("%s is not typed histogram", name);
  double prev_le = -1, prev = 0;
  int buckets = 0, inf = 0;
  for (size_t i = 0; i < e->n; i++) {
    const sample *s = &e->s[i];
    if (strcmp(s->name, bname)) continue;
    if (key && (!label(s, key) || strcmp(label(s, key), val))) continue;
    const char *le = label(s, "le");
    if (!le) fail_msg("%s without le", bname);
    assert_false(inf); /* nothing after +Inf */
    double l = !strcmp(le, "+Inf") ? INFINITY : strtod(le, NULL);
    if (!(l > prev_le)) fail_msg("%s: le %s not increasing", name, le);
    if (s->value < prev) fail_msg("%s: bucket le=%s (%g) below the one before (%g)", name, le,
                                  s->value, prev);
    prev_le = l;
    prev = s->value;
    inf = isinf(l);
    buckets++;
  }
  if (!inf || buckets < 2)
    fail_msg("%s{%s=\"%s\"}: no +Inf bucket (%d buckets)", name, key ? key : "", val ? val : "",
             buckets);
  double count = value(e, cname, key, val);
  assert_true(count == prev);
  assert_true(value(e, sname, key, val) >= 0);
  return (uint64_t)count;
}

/* ------------------------------------------------------------------ helpers */

static int read_port(const char *path) {
  FILE *f = fopen(path, "r");
  int port = 0;
  if (!f || fscanf(f, "%d", &port) != 1) fail_msg("cannot read the port file %s", path);
  fclose(f);
  assert_true(port > 0 && port < 65536);
  return port;
}

/* `hoplite secret --metrics-token FILE`, as an operator runs it. */
static void cli_token(const char *secret, char out[HPL__METRICS_TOKEN_LEN + 1]) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s/hoplite' secret --metrics-token '%s'", bin_dir(), secret);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[256] = "";
  if (!fgets(line, sizeof line, p)) line[0] = 0;
  assert_int_equal(pclose(p), 0);
  line[strcspn(line, "\n")] = 0;
  if (strlen(line) != HPL__METRICS_TOKEN_LEN) fail_msg("token '%s' is not 64 hex digits", line);
  memcpy(out, line, HPL__METRICS_TOKEN_LEN + 1);
  /* the library's derivation agrees */
  hpl__auth a;
  char err[256], mine[HPL__METRICS_TOKEN_LEN + 1];
  assert_int_equal(hpl__auth_load(secret, &a, err, sizeof err), 0);
  assert_int_equal(hpl__metrics_token(&a, mine), 0);
  assert_string_equal(mine, out);
}

/* Scrape with `auth` (NULL: none), expect 200 and the exposition content
 * type, parse. */
static void scrape(int port, const char *auth, expo *e) {
  http_rep r = http(port, "GET", "/metrics", auth);
  assert_true(r.status != 0);
  if (r.status != 200) fail_msg("scrape of port %d: HTTP %d: %s", port, r.status, r.body);
  const char *ct = header(&r, "Content-Type");
  assert_non_null(ct);
  assert_non_null(strstr(ct, "text/plain"));
  assert_non_null(strstr(ct, "version=0.0.4"));
  parse_expo(r.body, e);
  http_free(&r);
}

static void every_node_label(const expo *e, const char *node) {
  for (size_t i = 0; i < e->n; i++) {
    const char *v = label(&e->s[i], "node");
    if (!v || strcmp(v, node))
      fail_msg("%s has node=\"%s\", not \"%s\"", e->s[i].name, v ? v : "(none)", node);
  }
}

static char tmpdir[64];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/hpl-metrics-XXXXXX");
  assert_non_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
}

/* A cluster of `nodes` stores, each server with --metrics-listen
 * 127.0.0.1:0; ports[0] the directory's, ports[1 + i] store i's. */
static hpl__lc *metrics_cluster(int nodes, int *ports) {
  char dargs[256], path[128], err[512];
  snprintf(path, sizeof path, "%s/directory.mport", tmpdir);
  snprintf(dargs, sizeof dargs, "--metrics-listen 127.0.0.1:0 --metrics-port-file %s", path);
  hpl__lc *lc = th_cluster(0, 64ull * MB, dargs, NULL);
  ports[0] = read_port(path);
  for (int i = 0; i < nodes; i++) {
    char sargs[256];
    snprintf(path, sizeof path, "%s/node-%d.mport", tmpdir, i);
    snprintf(sargs, sizeof sargs, "--metrics-listen :0 --metrics-port-file %s", path);
    if (hpl__lc_add_store(lc, sargs, err, sizeof err) != i) fail_msg("add store: %s", err);
    ports[1 + i] = read_port(path);
  }
  return lc;
}

/* ------------------------------------------------------------------ tests */

/* The writer and the histogram alone. */
static void test_exposition_unit(void **state) {
  (void)state;
  hpl__hist h = {0};
  hpl__hist_observe(&h, 0);
  hpl__hist_observe(&h, 100000);  /* exactly 100 us: le="0.0001" (upper bounds inclusive) */
  hpl__hist_observe(&h, 100001);
  hpl__hist_observe(&h, 3000000); /* 3 ms */
  hpl__hist_observe(&h, 20000000000ull);
  assert_int_equal(h.count, 5);
  assert_int_equal(h.n[0], 2);
  assert_int_equal(h.n[1], 1);
  assert_int_equal(h.n[5], 1);
  assert_int_equal(h.n[HPL__HIST_BUCKETS], 1);
  char l[64] = "";
  assert_int_equal(hpl__m_label(l, sizeof l, "node", "a\"b\\c\nd"), 0);
  assert_string_equal(l, "node=\"a\\\"b\\\\c\\nd\"");
  assert_int_equal(hpl__m_label(l, sizeof l, "type", "get"), 0);
  assert_string_equal(l, "node=\"a\\\"b\\\\c\\nd\",type=\"get\"");
  char small[16] = "x=\"1\"";
  assert_int_equal(hpl__m_label(small, sizeof small, "long", "0123456789"), -1);
  assert_string_equal(small, "x=\"1\""); /* left as it was */
  hpl__mbuf b;
  hpl__mbuf_init(&b, 1 << 20);
  hpl__m_family(&b, "t_seconds", "histogram", "test");
  hpl__m_hist(&b, "t_seconds", l, &h);
  hpl__metric v[] = {{"a", 7, "a_total", HPL__M_COUNTER, 0, "A"},
                     {"b", 1500, "b_seconds_total", HPL__M_COUNTER, 1, "B"},
                     {"c", 3, NULL, HPL__M_GAUGE, 0, NULL}};
  hpl__m_list(&b, "t_", "", v, 3);
  assert_false(b.failed);
  expo e;
  parse_expo(b.p, &e);
  assert_int_equal(check_hist(&e, "t_seconds", "type", "get"), 5);
  assert_true(value(&e, "t_seconds_bucket", "le", "0.0001") == 2);
  assert_true(fabs(value(&e, "t_seconds_sum", NULL, NULL) - 20.003200001) < 1e-9);
  assert_true(value(&e, "t_a_total", NULL, NULL) == 7);
  assert_true(value(&e, "t_b_seconds_total", NULL, NULL) == 1.5);
  assert_null(find(&e, "t_c", NULL, NULL)); /* COUNTERS only */
  assert_string_equal(label(&e.s[0], "node"), "a\"b\\c\nd");
  free(e.s);
  hpl__mbuf_free(&b);
  /* bounded: a text beyond max fails instead of growing */
  hpl__mbuf_init(&b, 100);
  for (int i = 0; i < 20; i++) hpl__m_sample(&b, "some_metric_name", "", 12345, 0);
  assert_true(b.failed);
  hpl__mbuf_free(&b);
}

static void test_scrape(void **state) {
  (void)state;
  make_tmpdir();
  int ports[3];
  hpl__lc *lc = metrics_cluster(2, ports);
  char token[HPL__METRICS_TOKEN_LEN + 1], bearer[128];
  cli_token(hpl__lc_secret(lc), token);
  snprintf(bearer, sizeof bearer, "Bearer %s", token);

  hpl_client *c0 = th_connect(lc, 0), *c1 = th_connect(lc, 1);
  const uint64_t big = 3 * MB, small = 1000;
  th_put_pattern(c0, "mx/big", big, 1);     /* CREATE .. SEAL */
  th_put_pattern(c0, "mx/small", small, 2); /* the one-request PUT */
  /* node-1's store answers 3 GETs: a pull, a local copy, a miss */
  hpl_buf *b;
  assert_int_equal(hpl_get(c1, "mx/big", th_ms(10000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), big, 1));
  hpl_release(c1, b);
  assert_int_equal(hpl_get(c1, "mx/big", th_ms(10000), &b), 0);
  hpl_release(c1, b);
  assert_int_equal(hpl_get(c1, "mx/none", 0, &b), HPL_ETIMEDOUT);
  th_sleep_ms(300); /* a few loop-lag ticks */

  expo e;
  scrape(ports[2], bearer, &e);
  every_node_label(&e, "node-1");
  double rx = value(&e, "hoplite_store_data_received_bytes_total", "node", "node-1");
  if (rx < (double)big) fail_msg("node-1 received %.0f bytes, less than the object", rx);
  /* the same list as COUNTERS */
  assert_true(rx == (double)th_counter(c1, "data_bytes_received"));
  /* a counter asked by name comes alone, the costly pool gauge too (read
   * only when asked: nothing moved since the scrape, so the same pages) */
  double resident = value(&e, "hoplite_store_pool_resident_bytes", "node", "node-1");
  assert_true(resident > 0 && resident == (double)th_counter(c1, "pool_resident"));
  uint64_t v = 7;
  assert_int_equal(hpl_counter(c1, "no_such_counter", th_ms(5000), &v), HPL_ENOTFOUND);
  assert_int_equal(v, 7);
  assert_true(value(&e, "hoplite_store_pulls_total", "node", "node-1") >= 1);
  assert_string_equal(family_of(&e, "hoplite_store_pool_used_bytes")->type, "gauge");
  assert_string_equal(family_of(&e, "hoplite_store_objects")->type, "gauge");
  assert_string_equal(family_of(&e, "hoplite_store_clients")->type, "gauge");
  assert_string_equal(family_of(&e, "hoplite_store_data_received_bytes_total")->type, "counter");
  assert_true(value(&e, "hoplite_store_pool_capacity_bytes", "node", "node-1") == 64.0 * MB);
  assert_true(value(&e, "hoplite_store_objects", "node", "node-1") >= 1);
  assert_true(value(&e, "hoplite_store_clients", "node", "node-1") == 1);
  const sample *info = find(&e, "hoplite_store_info", "node", "node-1");
  assert_non_null(info);
  char nid[24];
  snprintf(nid, sizeof nid, "%016llx", (unsigned long long)th_node_id(c1));
  assert_string_equal(label(info, "node_id"), nid);
  assert_int_equal(check_hist(&e, "hoplite_store_get_seconds", NULL, NULL), 3);
  assert_int_equal(check_hist(&e, "hoplite_store_put_seconds", NULL, NULL), 0);
  assert_true(check_hist(&e, "hoplite_event_loop_lag_seconds", NULL, NULL) >= 2);
  assert_non_null(find(&e, "hoplite_event_loop_lag_last_seconds", "node", "node-1"));
  free(e.s);

  scrape(ports[1], bearer, &e);
  every_node_label(&e, "node-0");
  assert_true(value(&e, "hoplite_store_data_sent_bytes_total", "node", "node-0") >= (double)big);
  assert_int_equal(check_hist(&e, "hoplite_store_put_seconds", NULL, NULL), 2);
  assert_int_equal(check_hist(&e, "hoplite_store_get_seconds", NULL, NULL), 0);
  assert_true(value(&e, "hoplite_store_puts_total", "node", "node-0") == 2);
  free(e.s);

  scrape(ports[0], bearer, &e);
  every_node_label(&e, "directory");
  assert_true(value(&e, "hoplite_directory_nodes", "node", "directory") == 2);
  assert_true(value(&e, "hoplite_directory_objects", "node", "directory") >= 2);
  assert_true(value(&e, "hoplite_directory_inline_bytes", "node", "directory") >= (double)small);
  /* the large get was granted through its PEEK: no ACQUIRE was needed */
  assert_true(value(&e, "hoplite_directory_peeks_granted_total", "node", "directory") >= 1);
  assert_string_equal(family_of(&e, "hoplite_directory_inline_bytes")->type, "gauge");
  assert_int_equal(check_hist(&e, "hoplite_directory_request_seconds", "type", "register"), 2);
  assert_true(check_hist(&e, "hoplite_directory_request_seconds", "type", "peek") >= 1);
  assert_true(check_hist(&e, "hoplite_directory_request_seconds", "type", "loc_add") >= 1);
  check_hist(&e, "hoplite_directory_acquire_wait_seconds", NULL, NULL);
  assert_true(check_hist(&e, "hoplite_event_loop_lag_seconds", NULL, NULL) >= 2);
  assert_true(th_dir_counter(lc, "dir_acquires") ==
              (uint64_t)value(&e, "hoplite_directory_acquires_total", NULL, NULL));
  free(e.s);

  /* a second scrape sees the first */
  scrape(ports[0], bearer, &e);
  assert_true(value(&e, "hoplite_metrics_scrapes_total", "node", "directory") >= 2);
  free(e.s);

  hpl_close(c0);
  hpl_close(c1);
  /* with the endpoint running (and just used) the servers still leave
   * cleanly: the loop ends, exit status 0 */
  assert_int_equal(hpl__lc_signal(lc, 1, SIGTERM), 0);
  int st = hpl__lc_exit_status(lc, 1);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("store after SIGTERM: status %#x", st);
  assert_int_equal(hpl__lc_signal(lc, -1, SIGTERM), 0);
  st = hpl__lc_exit_status(lc, -1);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("directory after SIGTERM: status %#x", st);
  th_stop(lc, 0);
  remove_tmpdir();
}

/* A cluster with a secret: the token, on loopback too. */
static void test_token(void **state) {
  (void)state;
  make_tmpdir();
  int ports[2];
  hpl__lc *lc = metrics_cluster(1, ports);
  char token[HPL__METRICS_TOKEN_LEN + 1], bearer[128];
  cli_token(hpl__lc_secret(lc), token);
  for (int k = 0; k < 2; k++) {
    int port = ports[k];
    http_rep r = http(port, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 401);
    assert_non_null(header(&r, "WWW-Authenticate"));
    assert_null(strstr(r.body, "hoplite_")); /* nothing leaks */
    http_free(&r);
    char wrong[128];
    snprintf(wrong, sizeof wrong, "Bearer %.*s%c", HPL__METRICS_TOKEN_LEN - 1, token,
             token[HPL__METRICS_TOKEN_LEN - 1] == '0' ? '1' : '0');
    r = http(port, "GET", "/metrics", wrong);
    assert_int_equal(r.status, 401);
    http_free(&r);
    snprintf(wrong, sizeof wrong, "Basic %s", token);
    r = http(port, "GET", "/metrics", wrong);
    assert_int_equal(r.status, 401);
    http_free(&r);
    snprintf(wrong, sizeof wrong, "Bearer %s0", token); /* longer */
    r = http(port, "GET", "/metrics", wrong);
    assert_int_equal(r.status, 401);
    http_free(&r);
    /* another cluster's token */
    char other[128], otok[HPL__METRICS_TOKEN_LEN + 1];
    snprintf(other, sizeof other, "%s/other.secret", tmpdir);
    char err[256];
    assert_int_equal(hpl__auth_create(other, err, sizeof err), 0);
    cli_token(other, otok);
    unlink(other);
    snprintf(wrong, sizeof wrong, "Bearer %s", otok);
    r = http(port, "GET", "/metrics", wrong);
    assert_int_equal(r.status, 401);
    http_free(&r);
    /* the scheme is case-insensitive */
    snprintf(bearer, sizeof bearer, "bearer %s", token);
    r = http(port, "GET", "/metrics", bearer);
    assert_int_equal(r.status, 200);
    http_free(&r);
    snprintf(bearer, sizeof bearer, "Bearer %s", token);
    /* only GET /metrics */
    r = http(port, "GET", "/", bearer);
    assert_int_equal(r.status, 404);
    http_free(&r);
    r = http(port, "GET", "/metrics/x", bearer);
    assert_int_equal(r.status, 404);
    http_free(&r);
    r = http(port, "POST", "/metrics", bearer);
    assert_int_equal(r.status, 405);
    assert_non_null(header(&r, "Allow"));
    assert_string_equal(header(&r, "Allow"), "GET");
    http_free(&r);
    expo e;
    scrape(port, bearer, &e);
    assert_true(value(&e, "hoplite_metrics_denied_total", NULL, NULL) == 5);
    free(e.s);
  }
  th_stop(lc, 0);
  remove_tmpdir();
}

/* No secret: loopback is open. */
static void test_no_secret_open(void **state) {
  (void)state;
  make_tmpdir();
  setenv("HPL_TEST_NO_AUTH", "1", 1);
  int ports[2];
  hpl__lc *lc = metrics_cluster(1, ports);
  unsetenv("HPL_TEST_NO_AUTH");
  assert_string_equal(hpl__lc_secret(lc), "");
  for (int k = 0; k < 2; k++) {
    expo e;
    scrape(ports[k], NULL, &e);
    every_node_label(&e, k ? "node-0" : "directory");
    free(e.s);
  }
  th_stop(lc, 0);
  remove_tmpdir();
}

/* Run a server with `args` (NULL-terminated, after the program) that must
 * exit at once; returns its exit status and its stderr in err. */
static int run_refused(const char *prog, const char *const *args, char *err, size_t errlen) {
  char exe[512];
  snprintf(exe, sizeof exe, "%s/%s", bin_dir(), prog);
  const char *argv[32] = {exe};
  int argc = 1;
  for (; args[argc - 1]; argc++) argv[argc] = args[argc - 1];
  argv[argc] = NULL;
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 2);
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 1);
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  size_t len = 0;
  for (;;) {
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    int n = poll(&pf, 1, (int)th_ms(10000));
    if (n <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      fail_msg("%s did not exit", prog);
    }
    ssize_t r = read(p[0], err + len, errlen - 1 - len);
    if (r <= 0) break;
    len += (size_t)r;
    if (len == errlen - 1) break;
  }
  err[len] = 0;
  close(p[0]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static void test_refused(void **state) {
  (void)state;
  char err[4096];
  const char *bad[][8] = {
      {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1", NULL},
      {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:70000", NULL},
      {"--listen", "127.0.0.1:0", "--metrics-listen", "no.such.host:9100", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(run_refused("hoplite-directory", bad[i], err, sizeof err), 2);
    if (!strstr(err, "bad value for --metrics-listen")) fail_msg("unexpected message: %s", err);
  }
  /* beyond loopback without a secret */
  const char *exposed_dir[] = {"--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0", NULL};
  assert_int_equal(run_refused("hoplite-directory", exposed_dir, err, sizeof err), 2);
  if (!strstr(err, "--metrics-listen 0.0.0.0:0 is beyond loopback"))
    fail_msg("unexpected message: %s", err);
  const char *exposed_store[] = {"--directory", "127.0.0.1:1", "--metrics-listen", "192.0.2.1:9100",
                                 NULL};
  assert_int_equal(run_refused("hoplite-store", exposed_store, err, sizeof err), 2);
  if (!strstr(err, "--metrics-listen 192.0.2.1:9100 is beyond loopback"))
    fail_msg("unexpected message: %s", err);
  const char *orphan[] = {"--listen", "127.0.0.1:0", "--metrics-port-file", "/tmp/x", NULL};
  assert_int_equal(run_refused("hoplite-directory", orphan, err, sizeof err), 2);
  if (!strstr(err, "--metrics-port-file needs --metrics-listen"))
    fail_msg("unexpected message: %s", err);
  /* the option is documented */
  const char *help[] = {"--help", NULL};
  assert_int_equal(run_refused("hoplite-store", help, err, sizeof err), 0);
  assert_int_equal(run_refused("hoplite-directory", help, err, sizeof err), 0);
}

/* ---- the endpoint in this process, on a loop the test runs (or not) */

static void render_one(void *arg, hpl__mbuf *b) {
  (*(int *)arg)++;
  hpl__m_family(b, "t_renders_total", "counter", "test");
  hpl__m_sample(b, "t_renders_total", "", (uint64_t)*(int *)arg, 0);
}

typedef struct scraper {
  int port;
  http_rep rep;
  uint64_t ms;
  int done; /* atomic */
  pthread_t t;
} scraper;

static void *scrape_thread(void *arg) {
  scraper *sc = arg;
  uint64_t t0 = hpl__now_ms();
  sc->rep = http(sc->port, "GET", "/metrics", NULL);
  sc->ms = hpl__now_ms() - t0;
  __atomic_store_n(&sc->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void on_tick(uv_timer_t *t) { (void)t; }

/* A loop that does not answer gets the scraper a 503 after about 2 s (the
 * HTTP side never waits longer); one that runs answers; stopping while a
 * scrape waits answers it at once; the loop ends once stopped (no handle
 * left open). */
static void test_endpoint_inprocess(void **state) {
  (void)state;
  make_tmpdir();
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  hpl__metrics_cfg cfg = {.on = 1, .port = 0};
  snprintf(cfg.host, sizeof cfg.host, "127.0.0.1");
  char pf[128];
  snprintf(pf, sizeof pf, "%s/m.port", tmpdir);
  cfg.port_file = pf;
  hpl__auth none = {0};
  int renders = 0;
  hpl__msrv *m;
  assert_int_equal(hpl__msrv_start(&loop, &cfg, &none, "t", render_one, &renders, &m), 0);
  assert_non_null(m);
  scraper sc = {.port = read_port(pf)};
  /* the loop is not running: 503 after the wait */
  assert_int_equal(pthread_create(&sc.t, NULL, scrape_thread, &sc), 0);
  pthread_join(sc.t, NULL);
  assert_int_equal(sc.rep.status, 503);
  assert_true(sc.ms >= 1900 && sc.ms < 5000);
  http_free(&sc.rep);
  /* running: 200, rendered on this thread; the timed-out request is counted */
  assert_int_equal(pthread_create(&sc.t, NULL, scrape_thread, &sc), 0);
  uv_timer_t tick; /* keeps uv_run going (the endpoint's handles do not) */
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, on_tick, 10, 10);
  sc.done = 0;
  while (!__atomic_load_n(&sc.done, __ATOMIC_ACQUIRE)) uv_run(&loop, UV_RUN_ONCE);
  pthread_join(sc.t, NULL);
  assert_int_equal(sc.rep.status, 200);
  expo e;
  parse_expo(sc.rep.body, &e);
  assert_true(value(&e, "t_renders_total", NULL, NULL) >= 1);
  assert_true(renders >= 1);
  assert_true(value(&e, "hoplite_metrics_timeouts_total", "node", "t") == 1);
  free(e.s);
  http_free(&sc.rep);
  /* a scrape waiting when the endpoint stops is released at once (503, or
   * its connection closed as the HTTP server goes away) */
  assert_int_equal(pthread_create(&sc.t, NULL, scrape_thread, &sc), 0);
  th_sleep_ms(300);
  hpl__msrv_stop(m); /* joins the HTTP thread */
  pthread_join(sc.t, NULL);
  assert_true(sc.rep.status == 503 || sc.rep.status == 0);
  if (sc.ms >= 1500) fail_msg("the waiting scrape was released after %llu ms",
                              (unsigned long long)sc.ms);
  http_free(&sc.rep);
  uv_close((uv_handle_t *)&tick, NULL);
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(&loop), 0); /* every handle closed */
  remove_tmpdir();
}

/* --help goes to stdout; check it there. */
static void test_help(void **state) {
  (void)state;
  const char *progs[] = {"hoplite-directory", "hoplite-store"};
  for (int i = 0; i < 2; i++) {
    char cmd[600], out[16384];
    snprintf(cmd, sizeof cmd, "'%s/%s' --help", bin_dir(), progs[i]);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    assert_int_equal(pclose(p), 0);
    assert_non_null(strstr(out, "--metrics-listen HOST:PORT"));
    assert_non_null(strstr(out, "--metrics-port-file PATH"));
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exposition_unit),
      cmocka_unit_test_teardown(test_scrape, th_teardown),
      cmocka_unit_test_teardown(test_token, th_teardown),
      cmocka_unit_test_teardown(test_no_secret_open, th_teardown),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_endpoint_inprocess),
      cmocka_unit_test(test_help),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
