/* client.c - libhoplite's public API (include/hoplite.h) on top of the
 * store connection (cstore.h, crpc.h) and the direct small-object path
 * (cdirect.h): handles, per-thread error details, buffers, objects, text
 * results, collectives.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cdirect.h"
#include "trace.h"
#include "crpc.h"
#include "capi.h"
#include "cstore.h"
#include "hoplite.h"
#include "proto.h"
#include "util.h"

struct hpl_buf {
  hpl_client *c;
  struct hpl_buf *prev, *next;
  uint8_t *data;
  uint64_t size;
  uint64_t handle;
  int created; /* from hpl_create, not yet sealed */
  uint8_t *own; /* NULL, or the library's own allocation that data points
                 * into (a small object read from the directory) */
  char id[HPL_ID_MAX + 1];
};

struct hpl_client {
  hpl__cstore st;       /* the store connection, its pool and filter */
  hpl__cdirect *direct; /* NULL: every get goes to the store */
  pthread_mutex_t lock; /* bufs, owned, ttl_ms */
  hpl_buf *bufs;
  int owned;       /* the lifetime of what the handle puts (hpl_set_lifetime) */
  uint64_t ttl_ms;
};

/* Grace added to the store's own timeouts before the client gives up on a
 * store that does not answer at all. */
#define CLIENT_GRACE_MS 2000
/* How long a one-way note (PROGRESS, RELEASE) may take to go out. */
#define CLIENT_NOTE_MS 5000
/* How long hpl_abort waits for the store and directory to forget. */
#define CLIENT_ABORT_MS 5000
/* hpl_put copies in chunks and tells the store after each one: the first
 * is small so receivers start soon, then they double up to the largest. */
#define PUT_CHUNK_FIRST (1u << 20)
#define PUT_CHUNK (8u << 20)
#define CLIENT_POPULATE_MIN (1u << 20)

/* ------------------------------------------------------------------ errors */

static __thread struct {
  const hpl_client *c;
  char msg[512];
} tls_err;

int hpl__cfail(const hpl_client *c, int code, const char *fmt, ...) {
  tls_err.c = c;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_err.msg, sizeof tls_err.msg, fmt, ap);
  va_end(ap);
  return code;
}

const char *hpl_errdetail(const hpl_client *c) {
  return c && tls_err.c == c ? tls_err.msg : "";
}

/* The detail of an exchange with the store that failed in the RPC layer
 * (rc: HPL_ETIMEDOUT, HPL_ECONN or HPL_ENOMEM) after waiting up to
 * waited_ms. */
static int rpc_failed(hpl_client *c, int rc, unsigned type, int64_t waited_ms) {
  const char *why = hpl__crpc_broken(c->st.rpc);
  if (rc == HPL_ETIMEDOUT)
    return hpl__cfail(c, rc, "the store did not answer %s within %lld ms%s%s", hpl__msg_name(type),
                (long long)waited_ms, why ? "; the connection broke: " : "", why ? why : "");
  if (rc == HPL_ECONN)
    return hpl__cfail(c, rc, "the connection to the store is closed: %s", why ? why : "?");
  return hpl__cfail(c, rc, "out of memory for %s", hpl__msg_name(type));
}

/* ------------------------------------------------------------------ store calls */

/* A batch of requests, each about one of n items (ids[i], outcome rcs[i]),
 * and its first failure by item order, with that failure's detail (the
 * per-thread detail is overwritten by every later failure). */
typedef struct batch {
  size_t n;
  const char *const *ids; /* NULL: a single call, whose detail needs no name */
  int *rcs;
  size_t first; /* n while nothing failed */
  char why[sizeof tls_err.msg];
} batch;

static void batch_init(batch *b, const char *const *ids, size_t n, int *rcs) {
  b->n = n;
  b->ids = ids;
  b->rcs = rcs;
  b->first = n;
  b->why[0] = 0;
}

/* Item i's outcome; a failure's detail must have just been set (hpl__cfail()). */
static void batch_set(batch *b, size_t i, int rc) {
  b->rcs[i] = rc;
  if (rc && i < b->first) {
    b->first = i;
    snprintf(b->why, sizeof b->why, "%s", tls_err.msg);
  }
}

/* 0, or the first failure with its detail, naming the item. */
static int batch_end(hpl_client *c, batch *b) {
  if (b->first == b->n) return 0;
  if (!b->ids || b->n == 1) return hpl__cfail(c, b->rcs[b->first], "%s", b->why);
  return hpl__cfail(c, b->rcs[b->first], "'%s' (%zu of %zu): %s", b->ids[b->first], b->first + 1,
              b->n, b->why);
}

/* One request of a batch to the store: which item it is about, the request
 * (its message in m), and the reply once it succeeded. */
typedef struct slot {
  size_t item;
  hpl__crpc_req req;
  union {
    Hplpb__IdReq id;
    Hplpb__GetReq get;
    Hplpb__PutReq put;
    Hplpb__CreateReq create;
    Hplpb__HandleReq handle;
  } m;
  int granted;           /* get: the directory granted the object to the store */
  ProtobufCMessage *out; /* the unpacked reply, unless it is a plain Reply */
  hpl_buf *buf;          /* hpl_put_many: the region being filled */
} slot;

/* The outcome of `rep` (taken), the reply to a request of `type`: 0 with
 * *out (if out is not NULL) the unpacked reply of the request's reply type,
 * owned by the caller; else the code, with the detail set. Every reply
 * message starts with status and detail, so a generic Reply decodes the
 * outcome of any of them. */
static int reply_of(hpl_client *c, unsigned type, hpl__crpc_msg *rep, ProtobufCMessage **out) {
  unsigned rtype = hpl__msg_reply_type(type);
  int rc = 0;
  Hplpb__Reply *st = (Hplpb__Reply *)hpl__crpc_msg_unpack(rep, HPL__MSG_REPLY);
  if (!st)
    rc = hpl__cfail(c, HPL_EPROTO, "undecodable reply to %s", hpl__msg_name(type));
  else if (st->status != 0)
    rc = hpl__cfail(c, st->status, "%s",
                    st->detail && *st->detail ? st->detail : hpl_strerror(st->status));
  else if (rep->type != rtype)
    rc = hpl__cfail(c, HPL_EPROTO, "reply of type %s to %s", hpl__msg_name(rep->type),
                    hpl__msg_name(type));
  else if (out && !(*out = hpl__crpc_msg_unpack(rep, rtype)))
    rc = hpl__cfail(c, HPL_EPROTO, "undecodable %s", hpl__msg_name(rtype));
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
  hpl__crpc_msg_free(rep);
  return rc;
}

/* The requests of slots s[0..n) to the store, pipelined: all are sent
 * before any reply is awaited, then every reply is read (reply_of) into
 * b's outcome of the slot's item and, on success, s[j].out. timeout_ms is
 * the store-side timeout (< 0: none); the client waits CLIENT_GRACE_MS
 * longer for the store's own answers. */
static void calls(hpl_client *c, slot *s, size_t n, int64_t timeout_ms, batch *b) {
  if (n == 0) return;
  int64_t wait_ms = timeout_ms < 0 ? -1 : timeout_ms + CLIENT_GRACE_MS;
  uint64_t deadline = hpl__deadline_ms(wait_ms);
  hpl__crpc_req one_req, *reqs = n == 1 ? &one_req : malloc(n * sizeof *reqs);
  hpl__crpc_ticket *one_t, **t = n == 1 ? &one_t : malloc(n * sizeof *t);
  size_t started = 0;
  int src = HPL_ENOMEM;
  if (reqs && t) {
    for (size_t j = 0; j < n; j++) reqs[j] = s[j].req;
    src = hpl__crpc_start(c->st.rpc, reqs, n, deadline, t, &started);
  }
  for (size_t j = 0; j < n; j++) {
    unsigned type = s[j].req.type;
    hpl__crpc_msg rep;
    int rc = j < started ? hpl__crpc_finish(c->st.rpc, t[j], deadline, &rep) : src;
    s[j].out = NULL;
    if (rc)
      rc = rpc_failed(c, rc, type, wait_ms);
    else
      rc = reply_of(c, type, &rep, hpl__msg_reply_type(type) == HPL__MSG_REPLY ? NULL : &s[j].out);
    batch_set(b, s[j].item, rc);
  }
  if (reqs != &one_req) free(reqs);
  if (t != &one_t) free(t);
}

/* One request to the store with a payload (NULL, 0: none) and its reply.
 * On success *out (if out is not NULL) is the unpacked reply, whose status
 * is 0; the caller frees it. On failure the detail is set and nothing is
 * returned. timeout_ms as for calls(). */
static int call_with(hpl_client *c, unsigned type, const ProtobufCMessage *m, const void *payload,
                     uint64_t plen, int64_t timeout_ms, ProtobufCMessage **out) {
  int rc;
  batch b;
  batch_init(&b, NULL, 1, &rc);
  slot s = {.req = {.type = type, .m = m, .payload = payload, .plen = plen}};
  calls(c, &s, 1, timeout_ms, &b);
  if (rc == 0 && out) *out = s.out;
  else if (s.out) protobuf_c_message_free_unpacked(s.out, NULL);
  return rc;
}

int hpl__ccall(hpl_client *c, unsigned type, const ProtobufCMessage *m, int64_t timeout_ms,
                ProtobufCMessage **out) {
  return call_with(c, type, m, NULL, 0, timeout_ms, out);
}

/* A request that names one object (IdReq), as hpl__ccall(). */
int hpl__cid_call(hpl_client *c, unsigned type, const char *id, int64_t timeout_ms,
                   ProtobufCMessage **out) {
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = (char *)id;
  r.timeout_ms = timeout_ms;
  return hpl__ccall(c, type, &r.base, timeout_ms, out);
}

/* A one-way note to the store about a handle it gave out. */
static int note(hpl_client *c, unsigned type, const ProtobufCMessage *m) {
  int rc = hpl__crpc_send(c->st.rpc, type, m, hpl__deadline_ms(CLIENT_NOTE_MS));
  return rc ? rpc_failed(c, rc, type, CLIENT_NOTE_MS) : 0;
}

static void send_release(hpl_client *c, uint64_t handle) {
  Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
  r.handle = handle;
  note(c, HPL__MSG_RELEASE, &r.base);
}

/* ------------------------------------------------------------------ handles */

int hpl_connect(const char *socket_path, int64_t timeout_ms, hpl_client **out) {
  if (!out) return HPL_EINVAL;
  if (!socket_path) socket_path = getenv(HPL_SOCKET_ENV);
  if (!socket_path || !*socket_path) return HPL_EINVAL;
  hpl_client *c = calloc(1, sizeof *c);
  if (!c) return HPL_ENOMEM;
  int rc = hpl__cstore_open(socket_path, hpl__deadline_ms(timeout_ms), &c->st);
  if (rc) {
    free(c);
    return rc;
  }
  const char *direct = getenv("HPL_DIRECT_GETS");
  if (!(direct && !strcmp(direct, "0"))) c->direct = hpl__cdirect_new(&c->st);
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return 0;
}

void hpl_close(hpl_client *c) {
  if (!c) return;
  while (c->bufs) {
    hpl_buf *b = c->bufs;
    c->bufs = b->next;
    free(b->own);
    free(b);
  }
  hpl__cdirect_free(c->direct);
  hpl__cstore_close(&c->st); /* the store releases what the buffers held */
  pthread_mutex_destroy(&c->lock);
  if (tls_err.c == c) tls_err.c = NULL;
  free(c);
}

/* ------------------------------------------------------------------ buffers */

static hpl_buf *buf_link(hpl_client *c, hpl_buf *b, const char *id) {
  b->c = c;
  snprintf(b->id, sizeof b->id, "%s", id);
  pthread_mutex_lock(&c->lock);
  b->next = c->bufs;
  if (c->bufs) c->bufs->prev = b;
  c->bufs = b;
  pthread_mutex_unlock(&c->lock);
  return b;
}

/* A buffer over pool[off .. off+size) (checked against the pool), or NULL. */
static hpl_buf *buf_new(hpl_client *c, const char *id, uint64_t off, uint64_t size,
                        uint64_t handle, int created) {
  if (off > c->st.pool_size || size > c->st.pool_size - off) return NULL;
  hpl_buf *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->data = c->st.base + off;
  b->size = size;
  b->handle = handle;
  b->created = created;
  return buf_link(c, b, id);
}

static void buf_free(hpl_client *c, hpl_buf *b) {
  pthread_mutex_lock(&c->lock);
  if (b->prev) b->prev->next = b->next; else c->bufs = b->next;
  if (b->next) b->next->prev = b->prev;
  pthread_mutex_unlock(&c->lock);
  free(b->own);
  free(b);
}

void *hpl_buf_data(const hpl_buf *b) { return b ? b->data : NULL; }
uint64_t hpl_buf_size(const hpl_buf *b) { return b ? b->size : 0; }
const char *hpl_buf_id(const hpl_buf *b) { return b ? b->id : NULL; }
int hpl_buf_shared(const hpl_buf *b) { return b && !b->own; }

/* ------------------------------------------------------------------ objects */

int hpl_set_lifetime(hpl_client *c, int owned, int64_t ttl_ms) {
  if (!c) return HPL_EINVAL;
  if (ttl_ms < 0) return hpl__cfail(c, HPL_EINVAL, "ttl_ms must be >= 0 (0: no ttl), not %lld",
                                    (long long)ttl_ms);
  pthread_mutex_lock(&c->lock);
  c->owned = owned != 0;
  c->ttl_ms = (uint64_t)ttl_ms;
  pthread_mutex_unlock(&c->lock);
  return 0;
}

/* The lifetime a put made now asks for. */
static void lifetime_of(hpl_client *c, int *owned, uint64_t *ttl_ms) {
  pthread_mutex_lock(&c->lock);
  *owned = c->owned;
  *ttl_ms = c->ttl_ms;
  pthread_mutex_unlock(&c->lock);
}

/* Map the pages of [p, p + n) in one call rather than one fault per page
 * (the pool's pages exist; this process's page table does not have them
 * yet). An old kernel without MADV_POPULATE_WRITE just faults as usual. */
static void populate(uint8_t *p, uint64_t n) {
  if (n < CLIENT_POPULATE_MIN) return;
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
  uintptr_t e = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
  madvise((void *)a, e - a, MADV_POPULATE_WRITE);
}

/* hpl_create without mapping the pages ahead (hpl_put maps each chunk
 * just before copying it). */
static int create_buf(hpl_client *c, const char *id, uint64_t size, int64_t timeout_ms,
                      hpl_buf **out) {
  CHECK_ID(c, id);
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  Hplpb__CreateReq r = HPLPB__CREATE_REQ__INIT;
  r.id = (char *)id;
  r.size = size;
  r.timeout_ms = timeout_ms;
  lifetime_of(c, &r.owned, &r.ttl_ms);
  Hplpb__CreateRep *rep = NULL;
  int rc = hpl__ccall(c, HPL__MSG_CREATE, &r.base, timeout_ms,
                (ProtobufCMessage **)&rep);
  if (rc) return rc;
  hpl_buf *b = buf_new(c, id, rep->offset, size, rep->handle, 1);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  if (!b) return hpl__cfail(c, HPL_EPROTO, "store returned a region outside the pool");
  *out = b;
  return 0;
}

int hpl_create(hpl_client *c, const char *id, uint64_t size, int64_t timeout_ms, hpl_buf **out) {
  int rc = create_buf(c, id, size, timeout_ms, out);
  if (rc == 0) populate((*out)->data, size);
  return rc;
}

int hpl_buf_progress(hpl_client *c, hpl_buf *b, uint64_t bytes) {
  if (!c || !b || !b->created || bytes > b->size)
    return c ? hpl__cfail(c, HPL_EINVAL, "not a buffer being created, or bytes beyond its size")
             : HPL_EINVAL;
  Hplpb__ProgressNote n = HPLPB__PROGRESS_NOTE__INIT;
  n.handle = b->handle;
  n.bytes = bytes;
  return note(c, HPL__MSG_PROGRESS, &n.base);
}

int hpl_seal(hpl_client *c, hpl_buf *b, int64_t timeout_ms) {
  if (!c || !b) return c ? hpl__cfail(c, HPL_EINVAL, "NULL buffer") : HPL_EINVAL;
  if (!b->created) return hpl__cfail(c, HPL_EINVAL, "buffer is not being created");
  Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
  r.handle = b->handle;
  r.timeout_ms = timeout_ms;
  int rc = hpl__ccall(c, HPL__MSG_SEAL, &r.base, timeout_ms, NULL);
  buf_free(c, b);
  return rc;
}

void hpl_abort(hpl_client *c, hpl_buf *b) {
  if (!c || !b) return;
  if (b->created) {
    Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
    r.handle = b->handle;
    /* wait (bounded) until the store and directory forgot the object */
    hpl__ccall(c, HPL__MSG_ABORT, &r.base, CLIENT_ABORT_MS, NULL);
  }
  buf_free(c, b);
}

/* Whether a put of `size` bytes goes to the store in one PUT request, its
 * bytes as the payload (an object the directory will hold inline). */
static int put_whole(const hpl_client *c, uint64_t size) {
  return c->st.inline_max && size <= c->st.inline_max;
}

/* Copy a created object's bytes into its region in chunks, telling the
 * store how far we got, so receivers already pulling it can forward the
 * first bytes. Each chunk's pages are mapped just before its copy: mapping
 * a fresh 256 MiB region at once took 118 ms here, and no receiver could
 * start meanwhile. */
static void put_fill(hpl_client *c, hpl_buf *b, const void *data) {
  int notify = b->size > c->st.inline_max;
  uint64_t chunk = PUT_CHUNK_FIRST;
  for (uint64_t off = 0; off < b->size;) {
    uint64_t n = b->size - off < chunk ? b->size - off : chunk;
    populate(b->data + off, n);
    memcpy(b->data + off, (const uint8_t *)data + off, n);
    off += n;
    if (notify && off < b->size) hpl_buf_progress(c, b, off);
    if (chunk < PUT_CHUNK) chunk *= 2;
  }
}

static int put_one(hpl_client *c, const char *id, const void *data, uint64_t size,
                   int64_t timeout_ms);

int hpl_put(hpl_client *c, const char *id, const void *data, uint64_t size, int64_t timeout_ms) {
  hpl__trace("put", id);
  int rc = put_one(c, id, data, size, timeout_ms);
  hpl__trace("put.done", id);
  return rc;
}

/* hpl_put, untraced. */
static int put_one(hpl_client *c, const char *id, const void *data, uint64_t size,
                   int64_t timeout_ms) {
  CHECK_ID(c, id);
  if (size && !data) return hpl__cfail(c, HPL_EINVAL, "data is NULL");
  if (put_whole(c, size)) {
    Hplpb__PutReq r = HPLPB__PUT_REQ__INIT;
    r.id = (char *)id;
    r.size = size;
    r.timeout_ms = timeout_ms;
    lifetime_of(c, &r.owned, &r.ttl_ms);
    /* gets waiting at the directory have it one hop sooner; an object
     * with a lifetime is only ever made visible by its store */
    int published = !r.owned && !r.ttl_ms; /* in: publish it; out: published */
    hpl__cdirect_publish(c->direct, &id, &data, &size, 1, &published);
    r.published = published;
    return call_with(c, HPL__MSG_PUT, &r.base, data, size, timeout_ms, NULL);
  }
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  hpl_buf *b = NULL;
  int rc = create_buf(c, id, size, timeout_ms, &b);
  if (rc) return rc;
  put_fill(c, b, data);
  int64_t left = hpl__ms_left(deadline);
  return hpl_seal(c, b, timeout_ms < 0 ? -1 : left);
}

int hpl_get(hpl_client *c, const char *id, int64_t timeout_ms, hpl_buf **out) {
  CHECK_ID(c, id);
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  int rc;
  return hpl_get_many(c, &id, 1, timeout_ms, out, &rc);
}

void hpl_release(hpl_client *c, hpl_buf *b) {
  if (!c || !b) return;
  if (b->created) {
    hpl_abort(c, b);
    return;
  }
  if (!b->own) send_release(c, b->handle);
  buf_free(c, b);
}

int hpl_contains(hpl_client *c, const char *id, int64_t timeout_ms, int *out_local) {
  CHECK_ID(c, id);
  Hplpb__ContainsRep *rep = NULL;
  int rc = hpl__cid_call(c, HPL__MSG_CONTAINS, id, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  if (out_local) *out_local = rep->local ? 1 : 0;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

int hpl_held_bytes(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t *held,
                   uint64_t *size) {
  CHECK_ID(c, id);
  Hplpb__ContainsRep *rep = NULL;
  int rc = hpl__cid_call(c, HPL__MSG_CONTAINS, id, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  if (held) *held = rep->held < rep->size ? rep->held : rep->size;
  if (size) *size = rep->size;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

int hpl_stat(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t *size,
             uint32_t *copies, uint32_t *complete, int *is_inline) {
  CHECK_ID(c, id);
  Hplpb__StatRep *rep = NULL;
  int rc = hpl__cid_call(c, HPL__MSG_STAT, id, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  if (size) *size = rep->size;
  if (copies) *copies = rep->copies;
  if (complete) *complete = rep->complete;
  if (is_inline) *is_inline = rep->inline_ ? 1 : 0;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

int hpl_delete(hpl_client *c, const char *id, int64_t timeout_ms) {
  CHECK_ID(c, id);
  return hpl__cid_call(c, HPL__MSG_DELETE, id, timeout_ms, NULL);
}

/* ------------------------------------------------------------------ many at once */

/* Check a batch call's arguments and set up its outcome: 0, or HPL_EINVAL
 * (nothing is sent, rcs is not written). */
static int batch_open(hpl_client *c, batch *b, const char *const *ids, size_t n, int *rcs,
                      const void *other) {
  if (!c) return HPL_EINVAL;
  if (n && (!ids || !rcs || !other)) return hpl__cfail(c, HPL_EINVAL, "NULL array");
  if (n > HPL__CRPC_MAX_BATCH)
    return hpl__cfail(c, HPL_EINVAL, "%zu requests in one call (at most %d)", n,
                      HPL__CRPC_MAX_BATCH);
  batch_init(b, ids, n, rcs);
  return 0;
}

/* A slot for each item whose id is valid (the others fail with
 * HPL_EINVAL), in item order; *k gets their number. NULL (with every item
 * failed) if memory is short, or when n is 0. */
static slot *batch_slots(hpl_client *c, batch *b, size_t *k) {
  *k = 0;
  slot *s = b->n ? calloc(b->n, sizeof *s) : NULL;
  for (size_t i = 0; i < b->n; i++) {
    if (!s)
      batch_set(b, i, hpl__cfail(c, HPL_ENOMEM, "out of memory"));
    else if (!hpl__id_valid(b->ids[i]))
      batch_set(b, i,
                hpl__cfail(c, HPL_EINVAL, "invalid object id (1-%d bytes, no control characters)",
                           HPL_ID_MAX));
    else
      s[(*k)++].item = i;
  }
  return s;
}

static void slots_free(slot *s, size_t k) {
  for (size_t j = 0; s && j < k; j++)
    if (s[j].out) protobuf_c_message_free_unpacked(s[j].out, NULL);
  free(s);
}

int hpl_put_many(hpl_client *c, const char *const *ids, const void *const *data,
                 const uint64_t *sizes, size_t n, int64_t timeout_ms, int *rcs) {
  batch b;
  int rc = batch_open(c, &b, ids, n, rcs, data && sizes ? data : NULL);
  if (rc) return rc;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  size_t k, m = 0;
  int owned;
  uint64_t ttl_ms;
  lifetime_of(c, &owned, &ttl_ms); /* one lifetime for the whole batch */
  slot *s = batch_slots(c, &b, &k);
  /* the small ones with bytes are published first, in one go (hpl_put) */
  int *published = s && !owned && !ttl_ms ? calloc(n, sizeof *published) : NULL;
  if (published) {
    for (size_t j = 0; j < k; j++) {
      size_t i = s[j].item;
      published[i] = put_whole(c, sizes[i]) && (!sizes[i] || data[i]);
    }
    hpl__cdirect_publish(c->direct, ids, data, sizes, n, published);
  }
  /* Small objects are one PUT each; larger ones a CREATE now, a SEAL once
   * their bytes are in. */
  for (size_t j = 0; j < k; j++) {
    size_t i = s[j].item;
    if (sizes[i] && !data[i]) {
      batch_set(&b, i, hpl__cfail(c, HPL_EINVAL, "data is NULL"));
      continue;
    }
    slot *q = &s[m++];
    *q = (slot){.item = i};
    if (put_whole(c, sizes[i])) {
      hplpb__put_req__init(&q->m.put);
      q->m.put.id = (char *)ids[i];
      q->m.put.size = sizes[i];
      q->m.put.timeout_ms = timeout_ms;
      q->m.put.owned = owned;
      q->m.put.ttl_ms = ttl_ms;
      q->m.put.published = published && published[i];
      q->req = (hpl__crpc_req){
          .type = HPL__MSG_PUT, .m = &q->m.put.base, .payload = data[i], .plen = sizes[i]};
    } else {
      hplpb__create_req__init(&q->m.create);
      q->m.create.id = (char *)ids[i];
      q->m.create.size = sizes[i];
      q->m.create.timeout_ms = timeout_ms;
      q->m.create.owned = owned;
      q->m.create.ttl_ms = ttl_ms;
      q->req = (hpl__crpc_req){.type = HPL__MSG_CREATE, .m = &q->m.create.base};
    }
  }
  calls(c, s, m, timeout_ms, &b);
  /* The created ones: fill, then seal them all, pipelined too. Slot j's
   * seal goes into slot `sealing` <= j, whose create is dealt with. */
  size_t sealing = 0;
  for (size_t j = 0; j < m; j++) {
    size_t i = s[j].item;
    Hplpb__CreateRep *cr = s[j].req.type == HPL__MSG_CREATE ? (Hplpb__CreateRep *)s[j].out : NULL;
    if (!cr) continue; /* a PUT, or a CREATE that failed */
    hpl_buf *buf = buf_new(c, ids[i], cr->offset, sizes[i], cr->handle, 1);
    s[j].out = NULL;
    protobuf_c_message_free_unpacked(&cr->base, NULL);
    if (!buf) {
      batch_set(&b, i, hpl__cfail(c, HPL_EPROTO, "store returned a region outside the pool"));
      continue;
    }
    put_fill(c, buf, data[i]);
    slot *q = &s[sealing++];
    *q = (slot){.item = i, .buf = buf};
    hplpb__handle_req__init(&q->m.handle);
    q->m.handle.handle = buf->handle;
    q->m.handle.timeout_ms = timeout_ms < 0 ? -1 : hpl__ms_left(deadline);
    q->req = (hpl__crpc_req){.type = HPL__MSG_SEAL, .m = &q->m.handle.base};
  }
  calls(c, s, sealing, timeout_ms < 0 ? -1 : hpl__ms_left(deadline), &b);
  for (size_t j = 0; j < sealing; j++) buf_free(c, s[j].buf); /* sealed or not, it is over */
  slots_free(s, sealing);
  free(published);
  return batch_end(c, &b);
}

static int get_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                    hpl_buf **bufs, int *rcs);

int hpl_get_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                 hpl_buf **bufs, int *rcs) {
  const char *first = ids && n ? ids[0] : NULL;
  hpl__trace("get", first);
  int rc = get_many(c, ids, n, timeout_ms, bufs, rcs);
  hpl__trace("get.done", first);
  return rc;
}

/* hpl_get_many, untraced. */
static int get_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                    hpl_buf **bufs, int *rcs) {
  batch b;
  int rc = batch_open(c, &b, ids, n, rcs, bufs);
  if (rc) return rc;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  size_t k;
  slot *s = batch_slots(c, &b, &k);
  /* Small objects this node does not hold may come straight from the
   * directory; that path never fails a get: what it does not find goes on
   * to the store with what is left of the timeout. */
  const char **dids = k && c->direct && timeout_ms != 0 ? malloc(k * sizeof *dids) : NULL;
  hpl__cdirect_obj *objs = dids ? malloc(k * sizeof *objs) : NULL;
  int *found = objs ? malloc(k * sizeof *found) : NULL;
  if (found) {
    for (size_t j = 0; j < k; j++) dids[j] = ids[s[j].item];
    hpl__cdirect_get_many(c->direct, dids, k, deadline, objs, found);
    size_t left = 0;
    for (size_t j = 0; j < k; j++) {
      hpl_buf *buf = found[j] == HPL__DIRECT_FOUND ? calloc(1, sizeof *buf) : NULL;
      if (!buf) {
        if (found[j] == HPL__DIRECT_FOUND) free(objs[j].own);
        s[j].granted = found[j] == HPL__DIRECT_GRANTED;
        s[left++] = s[j]; /* to the store */
        continue;
      }
      buf->own = objs[j].own;
      buf->data = objs[j].data;
      buf->size = objs[j].size;
      bufs[s[j].item] = buf_link(c, buf, dids[j]);
      batch_set(&b, s[j].item, 0);
    }
    k = left;
  }
  free(dids);
  free(objs);
  free(found);
  if (timeout_ms > 0) timeout_ms = hpl__ms_left(deadline);
  for (size_t j = 0; j < k; j++) {
    hplpb__get_req__init(&s[j].m.get);
    s[j].m.get.id = (char *)ids[s[j].item];
    s[j].m.get.timeout_ms = timeout_ms;
    s[j].m.get.granted = s[j].granted;
    s[j].req = (hpl__crpc_req){.type = HPL__MSG_GET, .m = &s[j].m.get.base};
  }
  calls(c, s, k, timeout_ms, &b);
  for (size_t j = 0; j < k; j++) {
    Hplpb__GetRep *g = (Hplpb__GetRep *)s[j].out;
    if (!g) continue;
    size_t i = s[j].item;
    hpl_buf *buf = buf_new(c, ids[i], g->offset, g->size, g->handle, 0);
    if (buf)
      bufs[i] = buf;
    else {
      send_release(c, g->handle);
      batch_set(&b, i, hpl__cfail(c, HPL_EPROTO, "store returned a region outside the pool"));
    }
  }
  slots_free(s, k);
  return batch_end(c, &b);
}

/* STATs or DELETEs of the batch's valid ids, pipelined; the slots (with
 * the replies) are returned for the caller to read and free. */
static slot *id_calls(hpl_client *c, batch *b, unsigned type, int64_t timeout_ms, size_t *k) {
  slot *s = batch_slots(c, b, k);
  for (size_t j = 0; j < *k; j++) {
    hplpb__id_req__init(&s[j].m.id);
    s[j].m.id.id = (char *)b->ids[s[j].item];
    s[j].m.id.timeout_ms = timeout_ms;
    s[j].req = (hpl__crpc_req){.type = type, .m = &s[j].m.id.base};
  }
  calls(c, s, *k, timeout_ms, b);
  return s;
}

int hpl_stat_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                  uint64_t *sizes, int *rcs) {
  batch b;
  int rc = batch_open(c, &b, ids, n, rcs, ids);
  if (rc) return rc;
  size_t k;
  slot *s = id_calls(c, &b, HPL__MSG_STAT, timeout_ms, &k);
  for (size_t j = 0; sizes && j < k; j++)
    if (s[j].out) sizes[s[j].item] = ((Hplpb__StatRep *)s[j].out)->size;
  slots_free(s, k);
  return batch_end(c, &b);
}

int hpl_delete_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                    int *rcs) {
  batch b;
  int rc = batch_open(c, &b, ids, n, rcs, ids);
  if (rc) return rc;
  size_t k;
  slot *s = id_calls(c, &b, HPL__MSG_DELETE, timeout_ms, &k);
  slots_free(s, k);
  return batch_end(c, &b);
}

/* ------------------------------------------------------------------ collectives */

/* hpl_reduce, hpl_reduce_range and hpl_allreduce: the checks the client
 * can make, then the REDUCE request (src_length 0: up to the sources'
 * end). With `ran` set it asks for a ring (ReduceReq.ring): *ran then says
 * whether one ran, also when it answers that none runs now. */
static int reduce_call(hpl_client *c, const char *target, const char *const *sources,
                       size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                       uint64_t offset, uint64_t length, int64_t timeout_ms, int *ran) {
  CHECK_ID(c, target);
  if (!sources || nsources == 0) return hpl__cfail(c, HPL_EINVAL, "no sources");
  if (num_objects > nsources)
    return hpl__cfail(c, HPL_EINVAL, "num_objects (%zu) exceeds the number of sources (%zu)",
                num_objects, nsources);
  if ((unsigned)op > HPL_OP_PROD) return hpl__cfail(c, HPL_EINVAL, "unknown op %d", (int)op);
  size_t es = hpl_dtype_size((int)dtype);
  if (!es) return hpl__cfail(c, HPL_EINVAL, "unknown dtype %d", (int)dtype);
  if (offset % es || length % es)
    return hpl__cfail(c, HPL_EINVAL, "offset %llu and length %llu must be multiples of the "
                      "dtype's size (%zu bytes)", (unsigned long long)offset,
                      (unsigned long long)length, es);
  for (size_t i = 0; i < nsources; i++)
    if (!hpl__id_valid(sources[i]))
      return hpl__cfail(c, HPL_EINVAL, "source %zu has an invalid id", i);
  Hplpb__ReduceReq r = HPLPB__REDUCE_REQ__INIT;
  r.target = (char *)target;
  r.n_sources = nsources;
  r.sources = (char **)sources;
  r.num_objects = (uint32_t)num_objects;
  r.op = (uint32_t)op;
  r.dtype = (uint32_t)dtype;
  r.timeout_ms = timeout_ms;
  r.src_offset = offset;
  r.src_length = length;
  if (!ran) return hpl__ccall(c, HPL__MSG_REDUCE, &r.base, timeout_ms, NULL);
  r.ring = 1;
  int rc;
  batch b;
  batch_init(&b, NULL, 1, &rc);
  slot s = {.req = {.type = HPL__MSG_REDUCE, .m = &r.base}};
  calls(c, &s, 1, timeout_ms, &b);
  const Hplpb__ReduceRep *rep = (const Hplpb__ReduceRep *)s.out;
  *ran = rep && rep->joined;
  if (rc == 0 && rep && rep->no_ring) rc = HPL_EUNAVAIL; /* reduce the usual way */
  if (s.out) protobuf_c_message_free_unpacked(s.out, NULL);
  return rc;
}

int hpl_reduce(hpl_client *c, const char *target, const char *const *sources, size_t nsources,
               size_t num_objects, hpl_op op, hpl_dtype dtype, int64_t timeout_ms) {
  return reduce_call(c, target, sources, nsources, num_objects, op, dtype, 0, 0, timeout_ms, NULL);
}

int hpl_reduce_range(hpl_client *c, const char *target, const char *const *sources,
                     size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                     uint64_t offset, uint64_t length, int64_t timeout_ms) {
  return reduce_call(c, target, sources, nsources, num_objects, op, dtype, offset, length,
                     timeout_ms, NULL);
}

int hpl_allreduce(hpl_client *c, const char *target, const char *const *sources, size_t nsources,
                  size_t num_objects, hpl_op op, hpl_dtype dtype, int64_t timeout_ms,
                  hpl_buf **out) {
  if (!out) return c ? hpl__cfail(c, HPL_EINVAL, "out must not be NULL") : HPL_EINVAL;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  /* a ring first (the store answers once the target is complete here);
   * where none runs, a reduce whose result is broadcast to each caller */
  int ran = 0;
  int rc = reduce_call(c, target, sources, nsources, num_objects, op, dtype, 0, 0, timeout_ms,
                       &ran);
  if (rc == HPL_EUNAVAIL) {
    rc = hpl_reduce(c, target, sources, nsources, num_objects, op, dtype,
                    timeout_ms < 0 ? -1 : hpl__ms_left(deadline));
    /* an abandoned ring may have completed the target at some members
     * (or still runs here): get it as it is */
    if (rc == HPL_EEXIST && ran) rc = 0;
  }
  if (rc) return rc;
  return hpl_get(c, target, timeout_ms < 0 ? -1 : hpl__ms_left(deadline), out);
}

void hpl_free(void *p) { free(p); }
