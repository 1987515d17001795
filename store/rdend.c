/* rdend.c - how this node's reduce tasks end (see rdtask.h and
 * rdtaskint.h): the reduce ended, its root moved away from this node, or
 * a directory restart orphaned them - ended after a while unless the new
 * directory adopts their reduce, or at once when room is wanted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dataport.h"
#include "log.h"
#include "rdtaskint.h"
#include "room.h"
#include "util.h"

int hpl__rdtask_end_root(hpl__store *s, const char *target) {
  int running = 0;
  hpl__rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    if (!t->to_target || strcmp(t->target, target) != 0) continue;
    HPL__LOG_INFO("reduce '%s' slot %u: the root runs elsewhere now; the task here ends", t->target,
                  t->slot);
    HASH_DEL(s->tasks->hash, t);
    t->root_moved = 1;
    running |= t->working;
    hpl__rdtask_free_task(t);
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

void hpl__rdtask_reduce_ended(hpl__store *s, const char *target, uint64_t rid) {
  hpl__rdtask_end(s, target, rid);
  ended_reduce e = {.target = target, .rid = rid};
  hpl__dataport_unpark(s, key_of_ended, &e, HPL_ECANCELED, "the reduce ended");
}

void hpl__rdtask_end(hpl__store *s, const char *target, uint64_t rid) {
  hpl__rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    if (target && (strcmp(t->target, target) != 0 || (rid && t->rid != rid))) continue;
    HPL__LOG_DEBUG("reduce '%s' slot %u: the task ends", t->target, t->slot);
    HASH_DEL(s->tasks->hash, t);
    hpl__rdtask_free_task(t);
  }
}

static void orphan_end(hpl__rd_task *t, const char *why) {
  HPL__LOG_INFO(
      "reduce '%s' slot %u: the restarted directory did not adopt it; ending the task (%s)",
      t->target, t->slot, why);
  HASH_DEL(t->s->tasks->hash, t);
  t->s->ctr.orphans_ended++;
  hpl__rdtask_free_task(t);
}

/* Each orphan ends HPL__RDTASK_ORPHAN_MS after the restart that orphaned it (a
 * later restart does not prolong it); the timer is set for the earliest. */
static void orphans_expired(uv_timer_t *h) {
  hpl__store *s = h->data;
  uint64_t now = hpl__now_ms(), next = UINT64_MAX;
  hpl__rd_task *t, *tmp;
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
static void orphans_shed(hpl__store *s) {
  hpl__rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp)
    if (t->orphan && !t->to_target && !t->working && t->out && t->out->internal &&
        t->comb >= t->size && t->out->refs == 1)
      orphan_end(t, "its pool memory is wanted");
}

void hpl__rdtask_directory_restarted(hpl__store *s) {
  if (!s->tasks->orphans.data) {
    uv_timer_init(s->loop, &s->tasks->orphans);
    s->tasks->orphans.data = s;
  }
  hpl__room_on_shed(s, orphans_shed);
  uint64_t at = hpl__now_ms() + HPL__RDTASK_ORPHAN_MS;
  hpl__rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp) {
    if (t->orphan) continue;
    t->orphan = 1;
    t->orphan_at = at;
  }
  orphans_expired(&s->tasks->orphans);
}

void hpl__rdtask_on_adopted(hpl__store *s, ProtobufCMessage *msg) {
  Hplpb__ReduceEnd *m = (Hplpb__ReduceEnd *)msg;
  if (!hpl__id_valid(m->target)) return;
  hpl__rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks->hash, t, tmp)
    if (t->rid == m->rid && strcmp(t->target, m->target) == 0) t->orphan = 0;
}
