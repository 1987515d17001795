/* test_rdintegrity.c - reduce streams checked against the digests their
 * makers send, with real processes: a slot's node that flips a byte in its
 * reduce stream (fault point corrupt_send, its prefix "r:<target>" limited
 * to the reduce streams into that target) - caught by the parent's task
 * (rdcombine.c) and by the sink (rdsink.c); the target's bytes are exact,
 * the bad unit is counted, the directory hears it and moves the slot to
 * another copy of its source. And a liar with no other copy: the reduce
 * fails with HPL_ECORRUPT naming it, never with wrong bytes. And the
 * result is registered with those digests, so its copies are checked.
 * Gets of the target elsewhere, waiting for it or pulling the sink's
 * partial copy when the reduce fails, end at once with its error, and the
 * partial copies are dropped. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1ull << 20)
#define SIZE (4 * MB)
#define N (SIZE / 4)
#define MEM "256M" /* each store's pool */

/* A client of a new store of lc, started with `args` (may be NULL). */
static hpl_client *store(hpl__lc *lc, const char *args) {
  return th_connect(lc, th_add_store(lc, MEM, args));
}

/* c gets a copy of `id` (another copy of that source). */
static void copy_to(hpl_client *c, const char *id) {
  hpl_buf *b;
  int rc = hpl_get(c, id, th_ms(20000), &b);
  if (rc) fail_msg("get %s: %s", id, hpl_strerror(rc));
  hpl_release(c, b);
}

static void check_target(hpl__lc *lc, hpl_client *c, const char *target, const uint32_t *ref) {
  hpl_buf *b;
  int rc = hpl_get(c, target, th_ms(60000), &b);
  if (rc) fail_msg("get %s: %s (%s)", target, hpl_strerror(rc), hpl_errdetail(c));
  assert_int_equal(hpl_buf_size(b), SIZE);
  const uint32_t *got = hpl_buf_data(b);
  for (size_t i = 0; i < N; i++)
    if (got[i] != ref[i]) {
      th_dump_logs(lc);
      fail_msg("%s at node %016llx: wrong bytes from byte %zu", target,
               (unsigned long long)th_node_id(c), i * 4);
    }
  hpl_release(c, b);
}

/* (a) 4 sources of 4 MiB on 4 stores; the sink S holds one (the root, a
 * task at S). X's source arrives last, so X takes an inner slot whose
 * stream S's root task pulls; X flips a byte of it. A holds another copy
 * of X's source. */
static void test_inner_stream_corrupt(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *S = store(lc, NULL);
  hpl_client *A = store(lc, NULL);
  hpl_client *B = store(lc, NULL);
  hpl_client *X = store(lc, "--faults corrupt_send=1,prefix=r:ri/t");
  uint32_t *ref = calloc(N, 4);
  th_put_sum(S, "ri/s0", SIZE, 1, ref, th_ms(10000));
  th_put_sum(A, "ri/s1", SIZE, 2, ref, th_ms(10000));
  th_put_sum(B, "ri/s2", SIZE, 3, ref, th_ms(10000));
  th_put_sum(X, "ri/s3", SIZE, 4, ref, th_ms(10000));
  copy_to(A, "ri/s3");
  const char *srcs[] = {"ri/s0", "ri/s1", "ri/s2", "ri/s3"};
  int rc = hpl_reduce(S, "ri/t", srcs, 4, 0, HPL_OP_SUM, HPL_DT_U32, th_ms(30000));
  if (rc) fail_msg("reduce: %s (%s)", hpl_strerror(rc), hpl_errdetail(S));
  check_target(lc, S, "ri/t", ref);
  uint64_t bad = th_counter(S, "corrupt_units") + th_counter(A, "corrupt_units") +
                 th_counter(B, "corrupt_units");
  if (bad < 1) fail_msg("no bad unit counted");
  assert_int_equal(th_counter(X, "corrupt_units"), 0);
  assert_true(th_dir_counter(lc, "dir_corrupt_reports") >= 1);
  free(ref);
  hpl_close(S);
  hpl_close(A);
  hpl_close(B);
  hpl_close(X);
  th_stop(lc, 0);
}

/* (b) The sink holds no source: the root's stream is pulled into the
 * target (rdsink.c), from X, which flips a byte of it. A holds another
 * copy of X's source. */
static void test_root_stream_corrupt(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *S = store(lc, NULL);
  hpl_client *A = store(lc, NULL);
  hpl_client *B = store(lc, NULL);
  hpl_client *X = store(lc, "--faults corrupt_send=1,prefix=r:rr/t");
  uint32_t *ref = calloc(N, 4);
  th_put_sum(A, "rr/s1", SIZE, 2, ref, th_ms(10000));
  th_put_sum(B, "rr/s2", SIZE, 3, ref, th_ms(10000));
  th_put_sum(X, "rr/s3", SIZE, 4, ref, th_ms(10000));
  copy_to(A, "rr/s3");
  const char *srcs[] = {"rr/s1", "rr/s2", "rr/s3"};
  int rc = hpl_reduce(S, "rr/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_U32, th_ms(30000));
  if (rc) fail_msg("reduce: %s (%s)", hpl_strerror(rc), hpl_errdetail(S));
  check_target(lc, S, "rr/t", ref);
  check_target(lc, B, "rr/t", ref); /* and a copy of it elsewhere */
  uint64_t bad = th_counter(S, "corrupt_units") + th_counter(A, "corrupt_units") +
                 th_counter(B, "corrupt_units");
  if (bad < 1) fail_msg("no bad unit counted");
  assert_true(th_dir_counter(lc, "dir_corrupt_reports") >= 1);
  free(ref);
  hpl_close(S);
  hpl_close(A);
  hpl_close(B);
  hpl_close(X);
  th_stop(lc, 0);
}

/* (c) X flips a byte in every chunk of its reduce streams and no other
 * copy of its source exists: the reduce fails with HPL_ECORRUPT, its
 * detail naming X; the target never has wrong bytes. */
static void test_liar_no_copy(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *S = store(lc, NULL);
  hpl_client *A = store(lc, NULL);
  hpl_client *X = store(lc, "--faults corrupt_send=100000,prefix=r:rl/t");
  uint32_t *ref = calloc(N, 4);
  th_put_sum(S, "rl/s0", SIZE, 1, ref, th_ms(10000));
  th_put_sum(A, "rl/s1", SIZE, 2, ref, th_ms(10000));
  th_put_sum(X, "rl/s2", SIZE, 3, ref, th_ms(10000));
  const char *srcs[] = {"rl/s0", "rl/s1", "rl/s2"};
  char xid[32];
  snprintf(xid, sizeof xid, "%016llx", (unsigned long long)th_node_id(X));
  int rc = hpl_reduce(S, "rl/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_U32, th_ms(30000));
  hpl_buf *b = NULL;
  if (rc == 0) rc = hpl_get(S, "rl/t", th_ms(30000), &b);
  if (rc == 0) fail_msg("the reduce succeeded with a liar and no other copy");
  assert_int_equal(rc, HPL_ECORRUPT);
  const char *detail = hpl_errdetail(S);
  if (!strstr(detail, xid)) fail_msg("detail '%s' does not name node %s", detail, xid);
  assert_true(th_counter(S, "corrupt_units") + th_counter(A, "corrupt_units") >= 1);
  assert_true(th_dir_counter(lc, "dir_corrupt_reports") >= 3);
  free(ref);
  hpl_close(S);
  hpl_close(A);
  hpl_close(X);
  th_stop(lc, 0);
}

/* (d) The result carries the digests the root's maker sent: the sink S,
 * which then lies whenever it serves the result ("rd/t", a plain prefix:
 * not its reduce streams), is caught by a node getting a copy of it: the
 * get fails with HPL_ECORRUPT (S has the only copy), never wrong bytes. */
static void test_result_has_digests(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *S = store(lc, "--faults corrupt_send=100000,prefix=rd/t");
  hpl_client *A = store(lc, NULL);
  hpl_client *B = store(lc, NULL);
  hpl_client *C = store(lc, NULL);
  uint32_t *ref = calloc(N, 4);
  th_put_sum(A, "rd/s1", SIZE, 2, ref, th_ms(10000));
  th_put_sum(B, "rd/s2", SIZE, 3, ref, th_ms(10000));
  const char *srcs[] = {"rd/s1", "rd/s2"};
  int rc = hpl_reduce(S, "rd/t", srcs, 2, 0, HPL_OP_SUM, HPL_DT_U32, th_ms(30000));
  if (rc) fail_msg("reduce: %s (%s)", hpl_strerror(rc), hpl_errdetail(S));
  check_target(lc, S, "rd/t", ref);
  hpl_buf *b = NULL;
  rc = hpl_get(C, "rd/t", th_ms(30000), &b);
  if (rc == 0) {
    int same = memcmp(hpl_buf_data(b), ref, SIZE) == 0;
    fail_msg("a copy of the result from a liar was %s", same ? "right (not corrupted?)" : "WRONG");
  }
  assert_int_equal(rc, HPL_ECORRUPT);
  assert_true(th_counter(C, "corrupt_units") >= 1);
  free(ref);
  hpl_close(S);
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
}

/* (e) As (c), with nodes that wait for the target (gets started before
 * the reduce), so that they pull the sink's partial copy, or each other's,
 * when the reduce fails: every get ends within seconds with the reduce's
 * error naming X (never waits for its own 60 s timeout, never gets
 * bytes), and no store keeps a copy of the failed target. */
typedef struct getter {
  hpl_client *c;
  const char *id;
  int rc;
  uint64_t end_ms;
  char detail[512];
} getter;

static void *getter_main(void *arg) {
  getter *g = arg;
  hpl_buf *b = NULL;
  g->rc = hpl_get(g->c, g->id, th_ms(60000), &b);
  g->end_ms = hpl__now_ms();
  snprintf(g->detail, sizeof g->detail, "%s", g->rc ? hpl_errdetail(g->c) : "");
  if (!g->rc) hpl_release(g->c, b);
  return NULL;
}

/* Wait (up to 5 s) until c's store holds `want` objects. */
static void expect_objects(hpl__lc *lc, hpl_client *c, uint64_t want, const char *who) {
  uint64_t n = 0;
  for (int i = 0; i < 50 && (n = th_counter(c, "objects")) != want; i++) usleep(100 * 1000);
  if (n != want) {
    th_dump_logs(lc);
    fail_msg("%s's store holds %llu objects, not %llu: a copy of the failed target is left", who,
             (unsigned long long)n, (unsigned long long)want);
  }
}

#define NG 3
static void test_liar_getters_end(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *S = store(lc, NULL);
  hpl_client *A = store(lc, NULL);
  hpl_client *X = store(lc, "--faults corrupt_send=100000,prefix=r:rg/t");
  hpl_client *G[NG];
  for (int i = 0; i < NG; i++) G[i] = store(lc, NULL);
  uint32_t *ref = calloc(N, 4);
  th_put_sum(S, "rg/s0", SIZE, 1, ref, th_ms(10000));
  th_put_sum(A, "rg/s1", SIZE, 2, ref, th_ms(10000));
  th_put_sum(X, "rg/s2", SIZE, 3, ref, th_ms(10000));
  const char *srcs[] = {"rg/s0", "rg/s1", "rg/s2"};
  char xid[32];
  snprintf(xid, sizeof xid, "%016llx", (unsigned long long)th_node_id(X));
  getter g[NG];
  pthread_t t[NG];
  for (int i = 0; i < NG; i++) {
    g[i] = (getter){.c = G[i], .id = "rg/t"};
    pthread_create(&t[i], NULL, getter_main, &g[i]);
  }
  usleep(200 * 1000); /* their ACQUIREs wait at the directory */
  int rc = hpl_reduce(S, "rg/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_U32, th_ms(30000));
  hpl_buf *b = NULL;
  if (rc == 0) rc = hpl_get(S, "rg/t", th_ms(60000), &b);
  uint64_t failed_ms = hpl__now_ms();
  if (rc == 0) fail_msg("the reduce succeeded with a liar and no other copy");
  assert_int_equal(rc, HPL_ECORRUPT);
  if (!strstr(hpl_errdetail(S), "reduce 'rg/t' failed") || !strstr(hpl_errdetail(S), xid))
    fail_msg("the sink's detail '%s' does not name the reduce and node %s", hpl_errdetail(S), xid);
  for (int i = 0; i < NG; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < NG; i++) {
    long after = (long)(g[i].end_ms - failed_ms);
    fprintf(stderr, "getter %d: %s %ld ms after the sink's (%s)\n", i,
            g[i].rc ? hpl_strerror(g[i].rc) : "bytes", after, g[i].detail);
    if (g[i].rc == 0) fail_msg("getter %d got bytes of a failed reduce", i);
    if (g[i].rc != HPL_ECORRUPT && g[i].rc != HPL_EMISMATCH) {
      th_dump_logs(lc);
      fail_msg("getter %d: %s (%s)", i, hpl_strerror(g[i].rc), g[i].detail);
    }
    if (after > th_ms(3000)) {
      th_dump_logs(lc);
      fail_msg("getter %d ended %ld ms after the reduce failed", i, after);
    }
    if (!strstr(g[i].detail, xid) || !strstr(g[i].detail, "rg/t"))
      fail_msg("getter %d: detail '%s' does not name the reduce and node %s", i, g[i].detail, xid);
  }
  /* a get started after the failure: at once, the same error */
  uint64_t t0 = hpl__now_ms();
  rc = hpl_get(G[0], "rg/t", th_ms(60000), &b);
  assert_int_equal(rc, HPL_ECORRUPT);
  assert_true(hpl__now_ms() - t0 < (uint64_t)th_ms(3000));
  for (int i = 0; i < NG; i++) expect_objects(lc, G[i], 0, "a getter");
  expect_objects(lc, S, 1, "the sink");
  free(ref);
  hpl_close(S);
  hpl_close(A);
  hpl_close(X);
  for (int i = 0; i < NG; i++) hpl_close(G[i]);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inner_stream_corrupt),
      cmocka_unit_test(test_root_stream_corrupt),
      cmocka_unit_test(test_liar_no_copy),
      cmocka_unit_test(test_result_has_digests),
      cmocka_unit_test(test_liar_getters_end),
  };
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
