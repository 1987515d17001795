/* test_dirpick.c - the directory's sender choice (directory/objects.c) against
 * the scan it replaced: random sequences of table changes, each pick asked
 * of the real hpl__dtab_pick_sender / _pick_instead and of the reference
 * below, which must answer the same: the pick's rule written as the
 * directory first had it, a scan of the copies that walks each one's
 * chain (hpl__dtab_depends_on, and ref_last), slow and plain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hoplite.h"
#include "objects.h"

/* ------------------------------------------------------------------ the reference */

static int ref_idle(const hpl__dtab *t, const hpl__dir_loc *l) {
  return !l->unlisted && l->serving < t->max_senders &&
         (!t->usable || t->usable(l->node, t->usable_arg));
}

static int ref_bad(const hpl__dtab *t, uint64_t node, uint64_t avoid) {
  return node == avoid || (t->suspected && t->suspected(node, t->usable_arg));
}

/* A last-resort copy by definition: the avoided sender or a suspected node
 * is on its chain (itself, its upstreams, the node its chain ends naming);
 * a walk of at most one lap of the list, as a cycle is walked around. */
static int ref_last(const hpl__dtab *t, hpl__dir_obj *o, const hpl__dir_loc *l, uint64_t avoid) {
  uint64_t cur = l->node;
  for (uint32_t hops = 0; cur && hops <= o->nlocs; hops++) {
    if (ref_bad(t, cur, avoid)) return 1;
    const hpl__dir_loc *u = hpl__dtab_loc(o, cur);
    cur = u ? u->upstream : 0;
  }
  return 0;
}

/* The old pick's decision, without assigning: 0 with *sender, or its code. */
static int ref_pick(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid, int strict,
                    uint64_t *sender) {
  if (o->state == HPL__OBJ_FAILED) return o->fail_status;
  if (o->state == HPL__OBJ_LOST || hpl__dtab_check_lost(t, o)) return HPL_ELOST;
  if (o->state == HPL__OBJ_PENDING) return 1;
  hpl__dir_loc *best = NULL, *fallback = NULL, *spare = NULL;
  int viable = 0, others = 0;
  for (hpl__dir_loc *l = o->locs; l; l = l->next) {
    if (l->node == asker || l->unlisted) continue;
    if (hpl__dtab_depends_on(o, l->node, asker)) continue;
    viable = 1;
    int last = ref_last(t, o, l, avoid);
    others |= !last;
    if (!ref_idle(t, l)) continue;
    if (last) {
      if (!fallback || (l->complete && !fallback->complete)) fallback = l;
      continue;
    }
    if (t->distrusted && t->distrusted(l->node, t->usable_arg)) {
      if (!spare || (l->complete && !spare->complete)) spare = l;
      continue;
    }
    if (!best || (l->complete && !best->complete)) best = l;
    if (best->complete) break;
  }
  if (!best && !strict) best = spare;
  if (strict && !best) return 1;
  if (!best && fallback && !others) best = fallback;
  if (!best) {
    if (viable) return 1;
    hpl__dir_loc *self = hpl__dtab_loc(o, asker);
    if (self && (self->complete || self->origin)) return HPL_ESTATE;
    o->state = HPL__OBJ_LOST;
    return HPL_ELOST;
  }
  *sender = best->node;
  return 0;
}

/* ------------------------------------------------------------------ random sequences */

#define NODES 120 /* node ids 1..NODES; a sequence's object reaches ~100 copies */

static uint8_t suspect[NODES + 2], draining[NODES + 2], distrust[NODES + 2];
static uint64_t rng;

static uint32_t rnd(uint32_t n) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)((rng >> 33) % n);
}

static int f_suspected(uint64_t node, void *arg) {
  (void)arg;
  return node <= NODES && suspect[node];
}
static int f_usable(uint64_t node, void *arg) {
  (void)arg;
  return node > NODES || !draining[node];
}
static int f_distrusted(uint64_t node, void *arg) {
  (void)arg;
  return node <= NODES && distrust[node];
}

/* A table with every node alive, usable and trusted, its filters those
 * above, at most max_senders receivers per copy; o: object `id` with its
 * origin on node 1. */
static hpl__dir_obj *table_with_origin(hpl__dtab *t, uint32_t max_senders, const char *id) {
  memset(suspect, 0, sizeof suspect);
  memset(draining, 0, sizeof draining);
  memset(distrust, 0, sizeof distrust);
  hpl__dtab_init(t, max_senders);
  t->suspected = f_suspected;
  t->usable = f_usable;
  t->distrusted = f_distrusted;
  hpl__dir_obj *o = hpl__dtab_get(t, id);
  assert_int_equal(hpl__dtab_add_loc(t, o, 1, 1000, 1, 1), 0);
  return o;
}

/* A node holding a location of o, or any node (1..NODES) if none. */
static uint64_t some_holder(hpl__dir_obj *o) {
  if (!o->nlocs || rnd(8) == 0) return 1 + rnd(NODES);
  uint32_t k = rnd(o->nlocs);
  hpl__dir_loc *l = o->locs;
  while (k-- && l->next) l = l->next;
  return l->node;
}

/* A node holding no location of o (a new asker), 0 if every node has one. */
static uint64_t some_newcomer(hpl__dir_obj *o) {
  for (int tries = 0; tries < 2 * NODES; tries++) {
    uint64_t n = 1 + rnd(NODES);
    if (!hpl__dtab_loc(o, n)) return n;
  }
  return 0;
}

static long compared, fast_cases;

/* Both picks answer alike (the reference first: it changes nothing the
 * real one would not, the lost rule aside, which the real one then sees). */
static void compare_pick(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid,
                         int strict, unsigned seed, int step) {
  uint64_t rs = 0, s = 0;
  fast_cases += avoid == 0 && o->nlocs >= HPL__DTAB_LOC_INDEX_MIN && !hpl__dtab_loc(o, asker);
  int rrc = ref_pick(t, o, asker, avoid, strict, &rs);
  int rc = strict ? hpl__dtab_pick_instead(t, o, asker, avoid, &s)
                  : hpl__dtab_pick_sender(t, o, asker, avoid, &s);
  compared++;
  if (rc != rrc || (rc == 0 && s != rs))
    fail_msg("seed %u step %d: %s(asker %llu, avoid %llu) with %u copies: reference %d/%llu, "
             "pick %d/%llu", seed, step, strict ? "pick_instead" : "pick_sender",
             (unsigned long long)asker, (unsigned long long)avoid, o->nlocs, rrc,
             (unsigned long long)rs, rc, (unsigned long long)s);
}

static void one_sequence(unsigned seed, int steps) {
  rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed * 0x100000001b3ull);
  hpl__dtab t; /* mostly one receiver per copy, as the server */
  hpl__dir_obj *o = table_with_origin(&t, 1 + (rnd(4) == 0), "obj");
  for (int step = 0; step < steps; step++) {
    if (o->state == HPL__OBJ_LOST) hpl__dtab_add_loc(&t, o, 1 + rnd(NODES), 1000, 1, 1);
    uint32_t op = rnd(100);
    uint64_t n = some_holder(o);
    if (op < 45) { /* a new receiver asks (the broadcast's case) */
      uint64_t a = some_newcomer(o);
      if (a) compare_pick(&t, o, a, rnd(10) == 0 ? some_holder(o) : 0, rnd(10) == 0, seed, step);
    } else if (op < 55) { /* anyone asks, maybe again, maybe avoiding its sender */
      compare_pick(&t, o, 1 + rnd(NODES), rnd(2) ? some_holder(o) : 0, rnd(3) == 0, seed, step);
    } else if (op < 67) {
      hpl__dtab_loc_complete(&t, o, n, 1000);
    } else if (op < 72) {
      hpl__dtab_release_upstream(o, n);
    } else if (op < 75) {
      hpl__dtab_loc_remove(&t, o, n);
      hpl__dtab_check_lost(&t, o);
    } else if (op < 77) {
      hpl__dtab_loc_unlist(&t, o, n, NULL, NULL);
    } else if (op < 80) { /* a re-report: may name a node holding none, or make a cycle */
      hpl__dtab_loc_partial(&t, o, 1 + rnd(NODES), 1000, rnd(3) ? some_holder(o) : 1 + rnd(NODES));
    } else if (op < 83) {
      hpl__dtab_add_loc(&t, o, 1 + rnd(NODES), 1000, rnd(2), 0);
    } else if (op < 86) { /* suspected, told as the server tells it */
      suspect[n] = 1;
      if (rnd(2))
        hpl__dtab_node_unresponsive(&t, n, NULL, NULL);
      else
        hpl__dtab_suspicion_changed(&t);
    } else if (op < 90) { /* heard again: no call */
      suspect[n] = 0;
    } else if (op < 94) {
      draining[n] ^= 1;
    } else if (op < 97) {
      distrust[n] ^= 1;
    } else if (op < 98) {
      hpl__dtab_node_gone(&t, n, NULL, NULL, NULL);
    } else { /* the per-copy receiver limit changes: the index is rebuilt */
      t.max_senders = 1 + rnd(3);
    }
  }
  hpl__dtab_clear(&t);
}

/* Many random sequences: every pick the same as the reference's. */
static void test_pick_matches_reference(void **state) {
  (void)state;
  compared = fast_cases = 0;
  for (unsigned seed = 1; seed <= 500; seed++) one_sequence(seed, 2000);
  printf("compared %ld picks, %ld of them a new asker of a large object with no avoided "
         "sender\n", compared, fast_cases);
  assert_true(compared > 150000);
  assert_true(fast_cases > 40000); /* the fast path was exercised */
}

/* The broadcast's case by itself: a long chain, a suspected node in it
 * (lifted without a call), completions cutting it, a re-report naming a
 * node that holds no copy yet. */
static void test_chain_cases_match(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = table_with_origin(&t, 1, "c");
  for (uint64_t a = 2; a <= 60; a++) compare_pick(&t, o, a, 0, 0, 0, (int)a);
  suspect[30] = 1;
  hpl__dtab_suspicion_changed(&t);
  compare_pick(&t, o, 61, 0, 0, 0, 61); /* waits: 60 is behind 30 */
  suspect[30] = 0;                      /* heard again, no call */
  compare_pick(&t, o, 61, 0, 0, 0, 62);
  hpl__dtab_loc_complete(&t, o, 10, 1000); /* cuts the chain at 10 */
  compare_pick(&t, o, 62, 0, 0, 0, 63);
  hpl__dtab_loc_partial(&t, o, 50, 1000, 99); /* 50 said to pull from 99 (no copy) */
  compare_pick(&t, o, 99, 0, 0, 0, 64);       /* 50..61 depend on 99 */
  compare_pick(&t, o, 63, 0, 0, 0, 65);
  hpl__dtab_clear(&t);
}

static hpl__dir_obj *fresh(hpl__dtab *t) { return table_with_origin(t, 1, "c"); }

/* A chain's summary goes stale where a link changes: a node named as an
 * upstream while holding no copy gets one (the chain through it grows past
 * it), a copy stops pulling (the chain behind it ends there). */
static void test_stale_chains(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = fresh(&t);
  /* 40 copies: a chain 1 -> 2 -> ... -> 40 */
  for (uint64_t a = 2; a <= 40; a++) compare_pick(&t, o, a, 0, 0, 0, (int)a);
  hpl__dtab_loc_partial(&t, o, 5, 1000, 77); /* 6..40 now end at 77 (no copy) */
  compare_pick(&t, o, 50, 0, 0, 0, 50);      /* behind 4, idle since 5 left it */
  hpl__dtab_loc_partial(&t, o, 60, 1000, 99); /* 60 pulls from 99 (no copy) */
  draining[40] = draining[50] = 1;
  compare_pick(&t, o, 99, 0, 0, 0, 98); /* waits: 60 pulls from it (summary made) */
  draining[40] = 0;
  compare_pick(&t, o, 99, 0, 0, 0, 99); /* behind 40, whose chain ends at 77 */
  compare_pick(&t, o, 77, 0, 0, 0, 77); /* 60 pulls from 77 now, through 99 */
  hpl__dtab_clear(&t);

  o = fresh(&t);
  for (uint64_t a = 2; a <= 40; a++) compare_pick(&t, o, a, 0, 0, 0, (int)a);
  hpl__dtab_loc_partial(&t, o, 2, 1000, 77); /* 3..40 end at 77; 1 is idle */
  compare_pick(&t, o, 50, 0, 0, 0, 50);      /* 1 */
  compare_pick(&t, o, 60, 0, 0, 0, 60);      /* 40 (chain summaries made) */
  compare_pick(&t, o, 70, 0, 0, 0, 70);      /* 50 */
  hpl__dtab_release_upstream(o, 2);          /* 3..60 end at 2 now */
  compare_pick(&t, o, 77, 0, 0, 0, 77);      /* 60 does not pull from 77 any more */
  hpl__dtab_clear(&t);

  /* a copy that pulled from nobody is re-reported pulling from 88 */
  o = fresh(&t);
  for (uint64_t a = 2; a <= 40; a++) compare_pick(&t, o, a, 0, 0, 0, (int)a);
  hpl__dtab_release_upstream(o, 40);
  draining[39] = 1;
  compare_pick(&t, o, 50, 0, 0, 0, 50); /* behind 40 (summary made: a chain's top) */
  hpl__dtab_loc_partial(&t, o, 40, 1000, 88);
  compare_pick(&t, o, 88, 0, 0, 0, 88); /* 50 pulls from 88 now, through 40 */
  hpl__dtab_clear(&t);

  /* a copy that pulled from nobody is put behind a chain ending at 77 */
  o = fresh(&t);
  for (uint64_t a = 2; a <= 40; a++) compare_pick(&t, o, a, 0, 0, 0, (int)a);
  hpl__dtab_loc_partial(&t, o, 60, 1000, 77);
  hpl__dtab_release_upstream(o, 2); /* 2..40: a chain of their own */
  draining[1] = 1;
  compare_pick(&t, o, 50, 0, 0, 0, 51); /* behind 40 (summaries made) */
  compare_pick(&t, o, 2, 0, 0, 0, 52);  /* 2 asks again: behind 60 */
  compare_pick(&t, o, 77, 0, 0, 0, 53); /* 50 pulls from 77 now, through 2 and 60 */
  hpl__dtab_clear(&t);
}

/* Copies named a node holding no copy before the object had its indexes
 * (fewer than HPL__DTAB_LOC_INDEX_MIN copies): that node getting one later
 * changes their chains all the same. */
static void test_named_before_index(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = fresh(&t);
  for (uint64_t a = 2; a <= 10; a++) compare_pick(&t, o, a, 0, 0, 0, (int)a);
  hpl__dtab_loc_partial(&t, o, 5, 1000, 77); /* 6..10 end at 77 */
  hpl__dtab_loc_partial(&t, o, 12, 1000, 99); /* 12 pulls from 99 (no copy) */
  draining[4] = 1;
  for (uint64_t a = 13; a <= 40; a++) compare_pick(&t, o, a, 0, 0, 0, (int)a); /* two chains */
  assert_true(o->nlocs >= HPL__DTAB_LOC_INDEX_MIN);
  compare_pick(&t, o, 99, 0, 0, 0, 99); /* behind the chain ending at 77 */
  compare_pick(&t, o, 77, 0, 0, 0, 77); /* 12's chain ends at 77 now, through 99 */
  hpl__dtab_clear(&t);
}

/* A node found silent (hpl__dtab_node_unresponsive, no other call): chains
 * through it are last resorts from then on, even where no link changed. */
static void test_silent_node_seen(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = fresh(&t);
  hpl__dtab_add_loc(&t, o, 100, 1000, 1, 0); /* another complete copy */
  compare_pick(&t, o, 2, 0, 0, 0, 2);        /* 1 */
  compare_pick(&t, o, 3, 0, 0, 0, 3);        /* 100 */
  draining[3] = 1;                           /* 3 could serve later */
  for (uint64_t a = 4; a <= 40; a++) compare_pick(&t, o, a, 0, 0, 0, (int)a); /* behind 2 */
  suspect[1] = 1;
  hpl__dtab_node_unresponsive(&t, 1, NULL, NULL);
  compare_pick(&t, o, 41, 0, 0, 0, 41); /* waits for 3 rather than go behind 1 */
  hpl__dtab_clear(&t);
}

/* Copies re-reported round a cycle (2 pulls from 3, 3 from 4, 4 from 2):
 * each depends on all three, so a member asking again is given none of
 * them, whichever the scan meets first; the only other copy (the origin)
 * is draining, so the answer is a wait. */
static void test_cycle_members_depend(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = table_with_origin(&t, 2, "cyc");
  draining[1] = 1;
  assert_int_equal(hpl__dtab_loc_partial(&t, o, 2, 1000, 3), 0);
  assert_int_equal(hpl__dtab_loc_partial(&t, o, 3, 1000, 4), 0);
  assert_int_equal(hpl__dtab_loc_partial(&t, o, 4, 1000, 2), 0);
  assert_true(hpl__dtab_depends_on(o, 4, 3));
  uint64_t s = 0, rs = 0;
  assert_int_equal(ref_pick(&t, o, 3, 0, 0, &rs), 1);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 3, 0, &s), 1); /* not 4: it pulls from 3 */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 2, 0, &s), 1);
  /* a newcomer may take any member that is idle: the cycle's copies are its chain's */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 9, 0, &s), 0);
  assert_true(s >= 2 && s <= 4);
  hpl__dtab_clear(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_cases_match),
      cmocka_unit_test(test_cycle_members_depend),
      cmocka_unit_test(test_stale_chains),
      cmocka_unit_test(test_silent_node_seen),
      cmocka_unit_test(test_named_before_index),
      cmocka_unit_test(test_pick_matches_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
