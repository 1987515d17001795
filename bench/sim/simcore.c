/* simcore.c - the simulator's virtual clock and event heap (see sim.h): an
 * indexed binary min-heap of timers by time, each timer in it at most once.
 * Timers due at the same time fire in the order they were scheduled, so
 * two messages sent one after the other over the same latency arrive in
 * that order (a killed store's last ACQUIRE before its connection's close). */
#include <stdio.h>
#include <stdlib.h>

#include "sim.h"

void hpl__sim_clock_init(hpl__sim_clock *c) {
  c->now = 0;
  c->n = 0;
  c->cap = 1024;
  c->events = 0;
  c->seq = 0;
  c->stop = 0;
  c->heap = malloc((c->cap + 1) * sizeof *c->heap);
  if (!c->heap) abort();
}

void hpl__sim_clock_free(hpl__sim_clock *c) {
  free(c->heap);
  c->heap = NULL;
  c->n = c->cap = 0;
}

static int before(const hpl__sim_timer *a, const hpl__sim_timer *b) {
  return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void put(hpl__sim_clock *c, uint32_t i, hpl__sim_timer *t) {
  c->heap[i] = t;
  t->idx = i;
}

static void up(hpl__sim_clock *c, uint32_t i) {
  hpl__sim_timer *t = c->heap[i];
  while (i > 1 && before(t, c->heap[i / 2])) {
    put(c, i, c->heap[i / 2]);
    i /= 2;
  }
  put(c, i, t);
}

static void down(hpl__sim_clock *c, uint32_t i) {
  hpl__sim_timer *t = c->heap[i];
  for (;;) {
    uint32_t k = 2 * i;
    if (k > c->n) break;
    if (k < c->n && before(c->heap[k + 1], c->heap[k])) k++;
    if (!before(c->heap[k], t)) break;
    put(c, i, c->heap[k]);
    i = k;
  }
  put(c, i, t);
}

void hpl__sim_cancel(hpl__sim_clock *c, hpl__sim_timer *t) {
  uint32_t i = t->idx;
  if (!i) return;
  t->idx = 0;
  hpl__sim_timer *last = c->heap[c->n--];
  if (i > c->n) return; /* it was the last */
  put(c, i, last);
  up(c, i);
  down(c, last->idx);
}

void hpl__sim_at(hpl__sim_clock *c, hpl__sim_timer *t, double at) {
  if (at < c->now) at = c->now;
  t->seq = ++c->seq;
  if (t->idx) {
    t->at = at;
    up(c, t->idx);
    down(c, t->idx);
    return;
  }
  if (c->n == c->cap) {
    c->cap *= 2;
    c->heap = realloc(c->heap, (c->cap + 1) * sizeof *c->heap);
    if (!c->heap) abort();
  }
  t->at = at;
  put(c, ++c->n, t);
  up(c, c->n);
}

void hpl__sim_run(hpl__sim_clock *c, double until) {
  while (c->n && !c->stop) {
    hpl__sim_timer *t = c->heap[1];
    if (t->at > until) {
      c->now = until;
      return;
    }
    hpl__sim_cancel(c, t);
    c->now = t->at;
    c->events++;
    t->fn(t);
  }
}
