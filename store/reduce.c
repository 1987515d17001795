/* reduce.c - this store's part in reduce trees (see store.h).
 *
 * The directory assigns tree slots to the stores holding the sources. A
 * slot with children runs a task here: it pulls every child's stream (a
 * leaf child's stream is its source object; an inner child's is that
 * child's output), combines them chunk by chunk with its own source, and
 * exposes the combined prefix as a reduce stream its parent pulls (or, at
 * the sink, as the target object itself). The first child's bytes land
 * straight in the output buffer and are combined in place; further
 * children go through rings of bounded size, whose streams pause while the
 * ring is full. Large combine steps run on libuv's thread pool.
 *
 * The sink (the node that asked for the reduce) holds the target object
 * (state OBJ_REDUCING) from the start; once the directory says where the
 * result comes from, it advertises the target as a copy in progress, so
 * gets elsewhere (allreduce) pipeline behind the reduce.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "log.h"
#include "ops.h"
#include "store.h"
#include "util.h"

#define RD_RING (8u << 20)        /* bytes buffered per extra child */
#define RD_OFFLOAD (1u << 20)     /* combine steps this large go to the pool */

typedef struct rd_task rd_task;

typedef struct rd_child {
  rd_task *t;
  int index;
  int known;
  uint32_t slot, gen; /* the child's slot and its output's generation */
  char addr[64];
  int port;
  char key[320];
  int internal;
  st_puller *pull;
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
  st_obj *src; /* own source (referenced) */
  st_obj *out; /* output: a reduce stream, or the target (referenced) */
  int to_target;
  int nch;
  rd_child *ch;
  uint64_t comb; /* bytes of out that are final */
  int working;   /* a combine step runs on the thread pool */
  uv_work_t work;
  uint64_t w_from, w_to;
  int ended; /* the reduce ended while a step was running */
  int failed;
};

void reduce_stream_key(char *out, size_t len, const char *target, uint64_t rid, uint32_t slot,
                       uint32_t gen) {
  snprintf(out, len, "r:%llx.%u:%u:%s", (unsigned long long)rid, slot, gen, target);
}

/* Tell the directory that the stream of slot `slot` (generation gen) failed. */
static void report_fail(store *s, const char *target, uint64_t rid, uint32_t slot, uint32_t gen,
                        const char *detail) {
  Hplpb__ReduceFailNote n = HPLPB__REDUCE_FAIL_NOTE__INIT;
  n.target = (char *)target;
  n.rid = rid;
  n.slot = slot;
  n.gen = gen;
  n.detail = (char *)(detail ? detail : "");
  dirlink_note(s, HPL__MSG_REDUCE_FAIL, &n.base);
}

static void task_try_combine(rd_task *t);
static void task_free(rd_task *t);

/* ------------------------------------------------------------------ combine */

/* out[from, to) = op(out, own, ring children): child 0 is already in out. */
static void combine_range(rd_task *t, uint64_t from, uint64_t to) {
  if (from >= to) return;
  uint8_t *out = t->out->data;
  const uint8_t *own = t->src->data;
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
      transfer_stream_resume(t->ch[j].pull);
    }
  if (t->comb < t->size) return;
  LOG_DEBUG("reduce '%s' slot %u: output complete (%llu bytes)", t->target, t->slot,
            (unsigned long long)t->size);
  if (t->to_target) {
    Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
    n.id = t->out->id;
    n.kind = HPL__LOC_COMPLETE;
    dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
    store_obj_sealed(s, t->out);
  } else {
    t->out->state = OBJ_SEALED;
    store_obj_progress(s, t->out, t->size);
  }
}

static void work_done(uv_work_t *w, int status) {
  rd_task *t = w->data;
  t->working = 0;
  if (t->ended) {
    task_free(t);
    return;
  }
  if (status == 0) task_advance(t, t->w_to);
  task_try_combine(t);
}

/* Combine whatever every input has delivered. */
static void task_try_combine(rd_task *t) {
  if (t->working || t->failed || t->comb >= t->size) return;
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

static uint8_t *child_buf(void *arg, uint64_t off, size_t *len) {
  rd_child *c = arg;
  rd_task *t = c->t;
  if (!c->ring) {
    uint64_t room = t->size - off;
    *len = room > (1u << 30) ? (1u << 30) : (size_t)room;
    return t->out->data + off;
  }
  /* ring: bytes [comb, recv) are held; room up to comb + ring_size */
  uint64_t limit = t->comb + c->ring_size;
  if (limit > t->size) limit = t->size;
  if (off >= limit) {
    *len = 0;
    c->paused = 1;
    transfer_stream_paused(c->pull);
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
  report_fail(t->s, t->target, t->rid, c->slot, c->gen, detail);
}

static void child_start(rd_task *t, rd_child *c) {
  if (c->pull || c->done) return;
  xfer_ops ops = {.buf = child_buf, .got = child_got, .done = child_done};
  c->pull = transfer_stream(t->s, c->addr, c->port, c->key, c->internal, c->recv, t->size, &ops,
                            c);
  if (!c->pull)
    LOG_WARN("reduce '%s' slot %u: cannot pull child %s from %s:%d", t->target, t->slot, c->key,
             c->addr, c->port);
}

/* ------------------------------------------------------------------ tasks */

static rd_task *task_find(store *s, const char *target, uint32_t slot) {
  char k[340];
  snprintf(k, sizeof k, "%u:%s", slot, target);
  rd_task *t = NULL;
  HASH_FIND_STR(s->tasks, k, t);
  return t;
}

static void task_free(rd_task *t) {
  store *s = t->s;
  for (int j = 0; j < t->nch; j++) {
    rd_child *c = &t->ch[j];
    if (c->pull) transfer_stream_cancel(c->pull);
    c->pull = NULL;
  }
  if (t->working) { /* the pool still reads the buffers: finish later */
    t->ended = 1;
    return;
  }
  for (int j = 0; j < t->nch; j++) free(t->ch[j].ring);
  free(t->ch);
  if (t->out) {
    if (t->out->internal) store_obj_detach(s, t->out);
    store_obj_unref(s, t->out);
  }
  if (t->src) store_obj_unref(s, t->src);
  free(t);
}

void reduce_on_task(store *s, Hplpb__ReduceTask *m) {
  if (!hpl__id_valid(m->target) || !hpl__id_valid(m->source) || m->nchildren > 4096 ||
      m->n_children > m->nchildren || !hpl_dtype_size((int)m->dtype) || m->op > 3) {
    LOG_WARN("ignoring a malformed reduce task");
    return;
  }
  rd_task *t = task_find(s, m->target, m->slot);
  if (t && (t->gen != m->gen || t->rid != m->rid)) { /* a reset: start this slot over */
    HASH_DEL(s->tasks, t);
    task_free(t);
    t = NULL;
  }
  char detail[400];
  if (!t) {
    st_obj *src = store_find(s, m->source);
    if (!src || src->state != OBJ_SEALED || src->size != m->size) {
      LOG_WARN("reduce '%s' slot %u: source '%s' is not here", m->target, m->slot, m->source);
      return;
    }
    t = calloc(1, sizeof *t);
    if (!t) return;
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
    t->src = src;
    store_obj_ref(src);
    t->nch = (int)m->nchildren;
    t->ch = calloc((size_t)(t->nch ? t->nch : 1), sizeof *t->ch);
    t->to_target = m->to_target;
    if (t->to_target) {
      st_obj *o = store_find(s, m->target);
      if (!o || o->state != OBJ_REDUCING || !o->data || o->size != m->size) {
        LOG_WARN("reduce '%s': the target is not ready at this sink", m->target);
        t->out = NULL;
      } else {
        t->out = o;
        store_obj_ref(o);
      }
    } else {
      char key[340];
      reduce_stream_key(key, sizeof key, m->target, m->rid, m->slot, m->gen);
      t->out = store_obj_new_internal(s, key, m->size, detail, sizeof detail);
      if (t->out) store_obj_ref(t->out);
      else LOG_WARN("reduce '%s' slot %u: %s", m->target, m->slot, detail);
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
    if (!t->out || !t->ch || t->failed) {
      t->failed = 1;
      LOG_ERROR("reduce '%s' slot %u cannot run here (no memory?)", m->target, m->slot);
    }
    HASH_ADD_STR(s->tasks, hkey, t);
    LOG_DEBUG("reduce '%s': slot %u (gen %u) here, %d children, %s", m->target, m->slot, m->gen,
              t->nch, t->to_target ? "into the target" : "as a stream");
  }
  if (t->failed) return;
  for (size_t i = 0; i < m->n_children; i++) {
    Hplpb__ReduceChild *rc = m->children[i];
    if (rc->index >= (uint32_t)t->nch || strlen(rc->key) >= sizeof t->ch[0].key) continue;
    rd_child *c = &t->ch[rc->index];
    if (c->known) continue;
    c->known = 1;
    c->slot = rc->slot;
    c->gen = rc->gen;
    snprintf(c->addr, sizeof c->addr, "%s", rc->addr);
    c->port = (int)rc->port;
    snprintf(c->key, sizeof c->key, "%s", rc->key);
    c->internal = rc->internal;
    child_start(t, c);
  }
  task_try_combine(t);
}

/* ------------------------------------------------------------------ sink */

typedef struct sink_pull {
  store *s;
  st_obj *o;
  uint64_t rid;
  uint32_t slot, gen; /* the root's */
} sink_pull;

static uint8_t *sink_buf(void *arg, uint64_t off, size_t *len) {
  sink_pull *w = arg;
  uint64_t room = w->o->size - off;
  *len = room > (1u << 30) ? (1u << 30) : (size_t)room;
  return w->o->data + off;
}

static void sink_got(void *arg, uint64_t off, size_t n) {
  sink_pull *w = arg;
  store_obj_progress(w->s, w->o, off + n);
}

static void sink_done(void *arg, int status, const char *detail) {
  sink_pull *w = arg;
  store *s = w->s;
  st_obj *o = w->o;
  uint64_t rid = w->rid;
  uint32_t slot = w->slot, gen = w->gen;
  o->puller = NULL;
  free(w);
  if (status != 0 && o->in_table && o->state == OBJ_REDUCING)
    report_fail(s, o->id, rid, slot, gen, detail);
  if (status == 0 && o->in_table) {
    Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
    n.id = o->id;
    n.kind = HPL__LOC_COMPLETE;
    dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
    store_obj_sealed(s, o);
  } else if (status != 0) {
    LOG_WARN("reduce '%s': pulling the result failed: %s", o->id,
             detail ? detail : hpl_strerror(status));
  }
  store_obj_unref(s, o);
}

static void sink_loc_added(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                           const uint8_t *payload, uint64_t plen, void *arg) {
  (void)s, (void)h, (void)payload, (void)plen, (void)arg;
  Hplpb__Reply *r = (Hplpb__Reply *)m;
  if (r) status = r->status;
  if (status) LOG_WARN("cannot advertise a reduce target: %s", hpl_strerror(status));
}

void reduce_on_sink(store *s, Hplpb__ReduceSink *m) {
  st_obj *o = hpl__id_valid(m->target) ? store_find(s, m->target) : NULL;
  if (!o || o->state != OBJ_REDUCING) {
    LOG_WARN("reduce sink message for '%s', which is not being reduced here", m->target);
    return;
  }
  char detail[400];
  if (m->fetch) {
    /* reduced at the directory: an ordinary (inline) object now */
    o->state = OBJ_FETCHING;
    store_fetch(s, o, 0);
    return;
  }
  if (o->data && o->gen != m->gen) {
    /* a tree node failed: the result starts over */
    if (o->puller) transfer_cancel(s, o);
    store_obj_restart(s, o, m->gen);
  }
  o->gen = m->gen;
  if (!o->data) {
    if (store_obj_alloc(s, o, m->size, detail, sizeof detail) != 0) {
      LOG_WARN("%s", detail);
      store_obj_fail(s, o, HPL_ENOMEM, detail);
      store_obj_detach(s, o);
      return;
    }
    /* advertise the copy in progress: gets elsewhere pull behind it */
    Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
    a.id = o->id;
    a.size = o->size;
    a.origin = 1;
    o->advertised = 1;
    dirlink_request(s, HPL__MSG_LOC_ADD, &a.base, NULL, 0, -1, sink_loc_added, NULL);
  }
  if (m->local || !m->root) return; /* a local task writes into the target, or no root yet */
  if (o->puller) return;
  sink_pull *w = calloc(1, sizeof *w);
  if (!w) return;
  w->s = s;
  w->o = o;
  w->rid = m->rid;
  w->slot = m->root->slot;
  w->gen = m->root->gen;
  xfer_ops ops = {.buf = sink_buf, .got = sink_got, .done = sink_done};
  store_obj_ref(o);
  o->puller = transfer_stream(s, m->root->addr, (int)m->root->port, m->root->key,
                              m->root->internal, 0, o->size, &ops, w);
  if (!o->puller) {
    free(w);
    store_obj_unref(s, o);
    LOG_WARN("reduce '%s': cannot pull the result from %s:%u", o->id, m->root->addr,
             m->root->port);
    report_fail(s, o->id, m->rid, m->root->slot, m->root->gen, "cannot connect");
  }
}

void reduce_on_end(store *s, Hplpb__ReduceEnd *m) {
  if (!hpl__id_valid(m->target)) return;
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks, t, tmp) {
    if (strcmp(t->target, m->target) != 0 || (m->rid && t->rid != m->rid)) continue;
    HASH_DEL(s->tasks, t);
    task_free(t);
  }
  transfer_internal_fail(s, m->target);
  if (m->status == 0) return;
  st_obj *o = store_find(s, m->target);
  if (o && o->state == OBJ_REDUCING) {
    if (o->puller) transfer_cancel(s, o);
    store_obj_fail(s, o, m->status, m->detail);
    store_obj_detach(s, o);
  }
}

/* ------------------------------------------------------------------ client request */

typedef struct rd_req {
  st_client *cl;
  uint64_t req;
  st_obj *o; /* the target created here, or NULL */
} rd_req;

void clients_client_unref(st_client *cl);

static void reduce_reply(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                         const uint8_t *payload, uint64_t plen, void *arg) {
  (void)h, (void)payload, (void)plen;
  rd_req *x = arg;
  Hplpb__ReduceRep *r = (Hplpb__ReduceRep *)m;
  Hplpb__ReduceRep out = HPLPB__REDUCE_REP__INIT;
  if (r) {
    status = r->status;
    out.detail = r->detail;
    out.joined = r->joined;
    out.sink_node = r->sink_node;
  } else {
    out.detail = (char *)(status == HPL_ETIMEDOUT ? "the directory did not answer in time"
                                                  : "the directory is unreachable");
  }
  out.status = status;
  st_obj *o = x->o;
  if (o && (status != 0 || out.sink_node != s->node_id) && o->state == OBJ_REDUCING) {
    /* refused, or another node produces the target: not ours to make */
    if (status == 0) {
      o->state = OBJ_FETCHING; /* gets here fetch it like any object */
      if (o->waiters) store_fetch(s, o, 0);
      else store_obj_detach(s, o);
    } else {
      store_obj_fail(s, o, status, out.detail);
      store_obj_detach(s, o);
    }
  }
  if (o) store_obj_unref(s, o);
  if (!x->cl->closed)
    hpl__conn_send(x->cl->c, HPL__MSG_REDUCE_REP, x->req, &out.base, NULL, 0, 0, NULL, NULL);
  clients_client_unref(x->cl);
  free(x);
}

void reduce_client_request(store *s, st_client *cl, uint64_t req, Hplpb__ReduceReq *m) {
  char detail[400];
  if (!hpl__id_valid(m->target)) {
    hpl__conn_reply(cl->c, req, HPL_EINVAL, "invalid target id");
    return;
  }
  rd_req *x = calloc(1, sizeof *x);
  if (!x) {
    hpl__conn_reply(cl->c, req, HPL_ENOMEM, "out of memory");
    return;
  }
  st_obj *o = store_find(s, m->target);
  if (!o) {
    o = store_obj_new(s, m->target, OBJ_REDUCING);
    if (!o) {
      free(x);
      hpl__conn_reply(cl->c, req, HPL_ENOMEM, "out of memory");
      return;
    }
    x->o = o;
    store_obj_ref(o);
    /* kept to ask again if the directory restarts (sized after every
     * field is set: packing more than was measured overruns the buffer) */
    m->sink_node = s->node_id;
    size_t len = protobuf_c_message_get_packed_size(&m->base);
    if ((o->reduce_req = malloc(len ? len : 1))) {
      protobuf_c_message_pack(&m->base, o->reduce_req);
      o->reduce_req_len = len;
    }
  } else if (o->state != OBJ_REDUCING) {
    /* the target exists here already: the directory decides whether that
     * is a finished reduce being joined or a clash */
    x->o = NULL;
  } else {
    x->o = o; /* a second local caller of the same reduce */
    store_obj_ref(o);
  }
  x->cl = cl;
  x->req = req;
  cl->refs++;
  m->sink_node = s->node_id;
  int64_t to = m->timeout_ms;
  if (dirlink_request(s, HPL__MSG_REDUCE, &m->base, NULL, 0, to < 0 ? -1 : to + 1000, reduce_reply,
                      x) != 0) {
    snprintf(detail, sizeof detail, "out of memory");
    cl->refs--;
    if (x->o) {
      store_obj_unref(s, x->o);
      if (x->o->state == OBJ_REDUCING && !x->o->waiters) store_obj_detach(s, x->o);
    }
    free(x);
    hpl__conn_reply(cl->c, req, HPL_ENOMEM, detail);
  }
}

/* ------------------------------------------------------------------ directory restart */

static void resubmit_reply(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                           const uint8_t *payload, uint64_t plen, void *arg) {
  (void)h, (void)payload, (void)plen;
  st_obj *o = arg;
  Hplpb__ReduceRep *r = (Hplpb__ReduceRep *)m;
  if (r) status = r->status;
  if (status && o->in_table && o->state == OBJ_REDUCING) {
    const char *why = r && r->detail && *r->detail ? r->detail : hpl_strerror(status);
    LOG_WARN("reduce '%s' could not be restarted: %s", o->id, why);
    store_obj_fail(s, o, status, why);
    store_obj_detach(s, o);
  }
  store_obj_unref(s, o);
}

void reduce_directory_restarted(store *s) {
  rd_task *t, *tmp;
  HASH_ITER(hh, s->tasks, t, tmp) {
    HASH_DEL(s->tasks, t);
    task_free(t);
  }
  st_obj *o, *otmp;
  HASH_ITER(hh, s->objs, o, otmp) {
    if (o->state != OBJ_REDUCING || !o->reduce_req) continue;
    Hplpb__ReduceReq *m =
        (Hplpb__ReduceReq *)hpl__msg_unpack(HPL__MSG_REDUCE, o->reduce_req, o->reduce_req_len);
    if (!m) continue;
    if (o->puller) transfer_cancel(s, o);
    if (o->data) store_obj_restart(s, o, 0);
    o->advertised = 0;
    LOG_INFO("asking the restarted directory again for the reduce into '%s'", o->id);
    m->sink_node = s->node_id;
    store_obj_ref(o);
    if (dirlink_request(s, HPL__MSG_REDUCE, &m->base, NULL, 0, -1, resubmit_reply, o) != 0)
      store_obj_unref(s, o);
    protobuf_c_message_free_unpacked(&m->base, NULL);
  }
}
