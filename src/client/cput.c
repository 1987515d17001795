/* cput.c - putting objects with libhoplite (include/hoplite.h): the
 * lifetime a put asks for, creating an object in this process's own
 * memory, telling the store how far it is written (it copies the bytes in)
 * and sealing or aborting it, and hpl_put / hpl_put_many, which send small
 * objects whole and publish them to the directory on the way (cdirect.h),
 * and have the store copy larger ones straight from the caller's bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi.h"
#include "trace.h"

/* Of a batch of puts, objects up to this size are published: a published
 * object's bytes reach the directory twice (the PUBLISH, then the store's
 * INLINE_PUT). For one put that is cheap next to the hop it saves a get
 * already waiting; for a batch of many objects of a few KiB (a shuffle's
 * partitions) it doubles what the directory's link must take in at once:
 * the 8-host shuffle of 4 KiB partitions was bound by exactly that. */
#define PUBLISH_MANY_MAX 2048

/* How long hpl_abort waits for the store and directory to forget. */
#define CLIENT_ABORT_MS 5000
/* Alignment of what a created buffer of size 0 points at. */
#define CLIENT_EMPTY_ALIGN 64

/* ------------------------------------------------------------------ lifetime, creating */

int hpl_set_lifetime(hpl_client *c, int owned, int64_t ttl_ms) {
  if (!c) return HPL_EINVAL;
  HPL__NOT_ADMIN(c);
  if (ttl_ms < 0) return hpl__cfail(c, HPL_EINVAL, "ttl_ms must be >= 0 (0: no ttl), not %lld",
                                    (long long)ttl_ms);
  pthread_mutex_lock(&c->lock);
  c->owned = owned != 0;
  c->ttl_ms = (uint64_t)ttl_ms;
  pthread_mutex_unlock(&c->lock);
  return 0;
}

void hpl__clifetime(hpl_client *c, int *owned, uint64_t *ttl_ms) {
  pthread_mutex_lock(&c->lock);
  *owned = c->owned;
  *ttl_ms = c->ttl_ms;
  pthread_mutex_unlock(&c->lock);
}

/* CREATE of object `id`, whose `size` bytes will be at `src` in this
 * process (the store copies them from there as PROGRESS and SEAL say they
 * are final), and from byte 0 on of the memfd src_fd (-1: none; the store
 * then maps it and copies with memcpy): 0 and the store's handle, or the
 * failure. */
static int create_call(hpl_client *c, const char *id, uint64_t size, const void *src,
                       int src_fd, int64_t timeout_ms, uint64_t *handle) {
  Hplpb__CreateReq r = HPLPB__CREATE_REQ__INIT;
  r.id = (char *)id;
  r.size = size;
  r.timeout_ms = timeout_ms;
  r.src_addr = (uint64_t)(uintptr_t)src;
  if (src_fd >= 0) { /* the bytes are also at byte 0 of this memfd (hpl__cstage) */
    r.src_memfd = 1;
    r.src_fd = (uint32_t)src_fd;
    r.src_off = 0;
  }
  hpl__clifetime(c, &r.owned, &r.ttl_ms);
  Hplpb__CreateRep *rep = NULL;
  int rc = hpl__ccall(c, HPL__MSG_CREATE, &r.base, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  *handle = rep->handle;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

/* A SEAL of bytes the store copies from the caller's memory timed out:
 * the caller may reuse that memory as soon as we return, so the store must
 * not go on copying from it into an object it then seals. Take the put
 * back (a put the store sealed meanwhile, all its bytes in, stays). */
static void seal_given_up(hpl_client *c, uint64_t handle) {
  char why[HPL__CERR_MAX];
  snprintf(why, sizeof why, "%s", hpl__cfail_msg()); /* the timeout's detail stays */
  Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
  r.handle = handle;
  hpl__ccall(c, HPL__MSG_ABORT, &r.base, CLIENT_ABORT_MS, NULL);
  hpl__cfail(c, HPL_ETIMEDOUT, "%s", why);
}

/* What a created buffer of size 0 points at (never written: no bytes). */
static uint8_t empty_region[CLIENT_EMPTY_ALIGN];

int hpl_create(hpl_client *c, const char *id, uint64_t size, int64_t timeout_ms, hpl_buf **out) {
  HPL__NOT_ADMIN(c);
  HPL__CHECK_ID(c, id);
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  /* The bytes are written in this process's own memory, never in the
   * store's pool: the store copies them in (PROGRESS, SEAL), and once
   * sealed nobody can change them. */
  hpl__cstage st = {.mem = empty_region, .fd = -1};
  if (size && hpl__cstage_take(c, size, &st) != 0)
    return hpl__cfail(c, HPL_ENOMEM, "cannot map %llu bytes to create '%s' in",
                      (unsigned long long)size, id);
  uint64_t handle = 0;
  int rc = create_call(c, id, size, st.mem, size >= HPL__CREATE_MEMFD_MIN ? st.fd : -1,
                       timeout_ms, &handle);
  hpl_buf *b = rc == 0 ? hpl__cbuf_created(c, id, st.mem, size, handle, &st) : NULL;
  if (!b) {
    if (st.len) hpl__cstage_give(c, st);
    return rc ? rc : hpl__cfail(c, HPL_ENOMEM, "out of memory");
  }
  *out = b;
  return 0;
}

int hpl_buf_progress(hpl_client *c, hpl_buf *b, uint64_t bytes) {
  HPL__NOT_ADMIN(c);
  if (!c || !b || !b->created || bytes > b->size)
    return c ? hpl__cfail(c, HPL_EINVAL, "not a buffer being created, or bytes beyond its size")
             : HPL_EINVAL;
  Hplpb__ProgressNote n = HPLPB__PROGRESS_NOTE__INIT;
  n.handle = b->handle;
  n.bytes = bytes;
  return hpl__cnote(c, HPL__MSG_PROGRESS, &n.base);
}

int hpl_seal(hpl_client *c, hpl_buf *b, int64_t timeout_ms) {
  HPL__NOT_ADMIN(c);
  if (!c || !b) return c ? hpl__cfail(c, HPL_EINVAL, "NULL buffer") : HPL_EINVAL;
  if (!b->created) return hpl__cfail(c, HPL_EINVAL, "buffer is not being created");
  Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
  r.handle = b->handle;
  r.timeout_ms = timeout_ms;
  int rc = hpl__ccall(c, HPL__MSG_SEAL, &r.base, timeout_ms, NULL);
  if (rc == HPL_ETIMEDOUT && b->stage.len) {
    /* the store may still be copying from it: never hand it to the next
     * creation (whose bytes would end up in this object) */
    hpl__cstage_drop(b->stage);
    b->stage.len = 0;
  }
  hpl__cbuf_free(c, b);
  return rc;
}

void hpl_abort(hpl_client *c, hpl_buf *b) {
  if (!c || !b || c->admin) return; /* an admin handle hands out no buffers */
  if (b->created) {
    Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
    r.handle = b->handle;
    /* wait (bounded) until the store and directory forgot the object */
    hpl__ccall(c, HPL__MSG_ABORT, &r.base, CLIENT_ABORT_MS, NULL);
  }
  hpl__cbuf_free(c, b);
}

/* Whether a put of `size` bytes goes to the store in one PUT request, its
 * bytes as the payload (an object the directory will hold inline). */
static int put_whole(const hpl_client *c, uint64_t size) {
  return c->st.inline_max && size <= c->st.inline_max;
}

static int put_one(hpl_client *c, const char *id, const void *data, uint64_t size,
                   int64_t timeout_ms);

int hpl_put(hpl_client *c, const char *id, const void *data, uint64_t size, int64_t timeout_ms) {
  HPL__NOT_ADMIN(c);
  hpl__trace("put", id);
  int rc = put_one(c, id, data, size, timeout_ms);
  hpl__trace("put.done", id);
  return rc;
}

/* hpl_put, untraced. */
static int put_one(hpl_client *c, const char *id, const void *data, uint64_t size,
                   int64_t timeout_ms) {
  HPL__CHECK_ID(c, id);
  if (size && !data) return hpl__cfail(c, HPL_EINVAL, "data is NULL");
  if (put_whole(c, size)) {
    Hplpb__PutReq r = HPLPB__PUT_REQ__INIT;
    r.id = (char *)id;
    r.size = size;
    r.timeout_ms = timeout_ms;
    hpl__clifetime(c, &r.owned, &r.ttl_ms);
    /* gets waiting at the directory have it one hop sooner; an object
     * with a lifetime is only ever made visible by its store */
    int published = !r.owned && !r.ttl_ms; /* in: publish it; out: published */
    if (published) hpl__cfollow_directory(c);
    hpl__cdirect_publish(c->direct, &id, &data, &size, 1, &published);
    r.published = published;
    return hpl__ccall_with(c, HPL__MSG_PUT, &r.base, data, size, timeout_ms, NULL);
  }
  /* the store copies the bytes straight from `data` (one copy, like
   * writing them into the pool ourselves) as soon as the SEAL asks */
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  uint64_t handle = 0;
  int rc = create_call(c, id, size, data, -1, timeout_ms, &handle);
  if (rc) return rc;
  Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
  r.handle = handle;
  r.timeout_ms = timeout_ms < 0 ? -1 : hpl__ms_left(deadline);
  rc = hpl__ccall(c, HPL__MSG_SEAL, &r.base, r.timeout_ms, NULL);
  if (rc == HPL_ETIMEDOUT) seal_given_up(c, handle);
  return rc;
}

/* ------------------------------------------------------------------ many at once */

int hpl_put_many(hpl_client *c, const char *const *ids, const void *const *data,
                 const uint64_t *sizes, size_t n, int64_t timeout_ms, int *rcs) {
  HPL__NOT_ADMIN(c);
  hpl__cbatch b;
  int rc = hpl__cbatch_open(c, &b, ids, n, rcs, data && sizes ? data : NULL);
  if (rc) return rc;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  size_t k, m = 0;
  int owned;
  uint64_t ttl_ms;
  hpl__clifetime(c, &owned, &ttl_ms); /* one lifetime for the whole batch */
  hpl__cslot *s = hpl__cbatch_slots(c, &b, &k);
  /* the small ones with bytes are published first, in one go (hpl_put);
   * of a batch, only the smallest (PUBLISH_MANY_MAX) */
  int *published = s && !owned && !ttl_ms ? calloc(n, sizeof *published) : NULL;
  if (published) {
    hpl__cfollow_directory(c);
    for (size_t j = 0; j < k; j++) {
      size_t i = s[j].item;
      published[i] = put_whole(c, sizes[i]) && (!sizes[i] || data[i]) &&
                     (n == 1 || sizes[i] <= PUBLISH_MANY_MAX);
    }
    hpl__cdirect_publish(c->direct, ids, data, sizes, n, published);
  }
  /* Small objects are one PUT each; larger ones a CREATE now, a SEAL once
   * their bytes are in. */
  for (size_t j = 0; j < k; j++) {
    size_t i = s[j].item;
    if (sizes[i] && !data[i]) {
      hpl__cbatch_set(&b, i, hpl__cfail(c, HPL_EINVAL, "data is NULL"));
      continue;
    }
    hpl__cslot *q = &s[m++];
    *q = (hpl__cslot){.item = i};
    if (put_whole(c, sizes[i])) {
      hplpb__put_req__init(&q->m.put);
      q->m.put.id = (char *)ids[i];
      q->m.put.size = sizes[i];
      q->m.put.timeout_ms = timeout_ms;
      q->m.put.owned = owned;
      q->m.put.ttl_ms = ttl_ms;
      q->m.put.published = published && published[i];
      q->m.put.batch = n > 1; /* (the store keeps a batch's larger objects: BATCH_INLINE_MAX) */
      q->req = (hpl__crpc_req){
          .type = HPL__MSG_PUT, .m = &q->m.put.base, .payload = data[i], .plen = sizes[i]};
    } else {
      hplpb__create_req__init(&q->m.create);
      q->m.create.id = (char *)ids[i];
      q->m.create.size = sizes[i];
      q->m.create.timeout_ms = timeout_ms;
      q->m.create.owned = owned;
      q->m.create.ttl_ms = ttl_ms;
      q->m.create.src_addr = (uint64_t)(uintptr_t)data[i];
      q->req = (hpl__crpc_req){.type = HPL__MSG_CREATE, .m = &q->m.create.base};
    }
  }
  hpl__ccalls(c, s, m, timeout_ms, &b);
  /* The created ones: seal them all, pipelined too (the store copies
   * each one's bytes from data[i]). Slot j's seal goes into slot
   * `sealing` <= j, whose create is dealt with. */
  size_t sealing = 0;
  for (size_t j = 0; j < m; j++) {
    size_t i = s[j].item;
    Hplpb__CreateRep *cr = s[j].req.type == HPL__MSG_CREATE ? (Hplpb__CreateRep *)s[j].out : NULL;
    if (!cr) continue; /* a PUT, or a CREATE that failed */
    uint64_t handle = cr->handle;
    s[j].out = NULL;
    protobuf_c_message_free_unpacked(&cr->base, NULL);
    hpl__cslot *q = &s[sealing++];
    *q = (hpl__cslot){.item = i};
    hplpb__handle_req__init(&q->m.handle);
    q->m.handle.handle = handle;
    q->m.handle.timeout_ms = timeout_ms < 0 ? -1 : hpl__ms_left(deadline);
    q->req = (hpl__crpc_req){.type = HPL__MSG_SEAL, .m = &q->m.handle.base};
  }
  hpl__ccalls(c, s, sealing, timeout_ms < 0 ? -1 : hpl__ms_left(deadline), &b);
  for (size_t j = 0; j < sealing; j++) /* (see seal_given_up) */
    if (b.rcs[s[j].item] == HPL_ETIMEDOUT) seal_given_up(c, s[j].m.handle.handle);
  hpl__cslots_free(s, sealing);
  free(published);
  return hpl__cbatch_end(c, &b);
}
