/* dirlink.c - the store's requests and notes to the directory, and the
 * directory's own messages (see dirlink.h). The connection's life is
 * dlconn.c's, the re-report of what we hold dlheld.c's.
 *
 * Requests wait in `pending` (by request id) for their reply. While the
 * link is down they wait in the same table and are (re)sent after the store
 * has registered again, so a directory restart is invisible to them except
 * for the delay.
 */
#include "dirlink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dlint.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "util.h"

void hpl__dirlink_ignore_reply(hpl__store *s, const hpl__dl_reply *r, void *arg) {
  (void)s, (void)r, (void)arg;
}

int hpl__dirlink_ready(hpl__store *s) { return s->dl && s->dl->state == HPL__DL_READY; }

static const hpl__dl_caps default_caps = {.inline_max = HPL__DEFAULT_INLINE_MAX, .max_senders = 1};

const hpl__dl_caps *hpl__dirlink_caps(const hpl__store *s) {
  return s->dl ? &s->dl->caps : &default_caps;
}

int hpl__dirlink_peer(hpl__store *s, char *addr, size_t alen, int *port) {
  if (!hpl__dirlink_ready(s) || !s->dl->peer_port || strlen(s->dl->peer_addr) >= alen) return -1;
  strcpy(addr, s->dl->peer_addr);
  *port = s->dl->peer_port;
  return 0;
}

uint64_t hpl__dirlink_term(const hpl__store *s) { return s->dl ? s->dl->term : 0; }

static void req_free(hpl__dl_req *r) {
  free(r->frame);
  r->frame = NULL;
  hpl__otimer_free(&r->timer, r);
}

/* The request ends: with the reply frame (h, m), or with a local error
 * (h NULL). A reply is handed over only if it is of the request's reply
 * type; a plain Reply is an error (or a bare success where a plain Reply is
 * what the request gets); anything else is a protocol error. */
static void req_finish(hpl__dirlink *dl, hpl__dl_req *r, int status, const hpl__frame_hdr *h,
                       ProtobufCMessage *m, const uint8_t *payload, uint64_t plen) {
  HASH_DEL(dl->pending, r);
  hpl__dl_reply rep = {.status = status, .detail = ""};
  if (h) {
    unsigned want = hpl__msg_reply_type(r->type);
    if (h->type == want || h->type == HPL__MSG_REPLY) {
      rep.status = hpl__msg_status(m, &rep.detail);
      if (rep.status == 0 && h->type != want) rep.status = HPL_EPROTO; /* a bare "ok" */
    } else {
      rep.status = HPL_EPROTO;
    }
    if (rep.status == HPL_EPROTO && !*rep.detail) {
      HPL__LOG_WARN("the directory answered %s with %s", hpl__msg_name(r->type),
                    hpl__msg_name(h->type));
      rep.detail = "the directory answered with a message of the wrong type";
    }
    if (rep.status == 0) {
      rep.m = m;
      rep.payload = payload;
      rep.plen = plen;
    }
  }
  if (r->cb) r->cb(dl->s, &rep, r->arg);
  req_free(r);
}

static void req_timeout(void *arg) {
  hpl__dl_req *r = arg;
  HPL__LOG_DEBUG("directory request %s timed out", hpl__msg_name(r->type));
  req_finish(r->dl, r, HPL_ETIMEDOUT, NULL, NULL, NULL, 0);
}

/* Copied and tagged by the connection (a session's tags differ per
 * connection); not sent: stays unsent, retried on the next connection. */
static void req_send(hpl__dirlink *dl, hpl__dl_req *r) {
  if (hpl__conn_send_packed(dl->c, r->frame, r->flen) == 0) r->sent = 1;
}

static int cmp_seq(const void *a, const void *b) {
  const hpl__dl_req *x = *(hpl__dl_req *const *)a, *y = *(hpl__dl_req *const *)b;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void hpl__dirlink_flush(hpl__dirlink *dl) {
  size_t n = HASH_COUNT(dl->pending), k = 0;
  if (!n) return;
  hpl__dl_req **v = malloc(n * sizeof *v);
  if (!v) return;
  hpl__dl_req *r, *tmp;
  HASH_ITER(hh, dl->pending, r, tmp) if (!r->sent) v[k++] = r;
  qsort(v, k, sizeof *v, cmp_seq);
  for (size_t i = 0; i < k; i++) req_send(dl, v[i]);
  free(v);
}

int hpl__dirlink_request(hpl__store *s, unsigned type, const ProtobufCMessage *m,
                         const void *payload, uint64_t plen, int64_t timeout_ms,
                         hpl__dl_reply_cb cb, void *arg) {
  hpl__dirlink *dl = s->dl;
  hpl__dl_req *r = calloc(1, sizeof *r);
  if (!r) return HPL_ENOMEM;
  r->id = ++dl->next_id;
  r->type = type;
  r->cb = cb;
  r->arg = arg;
  r->dl = dl;
  r->seq = ++dl->seq;
  size_t hlen;
  uint8_t *hdr = hpl__msg_frame(type, r->id, m, plen, &hlen);
  r->frame = hdr ? realloc(hdr, hlen + plen + 1) : NULL;
  if (!r->frame) {
    free(hdr);
    free(r);
    return HPL_ENOMEM;
  }
  if (plen) memcpy(r->frame + hlen, payload, plen);
  r->flen = hlen + plen;
  HASH_ADD(hh, dl->pending, id, sizeof r->id, r);
  if (timeout_ms >= 0) hpl__otimer_start(s->loop, &r->timer, r, (uint64_t)timeout_ms, req_timeout);
  if (dl->state == HPL__DL_READY) req_send(dl, r);
  return 0;
}

void hpl__dirlink_note(hpl__store *s, unsigned type, const ProtobufCMessage *m) {
  hpl__dirlink *dl = s->dl;
  if (dl->state != HPL__DL_READY) return;
  hpl__conn_send(dl->c, type, 0, m, NULL, 0, 0, NULL, NULL);
}

int hpl__dirlink_quiet(hpl__store *s, uint64_t peer) {
  if (!s->dl->caps.quiet_notes) return 0;
  Hplpb__Heartbeat q = HPLPB__HEARTBEAT__INIT;
  q.node_id = peer;
  s->ctr.quiet_notes++;
  hpl__dirlink_note(s, HPL__MSG_QUIET, &q.base);
  return 1;
}

/* A removal is a request, kept while the link is down and sent after the
 * store registers again: a reconnect keeps our copies at the directory, so
 * one it did not hear about would stay listed. */
static void loc_note_kept(hpl__store *s, const char *id, unsigned kind, int corrupt,
                          uint64_t unit) {
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = (char *)id;
  n.kind = kind;
  n.corrupt = corrupt != 0;
  n.corrupt_unit = unit;
  if (hpl__dirlink_request(s, HPL__MSG_LOC_NOTE, &n.base, NULL, 0, -1, hpl__dirlink_ignore_reply,
                           NULL) != 0)
    hpl__dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
}

void hpl__dirlink_loc_remove(hpl__store *s, const char *id) {
  loc_note_kept(s, id, HPL__LOC_REMOVE, 0, 0);
}

void hpl__dirlink_loc_corrupt(hpl__store *s, const char *id, uint64_t unit) {
  loc_note_kept(s, id, HPL__LOC_REMOVE, 1, unit);
}

void hpl__dirlink_loc_retract(hpl__store *s, const char *id) {
  loc_note_kept(s, id, HPL__LOC_RETRACT, 0, 0);
}

void hpl__dirlink_loc_complete(hpl__store *s, const char *id, uint64_t rate) {
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = (char *)id;
  n.kind = HPL__LOC_COMPLETE;
  n.rate = rate;
  hpl__dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
}

void hpl__dirlink_digests(hpl__store *s, hpl__obj *o) {
  hpl__objdig *d = o->dig;
  if (!d || !o->advertised || d->known <= d->sent) return;
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = o->id;
  n.kind = HPL__LOC_DIGESTS;
  n.digest_algo = d->algo;
  n.digest_first = d->sent;
  n.digests.data = d->list + d->sent * HPL__DIGEST_LEN;
  n.digests.len = (size_t)((d->known - d->sent) * HPL__DIGEST_LEN);
  hpl__dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
  d->sent = d->known;
}

static void loc_added(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  (void)s;
  char *id = arg;
  if (rep->status)
    HPL__LOG_WARN("the directory did not list this node's copy of '%s': %s", id ? id : "?",
                  *rep->detail ? rep->detail : hpl_strerror(rep->status));
  free(id);
}

void hpl__dirlink_loc_add(hpl__store *s, const char *id, uint64_t size, int complete, int origin) {
  Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
  a.id = (char *)id;
  a.size = size;
  a.complete = complete;
  a.origin = origin;
  char *copy = strdup(id);
  if (hpl__dirlink_request(s, HPL__MSG_LOC_ADD, &a.base, NULL, 0, -1, loc_added, copy) != 0)
    free(copy);
}

void hpl__dirlink_loc_made(hpl__store *s, hpl__obj *o, int algo) {
  Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
  a.id = o->id;
  a.size = o->size;
  a.origin = 1;
  a.digest_algo = (uint32_t)algo;
  char *copy = strdup(o->id);
  if (hpl__dirlink_request(s, HPL__MSG_LOC_ADD, &a.base, NULL, 0, -1, loc_added, copy) != 0)
    free(copy);
  o->advertised = 1;
  if (!o->dig || (uint32_t)o->dig->algo != a.digest_algo) return;
  o->dig->sent = 0; /* a directory that restarted knows none of them */
  hpl__dirlink_digests(s, o);
}

void hpl__dirlink_made_complete(hpl__store *s, hpl__obj *o) {
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = o->id;
  n.kind = HPL__LOC_COMPLETE;
  hpl__objdig_to_wire(o, 0, &n.digest_algo, &n.digests, &n.digest_root);
  hpl__dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
}

void hpl__dirlink_target_made(hpl__store *s, hpl__obj *o, void *arg) {
  (void)arg;
  if (!o->in_table || o->state != HPL__OBJ_REDUCING) return; /* failed meanwhile */
  hpl__dirlink_made_complete(s, o);
  hpl__obj_sealed(s, o);
}

void hpl__dirlink_loc_add_made(hpl__store *s, hpl__obj *o) {
  Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
  a.id = o->id;
  a.size = o->size;
  a.complete = 1;
  hpl__objdig_to_wire(o, 0, &a.digest_algo, &a.digests, &a.digest_root);
  char *copy = strdup(o->id);
  if (hpl__dirlink_request(s, HPL__MSG_LOC_ADD, &a.base, NULL, 0, -1, loc_added, copy) != 0)
    free(copy);
  o->advertised = 1;
}

void hpl__dirlink_on(hpl__store *s, unsigned type, hpl__dl_msg_fn fn) {
  if (type <= HPL__MSG_MAX_) s->dl->handlers[type] = fn;
}

void hpl__dirlink_on_registered(hpl__store *s, void (*fn)(hpl__store *s, int restarted)) {
  s->dl->registered = fn;
}

void hpl__dirlink_on_incoming(hpl__store *s,
                              size_t (*fn)(hpl__store *s, hpl__dl_incoming *out, size_t max)) {
  s->dl->incoming = fn;
}

void hpl__dirlink_on_clients(hpl__store *s, size_t (*fn)(const hpl__store *s)) {
  s->dl->clients = fn;
}

void hpl__dirlink_frame_in(hpl__dirlink *dl, hpl__conn *c, const hpl__frame_hdr *h,
                           ProtobufCMessage *m, const uint8_t *payload, uint64_t plen) {
  if (h->type == HPL__MSG_DROP || h->type == HPL__MSG_UPSTREAM_GONE ||
      h->type == HPL__MSG_REDUCE_TASK || h->type == HPL__MSG_REDUCE_SINK ||
      h->type == HPL__MSG_REDUCE_END || h->type == HPL__MSG_REDUCE_ADOPTED ||
      h->type == HPL__MSG_RING_END || h->type == HPL__MSG_GRANT || h->type == HPL__MSG_DIGESTS) {
    /* the directory's own messages (a DROP is acknowledged once handled) */
    if (dl->handlers[h->type]) dl->handlers[h->type](dl->s, m);
    if (h->type == HPL__MSG_DROP && h->req_id) hpl__conn_reply(c, h->req_id, 0, NULL);
    return;
  }
  if (h->req_id) {
    hpl__dl_req *r = NULL;
    HASH_FIND(hh, dl->pending, &h->req_id, sizeof h->req_id, r);
    if (!r) return; /* timed out earlier */
    req_finish(dl, r, 0, h, m, payload, plen);
    return;
  }
  HPL__LOG_WARN("unexpected %s from the directory", hpl__msg_name(h->type));
}

void hpl__dirlink_requests_lost(hpl__dirlink *dl) {
  hpl__dl_req *r, *tmp;
  HASH_ITER(hh, dl->pending, r, tmp) {
    if (r->type == HPL__MSG_HEARTBEAT || r->type == HPL__MSG_HELD) {
      HASH_DEL(dl->pending, r);
      req_free(r);
    } else {
      r->sent = 0;
    }
  }
}

void hpl__dirlink_requests_cancel(hpl__dirlink *dl) {
  hpl__dl_req *r, *tmp;
  HASH_ITER(hh, dl->pending, r, tmp) req_finish(dl, r, HPL_ECANCELED, NULL, NULL, NULL, 0);
}

void hpl__dirlink_free(hpl__store *s) {
  free(s->dl);
  s->dl = NULL;
}
