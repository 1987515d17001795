/* creduce.c - libhoplite's collectives (include/hoplite.h): hpl_reduce,
 * hpl_reduce_range and hpl_allreduce (a ring where one runs, else a
 * reduce whose result each caller gets). */
#include "capi.h"

/* hpl_reduce, hpl_reduce_range and hpl_allreduce: the checks the client
 * can make, then the REDUCE request (src_length 0: up to the sources'
 * end). With `ran` set it asks for a ring (ReduceReq.ring): *ran then says
 * whether one ran, also when it answers that none runs now. */
static int reduce_call(hpl_client *c, const char *target, const char *const *sources,
                       size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                       uint64_t offset, uint64_t length, int64_t timeout_ms, int *ran) {
  int crc = hpl__creduce_check(c, target, sources, nsources, num_objects, op, dtype, offset,
                               length);
  if (crc) return crc;
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
  hpl__cbatch b;
  hpl__cbatch_init(&b, NULL, 1, &rc);
  hpl__cslot s = {.req = {.type = HPL__MSG_REDUCE, .m = &r.base}};
  hpl__ccalls(c, &s, 1, timeout_ms, &b);
  const Hplpb__ReduceRep *rep = (const Hplpb__ReduceRep *)s.out;
  *ran = rep && rep->joined;
  if (rc == 0 && rep && rep->no_ring) rc = HPL_EUNAVAIL; /* reduce the usual way */
  if (s.out) protobuf_c_message_free_unpacked(s.out, NULL);
  return rc;
}

int hpl__creduce_check(hpl_client *c, const char *target, const char *const *sources,
                       size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                       uint64_t offset, uint64_t length) {
  HPL__CHECK_ID(c, target);
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
  return 0;
}

int hpl_reduce(hpl_client *c, const char *target, const char *const *sources, size_t nsources,
               size_t num_objects, hpl_op op, hpl_dtype dtype, int64_t timeout_ms) {
  HPL__NOT_ADMIN(c);
  return reduce_call(c, target, sources, nsources, num_objects, op, dtype, 0, 0, timeout_ms, NULL);
}

int hpl_reduce_range(hpl_client *c, const char *target, const char *const *sources,
                     size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                     uint64_t offset, uint64_t length, int64_t timeout_ms) {
  HPL__NOT_ADMIN(c);
  return reduce_call(c, target, sources, nsources, num_objects, op, dtype, offset, length,
                     timeout_ms, NULL);
}

int hpl_allreduce(hpl_client *c, const char *target, const char *const *sources, size_t nsources,
                  size_t num_objects, hpl_op op, hpl_dtype dtype, int64_t timeout_ms,
                  hpl_buf **out) {
  HPL__NOT_ADMIN(c);
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
