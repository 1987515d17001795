/* test_ring.c - ring allreduces (store/ring.c, directory/ring.c) across real
 * stores: exact results for every op and dtype at slices of unequal
 * length, the bytes each node sends, the groups that must not form (and
 * whose clients reduce the usual way), a ring whose streams are cut, a
 * member killed mid-ring, and a member whose pool must make room first. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1ull << 20)
#define KB (1ull << 10)
#define NODES 5

static hpl__lc *lc5;
static hpl_client *C[NODES];

static int setup5(void **state) {
  (void)state;
  lc5 = th_cluster(NODES, 256 * MB, NULL, NULL);
  th_untrack(lc5);
  for (int i = 0; i < NODES; i++) C[i] = th_connect(lc5, i);
  return 0;
}

static int teardown5(void **state) {
  (void)state;
  for (int i = 0; i < NODES; i++) hpl_close(C[i]);
  th_stop(lc5, 0);
  return 0;
}

/* Source j's element i: a small integer, so every op is exact in every
 * dtype (products of up to 4 values in 1..3 stay below 128). */
static int val(int j, size_t i) { return 1 + (int)((i * 7 + (size_t)j * 13 + i / 5) % 3); }

static void fill(int dtype, void *buf, size_t n, int j) {
  for (size_t i = 0; i < n; i++) {
    int v = val(j, i);
    switch (dtype) {
      case HPL_DT_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
      case HPL_DT_I8: ((int8_t *)buf)[i] = (int8_t)-v; break;
      case HPL_DT_I32: ((int32_t *)buf)[i] = -v; break;
      case HPL_DT_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
      case HPL_DT_I64: ((int64_t *)buf)[i] = (int64_t)v * 1000003; break;
      case HPL_DT_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
      case HPL_DT_F32: ((float *)buf)[i] = (float)v * 0.5f; break;
      case HPL_DT_F64: ((double *)buf)[i] = (double)v * 0.25; break;
    }
  }
}

/* Element i of the expected result of `op` over sources js[0..k). */
static double expect(int dtype, int op, const int *js, int k, size_t i) {
  double acc = 0;
  for (int x = 0; x < k; x++) {
    double v = val(js[x], i);
    if (dtype == HPL_DT_I8 || dtype == HPL_DT_I32) v = -v;
    if (dtype == HPL_DT_I64) v *= 1000003;
    if (dtype == HPL_DT_F32) v *= 0.5;
    if (dtype == HPL_DT_F64) v *= 0.25;
    if (x == 0) acc = v;
    else if (op == HPL_OP_SUM) acc += v;
    else if (op == HPL_OP_PROD) acc *= v;
    else if (op == HPL_OP_MIN) acc = v < acc ? v : acc;
    else acc = v > acc ? v : acc;
  }
  return acc;
}

static double elem(int dtype, const void *buf, size_t i) {
  switch (dtype) {
    case HPL_DT_U8: return ((const uint8_t *)buf)[i];
    case HPL_DT_I8: return ((const int8_t *)buf)[i];
    case HPL_DT_I32: return ((const int32_t *)buf)[i];
    case HPL_DT_U32: return ((const uint32_t *)buf)[i];
    case HPL_DT_I64: return (double)((const int64_t *)buf)[i];
    case HPL_DT_U64: return (double)((const uint64_t *)buf)[i];
    case HPL_DT_F32: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
  }
}

/* The first element of `buf` that differs from the expected result, or -1. */
static long first_wrong(int dtype, int op, const int *js, int k, const void *buf, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (elem(dtype, buf, i) != expect(dtype, op, js, k, i)) return (long)i;
  return -1;
}

/* Put source `j` as `id` (n elements of dtype) at client c. */
static void put_src(hpl_client *c, const char *id, int dtype, size_t n, int j) {
  size_t es = hpl_dtype_size(dtype);
  void *d = malloc(n * es);
  assert_non_null(d);
  fill(dtype, d, n, j);
  assert_int_equal(hpl_put(c, id, d, n * es, th_ms(10000)), 0);
  free(d);
}

typedef struct part {
  hpl_client *c;
  const char *target;
  const char **srcs;
  int nsrc, op, dtype;
  const int *js; /* which fill() each source holds */
  size_t n;      /* elements */
  int64_t timeout;
  int rc;
  long wrong; /* first wrong element, -1: none */
  char detail[256];
} part;

static void *part_main(void *arg) {
  part *p = arg;
  hpl_buf *b = NULL;
  p->wrong = -2;
  p->rc = hpl_allreduce(p->c, p->target, p->srcs, (size_t)p->nsrc, 0, p->op, p->dtype,
                        p->timeout, &b);
  if (p->rc) {
    snprintf(p->detail, sizeof p->detail, "%s", hpl_errdetail(p->c));
    return NULL;
  }
  size_t es = hpl_dtype_size(p->dtype);
  p->wrong = hpl_buf_size(b) != p->n * es
                 ? -3
                 : first_wrong(p->dtype, p->op, p->js, p->nsrc, hpl_buf_data(b), p->n);
  hpl_release(p->c, b);
  return NULL;
}

/* Participants of one allreduce, each on a thread of its own. */
typedef struct parts {
  part p[8];
  pthread_t t[8];
  int np;
} parts;

/* Every client in cs[0..np) calls the same allreduce at once. */
static void parts_start(parts *x, hpl_client **cs, int np, const char *target, const char **srcs,
                        int nsrc, const int *js, int op, int dtype, size_t n) {
  x->np = np;
  for (int i = 0; i < np; i++) {
    x->p[i] = (part){.c = cs[i], .target = target, .srcs = srcs, .nsrc = nsrc, .op = op,
                     .dtype = dtype, .js = js, .n = n, .timeout = th_ms(30000)};
    pthread_create(&x->t[i], NULL, part_main, &x->p[i]);
  }
}

static void parts_join(parts *x) {
  for (int i = 0; i < x->np; i++) pthread_join(x->t[i], NULL);
}

/* Participant i got the right result. */
static void part_check(const part *p, int i) {
  if (p->rc) fail_msg("participant %d: %s (%s)", i, hpl_strerror(p->rc), p->detail);
  if (p->wrong != -1)
    fail_msg("participant %d: wrong result (dtype %d, op %d, %s, element %ld)", i, p->dtype,
             p->op, p->target, p->wrong);
}

/* The same allreduce by every client in cs[0..np); each must get the right
 * result. */
static void run_parts(hpl_client **cs, int np, const char *target, const char **srcs, int nsrc,
                      const int *js, int op, int dtype, size_t n) {
  parts x;
  parts_start(&x, cs, np, target, srcs, nsrc, js, op, dtype, n);
  parts_join(&x);
  for (int i = 0; i < np; i++) part_check(&x.p[i], i);
}

/* A cluster of its own of stores with `memory`-byte pools, all run with
 * `store_args`; clients in cs[0..nodes). */
static hpl__lc *own_cluster(int nodes, uint64_t memory, const char *store_args, hpl_client **cs) {
  hpl__lc *lc = th_cluster(nodes, memory, NULL, store_args);
  for (int i = 0; i < nodes; i++) cs[i] = th_connect(lc, i);
  return lc;
}

/* Close own_cluster's clients and stop it. */
static void own_cluster_stop(hpl__lc *lc, int nodes, hpl_client **cs) {
  for (int i = 0; i < nodes; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

static uint64_t dirc(const char *name) { return th_dir_counter(lc5, name); }

/* Four members, an i64 sum over slices of unequal length: every member gets
 * the exact result, no reduce tree runs, each node sends its 2(k-1)/k share
 * of the object (the outgoing stream, nothing else), and a node that took
 * no part gets the target from them. */
static void test_ring_sum(void **state) {
  (void)state;
  const char *srcs[4] = {"rs/0", "rs/1", "rs/2", "rs/3"};
  const int js[4] = {0, 1, 2, 3};
  const size_t n = 3 * MB / 8 + 3; /* 393219 elements: slices of 98304 and 98305 */
  for (int j = 0; j < 4; j++) put_src(C[j], srcs[j], HPL_DT_I64, n, js[j]);
  uint64_t formed = dirc("dir_rings_formed"), done = dirc("dir_rings_done");
  uint64_t sent[4], tasks[4];
  for (int j = 0; j < 4; j++) {
    sent[j] = th_counter(C[j], "data_bytes_sent");
    tasks[j] = th_counter(C[j], "rings_done");
  }
  run_parts(C, 4, "rs/t", srcs, 4, js, HPL_OP_SUM, HPL_DT_I64, n);
  assert_int_equal(dirc("dir_rings_formed"), formed + 1);
  /* the directory counts the ring done once every member said so */
  for (int w = 0; w < 100 && dirc("dir_rings_done") != done + 1; w++) th_sleep_ms(20);
  assert_int_equal(dirc("dir_rings_done"), done + 1);
  const uint64_t size = n * 8, share = 2 * 3 * size / 4;
  for (int j = 0; j < 4; j++) {
    assert_int_equal(th_counter(C[j], "rings_done"), tasks[j] + 1);
    uint64_t d = th_counter(C[j], "data_bytes_sent") - sent[j];
    /* slices differ by at most one element; 6 of them per stream */
    if (d + 6 * 8 < share || d > share + 6 * 8)
      fail_msg("node %d sent %llu bytes, not about %llu", j, (unsigned long long)d,
               (unsigned long long)share);
  }
  char *text = NULL;
  assert_int_equal(hpl_reduce_sources(C[0], "rs/t", th_ms(2000), &text), HPL_ENOTFOUND);
  /* node 4 was no member: it gets the target like any object */
  hpl_buf *b;
  assert_int_equal(hpl_get(C[4], "rs/t", th_ms(10000), &b), 0);
  assert_int_equal(hpl_buf_size(b), size);
  assert_int_equal(first_wrong(HPL_DT_I64, HPL_OP_SUM, js, 4, hpl_buf_data(b), n), -1);
  hpl_release(C[4], b);
  for (int j = 0; j < 4; j++) assert_int_equal(hpl_delete(C[j], srcs[j], th_ms(5000)), 0);
  assert_int_equal(hpl_delete(C[0], "rs/t", th_ms(5000)), 0);
}

/* Every op and dtype on three members, each at an element count that
 * leaves a remainder: exact results. */
static void test_ring_ops_dtypes(void **state) {
  (void)state;
  const int dts[8] = {HPL_DT_U8, HPL_DT_I8, HPL_DT_I32, HPL_DT_U32,
                      HPL_DT_I64, HPL_DT_U64, HPL_DT_F32, HPL_DT_F64};
  const int js[3] = {4, 5, 6};
  uint64_t formed = dirc("dir_rings_formed");
  int rings = 0;
  for (int d = 0; d < 8; d++)
    for (int op = HPL_OP_SUM; op <= HPL_OP_PROD; op++) {
      size_t es = hpl_dtype_size(dts[d]);
      size_t n = (1 * MB) / es + 1 + (size_t)op;
      char ids[3][32], target[32];
      const char *srcs[3];
      for (int j = 0; j < 3; j++) {
        snprintf(ids[j], sizeof ids[j], "ro/%d/%d/%d", d, op, j);
        srcs[j] = ids[j];
        put_src(C[j], srcs[j], dts[d], n, js[j]);
      }
      snprintf(target, sizeof target, "ro/%d/%d/t", d, op);
      run_parts(C, 3, target, srcs, 3, js, op, dts[d], n);
      rings++;
      for (int j = 0; j < 3; j++) hpl_delete(C[j], srcs[j], th_ms(5000)); /* their makers */
      hpl_delete(C[0], target, th_ms(5000));
    }
  assert_int_equal(dirc("dir_rings_formed"), formed + (uint64_t)rings);
}

/* Groups that must not form: each client then reduces the usual way and
 * gets the right result. */
static void test_ring_declined(void **state) {
  (void)state;
  const int js[5] = {0, 1, 2, 3, 4};
  size_t n = 2 * MB / 4;
  uint64_t formed = dirc("dir_rings_formed"), declined = dirc("dir_rings_declined");
  /* (a) a participant without a source of its own (node 3): the ring
   * forms without it, and it gets the target from the members */
  const char *a[3] = {"rd/a0", "rd/a1", "rd/a2"};
  for (int j = 0; j < 3; j++) put_src(C[j], a[j], HPL_DT_I32, n, js[j]);
  run_parts(C, 4, "rd/at", a, 3, js, HPL_OP_SUM, HPL_DT_I32, n);
  assert_int_equal(dirc("dir_rings_formed"), formed + 1);
  assert_int_equal(dirc("dir_rings_declined"), declined);
  /* (b) too small: slices under 256 KiB */
  const char *b[3] = {"rd/b0", "rd/b1", "rd/b2"};
  for (int j = 0; j < 3; j++) put_src(C[j], b[j], HPL_DT_I32, 128 * KB / 4, js[j]);
  run_parts(C, 3, "rd/bt", b, 3, js, HPL_OP_MAX, HPL_DT_I32, 128 * KB / 4);
  assert_int_equal(dirc("dir_rings_declined"), declined + 1);
  /* (c) one of four participants never comes: the others wait for the
   * forming window, then reduce all four sources as usual */
  const char *c[4] = {"rd/c0", "rd/c1", "rd/c2", "rd/c3"};
  for (int j = 0; j < 4; j++) put_src(C[j], c[j], HPL_DT_I32, n, js[j]);
  uint64_t t0 = hpl__now_ms();
  run_parts(C, 3, "rd/ct", c, 4, js, HPL_OP_MIN, HPL_DT_I32, n);
  assert_int_equal(dirc("dir_rings_declined"), declined + 2);
  assert_true(hpl__now_ms() - t0 < (uint64_t)th_ms(5000));
  /* (d) two participants on one node (a second client of node 0): the
   * second is told at its store that a ring runs there (or, if the first
   * has not asked yet, the directory declines the group); either way every
   * participant gets the result */
  const char *d[4] = {"rd/d0", "rd/d1", "rd/d2", "rd/d3"};
  for (int j = 0; j < 4; j++) put_src(C[j], d[j], HPL_DT_I32, n, js[j]);
  hpl_client *c0b = th_connect(lc5, 0);
  hpl_client *cs[5] = {C[0], C[1], C[2], C[3], c0b};
  run_parts(cs, 5, "rd/dt", d, 4, js, HPL_OP_SUM, HPL_DT_I32, n);
  hpl_close(c0b);
}

/* Every store cuts its first ring stream after 1 MiB: the ring is
 * abandoned, and the clients reduce the usual way. */
static void test_ring_stream_cut(void **state) {
  (void)state;
  hpl_client *cs[4];
  hpl__lc *lc = own_cluster(4, 256 * MB, "--faults prefix=g:,drop_after=1M", cs);
  const char *srcs[4] = {"rc/0", "rc/1", "rc/2", "rc/3"};
  const int js[4] = {0, 1, 2, 3};
  size_t n = 8 * MB / 4;
  for (int j = 0; j < 4; j++) put_src(cs[j], srcs[j], HPL_DT_F32, n, js[j]);
  run_parts(cs, 4, "rc/t", srcs, 4, js, HPL_OP_SUM, HPL_DT_F32, n);
  assert_int_equal(th_dir_counter(lc, "dir_rings_formed"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_rings_abandoned"), 1);
  uint64_t failures = 0;
  for (int i = 0; i < 4; i++) failures += th_counter(cs[i], "ring_failures");
  assert_true(failures >= 1);
  /* the result came from a reduce tree */
  char *text = NULL;
  assert_int_equal(hpl_reduce_sources(cs[0], "rc/t", th_ms(5000), &text), 0);
  hpl_free(text);
  own_cluster_stop(lc, 4, cs);
}

/* A member is killed mid-ring (the ring's streams are paced so it is
 * still running). Its source has a second copy on node 4, which took no
 * part. The other members' rings end, and they get the right result from
 * a reduce tree that uses the copy; nobody hangs. */
static void test_ring_member_killed(void **state) {
  (void)state;
  hpl_client *cs[5];
  hpl__lc *lc = own_cluster(5, 256 * MB, "--faults prefix=g:,slow_send=4M", cs);
  const char *srcs[4] = {"rk/0", "rk/1", "rk/2", "rk/3"};
  const int js[4] = {0, 1, 2, 3};
  size_t n = 16 * MB / 8;
  for (int j = 0; j < 4; j++) put_src(cs[j], srcs[j], HPL_DT_I64, n, js[j]);
  hpl_buf *b;
  assert_int_equal(hpl_get(cs[4], "rk/3", th_ms(10000), &b), 0); /* the second copy */
  hpl_release(cs[4], b);
  parts x;
  uint64_t t0 = hpl__now_ms();
  parts_start(&x, cs, 4, "rk/t", srcs, 4, js, HPL_OP_SUM, HPL_DT_I64, n);
  th_sleep_ms(1000);
  assert_int_equal(hpl__lc_signal(lc, 3, SIGKILL), 0);
  parts_join(&x);
  uint64_t took = hpl__now_ms() - t0;
  assert_int_equal(th_dir_counter(lc, "dir_rings_formed"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_rings_abandoned"), 1);
  for (int i = 0; i < 3; i++) part_check(&x.p[i], i);
  assert_int_not_equal(x.p[3].rc, 0); /* its store is gone */
  /* a paced ring would take 6 s; the tree after the kill a fraction of it */
  if (took > (uint64_t)th_ms(10000))
    fail_msg("the survivors took %llu ms", (unsigned long long)took);
  own_cluster_stop(lc, 5, cs);
}

/* A member's pool is full of idle copies got from elsewhere when the ring
 * forms: its target waits while copies are let go (the directory agrees to
 * each first), and the ring runs rather than being abandoned. */
static void test_ring_waits_for_room(void **state) {
  (void)state;
  hpl_client *cs[3];
  hpl__lc *lc = own_cluster(3, 64 * MB, NULL, cs);
  const char *srcs[3] = {"rf/0", "rf/1", "rf/2"};
  const int js[3] = {0, 1, 2};
  size_t n = 8 * MB / 4;
  for (int j = 0; j < 3; j++) put_src(cs[j], srcs[j], HPL_DT_F32, n, js[j]);
  /* node 1 gets 8 objects of 8 MiB put on nodes 0 and 2: more than its
   * pool holds beside its source, so it ends full of idle copies */
  for (int i = 0; i < 8; i++) {
    char id[32];
    snprintf(id, sizeof id, "rf/fill/%d", i);
    th_put_pattern(cs[i % 2 ? 2 : 0], id, 8 * MB, (uint64_t)i);
    hpl_buf *b;
    assert_int_equal(hpl_get(cs[1], id, th_ms(10000), &b), 0);
    hpl_release(cs[1], b);
  }
  assert_true(th_counter(cs[1], "idle_bytes") >= 48 * MB);
  uint64_t ev0 = th_counter(cs[1], "evictions");
  run_parts(cs, 3, "rf/t", srcs, 3, js, HPL_OP_SUM, HPL_DT_F32, n);
  assert_int_equal(th_dir_counter(lc, "dir_rings_formed"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_rings_abandoned"), 0);
  assert_int_equal(th_counter(cs[1], "rings_done"), 1);
  assert_int_equal(th_counter(cs[1], "ring_failures"), 0);
  assert_true(th_counter(cs[1], "evictions") > ev0); /* room was made for the target */
  own_cluster_stop(lc, 3, cs);
}

int main(void) {
  const struct CMUnitTest shared[] = {
      cmocka_unit_test_teardown(test_ring_sum, th_teardown),
      cmocka_unit_test_teardown(test_ring_ops_dtypes, th_teardown),
      cmocka_unit_test_teardown(test_ring_declined, th_teardown),
  };
  const struct CMUnitTest own[] = {
      cmocka_unit_test_teardown(test_ring_stream_cut, th_teardown),
      cmocka_unit_test_teardown(test_ring_member_killed, th_teardown),
      cmocka_unit_test_teardown(test_ring_waits_for_room, th_teardown),
  };
  int rc = cmocka_run_group_tests_name("ring-5", shared, setup5, teardown5);
  rc |= cmocka_run_group_tests_name("ring-faults", own, NULL, NULL);
  return rc;
}
