/*
 * lifetime.h - objects put with a lifetime (issue 14): owned by the client
 * that put them, or with a TTL.
 *
 *  - Owned: the store remembers, per client session, the instances the
 *    client sealed with `owned`. When the session's connection closes
 *    (hpl_close, or the process died), each of them still in the table is
 *    deleted cluster-wide: the store sends the directory the DELETE a
 *    client would (IdReq), and the directory sends DROP to every holder,
 *    this store included.
 *  - TTL: the store that sealed the object keeps a min-heap of (deadline,
 *    instance) with one uv timer for the earliest deadline; an object whose
 *    TTL ran out is deleted the same way.
 *
 * Deletes are made at most HPL__LIFETIME_BATCH per loop turn and at most
 * HPL__LIFETIME_INFLIGHT wait for the directory at once. Objects are named by
 * instance handle, never by id: one deleted meanwhile by someone else (or
 * deleted and put again under the same id) is simply skipped. While the
 * directory is unreachable the deletes wait in the link's queue
 * (hpl__dirlink_request) and go out once the store has registered again; a
 * directory that answers "no such object" while our copy is still here (it
 * restarted and has not taken our re-report yet) is asked again a little
 * later.
 *
 * A store that stops (SIGTERM, SIGINT) deletes nothing for the clients it
 * disconnects: they did not leave, the store did.
 *
 * Counters: owned_deletes, ttl_deletes (deletes the directory carried out).
 *
 * Depends on objects.c, dirlink.c and session.h (the session's list).
 * Callers: put.c (sealed), clients.c (a client left), server.c (start, stop,
 * free).
 */
#ifndef HPL_STORE_LIFETIME_H
#define HPL_STORE_LIFETIME_H

#include <stdint.h>

#include "objects.h"
#include "store.h"
#include "session.h"

/* The longest TTL a put may ask for (30 days, as HPL_TTL_MAX_MS). */
#define HPL__LIFETIME_TTL_MAX_MS (30ull * 24 * 3600 * 1000)
/* Deletes started per loop turn, and waiting for the directory at once. */
#define HPL__LIFETIME_BATCH 256
#define HPL__LIFETIME_INFLIGHT 1024

/* 0 if a put may ask for this TTL, else HPL_EINVAL with a detail. */
int hpl__lifetime_check(uint64_t ttl_ms, char *detail, size_t dlen);

/* The client's put of `o` was sealed here (o in the table, HPL__OBJ_SEALED):
 * remember it as owned by `cl` (deleted at once if cl has already left)
 * and/or due for deletion ttl_ms from now (0: none). Out of memory, the
 * object is kept and a warning logged. */
void hpl__lifetime_sealed(hpl__store *s, hpl__stclient *cl, hpl__obj *o, int owned,
                          uint64_t ttl_ms);

/* The client's connection closed: its owned objects are due now. */
void hpl__lifetime_client_gone(hpl__store *s, hpl__stclient *cl);

/* Timer set-up (0 or HPL_ESYS); close it (hpl__store_stop); free what is
 * left once the loop ended. */
int hpl__lifetime_init(hpl__store *s);
void hpl__lifetime_stop(hpl__store *s);
void hpl__lifetime_free(hpl__store *s);

#endif
