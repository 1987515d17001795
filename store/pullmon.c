/* pullmon.c - watching a pull (see puller.h): a timer samples its progress.
 * A stream that delivers nothing for a quiet window (derived from the rate
 * it has been seeing) makes the owner suspect the sender, and the stream
 * goes on; one that delivers nothing for stall_timeout_ms has stalled; one
 * from a complete sender that delivers below straggler_ratio of this
 * store's usual rate for straggler_ms is a straggler. Either ends the pull
 * with HPL_ETIMEDOUT and the owner decides what next. Also this node's
 * usual rate, which completed pulls make.
 */
#include <stdio.h>

#include "hoplite.h"
#include "pullint.h"
#include "utlist.h"
#include "util.h"

#define MONITOR_TICK_MS 50
#define SAMPLE_TICKS 5 /* a rate sample every 250 ms */
#define RING_SPAN_MS (31 * MONITOR_TICK_MS * SAMPLE_TICKS) /* the oldest of 32 samples */
/* A tick this much later than due means our own loop stalled (or the
 * process was stopped): the sender is not to blame for that silence. */
#define TICK_LATE_MS 100

/* A pull that has moved `got` bytes at `rate`, at least 4 MiB at half
 * this node's usual rate or more, shows the node's own link is healthy. */
static int healthy_pull(const hpl__store *s, uint64_t got, double rate) {
  return got >= (4u << 20) && rate >= 0.5 * s->pullers->rate_ewma;
}

/* A pull that completed: a full-speed sample for the straggler baseline. */
void hpl__puller_sample_whole(hpl__puller *p) {
  hpl__store *s = p->s;
  hpl__pullers *pc = s->pullers;
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
}

uint64_t hpl__puller_quiet_window_ms(double rate, uint64_t cap_ms) {
  uint64_t w = 1000;
  if (rate > 0) w = 100 + (uint64_t)(12.0 * (double)(1u << 20) * 1000.0 / rate);
  if (cap_ms && w > cap_ms) w = cap_ms;
  return w;
}

/* The rate the stream has been seeing: its samples, else what arrived so
 * far (a short stream), else this store's usual rate (0: unknown). */
static double stream_rate(const hpl__puller *p) {
  if (p->rate > 0) return p->rate;
  if (p->got >= (1u << 20)) {
    uint64_t el = p->last_move_ms > p->started_ms ? p->last_move_ms - p->started_ms : 1;
    return (double)p->got * 1000.0 / (double)el;
  }
  return p->s->pullers->rate_ewma;
}

/* Suspicion: no bytes for the quiet window while we have room. */
static void check_quiet(hpl__puller *p, uint64_t now) {
  hpl__store *s = p->s;
  if (!p->ops.suspect || p->suspecting || p->paused || now < p->suspect_after) return;
  double rate = stream_rate(p);
  uint64_t quiet = now - p->last_move_ms;
  uint64_t window = hpl__puller_quiet_window_ms(rate, s->cfg.stall_timeout_ms);
  if (quiet >= window / 2 && s->pullers->quiet && p->ops.peer &&
      p->noted_move_ms != p->last_move_ms && s->pullers->quiet(s, p->ops.peer))
    p->noted_move_ms = p->last_move_ms; /* one report per quiet spell */
  if (quiet < window) return;
  p->suspecting = 1;
  s->ctr.pull_suspects++;
  p->ops.suspect(p->arg, quiet);
}

void hpl__puller_suspect_done(hpl__puller *p, uint64_t retry_ms) {
  if (!p || p->finished) return;
  if (!retry_ms) retry_ms = hpl__puller_quiet_window_ms(stream_rate(p), p->s->cfg.stall_timeout_ms);
  p->suspecting = 0;
  p->suspect_after = hpl__now_ms() + retry_ms;
}

void hpl__puller_suspect_anew(hpl__store *s) {
  uint64_t now = hpl__now_ms();
  hpl__puller *p;
  DL_FOREACH(s->pullers->list, p)
    if (!p->suspecting && p->suspect_after > now) p->suspect_after = now;
}

/* A rate sample (every SAMPLE_TICKS): the ring for the straggler check and
 * the stream's rate while bytes flow. */
static void take_sample(hpl__puller *p, uint64_t now) {
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
static double rate_since(const hpl__puller *p, uint64_t now, uint64_t win_ms, double *secs) {
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
static void check_straggler(hpl__puller *p, uint64_t now) {
  hpl__store *s = p->s;
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
  hpl__puller_end(p, HPL_ETIMEDOUT, detail, 1);
}

/* The monitor, every MONITOR_TICK_MS (see the top of this file). */
static void on_tick(uv_timer_t *t) {
  hpl__puller *p = t->data;
  hpl__store *s = p->s;
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
    hpl__puller_end(p, HPL_ETIMEDOUT, detail, 1);
    return;
  }
  check_quiet(p, now);
  if (p->finished) return;
  hpl__puller_slot_check(p, now);
  if (p->ticks++ % SAMPLE_TICKS == 0) take_sample(p, now);
  check_straggler(p, now);
}

void hpl__puller_monitor_start(hpl__puller *p) {
  uv_timer_start(&p->monitor, on_tick, MONITOR_TICK_MS, MONITOR_TICK_MS);
}

double hpl__puller_rate(const hpl__puller *p) {
  if (!p) return 0;
  if (p->rate > 0) return p->rate;
  uint64_t el = hpl__now_ms() - p->started_ms;
  return el > 0 ? (double)p->got * 1000.0 / (double)el : 0;
}

double hpl__puller_usual_rate(const hpl__store *s) {
  return s->pullers ? s->pullers->rate_ewma : 0;
}

double hpl__puller_take_rate(hpl__store *s) {
  if (!s->pullers) return 0;
  double r = s->pullers->last_pull_rate;
  s->pullers->last_pull_rate = 0;
  return r;
}
