/* cobjects.c - what libhoplite asks about objects, and deleting them
 * (include/hoplite.h): hpl_contains, hpl_held_bytes, hpl_stat and
 * hpl_stat_many, hpl_delete and hpl_delete_many. */
#include "capi.h"

int hpl_contains(hpl_client *c, const char *id, int64_t timeout_ms, int *out_local) {
  HPL__NOT_ADMIN(c);
  HPL__CHECK_ID(c, id);
  Hplpb__ContainsRep *rep = NULL;
  int rc = hpl__cid_call(c, HPL__MSG_CONTAINS, id, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  if (out_local) *out_local = rep->local ? 1 : 0;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

int hpl_held_bytes(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t *held,
                   uint64_t *size) {
  HPL__NOT_ADMIN(c);
  HPL__CHECK_ID(c, id);
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
  HPL__CHECK_ID(c, id);
  Hplpb__StatRep *rep = NULL;
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = (char *)id;
  r.timeout_ms = timeout_ms;
  hpl__crpc_msg m;
  hpl__cfollow_directory(c);
  /* an object this node does not hold: asked of the directory directly,
   * one hop instead of two (cdirect.h) */
  int rc = timeout_ms != 0 && hpl__cdirect_call(c->direct, id, HPL__MSG_STAT, &r.base,
                                                hpl__deadline_ms(timeout_ms), &m) == 0
               ? hpl__creply(c, HPL__MSG_STAT, &m, (ProtobufCMessage **)&rep)
               : hpl__cid_call(c, HPL__MSG_STAT, id, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  if (size) *size = rep->size;
  if (copies) *copies = rep->copies;
  if (complete) *complete = rep->complete;
  if (is_inline) *is_inline = rep->inline_ ? 1 : 0;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

int hpl_delete(hpl_client *c, const char *id, int64_t timeout_ms) {
  HPL__CHECK_ID(c, id);
  return hpl__cid_call(c, HPL__MSG_DELETE, id, timeout_ms, NULL);
}


int hpl_stat_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                  uint64_t *sizes, int *rcs) {
  hpl__cbatch b;
  int rc = hpl__cbatch_open(c, &b, ids, n, rcs, ids);
  if (rc) return rc;
  size_t k;
  hpl__cslot *s = hpl__cid_calls(c, &b, HPL__MSG_STAT, timeout_ms, &k);
  for (size_t j = 0; sizes && j < k; j++)
    if (s[j].out) sizes[s[j].item] = ((Hplpb__StatRep *)s[j].out)->size;
  hpl__cslots_free(s, k);
  return hpl__cbatch_end(c, &b);
}

int hpl_delete_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                    int *rcs) {
  hpl__cbatch b;
  int rc = hpl__cbatch_open(c, &b, ids, n, rcs, ids);
  if (rc) return rc;
  size_t k;
  hpl__cslot *s = hpl__cid_calls(c, &b, HPL__MSG_DELETE, timeout_ms, &k);
  hpl__cslots_free(s, k);
  return hpl__cbatch_end(c, &b);
}
