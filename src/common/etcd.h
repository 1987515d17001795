/*
 * etcd.h - a small, blocking client of etcd's v3 API through its JSON
 * gateway (HTTP POST to /v3/..., keys and values base64 in JSON), for the
 * directory's leader lease (directory/ha.c) and the tools that look up who
 * leads (`hoplite status`).
 *
 * Every call blocks for at most the handle's timeout per endpoint tried,
 * so it must never run on an event loop's thread: the directory calls it
 * before its loop starts (standing by) and from its lease thread. A handle
 * is used by one thread at a time. Endpoints are tried in turn: a call
 * that cannot reach one (connection refused, timeout, a 5xx answer) tries
 * the next, and the one that answered is tried first next time, so losing
 * one member of an etcd cluster costs one timeout, once.
 *
 * Errors: HPL_EINVAL (bad argument, a key or value too long), HPL_ENOMEM,
 * HPL_EUNAVAIL (no endpoint answered), HPL_EPROTO (an answer that is not
 * what the API documents, or an error etcd reported; logged),
 * HPL_ENOTFOUND (as each call says).
 */
#ifndef HPL_ETCD_H
#define HPL_ETCD_H

#include <stddef.h>
#include <stdint.h>

typedef struct hpl__etcd hpl__etcd;

/* Longest key and value this client sends or takes back, in bytes. */
#define HPL__ETCD_MAX_KEY 256
#define HPL__ETCD_MAX_VAL 1024

/* A client of the endpoints in `endpoints`: comma-separated URLs
 * ("http://127.0.0.1:2379,http://10.0.0.2:2379"; a bare "host:port" gets
 * http://), at most 8. `timeout_ms` bounds each request to one endpoint
 * (connecting included). *out is the caller's, freed with
 * hpl__etcd_free. HPL_EINVAL for an empty or malformed list. */
int hpl__etcd_new(const char *endpoints, uint32_t timeout_ms, hpl__etcd **out);
void hpl__etcd_free(hpl__etcd *e);

/* The endpoint that answered last (or the first one): owned by e. */
const char *hpl__etcd_endpoint(const hpl__etcd *e);

/* A new lease of `ttl_s` seconds: its id in *lease, the TTL etcd granted
 * (it may raise it to its minimum) in *granted_s (may be NULL). */
int hpl__etcd_lease_grant(hpl__etcd *e, int64_t ttl_s, int64_t *lease, int64_t *granted_s);

/* Renew `lease` once. *ttl_s gets the seconds it now has. HPL_ENOTFOUND:
 * the lease has expired or was revoked (it is gone for good). */
int hpl__etcd_lease_keepalive(hpl__etcd *e, int64_t lease, int64_t *ttl_s);

/* End `lease` now: the keys attached to it are deleted. 0 also when it
 * was gone already. */
int hpl__etcd_lease_revoke(hpl__etcd *e, int64_t lease);

/* Create `key` = `value` attached to `lease` (0: none), only if the key
 * does not exist, in one transaction. *created 1: created, at revision
 * *rev. *created 0: it existed; its value is copied into cur (cap bytes,
 * cut and always terminated; may be NULL), its create revision is in *rev
 * and its last modification's in *mod (may be NULL). */
int hpl__etcd_create(hpl__etcd *e, const char *key, const char *value, int64_t lease,
                     int *created, int64_t *rev, int64_t *mod, char *cur, size_t cap);

/* Only if `key` was last modified at revision `mod`: set it to `value`
 * attached to `lease` (put) or, with value NULL, delete it, in one
 * transaction. *done 1: done, and *rev (may be NULL) is the revision of
 * the change; 0: the key changed meanwhile (or is gone), nothing done. */
int hpl__etcd_swap(hpl__etcd *e, const char *key, int64_t mod, const char *value, int64_t lease,
                   int *done, int64_t *rev);

/* Set `key` = `value`, attached to `lease` (0: none). */
int hpl__etcd_put(hpl__etcd *e, const char *key, const char *value, int64_t lease);

/* The value of `key` into val (cap bytes, cut and terminated), its create
 * revision into *create_rev (may be NULL). HPL_ENOTFOUND: no such key. */
int hpl__etcd_get(hpl__etcd *e, const char *key, char *val, size_t cap, int64_t *create_rev);

/* Call fn(arg, key, value) for every key that starts with `prefix`, in
 * key order (at most 1000 of them). Key and value are valid during the
 * call only. */
int hpl__etcd_list(hpl__etcd *e, const char *prefix,
                   void (*fn)(void *arg, const char *key, const char *value), void *arg);

#endif
