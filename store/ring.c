/* ring.c - this node's part in ring allreduces (see ring.h). */
#include "ring.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dataport.h"
#include "dirlink.h"
#include "objdig.h"
#include "digest.h"
#include "hoplite.h"
#include "log.h"
#include "ops.h"
#include "proto.h"
#include "puller.h"
#include "rddig.h"
#include "ringint.h"
#include "room.h"
#include "util.h"

/* A target that does not fit waits this long for room (idle copies let go):
 * well within HPL__RING_QUIET_MS, after which our successor, whose pull of our
 * stream waits meanwhile, would give the ring up */
#define RING_ROOM_MS (HPL__RING_QUIET_MS / 2)

typedef hpl__rg_task rg_task;

/* The module's context (s->rings). */
typedef struct hpl__rings {
  rg_task *hash; /* by target (uthash) */
} hpl__rings;

/* The member's one state change, logged. */
static void set_state(rg_task *g, int to) {
  static const char *const n[] = {"asking", "running", "complete"};
  HPL__LOG_DEBUG("ring allreduce into '%s': %s -> %s", g->target, n[g->state], n[to]);
  g->state = to;
}

/* The client's answer: status 0 (the target is complete here), a failure
 * of the request itself, or HPL_EUNAVAIL: no ring made it (sent as
 * no_ring, with joined saying whether one ran). */
static void answer(rg_task *g, int status, const char *detail, int ran) {
  if (g->answered) return;
  g->answered = 1;
  Hplpb__ReduceRep r = HPLPB__REDUCE_REP__INIT;
  r.no_ring = status == HPL_EUNAVAIL;
  r.status = r.no_ring ? 0 : status;
  r.detail = (char *)(detail ? detail : "");
  r.joined = ran;
  r.sink_node = g->s->node_id;
  hpl__session_send(g->q.cl, HPL__MSG_REDUCE_REP, g->q.req, &r.base);
  hpl__session_creq_done(&g->q);
  for (uint32_t i = 0; i < g->nmore; i++) {
    hpl__session_send(g->more[i].cl, HPL__MSG_REDUCE_REP, g->more[i].req, &r.base);
    hpl__session_creq_done(&g->more[i]);
  }
}

static const uint8_t *gone_bytes_at(const hpl__source *src, hpl__obj *o, uint64_t pos,
                                    uint64_t *n) {
  (void)src, (void)o, (void)pos, (void)n;
  return NULL;
}

/* The source of a stream whose ring is over. */
static const hpl__source ring_gone = {.bytes_at = gone_bytes_at};

static void task_free(rg_task *g) {
  hpl__store *s = g->s;
  hpl__room_cancel(s, &g->room); /* (a no-op unless it waits) */
  hpl__ring_in_stop(g);
  if (g->out) {
    g->out->data = NULL; /* the target's buffer, not the stream's own */
    g->out->source = &ring_gone; /* pulls still served from it end */
    hpl__obj_detach(s, g->out);
    hpl__obj_unref(s, g->out);
  }
  if (g->t) {
    if (g->t->state == HPL__OBJ_REDUCING && g->t->in_table) {
      hpl__obj_fail(s, g->t, HPL_EUNAVAIL, "the ring allreduce making it was abandoned");
      hpl__obj_detach(s, g->t);
    }
    hpl__obj_unref(s, g->t);
  }
  if (g->src) hpl__obj_unref(s, g->src);
  HASH_DEL(s->rings->hash, g);
  free(g->more);
  free(g->seg);
  free(g->in_at);
  free(g);
}

/* Tell the directory how this member's part ended (0: its target is
 * complete; corrupt_unit not UINT64_MAX: that unit of the incoming stream
 * failed its digest). */
static void note(rg_task *g, int status, const char *detail, uint64_t corrupt_unit) {
  Hplpb__ReduceEnd e = HPLPB__REDUCE_END__INIT;
  e.rid = g->rid;
  e.target = g->target;
  e.status = status;
  e.detail = (char *)(detail ? detail : "");
  e.corrupt = corrupt_unit != UINT64_MAX;
  e.corrupt_unit = e.corrupt ? corrupt_unit : 0;
  hpl__dirlink_note(g->s, HPL__MSG_RING_NOTE, &e.base);
}

void hpl__ring_fail(rg_task *g, int status, const char *detail, uint64_t corrupt_unit) {
  HPL__LOG_WARN("ring allreduce into '%s': %s", g->target, detail);
  g->s->ctr.ring_failures++;
  if (g->rid) note(g, status, detail, corrupt_unit); /* (a plan came: the ring formed) */
  answer(g, HPL_EUNAVAIL, detail, g->rid != 0);
  task_free(g);
}

static void task_fail(rg_task *g, int status, const char *detail) {
  hpl__ring_fail(g, status, detail, UINT64_MAX);
}

/* The complete target's digests are made (or it gets none). */
static void target_hashed(hpl__store *s, hpl__obj *t, void *arg) {
  (void)arg;
  if (t->in_table && !t->advertised) hpl__dirlink_loc_add_made(s, t);
}

void hpl__ring_complete(rg_task *g) {
  hpl__store *s = g->s;
  hpl__obj *t = g->t;
  set_state(g, HPL__RG_COMPLETE);
  hpl__obj_progress(s, t, t->size);
  hpl__obj_sealed(s, t);
  /* listed at the directory with its digests, made of its bytes here
   * first (copies elsewhere are checked against them) */
  if (!hpl__digest_algo_on(s->cfg.integrity) ||
      hpl__objdig_make_all(s, t, s->cfg.integrity, target_hashed, NULL))
    target_hashed(s, t, NULL);
  note(g, 0, NULL, UINT64_MAX);
  s->ctr.rings_done++;
  HPL__LOG_INFO("ring allreduce into '%s': complete here after %llu ms (the incoming stream's "
                "longest pause %llu ms, at byte %llu)", g->target,
                (unsigned long long)(hpl__now_ms() - g->start_ms), (unsigned long long)g->gap_ms,
                (unsigned long long)g->gap_at);
  answer(g, 0, NULL, 1);
  /* the task stays, serving its stream, until the directory ends the ring */
}

/* ------------------------------------------------------------------ forming */

static void stream_key(char *out, size_t len, uint64_t rid, uint32_t idx, const char *target) {
  snprintf(out, len, "g:%llx:%u:%s", (unsigned long long)rid, idx, target);
}

static int task_run(rg_task *g, char *why, size_t wlen);
static const uint8_t *stream_bytes_at(const hpl__source *src, hpl__obj *o, uint64_t pos,
                                      uint64_t *n);

/* The target's buffer is there (status 0) or did not fit in time. */
static void room_done(hpl__room *r, int status, const char *detail) {
  rg_task *g = r->arg;
  char why[400];
  int rc = status;
  if (rc)
    snprintf(why, sizeof why, "%s", detail ? detail : hpl_strerror(rc));
  else
    rc = task_run(g, why, sizeof why);
  if (rc) task_fail(g, rc, why);
}

/* The plan: make the target (waiting for room if need be), then task_run. */
static int task_start(rg_task *g, const Hplpb__RingPlan *p, char *why, size_t wlen) {
  hpl__store *s = g->s;
  g->start_ms = hpl__now_ms();
  g->rid = p->rid;
  g->k = (uint32_t)p->n_nodes;
  g->idx = p->index;
  g->op = (int)p->op;
  g->dtype = (int)p->dtype;
  g->es = hpl_dtype_size(g->dtype);
  g->size = p->size;
  if (g->k < 3 || g->idx >= g->k || !g->es || g->size % g->es || g->size / g->es < g->k) {
    snprintf(why, wlen, "a ring plan that does not fit");
    return HPL_EPROTO;
  }
  g->pred = (g->idx + g->k - 1) % g->k;
  const Hplpb__ReduceChild *me = p->nodes[g->idx], *pr = p->nodes[g->pred];
  /* our own source, complete and in memory */
  hpl__obj *src = me->key ? hpl__obj_find(s, me->key) : NULL;
  if (!src || src->state != HPL__OBJ_SEALED || !src->data || src->size != g->size) {
    snprintf(why, wlen, "source '%s' is not complete in memory here", me->key ? me->key : "");
    return HPL_ESTATE;
  }
  hpl__obj_ref(s, src);
  g->src = src;
  /* slices on element boundaries; steps of both streams */
  g->seg = calloc(g->k + 1, sizeof *g->seg);
  g->in_at = calloc(2 * (size_t)g->k - 1, sizeof *g->in_at);
  if (!g->seg || !g->in_at) {
    snprintf(why, wlen, "out of memory");
    return HPL_ENOMEM;
  }
  uint64_t elems = g->size / g->es;
  for (uint32_t i = 0; i <= g->k; i++) g->seg[i] = elems * i / g->k * g->es;
  for (uint32_t st = 0; st < 2 * g->k - 2; st++)
    g->in_at[st + 1] = g->in_at[st] + hpl__rg_slice_len(g, hpl__rg_step_slice(g, g->pred, st));
  g->out_len = hpl__rg_slice_len(g, g->idx) + g->in_at[2 * g->k - 3];
  /* the target: local gets wait for it */
  if (hpl__obj_find(s, g->target)) {
    snprintf(why, wlen, "'%s' is already here (a get of it came first)", g->target);
    return HPL_EEXIST;
  }
  hpl__obj *t = hpl__obj_new(s, g->target, HPL__OBJ_REDUCING);
  if (!t) {
    snprintf(why, wlen, "out of memory");
    return HPL_ENOMEM;
  }
  hpl__obj_ref(s, t);
  g->t = t;
  snprintf(g->pred_addr, sizeof g->pred_addr, "%s", pr->addr ? pr->addr : "");
  g->pred_port = pr->port;
  g->pred_node = pr->node;
  set_state(g, HPL__RG_RUNNING);
  int rc = hpl__room_alloc(s, t, g->size, hpl__now_ms() + RING_ROOM_MS, &g->room, room_done, g, why,
                           wlen);
  if (rc > 0) {
    HPL__LOG_INFO("ring allreduce into '%s': waiting up to %d ms for room in the pool", g->target,
                  RING_ROOM_MS);
    return 0;
  }
  if (rc) return rc;
  return task_run(g, why, wlen);
}

/* Publish our stream and pull the predecessor's (the target's buffer is
 * there). */
static int task_run(rg_task *g, char *why, size_t wlen) {
  hpl__store *s = g->s;
  /* our outgoing stream: step 0 is our source's slice, every later step
   * a slice of the target (stream_bytes_at) */
  stream_key(g->key, sizeof g->key, g->rid, g->idx, g->target);
  hpl__obj *o = hpl__obj_prep_internal(s, g->key);
  if (!o) {
    snprintf(why, wlen, "out of memory");
    return HPL_ENOMEM;
  }
  g->source.bytes_at = stream_bytes_at;
  g->source.keep[0] = g->t; /* (digest jobs read the stream's bytes there) */
  g->source.keep[1] = g->src;
  o->source = &g->source;
  o->size = g->out_len;
  o->data = g->t->data;
  /* its digests (--integrity), made as its bytes become final: before it
   * is published, so that no receiver is told it has none */
  if (hpl__rddig_reset(s, o, 0) != 0 || hpl__obj_publish_internal(s, o) != 0) {
    o->data = NULL;
    free(o->dig);
    free(o);
    snprintf(why, wlen, "cannot publish the ring stream");
    return HPL_ENOMEM;
  }
  hpl__obj_ref(s, o);
  g->out = o;
  hpl__obj_progress(s, o, hpl__rg_slice_len(g, g->idx));
  hpl__rddig_made(s, o, hpl__rg_slice_len(g, g->idx));
  hpl__dataport_stream_ready(s, g->key); /* our successor may have asked already */
  /* the predecessor's stream */
  char key[HPL_ID_MAX + 64];
  stream_key(key, sizeof key, g->rid, g->pred, g->target);
  int rc = hpl__ring_in_start(g, key, why, wlen);
  if (rc) return rc;
  s->ctr.ring_tasks++;
  HPL__LOG_INFO("ring allreduce into '%s': member %u of %u, %llu bytes, pulling from %s:%u",
                g->target, g->idx, g->k, (unsigned long long)g->size, g->pred_addr, g->pred_port);
  return 0;
}

static void plan_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  (void)s;
  rg_task *g = arg;
  const Hplpb__RingPlan *p = (const Hplpb__RingPlan *)rep->m;
  if (rep->status || !p || p->n_nodes == 0) {
    const char *why = rep->status ? (*rep->detail ? rep->detail : hpl_strerror(rep->status))
                      : p && p->detail && *p->detail ? p->detail
                                                     : "no ring";
    HPL__LOG_DEBUG("ring allreduce into '%s' not run: %s", g->target, why);
    g->s->ctr.ring_fallbacks++;
    answer(g, rep->status == HPL_ETIMEDOUT ? HPL_ETIMEDOUT : HPL_EUNAVAIL, why, p && p->rid);
    task_free(g);
    return;
  }
  char why[400];
  int rc = task_start(g, p, why, sizeof why);
  if (rc) task_fail(g, rc, why);
}

void hpl__ring_request(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__ReduceReq *m) {
  if (!hpl__id_valid(m->target)) {
    hpl__session_reply(cl, req, HPL_EINVAL, "invalid target id");
    return;
  }
  rg_task *g = NULL;
  HASH_FIND_STR(s->rings->hash, m->target, g);
  if (g && !g->answered) {
    /* another caller on this node: the same answer, when it comes (a
     * second participant here would make the directory decline) */
    hpl__creq *more = realloc(g->more, (g->nmore + 1) * sizeof *more);
    if (more) {
      g->more = more;
      hpl__session_creq_init(&g->more[g->nmore++], cl, req);
      return;
    }
  }
  /* (whether the target exists, the directory answers: it also knows
   * whether a ring made it) */
  const char *no = !hpl__dirlink_caps(s)->rings ? "the directory runs no rings"
                   : g           ? "a ring into it ran on this node"
                                 : NULL;
  if (no || !(g = calloc(1, sizeof *g))) {
    Hplpb__ReduceRep r = HPLPB__REDUCE_REP__INIT;
    r.no_ring = 1;
    r.detail = (char *)(no ? no : "out of memory");
    r.joined = no && strcmp(no, "the directory runs no rings") != 0;
    s->ctr.ring_fallbacks++;
    hpl__session_send(cl, HPL__MSG_REDUCE_REP, req, &r.base);
    return;
  }
  g->s = s;
  snprintf(g->target, sizeof g->target, "%s", m->target);
  hpl__session_creq_init(&g->q, cl, req);
  HASH_ADD_STR(s->rings->hash, target, g);
  m->sink_node = s->node_id;
  int64_t to = m->timeout_ms;
  if (hpl__dirlink_request(s, HPL__MSG_RING, &m->base, NULL, 0, to < 0 ? -1 : to, plan_reply, g) !=
      0) {
    answer(g, HPL_EUNAVAIL, "out of memory", 0);
    task_free(g);
  }
}

/* ------------------------------------------------------------------ the outgoing stream */

/* Bytes of our outgoing stream `o` from `pos` (its source's bytes_at):
 * step 0 is our source's slice, every later step a slice of the target. */
static const uint8_t *stream_bytes_at(const hpl__source *src, hpl__obj *o, uint64_t pos,
                                      uint64_t *n) {
  const rg_task *g = (const rg_task *)((const char *)src - offsetof(rg_task, source));
  if (g->out != o) return NULL;
  uint64_t first = hpl__rg_slice_len(g, g->idx);
  if (pos < first) {
    if (*n > first - pos) *n = first - pos;
    return g->src->data + g->seg[g->idx] + pos;
  }
  /* step s >= 1 of ours is step s - 1 of the incoming stream, same slice */
  uint64_t ip = pos - first;
  uint32_t st = hpl__rg_in_step(g, ip);
  uint64_t left = g->in_at[st + 1] - ip;
  if (*n > left) *n = left;
  return g->t->data + g->seg[hpl__rg_step_slice(g, g->pred, st)] + (ip - g->in_at[st]);
}

/* ------------------------------------------------------------------ ending */

void hpl__ring_on_end(hpl__store *s, ProtobufCMessage *msg) {
  Hplpb__ReduceEnd *m = (Hplpb__ReduceEnd *)msg;
  rg_task *g = NULL;
  if (m->target) HASH_FIND_STR(s->rings->hash, m->target, g);
  if (!g || g->state == HPL__RG_ASKING || g->rid != m->rid) return;
  if (m->status && g->state != HPL__RG_COMPLETE) {
    HPL__LOG_WARN("ring allreduce into '%s' abandoned: %s", g->target,
                  m->detail && *m->detail ? m->detail : hpl_strerror(m->status));
    answer(g, HPL_EUNAVAIL, m->detail, 1);
  }
  task_free(g);
}

void hpl__ring_directory_lost(hpl__store *s) {
  rg_task *g, *tmp;
  HASH_ITER(hh, s->rings->hash, g, tmp) {
    if (g->state == HPL__RG_ASKING) continue; /* its RING is asked again */
    if (g->state != HPL__RG_COMPLETE) {
      answer(g, HPL_EUNAVAIL, "the directory link was lost during the ring", 1);
      s->ctr.ring_failures++;
    }
    task_free(g);
  }
}

void hpl__ring_stop(hpl__store *s) {
  rg_task *g, *tmp;
  if (!s->rings) return;
  /* (after hpl__dirlink_stop: tasks still asking were answered and freed) */
  HASH_ITER(hh, s->rings->hash, g, tmp) {
    answer(g, HPL_ECANCELED, "the store is stopping", g->state != HPL__RG_ASKING);
    task_free(g);
  }
}

int hpl__ring_init(hpl__store *s) {
  s->rings = calloc(1, sizeof *s->rings);
  return s->rings ? 0 : HPL_ENOMEM;
}

void hpl__ring_free(hpl__store *s) {
  free(s->rings);
  s->rings = NULL;
}
