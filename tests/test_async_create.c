/* test_async_create.c - hpl_async_create and hpl_async_seal against real
 * directory and store processes: objects made in two steps on one thread,
 * the caller writing between them, small and large (a memfd), got with the
 * right bytes from the other store; a seal of a blocking hpl_create's
 * buffer; a create of an id in use failing in its completion. */
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
#include "localcluster.h"
#include "util.h"

#define MB (1ull << 20)

static hpl__lc *lc;
static hpl_client *A, *B; /* clients of stores 0 and 1 */

static int setup(void **state) {
  (void)state;
  lc = th_group_start(2, 256 * MB, NULL, (hpl_client **[]){&A, &B}, 2);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  th_group_stop(lc, (hpl_client *[]){A, B}, 2);
  return 0;
}

/* One completion of c, polled (without a loop: the tests are about the
 * calls) for up to 30 s. */
static hpl_completion wait_one(hpl_client *c) {
  hpl_completion p;
  uint64_t end = hpl__deadline_ms(th_ms(30000));
  while (hpl__ms_left(end) > 0) {
    int n = hpl_async_poll(c, &p, 1);
    assert_true(n >= 0);
    if (n == 1) return p;
    th_sleep_ms(1);
  }
  fail_msg("no completion within 30 s");
  return p;
}

static uint8_t byte_at(uint64_t seed, uint64_t i) { return (uint8_t)(seed * 31 + i * 7 + (i >> 12)); }

/* Objects of these sizes made with hpl_async_create, written, sealed with
 * hpl_async_seal (every create submitted before the first completion is
 * taken), then got from the other store. */
static void test_create_write_seal(void **state) {
  (void)state;
  const uint64_t sizes[] = {0, 100, 64 << 10, 300 << 10, 8 * MB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  char ids[N][32];
  for (int i = 0; i < N; i++) {
    snprintf(ids[i], sizeof ids[i], "acr/%d", i);
    assert_int_equal(hpl_async_create(A, ids[i], sizes[i], th_ms(10000), (uint64_t)i), 0);
  }
  hpl_buf *bufs[N] = {0};
  for (int k = 0; k < N; k++) {
    hpl_completion p = wait_one(A);
    if (p.status) fail_msg("create tag %llu: %s (%s)", (unsigned long long)p.tag,
                           hpl_strerror(p.status), p.detail);
    assert_int_equal(p.op, HPL_AOP_CREATE);
    assert_true(p.tag < N && !bufs[p.tag] && p.buf);
    assert_int_equal(hpl_buf_size(p.buf), sizes[p.tag]);
    bufs[p.tag] = p.buf;
  }
  for (int i = 0; i < N; i++) {
    uint8_t *d = hpl_buf_data(bufs[i]);
    for (uint64_t j = 0; j < sizes[i]; j++) d[j] = byte_at((uint64_t)i, j);
    assert_int_equal(hpl_async_seal(A, bufs[i], th_ms(10000), 100 + (uint64_t)i), 0);
  }
  for (int k = 0; k < N; k++) {
    hpl_completion p = wait_one(A);
    if (p.status) fail_msg("seal tag %llu: %s (%s)", (unsigned long long)p.tag,
                           hpl_strerror(p.status), p.detail);
    assert_int_equal(p.op, HPL_AOP_SEAL);
    assert_null(p.buf);
  }
  assert_int_equal(hpl_async_count(A), 0);
  for (int i = 0; i < N; i++) {
    hpl_buf *b;
    int rc = hpl_get(B, ids[i], th_ms(20000), &b);
    if (rc) fail_msg("get %s: %s (%s)", ids[i], hpl_strerror(rc), hpl_errdetail(B));
    assert_int_equal(hpl_buf_size(b), sizes[i]);
    const uint8_t *d = hpl_buf_data(b);
    for (uint64_t j = 0; j < sizes[i]; j++)
      if (d[j] != byte_at((uint64_t)i, j))
        fail_msg("%s: byte %llu is %u, want %u", ids[i], (unsigned long long)j, d[j],
                 byte_at((uint64_t)i, j));
    hpl_release(B, b);
  }
}

/* A buffer from the blocking hpl_create, sealed asynchronously. */
static void test_seal_blocking_create(void **state) {
  (void)state;
  hpl_buf *b;
  assert_int_equal(hpl_create(A, "acr/blk", 4096, th_ms(10000), &b), 0);
  memset(hpl_buf_data(b), 0x5a, 4096);
  assert_int_equal(hpl_async_seal(A, b, th_ms(10000), 7), 0);
  hpl_completion p = wait_one(A);
  assert_int_equal(p.tag, 7);
  assert_int_equal(p.status, 0);
  hpl_buf *g;
  assert_int_equal(hpl_get(B, "acr/blk", th_ms(10000), &g), 0);
  assert_int_equal(((const uint8_t *)hpl_buf_data(g))[4095], 0x5a);
  hpl_release(B, g);
}

/* A create of an id already put completes with the error (no buffer); a
 * seal of something not being created is refused at submission. */
static void test_create_errors(void **state) {
  (void)state;
  uint8_t x[10] = {1};
  assert_int_equal(hpl_put(A, "acr/used", x, sizeof x, th_ms(10000)), 0);
  assert_int_equal(hpl_async_create(A, "acr/used", 10, th_ms(10000), 1), 0);
  hpl_completion p = wait_one(A);
  assert_int_equal(p.status, HPL_EEXIST);
  assert_null(p.buf);
  assert_true(strstr(p.detail, "acr/used") != NULL);
  hpl_buf *g;
  assert_int_equal(hpl_get(A, "acr/used", th_ms(10000), &g), 0);
  assert_int_equal(hpl_async_seal(A, g, th_ms(1000), 2), HPL_EINVAL);
  hpl_release(A, g);
  assert_int_equal(hpl_async_seal(A, NULL, th_ms(1000), 3), HPL_EINVAL);
  assert_int_equal(hpl_async_count(A), 0);
}

int main(void) {
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_write_seal),
      cmocka_unit_test(test_seal_blocking_create),
      cmocka_unit_test(test_create_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
