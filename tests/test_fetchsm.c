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
  hpl__fetch_state from;
  hpl__fetch_event ev;
  unsigned mask; /* the inputs that matter to this row */
  unsigned in;   /* ...and their values */
  hpl__fetch_state to;
  unsigned actions;
} row;

#define ANY_FAIL (HPL__FA_FAIL | HPL__FA_FORGET)
#define WL HPL__FIN_WAITERS_LEFT
#define HS HPL__FIN_HELD_SENDER

/* The specification, one line per transition that does something. */
static const row spec[] = {
    /* started by a GET, or by a granted GET, or by a GRANT nobody asked for
     * (the client's GET is on its way) */
    {HPL__FETCH_NEW, HPL__FEV_START, 0, 0, HPL__FETCH_ASK, HPL__FA_ASK},
    {HPL__FETCH_NEW, HPL__FEV_GRANTED, 0, 0, HPL__FETCH_GRANT, HPL__FA_GRANT_WAIT},
    {HPL__FETCH_NEW, HPL__FEV_SENDER, 0, 0, HPL__FETCH_PULL, HPL__FA_PULL},
    {HPL__FETCH_NEW, HPL__FEV_ROOM_WAIT, 0, 0, HPL__FETCH_ROOM, 0},
    {HPL__FETCH_NEW, HPL__FEV_BAD_SENDER, 0, 0, HPL__FETCH_END, ANY_FAIL | HPL__FA_LOC_REMOVE},
    /* waiting for the GRANT: it is an answer; without it in time, ask */
    {HPL__FETCH_GRANT, HPL__FEV_GRANT_LATE, 0, 0, HPL__FETCH_ASK, HPL__FA_ASK},
    {HPL__FETCH_GRANT, HPL__FEV_SENDER, 0, 0, HPL__FETCH_PULL, HPL__FA_GRANT_STOP | HPL__FA_PULL},
    {HPL__FETCH_GRANT, HPL__FEV_INLINE, 0, 0, HPL__FETCH_END, HPL__FA_GRANT_STOP | HPL__FA_SEAL},
    {HPL__FETCH_GRANT, HPL__FEV_ROOM_WAIT, 0, 0, HPL__FETCH_ROOM, HPL__FA_GRANT_STOP},
    {HPL__FETCH_GRANT, HPL__FEV_BAD_SENDER, 0, 0, HPL__FETCH_END,
     HPL__FA_GRANT_STOP | ANY_FAIL | HPL__FA_LOC_REMOVE},
    {HPL__FETCH_GRANT, HPL__FEV_DROPPED, 0, 0, HPL__FETCH_ORPHAN, HPL__FA_GRANT_STOP | ANY_FAIL},
    /* first ask */
    {HPL__FETCH_ASK, HPL__FEV_SENDER, 0, 0, HPL__FETCH_PULL, HPL__FA_PULL},
    {HPL__FETCH_ASK, HPL__FEV_INLINE, 0, 0, HPL__FETCH_END, HPL__FA_SEAL},
    {HPL__FETCH_ASK, HPL__FEV_ROOM_WAIT, 0, 0, HPL__FETCH_ROOM, 0},
    {HPL__FETCH_ASK, HPL__FEV_TIMEOUT, WL, WL, HPL__FETCH_ASK, HPL__FA_ASK},
    {HPL__FETCH_ASK, HPL__FEV_TIMEOUT, WL, 0, HPL__FETCH_END, ANY_FAIL},
    {HPL__FETCH_ASK, HPL__FEV_REFUSED, 0, 0, HPL__FETCH_END, ANY_FAIL},
    {HPL__FETCH_ASK, HPL__FEV_BAD_SENDER, 0, 0, HPL__FETCH_END, ANY_FAIL | HPL__FA_LOC_REMOVE},
    {HPL__FETCH_ASK, HPL__FEV_DROPPED, 0, 0, HPL__FETCH_ORPHAN, ANY_FAIL},
    /* asking again after losing a sender: the directory lists us already */
    {HPL__FETCH_RESUME, HPL__FEV_SENDER, 0, 0, HPL__FETCH_PULL, HPL__FA_PULL},
    {HPL__FETCH_RESUME, HPL__FEV_INLINE, 0, 0, HPL__FETCH_END, HPL__FA_SEAL},
    {HPL__FETCH_RESUME, HPL__FEV_ROOM_WAIT, 0, 0, HPL__FETCH_ROOM, 0},
    {HPL__FETCH_RESUME, HPL__FEV_TIMEOUT, 0, 0, HPL__FETCH_END, ANY_FAIL | HPL__FA_LOC_REMOVE},
    {HPL__FETCH_RESUME, HPL__FEV_REFUSED, 0, 0, HPL__FETCH_END, ANY_FAIL | HPL__FA_LOC_REMOVE},
    {HPL__FETCH_RESUME, HPL__FEV_BAD_SENDER, 0, 0, HPL__FETCH_END, ANY_FAIL | HPL__FA_LOC_REMOVE},
    {HPL__FETCH_RESUME, HPL__FEV_DROPPED, 0, 0, HPL__FETCH_ORPHAN, ANY_FAIL},
    /* the answer kept until its buffer has room: then as it said; deleted
     * meanwhile, it is undone as a late answer would be */
    {HPL__FETCH_ROOM, HPL__FEV_SENDER, 0, 0, HPL__FETCH_PULL, HPL__FA_PULL},
    {HPL__FETCH_ROOM, HPL__FEV_INLINE, 0, 0, HPL__FETCH_END, HPL__FA_SEAL},
    {HPL__FETCH_ROOM, HPL__FEV_BAD_SENDER, 0, 0, HPL__FETCH_END, ANY_FAIL | HPL__FA_LOC_REMOVE},
    {HPL__FETCH_ROOM, HPL__FEV_DROPPED, HS, HS, HPL__FETCH_ORPHAN,
     HPL__FA_UNROOM | ANY_FAIL | HPL__FA_LOC_REMOVE},
    {HPL__FETCH_ROOM, HPL__FEV_DROPPED, HS, 0, HPL__FETCH_ORPHAN, HPL__FA_UNROOM | ANY_FAIL},
    /* pulling */
    {HPL__FETCH_PULL, HPL__FEV_PULLED, 0, 0, HPL__FETCH_END, HPL__FA_NOTE_COMPLETE | HPL__FA_SEAL},
    {HPL__FETCH_PULL, HPL__FEV_PULL_FAILED, 0, 0, HPL__FETCH_RESUME, HPL__FA_ASK},
    {HPL__FETCH_PULL, HPL__FEV_UPSTREAM_GONE, 0, 0, HPL__FETCH_RESUME,
     HPL__FA_CANCEL_PULL | HPL__FA_ASK},
    {HPL__FETCH_PULL, HPL__FEV_CRAWL, 0, 0, HPL__FETCH_MOVE_CRAWL, HPL__FA_ASK_COMPLETE},
    {HPL__FETCH_PULL, HPL__FEV_SUSPECT, 0, 0, HPL__FETCH_MOVE_SUSPECT, HPL__FA_ASK_SUSPECT},
    {HPL__FETCH_PULL, HPL__FEV_MOVE_NONE, 0, 0, HPL__FETCH_PULL, HPL__FA_REARM}, /* a late "stay" */
    {HPL__FETCH_PULL, HPL__FEV_DROPPED, 0, 0, HPL__FETCH_ORPHAN, HPL__FA_CANCEL_PULL | ANY_FAIL},
    {HPL__FETCH_PULL, HPL__FEV_DRAIN, 0, 0, HPL__FETCH_END, HPL__FA_CANCEL_PULL},
    /* pulling from a crawler, asked for a complete copy */
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_MOVE_TO, 0, 0, HPL__FETCH_PULL,
     HPL__FA_CANCEL_PULL | HPL__FA_PULL},
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_MOVE_NONE, 0, 0, HPL__FETCH_PULL, HPL__FA_REARM},
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_MOVE_UNSENT, 0, 0, HPL__FETCH_PULL, 0},
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_SUSPECT, 0, 0, HPL__FETCH_MOVE_CRAWL, HPL__FA_REARM},
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_PULLED, 0, 0, HPL__FETCH_END,
     HPL__FA_NOTE_COMPLETE | HPL__FA_SEAL},
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_PULL_FAILED, 0, 0, HPL__FETCH_RESUME, HPL__FA_ASK},
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_UPSTREAM_GONE, 0, 0, HPL__FETCH_RESUME,
     HPL__FA_CANCEL_PULL | HPL__FA_ASK},
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_DROPPED, 0, 0, HPL__FETCH_ORPHAN,
     HPL__FA_CANCEL_PULL | ANY_FAIL},
    {HPL__FETCH_MOVE_CRAWL, HPL__FEV_DRAIN, 0, 0, HPL__FETCH_END, HPL__FA_CANCEL_PULL},
    /* pulling from a silent sender, reported it */
    {HPL__FETCH_MOVE_SUSPECT, HPL__FEV_MOVE_TO, 0, 0, HPL__FETCH_PULL,
     HPL__FA_CANCEL_PULL | HPL__FA_PULL},
    {HPL__FETCH_MOVE_SUSPECT, HPL__FEV_MOVE_NONE, 0, 0, HPL__FETCH_PULL, HPL__FA_REARM},
    {HPL__FETCH_MOVE_SUSPECT, HPL__FEV_MOVE_UNSENT, 0, 0, HPL__FETCH_PULL, HPL__FA_REARM},
    {HPL__FETCH_MOVE_SUSPECT, HPL__FEV_PULLED, 0, 0, HPL__FETCH_END,
     HPL__FA_NOTE_COMPLETE | HPL__FA_SEAL},
    {HPL__FETCH_MOVE_SUSPECT, HPL__FEV_PULL_FAILED, 0, 0, HPL__FETCH_RESUME, HPL__FA_ASK},
    {HPL__FETCH_MOVE_SUSPECT, HPL__FEV_UPSTREAM_GONE, 0, 0, HPL__FETCH_RESUME,
     HPL__FA_CANCEL_PULL | HPL__FA_ASK},
    {HPL__FETCH_MOVE_SUSPECT, HPL__FEV_DROPPED, 0, 0, HPL__FETCH_ORPHAN,
     HPL__FA_CANCEL_PULL | ANY_FAIL},
    {HPL__FETCH_MOVE_SUSPECT, HPL__FEV_DRAIN, 0, 0, HPL__FETCH_END, HPL__FA_CANCEL_PULL},
    /* deleted: late answers that listed us are undone */
    {HPL__FETCH_ORPHAN, HPL__FEV_SENDER, 0, 0, HPL__FETCH_ORPHAN, HPL__FA_LOC_REMOVE},
    {HPL__FETCH_ORPHAN, HPL__FEV_MOVE_TO, 0, 0, HPL__FETCH_ORPHAN, HPL__FA_LOC_REMOVE},
};
#define NSPEC (sizeof spec / sizeof spec[0])

static const row *spec_find(hpl__fetch_state st, hpl__fetch_event ev, unsigned in) {
  for (size_t i = 0; i < NSPEC; i++)
    if (spec[i].from == st && spec[i].ev == ev && (in & spec[i].mask) == spec[i].in)
      return &spec[i];
  return NULL;
}

/* Every (state, event, input): as the specification says, and anything it
 * does not list changes nothing and does nothing (stale or irrelevant). */
static void test_every_transition(void **state) {
  (void)state;
  for (int st = 0; st < HPL__FETCH_NSTATES; st++)
    for (int ev = 0; ev < HPL__FEV_NEVENTS; ev++)
      for (unsigned in = 0; in <= HPL__FIN_ALL; in++) {
        unsigned a = 0xdead;
        hpl__fetch_state to = hpl__fetch_next((hpl__fetch_state)st, (hpl__fetch_event)ev, in, &a);
        const row *r = spec_find((hpl__fetch_state)st, (hpl__fetch_event)ev, in);
        char what[96];
        snprintf(what, sizeof what, "%s --%s[in 0x%x]-->",
                 hpl__fetch_state_name((hpl__fetch_state)st),
                 hpl__fetch_event_name((hpl__fetch_event)ev), in);
        if (r) {
          if (to != r->to || a != r->actions)
            fail_msg("%s %s [0x%x], expected %s [0x%x]", what, hpl__fetch_state_name(to), a,
                     hpl__fetch_state_name(r->to), r->actions);
        } else if (to != (hpl__fetch_state)st || a != 0) {
          fail_msg("%s %s [0x%x], expected no change", what, hpl__fetch_state_name(to), a);
        }
      }
}

/* Properties that make the driver safe, whatever the table says. */
static void test_invariants(void **state) {
  (void)state;
  for (int st = 0; st < HPL__FETCH_NSTATES; st++)
    for (int ev = 0; ev < HPL__FEV_NEVENTS; ev++)
      for (unsigned in = 0; in <= HPL__FIN_ALL; in++) {
        unsigned a;
        hpl__fetch_state to = hpl__fetch_next((hpl__fetch_state)st, (hpl__fetch_event)ev, in, &a);
        int pulling =
            st == HPL__FETCH_PULL || st == HPL__FETCH_MOVE_CRAWL || st == HPL__FETCH_MOVE_SUSPECT;
        /* a pull starts only into PULL; asks only from states that wait for them */
        if (a & HPL__FA_PULL) assert_int_equal(to, HPL__FETCH_PULL);
        if (a & HPL__FA_ASK) assert_true(to == HPL__FETCH_ASK || to == HPL__FETCH_RESUME);
        if (a & HPL__FA_ASK_COMPLETE) assert_int_equal(to, HPL__FETCH_MOVE_CRAWL);
        if (a & HPL__FA_ASK_SUSPECT) assert_int_equal(to, HPL__FETCH_MOVE_SUSPECT);
        /* a report is answered before another goes out */
        if (st == HPL__FETCH_MOVE_CRAWL || st == HPL__FETCH_MOVE_SUSPECT)
          assert_false(a & (HPL__FA_ASK_COMPLETE | HPL__FA_ASK_SUSPECT));
        /* a stream is watched for silence again only while it runs */
        if (a & HPL__FA_REARM) assert_true(pulling && (to == HPL__FETCH_PULL || (int)to == st));
        /* the GRANT is waited for in GRANT only, and leaving it by an
         * answer stops the wait (grant-late: it is over already) */
        if (a & HPL__FA_GRANT_WAIT) assert_int_equal(to, HPL__FETCH_GRANT);
        if (st == HPL__FETCH_GRANT && to != HPL__FETCH_GRANT && ev != HPL__FEV_GRANT_LATE)
          assert_true(a & HPL__FA_GRANT_STOP);
        if (a & HPL__FA_GRANT_STOP) assert_int_equal(st, HPL__FETCH_GRANT);
        /* the room wait ends only from ROOM: by its own answer, or undone */
        if (a & HPL__FA_UNROOM) assert_int_equal(st, HPL__FETCH_ROOM);
        if (st == HPL__FETCH_ROOM && (to == HPL__FETCH_ORPHAN)) assert_true(a & HPL__FA_UNROOM);
        /* reporting a silent sender never stops the stream it may still send */
        if (a & HPL__FA_ASK_SUSPECT) assert_false(a & HPL__FA_CANCEL_PULL);
        /* giving up is final and always forgets the object */
        if (a & HPL__FA_FAIL) {
          assert_true(a & HPL__FA_FORGET);
          assert_true(to == HPL__FETCH_END || to == HPL__FETCH_ORPHAN);
        }
        /* a pull that is running cannot be left behind by a terminal state */
        if (pulling && (to == HPL__FETCH_END || to == HPL__FETCH_ORPHAN) && ev != HPL__FEV_PULLED)
          assert_true(a & HPL__FA_CANCEL_PULL);
        /* sealed and failed never both */
        assert_false((a & HPL__FA_SEAL) && (a & HPL__FA_FAIL));
        /* nothing ever leaves END */
        if (st == HPL__FETCH_END) {
          assert_int_equal(to, HPL__FETCH_END);
          assert_int_equal(a, 0);
        }
      }
}

/* Run a history of events from `st`, inputs `in`; return the last state
 * and the OR of every action. */
static hpl__fetch_state run_from(hpl__fetch_state st, const hpl__fetch_event *evs, size_t n,
                                 unsigned in, unsigned *all) {
  *all = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned a;
    st = hpl__fetch_next(st, evs[i], in, &a);
    *all |= a;
  }
  return st;
}

/* The same from ASK, where a GET's start leaves a fetch (its HPL__FA_ASK not
 * counted). */
static hpl__fetch_state run(const hpl__fetch_event *evs, size_t n, unsigned in, unsigned *all) {
  unsigned a;
  return run_from(hpl__fetch_next(HPL__FETCH_NEW, HPL__FEV_START, 0, &a), evs, n, in, all);
}

static void test_histories(void **state) {
  (void)state;
  unsigned all;
  /* a plain broadcast receiver */
  const hpl__fetch_event plain[] = {HPL__FEV_SENDER, HPL__FEV_PULLED};
  assert_int_equal(run(plain, 2, 0, &all), HPL__FETCH_END);
  assert_int_equal(all, HPL__FA_PULL | HPL__FA_NOTE_COMPLETE | HPL__FA_SEAL);
  /* a sender dies mid-stream; the next one finishes, bytes kept */
  const hpl__fetch_event resumed[] = {HPL__FEV_SENDER, HPL__FEV_PULL_FAILED, HPL__FEV_SENDER,
                                      HPL__FEV_PULLED};
  assert_int_equal(run(resumed, 4, 0, &all), HPL__FETCH_END);
  assert_false(all & (HPL__FA_FAIL | HPL__FA_LOC_REMOVE));
  /* crawling partial sender: moved to a complete copy */
  const hpl__fetch_event moved[] = {HPL__FEV_SENDER, HPL__FEV_CRAWL, HPL__FEV_CRAWL,
                                    HPL__FEV_MOVE_TO, HPL__FEV_PULLED};
  assert_int_equal(run(moved, 5, 0, &all), HPL__FETCH_END);
  /* the crawl's answer comes after the pull broke: it is stale and ignored,
   * the ordinary answer decides */
  const hpl__fetch_event stale[] = {HPL__FEV_SENDER, HPL__FEV_CRAWL, HPL__FEV_PULL_FAILED,
                                    HPL__FEV_MOVE_TO};
  assert_int_equal(run(stale, 4, 0, &all), HPL__FETCH_RESUME);
  /* a silent sender: the stream goes on while the report is out; the
   * directory names another sender, and the first stream is cancelled
   * before the second starts (never two streams into one object) */
  const hpl__fetch_event silent[] = {HPL__FEV_SENDER, HPL__FEV_SUSPECT, HPL__FEV_SUSPECT,
                                     HPL__FEV_MOVE_TO};
  assert_int_equal(run(silent, 4, 0, &all), HPL__FETCH_PULL);
  unsigned a;
  assert_int_equal(hpl__fetch_next(HPL__FETCH_MOVE_SUSPECT, HPL__FEV_MOVE_TO, 0, &a),
                   HPL__FETCH_PULL);
  assert_true((a & HPL__FA_CANCEL_PULL) && (a & HPL__FA_PULL));
  /* told to stay: back to pulling, the same stream */
  const hpl__fetch_event stay[] = {HPL__FEV_SENDER, HPL__FEV_SUSPECT, HPL__FEV_MOVE_NONE,
                                   HPL__FEV_PULLED};
  assert_int_equal(run(stay, 4, 0, &all), HPL__FETCH_END);
  assert_false(all & HPL__FA_CANCEL_PULL);
  /* deleted while asking: the late answer is undone, nothing is sealed */
  const hpl__fetch_event deleted[] = {HPL__FEV_DROPPED, HPL__FEV_SENDER};
  assert_int_equal(run(deleted, 2, 0, &all), HPL__FETCH_ORPHAN);
  assert_true(all & HPL__FA_LOC_REMOVE);
  assert_false(all & (HPL__FA_SEAL | HPL__FA_PULL));
  /* an object that does not exist yet: waiters with time left ask again */
  const hpl__fetch_event waiting[] = {HPL__FEV_TIMEOUT, HPL__FEV_TIMEOUT, HPL__FEV_INLINE};
  assert_int_equal(run(waiting, 3, HPL__FIN_WAITERS_LEFT, &all), HPL__FETCH_END);
  assert_int_equal(all, HPL__FA_ASK | HPL__FA_SEAL);
  /* lost while resuming: the directory is told we hold nothing */
  const hpl__fetch_event lost[] = {HPL__FEV_SENDER, HPL__FEV_UPSTREAM_GONE, HPL__FEV_REFUSED};
  assert_int_equal(run(lost, 3, 0, &all), HPL__FETCH_END);
  assert_true(all & HPL__FA_LOC_REMOVE);
  assert_true(all & HPL__FA_FAIL);
}

/* The states issue 39 took out of flags: the GRANT a granted GET waits
 * for, the answer kept while its buffer waits for room, and which report
 * a moving fetch has out. */
static void test_sub_states(void **state) {
  (void)state;
  unsigned all;
  /* a granted GET: the GRANT comes, the wait stops, the pull starts */
  const hpl__fetch_event granted[] = {HPL__FEV_GRANTED, HPL__FEV_SENDER, HPL__FEV_PULLED};
  assert_int_equal(run_from(HPL__FETCH_NEW, granted, 3, 0, &all), HPL__FETCH_END);
  assert_int_equal(all, HPL__FA_GRANT_WAIT | HPL__FA_GRANT_STOP | HPL__FA_PULL |
                            HPL__FA_NOTE_COMPLETE | HPL__FA_SEAL);
  /* ... or it does not come in time: asked as usual; a GRANT after that is
   * an ordinary (or stale) answer */
  const hpl__fetch_event late[] = {HPL__FEV_GRANTED, HPL__FEV_GRANT_LATE, HPL__FEV_SENDER};
  assert_int_equal(run_from(HPL__FETCH_NEW, late, 3, 0, &all), HPL__FETCH_PULL);
  assert_int_equal(all, HPL__FA_GRANT_WAIT | HPL__FA_ASK | HPL__FA_PULL);
  /* a GRANT nobody asked for starts the fetch as its first answer */
  const hpl__fetch_event unasked[] = {HPL__FEV_SENDER, HPL__FEV_PULLED};
  assert_int_equal(run_from(HPL__FETCH_NEW, unasked, 2, 0, &all), HPL__FETCH_END);
  assert_false(all & HPL__FA_ASK);
  /* the answer waits for room, then goes on as it said (a timeout of an
   * old ask, or a stale move answer, changes nothing meanwhile) */
  const hpl__fetch_event room[] = {HPL__FEV_START, HPL__FEV_ROOM_WAIT, HPL__FEV_TIMEOUT,
                                   HPL__FEV_MOVE_TO, HPL__FEV_SENDER};
  assert_int_equal(run_from(HPL__FETCH_NEW, room, 5, HPL__FIN_WAITERS_LEFT, &all), HPL__FETCH_PULL);
  assert_int_equal(all, HPL__FA_ASK | HPL__FA_PULL);
  /* no room in time: the waiters fail, the location goes */
  const hpl__fetch_event noroom[] = {HPL__FEV_START, HPL__FEV_ROOM_WAIT, HPL__FEV_BAD_SENDER};
  assert_int_equal(run_from(HPL__FETCH_NEW, noroom, 3, 0, &all), HPL__FETCH_END);
  assert_true((all & HPL__FA_FAIL) && (all & HPL__FA_LOC_REMOVE));
  /* deleted while its answer waits for room: the wait ends, and the
   * location the answer gave us is undone (inline bytes gave none) */
  const hpl__fetch_event gone[] = {HPL__FEV_START, HPL__FEV_ROOM_WAIT, HPL__FEV_DROPPED};
  assert_int_equal(run_from(HPL__FETCH_NEW, gone, 3, HPL__FIN_HELD_SENDER, &all),
                   HPL__FETCH_ORPHAN);
  assert_true((all & HPL__FA_UNROOM) && (all & HPL__FA_LOC_REMOVE));
  assert_int_equal(run_from(HPL__FETCH_NEW, gone, 3, 0, &all), HPL__FETCH_ORPHAN);
  assert_false(all & HPL__FA_LOC_REMOVE);
  /* a crawl's report out, then silence: not reported twice, watched again */
  const hpl__fetch_event crawl_quiet[] = {HPL__FEV_START, HPL__FEV_SENDER, HPL__FEV_CRAWL,
                                          HPL__FEV_SUSPECT, HPL__FEV_MOVE_NONE};
  assert_int_equal(run_from(HPL__FETCH_NEW, crawl_quiet, 5, 0, &all), HPL__FETCH_PULL);
  assert_false(all & HPL__FA_ASK_SUSPECT);
  assert_true(all & HPL__FA_REARM);
  /* a report that cannot be sent: pulling on; a silent sender is watched
   * again, a crawling one is not (its crawl is reported again later) */
  unsigned a;
  assert_int_equal(hpl__fetch_next(HPL__FETCH_MOVE_SUSPECT, HPL__FEV_MOVE_UNSENT, 0, &a),
                   HPL__FETCH_PULL);
  assert_int_equal(a, HPL__FA_REARM);
  assert_int_equal(hpl__fetch_next(HPL__FETCH_MOVE_CRAWL, HPL__FEV_MOVE_UNSENT, 0, &a),
                   HPL__FETCH_PULL);
  assert_int_equal(a, 0);
}

static void test_names(void **state) {
  (void)state;
  for (int st = 0; st < HPL__FETCH_NSTATES; st++)
    assert_string_not_equal(hpl__fetch_state_name((hpl__fetch_state)st), "?");
  for (int ev = 0; ev < HPL__FEV_NEVENTS; ev++)
    assert_string_not_equal(hpl__fetch_event_name((hpl__fetch_event)ev), "?");
  assert_string_equal(hpl__fetch_state_name(HPL__FETCH_NSTATES), "?");
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
