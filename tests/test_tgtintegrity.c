/* test_tgtintegrity.c - objects made in a store rather than put (a reduce
 * target being written by its sink) are checked like puts, with real
 * processes: the sink lies in every stream it serves (fault point
 * corrupt_send with no prefix: its own copy is right, what it sends is
 * not), and clients on other stores get the target while it is being made
 * (their gets start before the reduce, the target is large, so they pull
 * the sink's partial copy). Every get returns the exact bytes or a clear
 * error, never wrong bytes, and the bad unit is counted. Both when the
 * sink pulls the root's stream from elsewhere and when the root runs at
 * the sink (it holds a source) and writes the target itself. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"

#define MB (1ull << 20)
#define SIZE (64 * MB)
#define N (SIZE / 4)
#define MEM "512M" /* each store's pool */

typedef struct getter {
  hpl_client *c;
  const char *id;
  const uint32_t *ref;
  int rc;
  long wrong; /* first wrong element, -1: none */
  char detail[512];
} getter;

static void *get_main(void *arg) {
  getter *g = arg;
  hpl_buf *b = NULL;
  g->wrong = -2;
  g->rc = hpl_get(g->c, g->id, th_ms(60000), &b);
  if (g->rc) {
    snprintf(g->detail, sizeof g->detail, "%s", hpl_errdetail(g->c));
    return NULL;
  }
  const uint32_t *got = hpl_buf_data(b);
  g->wrong = hpl_buf_size(b) != SIZE ? -3 : -1;
  for (size_t i = 0; g->wrong == -1 && i < N; i++)
    if (got[i] != g->ref[i]) g->wrong = (long)i;
  hpl_release(g->c, b);
  return NULL;
}

/* Gets of `target` at gs[0..n) start, then S reduces srcs into it; every
 * get is exact or a clear error; the sink's own copy is exact. */
static void run(hpl__lc *lc, hpl_client *S, hpl_client **gs, int n, const char *target,
                const char **srcs, int nsrcs, const uint32_t *ref) {
  getter g[4];
  pthread_t t[4];
  for (int i = 0; i < n; i++) {
    g[i] = (getter){.c = gs[i], .id = target, .ref = ref};
    pthread_create(&t[i], NULL, get_main, &g[i]);
  }
  int rc = hpl_reduce(S, target, srcs, (size_t)nsrcs, 0, HPL_OP_SUM, HPL_DT_U32, th_ms(60000));
  if (rc) fail_msg("reduce: %s (%s)", hpl_strerror(rc), hpl_errdetail(S));
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  int ok = 0;
  for (int i = 0; i < n; i++) {
    if (g[i].wrong >= 0 || g[i].wrong == -3) {
      th_dump_logs(lc);
      fail_msg("getter %d: WRONG bytes of %s (element %ld)", i, target, g[i].wrong);
    }
    if (g[i].rc && g[i].rc != HPL_ECORRUPT) {
      th_dump_logs(lc);
      fail_msg("getter %d: %s (%s)", i, hpl_strerror(g[i].rc), g[i].detail);
    }
    if (g[i].rc) printf("getter %d: %s (%s)\n", i, hpl_strerror(g[i].rc), g[i].detail);
    ok += g[i].rc == 0;
  }
  printf("%s: %d of %d gets exact, the rest HPL_ECORRUPT\n", target, ok, n);
  getter self = {.c = S, .id = target, .ref = ref};
  get_main(&self);
  if (self.rc || self.wrong != -1)
    fail_msg("the sink's own copy: %s (element %ld)", hpl_strerror(self.rc), self.wrong);
}

/* (a) The sink S holds no source: it pulls the root's stream into the
 * target (rdsink.c) and lies whenever it serves the target. */
static void test_remote_root(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *S = th_connect(lc, th_add_store(lc, MEM, "--faults corrupt_send=1000000"));
  hpl_client *gs[3];
  for (int i = 0; i < 3; i++) gs[i] = th_connect(lc, th_add_store(lc, MEM, NULL));
  uint32_t *ref = calloc(N, 4);
  th_put_sum(gs[0], "tg/s0", SIZE, 1, ref, th_ms(20000));
  th_put_sum(gs[1], "tg/s1", SIZE, 2, ref, th_ms(20000));
  const char *srcs[] = {"tg/s0", "tg/s1"};
  run(lc, S, gs, 3, "tg/t", srcs, 2, ref);
  uint64_t bad = 0;
  for (int i = 0; i < 3; i++) bad += th_counter(gs[i], "corrupt_units");
  if (bad < 1) fail_msg("no bad unit counted");
  assert_int_equal(th_counter(S, "corrupt_units"), 0);
  free(ref);
  hpl_close(S);
  for (int i = 0; i < 3; i++) hpl_close(gs[i]);
  th_stop(lc, 0);
}

/* (b) The sink S holds a source put last, so the root's task runs at S
 * and writes the target itself (no stream into it, no digests fetched):
 * S hashes what it writes. */
static void test_local_root(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *S = th_connect(lc, th_add_store(lc, MEM,
                                              "--faults corrupt_send=1000000,prefix=tl/t"));
  hpl_client *gs[2];
  for (int i = 0; i < 2; i++) gs[i] = th_connect(lc, th_add_store(lc, MEM, NULL));
  uint32_t *ref = calloc(N, 4);
  th_put_sum(gs[0], "tl/s0", SIZE, 1, ref, th_ms(20000));
  th_put_sum(S, "tl/s1", SIZE, 2, ref, th_ms(20000));
  const char *srcs[] = {"tl/s0", "tl/s1"};
  run(lc, S, gs, 2, "tl/t", srcs, 2, ref);
  uint64_t bad = 0;
  for (int i = 0; i < 2; i++) bad += th_counter(gs[i], "corrupt_units");
  if (bad < 1) fail_msg("no bad unit counted");
  free(ref);
  hpl_close(S);
  for (int i = 0; i < 2; i++) hpl_close(gs[i]);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_remote_root),
      cmocka_unit_test(test_local_root),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
