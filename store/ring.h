/*
 * ring.h - this node's part in ring allreduces.
 *
 * hpl_allreduce asks its store for a ring first (ReduceReq.ring). The
 * store asks the directory (RING), which answers once every participant
 * has joined with a source of its own (directory/ring.h), with the ring's
 * order. Member i then makes the target here, as the k members of a ring
 * all do: the target is cut into k slices (on element boundaries); member
 * i's outgoing stream is 2k-2 slices long, slice (i - s) mod k at step s.
 * Step 0 is its own source's slice; steps 1..k-1 are slices it has just
 * combined (its predecessor's partial sum of a slice plus its own source's
 * bytes), the last of them complete; steps k..2k-3 forward complete slices
 * as they arrive. The incoming stream from the predecessor lands straight
 * in the target's buffer at each slice's place and is combined there in
 * place, so byte x of the outgoing stream is ready once byte x - (slice i's
 * length) of the incoming one is: the ring is one pipeline. Each node
 * sends and receives 2(k-1)/k of the object, against 2x for a reduce
 * followed by a broadcast.
 * Each unit of the outgoing stream is digested here as it becomes final
 * (rddig.c) and each unit of the incoming one is checked against its
 * maker's digests before it is combined or passed on (ringin.c); a bad
 * unit fails this member's part as corrupt (the ring ends, see below).
 *
 * The target is in the object table while it is being made (HPL__OBJ_REDUCING,
 * not advertised: local gets wait for it). A target that does not fit in
 * the pool waits up to RING_ROOM_MS (ring.c) while idle copies are let go
 * (room.h); our successor's pull of our stream waits for it meanwhile. Complete, it is sealed and
 * advertised as a complete copy (LOC_ADD), the directory is told (RING_NOTE
 * status 0) and the client is answered. A member whose incoming stream
 * fails, or stays silent for HPL__RING_QUIET_MS (ringint.h), tells the directory, which
 * ends the ring everywhere (RING_END); the clients then reduce the usual
 * way, which has the whole of the failure handling. Requests the ring
 * cannot serve are answered HPL_EUNAVAIL at once.
 *
 * Callers: clients.c (REDUCE with ring), server.c (RING_END, registration,
 * stop). The data port serves the outgoing stream through its source
 * (hpl__source, objects.h).
 */
#ifndef HPL_STORE_RING_H
#define HPL_STORE_RING_H

#include <stdint.h>

#include "hoplite.pb-c.h"
#include "objects.h"
#include "store.h"
#include "session.h"

/* A client's REDUCE with ring set (m->target checked by the caller or
 * here). Answered with a REDUCE_REP: status 0 once the target is complete
 * here, HPL_EUNAVAIL when no ring runs (joined set: one ran, so the target
 * may exist or still be made here), or the request's own failure. */
void hpl__ring_request(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__ReduceReq *m);

/* RING_END from the directory: the ring is over (status 0) or abandoned. */
void hpl__ring_on_end(hpl__store *s, ProtobufCMessage *msg);

/* The directory link registered again: rings it knew are void. */
void hpl__ring_directory_lost(hpl__store *s);

/* Make the module's context (0 or HPL_ENOMEM); end every ring (store
 * stopping: clients are answered HPL_ECANCELED); free the context once
 * the loop has ended. */
int hpl__ring_init(hpl__store *s);
void hpl__ring_stop(hpl__store *s);
void hpl__ring_free(hpl__store *s);

#endif
