/*
 * publish.h - small objects local clients PUBLISH to the directory ahead
 * of their store's put (served at once; confirmed by the store's
 * INLINE_PUT of the same bytes), kept within bounds: the named store must
 * be a live node on the publishing client's host; each client connection
 * and each node have a quota of bytes and objects published and not yet
 * confirmed; what a client published and its store never confirmed is
 * forgotten 10 s after that client's connection closed.
 *
 * Callers: server.c (PUBLISH, start/stop/free, connections closing),
 * locs.c (INLINE_PUT confirms, LOC_NOTE retracts).
 */
#ifndef HPL_DIR_PUBLISH_H
#define HPL_DIR_PUBLISH_H

#include <stdint.h>

#include "server.h"

/* Quotas of bytes published and not confirmed: per node (the flag
 * --publish-quota, this by default) and per client connection (a quarter of
 * the node's); objects per connection at most. */
#define HPL__DIR_PUBLISH_NODE_QUOTA (64ull << 20)
#define HPL__DIR_PUBLISH_CONN_OBJECTS 4096u
/* An unconfirmed publish of a client that left is forgotten after this. */
#define HPL__DIR_PUBLISH_ORPHAN_MS 10000u

/* Make the module's state and its timer (0 or HPL_ENOMEM); stop the timer;
 * free the state once the loop has ended. */
int hpl__dir_publish_start(hpl__dir_server *s);
void hpl__dir_publish_stop(hpl__dir_server *s);
void hpl__dir_publish_free(hpl__dir_server *s);

/* PUBLISH, from a client (any connection, readers' included; one-way, or
 * answered when it carries a request id): a small object's bytes, sent
 * while the client's PUT of them goes to its store (InlinePutReq.node).
 * Taken only for an object nobody has put yet, naming a live node on the
 * client's host, within the quotas: it is served at once, marked as
 * `node`'s until that node's INLINE_PUT of the same bytes confirms it
 * (then it is an ordinary inline object with that copy), or that node's
 * LOC_RETRACT note - its put failed - forgets it again. Anything else is
 * refused (HPL_EUNAVAIL with why, when answered; counted). */
void hpl__dir_publish_on(hpl__dir_server *s, const hpl__dir_frame *f);

/* Node `node`'s INLINE_PUT of `id` (len bytes): 1 if it confirmed that
 * node's publish of the same bytes (the object is now an ordinary inline
 * one with the node's copy); else 0 (the put goes on, and finds the id
 * taken if it was published for another node or with other bytes: bytes
 * once served never change). */
int hpl__dir_publish_inline_put(hpl__dir_server *s, uint64_t node, const char *id,
                                const uint8_t *bytes, uint64_t len);

/* Node `node` says its put of o failed: its unconfirmed publish of o is
 * forgotten (waiters wait for a new put; o may be freed). */
void hpl__dir_publish_retract(hpl__dir_server *s, uint64_t node, hpl__dir_obj *o);

/* A client connection closed: what it published and nobody confirmed is
 * forgotten HPL__DIR_PUBLISH_ORPHAN_MS from now unless confirmed by then. */
void hpl__dir_publish_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc);

#endif
