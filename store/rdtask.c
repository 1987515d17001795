/* rdtask.c - this node's slots in reduce trees (see rdtask.h): a task's
 * life - made or reset by REDUCE_TASK, waiting for its output's buffer, an
 * old step or its first pull, resumed or rebased. Its inputs and combine
 * steps are rdcombine.c's; its end (the reduce ended, the root moved,
 * orphaned by a directory restart) is rdend.c's; the states are in
 * rdtaskint.h.
 */
#include "rdtask.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dataport.h"
#include "dirlink.h"
#include "log.h"
#include "rddig.h"
#include "rdtaskint.h"
#include "util.h"

#define RD_RING (8u << 20) /* bytes buffered per extra child */

/* Key of a reduce stream (the directory names the same key to its puller). */
static void stream_key(char *out, size_t len, const char *target, uint64_t rid, uint32_t slot,
                       uint32_t gen) {
  snprintf(out, len, "r:%llx.%u:%u:%s", (unsigned long long)rid, slot, gen, target);
}

static const char *state_name(hpl__rd_state st) {
  static const char *n[] = {"waiting", "running", "rebasing", "complete", "failed", "ended"};
  _Static_assert(sizeof n / sizeof n[0] == HPL__RD_NSTATES, "a name per state");
  return st < HPL__RD_NSTATES ? n[st] : "?";
}

void hpl__rdtask_set_state(hpl__rd_task *t, hpl__rd_state to) {
  if (t->state == to) return;
  HPL__LOG_DEBUG("reduce task '%s' slot %u (gen %u): %s -> %s", t->target, t->slot, t->gen,
                 state_name(t->state), state_name(to));
  t->state = to;
}

/* Whether a WAITING task still waits for something (rdtaskint.h): room for
 * its output stream's buffer, the sink's target to get its buffer, the old
 * generation's last step, or (resumed) its output's first pull. */
static int task_waits(const hpl__rd_task *t) {
  return t->pending || t->blocked_by || t->await_start ||
         (t->to_target && t->out && !t->out->data);
}

void hpl__rdtask_wait_over(hpl__rd_task *t) {
  if (t->state != HPL__RD_WAITING || task_waits(t)) return;
  hpl__rdtask_set_state(t, HPL__RD_RUNNING);
  hpl__rdtask_go(t);
}

/* ------------------------------------------------------------------ tasks */

static hpl__rd_task *task_find(hpl__store *s, const char *target, uint32_t slot) {
  char k[340];
  snprintf(k, sizeof k, "%u:%s", slot, target);
  hpl__rd_task *t = NULL;
  HASH_FIND_STR(s->tasks->hash, k, t);
  return t;
}

void hpl__rdtask_free_task(hpl__rd_task *t) {
  hpl__store *s = t->s;
  if (t->out && t->out->source == &t->source) t->out->source = NULL; /* pulls: as for no task */
  if (t->pending) { /* never published: freed with its last reference */
    hpl__room_cancel(s, &t->room);
    hpl__obj_unref(s, t->pending);
    t->pending = NULL;
  }
  for (int j = 0; j < t->nch; j++) {
    hpl__rd_child *c = &t->ch[j];
    if (c->pull) hpl__puller_cancel(c->pull);
    c->pull = NULL;
    hpl__rdver_cancel(c->ver);
    c->ver = NULL;
  }
  if (t->working) { /* the pool still uses the buffers: finish later */
    hpl__rdtask_set_state(t, HPL__RD_ENDED);
    return;
  }
  if (t->blocked_by && t->blocked_by->successor == t) t->blocked_by->successor = NULL;
  /* an ENDED task whose step is done (work_done): its successor waits for
   * it no more, and work_done lets it go on */
  if (t->successor) t->successor->blocked_by = NULL;
  for (int j = 0; j < t->nch; j++) free(t->ch[j].ring);
  free(t->ch);
  if (t->out && !t->out_kept) {
    if (t->out->internal) hpl__obj_detach(s, t->out);
    hpl__obj_unref(s, t->out);
  }
  if (t->src) {
    hpl__obj_unwatch(t->src, &t->src_watch);
    hpl__obj_unref(s, t->src);
  }
  free(t);
}

/* A resumed task learns where its output is read from: it starts at the
 * whole element at or below `offset`. */
static void task_begin_at(hpl__rd_task *t, uint64_t offset) {
  hpl__store *s = t->s;
  uint64_t b = offset < t->size ? offset - offset % 8 : t->size; /* whole elements of any dtype */
  t->await_start = 0;
  t->base = t->comb = b;
  hpl__rddig_reset(s, t->out, b); /* its digests from there */
  s->ctr.reduce_resumes++;
  s->ctr.reduce_resumed_bytes += b;
  HPL__LOG_INFO("reduce '%s' slot %u (gen %u): resuming a failed node's slot at byte %llu of %llu",
                t->target, t->slot, t->gen, (unsigned long long)b, (unsigned long long)t->size);
  hpl__rdtask_wait_over(t);
}

/* A pull of the task's output stream `o` from byte `offset` arrived on
 * the data port (its source's `pulled`, before the pull is served). The
 * task learns where its output is read from: a task that resumed on this
 * node (ReduceTask.resume) starts there, and one that resumed past
 * `offset` makes its output again from there (a parent that restarted
 * wants bytes it skipped); any other pull of `o` goes on as it was then. */
static void stream_pulled(const hpl__source *src, hpl__obj *o, uint64_t offset) {
  hpl__rd_task *t = (hpl__rd_task *)((char *)src - offsetof(hpl__rd_task, source));
  hpl__store *s = t->s;
  if (t->await_start) {
    task_begin_at(t, offset);
    return;
  }
  if (offset >= t->base) return;
  /* its parent starts over below where this task resumed: make the
   * output again from there; pulls of the old bytes end */
  uint64_t b = offset - offset % 8;
  s->ctr.reduce_rebases++;
  HPL__LOG_INFO("reduce '%s' slot %u: a pull from byte %llu, below where the task resumed "
                "(%llu): making the output again from there", t->target, t->slot,
                (unsigned long long)offset, (unsigned long long)t->base);
  hpl__dataport_drop(s, o);
  o->progress = b;
  if (o->state == HPL__OBJ_SEALED) o->state = HPL__OBJ_PULLING;
  t->base = b;
  hpl__rddig_reset(s, o, b); /* digests of the old bytes are not answered */
  if (t->working) { /* the running step writes the output: restart after it */
    hpl__rdtask_set_state(t, HPL__RD_REBASING);
    return;
  }
  hpl__rdtask_restart_children(t);
}

/* The task is in the table: pulls of its output stream reach it from now
 * on (until hpl__rdtask_free_task). */
static void task_hear_pulls(hpl__rd_task *t) {
  if (!t->out || !t->out->internal || t->to_target) return;
  t->source.pulled = stream_pulled;
  t->out->source = &t->source;
}

/* The output stream's digests start (over): from its base, or for a
 * resumed task from where its first pull will say. Before any request for
 * them is answered (a request that came earlier is parked on the data port
 * until the stream exists): without them, it would be told "no digests". */
static void out_digests(hpl__rd_task *t) {
  if (hpl__rddig_reset(t->s, t->out, t->await_start ? UINT64_MAX : t->base) != 0)
    HPL__LOG_WARN("reduce '%s' slot %u: no memory for the output's digests; its receivers "
                  "get none", t->target, t->slot);
}

static void out_room_done(hpl__room *r, int status, const char *detail) {
  hpl__rd_task *t = r->arg;
  hpl__store *s = t->s;
  hpl__obj *o = t->pending;
  t->pending = NULL;
  if (status == 0 && hpl__obj_publish_internal(s, o) == 0) {
    t->out = o; /* the room request's reference is the task's now */
    out_digests(t);
    task_hear_pulls(t);
    HPL__LOG_DEBUG("reduce '%s' slot %u: room for the output after %llu ms", t->target, t->slot,
                   (unsigned long long)(hpl__now_ms() - r->since_ms));
    hpl__dataport_stream_ready(s, o->id); /* pulls that came meanwhile */
    hpl__rdtask_wait_over(t);
    return;
  }
  hpl__obj_unref(s, o);
  hpl__rdtask_set_state(t, HPL__RD_FAILED);
  HPL__LOG_WARN("reduce '%s' slot %u cannot run here: %s", t->target, t->slot,
                status ? detail : "out of memory");
  hpl__rdtask_report_fail(s, t->target, t->rid, t->slot, t->gen, status ? detail : "out of memory");
}

/* A new reduce stream `key` for t's output: at once if it fits, else it
 * waits for room (t->pending) for up to HPL__RDTASK_ROOM_MS; nothing (detail
 * says why) if it can never fit or there is no memory. */
static void out_alloc(hpl__rd_task *t, const char *key, char *detail, size_t dlen) {
  hpl__store *s = t->s;
  hpl__obj *o = hpl__obj_prep_internal(s, key);
  if (!o) {
    snprintf(detail, dlen, "out of memory");
    return;
  }
  hpl__obj_ref(s, o);
  int rc = hpl__room_alloc(s, o, t->size, hpl__now_ms() + HPL__RDTASK_ROOM_MS, &t->room,
                           out_room_done, t, detail, dlen);
  if (rc == 1) {
    t->pending = o;
    HPL__LOG_INFO("reduce '%s' slot %u: the output waits for room", t->target, t->slot);
  } else if (rc == 0 && hpl__obj_publish_internal(s, o) == 0) {
    t->out = o;
    out_digests(t); /* before a digest request parked for it is answered */
    hpl__dataport_stream_ready(s, key); /* pulls that came before the task */
  } else {
    if (rc == 0) snprintf(detail, dlen, "out of memory");
    hpl__obj_unref(s, o);
  }
}

void hpl__rdtask_target_ready(hpl__store *s, hpl__obj *target) {
  hpl__rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    /* every WAITING task writing into it waited for its buffer */
    if (!t->to_target || t->out != target || t->state != HPL__RD_WAITING) continue;
    if (target->size != t->size) { /* cannot happen: the directory sized both */
      hpl__rdtask_set_state(t, HPL__RD_FAILED);
      HPL__LOG_WARN("reduce '%s' slot %u: the target has %llu bytes, not %llu", t->target, t->slot,
                    (unsigned long long)target->size, (unsigned long long)t->size);
      continue;
    }
    hpl__rdtask_wait_over(t);
  }
}

/* A new task for REDUCE_TASK `m` (not yet in the table), WAITING for
 * whatever it must (or FAILED, reported, if it cannot run here); `kept`
 * (may be NULL) is the old generation's output stream, whose reference it
 * takes. NULL (kept let go) if the source is not here or on no memory. */
static hpl__rd_task *task_new(hpl__store *s, const Hplpb__ReduceTask *m, hpl__obj *kept) {
  char detail[400] = "out of memory";
  hpl__obj *src = hpl__obj_find(s, m->source);
  int usable = src && (src->state == HPL__OBJ_SEALED || src->state == HPL__OBJ_SPILLED) &&
               src->size >= m->src_offset && src->size - m->src_offset >= m->size;
  hpl__rd_task *t = usable ? calloc(1, sizeof *t) : NULL;
  if (!t) {
    if (!usable)
      HPL__LOG_WARN(
          "reduce '%s' slot %u: source '%s' is not here (or is smaller than bytes "
          "[%llu, %llu))",
          m->target, m->slot, m->source, (unsigned long long)m->src_offset,
          (unsigned long long)(m->src_offset + m->size));
    if (kept) { /* nobody takes it over */
      hpl__dataport_drop(s, kept);
      hpl__obj_detach(s, kept);
      hpl__obj_unref(s, kept);
    }
    return NULL;
  }
  t->s = s;
  snprintf(t->target, sizeof t->target, "%s", m->target);
  snprintf(t->hkey, sizeof t->hkey, "%u:%s", m->slot, m->target);
  t->slot = m->slot;
  t->gen = m->gen;
  t->rid = m->rid;
  t->op = (int)m->op;
  t->dtype = (int)m->dtype;
  t->size = m->size;
  t->src_off = m->src_offset;
  t->src = src;
  hpl__obj_ref(s, src);
  if (src->state == HPL__OBJ_SPILLED) hpl__room_restore(s, src); /* read it back */
  t->nch = (int)m->nchildren;
  t->ch = calloc((size_t)(t->nch ? t->nch : 1), sizeof *t->ch);
  if (!t->ch) t->nch = 0; /* failed below; nothing for hpl__rdtask_free_task to walk */
  t->to_target = m->to_target;
  t->await_start = m->resume && !m->to_target;
  int failed = 0;
  if (t->to_target) {
    hpl__obj *o = hpl__obj_find(s, m->target);
    if (!o || o->state != HPL__OBJ_REDUCING || (o->data && o->size != m->size)) {
      HPL__LOG_WARN("reduce '%s': the target is not being made at this sink", m->target);
      t->out = NULL;
    } else {
      t->out = o; /* without data yet, the task waits for it (hpl__rdtask_target_ready) */
      hpl__obj_ref(s, o);
    }
  } else {
    char key[340];
    stream_key(key, sizeof key, m->target, m->rid, m->slot, m->gen);
    if (kept) { /* its old bytes' streams end; its reference is this task's now */
      hpl__dataport_drop(s, kept);
      kept->progress = 0;
      kept->state = HPL__OBJ_PULLING;
      if (hpl__obj_rekey_internal(s, kept, key) == 0) {
        t->out = kept;
        out_digests(t); /* the old generation's go */
        hpl__dataport_stream_ready(s, key); /* pulls that came before the task */
      } else { /* let it go; a new buffer as below */
        if (kept->in_table) hpl__obj_detach(s, kept);
        hpl__obj_unref(s, kept);
      }
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
      if (!t->ch[j].ring) failed = 1;
    }
  }
  if ((!t->out && !t->pending) || !t->ch || failed) {
    hpl__rdtask_set_state(t, HPL__RD_FAILED);
    if (t->to_target) {
      HPL__LOG_WARN("reduce '%s' slot %u cannot run here", m->target, m->slot);
    } else { /* the directory moves the slot (another copy, a spare) */
      HPL__LOG_WARN("reduce '%s' slot %u cannot run here: %s", m->target, m->slot,
                    t->ch ? detail : "out of memory");
      hpl__rdtask_report_fail(s, m->target, m->rid, m->slot, m->gen,
                              t->ch ? detail : "out of memory");
    }
  }
  return t;
}

/* The children REDUCE_TASK `m` names: new ones start, one whose slot
 * resumed on another node goes on from there. */
static void task_learn_children(hpl__rd_task *t, const Hplpb__ReduceTask *m) {
  hpl__store *s = t->s;
  for (size_t i = 0; i < m->n_children; i++) {
    Hplpb__ReduceChild *rc = m->children[i];
    if (rc->index >= (uint32_t)t->nch || strlen(rc->key) >= sizeof t->ch[0].key) continue;
    hpl__rd_child *c = &t->ch[rc->index];
    if (c->known) {
      int same = c->slot == rc->slot && c->gen == rc->gen && c->port == (int)rc->port &&
                 !strcmp(c->addr, rc->addr) && !strcmp(c->key, rc->key);
      if (same && c->corrupt_wait) { /* the directory's word after a corrupt unit */
        HPL__LOG_INFO("reduce '%s' slot %u: pulling child %d again from byte %llu", t->target,
                      t->slot, c->index, (unsigned long long)c->recv);
        hpl__rdtask_child_start(t, c);
        continue;
      }
      if (c->done || same) continue;
      /* the child's slot resumed on another node (the directory's
       * hpl__dir_reduce_slot_failed): the bytes we have of it stay, the rest comes
       * from there */
      HPL__LOG_INFO("reduce '%s' slot %u: child %d resumed on %s:%u; pulling it on from byte %llu",
                    t->target, t->slot, c->index, rc->addr, rc->port, (unsigned long long)c->recv);
      if (c->pull) hpl__puller_cancel(c->pull);
      c->pull = NULL;
      c->paused = 0;
      hpl__rdver_cancel(c->ver); /* the new node's digests */
      c->ver = NULL;
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
    hpl__rdtask_child_start(t, c);
  }
  hpl__rdtask_try_combine(t);
}

void hpl__rdtask_on_task(hpl__store *s, ProtobufCMessage *msg) {
  Hplpb__ReduceTask *m = (Hplpb__ReduceTask *)msg;
  if (!hpl__id_valid(m->target) || !hpl__id_valid(m->source) || m->nchildren > 4096 ||
      m->n_children > m->nchildren || !hpl_dtype_size((int)m->dtype) || m->op > 3) {
    HPL__LOG_WARN("ignoring a malformed reduce task");
    return;
  }
  hpl__rd_task *t = task_find(s, m->target, m->slot), *old_step = NULL;
  hpl__obj *kept = NULL; /* the old generation's output stream, to reuse */
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
        t->out->in_table && t->out->size == m->size && t->state != HPL__RD_FAILED) {
      kept = t->out;
      t->out_kept = 1;
    }
    HASH_DEL(s->tasks->hash, t);
    hpl__rdtask_free_task(t);
    t = NULL;
  }
  if (!t) {
    if (!(t = task_new(s, m, kept))) return;
    HASH_ADD_STR(s->tasks->hash, hkey, t);
    task_hear_pulls(t);
    if (old_step) {
      t->blocked_by = old_step;
      old_step->successor = t;
    }
    /* a resumed slot's pull may have come before the task (it was parked,
     * and served once the output existed, in task_new) */
    uint64_t from;
    if (t->await_start && t->out && !t->pending &&
        hpl__dataport_pull_offset(s, t->out, &from))
      task_begin_at(t, from);
    HPL__LOG_DEBUG("reduce '%s': slot %u (gen %u) here, %d children, %s%s", m->target, m->slot,
                   m->gen, t->nch, t->to_target ? "into the target" : "as a stream",
                   old_step ? " (after the old generation's step)" : "");
    hpl__rdtask_wait_over(t); /* RUNNING if it waits for nothing */
  }
  if (t->state == HPL__RD_FAILED) return;
  task_learn_children(t, m);
}

size_t hpl__rdtask_count(const hpl__store *s) {
  return (s->tasks ? HASH_COUNT(s->tasks->hash) : 0);
}

void hpl__rdtask_on_root_released(hpl__store *s, void (*fn)(hpl__store *s, const char *target)) {
  s->tasks->root_released = fn;
}

int hpl__rdtask_init(hpl__store *s) {
  s->tasks = calloc(1, sizeof *s->tasks);
  return s->tasks ? 0 : HPL_ENOMEM;
}

void hpl__rdtask_stop(hpl__store *s) {
  if (s->tasks && s->tasks->orphans.data && !uv_is_closing((uv_handle_t *)&s->tasks->orphans))
    uv_close((uv_handle_t *)&s->tasks->orphans, NULL);
}

void hpl__rdtask_free(hpl__store *s) {
  free(s->tasks);
  s->tasks = NULL;
}
