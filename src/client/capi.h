/*
 * capi.h - what the client library's API files share (client.c, ctext.c):
 * the per-thread error detail and one request to the store. Internal to
 * libhoplite.
 */
#ifndef HPL_CAPI_H
#define HPL_CAPI_H

#include <stdint.h>

#include "hoplite.h"
#include "proto.h"
#include "util.h"

/* Set the calling thread's detail for handle c (hpl_errdetail) from fmt
 * and return code. */
int hpl__cfail(const hpl_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One request to the store and its reply. On success *out (if out is not
 * NULL) is the unpacked reply of the request's reply type, owned by the
 * caller; on failure the code, with the detail set. timeout_ms is the
 * store-side timeout (< 0: none); the client waits a little longer for the
 * store's own answer. */
int hpl__ccall(hpl_client *c, unsigned type, const ProtobufCMessage *m, int64_t timeout_ms,
               ProtobufCMessage **out);

/* The same for a request that names one object (IdReq). */
int hpl__cid_call(hpl_client *c, unsigned type, const char *id, int64_t timeout_ms,
                  ProtobufCMessage **out);

/* Return HPL_EINVAL from the calling function when c is NULL or id is not
 * a valid object id (with the detail set). */
#define CHECK_ID(c, id)                                                              \
  do {                                                                               \
    if (!(c)) return HPL_EINVAL;                                                     \
    if (!hpl__id_valid(id))                                                           \
      return hpl__cfail((c), HPL_EINVAL, "invalid object id (1-%d bytes, no control characters)", \
                  HPL_ID_MAX);                                                       \
  } while (0)

#endif
