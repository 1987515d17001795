/* test_integrity_spill.c - spilled copies verified when read back, with
 * real processes: a byte flipped in a spill file on disk is caught when
 * the copy is read back (a local get) or streamed from its file (a get at
 * another store): the get returns the exact bytes or fails with
 * HPL_ECORRUPT naming the node, never the flipped bytes; the copy is
 * dropped and reported to the directory. */
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
  char err[512];
  int i = hpl__lc_add_store(lc, args, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

/* Flip one byte at `off` of the spill file named `name` under dir. */
static void flip_in_file(const char *dir, const char *name, long off) {
  char cmd[512], path[512] = "";
  snprintf(cmd, sizeof cmd, "find %s -type f -name %s", dir, name);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  if (!fgets(path, sizeof path, p)) path[0] = '\0';
  pclose(p);
  path[strcspn(path, "\n")] = '\0';
  if (!path[0]) fail_msg("no spill file %s under %s", name, dir);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, off, SEEK_SET), 0);
  int c = fgetc(f);
  assert_true(c != EOF);
  assert_int_equal(fseek(f, off, SEEK_SET), 0);
  fputc(c ^ 0x5a, f);
  assert_int_equal(fclose(f), 0);
}

/* A get of `id` returns exactly the pattern, or HPL_ECORRUPT naming node
 * `bad`: returns 1 for the error, 0 for exact bytes. */
static int exact_or_corrupt(hpl_client *c, const char *id, uint64_t size, uint64_t seed,
                            uint64_t bad) {
  hpl_buf *buf = NULL;
  int rc = hpl_get(c, id, th_ms(20000), &buf);
  if (rc == 0) {
    int ok = hpl_buf_size(buf) == size && th_check_pattern(hpl_buf_data(buf), size, seed);
    hpl_release(c, buf);
    if (!ok) fail_msg("get of '%s' returned wrong bytes", id);
    return 0;
  }
  if (rc != HPL_ECORRUPT) fail_msg("get of '%s': %s (%s)", id, hpl_strerror(rc), hpl_errdetail(c));
  char want[32];
  snprintf(want, sizeof want, "%016llx", (unsigned long long)bad);
  if (!strstr(hpl_errdetail(c), want))
    fail_msg("detail '%s' does not name node %s", hpl_errdetail(c), want);
  return 1;
}

/* A (64 MiB pool, a spill directory) puts sp/z and sp/w (C gets copies
 * of both), sp/x and sp/y, then more until the four are spilled (files
 * 1-4: the oldest go first). A byte in the middle of each file is flipped.
 * A local get of sp/w returns the exact bytes (A drops its copy and
 * fetches C's). A get of sp/z at B returns the exact bytes (whichever copy
 * it is sent). A local get of sp/x and a get of sp/y
 * at B (streamed from the file) return the exact bytes or HPL_ECORRUPT
 * naming A; A counts both as corrupt, the directory both reports, and
 * neither copy is named again (a second get fails the same way). */
static void test_spill_flipped(void **state) {
  (void)state;
  char dir[] = "/tmp/hpl-spill-integ-XXXXXX";
  assert_non_null(mkdtemp(dir));
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  char args[200];
  snprintf(args, sizeof args, "--memory 64M --spill-dir %s", dir);
  hpl_client *A = th_connect(lc, add(lc, args));
  hpl_client *B = th_connect(lc, add(lc, "--memory 256M"));
  uint64_t a = th_node_id(A);
  hpl_client *C = th_connect(lc, add(lc, "--memory 256M"));
  const uint64_t size = 8 * MB;
  th_put_pattern(A, "sp/z", size, 13); /* C holds a good copy of this one */
  hpl_buf *buf;
  assert_int_equal(hpl_get(C, "sp/z", th_ms(20000), &buf), 0);
  hpl_release(C, buf);
  th_put_pattern(A, "sp/w", size, 14); /* ...and of this one */
  assert_int_equal(hpl_get(C, "sp/w", th_ms(20000), &buf), 0);
  hpl_release(C, buf);
  th_put_pattern(A, "sp/x", size, 11);
  th_put_pattern(A, "sp/y", size, 12);
  char id[32];
  for (int i = 0; i < 10 && th_counter(A, "spilled") < 4; i++) {
    snprintf(id, sizeof id, "sp/fill%d", i);
    th_put_pattern(A, id, size, 100 + (uint64_t)i);
  }
  for (int i = 0; i < 100 && th_counter(A, "spilled") < 4; i++) th_sleep_ms(50);
  assert_true(th_counter(A, "spilled") >= 4);
  flip_in_file(dir, "0000000000000001", (long)(size / 2 + 1));
  flip_in_file(dir, "0000000000000002", (long)(size / 2 + 2));
  flip_in_file(dir, "0000000000000003", (long)(size / 2 + 3));
  flip_in_file(dir, "0000000000000004", (long)(size / 2 + 7));

  /* a local get of a copy found corrupt goes to the good copy (C's) */
  assert_int_equal(exact_or_corrupt(A, "sp/w", size, 14, a), 0);
  assert_int_equal(th_counter(A, "spill_corrupt"), 1);

  /* a good copy elsewhere: exact bytes (from C, or from A's file and then
   * C once A's stream ended) */
  assert_int_equal(exact_or_corrupt(B, "sp/z", size, 13, a), 0);
  uint64_t z = th_counter(A, "spill_corrupt") - 1; /* 1 if A's file was read, else 0 */
  assert_true(z <= 1);

  int corrupt = exact_or_corrupt(A, "sp/x", size, 11, a);
  corrupt += exact_or_corrupt(B, "sp/y", size, 12, a);
  assert_int_equal(corrupt, 2); /* the only copies: nothing good is left */
  assert_int_equal(th_counter(A, "spill_corrupt"), 3 + z);
  assert_int_equal(th_counter(A, "corrupt_units"), 3 + z);
  assert_int_equal(th_counter(A, "restored"), 0);
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), 3 + z);
  /* dropped: asked again, the same clear error, from anywhere */
  assert_int_equal(exact_or_corrupt(B, "sp/x", size, 11, a), 1);
  assert_int_equal(exact_or_corrupt(A, "sp/y", size, 12, a), 1);
  /* the other spilled objects read back fine */
  assert_int_equal(exact_or_corrupt(A, "sp/fill0", size, 100, a), 0);
  assert_int_equal(exact_or_corrupt(B, "sp/fill1", size, 101, a), 0);
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
  snprintf(args, sizeof args, "rm -rf %s", dir);
  assert_int_equal(system(args), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_spill_flipped, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
