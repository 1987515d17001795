/* test_fetchsm.c - every transition of the store's fetch state machine
 * (store/fetchsm.c), then whole histories of a fetch, then invariants that
 * must hold for every (state, event, input). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "fetchsm.h"

typedef struct row {
  fetch_state from;
  fetch_event ev;
  unsigned mask; /* the inputs that matter to this row */
  unsigned in;   /* ...and their values */
  fetch_state to;
  unsigned actions;
} row;

#define ANY_FAIL (FA_FAIL | FA_FORGET)
#define WL FIN_WAITERS_LEFT
#define HS FIN_HELD_SENDER

/* The specification, one line per transition that does something. */
static const row spec[] = {
    /* started by a GET, or by a granted GET, or by a GRANT nobody asked for
     * (the client's GET is on its way) */
    {FETCH_NEW, FEV_START, 0, 0, FETCH_ASK, FA_ASK},
    {FETCH_NEW, FEV_GRANTED, 0, 0, FETCH_GRANT, FA_GRANT_WAIT},
    {FETCH_NEW, FEV_SENDER, 0, 0, FETCH_PULL, FA_PULL},
    {FETCH_NEW, FEV_ROOM_WAIT, 0, 0, FETCH_ROOM, 0},
    {FETCH_NEW, FEV_BAD_SENDER, 0, 0, FETCH_END, ANY_FAIL | FA_LOC_REMOVE},
    /* waiting for the GRANT: it is an answer; without it in time, ask */
    {FETCH_GRANT, FEV_GRANT_LATE, 0, 0, FETCH_ASK, FA_ASK},
    {FETCH_GRANT, FEV_SENDER, 0, 0, FETCH_PULL, FA_GRANT_STOP | FA_PULL},
    {FETCH_GRANT, FEV_INLINE, 0, 0, FETCH_END, FA_GRANT_STOP | FA_SEAL},
    {FETCH_GRANT, FEV_ROOM_WAIT, 0, 0, FETCH_ROOM, FA_GRANT_STOP},
    {FETCH_GRANT, FEV_BAD_SENDER, 0, 0, FETCH_END, FA_GRANT_STOP | ANY_FAIL | FA_LOC_REMOVE},
    {FETCH_GRANT, FEV_DROPPED, 0, 0, FETCH_ORPHAN, FA_GRANT_STOP | ANY_FAIL},
    /* first ask */
    {FETCH_ASK, FEV_SENDER, 0, 0, FETCH_PULL, FA_PULL},
    {FETCH_ASK, FEV_INLINE, 0, 0, FETCH_END, FA_SEAL},
    {FETCH_ASK, FEV_ROOM_WAIT, 0, 0, FETCH_ROOM, 0},
    {FETCH_ASK, FEV_TIMEOUT, WL, WL, FETCH_ASK, FA_ASK},
    {FETCH_ASK, FEV_TIMEOUT, WL, 0, FETCH_END, ANY_FAIL},
    {FETCH_ASK, FEV_REFUSED, 0, 0, FETCH_END, ANY_FAIL},
    {FETCH_ASK, FEV_BAD_SENDER, 0, 0, FETCH_END, ANY_FAIL | FA_LOC_REMOVE},
    {FETCH_ASK, FEV_DROPPED, 0, 0, FETCH_ORPHAN, ANY_FAIL},
    /* asking again after losing a sender: the directory lists us already */
    {FETCH_RESUME, FEV_SENDER, 0, 0, FETCH_PULL, FA_PULL},
    {FETCH_RESUME, FEV_INLINE, 0, 0, FETCH_END, FA_SEAL},
    {FETCH_RESUME, FEV_ROOM_WAIT, 0, 0, FETCH_ROOM, 0},
    {FETCH_RESUME, FEV_TIMEOUT, 0, 0, FETCH_END, ANY_FAIL | FA_LOC_REMOVE},
    {FETCH_RESUME, FEV_REFUSED, 0, 0, FETCH_END, ANY_FAIL | FA_LOC_REMOVE},
    {FETCH_RESUME, FEV_BAD_SENDER, 0, 0, FETCH_END, ANY_FAIL | FA_LOC_REMOVE},
    {FETCH_RESUME, FEV_DROPPED, 0, 0, FETCH_ORPHAN, ANY_FAIL},
    /* the answer kept until its buffer has room: then as it said; deleted
     * meanwhile, it is undone as a late answer would be */
    {FETCH_ROOM, FEV_SENDER, 0, 0, FETCH_PULL, FA_PULL},
    {FETCH_ROOM, FEV_INLINE, 0, 0, FETCH_END, FA_SEAL},
    {FETCH_ROOM, FEV_BAD_SENDER, 0, 0, FETCH_END, ANY_FAIL | FA_LOC_REMOVE},
    {FETCH_ROOM, FEV_DROPPED, HS, HS, FETCH_ORPHAN, FA_UNROOM | ANY_FAIL | FA_LOC_REMOVE},
    {FETCH_ROOM, FEV_DROPPED, HS, 0, FETCH_ORPHAN, FA_UNROOM | ANY_FAIL},
    /* pulling */
    {FETCH_PULL, FEV_PULLED, 0, 0, FETCH_END, FA_NOTE_COMPLETE | FA_SEAL},
    {FETCH_PULL, FEV_PULL_FAILED, 0, 0, FETCH_RESUME, FA_ASK},
    {FETCH_PULL, FEV_UPSTREAM_GONE, 0, 0, FETCH_RESUME, FA_CANCEL_PULL | FA_ASK},
    {FETCH_PULL, FEV_CRAWL, 0, 0, FETCH_MOVE_CRAWL, FA_ASK_COMPLETE},
    {FETCH_PULL, FEV_SUSPECT, 0, 0, FETCH_MOVE_SUSPECT, FA_ASK_SUSPECT},
    {FETCH_PULL, FEV_MOVE_NONE, 0, 0, FETCH_PULL, FA_REARM}, /* a late "stay" */
    {FETCH_PULL, FEV_DROPPED, 0, 0, FETCH_ORPHAN, FA_CANCEL_PULL | ANY_FAIL},
    {FETCH_PULL, FEV_DRAIN, 0, 0, FETCH_END, FA_CANCEL_PULL},
    /* pulling from a crawler, asked for a complete copy */
    {FETCH_MOVE_CRAWL, FEV_MOVE_TO, 0, 0, FETCH_PULL, FA_CANCEL_PULL | FA_PULL},
    {FETCH_MOVE_CRAWL, FEV_MOVE_NONE, 0, 0, FETCH_PULL, FA_REARM},
    {FETCH_MOVE_CRAWL, FEV_MOVE_UNSENT, 0, 0, FETCH_PULL, 0},
    {FETCH_MOVE_CRAWL, FEV_SUSPECT, 0, 0, FETCH_MOVE_CRAWL, FA_REARM},
    {FETCH_MOVE_CRAWL, FEV_PULLED, 0, 0, FETCH_END, FA_NOTE_COMPLETE | FA_SEAL},
    {FETCH_MOVE_CRAWL, FEV_PULL_FAILED, 0, 0, FETCH_RESUME, FA_ASK},
    {FETCH_MOVE_CRAWL, FEV_UPSTREAM_GONE, 0, 0, FETCH_RESUME, FA_CANCEL_PULL | FA_ASK},
    {FETCH_MOVE_CRAWL, FEV_DROPPED, 0, 0, FETCH_ORPHAN, FA_CANCEL_PULL | ANY_FAIL},
    {FETCH_MOVE_CRAWL, FEV_DRAIN, 0, 0, FETCH_END, FA_CANCEL_PULL},
    /* pulling from a silent sender, reported it */
    {FETCH_MOVE_SUSPECT, FEV_MOVE_TO, 0, 0, FETCH_PULL, FA_CANCEL_PULL | FA_PULL},
    {FETCH_MOVE_SUSPECT, FEV_MOVE_NONE, 0, 0, FETCH_PULL, FA_REARM},
    {FETCH_MOVE_SUSPECT, FEV_MOVE_UNSENT, 0, 0, FETCH_PULL, FA_REARM},
    {FETCH_MOVE_SUSPECT, FEV_PULLED, 0, 0, FETCH_END, FA_NOTE_COMPLETE | FA_SEAL},
    {FETCH_MOVE_SUSPECT, FEV_PULL_FAILED, 0, 0, FETCH_RESUME, FA_ASK},
    {FETCH_MOVE_SUSPECT, FEV_UPSTREAM_GONE, 0, 0, FETCH_RESUME, FA_CANCEL_PULL | FA_ASK},
    {FETCH_MOVE_SUSPECT, FEV_DROPPED, 0, 0, FETCH_ORPHAN, FA_CANCEL_PULL | ANY_FAIL},
    {FETCH_MOVE_SUSPECT, FEV_DRAIN, 0, 0, FETCH_END, FA_CANCEL_PULL},
    /* deleted: late answers that listed us are undone */
    {FETCH_ORPHAN, FEV_SENDER, 0, 0, FETCH_ORPHAN, FA_LOC_REMOVE},
    {FETCH_ORPHAN, FEV_MOVE_TO, 0, 0, FETCH_ORPHAN, FA_LOC_REMOVE},
};
#define NSPEC (sizeof spec / sizeof spec[0])

static const row *spec_find(fetch_state st, fetch_event ev, unsigned in) {
  for (size_t i = 0; i < NSPEC; i++)
    if (spec[i].from == st && spec[i].ev == ev && (in & spec[i].mask) == spec[i].in)
      return &spec[i];
  return NULL;
}

/* Every (state, event, input): as the specification says, and anything it
 * does not list changes nothing and does nothing (stale or irrelevant). */
static void test_every_transition(void **state) {
  (void)state;
  for (int st = 0; st < FETCH_NSTATES; st++)
    for (int ev = 0; ev < FEV_NEVENTS; ev++)
      for (unsigned in = 0; in <= FIN_ALL; in++) {
        unsigned a = 0xdead;
        fetch_state to = fetch_next((fetch_state)st, (fetch_event)ev, in, &a);
        const row *r = spec_find((fetch_state)st, (fetch_event)ev, in);
        char what[96];
        snprintf(what, sizeof what, "%s --%s[in 0x%x]-->", fetch_state_name((fetch_state)st),
                 fetch_event_name((fetch_event)ev), in);
        if (r) {
          if (to != r->to || a != r->actions)
            fail_msg("%s %s [0x%x], expected %s [0x%x]", what, fetch_state_name(to), a,
                     fetch_state_name(r->to), r->actions);
        } else if (to != (fetch_state)st || a != 0) {
          fail_msg("%s %s [0x%x], expected no change", what, fetch_state_name(to), a);
        }
      }
}

/* Properties that make the driver safe, whatever the table says. */
static void test_invariants(void **state) {
  (void)state;
  for (int st = 0; st < FETCH_NSTATES; st++)
    for (int ev = 0; ev < FEV_NEVENTS; ev++)
      for (unsigned in = 0; in <= FIN_ALL; in++) {
        unsigned a;
        fetch_state to = fetch_next((fetch_state)st, (fetch_event)ev, in, &a);
        int pulling = st == FETCH_PULL || st == FETCH_MOVE_CRAWL || st == FETCH_MOVE_SUSPECT;
        /* a pull starts only into PULL; asks only from states that wait for them */
        if (a & FA_PULL) assert_int_equal(to, FETCH_PULL);
        if (a & FA_ASK) assert_true(to == FETCH_ASK || to == FETCH_RESUME);
        if (a & FA_ASK_COMPLETE) assert_int_equal(to, FETCH_MOVE_CRAWL);
        if (a & FA_ASK_SUSPECT) assert_int_equal(to, FETCH_MOVE_SUSPECT);
        /* a report is answered before another goes out */
        if (st == FETCH_MOVE_CRAWL || st == FETCH_MOVE_SUSPECT)
          assert_false(a & (FA_ASK_COMPLETE | FA_ASK_SUSPECT));
        /* a stream is watched for silence again only while it runs */
        if (a & FA_REARM) assert_true(pulling && (to == FETCH_PULL || (int)to == st));
        /* the GRANT is waited for in GRANT only, and leaving it by an
         * answer stops the wait (grant-late: it is over already) */
        if (a & FA_GRANT_WAIT) assert_int_equal(to, FETCH_GRANT);
        if (st == FETCH_GRANT && to != FETCH_GRANT && ev != FEV_GRANT_LATE)
          assert_true(a & FA_GRANT_STOP);
        if (a & FA_GRANT_STOP) assert_int_equal(st, FETCH_GRANT);
        /* the room wait ends only from ROOM: by its own answer, or undone */
        if (a & FA_UNROOM) assert_int_equal(st, FETCH_ROOM);
        if (st == FETCH_ROOM && (to == FETCH_ORPHAN)) assert_true(a & FA_UNROOM);
        /* reporting a silent sender never stops the stream it may still send */
        if (a & FA_ASK_SUSPECT) assert_false(a & FA_CANCEL_PULL);
        /* giving up is final and always forgets the object */
        if (a & FA_FAIL) {
          assert_true(a & FA_FORGET);
          assert_true(to == FETCH_END || to == FETCH_ORPHAN);
        }
        /* a pull that is running cannot be left behind by a terminal state */
        if (pulling && (to == FETCH_END || to == FETCH_ORPHAN) && ev != FEV_PULLED)
          assert_true(a & FA_CANCEL_PULL);
        /* sealed and failed never both */
        assert_false((a & FA_SEAL) && (a & FA_FAIL));
        /* nothing ever leaves END */
        if (st == FETCH_END) {
          assert_int_equal(to, FETCH_END);
          assert_int_equal(a, 0);
        }
      }
}

/* Run a history of events from `st`, inputs `in`; return the last state
 * and the OR of every action. */
static fetch_state run_from(fetch_state st, const fetch_event *evs, size_t n, unsigned in,
                            unsigned *all) {
  *all = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned a;
    st = fetch_next(st, evs[i], in, &a);
    *all |= a;
  }
  return st;
}

/* The same from ASK, where a GET's start leaves a fetch (its FA_ASK not
 * counted). */
static fetch_state run(const fetch_event *evs, size_t n, unsigned in, unsigned *all) {
  unsigned a;
  return run_from(fetch_next(FETCH_NEW, FEV_START, 0, &a), evs, n, in, all);
}

static void test_histories(void **state) {
  (void)state;
  unsigned all;
  /* a plain broadcast receiver */
  const fetch_event plain[] = {FEV_SENDER, FEV_PULLED};
  assert_int_equal(run(plain, 2, 0, &all), FETCH_END);
  assert_int_equal(all, FA_PULL | FA_NOTE_COMPLETE | FA_SEAL);
  /* a sender dies mid-stream; the next one finishes, bytes kept */
  const fetch_event resumed[] = {FEV_SENDER, FEV_PULL_FAILED, FEV_SENDER, FEV_PULLED};
  assert_int_equal(run(resumed, 4, 0, &all), FETCH_END);
  assert_false(all & (FA_FAIL | FA_LOC_REMOVE));
  /* crawling partial sender: moved to a complete copy */
  const fetch_event moved[] = {FEV_SENDER, FEV_CRAWL, FEV_CRAWL, FEV_MOVE_TO, FEV_PULLED};
  assert_int_equal(run(moved, 5, 0, &all), FETCH_END);
  /* the crawl's answer comes after the pull broke: it is stale and ignored,
   * the ordinary answer decides */
  const fetch_event stale[] = {FEV_SENDER, FEV_CRAWL, FEV_PULL_FAILED, FEV_MOVE_TO};
  assert_int_equal(run(stale, 4, 0, &all), FETCH_RESUME);
  /* a silent sender: the stream goes on while the report is out; the
   * directory names another sender, and the first stream is cancelled
   * before the second starts (never two streams into one object) */
  const fetch_event silent[] = {FEV_SENDER, FEV_SUSPECT, FEV_SUSPECT, FEV_MOVE_TO};
  assert_int_equal(run(silent, 4, 0, &all), FETCH_PULL);
  unsigned a;
  assert_int_equal(fetch_next(FETCH_MOVE_SUSPECT, FEV_MOVE_TO, 0, &a), FETCH_PULL);
  assert_true((a & FA_CANCEL_PULL) && (a & FA_PULL));
  /* told to stay: back to pulling, the same stream */
  const fetch_event stay[] = {FEV_SENDER, FEV_SUSPECT, FEV_MOVE_NONE, FEV_PULLED};
  assert_int_equal(run(stay, 4, 0, &all), FETCH_END);
  assert_false(all & FA_CANCEL_PULL);
  /* deleted while asking: the late answer is undone, nothing is sealed */
  const fetch_event deleted[] = {FEV_DROPPED, FEV_SENDER};
  assert_int_equal(run(deleted, 2, 0, &all), FETCH_ORPHAN);
  assert_true(all & FA_LOC_REMOVE);
  assert_false(all & (FA_SEAL | FA_PULL));
  /* an object that does not exist yet: waiters with time left ask again */
  const fetch_event waiting[] = {FEV_TIMEOUT, FEV_TIMEOUT, FEV_INLINE};
  assert_int_equal(run(waiting, 3, FIN_WAITERS_LEFT, &all), FETCH_END);
  assert_int_equal(all, FA_ASK | FA_SEAL);
  /* lost while resuming: the directory is told we hold nothing */
  const fetch_event lost[] = {FEV_SENDER, FEV_UPSTREAM_GONE, FEV_REFUSED};
  assert_int_equal(run(lost, 3, 0, &all), FETCH_END);
  assert_true(all & FA_LOC_REMOVE);
  assert_true(all & FA_FAIL);
}

/* The states issue 39 took out of flags: the GRANT a granted GET waits
 * for, the answer kept while its buffer waits for room, and which report
 * a moving fetch has out. */
static void test_sub_states(void **state) {
  (void)state;
  unsigned all;
  /* a granted GET: the GRANT comes, the wait stops, the pull starts */
  const fetch_event granted[] = {FEV_GRANTED, FEV_SENDER, FEV_PULLED};
  assert_int_equal(run_from(FETCH_NEW, granted, 3, 0, &all), FETCH_END);
  assert_int_equal(all, FA_GRANT_WAIT | FA_GRANT_STOP | FA_PULL | FA_NOTE_COMPLETE | FA_SEAL);
  /* ... or it does not come in time: asked as usual; a GRANT after that is
   * an ordinary (or stale) answer */
  const fetch_event late[] = {FEV_GRANTED, FEV_GRANT_LATE, FEV_SENDER};
  assert_int_equal(run_from(FETCH_NEW, late, 3, 0, &all), FETCH_PULL);
  assert_int_equal(all, FA_GRANT_WAIT | FA_ASK | FA_PULL);
  /* a GRANT nobody asked for starts the fetch as its first answer */
  const fetch_event unasked[] = {FEV_SENDER, FEV_PULLED};
  assert_int_equal(run_from(FETCH_NEW, unasked, 2, 0, &all), FETCH_END);
  assert_false(all & FA_ASK);
  /* the answer waits for room, then goes on as it said (a timeout of an
   * old ask, or a stale move answer, changes nothing meanwhile) */
  const fetch_event room[] = {FEV_START, FEV_ROOM_WAIT, FEV_TIMEOUT, FEV_MOVE_TO, FEV_SENDER};
  assert_int_equal(run_from(FETCH_NEW, room, 5, FIN_WAITERS_LEFT, &all), FETCH_PULL);
  assert_int_equal(all, FA_ASK | FA_PULL);
  /* no room in time: the waiters fail, the location goes */
  const fetch_event noroom[] = {FEV_START, FEV_ROOM_WAIT, FEV_BAD_SENDER};
  assert_int_equal(run_from(FETCH_NEW, noroom, 3, 0, &all), FETCH_END);
  assert_true((all & FA_FAIL) && (all & FA_LOC_REMOVE));
  /* deleted while its answer waits for room: the wait ends, and the
   * location the answer gave us is undone (inline bytes gave none) */
  const fetch_event gone[] = {FEV_START, FEV_ROOM_WAIT, FEV_DROPPED};
  assert_int_equal(run_from(FETCH_NEW, gone, 3, FIN_HELD_SENDER, &all), FETCH_ORPHAN);
  assert_true((all & FA_UNROOM) && (all & FA_LOC_REMOVE));
  assert_int_equal(run_from(FETCH_NEW, gone, 3, 0, &all), FETCH_ORPHAN);
  assert_false(all & FA_LOC_REMOVE);
  /* a crawl's report out, then silence: not reported twice, watched again */
  const fetch_event crawl_quiet[] = {FEV_START, FEV_SENDER, FEV_CRAWL, FEV_SUSPECT,
                                     FEV_MOVE_NONE};
  assert_int_equal(run_from(FETCH_NEW, crawl_quiet, 5, 0, &all), FETCH_PULL);
  assert_false(all & FA_ASK_SUSPECT);
  assert_true(all & FA_REARM);
  /* a report that cannot be sent: pulling on; a silent sender is watched
   * again, a crawling one is not (its crawl is reported again later) */
  unsigned a;
  assert_int_equal(fetch_next(FETCH_MOVE_SUSPECT, FEV_MOVE_UNSENT, 0, &a), FETCH_PULL);
  assert_int_equal(a, FA_REARM);
  assert_int_equal(fetch_next(FETCH_MOVE_CRAWL, FEV_MOVE_UNSENT, 0, &a), FETCH_PULL);
  assert_int_equal(a, 0);
}

static void test_names(void **state) {
  (void)state;
  for (int st = 0; st < FETCH_NSTATES; st++)
    assert_string_not_equal(fetch_state_name((fetch_state)st), "?");
  for (int ev = 0; ev < FEV_NEVENTS; ev++)
    assert_string_not_equal(fetch_event_name((fetch_event)ev), "?");
  assert_string_equal(fetch_state_name(FETCH_NSTATES), "?");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_transition),
      cmocka_unit_test(test_invariants),
      cmocka_unit_test(test_histories),
      cmocka_unit_test(test_sub_states),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
