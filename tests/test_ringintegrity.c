/* test_ringintegrity.c - ring allreduce streams checked against the
 * digests their makers send (store/ringin.c), with real processes: a
 * member that flips a byte in its ring stream (fault point corrupt_send,
 * prefix "g:<target>": only the ring streams into that target) is caught
 * by the next member before the bad unit is combined or passed on; the ring
 * ends, the directory counts the liar, and every caller gets the exact sum
 * from the reduce that follows. A member that lies in every ring stream
 * it sends: the same each time, and after 3 reports no ring forms with it
 * (the allreduce is a reduce followed by a broadcast from the start). */
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
#define SIZE (8 * MB + 4 * 3) /* slices that are not whole units */
#define N (SIZE / 4)
#define MEM "256M" /* each store's pool */
#define K 4

typedef struct part {
  hpl_client *c;
  const char *target;
  const char *const *srcs;
  const uint32_t *ref;
  int rc;
  long wrong; /* first wrong element, -1: none */
  char detail[512];
  uint64_t end_ms; /* when the call returned (hpl__now_ms) */
} part;

static void *part_main(void *arg) {
  part *p = arg;
  hpl_buf *b = NULL;
  p->wrong = -2;
  p->rc = hpl_allreduce(p->c, p->target, p->srcs, K, 0, HPL_OP_SUM, HPL_DT_U32, th_ms(60000), &b);
  p->end_ms = hpl__now_ms();
  if (p->rc) {
    snprintf(p->detail, sizeof p->detail, "%s", hpl_errdetail(p->c));
    return NULL;
  }
  const uint32_t *got = hpl_buf_data(b);
  p->wrong = hpl_buf_size(b) != SIZE ? -3 : -1;
  for (size_t i = 0; p->wrong == -1 && i < N; i++)
    if (got[i] != p->ref[i]) p->wrong = (long)i;
  hpl_release(p->c, b);
  return NULL;
}

/* Every client calls the same allreduce at once. */
static void run_parts(part *p, hpl_client **cs, const char *target, const char *const *srcs,
                      const uint32_t *ref) {
  pthread_t t[K];
  for (int i = 0; i < K; i++) {
    p[i] = (part){.c = cs[i], .target = target, .srcs = srcs, .ref = ref};
    pthread_create(&t[i], NULL, part_main, &p[i]);
  }
  for (int i = 0; i < K; i++) pthread_join(t[i], NULL);
}

static uint64_t sum_counter(hpl_client **cs, int n, const char *name) {
  uint64_t t = 0;
  for (int i = 0; i < n; i++) t += th_counter(cs[i], name);
  return t;
}

/* K stores of the ring in cs: K - 1 honest ones, then X, started with
 * `faults` (the liar's fault points). */
static void ring_stores(hpl__lc *lc, hpl_client **cs, const char *faults) {
  for (int i = 0; i < K - 1; i++) cs[i] = th_connect(lc, th_add_store(lc, MEM, NULL));
  cs[K - 1] = th_connect(lc, th_add_store(lc, MEM, faults));
}

/* (a) X flips a byte in its ring stream into "gi/t" once: its successor
 * catches the unit, the ring is abandoned and counted against X, and every
 * caller gets the exact sum (the reduce after it; X's reduce streams are
 * good). */
static void test_ring_stream_corrupt(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *cs[K];
  ring_stores(lc, cs, "--faults corrupt_send=1,prefix=g:gi/t");
  uint32_t *ref = calloc(N, 4);
  const char *srcs[K] = {"gi/s0", "gi/s1", "gi/s2", "gi/s3"};
  for (int i = 0; i < K; i++) th_put_sum(cs[i], srcs[i], SIZE, (uint32_t)i + 1, ref, th_ms(10000));
  part p[K];
  run_parts(p, cs, "gi/t", srcs, ref);
  for (int i = 0; i < K; i++) {
    if (p[i].rc) {
      th_dump_logs(lc);
      fail_msg("participant %d: %s (%s)", i, hpl_strerror(p[i].rc), p[i].detail);
    }
    if (p[i].wrong != -1) {
      th_dump_logs(lc);
      fail_msg("participant %d: WRONG sum (element %ld)", i, p[i].wrong);
    }
  }
  assert_int_equal(th_dir_counter(lc, "dir_rings_formed"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_rings_abandoned"), 1);
  if (sum_counter(cs, K - 1, "corrupt_units") < 1) fail_msg("no bad unit counted");
  assert_int_equal(th_counter(cs[K - 1], "corrupt_units"), 0);
  /* the report may still be on its way when the fallback's sums are in */
  for (int i = 0; i < 60 && th_dir_counter(lc, "dir_corrupt_reports") < 1; i++) th_sleep_ms(50);
  assert_true(th_dir_counter(lc, "dir_corrupt_reports") >= 1);
  free(ref);
  for (int i = 0; i < K; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

/* (b) X flips a byte in every chunk of every ring stream it sends (its
 * reduce streams and copies are good): each ring it is in is abandoned,
 * every caller still gets the exact sum, and once the directory has
 * counted it 3 times no ring forms with it (the allreduce is a reduce
 * followed by a broadcast from the start). */
static void test_ring_liar(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *cs[K];
  ring_stores(lc, cs, "--faults corrupt_send=1000000,prefix=g:gl/");
  uint32_t *ref = calloc(N, 4);
  const char *srcs[K] = {"gl/s0", "gl/s1", "gl/s2", "gl/s3"};
  for (int i = 0; i < K; i++) th_put_sum(cs[i], srcs[i], SIZE, (uint32_t)i + 11, ref, th_ms(10000));
  /* (a ring abandoned for another reason first, a slow member on a busy
   * machine, counts no report: up to 6 rounds) */
  int r = 0;
  for (; r < 6 && th_dir_counter(lc, "dir_rings_declined") == 0; r++) {
    char target[32];
    snprintf(target, sizeof target, "gl/t%d", r);
    part p[K];
    run_parts(p, cs, target, srcs, ref);
    for (int i = 0; i < K; i++) {
      if (p[i].rc) {
        th_dump_logs(lc);
        fail_msg("round %d participant %d: %s (%s)", r, i, hpl_strerror(p[i].rc), p[i].detail);
      }
      if (p[i].wrong != -1) {
        th_dump_logs(lc);
        fail_msg("round %d participant %d: WRONG sum (element %ld)", r, i, p[i].wrong);
      }
    }
    uint64_t formed = th_dir_counter(lc, "dir_rings_formed");
    assert_int_equal(th_dir_counter(lc, "dir_rings_abandoned"), formed);
    assert_true(th_dir_counter(lc, "dir_corrupt_reports") <= formed);
    if (r == 0) assert_int_equal(formed, 1);
  }
  if (th_dir_counter(lc, "dir_rings_declined") == 0) {
    th_dump_logs(lc);
    fail_msg("a ring still formed with the liar after %d rounds", r);
  }
  assert_true(th_dir_counter(lc, "dir_corrupt_reports") >= 3);
  assert_true(sum_counter(cs, K - 1, "corrupt_units") >= 3);
  free(ref);
  for (int i = 0; i < K; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

/* (c) X flips a byte in every chunk of every stream it sends, its
 * reduce streams (its source's partial sums) included: the ring is
 * abandoned, the reduce after it fails (the sink drops X's stream 3 times)
 * and every caller ends at once with that failure, a clear error: none
 * waits for its own timeout pulling the target's partial copies of the
 * failed reduce from the others, none gets wrong bytes. */
static void test_liar_every_stream(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *cs[K];
  ring_stores(lc, cs, "--faults corrupt_send=1000000");
  uint32_t *ref = calloc(N, 4);
  const char *srcs[K] = {"ga/s0", "ga/s1", "ga/s2", "ga/s3"};
  for (int i = 0; i < K; i++) th_put_sum(cs[i], srcs[i], SIZE, (uint32_t)i + 21, ref, th_ms(10000));
  char xid[32];
  snprintf(xid, sizeof xid, "%016llx", (unsigned long long)th_node_id(cs[K - 1]));
  uint64_t held[K] = {0}; /* objects each store should hold: its source, targets it got */
  for (int r = 0; r < 2; r++) {
    char target[32];
    snprintf(target, sizeof target, "ga/t%d", r);
    part p[K];
    uint64_t start = hpl__now_ms();
    run_parts(p, cs, target, srcs, ref);
    uint64_t first_err = 0, last = 0;
    for (int i = 0; i < K; i++) {
      uint64_t took = p[i].end_ms - start;
      fprintf(stderr, "round %d participant %d: %s after %llu ms (%s)\n", r, i,
              p[i].rc ? hpl_strerror(p[i].rc) : "exact sum", (unsigned long long)took,
              p[i].rc ? p[i].detail : "");
      if (p[i].rc == 0 && p[i].wrong != -1) {
        th_dump_logs(lc);
        fail_msg("round %d participant %d: WRONG sum (element %ld)", r, i, p[i].wrong);
      }
      if (p[i].rc && p[i].rc != HPL_ECORRUPT && p[i].rc != HPL_EMISMATCH) {
        th_dump_logs(lc);
        fail_msg("round %d participant %d: %s (%s)", r, i, hpl_strerror(p[i].rc), p[i].detail);
      }
      if (p[i].rc && !strstr(p[i].detail, xid))
        fail_msg("round %d participant %d: detail '%s' does not name the liar %s", r, i,
                 p[i].detail, xid);
      held[i] += p[i].rc == 0;
      if (p[i].rc && (!first_err || took < first_err)) first_err = took;
      if (took > last) last = took;
    }
    /* nobody waits for its timeout: well under the call's 60 s, and every
     * error within a few seconds of the first (the reduce's failure) */
    if (last > (uint64_t)th_ms(20000)) {
      th_dump_logs(lc);
      fail_msg("round %d: a caller took %llu ms (timeout %lld ms)", r, (unsigned long long)last,
               (long long)th_ms(60000));
    }
    if (first_err && last > first_err + (uint64_t)th_ms(3000)) {
      th_dump_logs(lc);
      fail_msg("round %d: first error after %llu ms, last caller after %llu ms", r,
               (unsigned long long)first_err, (unsigned long long)last);
    }
  }
  /* no copy of a failed target is left anywhere: each store holds its
   * source and the targets its caller got (a round whose reduce the liar
   * sank succeeds there: its sum is right, its copies to others are not) */
  for (int i = 0; i < K; i++) {
    uint64_t n = 0, want = 1 + held[i];
    for (int w = 0; w < 50 && (n = th_counter(cs[i], "objects")) != want; w++)
      usleep(100 * 1000);
    if (n != want) {
      th_dump_logs(lc);
      fail_msg("store %d holds %llu objects, not %llu: a copy of a failed target is left", i,
               (unsigned long long)n, (unsigned long long)want);
    }
  }
  free(ref);
  for (int i = 0; i < K; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_stream_corrupt),
      cmocka_unit_test(test_ring_liar),
      cmocka_unit_test(test_liar_every_stream),
  };
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
