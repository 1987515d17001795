/*
 * putcheck.h - what a whole PUT (an object of at most the inline limit,
 * its bytes with the request) is checked for before a put begins: its
 * announced size against the bytes that came and its lifetime, and the
 * case of bytes this store already holds because a get here fetched them
 * from the client's own PUBLISH before the PUT came.
 *
 * Callers: put.c (hpl__put_whole).
 */
#ifndef HPL_STORE_PUTCHECK_H
#define HPL_STORE_PUTCHECK_H

#include <stdint.h>

#include "proto.h"
#include "session.h"
#include "store.h"

/* 0 if PUT `m` with plen payload bytes may go on; else the refusal
 * (HPL_EINVAL: sizes disagree, or a lifetime out of range) was sent to the
 * client as the reply to `req` and is returned. */
int hpl__putcheck_whole(hpl__stclient *cl, uint64_t req, const Hplpb__PutReq *m,
                        uint64_t plen);

/* A PUT of bytes the client PUBLISHed, of an object this store holds a
 * copy of already with the same bytes: the directory decides with an
 * INLINE_PUT, confirming bytes it took from our client's PUBLISH (the put
 * succeeds), else the object was someone else's put (HPL_EEXIST, as for
 * any put of an id that exists). Returns 1 if asked (the client's reply to
 * `req` follows from the directory's answer; `payload` is copied before
 * the call returns), 0 if this is not such a PUT (or no memory): the caller
 * puts it as usual. */
int hpl__putcheck_held(hpl__store *s, hpl__stclient *cl, uint64_t req,
                       const Hplpb__PutReq *m, const uint8_t *payload,
                       uint64_t plen);

#endif
