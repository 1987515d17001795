/*
 * fetchsm.h - the states of getting an object this node lacks, as a pure
 * transition function (no I/O), so every transition is unit-tested
 * (tests/test_fetchsm.c). fetch.c drives it: it turns a GET's start,
 * directory answers, timers, room in the pool and pull outcomes into
 * events and carries out the actions.
 *
 *   NEW --start--> ASK ---sender---> PULL ---pulled---> END (sealed, directory told)
 *    |              |  \              |  \--crawl--> MOVE_CRAWL ---move-to / move-none--> PULL
 *    |              |   inline->END   |  \--suspect--> MOVE_SUSPECT --move-to / move-none--> PULL
 *    granted        |                 |                |
 *    v              room-wait         pull failed / upstream gone (also from MOVE_*)
 *   GRANT --grant-late--> ASK         v
 *    |  (the GRANT itself:        RESUME --sender--> PULL   (keeps the bytes it holds)
 *    |   an answer, as in ASK)
 *    room-wait (from NEW, GRANT, ASK, RESUME)
 *    v
 *   ROOM --sender--> PULL, --inline--> END (the answer, once its buffer has room)
 *
 *   deleted (from any state but END) --> ORPHAN: answers still on their way are undone
 *
 * Callers: fetch.c, tests/test_fetchsm.c.
 */
#ifndef HPL_STORE_FETCHSM_H
#define HPL_STORE_FETCHSM_H

typedef enum fetch_state {
  FETCH_NEW,    /* made; nothing asked yet */
  FETCH_GRANT,  /* a granted GET (the directory named a sender to this store
                   already): waiting for that GRANT, at most FETCH_GRANT_WAIT_MS */
  FETCH_ASK,    /* the first ACQUIRE is out; nothing held, no location */
  FETCH_RESUME, /* ACQUIRE out again after losing a sender; holds a location
                   at the directory and maybe bytes */
  FETCH_ROOM,   /* an answer named a sender (or carried the bytes) and its
                   buffer waits for room in the pool; the answer is kept */
  FETCH_PULL,   /* streaming from a sender */
  FETCH_MOVE_CRAWL,   /* streaming from a crawling partial sender; asked for an
                         idle complete copy to move to */
  FETCH_MOVE_SUSPECT, /* streaming from a silent sender; reported it (the
                         directory names another or says stay) */
  FETCH_ORPHAN, /* deleted: answers still on their way are undone */
  FETCH_END,    /* over (sealed, failed, dropped); later answers are stale */
  FETCH_NSTATES
} fetch_state;

typedef enum fetch_event {
  FEV_START,         /* a GET wants the object: ask the directory */
  FEV_GRANTED,       /* a granted GET wants it: wait for the directory's GRANT */
  FEV_GRANT_LATE,    /* the GRANT did not come in time */
  FEV_SENDER,        /* an answer names a sender (buffer ready) */
  FEV_INLINE,        /* an answer carries the bytes (object now sealed) */
  FEV_ROOM_WAIT,     /* an answer's buffer has to wait for room in the pool */
  FEV_TIMEOUT,       /* an ask timed out */
  FEV_REFUSED,       /* an ask failed (lost, no memory at the directory, ...) */
  FEV_BAD_SENDER,    /* an answer named a sender but cannot be used (size
                        changed, no room in the pool, malformed) */
  FEV_PULLED,        /* the pull completed */
  FEV_PULL_FAILED,   /* the pull broke, stalled, straggled, or did not start */
  FEV_UPSTREAM_GONE, /* the directory says our sender is dead */
  FEV_CRAWL,         /* the partial sender crawls */
  FEV_SUSPECT,       /* the sender has delivered nothing for a quiet window */
  FEV_MOVE_TO,       /* answer to the crawl or silence: a sender to move to */
  FEV_MOVE_NONE,     /* answer to the crawl or silence: stay */
  FEV_MOVE_UNSENT,   /* the crawl's or silence's report could not be sent */
  FEV_DROPPED,       /* the object was deleted */
  FEV_DRAIN,         /* this store is leaving */
  FEV_NEVENTS
} fetch_event;

/* Actions, carried out by fetch.c in this order. */
enum {
  FA_GRANT_STOP = 1 << 0,     /* stop waiting for the GRANT (its timer) */
  FA_UNROOM = 1 << 1,         /* stop waiting for room (the kept answer goes) */
  FA_CANCEL_PULL = 1 << 2,    /* stop the current pull */
  FA_NOTE_COMPLETE = 1 << 3,  /* tell the directory our copy is complete */
  FA_SEAL = 1 << 4,           /* the object is complete: wake the waiters */
  FA_FAIL = 1 << 5,           /* the object will not arrive: fail the waiters */
  FA_LOC_REMOVE = 1 << 6,     /* tell the directory we hold no copy */
  FA_FORGET = 1 << 7,         /* take the object out of the table */
  FA_ASK = 1 << 8,            /* ACQUIRE (naming the failed sender, if any) */
  FA_ASK_COMPLETE = 1 << 9,   /* ACQUIRE only_complete (move off a crawler) */
  FA_ASK_SUSPECT = 1 << 10,   /* ACQUIRE suspect (the sender went silent) */
  FA_PULL = 1 << 11,          /* start pulling from the sender named */
  FA_GRANT_WAIT = 1 << 12,    /* wait for the GRANT (start its timer) */
  FA_REARM = 1 << 13,         /* watch the stream for silence again (the retry time
                                 the answer gave, else a quiet window) */
};

/* Inputs besides the event. */
enum {
  FIN_WAITERS_LEFT = 1 << 0, /* some waiter can still wait after a timed-out ask */
  FIN_HELD_SENDER = 1 << 1,  /* ROOM: the kept answer named a sender (not inline
                                bytes): it listed us at the directory */
};
#define FIN_ALL (FIN_WAITERS_LEFT | FIN_HELD_SENDER)

/* The state after `ev` in `st` given inputs `in`; *actions gets what to do.
 * An event that does not apply to a state (a stale answer) leaves it as it
 * is with no actions. */
fetch_state fetch_next(fetch_state st, fetch_event ev, unsigned in, unsigned *actions);

const char *fetch_state_name(fetch_state st);
const char *fetch_event_name(fetch_event ev);

#endif
