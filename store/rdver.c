/* rdver.c - a reduce stream's digests at its receiver (see rdver.h): one
 * connection to the sender's data port asks for the next digests, waits
 * for the answer, asks again. */
#include "rdver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "digest.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "proto.h"
#include "util.h"
#include "uvconn.h"

#define RETRY_MS 100
#define MAX_BREAKS 10 /* connections in a row that broke without an answer */

struct hpl__rdver {
  hpl__store *s;
  hpl__rdver_ops ops;
  void *arg;
  char key[320];
  int internal;
  char addr[64];
  int port;
  char label[48];
  uint64_t size, nunits;
  uint64_t first, known; /* units [first, known) are in list */
  int algo;              /* -1: not known yet */
  int finished;          /* cancelled, failed, or every digest is here */
  int cancelled;
  unsigned breaks;
  uint64_t req_id;
  uv_tcp_t *tcp; /* while connecting */
  uv_connect_t creq;
  hpl__conn *c;
  uv_timer_t retry;
  int closes; /* handles that must close before the record is freed */
  /* hpl__rdver_into: the object whose digests these are, its owner's pull */
  hpl__obj *into;
  hpl__puller *const *into_pull;
  void (*into_failed)(void *arg, int status, const char *detail);
  void *into_arg;
  uint8_t *list; /* nunits digests */
};

static void ver_release(hpl__rdver *v) {
  if (--v->closes > 0) return;
  free(v->list);
  free(v);
}

static void timer_closed(uv_handle_t *h) { ver_release(h->data); }

static void tcp_closed(uv_handle_t *h) {
  hpl__rdver *v = h->data;
  free(h);
  ver_release(v);
}

static void ver_connect(hpl__rdver *v);

static void retry_fired(uv_timer_t *t) { ver_connect(t->data); }

/* Nothing more will be asked (failed, complete): close the connection. */
static void ver_stop(hpl__rdver *v) {
  v->finished = 1;
  uv_timer_stop(&v->retry);
  if (v->c) hpl__conn_close(v->c, 0);
}

static void ver_fail(hpl__rdver *v, int status, const char *detail) {
  if (v->finished) return;
  ver_stop(v);
  HPL__LOG_WARN("digests of stream '%s' from %s:%d: %s", v->key, v->addr, v->port, detail);
  v->ops.failed(v->arg, status, detail);
}

static void ask(hpl__rdver *v) {
  Hplpb__PullReq r = HPLPB__PULL_REQ__INIT;
  r.id = v->key;
  r.offset = v->known;
  r.receiver = v->s->node_id;
  r.internal = v->internal;
  r.digests = 1;
  hpl__conn_send(v->c, HPL__MSG_PULL, ++v->req_id, &r.base, NULL, 0, 0, NULL, NULL);
}

static void on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                     const uint8_t *payload, uint64_t plen) {
  (void)payload;
  hpl__rdver *v = hpl__conn_data(c);
  if (v->finished) return;
  char detail[400];
  if (h->type != HPL__MSG_PULL_REP || plen) {
    hpl__conn_fail(c, "unexpected frame on a digest pull");
    return;
  }
  Hplpb__PullRep *r = (Hplpb__PullRep *)m;
  if (r->status != 0) {
    snprintf(detail, sizeof detail, "the sender refused: %s", r->detail);
    ver_fail(v, r->status, detail);
    return;
  }
  v->breaks = 0;
  if (r->digest_algo == 0) { /* the stream has no digests */
    v->algo = 0;
    ver_stop(v);
    v->ops.more(v->arg, v->known, 0);
    return;
  }
  uint64_t n = r->digests.len / HPL__DIGEST_LEN;
  if (!hpl__digest_algo_on((int)r->digest_algo) || (v->algo > 0 && v->algo != (int)r->digest_algo) ||
      r->size != v->size || r->digest_first != v->known || n == 0 ||
      r->digests.len % HPL__DIGEST_LEN || n > v->nunits - v->known) {
    snprintf(detail, sizeof detail,
             "an answer that does not fit (algorithm %u, units %llu+%llu, size %llu; asked unit "
             "%llu of %llu)",
             r->digest_algo, (unsigned long long)r->digest_first, (unsigned long long)n,
             (unsigned long long)r->size, (unsigned long long)v->known,
             (unsigned long long)v->nunits);
    ver_fail(v, HPL_EPROTO, detail);
    return;
  }
  v->algo = (int)r->digest_algo;
  memcpy(v->list + v->known * HPL__DIGEST_LEN, r->digests.data, r->digests.len);
  uint64_t from = v->known;
  v->known += n;
  if (v->known < v->nunits)
    ask(v);
  else
    ver_stop(v);
  v->ops.more(v->arg, from, n);
}

static void on_close(hpl__conn *c, int status) {
  hpl__rdver *v = hpl__conn_data(c);
  v->c = NULL;
  if (v->cancelled) {
    ver_release(v);
    return;
  }
  ver_release(v); /* (the record lives on: the timer holds a count) */
  if (v->finished) return;
  if (++v->breaks >= MAX_BREAKS) {
    char detail[128];
    snprintf(detail, sizeof detail, "%u connections in a row broke (%s)", v->breaks,
             hpl_strerror(status ? status : HPL_ECONN));
    ver_fail(v, status ? status : HPL_ECONN, detail);
    return;
  }
  uv_timer_start(&v->retry, retry_fired, RETRY_MS, 0);
}

static void on_connect(uv_connect_t *req, int status) {
  hpl__rdver *v = req->data;
  if (v->cancelled) return; /* hpl__rdver_cancel closes the handle */
  uv_tcp_t *t = v->tcp;
  v->tcp = NULL;
  if (v->finished || status < 0) {
    t->data = v;
    uv_close((uv_handle_t *)t, tcp_closed);
    if (!v->finished) {
      if (++v->breaks >= MAX_BREAKS) {
        char detail[128];
        snprintf(detail, sizeof detail, "cannot connect: %s", uv_strerror(status));
        ver_fail(v, HPL_ECONN, detail);
      } else {
        uv_timer_start(&v->retry, retry_fired, RETRY_MS, 0);
      }
    }
    return;
  }
  uv_tcp_nodelay(t, 1);
  hpl__conn_mark_control(t);
  hpl__conn_opts o = {.lim = {.max_msg = 4096, .max_payload = 0, .max_type = HPL__MSG_MAX_},
                      .on_frame = on_frame,
                      .on_close = on_close,
                      .data = v,
                      .label = v->label,
                      .auth = &v->s->cfg.auth,
                      .auth_role = HPL__ROLE_DATA,
                      .auth_failures = &v->s->ctr.auth_failures};
  v->c = hpl__conn_new((uv_stream_t *)t, &o); /* its on_close releases the handle's count */
  if (!v->c) { /* (the stream is closed and freed) */
    v->closes--;
    ver_fail(v, HPL_ENOMEM, "out of memory");
    return;
  }
  ask(v);
}

static void ver_connect(hpl__rdver *v) {
  struct sockaddr_in sa;
  if (v->finished || v->c || v->tcp) return;
  if (uv_ip4_addr(v->addr, v->port, &sa) != 0 || !(v->tcp = malloc(sizeof *v->tcp))) {
    ver_fail(v, HPL_ENOMEM, "cannot connect");
    return;
  }
  uv_tcp_init(v->s->loop, v->tcp);
  v->creq.data = v;
  v->closes++; /* tcp_closed or the conn's on_close releases it */
  if (uv_tcp_connect(&v->creq, v->tcp, (struct sockaddr *)&sa, on_connect) != 0) {
    v->tcp->data = v;
    uv_close((uv_handle_t *)v->tcp, tcp_closed);
    v->tcp = NULL;
    ver_fail(v, HPL_ECONN, "cannot connect");
  }
}

hpl__rdver *hpl__rdver_start(hpl__store *s, const char *addr, int port, const char *key,
                             int internal, uint64_t size, uint64_t first,
                             const hpl__rdver_ops *ops, void *arg) {
  uint64_t n = hpl__digest_units(size);
  if (strlen(key) >= sizeof ((hpl__rdver *)0)->key || strlen(addr) >= 64 || first >= n ||
      n > HPL__DIGEST_MAX_UNITS)
    return NULL;
  hpl__rdver *v = calloc(1, sizeof *v);
  if (!v || !(v->list = malloc((size_t)(n * HPL__DIGEST_LEN)))) {
    free(v);
    return NULL;
  }
  v->s = s;
  v->ops = *ops;
  v->arg = arg;
  snprintf(v->key, sizeof v->key, "%s", key);
  v->internal = internal;
  snprintf(v->addr, sizeof v->addr, "%s", addr);
  v->port = port;
  snprintf(v->label, sizeof v->label, "digests<-%s:%d", addr, port);
  v->size = size;
  v->nunits = n;
  v->first = v->known = first;
  v->algo = -1;
  uv_timer_init(s->loop, &v->retry);
  v->retry.data = v;
  v->closes = 1; /* the timer's */
  ver_connect(v);
  return v;
}

void hpl__rdver_cancel(hpl__rdver *v) {
  if (!v) return;
  v->cancelled = 1;
  ver_stop(v);
  if (v->tcp) { /* still connecting */
    v->tcp->data = v;
    uv_close((uv_handle_t *)v->tcp, tcp_closed);
    v->tcp = NULL;
  }
  uv_close((uv_handle_t *)&v->retry, timer_closed);
}

int hpl__rdver_algo(const hpl__rdver *v) { return v->algo; }
uint64_t hpl__rdver_first(const hpl__rdver *v) { return v->first; }
uint64_t hpl__rdver_known(const hpl__rdver *v) { return v->known; }
const char *hpl__rdver_key(const hpl__rdver *v) { return v->key; }

const uint8_t *hpl__rdver_digests(const hpl__rdver *v, uint64_t u) {
  return u >= v->first && u < v->known ? v->list + u * HPL__DIGEST_LEN : NULL;
}

int hpl__rdver_check(const hpl__rdver *v, uint64_t u, const uint8_t *bytes, size_t len) {
  if (v->algo == 0) return 1;
  const uint8_t *want = hpl__rdver_digests(v, u);
  if (!want) return -1;
  uint8_t got[HPL__DIGEST_LEN];
  hpl__digest_bytes(v->algo, bytes, len, got);
  return hpl__digest_equal(got, want);
}

/* ------------------------------------------------------------------ into an object */

static void into_more(void *arg, uint64_t first, uint64_t n) {
  hpl__rdver *v = arg;
  hpl__obj *o = v->into;
  hpl__puller *p = *v->into_pull;
  if (n == 0) { /* no digests: the bytes count as they come */
    free(o->dig);
    o->dig = NULL;
  } else if (o->dig) {
    char detail[400];
    ProtobufCBinaryData list = {(size_t)(n * HPL__DIGEST_LEN), (uint8_t *)hpl__rdver_digests(v, first)};
    ProtobufCBinaryData none = {0, NULL};
    o->dig->algo = (uint8_t)v->algo;
    int rc = hpl__objdig_more(o, first, &list, &none, detail, sizeof detail);
    if (rc == 0 && o->dig->known == o->dig->nunits) { /* the root: over what was checked */
      uint8_t r[HPL__DIGEST_LEN];
      ProtobufCBinaryData root = {HPL__DIGEST_LEN, r};
      hpl__digest_root(o->dig->algo, o->dig->list, o->dig->nunits, r);
      rc = hpl__objdig_more(o, o->dig->nunits, &none, &root, detail, sizeof detail);
    }
    if (rc != 0) {
      ver_fail(v, rc, detail);
      return;
    }
    if (o->dig->made) o->dig->made(v->s, o); /* on to the directory (a partial copy's receivers) */
  }
  if (p) hpl__puller_digests_more(p);
}

static void into_failed(void *arg, int status, const char *detail) {
  hpl__rdver *v = arg;
  v->into_failed(v->into_arg, status, detail);
}

int hpl__rdver_into(hpl__store *s, hpl__obj *o, const char *addr, int port, const char *key,
                    int internal, hpl__puller *const *pull,
                    void (*failed)(void *arg, int status, const char *detail), void *arg,
                    hpl__rdver **out) {
  *out = NULL;
  uint64_t first = hpl__digest_unit_of(o->size, o->progress);
  if (!hpl__digest_algo_on(s->cfg.integrity) || o->progress >= o->size ||
      hpl__digest_units(o->size) > HPL__DIGEST_MAX_UNITS)
    return 0;
  if (!o->dig) {
    char detail[200];
    ProtobufCBinaryData none = {0, NULL};
    if (hpl__objdig_take(o, o->size, (uint32_t)s->cfg.integrity, &none, &none, detail,
                         sizeof detail) != 0)
      return HPL_ENOMEM;
  }
  o->dig->known = first; /* digests from the new sender on */
  o->dig->complete = 0;
  hpl__digest_unit_span(o->size, first, &o->dig->have, NULL); /* (its start) */
  hpl__rdver_ops ops = {.more = into_more, .failed = into_failed};
  hpl__rdver *v = hpl__rdver_start(s, addr, port, key, internal, o->size, first, &ops, NULL);
  if (!v) return HPL_ENOMEM;
  v->arg = v;
  v->into = o;
  v->into_pull = pull;
  v->into_failed = failed;
  v->into_arg = arg;
  *out = v;
  return 0;
}

/* ------------------------------------------------------------------ checks off the loop */

#define JOB_PIECES 8u /* per unit at most */

struct hpl__rdver_job {
  uv_work_t req;
  hpl__store *s;
  void (*done)(void *arg, uint64_t bad);
  void *arg; /* NULL once dropped */
  int algo;
  uint64_t u0, u1, bad;
  hpl__obj *keep[2];
  hpl__digest_piece *pc; /* JOB_PIECES per unit */
  uint8_t *npc;          /* pieces per unit */
  uint8_t *want;         /* (u1 - u0) digests */
};

static void job_free(hpl__rdver_job *j) {
  for (unsigned i = 0; i < 2; i++)
    if (j->keep[i]) hpl__obj_unref(j->s, j->keep[i]);
  free(j->pc);
  free(j->npc);
  free(j->want);
  free(j);
}

static void check_run(uv_work_t *req) {
  hpl__rdver_job *j = req->data;
  for (uint64_t u = j->u0; u < j->u1; u++) {
    size_t x = (size_t)(u - j->u0);
    uint8_t got[HPL__DIGEST_LEN];
    hpl__digest_pieces(j->algo, j->pc + x * JOB_PIECES, j->npc[x], got);
    if (!hpl__digest_equal(got, j->want + x * HPL__DIGEST_LEN)) {
      j->bad = u;
      return;
    }
  }
}

static void check_done(uv_work_t *req, int status) {
  hpl__rdver_job *j = req->data;
  if (j->arg && status == 0) j->done(j->arg, j->bad); /* (canceled: the loop ends) */
  job_free(j);
}

hpl__rdver_job *hpl__rdver_check_job(hpl__rdver *v, uint64_t u0, uint64_t u1,
                                     const uint8_t *(*at)(void *arg, uint64_t pos, uint64_t *n),
                                     hpl__obj *const keep[2],
                                     void (*done)(void *arg, uint64_t bad), void *arg) {
  if (u0 >= u1 || u0 < v->first || u1 > v->known || v->algo <= 0) return NULL;
  size_t n = (size_t)(u1 - u0);
  hpl__rdver_job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->s = v->s;
  j->pc = malloc(n * JOB_PIECES * sizeof *j->pc);
  j->npc = malloc(n);
  j->want = malloc(n * HPL__DIGEST_LEN);
  if (!j->pc || !j->npc || !j->want) {
    job_free(j);
    return NULL;
  }
  for (size_t x = 0; x < n; x++) { /* each unit's pieces */
    unsigned k =
        hpl__digest_unit_pieces(v->size, u0 + x, at, arg, j->pc + x * JOB_PIECES, JOB_PIECES);
    if (k == 0) {
      job_free(j);
      return NULL;
    }
    j->npc[x] = (uint8_t)k;
  }
  memcpy(j->want, v->list + u0 * HPL__DIGEST_LEN, n * HPL__DIGEST_LEN);
  j->done = done;
  j->arg = arg;
  j->algo = v->algo;
  j->u0 = u0;
  j->u1 = u1;
  j->bad = UINT64_MAX;
  j->req.data = j;
  for (unsigned i = 0; i < 2; i++)
    if (keep && (j->keep[i] = keep[i])) hpl__obj_ref(v->s, j->keep[i]);
  if (uv_queue_work(v->s->loop, &j->req, check_run, check_done) != 0) {
    job_free(j);
    return NULL;
  }
  return j;
}

void hpl__rdver_job_drop(hpl__rdver_job *j) {
  if (j) j->arg = NULL;
}
