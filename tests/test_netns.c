/* test_netns.c - the multi-host path on emulated hosts: a directory and 3
 * stores, each in its own network namespace behind a 200 Mbit/s shaped
 * link (bench/cluster.sh), broadcast small and large objects, and cut a
 * host off mid-broadcast (its switch port down) until the partition heals.
 * The test makes its own namespaces (prefix hplt<pid>) and removes them.
 * Needs root; exits with 77 (skipped) otherwise. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define HOSTS 3
#define MB (1ull << 20)

static char prefix[16];
static char addrs_buf[HOSTS][32];
static const char *addrs[HOSTS];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

static void cluster_down(void) {
  sh("HPL_NS_PREFIX=%s HPL_NS_QUIET=1 %s/bench/cluster.sh down --kill >/dev/null 2>&1", prefix,
     HPL_SRC_DIR);
}

static int setup(void **state) {
  (void)state;
  snprintf(prefix, sizeof prefix, "hplt%d", (int)(getpid() % 100000));
  if (sh("HPL_NS_PREFIX=%s HPL_NS_QUIET=1 %s/bench/cluster.sh up %d 200mbit", prefix,
         HPL_SRC_DIR, HOSTS) != 0) {
    cluster_down();
    fail_msg("cannot bring up the emulated cluster");
  }
  for (int i = 0; i < HOSTS; i++) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "HPL_NS_PREFIX=%s %s/bench/cluster.sh addr %d", prefix, HPL_SRC_DIR,
             i);
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(addrs_buf[i], sizeof addrs_buf[i], p)) fail_msg("no address for host %d", i);
    pclose(p);
    addrs_buf[i][strcspn(addrs_buf[i], "\n")] = 0;
    addrs[i] = addrs_buf[i];
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cluster_down();
  /* nothing of ours is left */
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ip netns list | grep -q '^%s-'", prefix);
  assert_int_not_equal(system(cmd), 0);
  return 0;
}

/* A directory in host 0 and a store in every host, each client connected. */
static hpl__lc *start_servers(const char *dir_args, const char *store_args, hpl_client **c) {
  hpl__lc_opts o = {.nodes = HOSTS,
                   .memory = 256 * MB,
                   .bin_dir = HPL_BIN_DIR,
                   .netns_prefix = prefix,
                   .host_addrs = addrs,
                   .dir_args = dir_args,
                   .store_args = store_args,
                   .timeout_ms = (int)th_ms(15000)};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) fail_msg("cluster: %s", err);
  for (int i = 0; i < HOSTS; i++) c[i] = th_connect(lc, i);
  return lc;
}

/* A get from a thread inside host `host`'s network namespace, as a client
 * on that host runs. */
typedef struct ns_get {
  hpl_client *c;
  int host;
  const char *id;
  int rc, shared;
  uint64_t sum;
} ns_get;

static void *ns_get_main(void *arg) {
  ns_get *g = arg;
  if ((g->rc = hpl__lc_enter_host(prefix, g->host)) != 0) return NULL;
  hpl_buf *b;
  g->rc = hpl_get(g->c, g->id, th_ms(10000), &b);
  if (g->rc == 0) {
    g->shared = hpl_buf_shared(b);
    g->sum = hpl__checksum(hpl_buf_data(b), hpl_buf_size(b));
    hpl_release(g->c, b);
  }
  return NULL;
}

static void test_broadcast_across_hosts(void **state) {
  (void)state;
  hpl_client *c[HOSTS];
  hpl__lc *lc = start_servers(NULL, NULL, c);
  const uint64_t sizes[] = {1024, 4 * MB};
  for (int k = 0; k < 2; k++) {
    char id[32];
    snprintf(id, sizeof id, "ns/%d", k);
    uint64_t rcv0[HOSTS], inl0[HOSTS];
    for (int i = 1; i < HOSTS; i++) {
      rcv0[i] = th_counter(c[i], "data_bytes_received");
      inl0[i] = th_counter(c[i], "inline_gets");
    }
    th_put_pattern(c[0], id, sizes[k], (uint64_t)k + 5);
    th_getter r[HOSTS];
    uint64_t want = th_pattern_sum(sizes[k], (uint64_t)k + 5);
    for (int i = 1; i < HOSTS; i++) {
      r[i] = (th_getter){.c = c[i], .id = id, .timeout = th_ms(60000), .size = sizes[k],
                         .want = want};
      th_get_start(&r[i]);
    }
    for (int i = 1; i < HOSTS; i++) {
      th_get_join(&r[i]);
      if (r[i].rc) fail_msg("host %d: %s", i, hpl_strerror(r[i].rc));
      assert_true(r[i].ok);
      uint64_t got = th_counter(c[i], "data_bytes_received") - rcv0[i];
      /* small: inline from the directory in host 0; large: over the links */
      assert_int_equal(got, sizes[k] <= 65536 ? 0 : sizes[k]);
      /* this test's threads are not in the hosts' namespaces: a small object
       * comes through the host's store, never by a direct connection from
       * here to the directory's address */
      if (sizes[k] <= 65536) assert_int_equal(th_counter(c[i], "inline_gets") - inl0[i], 1);
    }
  }
  /* a client thread inside host 2's namespace reads a small object from
   * the directory itself; its store is not involved */
  th_put_pattern(c[0], "ns/small2", 2000, 9);
  uint64_t inl2 = th_counter(c[2], "inline_gets");
  ns_get g = {.c = c[2], .host = 2, .id = "ns/small2"};
  pthread_t t;
  pthread_create(&t, NULL, ns_get_main, &g);
  pthread_join(t, NULL);
  assert_int_equal(g.rc, 0);
  assert_int_equal(g.sum, th_pattern_sum(2000, 9));
  assert_int_equal(g.shared, 0);
  assert_int_equal(th_counter(c[2], "inline_gets"), inl2);
  size_t n;
  th_xfer *x = th_transfers(c[0], 0, &n);
  char why[256];
  if (th_check_tree(x, n, "ns/", 1, NULL, why, sizeof why)) fail_msg("%s", why);
  free(x);
  for (int i = 0; i < HOSTS; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

/* Host 1 pulls a 16 MiB object from host 0 and host 2 pulls behind host 1
 * (host 0's one sending slot is taken); then host 1's link is cut for 5 s.
 * Host 2 must not wait for the partition to heal: its stream from host 1
 * stalls, host 1 misses its heartbeats and is declared dead, and host 2
 * resumes from host 0 at its own offset (no byte fetched twice). After the
 * link comes back, host 1's store reconnects and its get completes too,
 * with the right bytes. */
static void cut_and_heal(const char *verb) {
  if (sh("HPL_NS_PREFIX=%s HPL_NS_QUIET=1 %s/bench/cluster.sh %s 1", prefix, HPL_SRC_DIR, verb))
    fail_msg("cluster.sh %s 1 failed", verb);
}

static void test_partition_heals(void **state) {
  (void)state;
  hpl_client *c[HOSTS];
  hpl__lc *lc = start_servers("--heartbeat-timeout-ms 1500", "--stall-timeout-ms 500", c);
  const uint64_t size = 16 * MB;
  th_put_pattern(c[0], "cut/obj", size, 77);
  uint64_t want = th_pattern_sum(size, 77);
  uint64_t rcv2 = th_counter(c[2], "data_bytes_received");
  th_getter r[HOSTS];
  for (int i = 1; i < HOSTS; i++)
    r[i] = (th_getter){.c = c[i], .id = "cut/obj", .timeout = th_ms(60000), .size = size,
                       .want = want};
  th_get_start(&r[1]);
  th_sleep_ms(150);
  th_get_start(&r[2]);
  th_sleep_ms(150);
  cut_and_heal("cut");
  uint64_t t_cut = hpl__now_ms();
  th_sleep_ms(5000);
  uint64_t t_uncut = hpl__now_ms();
  cut_and_heal("uncut");
  th_get_join(&r[2]);
  th_get_join(&r[1]);
  if (r[2].rc) fail_msg("host 2: %s (%s)", hpl_strerror(r[2].rc), hpl_errdetail(c[2]));
  if (r[1].rc) fail_msg("host 1 after the heal: %s (%s)", hpl_strerror(r[1].rc),
                        hpl_errdetail(c[1]));
  assert_true(r[2].ok);
  assert_true(r[1].ok);
  fprintf(stderr, "partition: host 2 done %lld ms after the cut, host 1 %lld ms after the heal\n",
          (long long)(r[2].done_ms - t_cut), (long long)(r[1].done_ms - t_uncut));
  /* host 2 finished while host 1 was still cut off ... */
  assert_true(r[2].done_ms < t_uncut);
  /* ... without fetching a byte twice */
  assert_int_equal(th_counter(c[2], "data_bytes_received") - rcv2, size);
  for (int i = 0; i < HOSTS; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

int main(void) {
  if (getuid() != 0) {
    fprintf(stderr, "test_netns: needs root for network namespaces; skipped\n");
    return 77;
  }
  /* a machine that refuses network namespaces altogether cannot run this */
  char probe[64];
  snprintf(probe, sizeof probe, "hplp%d", (int)(getpid() % 100000));
  char cmd[160];
  snprintf(cmd, sizeof cmd, "ip netns add %s 2>/dev/null && ip netns del %s", probe, probe);
  if (system(cmd) != 0) {
    fprintf(stderr, "test_netns: this machine refuses 'ip netns add' (no network namespaces); "
                    "skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_broadcast_across_hosts),
                                     cmocka_unit_test(test_partition_heals)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
