/* reduce_crawl.c - which node of a crawling reduce tree is slow (see
 * reduce_int.h): a stream reported crawling is judged against the link
 * delays the directory measures for the suspects, the ends of the streams
 * reported crawling or silent (heartbeats, and probes sent when no node
 * stands out yet); the slow node's slot goes to another copy or a spare,
 * as a failed slot does (reduce_tree.c). */
#include <stdio.h>

#include "log.h"
#include "nodes.h"
#include "reduce_int.h"
#include "util.h"

static uint32_t node_rtt(dir_server *s, uint64_t id) {
  dir_node *n = dir_node_find(s, id);
  return n ? dir_node_link_delay_us(n, hpl__now_ns() / 1000) : 0;
}

/* A node whose link crawls has a queue of bulk bytes in front of its
 * heartbeats and probes (dir_node_link_delay_us): at least DR_SLOW_FACTOR x
 * any other suspect's, and DR_SLOW_MARGIN_US more. The margin is
 * for what every node's samples share on a busy machine (the directory's
 * own loop and link, CPU contention: 5-14 ms seen on 2 cores beside a 15-35
 * ms queue in front of a node slowed to a tenth). */
#define DR_SLOW_FACTOR 2
#define DR_SLOW_MARGIN_US 10000
/* How long measurements of a crawling tree's links get before the crawl is
 * judged again (one not answered by then counts its time so far). */
#define DR_MEASURE_WAIT_MS 50

/* How long a report makes the ends of a stream suspects. */
#define DR_SUSPECT_MS 1000
/* How many times a judgement is put off for a suspect's unanswered probe
 * (DR_MEASURE_WAIT_MS each): a node that has not answered by then is
 * judged on the time it has taken so far. */
#define DR_WAITS_MAX 4

void dr_note_stream_report(dir_reduce *r, int slot, uint64_t reporter) {
  dr_slot *sl = &r->slots[slot];
  sl->crawl_ms = hpl__now_ms();
  sl->crawl_by = reporter;
  sl->crawl_gen = sl->gen;
}

/* The suspects of a crawling tree: both ends of every stream reported
 * crawling or silent within DR_SUSPECT_MS (in its current generation).
 * Fills ids (distinct, at most 2k+2) and returns how many. */
static int suspects(dir_reduce *r, uint64_t *ids) {
  uint64_t now = hpl__now_ms();
  int n = 0;
  for (uint32_t i = 0; i < r->k; i++) {
    dr_slot *sl = &r->slots[i];
    if (!sl->filled || !sl->crawl_ms || sl->crawl_gen != sl->gen ||
        now - sl->crawl_ms > DR_SUSPECT_MS)
      continue;
    uint64_t two[2] = {sl->node, sl->crawl_by};
    for (int e = 0; e < 2; e++) {
      int seen = !two[e];
      for (int q = 0; q < n && !seen; q++) seen = ids[q] == two[e];
      if (!seen) ids[n++] = two[e];
    }
  }
  return n;
}

/* Slot j's output stream crawls, says the node pulling it (`reporter`).
 * Which node is slow? Not necessarily an end of that stream: the streams
 * on both sides of a slow node crawl (the one into it is held back, the
 * one out of its parent starves), and under CPU load any node's
 * heartbeats are a few ms late. The slow node is the one whose heartbeats
 * queue behind its bulk bytes, far more than every other suspect's (the
 * ends of the streams reported crawling or silent: the sink and the
 * reporter among them). The other nodes of the tree are no suspects: a
 * node whose output nobody reports delivers, and one upstream of a stalled
 * stream that still sends at full rate has a queue of its own (as long
 * as a slowed node's) that says nothing about the stall.
 * Returns the slow node's slot; -1 if no node stands out (measure and wait
 * for the next report) or the slow node is the sink; -2 if a suspect other
 * than the one with the largest delay has a probe out unanswered (a paused
 * or cut-off node, whose heartbeats stopped a moment ago and still look
 * punctual): judge again once it answered or took longer. */
static int slow_culprit(dir_reduce *r, int j, uint64_t reporter) {
  uint64_t ids[2 * (size_t)r->k + 2], now_us = hpl__now_ns() / 1000;
  int n = suspects(r, ids);
  uint64_t worst = 0;
  uint32_t d1 = 0, d2 = 0; /* the largest delay, the second largest */
  for (int q = 0; q < n; q++) {
    uint32_t d = node_rtt(r->srv, ids[q]);
    if (d > d1) {
      d2 = d1;
      d1 = d;
      worst = ids[q];
    } else if (d > d2) {
      d2 = d;
    }
  }
  LOG_DEBUG("reduce '%s': slot %d crawls (reported by %016llx); %d suspects, largest link "
            "delay %u us (%016llx), next %u us",
            r->target, j, (unsigned long long)reporter, n, d1, (unsigned long long)worst, d2);
  for (int q = 0; q < n; q++) {
    dir_node *o = ids[q] != worst ? dir_node_find(r->srv, ids[q]) : NULL;
    if (o && dir_node_unanswered_us(o, now_us)) return -2;
  }
  if (!worst || worst == r->sink || d1 < DR_SLOW_FACTOR * (uint64_t)d2 ||
      d1 < d2 + (uint64_t)DR_SLOW_MARGIN_US)
    return -1;
  for (uint32_t i = 0; i < r->k; i++)
    if (r->slots[i].filled && r->slots[i].node == worst) return (int)i;
  return -1;
}

/* Whether slot f could run elsewhere: 1 on another complete copy of its
 * source on a live node, or a spare source; 2 (for a straggler, once per
 * reduce: the caller sets lost_retaken) on a source an earlier failure
 * took out - an earlier straggler judged wrongly is taken back so, only
 * once so that two slow nodes cannot trade places for ever; 0 otherwise. */
static int slot_replaceable(dir_reduce *r, int f, int straggler) {
  dir_obj *o;
  if (dr_other_copy(r, f) || dr_earliest_spare(r, &o) >= 0) return 1;
  if (!straggler || r->lost_retaken) return 0;
  return dr_earliest_lost_held(r, r->slots[f].src, &o) >= 0 ? 2 : 0;
}

/* Slot j's stream crawls at `rate` (reported by `reporter`): replace the
 * slot whose node is slow, if one stands out and can be replaced. Returns
 * 0 if no node stands out, 2 if a suspect's probe is unanswered (judge
 * again), 1 otherwise (replaced or not). */
static int crawl_judge(dir_reduce *r, int j, uint64_t reporter, uint64_t rate) {
  dir_server *s = r->srv;
  int c = slow_culprit(r, j, reporter);
  if (c == -2) return 2;
  if (c < 0) return 0;
  int how = slot_replaceable(r, c, 1);
  if (!how) return 1;
  if (how == 2) r->lost_retaken = 1;
  uint64_t old = r->slots[c].node;
  char why[200];
  snprintf(why, sizeof why, "its node crawls: a stream at %.1f MB/s, link delay %.1f ms",
           (double)rate / 1e6, (double)node_rtt(s, old) / 1e3);
  s->ctr.reduce_stragglers++;
  dr_slot_failed(r, c, why);
  dr_end_task_at(r, old);
  return 1;
}

void dir_reduce_crawl_timer(uv_timer_t *t) {
  dir_server *s = t->data;
  uint64_t now = hpl__now_ms(), next = 0;
  dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces, r, tmp) {
    if (!r->crawl_due_ms) continue;
    if (r->crawl_due_ms > now) {
      if (!next || r->crawl_due_ms < next) next = r->crawl_due_ms;
      continue;
    }
    r->crawl_due_ms = 0;
    int j = r->crawl_slot;
    if (r->done || !r->planned || r->inline_mode || r->adopted || j >= (int)r->k ||
        !r->slots[j].filled || r->slots[j].gen != r->crawl_gen)
      continue; /* over, or that stream was replaced meanwhile */
    if (crawl_judge(r, j, r->crawl_reporter, r->crawl_rate) == 2 &&
        r->crawl_waits < DR_WAITS_MAX) {
      r->crawl_waits++;
      r->crawl_due_ms = now + DR_MEASURE_WAIT_MS;
      if (!next || r->crawl_due_ms < next) next = r->crawl_due_ms;
    }
  }
  if (next) uv_timer_start(t, dir_reduce_crawl_timer, next - now, 0);
}

void dr_crawl_report(dir_reduce *r, int slot, uint64_t reporter, uint64_t rate) {
  dir_server *s = r->srv;
  dr_slot *sl = &r->slots[slot];
  dr_note_stream_report(r, slot, reporter);
  if (crawl_judge(r, slot, reporter, rate) == 1 || r->crawl_due_ms) return;
  /* nobody stands out (yet): measure every suspect's link now rather
   * than wait for the next heartbeats, and judge again */
  uint64_t ids[2 * (size_t)r->k + 2];
  int n = suspects(r, ids);
  for (int q = 0; q < n; q++) {
    dir_node *d = dir_node_find(s, ids[q]);
    if (d) dir_node_measure(s, d);
  }
  r->crawl_waits = 0;
  r->crawl_due_ms = hpl__now_ms() + DR_MEASURE_WAIT_MS;
  r->crawl_slot = slot;
  r->crawl_gen = sl->gen;
  r->crawl_reporter = reporter;
  r->crawl_rate = rate;
  if (!uv_is_active((uv_handle_t *)&s->crawl_timer))
    uv_timer_start(&s->crawl_timer, dir_reduce_crawl_timer, DR_MEASURE_WAIT_MS, 0);
}
