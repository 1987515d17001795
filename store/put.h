/*
 * put.h - a local client's put: CREATE reserves the object's room in the
 * pool (a large object is announced to the directory first, so receivers
 * can pull what the client has written before the seal), the client writes
 * it in its own memory and the store copies it into the pool from there
 * (putcopy.h) as far as PROGRESS says it is final, SEAL has the rest copied,
 * then makes it complete and registers it (small objects go to the
 * directory's inline cache), ABORT or the client leaving takes it back.
 * A client never writes the pool.
 *
 * A put hangs off its object (o->put) and its client (cl->puts) and holds
 * a reference on both until it ends.
 *
 * A PUT is the three in one for an object of at most the inline limit:
 * its bytes come with the request, the object is sealed at once and the
 * client hears once, with a Reply, when the directory took it (or why
 * not). Having arrived whole, a PUT is carried out even if its client
 * leaves before the answer; an object a client was still writing or
 * sealing goes with the client.
 *
 * Callers: clients.c (dispatch, a client leaving).
 */
#ifndef HPL_STORE_PUT_H
#define HPL_STORE_PUT_H

#include <stdint.h>

#include "proto.h"
#include "store.h"
#include "session.h"

void hpl__put_create(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__CreateReq *m);
void hpl__put_progress(hpl__store *s, hpl__stclient *cl, Hplpb__ProgressNote *m);
void hpl__put_seal(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__HandleReq *m);
/* PUT: `payload` (plen bytes, which must be m->size) is the object. */
void hpl__put_whole(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__PutReq *m,
                    const uint8_t *payload, uint64_t plen);
/* Answers once the directory has forgotten the copy (req 0: no answer). */
void hpl__put_abort(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__HandleReq *m);

/* The client left: every put it had not sealed is aborted. */
void hpl__put_client_gone(hpl__store *s, hpl__stclient *cl);

/* The bytes of small puts that may be on their way to the directory's
 * inline cache at once (cfg.inline_inflight, at the store's start):
 * `asked` (--inline-inflight) if given; else, on a link of `link_rate`
 * bits/s, 0.5 ms of it, at most 128 KiB; 128 KiB if the rate is not
 * known (0). putseal.c says why. */
uint64_t hpl__put_inline_budget(uint64_t asked, uint64_t link_rate);

#endif
