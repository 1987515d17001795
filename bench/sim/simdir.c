/* simdir.c - the directory in the simulator (see sim.h): one server queue
 * whose requests run the directory's REAL object table and sender choice.
 *
 * Linked, not rewritten: directory/objtab.c, objects.c and objpick.c (the
 * table, hpl__dtab_pick_sender, hpl__dtab_pick_instead, hpl__dtab_assign,
 * hpl__dtab_loc_complete, hpl__dtab_release_upstream,
 * hpl__dtab_node_unresponsive, hpl__dtab_node_gone, hpl__dtab_changed and
 * its subscribers). Node n of the simulation is node id n + 1 there.
 *
 * Modelled here, because the code around those calls is tangled with
 * connections and libuv timers (directory/acquire*.c, nodes*.c): the smallest
 * adapter that calls the table as they do -
 *  - ACQUIRE (acquire.c hpl__dir_acquire_on_acquire -> acquire_pick.c
 *    hpl__dir_acquire_try): a large object has no inline bytes, digests
 *    that are not refused, no grant and no allreduce ring, so the answer is
 *    hpl__dtab_pick_sender's; a failed_peer first frees the asker's slot
 *    (hpl__dtab_release_upstream) and is avoided. A "wait" answer makes the
 *    asker a waiter, served in arrival order when the object changes
 *    (acquire.c serve_waiters, subscribed with hpl__dtab_on_change).
 *  - LOC_COMPLETE (locs.c): hpl__dtab_loc_complete then hpl__dtab_changed.
 *  - A quiet stream's note (store/pullmon.c check_quiet at half the quiet
 *    window -> the directory's probe, nodelive.c hpl__dir_node_verdict): a
 *    probe goes out; a stopped node does not answer within probe_s
 *    (nodestat.c hpl__dir_node_probe_timeout: probe_ms = 100 ms plus twice
 *    the RTT) and is marked unresponsive (nodelive.c mark_unresponsive:
 *    hpl__dtab_node_unresponsive, whose callback sends UPSTREAM_GONE to
 *    every receiver pulling from it); a live one answers after an RTT.
 *  - A killed store's connection closes (its kernel closes its sockets),
 *    so the directory drops it one latency later (nodes.c
 *    hpl__dir_nodes_conn_closed -> hpl__dir_node_gone ->
 *    hpl__dtab_node_gone, its receivers told UPSTREAM_GONE, the object's
 *    waiters served again).
 *    A stopped (paused) store's connection stays open: it is dead only
 *    when its heartbeats have been missing for dead_after (nodestat.c
 *    hpl__dir_node_timeout_ms: 3 x heartbeat_ms = 1.5 s for a steady node,
 *    at most heartbeat_timeout_ms = 3 s; nodelive.c sweep closes it).
 *  - A restart (the directory process killed, a new leader after the
 *    lease and election): everything the directory held is lost (a fresh
 *    hpl__dtab), requests reaching it meanwhile are dropped, and each store
 *    registers again and re-reports its copy (simstore.c): a complete one
 *    as locs.c held_copy does (hpl__dtab_loc_complete, then
 *    hpl__dtab_recount_serving for receivers re-reported before it), one
 *    streaming in with its sender as locs.c held_partial does
 *    (hpl__dtab_loc_partial with HeldObject.upstream, store/dlheld.c
 *    held_partials).
 *  - The directory's CPU: every request costs dir_cpu (bench_dir's measured
 *    cost of a request, ~10 us: bench/results/dir-issue42b-2026-11-29.tsv,
 *    "get CPU us/op, 16 procs directory" 10.3 on a quiet day; 8.7-12.8 on a
 *    slow one once replies were batched in io_uring,
 *    bench/results/dirfloor-2026-12-02.md) and, with dir_measured, the
 *    CPU the real table calls took in this process (CLOCK_THREAD_CPUTIME_ID),
 *    one request at a time: a saturated directory shows as queueing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoplite.h"
#include "sim.h"

#define ID(i) ((uint64_t)(i) + 1)

typedef enum { M_TO_DIR, M_TO_STORE } msg_dir;
typedef enum { A_SENDER, A_STAY, A_GONE, A_MOVE } ans_kind;

typedef struct msg {
  hpl__sim_timer tm;
  struct msg *next; /* the directory's queue */
  hpl__sim_dir *d;
  msg_dir where;
  hpl__sim_req_kind kind;
  ans_kind ans;
  uint32_t node, peer, sender;
  double queued_at;
} msg;

struct hpl__sim_dir {
  hpl__sim_world *w;
  hpl__dtab tab;
  hpl__dir_obj *o;
  msg *qhead, *qtail;   /* requests waiting for the CPU */
  msg *cur;             /* the one being served */
  msg *outbox;          /* answers the current request makes, sent at its end */
  hpl__sim_timer cpu;   /* the current request's CPU ends */
  double cost;          /* ...and what it is charged */
  uint32_t *waiters;    /* ACQUIREs waiting, in arrival order */
  uint32_t nwait;
  uint8_t *suspected;   /* probe unanswered (nodes.c HPL__DIR_PROBE_UNANSWERED) */
  double *probe_out;    /* when a probe went out (0: none) */
  hpl__sim_timer *probe_tm;
  hpl__sim_dirstats st;
  double up_at; /* down (restarting) until then */
  double cpu0; /* the process's CPU when the run began (the wall limit) */
};

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int suspected_cb(uint64_t node, void *arg) {
  hpl__sim_dir *d = arg;
  return node && node <= d->w->p.nodes && d->suspected[node - 1];
}

/* ------------------------------------------------------------------ messages */

static void msg_fire(hpl__sim_timer *t);

static msg *msg_new(hpl__sim_dir *d, msg_dir where, uint32_t node) {
  msg *m = calloc(1, sizeof *m);
  if (!m) abort();
  m->d = d;
  m->where = where;
  m->node = node;
  m->tm.fn = msg_fire;
  return m;
}

/* An answer to `node`, sent when the current request's CPU ends. */
static void answer(hpl__sim_dir *d, uint32_t node, ans_kind a, uint32_t sender) {
  msg *m = msg_new(d, M_TO_STORE, node);
  m->ans = a;
  m->sender = sender;
  m->next = d->outbox;
  d->outbox = m;
}

/* A real table call, its CPU measured and charged. */
#define REAL(d, call)                                   \
  do {                                                  \
    double t0_ = thread_cpu();                          \
    call;                                               \
    double c_ = thread_cpu() - t0_;                     \
    (d)->st.real_cpu += c_;                             \
    if (c_ > (d)->st.max_pick) (d)->st.max_pick = c_;   \
    if ((d)->w->p.dir_measured) (d)->cost += c_;        \
  } while (0)

/* One pick for `node`: answered now, or a waiter. */
static void try_pick(hpl__sim_dir *d, uint32_t node, uint32_t avoid, int waiting) {
  uint64_t sender = 0;
  int rc;
  d->st.decisions++;
  d->cost += waiting ? d->w->p.dir_cpu : 0; /* a waiter's retry is work of its own */
  REAL(d, rc = hpl__dtab_pick_sender(&d->tab, d->o, ID(node), avoid ? ID(avoid) : 0, &sender));
  if (rc == 0) {
    answer(d, node, A_SENDER, (uint32_t)(sender - 1));
    if (waiting) {
      for (uint32_t i = 0; i < d->nwait; i++)
        if (d->waiters[i] == node) {
          memmove(d->waiters + i, d->waiters + i + 1, (d->nwait - i - 1) * sizeof *d->waiters);
          d->nwait--;
          break;
        }
    }
    return;
  }
  if (rc == 1 && !waiting) {
    d->waiters[d->nwait++] = node;
    d->st.waits++;
  }
  /* an error (HPL_ELOST): the get fails; the store model counts it stuck */
}

/* acquire.c serve_waiters: every waiter tries again, in arrival order. */
static void on_change(hpl__dir_obj *o, void *arg) {
  hpl__sim_dir *d = arg;
  (void)o;
  uint32_t n = d->nwait;
  uint32_t *v = malloc((n ? n : 1) * sizeof *v);
  if (!v) abort();
  memcpy(v, d->waiters, n * sizeof *v);
  for (uint32_t i = 0; i < n; i++) try_pick(d, v[i], 0, 1);
  free(v);
}

/* nodelive.c move_off_cb / nodes.c upstream_gone_cb: receivers of the node move on. */
static void gone_cb(hpl__dir_obj *o, uint64_t receiver, void *arg) {
  (void)o;
  hpl__sim_dir *d = arg;
  answer(d, (uint32_t)(receiver - 1), A_GONE, 0);
}

static void flush_outbox(hpl__sim_dir *d) {
  for (msg *m = d->outbox, *nx; m; m = nx) {
    nx = m->next;
    hpl__sim_at(&d->w->clk, &m->tm, d->w->clk.now + d->w->p.lat);
  }
  d->outbox = NULL;
}

/* nodes.c object_changed_cb: the object's waiters hear. */
static void changed_cb(hpl__dir_obj *o, void *arg) {
  hpl__sim_dir *d = arg;
  hpl__dtab_changed(&d->tab, o);
}

/* ------------------------------------------------------------------ probes */

/* The probe of `node` is judged (nodelive.c probe_judge): unanswered if the
 * node was stopped all along. Runs as directory work (it is). */
static void judge_probe(hpl__sim_dir *d, uint32_t node) {
  d->probe_out[node] = 0;
  if (!d->w->net.hosts[node].stopped) return; /* it answered */
  d->suspected[node] = 1;
  REAL(d, hpl__dtab_node_unresponsive(&d->tab, ID(node), gone_cb, d));
}

/* ------------------------------------------------------------------ the server */

static void serve_next(hpl__sim_dir *d);

static void run_request(hpl__sim_dir *d, msg *m) {
  hpl__sim_params *p = &d->w->p;
  d->cost = p->dir_cpu;
  d->st.requests++;
  switch (m->kind) {
  case HPL__SIM_REQ_ACQUIRE:
    if (m->peer != UINT32_MAX) { /* a failed or gone sender: free its slot, avoid it */
      REAL(d, hpl__dtab_release_upstream(d->o, ID(m->node)));
      d->st.moves++;
    }
    try_pick(d, m->node, m->peer == UINT32_MAX ? 0 : m->peer, 0);
    break;
  case HPL__SIM_REQ_COMPLETE:
    REAL(d, hpl__dtab_loc_complete(&d->tab, d->o, ID(m->node), (uint64_t)p->size));
    REAL(d, hpl__dtab_changed(&d->tab, d->o)); /* (measured without the waiters' picks too) */
    break;
  case HPL__SIM_REQ_SUSPECT: {
    hpl__dir_loc *me = hpl__dtab_loc(d->o, ID(m->node));
    if (!me || me->complete || me->upstream != ID(m->peer)) break; /* stale: stay */
    if (d->suspected[m->peer]) {
      uint64_t sender = 0;
      int rc;
      d->st.decisions++;
      REAL(d, rc = hpl__dtab_pick_instead(&d->tab, d->o, ID(m->node), ID(m->peer), &sender));
      if (rc == 0) {
        d->st.moves++;
        answer(d, m->node, A_MOVE, (uint32_t)(sender - 1));
      }
    } else if (d->probe_out[m->peer] == 0) {
      d->probe_out[m->peer] = d->w->clk.now;
      hpl__sim_at(&d->w->clk, &d->probe_tm[m->peer], d->w->clk.now + p->probe_s);
    }
    break;
  }
  case HPL__SIM_REQ_GONE:
    d->suspected[m->node] = 0;
    REAL(d, hpl__dtab_node_gone(&d->tab, ID(m->node), gone_cb, changed_cb, d));
    break;
  case HPL__SIM_REQ_HELD:
    d->suspected[m->node] = 0;
    if (m->peer == UINT32_MAX) { /* locs.c held_copy */
      REAL(d, {
        hpl__dtab_loc_complete(&d->tab, d->o, ID(m->node), (uint64_t)p->size);
        hpl__dir_loc *l = hpl__dtab_loc(d->o, ID(m->node));
        if (l) hpl__dtab_recount_serving(d->o, l);
        hpl__dtab_changed(&d->tab, d->o);
      });
    } else { /* locs.c held_partial */
      REAL(d, hpl__dtab_loc_partial(&d->tab, d->o, ID(m->node), (uint64_t)p->size, ID(m->peer)));
    }
    break;
  case HPL__SIM_REQ_SILENT: /* a quiet note: probe the sender (once at a time) */
    if (!d->suspected[m->peer] && d->probe_out[m->peer] == 0) {
      d->probe_out[m->peer] = d->w->clk.now;
      hpl__sim_at(&d->w->clk, &d->probe_tm[m->peer], d->w->clk.now + p->probe_s);
    }
    break;
  }
}

static void cpu_done(hpl__sim_timer *t) {
  hpl__sim_dir *d = (hpl__sim_dir *)((char *)t - offsetof(hpl__sim_dir, cpu));
  flush_outbox(d);
  free(d->cur);
  d->cur = NULL;
  serve_next(d);
}

static void serve_next(hpl__sim_dir *d) {
  if (d->cur || !d->qhead) return;
  msg *m = d->qhead;
  d->qhead = m->next;
  if (!d->qhead) d->qtail = NULL;
  double waited = d->w->clk.now - m->queued_at;
  if (waited > d->st.max_queue) d->st.max_queue = waited;
  d->cur = m;
  if (m->kind == (hpl__sim_req_kind)-1) { /* a probe's judgement */
    d->cost = d->w->p.dir_cpu;
    judge_probe(d, m->node);
  } else {
    run_request(d, m);
  }
  if (d->w->p.wall_limit > 0 && (double)clock() / CLOCKS_PER_SEC - d->cpu0 > d->w->p.wall_limit)
    d->w->clk.stop = 1;
  d->st.busy += d->cost;
  d->st.last_end = d->w->clk.now + d->cost;
  hpl__sim_at(&d->w->clk, &d->cpu, d->w->clk.now + d->cost);
}

static void enqueue(hpl__sim_dir *d, msg *m) {
  m->queued_at = d->w->clk.now;
  m->next = NULL;
  if (d->qtail) d->qtail->next = m;
  else d->qhead = m;
  d->qtail = m;
  serve_next(d);
}

static void msg_fire(hpl__sim_timer *t) {
  msg *m = (msg *)t;
  hpl__sim_dir *d = m->d;
  if (m->where == M_TO_DIR) {
    if (hpl__sim_dir_down(d)) { /* no directory listens: lost (the store re-sends) */
      free(m);
      return;
    }
    enqueue(d, m);
    return;
  }
  hpl__sim_world *w = d->w;
  switch (m->ans) {
  case A_SENDER: hpl__sim_store_answer(w, m->node, m->sender); break;
  case A_STAY: hpl__sim_store_stay(w, m->node, 0); break;
  case A_GONE: hpl__sim_store_stay(w, m->node, -1); break;
  case A_MOVE: hpl__sim_store_move(w, m->node, m->sender); break;
  }
  free(m);
}

static void probe_fire(hpl__sim_timer *t);

hpl__sim_dir *hpl__sim_dir_new(hpl__sim_world *w) {
  hpl__sim_dir *d = calloc(1, sizeof *d);
  uint32_t n = w->p.nodes;
  if (!d) abort();
  d->w = w;
  d->cpu0 = (double)clock() / CLOCKS_PER_SEC;
  d->waiters = calloc(n, sizeof *d->waiters);
  d->suspected = calloc(n, 1);
  d->probe_out = calloc(n, sizeof *d->probe_out);
  d->probe_tm = calloc(n, sizeof *d->probe_tm);
  if (!d->waiters || !d->suspected || !d->probe_out || !d->probe_tm) abort();
  for (uint32_t i = 0; i < n; i++) d->probe_tm[i].fn = probe_fire;
  d->cpu.fn = cpu_done;
  hpl__dtab_init(&d->tab, w->p.max_senders);
  d->tab.suspected = suspected_cb;
  d->tab.usable_arg = d;
  hpl__dtab_on_change(&d->tab, on_change, d);
  d->o = hpl__dtab_get(&d->tab, "x");
  if (!d->o || hpl__dtab_add_loc(&d->tab, d->o, ID(0), (uint64_t)w->p.size, 1, 1) != 0) abort();
  return d;
}

/* The probe's timer belongs to the directory's array: find the node. */
static hpl__sim_dir *probe_owner;

static void probe_fire(hpl__sim_timer *t) {
  hpl__sim_dir *d = probe_owner;
  msg *m = msg_new(d, M_TO_DIR, (uint32_t)(t - d->probe_tm));
  m->kind = (hpl__sim_req_kind)-1;
  enqueue(d, m);
}

void hpl__sim_dir_free(hpl__sim_dir *d) {
  if (!d) return;
  hpl__sim_clock *c = &d->w->clk;
  hpl__sim_cancel(c, &d->cpu);
  for (uint32_t i = 0; i < d->w->p.nodes; i++) hpl__sim_cancel(c, &d->probe_tm[i]);
  for (msg *m = d->qhead, *nx; m; m = nx) nx = m->next, free(m);
  for (msg *m = d->outbox, *nx; m; m = nx) nx = m->next, free(m);
  free(d->cur);
  hpl__dtab_clear(&d->tab);
  free(d->waiters);
  free(d->suspected);
  free(d->probe_out);
  free(d->probe_tm);
  free(d);
}

void hpl__sim_dir_send(hpl__sim_dir *d, hpl__sim_req_kind k, uint32_t node, uint32_t peer) {
  probe_owner = d;
  msg *m = msg_new(d, M_TO_DIR, node);
  m->kind = k;
  m->peer = peer;
  hpl__sim_at(&d->w->clk, &m->tm, d->w->clk.now + d->w->p.lat);
}

void hpl__sim_dir_suspect(hpl__sim_dir *d, uint32_t node) { d->suspected[node] = 1; }

void hpl__sim_dir_node_dead(hpl__sim_dir *d, uint32_t node) {
  /* the directory's own verdict (its sweep): queued as directory work */
  if (hpl__sim_dir_down(d)) return;
  msg *m = msg_new(d, M_TO_DIR, node);
  m->kind = HPL__SIM_REQ_GONE;
  enqueue(d, m);
}

int hpl__sim_dir_down(const hpl__sim_dir *d) { return d->w->clk.now < d->up_at; }

void hpl__sim_dir_restart(hpl__sim_dir *d, double up) {
  hpl__sim_clock *c = &d->w->clk;
  hpl__sim_cancel(c, &d->cpu); /* the request being served dies with it */
  free(d->cur);
  d->cur = NULL;
  for (msg *m = d->qhead, *nx; m; m = nx) nx = m->next, free(m);
  for (msg *m = d->outbox, *nx; m; m = nx) nx = m->next, free(m);
  d->qhead = d->qtail = d->outbox = NULL;
  for (uint32_t i = 0; i < d->w->p.nodes; i++) {
    hpl__sim_cancel(c, &d->probe_tm[i]);
    d->probe_out[i] = 0;
    d->suspected[i] = 0;
  }
  d->nwait = 0;
  hpl__dtab_clear(&d->tab); /* an empty table, same settings and subscribers */
  d->o = hpl__dtab_get(&d->tab, "x");
  if (!d->o) abort();
  d->up_at = up;
}

void hpl__sim_dir_back(hpl__sim_dir *d, uint32_t node) { d->suspected[node] = 0; }

const hpl__sim_dirstats *hpl__sim_dir_stats(const hpl__sim_dir *d) { return &d->st; }
