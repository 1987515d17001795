/* test_pcstage.c - the store takes a client's creation memfd only when the
 * kernel guarantees its pages stay (store/putcopy.h hpl__pcstage_get): a
 * memfd sealed against shrinking that holds the range. Anything else (an
 * unsealed memfd the client could truncate under the store's memcpy, a
 * regular file, a pipe, a closed descriptor, a range past the end) is
 * refused, so the store falls back to process_vm_readv and never dies of
 * SIGBUS. The descriptors are this process's own, taken with the real
 * pidfd_getfd as the store takes a client's.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "hoplite.h"
#include "putcopy.h"

#define MB (1024ull * 1024)

static int memfd_of(uint64_t size, int seals) {
  int fd = memfd_create("test-stage", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)size), 0);
  if (seals) assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
  return fd;
}

static void test_sealed_memfd_taken_and_cached(void **state) {
  (void)state;
  int fd = memfd_of(2 * MB, F_SEAL_SHRINK | F_SEAL_GROW);
  assert_int_equal(pwrite(fd, "hello", 5, MB), 5);
  hpl__pcstage *cache = NULL, *a = NULL, *b = NULL;
  char why[200];
  assert_int_equal(hpl__pcstage_get(&cache, getpid(), fd, MB, MB, &a, why, sizeof why), 0);
  assert_ptr_equal(a, cache);
  assert_memory_equal(hpl__pcstage_bytes(a) + MB, "hello", 5);
  /* the same memfd again: the same mapping, no new one */
  assert_int_equal(hpl__pcstage_get(&cache, getpid(), fd, 0, 2 * MB, &b, why, sizeof why), 0);
  assert_ptr_equal(a, b);
  /* the kernel keeps its pages where the store's mapping reads them */
  assert_int_equal(ftruncate(fd, 0), -1);
  assert_int_equal(errno, EPERM);
  /* a range past its end */
  hpl__pcstage *c = NULL;
  assert_int_equal(hpl__pcstage_get(&cache, getpid(), fd, MB, MB + 1, &c, why, sizeof why),
                   HPL_EINVAL);
  assert_null(c);
  hpl__pcstage_unref(a);
  hpl__pcstage_unref(b);
  hpl__pcstage_unref(cache);
  close(fd);
}

static void expect_refused(int fd, uint64_t n, const char *what) {
  hpl__pcstage *cache = NULL, *st = NULL;
  char why[200] = "";
  int rc = hpl__pcstage_get(&cache, getpid(), fd, 0, n, &st, why, sizeof why);
  if (rc != HPL_EINVAL) fail_msg("%s: taken (rc %d)", what, rc);
  assert_null(st);
  assert_null(cache);
  assert_true(why[0] != 0);
}

static void test_other_descriptors_refused(void **state) {
  (void)state;
  int unsealed = memfd_of(MB, 0);
  expect_refused(unsealed, MB, "an unsealed memfd");
  int grow_only = memfd_of(MB, F_SEAL_GROW);
  expect_refused(grow_only, MB, "a memfd not sealed against shrinking");
  char path[] = "/tmp/test_pcstage_XXXXXX";
  int file = mkstemp(path);
  assert_true(file >= 0);
  unlink(path);
  assert_int_equal(ftruncate(file, (off_t)MB), 0);
  expect_refused(file, MB, "a regular file");
  int p[2];
  assert_int_equal(pipe(p), 0);
  expect_refused(p[0], 1, "a pipe");
  expect_refused(1000, 1, "a closed descriptor");
  close(unsealed);
  close(grow_only);
  close(file);
  close(p[0]);
  close(p[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sealed_memfd_taken_and_cached),
      cmocka_unit_test(test_other_descriptors_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
