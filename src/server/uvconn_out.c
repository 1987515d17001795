/* uvconn_out.c - a framed connection's output bound (uvconn.h,
 * hpl__conn_opts.out_max): the memory each connection's queued writes
 * hold, the pause of a peer that does not read what it is sent, the cut of
 * one that stays behind, and the bound of a thread's connections together,
 * kept by cutting the largest queue.
 *
 * The count is per thread (each server runs its connections on one loop
 * thread; two loops of one thread share it). */
#include <stdlib.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"
#include "uvconn_int.h"

typedef struct out_thread {
  hpl__conn *list;  /* every connection of the thread (utlist DL through out_prev/next) */
  size_t total;     /* their out_mem together */
  size_t total_max; /* 0: HPL__CONN_OUT_TOTAL_MAX */
  uint64_t paused, cut, shed;
} out_thread;

static _Thread_local out_thread T;

static size_t total_max(void) { return T.total_max ? T.total_max : HPL__CONN_OUT_TOTAL_MAX; }
static size_t conn_max(const hpl__conn *c) { return c->o.out_max ? c->o.out_max : HPL__CONN_OUT_MAX; }
static unsigned conn_max_frames(const hpl__conn *c) {
  return c->o.out_max_frames ? c->o.out_max_frames : HPL__CONN_OUT_MAX_FRAMES;
}
static unsigned conn_stall_ms(const hpl__conn *c) {
  return c->o.out_stall_ms ? c->o.out_stall_ms : HPL__CONN_OUT_STALL_MS;
}

void hpl__conn_out_set_total(size_t max) { T.total_max = max; }

void hpl__conn_out_stats(uint64_t *queued, uint64_t *paused, uint64_t *cut, uint64_t *shed) {
  if (queued) *queued = T.total;
  if (paused) *paused = T.paused;
  if (cut) *cut = T.cut;
  if (shed) *shed = T.shed;
}

void hpl__conn_stats_get(hpl__conn_stats *st) {
  hpl__conn_hs_stats(&st->hs_pending, &st->hs_evicted, NULL);
  hpl__conn_out_stats(&st->out_queued, &st->out_paused, &st->out_cut, &st->out_shed);
}

size_t hpl__conn_out_queued(const hpl__conn *c) { return c->out_mem; }
int hpl__conn_out_paused(const hpl__conn *c) { return c->out_over; }

void hpl__conn_out_join(hpl__conn *c) {
  DL_APPEND2(T.list, c, out_prev, out_next);
  c->out_listed = 1;
}

void hpl__conn_out_leave(hpl__conn *c) {
  if (!c->out_listed) return;
  DL_DELETE2(T.list, c, out_prev, out_next);
  c->out_listed = 0;
  T.total -= c->out_mem; /* writes freed after the close already left it */
  c->out_mem = 0;
}

/* ------------------------------------------------------------------ cutting */

/* Cuts are logged, the first and every 100th after it: a flood of peers
 * that do not read must not become a flood of log lines. */
static void cut_log(hpl__conn *c, const char *why) {
  uint64_t n = T.cut + T.shed;
  if (n % 100 != 1) return;
  HPL__LOG_WARN("%s: %s (%zu bytes in %u frames queued, bound %zu bytes): closing it "
                "(%llu connections cut so far)",
                c->label, why, c->out_mem, c->out_frames, conn_max(c), (unsigned long long)n);
}

static void out_timer_fired(uv_timer_t *t) {
  hpl__conn *c = t->data;
  if (c->closing) return;
  if (c->out_cut_now) { /* the thread's total was over its bound */
    T.shed++;
    cut_log(c, "the largest output queue while the server's output is over its bound");
  } else if (c->out_over) {
    T.cut++;
    cut_log(c, "the peer has not read what it was sent for too long");
  } else {
    return; /* drained meanwhile */
  }
  if (c->o.out_cut) (*c->o.out_cut)++;
  hpl__conn_close(c, HPL_ETIMEDOUT);
}

static void out_timer_start(hpl__conn *c, uint64_t ms) {
  if (!c->out_timer) {
    if (!(c->out_timer = malloc(sizeof *c->out_timer))) {
      hpl__conn_close(c, HPL_ENOMEM); /* no timer: no bound; never unbounded */
      return;
    }
    uv_timer_init(c->s->loop, c->out_timer);
    c->out_timer->data = c;
    c->handles++;
  }
  uv_timer_start(c->out_timer, out_timer_fired, ms, 0);
}

/* Cut c at the next loop turn (never inside the write that found the
 * total over: its caller still uses the connection it writes to). */
static void cut_soon(hpl__conn *c) {
  if (c->closing || c->out_cut_now) return;
  c->out_cut_now = 1;
  out_timer_start(c, 0);
}

/* The thread's output is over its bound: the largest queue goes, unless
 * the queues already going (closing, or cut at the next turn) bring it
 * under: more writes in the same turn must not cut one connection each. */
static void shed(void) {
  hpl__conn *big = NULL;
  size_t going = 0;
  for (hpl__conn *c = T.list; c; c = c->out_next)
    if (c->closing || c->out_cut_now)
      going += c->out_mem;
    else if (!big || c->out_mem > big->out_mem)
      big = c;
  if (T.total - going > total_max() && big && big->out_mem) cut_soon(big);
}

/* ------------------------------------------------------------------ counting */

static void over(hpl__conn *c) {
  c->out_over = 1;
  T.paused++;
  HPL__LOG_DEBUG("%s: output queue over its bound (%zu bytes, %u frames): reading paused",
                 c->label, c->out_mem, c->out_frames);
  if (c->reading) uv_read_stop(c->s);
  c->reading = 0;
  out_timer_start(c, conn_stall_ms(c));
}

static void under(hpl__conn *c) {
  c->out_over = 0;
  if (c->out_timer && !c->out_cut_now) uv_timer_stop(c->out_timer);
  HPL__LOG_DEBUG("%s: output queue drained: reading again", c->label);
  if (!c->held_by_owner) hpl__conn_kick(c);
}

void hpl__conn_out_charge(hpl__conn *c, hpl__conn_wreq *w, size_t owned) {
  size_t want = sizeof *w + owned;
  if (w->charged >= want) return;
  if (!w->charged) c->out_frames++;
  c->out_mem += want - w->charged;
  T.total += want - w->charged;
  w->charged = want;
  if (c->closing) return;
  if (!c->out_over && (c->out_mem > conn_max(c) || c->out_frames > conn_max_frames(c))) over(c);
  if (T.total > total_max()) shed();
}

void hpl__conn_wreq_free(hpl__conn *c, hpl__conn_wreq *w) {
  if (w->charged) {
    c->out_frames--;
    c->out_mem -= w->charged;
    if (c->out_listed) T.total -= w->charged;
    if (c->out_over && !c->closing && c->out_mem <= conn_max(c) / 2 &&
        c->out_frames <= conn_max_frames(c) / 2)
      under(c);
  }
  free(w->owned);
  free(w);
}

void hpl__conn_out_close(hpl__conn *c) {
  if (c->out_timer) uv_close((uv_handle_t *)c->out_timer, hpl__conn_handle_closed);
}
