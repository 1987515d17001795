/* cget.c - getting objects with libhoplite (include/hoplite.h): hpl_get
 * and hpl_get_many, small objects first from the directory (cdirect.h),
 * the rest from the store, whose replies name regions of the pool (mapped
 * read-only, chunk by chunk: cstore.h);
 * and hpl_release. */
#include <stdlib.h>

#include "capi.h"
#include "trace.h"

#define GET_FEW 8 /* objects of a call whose direct-read state stays on the stack */

static int get_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                    hpl_buf **bufs, int *rcs, const int *direct);

/* The buffer of an object read from the directory (its bytes taken over),
 * linked to the client; NULL without memory (the bytes are freed). */
static hpl_buf *direct_buf(hpl_client *c, const char *id, hpl__cdirect_obj *o) {
  hpl_buf *buf = hpl__zalloc(sizeof *buf);
  if (!buf) {
    free(o->own);
    return NULL;
  }
  buf->own = o->own;
  buf->data = o->data;
  buf->size = o->size;
  return hpl__cbuf_link(c, buf, id);
}

int hpl_get(hpl_client *c, const char *id, int64_t timeout_ms, hpl_buf **out) {
  HPL__NOT_ADMIN(c);
  HPL__CHECK_ID(c, id);
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  hpl__trace("get", id);
  /* Most gets are of one object, and a small one this node does not hold
   * comes straight from the directory: that path first, without the
   * batch's bookkeeping (a woken worker pays for every line of code it
   * runs: bench/footprint.py); what it does not find goes on below. */
  int found = 0, one, asked = c->direct && timeout_ms != 0;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  if (asked) {
    hpl__cfollow_directory(c);
    hpl__cdirect_obj o;
    hpl__cdirect_get_many(c->direct, &id, 1, deadline, &o, &found);
    if (found == HPL__DIRECT_FOUND && (*out = direct_buf(c, id, &o))) {
      hpl__trace("get.done", id);
      return 0;
    }
  }
  if (timeout_ms > 0) timeout_ms = hpl__ms_left(deadline);
  int rc = get_many(c, &id, 1, timeout_ms, out, &one, asked ? &found : NULL);
  hpl__trace("get.done", id);
  return rc;
}

int hpl_get_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                 hpl_buf **bufs, int *rcs) {
  HPL__NOT_ADMIN(c);
  const char *first = ids && n ? ids[0] : NULL;
  hpl__trace("get", first);
  int rc = get_many(c, ids, n, timeout_ms, bufs, rcs, NULL);
  hpl__trace("get.done", first);
  return rc;
}

/* hpl_get_many, untraced. direct: NULL, or what hpl_get's direct read of
 * its one object found (HPL__DIRECT_*, cdirect.h), which is not asked
 * again; a grant it saw goes with the store's GET. */
static int get_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                    hpl_buf **bufs, int *rcs, const int *direct) {
  hpl__cstore_poll(&c->st); /* chunks given back meanwhile */
  if (!direct) hpl__cfollow_directory(c);
  hpl__cbatch b;
  int rc = hpl__cbatch_open(c, &b, ids, n, rcs, bufs);
  if (rc) return rc;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  size_t k;
  hpl__cslot *s = hpl__cbatch_slots(c, &b, &k);
  /* Small objects this node does not hold may come straight from the
   * directory; that path never fails a get: what it does not find goes on
   * to the store with what is left of the timeout. */
  const char *dids_s[GET_FEW];
  hpl__cdirect_obj objs_s[GET_FEW];
  int found_s[GET_FEW];
  int few = k <= GET_FEW; /* most gets ask for one object: no allocation */
  if (direct && k) s[0].granted = *direct == HPL__DIRECT_GRANTED;
  const char **dids = !k || !c->direct || timeout_ms == 0 || direct ? NULL
                      : few                               ? dids_s
                                                          : malloc(k * sizeof *dids);
  hpl__cdirect_obj *objs = !dids ? NULL : few ? objs_s : malloc(k * sizeof *objs);
  int *found = !objs ? NULL : few ? found_s : malloc(k * sizeof *found);
  if (found) {
    for (size_t j = 0; j < k; j++) dids[j] = ids[s[j].item];
    hpl__cdirect_get_many(c->direct, dids, k, deadline, objs, found);
    size_t left = 0;
    for (size_t j = 0; j < k; j++) {
      hpl_buf *buf = found[j] == HPL__DIRECT_FOUND ? direct_buf(c, dids[j], &objs[j]) : NULL;
      if (!buf) {
        s[j].granted = found[j] == HPL__DIRECT_GRANTED;
        s[left++] = s[j]; /* to the store */
        continue;
      }
      bufs[s[j].item] = buf;
      hpl__cbatch_set(&b, s[j].item, 0);
    }
    k = left;
  }
  if (!few) {
    free(dids);
    free(objs);
    free(found);
  }
  if (timeout_ms > 0) timeout_ms = hpl__ms_left(deadline);
  for (size_t j = 0; j < k; j++) {
    hplpb__get_req__init(&s[j].m.get);
    s[j].m.get.id = (char *)ids[s[j].item];
    s[j].m.get.timeout_ms = timeout_ms;
    s[j].m.get.granted = s[j].granted;
    s[j].req = (hpl__crpc_req){.type = HPL__MSG_GET, .m = &s[j].m.get.base};
  }
  hpl__ccalls(c, s, k, timeout_ms, &b);
  for (size_t j = 0; j < k; j++) {
    if (!s[j].out) continue;
    size_t i = s[j].item;
    int grc = hpl__cget_buf(c, ids[i], (const Hplpb__GetRep *)s[j].out, &bufs[i]);
    if (grc) hpl__cbatch_set(&b, i, grc);
  }
  hpl__cslots_free(s, k);
  return hpl__cbatch_end(c, &b);
}

int hpl__cget_buf(hpl_client *c, const char *id, const Hplpb__GetRep *g, hpl_buf **out) {
  /* the chunks it lies in, mapped read-only (their memfds came first) */
  char why[200];
  int mrc = hpl__cstore_map(&c->st, g->offset, g->size, g->chunk_gen, g->n_chunk_gen, why,
                            sizeof why);
  hpl_buf *buf = mrc ? NULL : hpl__cbuf_new(c, id, g->offset, g->size, g->handle, 0);
  if (buf) {
    *out = buf;
    return 0;
  }
  hpl__crelease(c, g->handle);
  return mrc ? hpl__cfail(c, mrc, "%s", why)
             : hpl__cfail(c, HPL_EPROTO, "store returned a region outside the pool");
}

void hpl_release(hpl_client *c, hpl_buf *b) {
  if (!c || !b || c->admin) return; /* an admin handle hands out no buffers */
  if (b->created) {
    hpl_abort(c, b);
    return;
  }
  if (!b->own) hpl__crelease(c, b->handle);
  hpl__cbuf_free(c, b);
  hpl__cstore_poll(&c->st); /* chunks given back meanwhile */
}
