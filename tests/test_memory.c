/* test_memory.c - a full pool is not an error: idle secondary copies are
 * let go (never the last complete copy, never one held), and a create that
 * does not fit waits for room. Real directory and stores on loopback. */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1024ull * 1024)

static void get_check(hpl_client *c, const char *id, uint64_t size, uint64_t seed) {
  hpl_buf *b;
  int rc = hpl_get(c, id, th_ms(20000), &b);
  if (rc) fprintf(stderr, "get %s: %s: %s\n", id, hpl_strerror(rc), hpl_errdetail(c));
  assert_int_equal(rc, 0);
  assert_int_equal(hpl_buf_size(b), size);
  assert_true(th_check_pattern(hpl_buf_data(b), size, seed));
  hpl_release(c, b);
}

static int local(hpl_client *c, const char *id) {
  int loc = 0;
  int rc = hpl_contains(c, id, th_ms(5000), &loc);
  assert_true(rc == 0 || rc == HPL_ENOTFOUND);
  return rc == 0 && loc;
}

/* Node 1 holds three idle copies got from node 0 (42 MiB of its 64 MiB);
 * a 28 MiB put there lets the oldest go (two of them: the first leaves a
 * 14 MiB hole apart from the 22 MiB free at the end, the second makes 28
 * MiB in one piece), never the newest, and the copies come back from node
 * 0 when asked for again. Node 0's own puts
 * (primary copies) are never let go. */
static void test_idle_copies_make_room(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *c0 = th_connect(lc, 0), *c1 = th_connect(lc, 1);
  const char *ids[] = {"m/a", "m/b", "m/c"};
  for (int i = 0; i < 3; i++) th_put_pattern(c0, ids[i], 14 * MB, 10 + (uint64_t)i);
  for (int i = 0; i < 3; i++) get_check(c1, ids[i], 14 * MB, 10 + (uint64_t)i);
  assert_int_equal(th_counter(c1, "idle_bytes"), 42 * MB);
  assert_int_equal(th_counter(c1, "evictions"), 0);
  th_put_pattern(c1, "m/new", 28 * MB, 20);
  uint64_t ev = th_counter(c1, "evictions");
  assert_true(ev >= 1 && ev <= 2);
  assert_int_equal(th_counter(c1, "evicted_bytes"), ev * 14 * MB);
  assert_false(local(c1, "m/a")); /* the least recently used went first */
  assert_true(local(c1, "m/c"));  /* the most recent stayed */
  assert_true(th_counter(c1, "room_waits") >= 1);
  assert_true(th_dir_counter(lc, "dir_evictions_granted") >= 1);
  /* the directory no longer lists node 1: a get elsewhere is served, and
   * node 1 gets the copy again (making room once more) */
  get_check(c1, "m/a", 14 * MB, 10);
  get_check(c1, "m/new", 28 * MB, 20);
  /* node 0's copies are all still there */
  for (int i = 0; i < 3; i++) assert_true(local(c0, ids[i]));
  assert_int_equal(th_counter(c0, "evictions"), 0);
  assert_true(th_counter(c1, "pool_high_water") <= 64 * MB);
  hpl_close(c0);
  hpl_close(c1);
  th_stop(lc, 0);
}

/* The last complete copy in the cluster is never let go, nor a copy a
 * client holds: with nothing else idle, a create waits and then fails
 * with HPL_ENOMEM and a detail saying what holds the pool. */
static void test_last_and_held_copies_stay(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *c0 = th_connect(lc, 0), *c1 = th_connect(lc, 1);
  th_put_pattern(c0, "k/last", 20 * MB, 1);
  th_put_pattern(c0, "k/held", 20 * MB, 2);
  get_check(c1, "k/last", 20 * MB, 1);
  hpl_buf *held;
  assert_int_equal(hpl_get(c1, "k/held", th_ms(10000), &held), 0);
  /* node 0 goes: node 1's copy of k/last is now the only one */
  assert_int_equal(hpl__lc_signal(lc, 0, SIGKILL), 0);
  uint64_t deadline = hpl__deadline_ms(th_ms(15000));
  while (th_dir_counter(lc, "dir_nodes_dead") < 1 && hpl__ms_left(deadline) > 0) th_sleep_ms(50);
  assert_true(th_dir_counter(lc, "dir_nodes_dead") >= 1);
  uint64_t t0 = hpl__now_ms();
  void *d = calloc(1, 30 * MB);
  int rc = hpl_put(c1, "k/new", d, 30 * MB, 1500);
  uint64_t took = hpl__now_ms() - t0;
  const char *why = hpl_errdetail(c1);
  fprintf(stderr, "put with everything kept: %s after %llu ms: %s\n", hpl_strerror(rc),
          (unsigned long long)took, why);
  assert_int_equal(rc, HPL_ENOMEM);
  assert_true(took >= 1400);
  assert_non_null(strstr(why, "pinned"));
  assert_non_null(strstr(why, "only copies"));
  assert_true(th_counter(c1, "evict_refusals") >= 1);
  assert_int_equal(th_counter(c1, "evictions"), 0);
  assert_int_equal(th_counter(c1, "room_timeouts"), 1);
  /* both copies are intact */
  assert_true(th_check_pattern(hpl_buf_data(held), 20 * MB, 2));
  get_check(c1, "k/last", 20 * MB, 1);
  hpl_release(c1, held);
  free(d);
  hpl_close(c0);
  hpl_close(c1);
  th_stop(lc, 0);
}

typedef struct creator {
  hpl_client *c;
  const char *id;
  uint64_t size;
  int64_t timeout;
  int rc;
  uint64_t ms;
} creator;

static void *create_main(void *arg) {
  creator *k = arg;
  uint64_t t0 = hpl__now_ms();
  void *d = malloc(k->size);
  memset(d, 7, k->size);
  k->rc = hpl_put(k->c, k->id, d, k->size, k->timeout);
  k->ms = hpl__now_ms() - t0;
  free(d);
  return NULL;
}

/* A create that does not fit waits, and goes on as soon as another client
 * releases what held the room. */
static void test_create_waits_for_release(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *c0 = th_connect(lc, 0), *c1 = th_connect(lc, 1), *c2 = th_connect(lc, 1);
  th_put_pattern(c0, "w/x", 40 * MB, 3);
  hpl_buf *held;
  assert_int_equal(hpl_get(c1, "w/x", th_ms(10000), &held), 0);
  creator k = {.c = c2, .id = "w/y", .size = 40 * MB, .timeout = th_ms(20000)};
  pthread_t t;
  pthread_create(&t, NULL, create_main, &k);
  th_sleep_ms(800);
  uint64_t released = hpl__now_ms();
  assert_int_equal(th_counter(c1, "room_waits"), 1); /* it waits */
  hpl_release(c1, held);
  pthread_join(t, NULL);
  uint64_t after = hpl__now_ms() - released;
  fprintf(stderr, "create waited %llu ms; done %llu ms after the release\n",
          (unsigned long long)k.ms, (unsigned long long)after);
  assert_int_equal(k.rc, 0);
  assert_true(k.ms >= 700);
  assert_true(after < 3000);
  assert_int_equal(th_counter(c1, "evictions"), 1);
  hpl_buf *b;
  assert_int_equal(hpl_get(c2, "w/y", th_ms(5000), &b), 0);
  hpl_release(c2, b);
  assert_false(local(c1, "w/x"));
  assert_true(local(c0, "w/x")); /* the primary copy stays */
  hpl_close(c0);
  hpl_close(c1);
  hpl_close(c2);
  th_stop(lc, 0);
}

/* A broadcast of an object larger than the free space on every receiver
 * completes: each lets idle copies go. */
static void test_broadcast_by_eviction(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(4, 64 * MB, NULL, NULL);
  hpl_client *c[4];
  for (int i = 0; i < 4; i++) c[i] = th_connect(lc, i);
  th_put_pattern(c[3], "b/f1", 14 * MB, 31);
  th_put_pattern(c[3], "b/f2", 14 * MB, 32);
  for (int i = 1; i <= 2; i++) {
    get_check(c[i], "b/f1", 14 * MB, 31);
    get_check(c[i], "b/f2", 14 * MB, 32);
  }
  th_put_pattern(c[0], "b/big", 40 * MB, 33);
  th_getter g[2];
  for (int i = 0; i < 2; i++) {
    g[i] = (th_getter){.c = c[i + 1], .id = "b/big", .timeout = th_ms(20000), .size = 40 * MB,
                       .want = th_pattern_sum(40 * MB, 33)};
    th_get_start(&g[i]);
  }
  for (int i = 0; i < 2; i++) {
    th_get_join(&g[i]);
    assert_int_equal(g[i].rc, 0);
    assert_true(g[i].ok);
    assert_true(th_counter(c[i + 1], "evictions") >= 1);
  }
  for (int i = 0; i < 4; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

static int add_store(hpl__lc *lc, const char *args) {
  char err[512];
  int i = hpl__lc_add_store(lc, args, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

/* A complete copy that another node is streaming from is not let go,
 * however full the pool. Node 1 gets v/x from its origin, node 0; then
 * nodes 3 and 2 get it. One copy serves one receiver at a time, so one of
 * them pulls from node 1. Node 1's sends of v/ objects crawl at 4 MB/s
 * (and node 0's to node 3), so node 1 keeps serving its complete copy for
 * seconds. A create there that needs that room waits and fails; once the
 * streams are done, the same create lets the copy go. */
static void test_streamed_copy_stays(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  int n3 = add_store(lc, "--memory 64M");
  hpl_client *c3 = th_connect(lc, n3);
  char args[200], id3[32];
  snprintf(id3, sizeof id3, "%llx", (unsigned long long)th_node_id(c3));
  snprintf(args, sizeof args, "--memory 64M --faults slow_send=4000000,prefix=v/,to_node=%s", id3);
  int n0 = add_store(lc, args);
  int n1 = add_store(lc, "--memory 64M --faults slow_send=4000000,prefix=v/");
  int n2 = add_store(lc, "--memory 64M");
  hpl_client *c0 = th_connect(lc, n0), *c1 = th_connect(lc, n1), *c2 = th_connect(lc, n2);
  const uint64_t size = 24 * MB;
  th_put_pattern(c0, "v/x", size, 41);
  get_check(c1, "v/x", size, 41);
  th_getter g[2];
  hpl_client *cs[2] = {c3, c2};
  for (int i = 0; i < 2; i++) {
    g[i] = (th_getter){.c = cs[i], .id = "v/x", .timeout = th_ms(60000), .size = size,
                       .want = th_pattern_sum(size, 41)};
    th_get_start(&g[i]);
    th_sleep_ms(200);
  }
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_counter(c1, "data_bytes_sent") == 0 && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  assert_true(th_counter(c1, "data_bytes_sent") > 0); /* node 1 serves its copy */
  void *d = calloc(1, 48 * MB);
  int rc = hpl_put(c1, "v/new", d, 48 * MB, 1000);
  fprintf(stderr, "create beside a copy being streamed from: %s: %s\n", hpl_strerror(rc),
          hpl_errdetail(c1));
  assert_int_equal(rc, HPL_ENOMEM);
  assert_non_null(strstr(hpl_errdetail(c1), "pinned"));
  assert_int_equal(th_counter(c1, "evictions"), 0);
  assert_true(local(c1, "v/x"));
  for (int i = 0; i < 2; i++) {
    th_get_join(&g[i]);
    assert_int_equal(g[i].rc, 0);
    assert_true(g[i].ok);
  }
  /* the streams are over: now the copy may go */
  assert_int_equal(hpl_put(c1, "v/new", d, 48 * MB, th_ms(10000)), 0);
  assert_int_equal(th_counter(c1, "evictions"), 1);
  free(d);
  hpl_close(c0);
  hpl_close(c1);
  hpl_close(c2);
  hpl_close(c3);
  th_stop(lc, 0);
}

/* A node with a 64 MiB pool and a spill directory takes 200 MiB of puts:
 * all succeed, the pool never holds more than its size, every object
 * reads back byte-exact (locally, and from another node). Idle copies
 * other nodes hold are let go before anything is spilled. */
static void test_spill_working_set(void **state) {
  (void)state;
  char dir[] = "/tmp/hpl-spill-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char args[128];
  snprintf(args, sizeof args, "--spill-dir %s", dir);
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, args);
  hpl_client *c0 = th_connect(lc, 0), *c1 = th_connect(lc, 1);
  /* node 0 first holds a copy got from node 1: it goes before any spill */
  th_put_pattern(c1, "s/other", 8 * MB, 99);
  get_check(c0, "s/other", 8 * MB, 99);
  enum { N = 25 };
  char id[32];
  uint64_t t0 = hpl__now_ms();
  for (int i = 0; i < N; i++) {
    snprintf(id, sizeof id, "s/%02d", i);
    th_put_pattern(c0, id, 8 * MB, 200 + (uint64_t)i);
    if (i == 6) { /* the pool just filled: the copy went, nothing spilled yet */
      assert_int_equal(th_counter(c0, "evictions"), 1);
      assert_int_equal(th_counter(c0, "spilled"), 0);
    }
  }
  uint64_t put_ms = hpl__now_ms() - t0;
  uint64_t spilled = th_counter(c0, "spilled");
  fprintf(stderr, "200 MiB put through a 64 MiB pool in %llu ms: %llu objects spilled\n",
          (unsigned long long)put_ms, (unsigned long long)spilled);
  assert_true(spilled >= N - 7);
  assert_true(th_counter(c0, "pool_high_water") <= 64 * MB);
  for (int i = 0; i < N; i++) {
    snprintf(id, sizeof id, "s/%02d", i);
    get_check(c0, id, 8 * MB, 200 + (uint64_t)i);
  }
  assert_true(th_counter(c0, "restored") >= N - 7);
  /* another node gets objects that are spilled again by now: node 0
   * streams them from their files, its pool untouched */
  for (int i = N - 8; i < N; i++) { /* the newest go back to memory... */
    snprintf(id, sizeof id, "s/%02d", i);
    get_check(c0, id, 8 * MB, 200 + (uint64_t)i);
  }
  uint64_t restored = th_counter(c0, "restored"), served = th_counter(c0, "pulls_served");
  for (int i = 0; i < 3; i++) { /* ...so the oldest are on disk only */
    snprintf(id, sizeof id, "s/%02d", i);
    get_check(c1, id, 8 * MB, 200 + (uint64_t)i);
  }
  assert_int_equal(th_counter(c0, "restored"), restored);
  assert_int_equal(th_counter(c0, "pulls_served"), served + 3);
  assert_int_equal(th_counter(c0, "spill_errors"), 0);
  assert_true(th_counter(c0, "pool_high_water") <= 64 * MB);
  hpl_close(c0);
  hpl_close(c1);
  /* a store that leaves removes its spill files */
  assert_int_equal(hpl__lc_signal(lc, 0, SIGTERM), 0);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "find %s -type f | grep -v /lock$ | wc -l", dir);
  FILE *f = popen(cmd, "r");
  int left = -1;
  assert_int_equal(fscanf(f, "%d", &left), 1);
  pclose(f);
  if (left) {
    fprintf(stderr, "%d spill files left; node-0's log ends:\n", left);
    snprintf(cmd, sizeof cmd, "tail -5 %s >&2", hpl__lc_store_log(lc, 0));
    (void)!system(cmd);
  }
  assert_int_equal(left, 0);
  assert_int_equal(hpl__lc_exit_status(lc, 0), 0);
  th_stop(lc, 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* A reduce whose source was spilled reads it back first: node 0's source
 * goes to disk under a working set of later puts, then a reduce of both
 * nodes' sources gives the right sum (here node 0's slot is the chain's
 * leaf, whose source its parent pulls like any object: it is streamed
 * from its spill file), and so does a range reduce of them (whose leaf
 * task reads the source back). */
static void test_reduce_of_spilled_source(void **state) {
  (void)state;
  char dir[] = "/tmp/hpl-spill-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char args[128];
  snprintf(args, sizeof args, "--spill-dir %s", dir);
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, args);
  hpl_client *c0 = th_connect(lc, 0), *c1 = th_connect(lc, 1);
  const uint64_t n = 4 * MB / 8; /* 4 MiB of u64 */
  uint64_t *v = malloc(n * 8);
  for (uint64_t i = 0; i < n; i++) v[i] = i;
  assert_int_equal(hpl_put(c0, "r/a", v, n * 8, th_ms(10000)), 0);
  for (uint64_t i = 0; i < n; i++) v[i] = 3 * i + 1;
  assert_int_equal(hpl_put(c1, "r/b", v, n * 8, th_ms(10000)), 0);
  char id[32];
  for (int i = 0; i < 8; i++) { /* 64 MiB more on node 0: r/a (oldest) goes to disk */
    snprintf(id, sizeof id, "r/fill%d", i);
    th_put_pattern(c0, id, 8 * MB, 300 + (uint64_t)i);
  }
  assert_true(th_counter(c0, "spilled") >= 1);
  uint64_t served0 = th_counter(c0, "pulls_served");
  const char *src[] = {"r/a", "r/b"};
  int rc = hpl_reduce(c1, "r/sum", src, 2, 2, HPL_OP_SUM, HPL_DT_U64, th_ms(20000));
  if (rc) fprintf(stderr, "reduce: %s: %s\n", hpl_strerror(rc), hpl_errdetail(c1));
  assert_int_equal(rc, 0);
  hpl_buf *b;
  assert_int_equal(hpl_get(c1, "r/sum", th_ms(20000), &b), 0);
  assert_int_equal(hpl_buf_size(b), n * 8);
  const uint64_t *r = hpl_buf_data(b);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; i++) bad += r[i] != 4 * i + 1;
  assert_int_equal(bad, 0);
  hpl_release(c1, b);
  assert_true(th_counter(c0, "pulls_served") > served0); /* r/a went out from its file */
  /* a range reduce: node 0's slot copies its range of r/a into a stream,
   * so r/a is read back whole first */
  uint64_t restored0 = th_counter(c0, "restored");
  const uint64_t off = MB / 8 + 3, len = 2 * MB / 8;
  rc = hpl_reduce_range(c1, "r/part", src, 2, 2, HPL_OP_SUM, HPL_DT_U64, off * 8, len * 8,
                        th_ms(20000));
  if (rc) fprintf(stderr, "reduce_range: %s: %s\n", hpl_strerror(rc), hpl_errdetail(c1));
  assert_int_equal(rc, 0);
  assert_int_equal(hpl_get(c1, "r/part", th_ms(20000), &b), 0);
  assert_int_equal(hpl_buf_size(b), len * 8);
  r = hpl_buf_data(b);
  for (uint64_t i = 0; i < len; i++) bad += r[i] != 4 * (off + i) + 1;
  assert_int_equal(bad, 0);
  hpl_release(c1, b);
  assert_true(th_counter(c0, "restored") > restored0);
  free(v);
  hpl_close(c0);
  hpl_close(c1);
  th_stop(lc, 0);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* A reduce over three 16 MiB sources (u32 j+1 at node j) whose every
 * node has only 8 MiB of its 48 MiB pool free: a 24 MiB object put there
 * holds the rest. The reduce's stream outputs and its target need 16 MiB
 * each, so they wait for room. Returns the cluster; *c gets its clients. */
static hpl__lc *reduce_without_room(const char *store_args, hpl_client **c) {
  hpl__lc *lc = th_cluster(3, 48 * MB, NULL, store_args);
  const size_t n = 16 * MB / 4;
  uint32_t *d = malloc(n * 4);
  assert_non_null(d);
  for (int j = 0; j < 3; j++) {
    char id[32];
    c[j] = th_connect(lc, j);
    for (size_t i = 0; i < n; i++) d[i] = (uint32_t)j + 1;
    snprintf(id, sizeof id, "rr/%d", j);
    assert_int_equal(hpl_put(c[j], id, d, n * 4, th_ms(5000)), 0);
    snprintf(id, sizeof id, "rr/fill%d", j);
    th_put_pattern(c[j], id, 24 * MB, 40 + (uint64_t)j);
  }
  free(d);
  const char *srcs[3] = {"rr/0", "rr/1", "rr/2"};
  assert_int_equal(hpl_reduce(c[0], "rr/t", srcs, 3, 0, HPL_OP_SUM, HPL_DT_U32, th_ms(5000)), 0);
  return lc;
}

/* ...and the reduce waits for room rather than failing, or hanging: once
 * the fillers are deleted it completes with the right sum. (Before, the
 * sink failed its target at once without telling the directory, and the
 * slots could not run: the get waited for its whole timeout.) */
static void test_reduce_waits_for_room(void **state) {
  (void)state;
  hpl_client *c[3];
  hpl__lc *lc = reduce_without_room(NULL, c);
  th_getter g = {.c = c[0], .id = "rr/t", .timeout = th_ms(30000)};
  th_get_start(&g);
  th_sleep_ms(1500);
  uint64_t waits = th_counter(c[0], "room_waits"); /* the target waits */
  int del[3];
  for (int j = 0; j < 3; j++) {
    char id[32];
    snprintf(id, sizeof id, "rr/fill%d", j);
    del[j] = hpl_delete(c[j], id, th_ms(5000));
  }
  th_get_join(&g); /* (before any assertion: the thread uses c[0]) */
  if (g.rc) th_dump_logs(lc);
  for (int j = 0; j < 3; j++) assert_int_equal(del[j], 0);
  assert_int_equal(g.rc, 0);
  assert_true(waits >= 1);
  assert_true(g.ms >= 1000);
  hpl_buf *b;
  assert_int_equal(hpl_get(c[0], "rr/t", th_ms(5000), &b), 0);
  assert_int_equal(hpl_buf_size(b), 16 * MB);
  const uint32_t *v = hpl_buf_data(b);
  size_t bad = 0;
  for (size_t i = 0; i < 16 * MB / 4; i++) bad += v[i] != 6;
  assert_int_equal(bad, 0);
  hpl_release(c[0], b);
  for (int j = 0; j < 3; j++) hpl_close(c[j]);
  th_stop(lc, 0);
}

/* ...and when no room comes within --room-wait-ms, the reduce fails with
 * HPL_ENOMEM for its waiters, soon, rather than leaving them to time out. */
static void test_reduce_no_room_fails(void **state) {
  (void)state;
  hpl_client *c[3];
  hpl__lc *lc = reduce_without_room("--room-wait-ms 500", c);
  hpl_buf *b = NULL;
  uint64_t t0 = hpl__now_ms();
  int rc = hpl_get(c[0], "rr/t", th_ms(20000), &b);
  uint64_t ms = hpl__now_ms() - t0;
  if (rc != HPL_ENOMEM) th_dump_logs(lc);
  assert_int_equal(rc, HPL_ENOMEM);
  assert_true(ms < (uint64_t)th_ms(10000));
  assert_non_null(strstr(hpl_errdetail(c[0]), "room"));
  assert_true(th_counter(c[0], "room_timeouts") >= 1);
  for (int j = 0; j < 3; j++) hpl_close(c[j]);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_reduce_waits_for_room, th_teardown),
      cmocka_unit_test_teardown(test_reduce_no_room_fails, th_teardown),
      cmocka_unit_test_teardown(test_idle_copies_make_room, th_teardown),
      cmocka_unit_test_teardown(test_last_and_held_copies_stay, th_teardown),
      cmocka_unit_test_teardown(test_create_waits_for_release, th_teardown),
      cmocka_unit_test_teardown(test_broadcast_by_eviction, th_teardown),
      cmocka_unit_test_teardown(test_streamed_copy_stays, th_teardown),
      cmocka_unit_test_teardown(test_spill_working_set, th_teardown),
      cmocka_unit_test_teardown(test_reduce_of_spilled_source, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
