/* test_reregister.c - a store and its directory losing each other and
 * finding each other again, with real processes: what the store holds is
 * listed again exactly (small objects included), what was deleted meanwhile
 * goes from the store too, a directory that was itself stopped does not
 * declare live stores dead, and a reduce running while the directory is
 * killed goes on (the restarted directory adopts its tree) or, finished
 * meanwhile, leaves nothing behind. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>

#include "harness.h"
#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

#define MB (1024 * 1024)

enum { N_SMALL = 1000, N_LARGE = 100, SMALL = 100, LARGE = 100000 };

static void id_small(int i, char *id, size_t n) { snprintf(id, n, "rr/s-%04d", i); }
static void id_large(int i, char *id, size_t n) { snprintf(id, n, "rr/l-%03d", i); }

/* Wait until `id` has at least one complete copy (or its bytes at the
 * directory); fail after 20 s. */
static void wait_listed(hpl_client *c, const char *id) {
  uint64_t deadline = hpl__deadline_ms(th_ms(20000));
  for (;;) {
    uint64_t size;
    uint32_t copies = 0, complete = 0;
    int is_inline = 0;
    int rc = hpl_stat(c, id, th_ms(2000), &size, &copies, &complete, &is_inline);
    if (rc == 0 && complete > 0) return;
    if (hpl__ms_left(deadline) <= 0)
      fail_msg("'%s' not listed again (stat %s, %u complete copies)", id, hpl_strerror(rc),
               complete);
    th_sleep_ms(100);
  }
}

/* `id` is known nowhere in the cluster. */
static void assert_gone(hpl_client *c, const char *id) {
  uint64_t size;
  uint32_t copies, complete;
  int is_inline;
  assert_int_equal(hpl_stat(c, id, th_ms(2000), &size, &copies, &complete, &is_inline),
                   HPL_ENOTFOUND);
}

/* Stop node `node`'s store (SIGSTOP) and wait until the directory has
 * declared it dead; fail after 10 s. */
static void stop_until_dead(hpl__lc *lc, int node) {
  uint64_t dead0 = th_dir_counter(lc, "dir_nodes_dead");
  assert_int_equal(hpl__lc_signal(lc, node, SIGSTOP), 0);
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_dir_counter(lc, "dir_nodes_dead") == dead0 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(100);
  assert_true(th_dir_counter(lc, "dir_nodes_dead") > dead0);
}

static void get_check(hpl_client *c, const char *id, uint64_t size, uint64_t seed) {
  hpl_buf *b;
  int rc = hpl_get(c, id, th_ms(10000), &b);
  if (rc) fail_msg("get '%s': %s", id, hpl_strerror(rc));
  assert_int_equal(hpl_buf_size(b), size);
  assert_true(th_check_pattern(hpl_buf_data(b), size, seed));
  hpl_release(c, b);
}

/* The directory stops for 5 s, so store A's heartbeats go unanswered and it
 * connects again. Its copies, small and large, are listed again: B reads
 * them, and deleting everything frees every copy on A (before, A's small
 * objects stayed: it re-reported only the large ones). */
static void test_directory_pause_then_delete(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 256 * MB, NULL, NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  char id[32];
  for (int i = 0; i < N_SMALL; i++) {
    id_small(i, id, sizeof id);
    th_put_pattern(A, id, SMALL, (uint64_t)i);
  }
  for (int i = 0; i < N_LARGE; i++) {
    id_large(i, id, sizeof id);
    th_put_pattern(A, id, LARGE, 1000 + (uint64_t)i);
  }
  assert_int_equal(th_counter(A, "objects"), N_SMALL + N_LARGE);

  assert_int_equal(hpl__lc_signal(lc, -1, SIGSTOP), 0);
  th_sleep_ms(5000);
  assert_int_equal(hpl__lc_signal(lc, -1, SIGCONT), 0);
  /* A noticed and registered again: its copies are listed again */
  for (int i = 0; i < N_LARGE; i++) {
    id_large(i, id, sizeof id);
    wait_listed(B, id);
  }
  /* every small object names A as a holder again */
  for (int i = 0; i < N_SMALL; i += 37) {
    id_small(i, id, sizeof id);
    wait_listed(B, id);
  }
  for (int i = 0; i < N_LARGE; i += 9) {
    id_large(i, id, sizeof id);
    get_check(B, id, LARGE, 1000 + (uint64_t)i);
  }
  for (int i = 0; i < N_SMALL; i += 97) {
    id_small(i, id, sizeof id);
    get_check(B, id, SMALL, (uint64_t)i);
  }

  for (int i = 0; i < N_SMALL; i++) {
    id_small(i, id, sizeof id);
    assert_int_equal(hpl_delete(A, id, th_ms(5000)), 0);
  }
  for (int i = 0; i < N_LARGE; i++) {
    id_large(i, id, sizeof id);
    assert_int_equal(hpl_delete(A, id, th_ms(5000)), 0);
  }
  th_wait_counter(A, "objects", 0, "store A after deleting everything");
  th_wait_counter(B, "objects", 0, "store B after deleting everything");
  /* no object's bytes are left (jemalloc may keep a free slab's extent) */
  th_wait_counter(A, "pool_allocated", 0, "store A's pool after deleting everything");
  assert_true(th_counter(A, "pool_used") <= 4 * MB);
  assert_int_equal(th_dir_counter(lc, "dir_objects"), 0);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* Store A stops long enough to be declared dead; meanwhile its objects are
 * deleted. When it comes back, the directory tells it to drop them: they do
 * not come back to life (before, its re-registration listed the large one
 * again and it kept the small one). */
static void test_deleted_while_away(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, "--heartbeat-ms 200 --heartbeat-timeout-ms 1000", NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  th_put_pattern(A, "away/large", LARGE, 1);
  th_put_pattern(A, "away/small", SMALL, 2);
  th_put_pattern(A, "away/kept", LARGE, 3);
  stop_until_dead(lc, 0);
  int rc = hpl_delete(B, "away/large", th_ms(5000));
  assert_true(rc == 0 || rc == HPL_ENOTFOUND);
  rc = hpl_delete(B, "away/small", th_ms(5000));
  assert_true(rc == 0 || rc == HPL_ENOTFOUND);
  assert_int_equal(hpl__lc_signal(lc, 0, SIGCONT), 0);

  /* the kept one is listed again; the deleted ones are gone everywhere */
  wait_listed(B, "away/kept");
  get_check(B, "away/kept", LARGE, 3);
  th_wait_counter(A, "objects", 1, "store A after coming back");
  assert_gone(B, "away/large");
  assert_gone(B, "away/small");
  hpl_buf *b;
  assert_int_equal(hpl_get(A, "away/large", 300, &b), HPL_ETIMEDOUT);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* As above, but a get of the deleted id waits at the directory when store A
 * comes back (the waiter keeps the id known, as pending). A's re-report of
 * its old copy must not satisfy that get: A is told to drop it, and the get
 * times out. Before, the pending entry took A's copy as complete: the
 * deleted object was listed again and stayed in A's pool for good
 * (bench_faults' LEAK after a pause victim's own get asked for another
 * sender while it was away). */
static void test_deleted_while_away_get_waits(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, "--heartbeat-ms 200 --heartbeat-timeout-ms 1000", NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  th_put_pattern(A, "away/w", LARGE, 6);
  uint64_t reg0 = th_counter(A, "dir_registrations");
  stop_until_dead(lc, 0);
  int rc = hpl_delete(B, "away/w", th_ms(5000));
  assert_true(rc == 0 || rc == HPL_ENOTFOUND);
  th_getter g = {.c = B, .id = "away/w", .timeout = th_ms(4000), .size = LARGE,
                 .want = th_pattern_sum(LARGE, 6)};
  th_get_start(&g);
  th_sleep_ms(300); /* the get waits at the directory */
  assert_int_equal(hpl__lc_signal(lc, 0, SIGCONT), 0);
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_counter(A, "dir_registrations") == reg0 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(50);
  assert_true(th_counter(A, "dir_registrations") > reg0);
  th_wait_counter(A, "objects", 0, "store A after coming back");
  th_get_join(&g);
  if (g.rc == 0) fail_msg("the get of the deleted id returned %s bytes", g.ok ? "its old" : "some");
  assert_int_equal(g.rc, HPL_ETIMEDOUT);
  assert_true(th_dir_counter(lc, "dir_held_dropped") >= 1);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* The directory is killed and restarted; store A re-registers at once but
 * re-reports what it holds 1.5 s later (fault point held_delay_ms). A
 * delete of A's object in between names an id the new directory does not
 * know yet (HPL_ENOTFOUND): it is remembered, and A's late re-report is
 * answered with DROP, so the object does not come back and A's pool
 * empties (before: the re-report brought it back, listed and holding
 * A's pool for good - the LEAK bench_faults saw after a dirkill run). */
static void test_delete_before_rereport(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, "--faults held_delay_ms=1500");
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  th_put_pattern(A, "rr/x", LARGE, 4);
  th_put_pattern(A, "rr/kept", LARGE, 5);
  uint64_t reg0 = th_counter(A, "dir_registrations");
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  char err[256];
  if (hpl__lc_restart(lc, -1, err, sizeof err)) fail_msg("restart: %s", err);
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_counter(A, "dir_registrations") == reg0 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(10);
  assert_true(th_counter(A, "dir_registrations") > reg0);
  int rc = hpl_delete(B, "rr/x", th_ms(5000));
  assert_true(rc == 0 || rc == HPL_ENOTFOUND);
  /* the re-report arrives: rr/kept listed again, rr/x dropped */
  wait_listed(B, "rr/kept");
  get_check(B, "rr/kept", LARGE, 5);
  th_wait_counter(A, "objects", 1, "store A after its re-report");
  assert_gone(B, "rr/x");
  assert_int_equal(th_dir_counter(lc, "dir_tombstones"), 1);
  assert_true(th_dir_counter(lc, "dir_held_dropped") >= 1);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* The directory itself stops for longer than its heartbeat timeout (but
 * not long enough for the stores to give up on it): when it runs again it
 * must not declare the stores dead, since their heartbeats are waiting in
 * its sockets. */
static void test_directory_stall_kills_nobody(void **state) {
  (void)state;
  /* stores wait 3 heartbeats (3 s) for an answer before they reconnect */
  hpl__lc *lc = th_cluster(3, 64 * MB, "--heartbeat-ms 1000 --heartbeat-timeout-ms 2000", NULL);
  hpl_client *A = th_connect(lc, 0);
  th_put_pattern(A, "stall/x", LARGE, 5);
  for (int round = 0; round < 2; round++) {
    assert_int_equal(hpl__lc_signal(lc, -1, SIGSTOP), 0);
    th_sleep_ms(2500);
    assert_int_equal(hpl__lc_signal(lc, -1, SIGCONT), 0);
    th_sleep_ms(1500); /* a sweep or two after it */
  }
  assert_int_equal(th_dir_counter(lc, "dir_nodes_dead"), 0);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 3);
  assert_int_equal(th_counter(A, "dir_registrations"), 1);
  hpl_close(A);
  th_stop(lc, 0);
}

/* ------------------------------------------------------------------ reduces */

/* A cluster of n stores, store i holding source "<prefix>/src-i" of nf
 * floats, all i + 1; the reduces below go into "<prefix>/t" at store 0. */
enum { RD_MAX = 4 };
typedef struct rd_cluster {
  hpl__lc *lc;
  int n;
  size_t nf;
  hpl_client *cs[RD_MAX];
  char ids[RD_MAX][32];
  const char *srcs[RD_MAX];
  char target[32];
  uint64_t off, len; /* a range reduce over bytes [off, off + len) (both 0: hpl_reduce) */
} rd_cluster;

static void rd_start(rd_cluster *rc, int n, uint64_t memory, const char *store_args,
                     const char *prefix, size_t nf) {
  rc->lc = th_cluster(n, memory, NULL, store_args);
  rc->off = rc->len = 0;
  rc->n = n;
  rc->nf = nf;
  snprintf(rc->target, sizeof rc->target, "%s/t", prefix);
  float *d = malloc(nf * sizeof *d);
  assert_non_null(d);
  for (int i = 0; i < n; i++) {
    rc->cs[i] = th_connect(rc->lc, i);
    snprintf(rc->ids[i], sizeof rc->ids[i], "%s/src-%d", prefix, i);
    rc->srcs[i] = rc->ids[i];
    for (size_t j = 0; j < nf; j++) d[j] = (float)(i + 1);
    assert_int_equal(hpl_put(rc->cs[i], rc->ids[i], d, nf * sizeof *d, th_ms(10000)), 0);
  }
  free(d);
}

/* Reduce k of the sources (0: all) into the target at store 0. */
static void rd_reduce(rd_cluster *rc, int k) {
  int r = rc->len ? hpl_reduce_range(rc->cs[0], rc->target, rc->srcs, (size_t)rc->n, (size_t)k,
                                     HPL_OP_SUM, HPL_DT_F32, rc->off, rc->len, th_ms(60000))
                  : hpl_reduce(rc->cs[0], rc->target, rc->srcs, (size_t)rc->n, (size_t)k,
                               HPL_OP_SUM, HPL_DT_F32, th_ms(60000));
  assert_int_equal(r, 0);
}

/* The target, read at store 0, is nf floats (or the range's), each `want`. */
static void rd_check(rd_cluster *rc, float want) {
  hpl_buf *b;
  int r = hpl_get(rc->cs[0], rc->target, th_ms(60000), &b);
  if (r) fail_msg("reduce: %s (%s)", hpl_strerror(r), hpl_errdetail(rc->cs[0]));
  size_t nf = rc->len ? rc->len / sizeof(float) : rc->nf;
  assert_int_equal(hpl_buf_size(b), nf * sizeof(float));
  const float *v = hpl_buf_data(b);
  for (size_t i = 0; i < nf; i++)
    if (v[i] != want) fail_msg("element %zu is %g, not %g", i, (double)v[i], (double)want);
  hpl_release(rc->cs[0], b);
}

static void rd_stop(rd_cluster *rc) {
  for (int i = 0; i < rc->n; i++) hpl_close(rc->cs[i]);
  th_stop(rc->lc, 0);
}

/* Restart the (killed) directory and wait until `live` stores registered
 * with the new one. */
static void directory_restart_n(rd_cluster *rc, int live) {
  char err[256];
  if (hpl__lc_restart(rc->lc, -1, err, sizeof err)) fail_msg("restart: %s", err);
  uint64_t deadline = hpl__deadline_ms(th_ms(20000));
  while (th_dir_counter(rc->lc, "dir_nodes") != (uint64_t)live && hpl__ms_left(deadline) > 0)
    th_sleep_ms(20);
  assert_int_equal(th_dir_counter(rc->lc, "dir_nodes"), live);
}

/* The same, for all the stores. */
static void directory_restart(rd_cluster *rc) { directory_restart_n(rc, rc->n); }

/* Store counter `name` summed over stores from..n-1, polled every 10 ms
 * until the sum is `want` or `ms` have passed; returns the last sum. */
static uint64_t sum_until(rd_cluster *rc, int from, const char *name, uint64_t want, int64_t ms) {
  uint64_t deadline = hpl__deadline_ms(ms), sum = 0;
  for (;;) {
    sum = 0;
    for (int i = from; i < rc->n; i++) sum += th_counter(rc->cs[i], name);
    if (sum == want || hpl__ms_left(deadline) <= 0) return sum;
    th_sleep_ms(10);
  }
}

/* Wait until the stores hold `tasks` reduce tasks between them (the tree
 * is in place), then kill the directory. Killed at once after hpl_reduce
 * returned, it could die before a task it had sent reached its node (the
 * reply can go out first), and that reduce never finishes without it. */
static void kill_directory_with_tree(rd_cluster *rc, uint64_t tasks) {
  uint64_t have = sum_until(rc, 0, "reduce_tasks", tasks, th_ms(10000));
  if (have != tasks)
    fail_msg("the stores hold %llu reduce tasks, not %llu", (unsigned long long)have,
             (unsigned long long)tasks);
  assert_int_equal(hpl__lc_signal(rc->lc, -1, SIGKILL), 0);
}

/* Delete the target and sources; then no store may hold pool memory. */
static void delete_all_check_pools(rd_cluster *rc) {
  assert_int_equal(hpl_delete(rc->cs[0], rc->target, th_ms(10000)), 0);
  for (int i = 0; i < rc->n; i++) /* by their makers (directory/admin.c) */
    assert_int_equal(hpl_delete(rc->cs[i], rc->ids[i], th_ms(10000)), 0);
  for (int i = 0; i < rc->n; i++)
    th_wait_counter(rc->cs[i], "pool_allocated", 0, "after deleting everything");
}

/* Every stream is paced to 8 MB/s, so a reduce of 4 x 24 MiB takes about
 * 3 s; the directory is killed 0.6 s into it and is back 0.5 s later. The
 * sink names the running tree to the new directory, which adopts it: the
 * reduce finishes without starting over, hpl_reduce_sources (asked of the
 * new directory) lists its 4 sources, and once everything is deleted no
 * pool holds a byte (the old tasks ended). Before, the new directory
 * started the reduce over, or never finished it. */
static void reduce_adopted(const char *prefix, uint64_t off, uint64_t len) {
  rd_cluster rc;
  rd_start(&rc, 4, 160ull * MB, "--faults slow_send=8M", prefix, 6u * MB);
  rc.off = off;
  rc.len = len;
  rd_reduce(&rc, 0);
  th_sleep_ms(600);
  assert_int_equal(hpl__lc_signal(rc.lc, -1, SIGKILL), 0);
  th_sleep_ms(500);
  directory_restart(&rc);
  rd_check(&rc, 10.0f);
  char *text = NULL;
  int r = hpl_reduce_sources(rc.cs[0], rc.target, th_ms(5000), &text);
  if (r) fail_msg("hpl_reduce_sources: %s (%s)", hpl_strerror(r), hpl_errdetail(rc.cs[0]));
  int lines = 0;
  for (char *p = text; *p; p++) lines += *p == '\n';
  hpl_free(text);
  assert_int_equal(lines, 4);
  assert_int_equal(th_dir_counter(rc.lc, "dir_reduces_adopted"), 1);
  assert_int_equal(th_dir_counter(rc.lc, "dir_reduce_resets"), 0);
  delete_all_check_pools(&rc);
  rd_stop(&rc);
}

static void test_reduce_adopted(void **state) {
  (void)state;
  reduce_adopted("ad", 0, 0);
}

/* The same for a range reduce (16 MiB of the 24 MiB sources, from 4 MiB +
 * 4): the sink asks the new directory again for the same range. */
static void test_range_reduce_adopted(void **state) {
  (void)state;
  reduce_adopted("adr", 4 * MB + 4, 16 * MB);
}

/* A reduce whose root runs at the sink finishes while the directory is
 * down (streams are paced to 8 MB/s, so its 4 MiB take about 0.5 s; the
 * directory dies once the tree is in place). The restarted directory never
 * sends that reduce's end, so the sink lets go of it when it registers
 * again: deleting the target and sources then frees every pool (before,
 * the sink kept the target's memory). */
static void test_reduce_done_while_directory_down(void **state) {
  (void)state;
  rd_cluster rc;
  rd_start(&rc, 2, 64ull * MB, "--faults slow_send=8M", "dd", 1u * MB);
  rd_reduce(&rc, 0);
  kill_directory_with_tree(&rc, 1); /* the root's, at the sink */
  rd_check(&rc, 3.0f); /* made while the directory is down */
  directory_restart(&rc);
  delete_all_check_pools(&rc);
  rd_stop(&rc);
}

/* A reduce of 3 sources (paced as above) finishes while the directory is
 * down. When the stores register with the new directory, the sink says so
 * (REDUCE_DONE), and the task of the middle slot, on another node, ends at
 * once: within 2 s no store holds a task, none ended by its orphan timer
 * (HPL__RDTASK_ORPHAN_MS, 3 s), and deleting everything frees every pool.
 * (Before, it ended 3 s later, freeing its 4 MiB output in the middle of
 * whatever ran then: a 64 MiB reduce running meanwhile took 2x as long.) */
static void test_done_reduce_ends_its_tasks(void **state) {
  (void)state;
  rd_cluster rc;
  rd_start(&rc, 3, 64ull * MB, "--faults slow_send=8M", "de", 1u * MB);
  rd_reduce(&rc, 0);
  kill_directory_with_tree(&rc, 2); /* the middle slot's and the root's */
  rd_check(&rc, 6.0f);              /* made while the directory is down */
  directory_restart(&rc);
  uint64_t tasks = sum_until(&rc, 0, "reduce_tasks", 0, 2000);
  if (tasks) fail_msg("%llu reduce tasks left 2 s after the restart", (unsigned long long)tasks);
  assert_int_equal(sum_until(&rc, 0, "orphans_ended", 0, 0), 0);
  assert_int_equal(th_dir_counter(rc.lc, "dir_reduce_done_notes"), 1);
  delete_all_check_pools(&rc);
  rd_stop(&rc);
}

/* As above, but the sink dies before the directory comes back, so nobody
 * says the reduce is done: the middle slot's task is orphaned when the
 * other stores register again. The directory then dies and comes back
 * twice more, about every 2.5 s. The orphan still ends HPL__RDTASK_ORPHAN_MS
 * (3 s) after the first restart: once the sources left are deleted after
 * the third, no pool holds a byte within 1 s. (Before, each restart gave
 * every orphan another 3 s, so a directory restarting every few seconds
 * kept them - and their memory - forever.) */
static void test_orphans_end_across_restarts(void **state) {
  (void)state;
  rd_cluster rc;
  rd_start(&rc, 3, 64ull * MB, "--faults slow_send=8M", "or", 1u * MB);
  rd_reduce(&rc, 0);
  kill_directory_with_tree(&rc, 2); /* the middle slot's and the root's */
  rd_check(&rc, 6.0f);              /* made while the directory is down */
  assert_int_equal(hpl__lc_signal(rc.lc, 0, SIGKILL), 0); /* the sink */
  directory_restart_n(&rc, rc.n - 1);
  for (int k = 0; k < 2; k++) {
    th_sleep_ms(2000);
    assert_int_equal(hpl__lc_signal(rc.lc, -1, SIGKILL), 0);
    th_sleep_ms(200);
    directory_restart_n(&rc, rc.n - 1);
  }
  for (int i = 1; i < rc.n; i++)
    assert_int_equal(hpl_delete(rc.cs[i], rc.ids[i], th_ms(10000)), 0);
  uint64_t held = sum_until(&rc, 1, "pool_allocated", 0, 1000);
  if (held) fail_msg("%llu bytes still allocated after deleting everything",
                     (unsigned long long)held);
  assert_int_equal(sum_until(&rc, 1, "orphans_ended", 1, 0), 1); /* the middle slot's task */
  assert_int_equal(th_dir_counter(rc.lc, "dir_reduce_done_notes"), 0);
  rd_stop(&rc);
}

/* As test_reduce_adopted, but the reduce takes 3 of 4 sources and, once
 * the new directory has adopted the tree, a store in it is killed: the
 * adopted tree is given up and a new one built from the sources left,
 * whose sum (1 + 3 + 4: source 4 is the spare) arrives at the sink. */
static void reduce_adopted_then_node_dies(const char *prefix, uint64_t off, uint64_t len) {
  rd_cluster rc;
  rd_start(&rc, 4, 160ull * MB, "--faults slow_send=8M", prefix, 6u * MB);
  rc.off = off;
  rc.len = len;
  rd_reduce(&rc, 3);
  th_sleep_ms(600);
  assert_int_equal(hpl__lc_signal(rc.lc, -1, SIGKILL), 0);
  th_sleep_ms(300);
  directory_restart(&rc);
  /* the sink names its tree once it has registered again: wait for that
   * (asked at once, under ASan the count could still be 0) */
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_dir_counter(rc.lc, "dir_reduces_adopted") == 0 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(10);
  assert_int_equal(th_dir_counter(rc.lc, "dir_reduces_adopted"), 1);
  assert_int_equal(hpl__lc_signal(rc.lc, 1, SIGKILL), 0); /* source 2, in the tree */
  rd_check(&rc, 8.0f);
  assert_true(th_dir_counter(rc.lc, "dir_reduce_resets") >= 1);
  rd_stop(&rc);
}

static void test_reduce_adopted_then_node_dies(void **state) {
  (void)state;
  reduce_adopted_then_node_dies("an", 0, 0);
}

/* The same for a range reduce: the new tree is over the same range. */
static void test_range_reduce_adopted_then_node_dies(void **state) {
  (void)state;
  reduce_adopted_then_node_dies("anr", 4 * MB + 4, 16 * MB);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_directory_pause_then_delete, th_teardown),
      cmocka_unit_test_teardown(test_deleted_while_away, th_teardown),
      cmocka_unit_test_teardown(test_deleted_while_away_get_waits, th_teardown),
      cmocka_unit_test_teardown(test_directory_stall_kills_nobody, th_teardown),
      cmocka_unit_test_teardown(test_delete_before_rereport, th_teardown),
      cmocka_unit_test_teardown(test_reduce_adopted, th_teardown),
      cmocka_unit_test_teardown(test_reduce_adopted_then_node_dies, th_teardown),
      cmocka_unit_test_teardown(test_range_reduce_adopted, th_teardown),
      cmocka_unit_test_teardown(test_range_reduce_adopted_then_node_dies, th_teardown),
      cmocka_unit_test_teardown(test_reduce_done_while_directory_down, th_teardown),
      cmocka_unit_test_teardown(test_done_reduce_ends_its_tasks, th_teardown),
      cmocka_unit_test_teardown(test_orphans_end_across_restarts, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
