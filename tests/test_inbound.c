/* test_inbound.c - a store pulls copies of large objects a few at a time
 * (hoplite-store --inbound-pulls, store/puller.c): many senders converging
 * on one node's link would overflow its queue. On real processes: one node
 * gets many 2 MiB objects from three others at once; all arrive intact,
 * the ones over the limit waited their turn (pulls_queued); without a
 * limit none waits, nor do copies of 4 MiB or more; 100 KiB copies take
 * turns too, 16 KiB ones do not. The copies go in ring
 * order of their senders' node ids from the receiver's own, the first
 * ones too, whatever order they were asked in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "hoplite.h"

#define NOBJ 9

/* Nodes 1..3 put NOBJ objects of `size` bytes between them; node 0 gets
 * them all with one call. Returns node 0's pulls_queued after. */
static uint64_t get_all_at(uint64_t size, const char *dir_args, const char *store_args) {
  hpl__lc *lc = th_cluster(4, 128ull << 20, dir_args, store_args);
  hpl_client *c[4];
  for (int i = 0; i < 4; i++) c[i] = th_connect(lc, i);
  char ids[NOBJ][32];
  const char *idp[NOBJ];
  for (int k = 0; k < NOBJ; k++) {
    snprintf(ids[k], sizeof ids[k], "in/%d", k);
    idp[k] = ids[k];
    th_put_pattern(c[1 + k % 3], ids[k], size, (uint64_t)k + 1);
  }
  hpl_buf *bufs[NOBJ];
  int rcs[NOBJ];
  assert_int_equal(hpl_get_many(c[0], idp, NOBJ, th_ms(30000), bufs, rcs), 0);
  for (int k = 0; k < NOBJ; k++) {
    assert_int_equal(rcs[k], 0);
    assert_int_equal(hpl_buf_size(bufs[k]), size);
    assert_true(th_check_pattern(hpl_buf_data(bufs[k]), size, (uint64_t)k + 1));
    hpl_release(c[0], bufs[k]);
  }
  uint64_t queued = th_counter(c[0], "pulls_queued");
  assert_int_equal(th_counter(c[0], "pulls_made"), NOBJ);
  for (int i = 0; i < 4; i++) hpl_close(c[i]);
  th_stop(lc, 0);
  return queued;
}

static uint64_t get_all(uint64_t size, const char *store_args) {
  return get_all_at(size, NULL, store_args);
}

static void test_large_pulls_take_turns(void **state) {
  (void)state;
  uint64_t q = get_all(2ull << 20, "--inbound-pulls 2");
  fprintf(stderr, "pulls that waited for a slot: %llu of %d\n", (unsigned long long)q, NOBJ);
  assert_true(q >= 1);
  assert_true(q <= NOBJ - 2);
}

static void test_no_limit(void **state) {
  (void)state;
  assert_int_equal(get_all(2ull << 20, "--inbound-pulls 0"), 0);
}

/* Partitions of 64 KiB take turns as well (puller.c: PULL_BIG is 32 KiB),
 * so that seven of them do not fill the receiver's inbound queue; 16 KiB
 * copies (the inline limit lowered so they are pulled) never wait. */
static void test_partitions_take_turns(void **state) {
  (void)state;
  uint64_t q = get_all_at(100u << 10, "--inline-max 8K", "--inbound-pulls 2");
  assert_true(q >= 1);
  assert_true(q <= NOBJ - 2);
  assert_int_equal(get_all_at(16u << 10, "--inline-max 8K", "--inbound-pulls 1"), 0);
}

/* Copies of 4 MiB or more never wait (puller.c: PULL_LONG). */
static void test_long_copies_never_wait(void **state) {
  (void)state;
  assert_int_equal(get_all(6ull << 20, "--inbound-pulls 1"), 0);
}

/* Node 0 asks for one 2 MiB object from each of nodes 1..4 in the reverse
 * of the ring order (the farthest sender first), one slot: the store's
 * trace (HOPLITE_TRACE, inherited by the stores) must show its pulls going
 * in ring order, the nearest first. Before, the first answer took the free
 * slot, so every receiver of a shuffle started on the same senders. */
static void test_ring_order_from_the_first(void **state) {
  (void)state;
  char trace[] = "/tmp/hpl-inbound-trace-XXXXXX";
  int fd = mkstemp(trace);
  assert_true(fd >= 0);
  close(fd);
  setenv("HOPLITE_TRACE", trace, 1);
  hpl__lc *lc = th_cluster(5, 128ull << 20, NULL, "--inbound-pulls 1");
  unsetenv("HOPLITE_TRACE"); /* (the stores have it; this process never traced) */
  hpl_client *c[5];
  uint64_t node[5];
  for (int i = 0; i < 5; i++) {
    c[i] = th_connect(lc, i);
    node[i] = th_node_id(c[i]);
  }
  int by_ring[4] = {1, 2, 3, 4}; /* senders, nearest following node 0 first */
  for (int a = 0; a < 4; a++)
    for (int b = a + 1; b < 4; b++)
      if (node[by_ring[b]] - node[0] < node[by_ring[a]] - node[0]) {
        int t = by_ring[a];
        by_ring[a] = by_ring[b];
        by_ring[b] = t;
      }
  char ids[4][32];
  const char *idp[4];
  for (int k = 0; k < 4; k++) {
    int from = by_ring[3 - k]; /* asked farthest first */
    snprintf(ids[k], sizeof ids[k], "ring/%d", from);
    idp[k] = ids[k];
    th_put_pattern(c[from], ids[k], 2ull << 20, (uint64_t)from);
  }
  hpl_buf *bufs[4];
  int rcs[4];
  assert_int_equal(hpl_get_many(c[0], idp, 4, th_ms(30000), bufs, rcs), 0);
  for (int k = 0; k < 4; k++) {
    assert_int_equal(rcs[k], 0);
    assert_true(th_check_pattern(hpl_buf_data(bufs[k]), 2ull << 20, (uint64_t)by_ring[3 - k]));
    hpl_release(c[0], bufs[k]);
  }
  for (int i = 0; i < 5; i++) hpl_close(c[i]);
  th_stop(lc, 0);
  FILE *f = fopen(trace, "r");
  assert_non_null(f);
  char line[512], ev[64], id[256];
  int seen = 0, want = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%*s %*s %63s %255s", ev, id) == 2 && !strcmp(ev, "s.pullgo") &&
        !strncmp(id, "ring/", 5)) {
      fprintf(stderr, "pull %d: %s\n", seen, id);
      if (seen < 4 && atoi(id + 5) == by_ring[seen]) want++;
      seen++;
    }
  fclose(f);
  unlink(trace);
  assert_int_equal(seen, 4);
  assert_int_equal(want, 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_large_pulls_take_turns),
      cmocka_unit_test(test_partitions_take_turns),
      cmocka_unit_test(test_no_limit),
      cmocka_unit_test(test_long_copies_never_wait),
      cmocka_unit_test(test_ring_order_from_the_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
