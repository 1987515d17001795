/* dataport.c - serving streams on the data port (see dataport.h).
 *
 * A connection carries one PULL at a time. Its sender writes chunks
 * straight from the pool (dpsend.c) and, when it has caught up with a
 * partial copy, waits on the object's watchers (no polling) until more
 * bytes land. A PULL for a
 * reduce stream that does not exist yet is parked until it does (the
 * directory may tell the puller before it tells us).
 */
#include "dataport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <utlist.h>

#include "dpint.h"
#include "faults.h"
#include "hoplite.h"
#include "log.h"
#include "rddig.h"
#include "trace.h"
#include "util.h"
#include "uvconn.h"

/* With --link-rate, streams leave at most this many times the link's rate.
 * TCP's goodput is 95.6 % of the rate at MTU 1500, so pacing above the
 * rate never holds a stream below what the link carries; what it bounds
 * is the socket's share of the egress queue, which the kernel otherwise
 * sizes from TCP's own rate estimate (cwnd over an RTT that the queue
 * itself inflates). Factors of 1.12 to 1.44 measured alike. */
#define PACE_FACTOR 1.25
/* A PULL of a reduce stream that does not exist yet waits this long at
 * most (the directory tells both sides within milliseconds). */
#define PARK_TIMEOUT_MS 10000

/* The module's context (s->dataport). */
typedef struct hpl__dataport {
  uv_tcp_t listener;
  int bound;                   /* listening */
  struct hpl__sender *senders; /* every connection (utlist) */
  uint32_t nsenders;           /* ...and their count (hpl__dataport_conns) */
  uint32_t serving;            /* senders with an object (sd->obj set): check_idle's
                                  count, kept so that a close costs no walk */
  void (*idle)(hpl__store *s); /* a stream ended and none is left (may be NULL) */
  void (*corrupt)(hpl__store *s, hpl__obj *o, uint64_t unit); /* hpl__dataport_on_corrupt */
} hpl__dataport;

void hpl__dataport_on_corrupt(hpl__store *s,
                              void (*fn)(hpl__store *s, hpl__obj *o, uint64_t unit)) {
  s->dataport->corrupt = fn;
}

void hpl__dataport_corrupt(hpl__store *s, hpl__obj *o, uint64_t unit) {
  if (s->dataport && s->dataport->corrupt) s->dataport->corrupt(s, o, unit);
}

int hpl__dataport_port(hpl__store *s) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (!s->dataport || !s->dataport->bound ||
      uv_tcp_getsockname(&s->dataport->listener, (struct sockaddr *)&ss, &len) != 0)
    return -1;
  return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

size_t hpl__dataport_conns(const hpl__store *s) {
  return s->dataport ? s->dataport->nsenders : 0;
}

int hpl__dataport_active(hpl__store *s) {
  int n = 0;
  hpl__sender *sd;
  if (!s->dataport) return 0;
  DL_FOREACH(s->dataport->senders, sd) if (sd->obj && !hpl__conn_closing(sd->c)) n++;
  return n;
}

/* No stream left: tell the drain (a closing sender counts until its close
 * finishes it, which checks again). O(1): 8000 strangers' connections
 * cut one after another cost a walk of every sender each before. */
static void check_idle(hpl__store *s) {
  if (s->dataport->idle && s->dataport->serving == 0) s->dataport->idle(s);
}


static void sender_finish(hpl__sender *sd) {
  hpl__obj *o = sd->obj;
  if (!o) return;
  hpl__obj_unwatch(o, &sd->watch);
  sd->obj = NULL;
  sd->s->dataport->serving--;
  hpl__obj_unref(sd->s, o);
}

void hpl__dataport_stream_end(hpl__sender *sd) {
  sender_finish(sd);
  check_idle(sd->s);
}

static hpl__sender *sender_of(hpl__watch *w) {
  return (hpl__sender *)((char *)w - offsetof(hpl__sender, watch));
}

static void sender_watch_fn(hpl__watch *w) { hpl__dataport_pump(sender_of(w)); }

static void pull_reply_err(hpl__sender *sd, int status, const char *detail) {
  Hplpb__PullRep r = HPLPB__PULL_REP__INIT;
  r.status = status;
  r.detail = (char *)detail;
  hpl__conn_send(sd->c, HPL__MSG_PULL_REP, sd->req_id, &r.base, NULL, 0, 0, NULL, NULL);
}

/* Start streaming once the object has a buffer (or a spill file). */
static void sender_start(hpl__sender *sd) {
  hpl__obj *o = sd->obj;
  char detail[320];
  int from_file = o->state == HPL__OBJ_SPILLED && !sd->fs && hpl__dataport_file_start(sd, o) == 0;
  if (!o->data && !from_file) {
    if (!o->in_table) {
      snprintf(detail, sizeof detail, "object '%s' is gone from this node", o->id);
      pull_reply_err(sd, HPL_ENOTFOUND, detail);
      sender_finish(sd);
      return;
    }
    hpl__obj_watch(o, &sd->watch); /* parked until the buffer exists */
    hpl__obj_want(sd->s, o); /* spilled: its bytes are read back */
    return;
  }
  if (sd->offset > o->size) {
    snprintf(detail, sizeof detail, "offset %llu beyond the end of '%s' (%llu bytes)",
             (unsigned long long)sd->offset, o->id, (unsigned long long)o->size);
    pull_reply_err(sd, HPL_EINVAL, detail);
    sender_finish(sd);
    return;
  }
  if (sd->offset > 0 && sd->gen != o->gen && !from_file) {
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
  sd->faulty = hpl__faults_apply(&sd->s->cfg.faults, o->id, sd->peer);
  sd->head_due = 1; /* with the first chunk when it can go now (dpsend.c) */
  if (sd->fs) {
    hpl__dataport_send_head(sd);
    hpl__dataport_file_pump(sd);
    return;
  }
  hpl__dataport_pump(sd);
}

static void sender_parked_fn(hpl__watch *w) { sender_start(sender_of(w)); }

/* A parked PULL whose stream never came. */
static void park_expired(uv_timer_t *t) {
  hpl__sender *sd = t->data;
  if (!sd->parked) return;
  char detail[400];
  snprintf(detail, sizeof detail, "no reduce stream '%s' here within %d ms", sd->parked,
           PARK_TIMEOUT_MS);
  free(sd->parked);
  sd->parked = NULL;
  pull_reply_err(sd, HPL_ENOTFOUND, detail);
}

/* A digest request (PullReq.digests; sd->offset is the first unit
 * wanted): answered once a digest from there is known (rddig.c), then the
 * connection takes the next PULL. */
static void digest_pump(hpl__sender *sd) {
  Hplpb__PullRep r = HPLPB__PULL_REP__INIT;
  char detail[320];
  int rc = hpl__rddig_answer(sd->obj, sd->offset, &r, detail, sizeof detail);
  if (rc == 0) {
    hpl__obj_watch(sd->obj, &sd->watch);
    return;
  }
  if (rc < 0)
    pull_reply_err(sd, rc, detail);
  else
    hpl__conn_send(sd->c, HPL__MSG_PULL_REP, sd->req_id, &r.base, NULL, 0, 0, NULL, NULL);
  sender_finish(sd);
}

static void digest_watch_fn(hpl__watch *w) { digest_pump(sender_of(w)); }

/* Begin serving `o` (referenced here) on this connection. A stream's
 * source hears where the pull starts first (it may make its bytes again
 * from there, dropping the other pulls of it: not this one yet). */
static void sender_serve(hpl__sender *sd, hpl__obj *o) {
  sd->s->dataport->serving++; /* (sender_finish made sd->obj NULL before) */
  if (sd->digests) {
    sd->obj = o;
    hpl__obj_ref(sd->s, o);
    sd->watch.fn = digest_watch_fn;
    digest_pump(sd);
    return;
  }
  if (o->source && o->source->pulled) o->source->pulled(o->source, o, sd->offset);
  sd->obj = o;
  hpl__obj_ref(sd->s, o);
  sd->watch.fn = sender_parked_fn;
  sender_start(sd);
}

static void on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                     const uint8_t *payload, uint64_t plen) {
  (void)payload, (void)plen;
  hpl__sender *sd = hpl__conn_data(c);
  if (h->type != HPL__MSG_PULL) {
    hpl__conn_fail(c, "only PULL is accepted on the data port");
    return;
  }
  if (sd->obj) {
    hpl__conn_fail(c, "PULL while a stream is in progress");
    return;
  }
  Hplpb__PullReq *p = (Hplpb__PullReq *)m;
  hpl__trace("s.serve", p->id);
  if (hpl__faults_cut_reused(&sd->s->cfg.faults, p->id, p->receiver, sd->pulls++)) {
    hpl__conn_close(c, HPL_ECONN);
    return;
  }
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
  sd->offset = p->offset;
  sd->digests = p->digests;
  if (sd->digests) {
    /* a digest stream's few bytes go ahead of this host's bulk bytes, as
     * control traffic does: a reduce's parent combines a unit only once its
     * digest is in, and queued behind the units that follow it the digest
     * comes late by the depth of the host's queue, at every hop */
    uv_stream_t *st = hpl__conn_stream(c);
    if (st->type == UV_TCP) hpl__conn_mark_control((uv_tcp_t *)st);
  }
  hpl__obj *o = p->internal ? hpl__obj_find_internal(sd->s, p->id) : hpl__obj_find(sd->s, p->id);
  if (!o && p->internal) {
    /* the directory told our peer about this stream before it told us:
     * wait until the stream exists (or its reduce ends) */
    if (!(sd->parked = strdup(p->id)) || !hpl__dataport_timer(sd)) {
      hpl__conn_close(c, HPL_ENOMEM);
      return;
    }
    uv_timer_start(sd->timer, park_expired, PARK_TIMEOUT_MS, 0);
    return;
  }
  if (!o) {
    char detail[320];
    snprintf(detail, sizeof detail, "object '%s' is not on this node", p->id);
    pull_reply_err(sd, HPL_ENOTFOUND, detail);
    return;
  }
  sender_serve(sd, o);
}

static void on_close(hpl__conn *c, int status) {
  hpl__sender *sd = hpl__conn_data(c);
  hpl__store *s = sd->s;
  if (sd->obj && sd->pos < sd->end)
    HPL__LOG_DEBUG("stream of '%s' to %016llx ended at %llu of %llu bytes (%s)", sd->obj->id,
                   (unsigned long long)sd->peer, (unsigned long long)sd->pos,
                   (unsigned long long)sd->end, hpl_strerror(status));
  hpl__dataport_file_detach(sd);
  sender_finish(sd);
  free(sd->parked);
  if (sd->timer) {
    uv_timer_stop(sd->timer);
    uv_close((uv_handle_t *)sd->timer, (uv_close_cb)free);
  }
  DL_DELETE(s->dataport->senders, sd);
  s->dataport->nsenders--;
  free(sd);
  check_idle(s);
}

static void on_accept(uv_stream_t *server, int status) {
  hpl__store *s = server->data;
  if (status < 0) return;
  uv_stream_t *t = hpl__conn_accept(server, NULL, 0);
  if (t) hpl__dataport_serve(s, t);
}

/* --link-rate: pace the streams this connection will carry. A socket the
 * kernel will not pace sends unpaced (counted, and logged once). */
static void pace(hpl__store *s, uv_stream_t *t) {
  if (!s->cfg.link_rate) return;
  uint64_t bytes_per_s = (uint64_t)((double)s->cfg.link_rate / 8 * PACE_FACTOR);
  uv_os_fd_t fd;
  int rc = uv_fileno((uv_handle_t *)t, &fd);
  if (rc == 0 &&
      setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &bytes_per_s, sizeof bytes_per_s) == 0) {
    s->ctr.paced_conns++;
    return;
  }
  if (s->ctr.pace_failures++ == 0)
    HPL__LOG_WARN("data port: cannot pace streams to --link-rate: %s",
                  rc ? uv_strerror(rc) : strerror(errno));
}

void hpl__dataport_serve(hpl__store *s, uv_stream_t *t) {
  hpl__dataport *dp = s->dataport;
  hpl__sender *sd = hpl__conn_admit(t, dp->nsenders, s->cfg.max_conns, &s->ctr.conns_refused,
                                    "data port", sizeof *sd);
  if (!sd) return; /* full (taken and closed at once), or no memory */
  sd->s = s;
  pace(s, t);
  hpl__conn_opts o = {.lim = {.max_msg = 4096, .max_payload = 0, .max_type = HPL__MSG_MAX_},
                      .on_frame = on_frame,
                      .on_close = on_close,
                      .data = sd,
                      .label = "data-in",
                      .auth = &s->cfg.auth,
                      .auth_roles = 1u << HPL__ROLE_DATA,
                      .auth_failures = &s->ctr.auth_failures,
                      .out_max = (size_t)s->cfg.out_max,
                      .out_stall_ms = s->cfg.out_stall_ms};
  DL_APPEND(dp->senders, sd);
  dp->nsenders++;
  sd->c = hpl__conn_new(t, &o);
  if (!sd->c) {
    DL_DELETE(dp->senders, sd);
    dp->nsenders--;
    free(sd);
  }
}

void hpl__dataport_drop(hpl__store *s, hpl__obj *o) {
  hpl__sender *sd;
  DL_FOREACH(s->dataport->senders, sd) if (sd->obj == o) hpl__conn_close(sd->c, HPL_ECANCELED);
}

void hpl__dataport_restart(hpl__store *s, hpl__obj *o, uint32_t gen) {
  HPL__LOG_INFO("'%s': restarting from byte 0 (generation %u -> %u)", o->id, o->gen, gen);
  hpl__dataport_drop(s, o);
  o->progress = 0;
  o->gen = gen;
}

int hpl__dataport_pull_offset(hpl__store *s, const hpl__obj *o, uint64_t *offset) {
  int found = 0;
  hpl__sender *sd;
  DL_FOREACH(s->dataport->senders, sd) {
    if (sd->obj != o || (found && sd->offset >= *offset)) continue;
    *offset = sd->offset;
    found = 1;
  }
  return found;
}

void hpl__dataport_stream_ready(hpl__store *s, const char *key) {
  hpl__sender *sd;
  DL_FOREACH(s->dataport->senders, sd) {
    if (!sd->parked || strcmp(sd->parked, key) != 0) continue;
    hpl__obj *o = hpl__obj_find_internal(s, key);
    if (!o) continue;
    free(sd->parked);
    sd->parked = NULL;
    uv_timer_stop(sd->timer);
    sender_serve(sd, o);
  }
}

void hpl__dataport_unpark(hpl__store *s, int (*match)(const char *key, void *arg), void *arg,
                          int status, const char *detail) {
  hpl__sender *sd;
  DL_FOREACH(s->dataport->senders, sd) {
    if (!sd->parked || !match(sd->parked, arg)) continue;
    free(sd->parked);
    sd->parked = NULL;
    uv_timer_stop(sd->timer);
    pull_reply_err(sd, status, detail);
  }
}

int hpl__dataport_start(hpl__store *s, void (*idle)(hpl__store *s)) {
  struct sockaddr_in addr;
  hpl__dataport *dp = s->dataport = calloc(1, sizeof *s->dataport);
  if (!dp) return HPL_ENOMEM;
  dp->idle = idle;
  int rc = uv_ip4_addr(s->cfg.data_host, s->cfg.data_port, &addr);
  if (rc) {
    HPL__LOG_ERROR("bad data address %s: %s", s->cfg.data_host, uv_strerror(rc));
    return HPL_EINVAL;
  }
  uv_tcp_init(s->loop, &dp->listener);
  dp->listener.data = s;
  if ((rc = uv_tcp_bind(&dp->listener, (struct sockaddr *)&addr, 0)) ||
      (rc = hpl__conn_listen((uv_stream_t *)&dp->listener, 512, on_accept))) {
    HPL__LOG_ERROR("cannot listen on %s:%d: %s", s->cfg.data_host, s->cfg.data_port,
                   uv_strerror(rc));
    return HPL_ESYS;
  }
  dp->bound = 1;
  return 0;
}

void hpl__dataport_stop(hpl__store *s) {
  hpl__dataport *dp = s->dataport;
  if (!dp) return;
  if (!uv_is_closing((uv_handle_t *)&dp->listener)) {
    hpl__conn_unlisten((uv_stream_t *)&dp->listener);
    uv_close((uv_handle_t *)&dp->listener, NULL);
  }
  hpl__sender *sd;
  DL_FOREACH(dp->senders, sd) hpl__conn_close(sd->c, 0);
}

void hpl__dataport_free(hpl__store *s) {
  free(s->dataport);
  s->dataport = NULL;
}
