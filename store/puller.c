/* puller.c - one byte stream pulled from a peer's data port (see puller.h).
 *
 * Connect, send PULL from the offset wanted, check the reply's size, then
 * receive the payload straight into the owner's memory (no intermediate
 * copy). A monitor timer samples progress: a stream that delivers nothing
 * for a quiet window (derived from the rate it has been seeing) makes the
 * owner suspect the sender, and the stream goes on; one that delivers
 * nothing for stall_timeout_ms has stalled; one from a complete sender that
 * delivers below straggler_ratio of this store's usual rate for
 * straggler_ms is a straggler. Either ends the pull with HPL_ETIMEDOUT and
 * the owner decides what next.
 */
#include "puller.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"
#include "uvconn.h"

#define MONITOR_TICK_MS 50
#define SAMPLE_TICKS 5 /* a rate sample every 250 ms */
#define RING_SPAN_MS (31 * MONITOR_TICK_MS * SAMPLE_TICKS) /* the oldest of 32 samples */
/* A tick this much later than due means our own loop stalled (or the
 * process was stopped): the sender is not to blame for that silence. */
#define TICK_LATE_MS 100

/* The module's context (s->pullers). */
typedef struct st_pullers {
  st_puller *list;       /* every pull running (utlist) */
  double rate_ewma;      /* bytes/s of recent pulls from complete senders */
  double last_pull_rate; /* of the pull that just completed (0: not measured) */
  unsigned straggler_streak; /* senders judged stragglers since a pull last went at a
                                healthy rate: our own link may be the slow one, so
                                each one widens the window */
} st_pullers;

struct st_puller {
  struct st_puller *prev, *next; /* s->pullers->list (utlist) */
  store *s;
  puller_ops ops;
  void *arg;
  st_obj *into;     /* puller_start_into: the object the bytes land in */
  int into_progress; /*   ...and whether they are its progress */
  char key[320];
  int internal;
  uv_tcp_t *tcp; /* while connecting */
  uv_connect_t creq;
  hpl__conn *c;
  uint64_t start; /* stream offset requested */
  uint64_t size;  /* whole stream size */
  uint64_t got;   /* bytes received after start */
  int finished;   /* done, failed or cancelled: ignore further events */
  int paused;     /* the owner has no room: not a stall */
  uv_timer_t monitor;
  uint64_t last_move_ms; /* when bytes last arrived */
  uint64_t slow_next_ms; /* monitor 1: next time a crawl may be reported */
  uint64_t started_ms;
  uint64_t samp_ms[32], samp_got[32]; /* (time, bytes) every sample, a ring */
  int nsamp;
  unsigned ticks;
  uint64_t last_tick_ms;
  double rate;            /* bytes/s while bytes flow (EWMA of samples, 0: unknown) */
  int suspecting;         /* `suspect` called, owner not done yet */
  uint64_t noted_move_ms; /* last_move_ms when the QUIET note went out (one per quiet spell) */
  uint64_t suspect_after; /* no `suspect` call before this time */
  int closes; /* handles still closing after the end */
  char label[48];
};

/* The puller is freed once its timer and (if it was still connecting) its
 * socket have closed: libuv may run the connect callback while closing. */
static void puller_release(st_puller *p) {
  if (--p->closes > 0) return;
  free(p);
}

static void puller_handle_closed(uv_handle_t *h) {
  st_puller *p = h->data;
  if (h != (uv_handle_t *)&p->monitor) free(h);
  puller_release(p);
}

/* The stream is over (done, failed or cancelled): release everything and,
 * unless cancelled, tell the owner. */
static void puller_end(st_puller *p, int status, const char *detail, int report) {
  if (p->finished) return;
  p->finished = 1;
  DL_DELETE(p->s->pullers->list, p);
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
  uv_timer_stop(&p->monitor);
  uv_close((uv_handle_t *)&p->monitor, puller_handle_closed);
  if (report) p->ops.done(p->arg, status, detail);
}

/* A pull that has moved `got` bytes at `rate`, at least 4 MiB at half
 * this node's usual rate or more, shows the node's own link is healthy. */
static int healthy_pull(const store *s, uint64_t got, double rate) {
  return got >= (4u << 20) && rate >= 0.5 * s->pullers->rate_ewma;
}

/* ------------------------------------------------------------------ into an object
 *
 * A pull into an object (puller_start_into) receives straight into its
 * buffer, and here received bytes become the object's: its progress, which
 * the data port serves on and gets wait for. Bytes that have arrived are
 * counted here and nowhere else. */

static uint8_t *into_buf(st_puller *p, uint64_t at, size_t *len) {
  uint64_t room = p->into->size - at;
  *len = room > (1u << 30) ? (1u << 30) : (size_t)room;
  return p->into->data + at;
}

/* Bytes [at, at + n) of the stream are in the object. */
static void into_arrived(st_puller *p, uint64_t at, size_t n) {
  if (p->into_progress) store_obj_progress(p->s, p->into, at + n);
  if (p->ops.got) p->ops.got(p->arg, at, n);
}

/* ------------------------------------------------------------------ the stream */

static uint8_t *sink_buf(hpl__conn *c, void *arg, uint64_t off, size_t *len) {
  (void)c;
  st_puller *p = arg;
  if (p->into) return into_buf(p, p->start + off, len);
  return p->ops.buf(p->arg, p->start + off, len);
}

static void sink_got(hpl__conn *c, void *arg, uint64_t off, size_t n) {
  (void)c;
  st_puller *p = arg;
  if (p->finished) return;
  store *s = p->s;
  s->ctr.data_bytes_received += n;
  p->got = off + n;
  p->last_move_ms = hpl__now_ms();
  if (p->into)
    into_arrived(p, p->start + off, n);
  else
    p->ops.got(p->arg, p->start + off, n);
  if (!p->finished && p->start + p->got == p->size) {
    /* a full-speed sample for the straggler baseline */
    st_pullers *pc = s->pullers;
    uint64_t el = hpl__now_ms() - p->started_ms;
    pc->last_pull_rate = 0;
    double rate = el > 0 ? (double)p->got * 1000.0 / (double)el : 0;
    if (healthy_pull(s, p->got, rate)) pc->straggler_streak = 0;
    if (p->ops.monitor == 2 && p->got >= (4u << 20) && el > 0) {
      pc->rate_ewma = pc->rate_ewma > 0 ? 0.7 * pc->rate_ewma + 0.3 * rate : rate;
      pc->last_pull_rate = rate; /* reported to the directory (reduce cost model) */
    } else if (p->ops.monitor == 1 && p->ops.slow && p->got >= (4u << 20) &&
               rate > pc->rate_ewma) {
      /* a partial sender is as fast as its upstream at most: it may only
       * raise the baseline (most receivers of a chain never see a complete
       * sender) */
      pc->rate_ewma = pc->rate_ewma > 0 ? 0.7 * pc->rate_ewma + 0.3 * rate : rate;
    }
    puller_end(p, 0, NULL, 1);
  }
}

static void on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
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
  hpl__sink sk = {.buf = sink_buf, .got = sink_got, .arg = p};
  hpl__conn_recv_payload(c, &sk);
}

static void on_close(hpl__conn *c, int status) {
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

static void on_connect(uv_connect_t *req, int status) {
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
                      .on_frame = on_frame,
                      .on_close = on_close,
                      .data = p,
                      .label = p->label,
                      .auth = &p->s->cfg.auth,
                      .auth_role = HPL__ROLE_STORE,
                      .auth_failures = &p->s->ctr.auth_failures};
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

uint64_t puller_quiet_window_ms(double rate, uint64_t cap_ms) {
  uint64_t w = 1000;
  if (rate > 0) w = 100 + (uint64_t)(12.0 * (double)(1u << 20) * 1000.0 / rate);
  if (cap_ms && w > cap_ms) w = cap_ms;
  return w;
}

/* The rate the stream has been seeing: its samples, else what arrived so
 * far (a short stream), else this store's usual rate (0: unknown). */
static double stream_rate(const st_puller *p) {
  if (p->rate > 0) return p->rate;
  if (p->got >= (1u << 20)) {
    uint64_t el = p->last_move_ms > p->started_ms ? p->last_move_ms - p->started_ms : 1;
    return (double)p->got * 1000.0 / (double)el;
  }
  return p->s->pullers->rate_ewma;
}

/* Suspicion: no bytes for the quiet window while we have room. */
static void check_quiet(st_puller *p, uint64_t now) {
  store *s = p->s;
  if (!p->ops.suspect || p->suspecting || p->paused || now < p->suspect_after) return;
  double rate = stream_rate(p);
  uint64_t quiet = now - p->last_move_ms;
  uint64_t window = puller_quiet_window_ms(rate, s->cfg.stall_timeout_ms);
  if (quiet >= window / 2 && p->ops.quiet && p->ops.peer &&
      p->noted_move_ms != p->last_move_ms && p->ops.quiet(s, p->ops.peer))
    p->noted_move_ms = p->last_move_ms; /* one report per quiet spell */
  if (quiet < window) return;
  p->suspecting = 1;
  s->ctr.pull_suspects++;
  p->ops.suspect(p->arg, quiet);
}

void puller_suspect_done(st_puller *p, uint64_t retry_ms) {
  if (!p || p->finished) return;
  if (!retry_ms) retry_ms = puller_quiet_window_ms(stream_rate(p), p->s->cfg.stall_timeout_ms);
  p->suspecting = 0;
  p->suspect_after = hpl__now_ms() + retry_ms;
}

/* A rate sample (every SAMPLE_TICKS): the ring for the straggler check and
 * the stream's rate while bytes flow. */
static void take_sample(st_puller *p, uint64_t now) {
  int k = p->nsamp % 32;
  if (p->nsamp > 0) {
    int j = (p->nsamp - 1) % 32;
    uint64_t dt = now - p->samp_ms[j], dg = p->got - p->samp_got[j];
    if (dt > 0 && dg > 0 && now - p->last_move_ms < dt) {
      /* over the part of the interval the bytes flowed in: a sender that
       * went quiet mid-interval must not lower the rate its quiet window
       * is derived from (a stream stopped 150 ms after its start got a
       * 350-410 ms window instead of about 210 ms at 1 Gbit/s). The test
       * above puts last_move_ms inside the interval. */
      uint64_t flow = p->last_move_ms - p->samp_ms[j];
      if (flow < MONITOR_TICK_MS) flow = MONITOR_TICK_MS;
      double r = (double)dg * 1000.0 / (double)flow;
      p->rate = p->rate > 0 ? 0.6 * p->rate + 0.4 * r : r;
      /* a pull going at a healthy rate ends a streak of stragglers as a
       * healthy pull's end does: the node's own link is fine again, and its
       * next crawl is judged on the short window (before, a node slowed
       * once kept the long window until some pull completed) */
      if (healthy_pull(p->s, p->got, p->rate)) p->s->pullers->straggler_streak = 0;
    }
  }
  p->samp_ms[k] = now;
  p->samp_got[k] = p->got;
  p->nsamp++;
}

/* The stream's rate over the last `win_ms` at least: from the newest
 * sample that old to now. 0 and *secs 0 when no sample is that old. */
static double rate_since(const st_puller *p, uint64_t now, uint64_t win_ms, double *secs) {
  *secs = 0;
  int n = p->nsamp < 32 ? p->nsamp : 32;
  for (int i = 1; i <= n; i++) {
    int j = (p->nsamp - i) % 32;
    if (now - p->samp_ms[j] < win_ms) continue;
    *secs = (double)(now - p->samp_ms[j]) / 1000.0;
    return *secs > 0 ? (double)(p->got - p->samp_got[j]) / *secs : 0;
  }
  return 0;
}

/* The straggler check, every tick (see the top of this file). The window
 * adapts to what waiting would cost: a stream crawling (below
 * straggler_ratio of this store's usual rate) for straggler_ms is a
 * straggler; so is one crawling for half that when finishing at its
 * current rate would take more than STRAGGLER_EARLY times what moving
 * takes at the usual rate (the bytes left: a copy's pull resumes from its
 * offset). So a copy's crawl is always judged after half the window.
 * A reduce stream that starts over elsewhere is reported after a quarter
 * of the window as soon as finishing at the crawl would take longer than
 * the whole stream at the usual rate, and never while it would not: a
 * restart then only costs more. (With 4x instead, a stream slowed 10x
 * after 60% waited the whole window and then restarted anyway: 256 MiB
 * reduces slowed at 64-83% ended 1 s over the floor.) */
#define STRAGGLER_EARLY 4.0
static void check_straggler(st_puller *p, uint64_t now) {
  store *s = p->s;
  char detail[200];
  if (p->ops.monitor < 1 || s->cfg.straggler_ratio <= 0 || !s->cfg.straggler_ms ||
      s->pullers->rate_ewma <= 0 || p->paused)
    return;
  if (p->ops.monitor == 1 && (!p->ops.slow || now < p->slow_next_ms)) return;
  uint64_t left = p->size - p->start - p->got;
  if (left <= (1u << 20)) return;
  double limit = s->cfg.straggler_ratio * s->pullers->rate_ewma, secs;
  /* after stragglers with no healthy pull between: 2x, 4x, 8x the window
   * and no early judgement (a node whose own downlink crawls would
   * otherwise blame every sender in turn) */
  unsigned streak = s->pullers->straggler_streak < 3 ? s->pullers->straggler_streak : 3;
  uint64_t full = (uint64_t)s->cfg.straggler_ms << streak;
  if (full > RING_SPAN_MS) full = RING_SPAN_MS;
  /* a reduce stream (it starts over elsewhere, and the directory moves it
   * only when one node's link stands out) reports its crawl after a
   * quarter of the window: every 100 ms counts against a whole restart */
  int quick = p->ops.monitor == 1 && p->ops.slow && !p->ops.resumable;
  uint64_t early = quick ? full / 4 : full / 2;
  double rate = rate_since(p, now, early, &secs), secs_full;
  if (secs <= 0 || rate >= limit) return;
  double finish = rate > 0 ? (double)left / rate : 1e9;
  double move = (double)(p->ops.resumable ? left : p->size) / s->pullers->rate_ewma;
  if (quick && finish <= move) return;
  double rate_full = rate_since(p, now, full, &secs_full);
  if (secs_full > 0 && rate_full < limit) { /* crawled for the whole window */
    rate = rate_full;
    secs = secs_full;
  } else {
    if (streak) return;
    if (!quick && finish <= STRAGGLER_EARLY * move) return;
    s->ctr.stragglers_early++;
  }
  if (p->ops.monitor == 1) {
    /* a partial sender may only be as slow as its own upstream: tell the
     * owner, keep the stream meanwhile */
    p->slow_next_ms = now + early;
    p->ops.slow(p->arg, rate);
    return;
  }
  s->ctr.stragglers++;
  s->pullers->straggler_streak++;
  snprintf(detail, sizeof detail,
           "straggler: %.1f MB/s for %.1f s, this node usually gets %.1f MB/s", rate / 1e6, secs,
           s->pullers->rate_ewma / 1e6);
  if (p->ops.straggled) p->ops.straggled(p->arg);
  puller_end(p, HPL_ETIMEDOUT, detail, 1);
}

/* The monitor, every MONITOR_TICK_MS (see the top of this file). */
static void on_tick(uv_timer_t *t) {
  st_puller *p = t->data;
  store *s = p->s;
  if (p->finished) return;
  uint64_t now = hpl__now_ms();
  char detail[200];
  if (p->last_tick_ms && now > p->last_tick_ms + MONITOR_TICK_MS + TICK_LATE_MS) {
    /* we were not running: the bytes may be waiting in the socket */
    p->last_move_ms += now - p->last_tick_ms - MONITOR_TICK_MS;
    if (p->last_move_ms > now) p->last_move_ms = now;
  }
  p->last_tick_ms = now;
  if (p->paused) p->last_move_ms = now; /* our side has no room: not the sender's fault */
  if (s->cfg.stall_timeout_ms && !p->ops.no_stall &&
      now - p->last_move_ms >= s->cfg.stall_timeout_ms) {
    s->ctr.stalls++;
    snprintf(detail, sizeof detail, "stalled: no bytes from the sender for %llu ms",
             (unsigned long long)(now - p->last_move_ms));
    puller_end(p, HPL_ETIMEDOUT, detail, 1);
    return;
  }
  check_quiet(p, now);
  if (p->finished) return;
  if (p->ticks++ % SAMPLE_TICKS == 0) take_sample(p, now);
  check_straggler(p, now);
}

static st_puller *pull_start(store *s, const char *addr, int port, const char *key,
                             int internal, uint64_t offset, uint64_t size, const puller_ops *ops,
                             void *arg, st_obj *into, int into_progress) {
  st_puller *p = calloc(1, sizeof *p);
  struct sockaddr_in sa;
  if (!p || uv_ip4_addr(addr, port, &sa) != 0 || strlen(key) >= sizeof p->key) {
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
  p->started_ms = p->last_move_ms = p->last_tick_ms = hpl__now_ms();
  if (ops->monitor) uv_timer_start(&p->monitor, on_tick, MONITOR_TICK_MS, MONITOR_TICK_MS);
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
  if (uv_tcp_connect(&p->creq, p->tcp, (struct sockaddr *)&sa, on_connect) != 0) {
    puller_end(p, HPL_ECONN, NULL, 0);
    return NULL;
  }
  return p;
}

st_puller *puller_start(store *s, const char *addr, int port, const char *key, int internal,
                        uint64_t offset, uint64_t size, const puller_ops *ops, void *arg) {
  return pull_start(s, addr, port, key, internal, offset, size, ops, arg, NULL, 0);
}

st_puller *puller_start_into(store *s, const char *addr, int port, const char *key, int internal,
                             st_obj *o, uint64_t offset, int progress, const puller_ops *ops,
                             void *arg) {
  return pull_start(s, addr, port, key, internal, offset, o->size, ops, arg, o, progress);
}

void puller_cancel(st_puller *p) {
  if (p) puller_end(p, HPL_ECANCELED, NULL, 0);
}

void puller_resume(st_puller *p) {
  if (!p || p->finished) return;
  p->paused = 0;
  if (p->c) hpl__conn_resume(p->c);
}

void puller_paused(st_puller *p) {
  if (p) p->paused = 1;
}

double puller_rate(const st_puller *p) {
  if (!p) return 0;
  if (p->rate > 0) return p->rate;
  uint64_t el = hpl__now_ms() - p->started_ms;
  return el > 0 ? (double)p->got * 1000.0 / (double)el : 0;
}

int puller_init(store *s) {
  s->pullers = calloc(1, sizeof *s->pullers);
  return s->pullers ? 0 : HPL_ENOMEM;
}

void puller_free(store *s) {
  free(s->pullers);
  s->pullers = NULL;
}

double puller_usual_rate(const store *s) { return s->pullers ? s->pullers->rate_ewma : 0; }

double puller_take_rate(store *s) {
  if (!s->pullers) return 0;
  double r = s->pullers->last_pull_rate;
  s->pullers->last_pull_rate = 0;
  return r;
}

void puller_stop_all(store *s) {
  while (s->pullers && s->pullers->list) puller_end(s->pullers->list, HPL_ECANCELED, NULL, 0);
}
