/* rdcombine.c - a reduce task's inputs (see rdtask.h and rdtaskint.h):
 * its children's streams, what the directory hears of a slot's stream
 * (crawling, silent, failed; rdsink.c reports the root's the same way),
 * and the combine steps that fold them with its own source into its
 * output, chunk by chunk.
 *
 * The first child's bytes land straight in the output buffer and are
 * combined in place; further children go through rings of bounded size,
 * whose streams pause while the ring is full. Large combine steps run on
 * libuv's thread pool. The task's life (start, waits) is rdtask.c's, its
 * end rdend.c's.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "dirlink.h"
#include "objdig.h"
#include "faults.h"
#include "log.h"
#include "ops.h"
#include "rddig.h"
#include "rdtaskint.h"
#include "util.h"

#define RD_OFFLOAD (1u << 20) /* combine steps this large go to the pool */

/* Whether children may write the output now: not while it is WAITING (for
 * anything: rdtaskint.h), nor once FAILED or ENDED. */
static int may_write(const hpl__rd_task *t) {
  return t->state == HPL__RD_RUNNING || t->state == HPL__RD_REBASING ||
         t->state == HPL__RD_COMPLETE;
}

void hpl__rdtask_go(hpl__rd_task *t) {
  if (!may_write(t)) return;
  for (int j = 0; j < t->nch; j++)
    if (t->ch[j].known) hpl__rdtask_child_start(t, &t->ch[j]);
  hpl__rdtask_try_combine(t);
}

void hpl__rdtask_restart_children(hpl__rd_task *t) {
  t->comb = t->base;
  for (int j = 0; j < t->nch; j++) {
    hpl__rd_child *c = &t->ch[j];
    if (c->pull) hpl__puller_cancel(c->pull);
    c->pull = NULL;
    c->recv = c->raw = t->base;
    c->done = 0;
    c->paused = 0;
    c->corrupt_wait = 0;
  }
  if (t->state == HPL__RD_COMPLETE) hpl__rdtask_set_state(t, HPL__RD_RUNNING);
  hpl__rdtask_go(t);
}

/* ------------------------------------------------------------------ reports */

/* The ReduceFailNote for slot `slot` (generation gen): failed, silent, or
 * (corrupt_unit not UINT64_MAX) a unit that failed its digest. */
static void send_fail_note(hpl__store *s, const char *target, uint64_t rid, uint32_t slot,
                           uint32_t gen, const char *detail, int silent, uint64_t rate,
                           uint64_t corrupt_unit) {
  Hplpb__ReduceFailNote n = HPLPB__REDUCE_FAIL_NOTE__INIT;
  n.target = (char *)target;
  n.rid = rid;
  n.slot = slot;
  n.gen = gen;
  n.detail = (char *)(detail ? detail : "");
  n.silent = silent;
  n.slow = rate > 0;
  n.rate = rate;
  n.corrupt = corrupt_unit != UINT64_MAX;
  n.corrupt_unit = n.corrupt ? corrupt_unit : 0;
  hpl__dirlink_note(s, HPL__MSG_REDUCE_FAIL, &n.base);
}

void hpl__rdtask_report_slow(hpl__store *s, const char *target, uint64_t rid, uint32_t slot,
                             uint32_t gen, double bps) {
  uint64_t rate = (uint64_t)bps;
  s->ctr.reduce_crawl_reports++;
  HPL__LOG_INFO("reduce '%s': the stream of slot %u crawls (%.1f MB/s, this node usually gets "
                "%.1f MB/s); told the directory",
                target, slot, (double)rate / 1e6, hpl__puller_usual_rate(s) / 1e6);
  send_fail_note(s, target, rid, slot, gen, NULL, 0, rate ? rate : 1, UINT64_MAX);
}

void hpl__rdtask_report_silent(hpl__store *s, hpl__puller *p, const char *target, uint64_t rid,
                               uint32_t slot, uint32_t gen, uint64_t quiet_ms) {
  HPL__LOG_INFO(
      "reduce '%s': the stream of slot %u has been silent for %llu ms; told the directory", target,
      slot, (unsigned long long)quiet_ms);
  send_fail_note(s, target, rid, slot, gen, NULL, 1, 0, UINT64_MAX);
  hpl__puller_suspect_done(p, HPL__RDTASK_SILENT_RETRY_MS);
}

void hpl__rdtask_report_fail(hpl__store *s, const char *target, uint64_t rid, uint32_t slot,
                             uint32_t gen, const char *detail) {
  send_fail_note(s, target, rid, slot, gen, detail, 0, 0, UINT64_MAX);
}

void hpl__rdtask_report_corrupt(hpl__store *s, const char *target, uint64_t rid, uint32_t slot,
                                uint32_t gen, uint64_t unit, const char *detail) {
  send_fail_note(s, target, rid, slot, gen, detail, 0, 0, unit);
}

/* ------------------------------------------------------------------ combine */

/* out[from, to) = op(out, own, ring children): child 0 is already in out. */
static void combine_range(hpl__rd_task *t, uint64_t from, uint64_t to) {
  if (from >= to) return;
  uint8_t *out = t->out->data;
  const uint8_t *own = t->src->data + t->src_off;
  size_t n = (size_t)(to - from);
  if (t->nch == 0)
    memcpy(out + from, own + from, n);
  else
    hpl__reduce_apply(t->op, t->dtype, out + from, own + from, n);
  for (int j = 1; j < t->nch; j++) {
    hpl__rd_child *c = &t->ch[j];
    /* the range may wrap around the ring */
    uint64_t x = from;
    while (x < to) {
      size_t pos = (size_t)(x % c->ring_size);
      size_t k = c->ring_size - pos;
      if (k > to - x) k = (size_t)(to - x);
      hpl__reduce_apply(t->op, t->dtype, out + x, c->ring + pos, k);
      x += k;
    }
  }
}

static void work_run(uv_work_t *w) {
  hpl__rd_task *t = w->data;
  hpl__faults_combine_delay(&t->s->cfg.faults);
  combine_range(t, t->w_from, t->w_to);
}

/* The output advanced to `to`: publish, make ring room, maybe finish. */
static void task_advance(hpl__rd_task *t, uint64_t to) {
  hpl__store *s = t->s;
  t->comb = to;
  hpl__obj_progress(s, t->out, to);
  if (!t->to_target) hpl__rddig_made(s, t->out, to); /* its digests, for its receiver */
  for (int j = 1; j < t->nch; j++)
    if (t->ch[j].paused) {
      t->ch[j].paused = 0;
      hpl__puller_resume(t->ch[j].pull);
    }
  if (t->comb < t->size) return;
  HPL__LOG_DEBUG("reduce '%s' slot %u: output complete (%llu bytes)", t->target, t->slot,
                 (unsigned long long)t->size);
  hpl__rdtask_set_state(t, HPL__RD_COMPLETE);
  if (t->to_target) { /* made here: its digests are made of it before it counts as complete */
    if (!hpl__digest_algo_on(s->cfg.integrity) ||
        hpl__objdig_make_all(s, t->out, s->cfg.integrity, hpl__dirlink_target_made, NULL))
      hpl__dirlink_target_made(s, t->out, NULL);
  } else {
    t->out->state = HPL__OBJ_SEALED;
    hpl__obj_progress(s, t->out, t->size);
  }
}

static void work_done(uv_work_t *w, int status) {
  hpl__rd_task *t = w->data;
  t->working = 0;
  if (t->state == HPL__RD_ENDED) {
    hpl__rd_task *next = t->successor;
    hpl__store *s = t->s;
    char target[sizeof t->target];
    int root = t->to_target && t->root_moved;
    snprintf(target, sizeof target, "%s", t->target);
    hpl__rdtask_free_task(t); /* next waits for it no more */
    if (next) hpl__rdtask_wait_over(next);
    if (root && s->tasks->root_released)
      s->tasks->root_released(s, target); /* the target is the sink's */
    return;
  }
  if (t->state == HPL__RD_REBASING) { /* the step's bytes are made again */
    hpl__rdtask_set_state(t, HPL__RD_RUNNING);
    hpl__rdtask_restart_children(t);
    return;
  }
  if (status == 0) task_advance(t, t->w_to);
  hpl__rdtask_try_combine(t);
}

static void src_back(hpl__watch *w) {
  hpl__rdtask_try_combine((hpl__rd_task *)((char *)w - offsetof(hpl__rd_task, src_watch)));
}

void hpl__rdtask_try_combine(hpl__rd_task *t) {
  if (t->working || !may_write(t) || t->comb >= t->size) return;
  if (t->src->state != HPL__OBJ_SEALED) { /* spilled: being read back (room.c) */
    t->src_watch.fn = src_back;
    hpl__obj_watch(t->src, &t->src_watch);
    return;
  }
  uint64_t avail = t->size;
  for (int j = 0; j < t->nch; j++) {
    hpl__rd_child *c = &t->ch[j];
    if (!c->known) return;
    if (c->recv < avail) avail = c->recv;
  }
  if (avail < t->size) avail -= avail % 8; /* whole elements of any dtype */
  if (avail <= t->comb) return;
  if (avail - t->comb >= RD_OFFLOAD) {
    t->working = 1;
    t->w_from = t->comb;
    t->w_to = avail;
    t->work.data = t;
    if (uv_queue_work(t->s->loop, &t->work, work_run, work_done) == 0) return;
    t->working = 0;
  }
  combine_range(t, t->comb, avail);
  task_advance(t, avail);
}

/* ------------------------------------------------------------------ children */

/* A further child's stream lands in its ring: bytes [comb, recv) are
 * held; room up to comb + ring_size. (Child 0's lands in the output:
 * hpl__puller_start_into.) */
static uint8_t *child_buf(void *arg, uint64_t off, size_t *len) {
  hpl__rd_child *c = arg;
  hpl__rd_task *t = c->t;
  uint64_t limit = t->comb + c->ring_size;
  if (limit > t->size) limit = t->size;
  if (off >= limit) {
    *len = 0;
    c->paused = 1;
    hpl__puller_paused(c->pull);
    return NULL;
  }
  size_t pos = (size_t)(off % c->ring_size);
  size_t k = c->ring_size - pos;
  if (k > limit - off) k = (size_t)(limit - off);
  *len = k;
  return c->ring + pos;
}

/* A unit of child c's stream failed its digest: its bytes do not count,
 * the stream is dropped and the directory told; its word (the child moved,
 * or the same child again: task_learn_children) pulls it again from recv. */
static void child_corrupt(hpl__rd_child *c, uint64_t u) {
  hpl__rd_task *t = c->t;
  hpl__store *s = t->s;
  char detail[600];
  uint64_t uoff, ulen;
  hpl__digest_unit_span(t->size, u, &uoff, &ulen);
  s->ctr.corrupt_units++;
  snprintf(detail, sizeof detail,
           "unit %llu (bytes %llu..%llu) of reduce stream '%s' from node %016llx does not match "
           "the digest its maker sent",
           (unsigned long long)u, (unsigned long long)uoff, (unsigned long long)(uoff + ulen),
           c->key, (unsigned long long)c->node);
  HPL__LOG_WARN("reduce '%s' slot %u: %s; pulling it again from byte %llu", t->target, t->slot,
                detail, (unsigned long long)c->recv);
  if (c->pull) hpl__puller_cancel(c->pull);
  c->pull = NULL;
  c->raw = c->recv;
  c->done = 0;
  c->paused = 0;
  c->corrupt_wait = 1;
  hpl__rdtask_report_corrupt(s, t->target, t->rid, c->slot, c->gen, u, detail);
}

/* Received bytes of child c count (recv) as far as whole units check
 * against their digests; without digests (--integrity off here, or a
 * sender without them) as they arrive. */
static void child_check(hpl__rd_child *c) {
  hpl__rd_task *t = c->t;
  if (!hpl__digest_algo_on(t->s->cfg.integrity) || (c->ver && hpl__rdver_algo(c->ver) == 0)) {
    c->recv = c->raw;
  } else {
    while (c->ver && c->recv < c->raw) {
      uint64_t u = hpl__digest_unit_of(t->size, c->recv), off, len;
      hpl__digest_unit_span(t->size, u, &off, &len);
      if (c->raw < off + len || off != c->recv) break; /* (off != recv: never, bases are units) */
      const uint8_t *b = c->ring ? c->ring + (size_t)(off % c->ring_size) : t->out->data + off;
      int rc = hpl__rdver_check(c->ver, u, b, (size_t)len);
      if (rc < 0) break; /* its digest has not come yet */
      if (rc == 0) {
        child_corrupt(c, u);
        return;
      }
      c->recv = off + len;
    }
  }
  hpl__rdtask_try_combine(t);
}

static void child_got(void *arg, uint64_t off, size_t n) {
  hpl__rd_child *c = arg;
  c->raw = off + n;
  child_check(c);
}

static void child_digests(void *arg, uint64_t first, uint64_t n) {
  (void)first, (void)n;
  child_check(arg);
}

static void child_digests_failed(void *arg, int status, const char *detail) {
  (void)status;
  hpl__rd_child *c = arg;
  hpl__rd_task *t = c->t;
  hpl__rdver_cancel(c->ver);
  c->ver = NULL;
  if (c->pull) hpl__puller_cancel(c->pull); /* its bytes could never count */
  c->pull = NULL;
  c->raw = c->recv;
  c->done = 0;
  char d[500];
  snprintf(d, sizeof d, "the digests of its stream cannot be had: %s", detail);
  hpl__rdtask_report_fail(t->s, t->target, t->rid, c->slot, c->gen, d);
}

static void child_done(void *arg, int status, const char *detail) {
  hpl__rd_child *c = arg;
  hpl__rd_task *t = c->t;
  c->pull = NULL;
  if (status == 0) {
    c->done = 1;
    hpl__rdtask_try_combine(t);
    return;
  }
  /* the directory decides: a stale generation is ignored, otherwise the
   * child's slot is replaced and this task gets a new generation */
  HPL__LOG_WARN("reduce '%s' slot %u: stream of child %d (%s) failed: %s", t->target, t->slot,
                c->index, c->key, detail ? detail : hpl_strerror(status));
  hpl__rdtask_report_fail(t->s, t->target, t->rid, c->slot, c->gen, detail);
}

static void child_silent(void *arg, uint64_t quiet_ms) {
  hpl__rd_child *c = arg;
  hpl__rdtask_report_silent(c->t->s, c->pull, c->t->target, c->t->rid, c->slot, c->gen, quiet_ms);
}

static void child_slow(void *arg, double rate) {
  hpl__rd_child *c = arg;
  hpl__rdtask_report_slow(c->t->s, c->t->target, c->t->rid, c->slot, c->gen, rate);
}

void hpl__rdtask_child_start(hpl__rd_task *t, hpl__rd_child *c) {
  /* blocked, or the output waits for room: started when it may write */
  if (c->pull || c->done || !may_write(t)) return;
  if (c->recv < t->base) c->recv = t->base; /* a resumed task: only bytes from there */
  c->raw = c->recv;
  c->corrupt_wait = 0;
  if (c->ver && hpl__rdver_first(c->ver) > hpl__digest_unit_of(t->size, c->recv)) {
    hpl__rdver_cancel(c->ver); /* (a rebase below where its digests start) */
    c->ver = NULL;
  }
  if (!c->ver && hpl__digest_algo_on(t->s->cfg.integrity) && c->recv < t->size) {
    hpl__rdver_ops vops = {.more = child_digests, .failed = child_digests_failed};
    c->ver = hpl__rdver_start(t->s, c->addr, c->port, c->key, c->internal, t->size,
                              hpl__digest_unit_of(t->size, c->recv), &vops, c);
    if (!c->ver) {
      HPL__LOG_WARN("reduce '%s' slot %u: cannot fetch the digests of child %s from %s:%d",
                    t->target, t->slot, c->key, c->addr, c->port);
      hpl__rdtask_report_fail(t->s, t->target, t->rid, c->slot, c->gen, "cannot fetch its digests");
      return;
    }
  }
  hpl__puller_ops ops = {.got = child_got, .done = child_done, .monitor = 1, .no_stall = 1,
                         .suspect = child_silent, .slow = child_slow, .peer = c->node};
  if (c->ring) {
    ops.buf = child_buf;
    c->pull = hpl__puller_start(t->s, c->addr, c->port, c->key, c->internal, c->recv, t->size, &ops,
                                c);
  } else { /* its bytes are the output's until combined (not its progress) */
    c->pull = hpl__puller_start_into(t->s, c->addr, c->port, c->key, c->internal, t->out, c->recv,
                                     0, &ops, c);
  }
  if (!c->pull)
    HPL__LOG_WARN("reduce '%s' slot %u: cannot pull child %s from %s:%d", t->target, t->slot,
                  c->key, c->addr, c->port);
}
