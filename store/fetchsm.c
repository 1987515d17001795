/* fetchsm.c - the transitions of a fetch (see fetchsm.h): a pure function,
 * no I/O. */
#include "fetchsm.h"

/* An answer naming a sender, carrying the bytes, or waiting for room for
 * them, or the object deleted, in a state that waits for an answer (NEW: a
 * GRANT nobody asked for; GRANT; ASK; RESUME). 1 and *to, *a if `ev` is
 * one of those, else 0. */
static int answered(fetch_event ev, fetch_state *to, unsigned *a) {
  switch (ev) {
    case FEV_SENDER: *a = FA_PULL; *to = FETCH_PULL; return 1;
    case FEV_INLINE: *a = FA_SEAL; *to = FETCH_END; return 1;
    case FEV_ROOM_WAIT: *to = FETCH_ROOM; return 1;
    case FEV_BAD_SENDER: *a = FA_FAIL | FA_LOC_REMOVE | FA_FORGET; *to = FETCH_END; return 1;
    case FEV_DROPPED: *a = FA_FAIL | FA_FORGET; *to = FETCH_ORPHAN; return 1;
    default: return 0;
  }
}

/* From ASK or RESUME: an answer to an ordinary ACQUIRE. */
static fetch_state asking(fetch_state st, fetch_event ev, unsigned in, unsigned *a) {
  unsigned undo = st == FETCH_RESUME ? FA_LOC_REMOVE : 0;
  fetch_state to;
  if (answered(ev, &to, a)) return to;
  switch (ev) {
    case FEV_TIMEOUT:
      if (st == FETCH_ASK && (in & FIN_WAITERS_LEFT)) {
        *a = FA_ASK; /* someone may still wait longer than the first asker */
        return FETCH_ASK;
      }
      *a = FA_FAIL | undo | FA_FORGET;
      return FETCH_END;
    case FEV_REFUSED: *a = FA_FAIL | undo | FA_FORGET; return FETCH_END;
    default: return st; /* stale (an old crawl answer) or not yet relevant */
  }
}

/* From NEW: a GET starts it, or a GRANT nobody asked for (the client's
 * GET is on its way) is its first answer. */
static fetch_state fresh(fetch_event ev, unsigned *a) {
  fetch_state to;
  switch (ev) {
    case FEV_START: *a = FA_ASK; return FETCH_ASK;
    case FEV_GRANTED: *a = FA_GRANT_WAIT; return FETCH_GRANT;
    case FEV_SENDER:
    case FEV_ROOM_WAIT:
    case FEV_BAD_SENDER: answered(ev, &to, a); return to;
    default: return FETCH_NEW;
  }
}

/* From GRANT: the GRANT is an answer as in ASK; leaving stops its wait. */
static fetch_state granted(fetch_event ev, unsigned *a) {
  fetch_state to;
  if (ev == FEV_GRANT_LATE) {
    *a = FA_ASK;
    return FETCH_ASK;
  }
  if (!answered(ev, &to, a)) return FETCH_GRANT;
  *a |= FA_GRANT_STOP;
  return to;
}

/* From ROOM: the kept answer, once its buffer is there (or not). */
static fetch_state waiting_room(fetch_event ev, unsigned in, unsigned *a) {
  switch (ev) {
    case FEV_SENDER: *a = FA_PULL; return FETCH_PULL;
    case FEV_INLINE: *a = FA_SEAL; return FETCH_END;
    case FEV_BAD_SENDER: *a = FA_FAIL | FA_LOC_REMOVE | FA_FORGET; return FETCH_END;
    case FEV_DROPPED:
      /* the kept answer is undone as a late one would be */
      *a = FA_UNROOM | FA_FAIL | FA_FORGET | ((in & FIN_HELD_SENDER) ? FA_LOC_REMOVE : 0);
      return FETCH_ORPHAN;
    default: return FETCH_ROOM;
  }
}

/* From PULL, MOVE_CRAWL or MOVE_SUSPECT. */
static fetch_state pulling(fetch_state st, fetch_event ev, unsigned *a) {
  int moving = st != FETCH_PULL;
  switch (ev) {
    case FEV_PULLED: *a = FA_NOTE_COMPLETE | FA_SEAL; return FETCH_END;
    case FEV_PULL_FAILED: *a = FA_ASK; return FETCH_RESUME;
    case FEV_UPSTREAM_GONE: *a = FA_CANCEL_PULL | FA_ASK; return FETCH_RESUME;
    case FEV_CRAWL:
      if (moving) return st; /* already asking */
      *a = FA_ASK_COMPLETE;
      return FETCH_MOVE_CRAWL;
    case FEV_SUSPECT:
      if (st == FETCH_MOVE_CRAWL) { /* a crawl's report is out: watched again later */
        *a = FA_REARM;
        return st;
      }
      if (moving) return st; /* reported already */
      *a = FA_ASK_SUSPECT;
      return FETCH_MOVE_SUSPECT;
    case FEV_MOVE_TO:
      if (!moving) return st;
      *a = FA_CANCEL_PULL | FA_PULL;
      return FETCH_PULL;
    case FEV_MOVE_NONE: *a = FA_REARM; return FETCH_PULL;
    case FEV_MOVE_UNSENT:
      if (!moving) return st;
      if (st == FETCH_MOVE_SUSPECT) *a = FA_REARM;
      return FETCH_PULL;
    case FEV_DROPPED:
      *a = FA_CANCEL_PULL | FA_FAIL | FA_FORGET;
      return FETCH_ORPHAN; /* an older answer may still be on its way */
    case FEV_DRAIN: *a = FA_CANCEL_PULL; return FETCH_END;
    default: return st;
  }
}

fetch_state fetch_next(fetch_state st, fetch_event ev, unsigned in, unsigned *actions) {
  *actions = 0;
  switch (st) {
    case FETCH_NEW: return fresh(ev, actions);
    case FETCH_GRANT: return granted(ev, actions);
    case FETCH_ASK:
    case FETCH_RESUME: return asking(st, ev, in, actions);
    case FETCH_ROOM: return waiting_room(ev, in, actions);
    case FETCH_PULL:
    case FETCH_MOVE_CRAWL:
    case FETCH_MOVE_SUSPECT: return pulling(st, ev, actions);
    case FETCH_ORPHAN:
      /* an answer that assigned us a sender made the directory list us */
      if (ev == FEV_SENDER || ev == FEV_MOVE_TO) *actions = FA_LOC_REMOVE;
      return FETCH_ORPHAN;
    default: return FETCH_END;
  }
}

const char *fetch_state_name(fetch_state st) {
  static const char *n[] = {"new",  "grant",        "ask",          "resume", "room",
                            "pull", "move-crawl", "move-suspect", "orphan", "end"};
  _Static_assert(sizeof n / sizeof n[0] == FETCH_NSTATES, "a name per state");
  return st < FETCH_NSTATES ? n[st] : "?";
}

const char *fetch_event_name(fetch_event ev) {
  static const char *n[] = {"start",         "granted",     "grant-late", "sender",
                            "inline",        "room-wait",   "timeout",    "refused",
                            "bad-sender",    "pulled",      "pull-failed", "upstream-gone",
                            "crawl",         "suspect",     "move-to",    "move-none",
                            "move-unsent",   "dropped",     "drain"};
  _Static_assert(sizeof n / sizeof n[0] == FEV_NEVENTS, "a name per event");
  return ev < FEV_NEVENTS ? n[ev] : "?";
}
