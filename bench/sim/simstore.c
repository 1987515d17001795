/* simstore.c - the stores in the simulator (see sim.h): each receiver's get
 * of the one object, from its ACQUIRE to its LOC_COMPLETE, and what its
 * puller does when the sender goes quiet or away. Modelled on the real
 * store, not linked (store/fetch.c drives sockets and the pool):
 *  - a get asks the directory (fetch.c send_ask: ACQUIRE), then connects to
 *    the sender's data port and sends PULL from the bytes it holds
 *    (puller.c hpl__puller_start_into; a fresh connection: TCP's handshake,
 *    hoplite's (src/common handshake) and PULL/PULL_REP, connect_rtts round
 *    trips before the first byte), and reports the copy complete
 *    (fetch.c pull_done -> hpl__dirlink_loc_complete);
 *  - a stream that delivers nothing for half its quiet window
 *    (store/pullmon.c hpl__puller_quiet_window_ms: 100 ms + the time 12 MiB
 *    take at the stream's rate) notes it to the directory, which probes the
 *    sender (simdir.c); after stall_timeout_ms = 10 s (store/server.c) the
 *    pull ends (pullmon.c) and the get asks again avoiding that sender;
 *  - UPSTREAM_GONE (fetch.c hpl__fetch_upstream_gone) and a sender whose
 *    connection closes (a killed process: its kernel closes its sockets)
 *    make the get ask again with failed_peer = the sender; the new pull
 *    resumes from the bytes held.
 * Each store is a state machine (set_state logs transitions with -v).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define MONITOR_TICK 0.050 /* store/pullmon.c MONITOR_TICK_MS */
#define STALL_TIMEOUT 10.0 /* store/server.c stall_timeout_ms */
#define CONNECT_RTTS 3     /* TCP, hoplite's handshake, PULL -> PULL_REP */

typedef enum { ST_IDLE, ST_ASKING, ST_CONNECTING, ST_PULLING, ST_LANDING, ST_DONE, ST_DEAD } st_state;
static const char *st_names[] = {"idle", "asking", "connecting", "pulling", "landing", "done", "dead"};

typedef struct hpl__sim_store {
  hpl__sim_timer tm;      /* the next step: arrival, connected, last bytes landed */
  hpl__sim_timer mon;     /* the puller's monitor tick */
  hpl__sim_timer fail;    /* a kill or pause, and its end */
  hpl__sim_world *w;
  uint32_t id;
  st_state state;
  uint32_t sender;
  uint32_t depth;         /* hops from the source when last assigned */
  hpl__sim_flow *flow;
  double last_got, last_move, started, noted;
  int fail_kind;          /* 0 none, 1 kill, 2 pause */
  double arrived_at;      /* when its get began */
  int deferred;           /* a step due while paused: taken when it resumes */
  uint32_t pend;          /* an answer that came while paused: sender + 1 */
} hpl__sim_store;

static void set_state(hpl__sim_store *st, st_state s) {
  if (st->w->p.verbose > 1)
    fprintf(stderr, "%.6f node %u: %s -> %s\n", st->w->clk.now, st->id, st_names[st->state],
            st_names[s]);
  st->state = s;
}

#define OF(t, field) ((hpl__sim_store *)((char *)(t) - offsetof(hpl__sim_store, field)))

static void ask(hpl__sim_store *st, uint32_t failed_peer) {
  set_state(st, ST_ASKING);
  hpl__sim_dir_send(st->w->dir, HPL__SIM_REQ_ACQUIRE, st->id, failed_peer);
}

static void drop_stream(hpl__sim_store *st) {
  if (!st->flow) return;
  hpl__sim_flow_end(&st->w->net, st->flow);
  st->flow = NULL;
  hpl__sim_cancel(&st->w->clk, &st->mon);
}

/* The quiet window of a stream at `rate` bytes/s (pullmon.c). */
static double quiet_window(double rate) {
  double w = rate > 0 ? 0.1 + 12.0 * (1 << 20) / rate : 1.0;
  return w > STALL_TIMEOUT ? STALL_TIMEOUT : w;
}

static void monitor(hpl__sim_timer *t) {
  hpl__sim_store *st = OF(t, mon);
  hpl__sim_world *w = st->w;
  if (st->state != ST_PULLING || w->net.hosts[st->id].stopped) return;
  double now = w->clk.now, got = hpl__sim_got(&w->net, &w->net.hosts[st->id]);
  if (got > st->last_got + 0.5) {
    st->last_got = got;
    st->last_move = now;
  }
  double el = now - st->started, quiet = now - st->last_move;
  double rate = el > 0.25 && got > (1 << 20) ? got / el : w->net.hosts[st->id].down;
  if (quiet >= STALL_TIMEOUT) { /* stalled: the pull ends, ask again */
    uint32_t peer = st->sender;
    drop_stream(st);
    ask(st, peer);
    return;
  }
  if (quiet >= quiet_window(rate) / 2 && st->noted != st->last_move) {
    st->noted = st->last_move; /* one note per quiet spell */
    hpl__sim_dir_send(w->dir, HPL__SIM_REQ_SILENT, st->id, st->sender);
  }
  hpl__sim_at(&w->clk, &st->mon, now + MONITOR_TICK);
}

static void connected(hpl__sim_store *st) {
  hpl__sim_world *w = st->w;
  if (w->net.hosts[st->sender].stopped && w->stores[st->sender].fail_kind == 1) {
    ask(st, st->sender); /* refused: the sender is gone */
    return;
  }
  set_state(st, ST_PULLING);
  w->copies[st->id]++;
  st->flow = hpl__sim_flow_start(&w->net, st->sender, st->id, st);
  st->started = st->last_move = w->clk.now;
  st->last_got = hpl__sim_got(&w->net, &w->net.hosts[st->id]);
  hpl__sim_at(&w->clk, &st->mon, w->clk.now + MONITOR_TICK);
}

static void step(hpl__sim_timer *t) {
  hpl__sim_store *st = OF(t, tm);
  hpl__sim_world *w = st->w;
  if (w->net.hosts[st->id].stopped) { /* a stopped process does nothing */
    st->deferred = 1;
    return;
  }
  switch (st->state) {
  case ST_IDLE: ask(st, UINT32_MAX); break;
  case ST_CONNECTING: connected(st); break;
  case ST_LANDING: /* the last bytes are in: complete, and said so */
    set_state(st, ST_DONE);
    hpl__sim_host_complete(&w->net, st->id);
    w->done++;
    w->last_done = w->clk.now;
    if (w->clk.now - st->arrived_at > w->slowest) w->slowest = w->clk.now - st->arrived_at;
    hpl__sim_dir_send(w->dir, HPL__SIM_REQ_COMPLETE, st->id, 0);
    break;
  default: break;
  }
}

/* The net: the stream's bytes have all left the sender. */
static void arrived(hpl__sim_flow *f) {
  hpl__sim_store *st = f->owner;
  drop_stream(st);
  set_state(st, ST_LANDING);
  hpl__sim_at(&st->w->clk, &st->tm, st->w->clk.now + st->w->p.lat);
}

void hpl__sim_store_answer(hpl__sim_world *w, uint32_t node, uint32_t sender) {
  hpl__sim_store *st = &w->stores[node];
  if (st->state != ST_ASKING) return;
  if (w->net.hosts[node].stopped) { /* read when it resumes */
    st->pend = sender + 1;
    return;
  }
  st->sender = sender;
  st->depth = w->stores[sender].depth + 1;
  set_state(st, ST_CONNECTING);
  hpl__sim_at(&w->clk, &st->tm, w->clk.now + CONNECT_RTTS * 2 * w->p.lat);
}

void hpl__sim_store_stay(hpl__sim_world *w, uint32_t node, double retry) {
  hpl__sim_store *st = &w->stores[node];
  if (retry >= 0 || st->state != ST_PULLING) return; /* "stay": nothing to do */
  uint32_t peer = st->sender; /* UPSTREAM_GONE: ask again, avoiding it */
  w->moves++;
  drop_stream(st);
  ask(st, peer);
}

/* ------------------------------------------------------------------ failures */

static void fail_event(hpl__sim_timer *t) {
  hpl__sim_store *st = OF(t, fail);
  hpl__sim_world *w = st->w;
  hpl__sim_host *h = &w->net.hosts[st->id];
  if (st->state == ST_DONE && st->fail_kind == 2 && !h->stopped) return;
  if (st->fail_kind == 1 && st->state == ST_DEAD) { /* dead_after later: declared dead */
    hpl__sim_dir_node_dead(w->dir, st->id);
    return;
  }
  if (h->stopped) { /* a pause ends (SIGCONT): heard again, its pull goes on */
    hpl__sim_host_stop(&w->net, st->id, 0);
    hpl__sim_dir_back(w->dir, st->id);
    st->last_move = w->clk.now;
    if (st->state == ST_PULLING) hpl__sim_at(&w->clk, &st->mon, w->clk.now + MONITOR_TICK);
    if (st->deferred) {
      st->deferred = 0;
      hpl__sim_at(&w->clk, &st->tm, w->clk.now);
    }
    if (st->pend) {
      uint32_t s = st->pend - 1;
      st->pend = 0;
      hpl__sim_store_answer(w, st->id, s);
    }
    return;
  }
  if (st->state == ST_DONE) return; /* finished before its failure */
  hpl__sim_host_stop(&w->net, st->id, 1);
  if (st->fail_kind == 2) {
    hpl__sim_at(&w->clk, &st->fail, w->clk.now + w->p.pause_s);
    return;
  }
  /* killed: its sockets close, so its sender stops and its receivers ask again */
  drop_stream(st);
  set_state(st, ST_DEAD);
  w->failed++;
  for (hpl__sim_flow *f = h->outs, *nx; f; f = nx) {
    nx = f->snext;
    hpl__sim_store *r = f->owner;
    w->moves++;
    drop_stream(r);
    ask(r, st->id);
  }
  hpl__sim_at(&w->clk, &st->fail, w->clk.now + w->p.dead_after);
}

/* ------------------------------------------------------------------ the run */

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

int hpl__sim_world_run(hpl__sim_world *w) {
  hpl__sim_params *p = &w->p;
  uint32_t n = p->nodes;
  hpl__sim_clock_init(&w->clk);
  hpl__sim_net_init(&w->net, &w->clk, n, p->bits, p->eff, p->lat, p->size, p->unit);
  w->net.arrived = arrived;
  w->stores = calloc(n, sizeof *w->stores);
  w->copies = calloc(n, sizeof *w->copies);
  if (!w->stores || !w->copies) abort();
  w->dir = hpl__sim_dir_new(w);
  for (uint32_t i = 0; i < n; i++) {
    hpl__sim_store *st = &w->stores[i];
    st->w = w;
    st->id = i;
    st->tm.fn = step;
    st->mon.fn = monitor;
    st->fail.fn = fail_event;
    st->noted = -1;
    if (i == 0) {
      st->state = ST_DONE;
      continue;
    }
    double at = n > 2 ? p->arrive_over * (double)(i - 1) / (double)(n - 2) : 0;
    st->arrived_at = at;
    hpl__sim_at(&w->clk, &st->tm, at);
  }
  uint32_t nfail = (uint32_t)llround(p->fail_frac * (n - 1));
  uint64_t seed = p->seed ? p->seed : 88172645463325252ull;
  for (uint32_t k = 0; k < nfail;) {
    uint32_t i = 1 + (uint32_t)(rnd(&seed) % (n - 1));
    if (w->stores[i].fail_kind) continue;
    w->stores[i].fail_kind = p->fail_pause ? 2 : 1;
    hpl__sim_at(&w->clk, &w->stores[i].fail, p->fail_at);
    k++;
  }
  hpl__sim_run(&w->clk, INFINITY);
  w->aborted = w->clk.stop;
  uint32_t dead = 0;
  for (uint32_t i = 1; i < n; i++) dead += w->stores[i].state == ST_DEAD;
  return w->aborted || w->done + dead != n - 1 ? -1 : 0;
}

double hpl__sim_source_copies(const hpl__sim_world *w) { return w->net.src_bytes / w->p.size; }

uint32_t hpl__sim_depth(const hpl__sim_world *w, uint32_t node) { return w->stores[node].depth; }

void hpl__sim_world_free(hpl__sim_world *w) {
  hpl__sim_dir_free(w->dir);
  w->dir = NULL;
  if (w->stores)
    for (uint32_t i = 0; i < w->p.nodes; i++) {
      hpl__sim_cancel(&w->clk, &w->stores[i].tm);
      hpl__sim_cancel(&w->clk, &w->stores[i].mon);
      hpl__sim_cancel(&w->clk, &w->stores[i].fail);
    }
  hpl__sim_net_free(&w->net);
  hpl__sim_clock_free(&w->clk);
  free(w->stores);
  free(w->copies);
  w->stores = NULL;
  w->copies = NULL;
}
