/* bench_dirscale_fetch.c - what bench_dirscale's emulated nodes say to the
 * directory (see bench_dirscale.h), as a store's directory link does
 * (store/dlconn.c, store/dirlink.c, store/fetch.c): a HEARTBEAT every
 * interval listing the copies arriving, ACQUIRE for a fetch, LOC_NOTE
 * COMPLETE when its modelled copy is whole, answers to PROBE and DROP, a
 * new ACQUIRE naming the failed peer on UPSTREAM_GONE; and the object sets
 * and fetches a phase asks for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dirscale_int.h"

/* ------------------------------------------------------------------ what a store sends */

void hpl__ds_send_heartbeat(hpl__ds_run *r, int i) {
  hpl__ds_node *nd = &r->nodes[i];
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
  hpl__ds_send(r, i, HPL__MSG_HEARTBEAT, HPL__DS_RQ(HPL__DS_RQ_HB, (uint64_t)i), &hb.base);
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
  hpl__ds_send(r, (int)f->node, HPL__MSG_ACQUIRE, HPL__DS_RQ(HPL__DS_RQ_ACQUIRE, (uint64_t)fi), &a.base);
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
  hpl__ds_send(r, (int)f->node, HPL__MSG_LOC_NOTE, 0, &n.base);
  uint64_t hop = (uint64_t)(hpl__ds.hop_ms * 1e6);
  for (int32_t k = f->waiters; k >= 0; k = r->w[k].next)
    hpl__ds_timer(r, now + hop, HPL__DS_EV_DONE, (uint32_t)r->w[k].fetch, r->w[k].gen);
  f->waiters = -1;
}

/* HPL__DS_EV_DONE: its own bytes' time is up; whole once its sender's copy is,
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
    if (s->done_ns + hop > now) hpl__ds_timer(r, s->done_ns + hop, HPL__DS_EV_DONE, (uint32_t)fi, f->gen);
    else fetch_complete(r, fi);
    return;
  }
  if (r->nw == r->capw) {
    r->capw = r->capw ? 2 * r->capw : 1024;
    r->w = realloc(r->w, (size_t)r->capw * sizeof *r->w);
    if (!r->w) abort();
  }
  r->w[r->nw] = (hpl__ds_waiter){.fetch = fi, .gen = f->gen, .next = s->waiters};
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
  hpl__ds_timer(r, now + (uint64_t)(hpl__ds.xfer_ms * 1e6), HPL__DS_EV_DONE, (uint32_t)fi, f->gen);
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

void hpl__ds_on_frame(hpl__ds_run *r, int i, const hpl__frame_hdr *h, const ProtobufCMessage *m) {
  hpl__ds_node *nd = &r->nodes[i];
  int kind = h->req_id ? HPL__DS_RQ_KIND(h->req_id) : 0;
  uint64_t idx = HPL__DS_RQ_IDX(h->req_id);
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
      hpl__ds_timer(r, hpl__now_ns() + off, HPL__DS_EV_HB, (uint32_t)i, 0);
      return;
    }
    case HPL__MSG_PROBE: { /* answered at once with a heartbeat (dlconn.c) */
      r->st.probes++;
      Hplpb__Heartbeat hb = HPLPB__HEARTBEAT__INIT;
      hb.node_id = nd->id;
      hb.sent_us = hpl__now_ns() / 1000;
      hpl__ds_send(r, i, HPL__MSG_HEARTBEAT, 0, &hb.base);
      return;
    }
    case HPL__MSG_DROP:
      r->st.drops++;
      if (h->req_id) {
        Hplpb__Reply rep = HPLPB__REPLY__INIT;
        hpl__ds_send(r, i, HPL__MSG_REPLY, h->req_id, &rep.base);
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
  if (kind == HPL__DS_RQ_HB && h->type == HPL__MSG_REPLY) {
    if (nd->hb_sent_ns) {
      uint64_t us = (hpl__now_ns() - nd->hb_sent_ns) / 1000;
      hpl__ds_h_add(&r->st.hb_lat, us);
      nd->rtt_us = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
      nd->hb_sent_ns = 0;
      r->st.hb_answered++;
    }
  } else if (kind == HPL__DS_RQ_ACQUIRE) {
    on_acquire_rep(r, (int32_t)idx, m);
  } else if (kind == HPL__DS_RQ_LOCADD) {
    const char *why = NULL;
    int st = hpl__msg_status(m, &why);
    if (st) {
      fprintf(stderr, "bench_dirscale: LOC_ADD refused: %s (%s)\n", hpl_strerror(st), why ? why : "");
      r->locadd_failed++;
    }
    r->locadds_left--;
  } else if (kind == HPL__DS_RQ_COUNTERS) {
    r->counter_done = 1; /* refused */
  }
}


void hpl__ds_fetch_event(hpl__ds_run *r, uint32_t kind, uint32_t idx, uint32_t gen) {
  if ((int)idx >= r->nf) return;
  if (kind == HPL__DS_EV_ASK && r->f[idx].state == HPL__DSF_IDLE) send_acquire(r, (int32_t)idx, 0);
  if (kind == HPL__DS_EV_DONE && r->f[idx].gen == gen && r->f[idx].state == HPL__DSF_RECEIVING)
    fetch_try_done(r, (int32_t)idx);
}

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
    hpl__ds_send(r, src[o], HPL__MSG_LOC_ADD, HPL__DS_RQ(HPL__DS_RQ_LOCADD, (uint64_t)o), &a.base);
    if (o % 256 == 255) hpl__ds_drain(r);
  }
  uint64_t end = hpl__now_ms() + 30000;
  while (r->locadds_left > 0 && hpl__now_ms() < end) hpl__ds_turn(r, 50);
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
    hpl__ds_timer(r, at_ns, HPL__DS_EV_ASK, (uint32_t)fi, 0);
  }
}

int hpl__ds_wait_fetches(hpl__ds_run *r, int64_t timeout_ms) {
  uint64_t end = hpl__now_ms() + (uint64_t)timeout_ms;
  while (r->left > 0 && hpl__now_ms() < end) hpl__ds_turn(r, 50);
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

