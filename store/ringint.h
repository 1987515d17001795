/*
 * ringint.h - the ring module's own record of a member's part (ring.h),
 * shared by its two files: ring.c (forming, the outgoing stream and its
 * digests, ending) and ringin.c (the incoming stream: pulled into the
 * target, each unit checked against the digests its maker sends before it
 * is combined or passed on). Nothing outside store/ring*.c includes it.
 */
#ifndef HPL_STORE_RINGINT_H
#define HPL_STORE_RINGINT_H

#include <stdint.h>
#include <uthash.h>

#include "objects.h"
#include "puller.h"
#include "rdver.h"
#include "room.h"
#include "session.h"
#include "store.h"

/* The incoming stream silent this long: the ring fails. */
#define HPL__RING_QUIET_MS 1000

/* A member's part: asking the directory for the plan, running (making
 * the target, serving its stream), complete here (serving on until the
 * ring ends). */
enum { HPL__RG_ASKING = 0, HPL__RG_RUNNING = 1, HPL__RG_COMPLETE = 2 };

typedef struct hpl__rg_task {
  UT_hash_handle hh; /* s->rings->hash, by target */
  hpl__store *s;
  char target[HPL_ID_MAX + 1];
  char key[HPL_ID_MAX + 64]; /* this member's outgoing stream */
  hpl__creq q;
  hpl__creq *more; /* further callers on this node: answered with q */
  uint32_t nmore;
  int answered; /* the clients have their answer */
  int state;    /* HPL__RG_* */
  uint64_t rid; /* 0 until the plan came */
  uint32_t idx, k, pred;
  int op, dtype;
  size_t es;
  uint64_t size;
  uint64_t *seg;    /* k + 1 slice boundaries in the target */
  uint64_t *in_at;  /* 2k - 1 step starts of the incoming stream (the last: its length) */
  uint64_t out_len; /* of the outgoing stream */
  uint64_t in_raw;  /* incoming bytes landed in the target (not checked yet) */
  uint64_t in_ok;   /* incoming bytes checked against their digests (or not checked) */
  uint64_t in_done; /* incoming bytes in place and combined */
  int in_pulled;    /* the pull of the incoming stream completed */
  uint64_t start_ms; /* when the plan came */
  uint64_t last_in_ms, gap_ms, gap_at; /* the longest pause of the incoming stream */
  hpl__obj *src, *t, *out; /* referenced */
  hpl__puller *pull;
  hpl__rdver *ver;     /* the incoming stream's digests (NULL: not checked) */
  hpl__rdver_job *job; /* a check of its units on the thread pool ... */
  uint64_t job_u1;     /*   up to this unit */
  char pred_addr[64];   /* the predecessor's data port */
  uint32_t pred_port;
  uint64_t pred_node;
  hpl__room room;         /* the target waiting for room (room.queued) */
  hpl__source source;     /* out->source: its bytes are pieces of t and src */
} hpl__rg_task;

/* Slice of member j's stream at step st. */
static inline uint32_t hpl__rg_step_slice(const hpl__rg_task *g, uint32_t j, uint32_t st) {
  return (uint32_t)(((uint64_t)j + (uint64_t)g->k * 2 - st) % g->k);
}

static inline uint64_t hpl__rg_slice_len(const hpl__rg_task *g, uint32_t i) {
  return g->seg[i + 1] - g->seg[i];
}

/* The step of the incoming stream byte `pos` is in (binary search). */
static inline uint32_t hpl__rg_in_step(const hpl__rg_task *g, uint64_t pos) {
  uint32_t lo = 0, hi = 2 * g->k - 2; /* in_at[lo] <= pos < in_at[hi] */
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (g->in_at[mid] <= pos) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* ring.c: this member's part failed (the directory ends the ring
 * everywhere; the clients reduce the usual way); with `corrupt_unit` not
 * UINT64_MAX, because that unit of the incoming stream failed its digest
 * (the directory counts the predecessor as corrupt). Frees g. */
void hpl__ring_fail(hpl__rg_task *g, int status, const char *detail, uint64_t corrupt_unit);

/* ring.c: the target is complete and checked here: sealed, advertised,
 * the directory told, the clients answered. */
void hpl__ring_complete(hpl__rg_task *g);

/* ringin.c: pull the predecessor's stream `key` into the target, with its
 * digests when --integrity is on here. 0, or an HPL_E* code with why. */
int hpl__ring_in_start(hpl__rg_task *g, const char *key, char *why, size_t wlen);

/* ringin.c: stop pulling and checking (the task goes). */
void hpl__ring_in_stop(hpl__rg_task *g);

#endif
