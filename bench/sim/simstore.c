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
 *  - Failures are drawn at fail_at among the receivers streaming then
 *    (ST_PULLING): a kill closes the store's sockets, so its receivers and
 *    the directory hear at once; a pause (SIGSTOP) closes nothing: its
 *    receivers go quiet, and past dead_after the directory declares it dead
 *    and the store registers again when it resumes.
 *  - After the directory restarts (or declared a paused store dead) a store
 *    registers again within reconnect_s (store/dlprobe.c probe_tick tries
 *    the next directory every heartbeat/5 = 100 ms) and re-reports its copy
 *    (store/dlheld.c: held_partials sends each copy streaming in with its
 *    sender as HeldObject.upstream, held_next the complete ones); a get
 *    still waiting re-sends its ACQUIRE (dirlink: pending requests are
 *    re-sent on the next connection). Streams between stores go on meanwhile.
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

/* A store's failure: none, killed and gone (its sockets closed), killed
 * and dying (its sockets close kill_close later), or paused (SIGSTOP). */
typedef enum { FAIL_NONE, FAIL_KILLED, FAIL_DYING, FAIL_PAUSED } fail_kind;

typedef enum { ST_IDLE, ST_ASKING, ST_CONNECTING, ST_PULLING, ST_LANDING, ST_DONE, ST_DEAD } st_state;
static const char *st_names[] = {"idle", "asking", "connecting", "pulling", "landing", "done", "dead"};

typedef struct hpl__sim_store {
  hpl__sim_timer tm;      /* the next step: arrival, connected, last bytes landed */
  hpl__sim_timer mon;     /* the puller's monitor tick */
  hpl__sim_timer fail;    /* a kill or pause, and its end */
  hpl__sim_timer dead;    /* a paused store's heartbeats time out at the directory */
  hpl__sim_timer dl;      /* it registers again (after a restart or being declared dead) */
  uint32_t failed_peer;   /* its last ACQUIRE's failed_peer (re-sent as is) */
  int declared;           /* the directory declared it dead while it was paused */
  hpl__sim_world *w;
  uint32_t id;
  st_state state;
  uint32_t sender;
  uint32_t depth;         /* hops from the source when last assigned */
  hpl__sim_flow *flow;
  double last_got, last_move, started, noted, reported;
  fail_kind failed_as;    /* what befell it */
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
  st->failed_peer = failed_peer;
  hpl__sim_dir_send(st->w->dir, HPL__SIM_REQ_ACQUIRE, st->id, failed_peer);
}

static void drop_stream(hpl__sim_store *st) {
  if (!st->flow) return;
  hpl__sim_flow_end(&st->w->net, st->flow);
  st->flow = NULL;
  hpl__sim_cancel(&st->w->clk, &st->mon);
}

/* st's stream from `peer` broke or was moved off: ask again avoiding it,
 * once the process runs (a stopped one reads the news when it resumes; a
 * dead one asks nothing). */
static void move_off(hpl__sim_store *st, uint32_t peer) {
  hpl__sim_world *w = st->w;
  drop_stream(st);
  if (st->state == ST_DEAD) return;
  if (w->net.hosts[st->id].stopped) {
    set_state(st, ST_IDLE);
    st->failed_peer = peer;
    st->deferred = 1;
    return;
  }
  ask(st, peer);
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
  double win = quiet_window(rate);
  if (quiet >= win / 2 && st->noted != st->last_move) {
    st->noted = st->last_move; /* one note per quiet spell */
    hpl__sim_dir_send(w->dir, HPL__SIM_REQ_SILENT, st->id, st->sender);
  }
  if (quiet >= win && now - st->reported >= win) { /* suspect it; again a window later */
    st->reported = now;
    hpl__sim_dir_send(w->dir, HPL__SIM_REQ_SUSPECT, st->id, st->sender);
  }
  /* The real monitor ticks every 50 ms; a stream whose quiet window is
   * long (a slow share: a star's thousands of streams on one uplink) is
   * looked at every window/8 instead, so it costs the simulation events in
   * proportion to its windows, not to its length in 50 ms steps (a
   * 10 000-stream star runs 9 000 s: 1.8e9 ticks). Detection is then late
   * by at most window/8. */
  double tick = win / 8 > MONITOR_TICK ? win / 8 : MONITOR_TICK;
  hpl__sim_at(&w->clk, &st->mon, now + tick);
}

static void connected(hpl__sim_store *st) {
  hpl__sim_world *w = st->w;
  if (w->net.hosts[st->sender].stopped && w->stores[st->sender].failed_as == FAIL_KILLED) {
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
  case ST_IDLE: ask(st, st->failed_peer); break;
  case ST_CONNECTING: connected(st); break;
  case ST_LANDING: /* the last bytes are in: complete, and said so */
    set_state(st, ST_DONE);
    hpl__sim_host_complete(&w->net, st->id);
    w->done++;
    w->last_done = w->clk.now;
    double took = w->clk.now - st->arrived_at;
    double *slow = st->failed_as != FAIL_NONE ? &w->slowest_failed : &w->slowest;
    if (took > *slow) *slow = took;
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

void hpl__sim_store_move(hpl__sim_world *w, uint32_t node, uint32_t sender) {
  hpl__sim_store *st = &w->stores[node];
  if (st->state != ST_PULLING || w->net.hosts[node].stopped) return; /* moved already */
  w->moves++;
  drop_stream(st);
  set_state(st, ST_ASKING);
  hpl__sim_store_answer(w, node, sender);
}

void hpl__sim_store_stay(hpl__sim_world *w, uint32_t node, double retry) {
  hpl__sim_store *st = &w->stores[node];
  if (retry >= 0 || st->state != ST_PULLING) return; /* "stay": nothing to do */
  w->moves++; /* UPSTREAM_GONE: ask again, avoiding it */
  move_off(st, st->sender);
}

/* ------------------------------------------------------------------ failures */

/* A killed store's sockets close (the kernel has torn down its memory):
 * its sender's stream to it ends, its receivers ask again, and the
 * directory drops it (its connection closed). */
static void kill_closed(hpl__sim_store *st) {
  hpl__sim_world *w = st->w;
  hpl__sim_host *h = &w->net.hosts[st->id];
  st->failed_as = FAIL_KILLED;
  drop_stream(st);
  for (hpl__sim_flow *f = h->outs, *nx; f; f = nx) {
    nx = f->snext;
    hpl__sim_store *r = f->owner;
    w->moves++;
    move_off(r, st->id);
  }
  hpl__sim_dir_send(w->dir, HPL__SIM_REQ_GONE, st->id, 0);
}

static void fail_event(hpl__sim_timer *t) {
  hpl__sim_store *st = OF(t, fail);
  hpl__sim_world *w = st->w;
  hpl__sim_host *h = &w->net.hosts[st->id];
  if (st->failed_as == FAIL_DYING) {
    kill_closed(st);
    return;
  }
  if (h->stopped) { /* a pause ends (SIGCONT): heard again, its pull goes on */
    hpl__sim_cancel(&w->clk, &st->dead);
    hpl__sim_host_stop(&w->net, st->id, 0);
    hpl__sim_dir_back(w->dir, st->id);
    if (st->declared) { /* its connection was closed: it registers again */
      st->declared = 0;
      hpl__sim_at(&w->clk, &st->dl, w->clk.now + CONNECT_RTTS * 2 * w->p.lat);
    }
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
  if (w->p.verbose > 1)
    fprintf(stderr, "%.6f node %u: %s\n", w->clk.now, st->id, st->failed_as == FAIL_PAUSED ? "paused" : "killed");
  hpl__sim_host_stop(&w->net, st->id, 1);
  if (st->failed_as == FAIL_PAUSED) {
    hpl__sim_at(&w->clk, &st->fail, w->clk.now + w->p.pause_s);
    hpl__sim_at(&w->clk, &st->dead, w->clk.now + w->p.dead_after);
    return;
  }
  /* killed: it runs nothing more. Its sockets close when the kernel has
   * torn its memory down (exit_mm runs before exit_files): kill_close
   * later, meanwhile its streams carry nothing and a peer connecting to it
   * gets no answer, as from a paused one */
  set_state(st, ST_DEAD);
  w->failed++;
  if (w->p.kill_close > 0) {
    st->failed_as = FAIL_DYING;
    hpl__sim_at(&w->clk, &st->fail, w->clk.now + w->p.kill_close);
    return;
  }
  kill_closed(st);
}

/* A paused store's heartbeats are missing for dead_after: the directory's
 * sweep declares it dead (nodelive.c), closing its connection. */
static void dead_event(hpl__sim_timer *t) {
  hpl__sim_store *st = OF(t, dead);
  if (!st->w->net.hosts[st->id].stopped) return;
  st->declared = 1;
  hpl__sim_dir_node_dead(st->w->dir, st->id);
}

static void dl_event(hpl__sim_timer *t) { hpl__sim_store_reconnect(OF(t, dl)->w, OF(t, dl)->id); }

void hpl__sim_store_reconnect(hpl__sim_world *w, uint32_t node) {
  hpl__sim_store *st = &w->stores[node];
  if (st->state == ST_DEAD) return;
  if (w->net.hosts[node].stopped || hpl__sim_dir_down(w->dir)) {
    st->declared = 1; /* it tries again when it runs / a directory listens */
    return;
  }
  w->rereports++;
  if (st->state == ST_DONE)
    hpl__sim_dir_send(w->dir, HPL__SIM_REQ_HELD, node, UINT32_MAX);
  else if ((st->state == ST_PULLING || st->state == ST_LANDING) && !w->p.no_held_upstream)
    hpl__sim_dir_send(w->dir, HPL__SIM_REQ_HELD, node, st->sender);
  else if (st->state == ST_ASKING)
    hpl__sim_dir_send(w->dir, HPL__SIM_REQ_ACQUIRE, node, st->failed_peer);
}

/* ------------------------------------------------------------------ world events */

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static hpl__sim_world *cur_w; /* one simulation at a time */
static hpl__sim_timer draw_tm, restart_tm, up_tm;
static uint64_t seed;

/* fail_at: the failing receivers are drawn among those streaming now. */
static void draw_event(hpl__sim_timer *t) {
  (void)t;
  hpl__sim_world *w = cur_w;
  uint32_t n = w->p.nodes, k = 0, *c = malloc(n * sizeof *c);
  if (!c) abort();
  for (uint32_t i = 1; i < n; i++)
    if (w->stores[i].state == ST_PULLING && !w->net.hosts[i].complete &&
        (!w->p.fail_depth || w->stores[i].depth == w->p.fail_depth))
      c[k++] = i;
  uint32_t want = w->p.fail_depth ? 1 : (uint32_t)llround(w->p.fail_frac * (n - 1));
  if (want > k) want = k;
  for (uint32_t j = 0; j < want; j++) { /* a partial Fisher-Yates draw */
    uint32_t x = j + (uint32_t)(rnd(&seed) % (k - j)), v = c[x];
    c[x] = c[j];
    c[j] = v;
    hpl__sim_store *st = &w->stores[v];
    st->failed_as = w->p.fail_pause ? FAIL_PAUSED : FAIL_KILLED;
    hpl__sim_at(&w->clk, &st->fail, w->clk.now);
  }
  w->drawn = want;
  free(c);
}

static void restart_event(hpl__sim_timer *t) {
  (void)t;
  hpl__sim_dir_restart(cur_w->dir, cur_w->clk.now + cur_w->p.lease_s);
  hpl__sim_at(&cur_w->clk, &up_tm, cur_w->clk.now + cur_w->p.lease_s);
}

/* A new directory leads: every store finds it within reconnect_s, then
 * connects and registers (the connect's round trips). */
static void up_event(hpl__sim_timer *t) {
  (void)t;
  hpl__sim_world *w = cur_w;
  for (uint32_t i = 0; i < w->p.nodes; i++) {
    double j = w->p.reconnect_s * (double)(rnd(&seed) % 1000000) / 1e6;
    hpl__sim_at(&w->clk, &w->stores[i].dl, w->clk.now + j + CONNECT_RTTS * 2 * w->p.lat);
  }
}

/* ------------------------------------------------------------------ the run */

int hpl__sim_world_run(hpl__sim_world *w) {
  hpl__sim_params *p = &w->p;
  uint32_t n = p->nodes;
  hpl__sim_clock_init(&w->clk);
  hpl__sim_net_init(&w->net, &w->clk, n, p->bits, p->eff, p->lat, p->size, p->unit);
  if (p->cpu_cap > 0) /* a store's CPU takes in no more than this (hpsim compare) */
    for (uint32_t i = 0; i < n; i++)
      if (w->net.hosts[i].down > p->cpu_cap) w->net.hosts[i].down = p->cpu_cap;
  w->net.touch = p->touch_bytes; /* a receiver's first-touch phase (simcpu.c) */
  w->net.touch_down = p->touch_cap;
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
    st->dead.fn = dead_event;
    st->dl.fn = dl_event;
    st->noted = -1;
    st->reported = -1e9;
    st->failed_peer = UINT32_MAX;
    if (i == 0) {
      st->state = ST_DONE;
      continue;
    }
    double at = n > 2 ? p->arrive_over * (double)(i - 1) / (double)(n - 2) : 0;
    st->arrived_at = at;
    hpl__sim_at(&w->clk, &st->tm, at);
  }
  cur_w = w;
  seed = p->seed ? p->seed : 88172645463325252ull;
  w->drawn = 0;
  draw_tm.fn = draw_event;
  restart_tm.fn = restart_event;
  up_tm.fn = up_event;
  if (p->fail_frac > 0 || p->fail_depth) hpl__sim_at(&w->clk, &draw_tm, p->fail_at);
  if (p->restart_at > 0) hpl__sim_at(&w->clk, &restart_tm, p->restart_at);
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
      hpl__sim_cancel(&w->clk, &w->stores[i].dead);
      hpl__sim_cancel(&w->clk, &w->stores[i].dl);
    }
  hpl__sim_cancel(&w->clk, &draw_tm);
  hpl__sim_cancel(&w->clk, &restart_tm);
  hpl__sim_cancel(&w->clk, &up_tm);
  hpl__sim_net_free(&w->net);
  hpl__sim_clock_free(&w->clk);
  free(w->stores);
  free(w->copies);
  w->stores = NULL;
  w->copies = NULL;
}
