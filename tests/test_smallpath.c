/* test_smallpath.c - the short paths of small requests (issue 42), on real
 * processes: a client's STAT of an object its node does not hold goes
 * straight to the directory over the client's reader connection, with the
 * same answers (size, copies, complete, inline; errors with their detail)
 * as through its store; an object its own node holds is asked of its store,
 * whose notes to the directory are ordered before the STAT; a directory
 * that cannot be reached directly leaves stats working through the store.
 * A delete's own store drops its copy on the directory's answer (no DROP
 * round trip to it); other nodes' copies still go by DROP before the
 * answer. A burst of small puts sends at most --inline-inflight bytes to the
 * directory's inline cache at once; the rest are registered as copies at
 * their node and fetched from there, intact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"
#include "hoplite.h"
#include "util.h"

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

/* Six puts of 6 KiB in one batch with --inline-inflight 15K: the first
 * ones go inline, the others wait for no answer and are registered as
 * copies (inline_deferred); every one reads back intact from the other
 * node, the deferred ones from node 0's store. Without a cap all six go
 * inline (a batch's objects of at most 8 KiB may). Told its link's rate,
 * a store's default cap is half a millisecond of it: 12.5 KB at
 * 200 Mbit/s defers some, 62.5 KB at 1 Gbit/s none. */
static void test_inline_inflight(void **state) {
  (void)state;
  static const struct {
    const char *args;
    int capped;
  } runs[] = {{"--inline-inflight 15K", 1},
              {"--inline-inflight 0", 0},
              {"--link-rate 200mbit", 1},
              {"--link-rate 1gbit", 0}};
  for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
    int capped = runs[r].capped;
    hpl__lc *cl = th_cluster(2, 64ull << 20, NULL, runs[r].args);
    hpl_client *a = th_connect(cl, 0), *b = th_connect(cl, 1);
    enum { N = 6, SZ = 6 << 10 };
    static uint8_t data[N][SZ];
    char ids[N][32];
    const char *p[N];
    const void *d[N];
    uint64_t sizes[N];
    int rcs[N];
    for (int i = 0; i < N; i++) {
      snprintf(ids[i], sizeof ids[i], "sp/burst/%d", i);
      p[i] = ids[i];
      hpl__fill_pattern(data[i], SZ, (uint64_t)(40 + i));
      d[i] = data[i];
      sizes[i] = SZ;
    }
    assert_int_equal(hpl_put_many(a, p, d, sizes, N, th_ms(10000), rcs), 0);
    uint64_t deferred = th_counter(a, "inline_deferred");
    uint64_t inl = th_counter(a, "inline_puts");
    assert_int_equal(deferred + inl, N);
    if (capped) {
      assert_true(deferred >= 1);
      assert_true(inl >= 1); /* the first always goes: nothing was on its way */
    } else {
      assert_int_equal(deferred, 0);
    }
    int inline_seen = 0;
    for (int i = 0; i < N; i++) {
      int is_inl = -1;
      assert_int_equal(hpl_stat(b, ids[i], th_ms(5000), NULL, NULL, NULL, &is_inl), 0);
      inline_seen += is_inl;
      hpl_buf *buf = NULL;
      assert_int_equal(hpl_get(b, ids[i], th_ms(10000), &buf), 0);
      assert_int_equal(hpl_buf_size(buf), SZ);
      assert_true(th_check_pattern(hpl_buf_data(buf), SZ, (uint64_t)(40 + i)));
      hpl_release(b, buf);
    }
    assert_int_equal(inline_seen, (int)inl);
    hpl_close(a);
    hpl_close(b);
    th_stop(cl, 0);
  }
}

/* A batch's objects over 8 KiB are registered as copies at their node,
 * not sent inline (a shuffle's partitions: each read once, from their
 * makers in parallel); the same object put alone goes inline, and so do a
 * batch's objects of 8 KiB or less. All read back intact elsewhere. */
static void test_batch_keeps_larger(void **state) {
  (void)state;
  static uint8_t data[4][20 << 10];
  const char *ids[] = {"sp/bk/20k", "sp/bk/9k", "sp/bk/8k", "sp/bk/4k"};
  uint64_t sizes[] = {20 << 10, 9 << 10, 8 << 10, 4 << 10};
  const void *d[4];
  int rcs[4];
  for (int i = 0; i < 4; i++) {
    hpl__fill_pattern(data[i], sizes[i], (uint64_t)(60 + i));
    d[i] = data[i];
  }
  uint64_t def0 = th_counter(A, "inline_deferred");
  uint64_t inl0 = th_counter(A, "inline_puts");
  assert_int_equal(hpl_put_many(A, ids, d, sizes, 4, th_ms(10000), rcs), 0);
  assert_int_equal(th_counter(A, "inline_deferred"), def0 + 2);
  assert_int_equal(th_counter(A, "inline_puts"), inl0 + 2);
  th_put_pattern(A, "sp/bk/alone", 20 << 10, 64); /* alone: inline */
  assert_int_equal(th_counter(A, "inline_puts"), inl0 + 3);
  for (int i = 0; i < 4; i++) {
    int is_inl = -1;
    assert_int_equal(hpl_stat(B, ids[i], th_ms(5000), NULL, NULL, NULL, &is_inl), 0);
    assert_int_equal(is_inl, i >= 2);
    hpl_buf *buf = NULL;
    assert_int_equal(hpl_get(B, ids[i], th_ms(10000), &buf), 0);
    assert_int_equal(hpl_buf_size(buf), sizes[i]);
    assert_true(th_check_pattern(hpl_buf_data(buf), sizes[i], (uint64_t)(60 + i)));
    hpl_release(B, buf);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stat_direct),
      cmocka_unit_test(test_stat_after_own_put),
      cmocka_unit_test(test_delete_drops_here),
      cmocka_unit_test(test_inline_inflight),
      cmocka_unit_test(test_batch_keeps_larger),
      cmocka_unit_test(test_stat_through_store_when_sealed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
