/*
 * cdirect.h - small objects read straight from the directory.
 *
 * The directory holds objects of at most inline_max bytes itself. A get of
 * one that this node certainly does not hold (its slot in the store's
 * presence filter is 0) reads it from the directory with one PEEK over TCP:
 * two process wake-ups (directory, caller) instead of four (store,
 * directory, store, caller). Anything else - not inline, not there yet, no
 * connection yet and the calling thread in another network namespace than
 * the store, any failure - and the get goes to the store as usual, so this
 * path never fails a get. A larger object the directory grants to the
 * store with the same PEEK (it names a sender to the store unasked), so
 * the store's get of it starts pulling without asking the directory again.
 * A small put is published to the directory over the same connection while
 * it goes to the store, so gets waiting for it skip the store's hop.
 *
 * Used by hpl_get, hpl_put and their batch forms (client.c); frames go
 * through the RPC layer (crpc.h).
 */
#ifndef HPL_CDIRECT_H
#define HPL_CDIRECT_H

#include <stdint.h>

#include "cstore.h"

typedef struct hpl__cdirect hpl__cdirect;

/* A small object read from the directory: `size` bytes at `data`, which
 * points into `own`, a malloc'd buffer the caller owns (free(own)). */
typedef struct hpl__cdirect_obj {
  uint8_t *own;
  uint8_t *data;
  uint64_t size;
} hpl__cdirect_obj;

/* The direct path for store `s` (its filter, directory address, network
 * namespace and inline_max are copied; the filter's mapping must outlive
 * the result). Connects lazily,
 * on the first get. NULL when the store gave nothing to work with (no
 * filter, no directory address, an address that does not parse) or memory
 * is short: every get then goes to the store. */
hpl__cdirect *hpl__cdirect_new(const hpl__cstore *s);

/* Close the directory connection and free. NULL is a no-op. No call on d
 * may be running. */
void hpl__cdirect_free(hpl__cdirect *d);

/* With standby directories (the store's Hello gave a leader term): 1 once
 * a connection to the directory has failed since the last call, so the
 * caller asks its store where the directory is now (DIR_WHERE) and tells
 * hpl__cdirect_moved; 0 otherwise (and always without standbys). Any
 * thread; NULL: 0. */
int hpl__cdirect_lost(hpl__cdirect *d);

/* The store says the directory is at addr:port (numeric), leading in
 * `term`, taking PUBLISH if `publish`. A different address with a term not
 * older than the one known becomes the one direct reads use, at once (no
 * backoff); an older term is ignored (a deposed leader). Any thread (it
 * waits for the exchange under way). NULL d or addr: no-op. */
void hpl__cdirect_moved(hpl__cdirect *d, const char *addr, int port, int publish, uint64_t term);

/* Try to read objects ids[0..n) from the directory, their PEEKs pipelined
 * on one connection, giving up at `deadline` or after DIRECT_WAIT_MS
 * (cdirect.c), whichever is first; an object that does not exist yet is
 * waited for at the directory for up to half of what is left until
 * `deadline` (at most DIRECT_PEEK_WAIT_MS), and while one call waits there
 * the others go to the store at once. found[i] says what became of ids[i]
 * (HPL__DIRECT_*: out[i] is set, owned by the caller, only where it is
 * HPL__DIRECT_FOUND; d == NULL: all HPL__DIRECT_ASK_STORE). Returns how
 * many were found. Thread-safe; exchanges
 * are serialised. A connection that failed in any way is closed, the next
 * get connects again; after a failure the path backs off (250 ms doubling
 * to 30 s) and every get goes to the store meanwhile. */
/* What hpl__cdirect_get_many found for an id (found[i]). */
enum {
  HPL__DIRECT_ASK_STORE = 0, /* ask the store (nothing to free) */
  HPL__DIRECT_FOUND = 1,     /* out[i] holds the bytes */
  HPL__DIRECT_GRANTED = 2,   /* ask the store with GetReq.granted: the directory named
                                it a sender already (a larger object) */
};

size_t hpl__cdirect_get_many(hpl__cdirect *d, const char *const *ids, size_t n, uint64_t deadline,
                             hpl__cdirect_obj *out, int *found);

/* One request `m` of `type` (STAT) about object `id` straight to the
 * directory, when this node's store certainly does not hold the object
 * (its presence filter slot is 0; else its own notes to the directory
 * might still be on the way, and the store's answer is the ordered one).
 * 0 and the reply frame in *out (owned by the caller, hpl__crpc_msg_free;
 * its status is the directory's), or -1: ask the store (nothing to free;
 * d == NULL, backing off, another exchange under way, or the connection
 * failed, which is then closed and backed off from as for gets). Waits at
 * most until `deadline` and DIRECT_WAIT_MS. Thread-safe. */
int hpl__cdirect_call(hpl__cdirect *d, const char *id, unsigned type, const ProtobufCMessage *m,
                      uint64_t deadline, hpl__crpc_msg *out);

/* Publish small objects to the directory with one-way PUBLISHes, sent in
 * as few writes as the socket takes, just before the caller's PUTs of the
 * same bytes go to the store, so gets waiting at the directory have them
 * without waiting for the store. Item i is ids[i], sizes[i] bytes at
 * data[i] (only read during the call); it is published if published[i] is
 * nonzero on entry and it is at most inline_max bytes. Only when the store
 * said the directory takes them (Hello.dir_publish), the path is not
 * backing off, and no other exchange is under way (it never waits for
 * one); connects first if need be (the calling thread in the store's
 * network namespace). On return published[i] is 1 where the PUBLISH went
 * out - that PUT must then carry PutReq.published, so the store takes it
 * back if the put fails - else 0 (all 0 when d is NULL). Returns how many
 * went out. Thread-safe. */
size_t hpl__cdirect_publish(hpl__cdirect *d, const char *const *ids, const void *const *data,
                            const uint64_t *sizes, size_t n, int *published);

#endif
