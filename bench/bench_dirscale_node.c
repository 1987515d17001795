/* bench_dirscale_node.c - bench_dirscale's emulated store nodes (see
 * bench_dirscale.h): one authenticated TCP connection per node to a real
 * hoplite-directory, doing on it what a store's directory link does
 * (store/dlconn.c, store/dirlink.c, store/fetch.c): REGISTER, a HEARTBEAT
 * every interval the directory gave (with the copies arriving listed),
 * ACQUIRE for a fetch, LOC_NOTE COMPLETE when its copy is whole, an answer
 * to PROBE and DROP, and a new ACQUIRE naming the failed peer on
 * UPSTREAM_GONE. All nodes share one epoll loop and one timer heap. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "benchwire.h"
#include "hoplite.h"

#include "bench_dirscale.h"

/* request ids say what they answer: kind in the top byte, an index below */
enum { RQ_REGISTER = 1, RQ_HB = 2, RQ_ACQUIRE = 3, RQ_LOCADD = 4, RQ_COUNTERS = 5 };
#define RQ(kind, idx) (((uint64_t)(kind) << 56) | (uint64_t)(idx))
#define RQ_KIND(req) ((int)((req) >> 56))
#define RQ_IDX(req) ((req) & ((1ull << 56) - 1))

typedef struct dsnode {
  hpl__bench_wire w;
  uint64_t id;
  uint8_t *in, *out;
  size_t in_len, in_cap, out_off, out_len, out_cap;
  int registered, closed, want_out;
  uint64_t hb_sent_ns, hb_req_seq; /* the heartbeat out (0: none) */
  uint32_t rtt_us;
  uint32_t receiving, held; /* fetches receiving now; copies complete */
} dsnode;

/* the timer heap */
enum { EV_HB = 1, EV_ASK = 2, EV_DONE = 3 };
typedef struct tev {
  uint64_t at_ns;
  uint32_t kind, idx, gen;
} tev;

/* a fetch waiting for its sender's copy to complete */
typedef struct waiter {
  int32_t fetch, next;
  uint32_t gen;
} waiter;

struct hpl__ds_run {
  int ep, n;
  dsnode *nodes;
  uint64_t salt;
  uint32_t hb_ms;
  tev *heap;
  size_t nheap, capheap;
  /* the current object set */
  char prefix[32];
  int nobjs;
  uint64_t size;
  hpl__ds_fetch *f;
  int nf, capf, left; /* fetches, wanted and not finished */
  int32_t *fidx;      /* [obj * n + node]: the fetch, or -1 */
  waiter *w;
  int nw, capw;
  int locadds_left, locadd_failed;
  uint64_t counter_val;
  const char *counter_name;
  int counter_done;
  hpl__ds_stats st;
};

/* ------------------------------------------------------------------ latency */

void hpl__ds_h_add(hpl__ds_hist *h, uint64_t us) {
  h->n++;
  if (us > h->max_us) h->max_us = us;
  if (us / 10 < HPL__DS_H_FINE) h->fine[us / 10]++;
  else h->coarse[us / 10000 < HPL__DS_H_COARSE ? us / 10000 : HPL__DS_H_COARSE - 1]++;
}

double hpl__ds_h_pct(const hpl__ds_hist *h, double p) {
  uint64_t want = (uint64_t)(p * (double)h->n), seen = 0;
  if (!h->n) return 0;
  for (int i = 0; i < HPL__DS_H_FINE; i++)
    if ((seen += h->fine[i]) > want) return i / 100.0;
  for (int i = 0; i < HPL__DS_H_COARSE; i++)
    if ((seen += h->coarse[i]) > want) return i * 10.0;
  return (double)h->max_us / 1000.0;
}

/* ------------------------------------------------------------------ timers */

static void heap_push(hpl__ds_run *r, uint64_t at, uint32_t kind, uint32_t idx, uint32_t gen) {
  if (r->nheap == r->capheap) {
    r->capheap = r->capheap ? 2 * r->capheap : 1024;
    r->heap = realloc(r->heap, r->capheap * sizeof *r->heap);
    if (!r->heap) abort();
  }
  size_t i = r->nheap++;
  tev e = {at, kind, idx, gen};
  while (i && r->heap[(i - 1) / 2].at_ns > at) {
    r->heap[i] = r->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  r->heap[i] = e;
}

static tev heap_pop(hpl__ds_run *r) {
  tev top = r->heap[0], last = r->heap[--r->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= r->nheap) break;
    if (c + 1 < r->nheap && r->heap[c + 1].at_ns < r->heap[c].at_ns) c++;
    if (r->heap[c].at_ns >= last.at_ns) break;
    r->heap[i] = r->heap[c];
    i = c;
  }
  if (r->nheap) r->heap[i] = last;
  return top;
}

/* ------------------------------------------------------------------ output */

static void want_out(hpl__ds_run *r, int i, int on) {
  dsnode *nd = &r->nodes[i];
  if (nd->want_out == on || nd->closed) return;
  struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.u32 = (uint32_t)i};
  epoll_ctl(r->ep, EPOLL_CTL_MOD, nd->w.fd, &ev);
  nd->want_out = on;
}

static void flush(hpl__ds_run *r, int i) {
  dsnode *nd = &r->nodes[i];
  while (nd->out_off < nd->out_len) {
    ssize_t k = send(nd->w.fd, nd->out + nd->out_off, nd->out_len - nd->out_off, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (k <= 0) {
      nd->closed = 1;
      return;
    }
    nd->out_off += (size_t)k;
  }
  if (nd->out_off == nd->out_len) nd->out_off = nd->out_len = 0;
  want_out(r, i, nd->out_len > 0);
}

/* One frame to node i's directory connection (tagged with its session). */
static void node_send(hpl__ds_run *r, int i, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  dsnode *nd = &r->nodes[i];
  if (nd->closed) return;
  size_t len;
  uint8_t *f = hpl__bench_wire_frame(&nd->w, type, req, m, NULL, 0, &len);
  if (!f) abort();
  if (nd->out_len + len > nd->out_cap) {
    if (nd->out_off) { /* compact first */
      memmove(nd->out, nd->out + nd->out_off, nd->out_len - nd->out_off);
      nd->out_len -= nd->out_off;
      nd->out_off = 0;
    }
    while (nd->out_len + len > nd->out_cap) nd->out_cap = nd->out_cap ? 2 * nd->out_cap : 4096;
    nd->out = realloc(nd->out, nd->out_cap);
    if (!nd->out) abort();
  }
  memcpy(nd->out + nd->out_len, f, len);
  nd->out_len += len;
  free(f);
  flush(r, i);
}

/* ------------------------------------------------------------------ what a store sends */

static void send_heartbeat(hpl__ds_run *r, int i) {
  dsnode *nd = &r->nodes[i];
  uint64_t now = hpl__now_ns();
  if (nd->hb_sent_ns && now - nd->hb_sent_ns > 3ull * r->hb_ms * 1000000ull) {
    r->st.hb_late++; /* a store would reconnect now (dlconn.c hb_reply) */
    nd->hb_sent_ns = 0;
  }
  Hplpb__Heartbeat hb = HPLPB__HEARTBEAT__INIT;
  hb.node_id = nd->id;
  hb.rtt_us = nd->rtt_us;
  hb.sent_us = now / 1000;
  hb.stats = 1;
  hb.pool_capacity = 8ull << 30;
  hb.clients = 1;
  /* the copies arriving here, as a store lists them */
  Hplpb__Incoming im[HPL__STATUS_MAX_INCOMING], *ip[HPL__STATUS_MAX_INCOMING];
  size_t k = 0, total = 0;
  hb.objects = nd->held;
  for (int o = 0; o < r->nobjs && r->fidx && nd->receiving; o++) {
    int32_t fi = r->fidx[(size_t)o * (size_t)r->n + (size_t)i];
    if (fi < 0) continue;
    const hpl__ds_fetch *f = &r->f[fi];
    if (f->state != HPL__DSF_RECEIVING) continue;
    total++;
    if (k == HPL__STATUS_MAX_INCOMING) continue;
    static char ids[HPL__STATUS_MAX_INCOMING][48];
    snprintf(ids[k], sizeof ids[k], "%s%d", r->prefix, o);
    hplpb__incoming__init(&im[k]);
    im[k].id = ids[k];
    im[k].sender = f->sender;
    double frac = (double)(now - f->answered_ns) / (hpl__ds.xfer_ms * 1e6);
    im[k].held = (uint64_t)((frac < 1 ? frac : 1) * (double)r->size);
    im[k].size = r->size;
    im[k].rate = (uint64_t)((double)r->size / (hpl__ds.xfer_ms / 1000.0));
    ip[k] = &im[k];
    k++;
  }
  hb.n_incoming = k;
  hb.incoming = ip;
  hb.incoming_total = (uint32_t)total;
  if (!nd->hb_sent_ns) { /* one out at a time: the next one replaces nothing */
    nd->hb_sent_ns = now;
    nd->hb_req_seq++;
  }
  r->st.hb_sent++;
  node_send(r, i, HPL__MSG_HEARTBEAT, RQ(RQ_HB, (uint64_t)i), &hb.base);
}

static void send_acquire(hpl__ds_run *r, int32_t fi, uint64_t failed_peer) {
  hpl__ds_fetch *f = &r->f[fi];
  char id[48];
  snprintf(id, sizeof id, "%s%u", r->prefix, f->obj);
  Hplpb__AcquireReq a = HPLPB__ACQUIRE_REQ__INIT;
  a.id = id;
  a.timeout_ms = (int64_t)hpl__ds.phase_timeout_s * 1000;
  a.failed_peer = failed_peer;
  if (f->state == HPL__DSF_RECEIVING) r->nodes[f->node].receiving--;
  f->state = HPL__DSF_ASKED;
  f->gen++;
  f->asks++;
  f->asked_ns = hpl__now_ns();
  node_send(r, (int)f->node, HPL__MSG_ACQUIRE, RQ(RQ_ACQUIRE, (uint64_t)fi), &a.base);
}

static void fetch_finish(hpl__ds_run *r, int32_t fi, int state) {
  hpl__ds_fetch *f = &r->f[fi];
  if (f->state == HPL__DSF_COMPLETE || f->state == HPL__DSF_FAILED) return;
  if (f->state == HPL__DSF_RECEIVING) r->nodes[f->node].receiving--;
  if (state == HPL__DSF_COMPLETE) r->nodes[f->node].held++;
  f->state = (uint8_t)state;
  if (f->ask_at_ns) r->left--;
}

/* The copy is whole: tell the directory (as fetch.c's pull_done does) and
 * wake the fetches whose sender this copy is. */
static void fetch_complete(hpl__ds_run *r, int32_t fi) {
  hpl__ds_fetch *f = &r->f[fi];
  uint64_t now = hpl__now_ns();
  f->done_ns = now;
  fetch_finish(r, fi, HPL__DSF_COMPLETE);
  r->st.completes++;
  char id[48];
  snprintf(id, sizeof id, "%s%u", r->prefix, f->obj);
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = id;
  n.kind = HPL__LOC_COMPLETE;
  n.rate = (uint64_t)((double)r->size / (hpl__ds.xfer_ms / 1000.0));
  node_send(r, (int)f->node, HPL__MSG_LOC_NOTE, 0, &n.base);
  uint64_t hop = (uint64_t)(hpl__ds.hop_ms * 1e6);
  for (int32_t k = f->waiters; k >= 0; k = r->w[k].next)
    heap_push(r, now + hop, EV_DONE, (uint32_t)r->w[k].fetch, r->w[k].gen);
  f->waiters = -1;
}

/* EV_DONE: its own bytes' time is up; whole once its sender's copy is,
 * and not before hop_ms after it (the last chunk forwarded). */
static void fetch_try_done(hpl__ds_run *r, int32_t fi) {
  hpl__ds_fetch *f = &r->f[fi];
  int si = hpl__ds_node_index(r, f->sender);
  int32_t sfi = si >= 0 ? r->fidx[(size_t)f->obj * (size_t)r->n + (size_t)si] : -1;
  if (sfi < 0) { /* a sender we do not emulate: cannot happen */
    fetch_complete(r, fi);
    return;
  }
  hpl__ds_fetch *s = &r->f[sfi];
  uint64_t now = hpl__now_ns(), hop = (uint64_t)(hpl__ds.hop_ms * 1e6);
  if (s->state == HPL__DSF_COMPLETE) {
    if (s->done_ns + hop > now) heap_push(r, s->done_ns + hop, EV_DONE, (uint32_t)fi, f->gen);
    else fetch_complete(r, fi);
    return;
  }
  if (r->nw == r->capw) {
    r->capw = r->capw ? 2 * r->capw : 1024;
    r->w = realloc(r->w, (size_t)r->capw * sizeof *r->w);
    if (!r->w) abort();
  }
  r->w[r->nw] = (waiter){.fetch = fi, .gen = f->gen, .next = s->waiters};
  s->waiters = r->nw++;
}

/* ------------------------------------------------------------------ what the directory sends */

static void on_acquire_rep(hpl__ds_run *r, int32_t fi, const ProtobufCMessage *m) {
  if (fi < 0 || fi >= r->nf) return;
  hpl__ds_fetch *f = &r->f[fi];
  if (f->state != HPL__DSF_ASKED) return;
  const char *why = NULL;
  int st = hpl__msg_status(m, &why);
  uint64_t now = hpl__now_ns();
  hpl__ds_h_add(&r->st.acq_lat, (now - f->asked_ns) / 1000);
  const Hplpb__AcquireRep *a =
      m->descriptor == &hplpb__acquire_rep__descriptor ? (const Hplpb__AcquireRep *)m : NULL;
  if (st != 0 || !a || !a->sender_node) {
    r->st.refusals++;
    f->status = st ? st : HPL_EUNAVAIL;
    if (r->st.refusals <= 3)
      fprintf(stderr, "bench_dirscale: node %u, object %u: %s (%s)\n", f->node, f->obj,
              hpl_strerror(f->status), why ? why : "");
    fetch_finish(r, fi, HPL__DSF_FAILED);
    return;
  }
  r->st.answers++;
  f->answered_ns = now;
  f->sender = a->sender_node;
  f->state = HPL__DSF_RECEIVING;
  r->nodes[f->node].receiving++;
  heap_push(r, now + (uint64_t)(hpl__ds.xfer_ms * 1e6), EV_DONE, (uint32_t)fi, f->gen);
}

/* UPSTREAM_GONE: the sender is gone or silent; ask for another. */
static void on_upstream(hpl__ds_run *r, int i, const Hplpb__UpstreamNote *u) {
  r->st.moves++;
  size_t pl = strlen(r->prefix);
  if (!u->id || strncmp(u->id, r->prefix, pl) != 0) return;
  int o = atoi(u->id + pl);
  if (o < 0 || o >= r->nobjs) return;
  int32_t fi = r->fidx[(size_t)o * (size_t)r->n + (size_t)i];
  if (fi < 0 || r->f[fi].state != HPL__DSF_RECEIVING) return;
  send_acquire(r, fi, u->peer);
}

static void on_frame(hpl__ds_run *r, int i, const hpl__frame_hdr *h, const ProtobufCMessage *m) {
  dsnode *nd = &r->nodes[i];
  int kind = h->req_id ? RQ_KIND(h->req_id) : 0;
  uint64_t idx = RQ_IDX(h->req_id);
  switch (h->type) {
    case HPL__MSG_REGISTER_REP: {
      const Hplpb__RegisterRep *rr = (const Hplpb__RegisterRep *)m;
      if (rr->status) {
        fprintf(stderr, "bench_dirscale: node %d refused: %s\n", i, rr->detail);
        nd->closed = 1;
        return;
      }
      if (!r->hb_ms) r->hb_ms = rr->heartbeat_ms ? rr->heartbeat_ms : 500;
      nd->registered = 1;
      /* the first heartbeat one interval on, at a phase of its own */
      uint64_t off = (uint64_t)(rand() % (int)r->hb_ms) * 1000000ull;
      heap_push(r, hpl__now_ns() + off, EV_HB, (uint32_t)i, 0);
      return;
    }
    case HPL__MSG_PROBE: { /* answered at once with a heartbeat (dlconn.c) */
      r->st.probes++;
      Hplpb__Heartbeat hb = HPLPB__HEARTBEAT__INIT;
      hb.node_id = nd->id;
      hb.sent_us = hpl__now_ns() / 1000;
      node_send(r, i, HPL__MSG_HEARTBEAT, 0, &hb.base);
      return;
    }
    case HPL__MSG_DROP:
      r->st.drops++;
      if (h->req_id) {
        Hplpb__Reply rep = HPLPB__REPLY__INIT;
        node_send(r, i, HPL__MSG_REPLY, h->req_id, &rep.base);
      }
      return;
    case HPL__MSG_UPSTREAM_GONE:
      on_upstream(r, i, (const Hplpb__UpstreamNote *)m);
      return;
    case HPL__MSG_COUNTERS_REP: {
      const Hplpb__CountersRep *c = (const Hplpb__CountersRep *)m;
      for (size_t k = 0; k < c->n_counters; k++)
        if (!strcmp(c->counters[k]->name, r->counter_name)) r->counter_val = c->counters[k]->value;
      r->counter_done = 1;
      return;
    }
    default: break;
  }
  if (kind == RQ_HB && h->type == HPL__MSG_REPLY) {
    if (nd->hb_sent_ns) {
      uint64_t us = (hpl__now_ns() - nd->hb_sent_ns) / 1000;
      hpl__ds_h_add(&r->st.hb_lat, us);
      nd->rtt_us = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
      nd->hb_sent_ns = 0;
      r->st.hb_answered++;
    }
  } else if (kind == RQ_ACQUIRE) {
    on_acquire_rep(r, (int32_t)idx, m);
  } else if (kind == RQ_LOCADD) {
    const char *why = NULL;
    int st = hpl__msg_status(m, &why);
    if (st) {
      fprintf(stderr, "bench_dirscale: LOC_ADD refused: %s (%s)\n", hpl_strerror(st), why ? why : "");
      r->locadd_failed++;
    }
    r->locadds_left--;
  } else if (kind == RQ_COUNTERS) {
    r->counter_done = 1; /* refused */
  }
}

/* ------------------------------------------------------------------ input */

static void node_read(hpl__ds_run *r, int i) {
  dsnode *nd = &r->nodes[i];
  for (;;) {
    if (nd->in_cap - nd->in_len < 65536) {
      nd->in_cap = nd->in_cap ? 2 * nd->in_cap : 131072;
      nd->in = realloc(nd->in, nd->in_cap);
      if (!nd->in) abort();
    }
    ssize_t k = recv(nd->w.fd, nd->in + nd->in_len, nd->in_cap - nd->in_len, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (k <= 0) {
      if (!nd->closed) r->st.closed++;
      nd->closed = 1;
      epoll_ctl(r->ep, EPOLL_CTL_DEL, nd->w.fd, NULL);
      return;
    }
    nd->in_len += (size_t)k;
  }
  hpl__frame_limits lim = {.max_msg = 1u << 24, .max_payload = 1u << 24,
                           .max_type = HPL__MSG_MAX_, .tagged = 1};
  size_t at = 0;
  while (nd->in_len - at >= HPL__FRAME_HDR_LEN) {
    hpl__frame_hdr h;
    if (hpl__frame_decode_hdr(nd->in + at, HPL__FRAME_HDR_LEN, &lim, &h, NULL) != 0) {
      fprintf(stderr, "bench_dirscale: node %d: a bad frame header\n", i);
      nd->closed = 1;
      return;
    }
    size_t whole = HPL__FRAME_HDR_LEN + h.msg_len + HPL__FRAME_TAG_LEN + h.payload_len;
    if (nd->in_len - at < whole) break;
    const uint8_t *msg = nd->in + at + HPL__FRAME_HDR_LEN, *tag = msg + h.msg_len;
    hpl__fmac_begin(&nd->w.rx, &h, msg, h.msg_len);
    if (h.flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&nd->w.rx, tag + HPL__FRAME_TAG_LEN, h.payload_len);
    if (hpl__fmac_check(&nd->w.rx, tag) != 0) {
      fprintf(stderr, "bench_dirscale: node %d: a frame fails its MAC\n", i);
      nd->closed = 1;
      return;
    }
    ProtobufCMessage *m = hpl__msg_unpack(h.type, msg, h.msg_len);
    if (m) {
      on_frame(r, i, &h, m);
      protobuf_c_message_free_unpacked(m, NULL);
    }
    at += whole;
  }
  if (at) {
    memmove(nd->in, nd->in + at, nd->in_len - at);
    nd->in_len -= at;
  }
}

/* ------------------------------------------------------------------ the loop */

static void fire(hpl__ds_run *r, tev e) {
  switch (e.kind) {
    case EV_HB: {
      dsnode *nd = &r->nodes[e.idx];
      if (nd->closed) return;
      send_heartbeat(r, (int)e.idx);
      heap_push(r, e.at_ns + (uint64_t)r->hb_ms * 1000000ull, EV_HB, e.idx, 0);
      return;
    }
    case EV_ASK:
      if ((int)e.idx < r->nf && r->f[e.idx].state == HPL__DSF_IDLE) send_acquire(r, (int32_t)e.idx, 0);
      return;
    case EV_DONE:
      if ((int)e.idx < r->nf && r->f[e.idx].gen == e.gen && r->f[e.idx].state == HPL__DSF_RECEIVING)
        fetch_try_done(r, (int32_t)e.idx);
      return;
  }
}

/* One turn: timers due, then sockets (waiting at most until the next
 * timer or `max_ms`). Returns the number of sockets that were ready. */
static int turn(hpl__ds_run *r, int max_ms) {
  uint64_t now = hpl__now_ns();
  while (r->nheap && r->heap[0].at_ns <= now) fire(r, heap_pop(r));
  int wait = max_ms;
  if (r->nheap) {
    uint64_t next = r->heap[0].at_ns;
    int ms = next > now ? (int)((next - now + 999999) / 1000000) : 0;
    if (ms < wait) wait = ms;
  }
  struct epoll_event evs[256];
  int k = epoll_wait(r->ep, evs, 256, wait);
  for (int j = 0; j < k; j++) {
    int i = (int)evs[j].data.u32;
    if (evs[j].events & EPOLLOUT) flush(r, i);
    if (evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) node_read(r, i);
  }
  return k;
}

/* Turns without waiting until no socket is ready: between the blocking
 * handshakes of new nodes, the registered ones' heartbeats and answers
 * keep up (else a registration of 10 000 starves the first ones). */
static void drain(hpl__ds_run *r) {
  while (turn(r, 0) > 0) {
  }
}

void hpl__ds_run_for(hpl__ds_run *r, int64_t ms) {
  uint64_t end = hpl__now_ms() + (uint64_t)ms;
  while (hpl__now_ms() < end) turn(r, (int)(end - hpl__now_ms()));
}

int hpl__ds_wait_registered(hpl__ds_run *r, int64_t timeout_ms) {
  uint64_t end = hpl__now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int reg = 0;
    for (int i = 0; i < r->n; i++) reg += r->nodes[i].registered && !r->nodes[i].closed;
    if (reg == r->n || hpl__now_ms() >= end) return reg;
    turn(r, 50);
  }
}

hpl__ds_run *hpl__ds_start(int port, const char *secret, int n) {
  hpl__ds_run *r = calloc(1, sizeof *r);
  r->n = n;
  r->nodes = calloc((size_t)n, sizeof *r->nodes);
  r->ep = epoll_create1(EPOLL_CLOEXEC);
  randombytes_buf(&r->salt, sizeof r->salt);
  r->salt = (r->salt & 0x7fffffff00000000ull) | (1ull << 62);
  for (int i = 0; i < n; i++) {
    dsnode *nd = &r->nodes[i];
    nd->id = r->salt | (uint64_t)(i + 1);
    char name[32];
    snprintf(name, sizeof name, "ds-%d", i);
    nd->w.fd = hpl__bench_tcp_connect(port);
    if (nd->w.fd < 0 || hpl__bench_wire_handshake(&nd->w, secret, HPL__ROLE_NODE, name) != 0) {
      fprintf(stderr, "bench_dirscale: node %d: cannot connect to the directory: %s\n", i,
              nd->w.fd < 0 ? strerror(errno) : "the handshake failed");
      if (nd->w.fd >= 0) close(nd->w.fd);
      r->n = i;
      hpl__ds_stop(r);
      return NULL;
    }
    fcntl(nd->w.fd, F_SETFL, fcntl(nd->w.fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(r->ep, EPOLL_CTL_ADD, nd->w.fd, &ev);
    Hplpb__RegisterReq reg = HPLPB__REGISTER_REQ__INIT;
    reg.node_id = nd->id;
    reg.addr = "127.0.0.1";
    reg.data_port = 20000 + (uint32_t)(i % 40000);
    reg.capacity = 8ull << 30;
    reg.name = name;
    reg.incarnation = r->salt ^ (uint64_t)i;
    reg.grants = 1;
    node_send(r, i, HPL__MSG_REGISTER, RQ(RQ_REGISTER, (uint64_t)i), &reg.base);
    if (i % 16 == 15) drain(r); /* what came meanwhile, and heartbeats due */
  }
  return r;
}

void hpl__ds_stop(hpl__ds_run *r) {
  if (!r) return;
  for (int i = 0; i < r->n; i++) {
    if (r->nodes[i].w.fd >= 0) close(r->nodes[i].w.fd);
    free(r->nodes[i].in);
    free(r->nodes[i].out);
  }
  close(r->ep);
  free(r->nodes);
  free(r->heap);
  free(r->f);
  free(r->fidx);
  free(r->w);
  free(r);
}

uint32_t hpl__ds_hb_ms(const hpl__ds_run *r) { return r->hb_ms; }

/* ------------------------------------------------------------------ object sets and fetches */

int hpl__ds_objects(hpl__ds_run *r, const char *prefix, int nobjs, const int *src, uint64_t size) {
  free(r->fidx);
  r->fidx = malloc((size_t)nobjs * (size_t)r->n * sizeof *r->fidx);
  if (!r->fidx) return -1;
  memset(r->fidx, 0xff, (size_t)nobjs * (size_t)r->n * sizeof *r->fidx);
  r->nf = r->nw = r->left = 0;
  for (int i = 0; i < r->n; i++) r->nodes[i].receiving = 0; /* the set before is forgotten */
  r->nobjs = nobjs;
  r->size = size;
  snprintf(r->prefix, sizeof r->prefix, "%s", prefix);
  r->locadds_left = nobjs;
  r->locadd_failed = 0;
  char id[48];
  for (int o = 0; o < nobjs; o++) {
    /* the origin's copy: complete, as a put that ended (put.c) */
    hpl__ds_want(r, src[o], o, 0);
    hpl__ds_fetch *f = &r->f[r->nf - 1];
    f->state = HPL__DSF_COMPLETE;
    r->nodes[src[o]].held++;
    f->done_ns = hpl__now_ns();
    snprintf(id, sizeof id, "%s%d", prefix, o);
    Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
    a.id = id;
    a.size = size;
    a.complete = 1;
    a.origin = 1;
    node_send(r, src[o], HPL__MSG_LOC_ADD, RQ(RQ_LOCADD, (uint64_t)o), &a.base);
    if (o % 256 == 255) drain(r);
  }
  uint64_t end = hpl__now_ms() + 30000;
  while (r->locadds_left > 0 && hpl__now_ms() < end) turn(r, 50);
  return r->locadds_left || r->locadd_failed ? -1 : 0;
}

void hpl__ds_want(hpl__ds_run *r, int node, int obj, uint64_t at_ns) {
  if (r->nf == r->capf) {
    r->capf = r->capf ? 2 * r->capf : 4096;
    r->f = realloc(r->f, (size_t)r->capf * sizeof *r->f);
    if (!r->f) abort();
  }
  int32_t fi = r->nf++;
  r->f[fi] = (hpl__ds_fetch){.node = (uint32_t)node, .obj = (uint32_t)obj, .ask_at_ns = at_ns,
                             .waiters = -1};
  r->fidx[(size_t)obj * (size_t)r->n + (size_t)node] = fi;
  if (at_ns) {
    r->left++;
    heap_push(r, at_ns, EV_ASK, (uint32_t)fi, 0);
  }
}

int hpl__ds_wait_fetches(hpl__ds_run *r, int64_t timeout_ms) {
  uint64_t end = hpl__now_ms() + (uint64_t)timeout_ms;
  while (r->left > 0 && hpl__now_ms() < end) turn(r, 50);
  return r->left;
}

const hpl__ds_fetch *hpl__ds_fetches(const hpl__ds_run *r, int *nfetch) {
  *nfetch = r->nf;
  return r->f;
}

const hpl__ds_fetch *hpl__ds_fetch_of(const hpl__ds_run *r, int node, int obj) {
  if (!r->fidx || obj < 0 || obj >= r->nobjs || node < 0 || node >= r->n) return NULL;
  int32_t fi = r->fidx[(size_t)obj * (size_t)r->n + (size_t)node];
  return fi < 0 ? NULL : &r->f[fi];
}

uint64_t hpl__ds_node_id(const hpl__ds_run *r, int i) { return r->nodes[i].id; }

int hpl__ds_node_index(const hpl__ds_run *r, uint64_t id) {
  if ((id & ~0xffffffffull) != r->salt) return -1;
  uint64_t i = (id & 0xffffffffull) - 1;
  return i < (uint64_t)r->n ? (int)i : -1;
}

hpl__ds_stats *hpl__ds_stats_of(hpl__ds_run *r) { return &r->st; }

void hpl__ds_stats_reset(hpl__ds_run *r) { memset(&r->st, 0, sizeof r->st); }

uint64_t hpl__ds_dir_counter(hpl__ds_run *r, const char *name) {
  r->counter_name = name;
  r->counter_val = UINT64_MAX;
  r->counter_done = 0;
  Hplpb__CountersReq c = HPLPB__COUNTERS_REQ__INIT;
  node_send(r, 0, HPL__MSG_COUNTERS, RQ(RQ_COUNTERS, 0), &c.base);
  uint64_t end = hpl__now_ms() + 10000;
  while (!r->counter_done && hpl__now_ms() < end) turn(r, 50);
  return r->counter_val;
}
