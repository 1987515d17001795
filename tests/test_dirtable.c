/* test_dirtable.c - the directory's object table and sender choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hoplite.h"
#include "objects.h"

#define MB (1ull << 20)

static void test_put_and_exists(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 1);
  dir_obj *o = dtab_get(&t, "x");
  assert_int_equal(o->state, OBJ_PENDING);
  assert_int_equal(dtab_add_loc(&t, o, 1, 100 * MB, 0, 1), 0); /* origin, still writing */
  assert_int_equal(o->state, OBJ_READY);
  /* another put of the same id anywhere is refused */
  assert_int_equal(dtab_add_loc(&t, o, 2, 100 * MB, 0, 1), HPL_EEXIST);
  /* the origin re-announcing itself (after a reconnect) is fine */
  assert_int_equal(dtab_add_loc(&t, o, 1, 100 * MB, 1, 1), 0);
  assert_int_equal(o->nlocs, 1);
  assert_true(o->locs->complete);
  assert_true(o->ready_seq > 0);
  /* a copy of another size is a mismatch */
  dir_obj *o2 = dtab_get(&t, "y");
  assert_int_equal(dtab_add_loc(&t, o2, 1, 10, 1, 1), 0);
  assert_int_equal(dtab_add_loc(&t, o2, 2, 11, 1, 0), HPL_EMISMATCH);
  dtab_clear(&t);
}

static void test_inline(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 1);
  dir_obj *o = dtab_get(&t, "small");
  uint8_t *d = malloc(5);
  memcpy(d, "hello", 5);
  assert_int_equal(dtab_set_inline(&t, o, d, 5), 0);
  assert_int_equal(t.inline_bytes, 5);
  uint8_t *d2 = malloc(5);
  assert_int_equal(dtab_set_inline(&t, o, d2, 5), HPL_EEXIST);
  free(d2);
  /* inline objects are never lost, whatever happens to nodes */
  dtab_node_gone(&t, 1, NULL, NULL);
  assert_false(dtab_check_lost(&t, o));
  dtab_remove(&t, o);
  assert_int_equal(t.inline_bytes, 0);
  dtab_clear(&t);
}

/* Concurrent receivers with one sender slot per copy form a chain. */
static void test_receivers_form_chain(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 1);
  dir_obj *o = dtab_get(&t, "big");
  dtab_add_loc(&t, o, 1, 64 * MB, 1, 1);
  uint64_t s;
  assert_int_equal(dtab_pick_sender(&t, o, 2, 0, &s), 0);
  assert_int_equal(s, 1);
  assert_int_equal(dtab_pick_sender(&t, o, 3, 0, &s), 0);
  assert_int_equal(s, 2); /* node 1 busy: the partial copy at 2 serves */
  assert_int_equal(dtab_pick_sender(&t, o, 4, 0, &s), 0);
  assert_int_equal(s, 3);
  for (dir_loc *l = o->locs; l; l = l->next) assert_true(l->serving <= 1);
  /* 2 completes: node 1 is free again; a late receiver prefers the
   * complete idle copy */
  dtab_loc_complete(&t, o, 2, 64 * MB);
  assert_int_equal(dtab_pick_sender(&t, o, 5, 0, &s), 0);
  assert_int_equal(s, 1);
  /* 2 is complete and idle (3 pulls from it: busy) -> next goes to 4 or 5? */
  assert_int_equal(dtab_pick_sender(&t, o, 6, 0, &s), 0);
  assert_true(s == 4 || s == 5);
  dtab_clear(&t);
}

static void test_more_senders(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 2);
  dir_obj *o = dtab_get(&t, "big");
  dtab_add_loc(&t, o, 1, MB, 1, 1);
  uint64_t s;
  dtab_pick_sender(&t, o, 2, 0, &s);
  assert_int_equal(s, 1);
  dtab_pick_sender(&t, o, 3, 0, &s);
  assert_int_equal(s, 1); /* two slots */
  dtab_pick_sender(&t, o, 4, 0, &s);
  assert_true(s == 2 || s == 3);
  dtab_clear(&t);
}

static void test_no_cycle_and_lost(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 1);
  dir_obj *o = dtab_get(&t, "o");
  dtab_add_loc(&t, o, 1, MB, 1, 1);
  uint64_t s;
  dtab_pick_sender(&t, o, 2, 0, &s); /* 1 -> 2 */
  dtab_pick_sender(&t, o, 3, 0, &s); /* 2 -> 3 */
  dtab_pick_sender(&t, o, 4, 0, &s); /* 3 -> 4 */
  assert_true(dtab_depends_on(o, 4, 2));
  assert_false(dtab_depends_on(o, 2, 4));
  /* the source dies: 2 asks again; everything else pulls from 2 */
  dtab_node_gone(&t, 1, NULL, NULL);
  assert_int_equal(dtab_pick_sender(&t, o, 2, 0, &s), HPL_ELOST);
  assert_int_equal(o->state, OBJ_LOST);
  dtab_clear(&t);
}

static void test_resume_elsewhere(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 1);
  dir_obj *o = dtab_get(&t, "o");
  dtab_add_loc(&t, o, 1, MB, 1, 1);
  dtab_add_loc(&t, o, 9, MB, 1, 0); /* a second complete copy */
  uint64_t s;
  dtab_pick_sender(&t, o, 2, 0, &s);
  assert_int_equal(s, 1);
  dtab_pick_sender(&t, o, 3, 0, &s); /* 9 is complete and idle: preferred */
  assert_int_equal(s, 9);
  dtab_pick_sender(&t, o, 4, 0, &s); /* both complete copies busy: 2 or 3 */
  uint64_t first = s;
  assert_true(first == 2 || first == 3);
  /* 4's sender fails: it asks again, must not get itself or a dependant */
  dtab_loc_remove(&t, o, first);
  assert_int_equal(dtab_pick_sender(&t, o, 4, 0, &s), 0);
  assert_true(s != 4 && s != first);
  assert_false(dtab_depends_on(o, s, 4));
  dtab_clear(&t);
}

static void test_wait_when_all_busy(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 1);
  dir_obj *p = dtab_get(&t, "pending");
  uint64_t s;
  assert_int_equal(dtab_pick_sender(&t, p, 2, 0, &s), 1); /* does not exist yet */
  dir_obj *o = dtab_get(&t, "o");
  dtab_add_loc(&t, o, 1, MB, 1, 1);
  dtab_pick_sender(&t, o, 2, 0, &s);
  /* 2 fails and is gone; 3 asks while 1 still counts 2 as its receiver? no:
   * removing 2 frees 1's slot */
  dtab_loc_remove(&t, o, 2);
  assert_int_equal(o->locs->serving, 0);
  assert_int_equal(dtab_pick_sender(&t, o, 3, 0, &s), 0);
  assert_int_equal(s, 1);
  /* now 1 is busy with 3 and 3 is the only other copy -> 4 gets 3 */
  assert_int_equal(dtab_pick_sender(&t, o, 4, 0, &s), 0);
  assert_int_equal(s, 3);
  dtab_clear(&t);
}

/* A sender reported as failed is avoided while others exist, and still
 * used when it is the only copy (it may only have had a hiccup). */
static void test_avoid(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 1);
  dir_obj *o = dtab_get(&t, "o");
  dtab_add_loc(&t, o, 1, MB, 1, 1);
  uint64_t s;
  assert_int_equal(dtab_pick_sender(&t, o, 2, 0, &s), 0);
  assert_int_equal(s, 1);
  /* 2's stream from 1 broke: 2 asks again avoiding 1; 1 is the only copy */
  dtab_release_upstream(o, 2);
  assert_int_equal(o->locs->serving, 0);
  assert_int_equal(dtab_pick_sender(&t, o, 2, 1, &s), 0);
  assert_int_equal(s, 1);
  /* with a second complete copy the avoided one is passed over */
  dtab_add_loc(&t, o, 3, MB, 1, 0);
  dtab_release_upstream(o, 2);
  assert_int_equal(dtab_pick_sender(&t, o, 2, 1, &s), 0);
  assert_int_equal(s, 3);
  /* the other complete copy busy: a partial copy serves rather than the
   * avoided one */
  dtab_release_upstream(o, 2);
  assert_int_equal(dtab_pick_sender(&t, o, 4, 0, &s), 0); /* 4 takes 1 or 3 */
  uint64_t busy = s;
  uint64_t other = busy == 1 ? 3 : 1;
  assert_int_equal(dtab_pick_sender(&t, o, 2, other, &s), 0);
  assert_int_equal(s, 4);
  dtab_clear(&t);
}

static void test_gc(void **state) {
  (void)state;
  dtab t;
  dtab_init(&t, 1);
  dir_obj *o = dtab_get(&t, "nobody");
  assert_int_equal(t.nobjs, 1);
  dtab_gc(&t, o);
  assert_int_equal(t.nobjs, 0);
  assert_null(dtab_find(&t, "nobody"));
  dtab_clear(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_put_and_exists),   cmocka_unit_test(test_inline),
      cmocka_unit_test(test_receivers_form_chain), cmocka_unit_test(test_more_senders),
      cmocka_unit_test(test_no_cycle_and_lost), cmocka_unit_test(test_resume_elsewhere),
      cmocka_unit_test(test_wait_when_all_busy), cmocka_unit_test(test_gc),
      cmocka_unit_test(test_avoid),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
