/* fetchsm.c - the transitions of a fetch (see fetchsm.h): a pure function,
 * no I/O. */
#include "fetchsm.h"

/* An answer naming a sender, carrying the bytes, or waiting for room for
 * them, or the object deleted, in a state that waits for an answer (NEW: a
 * GRANT nobody asked for; GRANT; ASK; RESUME). 1 and *to, *a if `ev` is
 * one of those, else 0. */
static int answered(hpl__fetch_event ev, hpl__fetch_state *to, unsigned *a) {
  switch (ev) {
    case HPL__FEV_SENDER: *a = HPL__FA_PULL; *to = HPL__FETCH_PULL; return 1;
    case HPL__FEV_INLINE: *a = HPL__FA_SEAL; *to = HPL__FETCH_END; return 1;
    case HPL__FEV_ROOM_WAIT: *to = HPL__FETCH_ROOM; return 1;
    case HPL__FEV_BAD_SENDER:
      *a = HPL__FA_FAIL | HPL__FA_LOC_REMOVE | HPL__FA_FORGET;
      *to = HPL__FETCH_END;
      return 1;
    case HPL__FEV_DROPPED: *a = HPL__FA_FAIL | HPL__FA_FORGET; *to = HPL__FETCH_ORPHAN; return 1;
    default: return 0;
  }
}

/* From ASK or RESUME: an answer to an ordinary ACQUIRE. */
static hpl__fetch_state asking(hpl__fetch_state st, hpl__fetch_event ev, unsigned in, unsigned *a) {
  unsigned undo = st == HPL__FETCH_RESUME ? HPL__FA_LOC_REMOVE : 0;
  hpl__fetch_state to;
  if (answered(ev, &to, a)) return to;
  switch (ev) {
    case HPL__FEV_TIMEOUT:
      if (st == HPL__FETCH_ASK && (in & HPL__FIN_WAITERS_LEFT)) {
        *a = HPL__FA_ASK; /* someone may still wait longer than the first asker */
        return HPL__FETCH_ASK;
      }
      *a = HPL__FA_FAIL | undo | HPL__FA_FORGET;
      return HPL__FETCH_END;
    case HPL__FEV_REFUSED: *a = HPL__FA_FAIL | undo | HPL__FA_FORGET; return HPL__FETCH_END;
    default: return st; /* stale (an old crawl answer) or not yet relevant */
  }
}

/* From NEW: a GET starts it, or a GRANT nobody asked for (the client's
 * GET is on its way) is its first answer. */
static hpl__fetch_state fresh(hpl__fetch_event ev, unsigned *a) {
  hpl__fetch_state to;
  switch (ev) {
    case HPL__FEV_START: *a = HPL__FA_ASK; return HPL__FETCH_ASK;
    case HPL__FEV_GRANTED: *a = HPL__FA_GRANT_WAIT; return HPL__FETCH_GRANT;
    case HPL__FEV_SENDER:
    case HPL__FEV_ROOM_WAIT:
    case HPL__FEV_BAD_SENDER: answered(ev, &to, a); return to;
    default: return HPL__FETCH_NEW;
  }
}

/* From GRANT: the GRANT is an answer as in ASK; leaving stops its wait. */
static hpl__fetch_state granted(hpl__fetch_event ev, unsigned *a) {
  hpl__fetch_state to;
  if (ev == HPL__FEV_GRANT_LATE) {
    *a = HPL__FA_ASK;
    return HPL__FETCH_ASK;
  }
  if (!answered(ev, &to, a)) return HPL__FETCH_GRANT;
  *a |= HPL__FA_GRANT_STOP;
  return to;
}

/* From ROOM: the kept answer, once its buffer is there (or not). */
static hpl__fetch_state waiting_room(hpl__fetch_event ev, unsigned in, unsigned *a) {
  switch (ev) {
    case HPL__FEV_SENDER: *a = HPL__FA_PULL; return HPL__FETCH_PULL;
    case HPL__FEV_INLINE: *a = HPL__FA_SEAL; return HPL__FETCH_END;
    case HPL__FEV_BAD_SENDER:
      *a = HPL__FA_FAIL | HPL__FA_LOC_REMOVE | HPL__FA_FORGET;
      return HPL__FETCH_END;
    case HPL__FEV_DROPPED:
      /* the kept answer is undone as a late one would be */
      *a = HPL__FA_UNROOM | HPL__FA_FAIL | HPL__FA_FORGET |
           ((in & HPL__FIN_HELD_SENDER) ? HPL__FA_LOC_REMOVE : 0);
      return HPL__FETCH_ORPHAN;
    default: return HPL__FETCH_ROOM;
  }
}

/* From PULL, MOVE_CRAWL or MOVE_SUSPECT. */
static hpl__fetch_state pulling(hpl__fetch_state st, hpl__fetch_event ev, unsigned *a) {
  int moving = st != HPL__FETCH_PULL;
  switch (ev) {
    case HPL__FEV_PULLED: *a = HPL__FA_NOTE_COMPLETE | HPL__FA_SEAL; return HPL__FETCH_END;
    case HPL__FEV_PULL_FAILED: *a = HPL__FA_ASK; return HPL__FETCH_RESUME;
    case HPL__FEV_UPSTREAM_GONE: *a = HPL__FA_CANCEL_PULL | HPL__FA_ASK; return HPL__FETCH_RESUME;
    case HPL__FEV_CRAWL:
      if (moving) return st; /* already asking */
      *a = HPL__FA_ASK_COMPLETE;
      return HPL__FETCH_MOVE_CRAWL;
    case HPL__FEV_SUSPECT:
      if (st == HPL__FETCH_MOVE_CRAWL) { /* a crawl's report is out: watched again later */
        *a = HPL__FA_REARM;
        return st;
      }
      if (moving) return st; /* reported already */
      *a = HPL__FA_ASK_SUSPECT;
      return HPL__FETCH_MOVE_SUSPECT;
    case HPL__FEV_MOVE_TO:
      if (!moving) return st;
      *a = HPL__FA_CANCEL_PULL | HPL__FA_PULL;
      return HPL__FETCH_PULL;
    case HPL__FEV_MOVE_NONE: *a = HPL__FA_REARM; return HPL__FETCH_PULL;
    case HPL__FEV_MOVE_UNSENT:
      if (!moving) return st;
      if (st == HPL__FETCH_MOVE_SUSPECT) *a = HPL__FA_REARM;
      return HPL__FETCH_PULL;
    case HPL__FEV_DROPPED:
      *a = HPL__FA_CANCEL_PULL | HPL__FA_FAIL | HPL__FA_FORGET;
      return HPL__FETCH_ORPHAN; /* an older answer may still be on its way */
    case HPL__FEV_DRAIN: *a = HPL__FA_CANCEL_PULL; return HPL__FETCH_END;
    default: return st;
  }
}

hpl__fetch_state hpl__fetch_next(hpl__fetch_state st, hpl__fetch_event ev, unsigned in,
                                 unsigned *actions) {
  *actions = 0;
  switch (st) {
    case HPL__FETCH_NEW: return fresh(ev, actions);
    case HPL__FETCH_GRANT: return granted(ev, actions);
    case HPL__FETCH_ASK:
    case HPL__FETCH_RESUME: return asking(st, ev, in, actions);
    case HPL__FETCH_ROOM: return waiting_room(ev, in, actions);
    case HPL__FETCH_PULL:
    case HPL__FETCH_MOVE_CRAWL:
    case HPL__FETCH_MOVE_SUSPECT: return pulling(st, ev, actions);
    case HPL__FETCH_ORPHAN:
      /* an answer that assigned us a sender made the directory list us */
      if (ev == HPL__FEV_SENDER || ev == HPL__FEV_MOVE_TO) *actions = HPL__FA_LOC_REMOVE;
      return HPL__FETCH_ORPHAN;
    default: return HPL__FETCH_END;
  }
}

const char *hpl__fetch_state_name(hpl__fetch_state st) {
  static const char *n[] = {"new",  "grant",        "ask",          "resume", "room",
                            "pull", "move-crawl", "move-suspect", "orphan", "end"};
  _Static_assert(sizeof n / sizeof n[0] == HPL__FETCH_NSTATES, "a name per state");
  return st < HPL__FETCH_NSTATES ? n[st] : "?";
}

const char *hpl__fetch_event_name(hpl__fetch_event ev) {
  static const char *n[] = {"start",         "granted",     "grant-late", "sender",
                            "inline",        "room-wait",   "timeout",    "refused",
                            "bad-sender",    "pulled",      "pull-failed", "upstream-gone",
                            "crawl",         "suspect",     "move-to",    "move-none",
                            "move-unsent",   "dropped",     "drain"};
  _Static_assert(sizeof n / sizeof n[0] == HPL__FEV_NEVENTS, "a name per event");
  return ev < HPL__FEV_NEVENTS ? n[ev] : "?";
}
