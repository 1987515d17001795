/*
 * handoff.h - what a new directory learns from this store besides its
 * copies: the deletes this store learned of lately (tombstones), and the
 * sources of the reduces whose target this store made (the sink).
 *
 * A directory that takes over (a standby that leads, or a restarted one)
 * starts without the old one's tombstones and finished reduces. The stores
 * re-report them first at every registration (dlheld.c, HeldNote.tombs and
 * .reduces), so the new directory does not bring a deleted object back
 * from a copy that missed its DROP, and answers hpl_reduce_sources for a
 * reduce that ended before or during the handoff.
 *
 *  - Tombstones: an id deleted through this store (clients.c: the answer
 *    to a forwarded DELETE; lifetime.c's deletes go the same way) or whose
 *    copy the directory told us to DROP (server.c) is remembered for
 *    HPL__TOMB_MS, at most HPL__HANDOFF_TOMBS_MAX (the oldest forgotten
 *    first, counted in handoff_tombs_dropped). A put of the id here ends it.
 *  - Reduces: the request and the sources the tree used, from the
 *    REDUCE_SINK that names them all (sent once every slot is filled, again
 *    when a slot moves to another source; rdsink.c), re-reported once the
 *    target is complete here, at most HPL__HANDOFF_REDUCES_MAX and
 *    HPL__HANDOFF_REDUCE_BYTES in all (oldest forgotten first, counted).
 *    Only kept when the sink knows every used source; a delete of the
 *    target forgets it.
 *
 * Owns its state (s->handoff). Callers: server.c (init, free, DROP),
 * clients.c (a forwarded DELETE), put.c (a new put), rdsink.c (a target
 * made), dlheld.c (reading them back piece by piece).
 */
#ifndef HPL_STORE_HANDOFF_H
#define HPL_STORE_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "store.h"

#define HPL__HANDOFF_TOMBS_MAX 65536
#define HPL__HANDOFF_REDUCES_MAX 4096
#define HPL__HANDOFF_REDUCE_BYTES (64u << 20)

/* The module's state: 0 or HPL_ENOMEM. Free it at the end. */
int hpl__handoff_init(hpl__store *s);
void hpl__handoff_free(hpl__store *s);

/* `id` was deleted (this store learned it now): remembered as a tombstone
 * (out of memory: not remembered, logged); a reduce record of it goes. */
void hpl__handoff_deleted(hpl__store *s, const char *id);

/* `id` was put here again: its tombstone (if any) ends. */
void hpl__handoff_put(hpl__store *s, const char *id);

/* The reduce into `target` is made here (the sink), from these sources:
 * `req`/`req_len`, the packed ReduceReq the sink sent; `used`/`nused`, the
 * sources in the tree's slots, in slot order (REDUCE_SINK). Kept (replacing
 * an earlier list) only when nused equals the request's num_objects (or its
 * number of sources) and each is among the request's sources; otherwise
 * nothing changes. Re-reported only while the target is complete here.
 * Copies what it keeps. Forget: the reduce failed or is made elsewhere. */
void hpl__handoff_reduce_sources(hpl__store *s, const char *target, const uint8_t *req,
                                 size_t req_len, char *const *used, size_t nused);
void hpl__handoff_reduce_forget(hpl__store *s, const char *target);

/* Reading back, oldest first, from after *cursor (0: from the start):
 * fills at most max entries (ids and requests point into the module's
 * state or are allocated: release with hpl__handoff_reduces_done) and
 * moves *cursor past them. Tombstones older than HPL__TOMB_MS are
 * skipped (and forgotten). Reduces whose target is no longer held here
 * (is_held says) are skipped. Both return the number filled. */
size_t hpl__handoff_tombs(hpl__store *s, uint64_t *cursor, Hplpb__HeldTomb *out, size_t max);
size_t hpl__handoff_reduces(hpl__store *s, uint64_t *cursor, Hplpb__HeldReduce *out, size_t max,
                            size_t max_bytes, int (*is_held)(hpl__store *s, const char *id));
void hpl__handoff_reduces_done(Hplpb__HeldReduce *out, size_t n);

#endif
