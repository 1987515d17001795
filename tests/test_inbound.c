/* test_inbound.c - a store pulls copies of large objects a few at a time
 * (hoplite-store --inbound-pulls, store/puller.c): many senders converging
 * on one node's link would overflow its queue. On real processes: one node
 * gets many 2 MiB objects from three others at once; all arrive intact,
 * the ones over the limit waited their turn (pulls_queued); without a
 * limit none waits, nor do copies of 4 MiB or more. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"
#include "hoplite.h"

#define NOBJ 9

/* Nodes 1..3 put NOBJ objects of `size` bytes between them; node 0 gets
 * them all with one call. Returns node 0's pulls_queued after. */
static uint64_t get_all(uint64_t size, const char *store_args) {
  hpl__lc *lc = th_cluster(4, 128ull << 20, NULL, store_args);
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

/* Copies of 4 MiB or more never wait (puller.c: PULL_LONG). */
static void test_long_copies_never_wait(void **state) {
  (void)state;
  assert_int_equal(get_all(6ull << 20, "--inbound-pulls 1"), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_large_pulls_take_turns),
      cmocka_unit_test(test_no_limit),
      cmocka_unit_test(test_long_copies_never_wait),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
