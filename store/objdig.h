/*
 * objdig.h - an object's digests in the store: made here for a local put
 * (on libuv's thread pool, units hashed as the client's progress notes
 * cover them and the rest at seal), taken from the directory's answer for a
 * copy got from elsewhere, and checked unit by unit before received bytes
 * count (puller.c). The digests live in
 * o->dig, one flat allocation that objlife.c frees with the object.
 *
 * Callers: put.c (origin), dirlink.c (sending them), fetch.c and
 * fetchgrant.c (a copy's digests from AcquireRep / DIGESTS), puller.c
 * (verifying received units), room.c and dpfile.c (spilled bytes read
 * back). No state of its own beyond the objects'.
 */
#ifndef HPL_STORE_OBJDIG_H
#define HPL_STORE_OBJDIG_H

#include <stdint.h>

#include "digest.h"
#include "hoplite.pb-c.h"
#include "objects.h"
#include "store.h"

/* o->dig: owned by the object (objlife.c frees it with free()). */
typedef struct hpl__objdig {
  uint8_t algo;      /* HPL__DIGEST_SHA256 or _FAST */
  uint8_t complete;  /* every unit's digest and the root are known */
  uint8_t sealed;    /* origin: all bytes written, hash the rest */
  uint8_t inflight;  /* origin: hashing jobs on the thread pool */
  uint64_t nunits;
  uint64_t next;     /* origin: units [0, next) are hashed or being hashed */
  uint64_t done;     /* origin: units whose hash finished */
  uint64_t written;  /* origin: units the client's progress covers */
  uint64_t known;    /* units [0, known) have their digest here (receiver: from the
                        directory; origin: hashed, all jobs below done) */
  uint64_t sent;     /* origin: units [0, sent) told to the directory */
  uint64_t have;     /* receiver: bytes [0, have) are in the buffer (those past
                        progress not verified yet: a pull that broke mid-unit) */
  uint64_t job_u0[4]; /* origin: first unit of each job in flight (UINT64_MAX: free) */
  uint64_t first;    /* a reduce stream (rddig.c): units below it are not made here
                        (UINT64_MAX: where the stream starts is not known yet); 0 else */
  uint32_t epoch;    /* a reduce stream: counts restarts; older jobs' results are dropped */
  void (*ready)(hpl__store *s, hpl__obj *o, void *arg); /* origin: all made */
  void *ready_arg;
  void (*made)(hpl__store *s, hpl__obj *o); /* origin: `known` grew */
  uint8_t root[HPL__DIGEST_LEN];
  uint8_t list[]; /* nunits * HPL__DIGEST_LEN */
} hpl__objdig;

/* Origin: o (a local put, buffer allocated) gets digests of `algo` (the
 * store's --integrity); nothing for algo off or an object too large for a
 * digest list (HPL__DIGEST_MAX_UNITS units). 0 or HPL_ENOMEM. */
int hpl__objdig_begin(hpl__store *s, hpl__obj *o, int algo);

/* Origin: made(s, o) runs each time more units' digests are known (for
 * the directory: dirlink.c hpl__dirlink_digests). */
void hpl__objdig_on_made(hpl__obj *o, void (*made)(hpl__store *s, hpl__obj *o));

/* Origin: the client's bytes [0, bytes) are final: full units among them
 * are hashed on the thread pool (a few jobs at a time; each holds a
 * reference on o). */
void hpl__objdig_written(hpl__store *s, hpl__obj *o, uint64_t bytes);

/* Origin: all bytes are written. Returns 1 if the digests are complete
 * now (or o has none; or no job is running and at most 64 KiB were left to
 * hash, which are hashed here, on the loop: every small put), else 0 and
 * ready(s, o, arg) is called once they are (from a thread-pool completion
 * on the loop). hpl__objdig_forget takes the callback back. */
int hpl__objdig_seal(hpl__store *s, hpl__obj *o,
                     void (*ready)(hpl__store *s, hpl__obj *o, void *arg), void *arg);
void hpl__objdig_forget(hpl__obj *o);

/* o's bytes start over (a reduce target's new generation): its digests
 * go, unless jobs still hash the old bytes (then they stay, told to no
 * one, and are cut back by the next hpl__rdver_into). */
void hpl__objdig_drop(hpl__obj *o);

/* An object made in this store (a reduce target) whose bytes are all
 * written but whose digests are not all known (the root's task wrote it
 * here, or the stream it came in had none): they are made of its bytes
 * now, `algo` (the store's --integrity), on the thread pool, as a sealed
 * put's are (hpl__objdig_begin + hpl__objdig_seal; digests kept from
 * before go: the new list covers every unit). Returns 1 if they are
 * complete now (or o gets none: algo off, too large, no memory - logged),
 * else 0 and ready(s, o, arg) runs on the loop once they are. */
int hpl__objdig_make_all(hpl__store *s, hpl__obj *o, int algo,
                         void (*ready)(hpl__store *s, hpl__obj *o, void *arg), void *arg);

/* Point the digest fields of a message at o's digests (algo 0 and empty
 * when it has none, or they are not complete yet: then only the algorithm
 * with `algo_only`). The pointers stay valid while o lives. */
void hpl__objdig_to_wire(const hpl__obj *o, int algo_only, uint32_t *algo,
                         ProtobufCBinaryData *list, ProtobufCBinaryData *root);

/* Receiver: whether a copy of an object of `size` bytes got here must be
 * checked (this store's --integrity is on and the object is neither empty
 * nor too large for a digest list): then a sender named without digests
 * is refused unless the directory says the object has none
 * (AcquireRep.digests_none). */
int hpl__objdig_needed(const hpl__store *s, uint64_t size);

/* Receiver: more digests (units [first, first + n) in `list`, the root
 * once all are known) from the directory's DIGESTS note. 0, or
 * HPL_EPROTO with a detail (they do not fit, or the root is wrong). */
int hpl__objdig_more(hpl__obj *o, uint64_t first, const ProtobufCBinaryData *list,
                     const ProtobufCBinaryData *root, char *detail, size_t dlen);

/* Receiver: take the digests a directory answer names for o, an object
 * of `size` bytes (its buffer may wait for room still): all of them with
 * the root, or the first units' while the origin still writes (the rest
 * come with DIGESTS notes). Nothing if o has digests already or algo is 0.
 * 0, or HPL_EPROTO with a detail when they do not fit o (too many, root
 * not over the list, unknown algorithm), or HPL_ENOMEM. */
int hpl__objdig_take(hpl__obj *o, uint64_t size, uint32_t algo, const ProtobufCBinaryData *list,
                     const ProtobufCBinaryData *root, char *detail, size_t dlen);

/* Receiver: bytes [0, have) of o are in its buffer, [0, o->progress)
 * verified before. Returns how far they are verified now (a unit
 * boundary, or o->size; never past the units whose digests are known):
 * units that arrived whole are checked (each at
 * most HPL__DIGEST_UNIT bytes, on the loop: ~0.1 ms with SHA-NI). On a
 * unit that does not match: returns the end of the units before it and
 * sets *bad to 1 and *bad_unit. Without digests: `have`. */
uint64_t hpl__objdig_verify(hpl__obj *o, uint64_t have, int *bad, uint64_t *bad_unit);

/* Check the units of an object of `size` bytes that lie wholly in `buf`,
 * which holds its bytes [off, off + len) (off a unit boundary; the last
 * unit may be short only at the object's end), against d's digests;
 * units whose digest is not known are not checked. Pure (no loop, no
 * state changed): a thread-pool job may call it while d does not change
 * (complete digests never do). 1 if all match, else 0 and *bad_unit. */
int hpl__objdig_check_span(const hpl__objdig *d, uint64_t size, const uint8_t *buf, uint64_t off,
                           uint64_t len, uint64_t *bad_unit);

/* Check all of o's bytes (in o->data, read back from a spill file) against
 * its known digests on libuv's thread pool; o is referenced meanwhile and
 * its buffer must not change. done(s, o, bad, unit, arg) runs on the loop
 * (bad 0: every known unit matches). Returns 1 when there is nothing to
 * check (no digests: done is not called), 0 when queued, or HPL_ENOMEM /
 * HPL_ESYS (done is not called). */
int hpl__objdig_check_all(hpl__store *s, hpl__obj *o,
                          void (*done)(hpl__store *s, hpl__obj *o, int bad, uint64_t unit,
                                       void *arg),
                          void *arg);

/* Receiver: where a new pull of o starts: its progress, or past it the
 * bytes a broken pull left in the buffer (checked once their unit is
 * whole), so nothing is received twice. */
uint64_t hpl__objdig_resume_at(const hpl__obj *o);

#endif
