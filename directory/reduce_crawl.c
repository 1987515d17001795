/* reduce_crawl.c - which node of a crawling reduce tree is slow (see
 * reduce_int.h): a stream reported crawling is judged against the link
 * delays the directory measures for every node of the tree (heartbeats,
 * and probes sent when no node stands out yet); the slow node's slot goes
 * to another copy or a spare, as a failed slot does (reduce_tree.c). */
#include <stdio.h>

#include "log.h"
#include "nodes.h"
#include "reduce_int.h"
#include "util.h"

static uint32_t node_rtt(hpl__dir_server *s, uint64_t id) {
  hpl__dir_node *n = hpl__dir_node_find(s, id);
  return n ? hpl__dir_node_link_delay_us(n, hpl__now_ns() / 1000) : 0;
}

/* A node whose link crawls has a queue of bulk bytes in front of its
 * heartbeats and probes (hpl__dir_node_link_delay_us): at least DR_SLOW_FACTOR x
 * any other node of the tree's, and DR_SLOW_MARGIN_US more. The margin is
 * for what every node's samples share on a busy machine (the directory's
 * own loop and link, CPU contention: 5-14 ms seen on 2 cores beside a 15-35
 * ms queue in front of a node slowed to a tenth). */
#define DR_SLOW_FACTOR 2
#define DR_SLOW_MARGIN_US 10000
/* How long measurements of a crawling tree's links get before the crawl is
 * judged again (one not answered by then counts its time so far). */
#define DR_MEASURE_WAIT_MS 50

/* Slot j's output stream crawls, says the node pulling it (`reporter`).
 * Which node is slow? Not necessarily an end of that stream: the streams
 * on both sides of a slow node crawl (the one into it is held back, the
 * one out of its parent starves), and under CPU load any node's
 * heartbeats are a few ms late. The slow node is the one whose heartbeats
 * queue behind its bulk bytes, far more than every other node's of the
 * tree (the sink's and the reporter's included). Returns its slot, or -1
 * if no node stands out (wait for the next report) or the slow node is
 * the sink. */
static int slow_culprit(hpl__dir_reduce *r, int j, uint64_t reporter) {
  uint64_t worst = 0;
  uint32_t d1 = 0, d2 = 0; /* the largest delay, the second largest */
  for (int i = -1; i < (int)r->k; i++) {
    uint64_t node = i < 0 ? r->sink : r->slots[i].filled ? r->slots[i].node : 0;
    /* a node with two slots counts once (a second sight of any other node
     * cannot change the second largest) */
    if (!node || node == worst || (i >= 0 && node == r->sink)) continue;
    uint32_t d = node_rtt(r->srv, node);
    if (d > d1) {
      d2 = d1;
      d1 = d;
      worst = node;
    } else if (d > d2) {
      d2 = d;
    }
  }
  uint32_t dr = node_rtt(r->srv, reporter);
  if (reporter != worst && dr > d2) d2 = dr;
  HPL__LOG_DEBUG("reduce '%s': slot %d crawls (reported by %016llx); largest link delay %u us "
                 "(%016llx), next %u us",
                 r->target, j, (unsigned long long)reporter, d1, (unsigned long long)worst, d2);
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
static int slot_replaceable(hpl__dir_reduce *r, int f, int straggler) {
  hpl__dir_obj *o;
  if (hpl__dir_reduce_other_copy(r, f) || hpl__dir_reduce_earliest_spare(r, &o) >= 0) return 1;
  if (!straggler || r->lost_retaken) return 0;
  return hpl__dir_reduce_earliest_lost_held(r, r->slots[f].src, &o) >= 0 ? 2 : 0;
}

/* Slot j's stream crawls at `rate` (reported by `reporter`): replace the
 * slot whose node is slow, if one stands out and can be replaced. Returns
 * 0 if no node stands out, 1 otherwise (replaced or not). */
static int crawl_judge(hpl__dir_reduce *r, int j, uint64_t reporter, uint64_t rate) {
  hpl__dir_server *s = r->srv;
  int c = slow_culprit(r, j, reporter);
  if (c < 0) return 0;
  int how = slot_replaceable(r, c, 1);
  if (!how) return 1;
  if (how == 2) r->lost_retaken = 1;
  uint64_t old = r->slots[c].node;
  char why[200];
  snprintf(why, sizeof why, "its node crawls: a stream at %.1f MB/s, link delay %.1f ms",
           (double)rate / 1e6, (double)node_rtt(s, old) / 1e3);
  s->ctr.reduce_stragglers++;
  hpl__dir_reduce_slot_failed(r, c, why);
  hpl__dir_reduce_end_task_at(r, old);
  return 1;
}

static void crawl_timer(uv_timer_t *t) {
  hpl__dir_server *s = t->data;
  uint64_t now = hpl__now_ms(), next = 0;
  hpl__dir_reduce *r, *tmp;
  HASH_ITER(hh, s->reduces->by_target, r, tmp) {
    if (!r->crawl_due_ms) continue;
    if (r->crawl_due_ms > now) {
      if (!next || r->crawl_due_ms < next) next = r->crawl_due_ms;
      continue;
    }
    r->crawl_due_ms = 0;
    int j = r->crawl_slot;
    if (!dr_tree_runs(r) || j >= (int)r->k ||
        !r->slots[j].filled || r->slots[j].gen != r->crawl_gen)
      continue; /* over, or that stream was replaced meanwhile */
    crawl_judge(r, j, r->crawl_reporter, r->crawl_rate);
  }
  if (next) uv_timer_start(t, crawl_timer, next - now, 0);
}

void hpl__dir_reduce_crawl_report(hpl__dir_reduce *r, int slot, uint64_t reporter, uint64_t rate) {
  hpl__dir_server *s = r->srv;
  hpl__dr_slot *sl = &r->slots[slot];
  if (crawl_judge(r, slot, reporter, rate) || r->crawl_due_ms) return;
  /* nobody stands out (yet): measure every link of the tree now rather
   * than wait for the next heartbeats, and judge again */
  for (int i = -1; i < (int)r->k; i++) {
    uint64_t id = i < 0 ? r->sink : r->slots[i].filled ? r->slots[i].node : 0;
    hpl__dir_node *n = id ? hpl__dir_node_find(s, id) : NULL;
    if (n) hpl__dir_node_measure(s, n);
  }
  r->crawl_due_ms = hpl__now_ms() + DR_MEASURE_WAIT_MS;
  r->crawl_slot = slot;
  r->crawl_gen = sl->gen;
  r->crawl_reporter = reporter;
  r->crawl_rate = rate;
  uv_timer_t *t = &s->reduces->crawl_timer;
  if (!uv_is_active((uv_handle_t *)t)) uv_timer_start(t, crawl_timer, DR_MEASURE_WAIT_MS, 0);
}

void hpl__dir_reduce_start(hpl__dir_server *s) {
  uv_timer_init(s->loop, &s->reduces->crawl_timer);
  s->reduces->crawl_timer.data = s;
}

void hpl__dir_reduce_stop(hpl__dir_server *s) {
  uv_close((uv_handle_t *)&s->reduces->crawl_timer, NULL);
}
