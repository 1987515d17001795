/* test_admin.c - admin handles (issue 41, hpl_connect_admin) and
 * `hoplite --admin`: a tool holding the cluster secret talks to the
 * directory as the ADMIN role and may delete what another node made, which
 * a client of that other node may not; a wrong or missing secret, a sealed
 * directory and calls an admin handle does not make fail with codes that
 * say so. Real servers on loopback. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"

#define MB (1ull << 20)

/* "127.0.0.1:PORT" of lc's directory. */
static const char *dir_addr(hpl__lc *lc) {
  static char a[64];
  snprintf(a, sizeof a, "127.0.0.1:%d", hpl__lc_dir_port(lc));
  return a;
}

/* An admin handle on lc's directory with its secret; fails the test if
 * refused. */
static hpl_client *admin_of(hpl__lc *lc) {
  hpl_client *c = NULL;
  int rc = hpl_connect_admin(dir_addr(lc), hpl__lc_secret(lc), th_ms(5000), &c);
  if (rc) fail_msg("hpl_connect_admin: %s (%s)", hpl_strerror(rc), hpl_errdetail(NULL));
  return c;
}

/* Wait until the directory knows `id` (a stat through c succeeds). */
static void wait_known(hpl_client *c, const char *id) {
  int rc = 0;
  for (int i = 0; i < 500; i++) {
    if ((rc = hpl_stat(c, id, th_ms(2000), NULL, NULL, NULL, NULL)) == 0) return;
    th_sleep_ms(10);
  }
  fail_msg("the directory never knew %s: %s (%s)", id, hpl_strerror(rc), hpl_errdetail(c));
}

/* Write `text` to a new file of mode 0600 in lc's work directory; the path
 * goes to out. */
static void write_file(hpl__lc *lc, const char *name, const char *text, char *out, size_t len) {
  snprintf(out, len, "%s/%s", hpl__lc_work_dir(lc), name);
  int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

/* An object made on node A may not be deleted by a client of node B (the
 * maker's rule, HPL_EPERM naming the node); an admin handle deletes it,
 * and it is gone for A's clients too. The admin handle stats, lists and
 * reads the status and counters from the directory. */
static void test_admin_deletes(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  th_put_pattern(A, "adm/big", 2 * MB, 7); /* in A's pool */
  th_put_pattern(A, "adm/small", 100, 8);  /* inline at the directory */
  th_put_pattern(A, "adm/third", 100, 9);
  wait_known(B, "adm/big");
  wait_known(B, "adm/small");
  assert_int_equal(hpl_delete(B, "adm/big", th_ms(5000)), HPL_EPERM);
  assert_non_null(strstr(hpl_errdetail(B), "node-0"));
  assert_int_equal(hpl_delete(B, "adm/small", th_ms(5000)), HPL_EPERM);

  hpl_client *adm = admin_of(lc);
  uint64_t size = 0;
  uint32_t copies = 0, complete = 0;
  assert_int_equal(hpl_stat(adm, "adm/big", th_ms(5000), &size, &copies, &complete, NULL), 0);
  assert_int_equal(size, 2 * MB);
  assert_int_equal(complete, 1);
  char *text = NULL;
  assert_int_equal(hpl_list(adm, "adm/", th_ms(5000), &text), 0);
  assert_non_null(strstr(text, "adm/big\t2097152\t"));
  assert_non_null(strstr(text, "adm/small\t100\t"));
  hpl_free(text);
  assert_int_equal(hpl_status(adm, HPL_STATUS_TEXT, th_ms(5000), &text), 0);
  assert_non_null(strstr(text, "node-0"));
  assert_non_null(strstr(text, "node-1"));
  hpl_free(text);
  uint64_t refused = 0; /* the directory's counters, not a store's */
  assert_int_equal(hpl_counter(adm, "dir_deletes_refused", th_ms(5000), &refused), 0);
  assert_int_equal(refused, 2);

  assert_int_equal(hpl_delete(adm, "adm/big", th_ms(5000)), 0);
  const char *ids[] = {"adm/small", "adm/third", "adm/never"};
  int rcs[3];
  assert_int_equal(hpl_delete_many(adm, ids, 3, th_ms(5000), rcs), HPL_ENOTFOUND);
  assert_int_equal(rcs[0], 0);
  assert_int_equal(rcs[1], 0);
  assert_int_equal(rcs[2], HPL_ENOTFOUND);
  /* gone for everyone: the maker's store dropped its copy */
  int local = 1;
  assert_int_equal(hpl_contains(A, "adm/big", th_ms(5000), &local), 0);
  assert_int_equal(local, 0);
  /* a get waits for an object that does not exist (yet): none comes */
  hpl_buf *b = NULL;
  assert_int_equal(hpl_get(A, "adm/big", th_ms(300), &b), HPL_ETIMEDOUT);
  assert_int_equal(hpl_get(B, "adm/small", th_ms(300), &b), HPL_ETIMEDOUT);
  assert_int_equal(hpl_stat(A, "adm/big", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  assert_int_equal(hpl_stat(A, "adm/third", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  assert_int_equal(hpl_stat(adm, "adm/big", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  hpl_close(adm);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* What an admin handle refuses, and how a connect that cannot be made
 * says why: another secret (HPL_EAUTH), no secret (HPL_EINVAL), a node's
 * credential (HPL_EINVAL), no directory there (HPL_ECONN), a bad address
 * (HPL_EINVAL); on a handle, a get or a put (HPL_ESTATE, nothing sent). */
static void test_admin_refusals(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, NULL, NULL);
  char wrong[512], cred[512], cmd[2048];
  write_file(lc, "wrong.secret",
             "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n", wrong,
             sizeof wrong);
  hpl_client *c = NULL;
  uint64_t failures = th_dir_counter(lc, "dir_auth_failures");
  assert_int_equal(hpl_connect_admin(dir_addr(lc), wrong, th_ms(5000), &c), HPL_EAUTH);
  assert_non_null(strstr(hpl_errdetail(NULL), "another cluster secret"));
  for (int i = 0; i < 200 && th_dir_counter(lc, "dir_auth_failures") == failures; i++)
    th_sleep_ms(10); /* the directory sees the close a moment later */
  assert_int_equal(th_dir_counter(lc, "dir_auth_failures"), failures + 1);
  unsetenv(HPL_AUTH_FILE_ENV);
  assert_int_equal(hpl_connect_admin(dir_addr(lc), NULL, th_ms(5000), &c), HPL_EINVAL);
  assert_non_null(strstr(hpl_errdetail(NULL), "no cluster secret"));
  snprintf(cred, sizeof cred, "%s/node.cred", hpl__lc_work_dir(lc));
  snprintf(cmd, sizeof cmd, "%s/hoplite secret --node node-9 --secret %s %s >/dev/null",
           HPL_BIN_DIR, hpl__lc_secret(lc), cred);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(hpl_connect_admin(dir_addr(lc), cred, th_ms(5000), &c), HPL_EINVAL);
  assert_non_null(strstr(hpl_errdetail(NULL), "credential"));
  assert_int_equal(hpl_connect_admin("127.0.0.1", hpl__lc_secret(lc), th_ms(5000), &c),
                   HPL_EINVAL);
  assert_int_equal(hpl_connect_admin("127.0.0.1:1", hpl__lc_secret(lc), th_ms(5000), &c),
                   HPL_ECONN);
  /* the environment's defaults */
  setenv(HPL_DIRECTORY_ENV, dir_addr(lc), 1);
  setenv(HPL_AUTH_FILE_ENV, hpl__lc_secret(lc), 1);
  assert_int_equal(hpl_connect_admin(NULL, NULL, th_ms(5000), &c), 0);
  unsetenv(HPL_DIRECTORY_ENV);
  unsetenv(HPL_AUTH_FILE_ENV);
  hpl_buf *b = NULL;
  assert_int_equal(hpl_get(c, "adm/x", th_ms(1000), &b), HPL_ESTATE);
  assert_non_null(strstr(hpl_errdetail(c), "admin handle"));
  assert_int_equal(hpl_put(c, "adm/x", "x", 1, th_ms(1000)), HPL_ESTATE);
  assert_int_equal(hpl_create(c, "adm/x", 10, th_ms(1000), &b), HPL_ESTATE);
  int local;
  assert_int_equal(hpl_contains(c, "adm/x", th_ms(1000), &local), HPL_ESTATE);
  const char *src[] = {"a", "b"};
  assert_int_equal(hpl_reduce(c, "t", src, 2, 2, HPL_OP_SUM, HPL_DT_U8, th_ms(1000)), HPL_ESTATE);
  /* the handle still works after the refusals (nothing went out) */
  assert_int_equal(hpl_stat(c, "adm/x", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  hpl_close(c);
  th_stop(lc, 0);
}

/* A directory that seals its connections (--encrypt) cannot be reached by
 * an admin handle, which only tags frames: HPL_EUNAVAIL, saying so. */
static void test_admin_sealed(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, "--encrypt", "--encrypt");
  hpl_client *c = NULL;
  assert_int_equal(hpl_connect_admin(dir_addr(lc), hpl__lc_secret(lc), th_ms(5000), &c),
                   HPL_EUNAVAIL);
  assert_non_null(strstr(hpl_errdetail(NULL), "--encrypt"));
  th_stop(lc, 0);
}

/* `hoplite --admin --directory D --auth-file S rm ID...` deletes what a
 * store's client may not (`hoplite -s B rm` exits 1); stat and ls take
 * $HOPLITE_DIRECTORY and $HOPLITE_AUTH_FILE; without a secret it says so. */
static void test_admin_cli(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  th_put_pattern(A, "cli/one", 1 * MB, 1);
  th_put_pattern(A, "cli/two", 10, 2);
  wait_known(B, "cli/one");
  wait_known(B, "cli/two");
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s/hoplite -s %s rm cli/one 2>/dev/null", HPL_BIN_DIR,
           hpl__lc_socket(lc, 1));
  int st = system(cmd);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  snprintf(cmd, sizeof cmd,
           "HOPLITE_DIRECTORY=%s HOPLITE_AUTH_FILE=%s %s/hoplite --admin ls cli/ | "
           "grep -c '^cli/' | grep -qx 2",
           dir_addr(lc), hpl__lc_secret(lc), HPL_BIN_DIR);
  st = system(cmd);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  snprintf(cmd, sizeof cmd, "%s/hoplite --admin --directory %s --auth-file %s rm cli/one cli/two",
           HPL_BIN_DIR, dir_addr(lc), hpl__lc_secret(lc));
  st = system(cmd);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_int_equal(hpl_stat(A, "cli/one", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  assert_int_equal(hpl_stat(B, "cli/two", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  snprintf(cmd, sizeof cmd,
           "HOPLITE_DIRECTORY=%s %s/hoplite --admin stat cli/one 2>&1 | grep -q 'no cluster secret'",
           dir_addr(lc), HPL_BIN_DIR);
  st = system(cmd);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  snprintf(cmd, sizeof cmd,
           "%s/hoplite --admin --directory %s --auth-file %s get cli/one 2>&1 | "
           "grep -q 'admin'",
           HPL_BIN_DIR, dir_addr(lc), hpl__lc_secret(lc));
  st = system(cmd);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

int main(void) {
  unsetenv(HPL_DIRECTORY_ENV);
  unsetenv(HPL_AUTH_FILE_ENV);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_admin_deletes, th_teardown),
      cmocka_unit_test_teardown(test_admin_refusals, th_teardown),
      cmocka_unit_test_teardown(test_admin_sealed, th_teardown),
      cmocka_unit_test_teardown(test_admin_cli, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
