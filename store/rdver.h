/*
 * rdver.h - a reduce stream's digests at its receiver: fetched from the
 * node that makes the stream over a connection of their own to its data
 * port (PULL with PullReq.digests, answered as units are hashed: rddig.c),
 * each reply in a MAC'd frame message, so a relay can change neither the
 * digests nor, unnoticed, the bytes; and the check of a received unit
 * against them. Memory: 32 bytes per digest unit of the stream (at most
 * 128 units up to 8 MiB, one per 128 KiB above: hpl__digest_unit).
 *
 * Callers: rdcombine.c (a task's children's streams, checked here),
 * ring.c (a ring member's incoming stream: hpl__rdver_check_job, on the
 * thread pool),
 * rdsink.c (the root's stream into the target: hpl__rdver_into hands the
 * digests to the target's objdig record, and the puller checks them).
 */
#ifndef HPL_STORE_RDVER_H
#define HPL_STORE_RDVER_H

#include <stddef.h>
#include <stdint.h>

#include "objects.h"
#include "puller.h"
#include "store.h"

typedef struct hpl__rdver hpl__rdver;

typedef struct hpl__rdver_ops {
  /* Digests of units [first, first + n) arrived (n 0: the stream has
   * none, algorithm 0, and its bytes count unchecked). */
  void (*more)(void *arg, uint64_t first, uint64_t n);
  /* They cannot be had (the sender refused, or 10 connections in a row
   * broke): the stream's bytes past the last checked unit never count.
   * No call after this one. */
  void (*failed)(void *arg, int status, const char *detail);
} hpl__rdver_ops;

/* Start fetching the digests of stream `key` (`internal`: a reduce
 * stream, else an object) of `size` bytes from addr:port, from unit
 * `first` on. NULL on a bad address or no memory. A connection that
 * breaks is made again after 100 ms (from the next unit). */
hpl__rdver *hpl__rdver_start(hpl__store *s, const char *addr, int port, const char *key,
                             int internal, uint64_t size, uint64_t first,
                             const hpl__rdver_ops *ops, void *arg);

/* The stream of a pull into object `o` with progress (the sink's pull of
 * the root's stream into the target), from o->progress (a unit boundary):
 * o->dig is made (or its known digests cut back to o's progress), and the
 * digests fetched go to it (objdig.h hpl__objdig_more), after which *pull
 * (the owner's, NULL between pulls: the digests then wait for the next
 * one) checks what it holds (hpl__puller_digests_more). A sender without
 * digests (algorithm 0): o->dig goes and the bytes count unchecked.
 * failed() as in hpl__rdver_ops, with `arg`. Returns 0 with *out (NULL
 * when --integrity is off here: nothing is checked), or HPL_ENOMEM. */
int hpl__rdver_into(hpl__store *s, hpl__obj *o, const char *addr, int port, const char *key,
                    int internal, hpl__puller *const *pull,
                    void (*failed)(void *arg, int status, const char *detail), void *arg,
                    hpl__rdver **out);

/* Stop (ops are not called any more) and free. NULL is a no-op. */
void hpl__rdver_cancel(hpl__rdver *v);

/* The algorithm (HPL__DIGEST_*), or -1 while the first answer is awaited. */
int hpl__rdver_algo(const hpl__rdver *v);
/* Units [first, known) have their digest here. */
uint64_t hpl__rdver_first(const hpl__rdver *v);
uint64_t hpl__rdver_known(const hpl__rdver *v);
/* The digests of units [u, known) (NULL if u is not in [first, known)). */
const uint8_t *hpl__rdver_digests(const hpl__rdver *v, uint64_t u);
/* The stream key and the sender's address, for logs. */
const char *hpl__rdver_key(const hpl__rdver *v);

/* Check unit `u` of the stream (its `len` bytes at `bytes`): 1 if it
 * matches (or the algorithm is 0), 0 if not, -1 if its digest has not
 * arrived yet (more() tells when it does). On the loop: one unit, ~0.1 ms
 * with SHA-NI. */
int hpl__rdver_check(const hpl__rdver *v, uint64_t u, const uint8_t *bytes, size_t len);

/* A check of units on libuv's thread pool (a ring's incoming stream,
 * ring.c: its bytes are hashed off the loop). */
typedef struct hpl__rdver_job hpl__rdver_job;

/* Check units [u0, u1) of the stream, whose digests must be here
 * ([first, known); their algorithm not 0), on the thread pool. Their
 * bytes are found now, on the loop, with at(arg, pos, &n): a pointer to
 * stream byte `pos` and in *n how many of the wanted *n bytes lie there
 * contiguously (up to 8 pieces a unit). The job copies what it needs, so
 * `v` may be cancelled meanwhile; it holds a reference on each object in
 * keep[0..2) (NULL: none) while it reads their buffers. done(arg, bad)
 * runs on the loop once it is over: bad is the first unit that did not
 * match its digest, or UINT64_MAX when all did. Returns the job, or NULL
 * (no memory, or at() found no bytes: nothing is checked, done() is not
 * called). */
hpl__rdver_job *hpl__rdver_check_job(hpl__rdver *v, uint64_t u0, uint64_t u1,
                                     const uint8_t *(*at)(void *arg, uint64_t pos, uint64_t *n),
                                     hpl__obj *const keep[2],
                                     void (*done)(void *arg, uint64_t bad), void *arg);

/* The owner does not want the verdict (it goes): done() is not called;
 * the job frees itself when the thread pool is through with it. */
void hpl__rdver_job_drop(hpl__rdver_job *j);

#endif
