/* rdsink.c - the reduce target at the sink (see rdsink.h): its record and
 * end, REDUCE_SINK (the target's buffer, the pull of the root's stream) and
 * REDUCE_END. The client's request and asking again after a directory
 * restart are rdsinkask.c's. */
#include "rdsink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "dataport.h"
#include "digest.h"
#include "dirlink.h"
#include "fetch.h"
#include "handoff.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "objects.h"
#include "puller.h"
#include "rdsinkint.h"
#include "rdver.h"
#include "rdtask.h"
#include "room.h"
#include "util.h"

static void root_released(hpl__store *s, const char *target);

static void sink_srcs_free(hpl__rd_sink *k) {
  for (size_t i = 0; i < k->nsrcs; i++) free(k->srcs[i]);
  free(k->srcs);
  k->srcs = NULL;
  k->nsrcs = 0;
}

/* The root's stream and its digests are no longer pulled. */
void hpl__rdsink_stop_pull(hpl__rd_sink *k) {
  if (k->pull) hpl__puller_cancel(k->pull);
  k->pull = NULL;
  hpl__rdver_cancel(k->ver);
  k->ver = NULL;
}

/* The reduce is over for this node (or was never ours): let go of it. */
void hpl__rdsink_end(hpl__rd_sink *k) {
  hpl__store *s = k->s;
  hpl__room_cancel(s, &k->room);
  free(k->wait_msg);
  k->wait_msg = NULL;
  free(k->pend_key);
  k->pend_key = NULL;
  hpl__rdsink_stop_pull(k);
  if (k->o->sink == k) k->o->sink = NULL;
  DL_DELETE(s->sinks->list, k);
  hpl__obj_unref(s, k->o);
  free(k->req);
  sink_srcs_free(k);
  free(k);
}

/* The target will not be made here: its waiters fail, it is forgotten. */
void hpl__rdsink_fail(hpl__rd_sink *k, int status, const char *detail) {
  hpl__store *s = k->s;
  hpl__obj *o = k->o;
  hpl__obj_ref(s, o);
  hpl__handoff_reduce_forget(s, o->id);
  hpl__rdsink_end(k);
  hpl__obj_fail(s, o, status, detail);
  hpl__obj_detach(s, o);
  hpl__obj_unref(s, o);
}

/* The target cannot be made here after all (no room for it): the
 * directory ends the reduce with `status`, so no get anywhere waits for it;
 * then as hpl__rdsink_fail. */
static void sink_give_up(hpl__rd_sink *k, uint64_t rid, int status, const char *detail) {
  Hplpb__ReduceFailNote n = HPLPB__REDUCE_FAIL_NOTE__INIT;
  n.target = k->o->id;
  n.rid = rid;
  n.detail = (char *)detail;
  n.sink = 1;
  n.status = status;
  hpl__dirlink_note(k->s, HPL__MSG_REDUCE_FAIL, &n.base);
  HPL__LOG_WARN("reduce '%s' fails: %s", k->o->id, detail);
  hpl__rdsink_fail(k, status, detail);
}

/* The target is made elsewhere after all: get it like any object.
 * at_directory: the directory reduced it (a small one) and holds the only
 * copy, so it is fetched now, waiters or not: the sink keeps a copy a new
 * directory learns of (with the sources, all named then). Else another
 * node makes it, and its sources are not known here. */
void hpl__rdsink_fetch_instead(hpl__rd_sink *k, int at_directory) {
  hpl__store *s = k->s;
  hpl__obj *o = k->o;
  hpl__obj_ref(s, o);
  if (!at_directory) hpl__handoff_reduce_forget(s, o->id);
  hpl__rdsink_end(k);
  o->state = HPL__OBJ_FETCHING;
  if (o->waiters || at_directory)
    hpl__fetch_start(s, o);
  else
    hpl__obj_detach(s, o);
  hpl__obj_unref(s, o);
}

/* ------------------------------------------------------------------ pulling the result */

static void sink_silent(void *arg, uint64_t quiet_ms) {
  hpl__rd_sink *k = arg;
  hpl__rdtask_report_silent(k->s, k->pull, k->o->id, k->rid, k->slot, k->gen, quiet_ms);
}

static void sink_slow(void *arg, double rate) {
  hpl__rd_sink *k = arg;
  hpl__rdtask_report_slow(k->s, k->o->id, k->rid, k->slot, k->gen, rate);
}

static void sink_done(void *arg, int status, const char *detail) {
  hpl__rd_sink *k = arg;
  hpl__store *s = k->s;
  hpl__obj *o = k->o;
  uint64_t bad_unit = status == HPL_ECORRUPT ? hpl__puller_corrupt_unit(k->pull) : 0;
  k->pull = NULL;
  if (status != 0) {
    /* a unit that failed its digest (not counted): the directory moves the
     * root, or names it again, and the stream is pulled again from there */
    if (o->in_table && o->state == HPL__OBJ_REDUCING && status == HPL_ECORRUPT)
      hpl__rdtask_report_corrupt(s, o->id, k->rid, k->slot, k->gen, bad_unit, detail);
    else if (o->in_table && o->state == HPL__OBJ_REDUCING)
      hpl__rdtask_report_fail(s, o->id, k->rid, k->slot, k->gen, detail);
    HPL__LOG_WARN("reduce '%s': pulling the result failed: %s", o->id,
                  detail ? detail : hpl_strerror(status));
    return;
  }
  if (!o->in_table) return;
  /* complete, with the digests the root's maker sent (every unit matched
   * them), or made here of its bytes when it sent none (a root's node with
   * --integrity off): copies elsewhere are checked */
  hpl__obj_ref(s, o);
  hpl__rdsink_end(k);
  if (!hpl__digest_algo_on(s->cfg.integrity) ||
      hpl__objdig_make_all(s, o, s->cfg.integrity, hpl__dirlink_target_made, NULL))
    hpl__dirlink_target_made(s, o, NULL);
  hpl__obj_unref(s, o);
}

/* The digests of the root's stream cannot be had: its bytes could never
 * count; the directory decides (as for a broken stream). */
static void sink_digests_failed(void *arg, int status, const char *detail) {
  (void)status;
  hpl__rd_sink *k = arg;
  hpl__obj *o = k->o;
  hpl__rdsink_stop_pull(k);
  if (o->in_table && o->state == HPL__OBJ_REDUCING)
    hpl__rdtask_report_fail(k->s, o->id, k->rid, k->slot, k->gen, detail);
}

/* The target's copy in progress is advertised (again) to the directory. */
void hpl__rdsink_advertise(hpl__store *s, hpl__obj *o) {
  int algo = s->cfg.integrity;
  if (!hpl__digest_algo_on(algo) || hpl__digest_units(o->size) > HPL__DIGEST_MAX_UNITS) algo = 0;
  hpl__dirlink_loc_made(s, o, algo); /* with the digests known (a restarted directory) */
}

/* Pull the target's bytes from the root's output stream, from the bytes
 * the target has of this generation on (0 but after a root resumed
 * elsewhere: reduce_tree.c's hpl__dir_reduce_slot_failed). */
static void sink_pull_root(hpl__rd_sink *k, const char *addr, int port, const char *key,
                           int internal) {
  hpl__store *s = k->s;
  hpl__obj *o = k->o;
  hpl__puller_ops ops = {.done = sink_done, .monitor = 1, .no_stall = 1, .suspect = sink_silent,
                         .slow = sink_slow, .peer = k->root_node};
  uint64_t from = o->progress;
  s->ctr.reduce_child_moves += from > 0;
  hpl__rdver_cancel(k->ver); /* the digests of this stream, from `from` on */
  k->ver = NULL;
  if (hpl__rdver_into(s, o, addr, port, key, internal, &k->pull, sink_digests_failed, k,
                      &k->ver) != 0) {
    hpl__rdtask_report_fail(s, o->id, k->rid, k->slot, k->gen, "out of memory");
    return;
  }
  hpl__objdig_on_made(o, hpl__dirlink_digests); /* to the directory as they come */
  k->pull = hpl__puller_start_into(s, addr, port, key, internal, o, from, 1, &ops, k);
  if (from > 0)
    HPL__LOG_INFO("reduce '%s': pulling the result on from byte %llu (the root resumed on %s:%d)",
                  o->id, (unsigned long long)from, addr, port);
  if (!k->pull) {
    HPL__LOG_WARN("reduce '%s': cannot pull the result from %s:%d", o->id, addr, port);
    hpl__rdtask_report_fail(s, o->id, k->rid, k->slot, k->gen, "cannot connect");
  }
}

/* Keep REDUCE_SINK `m` to act on once the target has room. */
static void sink_keep_msg(hpl__rd_sink *k, const Hplpb__ReduceSink *m) {
  size_t len = protobuf_c_message_get_packed_size(&m->base);
  uint8_t *b = malloc(len ? len : 1);
  if (!b) return; /* keep the older one */
  protobuf_c_message_pack(&m->base, b);
  free(k->wait_msg);
  k->wait_msg = b;
  k->wait_len = len;
  k->wait_rid = m->rid;
}

static void sink_room_done(hpl__room *r, int status, const char *detail) {
  hpl__rd_sink *k = r->arg;
  hpl__store *s = k->s;
  hpl__obj *o = k->o;
  if (status != 0) {
    sink_give_up(k, k->wait_rid, status, detail);
    return;
  }
  HPL__LOG_INFO("reduce '%s': room for the target after %llu ms", o->id,
                (unsigned long long)(hpl__now_ms() - r->since_ms));
  hpl__rdtask_target_ready(s, o);
  uint8_t *b = k->wait_msg;
  size_t len = k->wait_len;
  k->wait_msg = NULL;
  Hplpb__ReduceSink *m = b ? hplpb__reduce_sink__unpack(NULL, len, b) : NULL;
  free(b);
  if (m) { /* what it said, now with the buffer */
    hpl__rdsink_on_sink(s, &m->base);
    hplpb__reduce_sink__free_unpacked(m, NULL);
  } else {
    sink_give_up(k, k->wait_rid, HPL_ENOMEM, "out of memory");
  }
}

void hpl__rdsink_on_sink(hpl__store *s, ProtobufCMessage *msg) {
  Hplpb__ReduceSink *m = (Hplpb__ReduceSink *)msg;
  hpl__obj *o = hpl__id_valid(m->target) ? hpl__obj_find(s, m->target) : NULL;
  hpl__rd_sink *k = o && o->state == HPL__OBJ_REDUCING ? o->sink : NULL;
  if (!k) {
    HPL__LOG_WARN("reduce sink message for '%s', which is not being reduced here", m->target);
    return;
  }
  char detail[600];
  if (m->n_sources > 0 && m->n_sources <= 65536) {
    sink_srcs_free(k);
    if ((k->srcs = calloc(m->n_sources, sizeof *k->srcs))) {
      for (size_t i = 0; i < m->n_sources; i++)
        if ((k->srcs[k->nsrcs] = strdup(m->sources[i]))) k->nsrcs++;
    }
    /* every source named: kept for a new directory (handoff.h) */
    hpl__handoff_reduce_sources(s, o->id, k->req, k->req_len, k->srcs, k->nsrcs);
  }
  if (m->fetch) { /* reduced at the directory: an ordinary (inline) object now, whose
                     sources were all named above */
    hpl__rdsink_fetch_instead(k, 1);
    return;
  }
  if (k->room.queued) { /* still waiting for room: act on the latest word then */
    sink_keep_msg(k, m);
    return;
  }
  if (o->data && o->gen != m->gen) { /* a tree node failed: the result starts over */
    hpl__rdsink_stop_pull(k);
    hpl__dataport_restart(s, o, m->gen);
    hpl__objdig_drop(o); /* digests of the old bytes */
  }
  o->gen = m->gen;
  if (!o->data) {
    uint64_t deadline = k->timeout_ms > 0 ? hpl__now_ms() + (uint64_t)k->timeout_ms : UINT64_MAX;
    int rc = hpl__room_alloc(s, o, m->size, deadline, &k->room, sink_room_done, k, detail,
                             sizeof detail);
    if (rc == 1) {
      HPL__LOG_INFO("reduce '%s': the target waits for room", o->id);
      k->wait_rid = m->rid;
      sink_keep_msg(k, m);
      return;
    }
    if (rc != 0) {
      sink_give_up(k, m->rid, HPL_ENOMEM, detail);
      return;
    }
    hpl__rdtask_target_ready(s, o); /* a task here that came first may write now */
  }
  /* advertise the copy in progress: gets elsewhere pull behind it, and
   * the directory (a restarted one too) learns where the result is, so
   * its LOC_NOTE complete finishes the reduce there */
  if (!o->advertised) hpl__rdsink_advertise(s, o);
  k->rid = m->rid;
  k->local = m->local;
  if (k->pull && !m->local && m->root && (m->root->slot != k->slot || m->root->gen != k->gen)) {
    /* the root resumed on another node: the bytes we have stay */
    HPL__LOG_INFO("reduce '%s': the root moved to %s:%u", o->id, m->root->addr, m->root->port);
    hpl__rdsink_stop_pull(k);
  }
  if (m->local || !m->root || k->pull) return; /* a local task writes the target, or no root yet */
  k->slot = m->root->slot;
  k->gen = m->root->gen;
  k->root_node = m->root->node;
  /* the root ran here before: that task must stop writing the target
   * before the root's stream may */
  free(k->pend_key);
  k->pend_key = NULL;
  if (hpl__rdtask_end_root(s, o->id)) {
    if (!(k->pend_key = strdup(m->root->key))) {
      hpl__rdsink_fail(k, HPL_ENOMEM, "out of memory");
      return;
    }
    snprintf(k->pend_addr, sizeof k->pend_addr, "%s", m->root->addr);
    k->pend_port = (int)m->root->port;
    k->pend_internal = m->root->internal;
    return;
  }
  sink_pull_root(k, m->root->addr, (int)m->root->port, m->root->key, m->root->internal);
}

/* The old local root's last combine step is done: pull the root's stream. */
static void root_released(hpl__store *s, const char *target) {
  hpl__obj *o = hpl__obj_find(s, target);
  hpl__rd_sink *k = o && o->state == HPL__OBJ_REDUCING ? o->sink : NULL;
  if (!k || !k->pend_key || k->pull || k->local) return;
  char *key = k->pend_key;
  k->pend_key = NULL;
  sink_pull_root(k, k->pend_addr, k->pend_port, key, k->pend_internal);
  free(key);
}

void hpl__rdsink_on_end(hpl__store *s, ProtobufCMessage *msg) {
  Hplpb__ReduceEnd *m = (Hplpb__ReduceEnd *)msg;
  if (!hpl__id_valid(m->target)) return;
  hpl__rdtask_reduce_ended(s, m->target, m->rid);
  hpl__obj *o = hpl__obj_find(s, m->target);
  hpl__rd_sink *k = o ? o->sink : NULL;
  if (!k) return;
  if (m->status == 0 && o->state == HPL__OBJ_REDUCING && m->rid && k->rid == m->rid) {
    /* an old instance ended (a restarted directory starts over): its
     * stream is no use any more; the new one's REDUCE_SINK follows */
    hpl__rdsink_stop_pull(k);
    k->pull = NULL;
    return;
  }
  if (m->status != 0 && o->state == HPL__OBJ_REDUCING)
    hpl__rdsink_fail(k, m->status, m->detail);
  else if (o->state != HPL__OBJ_REDUCING)
    hpl__rdsink_end(k);
}

/* ------------------------------------------------------------------ drain, stop, the context */

void hpl__rdsink_drain(hpl__store *s) {
  hpl__rd_sink *k;
  DL_FOREACH(s->sinks->list, k) {
    hpl__rdsink_stop_pull(k);
    k->pull = NULL;
  }
}

void hpl__rdsink_stop(hpl__store *s) {
  while (s->sinks && s->sinks->list) hpl__rdsink_end(s->sinks->list);
}

int hpl__rdsink_init(hpl__store *s) {
  if (!(s->sinks = calloc(1, sizeof *s->sinks))) return HPL_ENOMEM;
  hpl__rdtask_on_root_released(s, root_released);
  return 0;
}

void hpl__rdsink_free(hpl__store *s) {
  free(s->sinks);
  s->sinks = NULL;
}
