/* test_hardening.c - defects an outside reviewer found, each with the
 * sequence that showed it (see issue 11), and what a peer without the
 * cluster secret can do (nothing). Real servers on loopback.
 *
 * The first tests also run against servers built from an older tree:
 *   HOPLITE_BIN_DIR=/old/build HPL_TEST_NO_AUTH=1 build/tests/test_hardening */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "harness.h"
#include "proto.h"
#include "util.h"

#define MB (1ull << 20)

static int dir_connect(hpl__lc *lc) {
  return th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_STORE);
}

static void send_register(int fd, uint64_t node, uint64_t req) {
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = node;
  r.addr = "127.0.0.1";
  r.data_port = 9;
  r.name = "raw";
  th_wire_send(fd, HPL__MSG_REGISTER, req, &r.base);
}

/* The reviewer's script: two connections; REGISTER twice on the first
 * (nodes X, then Y), REGISTER Y on the second, close both. The directory
 * died with SIGSEGV about a second later: X still named the first
 * connection, which was freed, and the sweep wrote through it. */
static void test_double_register(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, "--heartbeat-ms 200 --heartbeat-timeout-ms 600", NULL);
  int a = dir_connect(lc), b = dir_connect(lc);
  send_register(a, 0xabc1, 1);
  send_register(a, 0xabc2, 2);
  send_register(b, 0xabc2, 1);
  th_sleep_ms(200);
  close(a);
  close(b);
  th_sleep_ms((int)th_ms(2000)); /* several sweeps */
  char err[256];
  if (hpl__lc_check(lc, err, sizeof err)) fail_msg("%s", err);
  /* and it still serves */
  hpl_client *c = th_connect(lc, 0);
  th_put_pattern(c, "hard/after-register", 1000, 3);
  hpl_close(c);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 1);
  th_stop(lc, 0);
}

/* A small object a node does not hold is first asked of the directory
 * (direct read). That try must come out of the get's timeout, and a
 * directory that does not answer must not cost every later get the same
 * wait: each get here ends within its timeout (plus scheduling slack). */
static void test_get_timeout_includes_direct_read(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *c = th_connect(lc, 1);
  assert_int_equal(hpl__lc_signal(lc, -1, SIGSTOP), 0);
  const int64_t timeout = 300;
  for (int i = 0; i < 4; i++) {
    char id[32];
    snprintf(id, sizeof id, "hard/absent-%d", i);
    hpl_buf *b;
    uint64_t t0 = hpl__now_ms();
    int rc = hpl_get(c, id, timeout, &b);
    uint64_t took = hpl__now_ms() - t0;
    assert_int_equal(rc, HPL_ETIMEDOUT);
    if (took > (uint64_t)(timeout + th_ms(150)))
      fail_msg("get %d with a %lld ms timeout took %llu ms", i, (long long)timeout,
               (unsigned long long)took);
  }
  assert_int_equal(hpl__lc_signal(lc, -1, SIGCONT), 0);
  hpl_close(c);
  th_stop(lc, 0);
}

/* A reduce tree node dies while the sink's combine step still runs on the
 * thread pool (each step held 600 ms by a fault point; streams at loopback
 * speed arrive in steps large enough to go there): the sink's new task must
 * not write the target while the old step still does. Before, the old step
 * wrote into bytes the new generation had already received, and the result
 * was wrong. */
static void test_reduce_reset_during_combine(void **state) {
  (void)state;
  enum { N = 4 };
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *C[N];
  int idx[N];
  for (int i = 0; i < N; i++) {
    char err[256];
    idx[i] = hpl__lc_add_store(lc,
                               i == 0 ? "--memory 256M --faults combine_delay_ms=600"
                                      : "--memory 256M",
                               err, sizeof err);
    if (idx[i] < 0) fail_msg("add store: %s", err);
    C[i] = th_connect(lc, idx[i]);
  }
  const size_t n = 16 * MB / 4;
  float *d = malloc(n * 4);
  assert_non_null(d);
  char ids[N][32];
  const char *srcs[N];
  for (int i = 0; i < N; i++) { /* the sink's own source first: it takes the root */
    snprintf(ids[i], sizeof ids[i], "rc/s%d", i);
    srcs[i] = ids[i];
    for (size_t j = 0; j < n; j++) d[j] = (float)(i + 1) * (float)(1 + (int)(j % 7));
    assert_int_equal(hpl_put(C[i], ids[i], d, n * 4, th_ms(10000)), 0);
  }
  /* 3 of 4: the last one put is the spare that replaces the killed node */
  assert_int_equal(hpl_reduce(C[0], "rc/t", srcs, N, N - 1, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   0);
  th_sleep_ms(300);
  hpl_close(C[2]);
  assert_int_equal(hpl__lc_signal(lc, idx[2], SIGKILL), 0);
  hpl_buf *b;
  int rc = hpl_get(C[0], "rc/t", th_ms(60000), &b);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  /* s0, s1 and the spare s3 (s2 died with its node) */
  char *text;
  assert_int_equal(hpl_reduce_sources(C[0], "rc/t", th_ms(5000), &text), 0);
  float k = 0;
  for (int i = 0; i < N; i++)
    if (strstr(text, ids[i])) k += (float)(i + 1);
  hpl_free(text);
  const float *res = hpl_buf_data(b);
  for (size_t j = 0; j < n; j++) {
    float want = k * (float)(1 + (int)(j % 7));
    if (res[j] != want) fail_msg("element %zu: %f, want %f (sources sum %f)", j, res[j], want, k);
  }
  hpl_release(C[0], b);
  free(d);
  for (int i = 0; i < N; i++)
    if (i != 2) hpl_close(C[i]);
  th_stop(lc, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_double_register, th_teardown),
      cmocka_unit_test_teardown(test_get_timeout_includes_direct_read, th_teardown),
      cmocka_unit_test_teardown(test_reduce_reset_during_combine, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
