/* test_netns_dirhost.c - a directory on an emulated host of its own
 * (hpl__lc_opts.dir_host, bench_coll --dir-host): two stores on hosts 0
 * and 1, the directory on host 2, which has no store. The directory must
 * run in host 2's namespace and listen on host 2's address, and objects
 * must move between the stores through it: a small one inline from the
 * directory, a large one over the stores' links. Without emulated hosts the
 * option is refused. The test makes its own namespaces (prefix hpld<pid>)
 * and removes them. Needs root; exits with 77 (skipped) otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "localcluster.h"

#define HOSTS 3  /* namespaces: stores on 0 and 1, the directory on 2 */
#define STORES 2

static char prefix[16];
static char addrs_buf[HOSTS][TH_ADDR_LEN];
static const char *addrs[HOSTS];

static int setup(void **state) {
  (void)state;
  snprintf(prefix, sizeof prefix, "hpld%d", (int)(getpid() % 100000));
  th_cluster_up(prefix, HOSTS, "200mbit", addrs_buf, addrs);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  th_cluster_sh(prefix, "down --kill >/dev/null 2>&1");
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ip netns list | grep -q '^%s-'", prefix);
  assert_int_not_equal(system(cmd), 0); /* nothing of ours is left */
  return 0;
}

/* The inode of the namespace file at `path` (/proc/PID/ns/net, or a named
 * namespace under /run/netns), 0 if it cannot be read. */
static ino_t ns_inode(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? st.st_ino : 0;
}

static void test_refused_without_hosts(void **state) {
  (void)state;
  hpl__lc_opts o = {.nodes = 1, .bin_dir = HPL_BIN_DIR, .dir_host = 1};
  hpl__lc *lc = NULL;
  char err[256] = "";
  assert_int_equal(hpl__lc_start(&o, &lc, err, sizeof err), HPL_EINVAL);
  assert_non_null(strstr(err, "host 1"));
}

static void test_directory_on_its_own_host(void **state) {
  (void)state;
  hpl__lc_opts o = {.nodes = STORES,
                   .memory = 64ull << 20,
                   .bin_dir = HPL_BIN_DIR,
                   .netns_prefix = prefix,
                   .host_addrs = addrs,
                   .dir_host = STORES,
                   .timeout_ms = (int)th_ms(15000)};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) fail_msg("cluster: %s", err);
  /* where it runs and listens */
  char want[64], path[128];
  snprintf(want, sizeof want, "%s:", addrs[STORES]);
  assert_true(!strncmp(hpl__lc_dir_addrs(lc), want, strlen(want)));
  snprintf(path, sizeof path, "/proc/%d/ns/net", (int)hpl__lc_dir_pid(lc));
  ino_t dir_ns = ns_inode(path);
  snprintf(path, sizeof path, "/run/netns/%s-h%d", prefix, STORES);
  assert_true(dir_ns != 0);
  assert_true(dir_ns == ns_inode(path));
  snprintf(path, sizeof path, "/run/netns/%s-h0", prefix);
  assert_true(dir_ns != ns_inode(path));
  /* a small object inline from it, a large one over the stores' links */
  hpl_client *c[STORES];
  for (int i = 0; i < STORES; i++) c[i] = th_connect(lc, i);
  const uint64_t sizes[] = {1024, 1u << 20};
  for (int k = 0; k < 2; k++) {
    char id[32];
    snprintf(id, sizeof id, "dh/%d", k);
    uint64_t inl = th_counter(c[1], "inline_gets");
    uint64_t rcv = th_counter(c[1], "data_bytes_received");
    th_put_pattern(c[0], id, sizes[k], (uint64_t)k + 3);
    hpl_buf *b = NULL;
    assert_int_equal(hpl_get(c[1], id, th_ms(20000), &b), 0);
    assert_int_equal(hpl_buf_size(b), sizes[k]);
    assert_true(th_check_pattern(hpl_buf_data(b), sizes[k], (uint64_t)k + 3));
    hpl_release(c[1], b);
    assert_int_equal(th_counter(c[1], "inline_gets") - inl, k == 0 ? 1 : 0);
    assert_int_equal(th_counter(c[1], "data_bytes_received") - rcv, k == 0 ? 0 : sizes[k]);
  }
  for (int i = 0; i < STORES; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

int main(void) {
  const char *why = th_netns_unusable();
  if (why) {
    fprintf(stderr, "test_netns_dirhost: %s; skipped\n", why);
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_refused_without_hosts),
                                     cmocka_unit_test(test_directory_on_its_own_host)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
