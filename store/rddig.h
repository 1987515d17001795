/*
 * rddig.h - a reduce stream's digests at the node that makes it: each
 * digest unit of a task's output stream is hashed (libuv's thread pool)
 * as the combined bytes become final, and the data port answers a
 * receiver's digest request (PullReq.digests) from them. Unit boundaries
 * are the stream's byte offsets from the start of the output. The digests
 * live in the output object's o->dig (objdig.h's record; `first` and
 * `epoch` are this module's), freed with the object. A stream with a
 * source (o->source->bytes_at: a ring's, whose bytes are pieces of its
 * target and source) is read through it: each unit's pieces are found on
 * the loop, and the job holds a reference on the source's keep objects.
 *
 * Callers: rdtask.c and rdcombine.c (a task's output: restarts, progress),
 * ring.c and ringin.c (a ring member's outgoing stream),
 * dataport.c (answering digest requests, also of ordinary objects, from
 * the digests objdig.c keeps).
 */
#ifndef HPL_STORE_RDDIG_H
#define HPL_STORE_RDDIG_H

#include <stddef.h>
#include <stdint.h>

#include "hoplite.pb-c.h"
#include "objects.h"
#include "store.h"

/* Digests per answer: 64 (2 KiB of message, 8 MiB of stream). */
#define HPL__RDDIG_PER_REPLY 64u

/* The output stream `o` (buffer allocated) is made (again) from byte
 * `base` on (UINT64_MAX: from a byte not known yet, no digest is
 * answered until the next reset): its digests start over from the unit at
 * or above base; jobs of the previous start are dropped when they end.
 * Nothing with the store's --integrity off or a stream too large for a
 * digest list (then receivers are told algorithm 0). 0 or HPL_ENOMEM. */
int hpl__rddig_reset(hpl__store *s, hpl__obj *o, uint64_t base);

/* Bytes of `o` up to `to` (from its last reset's base) are final: whole
 * units among them (and the last, short one at o->size) are hashed on the
 * thread pool, up to four jobs of 64 units at once (each holds a
 * reference on o). Watchers of o are woken when more digests are known
 * (hpl__obj_notify). */
void hpl__rddig_made(hpl__store *s, hpl__obj *o, uint64_t to);

/* The answer to a digest request for `o` (a stream, or an ordinary object
 * with digests) from unit `first`: 1 with r's size and digest fields set
 * (r->digests points into o->dig: send it at once), 0 if no digest from
 * `first` on is known yet (watch o and ask again; also below where the
 * stream is made from: the receiver's pull of the bytes from there makes
 * it again), or HPL_EINVAL with a detail when the unit lies beyond the
 * end. An object without digests answers algorithm 0. */
int hpl__rddig_answer(const hpl__obj *o, uint64_t first, Hplpb__PullRep *r, char *detail,
                      size_t dlen);

#endif
