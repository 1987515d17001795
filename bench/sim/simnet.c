/* simnet.c - the network and the stores' data movement as fluid flows (see
 * sim.h): hosts with an uplink and a downlink, one stream per receiving
 * copy, each link shared max-min among its streams, and the pipelining of
 * a copy that forwards what it holds while it still receives.
 *
 * What the real stores do, and what is modelled here:
 *  - A sender forwards whatever has arrived (store/dataport.c
 *    hpl__dataport_pump: it writes [pos, o->progress) in chunks of at most
 *    cfg.chunk = 4 MiB, at most SENDER_MAX_INFLIGHT = 2 in flight, and
 *    waits on the object's watchers when it has caught up).
 *  - A receiver's bytes count, and so become servable to the copies behind
 *    it, only as far as whole 128 KiB digest units are verified
 *    (store/puller.c into_verify -> hpl__objdig_verify -> hpl__obj_progress,
 *    HPL__DIGEST_UNIT in src/common/digest.h; --integrity defaults to
 *    sha256, store/server.c). So a partial copy serves its bytes but the
 *    last unit: a receiver caught up with it runs one unit behind, and each
 *    hop of a chain adds unit/rate (plus the latency) to the fill. The
 *    chunk size does not add to it: the sender writes what is verified as
 *    soon as it is (a 4 MiB chunk is the most one write takes).
 *  - A pull starts from the bytes its copy already holds (store/puller.c
 *    hpl__puller_start_into sends PULL from them), so a move re-pulls only
 *    the rest; a receiver ahead of its new sender waits for it.
 * A stream is a flow with a rate: the max-min share of the sender's uplink
 * among its streams, given each stream's demand (the receiver's downlink,
 * and, for a stream caught up with a partial sender, the rate at which that
 * sender's own bytes arrive). Each receiving copy has ONE stream in (one
 * pull per object), so its downlink is not shared in these runs. Rates are
 * recomputed when a stream starts, ends, catches up or its sender's input
 * changes, only where they change (a worklist down the trees of streams).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define EPS 1.0 /* bytes */

static double now(const hpl__sim_net *n) { return n->clk->now; }

double hpl__sim_got(const hpl__sim_net *n, const hpl__sim_host *h) {
  double g = h->got + h->rate_in * (now(n) - h->got_at);
  return g > n->size ? n->size : g;
}

double hpl__sim_servable(const hpl__sim_net *n, const hpl__sim_host *h) {
  if (h->complete) return n->size;
  double g = hpl__sim_got(n, h) - n->unit;
  return g > 0 ? g : 0;
}

/* Bring dst's bytes up to now at the stream's current rate. */
static void settle(hpl__sim_net *n, hpl__sim_flow *f) {
  hpl__sim_host *d = f->dst;
  double add = f->rate * (now(n) - d->got_at);
  if (d->got + add > n->size) add = n->size - d->got;
  if (add > 0) {
    d->got += add;
    n->bytes += add;
    if (f->src_i == 0) n->src_bytes += add;
  }
  d->got_at = now(n);
}

/* ------------------------------------------------------------------ the worklist */

typedef struct {
  uint32_t *v;
  uint8_t *queued;
  uint32_t n;
} worklist;

static worklist wl; /* one simulation at a time per process */

static void push(hpl__sim_net *n, uint32_t h) {
  if (wl.queued[h]) return;
  wl.queued[h] = 1;
  wl.v[wl.n++] = h;
  (void)n;
}

/* The next event of stream f: it catches up with its partial sender, its
 * ahead receiver is overtaken by the sender, or its last byte leaves. */
static void schedule(hpl__sim_net *n, hpl__sim_flow *f) {
  hpl__sim_host *s = f->src, *d = f->dst;
  double at = INFINITY, dg = hpl__sim_got(n, d);
  if (s->complete) {
    if (f->rate > 0) at = now(n) + (n->size - dg) / f->rate;
  } else if (f->tracking == 2) { /* ahead: the sender's servable reaches our bytes */
    if (s->rate_in > 0) at = now(n) + (dg + n->unit - hpl__sim_got(n, s)) / s->rate_in;
  } else if (!f->tracking && f->rate > s->rate_in) {
    at = now(n) + (hpl__sim_got(n, s) - n->unit - dg) / (f->rate - s->rate_in);
  }
  if (isinf(at))
    hpl__sim_cancel(n->clk, &f->tm);
  else
    hpl__sim_at(n->clk, &f->tm, at);
}

/* Max-min shares of sender s's uplink among its streams (water-filling over
 * their demands), then each stream's new rate; a receiver whose rate
 * changed is queued (the streams it forwards depend on it). */
static double *dem;          /* recompute's scratch: demands, */
static hpl__sim_flow **fl;   /* ...their streams */
static uint8_t *met;         /* ...and which are met */
static uint32_t cap;

static void recompute(hpl__sim_net *n, hpl__sim_host *s) {
  if (s->nout > cap) {
    cap = s->nout * 2;
    dem = realloc(dem, cap * sizeof *dem);
    fl = realloc(fl, cap * sizeof *fl);
    met = realloc(met, cap);
    if (!dem || !fl || !met) abort();
  }
  n->recomputes++;
  uint32_t k = 0;
  /* what s serves, not clamped at 0: a receiver waits for s's first unit */
  double sv = hpl__sim_got(n, s) - n->unit;
  for (hpl__sim_flow *f = s->outs; f; f = f->snext, k++) {
    fl[k] = f;
    hpl__sim_host *d = f->dst;
    double dg = hpl__sim_got(n, d), want = d->down;
    f->tracking = 0;
    if (!s->complete) {
      if (dg > sv + EPS) f->tracking = 2;
      else if (dg >= sv - EPS) f->tracking = 1;
    }
    if (f->tracking == 1 && s->rate_in < want) want = s->rate_in;
    if (f->tracking == 2 || s->stopped || d->stopped) want = 0;
    dem[k] = want;
  }
  /* water-filling: the smallest demands are met first, the rest share */
  double left = s->stopped ? 0 : s->up;
  uint32_t rem = k;
  uint8_t *done = met;
  if (k) memset(done, 0, k);
  while (rem) {
    double fair = left / rem;
    int any = 0;
    for (uint32_t i = 0; i < k; i++) {
      if (done[i] || dem[i] > fair) continue;
      done[i] = 1;
      left -= dem[i];
      rem--;
      any = 1;
    }
    if (!any) {
      for (uint32_t i = 0; i < k; i++)
        if (!done[i]) dem[i] = fair;
      break;
    }
  }
  for (uint32_t i = 0; i < k; i++) {
    hpl__sim_flow *f = fl[i];
    if (fabs(dem[i] - f->rate) > 1e-6 * (f->rate + 1)) {
      settle(n, f);
      f->rate = dem[i];
      f->dst->rate_in = dem[i];
      n->rate_changes++;
      push(n, f->dst_i);
    }
    schedule(n, f);
  }
}

static void drain(hpl__sim_net *n) {
  while (wl.n) {
    uint32_t h = wl.v[--wl.n];
    wl.queued[h] = 0;
    recompute(n, &n->hosts[h]);
  }
}

/* ------------------------------------------------------------------ streams */

void hpl__sim_net_init(hpl__sim_net *n, hpl__sim_clock *c, uint32_t nhosts, double bits,
                       double eff, double lat, double size, double unit) {
  memset(n, 0, sizeof *n);
  n->clk = c;
  n->nhosts = nhosts;
  n->size = size;
  n->unit = unit;
  n->lat = lat;
  n->hosts = calloc(nhosts, sizeof *n->hosts);
  wl.v = calloc(nhosts, sizeof *wl.v);
  wl.queued = calloc(nhosts, 1);
  wl.n = 0;
  if (!n->hosts || !wl.v || !wl.queued) abort();
  for (uint32_t i = 0; i < nhosts; i++) {
    n->hosts[i].up = n->hosts[i].down = bits * eff / 8;
  }
  n->hosts[0].complete = 1;
  n->hosts[0].got = size;
}

void hpl__sim_net_free(hpl__sim_net *n) {
  for (uint32_t i = 0; i < n->nhosts; i++)
    while (n->hosts[i].outs) hpl__sim_flow_end(n, n->hosts[i].outs);
  free(n->hosts);
  free(wl.v);
  free(wl.queued);
  memset(&wl, 0, sizeof wl);
  free(dem);
  free(fl);
  free(met);
  dem = NULL;
  fl = NULL;
  met = NULL;
  cap = 0;
  n->hosts = NULL;
}

/* The net a stream belongs to, for its timer (one simulation at a time). */
static hpl__sim_net *cur_net;

static void stream_event(hpl__sim_timer *t) {
  hpl__sim_flow *f = (hpl__sim_flow *)((char *)t - offsetof(hpl__sim_flow, tm));
  hpl__sim_net *n = cur_net;
  settle(n, f);
  if (f->src->complete && f->dst->got >= n->size - EPS) {
    f->dst->got = n->size;
    hpl__sim_cancel(n->clk, &f->tm);
    n->arrived(f); /* the store model ends the stream */
    return;
  }
  push(n, f->src_i); /* caught up, or overtaken: its state changes */
  drain(n);
}

hpl__sim_flow *hpl__sim_flow_start(hpl__sim_net *n, uint32_t src, uint32_t dst, void *owner) {
  cur_net = n;
  hpl__sim_flow *f = calloc(1, sizeof *f);
  if (!f) abort();
  f->src = &n->hosts[src];
  f->dst = &n->hosts[dst];
  f->src_i = src;
  f->dst_i = dst;
  f->owner = owner;
  f->tm.fn = stream_event;
  f->dst->got = hpl__sim_got(n, f->dst);
  f->dst->got_at = now(n);
  f->dst->rate_in = 0;
  f->dst->in = f;
  f->snext = f->src->outs;
  if (f->src->outs) f->src->outs->sprev = f;
  f->src->outs = f;
  f->src->nout++;
  if (f->src->nout > n->max_fanout) n->max_fanout = f->src->nout;
  push(n, src);
  drain(n);
  return f;
}

void hpl__sim_flow_end(hpl__sim_net *n, hpl__sim_flow *f) {
  settle(n, f);
  hpl__sim_cancel(n->clk, &f->tm);
  hpl__sim_host *s = f->src, *d = f->dst;
  if (f->sprev) f->sprev->snext = f->snext;
  else s->outs = f->snext;
  if (f->snext) f->snext->sprev = f->sprev;
  s->nout--;
  if (d->in == f) {
    d->in = NULL;
    d->rate_in = 0;
  }
  push(n, f->src_i);
  push(n, f->dst_i);
  free(f);
  drain(n);
}

void hpl__sim_host_stop(hpl__sim_net *n, uint32_t h, int stopped) {
  hpl__sim_host *x = &n->hosts[h];
  x->stopped = stopped;
  push(n, h);
  if (x->in) push(n, x->in->src_i);
  drain(n);
}

void hpl__sim_host_complete(hpl__sim_net *n, uint32_t h) {
  hpl__sim_host *x = &n->hosts[h];
  x->got = n->size;
  x->got_at = now(n);
  x->rate_in = 0;
  x->complete = 1;
  push(n, h);
  drain(n);
}
