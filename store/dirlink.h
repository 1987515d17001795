/*
 * dirlink.h - the store's connection to the directory.
 *
 * Requests get a request id and wait for their reply; while the link is
 * down they wait and are (re)sent, oldest first, once the store has
 * registered again, so a directory restart only delays them. Heartbeats are
 * requests too: one unanswered for three intervals marks the link dead and
 * it reconnects with backoff. On (re)registration the store re-reports what
 * it holds. Messages the directory starts (DROP, UPSTREAM_GONE, reduce
 * tasks) go to the handlers other modules install with hpl__dirlink_on().
 *
 * Callers: server.c (start, stop, handlers; hpl__dirlink_quiet as the
 * puller's quiet listener), fetch.c, put.c, lifetime.c, room.c, rdtask.c,
 * rdsink.c, ring.c (requests and notes), clients.c (proxied requests;
 * HELLO: the directory's address and parameters).
 */
#ifndef HPL_STORE_DIRLINK_H
#define HPL_STORE_DIRLINK_H

#include <stddef.h>
#include <stdint.h>

#include "objects.h"
#include "proto.h"
#include "store.h"

/* How a directory request ended. */
typedef struct hpl__dl_reply {
  int status;          /* 0, the directory's error, or a local one (HPL_ETIMEDOUT,
                          HPL_ECANCELED, HPL_EPROTO for a reply of a wrong type) */
  const char *detail;  /* why (never NULL; "" when nothing was said) */
  ProtobufCMessage *m; /* on status 0: the reply, always of the request's reply type
                          (hpl__msg_reply_type); NULL otherwise */
  const uint8_t *payload; /* its payload (valid during the call) */
  uint64_t plen;
} hpl__dl_reply;

/* Directory request completion (exactly once per request). */
typedef void (*hpl__dl_reply_cb)(hpl__store *s, const hpl__dl_reply *r, void *arg);

/* A message the directory starts (one-way; a DROP is acknowledged by the
 * link after the handler ran). */
typedef void (*hpl__dl_msg_fn)(hpl__store *s, ProtobufCMessage *m);

/* Start connecting (and keep reconnecting). Returns 0 or HPL_ENOMEM. */
int hpl__dirlink_start(hpl__store *s);
/* Stop: pending requests complete with HPL_ECANCELED. */
void hpl__dirlink_stop(hpl__store *s);
/* Free the link's state, after the loop has ended. */
void hpl__dirlink_free(hpl__store *s);

/* Route directory-started messages of `type` to fn (DROP, UPSTREAM_GONE,
 * REDUCE_TASK, REDUCE_SINK, REDUCE_END). */
void hpl__dirlink_on(hpl__store *s, unsigned type, hpl__dl_msg_fn fn);
/* fn runs after every (re)registration; restarted says the directory is a
 * new instance that lost its state. */
void hpl__dirlink_on_registered(hpl__store *s, void (*fn)(hpl__store *s, int restarted));

/* A copy this store is pulling from a peer, as its heartbeats report it
 * (`hoplite status`). */
typedef struct hpl__dl_incoming {
  const char *id;
  uint64_t sender, held, size;
  double rate; /* bytes/s */
} hpl__dl_incoming;

/* fn lists the copies arriving for each scheduled heartbeat: the first
 * `max` into out[] (ids valid until the loop runs again), returning how
 * many there are in all (hpl__fetch_incoming). */
void hpl__dirlink_on_incoming(hpl__store *s,
                              size_t (*fn)(hpl__store *s, hpl__dl_incoming *out, size_t max));
/* fn counts the local clients connected, for each heartbeat
 * (hpl__clients_count; none set: 0). */
void hpl__dirlink_on_clients(hpl__store *s, size_t (*fn)(const hpl__store *s));

/* Registered and connected. */
int hpl__dirlink_ready(hpl__store *s);

/* What the directory said of itself at the last registration (before
 * the first: the defaults, inline_max HPL__DEFAULT_INLINE_MAX, max_senders
 * 1, nothing taken). */
typedef struct hpl__dl_caps {
  uint32_t inline_max;  /* objects this small go to its inline cache */
  uint32_t max_senders;
  int quiet_notes;      /* it takes QUIET notes (hpl__dirlink_quiet) */
  int rings;            /* ... and RING requests (ring.c) */
  int publish;          /* ... and clients' PUBLISH (told in the clients' Hello) */
} hpl__dl_caps;
const hpl__dl_caps *hpl__dirlink_caps(const hpl__store *s);

/* Send a request; cb runs exactly once (reply, timeout after timeout_ms
 * (< 0: none), or HPL_ECANCELED at stop). Requests made while disconnected
 * wait and are sent after re-registration. The message is packed now and
 * payload (if any) copied. Returns 0, or HPL_ENOMEM (cb not called). */
int hpl__dirlink_request(hpl__store *s, unsigned type, const ProtobufCMessage *m,
                         const void *payload, uint64_t plen, int64_t timeout_ms,
                         hpl__dl_reply_cb cb, void *arg);

/* One-way note; dropped while disconnected (re-registration resyncs). */
void hpl__dirlink_note(hpl__store *s, unsigned type, const ProtobufCMessage *m);

/* A stream from node `peer` has been quiet for half its window: the
 * directory, if it takes QUIET notes, is told to probe it (counted in
 * quiet_notes). Returns 1 if the note went out, 0 if the directory takes
 * none. The puller's quiet listener (hpl__puller_on_quiet). */
int hpl__dirlink_quiet(hpl__store *s, uint64_t peer);

/* Notes every module sends: this node no longer holds (or pulls) `id`; its
 * copy of `id` is complete (rate: bytes/s of the pull that made it, 0 if
 * not measured). */
void hpl__dirlink_loc_remove(hpl__store *s, const char *id);
/* As hpl__dirlink_loc_remove, for a copy dropped because its unit `unit`
 * failed its digest when read back here (a spill file): the directory
 * treats it as a corrupt report against this node. */
void hpl__dirlink_loc_corrupt(hpl__store *s, const char *id, uint64_t unit);
void hpl__dirlink_loc_complete(hpl__store *s, const char *id, uint64_t rate);
/* LOC_NOTE(DIGESTS): the digests of o's units made since the last one
 * (objdig.c's made hook of a put; only once o is advertised). */
void hpl__dirlink_digests(hpl__store *s, hpl__obj *o);
/* A put of `id` whose bytes the client PUBLISHed failed here: the
 * directory forgets them unless this node confirmed them (kept like a
 * removal while the link is down). */
void hpl__dirlink_loc_retract(hpl__store *s, const char *id);
/* This node holds a copy of `id` (size bytes; complete, or the origin's
 * copy in progress): a LOC_ADD, whose refusal is logged (the caller marks
 * the object advertised). */
void hpl__dirlink_loc_add(hpl__store *s, const char *id, uint64_t size, int complete, int origin);
/* The copy of o being made here (a reduce target: its origin, not put)
 * is advertised, as a put's at create, with the algorithm of the digests
 * that will follow (`algo`, 0: none: the store runs --integrity off or o
 * is too large for a digest list), so receivers of the partial copy wait
 * for them; the digests known so far follow at once (LOC_NOTE DIGESTS),
 * the rest as they are made (o->dig's made hook: hpl__dirlink_digests). */
void hpl__dirlink_loc_made(hpl__store *s, hpl__obj *o, int algo);
/* The copy of o made here is complete: LOC_COMPLETE with its digests
 * (all of them and the root; none when it has none or they are not
 * complete). */
void hpl__dirlink_made_complete(hpl__store *s, hpl__obj *o);
/* A reduce target made here, its digests now made (an objdig ready
 * callback; arg unused): listed complete with them and sealed, unless the
 * reduce failed meanwhile (o gone from the table or no longer REDUCING). */
void hpl__dirlink_target_made(hpl__store *s, hpl__obj *o, void *arg);
/* A complete copy of o made here but not its origin (a ring allreduce's
 * target, made at every member): LOC_ADD with its digests (none when it
 * has none: the directory then takes this node's word that there are
 * none, unless another copy brought some). Marks o advertised. */
void hpl__dirlink_loc_add_made(hpl__store *s, hpl__obj *o);

/* The directory's numeric address and port as this store's link reaches
 * it. Returns 0, or -1 while not registered or if it does not fit. */
int hpl__dirlink_peer(hpl__store *s, char *addr, size_t alen, int *port);
/* The leader term of the directory registered with (0: none, or no
 * standby directories). */
uint64_t hpl__dirlink_term(const hpl__store *s);

#endif
