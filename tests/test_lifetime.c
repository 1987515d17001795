/* test_lifetime.c - object lifetimes (issue 14): objects put `owned` are
 * deleted in the whole cluster when their client's connection closes
 * (hpl_close, or the process killed), objects with a TTL once it ran out,
 * and reduce intermediates are never left behind. Real directory and
 * stores on loopback.
 *
 * Run as `test_lifetime --owner SOCKET PREFIX` it is the owner process of
 * test_owned_killed: it puts owned objects, says "ready", and waits to be
 * killed.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1024ull * 1024)
#define KB 1024ull

static int stat_rc(hpl_client *c, const char *id) {
  return hpl_stat(c, id, th_ms(5000), NULL, NULL, NULL, NULL);
}

static int local(hpl_client *c, const char *id) {
  int loc = 0;
  int rc = hpl_contains(c, id, th_ms(5000), &loc);
  if (rc) fail_msg("contains %s: %s (%s)", id, hpl_strerror(rc), hpl_errdetail(c));
  return loc;
}

/* Where `id` still is: "" if nowhere (the directory does not know it and
 * no store of cs[0..n) holds a copy), else a description. */
static const char *where(hpl_client **cs, int n, const char *id) {
  static char buf[64];
  int rc = stat_rc(cs[0], id);
  if (rc != HPL_ENOTFOUND) {
    snprintf(buf, sizeof buf, "the directory: %s", rc ? hpl_strerror(rc) : "listed");
    return buf;
  }
  for (int i = 0; i < n; i++)
    if (local(cs[i], id)) {
      snprintf(buf, sizeof buf, "a copy on node %d", i);
      return buf;
    }
  return "";
}

/* Poll (no fixed sleeps) until every id is gone everywhere; fail after
 * `ms` naming what is left. Returns the time it took. */
static uint64_t wait_gone(hpl_client **cs, int n, const char *const *ids, size_t k, int64_t ms) {
  uint64_t t0 = hpl__now_ms(), deadline = hpl__deadline_ms(ms);
  for (;;) {
    size_t i = 0;
    const char *w = "";
    for (; i < k; i++)
      if (*(w = where(cs, n, ids[i]))) break;
    if (i == k) return hpl__now_ms() - t0;
    if (hpl__ms_left(deadline) <= 0)
      fail_msg("'%s' is still there after %lld ms (%s)", ids[i], (long long)ms, w);
    th_sleep_ms(20);
  }
}

static void get_check(hpl_client *c, const char *id, uint64_t size, uint64_t seed) {
  hpl_buf *b;
  int rc = hpl_get(c, id, th_ms(10000), &b);
  if (rc) fail_msg("get %s: %s (%s)", id, hpl_strerror(rc), hpl_errdetail(c));
  assert_int_equal(hpl_buf_size(b), size);
  assert_true(th_check_pattern(hpl_buf_data(b), size, seed));
  hpl_release(c, b);
}

/* A get of an id that was deleted finds nothing: the store answers like
 * for any id that does not exist (the get waits for a put, so it times
 * out). */
static void get_finds_nothing(hpl_client *c, const char *id) {
  hpl_buf *b;
  int rc = hpl_get(c, id, 300, &b);
  if (rc == 0) fail_msg("'%s' was still readable", id);
  assert_true(rc == HPL_ETIMEDOUT || rc == HPL_ENOTFOUND);
}

static void wait_counter(hpl_client *c, const char *name, uint64_t want) {
  uint64_t deadline = hpl__deadline_ms(th_ms(5000)), v;
  while ((v = th_counter(c, name)) != want && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  if (v != want) fail_msg("counter %s is %llu, not %llu", name, (unsigned long long)v,
                          (unsigned long long)want);
}

/* A client puts owned objects in every way there is (a small PUT, a large
 * put, create + seal, a batch of a small and a large one); nodes 1 and 2
 * get copies. Once it closes, each is gone from the directory and from
 * every node; what it put before asking for ownership, and what another
 * client on the same store put owned, stay. */
static void test_owned_closed(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(3, 128 * MB, NULL, NULL);
  hpl_client *a = th_connect(lc, 0), *b = th_connect(lc, 0);
  hpl_client *cs[3] = {th_connect(lc, 0), th_connect(lc, 1), th_connect(lc, 2)};
  th_put_pattern(a, "o/kept", 3 * MB, 1); /* before: not owned */
  assert_int_equal(hpl_set_lifetime(a, 1, 0), 0);
  assert_int_equal(hpl_set_lifetime(b, 1, 0), 0);
  th_put_pattern(a, "o/small", 1000, 2);
  th_put_pattern(a, "o/large", 3 * MB, 3);
  hpl_buf *cb;
  assert_int_equal(hpl_create(a, "o/created", 2 * MB, th_ms(5000), &cb), 0);
  hpl__fill_pattern(hpl_buf_data(cb), 2 * MB, 4);
  assert_int_equal(hpl_seal(a, cb, th_ms(5000)), 0);
  void *d0 = malloc(500), *d1 = malloc(2 * MB);
  hpl__fill_pattern(d0, 500, 5);
  hpl__fill_pattern(d1, 2 * MB, 6);
  const char *many[] = {"o/m0", "o/m1"};
  const void *data[] = {d0, d1};
  uint64_t sizes[] = {500, 2 * MB};
  int rcs[2];
  assert_int_equal(hpl_put_many(a, many, data, sizes, 2, th_ms(5000), rcs), 0);
  free(d0);
  free(d1);
  th_put_pattern(b, "o/other", 2 * MB, 7); /* owned by b, which stays */
  const char *owned[] = {"o/small", "o/large", "o/created", "o/m0", "o/m1"};
  const uint64_t osize[] = {1000, 3 * MB, 2 * MB, 500, 2 * MB};
  const uint64_t oseed[] = {2, 3, 4, 5, 6};
  for (int n = 1; n < 3; n++)
    for (int i = 0; i < 5; i++) get_check(cs[n], owned[i], osize[i], oseed[i]);
  assert_true(local(cs[1], "o/large") && local(cs[2], "o/created"));
  hpl_close(a);
  uint64_t ms = wait_gone(cs, 3, owned, 5, th_ms(5000));
  fprintf(stderr, "owned objects gone everywhere %llu ms after hpl_close\n",
          (unsigned long long)ms);
  wait_counter(cs[0], "owned_deletes", 5);
  get_finds_nothing(cs[1], "o/large");
  get_finds_nothing(cs[2], "o/small");
  get_check(cs[2], "o/kept", 3 * MB, 1);
  get_check(cs[1], "o/other", 2 * MB, 7);
  /* the ids are free again; a new object of a deleted id is not touched by
   * anything left of the old one */
  th_put_pattern(cs[1], "o/large", 1 * MB, 8);
  th_sleep_ms(200);
  get_check(cs[2], "o/large", 1 * MB, 8);
  hpl_close(b);
  const char *bs[] = {"o/other"};
  wait_gone(cs, 3, bs, 1, th_ms(5000));
  get_check(cs[0], "o/kept", 3 * MB, 1);
  for (int i = 0; i < 3; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

/* The owner process: puts `PREFIX/a` (small) and `PREFIX/b` (4 MiB) owned,
 * says "ready", and waits to be killed. */
static int owner_main(const char *sock, const char *prefix) {
  hpl_client *c;
  if (hpl_connect(sock, 10000, &c) || hpl_set_lifetime(c, 1, 0)) return 2;
  char id[64];
  void *d = malloc(4 * MB);
  hpl__fill_pattern(d, 100, 11);
  snprintf(id, sizeof id, "%s/a", prefix);
  if (hpl_put(c, id, d, 100, 10000)) return 3;
  hpl__fill_pattern(d, 4 * MB, 11);
  snprintf(id, sizeof id, "%s/b", prefix);
  if (hpl_put(c, id, d, 4 * MB, 10000)) return 4;
  printf("ready\n");
  fflush(stdout);
  for (;;) pause();
}

static pid_t owner_pid; /* killed by the teardown if a test left it running */

static int owner_teardown(void **state) {
  if (owner_pid > 0) {
    kill(owner_pid, SIGKILL);
    waitpid(owner_pid, NULL, 0);
  }
  owner_pid = 0;
  return th_teardown(state);
}

/* The owner is a process of its own, killed with SIGKILL: its owned
 * objects go all the same, copies included; another client's stay. */
static void test_owned_killed(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(3, 64 * MB, NULL, NULL);
  hpl_client *cs[3] = {th_connect(lc, 0), th_connect(lc, 1), th_connect(lc, 2)};
  th_put_pattern(cs[1], "kill/other", 1 * MB, 12);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = owner_pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl("/proc/self/exe", "test_lifetime", "--owner", hpl__lc_socket(lc, 1), "kill",
          (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  struct pollfd p = {.fd = fds[0], .events = POLLIN};
  char line[16] = "";
  if (poll(&p, 1, (int)th_ms(15000)) != 1 || read(fds[0], line, sizeof line - 1) <= 0 ||
      strncmp(line, "ready", 5) != 0)
    fail_msg("the owner process did not get ready");
  close(fds[0]);
  get_check(cs[2], "kill/b", 4 * MB, 11);
  get_check(cs[0], "kill/a", 100, 11);
  assert_true(local(cs[2], "kill/b"));
  assert_int_equal(kill(pid, SIGKILL), 0);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  owner_pid = 0;
  assert_true(WIFSIGNALED(st));
  const char *ids[] = {"kill/a", "kill/b"};
  uint64_t ms = wait_gone(cs, 3, ids, 2, th_ms(5000));
  fprintf(stderr, "a killed owner's objects gone everywhere %llu ms after its death\n",
          (unsigned long long)ms);
  wait_counter(cs[1], "owned_deletes", 2);
  get_check(cs[0], "kill/other", 1 * MB, 12);
  for (int i = 0; i < 3; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

/* Objects with a TTL are readable until it runs out (also as copies on
 * other nodes) and gone shortly after; a view held across it stays
 * readable; objects without one, and the client's own connection, stay. */
static void test_ttl(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *cs[2] = {th_connect(lc, 0), th_connect(lc, 1)};
  const int64_t ttl = th_ms(800);
  assert_int_equal(hpl_set_lifetime(cs[0], 0, ttl), 0);
  uint64_t t0 = hpl__now_ms();
  th_put_pattern(cs[0], "ttl/small", 2000, 21);
  th_put_pattern(cs[0], "ttl/large", 4 * MB, 22);
  assert_int_equal(hpl_set_lifetime(cs[0], 0, 0), 0);
  th_put_pattern(cs[0], "ttl/none", 4 * MB, 23);
  /* before the deadline: readable everywhere */
  get_check(cs[1], "ttl/small", 2000, 21);
  hpl_buf *held;
  assert_int_equal(hpl_get(cs[1], "ttl/large", th_ms(5000), &held), 0);
  uint64_t read_at = hpl__now_ms() - t0;
  if (read_at >= (uint64_t)ttl) fail_msg("the reads took %llu ms, longer than the ttl",
                                         (unsigned long long)read_at);
  assert_int_equal(stat_rc(cs[1], "ttl/large"), 0);
  const char *ids[] = {"ttl/small", "ttl/large"};
  wait_gone(cs, 2, ids, 2, ttl + th_ms(3000));
  uint64_t gone_at = hpl__now_ms() - t0;
  fprintf(stderr, "ttl %lld ms: read at %llu ms, gone everywhere at %llu ms\n", (long long)ttl,
          (unsigned long long)read_at, (unsigned long long)gone_at);
  assert_true(gone_at >= (uint64_t)ttl);
  wait_counter(cs[0], "ttl_deletes", 2);
  assert_true(th_check_pattern(hpl_buf_data(held), 4 * MB, 22)); /* held: still readable */
  hpl_release(cs[1], held);
  get_finds_nothing(cs[1], "ttl/large");
  get_check(cs[1], "ttl/none", 4 * MB, 23);
  /* the pools hold only ttl/none (a copy on node 1) once released */
  uint64_t deadline = hpl__deadline_ms(th_ms(5000));
  while (th_counter(cs[1], "pool_allocated") > 4 * MB + 64 * KB && hpl__ms_left(deadline) > 0)
    th_sleep_ms(20);
  assert_true(th_counter(cs[1], "pool_allocated") <= 4 * MB + 64 * KB);
  for (int i = 0; i < 2; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

/* A negative TTL is refused by the library, one over 30 days by the store
 * (every way to put), with a detail; nothing is created. */
static void test_invalid_ttl(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, NULL, NULL);
  hpl_client *c = th_connect(lc, 0);
  assert_int_equal(hpl_set_lifetime(c, 0, -1), HPL_EINVAL);
  assert_int_equal(hpl_set_lifetime(NULL, 0, 0), HPL_EINVAL);
  assert_int_equal(hpl_set_lifetime(c, 1, HPL_TTL_MAX_MS + 1), 0);
  char *d = calloc(1, 2 * MB);
  int rc = hpl_put(c, "bad/small", d, 100, th_ms(5000));
  fprintf(stderr, "put with a ttl of 30 days + 1 ms: %s (%s)\n", hpl_strerror(rc),
          hpl_errdetail(c));
  assert_int_equal(rc, HPL_EINVAL);
  assert_non_null(strstr(hpl_errdetail(c), "ttl"));
  assert_int_equal(hpl_put(c, "bad/large", d, 2 * MB, th_ms(5000)), HPL_EINVAL);
  hpl_buf *b = NULL;
  assert_int_equal(hpl_create(c, "bad/created", 10, th_ms(5000), &b), HPL_EINVAL);
  const char *ids[] = {"bad/m0", "bad/m1"};
  const void *data[] = {d, d};
  uint64_t sizes[] = {10, 2 * MB};
  int rcs[2];
  assert_int_equal(hpl_put_many(c, ids, data, sizes, 2, th_ms(5000), rcs), HPL_EINVAL);
  assert_int_equal(rcs[0], HPL_EINVAL);
  assert_int_equal(rcs[1], HPL_EINVAL);
  const char *all[] = {"bad/small", "bad/large", "bad/created", "bad/m0", "bad/m1"};
  for (int i = 0; i < 5; i++) assert_int_equal(stat_rc(c, all[i]), HPL_ENOTFOUND);
  /* the longest allowed is fine */
  assert_int_equal(hpl_set_lifetime(c, 0, HPL_TTL_MAX_MS), 0);
  assert_int_equal(hpl_put(c, "bad/max", d, 100, th_ms(5000)), 0);
  free(d);
  hpl_close(c);
  th_stop(lc, 0);
}

/* Reduce intermediates are never left behind: reduces over sources a
 * client owns, one that completes and one that fails (a source of the
 * wrong size appears late), then the client leaves and the target is
 * deleted: every pool of the cluster is empty. */
static void test_reduce_leaves_nothing(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(4, 64 * MB, NULL, NULL);
  hpl_client *cs[4];
  for (int i = 0; i < 4; i++) cs[i] = th_connect(lc, i);
  hpl_client *own[4];
  const size_t n = 2 * MB / 4;
  float *v = malloc(4 * MB);
  const char *srcs[4] = {"rd/0", "rd/1", "rd/2", "rd/3"};
  for (int j = 0; j < 4; j++) {
    own[j] = th_connect(lc, j);
    assert_int_equal(hpl_set_lifetime(own[j], 1, 0), 0);
    for (size_t i = 0; i < n; i++) v[i] = (float)j;
    assert_int_equal(hpl_put(own[j], srcs[j], v, n * 4, th_ms(5000)), 0);
  }
  assert_int_equal(hpl_reduce(cs[1], "rd/t", srcs, 4, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)), 0);
  hpl_buf *b;
  assert_int_equal(hpl_get(cs[2], "rd/t", th_ms(20000), &b), 0);
  const float *r = hpl_buf_data(b);
  for (size_t i = 0; i < n; i++)
    if (r[i] != 6.0f) fail_msg("element %zu is %g", i, (double)r[i]);
  hpl_release(cs[2], b);
  char *text;
  assert_int_equal(hpl_reduce_sources(cs[1], "rd/t", th_ms(5000), &text), 0);
  hpl_free(text);
  /* a reduce that fails: its second source comes late, of another size */
  const char *late[] = {"rd/0", "rd/late"};
  assert_int_equal(hpl_reduce(cs[3], "rd/bad", late, 2, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   0);
  assert_int_equal(hpl_put(own[2], "rd/late", v, 4 * MB, th_ms(5000)), 0);
  assert_int_equal(hpl_get(cs[3], "rd/bad", th_ms(10000), &b), HPL_EMISMATCH);
  free(v);
  for (int j = 0; j < 4; j++) hpl_close(own[j]);
  const char *gone[] = {"rd/0", "rd/1", "rd/2", "rd/3", "rd/late"};
  wait_gone(cs, 4, gone, 5, th_ms(5000));
  assert_int_equal(hpl_delete(cs[1], "rd/t", th_ms(5000)), 0); /* its maker (admin.c) */
  uint64_t deadline = hpl__deadline_ms(th_ms(5000)), sum = 0;
  do {
    sum = 0;
    for (int i = 0; i < 4; i++) sum += th_counter(cs[i], "pool_allocated");
    if (!sum) break;
    th_sleep_ms(20);
  } while (hpl__ms_left(deadline) > 0);
  if (sum) fail_msg("%llu bytes still allocated in the pools", (unsigned long long)sum);
  for (int i = 0; i < 4; i++) hpl_close(cs[i]);
  th_stop(lc, 0);
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--owner")) return owner_main(argv[2], argv[3]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_owned_closed, th_teardown),
      cmocka_unit_test_teardown(test_owned_killed, owner_teardown),
      cmocka_unit_test_teardown(test_ttl, th_teardown),
      cmocka_unit_test_teardown(test_invalid_ttl, th_teardown),
      cmocka_unit_test_teardown(test_reduce_leaves_nothing, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
