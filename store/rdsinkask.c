/* rdsinkask.c - asking the directory for a reduce into a target here (see
 * rdsink.h): the client's REDUCE request, which makes the target object,
 * and asking again for every target still being made after a directory
 * restart (the running tree adopted when it can be). */
#include <stdint.h>
#include <stdlib.h>
#include <utlist.h>

#include "dataport.h"
#include "dirlink.h"
#include "hoplite.h"
#include "log.h"
#include "objects.h"
#include "rdsinkint.h"
#include "rdtask.h"

/* ------------------------------------------------------------------ the client's request */

typedef struct rd_req {
  hpl__creq q;
  hpl__obj *o; /* the target being produced here (referenced), or NULL */
} rd_req;

static void reduce_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  rd_req *x = arg;
  const Hplpb__ReduceRep *r = (const Hplpb__ReduceRep *)rep->m;
  Hplpb__ReduceRep out = HPLPB__REDUCE_REP__INIT;
  int status = rep->status;
  if (r) {
    out.joined = r->joined;
    out.sink_node = r->sink_node;
  }
  out.detail = (char *)(*rep->detail                 ? rep->detail
                        : status == HPL_ETIMEDOUT    ? "the directory did not answer in time"
                        : status == HPL_ECANCELED    ? "the store is stopping"
                        : status                     ? hpl_strerror(status)
                                                     : "");
  out.status = status;
  hpl__obj *o = x->o;
  hpl__rd_sink *k = o && o->state == HPL__OBJ_REDUCING ? o->sink : NULL;
  if (k && status != 0)
    hpl__rdsink_fail(k, status, out.detail); /* refused */
  else if (k && out.sink_node != s->node_id)
    hpl__rdsink_fetch_instead(k, 0); /* another node produces the target */
  if (o) hpl__obj_unref(s, o);
  hpl__session_send(x->q.cl, HPL__MSG_REDUCE_REP, x->q.req, &out.base);
  hpl__session_creq_done(&x->q);
  free(x);
}

void hpl__rdsink_request(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__ReduceReq *m) {
  if (!hpl__id_valid(m->target)) {
    hpl__session_reply(cl, req, HPL_EINVAL, "invalid target id");
    return;
  }
  rd_req *x = calloc(1, sizeof *x);
  if (!x) {
    hpl__session_reply(cl, req, HPL_ENOMEM, "out of memory");
    return;
  }
  m->sink_node = s->node_id;
  hpl__obj *o = hpl__obj_find(s, m->target);
  if (!o) {
    hpl__rd_sink *k = calloc(1, sizeof *k);
    o = k ? hpl__obj_new(s, m->target, HPL__OBJ_REDUCING) : NULL;
    if (!o) {
      free(k);
      free(x);
      hpl__session_reply(cl, req, HPL_ENOMEM, "out of memory");
      return;
    }
    k->s = s;
    k->o = o;
    k->timeout_ms = m->timeout_ms;
    o->primary = 1; /* made here: the cluster's first copy */
    hpl__obj_ref(s, o);
    o->sink = k;
    DL_APPEND(s->sinks->list, k);
    /* kept to ask again if the directory restarts (sized after every
     * field is set: packing more than was measured overruns the buffer) */
    size_t len = protobuf_c_message_get_packed_size(&m->base);
    if ((k->req = malloc(len ? len : 1))) {
      protobuf_c_message_pack(&m->base, k->req);
      k->req_len = len;
    }
    x->o = o;
  } else if (o->state == HPL__OBJ_REDUCING) {
    x->o = o; /* a second local caller of the same reduce */
  } /* else the target exists here already: the directory decides whether
     * that is a finished reduce being joined or a clash */
  if (x->o) hpl__obj_ref(s, x->o);
  hpl__session_creq_init(&x->q, cl, req);
  int64_t to = m->timeout_ms;
  if (hpl__dirlink_request(s, HPL__MSG_REDUCE, &m->base, NULL, 0, to < 0 ? -1 : to + 1000,
                           reduce_reply, x) != 0) {
    reduce_reply(s, &(hpl__dl_reply){.status = HPL_ENOMEM, .detail = "out of memory"}, x);
  }
}

/* ------------------------------------------------------------------ directory restart */

static void resubmit_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  hpl__obj *o = arg;
  int status = rep->status;
  hpl__rd_sink *k = o->in_table && o->state == HPL__OBJ_REDUCING ? o->sink : NULL;
  const Hplpb__ReduceRep *r = (const Hplpb__ReduceRep *)rep->m;
  if (status && k) {
    const char *why = *rep->detail ? rep->detail : hpl_strerror(status);
    HPL__LOG_WARN("reduce '%s' could not be restarted: %s", o->id, why);
    hpl__rdsink_fail(k, status, why);
  } else if (k && k->adopting) {
    if (r && r->adopted) {
      HPL__LOG_INFO("reduce '%s': the restarted directory adopted the running tree", o->id);
    } else if (k->rid == k->adopting) { /* no new tree's REDUCE_SINK yet */
      HPL__LOG_INFO("reduce '%s': the restarted directory starts it over", o->id);
      hpl__rdsink_stop_pull(k);
      k->pull = NULL;
    }
    k->adopting = 0;
  }
  hpl__obj_unref(s, o);
}

void hpl__rdsink_directory_restarted(hpl__store *s) {
  hpl__rdtask_directory_restarted(s);
  hpl__rd_sink *k, *tmp;
  DL_FOREACH_SAFE(s->sinks->list, k, tmp) {
    hpl__obj *o = k->o;
    if (o->state != HPL__OBJ_REDUCING) { /* finished while the directory was down: */
      if (k->rid) {                 /* its REDUCE_END will never come, so */
        /* its tasks here and on every other node end now (they would wait
         * HPL__RDTASK_ORPHAN_MS, holding their outputs, and then free them in
         * the middle of whatever runs next) */
        Hplpb__ReduceEnd m = HPLPB__REDUCE_END__INIT;
        m.rid = k->rid;
        m.target = o->id;
        m.detail = "";
        hpl__dirlink_note(s, HPL__MSG_REDUCE_DONE, &m.base);
        hpl__rdtask_reduce_ended(s, o->id, k->rid);
      }
      hpl__rdsink_end(k);
      continue;
    }
    if (!k->req) continue;
    Hplpb__ReduceReq *m =
        (Hplpb__ReduceReq *)hpl__msg_unpack(HPL__MSG_REDUCE, k->req, k->req_len);
    if (!m) continue;
    /* the old tree goes on if the new directory adopts it: that needs
     * every source in it known here and its result still flowing in */
    uint32_t want = m->num_objects ? m->num_objects : (uint32_t)m->n_sources;
    int adoptable = k->rid && o->data && k->nsrcs == want && (k->local || k->pull);
    m->adopt_rid = k->rid;
    m->adopt_gen = o->gen;
    if (adoptable) {
      m->n_adopt_sources = k->nsrcs;
      m->adopt_sources = k->srcs;
      k->adopting = k->rid;
    } else {
      hpl__rdsink_stop_pull(k);
      k->pull = NULL;
      if (o->data) hpl__dataport_restart(s, o, o->gen);
    }
    o->advertised = 0;
    HPL__LOG_INFO("asking the restarted directory again for the reduce into '%s'%s", o->id,
                  adoptable ? " (its tree still runs)" : "");
    m->sink_node = s->node_id;
    hpl__obj_ref(s, o);
    if (hpl__dirlink_request(s, HPL__MSG_REDUCE, &m->base, NULL, 0, -1, resubmit_reply, o) != 0)
      hpl__obj_unref(s, o);
    /* where the result is being made, for the new directory's gets (and
     * its LOC_NOTE complete then finishes the adopted reduce) */
    if (adoptable) hpl__rdsink_advertise(s, o);
    m->n_adopt_sources = 0; /* k->srcs stays k's */
    m->adopt_sources = NULL;
    protobuf_c_message_free_unpacked(&m->base, NULL);
  }
}
