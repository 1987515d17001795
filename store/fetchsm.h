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

typedef enum hpl__fetch_state {
  HPL__FETCH_NEW,    /* made; nothing asked yet */
  HPL__FETCH_GRANT,  /* a granted GET (the directory named a sender to this store
                        already): waiting for that GRANT, at most HPL__FETCH_GRANT_WAIT_MS */
  HPL__FETCH_ASK,    /* the first ACQUIRE is out; nothing held, no location */
  HPL__FETCH_RESUME, /* ACQUIRE out again after losing a sender; holds a location
                        at the directory and maybe bytes */
  HPL__FETCH_ROOM,   /* an answer named a sender (or carried the bytes) and its
                        buffer waits for room in the pool; the answer is kept */
  HPL__FETCH_PULL,   /* streaming from a sender */
  HPL__FETCH_MOVE_CRAWL,   /* streaming from a crawling partial sender; asked for an
                              idle complete copy to move to */
  HPL__FETCH_MOVE_SUSPECT, /* streaming from a silent sender; reported it (the
                              directory names another or says stay) */
  HPL__FETCH_ORPHAN, /* deleted: answers still on their way are undone */
  HPL__FETCH_END,    /* over (sealed, failed, dropped); later answers are stale */
  HPL__FETCH_NSTATES
} hpl__fetch_state;

typedef enum hpl__fetch_event {
  HPL__FEV_START,         /* a GET wants the object: ask the directory */
  HPL__FEV_GRANTED,       /* a granted GET wants it: wait for the directory's GRANT */
  HPL__FEV_GRANT_LATE,    /* the GRANT did not come in time */
  HPL__FEV_SENDER,        /* an answer names a sender (buffer ready) */
  HPL__FEV_INLINE,        /* an answer carries the bytes (object now sealed) */
  HPL__FEV_ROOM_WAIT,     /* an answer's buffer has to wait for room in the pool */
  HPL__FEV_TIMEOUT,       /* an ask timed out */
  HPL__FEV_REFUSED,       /* an ask failed (lost, no memory at the directory, ...) */
  HPL__FEV_BAD_SENDER,    /* an answer named a sender but cannot be used (size
                             changed, no room in the pool, malformed) */
  HPL__FEV_PULLED,        /* the pull completed */
  HPL__FEV_PULL_FAILED,   /* the pull broke, stalled, straggled, or did not start */
  HPL__FEV_UPSTREAM_GONE, /* the directory says our sender is dead */
  HPL__FEV_CRAWL,         /* the partial sender crawls */
  HPL__FEV_SUSPECT,       /* the sender has delivered nothing for a quiet window */
  HPL__FEV_MOVE_TO,       /* answer to the crawl or silence: a sender to move to */
  HPL__FEV_MOVE_NONE,     /* answer to the crawl or silence: stay */
  HPL__FEV_MOVE_UNSENT,   /* the crawl's or silence's report could not be sent */
  HPL__FEV_DROPPED,       /* the object was deleted */
  HPL__FEV_DRAIN,         /* this store is leaving */
  HPL__FEV_NEVENTS
} hpl__fetch_event;

/* Actions, carried out by fetch.c in this order. */
enum {
  HPL__FA_GRANT_STOP = 1 << 0,     /* stop waiting for the GRANT (its timer) */
  HPL__FA_UNROOM = 1 << 1,         /* stop waiting for room (the kept answer goes) */
  HPL__FA_CANCEL_PULL = 1 << 2,    /* stop the current pull */
  HPL__FA_NOTE_COMPLETE = 1 << 3,  /* tell the directory our copy is complete */
  HPL__FA_SEAL = 1 << 4,           /* the object is complete: wake the waiters */
  HPL__FA_FAIL = 1 << 5,           /* the object will not arrive: fail the waiters */
  HPL__FA_LOC_REMOVE = 1 << 6,     /* tell the directory we hold no copy */
  HPL__FA_FORGET = 1 << 7,         /* take the object out of the table */
  HPL__FA_ASK = 1 << 8,            /* ACQUIRE (naming the failed sender, if any) */
  HPL__FA_ASK_COMPLETE = 1 << 9,   /* ACQUIRE only_complete (move off a crawler) */
  HPL__FA_ASK_SUSPECT = 1 << 10,   /* ACQUIRE suspect (the sender went silent) */
  HPL__FA_PULL = 1 << 11,          /* start pulling from the sender named */
  HPL__FA_GRANT_WAIT = 1 << 12,    /* wait for the GRANT (start its timer) */
  HPL__FA_REARM = 1 << 13,         /* watch the stream for silence again (the retry time
                                      the answer gave, else a quiet window) */
};

/* Inputs besides the event. */
enum {
  HPL__FIN_WAITERS_LEFT = 1 << 0, /* some waiter can still wait after a timed-out ask */
  HPL__FIN_HELD_SENDER = 1 << 1,  /* ROOM: the kept answer named a sender (not inline
                                     bytes): it listed us at the directory */
};
#define HPL__FIN_ALL (HPL__FIN_WAITERS_LEFT | HPL__FIN_HELD_SENDER)

/* The state after `ev` in `st` given inputs `in`; *actions gets what to do.
 * An event that does not apply to a state (a stale answer) leaves it as it
 * is with no actions. */
hpl__fetch_state hpl__fetch_next(hpl__fetch_state st, hpl__fetch_event ev, unsigned in,
                                 unsigned *actions);

const char *hpl__fetch_state_name(hpl__fetch_state st);
const char *hpl__fetch_event_name(hpl__fetch_event ev);

#endif
