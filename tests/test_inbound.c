/* test_inbound.c - a store pulls copies of large objects a few at a time
 * (hoplite-store --inbound-pulls, store/puller.c): many senders converging
 * on one node's link would overflow its queue. On real processes: one node
 * gets many 2 MiB objects from three others at once; all arrive intact,
 * the ones over the limit waited their turn (pulls_queued); without a
 * limit none waits, nor do copies of 4 MiB or more; 100 KiB copies take
 * turns too, 16 KiB ones do not. The copies go in ring
 * order of their senders' node ids from the receiver's own, the first
 * ones too, whatever order they were asked in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "hoplite.h"
#include "util.h"

#define NOBJ 9

/* Nodes 1..3 put NOBJ objects of `size` bytes between them; node 0 gets
 * them all with one call. Returns node 0's pulls_queued after. */
static uint64_t get_all_at(uint64_t size, const char *dir_args, const char *store_args) {
  hpl__lc *lc = th_cluster(4, 128ull << 20, dir_args, store_args);
  hpl_client *c[4];
  for (int i = 0; i < 4; i++) c[i] = th_connect(lc, i);
  char ids[NOBJ][32];
  const char *idp[NOBJ];
  for (int k = 0; k < NOBJ; k++) {
    snprintf(ids[k], sizeof ids[k], "in/%d", k);
    idp[k] = ids[k];
    th_put_pattern(c[1 + k % 3], ids[k], size, (uint64_t)k + 1);
  }
  hpl_buf *bufs[NOBJ];
  int rcs[NOBJ];
  assert_int_equal(hpl_get_many(c[0], idp, NOBJ, th_ms(30000), bufs, rcs), 0);
  for (int k = 0; k < NOBJ; k++) {
    assert_int_equal(rcs[k], 0);
    assert_int_equal(hpl_buf_size(bufs[k]), size);
    assert_true(th_check_pattern(hpl_buf_data(bufs[k]), size, (uint64_t)k + 1));
    hpl_release(c[0], bufs[k]);
  }
  uint64_t queued = th_counter(c[0], "pulls_queued");
  assert_int_equal(th_counter(c[0], "pulls_made"), NOBJ);
  for (int i = 0; i < 4; i++) hpl_close(c[i]);
  th_stop(lc, 0);
  return queued;
}

static uint64_t get_all(uint64_t size, const char *store_args) {
  return get_all_at(size, NULL, store_args);
}

static void test_large_pulls_take_turns(void **state) {
  (void)state;
  uint64_t q = get_all(2ull << 20, "--inbound-pulls 2");
  fprintf(stderr, "pulls that waited for a slot: %llu of %d\n", (unsigned long long)q, NOBJ);
  assert_true(q >= 1);
  assert_true(q <= NOBJ - 2);
}

static void test_no_limit(void **state) {
  (void)state;
  assert_int_equal(get_all(2ull << 20, "--inbound-pulls 0"), 0);
}

/* Partitions of 64 KiB take turns as well (puller.c: PULL_BIG is 32 KiB),
 * so that seven of them do not fill the receiver's inbound queue; 16 KiB
 * copies (the inline limit lowered so they are pulled) never wait. */
static void test_partitions_take_turns(void **state) {
  (void)state;
  uint64_t q = get_all_at(100u << 10, "--inline-max 8K", "--inbound-pulls 2");
  assert_true(q >= 1);
  assert_true(q <= NOBJ - 2);
  assert_int_equal(get_all_at(16u << 10, "--inline-max 8K", "--inbound-pulls 1"), 0);
}

/* Copies of 4 MiB or more never wait (puller.c: PULL_LONG). */
static void test_long_copies_never_wait(void **state) {
  (void)state;
  assert_int_equal(get_all(6ull << 20, "--inbound-pulls 1"), 0);
}

/* Node 0 gets one 2 MiB object from each of nodes 1..4, asked in the
 * reverse of the ring order (the farthest sender first), one slot. The
 * store's trace (HOPLITE_TRACE, inherited by the stores) gives the order
 * its pulls went in. */
typedef struct order_run {
  int by_ring[4];  /* senders (node indices), nearest following node 0 first */
  int pulled[4];   /* senders in the order their pulls went */
  int npulled;
  uint64_t holds;  /* node 0's pull_fill_holds after */
  uint64_t ms;     /* the gets took */
} order_run;

/* Wait for the k async gets node 0's client sent (tags 0..k-1); each must
 * bring its object intact. */
static void reap_gets(hpl_client *c, int k, const int *from) {
  int fd, left = k;
  assert_int_equal(hpl_async_fd(c, &fd), 0);
  uint64_t end = hpl__now_ms() + (uint64_t)th_ms(30000);
  while (left > 0) {
    hpl_completion done[4];
    int n = hpl_async_poll(c, done, 4);
    assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
      assert_int_equal(done[i].status, 0);
      assert_true(done[i].tag < (uint64_t)k);
      assert_true(th_check_pattern(hpl_buf_data(done[i].buf), 2ull << 20,
                                   (uint64_t)from[done[i].tag]));
      hpl_release(c, done[i].buf);
      left--;
    }
    if (n) continue;
    assert_true(hpl__now_ms() < end);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    (void)poll(&p, 1, 50);
  }
}

/* ask_first 0: the objects are put, then got with one call. 1: the gets
 * go out first (async), then the senders put, farthest first, 30 ms apart
 * (a shuffle whose gets are sent before its partitions are made). */
static void run_order(const char *store_args, int ask_first, order_run *r) {
  char trace[] = "/tmp/hpl-inbound-trace-XXXXXX";
  int fd = mkstemp(trace);
  assert_true(fd >= 0);
  close(fd);
  setenv("HOPLITE_TRACE", trace, 1);
  hpl__lc *lc = th_cluster(5, 128ull << 20, NULL, store_args);
  unsetenv("HOPLITE_TRACE"); /* (the stores have it; this process never traced) */
  hpl_client *c[5];
  uint64_t node[5];
  for (int i = 0; i < 5; i++) {
    c[i] = th_connect(lc, i);
    node[i] = th_node_id(c[i]);
  }
  for (int k = 0; k < 4; k++) r->by_ring[k] = k + 1;
  for (int a = 0; a < 4; a++)
    for (int b = a + 1; b < 4; b++)
      if (node[r->by_ring[b]] - node[0] < node[r->by_ring[a]] - node[0]) {
        int t = r->by_ring[a];
        r->by_ring[a] = r->by_ring[b];
        r->by_ring[b] = t;
      }
  char ids[4][32];
  const char *idp[4];
  int from[4];
  for (int k = 0; k < 4; k++) {
    from[k] = r->by_ring[3 - k]; /* asked farthest first */
    snprintf(ids[k], sizeof ids[k], "ring/%d", from[k]);
    idp[k] = ids[k];
  }
  uint64_t t0 = hpl__now_ms();
  if (ask_first) {
    for (int k = 0; k < 4; k++)
      assert_int_equal(hpl_async_get(c[0], idp[k], th_ms(30000), (uint64_t)k), 0);
    hpl_completion none[1];
    assert_true(hpl_async_poll(c[0], none, 0) >= 0); /* sends them */
    th_sleep_ms(50); /* (node 0's store has them all) */
    t0 = hpl__now_ms();
    for (int k = 0; k < 4; k++) {
      th_put_pattern(c[from[k]], ids[k], 2ull << 20, (uint64_t)from[k]);
      if (k < 3) th_sleep_ms(30);
    }
    reap_gets(c[0], 4, from);
  } else {
    for (int k = 0; k < 4; k++) th_put_pattern(c[from[k]], ids[k], 2ull << 20, (uint64_t)from[k]);
    t0 = hpl__now_ms();
    hpl_buf *bufs[4];
    int rcs[4];
    assert_int_equal(hpl_get_many(c[0], idp, 4, th_ms(30000), bufs, rcs), 0);
    for (int k = 0; k < 4; k++) {
      assert_int_equal(rcs[k], 0);
      assert_true(th_check_pattern(hpl_buf_data(bufs[k]), 2ull << 20, (uint64_t)from[k]));
      hpl_release(c[0], bufs[k]);
    }
  }
  r->ms = hpl__now_ms() - t0;
  r->holds = th_counter(c[0], "pull_fill_holds");
  for (int i = 0; i < 5; i++) hpl_close(c[i]);
  th_stop(lc, 0);
  FILE *f = fopen(trace, "r");
  assert_non_null(f);
  char line[512], ev[64], id[256];
  r->npulled = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%*s %*s %63s %255s", ev, id) == 2 && !strcmp(ev, "s.pullgo") &&
        !strncmp(id, "ring/", 5)) {
      fprintf(stderr, "pull %d: %s\n", r->npulled, id);
      if (r->npulled < 4) r->pulled[r->npulled] = atoi(id + 5);
      r->npulled++;
    }
  fclose(f);
  unlink(trace);
  assert_int_equal(r->npulled, 4);
}

/* All answers in at once: the pulls go in ring order, the nearest first,
 * whatever order they were asked in. Before, the first answer took the
 * free slot, so every receiver of a shuffle started on the same senders. */
static void test_ring_order_from_the_first(void **state) {
  (void)state;
  order_run r;
  run_order("--inbound-pulls 1", 0, &r);
  for (int k = 0; k < 4; k++) assert_int_equal(r.pulled[k], r.by_ring[k]);
  assert_int_equal(r.holds, 0); /* every answer was in before the first fill */
}

/* The gets go out before the objects are put (--fill-hold-ms long enough
 * for every answer): the first fill waits for the round's answers, so the
 * nearest sender goes first although it answered last, and the hold ends
 * when that answer came, not at its limit. Without the hold
 * (--fill-hold-ms 0) the first to answer, the farthest, goes first. */
/* The hold's limit in these tests: far longer than the puts take (~100 ms;
 * scaled with the suite's timeouts, for slow builds). */
static int64_t long_hold_ms(char *args, size_t len) {
  int64_t ms = th_ms(5000);
  snprintf(args, len, "--inbound-pulls 1 --fill-hold-ms %lld", (long long)ms);
  return ms;
}

static void test_first_fill_waits_for_its_round(void **state) {
  (void)state;
  order_run r;
  char args[96];
  int64_t limit = long_hold_ms(args, sizeof args);
  run_order(args, 1, &r);
  fprintf(stderr, "with the hold: %llu ms, %llu holds\n", (unsigned long long)r.ms,
          (unsigned long long)r.holds);
  assert_int_equal(r.holds, 1);
  assert_int_equal(r.pulled[0], r.by_ring[0]);
  assert_true((int64_t)r.ms < limit * 4 / 5); /* cut by the last answer, not at the limit */
  run_order("--inbound-pulls 1 --fill-hold-ms 0", 1, &r);
  assert_int_equal(r.holds, 0);
  assert_int_equal(r.pulled[0], r.by_ring[3]);
}

/* A get that waits for an object nobody has put yet does not hold back
 * a later get's copy (its ask round is over once it is answered), nor
 * does a lone get of an object that is there. */
static void test_waiting_get_holds_nothing(void **state) {
  (void)state;
  char args[96];
  int64_t limit = long_hold_ms(args, sizeof args);
  hpl__lc *lc = th_cluster(2, 128ull << 20, NULL, args);
  hpl_client *c0 = th_connect(lc, 0), *c1 = th_connect(lc, 1);
  assert_int_equal(hpl_async_get(c0, "later", th_ms(30000), 0), 0);
  hpl_completion none[1];
  assert_true(hpl_async_poll(c0, none, 0) >= 0);
  th_sleep_ms(50);
  th_put_pattern(c1, "now", 2ull << 20, 5);
  uint64_t t0 = hpl__now_ms();
  hpl_buf *b = NULL;
  assert_int_equal(hpl_get(c0, "now", th_ms(30000), &b), 0);
  uint64_t ms = hpl__now_ms() - t0;
  assert_true(th_check_pattern(hpl_buf_data(b), 2ull << 20, 5));
  hpl_release(c0, b);
  th_put_pattern(c1, "later", 2ull << 20, 2);
  int from[1] = {2};
  reap_gets(c0, 1, from);
  fprintf(stderr, "lone get beside a waiting one: %llu ms\n", (unsigned long long)ms);
  assert_int_equal(th_counter(c0, "pull_fill_holds"), 0);
  assert_true((int64_t)ms < limit * 4 / 5);
  hpl_close(c0);
  hpl_close(c1);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_large_pulls_take_turns),
      cmocka_unit_test(test_partitions_take_turns),
      cmocka_unit_test(test_no_limit),
      cmocka_unit_test(test_long_copies_never_wait),
      cmocka_unit_test(test_ring_order_from_the_first),
      cmocka_unit_test(test_first_fill_waits_for_its_round),
      cmocka_unit_test(test_waiting_get_holds_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
