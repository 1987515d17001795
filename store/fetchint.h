/*
 * fetchint.h - what fetch.c and fetchgrant.c share: a fetch's record, the
 * module's context, and the event dispatcher. Nothing outside these two
 * files includes it.
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
typedef struct st_fetches {
  struct st_fetch *list;   /* every fetch (utlist) */
  struct late_grant *late; /* GRANTs held back by the fault point (fetchgrant.c; utlist) */
} st_fetches;

typedef struct st_fetch {
  struct st_fetch *prev, *next; /* s->fetches->list (utlist) */
  store *s;
  st_obj *o;          /* referenced */
  fetch_state state;  /* changed by fetch_fire only */
  int asks;           /* directory requests whose answer is due */
  int busy;           /* fetch_fire calls under way (nested): do not free */
  st_puller *pull;
  uint64_t sender;    /* node we pull (or pulled) from */
  uint64_t avoid;     /* sender to name as failed in the next ACQUIRE */
  int avoid_crawled;  /* ... because its stream crawled (a straggler) */
  uint32_t insist;    /* suspect reports in a row without progress between */
  uint64_t insist_at; /* the object's progress at the last report */
  /* FETCH_ROOM: the answer kept while its buffer waits for room (room.c) */
  st_room room;
  Hplpb__AcquireRep held;
  char *held_addr;
  uint8_t *held_payload; /* an inline answer's bytes */
  hpl__otimer grant_timer; /* FETCH_GRANT: how long the GRANT is waited for */
} st_fetch;

/* What an event brings along. */
typedef struct fetch_ctx {
  int status;                 /* FA_FAIL: the waiters' error */
  const char *detail;
  const Hplpb__AcquireRep *r; /* FA_PULL: the sender */
  uint64_t retry_ms;          /* FA_REARM: when to watch for silence again (0: a window) */
} fetch_ctx;

/* The one way a fetch changes: the transition for `ev` (fetchsm.c), logged
 * at debug level, then its actions. `f` stays valid during the call (also
 * when an action re-enters), and is freed at its end if it is over and
 * nothing is due any more: the caller must not use it after. */
void fetch_fire(st_fetch *f, fetch_event ev, const fetch_ctx *x);

/* A new fetch of `o` (state NEW; o->fetch set, a reference taken), or
 * NULL on no memory. Nothing happens until an event is fired. */
st_fetch *fetch_new(store *s, st_obj *o);

/* The event an answer to an ACQUIRE (or a GRANT) amounts to in f's
 * state, after adopting its generation, size and bytes; *x gets what the
 * event needs (detail[dlen] holds the failure's words). */
fetch_event fetch_answer(st_fetch *f, const dl_reply *rep, fetch_ctx *x, char *detail,
                         size_t dlen);

/* FA_GRANT_WAIT: wait FETCH_GRANT_WAIT_MS for the GRANT (fetchgrant.c),
 * then fire FEV_GRANT_LATE. */
void fetch_grant_wait(st_fetch *f);

/* The store stops: GRANTs the fault point holds back are dropped. */
void fetch_grants_stop(store *s);

#endif
