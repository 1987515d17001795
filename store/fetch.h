/*
 * fetch.h - getting an object this node lacks: ask the directory for a
 * sender, pull from it (resuming from the bytes held when a sender fails,
 * stalls, crawls or dies), hand the object over to its waiters, tell the
 * directory. The states and transitions are in fetchsm.h; this module
 * carries them out.
 *
 * A fetch holds a reference on its object and hangs off it (o->fetch)
 * until it ends; waiters are told through the object (objects.h).
 *
 * Callers: get.c (start), rdsink.c (a reduce target made elsewhere),
 * server.c (directory messages, drain, stop).
 */
#ifndef HPL_STORE_FETCH_H
#define HPL_STORE_FETCH_H

#include <stdint.h>

#include "dirlink.h"
#include "objects.h"
#include "store.h"

/* Start fetching `o` (state HPL__OBJ_FETCHING, no fetch running): ask the
 * directory, waiting as long as the latest of its waiters would. */
void hpl__fetch_start(hpl__store *s, hpl__obj *o);

/* As hpl__fetch_start, for a GET whose client was told by the directory that
 * it granted `o` to this store (GetReq.granted): the GRANT, sent before
 * that answer, is waited for up to HPL__FETCH_GRANT_WAIT_MS (it may come after
 * the GET), then the directory is asked as usual. */
#define HPL__FETCH_GRANT_WAIT_MS 200
void hpl__fetch_start_granted(hpl__store *s, hpl__obj *o);

/* A GRANT from the directory (an AcquireRep naming the object in `id`):
 * a sender for an object a client of ours read directly and will GET. It
 * starts the fetch (the object enters the table with nobody waiting yet;
 * the client's GET joins it), or answers a fetch from hpl__fetch_start_granted.
 * Ignored when the object is held (its copy completing here frees the
 * sender) or its fetch asked already (the directory answers that ACQUIRE
 * with the granted sender). A dirlink handler. */
void hpl__fetch_on_grant(hpl__store *s, ProtobufCMessage *m);

/* DIGESTS from the directory: more digests of an object this store pulls
 * while its origin writes it; received bytes they cover count now
 * (fetchgrant.c; server.c installs it). */
void hpl__fetch_on_digests(hpl__store *s, ProtobufCMessage *m);

/* The directory says node `peer`, which we pull `id` from, is dead (or,
 * with suspect, does not answer): move to another sender, keeping the bytes.
 * With regroup, peer is fine but our place behind it went to another
 * receiver (our copy was reported corrupt and is no longer named): ask
 * again without avoiding it. A note for a pull from another peer is
 * stale and ignored. No errors. */
void hpl__fetch_upstream_gone(hpl__store *s, const char *id, uint64_t peer, int suspect,
                              int regroup);

/* `o` was deleted: fail its waiters (HPL_ENOTFOUND), stop, forget it. */
void hpl__fetch_dropped(hpl__store *s, hpl__obj *o);

/* The directory deleted `id` (a DROP, or the answer to a DELETE this store
 * sent with drops_here): our copy, if any, goes; clients holding it keep
 * reading it until they release; a fetch of it ends (hpl__fetch_dropped).
 * Returns 1 if there was a copy, else 0. */
int hpl__fetch_deleted(hpl__store *s, const char *id);

/* The fetches with a pull running, the first `max` of them into out[]
 * (ids valid until the loop runs again). Returns how many there are among
 * the first HPL__FETCH_INCOMING_WALK fetches (pulling or not). For heartbeats
 * (hpl__dirlink_on_incoming). */
#define HPL__FETCH_INCOMING_WALK 4096
size_t hpl__fetch_incoming(hpl__store *s, hpl__dl_incoming *out, size_t max);

/* The store is leaving: stop every pull (answers still due are let be). */
void hpl__fetch_drain(hpl__store *s);

/* Make the module's context (0 or HPL_ENOMEM). The store stops: end every
 * pull and free every fetch; call after the directory link has stopped
 * (its answers are in). Free the context once the loop has ended. */
int hpl__fetch_init(hpl__store *s);
void hpl__fetch_stop(hpl__store *s);
void hpl__fetch_free(hpl__store *s);

#endif
