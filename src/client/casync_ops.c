/* casync_ops.c - what each asynchronous request does (casync_int.h): the
 * hpl_async_* submissions, the message of each phase, and what each reply
 * makes of the request (done, or its next phase). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utlist.h>

#include "casync_int.h"

/* timeout_ms 0 asks the store for an answer at once; the client waits
 * this long for it. */
#define ZERO_WAIT_MS 1000
/* How long a put's ABORT (after a timeout or cancel) may take. */
#define ABORT_MS 5000

/* ------------------------------------------------------------------ submitting */

/* A new request for `op` with room for `extra` bytes of strings after it,
 * listed under `tag` and counted: 0 with *out (its id still to set), or the
 * failure (detail set). a->lock held. */
static int areq_new(hpl_client *c, hpl__casync *a, int op, uint64_t tag, int64_t timeout_ms,
                    size_t extra, hpl__areq **out) {
  hpl__areq *q = NULL;
  HASH_FIND(hh, a->by_tag, &tag, sizeof tag, q);
  if (q) return hpl__cfail(c, HPL_EINVAL, "tag %llu is already pending", (unsigned long long)tag);
  if (a->count >= HPL_ASYNC_MAX)
    return hpl__cfail(c, HPL_EAGAIN, "%d async requests held (HPL_ASYNC_MAX): take completions "
                      "with hpl_async_poll first", HPL_ASYNC_MAX);
  if (hpl__crpc_broken(c->st.rpc))
    return hpl__cfail(c, HPL_ECONN, "the connection to the store is closed: %s",
                      hpl__crpc_broken(c->st.rpc));
  if (a->capheap <= a->count) { /* the heap always has room for every request */
    size_t cap = a->capheap ? 2 * a->capheap : 64;
    hpl__areq **h = realloc(a->heap, cap * sizeof *h);
    if (!h) return hpl__cfail(c, HPL_ENOMEM, "out of memory");
    a->heap = h;
    a->capheap = cap;
  }
  if (!(q = calloc(1, sizeof *q + extra))) return hpl__cfail(c, HPL_ENOMEM, "out of memory");
  q->tag = tag;
  q->op = op;
  q->hidx = SIZE_MAX;
  q->deadline = UINT64_MAX;
  HASH_ADD(hh, a->by_tag, tag, sizeof q->tag, q);
  a->count++;
  q->zero = timeout_ms == 0;
  int64_t wait = q->zero ? ZERO_WAIT_MS : timeout_ms;
  if (timeout_ms >= 0) hpl__aheap_set(a, q, hpl__deadline_ms(wait));
  *out = q;
  return 0;
}

/* Copy s to *at and advance it; returns the copy. */
static char *put_str(char **at, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = memcpy(*at, s, n);
  *at += n;
  return p;
}

/* What a request naming one object brings besides its id: put's bytes,
 * create's staging memory, seal's buffer (and its handle). */
typedef struct asub {
  const void *data;
  uint64_t size;
  hpl__cstage stage;
  hpl_buf *sealing;
} asub;

/* Submit a request naming one object (get, put, create, seal, stat,
 * delete), with what `w` brings. The caller has checked its arguments. */
static int submit_id(hpl_client *c, int op, hpl__aphase ph, const char *id, const asub *w,
                     int64_t timeout_ms, uint64_t tag) {
  hpl__casync *a;
  int rc = hpl__casync_get(c, &a);
  if (rc) return rc;
  pthread_mutex_lock(&a->lock);
  hpl__areq *q;
  rc = areq_new(c, a, op, tag, timeout_ms, strlen(id) + 1, &q);
  if (rc == 0) {
    char *at = (char *)(q + 1);
    q->id = put_str(&at, id);
    q->data = w->data;
    q->dsize = w->size;
    q->stage = w->stage;
    q->sealing = w->sealing;
    q->handle = w->sealing ? w->sealing->handle : 0;
    q->phase = ph;
    if (op == HPL_AOP_PUT && !(c->st.inline_max && w->size <= c->st.inline_max))
      q->phase = HPL__AP_CREATE; /* the store copies straight from data */
    int wake = !a->queue && !a->done; /* the loop may be asleep: hpl_async_timeout_ms is 0 now */
    hpl__aqueue(a, q);
    if (wake) hpl__awake(a);
  }
  pthread_mutex_unlock(&a->lock);
  return rc;
}

/* get, stat, delete: the id only */
static int submit_plain(hpl_client *c, int op, hpl__aphase ph, const char *id,
                        int64_t timeout_ms, uint64_t tag) {
  HPL__NOT_ADMIN(c);
  HPL__CHECK_ID(c, id);
  return submit_id(c, op, ph, id, &(asub){.stage = {.fd = -1}}, timeout_ms, tag);
}

int hpl_async_get(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t tag) {
  return submit_plain(c, HPL_AOP_GET, HPL__AP_GET, id, timeout_ms, tag);
}

int hpl_async_put(hpl_client *c, const char *id, const void *data, uint64_t size,
                  int64_t timeout_ms, uint64_t tag) {
  HPL__NOT_ADMIN(c);
  HPL__CHECK_ID(c, id);
  if (size && !data) return hpl__cfail(c, HPL_EINVAL, "data is NULL");
  return submit_id(c, HPL_AOP_PUT, HPL__AP_PUT, id,
                   &(asub){.data = data, .size = size, .stage = {.fd = -1}}, timeout_ms, tag);
}

int hpl_async_stat(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t tag) {
  return submit_plain(c, HPL_AOP_STAT, HPL__AP_STAT, id, timeout_ms, tag);
}

int hpl_async_delete(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t tag) {
  return submit_plain(c, HPL_AOP_DELETE, HPL__AP_DELETE, id, timeout_ms, tag);
}

int hpl_async_create(hpl_client *c, const char *id, uint64_t size, int64_t timeout_ms,
                     uint64_t tag) {
  HPL__NOT_ADMIN(c);
  HPL__CHECK_ID(c, id);
  /* the bytes are written in this process's own memory, as hpl_create's */
  asub w = {.size = size, .stage = {.fd = -1}};
  if (hpl__cstage_take(c, size ? size : 1, &w.stage) != 0) /* (an empty object: a page still) */
    return hpl__cfail(c, HPL_ENOMEM, "cannot map %llu bytes to create '%s' in",
                      (unsigned long long)size, id);
  int rc = submit_id(c, HPL_AOP_CREATE, HPL__AP_CREATE_BUF, id, &w, timeout_ms, tag);
  if (rc) hpl__cstage_give(c, w.stage);
  return rc;
}

int hpl_async_seal(hpl_client *c, hpl_buf *b, int64_t timeout_ms, uint64_t tag) {
  if (!c) return HPL_EINVAL;
  HPL__NOT_ADMIN(c);
  if (!b) return hpl__cfail(c, HPL_EINVAL, "NULL buffer");
  if (!b->created) return hpl__cfail(c, HPL_EINVAL, "buffer is not being created");
  int rc = submit_id(c, HPL_AOP_SEAL, HPL__AP_SEAL_BUF, b->id,
                     &(asub){.sealing = b, .stage = {.fd = -1}}, timeout_ms, tag);
  if (rc) hpl_abort(c, b); /* owned from the call on: not left half made */
  return rc;
}

void hpl__aop_free(hpl_client *c, hpl__areq *q, int closing) {
  if (q->stage.len) hpl__cstage_drop(q->stage); /* never reused: the store may read it */
  q->stage.len = 0;
  hpl_buf *b = q->sealing;
  q->sealing = NULL;
  if (!b || closing) return;
  if (q->status && b->stage.len) { /* the store may still copy from it */
    hpl__cstage_drop(b->stage);
    b->stage.len = 0;
  }
  hpl__cbuf_free(c, b);
}

static int submit_reduce(hpl_client *c, int op, const char *target, const char *const *sources,
                         size_t nsources, size_t num_objects, hpl_op rop, hpl_dtype dtype,
                         int64_t timeout_ms, uint64_t tag) {
  HPL__NOT_ADMIN(c);
  int rc = hpl__creduce_check(c, target, sources, nsources, num_objects, rop, dtype, 0, 0);
  if (rc) return rc;
  size_t extra = strlen(target) + 1 + nsources * sizeof(char *);
  for (size_t i = 0; i < nsources; i++) extra += strlen(sources[i]) + 1;
  hpl__casync *a;
  if ((rc = hpl__casync_get(c, &a)) != 0) return rc;
  pthread_mutex_lock(&a->lock);
  hpl__areq *q;
  rc = areq_new(c, a, op, tag, timeout_ms, extra, &q);
  if (rc == 0) {
    q->sources = (char **)(q + 1);
    char *at = (char *)(q->sources + nsources);
    q->id = put_str(&at, target);
    for (size_t i = 0; i < nsources; i++) q->sources[i] = put_str(&at, sources[i]);
    q->nsources = nsources;
    q->num_objects = num_objects;
    q->rop = (int)rop;
    q->dtype = (int)dtype;
    q->phase = op == HPL_AOP_ALLREDUCE ? HPL__AP_RING : HPL__AP_REDUCE;
    hpl__aqueue(a, q);
    hpl__awake(a);
  }
  pthread_mutex_unlock(&a->lock);
  return rc;
}

int hpl_async_reduce(hpl_client *c, const char *target, const char *const *sources,
                     size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                     int64_t timeout_ms, uint64_t tag) {
  return submit_reduce(c, HPL_AOP_REDUCE, target, sources, nsources, num_objects, op, dtype,
                       timeout_ms, tag);
}

int hpl_async_allreduce(hpl_client *c, const char *target, const char *const *sources,
                        size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                        int64_t timeout_ms, uint64_t tag) {
  return submit_reduce(c, HPL_AOP_ALLREDUCE, target, sources, nsources, num_objects, op, dtype,
                       timeout_ms, tag);
}

/* ------------------------------------------------------------------ phases */

void hpl__aop_build(hpl_client *c, hpl__areq *q, hpl__amsg *m, hpl__crpc_req *req) {
  int64_t tmo = q->zero ? 0 : q->deadline == UINT64_MAX ? -1 : hpl__ms_left(q->deadline);
  *req = (hpl__crpc_req){0};
  switch (q->phase) {
  case HPL__AP_GET:
    hplpb__get_req__init(&m->get);
    m->get.id = (char *)q->id;
    m->get.timeout_ms = tmo;
    *req = (hpl__crpc_req){.type = HPL__MSG_GET, .m = &m->get.base};
    return;
  case HPL__AP_PUT:
    hplpb__put_req__init(&m->put);
    m->put.id = (char *)q->id;
    m->put.size = q->dsize;
    m->put.timeout_ms = tmo;
    hpl__clifetime(c, &m->put.owned, &m->put.ttl_ms);
    *req = (hpl__crpc_req){.type = HPL__MSG_PUT, .m = &m->put.base, .payload = q->data,
                           .plen = q->dsize};
    return;
  case HPL__AP_CREATE:     /* a put's: the store copies from the caller's bytes */
  case HPL__AP_CREATE_BUF: /* hpl_async_create's: from its staging memory */
    hplpb__create_req__init(&m->create);
    m->create.id = (char *)q->id;
    m->create.size = q->dsize;
    m->create.timeout_ms = tmo;
    m->create.src_addr =
        (uint64_t)(uintptr_t)(q->phase == HPL__AP_CREATE_BUF ? q->stage.mem : q->data);
    if (q->stage.fd >= 0 && q->dsize >= HPL__CREATE_MEMFD_MIN) { /* as hpl_create */
      m->create.src_memfd = 1;
      m->create.src_fd = (uint32_t)q->stage.fd;
    }
    hpl__clifetime(c, &m->create.owned, &m->create.ttl_ms);
    *req = (hpl__crpc_req){.type = HPL__MSG_CREATE, .m = &m->create.base};
    return;
  case HPL__AP_SEAL:
  case HPL__AP_SEAL_BUF:
  case HPL__AP_ABORT:
    hplpb__handle_req__init(&m->handle);
    m->handle.handle = q->handle;
    m->handle.timeout_ms = tmo;
    *req = (hpl__crpc_req){.type = q->phase == HPL__AP_ABORT ? HPL__MSG_ABORT : HPL__MSG_SEAL,
                           .m = &m->handle.base};
    return;
  case HPL__AP_STAT:
  case HPL__AP_DELETE:
    hplpb__id_req__init(&m->id);
    m->id.id = (char *)q->id;
    m->id.timeout_ms = tmo;
    *req = (hpl__crpc_req){.type = q->phase == HPL__AP_STAT ? HPL__MSG_STAT : HPL__MSG_DELETE,
                           .m = &m->id.base};
    return;
  case HPL__AP_REDUCE:
  case HPL__AP_RING:
    hplpb__reduce_req__init(&m->reduce);
    m->reduce.target = (char *)q->id;
    m->reduce.n_sources = q->nsources;
    m->reduce.sources = q->sources;
    m->reduce.num_objects = (uint32_t)q->num_objects;
    m->reduce.op = (uint32_t)q->rop;
    m->reduce.dtype = (uint32_t)q->dtype;
    m->reduce.timeout_ms = tmo;
    m->reduce.ring = q->phase == HPL__AP_RING;
    *req = (hpl__crpc_req){.type = HPL__MSG_REDUCE, .m = &m->reduce.base};
    return;
  }
}

static unsigned phase_type(hpl__aphase ph) {
  static const unsigned types[] = {
      [HPL__AP_GET] = HPL__MSG_GET,       [HPL__AP_PUT] = HPL__MSG_PUT,
      [HPL__AP_CREATE] = HPL__MSG_CREATE, [HPL__AP_SEAL] = HPL__MSG_SEAL,
      [HPL__AP_ABORT] = HPL__MSG_ABORT,   [HPL__AP_STAT] = HPL__MSG_STAT,
      [HPL__AP_DELETE] = HPL__MSG_DELETE, [HPL__AP_REDUCE] = HPL__MSG_REDUCE,
      [HPL__AP_RING] = HPL__MSG_REDUCE,   [HPL__AP_CREATE_BUF] = HPL__MSG_CREATE,
      [HPL__AP_SEAL_BUF] = HPL__MSG_SEAL};
  return types[ph];
}

/* Go on with phase ph (the request was answered; its deadline stands). */
static void next_phase(hpl__casync *a, hpl__areq *q, hpl__aphase ph) {
  q->phase = ph;
  hpl__aqueue(a, q);
}

void hpl__aop_reply(hpl_client *c, hpl__casync *a, hpl__areq *q, int rc, hpl__crpc_msg *rep) {
  unsigned type = phase_type(q->phase);
  if (q->phase == HPL__AP_ABORT) { /* the put was given up: its own outcome stands */
    hpl__crpc_msg_free(rep);
    hpl__afail(a, q, q->status, "%s", hpl_strerror(q->status));
    return;
  }
  if (rc) {
    hpl__crpc_msg_free(rep);
    const char *why = hpl__crpc_broken(c->st.rpc);
    if (rc == HPL_ECONN)
      hpl__afail(a, q, rc, "the connection to the store is closed: %s", why ? why : "?");
    else
      hpl__afail(a, q, rc, "%s of its %s reply", rc == HPL_ENOMEM ? "no memory for" : "lost",
                 hpl__msg_name(type));
    return;
  }
  ProtobufCMessage *out = NULL;
  int want = hpl__msg_reply_type(type) != HPL__MSG_REPLY;
  rc = hpl__creply(c, type, rep, want ? &out : NULL);
  if (rc) { /* the store's failure, its detail set by hpl__creply */
    if (q->phase == HPL__AP_REDUCE && q->op == HPL_AOP_ALLREDUCE && rc == HPL_EEXIST && q->ran)
      rc = 0; /* an abandoned ring may have completed the target: get it (as hpl_allreduce) */
    else
      hpl__afail(a, q, rc, "%s", hpl__cfail_msg());
  }
  if (rc == 0) switch (q->phase) {
    case HPL__AP_GET: {
      const Hplpb__GetRep *g = (const Hplpb__GetRep *)out;
      int grc = hpl__cget_buf(c, q->id, g, &q->buf);
      if (grc == 0) q->size = g->size;
      hpl__afail(a, q, grc, "%s", hpl__cfail_msg());
      break;
    }
    case HPL__AP_CREATE:
      q->handle = ((const Hplpb__CreateRep *)out)->handle;
      next_phase(a, q, HPL__AP_SEAL);
      break;
    case HPL__AP_CREATE_BUF: {
      uint64_t h = ((const Hplpb__CreateRep *)out)->handle;
      q->buf = hpl__cbuf_created(c, q->id, q->stage.mem, q->dsize, h, &q->stage);
      if (q->buf) q->stage = (hpl__cstage){.fd = -1}; /* the buffer's now */
      q->size = q->dsize;
      hpl__afail(a, q, q->buf ? 0 : HPL_ENOMEM, "out of memory");
      break;
    }
    case HPL__AP_STAT: {
      const Hplpb__StatRep *s = (const Hplpb__StatRep *)out;
      q->size = s->size;
      q->copies = s->copies;
      q->complete = s->complete;
      q->is_inline = s->inline_ ? 1 : 0;
      hpl__afail(a, q, 0, NULL);
      break;
    }
    case HPL__AP_RING: {
      const Hplpb__ReduceRep *r = (const Hplpb__ReduceRep *)out;
      q->ran = r->joined;
      next_phase(a, q, r->no_ring ? HPL__AP_REDUCE : HPL__AP_GET);
      break;
    }
    case HPL__AP_REDUCE:
      if (q->op == HPL_AOP_ALLREDUCE) next_phase(a, q, HPL__AP_GET);
      else hpl__afail(a, q, 0, NULL);
      break;
    default: /* PUT, SEAL, DELETE */
      hpl__afail(a, q, 0, NULL);
    }
  if (out) protobuf_c_message_free_unpacked(out, NULL);
}

void hpl__aop_give_up(hpl__casync *a, hpl__areq *q, int rc) {
  const char *what = rc == HPL_ECANCELED ? "cancelled" : "no answer before its deadline";
  if (q->phase == HPL__AP_ABORT) { /* the abort itself took too long */
    hpl__afail(a, q, q->status, "%s; the store did not confirm the abort",
               hpl_strerror(q->status));
    return;
  }
  if (q->phase == HPL__AP_SEAL) {
    /* the store may be copying from the caller's bytes, which are the
     * caller's again once this completes: abort the put first */
    q->status = rc;
    q->detail = NULL;
    char msg[128];
    snprintf(msg, sizeof msg, "'%s': %s (put aborted)", q->id, what);
    q->detail = strdup(msg);
    q->phase = HPL__AP_ABORT;
    hpl__aheap_set(a, q, hpl__deadline_ms(ABORT_MS));
    hpl__aqueue(a, q);
    return;
  }
  hpl__afail(a, q, rc, "%s (%s)", what, hpl__msg_name(phase_type(q->phase)));
}
