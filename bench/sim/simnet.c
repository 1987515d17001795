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
 *    it, only as far as whole digest units are verified (32 KiB up to
 *    4 MiB, 64 KiB up to 8 MiB, 128 KiB above: hpl__digest_unit)
 *    (store/puller.c into_verify -> hpl__objdig_verify -> hpl__obj_progress,
 *    src/common/digest.h; --integrity defaults to
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
 * lower while a receiving process still faults its read buffer in: the
 * plain TCP chain's relays, n->touch, simcpu.c;
 * and, for a stream caught up with a partial sender, the rate at which that
 * sender's own bytes arrive). Each receiving copy has ONE stream in (one
 * pull per object), so its downlink is not shared in these runs. Rates are
 * recomputed when a stream starts, ends, catches up or its sender's input
 * changes, only where they change (a worklist down the trees of streams).
 *
 * One uplink carrying many streams (a star: --max-senders large) would
 * make every new stream change the rate of all the others, a settle and a
 * reschedule each: O(n) per start, O(n^2) per broadcast. So the streams
 * from a complete copy to running receivers (whose downlinks are alike)
 * form the sender's group: they all run at its one share, their bytes are
 * kept as a virtual service V(t) (the bytes each got since the group
 * began), and their ends are a heap by the V at which each completes. A
 * change of the share is O(1) (plus the group's receivers that forward,
 * whose own streams follow it), a start or an end O(log n).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define EPS 1.0 /* bytes */

static double now(const hpl__sim_net *n) { return n->clk->now; }

/* The group's virtual service now. */
static double vnow(const hpl__sim_net *n, const hpl__sim_host *s) {
  return s->V + s->share * (now(n) - s->V_at);
}

/* The rate at which h's bytes arrive now. */
static double rin(const hpl__sim_host *h) {
  return h->in && h->in->grouped ? h->in->src->share : h->rate_in;
}

double hpl__sim_got(const hpl__sim_net *n, const hpl__sim_host *h) {
  double g;
  if (h->in && h->in->grouped)
    g = h->in->base + vnow(n, h->in->src) - h->in->vjoin;
  else
    g = h->got + h->rate_in * (now(n) - h->got_at);
  return g > n->size ? n->size : g;
}

double hpl__sim_servable(const hpl__sim_net *n, const hpl__sim_host *h) {
  if (h->complete) return n->size;
  double g = hpl__sim_got(n, h) - n->unit;
  return g > 0 ? g : 0;
}

/* What h's downlink takes in now: its rate, or less while its first reads
 * still fault its buffer in (n->touch, simcpu.c). */
static double down_now(const hpl__sim_net *n, const hpl__sim_host *h) {
  if (n->touch > 0 && h->down > n->touch_down && hpl__sim_got(n, h) < n->touch - 2 * EPS)
    return n->touch_down; /* (schedule's event lands at touch - EPS: past this) */
  return h->down;
}

/* Bring dst's bytes up to now at the stream's current rate. */
static void settle(hpl__sim_net *n, hpl__sim_flow *f) {
  hpl__sim_host *d = f->dst;
  if (f->grouped) return; /* its bytes follow the group's V */
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
    if (rin(s) > 0) at = now(n) + (dg + n->unit - hpl__sim_got(n, s)) / rin(s);
  } else if (!f->tracking && f->rate > rin(s)) {
    at = now(n) + (hpl__sim_got(n, s) - n->unit - dg) / (f->rate - rin(s));
  }
  if (f->rate > 0 && down_now(n, d) < d->down) /* when d's buffer is in: faster */
    at = fmin(at, now(n) + (n->touch - EPS - dg) / f->rate);
  if (isinf(at))
    hpl__sim_cancel(n->clk, &f->tm);
  else
    hpl__sim_at(n->clk, &f->tm, at);
}

/* ------------------------------------------------------------------ the group */

static double gkey(const hpl__sim_flow *f) { return f->vjoin - f->base; }

static void gput(hpl__sim_host *s, uint32_t i, hpl__sim_flow *f) {
  s->gheap[i] = f;
  f->gidx = i;
}

static void gup(hpl__sim_host *s, uint32_t i) {
  hpl__sim_flow *f = s->gheap[i];
  while (i > 1 && gkey(s->gheap[i / 2]) > gkey(f)) {
    gput(s, i, s->gheap[i / 2]);
    i /= 2;
  }
  gput(s, i, f);
}

static void gdown(hpl__sim_host *s, uint32_t i) {
  hpl__sim_flow *f = s->gheap[i];
  for (;;) {
    uint32_t k = 2 * i;
    if (k > s->gn) break;
    if (k < s->gn && gkey(s->gheap[k + 1]) < gkey(s->gheap[k])) k++;
    if (gkey(s->gheap[k]) >= gkey(f)) break;
    gput(s, i, s->gheap[k]);
    i = k;
  }
  gput(s, i, f);
}

/* The group's next end: when V reaches size + the smallest key. */
static void group_schedule(hpl__sim_net *n, hpl__sim_host *s) {
  if (!s->gn || s->share <= 0) {
    hpl__sim_cancel(n->clk, &s->gtm);
    return;
  }
  double left = n->size + gkey(s->gheap[1]) - vnow(n, s);
  hpl__sim_at(n->clk, &s->gtm, now(n) + (left > 0 ? left / s->share : 0));
}

static void push(hpl__sim_net *n, uint32_t h);

static void set_share(hpl__sim_net *n, hpl__sim_host *s, double r) {
  if (fabs(r - s->share) <= 1e-6 * (s->share + 1)) return;
  s->V = vnow(n, s);
  s->V_at = now(n);
  s->share = r;
  n->rate_changes++;
  group_schedule(n, s);
  if (s->gfwd) /* receivers that forward: their streams follow the new rate */
    for (uint32_t i = 1; i <= s->gn; i++)
      if (s->gheap[i]->dst->nout) push(n, s->gheap[i]->dst_i);
}

static void outs_unlink(hpl__sim_host *s, hpl__sim_flow *f) {
  if (f->sprev) f->sprev->snext = f->snext;
  else s->outs = f->snext;
  if (f->snext) f->snext->sprev = f->sprev;
  f->snext = f->sprev = NULL;
}

static void outs_link(hpl__sim_host *s, hpl__sim_flow *f) {
  f->sprev = NULL;
  f->snext = s->outs;
  if (s->outs) s->outs->sprev = f;
  s->outs = f;
}

static void group_join(hpl__sim_net *n, hpl__sim_flow *f) {
  hpl__sim_host *s = f->src, *d = f->dst;
  settle(n, f);
  hpl__sim_cancel(n->clk, &f->tm);
  outs_unlink(s, f);
  if (!s->gn) {
    s->gdemand = d->down;
    s->V = 0;
    s->V_at = now(n);
  }
  if (s->gn == s->gcap) {
    s->gcap = s->gcap ? 2 * s->gcap : 16;
    s->gheap = realloc(s->gheap, (s->gcap + 1) * sizeof *s->gheap);
    if (!s->gheap) abort();
  }
  f->vjoin = vnow(n, s);
  f->base = d->got;
  f->grouped = 1;
  gput(s, ++s->gn, f);
  gup(s, s->gn);
  if (d->nout) {
    s->gfwd++;
    push(n, f->dst_i); /* its rate is the share now: its own streams follow */
  }
  group_schedule(n, s);
}

static void group_leave(hpl__sim_net *n, hpl__sim_flow *f) {
  hpl__sim_host *s = f->src, *d = f->dst;
  double g = hpl__sim_got(n, d);
  if (g > f->base) {
    n->bytes += g - f->base;
    if (f->src_i == 0) n->src_bytes += g - f->base;
  }
  d->got = g;
  d->got_at = now(n);
  d->rate_in = f->rate = s->share;
  f->grouped = 0;
  uint32_t i = f->gidx;
  hpl__sim_flow *last = s->gheap[s->gn--];
  if (i <= s->gn) {
    gput(s, i, last);
    gup(s, i);
    gdown(s, last->gidx);
  }
  if (d->nout) s->gfwd--;
  outs_link(s, f);
  group_schedule(n, s);
}

/* A stream may run in its sender's group: from a complete copy, to a
 * running receiver whose downlink (past its first-touch phase) is the
 * group's demand. */
static int groupable(const hpl__sim_net *n, const hpl__sim_host *s, const hpl__sim_flow *f) {
  return s->complete && !f->dst->stopped && down_now(n, f->dst) == f->dst->down &&
         (!s->gn || f->dst->down == s->gdemand);
}

/* Max-min shares of sender s's uplink among its streams (water-filling over
 * their demands), then each stream's new rate; a receiver whose rate
 * changed is queued (the streams it forwards depend on it). */
static double *dem;          /* recompute's scratch: demands, */
static hpl__sim_flow **fl;   /* ...their streams */
static uint8_t *met;         /* ...and which are met */
static uint32_t cap;

static void recompute(hpl__sim_net *n, hpl__sim_host *s) {
  for (hpl__sim_flow *f = s->outs, *nx; f; f = nx) {
    nx = f->snext;
    if (groupable(n, s, f)) group_join(n, f);
  }
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
    double dg = hpl__sim_got(n, d), want = down_now(n, d);
    f->tracking = 0;
    if (!s->complete) {
      if (dg > sv + EPS) f->tracking = 2;
      else if (dg >= sv - EPS) f->tracking = 1;
    }
    if (f->tracking == 1 && rin(s) < want) want = rin(s);
    if (f->tracking == 2 || s->stopped || d->stopped) want = 0;
    dem[k] = want;
  }
  /* water-filling: the smallest demands are met first, the rest share; the
   * group counts as gn streams of demand gdemand */
  double left = s->stopped ? 0 : s->up, gshare = 0;
  uint32_t rem = k + s->gn;
  int gdone = s->gn == 0;
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
    if (!gdone && s->gdemand <= fair) {
      gdone = 1;
      gshare = s->gdemand;
      left -= s->gn * s->gdemand;
      rem -= s->gn;
      any = 1;
    }
    if (!any) {
      for (uint32_t i = 0; i < k; i++)
        if (!done[i]) dem[i] = fair;
      if (!gdone) gshare = fair;
      break;
    }
  }
  if (s->gn) set_share(n, s, s->stopped ? 0 : gshare);
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

static void group_event(hpl__sim_timer *t);

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
    n->hosts[i].gtm.fn = group_event;
  }
  n->hosts[0].complete = 1;
  n->hosts[0].got = size;
}

void hpl__sim_net_free(hpl__sim_net *n) {
  for (uint32_t i = 0; i < n->nhosts; i++) {
    hpl__sim_host *h = &n->hosts[i];
    while (h->gn) hpl__sim_flow_end(n, h->gheap[1]);
    while (h->outs) hpl__sim_flow_end(n, h->outs);
    hpl__sim_cancel(n->clk, &h->gtm);
    free(h->gheap);
  }
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

/* The group's first stream has all its bytes: it leaves the group and ends
 * as any stream does (the store model ends it). */
static void group_event(hpl__sim_timer *t) {
  hpl__sim_host *s = (hpl__sim_host *)((char *)t - offsetof(hpl__sim_host, gtm));
  hpl__sim_net *n = cur_net;
  if (!s->gn) return;
  hpl__sim_flow *f = s->gheap[1];
  group_leave(n, f);
  f->dst->got = n->size;
  n->arrived(f);
  group_schedule(n, s);
}

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
  outs_link(f->src, f);
  if (f->src->nout++ == 0 && f->src->in && f->src->in->grouped) f->src->in->src->gfwd++;
  if (f->src->nout > n->max_fanout) n->max_fanout = f->src->nout;
  push(n, src);
  drain(n);
  return f;
}

void hpl__sim_flow_end(hpl__sim_net *n, hpl__sim_flow *f) {
  if (f->grouped) group_leave(n, f);
  settle(n, f);
  hpl__sim_cancel(n->clk, &f->tm);
  hpl__sim_host *s = f->src, *d = f->dst;
  outs_unlink(s, f);
  if (--s->nout == 0 && s->in && s->in->grouped) s->in->src->gfwd--;
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
  if (stopped && x->in && x->in->grouped) group_leave(n, x->in);
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
