/* dirlink.c - the store's connection to the directory (see dirlink.h).
 *
 * Requests wait in `pending` (by request id) for their reply. While the
 * link is down they wait in the same table and are (re)sent after the store
 * has registered again, so a directory restart is invisible to them except
 * for the delay.
 */
#include "dirlink.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dataport.h"
#include "faults.h"
#include "hoplite.h"
#include "log.h"
#include "objects.h"
#include "util.h"
#include "uvconn.h"
#include "uvtimer.h"

enum { DL_DOWN = 0, DL_RESOLVING, DL_CONNECTING, DL_REGISTERING, DL_READY };

typedef struct dl_req {
  UT_hash_handle hh;
  uint64_t id;
  unsigned type;
  uint8_t *frame; /* header + message + payload, ready to send */
  size_t flen;
  int sent;       /* on the current connection */
  dl_reply_cb cb;
  void *arg;
  hpl__otimer timer;
  struct dirlink *dl;
  uint64_t seq; /* send order */
} dl_req;

typedef struct dirlink {
  store *s;
  int state;
  hpl__conn *c;
  uv_getaddrinfo_t gai;
  uv_connect_t creq;
  uv_tcp_t *tcp;
  uv_timer_t retry;
  uv_timer_t hb;
  uv_timer_t held_delay; /* fault point held_delay_ms: the re-report waits */
  uint64_t backoff_ms;
  dl_req *pending;
  uint64_t next_id;
  uint64_t seq;
  uint64_t register_req;
  uint64_t last_heard_ms;
  int registered_once;
  uint64_t instance; /* the directory's, from the last registration */
  uint64_t hb_sent_ns;  /* when the last heartbeat went out */
  uint32_t rtt_us;      /* its round trip, reported with the next one */
  char peer_addr[64];   /* the directory's numeric address, for clients */
  int peer_port;
  int stopping;
  dl_msg_fn handlers[HPL__MSG_MAX_ + 1]; /* directory-started messages */
  void (*registered)(store *s, int restarted);
  size_t (*incoming)(store *s, dl_incoming *out, size_t max); /* for heartbeats */
  uint64_t incarnation; /* random per process (RegisterReq.incarnation) */
  dl_caps caps;         /* the directory's, from the last registration */
  /* re-reporting what we hold after registering (HELD, one piece at a time) */
  st_walk held_walk;
  uint64_t held_gen;    /* bumped per connection: answers of older pieces are ignored */
  int held_adopt;       /* the directory is new to us: it takes unknown objects */
  int held_inline;      /* it restarted: it lost the small objects' bytes too */
  size_t held_sent;
  uint64_t held_t0_ms;
} dirlink;

/* What one HELD carries at most (objects, and bytes of ids), and how many
 * objects one piece may look at. */
#define HELD_PIECE 2048
#define HELD_PIECE_BYTES (256u * 1024)
#define HELD_SCAN (4 * HELD_PIECE)
/* Reconnecting to the directory: the first retry after this long, then
 * doubling up to the maximum. */
#define RECONNECT_MIN_MS 50
#define RECONNECT_MAX_MS 500

/* The link's one state change, logged. */
static void set_state(dirlink *dl, int to) {
  static const char *n[] = {"down", "resolving", "connecting", "registering", "ready"};
  if (dl->state == to) return;
  LOG_DEBUG("directory link: %s -> %s", n[dl->state], n[to]);
  dl->state = to;
}

static void dl_connect(dirlink *dl);
static void dl_hb_cb(uv_timer_t *t);
static uint64_t hb_pause_left(dirlink *dl);
static void dl_retry_cb(uv_timer_t *t) { dl_connect(t->data); }

/* For requests whose answer changes nothing here (the directory's state is
 * what counts, and a failure is retried at the next registration). */
static void ignore_reply(store *s, const dl_reply *r, void *arg) { (void)s, (void)r, (void)arg; }

int dirlink_ready(store *s) { return s->dl && s->dl->state == DL_READY; }

static const dl_caps default_caps = {.inline_max = HPL__DEFAULT_INLINE_MAX, .max_senders = 1};

const dl_caps *dirlink_caps(const store *s) { return s->dl ? &s->dl->caps : &default_caps; }

int dirlink_peer(store *s, char *addr, size_t alen, int *port) {
  if (!dirlink_ready(s) || !s->dl->peer_port || strlen(s->dl->peer_addr) >= alen) return -1;
  strcpy(addr, s->dl->peer_addr);
  *port = s->dl->peer_port;
  return 0;
}

/* Remember the directory's numeric address as this connection reaches it. */
static void note_peer(dirlink *dl, uv_tcp_t *t) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  dl->peer_port = 0;
  if (uv_tcp_getpeername(t, (struct sockaddr *)&ss, &len) != 0) return;
  if (ss.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    if (uv_ip4_name(a, dl->peer_addr, sizeof dl->peer_addr) == 0) dl->peer_port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    if (uv_ip6_name(a, dl->peer_addr, sizeof dl->peer_addr) == 0)
      dl->peer_port = ntohs(a->sin6_port);
  }
}

static void req_free(dl_req *r) {
  free(r->frame);
  r->frame = NULL;
  hpl__otimer_free(&r->timer, r);
}

/* The request ends: with the reply frame (h, m), or with a local error
 * (h NULL). A reply is handed over only if it is of the request's reply
 * type; a plain Reply is an error (or a bare success where a plain Reply is
 * what the request gets); anything else is a protocol error. */
static void req_finish(dirlink *dl, dl_req *r, int status, const hpl__frame_hdr *h,
                       ProtobufCMessage *m, const uint8_t *payload, uint64_t plen) {
  HASH_DEL(dl->pending, r);
  dl_reply rep = {.status = status, .detail = ""};
  if (h) {
    unsigned want = hpl__msg_reply_type(r->type);
    if (h->type == want || h->type == HPL__MSG_REPLY) {
      rep.status = hpl__msg_status(m, &rep.detail);
      if (rep.status == 0 && h->type != want) rep.status = HPL_EPROTO; /* a bare "ok" */
    } else {
      rep.status = HPL_EPROTO;
    }
    if (rep.status == HPL_EPROTO && !*rep.detail) {
      LOG_WARN("the directory answered %s with %s", hpl__msg_name(r->type), hpl__msg_name(h->type));
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
  dl_req *r = arg;
  LOG_DEBUG("directory request %s timed out", hpl__msg_name(r->type));
  req_finish(r->dl, r, HPL_ETIMEDOUT, NULL, NULL, NULL, 0);
}

static void free_frame(hpl__conn *c, int status, void *arg) {
  (void)c, (void)status;
  free(arg);
}

static void req_send(dirlink *dl, dl_req *r) {
  uint8_t *copy = malloc(r->flen);
  if (!copy) return; /* stays unsent; retried on the next connection */
  memcpy(copy, r->frame, r->flen);
  if (hpl__conn_write(dl->c, copy, r->flen, free_frame, copy) == 0)
    r->sent = 1;
  else
    free(copy);
}

static int cmp_seq(const void *a, const void *b) {
  const dl_req *x = *(dl_req *const *)a, *y = *(dl_req *const *)b;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* After (re-)registration: send everything still waiting, oldest first. */
static void flush_pending(dirlink *dl) {
  size_t n = HASH_COUNT(dl->pending), k = 0;
  if (!n) return;
  dl_req **v = malloc(n * sizeof *v);
  if (!v) return;
  dl_req *r, *tmp;
  HASH_ITER(hh, dl->pending, r, tmp) if (!r->sent) v[k++] = r;
  qsort(v, k, sizeof *v, cmp_seq);
  for (size_t i = 0; i < k; i++) req_send(dl, v[i]);
  free(v);
}

int dirlink_request(store *s, unsigned type, const ProtobufCMessage *m, const void *payload,
                    uint64_t plen, int64_t timeout_ms, dl_reply_cb cb, void *arg) {
  dirlink *dl = s->dl;
  dl_req *r = calloc(1, sizeof *r);
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
  if (dl->state == DL_READY) req_send(dl, r);
  return 0;
}

void dirlink_note(store *s, unsigned type, const ProtobufCMessage *m) {
  dirlink *dl = s->dl;
  if (dl->state != DL_READY) return;
  hpl__conn_send(dl->c, type, 0, m, NULL, 0, 0, NULL, NULL);
}

int dirlink_quiet(store *s, uint64_t peer) {
  if (!s->dl->caps.quiet_notes) return 0;
  Hplpb__Heartbeat q = HPLPB__HEARTBEAT__INIT;
  q.node_id = peer;
  s->ctr.quiet_notes++;
  dirlink_note(s, HPL__MSG_QUIET, &q.base);
  return 1;
}

/* A removal is a request, kept while the link is down and sent after the
 * store registers again: a reconnect keeps our copies at the directory, so
 * one it did not hear about would stay listed. */
static void loc_note_kept(store *s, const char *id, unsigned kind) {
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = (char *)id;
  n.kind = kind;
  if (dirlink_request(s, HPL__MSG_LOC_NOTE, &n.base, NULL, 0, -1, ignore_reply, NULL) != 0)
    dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
}

void dirlink_loc_remove(store *s, const char *id) { loc_note_kept(s, id, HPL__LOC_REMOVE); }

void dirlink_loc_retract(store *s, const char *id) { loc_note_kept(s, id, HPL__LOC_RETRACT); }

void dirlink_loc_complete(store *s, const char *id, uint64_t rate) {
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = (char *)id;
  n.kind = HPL__LOC_COMPLETE;
  n.rate = rate;
  dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
}

static void loc_added(store *s, const dl_reply *rep, void *arg) {
  (void)s;
  char *id = arg;
  if (rep->status)
    LOG_WARN("the directory did not list this node's copy of '%s': %s", id ? id : "?",
             *rep->detail ? rep->detail : hpl_strerror(rep->status));
  free(id);
}

void dirlink_loc_add(store *s, const char *id, uint64_t size, int complete, int origin) {
  Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
  a.id = (char *)id;
  a.size = size;
  a.complete = complete;
  a.origin = origin;
  char *copy = strdup(id);
  if (dirlink_request(s, HPL__MSG_LOC_ADD, &a.base, NULL, 0, -1, loc_added, copy) != 0) free(copy);
}

void dirlink_on(store *s, unsigned type, dl_msg_fn fn) {
  if (type <= HPL__MSG_MAX_) s->dl->handlers[type] = fn;
}

void dirlink_on_registered(store *s, void (*fn)(store *s, int restarted)) {
  s->dl->registered = fn;
}

void dirlink_on_incoming(store *s, size_t (*fn)(store *s, dl_incoming *out, size_t max)) {
  s->dl->incoming = fn;
}

/* ------------------------------------------------------------------ connection */

static void schedule_reconnect(dirlink *dl) {
  if (dl->stopping) return;
  set_state(dl, DL_DOWN);
  /* a restarted directory is found within half a second; the jitter
   * (+-25 %) spreads a whole cluster's reconnects */
  uint64_t d = dl->backoff_ms * 3 / 4 + hpl__random_u64() % (dl->backoff_ms / 2 + 1);
  dl->backoff_ms = dl->backoff_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : dl->backoff_ms * 2;
  LOG_DEBUG("reconnecting to the directory in %llu ms", (unsigned long long)d);
  uv_timer_start(&dl->retry, dl_retry_cb, d, 0);
}

static void write_ready_file(store *s) {
  if (!s->cfg.ready_file) return;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", s->cfg.ready_file);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%d\n", dataport_port(s)) < 0 || fclose(f) != 0 ||
      rename(tmp, s->cfg.ready_file) != 0)
    LOG_ERROR("cannot write ready file %s", s->cfg.ready_file);
}


static void held_next(dirlink *dl);

static void held_reply(store *s, const dl_reply *r, void *arg) {
  dirlink *dl = s->dl;
  if ((uint64_t)(uintptr_t)arg != dl->held_gen) return; /* a piece sent on an older connection */
  if (r->status != 0) {
    LOG_WARN("the directory did not take what we hold: %s (%s)", hpl_strerror(r->status),
             r->detail);
    store_walk_end(s, &dl->held_walk);
    return;
  }
  held_next(dl);
}

/* Send the next piece of what we hold: complete copies the directory knew
 * of (`advertised`; one being announced right now is announced by its own
 * request), small ones included (it lists us as their holder). After a
 * restart the directory lost the small objects' bytes: they go first, each
 * in an INLINE_PUT (answered before the HELD that follows them). The next
 * piece goes when this one is answered, so the directory takes a store of
 * millions of objects in slices between its other work. */
static void held_next(dirlink *dl) {
  store *s = dl->s;
  if (!dl->held_walk.open) return; /* the last piece was answered */
  Hplpb__HeldObject *held = malloc(HELD_PIECE * sizeof *held);
  Hplpb__HeldObject **ptrs = malloc(HELD_PIECE * sizeof *ptrs);
  if (!held || !ptrs) {
    free(held);
    free(ptrs);
    LOG_WARN("out of memory re-reporting what we hold; trying again at the next registration");
    store_walk_end(s, &dl->held_walk);
    return;
  }
  size_t k = 0, bytes = 0, scanned = 0;
  int end = 0;
  while (k < HELD_PIECE && bytes < HELD_PIECE_BYTES && scanned < HELD_SCAN) {
    st_obj *o = store_walk_next(s, &dl->held_walk);
    if (!o) {
      end = 1;
      break;
    }
    scanned++;
    if ((o->state != OBJ_SEALED && o->state != OBJ_SPILLED) || !o->advertised) continue;
    if (dl->held_inline && o->inline_obj) {
      Hplpb__InlinePutReq p = HPLPB__INLINE_PUT_REQ__INIT;
      p.id = o->id;
      p.size = o->size;
      dirlink_request(s, HPL__MSG_INLINE_PUT, &p.base, o->data, o->size, -1, ignore_reply, NULL);
      bytes += o->size;
    }
    hplpb__held_object__init(&held[k]);
    held[k].id = o->id;
    held[k].size = o->size;
    held[k].complete = 1;
    held[k].inline_ = o->inline_obj;
    ptrs[k] = &held[k];
    bytes += strlen(o->id) + 16;
    k++;
  }
  dl->held_sent += k;
  if (k > 0 || !end) {
    Hplpb__HeldNote n = HPLPB__HELD_NOTE__INIT;
    n.held = ptrs;
    n.n_held = k;
    n.adopt = dl->held_adopt;
    if (dirlink_request(s, HPL__MSG_HELD, &n.base, NULL, 0, -1, held_reply,
                        (void *)(uintptr_t)dl->held_gen) != 0) {
      LOG_WARN("out of memory re-reporting what we hold; trying again at the next registration");
      store_walk_end(s, &dl->held_walk);
      end = 0;
    }
  }
  free(held);
  free(ptrs);
  if (end && dl->held_sent)
    LOG_INFO("re-reported %zu objects to the directory in %llu ms", dl->held_sent,
             (unsigned long long)(hpl__now_ms() - dl->held_t0_ms));
}

/* Walk what we hold from the start, sending the first piece. */
static void held_begin(dirlink *dl) {
  if (store_obj_count(dl->s) == 0) return;
  store_walk_begin(dl->s, &dl->held_walk);
  held_next(dl);
}

static void held_delayed_cb(uv_timer_t *t) {
  dirlink *dl = t->data;
  if (!dl->stopping && dl->state == DL_READY) held_begin(dl);
}

/* After registering: re-report everything we hold, piece by piece. */
static void held_start(dirlink *dl, int adopt, int with_inline) {
  store *s = dl->s;
  store_walk_end(s, &dl->held_walk);
  uv_timer_stop(&dl->held_delay);
  dl->held_gen++;
  dl->held_adopt = adopt;
  dl->held_inline = with_inline;
  dl->held_sent = 0;
  dl->held_t0_ms = hpl__now_ms();
  if (s->cfg.faults.held_delay_ms) /* fault point: a slow re-report */
    uv_timer_start(&dl->held_delay, held_delayed_cb, s->cfg.faults.held_delay_ms, 0);
  else
    held_begin(dl);
}

static void on_registered(dirlink *dl, Hplpb__RegisterRep *r) {
  store *s = dl->s;
  if (r->status != 0) {
    LOG_ERROR("directory refused registration: %s", r->detail);
    hpl__conn_close(dl->c, HPL_EPROTO);
    return;
  }
  dl->caps = (dl_caps){.inline_max = r->inline_max, .max_senders = r->max_senders,
                       .quiet_notes = r->quiet_notes, .rings = r->rings, .publish = r->publish};
  set_state(dl, DL_READY);
  dl->backoff_ms = RECONNECT_MIN_MS;
  s->ctr.dir_registrations++;
  uint32_t hb = r->heartbeat_ms ? r->heartbeat_ms : 500;
  uv_timer_stop(&dl->hb);
  uv_timer_start(&dl->hb, dl_hb_cb, hb, hb);
  int restarted = dl->registered_once && r->instance != dl->instance;
  int adopt = !dl->registered_once || restarted;
  LOG_INFO("registered with the directory %s:%d%s", s->cfg.dir_host, s->cfg.dir_port,
           restarted ? " (it restarted)" : dl->registered_once ? " (again)" : "");
  if (!dl->registered_once) write_ready_file(s);
  dl->registered_once = 1;
  dl->instance = r->instance;
  flush_pending(dl);
  held_start(dl, adopt, restarted);
  if (dl->registered) dl->registered(s, restarted);
}

static void hb_reply(store *s, const dl_reply *r, void *arg) {
  (void)arg;
  int status = r->status;
  dirlink *dl = s->dl;
  if (status == 0 && dl->hb_sent_ns) {
    uint64_t rtt = (hpl__now_ns() - dl->hb_sent_ns) / 1000;
    dl->rtt_us = rtt > UINT32_MAX ? UINT32_MAX : (uint32_t)rtt;
  }
  if (status == HPL_ETIMEDOUT && dl->state == DL_READY && dl->c) {
    LOG_WARN("directory did not answer a heartbeat; reconnecting");
    hpl__conn_close(dl->c, HPL_ETIMEDOUT);
  }
}

static void dl_hb_cb(uv_timer_t *t) {
  dirlink *dl = t->data;
  if (dl->state != DL_READY) return;
  if (hb_pause_left(dl)) return; /* fault point: a node that goes silent for a while */
  store *s = dl->s;
  Hplpb__Heartbeat hbm = HPLPB__HEARTBEAT__INIT;
  hbm.node_id = s->node_id;
  hbm.rtt_us = dl->rtt_us;
  hbm.sent_us = hpl__now_ns() / 1000;
  /* what `hoplite status` shows of this node */
  hbm.stats = 1;
  hbm.pool_used = hpl__pool_used(s->pool);
  hbm.pool_capacity = hpl__pool_capacity(s->pool);
  hbm.objects = store_obj_count(s);
  hbm.bytes_sent = s->ctr.data_bytes_sent;
  hbm.bytes_received = s->ctr.data_bytes_received;
  hbm.clients = s->nclients;
  dl_incoming in[HPL__STATUS_MAX_INCOMING];
  Hplpb__Incoming im[HPL__STATUS_MAX_INCOMING], *ip[HPL__STATUS_MAX_INCOMING];
  size_t total = dl->incoming ? dl->incoming(s, in, HPL__STATUS_MAX_INCOMING) : 0;
  size_t n = total < HPL__STATUS_MAX_INCOMING ? total : HPL__STATUS_MAX_INCOMING;
  for (size_t i = 0; i < n; i++) {
    hplpb__incoming__init(&im[i]);
    im[i].id = (char *)in[i].id;
    im[i].sender = in[i].sender;
    im[i].held = in[i].held;
    im[i].size = in[i].size;
    im[i].rate = in[i].rate > 0 ? (uint64_t)in[i].rate : 0;
    ip[i] = &im[i];
  }
  hbm.n_incoming = n;
  hbm.incoming = ip;
  hbm.incoming_total = total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
  dl->hb_sent_ns = hpl__now_ns();
  uint64_t interval = uv_timer_get_repeat(t);
  /* a heartbeat is only useful on the connection it was sent on */
  dirlink_request(s, HPL__MSG_HEARTBEAT, &hbm.base, NULL, 0, (int64_t)(3 * interval), hb_reply,
                  NULL);
}

static void dl_on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                        const uint8_t *payload, uint64_t plen) {
  dirlink *dl = hpl__conn_data(c);
  dl->last_heard_ms = hpl__now_ms();
  if (h->req_id && h->req_id == dl->register_req) {
    if (h->type != HPL__MSG_REGISTER_REP) {
      Hplpb__Reply *r = h->type == HPL__MSG_REPLY ? (Hplpb__Reply *)m : NULL;
      LOG_ERROR("directory refused registration: %s", r ? r->detail : "unexpected reply");
      hpl__conn_close(c, HPL_EPROTO);
      return;
    }
    dl->register_req = 0;
    on_registered(dl, (Hplpb__RegisterRep *)m);
    return;
  }
  if (h->type == HPL__MSG_PROBE) {
    /* the directory checks we are alive (a receiver of ours saw no bytes
     * for a while): answer at once, on the loop, with a heartbeat */
    if (hb_pause_left(dl)) return; /* fault point: silent */
    Hplpb__Heartbeat hbm = HPLPB__HEARTBEAT__INIT;
    hbm.node_id = dl->s->node_id;
    hbm.sent_us = hpl__now_ns() / 1000;
    if (dl->state == DL_READY) hpl__conn_send(c, HPL__MSG_HEARTBEAT, 0, &hbm.base, NULL, 0, 0, NULL, NULL);
    return;
  }
  if (h->type == HPL__MSG_DROP || h->type == HPL__MSG_UPSTREAM_GONE ||
      h->type == HPL__MSG_REDUCE_TASK || h->type == HPL__MSG_REDUCE_SINK ||
      h->type == HPL__MSG_REDUCE_END || h->type == HPL__MSG_REDUCE_ADOPTED ||
      h->type == HPL__MSG_RING_END || h->type == HPL__MSG_GRANT) {
    /* the directory's own messages (a DROP is acknowledged once handled) */
    if (dl->handlers[h->type]) dl->handlers[h->type](dl->s, m);
    if (h->type == HPL__MSG_DROP && h->req_id) hpl__conn_reply(c, h->req_id, 0, NULL);
    return;
  }
  if (h->req_id) {
    dl_req *r = NULL;
    HASH_FIND(hh, dl->pending, &h->req_id, sizeof h->req_id, r);
    if (!r) return; /* timed out earlier */
    req_finish(dl, r, 0, h, m, payload, plen);
    return;
  }
  LOG_WARN("unexpected %s from the directory", hpl__msg_name(h->type));
}

static void dl_on_close(hpl__conn *c, int status) {
  dirlink *dl = hpl__conn_data(c);
  dl->c = NULL;
  uv_timer_stop(&dl->hb);
  if (dl->stopping) return;
  LOG_WARN("lost the directory connection (%s); will reconnect", hpl_strerror(status));
  /* requests sent on the dead connection go again after re-registration;
   * heartbeats are dropped */
  /* what we hold is re-reported from the start after registering */
  store_walk_end(dl->s, &dl->held_walk);
  dl->held_gen++;
  dl_req *r, *tmp;
  HASH_ITER(hh, dl->pending, r, tmp) {
    if (r->type == HPL__MSG_HEARTBEAT || r->type == HPL__MSG_HELD) {
      HASH_DEL(dl->pending, r);
      req_free(r);
    } else {
      r->sent = 0;
    }
  }
  schedule_reconnect(dl);
}

static void send_register(dirlink *dl, const char *local_ip) {
  store *s = dl->s;
  if (!s->cfg.data_addr[0]) snprintf(s->cfg.data_addr, sizeof s->cfg.data_addr, "%s", local_ip);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = s->node_id;
  r.addr = s->cfg.data_addr;
  r.data_port = (uint32_t)dataport_port(s);
  r.capacity = hpl__pool_capacity(s->pool);
  r.name = s->cfg.name;
  r.incarnation = dl->incarnation;
  r.grants = 1; /* fetch.c takes them */
  /* what we hold follows in HELD pieces once the directory answers */
  dl->register_req = ++dl->next_id;
  set_state(dl, DL_REGISTERING);
  hpl__conn_send(dl->c, HPL__MSG_REGISTER, dl->register_req, &r.base, NULL, 0, 0, NULL, NULL);
}

static void on_connected(uv_connect_t *req, int status) {
  dirlink *dl = req->data;
  uv_tcp_t *t = dl->tcp;
  if (dl->stopping) return; /* dirlink_stop closed the handle */
  dl->tcp = NULL;
  if (status < 0) {
    LOG_WARN("cannot connect to the directory %s:%d: %s", dl->s->cfg.dir_host,
               dl->s->cfg.dir_port, uv_strerror(status));
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    schedule_reconnect(dl);
    return;
  }
  uv_tcp_nodelay(t, 1);
  note_peer(dl, t);
  char local[64] = "127.0.0.1";
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getsockname(t, (struct sockaddr *)&ss, &len) == 0)
    uv_ip4_name((struct sockaddr_in *)&ss, local, sizeof local);
  hpl__conn_opts o = {.lim = {.max_msg = HPL__MAX_MSG_CTRL, .max_payload = 16u << 20,
                             .max_type = HPL__MSG_MAX_},
                     .on_frame = dl_on_frame,
                     .on_close = dl_on_close,
                     .data = dl,
                     .label = "store->dir",
                     .auth = &dl->s->cfg.auth,
                     .auth_role = HPL__ROLE_STORE,
                     .auth_failures = &dl->s->ctr.auth_failures,
                     .cork = 1};
  dl->c = hpl__conn_new((uv_stream_t *)t, &o);
  if (!dl->c) {
    schedule_reconnect(dl);
    return;
  }
  dl->last_heard_ms = hpl__now_ms();
  send_register(dl, local);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
  dirlink *dl = g->data;
  if (dl->stopping) {
    if (res) uv_freeaddrinfo(res);
    return;
  }
  if (status < 0 || !res) {
    LOG_WARN("cannot resolve the directory host '%s': %s", dl->s->cfg.dir_host,
             uv_strerror(status));
    schedule_reconnect(dl);
    return;
  }
  dl->tcp = malloc(sizeof *dl->tcp);
  if (!dl->tcp) {
    uv_freeaddrinfo(res);
    schedule_reconnect(dl);
    return;
  }
  uv_tcp_init(dl->s->loop, dl->tcp);
  dl->creq.data = dl;
  set_state(dl, DL_CONNECTING);
  int rc = uv_tcp_connect(&dl->creq, dl->tcp, res->ai_addr, on_connected);
  uv_freeaddrinfo(res);
  if (rc) {
    uv_close((uv_handle_t *)dl->tcp, (uv_close_cb)free);
    dl->tcp = NULL;
    schedule_reconnect(dl);
  }
}

/* Fault point hb_pause: ms left in the silent window (0: not in it). */
static uint64_t hb_pause_left(dirlink *dl) {
  return faults_silent_ms(&dl->s->cfg.faults, hpl__now_ms() - dl->s->start_ms);
}

static void dl_connect(dirlink *dl) {
  if (dl->stopping) return;
  uint64_t quiet = hb_pause_left(dl);
  if (quiet) { /* a silent node does not reconnect either */
    uv_timer_start(&dl->retry, dl_retry_cb, quiet, 0);
    return;
  }
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  char port[16];
  snprintf(port, sizeof port, "%d", dl->s->cfg.dir_port);
  dl->gai.data = dl;
  set_state(dl, DL_RESOLVING);
  int rc = uv_getaddrinfo(dl->s->loop, &dl->gai, on_resolved, dl->s->cfg.dir_host, port, &hints);
  if (rc) {
    LOG_WARN("cannot resolve '%s': %s", dl->s->cfg.dir_host, uv_strerror(rc));
    schedule_reconnect(dl);
  }
}

int dirlink_start(store *s) {
  dirlink *dl = calloc(1, sizeof *dl);
  if (!dl) return HPL_ENOMEM;
  dl->s = s;
  dl->backoff_ms = RECONNECT_MIN_MS;
  dl->incarnation = hpl__random_u64();
  dl->caps = default_caps;
  s->dl = dl;
  uv_timer_init(s->loop, &dl->retry);
  uv_timer_init(s->loop, &dl->hb);
  uv_timer_init(s->loop, &dl->held_delay);
  dl->retry.data = dl->hb.data = dl->held_delay.data = dl;
  dl_connect(dl);
  return 0;
}

void dirlink_stop(store *s) {
  dirlink *dl = s->dl;
  if (!dl || dl->stopping) return;
  dl->stopping = 1;
  store_walk_end(s, &dl->held_walk);
  dl->held_gen++;
  dl_req *r, *tmp;
  HASH_ITER(hh, dl->pending, r, tmp) req_finish(dl, r, HPL_ECANCELED, NULL, NULL, NULL, 0);
  if (dl->c) hpl__conn_close(dl->c, 0);
  if (dl->tcp) uv_close((uv_handle_t *)dl->tcp, (uv_close_cb)free);
  dl->tcp = NULL;
  if (dl->state == DL_RESOLVING) uv_cancel((uv_req_t *)&dl->gai);
  uv_close((uv_handle_t *)&dl->retry, NULL);
  uv_close((uv_handle_t *)&dl->hb, NULL);
  uv_close((uv_handle_t *)&dl->held_delay, NULL);
}

void dirlink_free(store *s) {
  free(s->dl);
  s->dl = NULL;
}
