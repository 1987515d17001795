/*
 * fetchint.h - what fetch.c, fetchans.c and fetchgrant.c share: a fetch's
 * record, the module's context, and the event dispatcher. Nothing outside
 * these files includes it.
 */
#ifndef HPL_STORE_FETCHINT_H
#define HPL_STORE_FETCHINT_H

#include <stdint.h>

#include "fetch.h"
#include "fetchsm.h"
#include "puller.h"
#include "room.h"
#include "uvtimer.h"

/* The module's context (s->fetches). */
typedef struct hpl__fetches {
  struct hpl__fetch *list;      /* every fetch (utlist) */
  struct hpl__late_grant *late; /* GRANTs held back by the fault point (fetchgrant.c; utlist) */
  uint64_t round;         /* the newest ask round (hpl__puller_asking; 0: none yet) */
  uint64_t round_ms;      /*   ...when its first fetch began asking */
  unsigned round_asking;  /*   ...its fetches in HPL__FETCH_ASK */
} hpl__fetches;

typedef struct hpl__fetch {
  struct hpl__fetch *prev, *next; /* s->fetches->list (utlist) */
  hpl__store *s;
  hpl__obj *o;            /* referenced */
  hpl__fetch_state state; /* changed by hpl__fetch_fire only */
  int asks;               /* directory requests whose answer is due */
  int busy;               /* hpl__fetch_fire calls under way (nested): do not free */
  hpl__puller *pull;
  uint64_t round;     /* the ask round it began asking in (0: never asked) */
  uint64_t sender;    /* node we pull (or pulled) from */
  uint64_t avoid;     /* sender to name as failed in the next ACQUIRE */
  int avoid_crawled;  /* ... because its stream crawled (a straggler) */
  int avoid_corrupt;  /* ... because a unit it sent failed its digest */
  uint64_t corrupt_unit; /* (that unit) */
  uint32_t insist;    /* suspect reports in a row without progress between */
  uint64_t insist_at; /* the object's progress at the last report */
  /* HPL__FETCH_ROOM: the answer kept while its buffer waits for room (room.c) */
  hpl__room room;
  Hplpb__AcquireRep held;
  char *held_addr;
  uint8_t *held_payload;   /* an inline answer's bytes */
  hpl__otimer grant_timer; /* HPL__FETCH_GRANT: how long the GRANT is waited for */
} hpl__fetch;

/* What an event brings along. */
typedef struct hpl__fetch_ctx {
  int status;                 /* HPL__FA_FAIL: the waiters' error */
  const char *detail;
  const Hplpb__AcquireRep *r; /* HPL__FA_PULL: the sender */
  uint64_t retry_ms;          /* HPL__FA_REARM: when to watch for silence again (0: a window) */
} hpl__fetch_ctx;

/* The one way a fetch changes: the transition for `ev` (fetchsm.c), logged
 * at debug level, then its actions. `f` stays valid during the call (also
 * when an action re-enters), and is freed at its end if it is over and
 * nothing is due any more: the caller must not use it after. */
void hpl__fetch_fire(hpl__fetch *f, hpl__fetch_event ev, const hpl__fetch_ctx *x);

/* A new fetch of `o` (state NEW; o->fetch set, a reference taken), or
 * NULL on no memory. Nothing happens until an event is fired. */
hpl__fetch *hpl__fetch_new(hpl__store *s, hpl__obj *o);

/* The event an answer to an ACQUIRE (or a GRANT) amounts to in f's
 * state, after adopting its generation, size and bytes; *x gets what the
 * event needs (detail[dlen] holds the failure's words). */
hpl__fetch_event hpl__fetch_answer(hpl__fetch *f, const hpl__dl_reply *rep, hpl__fetch_ctx *x,
                                   char *detail, size_t dlen);

/* The answer kept for HPL__FETCH_ROOM goes (fetchans.c). */
void hpl__fetch_held_free(hpl__fetch *f);

/* HPL__FA_GRANT_WAIT: wait HPL__FETCH_GRANT_WAIT_MS for the GRANT (fetchgrant.c),
 * then fire HPL__FEV_GRANT_LATE. */
void hpl__fetch_grant_wait(hpl__fetch *f);

/* The store stops: GRANTs the fault point holds back are dropped. */
void hpl__fetch_grants_stop(hpl__store *s);

#endif
