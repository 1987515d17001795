/* rdtask.c - this node's slots in reduce trees (see rdtask.h).
 *
 * The first child's bytes land straight in the output buffer and are
 * combined in place; further children go through rings of bounded size,
 * whose streams pause while the ring is full. Large combine steps run on
 * libuv's thread pool.
 */
#include "rdtask.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dataport.h"
#include "dirlink.h"
#include "faults.h"
#include "hoplite.h"
#include "log.h"
#include "objects.h"
#include "ops.h"
#include "puller.h"
#include "room.h"
#include "util.h"

#define RD_RING (8u << 20)        /* bytes buffered per extra child */
#define RD_OFFLOAD (1u << 20)     /* combine steps this large go to the pool */

typedef struct rd_task rd_task;

/* The module's context (s->tasks). */
typedef struct rd_tasks {
  rd_task *hash;    /* by "<slot>:<target>" (uthash) */
  uv_timer_t orphans; /* ends tasks a restarted directory did not adopt (data: set
                         once initialised) */
  void (*root_released)(store *s, const char *target); /* rdtask_on_root_released's */
} rd_tasks;

typedef struct rd_child {
  rd_task *t;
  int index;
  int known;
  uint32_t slot, gen; /* the child's slot and its output's generation */
  uint64_t node;      /* where it runs */
  char addr[64];
  int port;
  char key[320];
  int internal;
  struct st_puller *pull;
  uint64_t recv; /* stream bytes received */
  uint8_t *ring; /* NULL for child 0, which writes into the output */
  size_t ring_size;
  int paused;
  int done;
} rd_child;

struct rd_task {
  UT_hash_handle hh;
  char hkey[340]; /* "<slot>:<target>" */
  store *s;
  char target[HPL_ID_MAX + 1];
  uint64_t rid;
  uint32_t slot, gen;
  int op, dtype;
  size_t es;
  uint64_t size;
  uint64_t src_off; /* own source's bytes [src_off, src_off + size) take part */
  st_obj *src; /* own source (referenced) */
  st_watch src_watch; /* a spilled source: combining waits until it is back */
  st_obj *out; /* output: a reduce stream, or the target (referenced) */
  int to_target;
  int nch;
  rd_child *ch;
  uint64_t comb; /* bytes of out that are final */
  int working;   /* a combine step runs on the thread pool */
  uv_work_t work;
  uint64_t w_from, w_to;
  int ended; /* the reduce ended while a step was running */
  int orphan; /* the directory restarted and has not adopted the reduce */
  uint64_t orphan_at; /* when it ends unless adopted (hpl__now_ms clock) */
  /* The output waits for room: a stream's buffer being allocated (pending,
   * referenced, not yet in the table: its pullers wait as for a stream not
   * yet made), or the sink's target still without its buffer (out_wait) */
  st_obj *pending;
  st_room room;
  int out_wait;
  int root_moved; /* to_target, ended because the root runs elsewhere now */
  int failed;
  int out_kept; /* the next generation of this slot took over `out` (and its reference) */
  /* Resuming a failed node's slot (ReduceTask.resume): nothing starts
   * until the output's first pull says from where (stream_pulled).
   * Output bytes below `base` are never made; a pull below it makes the
   * task start over at that pull (rebased: once the running step is done) */
  int await_start;
  int rebased;
  uint64_t base;
  /* A slot reset while its step still ran: the old task (ended, working)
   * still writes the output, so the new one starts nothing until it is
   * done. */
  struct rd_task *blocked_by; /* the old task this one waits for */
  struct rd_task *successor;  /* the new task waiting for this one */
  st_source source; /* its output stream's (out->source): where pulls start */
};

/* Key of a reduce stream (the directory names the same key to its puller). */
static void stream_key(char *out, size_t len, const char *target, uint64_t rid, uint32_t slot,
                       uint32_t gen) {
  snprintf(out, len, "r:%llx.%u:%u:%s", (unsigned long long)rid, slot, gen, target);
}

/* The ReduceFailNote for slot `slot` (generation gen): failed, or silent. */
static void send_fail_note(store *s, const char *target, uint64_t rid, uint32_t slot, uint32_t gen,
                           const char *detail, int silent, uint64_t rate) {
  Hplpb__ReduceFailNote n = HPLPB__REDUCE_FAIL_NOTE__INIT;
  n.target = (char *)target;
  n.rid = rid;
  n.slot = slot;
  n.gen = gen;
  n.detail = (char *)(detail ? detail : "");
  n.silent = silent;
  n.slow = rate > 0;
  n.rate = rate;
  dirlink_note(s, HPL__MSG_REDUCE_FAIL, &n.base);
}

void rdtask_report_slow(store *s, const char *target, uint64_t rid, uint32_t slot, uint32_t gen,
                        double bps) {
  uint64_t rate = (uint64_t)bps;
  s->ctr.reduce_crawl_reports++;
  LOG_INFO("reduce '%s': the stream of slot %u crawls (%.1f MB/s, this node usually gets "
           "%.1f MB/s); told the directory", target, slot, (double)rate / 1e6, puller_usual_rate(s) / 1e6);
  send_fail_note(s, target, rid, slot, gen, NULL, 0, rate ? rate : 1);
}

void rdtask_report_silent(store *s, st_puller *p, const char *target, uint64_t rid,
                          uint32_t slot, uint32_t gen, uint64_t quiet_ms) {
  LOG_INFO("reduce '%s': the stream of slot %u has been silent for %llu ms; told the directory",
           target, slot, (unsigned long long)quiet_ms);
  send_fail_note(s, target, rid, slot, gen, NULL, 1, 0);
  puller_suspect_done(p, RDTASK_SILENT_RETRY_MS);
}

void rdtask_report_fail(store *s, const char *target, uint64_t rid, uint32_t slot, uint32_t gen,
                        const char *detail) {
  send_fail_note(s, target, rid, slot, gen, detail, 0, 0);
}

static void task_try_combine(rd_task *t);
static void task_free(rd_task *t);

/* The output has its buffer: children may write into it. */
static int task_ready(const rd_task *t) {
  return t->out && !t->pending && !t->out_wait && !t->blocked_by && !t->await_start;
}

/* ------------------------------------------------------------------ combine */

/* out[from, to) = op(out, own, ring children): child 0 is already in out. */
static void combine_range(rd_task *t, uint64_t from, uint64_t to) {
  if (from >= to) return;
  uint8_t *out = t->out->data;
  const uint8_t *own = t->src->data + t->src_off;
  size_t n = (size_t)(to - from);
  if (t->nch == 0)
    memcpy(out + from, own + from, n);
  else
    hpl__reduce_apply(t->op, t->dtype, out + from, own + from, n);
  for (int j = 1; j < t->nch; j++) {
    rd_child *c = &t->ch[j];
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
  rd_task *t = w->data;
  faults_combine_delay(&t->s->cfg.faults);
  combine_range(t, t->w_from, t->w_to);
}

/* The output advanced to `to`: publish, make ring room, maybe finish. */
static void task_advance(rd_task *t, uint64_t to) {
  store *s = t->s;
  t->comb = to;
  store_obj_progress(s, t->out, to);
  for (int j = 1; j < t->nch; j++)
    if (t->ch[j].paused) {
      t->ch[j].paused = 0;
      puller_resume(t->ch[j].pull);
    }
  if (t->comb < t->size) return;
  LOG_DEBUG("reduce '%s' slot %u: output complete (%llu bytes)", t->target, t->slot,
            (unsigned long long)t->size);
  if (t->to_target) {
    dirlink_loc_complete(s, t->out->id, 0);
    store_obj_sealed(s, t->out);
  } else {
    t->out->state = OBJ_SEALED;
    store_obj_progress(s, t->out, t->size);
  }
}

static void child_start(rd_task *t, rd_child *c);
static void task_restart_children(rd_task *t);

/* The old task's last step is done: the new one may write now. */
static void task_unblock(rd_task *t) {
  t->blocked_by = NULL;
  if (t->failed || !task_ready(t)) return;
  for (int j = 0; j < t->nch; j++)
    if (t->ch[j].known) child_start(t, &t->ch[j]);
  task_try_combine(t);
}

static void work_done(uv_work_t *w, int status) {
  rd_task *t = w->data;
  t->working = 0;
  if (t->ended) {
    rd_task *next = t->successor;
    store *s = t->s;
    char target[sizeof t->target];
    int root = t->to_target && t->root_moved;
    snprintf(target, sizeof target, "%s", t->target);
    task_free(t);
    if (next) task_unblock(next);
    if (root && s->tasks->root_released)
      s->tasks->root_released(s, target); /* the target is the sink's */
    return;
  }
  if (t->rebased) { /* the step's bytes are made again */
    t->rebased = 0;
    task_restart_children(t);
    return;
  }
  if (status == 0) task_advance(t, t->w_to);
  task_try_combine(t);
}

static void src_back(st_watch *w) {
  task_try_combine((rd_task *)((char *)w - offsetof(rd_task, src_watch)));
}

/* Combine whatever every input has delivered. */
static void task_try_combine(rd_task *t) {
  if (t->working || t->failed || !task_ready(t) || t->comb >= t->size) return;
  if (t->src->state != OBJ_SEALED) { /* spilled: being read back (room.c) */
    t->src_watch.fn = src_back;
    store_watch(t->src, &t->src_watch);
    return;
  }
  uint64_t avail = t->size;
  for (int j = 0; j < t->nch; j++) {
    rd_child *c = &t->ch[j];
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
 * puller_start_into.) */
static uint8_t *child_buf(void *arg, uint64_t off, size_t *len) {
  rd_child *c = arg;
  rd_task *t = c->t;
  uint64_t limit = t->comb + c->ring_size;
  if (limit > t->size) limit = t->size;
  if (off >= limit) {
    *len = 0;
    c->paused = 1;
    puller_paused(c->pull);
    return NULL;
  }
  size_t pos = (size_t)(off % c->ring_size);
  size_t k = c->ring_size - pos;
  if (k > limit - off) k = (size_t)(limit - off);
  *len = k;
  return c->ring + pos;
}

static void child_got(void *arg, uint64_t off, size_t n) {
  rd_child *c = arg;
  c->recv = off + n;
  task_try_combine(c->t);
}

static void child_done(void *arg, int status, const char *detail) {
  rd_child *c = arg;
  rd_task *t = c->t;
  c->pull = NULL;
  if (status == 0) {
    c->done = 1;
    task_try_combine(t);
    return;
  }
  /* the directory decides: a stale generation is ignored, otherwise the
   * child's slot is replaced and this task gets a new generation */
  LOG_WARN("reduce '%s' slot %u: stream of child %d (%s) failed: %s", t->target, t->slot,
           c->index, c->key, detail ? detail : hpl_strerror(status));
  rdtask_report_fail(t->s, t->target, t->rid, c->slot, c->gen, detail);
}

static void child_silent(void *arg, uint64_t quiet_ms) {
  rd_child *c = arg;
  rdtask_report_silent(c->t->s, c->pull, c->t->target, c->t->rid, c->slot, c->gen, quiet_ms);
}

static void child_slow(void *arg, double rate) {
  rd_child *c = arg;
  rdtask_report_slow(c->t->s, c->t->target, c->t->rid, c->slot, c->gen, rate);
}

static void child_start(rd_task *t, rd_child *c) {
  /* blocked, or the output waits for room: started when it may write */
  if (c->pull || c->done || !task_ready(t)) return;
  if (c->recv < t->base) c->recv = t->base; /* a resumed task: only bytes from there */
  puller_ops ops = {.got = child_got, .done = child_done, .monitor = 1, .no_stall = 1,
                    .suspect = child_silent, .slow = child_slow, .quiet = dirlink_quiet,
                    .peer = c->node};
  if (c->ring) {
    ops.buf = child_buf;
    c->pull = puller_start(t->s, c->addr, c->port, c->key, c->internal, c->recv, t->size, &ops,
                           c);
  } else { /* its bytes are the output's until combined (not its progress) */
    c->pull = puller_start_into(t->s, c->addr, c->port, c->key, c->internal, t->out, c->recv, 0,
                                &ops, c);
  }
  if (!c->pull)
    LOG_WARN("reduce '%s' slot %u: cannot pull child %s from %s:%d", t->target, t->slot, c->key,
             c->addr, c->port);
}

/* ------------------------------------------------------------------ tasks */

static rd_task *task_find(store *s, const char *target, uint32_t slot) {
  char k[340];
  snprintf(k, sizeof k, "%u:%s", slot, target);
  rd_task *t = NULL;
  HASH_FIND_STR(s->tasks->hash, k, t);
  return t;
}

static void task_free(rd_task *t) {
  store *s = t->s;
  if (t->out && t->out->source == &t->source) t->out->source = NULL; /* pulls: as for no task */
  if (t->pending) { /* never published: freed with its last reference */
    room_cancel(s, &t->room);
    store_obj_unref(s, t->pending);
    t->pending = NULL;
  }
  for (int j = 0; j < t->nch; j++) {
    rd_child *c = &t->ch[j];
    if (c->pull) puller_cancel(c->pull);
    c->pull = NULL;
  }
  if (t->working) { /* the pool still uses the buffers: finish later */
    t->ended = 1;
    return;
  }
  if (t->blocked_by && t->blocked_by->successor == t) t->blocked_by->successor = NULL;
  if (t->successor) t->successor->blocked_by = NULL; /* (only when freed unended) */
  for (int j = 0; j < t->nch; j++) free(t->ch[j].ring);
  free(t->ch);
  if (t->out && !t->out_kept) {
    if (t->out->internal) store_obj_detach(s, t->out);
    store_obj_unref(s, t->out);
  }
  if (t->src) {
    store_unwatch(t->src, &t->src_watch);
    store_obj_unref(s, t->src);
  }
  free(t);
}

/* Start the task's work once its output has a buffer. */
static void task_go(rd_task *t) {
  if (t->failed || !task_ready(t)) return;
  for (int j = 0; j < t->nch; j++)
    if (t->ch[j].known) child_start(t, &t->ch[j]);
  task_try_combine(t);
}

/* Every child's stream from the output's base again (its bytes from there
 * are made over: a rebase). */
static void task_restart_children(rd_task *t) {
  t->comb = t->base;
  for (int j = 0; j < t->nch; j++) {
    rd_child *c = &t->ch[j];
    if (c->pull) puller_cancel(c->pull);
    c->pull = NULL;
    c->recv = t->base;
    c->done = 0;
    c->paused = 0;
  }
  task_go(t);
}

/* A resumed task learns where its output is read from: it starts at the
 * whole element at or below `offset`. */
static void task_begin_at(rd_task *t, uint64_t offset) {
  store *s = t->s;
  uint64_t b = offset < t->size ? offset - offset % 8 : t->size; /* whole elements of any dtype */
  t->await_start = 0;
  t->base = t->comb = b;
  s->ctr.reduce_resumes++;
  s->ctr.reduce_resumed_bytes += b;
  LOG_INFO("reduce '%s' slot %u (gen %u): resuming a failed node's slot at byte %llu of %llu",
           t->target, t->slot, t->gen, (unsigned long long)b, (unsigned long long)t->size);
  task_go(t);
}

/* A pull of the task's output stream `o` from byte `offset` arrived on
 * the data port (its source's `pulled`, before the pull is served). The
 * task learns where its output is read from: a task that resumed on this
 * node (ReduceTask.resume) starts there, and one that resumed past
 * `offset` makes its output again from there (a parent that restarted
 * wants bytes it skipped); any other pull of `o` goes on as it was then. */
static void stream_pulled(const st_source *src, st_obj *o, uint64_t offset) {
  rd_task *t = (rd_task *)((char *)src - offsetof(rd_task, source));
  store *s = t->s;
  if (t->out != o || t->to_target) return;
  if (t->await_start) {
    if (!t->pending) task_begin_at(t, offset);
    return;
  }
  if (offset >= t->base) return;
  /* its parent starts over below where this task resumed: make the
   * output again from there; pulls of the old bytes end */
  uint64_t b = offset - offset % 8;
  s->ctr.reduce_rebases++;
  LOG_INFO("reduce '%s' slot %u: a pull from byte %llu, below where the task resumed "
           "(%llu): making the output again from there", t->target, t->slot,
           (unsigned long long)offset, (unsigned long long)t->base);
  dataport_drop(s, o);
  o->progress = b;
  if (o->state == OBJ_SEALED) o->state = OBJ_PULLING;
  t->base = b;
  if (t->working) { /* the running step writes the output: restart after it */
    t->rebased = 1;
    return;
  }
  task_restart_children(t);
}

/* `o`, a reduce stream in the table, is the task's output now (the task
 * holds its reference): pulls of it reach the task. */
static void task_take_stream(rd_task *t, st_obj *o) {
  t->out = o;
  t->source.pulled = stream_pulled;
  o->source = &t->source;
}

static void out_room_done(st_room *r, int status, const char *detail) {
  rd_task *t = r->arg;
  store *s = t->s;
  st_obj *o = t->pending;
  t->pending = NULL;
  if (status == 0 && store_obj_publish_internal(s, o) == 0) {
    task_take_stream(t, o); /* the room request's reference is the task's now */
    LOG_DEBUG("reduce '%s' slot %u: room for the output after %llu ms", t->target, t->slot,
              (unsigned long long)(hpl__now_ms() - r->since_ms));
    dataport_stream_ready(s, o->id); /* pulls that came meanwhile */
    task_go(t);
    return;
  }
  store_obj_unref(s, o);
  t->failed = 1;
  LOG_WARN("reduce '%s' slot %u cannot run here: %s", t->target, t->slot,
           status ? detail : "out of memory");
  rdtask_report_fail(s, t->target, t->rid, t->slot, t->gen, status ? detail : "out of memory");
}

/* A new reduce stream `key` for t's output: at once if it fits, else it
 * waits for room (t->pending) for up to RDTASK_ROOM_MS; nothing (detail
 * says why) if it can never fit or there is no memory. */
static void out_alloc(rd_task *t, const char *key, char *detail, size_t dlen) {
  store *s = t->s;
  st_obj *o = store_obj_prep_internal(s, key);
  if (!o) {
    snprintf(detail, dlen, "out of memory");
    return;
  }
  store_obj_ref(s, o);
  int rc = room_alloc(s, o, t->size, hpl__now_ms() + RDTASK_ROOM_MS, &t->room, out_room_done, t,
                      detail, dlen);
  if (rc == 1) {
    t->pending = o;
    LOG_INFO("reduce '%s' slot %u: the output waits for room", t->target, t->slot);
  } else if (rc == 0 && store_obj_publish_internal(s, o) == 0) {
    task_take_stream(t, o);
    dataport_stream_ready(s, key); /* pulls that came before the task */
  } else {
    if (rc == 0) snprintf(detail, dlen, "out of memory");
    store_obj_unref(s, o);
  }
}

void rdtask_target_ready(store *s, st_obj *target) {
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    if (!t->to_target || t->out != target || !t->out_wait) continue;
    t->out_wait = 0;
    if (target->size != t->size) { /* cannot happen: the directory sized both */
      t->failed = 1;
      LOG_WARN("reduce '%s' slot %u: the target has %llu bytes, not %llu", t->target, t->slot,
               (unsigned long long)target->size, (unsigned long long)t->size);
      continue;
    }
    task_go(t);
  }
}

void rdtask_on_task(store *s, ProtobufCMessage *msg) {
  Hplpb__ReduceTask *m = (Hplpb__ReduceTask *)msg;
  if (!hpl__id_valid(m->target) || !hpl__id_valid(m->source) || m->nchildren > 4096 ||
      m->n_children > m->nchildren || !hpl_dtype_size((int)m->dtype) || m->op > 3) {
    LOG_WARN("ignoring a malformed reduce task");
    return;
  }
  rd_task *t = task_find(s, m->target, m->slot), *old_step = NULL;
  st_obj *kept = NULL; /* the old generation's output stream, to reuse */
  if (t && (t->gen != m->gen || t->rid != m->rid)) { /* a reset: start this slot over */
    /* a combine step of this slot still running (or still awaited) writes
     * the output until it is done */
    old_step = t->working ? t : t->blocked_by;
    /* The new generation writes into the old one's buffer rather than a new
     * one: the old generation has touched its pages, while a new buffer's
     * pages are first touched as bytes arrive - a page fault per 4 KiB on
     * every node of the restarted part of the tree at once, which made a
     * restarted chain crawl (issue 13). The old step (old_step) that may
     * still write into it finishes before the new task starts anything. */
    if (t->rid == m->rid && !t->to_target && !m->to_target && t->out && t->out->internal &&
        t->out->in_table && t->out->size == m->size && !t->failed) {
      kept = t->out;
      t->out_kept = 1;
    }
    HASH_DEL(s->tasks->hash, t);
    task_free(t);
    t = NULL;
  }
  char detail[400] = "out of memory";
  if (!t) {
    st_obj *src = store_find(s, m->source);
    int usable = src && (src->state == OBJ_SEALED || src->state == OBJ_SPILLED) &&
                 src->size >= m->src_offset && src->size - m->src_offset >= m->size;
    if (!usable || !(t = calloc(1, sizeof *t))) {
      if (!usable)
        LOG_WARN("reduce '%s' slot %u: source '%s' is not here (or is smaller than bytes "
                 "[%llu, %llu))", m->target, m->slot, m->source,
                 (unsigned long long)m->src_offset,
                 (unsigned long long)(m->src_offset + m->size));
      if (kept) { /* nobody takes it over */
        dataport_drop(s, kept);
        store_obj_detach(s, kept);
        store_obj_unref(s, kept);
      }
      return;
    }
    t->s = s;
    snprintf(t->target, sizeof t->target, "%s", m->target);
    snprintf(t->hkey, sizeof t->hkey, "%u:%s", m->slot, m->target);
    t->slot = m->slot;
    t->gen = m->gen;
    t->rid = m->rid;
    t->op = (int)m->op;
    t->dtype = (int)m->dtype;
    t->es = hpl_dtype_size(t->dtype);
    t->size = m->size;
    t->src_off = m->src_offset;
    t->src = src;
    store_obj_ref(s, src);
    if (src->state == OBJ_SPILLED) room_restore(s, src); /* read it back */
    t->nch = (int)m->nchildren;
    t->ch = calloc((size_t)(t->nch ? t->nch : 1), sizeof *t->ch);
    t->to_target = m->to_target;
    t->await_start = m->resume && !m->to_target;
    if (t->to_target) {
      st_obj *o = store_find(s, m->target);
      if (!o || o->state != OBJ_REDUCING || (o->data && o->size != m->size)) {
        LOG_WARN("reduce '%s': the target is not being made at this sink", m->target);
        t->out = NULL;
      } else {
        t->out = o;
        store_obj_ref(s, o);
        t->out_wait = !o->data; /* the sink waits for room: rdtask_target_ready */
      }
    } else {
      char key[340];
      stream_key(key, sizeof key, m->target, m->rid, m->slot, m->gen);
      if (kept) { /* its old bytes' streams end; its reference is this task's now */
        dataport_drop(s, kept);
        kept->progress = 0;
        kept->state = OBJ_PULLING;
        if (store_obj_rekey_internal(s, kept, key) == 0) {
          task_take_stream(t, kept);
          dataport_stream_ready(s, key); /* pulls that came before the task */
        } else { /* let it go; a new buffer as below */
          if (kept->in_table) store_obj_detach(s, kept);
          store_obj_unref(s, kept);
        }
        kept = NULL;
      }
      if (!t->out) out_alloc(t, key, detail, sizeof detail);
    }
    for (int j = 0; t->ch && j < t->nch; j++) {
      t->ch[j].t = t;
      t->ch[j].index = j;
      if (j > 0) {
        t->ch[j].ring_size = m->size < RD_RING ? (size_t)((m->size + 7) & ~7ull) : RD_RING;
        if (!t->ch[j].ring_size) t->ch[j].ring_size = 8;
        t->ch[j].ring = malloc(t->ch[j].ring_size);
        if (!t->ch[j].ring) t->failed = 1;
      }
    }
    if ((!t->out && !t->pending) || !t->ch || t->failed) {
      t->failed = 1;
      if (t->to_target) {
        LOG_WARN("reduce '%s' slot %u cannot run here", m->target, m->slot);
      } else { /* the directory moves the slot (another copy, a spare) */
        LOG_WARN("reduce '%s' slot %u cannot run here: %s", m->target, m->slot,
                 t->ch ? detail : "out of memory");
        rdtask_report_fail(s, m->target, m->rid, m->slot, m->gen, t->ch ? detail : "out of memory");
      }
    }
    HASH_ADD_STR(s->tasks->hash, hkey, t);
    if (old_step) {
      t->blocked_by = old_step;
      old_step->successor = t;
    }
    /* a resumed slot's pull may have come before the task (it was parked,
     * and served once the output existed, above) */
    uint64_t from;
    if (t->await_start && t->out && !t->pending && dataport_pull_offset(s, t->out, &from))
      task_begin_at(t, from);
    LOG_DEBUG("reduce '%s': slot %u (gen %u) here, %d children, %s%s", m->target, m->slot,
              m->gen, t->nch, t->to_target ? "into the target" : "as a stream",
              old_step ? " (after the old generation's step)" : "");
  }
  if (t->failed) return;
  for (size_t i = 0; i < m->n_children; i++) {
    Hplpb__ReduceChild *rc = m->children[i];
    if (rc->index >= (uint32_t)t->nch || strlen(rc->key) >= sizeof t->ch[0].key) continue;
    rd_child *c = &t->ch[rc->index];
    if (c->known) {
      if (c->done || (c->slot == rc->slot && c->gen == rc->gen && c->port == (int)rc->port &&
                      !strcmp(c->addr, rc->addr) && !strcmp(c->key, rc->key)))
        continue;
      /* the child's slot resumed on another node (the directory's
       * dr_slot_failed): the bytes we have of it stay, the rest comes
       * from there */
      LOG_INFO("reduce '%s' slot %u: child %d resumed on %s:%u; pulling it on from byte %llu",
               t->target, t->slot, c->index, rc->addr, rc->port, (unsigned long long)c->recv);
      if (c->pull) puller_cancel(c->pull);
      c->pull = NULL;
      c->paused = 0;
      s->ctr.reduce_child_moves++;
    }
    c->known = 1;
    c->slot = rc->slot;
    c->gen = rc->gen;
    c->node = rc->node;
    snprintf(c->addr, sizeof c->addr, "%s", rc->addr);
    c->port = (int)rc->port;
    snprintf(c->key, sizeof c->key, "%s", rc->key);
    c->internal = rc->internal;
    child_start(t, c);
  }
  task_try_combine(t);
}


int rdtask_end_root(store *s, const char *target) {
  int running = 0;
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    if (!t->to_target || strcmp(t->target, target) != 0) continue;
    LOG_INFO("reduce '%s' slot %u: the root runs elsewhere now; the task here ends", t->target,
             t->slot);
    HASH_DEL(s->tasks->hash, t);
    t->root_moved = 1;
    running |= t->working;
    task_free(t);
  }
  return running;
}

/* Whether `key`, a stream key a pull is parked for, is one of the reduce
 * that ended: keys are "r:<rid>.<slot>:<gen>:<target>" (and a ring's
 * "g:<rid>:<index>:<target>", which this matches by target). */
typedef struct ended_reduce {
  const char *target;
  uint64_t rid;
} ended_reduce;

static int key_of_ended(const char *key, void *arg) {
  const ended_reduce *e = arg;
  const char *t = key;
  if (e->rid && strncmp(t, "r:", 2) == 0 && strtoull(t + 2, NULL, 16) != e->rid)
    return 0; /* another instance's */
  for (int i = 0; i < 2 && t; i++) {
    t = strchr(t, ':');
    if (t) t++;
  }
  if (t) t = strchr(t, ':');
  return t && strcmp(t + 1, e->target) == 0;
}

void rdtask_reduce_ended(store *s, const char *target, uint64_t rid) {
  rdtask_end(s, target, rid);
  ended_reduce e = {.target = target, .rid = rid};
  dataport_unpark(s, key_of_ended, &e, HPL_ECANCELED, "the reduce ended");
}

void rdtask_end(store *s, const char *target, uint64_t rid) {
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    if (target && (strcmp(t->target, target) != 0 || (rid && t->rid != rid))) continue;
    LOG_DEBUG("reduce '%s' slot %u: the task ends", t->target, t->slot);
    HASH_DEL(s->tasks->hash, t);
    task_free(t);
  }
}

static void orphan_end(rd_task *t, const char *why) {
  LOG_INFO("reduce '%s' slot %u: the restarted directory did not adopt it; ending the task (%s)",
           t->target, t->slot, why);
  HASH_DEL(t->s->tasks->hash, t);
  t->s->ctr.orphans_ended++;
  task_free(t);
}

/* Each orphan ends RDTASK_ORPHAN_MS after the restart that orphaned it (a
 * later restart does not prolong it); the timer is set for the earliest. */
static void orphans_expired(uv_timer_t *h) {
  store *s = h->data;
  uint64_t now = hpl__now_ms(), next = UINT64_MAX;
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    if (!t->orphan) continue;
    if (t->orphan_at <= now)
      orphan_end(t, "its time is up");
    else if (t->orphan_at < next)
      next = t->orphan_at;
  }
  if (next != UINT64_MAX) uv_timer_start(&s->tasks->orphans, orphans_expired, next - now, 0);
}

/* Room is wanted (room.c): orphans whose output is complete and streamed to
 * nobody hold only memory - their parent has every byte (or the reduce is
 * over: its end went to the old directory). They go now. */
static void orphans_shed(store *s) {
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp)
    if (t->orphan && !t->to_target && !t->working && t->out && t->out->internal &&
        t->comb >= t->size && t->out->refs == 1)
      orphan_end(t, "its pool memory is wanted");
}

void rdtask_directory_restarted(store *s) {
  if (!s->tasks->orphans.data) {
    uv_timer_init(s->loop, &s->tasks->orphans);
    s->tasks->orphans.data = s;
  }
  room_on_shed(s, orphans_shed);
  uint64_t at = hpl__now_ms() + RDTASK_ORPHAN_MS;
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    if (t->orphan) continue;
    t->orphan = 1;
    t->orphan_at = at;
  }
  orphans_expired(&s->tasks->orphans);
}

void rdtask_on_adopted(store *s, ProtobufCMessage *msg) {
  Hplpb__ReduceEnd *m = (Hplpb__ReduceEnd *)msg;
  if (!hpl__id_valid(m->target)) return;
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp)
    if (t->rid == m->rid && strcmp(t->target, m->target) == 0) t->orphan = 0;
}

size_t rdtask_count(const store *s) { return (s->tasks ? HASH_COUNT(s->tasks->hash) : 0); }

void rdtask_on_root_released(store *s, void (*fn)(store *s, const char *target)) {
  s->tasks->root_released = fn;
}

int rdtask_init(store *s) {
  s->tasks = calloc(1, sizeof *s->tasks);
  return s->tasks ? 0 : HPL_ENOMEM;
}

void rdtask_stop(store *s) {
  if (s->tasks && s->tasks->orphans.data && !uv_is_closing((uv_handle_t *)&s->tasks->orphans))
    uv_close((uv_handle_t *)&s->tasks->orphans, NULL);
}

void rdtask_free(store *s) {
  free(s->tasks);
  s->tasks = NULL;
}
