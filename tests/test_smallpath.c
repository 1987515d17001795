/* test_smallpath.c - the short paths of small requests (issue 42), on real
 * processes: a client's STAT of an object its node does not hold goes
 * straight to the directory over the client's reader connection, with the
 * same answers (size, copies, complete, inline; errors with their detail)
 * as through its store; an object its own node holds is asked of its store,
 * whose notes to the directory are ordered before the STAT; a directory
 * that cannot be reached directly leaves stats working through the store.
 * A delete's own store drops its copy on the directory's answer (no DROP
 * round trip to it); other nodes' copies still go by DROP before the
 * answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"
#include "hoplite.h"

static hpl__lc *lc;
static hpl_client *A, *B; /* clients of node 0 and node 1 */

static int setup(void **state) {
  (void)state;
  lc = th_cluster(2, 64ull << 20, NULL, NULL);
  A = th_connect(lc, 0);
  B = th_connect(lc, 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
  return 0;
}

/* A stat from node 1 of objects node 0 put: answered by the directory
 * (dir_direct_stats), the same as node 0's own stat through its store. */
static void test_stat_direct(void **state) {
  (void)state;
  th_put_pattern(A, "sp/small", 100, 1);
  th_put_pattern(A, "sp/large", 300 << 10, 2); /* over the inline limit */
  const char *ids[] = {"sp/small", "sp/large"};
  for (int i = 0; i < 2; i++) {
    uint64_t d0 = th_dir_counter(lc, "dir_direct_stats");
    uint64_t size = 0, size_a = 0;
    uint32_t copies = 0, complete = 0, copies_a = 0, complete_a = 0;
    int inl = -1, inl_a = -1;
    assert_int_equal(hpl_stat(B, ids[i], th_ms(5000), &size, &copies, &complete, &inl), 0);
    assert_int_equal(th_dir_counter(lc, "dir_direct_stats"), d0 + 1);
    assert_int_equal(size, i == 0 ? 100 : 300 << 10);
    assert_int_equal(inl, i == 0);
    assert_int_equal(copies, 1);
    assert_int_equal(complete, 1);
    /* node 0 holds it: its stat goes through its store, same answer */
    assert_int_equal(hpl_stat(A, ids[i], th_ms(5000), &size_a, &copies_a, &complete_a, &inl_a),
                     0);
    assert_int_equal(th_dir_counter(lc, "dir_direct_stats"), d0 + 1);
    assert_int_equal(size_a, size);
    assert_int_equal(copies_a, copies);
    assert_int_equal(complete_a, complete);
    assert_int_equal(inl_a, inl);
  }
  /* a missing object: the directory's error and detail, as via a store */
  uint64_t d0 = th_dir_counter(lc, "dir_direct_stats");
  assert_int_equal(hpl_stat(B, "sp/none", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  assert_non_null(strstr(hpl_errdetail(B), "sp/none"));
  assert_int_equal(th_dir_counter(lc, "dir_direct_stats"), d0 + 1);
  /* deleted by its maker: a direct stat right after no longer finds it */
  assert_int_equal(hpl_delete(A, "sp/small", th_ms(5000)), 0);
  assert_int_equal(hpl_stat(B, "sp/small", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
}

/* A large put's last note to the directory (its copy complete) is one-way:
 * a stat on the putting node right after must still see it complete, so it
 * goes through that node's store, behind the note. */
static void test_stat_after_own_put(void **state) {
  (void)state;
  char id[32];
  for (int i = 0; i < 20; i++) {
    snprintf(id, sizeof id, "sp/own/%d", i);
    th_put_pattern(A, id, 200 << 10, (uint64_t)i);
    uint32_t complete = 0;
    assert_int_equal(hpl_stat(A, id, th_ms(5000), NULL, NULL, &complete, NULL), 0);
    assert_int_equal(complete, 1);
  }
}

/* A directory that seals its connections (--encrypt) is never read
 * directly by clients (they cannot seal): stats go through the store and
 * still answer (the directory's counters cannot be read unsealed here). */
static void test_stat_through_store_when_sealed(void **state) {
  (void)state;
  hpl__lc *sl = th_cluster(2, 64ull << 20, "--encrypt", "--encrypt");
  hpl_client *a = th_connect(sl, 0), *b = th_connect(sl, 1);
  th_put_pattern(a, "sp/sealed", 100, 3);
  uint64_t size = 0;
  for (int i = 0; i < 3; i++) { /* the first finds out, the others back off */
    assert_int_equal(hpl_stat(b, "sp/sealed", th_ms(5000), &size, NULL, NULL, NULL), 0);
    assert_int_equal(size, 100);
  }
  hpl_close(a);
  hpl_close(b);
  th_stop(sl, 0);
}

/* A delete from the node holding the only copy: no DROP goes to it, its
 * store drops the copy on the answer, before the client hears it; a copy
 * another node fetched still goes by DROP before the answer. Both nodes
 * then find nothing, through their stores as directly. */
static void test_delete_drops_here(void **state) {
  (void)state;
  for (int shared = 0; shared < 2; shared++) {
    const char *id = shared ? "sp/del/shared" : "sp/del/own";
    th_put_pattern(A, id, shared ? 300 << 10 : 100, 7); /* large: B holds a copy */
    if (shared) {
      hpl_buf *b = NULL;
      assert_int_equal(hpl_get(B, id, th_ms(5000), &b), 0);
      hpl_release(B, b);
    }
    uint64_t here0 = th_counter(A, "deletes_dropped_here");
    uint64_t asker0 = th_dir_counter(lc, "dir_deletes_dropped_by_asker");
    int local = -1;
    assert_int_equal(hpl_contains(A, id, th_ms(5000), &local), 0);
    assert_int_equal(local, 1);
    assert_int_equal(hpl_delete(A, id, th_ms(5000)), 0);
    assert_int_equal(th_counter(A, "deletes_dropped_here"), here0 + 1);
    assert_int_equal(th_dir_counter(lc, "dir_deletes_dropped_by_asker"), asker0 + 1);
    /* gone at once, at the deleting node and (DROP before the answer) at the other */
    assert_int_equal(hpl_contains(A, id, th_ms(5000), &local), 0);
    assert_int_equal(local, 0);
    assert_int_equal(hpl_contains(B, id, th_ms(5000), &local), 0);
    assert_int_equal(local, 0);
    hpl_buf *b = NULL; /* a get of an id that does not exist waits for a put */
    assert_int_equal(hpl_get(A, id, 0, &b), HPL_ETIMEDOUT);
    assert_int_equal(hpl_get(B, id, 0, &b), HPL_ETIMEDOUT);
    assert_int_equal(hpl_stat(B, id, th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  }
  /* a delete of what does not exist drops nothing and says so */
  uint64_t here0 = th_counter(A, "deletes_dropped_here");
  assert_int_equal(hpl_delete(A, "sp/del/none", th_ms(5000)), HPL_ENOTFOUND);
  assert_int_equal(th_counter(A, "deletes_dropped_here"), here0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stat_direct),
      cmocka_unit_test(test_stat_after_own_put),
      cmocka_unit_test(test_delete_drops_here),
      cmocka_unit_test(test_stat_through_store_when_sealed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
