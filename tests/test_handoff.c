/* test_handoff.c - what a new directory learns from the stores besides
 * their copies (store/handoff.h), with real processes: a restarted
 * directory starts as empty as a standby that takes over, so no etcd is
 * needed. A delete made before the directory died is not undone by a
 * store that missed its DROP, a reduce that finished before (or while)
 * the directory was down still answers hpl_reduce_sources, and the copies
 * streaming in are known with their upstreams. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>

#include "harness.h"
#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

#define MB (1024 * 1024)
enum { LARGE = 100000 };

/* Restart the killed directory; wait until `live` stores registered with it. */
static void restart_directory(hpl__lc *lc, int live) {
  char err[256];
  if (hpl__lc_restart(lc, -1, err, sizeof err)) fail_msg("restart: %s", err);
  uint64_t deadline = hpl__deadline_ms(th_ms(20000));
  while (th_dir_counter(lc, "dir_nodes") != (uint64_t)live && hpl__ms_left(deadline) > 0)
    th_sleep_ms(20);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), live);
}

/* Object x is put on C and copied to A and B. B stops long enough to be
 * declared dead, so the delete (by C, its maker) never reaches B's copy;
 * then the directory is killed and restarted, and B comes back only after
 * A and C registered with the new one. The new directory learns the
 * delete from A (told to DROP) and C (which forwarded it), so B's re-report
 * of its old copy is answered with DROP: x stays gone, B's copy goes.
 * Before, the new directory adopted B's copy: x was back. */
static void test_delete_survives_new_directory(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(3, 64 * MB, "--heartbeat-ms 200 --heartbeat-timeout-ms 1000", NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1), *C = th_connect(lc, 2);
  th_put_pattern(C, "ho/x", LARGE, 1);
  th_put_pattern(C, "ho/kept", LARGE, 2);
  hpl_buf *b;
  assert_int_equal(hpl_get(A, "ho/x", th_ms(10000), &b), 0);
  hpl_release(A, b);
  assert_int_equal(hpl_get(B, "ho/x", th_ms(10000), &b), 0);
  hpl_release(B, b);
  uint64_t dead0 = th_dir_counter(lc, "dir_nodes_dead");
  assert_int_equal(hpl__lc_signal(lc, 1, SIGSTOP), 0);
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_dir_counter(lc, "dir_nodes_dead") == dead0 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(100);
  assert_true(th_dir_counter(lc, "dir_nodes_dead") > dead0);
  assert_int_equal(hpl_delete(C, "ho/x", th_ms(5000)), 0);
  th_wait_counter(A, "objects", 0, "store A after the delete");
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  restart_directory(lc, 2); /* A and C; B is still stopped */
  assert_int_equal(hpl__lc_signal(lc, 1, SIGCONT), 0);
  deadline = hpl__deadline_ms(th_ms(20000));
  while (th_dir_counter(lc, "dir_nodes") != 3 && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 3);
  /* B's copy of x goes; its copy of nothing else was there */
  th_wait_counter(B, "objects", 0, "store B after re-registering");
  uint64_t size;
  uint32_t copies, complete;
  int is_inline;
  assert_int_equal(hpl_stat(A, "ho/x", th_ms(2000), &size, &copies, &complete, &is_inline),
                   HPL_ENOTFOUND);
  assert_int_equal(hpl_get(A, "ho/x", 300, &b), HPL_ETIMEDOUT);
  assert_true(th_dir_counter(lc, "dir_tombs_learned") >= 1);
  assert_true(th_dir_counter(lc, "dir_held_dropped") >= 1);
  /* the rest is as it was */
  assert_int_equal(hpl_get(A, "ho/kept", th_ms(10000), &b), 0);
  assert_int_equal(hpl_buf_size(b), LARGE);
  hpl_release(A, b);
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
}

/* Two stores, store i holding "<prefix>/src-i" (nf floats, all i + 1); a
 * reduce of both into "<prefix>/t" at store 0. down: the directory is
 * killed once the tree is in place (streams paced to 8 MB/s: the reduce
 * finishes while it is down); else once the reduce returned. Either way
 * the restarted directory answers hpl_reduce_sources with both sources,
 * learned from the sink. Before: "no reduce into '<prefix>/t'". nf small
 * enough (1 KiB): the directory reduces it itself and the sink fetches the
 * result, yet learns the sources from the directory's REDUCE_SINK and
 * keeps a copy (before: the only copy was the directory's, lost with it). */
static void reduce_sources_after_restart(const char *prefix, int down, size_t nf) {
  hpl__lc *lc = th_cluster(2, 64ull * MB, NULL, down ? "--faults slow_send=8M" : NULL);
  hpl_client *cs[2];
  char ids[2][32], target[32];
  const char *srcs[2];
  float *d = malloc(nf * sizeof *d);
  assert_non_null(d);
  snprintf(target, sizeof target, "%s/t", prefix);
  for (int i = 0; i < 2; i++) {
    cs[i] = th_connect(lc, i);
    snprintf(ids[i], sizeof ids[i], "%s/src-%d", prefix, i);
    srcs[i] = ids[i];
    for (size_t j = 0; j < nf; j++) d[j] = (float)(i + 1);
    assert_int_equal(hpl_put(cs[i], ids[i], d, nf * sizeof *d, th_ms(10000)), 0);
  }
  free(d);
  assert_int_equal(hpl_reduce(cs[0], target, srcs, 2, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(60000)),
                   0);
  if (down) { /* the tree (the root's task, at the sink) is in place */
    uint64_t deadline = hpl__deadline_ms(th_ms(10000));
    while (th_counter(cs[0], "reduce_tasks") + th_counter(cs[1], "reduce_tasks") != 1 &&
           hpl__ms_left(deadline) > 0)
      th_sleep_ms(10);
  }
  hpl_buf *b;
  if (!down) {
    assert_int_equal(hpl_get(cs[0], target, th_ms(60000), &b), 0);
    hpl_release(cs[0], b);
  }
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  if (down) { /* made while no directory runs */
    assert_int_equal(hpl_get(cs[0], target, th_ms(60000), &b), 0);
    assert_int_equal(((const float *)hpl_buf_data(b))[0], 3.0f);
    hpl_release(cs[0], b);
  }
  /* the sink holds the target (a small one too: the directory's copy
   * dies with it), and gets it again from a new directory */
  int local = 0;
  assert_int_equal(hpl_contains(cs[0], target, th_ms(5000), &local), 0);
  assert_int_equal(local, 1);
  restart_directory(lc, 2);
  assert_int_equal(hpl_get(cs[1], target, th_ms(10000), &b), 0);
  assert_int_equal(((const float *)hpl_buf_data(b))[0], 3.0f);
  hpl_release(cs[1], b);
  char *text = NULL;
  int r = hpl_reduce_sources(cs[1], target, th_ms(5000), &text);
  if (r) fail_msg("hpl_reduce_sources: %s (%s)", hpl_strerror(r), hpl_errdetail(cs[1]));
  char want0[48], want1[48];
  snprintf(want0, sizeof want0, "%s\n", ids[0]);
  snprintf(want1, sizeof want1, "%s\n", ids[1]);
  int lines = 0;
  for (char *p = text; *p; p++) lines += *p == '\n';
  if (lines != 2 || !strstr(text, want0) || !strstr(text, want1))
    fail_msg("hpl_reduce_sources answered '%s'", text);
  hpl_free(text);
  assert_int_equal(th_dir_counter(lc, "dir_reduces_learned"), 1);
  for (int i = 0; i < 2; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

static void test_reduce_sources_done_while_down(void **state) {
  (void)state;
  reduce_sources_after_restart("hd", 1, MB);
}

static void test_reduce_sources_done_before(void **state) {
  (void)state;
  reduce_sources_after_restart("hb", 0, MB);
}

static void test_small_reduce_sources_done_before(void **state) {
  (void)state;
  reduce_sources_after_restart("hs", 0, 256);
}

/* A 32 MiB object at store 0, got by stores 1 and 2 with sends paced to
 * 16 MB/s (a chain 0 -> 1 -> 2, or both from 0); the directory killed
 * while the copies stream in and restarted. The new directory learns the
 * two copies in flight with their upstreams (HeldObject.upstream), not
 * only store 0's complete one (before: 1 taken), and both gets finish. */
static void test_copies_in_flight_known(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(3, 256ull * MB, NULL, "--faults slow_send=16M");
  hpl_client *cs[3];
  for (int i = 0; i < 3; i++) cs[i] = th_connect(lc, i);
  size_t n = 32u * MB;
  uint8_t *d = malloc(n);
  assert_non_null(d);
  for (size_t j = 0; j < n; j++) d[j] = (uint8_t)(j * 7 + 1);
  assert_int_equal(hpl_put(cs[0], "hc/x", d, n, th_ms(10000)), 0);
  hpl_completion done;
  for (int i = 1; i < 3; i++) {
    assert_int_equal(hpl_async_get(cs[i], "hc/x", th_ms(60000), (uint64_t)i), 0);
    assert_int_equal(hpl_async_poll(cs[i], &done, 1), 0); /* (sends the request) */
  }
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while ((th_counter(cs[1], "data_bytes_received") == 0 ||
          th_counter(cs[2], "data_bytes_received") == 0) && hpl__ms_left(deadline) > 0)
    th_sleep_ms(10);
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  restart_directory(lc, 3);
  deadline = hpl__deadline_ms(th_ms(5000));
  while (th_dir_counter(lc, "dir_held_taken") < 3 && hpl__ms_left(deadline) > 0) th_sleep_ms(10);
  assert_true(th_dir_counter(lc, "dir_held_taken") >= 3);
  for (int i = 1; i < 3; i++) {
    deadline = hpl__deadline_ms(th_ms(60000));
    int got = 0;
    while (!got && hpl__ms_left(deadline) > 0) {
      got = hpl_async_poll(cs[i], &done, 1);
      if (!got) th_sleep_ms(20);
    }
    assert_int_equal(got, 1);
    if (done.status) fail_msg("get at store %d: %s (%s)", i, hpl_strerror(done.status), done.detail);
    assert_int_equal(hpl_buf_size(done.buf), n);
    assert_memory_equal(hpl_buf_data(done.buf), d, n);
    hpl_release(cs[i], done.buf);
  }
  free(d);
  for (int i = 0; i < 3; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_delete_survives_new_directory, th_teardown),
      cmocka_unit_test_teardown(test_reduce_sources_done_while_down, th_teardown),
      cmocka_unit_test_teardown(test_reduce_sources_done_before, th_teardown),
      cmocka_unit_test_teardown(test_small_reduce_sources_done_before, th_teardown),
      cmocka_unit_test_teardown(test_copies_in_flight_known, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
