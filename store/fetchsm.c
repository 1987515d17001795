/* fetchsm.c - transitions of a fetch (see fetchsm.h). */
#include "fetchsm.h"

/* From ASK or RESUME: an answer to an ordinary ACQUIRE. `located`: the
 * directory already lists us (RESUME), so giving up must remove that. */
static fetch_state asking(fetch_state st, fetch_event ev, unsigned in, unsigned *a) {
  unsigned undo = st == FETCH_RESUME ? FA_LOC_REMOVE : 0;
  switch (ev) {
    case FEV_SENDER: *a = FA_PULL; return FETCH_PULL;
    case FEV_INLINE: *a = FA_SEAL; return FETCH_END;
    case FEV_TIMEOUT:
      if (st == FETCH_ASK && (in & FIN_WAITERS_LEFT)) {
        *a = FA_ASK; /* someone may still wait longer than the first asker */
        return FETCH_ASK;
      }
      *a = FA_FAIL | undo | FA_FORGET;
      return FETCH_END;
    case FEV_REFUSED: *a = FA_FAIL | undo | FA_FORGET; return FETCH_END;
    case FEV_BAD_SENDER: *a = FA_FAIL | FA_LOC_REMOVE | FA_FORGET; return FETCH_END;
    case FEV_DROPPED: *a = FA_FAIL | FA_FORGET; return FETCH_ORPHAN;
    default: return st; /* stale (an old crawl answer) or not yet relevant */
  }
}

/* From PULL or MOVE. */
static fetch_state pulling(fetch_state st, fetch_event ev, unsigned *a) {
  switch (ev) {
    case FEV_PULLED: *a = FA_NOTE_COMPLETE | FA_SEAL; return FETCH_END;
    case FEV_PULL_FAILED: *a = FA_ASK; return FETCH_RESUME;
    case FEV_UPSTREAM_GONE: *a = FA_CANCEL_PULL | FA_ASK; return FETCH_RESUME;
    case FEV_CRAWL:
      if (st == FETCH_MOVE) return st; /* already asking */
      *a = FA_ASK_COMPLETE;
      return FETCH_MOVE;
    case FEV_SUSPECT:
      if (st == FETCH_MOVE) return st; /* already asking */
      *a = FA_ASK_SUSPECT;
      return FETCH_MOVE;
    case FEV_MOVE_TO:
      if (st != FETCH_MOVE) return st;
      *a = FA_CANCEL_PULL | FA_PULL;
      return FETCH_PULL;
    case FEV_MOVE_NONE: return FETCH_PULL;
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
    case FETCH_ASK:
    case FETCH_RESUME: return asking(st, ev, in, actions);
    case FETCH_PULL:
    case FETCH_MOVE: return pulling(st, ev, actions);
    case FETCH_ORPHAN:
      /* an answer that assigned us a sender made the directory list us */
      if (ev == FEV_SENDER || ev == FEV_MOVE_TO) *actions = FA_LOC_REMOVE;
      return FETCH_ORPHAN;
    default: return FETCH_END;
  }
}

const char *fetch_state_name(fetch_state st) {
  static const char *n[] = {"ask", "resume", "pull", "move", "orphan", "end"};
  return st < FETCH_NSTATES ? n[st] : "?";
}

const char *fetch_event_name(fetch_event ev) {
  static const char *n[] = {"sender",  "inline", "timeout",       "refused", "bad-sender",
                            "pulled",  "pull-failed", "upstream-gone", "crawl", "suspect", "move-to",
                            "move-none", "dropped", "drain"};
  return ev < FEV_NEVENTS ? n[ev] : "?";
}
