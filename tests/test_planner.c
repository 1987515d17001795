/* test_planner.c - reduce-tree planner and reduction kernels. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hoplite.h"
#include "ops.h"
#include "planner.h"

/* In-order walk of the built tree from its root, through parent/child links. */
static void walk(const hpl__plan *p, int s, int *out, int *k) {
  int d = p->degree;
  if (p->nchild[s] > 0) walk(p, p->child[s * d], out, k);
  out[(*k)++] = s;
  for (int i = 1; i < p->nchild[s]; i++) walk(p, p->child[s * d + i], out, k);
}

static void check_tree(int n, int d) {
  hpl__plan p;
  assert_int_equal(hpl__plan_build(n, d, &p), 0);
  int dd = n > 1 && d > n - 1 ? n - 1 : d;
  assert_int_equal(p.degree, dd);
  assert_int_equal(p.parent[p.root], -1);
  int edges = 0;
  for (int s = 0; s < n; s++) {
    assert_true(p.nchild[s] <= dd);
    for (int i = 0; i < p.nchild[s]; i++) {
      int c = p.child[s * dd + i];
      assert_true(c >= 0 && c < n);
      assert_int_equal(p.parent[c], s);
      edges++;
    }
    if (s != p.root) assert_true(p.parent[s] >= 0);
  }
  assert_int_equal(edges, n - 1);
  /* arrival order = in-order: slots visited in-order are 0, 1, ..., n-1 */
  int *order = malloc((size_t)n * sizeof *order), k = 0;
  walk(&p, p.root, order, &k);
  assert_int_equal(k, n);
  for (int i = 0; i < n; i++) assert_int_equal(order[i], i);
  free(order);
  /* height matches the formula: deepest leaf to root */
  int maxdepth = 0;
  for (int s = 0; s < n; s++) {
    int depth = 0;
    for (int x = s; p.parent[x] >= 0; x = p.parent[x]) depth++;
    if (depth > maxdepth) maxdepth = depth;
  }
  assert_int_equal(maxdepth, hpl__plan_height(dd, n));
  hpl__plan_free(&p);
}

static void test_shapes(void **state) {
  (void)state;
  for (int n = 1; n <= 40; n++)
    for (int d = 1; d <= 8; d++) check_tree(n, d);
  check_tree(5000, 1); /* a long chain: no deep recursion in the builder */
  check_tree(1000, 3);
}

static void test_chain_and_star(void **state) {
  (void)state;
  hpl__plan p;
  assert_int_equal(hpl__plan_build(5, 1, &p), 0);
  /* chain: slot i's child is i-1; the last arrival is the root */
  assert_int_equal(p.root, 4);
  for (int s = 1; s < 5; s++) assert_int_equal(p.child[s], s - 1);
  assert_int_equal(p.nchild[0], 0);
  hpl__plan_free(&p);
  assert_int_equal(hpl__plan_build(5, 4, &p), 0);
  /* star: the root sits after its first child in in-order */
  assert_int_equal(p.root, 1);
  assert_int_equal(p.nchild[1], 4);
  hpl__plan_free(&p);
  assert_int_equal(hpl__plan_build(0, 1, &p), HPL_EINVAL);
}

/* The chosen degree is the model's minimum, found by brute force. */
static void test_best_degree_is_model_minimum(void **state) {
  (void)state;
  const double sizes[] = {1, 1024, 65536, 1 << 20, 64.0 * (1 << 20), 1024.0 * (1 << 20)};
  const double lat[] = {10e-6, 200e-6, 5e-3};
  const double bw[] = {12.5e6, 125e6, 1.25e9};
  for (int n = 2; n <= 33; n++)
    for (size_t a = 0; a < 6; a++)
      for (size_t b = 0; b < 3; b++)
        for (size_t c = 0; c < 3; c++) {
          int d = hpl__plan_best_degree(n, sizes[a], lat[b], bw[c]);
          double best = hpl__plan_cost(d, n, sizes[a], lat[b], bw[c]);
          for (int e = 1; e <= n - 1; e++)
            assert_true(best <= hpl__plan_cost(e, n, sizes[a], lat[b], bw[c]) + 1e-15);
        }
  /* the extremes the model should reach */
  assert_int_equal(hpl__plan_best_degree(8, 256.0 * (1 << 20), 200e-6, 125e6), 1); /* chain */
  assert_int_equal(hpl__plan_best_degree(8, 64, 200e-6, 125e6), 7);                 /* star */
  int mid = hpl__plan_best_degree(64, 256 * 1024, 1e-3, 125e6);
  assert_true(mid > 1 && mid < 63);
  hpl__plan p;
  assert_int_equal(hpl__plan_make(8, 256.0 * (1 << 20), 200e-6, 125e6, &p), 0);
  assert_int_equal(p.degree, 1);
  assert_true(fabs(p.cost - (8 * 200e-6 + 256.0 * (1 << 20) / 125e6)) < 1e-9);
  hpl__plan_free(&p);
}

/* Every op x dtype against a scalar reference. */
static void test_kernels(void **state) {
  (void)state;
  enum { N = 1000 };
  for (int op = 0; op < 4; op++) {
    for (int dt = 0; dt < 8; dt++) {
      size_t es = hpl_dtype_size(dt);
      uint8_t a[N * 8], b[N * 8], ref[N * 8];
      for (int i = 0; i < N; i++) {
        double x = (double)((i * 37) % 19) - 6, y = (double)((i * 11) % 13) - 3;
        if (dt == HPL_DT_U8 || dt == HPL_DT_U32 || dt == HPL_DT_U64) x += 6, y += 3;
        switch (dt) {
#define SET(T)                                                      \
  {                                                                 \
    T xa = (T)x, yb = (T)y, r;                                      \
    r = op == HPL_OP_SUM ? (T)(xa + yb) : op == HPL_OP_PROD ? (T)(xa * yb) \
      : op == HPL_OP_MIN ? (yb < xa ? yb : xa) : (yb > xa ? yb : xa); \
    memcpy(a + i * es, &xa, es);                                     \
    memcpy(b + i * es, &yb, es);                                     \
    memcpy(ref + i * es, &r, es);                                    \
  }
          case HPL_DT_U8: SET(uint8_t) break;
          case HPL_DT_I8: SET(int8_t) break;
          case HPL_DT_I32: SET(int32_t) break;
          case HPL_DT_U32: SET(uint32_t) break;
          case HPL_DT_I64: SET(int64_t) break;
          case HPL_DT_U64: SET(uint64_t) break;
          case HPL_DT_F32: SET(float) break;
          case HPL_DT_F64: SET(double) break;
#undef SET
        }
      }
      assert_int_equal(hpl__reduce_apply(op, dt, a, b, N * es), 0);
      assert_memory_equal(a, ref, N * es);
    }
  }
  uint8_t x[8] = {0};
  assert_int_equal(hpl__reduce_apply(HPL_OP_SUM, HPL_DT_F32, x, x, 6), HPL_EINVAL);
  assert_int_equal(hpl__reduce_apply(9, HPL_DT_F32, x, x, 4), HPL_EINVAL);
  assert_int_equal(hpl__reduce_apply(HPL_OP_SUM, 42, x, x, 4), HPL_EINVAL);
  assert_string_equal(hpl__op_name(HPL_OP_PROD), "prod");
  assert_string_equal(hpl__dtype_name(HPL_DT_F64), "f64");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_chain_and_star),
      cmocka_unit_test(test_best_degree_is_model_minimum),
      cmocka_unit_test(test_kernels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
