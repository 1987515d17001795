/* test_reduce.c - reduce, subset reduce and allreduce across real stores.
 * Results are compared with a reference computed here: exactly for integer
 * dtypes, within a relative 1e-5 (f32) / 1e-12 (f64) for floats, whose sums
 * depend on the tree's combination order. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1ull << 20)
#define KB (1ull << 10)

/* Deterministic element values: small integers (so products stay exact in
 * floats) with signs where the type has them. */
static double elem_value(int dtype, uint64_t seed, size_t i) {
  uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 31;
  int v = (int)(x % 7);
  int is_unsigned = dtype == HPL_DT_U8 || dtype == HPL_DT_U32 || dtype == HPL_DT_U64;
  return is_unsigned ? v : v - 3;
}

static void fill(int dtype, void *buf, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    double v = elem_value(dtype, seed, i);
    if (dtype == HPL_DT_F32 || dtype == HPL_DT_F64) v += 0.25 * (double)((i + seed) % 3);
    switch (dtype) {
      case HPL_DT_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
      case HPL_DT_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
      case HPL_DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
      case HPL_DT_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
      case HPL_DT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
      case HPL_DT_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
      case HPL_DT_F32: ((float *)buf)[i] = (float)v; break;
      case HPL_DT_F64: ((double *)buf)[i] = v; break;
    }
  }
}

/* Reference: acc = op(acc, src), written independently of src/common/ops.c. */
#define REF_LOOP(T, UT)                                                                 \
  {                                                                                     \
    T *a = acc;                                                                         \
    const T *b = src;                                                                   \
    for (size_t i = 0; i < n; i++) {                                                    \
      if (op == HPL_OP_SUM) a[i] = (T)((UT)a[i] + (UT)b[i]);                            \
      else if (op == HPL_OP_PROD) a[i] = (T)((UT)a[i] * (UT)b[i]);                      \
      else if (op == HPL_OP_MIN) a[i] = b[i] < a[i] ? b[i] : a[i];                      \
      else a[i] = b[i] > a[i] ? b[i] : a[i];                                            \
    }                                                                                   \
  }
#define REF_FLOAT(T)                                                                    \
  {                                                                                     \
    T *a = acc;                                                                         \
    const T *b = src;                                                                   \
    for (size_t i = 0; i < n; i++) {                                                    \
      if (op == HPL_OP_SUM) a[i] = a[i] + b[i];                                         \
      else if (op == HPL_OP_PROD) a[i] = a[i] * b[i];                                   \
      else if (op == HPL_OP_MIN) a[i] = b[i] < a[i] ? b[i] : a[i];                      \
      else a[i] = b[i] > a[i] ? b[i] : a[i];                                            \
    }                                                                                   \
  }

static void ref_apply(int op, int dtype, void *acc, const void *src, size_t n) {
  switch (dtype) {
    case HPL_DT_U8: REF_LOOP(uint8_t, uint8_t) break;
    case HPL_DT_I8: REF_LOOP(int8_t, uint8_t) break;
    case HPL_DT_I32: REF_LOOP(int32_t, uint32_t) break;
    case HPL_DT_U32: REF_LOOP(uint32_t, uint32_t) break;
    case HPL_DT_I64: REF_LOOP(int64_t, uint64_t) break;
    case HPL_DT_U64: REF_LOOP(uint64_t, uint64_t) break;
    case HPL_DT_F32: REF_FLOAT(float) break;
    case HPL_DT_F64: REF_FLOAT(double) break;
  }
}

/* 1 if got matches want: exact for integers, tolerance for floats. */
static int results_match(int dtype, const void *got, const void *want, size_t n) {
  if (dtype == HPL_DT_F32) {
    const float *g = got, *w = want;
    for (size_t i = 0; i < n; i++)
      if (fabsf(g[i] - w[i]) > 1e-5f * (1 + fabsf(w[i]))) return 0;
    return 1;
  }
  if (dtype == HPL_DT_F64) {
    const double *g = got, *w = want;
    for (size_t i = 0; i < n; i++)
      if (fabs(g[i] - w[i]) > 1e-12 * (1 + fabs(w[i]))) return 0;
    return 1;
  }
  return memcmp(got, want, n * hpl_dtype_size(dtype)) == 0;
}

/* Put nsrc sources (source j on node j % nodes) and reduce them into
 * `target` at `sink`; check the result against the reference. */
static void reduce_and_check(hpl_client **c, int nodes, int sink, const char *tag, int op,
                             int dtype, size_t n, int nsrc) {
  size_t es = hpl_dtype_size(dtype), bytes = n * es;
  char target[64], ids[16][64];
  const char *srcs[16];
  snprintf(target, sizeof target, "%s/t", tag);
  void *ref = calloc(n ? n : 1, es), *buf = malloc(bytes ? bytes : 1);
  for (int j = 0; j < nsrc; j++) {
    snprintf(ids[j], sizeof ids[j], "%s/s%d", tag, j);
    srcs[j] = ids[j];
    fill(dtype, buf, n, (uint64_t)j * 31 + (uint64_t)dtype);
    if (j == 0)
      memcpy(ref, buf, bytes);
    else
      ref_apply(op, dtype, ref, buf, n);
    int rc = hpl_put(c[j % nodes], ids[j], buf, bytes, th_ms(10000));
    if (rc) fail_msg("put %s: %s", ids[j], hpl_strerror(rc));
  }
  int rc = hpl_reduce(c[sink], target, srcs, (size_t)nsrc, 0, op, dtype, th_ms(10000));
  if (rc) fail_msg("reduce %s: %s (%s)", target, hpl_strerror(rc), hpl_errdetail(c[sink]));
  hpl_buf *b;
  rc = hpl_get(c[sink], target, th_ms(60000), &b);
  if (rc) fail_msg("get %s: %s (%s)", target, hpl_strerror(rc), hpl_errdetail(c[sink]));
  assert_int_equal(hpl_buf_size(b), bytes);
  if (!results_match(dtype, hpl_buf_data(b), ref, n))
    fail_msg("%s: wrong result (op %d dtype %d, %zu elements)", target, op, dtype, n);
  hpl_release(c[sink], b);
  free(ref);
  free(buf);
}

/* Every op x dtype, through a store tree (256 KiB) and at the directory (4 KiB). */
static void test_ops_dtypes(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(4, 256 * MB, NULL, NULL);
  hpl_client *c[4];
  for (int i = 0; i < 4; i++) c[i] = th_connect(lc, i);
  const int dts[] = {HPL_DT_U8, HPL_DT_I8, HPL_DT_I32, HPL_DT_U32, HPL_DT_I64, HPL_DT_U64,
                     HPL_DT_F32, HPL_DT_F64};
  for (int op = 0; op < 4; op++)
    for (int d = 0; d < 8; d++) {
      char tag[32];
      size_t es = hpl_dtype_size(dts[d]);
      snprintf(tag, sizeof tag, "ops/%d/%d", op, dts[d]);
      reduce_and_check(c, 4, op % 4, tag, op, dts[d], 256 * KB / es, 4);
      snprintf(tag, sizeof tag, "small/%d/%d", op, dts[d]);
      reduce_and_check(c, 4, (op + 1) % 4, tag, op, dts[d], 4 * KB / es, 3);
    }
  for (int i = 0; i < 4; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

/* Tree shapes the planner picks for other cost-model settings: a star (huge
 * bandwidth: S/B negligible) and a binary tree; big enough that the ring
 * buffers of extra children wrap. */
static void test_shapes(void **state) {
  (void)state;
  const char *dir_args[] = {"--reduce-bandwidth 1T", /* star */
                            "--reduce-latency-us 2000 --reduce-bandwidth 20G"};
  for (int k = 0; k < 2; k++) {
    hpl__lc *lc = th_cluster(5, 512 * MB, dir_args[k], NULL);
    hpl_client *c[5];
    for (int i = 0; i < 5; i++) c[i] = th_connect(lc, i);
    char tag[32];
    snprintf(tag, sizeof tag, "shape%d", k);
    reduce_and_check(c, 5, 4, tag, HPL_OP_SUM, HPL_DT_F64, 24 * MB / 8, 7);
    snprintf(tag, sizeof tag, "shape%d-i", k);
    reduce_and_check(c, 5, 0, tag, HPL_OP_MAX, HPL_DT_I32, 3 * MB / 4 + 5, 5);
    for (int i = 0; i < 5; i++) hpl_close(c[i]);
    th_stop(lc, 0);
  }
}

static hpl__lc *lc4;
static hpl_client *C[4];

static int setup4(void **state) {
  (void)state;
  lc4 = th_cluster(4, 512 * MB, NULL, NULL);
  th_untrack(lc4);
  for (int i = 0; i < 4; i++) C[i] = th_connect(lc4, i);
  return 0;
}

static int teardown4(void **state) {
  (void)state;
  for (int i = 0; i < 4; i++) hpl_close(C[i]);
  th_stop(lc4, 0);
  return 0;
}

static void test_large_chain(void **state) {
  (void)state;
  reduce_and_check(C, 4, 0, "large", HPL_OP_SUM, HPL_DT_F32, 64 * MB / 4, 4);
  reduce_and_check(C, 4, 2, "one", HPL_OP_SUM, HPL_DT_I64, MB / 8, 1);
}

/* Subset reduce: exactly the first k ready sources are included. */
static void test_subset(void **state) {
  (void)state;
  const size_t n = 128 * KB / 4;
  int32_t *buf = malloc(n * 4), *ref = calloc(n, 4);
  char ids[6][32];
  const char *srcs[6];
  for (int j = 0; j < 6; j++) {
    snprintf(ids[j], sizeof ids[j], "sub/s%d", j);
    srcs[j] = ids[j];
  }
  /* put them in the order 4, 1, 5, 0, 3, 2: the first three are 4, 1, 5 */
  const int order[6] = {4, 1, 5, 0, 3, 2};
  for (int k = 0; k < 6; k++) {
    int j = order[k];
    for (size_t i = 0; i < n; i++) buf[i] = (int32_t)(j * 1000 + (int)(i % 97));
    if (k < 3)
      for (size_t i = 0; i < n; i++) ref[i] += buf[i];
    assert_int_equal(hpl_put(C[1 + k % 3], ids[j], buf, n * 4, th_ms(5000)), 0);
  }
  assert_int_equal(hpl_reduce(C[0], "sub/t", srcs, 6, 3, HPL_OP_SUM, HPL_DT_I32, th_ms(5000)), 0);
  hpl_buf *b;
  assert_int_equal(hpl_get(C[0], "sub/t", th_ms(20000), &b), 0);
  assert_memory_equal(hpl_buf_data(b), ref, n * 4);
  hpl_release(C[0], b);
  char *text;
  assert_int_equal(hpl_reduce_sources(C[3], "sub/t", th_ms(5000), &text), 0);
  /* no sink-local source here: the slots list in arrival order */
  assert_string_equal(text, "sub/s4\nsub/s1\nsub/s5\n");
  hpl_free(text);
  free(buf);
  free(ref);
}

typedef struct putter {
  hpl_client *c;
  const char *id;
  size_t n;
  int delay_ms;
  int seed;
} putter;

static void *putter_main(void *arg) {
  putter *p = arg;
  th_sleep_ms(p->delay_ms);
  float *d = malloc(p->n * 4);
  for (size_t i = 0; i < p->n; i++) d[i] = (float)(p->seed + (int)(i % 5));
  hpl_put(p->c, p->id, d, p->n * 4, 20000);
  free(d);
  return NULL;
}

/* The reduce starts before its sources exist; they appear over time. */
static void test_sources_over_time(void **state) {
  (void)state;
  const size_t n = 4 * MB / 4;
  const char *srcs[4] = {"time/a", "time/b", "time/c", "time/d"};
  assert_int_equal(hpl_reduce(C[2], "time/t", srcs, 4, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)), 0);
  putter p[4];
  pthread_t t[4];
  for (int j = 0; j < 4; j++) {
    p[j] = (putter){.c = C[j], .id = srcs[j], .n = n, .delay_ms = 150 * (3 - j), .seed = j};
    pthread_create(&t[j], NULL, putter_main, &p[j]);
  }
  hpl_buf *b;
  int rc = hpl_get(C[2], "time/t", th_ms(30000), &b);
  for (int j = 0; j < 4; j++) pthread_join(t[j], NULL);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[2]));
  const float *r = hpl_buf_data(b);
  for (size_t i = 0; i < n; i++) assert_true(r[i] == (float)(0 + 1 + 2 + 3 + 4 * (int)(i % 5)));
  hpl_release(C[2], b);
  /* arrival order d, c, b, a; c is on the sink and takes the root */
  char *text;
  assert_int_equal(hpl_reduce_sources(C[0], "time/t", th_ms(5000), &text), 0);
  assert_non_null(strstr(text, "time/a"));
  assert_non_null(strstr(text, "time/d"));
  hpl_free(text);
}

static void test_errors(void **state) {
  (void)state;
  char d[300000] = {0};
  assert_int_equal(hpl_put(C[0], "err/a", d, 100000, th_ms(5000)), 0);
  assert_int_equal(hpl_put(C[1], "err/b", d, 100004, th_ms(5000)), 0);
  assert_int_equal(hpl_put(C[2], "err/c", d, 100001, th_ms(5000)), 0);
  const char *ab[] = {"err/a", "err/b"}, *ac[] = {"err/c"}, *dup[] = {"err/a", "err/a"};
  assert_int_equal(hpl_reduce(C[0], "err/t1", ab, 2, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   HPL_EMISMATCH);
  assert_non_null(strstr(hpl_errdetail(C[0]), "size"));
  assert_int_equal(hpl_reduce(C[0], "err/t2", ac, 1, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   HPL_EMISMATCH);
  assert_int_equal(hpl_reduce(C[0], "err/t3", dup, 2, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   HPL_EINVAL);
  assert_int_equal(hpl_reduce(C[0], "err/a", ab, 2, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   HPL_EINVAL);
  assert_int_equal(hpl_reduce(C[0], "err/t4", ab, 2, 3, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   HPL_EINVAL);
  assert_int_equal(hpl_reduce(C[0], "err/t5", ab, 2, 0, (hpl_op)9, HPL_DT_F32, th_ms(5000)),
                   HPL_EINVAL);
  /* a mismatch discovered later fails the get of the target */
  const char *late[] = {"err/a", "err/late"};
  assert_int_equal(hpl_reduce(C[3], "err/t6", late, 2, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)), 0);
  assert_int_equal(hpl_put(C[1], "err/late", d, 200000, th_ms(5000)), 0);
  hpl_buf *b;
  assert_int_equal(hpl_get(C[3], "err/t6", th_ms(10000), &b), HPL_EMISMATCH);
  assert_int_equal(hpl_get(C[2], "err/t6", th_ms(10000), &b), HPL_EMISMATCH);
  /* the target of a different running reduce, or an existing object */
  const char *wait[] = {"err/never1", "err/never2"};
  assert_int_equal(hpl_reduce(C[0], "err/t7", wait, 2, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)), 0);
  assert_int_equal(hpl_reduce(C[1], "err/t7", wait, 2, 0, HPL_OP_MAX, HPL_DT_F32, th_ms(5000)),
                   HPL_EEXIST);
  assert_int_equal(hpl_reduce(C[1], "err/b", wait, 2, 0, HPL_OP_MAX, HPL_DT_F32, th_ms(5000)),
                   HPL_EEXIST);
  assert_int_equal(hpl_get(C[0], "err/t7", 300, &b), HPL_ETIMEDOUT);
  char *text;
  assert_int_equal(hpl_reduce_sources(C[0], "err/nope", th_ms(5000), &text), HPL_ENOTFOUND);
}

typedef struct allr {
  hpl_client *c;
  int rc, ok;
} allr;

/* An allreduce without a ring (test_ring covers hpl_allreduce's ring): what
 * hpl_allreduce does when none runs, a reduce joined by every participant
 * and a get of the target. */
static void *allr_main(void *arg) {
  allr *a = arg;
  const char *srcs[4] = {"all/0", "all/1", "all/2", "all/3"};
  hpl_buf *b;
  a->rc = hpl_reduce(a->c, "all/t", srcs, 4, 0, HPL_OP_SUM, HPL_DT_I64, 30000);
  if (a->rc == 0) a->rc = hpl_get(a->c, "all/t", 30000, &b);
  if (a->rc == 0) {
    const int64_t *r = hpl_buf_data(b);
    a->ok = hpl_buf_size(b) == 2 * MB;
    for (size_t i = 0; a->ok && i < 2 * MB / 8; i++) a->ok = r[i] == (int64_t)(6 + 4 * (int)i);
    hpl_release(a->c, b);
  }
  return NULL;
}

static void test_allreduce(void **state) {
  (void)state;
  int64_t *d = malloc(2 * MB);
  for (int j = 0; j < 4; j++) {
    char id[16];
    snprintf(id, sizeof id, "all/%d", j);
    for (size_t i = 0; i < 2 * MB / 8; i++) d[i] = (int64_t)(j + (int)i);
    assert_int_equal(hpl_put(C[j], id, d, 2 * MB, th_ms(5000)), 0);
  }
  free(d);
  allr a[4];
  pthread_t t[4];
  for (int j = 0; j < 4; j++) {
    a[j] = (allr){.c = C[j]};
    pthread_create(&t[j], NULL, allr_main, &a[j]);
  }
  for (int j = 0; j < 4; j++) {
    pthread_join(t[j], NULL);
    assert_int_equal(a[j].rc, 0);
    assert_true(a[j].ok);
  }
  /* A 2 MiB reduce is a chain. The broadcast of the target runs along it:
   * the participant in slot i pulls the target from the one in slot i-1,
   * slot 0 from the sink (the node that never pulled the target). */
  char *order;
  assert_int_equal(hpl_reduce_sources(C[0], "all/t", th_ms(5000), &order), 0);
  uint64_t slot_node[4];
  int ns = 0;
  for (char *line = strtok(order, "\n"); line && ns < 4; line = strtok(NULL, "\n")) {
    int j = -1;
    assert_int_equal(sscanf(line, "all/%d", &j), 1);
    assert_in_range(j, 0, 3);
    slot_node[ns++] = th_node_id(C[j]);
  }
  hpl_free(order);
  assert_int_equal(ns, 4);
  size_t nx = 0;
  th_xfer *x = th_transfers(C[0], 0, &nx);
  uint64_t from[4] = {0}, sink = 0;
  int pulls = 0;
  for (size_t i = 0; i < nx; i++) {
    if (strcmp(x[i].kind, "assign") || strcmp(x[i].id, "all/t")) continue;
    pulls++;
    for (int k = 0; k < 4; k++)
      if (slot_node[k] == x[i].receiver) from[k] = x[i].sender;
  }
  free(x);
  assert_int_equal(pulls, 3);
  for (int k = 0; k < 4; k++)
    if (!from[k]) sink = slot_node[k];
  assert_true(sink != 0);
  for (int k = 0, prev = -1; k < 4; k++) {
    if (slot_node[k] == sink) continue; /* the root slot: it produced the target */
    uint64_t want = prev < 0 ? sink : slot_node[prev];
    if (from[k] != want)
      fail_msg("slot %d (node %016llx) pulled the target from %016llx, not %016llx", k,
               (unsigned long long)slot_node[k], (unsigned long long)from[k],
               (unsigned long long)want);
    prev = k;
  }
}

/* A participant that joins an allreduce but never gets the target: the one
 * after it in the ring waits for it only briefly, then pulls from another
 * copy. Sources become ready in the order 3, 1, 2, 0, so node 3 holds slot
 * 0 and node 1 would pull from it. */
static void test_allreduce_absent(void **state) {
  (void)state;
  const int order[4] = {3, 1, 2, 0};
  const char *srcs[4] = {"alla/0", "alla/1", "alla/2", "alla/3"};
  int64_t *d = malloc(2 * MB);
  for (int k = 0; k < 4; k++) {
    int j = order[k];
    for (size_t i = 0; i < 2 * MB / 8; i++) d[i] = (int64_t)(j + (int)i);
    assert_int_equal(hpl_put(C[j], srcs[j], d, 2 * MB, th_ms(5000)), 0);
  }
  free(d);
  /* node 0 starts it (the sink); node 3 joins and goes away */
  assert_int_equal(hpl_reduce(C[0], "alla/t", srcs, 4, 0, HPL_OP_SUM, HPL_DT_I64, th_ms(5000)), 0);
  assert_int_equal(hpl_reduce(C[3], "alla/t", srcs, 4, 0, HPL_OP_SUM, HPL_DT_I64, th_ms(5000)), 0);
  th_getter g[3];
  for (int j = 0; j < 3; j++) {
    g[j] = (th_getter){.c = C[j], .id = "alla/t", .timeout = th_ms(10000)};
    th_get_start(&g[j]);
  }
  for (int j = 0; j < 3; j++) {
    th_get_join(&g[j]);
    assert_int_equal(g[j].rc, 0);
  }
  hpl_buf *b;
  assert_int_equal(hpl_get(C[1], "alla/t", th_ms(5000), &b), 0);
  const int64_t *r = hpl_buf_data(b);
  assert_int_equal(hpl_buf_size(b), 2 * MB);
  for (size_t i = 0; i < 2 * MB / 8; i++)
    if (r[i] != (int64_t)(6 + 4 * (int)i)) fail_msg("wrong sum at element %zu", i);
  hpl_release(C[1], b);
  char *order_text;
  assert_int_equal(hpl_reduce_sources(C[0], "alla/t", th_ms(5000), &order_text), 0);
  assert_int_equal(strncmp(order_text, "alla/3\n", 7), 0); /* node 3 held slot 0 */
  hpl_free(order_text);
  size_t nx = 0;
  th_xfer *x = th_transfers(C[0], 0, &nx);
  uint64_t n3 = th_node_id(C[3]);
  int pulls = 0;
  for (size_t i = 0; i < nx; i++) {
    if (strcmp(x[i].kind, "assign") || strcmp(x[i].id, "alla/t")) continue;
    pulls++;
    assert_true(x[i].sender != n3 && x[i].receiver != n3);
  }
  free(x);
  assert_int_equal(pulls, 2);
}

static uint64_t total_allocated(void) {
  uint64_t sum = 0;
  for (int i = 0; i < 4; i++) sum += th_counter(C[i], "pool_allocated");
  return sum;
}

/* After a reduce only the target remains: intermediate streams are freed. */
static void test_no_memory_left(void **state) {
  (void)state;
  const size_t n = 8 * MB / 4;
  float *d = malloc(n * 4);
  const char *srcs[4] = {"mem/0", "mem/1", "mem/2", "mem/3"};
  for (int j = 0; j < 4; j++) {
    for (size_t i = 0; i < n; i++) d[i] = (float)j;
    assert_int_equal(hpl_put(C[j], srcs[j], d, n * 4, th_ms(5000)), 0);
  }
  free(d);
  uint64_t before = total_allocated();
  assert_int_equal(hpl_reduce(C[1], "mem/t", srcs, 4, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)), 0);
  hpl_buf *b;
  assert_int_equal(hpl_get(C[1], "mem/t", th_ms(20000), &b), 0);
  hpl_release(C[1], b);
  char *text;
  assert_int_equal(hpl_reduce_sources(C[1], "mem/t", th_ms(5000), &text), 0);
  hpl_free(text);
  /* stores free their streams when the directory ends the reduce, a moment
   * after the target completed: allow up to 5 s */
  uint64_t after = 0, deadline = hpl__now_ms() + (uint64_t)th_ms(5000);
  do {
    after = total_allocated();
    if (after - before <= n * 4 + 64 * KB) break;
    th_sleep_ms(50);
  } while (hpl__now_ms() < deadline);
  assert_true(after >= before + n * 4);
  assert_true(after - before <= n * 4 + 64 * KB);
}

/* ------------------------------------------------------------------ range reduce */

/* Range-reduce sources: element i of source j. Distinct along a source (so
 * a range read from the wrong offset shows) and exact in f32 when summed. */
static float rr_val(int j, size_t i) { return (float)(j * 100000 + (int)(i % 65521)); }

static void rr_put(hpl_client *c, const char *id, int j, size_t n) {
  float *d = malloc(n * 4);
  for (size_t i = 0; i < n; i++) d[i] = rr_val(j, i);
  int rc = hpl_put(c, id, d, n * 4, th_ms(10000));
  if (rc) fail_msg("put %s: %s", id, hpl_strerror(rc));
  free(d);
}

/* hpl_get(target) at c must be the f32 sum over sources js[0..nj) of
 * elements [off, off + len). */
static void rr_check(hpl_client *c, const char *target, const int *js, int nj, size_t off,
                     size_t len) {
  hpl_buf *b;
  int rc = hpl_get(c, target, th_ms(30000), &b);
  if (rc) fail_msg("get %s: %s (%s)", target, hpl_strerror(rc), hpl_errdetail(c));
  if (hpl_buf_size(b) != len * 4)
    fail_msg("%s has %zu bytes, not %zu", target, hpl_buf_size(b), len * 4);
  const float *r = hpl_buf_data(b);
  for (size_t i = 0; i < len; i++) {
    float want = 0;
    for (int x = 0; x < nj; x++) want += rr_val(js[x], off + i);
    if (r[i] != want)
      fail_msg("%s: element %zu (source element %zu) is %g, not %g", target, i, off + i,
               (double)r[i], (double)want);
  }
  hpl_release(c, b);
}

/* (a) A middle range of 3 sources of 3 MiB (f32) on stores 1-3: into a
 * sink holding none of them (leaves and root stream their ranges) and into
 * one holding a source (the root writes the target). */
static void test_range_large(void **state) {
  (void)state;
  const size_t n = 3 * MB / 4, off = MB / 4 + 1021, len = MB / 4 + 3;
  const char *srcs[3] = {"rl/0", "rl/1", "rl/2"};
  const int js[3] = {0, 1, 2};
  for (int j = 0; j < 3; j++) rr_put(C[1 + j], srcs[j], j, n);
  int rc = hpl_reduce_range(C[0], "rl/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32, off * 4, len * 4,
                            th_ms(10000));
  if (rc) fail_msg("reduce_range: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  assert_int_equal(hpl_reduce_range(C[2], "rl/t2", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32, off * 4,
                                    len * 4, th_ms(10000)), 0);
  rr_check(C[0], "rl/t", js, 3, off, len);
  rr_check(C[2], "rl/t2", js, 3, off, len);
  char *text;
  assert_int_equal(hpl_reduce_sources(C[0], "rl/t", th_ms(5000), &text), 0);
  for (int j = 0; j < 3; j++) assert_non_null(strstr(text, srcs[j]));
  hpl_free(text);
}

/* (b) Which path: small (inline-sized) sources are reduced at the
 * directory from their bytes at the offset (also a range up to the end:
 * length 0); large sources with a small range go through a tree (the
 * directory holds no copy of them) whose target is inline-sized. */
static void test_range_inline(void **state) {
  (void)state;
  const size_t n = 16 * KB / 4, big = 2 * MB / 4;
  const char *small[3] = {"ri/s0", "ri/s1", "ri/s2"}, *large[3] = {"ri/l0", "ri/l1", "ri/l2"};
  const int js[3] = {0, 1, 2};
  for (int j = 0; j < 3; j++) {
    rr_put(C[j], small[j], j, n);
    rr_put(C[j + 1], large[j], j, big);
  }
  uint64_t before = th_dir_counter(lc4, "dir_reduces_inline");
  assert_int_equal(hpl_reduce_range(C[3], "ri/ts", small, 3, 0, HPL_OP_SUM, HPL_DT_F32, 1000 * 4,
                                    600 * 4, th_ms(10000)), 0);
  rr_check(C[3], "ri/ts", js, 3, 1000, 600);
  assert_int_equal(hpl_reduce_range(C[1], "ri/tend", small, 3, 0, HPL_OP_SUM, HPL_DT_F32,
                                    3000 * 4, 0, th_ms(10000)), 0);
  rr_check(C[1], "ri/tend", js, 3, 3000, n - 3000);
  assert_int_equal(th_dir_counter(lc4, "dir_reduces_inline"), before + 2);
  assert_int_equal(hpl_reduce_range(C[0], "ri/tl", large, 3, 0, HPL_OP_SUM, HPL_DT_F32,
                                    (big / 2 + 7) * 4, 256 * 4, th_ms(10000)), 0);
  rr_check(C[0], "ri/tl", js, 3, big / 2 + 7, 256);
  assert_int_equal(th_dir_counter(lc4, "dir_reduces_inline"), before + 2);
}

/* (c) The first 3 of 5 sources to become ready, over a range. */
static void test_range_subset(void **state) {
  (void)state;
  const size_t n = 256 * KB / 4, off = 5000, len = 40000;
  char ids[5][32];
  const char *srcs[5];
  for (int j = 0; j < 5; j++) {
    snprintf(ids[j], sizeof ids[j], "rs/s%d", j);
    srcs[j] = ids[j];
  }
  const int order[5] = {3, 0, 4, 2, 1}; /* the first three: 3, 0, 4 */
  for (int k = 0; k < 5; k++) rr_put(C[k % 4], srcs[order[k]], order[k], n);
  assert_int_equal(hpl_reduce_range(C[1], "rs/t", srcs, 5, 3, HPL_OP_SUM, HPL_DT_F32, off * 4,
                                    len * 4, th_ms(10000)), 0);
  rr_check(C[1], "rs/t", order, 3, off, len);
  char *text;
  assert_int_equal(hpl_reduce_sources(C[1], "rs/t", th_ms(5000), &text), 0);
  for (int k = 0; k < 5; k++)
    assert_int_equal(strstr(text, srcs[order[k]]) != NULL, k < 3);
  hpl_free(text);
}

/* (d) A range not in whole elements fails the call; one beyond the sources
 * fails the call if their size is known, else the reduce (its get). */
static void test_range_errors(void **state) {
  (void)state;
  const size_t n = 100000 / 4;
  const char *srcs[2] = {"re/a", "re/b"}, *late[2] = {"re/la", "re/lb"};
  for (int j = 0; j < 2; j++) rr_put(C[j], srcs[j], j, n);
  assert_int_equal(hpl_reduce_range(C[0], "re/t1", srcs, 2, 0, HPL_OP_SUM, HPL_DT_F32, 2, 400,
                                    th_ms(5000)), HPL_EINVAL);
  assert_non_null(strstr(hpl_errdetail(C[0]), "multiple"));
  assert_int_equal(hpl_reduce_range(C[0], "re/t1", srcs, 2, 0, HPL_OP_SUM, HPL_DT_F64, 8, 12,
                                    th_ms(5000)), HPL_EINVAL);
  assert_int_equal(hpl_reduce_range(C[0], "re/t2", srcs, 2, 0, HPL_OP_SUM, HPL_DT_F32,
                                    100000 - 8, 12, th_ms(5000)), HPL_EINVAL);
  assert_non_null(strstr(hpl_errdetail(C[0]), "beyond"));
  assert_int_equal(hpl_reduce_range(C[0], "re/t3", srcs, 2, 0, HPL_OP_SUM, HPL_DT_F32, 100004, 0,
                                    th_ms(5000)), HPL_EINVAL);
  /* up to the last byte is fine */
  assert_int_equal(hpl_reduce_range(C[0], "re/t4", srcs, 2, 0, HPL_OP_SUM, HPL_DT_F32,
                                    100000 - 8, 8, th_ms(5000)), 0);
  const int js[2] = {0, 1};
  rr_check(C[0], "re/t4", js, 2, n - 2, 2);
  /* the sources' size is learnt later: the reduce fails, its get says why
   * (large sources, and inline-sized ones) */
  const size_t sizes[2] = {2 * MB, 16 * KB};
  for (int k = 0; k < 2; k++) {
    char t[32], la[32], lb[32];
    snprintf(t, sizeof t, "re/late%d", k);
    snprintf(la, sizeof la, "re/la%d", k);
    snprintf(lb, sizeof lb, "re/lb%d", k);
    late[0] = la;
    late[1] = lb;
    assert_int_equal(hpl_reduce_range(C[2], t, late, 2, 0, HPL_OP_SUM, HPL_DT_F32,
                                      sizes[k] - 4096, 8192, th_ms(5000)), 0);
    rr_put(C[1], la, 0, sizes[k] / 4);
    rr_put(C[3], lb, 1, sizes[k] / 4);
    hpl_buf *b;
    assert_int_equal(hpl_get(C[2], t, th_ms(10000), &b), HPL_EINVAL);
    assert_non_null(strstr(hpl_errdetail(C[2]), "beyond"));
    assert_int_equal(hpl_get(C[0], t, th_ms(10000), &b), HPL_EINVAL);
  }
}

/* (e) Identical range reduces join; another range (or the whole sources)
 * into the same target clashes. */
static void test_range_join(void **state) {
  (void)state;
  const size_t n = MB / 4, off = 1000, len = 70000;
  const char *srcs[3] = {"rj/0", "rj/1", "rj/2"};
  const int js[3] = {0, 1, 2};
  assert_int_equal(hpl_reduce_range(C[0], "rj/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32, off * 4,
                                    len * 4, th_ms(5000)), 0);
  assert_int_equal(hpl_reduce_range(C[2], "rj/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32, off * 4,
                                    len * 4, th_ms(5000)), 0);
  assert_int_equal(hpl_reduce_range(C[1], "rj/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32,
                                    off * 4 + 4, len * 4, th_ms(5000)), HPL_EEXIST);
  assert_int_equal(hpl_reduce_range(C[1], "rj/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32, off * 4,
                                    len * 4 - 4, th_ms(5000)), HPL_EEXIST);
  assert_int_equal(hpl_reduce(C[1], "rj/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   HPL_EEXIST);
  for (int j = 0; j < 3; j++) rr_put(C[j + 1], srcs[j], j, n);
  rr_check(C[0], "rj/t", js, 3, off, len);
  rr_check(C[2], "rj/t", js, 3, off, len);
  /* joining the finished reduce still works, another range still clashes */
  assert_int_equal(hpl_reduce_range(C[3], "rj/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32, off * 4,
                                    len * 4, th_ms(5000)), 0);
  assert_int_equal(hpl_reduce_range(C[3], "rj/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_F32, 0,
                                    len * 4, th_ms(5000)), HPL_EEXIST);
  rr_check(C[3], "rj/t", js, 3, off, len);
}

typedef struct rr_slice {
  hpl_client *c;
  char target[32];
  size_t off, len; /* elements; len 0: to the end */
  int rc;
  char detail[256];
} rr_slice;

static void *rr_slice_main(void *arg) {
  rr_slice *x = arg;
  const char *srcs[4] = {"rf/0", "rf/1", "rf/2", "rf/3"};
  x->rc = hpl_reduce_range(x->c, x->target, srcs, 4, 0, HPL_OP_SUM, HPL_DT_F32, x->off * 4,
                           x->len * 4, th_ms(10000));
  if (x->rc) snprintf(x->detail, sizeof x->detail, "%s", hpl_errdetail(x->c));
  return NULL;
}

/* (f) The slices of one allreduce at once: 4 range reduces of the same 4
 * sources into 4 targets, each started from another store (the last slice
 * as "up to the end"), all right. */
static void test_range_slices(void **state) {
  (void)state;
  const size_t n = 4 * MB / 4 + 12, q = n / 4;
  const char *srcs[4] = {"rf/0", "rf/1", "rf/2", "rf/3"};
  const int js[4] = {0, 1, 2, 3};
  for (int j = 0; j < 4; j++) rr_put(C[j], srcs[j], j, n);
  rr_slice x[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    x[i] = (rr_slice){.c = C[i], .off = i * q, .len = i < 3 ? q : 0};
    snprintf(x[i].target, sizeof x[i].target, "rf/t%d", i);
    pthread_create(&t[i], NULL, rr_slice_main, &x[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    if (x[i].rc) fail_msg("slice %d: %s (%s)", i, hpl_strerror(x[i].rc), x[i].detail);
  }
  for (int i = 0; i < 4; i++) rr_check(C[i], x[i].target, js, 4, i * q, i < 3 ? q : n - 3 * q);
}

int main(void) {
  const struct CMUnitTest tests4[] = {
      cmocka_unit_test_teardown(test_large_chain, th_teardown),
      cmocka_unit_test_teardown(test_subset, th_teardown),
      cmocka_unit_test_teardown(test_sources_over_time, th_teardown),
      cmocka_unit_test_teardown(test_errors, th_teardown),
      cmocka_unit_test_teardown(test_allreduce, th_teardown),
      cmocka_unit_test_teardown(test_allreduce_absent, th_teardown),
      cmocka_unit_test_teardown(test_no_memory_left, th_teardown),
      cmocka_unit_test_teardown(test_range_large, th_teardown),
      cmocka_unit_test_teardown(test_range_inline, th_teardown),
      cmocka_unit_test_teardown(test_range_subset, th_teardown),
      cmocka_unit_test_teardown(test_range_errors, th_teardown),
      cmocka_unit_test_teardown(test_range_join, th_teardown),
      cmocka_unit_test_teardown(test_range_slices, th_teardown),
  };
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_ops_dtypes, th_teardown),
      cmocka_unit_test_teardown(test_shapes, th_teardown),
  };
  int rc = cmocka_run_group_tests_name("reduce-4", tests4, setup4, teardown4);
  rc |= cmocka_run_group_tests_name("reduce-shapes", tests, NULL, NULL);
  return rc;
}
