/* simred.c - reduce and allreduce in hpsim (see sim.h, section simred): the
 * data path of a reduce tree, a ring allreduce, and a reduce followed by
 * its broadcast along the chain (--no-rings), as per-unit pipelines.
 *
 * Linked, not rewritten: the plan (src/common/planner.c hpl__plan_make, the
 * degree from the cost model T(d) = L (height + 1) + d S / B and the in-order
 * slot numbering) with the directory's cost parameters (directory/cost.c:
 * --reduce-latency 200 us and --reduce-bandwidth 125 MB/s by default, or
 * the true ones for "auto"), and the CPU costs measured from the real
 * hpl__digest_bytes and hpl__reduce_apply (hpl__simred_calibrate).
 *
 * Modelled, because the code is tangled with the directory's server record,
 * its connections and messages (reduce_tree.c needs hpl__dir_server, nodes.c
 * and reduce_msg.c): which slot an arriving source fills. As in
 * reduce_tree.c hpl__dir_reduce_arrival: the sink's own source takes the
 * root, the others fill the non-root slots in in-order in the order they
 * became ready (host i's source is the i-th ready); its CPU (a scan of the
 * slots per arrival, as pick_node and the first-empty-slot loop do) is
 * measured here and charged with the fixed per-request cost.
 *
 * The data path (store/rdtask.c, rdcombine.c, rdsink.c, store/ring.c):
 *  - every stream is a pipe at its max-min share of the links it crosses;
 *    the streams of these runs never change, so the shares are computed
 *    once (equal shares of a link among its streams: a parent's downlink
 *    among its children, a chain link among the reduce and the broadcast);
 *  - a stream sends whole units (hpl__digest_unit) as its maker publishes
 *    them: unit u leaves when it is ready and unit u-1 has left, takes
 *    unit/rate on the wire and lands one latency later;
 *  - a node's unit u is published once unit u of every child landed and
 *    its CPU job ran: per child unit one digest check and the store's own
 *    per-byte cost (c_base), one combine per child (hpl__reduce_apply into
 *    its own source), and the digest of its output unit (rddig.c). A node's
 *    CPU is one server (its share of a core: cpu_share);
 *  - a leaf's output is its source object, pulled as any object: ready at
 *    the start, its digests made at put time;
 *  - a ring member (store/ring.c, ringin.c): its stream is its own slice,
 *    then the incoming steps 0..2k-4 as they are checked and combined
 *    (partial sums of k-1 steps, then whole slices passed on); a unit of
 *    the incoming stream costs a check, a combine in the first k-1 steps,
 *    and the digest of the same bytes going out.
 * Not modelled: failures (a slot failing and its ancestors restarting,
 * stragglers, the crawl judge) and sources arriving over time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digest.h"
#include "hoplite.h"
#include "ops.h"
#include "planner.h"
#include "sim.h"

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One measurement of each: CPU s per byte. */
static void measure(const float *a0, float *a, const float *b, size_t n, double *h, double *c) {
  uint8_t d[HPL__DIGEST_LEN];
  int reps = 200;
  double t0 = thread_cpu();
  for (int i = 0; i < reps; i++) hpl__digest_bytes(HPL__DIGEST_SHA256, a0, n, d);
  double t1 = thread_cpu();
  for (int i = 0; i < reps * 4; i++) hpl__reduce_apply(HPL_OP_SUM, HPL_DT_F32, a, b, n);
  double t2 = thread_cpu();
  *h = (t1 - t0) / ((double)reps * (double)n);
  *c = (t2 - t1) / ((double)reps * 4 * (double)n);
}

void hpl__simred_calibrate(double *c_hash, double *c_comb) {
  size_t n = HPL__DIGEST_UNIT;
  float *a = calloc(n / 4, 4), *b = calloc(n / 4, 4);
  if (!a || !b) abort();
  for (size_t i = 0; i < n / 4; i++) a[i] = (float)i, b[i] = 1.0f;
  /* the least of 7 (the machine is shared: others' work only adds) */
  *c_hash = *c_comb = 1;
  for (int i = 0; i < 7; i++) {
    double h, c;
    measure(a, a, b, n, &h, &c);
    if (h < *c_hash) *c_hash = h;
    if (c < *c_comb) *c_comb = c;
  }
  free(a);
  free(b);
}

/* ------------------------------------------------------------------ pieces */

typedef struct node {
  double cpu_free, cpu_used; /* its CPU server */
} node;

/* A CPU job of `cost` s at node h, ready at `at`: when it ends. */
static double cpu_job(node *h, const hpl__simred_params *p, double at, double cost) {
  double start = at > h->cpu_free ? at : h->cpu_free;
  h->cpu_used += cost;
  h->cpu_free = start + cost / p->cpu_share;
  return h->cpu_free;
}

/* A stream: its last unit's departure. Unit of `b` bytes ready at `ready`
 * leaves after the previous one, lands a latency later: returns when. */
typedef struct pipe {
  double sent, rate, bytes;
} pipe;

static double pipe_send(pipe *s, const hpl__simred_params *p, double ready, double b) {
  double start = ready > s->sent ? ready : s->sent;
  s->sent = start + b / s->rate;
  s->bytes += b;
  return s->sent + p->lat;
}

static double unit_bytes(double total, double unit, uint64_t u) {
  double b = total - (double)u * unit;
  return b < unit ? b : unit;
}

/* ------------------------------------------------------------------ reduce trees */

/* The directory's fill of the k slots in arrival order (reduce_tree.c, as
 * described above): host[slot]. Returns the CPU it took. */
static double fill_slots(const hpl__plan *pl, uint32_t *host) {
  double t0 = thread_cpu();
  int k = pl->n;
  uint8_t *filled = calloc((size_t)k, 1), *used = calloc((size_t)k, 1);
  if (!filled || !used) abort();
  for (int src = 0; src < k; src++) { /* arrivals: host src's source */
    int slot = -1;
    if (src == 0) slot = pl->root; /* the sink holds it */
    else
      for (int c = 0; c < k; c++)
        if (c != pl->root && !filled[c]) {
          slot = c;
          break;
        }
    if (slot < 0) slot = pl->root;
    int again = 0; /* pick_node: a node running no slot yet (one copy here: its own) */
    for (int c = 0; c < k; c++) again |= filled[c] && host[c] == (uint32_t)src;
    (void)again;
    filled[slot] = 1;
    used[src] = 1;
    host[slot] = (uint32_t)src;
  }
  free(filled);
  free(used);
  return thread_cpu() - t0;
}

/* Source counts of a slot's output: how many, their sum and sum of squares
 * (every source once: k, k(k-1)/2, (k-1)k(2k-1)/6). */
typedef struct tally {
  double n, sum, sq;
} tally;

static int tally_once(const tally *t, uint32_t k) {
  double K = k;
  return t->n == K && t->sum == K * (K - 1) / 2 && t->sq == (K - 1) * K * (2 * K - 1) / 6;
}

/* Run the tree; `bcast` (the --no-rings allreduce): the target then goes
 * along the chain from the sink. */
static int run_tree(const hpl__simred_params *p, hpl__simred_result *r, int bcast) {
  uint32_t k = p->k;
  hpl__plan pl;
  if (p->degree ? hpl__plan_build((int)k, p->degree, &pl) != 0
                : hpl__plan_make((int)k, p->size, p->plan_lat, p->plan_bw, &pl) != 0)
    return -1;
  if (p->degree) pl.cost = hpl__plan_cost(pl.degree, (int)k, p->size, p->plan_lat, p->plan_bw);
  if (bcast && pl.degree != 1) bcast = 2; /* not a chain: broadcast after, in host order */
  uint32_t *host = calloc(k, sizeof *host);
  node *nd = calloc(k, sizeof *nd);
  tally *ta = calloc(k, sizeof *ta);
  int *order = malloc(k * sizeof *order), *stack = malloc(k * sizeof *stack);
  uint64_t nu = (uint64_t)ceil(p->size / p->unit);
  double *arr = malloc((size_t)k * nu * sizeof *arr); /* slot's units landed at its parent */
  double *root_out = malloc(nu * sizeof *root_out);
  if (!host || !nd || !ta || !order || !stack || !arr || !root_out) abort();
  r->dir_busy = fill_slots(&pl, host) + k * p->dir_cpu;
  r->decisions = k;
  r->degree = pl.degree;
  r->plan_cost = pl.cost;
  /* post-order: children before parents */
  int no = 0, sp = 0;
  uint32_t *next = calloc(k, sizeof *next);
  int *depth = calloc(k, sizeof *depth);
  if (!next || !depth) abort();
  stack[sp++] = pl.root;
  while (sp) {
    int s = stack[sp - 1];
    if (next[s] < (uint32_t)pl.nchild[s]) {
      int c = pl.child[s * pl.degree + next[s]++];
      depth[c] = depth[s] + 1;
      if (depth[c] > r->depth) r->depth = depth[c];
      stack[sp++] = c;
    } else {
      order[no++] = s;
      sp--;
    }
  }
  r->depth += 1; /* the root's output into the target at the sink counts as a hop */
  /* shares: each slot's stream crosses its host's uplink (one stream, or
   * two with the chain's broadcast) and its parent host's downlink (the
   * parent's children, plus the broadcast into it) */
  for (int i = 0; i < no; i++) {
    int s = order[i];
    double *a = arr + (size_t)s * nu;
    tally *t = &ta[s];
    t->n = 1, t->sum = host[s], t->sq = (double)host[s] * host[s];
    int nc = pl.nchild[s];
    pipe out = {0};
    int par = pl.parent[s];
    /* the chain's broadcast shares every link but the last one into the
     * sink (the reduce's alone) and the first one out of it */
    double down = par < 0 ? 1 : (double)pl.nchild[par] * (bcast == 1 && par != pl.root ? 2 : 1);
    out.rate = p->rate / down;
    for (int c = 0; c < nc; c++) {
      tally *ct = &ta[pl.child[s * pl.degree + c]];
      t->n += ct->n, t->sum += ct->sum, t->sq += ct->sq;
    }
    double prev = p->start;
    for (uint64_t u = 0; u < nu; u++) {
      double b = unit_bytes(p->size, p->unit, u), ready = p->start;
      if (nc) {
        for (int c = 0; c < nc; c++) {
          double x = arr[(size_t)pl.child[s * pl.degree + c] * nu + u];
          if (x > ready) ready = x;
        }
        double cost = nc * b * (p->c_hash + p->c_base + p->c_comb) + b * p->c_hash;
        ready = cpu_job(&nd[host[s]], p, ready, cost);
      }
      if (ready < prev) ready = prev;
      prev = ready;
      if (par >= 0) a[u] = pipe_send(&out, p, ready, b);
      else root_out[u] = ready; /* the root writes the target at the sink */
    }
    if (par >= 0 && out.bytes > r->link_bytes) r->link_bytes = out.bytes;
  }
  r->t = root_out[nu - 1];
  r->counted = ta[pl.root].n;
  r->once_ok = (uint32_t)tally_once(&ta[pl.root], k);
  double rate = p->rate / (pl.degree > 1 ? pl.degree : 1);
  r->bound = p->start + p->size / rate + r->depth * (p->unit / rate + p->lat);
  if (bcast) {
    /* the target along the chain: the sink, then the slots from the leaf
     * up (reduce_tree.c hpl__dir_reduce_ring_sender: slot i pulls from
     * slot i-1, slot 0 from the sink); every copy checks each unit */
    double *have = root_out; /* the sender's units, in place */
    double *next_have = malloc(nu * sizeof *next_have);
    /* its own CPU server per host: the reduce's jobs were all placed
     * first, and a copy's checks run on the store's thread pool beside
     * the task's combines (the two overlap in time) */
    node *bn = calloc(k, sizeof *bn);
    if (!next_have || !bn) abort();
    for (uint32_t i = 0; i + 1 < k; i++) {
      int s = i; /* slots 0..k-2 (the chain's non-root slots) in order */
      if (bcast == 2) s = -1;
      uint32_t h = s >= 0 && s != pl.root ? host[s] : i + 1;
      pipe pp = {0};
      /* out of the sink: its uplink is the broadcast's alone; the others
       * share theirs with the reduce stream (same link, same direction) */
      pp.rate = bcast == 1 && i > 0 ? p->rate / 2 : p->rate;
      for (uint64_t u = 0; u < nu; u++) {
        double b = unit_bytes(p->size, p->unit, u);
        double land = pipe_send(&pp, p, have[u], b);
        next_have[u] = cpu_job(&bn[h], p, land, b * (p->c_hash + p->c_base));
        if (u && next_have[u] < next_have[u - 1]) next_have[u] = next_have[u - 1];
      }
      memcpy(have, next_have, nu * sizeof *have);
      if (pp.bytes > r->link_bytes) r->link_bytes = pp.bytes;
    }
    for (uint32_t i = 0; i < k; i++) nd[i].cpu_used += bn[i].cpu_used;
    free(next_have);
    free(bn);
    r->t = have[nu - 1];
    r->bound = p->start + 2 * p->size / p->rate + 2 * r->depth * (p->unit / (p->rate / 2) + p->lat);
  }
  for (uint32_t i = 0; i < k; i++)
    if (nd[i].cpu_used > r->cpu_max) r->cpu_max = nd[i].cpu_used;
  free(next);
  free(depth);
  free(host);
  free(nd);
  free(ta);
  free(order);
  free(stack);
  free(arr);
  free(root_out);
  hpl__plan_free(&pl);
  return 0;
}

/* ------------------------------------------------------------------ rings */

#define RING_MIN_SLICE (256.0 * 1024) /* directory/ring.c */
#define RING_MAX_MEMBERS 1024

static int run_ring(const hpl__simred_params *p, hpl__simred_result *r) {
  uint32_t k = p->k;
  double t0 = thread_cpu();
  double elems = floor(p->size / 4);
  double *seg = malloc((k + 1) * sizeof *seg);
  if (!seg) abort();
  for (uint32_t i = 0; i <= k; i++) seg[i] = floor(elems * i / k) * 4; /* store/ring.c */
  r->dir_busy = thread_cpu() - t0 + k * p->dir_cpu;
  r->decisions = k; /* one placement per member (ring.c's join) */
  r->degree = 1;
  r->depth = (int)k;
  /* each member's outgoing stream: its slice, then steps 0..2k-4 of the
   * incoming one; the lengths differ by a slice at most (equal here up to
   * rounding: every member's stream taken as member 0's layout shifted) */
  double *sl = malloc(k * sizeof *sl);
  if (!sl) abort();
  for (uint32_t i = 0; i < k; i++) sl[i] = seg[i + 1] - seg[i];
  double out_len = 0;
  for (uint32_t s = 0; s < 2 * k - 2; s++) out_len += sl[(k * 2 - s) % k];
  uint64_t nu = (uint64_t)ceil(out_len / p->unit);
  double comb_end = 0; /* bytes of the incoming stream in its first k-1 steps */
  for (uint32_t s = 0; s + 1 < k; s++) comb_end += sl[(k * 2 - 1 - s) % k];
  double *done = malloc((size_t)k * nu * sizeof *done); /* incoming unit checked, combined */
  double *out = malloc((size_t)k * nu * sizeof *out);   /* outgoing unit published */
  pipe *pp = calloc(k, sizeof *pp);
  node *nd = calloc(k, sizeof *nd);
  if (!done || !out || !pp || !nd) abort();
  for (uint32_t i = 0; i < k; i++) {
    pp[i].rate = p->rate;
    /* its own slice's digests first (rddig_made on the first progress) */
    cpu_job(&nd[i], p, p->start, sl[i] * p->c_hash);
  }
  for (uint64_t u = 0; u < nu; u++) {
    double b = unit_bytes(out_len, p->unit, u);
    for (uint32_t i = 0; i < k; i++) { /* outgoing unit u: own bytes, or incoming ones done */
      double end = (double)u * p->unit + b, first = sl[i], ready = nd[i].cpu_free;
      if (u == 0 || end > first) {
        double need = end - first; /* incoming bytes this unit needs */
        if (need > 0) {
          uint64_t v = (uint64_t)ceil(need / p->unit) - 1;
          ready = done[(size_t)i * nu + v];
        } else {
          ready = p->start + sl[i] * p->c_hash / p->cpu_share;
        }
      } else {
        ready = p->start + sl[i] * p->c_hash / p->cpu_share;
      }
      if (u && ready < out[(size_t)i * nu + u - 1]) ready = out[(size_t)i * nu + u - 1];
      out[(size_t)i * nu + u] = ready;
    }
    for (uint32_t i = 0; i < k; i++) { /* unit u of the predecessor's stream lands at i */
      uint32_t pred = (i + k - 1) % k;
      double land = pipe_send(&pp[pred], p, out[(size_t)pred * nu + u], b);
      double at = (double)u * p->unit;
      double cost = b * (2 * p->c_hash + p->c_base) + (at < comb_end ? b * p->c_comb : 0);
      double x = cpu_job(&nd[i], p, land, cost);
      if (u && x < done[(size_t)i * nu + u - 1]) x = done[(size_t)i * nu + u - 1];
      done[(size_t)i * nu + u] = x;
    }
  }
  r->t = 0;
  for (uint32_t i = 0; i < k; i++) {
    double x = done[(size_t)i * nu + nu - 1];
    if (x > r->t) r->t = x;
    if (nd[i].cpu_used > r->cpu_max) r->cpu_max = nd[i].cpu_used;
    if (pp[i].bytes > r->link_bytes) r->link_bytes = pp[i].bytes;
  }
  r->bound = p->start + out_len / p->rate + p->unit / p->rate + p->lat;
  /* what each member's target holds: slice j after step st of member i's
   * incoming stream (member i-1's outgoing step st) has the sources of
   * members i-1-st .. i (partial sums), then whole slices pass on */
  r->once_ok = 1;
  r->counted = k;
  tally *in = calloc(k, sizeof *in), *nx = calloc(k, sizeof *nx);
  tally *tg = calloc((size_t)k * k, sizeof *tg);
  if (!in || !nx || !tg) abort();
  for (uint32_t j = 0; j < k; j++) /* outgoing step 0: own slice j */
    in[j] = (tally){1, j, (double)j * j};
  for (uint32_t st = 0; st + 2 < 2 * k; st++) { /* incoming step st at member i */
    for (uint32_t i = 0; i < k; i++) {
      uint32_t pred = (i + k - 1) % k, slice = (pred + 2 * k - st) % k;
      tally t = in[pred];
      if (st + 1 < k) t.n += 1, t.sum += i, t.sq += (double)i * i;
      tg[(size_t)i * k + slice] = t;
      nx[i] = t;
    }
    memcpy(in, nx, k * sizeof *in);
  }
  for (uint32_t i = 0; i < k; i++) { /* its own slice's final value came at step k-2 */
    for (uint32_t j = 0; j < k; j++)
      if (!tally_once(&tg[(size_t)i * k + j], k)) r->once_ok = 0, r->counted = tg[(size_t)i * k + j].n;
  }
  free(in);
  free(nx);
  free(tg);
  free(seg);
  free(sl);
  free(done);
  free(out);
  free(pp);
  free(nd);
  return 0;
}

int hpl__simred_run(const hpl__simred_params *given, hpl__simred_result *r) {
  memset(r, 0, sizeof *r);
  hpl__simred_params q = *given, *p = &q;
  if (!(q.unit > 0)) q.unit = (double)hpl__digest_unit((uint64_t)q.size);
  if (p->k < 2 || p->size < p->unit || p->rate <= 0 || p->cpu_share <= 0) return -1;
  if (p->kind == HPL__SIMRED_REDUCE) return run_tree(p, r, 0);
  /* directory/ring.c request_unfit / ring_new: 3 to 1024 sources, each
   * slice at least RING_MIN_SLICE; otherwise the ring is declined and the
   * clients reduce and broadcast */
  if (p->kind == HPL__SIMRED_ALLREDUCE && p->k >= 3 && p->k <= RING_MAX_MEMBERS &&
      p->size / p->k >= RING_MIN_SLICE)
    return run_ring(p, r);
  return run_tree(p, r, 1);
}
