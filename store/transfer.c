/* transfer.c - the data port and pulls from peers (see store.h).
 *
 * Serving: a peer sends PULL(id, offset); we answer PULL_REP with the
 * object's size and stream bytes [offset, size) as the payload. A copy that
 * is still arriving is forwarded as far as it has arrived; the sender then
 * waits on the object's watcher list (no polling) and continues when more
 * bytes land. At most two writes of up to `chunk` bytes are in flight.
 *
 * Pulling: connect, send PULL from the bytes already held, and receive the
 * payload straight into the object's pool memory.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "log.h"
#include "store.h"
#include "util.h"

#define SENDER_MAX_INFLIGHT 2

typedef struct st_sender {
  struct st_sender *prev, *next;
  store *s;
  hpl__conn *c;
  st_obj *obj; /* streaming (referenced); NULL when idle */
  uint64_t pos, end;
  int inflight;
  st_watch watch;
  uint64_t req_id;
  uint64_t peer;
  uint64_t offset; /* where this stream started */
  char *parked;    /* reduce stream key this PULL waits for (not created yet) */
  uint32_t gen;    /* generation of the bytes being streamed */
  uint64_t started_ms;
  int faulty;      /* fault points apply to this stream */
  int stalled;     /* fault point: stop sending */
  uv_timer_t *pace; /* fault point slow_send: waiting for the next send */
} st_sender;

struct st_puller {
  struct st_puller *prev, *next;
  store *s;
  xfer_ops ops;
  void *arg;
  char key[320];
  int internal;
  uv_tcp_t *tcp;
  uv_connect_t creq;
  hpl__conn *c;
  uint64_t start; /* stream offset requested */
  uint64_t size;  /* whole stream size */
  uint64_t got;   /* bytes received after start */
  int finished;   /* done, failed or cancelled: ignore further events */
  int paused;     /* the owner has no room: not a stall */
  uv_timer_t stall;   /* the monitor: stall and straggler checks */
  uint64_t last_move_ms; /* when bytes last arrived */
  uint64_t slow_next_ms; /* monitor 1: next time a crawl may be reported */
  uint64_t started_ms;
  uint64_t samp_ms[32], samp_got[32]; /* (time, bytes) every tick, a ring */
  int nsamp;
  int closes;          /* handles still closing after the end */
  char label[48];
};

#define MONITOR_TICK_MS 250

int transfer_port(store *s) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getsockname(&s->data_listener, (struct sockaddr *)&ss, &len) != 0) return -1;
  return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* ------------------------------------------------------------------ serving */

static void sender_pump(st_sender *sd);

static void sender_finish(st_sender *sd) {
  st_obj *o = sd->obj;
  if (!o) return;
  store_unwatch(o, &sd->watch);
  sd->obj = NULL;
  store_obj_unref(sd->s, o);
}

static void sender_write_done(hpl__conn *c, int status, void *arg) {
  (void)c;
  st_sender *sd = arg;
  sd->inflight--;
  if (status) return; /* the connection is closing; on_close cleans up */
  sender_pump(sd);
}

static void sender_watch_fn(st_watch *w) {
  st_sender *sd = (st_sender *)((char *)w - offsetof(st_sender, watch));
  sender_pump(sd);
}

static void pace_fired(uv_timer_t *t) {
  st_sender *sd = t->data;
  sender_pump(sd);
}

/* Fault points: how many bytes this stream may send now (0: none, for now
 * or for good). Only called for streams marked faulty. */
static uint64_t fault_budget(st_sender *sd, uint64_t want) {
  store *s = sd->s;
  store_faults *f = &s->cfg.faults;
  uint64_t sent = sd->pos - sd->offset;
  if (f->crash_after && f->sent >= f->crash_after) {
    LOG_WARN("fault point: crashing after sending %llu bytes", (unsigned long long)f->sent);
    raise(SIGKILL);
  }
  if (f->drop_after && !f->dropped && sent >= f->drop_after) {
    if (sd->inflight > 0) return 0; /* cut exactly there: let queued bytes go first */
    f->dropped = 1;
    LOG_WARN("fault point: dropping the stream of '%s' after %llu bytes", sd->obj->id,
             (unsigned long long)sent);
    hpl__conn_close(sd->c, HPL_ECONN);
    return 0;
  }
  if (sd->stalled || (f->stall_after && !f->stalled && sent >= f->stall_after)) {
    if (!sd->stalled)
      LOG_WARN("fault point: stalling the stream of '%s' after %llu bytes", sd->obj->id,
               (unsigned long long)sent);
    f->stalled = sd->stalled = 1;
    return 0;
  }
  uint64_t cap = want;
  if (f->crash_after && f->crash_after - f->sent < cap) cap = f->crash_after - f->sent;
  if (f->drop_after && !f->dropped && f->drop_after - sent < cap) cap = f->drop_after - sent;
  if (f->stall_after && !f->stalled && f->stall_after - sent < cap) cap = f->stall_after - sent;
  if (f->slow_send) {
    uint64_t el = hpl__now_ms() - sd->started_ms;
    uint64_t allowed = f->slow_send * el / 1000 + 65536;
    if (sent >= allowed) {
      if (!sd->pace) {
        sd->pace = malloc(sizeof *sd->pace);
        uv_timer_init(s->loop, sd->pace);
        sd->pace->data = sd;
      }
      uv_timer_start(sd->pace, pace_fired, 10, 0);
      return 0;
    }
    if (allowed - sent < cap) cap = allowed - sent;
  }
  return cap;
}

/* Send as much of the object as has arrived, within the in-flight budget. */
static void sender_pump(st_sender *sd) {
  st_obj *o = sd->obj;
  if (!o || hpl__conn_closing(sd->c)) return;
  store *s = sd->s;
  if (o->gen != sd->gen) { /* the bytes restarted: this stream is void */
    hpl__conn_close(sd->c, HPL_ECANCELED);
    return;
  }
  while (sd->inflight < SENDER_MAX_INFLIGHT && sd->pos < o->progress) {
    uint64_t n = o->progress - sd->pos;
    if (n > s->cfg.chunk) n = s->cfg.chunk;
    if (sd->faulty && (n = fault_budget(sd, n)) == 0) return;
    if (hpl__conn_write(sd->c, o->data + sd->pos, (size_t)n, sender_write_done, sd) != 0) return;
    sd->pos += n;
    sd->inflight++;
    s->ctr.data_bytes_sent += n;
    if (sd->faulty) s->cfg.faults.sent += n;
  }
  if (sd->pos < sd->end) {
    if (sd->pos == o->progress) {
      if (!o->in_table && o->state != OBJ_SEALED) {
        /* our partial copy was abandoned: the receiver must go elsewhere */
        LOG_INFO("stopping the stream of '%s' at %llu bytes: copy abandoned", o->id,
                 (unsigned long long)sd->pos);
        hpl__conn_close(sd->c, HPL_ECANCELED);
        return;
      }
      store_watch(o, &sd->watch);
    }
    return;
  }
  if (sd->inflight == 0) {
    s->ctr.pulls_served++;
    LOG_DEBUG("served '%s' [%llu, %llu) to %016llx", o->id, (unsigned long long)sd->offset,
              (unsigned long long)sd->end, (unsigned long long)sd->peer);
    sender_finish(sd);
    if (s->draining) store_drain_check(s);
  }
}

static void pull_reply_err(st_sender *sd, int status, const char *detail) {
  Hplpb__PullRep r = HPLPB__PULL_REP__INIT;
  r.status = status;
  r.detail = (char *)detail;
  hpl__conn_send(sd->c, HPL__MSG_PULL_REP, sd->req_id, &r.base, NULL, 0, 0, NULL, NULL);
}

/* Start streaming once the object has a buffer. */
static void sender_start(st_sender *sd) {
  st_obj *o = sd->obj;
  char detail[320];
  if (!o->data) {
    if (!o->in_table) {
      snprintf(detail, sizeof detail, "object '%s' is gone from this node", o->id);
      pull_reply_err(sd, HPL_ENOTFOUND, detail);
      sender_finish(sd);
      return;
    }
    store_watch(o, &sd->watch); /* parked until the buffer exists */
    return;
  }
  if (sd->offset > o->size) {
    snprintf(detail, sizeof detail, "offset %llu beyond the end of '%s' (%llu bytes)",
             (unsigned long long)sd->offset, o->id, (unsigned long long)o->size);
    pull_reply_err(sd, HPL_EINVAL, detail);
    sender_finish(sd);
    return;
  }
  if (sd->offset > 0 && sd->gen != o->gen) {
    snprintf(detail, sizeof detail, "this copy of '%s' holds other bytes (generation %u, not %u)",
             o->id, o->gen, sd->gen);
    pull_reply_err(sd, HPL_ESTATE, detail);
    sender_finish(sd);
    return;
  }
  sd->gen = o->gen;
  sd->watch.fn = sender_watch_fn;
  sd->pos = sd->offset;
  sd->end = o->size;
  sd->started_ms = hpl__now_ms();
  store_faults *f = &sd->s->cfg.faults;
  sd->faulty = f->enabled && !strncmp(o->id, f->prefix, strlen(f->prefix)) &&
               (!f->to_node || f->to_node == sd->peer);
  Hplpb__PullRep r = HPLPB__PULL_REP__INIT;
  r.size = o->size;
  hpl__conn_send(sd->c, HPL__MSG_PULL_REP, sd->req_id, &r.base, NULL, sd->end - sd->pos, 0, NULL,
                NULL);
  sender_pump(sd);
}

static void sender_parked_fn(st_watch *w) {
  st_sender *sd = (st_sender *)((char *)w - offsetof(st_sender, watch));
  sender_start(sd);
}

static void data_on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                          const uint8_t *payload, uint64_t plen) {
  (void)payload, (void)plen;
  st_sender *sd = hpl__conn_data(c);
  if (h->type != HPL__MSG_PULL) {
    hpl__conn_fail(c, "only PULL is accepted on the data port");
    return;
  }
  if (sd->obj) {
    hpl__conn_fail(c, "PULL while a stream is in progress");
    return;
  }
  Hplpb__PullReq *p = (Hplpb__PullReq *)m;
  sd->req_id = h->req_id;
  sd->peer = p->receiver;
  sd->gen = p->gen;
  if (sd->s->draining) {
    pull_reply_err(sd, HPL_EUNAVAIL, "this node is leaving");
    return;
  }
  if (sd->parked) {
    hpl__conn_fail(c, "PULL while another waits");
    return;
  }
  if (!p->internal && !hpl__id_valid(p->id)) {
    pull_reply_err(sd, HPL_EINVAL, "invalid object id");
    return;
  }
  st_obj *o = p->internal ? store_find_internal(sd->s, p->id) : store_find(sd->s, p->id);
  if (!o && p->internal) {
    /* the directory told our peer about this stream before it told us:
     * wait until the stream exists (or its reduce ends) */
    sd->parked = strdup(p->id);
    sd->offset = p->offset;
    return;
  }
  if (!o) {
    char detail[320];
    snprintf(detail, sizeof detail, "object '%s' is not on this node", p->id);
    pull_reply_err(sd, HPL_ENOTFOUND, detail);
    return;
  }
  sd->obj = o;
  sd->offset = p->offset;
  store_obj_ref(o);
  sd->watch.fn = sender_parked_fn;
  sender_start(sd);
}

static void data_on_close(hpl__conn *c, int status) {
  (void)status;
  st_sender *sd = hpl__conn_data(c);
  store *s = sd->s;
  sender_finish(sd);
  free(sd->parked);
  if (sd->pace) {
    uv_timer_stop(sd->pace);
    uv_close((uv_handle_t *)sd->pace, (uv_close_cb)free);
  }
  if (sd->prev) sd->prev->next = sd->next; else s->senders = sd->next;
  if (sd->next) sd->next->prev = sd->prev;
  free(sd);
  if (s->draining) store_drain_check(s);
}

static void on_data_accept(uv_stream_t *server, int status) {
  store *s = server->data;
  if (status < 0) return;
  uv_tcp_t *t = malloc(sizeof *t);
  st_sender *sd = calloc(1, sizeof *sd);
  if (!t || !sd) {
    free(t);
    free(sd);
    return;
  }
  uv_tcp_init(s->loop, t);
  if (uv_accept(server, (uv_stream_t *)t) != 0) {
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    free(sd);
    return;
  }
  uv_tcp_nodelay(t, 1);
  sd->s = s;
  hpl__conn_opts o = {.lim = {.max_msg = 4096, .max_payload = 0, .max_type = HPL__MSG_MAX_},
                     .on_frame = data_on_frame,
                     .on_close = data_on_close,
                     .data = sd,
                     .label = "data-in"};
  sd->next = s->senders;
  if (s->senders) s->senders->prev = sd;
  s->senders = sd;
  sd->c = hpl__conn_new((uv_stream_t *)t, &o);
  if (!sd->c) {
    s->senders = sd->next;
    if (s->senders) s->senders->prev = NULL;
    free(sd);
  }
}

void transfer_cut_senders(store *s, st_obj *o) {
  for (st_sender *sd = s->senders; sd; sd = sd->next)
    if (sd->obj == o) hpl__conn_close(sd->c, HPL_ECANCELED);
}

int transfer_active_senders(store *s) {
  int n = 0;
  for (st_sender *sd = s->senders; sd; sd = sd->next)
    if (sd->obj && !hpl__conn_closing(sd->c)) n++;
  return n;
}

void transfer_internal_ready(store *s, const char *key) {
  for (st_sender *sd = s->senders; sd; sd = sd->next) {
    if (!sd->parked || strcmp(sd->parked, key) != 0) continue;
    st_obj *o = store_find_internal(s, key);
    free(sd->parked);
    sd->parked = NULL;
    sd->obj = o;
    store_obj_ref(o);
    sd->watch.fn = sender_parked_fn;
    sender_start(sd);
  }
}

void transfer_internal_fail(store *s, const char *target) {
  for (st_sender *sd = s->senders; sd; sd = sd->next) {
    if (!sd->parked) continue;
    /* keys are "r:<slot>:<gen>:<target>" */
    const char *t = sd->parked;
    for (int i = 0; i < 3 && t; i++) {
      t = strchr(t, ':');
      if (t) t++;
    }
    if (!t || strcmp(t, target) != 0) continue;
    free(sd->parked);
    sd->parked = NULL;
    pull_reply_err(sd, HPL_ECANCELED, "the reduce ended");
  }
}

int transfer_start(store *s) {
  struct sockaddr_in addr;
  int rc = uv_ip4_addr(s->cfg.data_host, s->cfg.data_port, &addr);
  if (rc) {
    LOG_ERROR("bad data address %s: %s", s->cfg.data_host, uv_strerror(rc));
    return HPL_EINVAL;
  }
  uv_tcp_init(s->loop, &s->data_listener);
  s->data_listener.data = s;
  if ((rc = uv_tcp_bind(&s->data_listener, (struct sockaddr *)&addr, 0)) ||
      (rc = uv_listen((uv_stream_t *)&s->data_listener, 512, on_data_accept))) {
    LOG_ERROR("cannot listen on %s:%d: %s", s->cfg.data_host, s->cfg.data_port, uv_strerror(rc));
    return HPL_ESYS;
  }
  s->data_port_bound = 1;
  return 0;
}

/* ------------------------------------------------------------------ pulling */

static void puller_unlink(st_puller *p) {
  store *s = p->s;
  if (p->prev) p->prev->next = p->next; else if (s->pullers == p) s->pullers = p->next;
  if (p->next) p->next->prev = p->prev;
  p->prev = p->next = NULL;
}

/* The puller is freed once its timer and (if it was still connecting) its
 * socket have closed: libuv may run the connect callback while closing. */
static void puller_release(st_puller *p) {
  if (--p->closes > 0) return;
  free(p);
}

static void puller_handle_closed(uv_handle_t *h) {
  st_puller *p = h->data;
  if (h != (uv_handle_t *)&p->stall) free(h);
  puller_release(p);
}

/* The stream is over (done, failed or cancelled): release everything and,
 * unless cancelled, tell the owner. */
static void puller_end(st_puller *p, int status, const char *detail, int report) {
  if (p->finished) return;
  p->finished = 1;
  puller_unlink(p);
  p->closes = 1;
  if (p->c) { /* its on_close releases one count */
    p->closes++;
    hpl__conn_close(p->c, 0);
  }
  if (p->tcp) { /* still connecting */
    p->closes++;
    p->tcp->data = p;
    uv_close((uv_handle_t *)p->tcp, puller_handle_closed);
    p->tcp = NULL;
  }
  uv_timer_stop(&p->stall);
  uv_close((uv_handle_t *)&p->stall, puller_handle_closed);
  if (report) p->ops.done(p->arg, status, detail);
}

static uint8_t *pull_sink_buf(hpl__conn *c, void *arg, uint64_t off, size_t *len) {
  (void)c;
  st_puller *p = arg;
  return p->ops.buf(p->arg, off, len);
}

static void pull_sink_got(hpl__conn *c, void *arg, uint64_t off, size_t n) {
  (void)c;
  st_puller *p = arg;
  if (p->finished) return;
  p->s->ctr.data_bytes_received += n;
  p->got = off + n;
  p->last_move_ms = hpl__now_ms();
  p->ops.got(p->arg, off, n);
  if (!p->finished && p->start + p->got == p->size) {
    /* a full-speed sample for the straggler baseline */
    uint64_t el = hpl__now_ms() - p->started_ms;
    p->s->last_pull_rate = 0;
    if (p->ops.monitor == 2 && p->got >= (4u << 20) && el > 0) {
      double rate = (double)p->got * 1000.0 / (double)el;
      p->s->rate_ewma = p->s->rate_ewma > 0 ? 0.7 * p->s->rate_ewma + 0.3 * rate : rate;
      p->s->last_pull_rate = rate; /* reported to the directory (reduce cost model) */
    }
    puller_end(p, 0, NULL, 1);
  }
}

static void pull_on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                          const uint8_t *payload, uint64_t plen) {
  (void)payload;
  st_puller *p = hpl__conn_data(c);
  if (p->finished) return;
  char detail[400];
  if (h->type != HPL__MSG_PULL_REP) {
    hpl__conn_fail(c, "unexpected message on a pull");
    return;
  }
  Hplpb__PullRep *r = (Hplpb__PullRep *)m;
  if (r->status != 0) {
    snprintf(detail, sizeof detail, "sender refused: %s", r->detail);
    if (plen) hpl__conn_fail(c, "error reply with payload");
    puller_end(p, r->status, detail, 1);
    return;
  }
  if (r->size != p->size || plen != p->size - p->start) {
    snprintf(detail, sizeof detail, "sender has '%s' as %llu bytes and sends %llu, expected %llu",
             p->key, (unsigned long long)r->size, (unsigned long long)plen,
             (unsigned long long)(p->size - p->start));
    hpl__conn_fail(c, detail);
    puller_end(p, HPL_EPROTO, detail, 1);
    return;
  }
  if (plen == 0) {
    puller_end(p, 0, NULL, 1);
    return;
  }
  hpl__sink sk = {.buf = pull_sink_buf, .got = pull_sink_got, .arg = p};
  hpl__conn_recv_payload(c, &sk);
}

static void pull_on_close(hpl__conn *c, int status) {
  st_puller *p = hpl__conn_data(c);
  p->c = NULL;
  if (p->finished) {
    puller_release(p);
    return;
  }
  char detail[128];
  snprintf(detail, sizeof detail, "stream from the sender broke (%s) after %llu bytes",
           hpl_strerror(status ? status : HPL_ECONN), (unsigned long long)p->got);
  puller_end(p, status ? status : HPL_ECONN, detail, 1);
}

static void pull_on_connect(uv_connect_t *req, int status) {
  st_puller *p = req->data;
  if (p->finished) return; /* cancelled: the handle is already closing */
  uv_tcp_t *t = p->tcp;
  p->tcp = NULL;
  if (status < 0) {
    char detail[128];
    snprintf(detail, sizeof detail, "cannot connect to the sender: %s", uv_strerror(status));
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    puller_end(p, HPL_ECONN, detail, 1);
    return;
  }
  uv_tcp_nodelay(t, 1);
  hpl__conn_opts o = {.lim = {.max_msg = 4096, .max_payload = 1ull << 56,
                             .max_type = HPL__MSG_MAX_},
                     .stream_payloads = 1,
                     .on_frame = pull_on_frame,
                     .on_close = pull_on_close,
                     .data = p,
                     .label = p->label};
  p->c = hpl__conn_new((uv_stream_t *)t, &o);
  if (!p->c) {
    puller_end(p, HPL_ENOMEM, "out of memory", 1);
    return;
  }
  Hplpb__PullReq r = HPLPB__PULL_REQ__INIT;
  r.id = p->key;
  r.offset = p->start;
  r.receiver = p->s->node_id;
  r.internal = p->internal;
  r.gen = p->ops.gen;
  hpl__conn_send(p->c, HPL__MSG_PULL, 1, &r.base, NULL, 0, 0, NULL, NULL);
}

/* The monitor, every MONITOR_TICK_MS: a stream that delivers nothing for
 * stall_timeout_ms has stalled; one from a complete sender that delivers
 * below straggler_ratio of this store's usual rate for straggler_ms is a
 * straggler. Either ends the pull with HPL_ETIMEDOUT; the owner asks for
 * another sender and keeps its bytes. */
static void pull_monitor(uv_timer_t *t) {
  st_puller *p = t->data;
  store *s = p->s;
  if (p->finished) return;
  uint64_t now = hpl__now_ms();
  char detail[200];
  if (p->paused) p->last_move_ms = now; /* our side has no room: not the sender's fault */
  if (s->cfg.stall_timeout_ms && now - p->last_move_ms >= s->cfg.stall_timeout_ms) {
    s->ctr.stalls++;
    snprintf(detail, sizeof detail, "stalled: no bytes from the sender for %llu ms",
             (unsigned long long)(now - p->last_move_ms));
    puller_end(p, HPL_ETIMEDOUT, detail, 1);
    return;
  }
  int k = p->nsamp % 32;
  p->samp_ms[k] = now;
  p->samp_got[k] = p->got;
  p->nsamp++;
  if (p->ops.monitor < 1 || s->cfg.straggler_ratio <= 0 || !s->cfg.straggler_ms ||
      s->rate_ewma <= 0 || p->paused)
    return;
  if (p->ops.monitor == 1 && (!p->ops.slow || now < p->slow_next_ms)) return;
  int back = (int)(s->cfg.straggler_ms / MONITOR_TICK_MS);
  if (back > 31) back = 31;
  if (p->nsamp <= back) return;
  int j = (p->nsamp - 1 - back) % 32;
  double secs = (double)(now - p->samp_ms[j]) / 1000.0;
  double rate = secs > 0 ? (double)(p->got - p->samp_got[j]) / secs : 0;
  uint64_t left = p->size - p->start - p->got;
  if (rate < s->cfg.straggler_ratio * s->rate_ewma && left > (1u << 20)) {
    if (p->ops.monitor == 1) {
      /* a partial sender may only be as slow as its own upstream: ask for
       * a complete copy, keep this stream meanwhile (and if there is none) */
      p->slow_next_ms = now + s->cfg.straggler_ms;
      p->ops.slow(p->arg);
      return;
    }
    s->ctr.stragglers++;
    snprintf(detail, sizeof detail, "straggler: %.1f MB/s for %.1f s, this node usually gets %.1f MB/s",
             rate / 1e6, secs, s->rate_ewma / 1e6);
    puller_end(p, HPL_ETIMEDOUT, detail, 1);
  }
}

st_puller *transfer_stream(store *s, const char *addr, int port, const char *key, int internal,
                           uint64_t offset, uint64_t size, const xfer_ops *ops, void *arg) {
  st_puller *p = calloc(1, sizeof *p);
  struct sockaddr_in sa;
  if (!p || uv_ip4_addr(addr, port, &sa) != 0 || strlen(key) >= sizeof p->key) {
    free(p);
    return NULL;
  }
  p->s = s;
  p->ops = *ops;
  p->arg = arg;
  p->start = offset;
  p->size = size;
  p->internal = internal;
  snprintf(p->key, sizeof p->key, "%s", key);
  snprintf(p->label, sizeof p->label, "pull<-%s:%d", addr, port);
  p->next = s->pullers;
  if (s->pullers) s->pullers->prev = p;
  s->pullers = p;
  uv_timer_init(s->loop, &p->stall);
  p->stall.data = p;
  p->started_ms = p->last_move_ms = hpl__now_ms();
  if (ops->monitor)
    uv_timer_start(&p->stall, pull_monitor, MONITOR_TICK_MS, MONITOR_TICK_MS);
  s->ctr.pulls_made++;
  LOG_DEBUG("pulling %s'%s' [%llu, %llu) from %s:%d", internal ? "stream " : "", key,
            (unsigned long long)offset, (unsigned long long)size, addr, port);
  p->tcp = malloc(sizeof *p->tcp);
  if (!p->tcp) {
    puller_end(p, HPL_ENOMEM, "out of memory", 0);
    return NULL;
  }
  uv_tcp_init(s->loop, p->tcp);
  p->creq.data = p;
  int rc = uv_tcp_connect(&p->creq, p->tcp, (struct sockaddr *)&sa, pull_on_connect);
  if (rc) {
    puller_end(p, HPL_ECONN, NULL, 0);
    return NULL;
  }
  return p;
}

void transfer_stream_cancel(st_puller *p) {
  if (p) puller_end(p, HPL_ECANCELED, NULL, 0);
}

void transfer_stream_resume(st_puller *p) {
  if (!p || p->finished) return;
  p->paused = 0;
  if (p->c) hpl__conn_resume(p->c);
}

void transfer_stream_paused(st_puller *p) {
  if (p) p->paused = 1;
}

/* ---- an object pulled into its pool buffer */

typedef struct obj_pull {
  store *s;
  st_obj *o;
  uint64_t sender;
  uint64_t start;
} obj_pull;

static uint8_t *obj_pull_buf(void *arg, uint64_t off, size_t *len) {
  obj_pull *w = arg;
  uint64_t at = w->start + off, room = w->o->size - at;
  *len = room > (1u << 30) ? (1u << 30) : (size_t)room;
  return w->o->data + at;
}

static void obj_pull_got(void *arg, uint64_t off, size_t n) {
  obj_pull *w = arg;
  store_obj_progress(w->s, w->o, w->start + off + n);
}

static void obj_pull_done(void *arg, int status, const char *detail) {
  obj_pull *w = arg;
  store *s = w->s;
  st_obj *o = w->o;
  uint64_t sender = w->sender;
  o->puller = NULL;
  free(w);
  store_pull_done(s, o, status, sender, detail);
  store_obj_unref(s, o);
}

/* The answer to a crawling partial sender's report: a complete copy to
 * move to (the directory has already moved our upstream there), or none. */
static void slow_reply(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                       const uint8_t *payload, uint64_t plen, void *arg) {
  (void)h, (void)payload, (void)plen;
  st_obj *o = arg;
  Hplpb__AcquireRep *r = (Hplpb__AcquireRep *)m;
  o->soft_asking = 0;
  if (r) status = r->status;
  if (status == 0 && r && !r->inline_ && r->sender_node) {
    if (!o->in_table) {
      /* deleted meanwhile: undo the assignment */
      dirlink_loc_remove(s, o->id);
    } else if (o->state == OBJ_PULLING && o->puller && r->gen == o->gen) {
      LOG_INFO("'%s': the partial copy we pull from crawls; moving to the complete copy on "
               "%016llx at %llu/%llu bytes",
               o->id, (unsigned long long)r->sender_node, (unsigned long long)o->progress,
               (unsigned long long)o->size);
      s->ctr.stragglers++;
      transfer_cancel(s, o);
      transfer_pull(s, o, r->sender_node, r->sender_addr, (int)r->sender_port,
                    r->sender_complete);
    }
    /* else our pull ended meanwhile: its completion note (sent after this
     * request) or the next fetch settles our upstream at the directory */
  }
  store_obj_unref(s, o);
}

static void obj_pull_slow(void *arg) {
  obj_pull *w = arg;
  st_obj *o = w->o;
  store *s = w->s;
  if (o->soft_asking) return;
  Hplpb__AcquireReq r;
  store_acquire_req(o, w->sender, 0, &r);
  r.only_complete = 1;
  store_obj_ref(o);
  o->soft_asking = 1;
  if (dirlink_request(s, HPL__MSG_ACQUIRE, &r.base, NULL, 0, 10000, slow_reply, o) != 0) {
    o->soft_asking = 0;
    store_obj_unref(s, o);
  }
}

void transfer_pull(store *s, st_obj *o, uint64_t sender, const char *addr, int port,
                   int sender_complete) {
  obj_pull *w = calloc(1, sizeof *w);
  if (!w) {
    store_pull_done(s, o, HPL_ENOMEM, sender, "out of memory");
    return;
  }
  w->s = s;
  w->o = o;
  w->sender = sender;
  w->start = o->progress;
  o->pull_sender = sender;
  if (o->progress) {
    s->ctr.pull_resumes++;
    s->ctr.bytes_kept_on_resume += o->progress;
  }
  xfer_ops ops = {.buf = obj_pull_buf, .got = obj_pull_got, .done = obj_pull_done,
                  .monitor = sender_complete ? 2 : 1, .gen = o->gen, .slow = obj_pull_slow};
  store_obj_ref(o);
  o->puller = transfer_stream(s, addr, port, o->id, 0, o->progress, o->size, &ops, w);
  if (!o->puller) {
    free(w);
    store_obj_unref(s, o);
    store_pull_done(s, o, HPL_ECONN, sender, "cannot start a pull (bad sender address?)");
  }
}

void transfer_cancel(store *s, st_obj *o) {
  st_puller *p = o->puller;
  if (!p) return;
  obj_pull *w = p->arg;
  o->puller = NULL;
  transfer_stream_cancel(p);
  free(w);
  store_obj_unref(s, o);
}

void transfer_stop(store *s) {
  if (!uv_is_closing((uv_handle_t *)&s->data_listener))
    uv_close((uv_handle_t *)&s->data_listener, NULL);
  for (st_sender *sd = s->senders; sd; sd = sd->next) hpl__conn_close(sd->c, 0);
  while (s->pullers) puller_end(s->pullers, HPL_ECANCELED, NULL, 0);
}
