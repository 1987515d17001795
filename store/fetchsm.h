/*
 * fetchsm.h - the states of getting an object this node lacks, as a pure
 * transition function (no I/O), so every transition is unit-tested
 * (tests/test_fetchsm.c). fetch.c drives it: it turns directory answers
 * and pull outcomes into events and carries out the actions.
 *
 *   ASK ---sender---> PULL ---pulled---> END (sealed, directory told)
 *    |  \              |  \--crawl / suspect--> MOVE --move-to / move-none--> PULL
 *    |   inline->END   |                |
 *    |                 pull failed / upstream gone (also from MOVE)
 *    |                 v
 *    |               RESUME --sender--> PULL   (keeps the bytes it holds)
 *    |
 *    deleted (from any state) --> ORPHAN: answers still on their way are undone
 *
 * Callers: fetch.c, tests/test_fetchsm.c.
 */
#ifndef HPL_STORE_FETCHSM_H
#define HPL_STORE_FETCHSM_H

typedef enum fetch_state {
  FETCH_ASK,    /* the first ACQUIRE is out; nothing held, no location */
  FETCH_RESUME, /* ACQUIRE out again after losing a sender; holds a location
                   at the directory and maybe bytes */
  FETCH_PULL,   /* streaming from a sender */
  FETCH_MOVE,   /* streaming from a crawling partial sender, and asked for an
                   idle complete copy to move to; or from a silent sender, and
                   reported it (the directory names another or says stay) */
  FETCH_ORPHAN, /* deleted: answers still on their way are undone */
  FETCH_END,    /* over (sealed, failed, dropped); later answers are stale */
  FETCH_NSTATES
} fetch_state;

typedef enum fetch_event {
  FEV_SENDER,        /* an answer names a sender (buffer ready) */
  FEV_INLINE,        /* an answer carries the bytes (object now sealed) */
  FEV_TIMEOUT,       /* an ask timed out */
  FEV_REFUSED,       /* an ask failed (lost, no memory at the directory, ...) */
  FEV_BAD_SENDER,    /* an answer named a sender but cannot be used (size
                        changed, no room in the pool, malformed) */
  FEV_PULLED,        /* the pull completed */
  FEV_PULL_FAILED,   /* the pull broke, stalled, straggled, or did not start */
  FEV_UPSTREAM_GONE, /* the directory says our sender is dead */
  FEV_CRAWL,         /* the partial sender crawls */
  FEV_SUSPECT,       /* the sender has delivered nothing for a quiet window */
  FEV_MOVE_TO,       /* answer to the crawl: a complete sender to move to */
  FEV_MOVE_NONE,     /* answer to the crawl: no complete copy is idle */
  FEV_DROPPED,       /* the object was deleted */
  FEV_DRAIN,         /* this store is leaving */
  FEV_NEVENTS
} fetch_event;

/* Actions, carried out by fetch.c in this order. */
enum {
  FA_CANCEL_PULL = 1 << 0,    /* stop the current pull */
  FA_NOTE_COMPLETE = 1 << 1,  /* tell the directory our copy is complete */
  FA_SEAL = 1 << 2,           /* the object is complete: wake the waiters */
  FA_FAIL = 1 << 3,           /* the object will not arrive: fail the waiters */
  FA_LOC_REMOVE = 1 << 4,     /* tell the directory we hold no copy */
  FA_FORGET = 1 << 5,         /* take the object out of the table */
  FA_ASK = 1 << 6,            /* ACQUIRE (naming the failed sender, if any) */
  FA_ASK_COMPLETE = 1 << 7,   /* ACQUIRE only_complete (move off a crawler) */
  FA_PULL = 1 << 8,           /* start pulling from the sender named */
  FA_ASK_SUSPECT = 1 << 9,    /* ACQUIRE suspect (the sender went silent) */
};

/* Inputs besides the event. */
enum {
  FIN_WAITERS_LEFT = 1 << 0, /* some waiter can still wait after a timed-out ask */
};

/* The state after `ev` in `st` given inputs `in`; *actions gets what to do.
 * An event that does not apply to a state (a stale answer) leaves it as it
 * is with no actions. */
fetch_state fetch_next(fetch_state st, fetch_event ev, unsigned in, unsigned *actions);

const char *fetch_state_name(fetch_state st);
const char *fetch_event_name(fetch_event ev);

#endif
