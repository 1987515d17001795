/* ccall.c - the client library's requests to its store (capi.h): one
 * request and its reply, or a batch of them pipelined on the store
 * connection (crpc.h), each reply read into its outcome and the batch's
 * first failure kept with its detail; one-way notes. */
#include <stdio.h>
#include <stdlib.h>

#include "capi.h"

/* Grace added to the store's own timeouts before the client gives up on a
 * store that does not answer at all. */
#define CLIENT_GRACE_MS 2000
/* How long a one-way note (PROGRESS, RELEASE) may take to go out. */
#define CLIENT_NOTE_MS 5000

/* The detail of an exchange with the store that failed in the RPC layer
 * (rc: HPL_ETIMEDOUT, HPL_ECONN or HPL_ENOMEM) after waiting up to
 * waited_ms. */
static int rpc_failed(hpl_client *c, int rc, unsigned type, int64_t waited_ms) {
  const char *why = hpl__crpc_broken(c->st.rpc);
  const char *peer = c->admin ? "the directory" : "the store"; /* an admin handle's is */
  if (rc == HPL_ETIMEDOUT)
    return hpl__cfail(c, rc, "%s did not answer %s within %lld ms%s%s", peer, hpl__msg_name(type),
                (long long)waited_ms, why ? "; the connection broke: " : "", why ? why : "");
  if (rc == HPL_ECONN)
    return hpl__cfail(c, rc, "the connection to %s is closed: %s", peer, why ? why : "?");
  return hpl__cfail(c, rc, "out of memory for %s", hpl__msg_name(type));
}

/* ------------------------------------------------------------------ a batch's outcome */

void hpl__cbatch_init(hpl__cbatch *b, const char *const *ids, size_t n, int *rcs) {
  b->n = n;
  b->ids = ids;
  b->rcs = rcs;
  b->first = n;
  b->why[0] = 0;
}

void hpl__cbatch_set(hpl__cbatch *b, size_t i, int rc) {
  b->rcs[i] = rc;
  if (rc && i < b->first) {
    b->first = i;
    snprintf(b->why, sizeof b->why, "%s", hpl__cfail_msg());
  }
}

int hpl__cbatch_end(hpl_client *c, hpl__cbatch *b) {
  if (b->first == b->n) return 0;
  if (!b->ids || b->n == 1) return hpl__cfail(c, b->rcs[b->first], "%s", b->why);
  return hpl__cfail(c, b->rcs[b->first], "'%s' (%zu of %zu): %s", b->ids[b->first], b->first + 1,
              b->n, b->why);
}

int hpl__cbatch_open(hpl_client *c, hpl__cbatch *b, const char *const *ids, size_t n, int *rcs,
                     const void *other) {
  if (!c) return HPL_EINVAL;
  if (n && (!ids || !rcs || !other)) return hpl__cfail(c, HPL_EINVAL, "NULL array");
  if (n > HPL__CRPC_MAX_BATCH)
    return hpl__cfail(c, HPL_EINVAL, "%zu requests in one call (at most %d)", n,
                      HPL__CRPC_MAX_BATCH);
  hpl__cbatch_init(b, ids, n, rcs);
  return 0;
}

hpl__cslot *hpl__cbatch_slots(hpl_client *c, hpl__cbatch *b, size_t *k) {
  *k = 0;
  hpl__cslot *s = b->n ? (b->n <= 64 ? hpl__zalloc(b->n * sizeof *s) : calloc(b->n, sizeof *s)) : NULL;
  for (size_t i = 0; i < b->n; i++) {
    if (!s)
      hpl__cbatch_set(b, i, hpl__cfail(c, HPL_ENOMEM, "out of memory"));
    else if (!hpl__id_valid(b->ids[i]))
      hpl__cbatch_set(b, i,
                hpl__cfail(c, HPL_EINVAL, "invalid object id (1-%d bytes, no control characters)",
                           HPL_ID_MAX));
    else
      s[(*k)++].item = i;
  }
  return s;
}

void hpl__cslots_free(hpl__cslot *s, size_t k) {
  for (size_t j = 0; s && j < k; j++)
    if (s[j].out) protobuf_c_message_free_unpacked(s[j].out, NULL);
  free(s);
}

/* ------------------------------------------------------------------ requests and replies */

/* The outcome of `rep` (taken), the reply to a request of `type`: 0 with
 * *out (if out is not NULL) the unpacked reply of the request's reply type,
 * owned by the caller; else the code, with the detail set. Every reply
 * message starts with status and detail, so a generic Reply decodes the
 * outcome of any of them. */
int hpl__creply(hpl_client *c, unsigned type, hpl__crpc_msg *rep, ProtobufCMessage **out) {
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

void hpl__ccalls(hpl_client *c, hpl__cslot *s, size_t n, int64_t timeout_ms, hpl__cbatch *b) {
  if (n == 0) return;
  size_t bad = 0; /* an admin handle sends only what the directory answers it */
  while (bad < n && hpl__cadmin_allows(c, s[bad].req.type)) bad++;
  if (bad < n) { /* nothing of the batch goes out */
    for (size_t j = 0; j < n; j++) {
      s[j].out = NULL;
      hpl__cbatch_set(b, s[j].item, hpl__cadmin_refuse(c, hpl__msg_name(s[bad].req.type)));
    }
    return;
  }
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
      rc = hpl__creply(c, type, &rep, hpl__msg_reply_type(type) == HPL__MSG_REPLY ? NULL : &s[j].out);
    hpl__cbatch_set(b, s[j].item, rc);
  }
  if (reqs != &one_req) free(reqs);
  if (t != &one_t) free(t);
}

int hpl__ccall_with(hpl_client *c, unsigned type, const ProtobufCMessage *m, const void *payload,
                    uint64_t plen, int64_t timeout_ms, ProtobufCMessage **out) {
  int rc;
  hpl__cbatch b;
  hpl__cbatch_init(&b, NULL, 1, &rc);
  hpl__cslot s = {.req = {.type = type, .m = m, .payload = payload, .plen = plen}};
  hpl__ccalls(c, &s, 1, timeout_ms, &b);
  if (rc == 0 && out) *out = s.out;
  else if (s.out) protobuf_c_message_free_unpacked(s.out, NULL);
  return rc;
}

int hpl__ccall(hpl_client *c, unsigned type, const ProtobufCMessage *m, int64_t timeout_ms,
                ProtobufCMessage **out) {
  return hpl__ccall_with(c, type, m, NULL, 0, timeout_ms, out);
}

void hpl__cfollow_directory(hpl_client *c) {
  if (!hpl__cdirect_lost(c->direct)) return;
  Hplpb__DirWhereReq r = HPLPB__DIR_WHERE_REQ__INIT;
  Hplpb__Hello *h = NULL;
  if (hpl__ccall(c, HPL__MSG_DIR_WHERE, &r.base, 1000, (ProtobufCMessage **)&h) == 0 && h)
    hpl__cdirect_moved(c->direct, h->dir_addr, (int)h->dir_port, h->dir_publish, h->dir_term);
  if (h) protobuf_c_message_free_unpacked(&h->base, NULL);
}

int hpl__cid_call(hpl_client *c, unsigned type, const char *id, int64_t timeout_ms,
                   ProtobufCMessage **out) {
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = (char *)id;
  r.timeout_ms = timeout_ms;
  return hpl__ccall(c, type, &r.base, timeout_ms, out);
}

hpl__cslot *hpl__cid_calls(hpl_client *c, hpl__cbatch *b, unsigned type, int64_t timeout_ms,
                           size_t *k) {
  hpl__cslot *s = hpl__cbatch_slots(c, b, k);
  for (size_t j = 0; j < *k; j++) {
    hplpb__id_req__init(&s[j].m.id);
    s[j].m.id.id = (char *)b->ids[s[j].item];
    s[j].m.id.timeout_ms = timeout_ms;
    s[j].req = (hpl__crpc_req){.type = type, .m = &s[j].m.id.base};
  }
  hpl__ccalls(c, s, *k, timeout_ms, b);
  return s;
}

/* ------------------------------------------------------------------ notes */

int hpl__cnote(hpl_client *c, unsigned type, const ProtobufCMessage *m) {
  if (!hpl__cadmin_allows(c, type)) return hpl__cadmin_refuse(c, hpl__msg_name(type));
  int rc = hpl__crpc_send(c->st.rpc, type, m, hpl__deadline_ms(CLIENT_NOTE_MS));
  return rc ? rpc_failed(c, rc, type, CLIENT_NOTE_MS) : 0;
}

void hpl__crelease(hpl_client *c, uint64_t handle) {
  Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
  r.handle = handle;
  hpl__cnote(c, HPL__MSG_RELEASE, &r.base);
}
