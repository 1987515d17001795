/* test_digest.c - object digests (src/common/digest.c): SHA-256 known
 * vectors, units and their spans, roots, a flipped byte caught in the right
 * unit, algorithm names; prints the cost per GiB of each algorithm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "digest.h"

static void hex(const uint8_t *d, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_sha256_vectors(void **state) {
  (void)state;
  uint8_t d[HPL__DIGEST_LEN];
  char h[2 * HPL__DIGEST_LEN + 1];
  hpl__digest_bytes(HPL__DIGEST_SHA256, "", 0, d);
  hex(d, sizeof d, h);
  assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  hpl__digest_bytes(HPL__DIGEST_SHA256, "abc", 3, d);
  hex(d, sizeof d, h);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  hpl__digest_bytes(HPL__DIGEST_SHA256, m, strlen(m), d);
  hex(d, sizeof d, h);
  assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* one million 'a' */
  char *a = malloc(1000000);
  assert_non_null(a);
  memset(a, 'a', 1000000);
  hpl__digest_bytes(HPL__DIGEST_SHA256, a, 1000000, d);
  hex(d, sizeof d, h);
  assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(a);
}

static void test_fast_padded(void **state) {
  (void)state;
  uint8_t d[HPL__DIGEST_LEN], e[HPL__DIGEST_LEN], zero[16] = {0};
  hpl__digest_bytes(HPL__DIGEST_FAST, "abc", 3, d);
  assert_memory_equal(d + 16, zero, 16); /* 16 bytes of XXH3-128, then zeros */
  assert_memory_not_equal(d, zero, 16);
  hpl__digest_bytes(HPL__DIGEST_FAST, "abd", 3, e);
  assert_false(hpl__digest_equal(d, e));
  hpl__digest_bytes(HPL__DIGEST_FAST, "abc", 3, e);
  assert_true(hpl__digest_equal(d, e));
}

static void test_units(void **state) {
  (void)state;
  assert_int_equal(hpl__digest_units(0), 1);
  assert_int_equal(hpl__digest_units(1), 1);
  /* the unit grows with the size: 32 KiB up to 4 MiB, 64 KiB up to 8 MiB */
  assert_int_equal(hpl__digest_unit(0), HPL__DIGEST_UNIT_MIN);
  assert_int_equal(hpl__digest_unit(4ull << 20), 32u << 10);
  assert_int_equal(hpl__digest_unit((4ull << 20) + 1), 64u << 10);
  assert_int_equal(hpl__digest_unit(8ull << 20), 64u << 10);
  assert_int_equal(hpl__digest_unit((8ull << 20) + 1), HPL__DIGEST_UNIT);
  assert_int_equal(HPL__DIGEST_UNIT % (64u << 10), 0); /* every unit divides the largest */
  assert_int_equal(hpl__digest_units(HPL__DIGEST_UNIT_MIN), 1);
  assert_int_equal(hpl__digest_units(HPL__DIGEST_UNIT_MIN + 1), 2);
  assert_int_equal(hpl__digest_units(4ull << 20), 128);
  assert_int_equal(hpl__digest_units(8ull << 20), 128);
  assert_int_equal(hpl__digest_units((8ull << 20) + 1), 65);
  assert_int_equal(hpl__digest_units(256ull << 20), 2048);
  uint64_t off, len;
  hpl__digest_unit_span(HPL__DIGEST_UNIT_MIN + 10, 1, &off, &len);
  assert_int_equal(off, HPL__DIGEST_UNIT_MIN);
  assert_int_equal(len, 10);
  assert_int_equal(hpl__digest_unit_of(1u << 20, HPL__DIGEST_UNIT_MIN), 1);
  assert_int_equal(hpl__digest_unit_of((16ull << 20) + 10, (16ull << 20) + 9), 128);
  hpl__digest_unit_span((16ull << 20) + 10, 128, &off, &len);
  assert_int_equal(off, 16ull << 20);
  assert_int_equal(len, 10);
  hpl__digest_unit_span(0, 0, &off, &len);
  assert_int_equal(len, 0);
  hpl__digest_unit_span(1u << 20, 3, &off, NULL); /* the start alone */
  assert_int_equal(off, 3 * HPL__DIGEST_UNIT_MIN);
}

static void test_flip_caught(void **state) {
  (void)state;
  uint64_t size = 5 * hpl__digest_unit(1u << 20) + 777, unit = hpl__digest_unit(size);
  uint8_t *b = malloc(size);
  assert_non_null(b);
  for (uint64_t i = 0; i < size; i++) b[i] = (uint8_t)(i * 131 + 7);
  for (int algo = HPL__DIGEST_SHA256; algo <= HPL__DIGEST_FAST; algo++) {
    uint64_t n = hpl__digest_units(size);
    uint8_t *list = malloc(n * HPL__DIGEST_LEN), root[HPL__DIGEST_LEN], root2[HPL__DIGEST_LEN];
    assert_non_null(list);
    hpl__digest_units_make(algo, b, size, 0, 2, list); /* in two pieces */
    hpl__digest_units_make(algo, b, size, 2, n, list);
    hpl__digest_root(algo, list, n, root);
    for (uint64_t u = 0; u < n; u++) assert_true(hpl__digest_check_unit(algo, b, size, u, list));
    b[3 * unit + 5] ^= 0x10;
    for (uint64_t u = 0; u < n; u++)
      assert_int_equal(hpl__digest_check_unit(algo, b, size, u, list), u != 3);
    b[3 * unit + 5] ^= 0x10;
    b[size - 1] ^= 1; /* the short last unit */
    assert_false(hpl__digest_check_unit(algo, b, size, n - 1, list));
    b[size - 1] ^= 1;
    list[7] ^= 1; /* a changed list changes the root */
    hpl__digest_root(algo, list, n, root2);
    assert_false(hpl__digest_equal(root, root2));
    free(list);
  }
  free(b);
}

static void test_names(void **state) {
  (void)state;
  int a = -1;
  assert_int_equal(hpl__digest_algo_parse("sha256", &a), 0);
  assert_int_equal(a, HPL__DIGEST_SHA256);
  assert_int_equal(hpl__digest_algo_parse("fast", &a), 0);
  assert_int_equal(a, HPL__DIGEST_FAST);
  assert_int_equal(hpl__digest_algo_parse("off", &a), 0);
  assert_int_equal(a, HPL__DIGEST_OFF);
  assert_int_equal(hpl__digest_algo_parse("md5", &a), -1);
  assert_string_equal(hpl__digest_algo_name(HPL__DIGEST_FAST), "fast");
  assert_string_equal(hpl__digest_algo_name(9), "?");
  assert_false(hpl__digest_algo_on(HPL__DIGEST_OFF));
  assert_true(hpl__digest_algo_on(HPL__DIGEST_SHA256));
}

/* Not an assertion: the CPU cost per GiB, printed for docs/operations.md. */
static void test_cost(void **state) {
  (void)state;
  uint64_t size = 256ull << 20;
  uint8_t *b = malloc(size);
  assert_non_null(b);
  memset(b, 0x5a, size);
  uint64_t n = hpl__digest_units(size);
  uint8_t *list = malloc(n * HPL__DIGEST_LEN);
  assert_non_null(list);
  for (int algo = HPL__DIGEST_SHA256; algo <= HPL__DIGEST_FAST; algo++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    hpl__digest_units_make(algo, b, size, 0, n, list);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("digest %-6s: %.3f s CPU per GiB (%.2f GB/s, 128 KiB units)\n",
           hpl__digest_algo_name(algo), s * 4, (double)size / s / 1e9);
  }
  free(list);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_vectors), cmocka_unit_test(test_fast_padded),
      cmocka_unit_test(test_units),          cmocka_unit_test(test_flip_caught),
      cmocka_unit_test(test_names),          cmocka_unit_test(test_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
