/* test_integrity.c - digests checked at every hop, with real processes:
 * a store that sends corrupted units (fault point corrupt_send) while a
 * good copy exists elsewhere (the receiver ends with exact bytes, the
 * corruption is counted and that copy is no longer named), and when the
 * only copy lies (the get fails with HPL_ECORRUPT naming the node). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"

#define MB (1ull << 20)

static int add(hpl__lc *lc, const char *args) {
  char err[512], full[512];
  snprintf(full, sizeof full, "--memory 256M %s", args ? args : "");
  int i = hpl__lc_add_store(lc, full, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

/* (a) A (the origin) flips a byte in the streams it sends to B; C got a
 * good copy from A first. B's get returns the exact bytes (the bad unit is
 * not counted, B moves to C), B counts the bad unit, the directory the
 * report. */
static void test_corrupt_sender_other_copy(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  int b = add(lc, NULL);
  hpl_client *B = th_connect(lc, b);
  char args[160];
  snprintf(args, sizeof args, "--faults corrupt_send=100,prefix=cs/,to_node=%llx",
           (unsigned long long)th_node_id(B));
  hpl_client *A = th_connect(lc, add(lc, args));
  hpl_client *C = th_connect(lc, add(lc, NULL));
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "cs/x", size, 3);
  hpl_buf *buf;
  assert_int_equal(hpl_get(C, "cs/x", th_ms(20000), &buf), 0); /* A -> C: not faulty */
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 3));
  hpl_release(C, buf);
  assert_int_equal(th_counter(C, "corrupt_units"), 0);
  assert_int_equal(hpl_get(B, "cs/x", th_ms(20000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 3));
  hpl_release(B, buf);
  assert_int_equal(th_counter(B, "corrupt_units"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), 1);
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
}

/* (b) The only copy lies: every stream A sends is corrupted. B's get fails
 * with HPL_ECORRUPT and a detail naming A; it never returns wrong bytes. */
static void test_only_copy_lies(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *A = th_connect(lc, add(lc, "--faults corrupt_send=1000,prefix=lie/"));
  hpl_client *B = th_connect(lc, add(lc, NULL));
  th_put_pattern(A, "lie/x", 4 * MB, 9);
  char aid[32];
  snprintf(aid, sizeof aid, "%016llx", (unsigned long long)th_node_id(A));
  hpl_buf *buf = NULL;
  int rc = hpl_get(B, "lie/x", th_ms(20000), &buf);
  assert_int_equal(rc, HPL_ECORRUPT);
  const char *detail = hpl_errdetail(B);
  if (!strstr(detail, aid)) fail_msg("detail '%s' does not name node %s", detail, aid);
  assert_true(th_counter(B, "corrupt_units") >= 1);
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), 1);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_corrupt_sender_other_copy),
      cmocka_unit_test(test_only_copy_lies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
