/* puller.c - one byte stream pulled from a peer's data port (see puller.h).
 *
 * Connect (or take an idle connection to the sender, dconns.c), send PULL
 * from the offset wanted, check the reply's size, then receive the payload
 * straight into the object or the owner's memory (no intermediate copy); a
 * stream that ended whole leaves its connection to dconns.c. The monitor
 * that watches the stream (stalls, silence, stragglers) is pullmon.c's.
 */
#include "puller.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "dconns.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "trace.h"
#include "pullint.h"
#include "util.h"

static void pull_connect(hpl__puller *p, int may_reuse, int report);

/* The puller is freed once its timer and (if it was still connecting) its
 * socket have closed: libuv may run the connect callback while closing. */
static void puller_release(hpl__puller *p) {
  if (--p->closes > 0) return;
  free(p);
}

static void puller_handle_closed(uv_handle_t *h) {
  hpl__puller *p = h->data;
  if (h != (uv_handle_t *)&p->monitor) free(h);
  puller_release(p);
}

/* p's connection has the receive buffer every idle one has (dconns.h):
 * taken from them, or opened for a copy, or no copy window is set. */
static int sized_as_idle(const hpl__puller *p) {
  return p->reused || p->ops.windowed || !p->s->cfg.pull_window;
}

void hpl__puller_end(hpl__puller *p, int status, const char *detail, int report) {
  if (p->finished) return;
  p->finished = 1;
  hpl__trace("s.pulled", p->key);
  hpl__pullers *ps = p->s->pullers;
  DL_DELETE(ps->list, p);
  int freed = hpl__pullslot_leave(p);
  p->closes = 1;
  if (p->c && status == 0 && p->replied && sized_as_idle(p)) {
    /* whole, and sized as every idle one: kept for the next pull from the sender */
    hpl__dconns_park(p->s, &p->sa, p->c); /* takes it: our on_close is not called */
    p->c = NULL;
  } else if (p->c) { /* its on_close releases one count */
    p->closes++;
    hpl__conn_close(p->c, 0);
  }
  if (p->tcp) { /* still connecting */
    p->closes++;
    p->tcp->data = p;
    uv_close((uv_handle_t *)p->tcp, puller_handle_closed);
    p->tcp = NULL;
  }
  uv_timer_stop(&p->monitor);
  uv_close((uv_handle_t *)&p->monitor, puller_handle_closed);
  if (freed) hpl__pullslot_admit(p->s);
  if (report) p->ops.done(p->arg, status, detail);
}

/* ------------------------------------------------------------------ into an object
 *
 * A pull into an object (hpl__puller_start_into) receives straight into its
 * buffer, and here received bytes become the object's: its progress, which
 * the data port serves on and gets wait for. Bytes that have arrived are
 * counted here and nowhere else. */

static uint8_t *into_buf(hpl__puller *p, uint64_t at, size_t *len) {
  uint64_t room = p->into->size - at;
  *len = room > (1u << 30) ? (1u << 30) : (size_t)room;
  return p->into->data + at;
}

/* Bytes [at, at + n) of the stream are in the object. With digests, they
 * count only as far as whole units are verified; a unit that does not
 * match ends the pull (HPL_ECORRUPT: its owner reports the sender) and
 * its bytes never count. */
static int into_verify(hpl__puller *p, uint64_t have) {
  hpl__obj *o = p->into;
  int bad = 0;
  uint64_t unit = 0;
  uint64_t upto =
      p->start <= hpl__objdig_resume_at(o) ? hpl__objdig_verify(o, have, &bad, &unit) : 0;
  hpl__obj_progress(p->s, o, upto);
  if (!bad) return 0;
  char detail[400];
  uint64_t uoff, ulen;
  hpl__digest_unit_span(o->size, unit, &uoff, &ulen);
  if (uoff < p->start) { /* its first bytes came from an earlier sender */
    snprintf(detail, sizeof detail,
             "unit %llu of '%s', begun by an earlier sender, does not match its digest: pulled "
             "again", (unsigned long long)unit, o->id);
    HPL__LOG_WARN("%s", detail);
    hpl__puller_end(p, HPL_EPROTO, detail, 1);
    return -1;
  }
  p->s->ctr.corrupt_units++;
  snprintf(detail, sizeof detail,
           "unit %llu of '%s' (bytes %llu..%llu) from node %016llx does not match its digest",
           (unsigned long long)unit, o->id, (unsigned long long)uoff,
           (unsigned long long)(uoff + ulen), (unsigned long long)p->ops.peer);
  HPL__LOG_WARN("%s", detail);
  p->corrupt_unit = unit;
  hpl__puller_end(p, HPL_ECORRUPT, detail, 1);
  return -1;
}

static void into_arrived(hpl__puller *p, uint64_t at, size_t n) {
  if (p->into_progress && into_verify(p, at + n) != 0) return;
  if (p->ops.got) p->ops.got(p->arg, at, n);
}

/* The whole stream has arrived: it ends, unless some of it still waits
 * for its digests (then hpl__puller_digests_more ends it). */
static void stream_whole(hpl__puller *p) {
  if (p->into && p->into_progress && p->into->progress < p->size) {
    p->all_in = 1;
    return;
  }
  hpl__puller_sample_whole(p);
  hpl__puller_end(p, 0, NULL, 1);
}

void hpl__puller_digests_more(hpl__puller *p) {
  if (p->finished || !p->into || !p->into_progress) return;
  if (into_verify(p, p->start + p->got) != 0) return;
  if (p->all_in) stream_whole(p);
}

uint64_t hpl__puller_corrupt_unit(const hpl__puller *p) { return p->corrupt_unit; }

/* ------------------------------------------------------------------ the stream */

static uint8_t *sink_buf(hpl__conn *c, void *arg, uint64_t off, size_t *len) {
  (void)c;
  hpl__puller *p = arg;
  if (p->into) return into_buf(p, p->start + off, len);
  return p->ops.buf(p->arg, p->start + off, len);
}

static void sink_got(hpl__conn *c, void *arg, uint64_t off, size_t n) {
  (void)c;
  hpl__puller *p = arg;
  if (p->finished) return;
  p->s->ctr.data_bytes_received += n;
  p->got = off + n;
  p->last_move_ms = hpl__now_ms();
  if (p->into)
    into_arrived(p, p->start + off, n);
  else
    p->ops.got(p->arg, p->start + off, n);
  if (!p->finished && p->start + p->got == p->size) stream_whole(p);
}

static void on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                     const uint8_t *payload, uint64_t plen) {
  (void)payload;
  hpl__puller *p = hpl__conn_data(c);
  if (p->finished) return;
  char detail[400];
  if (h->type != HPL__MSG_PULL_REP || p->replied) {
    hpl__conn_fail(c, "unexpected message on a pull");
    return;
  }
  p->replied = 1;
  hpl__trace("s.pullrep", p->key);
  Hplpb__PullRep *r = (Hplpb__PullRep *)m;
  if (r->status != 0) {
    snprintf(detail, sizeof detail, "sender refused: %s", r->detail);
    if (plen) hpl__conn_fail(c, "error reply with payload");
    hpl__puller_end(p, r->status, detail, 1);
    return;
  }
  if (r->size != p->size || plen != p->size - p->start) {
    snprintf(detail, sizeof detail, "sender has '%s' as %llu bytes and sends %llu, expected %llu",
             p->key, (unsigned long long)r->size, (unsigned long long)plen,
             (unsigned long long)(p->size - p->start));
    hpl__conn_fail(c, detail);
    hpl__puller_end(p, HPL_EPROTO, detail, 1);
    return;
  }
  if (plen == 0) {
    if (p->into && p->into_progress && p->into->progress < p->size)
      p->all_in = 1; /* all held already: only digests are awaited */
    else
      hpl__puller_end(p, 0, NULL, 1);
    return;
  }
  hpl__sink sk = {.buf = sink_buf, .got = sink_got, .arg = p};
  hpl__conn_recv_payload(c, &sk);
}

static void on_close(hpl__conn *c, int status) {
  hpl__puller *p = hpl__conn_data(c);
  p->c = NULL;
  if (p->finished) {
    puller_release(p);
    return;
  }
  if (p->all_in) return; /* every byte is here: only digests are awaited */
  if (p->reused && !p->replied) { /* (the new one asked on is not reused: once only) */
    /* the sender let the idle connection go as we took it (it stopped,
     * restarted or dropped it): ask once more, on a new one */
    HPL__LOG_DEBUG("%s '%s': idle connection closed before the reply (%s): connecting anew",
                   p->label, p->key, hpl_strerror(status ? status : HPL_ECONN));
    p->s->ctr.data_conns_retried++;
    pull_connect(p, 0, 1);
    return;
  }
  char detail[128];
  snprintf(detail, sizeof detail, "stream from the sender broke (%s) after %llu bytes",
           hpl_strerror(status ? status : HPL_ECONN), (unsigned long long)p->got);
  hpl__puller_end(p, status ? status : HPL_ECONN, detail, 1);
}

/* The PULL, on p->c (new, or an idle one taken: the sender's close of that
 * one before the reply is the retry's, on_close). */
static void send_pull(hpl__puller *p) {
  Hplpb__PullReq r = HPLPB__PULL_REQ__INIT;
  r.id = p->key;
  r.offset = p->start;
  r.receiver = p->s->node_id;
  r.internal = p->internal;
  r.gen = p->ops.gen;
  int rc = hpl__conn_send(p->c, HPL__MSG_PULL, 1, &r.base, NULL, 0, 0, NULL, NULL);
  if (rc != 0 && !hpl__conn_closing(p->c)) hpl__conn_close(p->c, rc);
}

static void on_connect(uv_connect_t *req, int status) {
  hpl__puller *p = req->data;
  if (p->finished) return; /* cancelled: the handle is already closing */
  uv_tcp_t *t = p->tcp;
  p->tcp = NULL;
  if (status < 0) {
    char detail[128];
    snprintf(detail, sizeof detail, "cannot connect to the sender: %s", uv_strerror(status));
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    hpl__puller_end(p, HPL_ECONN, detail, 1);
    return;
  }
  uv_tcp_nodelay(t, 1);
  hpl__conn_mark_control(t);
  p->s->ctr.data_conns_opened++;
  hpl__conn_opts o = {.lim = {.max_msg = 4096, .max_payload = 1ull << 56,
                              .max_type = HPL__MSG_MAX_},
                      .stream_payloads = 1,
                      .on_frame = on_frame,
                      .on_close = on_close,
                      .data = p,
                      .label = p->label,
                      .auth = &p->s->cfg.auth,
                      .auth_role = HPL__ROLE_DATA,
                      .auth_failures = &p->s->ctr.auth_failures};
  p->c = hpl__conn_new((uv_stream_t *)t, &o);
  if (!p->c) {
    hpl__puller_end(p, HPL_ENOMEM, "out of memory", 1);
    return;
  }
  send_pull(p);
}

/* Ask on an idle connection to the sender if `may_reuse` (not when asking
 * again after one closed), the owner allows it (ops.reuse) and there is
 * one; else connect. */
static void pull_connect(hpl__puller *p, int may_reuse, int report) {
  hpl__conn *c = may_reuse && p->ops.reuse ? hpl__dconns_take(p->s, &p->sa) : NULL;
  p->reused = c != NULL;
  if (c) {
    hpl__conn_rebind(c, on_frame, on_close, p);
    p->c = c;
    p->s->ctr.data_conns_reused++;
    HPL__LOG_DEBUG("%s '%s': on an idle connection", p->label, p->key);
    send_pull(p);
    return;
  }
  p->tcp = malloc(sizeof *p->tcp);
  if (!p->tcp) {
    hpl__puller_end(p, HPL_ENOMEM, "out of memory", report);
    return;
  }
  if (hpl__dconns_open(p->s, p->tcp, p->ops.windowed ? p->s->cfg.pull_window : 0) != 0) {
    free(p->tcp);
    p->tcp = NULL;
    hpl__puller_end(p, HPL_ESYS, "cannot make a socket", report);
    return;
  }
  p->creq.data = p;
  if (uv_tcp_connect(&p->creq, p->tcp, (struct sockaddr *)&p->sa, on_connect) != 0)
    hpl__puller_end(p, HPL_ECONN, "cannot connect to the sender", report);
}

/* Connect, or take an idle connection, and ask (the pull holds its slot,
 * if it needs one). A failure ends the pull, reported to its owner if
 * `report` (a queued pull's owner has it already; one starting now hears
 * through pull_start's NULL). */
void hpl__puller_begin(hpl__puller *p, int report) {
  hpl__trace("s.pullgo", p->key);
  p->started_ms = p->last_move_ms = p->last_tick_ms = hpl__now_ms();
  if (p->ops.monitor) hpl__puller_monitor_start(p);
  HPL__LOG_DEBUG("pulling %s'%s' [%llu, %llu) (%s)", p->internal ? "stream " : "", p->key,
                 (unsigned long long)p->start, (unsigned long long)p->size, p->label);
  pull_connect(p, 1, report);
}

static hpl__puller *pull_start(hpl__store *s, const char *addr, int port, const char *key,
                               int internal, uint64_t offset, uint64_t size,
                               const hpl__puller_ops *ops, void *arg, hpl__obj *into,
                               int into_progress) {
  hpl__puller *p = calloc(1, sizeof *p);
  if (!p || uv_ip4_addr(addr, port, &p->sa) != 0 || strlen(key) >= sizeof p->key) {
    free(p);
    return NULL;
  }
  p->s = s;
  p->into = into;
  p->into_progress = into_progress;
  p->ops = *ops;
  p->arg = arg;
  p->start = offset;
  p->size = size;
  p->internal = internal;
  snprintf(p->key, sizeof p->key, "%s", key);
  snprintf(p->label, sizeof p->label, "pull<-%s:%d", addr, port);
  DL_APPEND(s->pullers->list, p);
  uv_timer_init(s->loop, &p->monitor);
  p->monitor.data = p;
  s->ctr.pulls_made++;
  if (hpl__pullslot_enter(p)) return p; /* queued: begins when a slot is free */
  hpl__puller_begin(p, 0);
  return p->finished ? NULL : p; /* (freed once its handles closed, not before) */
}

hpl__puller *hpl__puller_start(hpl__store *s, const char *addr, int port, const char *key,
                               int internal, uint64_t offset, uint64_t size,
                               const hpl__puller_ops *ops, void *arg) {
  return pull_start(s, addr, port, key, internal, offset, size, ops, arg, NULL, 0);
}

hpl__puller *hpl__puller_start_into(hpl__store *s, const char *addr, int port, const char *key,
                                    int internal, hpl__obj *o, uint64_t offset, int progress,
                                    const hpl__puller_ops *ops, void *arg) {
  return pull_start(s, addr, port, key, internal, offset, o->size, ops, arg, o, progress);
}

void hpl__puller_cancel(hpl__puller *p) {
  if (p) hpl__puller_end(p, HPL_ECANCELED, NULL, 0);
}

void hpl__puller_resume(hpl__puller *p) {
  if (!p || p->finished) return;
  p->paused = 0;
  if (p->c) hpl__conn_resume(p->c);
}

void hpl__puller_paused(hpl__puller *p) {
  if (p) p->paused = 1;
}

int hpl__puller_init(hpl__store *s) {
  s->pullers = calloc(1, sizeof *s->pullers);
  if (!s->pullers) return HPL_ENOMEM;
  hpl__pullslot_init(s);
  return hpl__dconns_init(s);
}

void hpl__puller_on_quiet(hpl__store *s, int (*fn)(hpl__store *s, uint64_t peer)) {
  s->pullers->quiet = fn;
}

void hpl__puller_free(hpl__store *s) {
  hpl__dconns_free(s);
  free(s->pullers);
  s->pullers = NULL;
}

void hpl__puller_stop_all(hpl__store *s) {
  hpl__pullers *ps = s->pullers;
  if (ps) hpl__pullslot_stop(s); /* (first: the ends below admit nothing more) */
  while (ps && ps->list) hpl__puller_end(ps->list, HPL_ECANCELED, NULL, 0);
  hpl__dconns_close_all(s);
}
