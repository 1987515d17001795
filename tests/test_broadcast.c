/* test_broadcast.c - many gets of one object become a pipelined broadcast:
 * correct bytes everywhere, pulls overlapping the put, the directory's
 * sender choice within the per-copy limit and free of cycles, late joiners
 * served by complete copies. Real processes on loopback. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1ull << 20)
#define NODES 6


/* Receivers start while the put is still writing; they get the right bytes
 * and their pulls began before the put was sealed. The directory's record
 * obeys the per-copy limit and has no cycle. */
static void broadcast_during_put(int max_senders) {
  char args[64];
  snprintf(args, sizeof args, "--max-senders %d", max_senders);
  hpl__lc *lc = th_cluster(NODES, 512 * MB, args, NULL);
  hpl_client *c[NODES];
  for (int i = 0; i < NODES; i++) c[i] = th_connect(lc, i);
  const uint64_t size = 64 * MB;
  uint8_t *data = malloc(size);
  hpl__fill_pattern(data, size, 77);
  uint64_t want = hpl__checksum(data, size);
  const char *id = max_senders == 1 ? "bc/one" : "bc/two";
  uint64_t sent0 = th_counter(c[0], "data_bytes_sent");

  hpl_buf *b;
  assert_int_equal(hpl_create(c[0], id, size, th_ms(5000), &b), 0);
  th_getter r[NODES];
  for (int i = 1; i < NODES; i++) {
    r[i] = (th_getter){.c = c[i], .id = id, .timeout = th_ms(60000), .size = size, .want = want};
    th_get_start(&r[i]);
  }
  /* write in 8 steps, announcing progress, slowly enough that receivers
   * are pulling before the seal */
  uint8_t *dst = hpl_buf_data(b);
  for (int k = 0; k < 8; k++) {
    memcpy(dst + k * (size / 8), data + k * (size / 8), size / 8);
    assert_int_equal(hpl_buf_progress(c[0], b, (uint64_t)(k + 1) * (size / 8)), 0);
    th_sleep_ms(40);
  }
  assert_int_equal(hpl_seal(c[0], b, th_ms(5000)), 0);
  for (int i = 1; i < NODES; i++) {
    th_get_join(&r[i]);
    if (r[i].rc) fail_msg("node %d: %s", i, hpl_strerror(r[i].rc));
    assert_true(r[i].ok);
  }
  size_t n;
  th_xfer *x = th_transfers(c[0], 0, &n);
  uint64_t origin = th_node_id(c[0]);
  /* every receiver was assigned a sender, and before the origin's copy
   * became complete: the broadcast overlapped the put */
  uint64_t origin_done = 0;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(x[i].kind, "done") && x[i].receiver == origin && !strcmp(x[i].id, id))
      origin_done = x[i].t_us;
  assert_true(origin_done > 0);
  /* each receiver's first assignment came before it; on a loaded machine
   * a receiver may be moved once more later (a sender judged quiet), which
   * is not what this counts */
  int early = 0, nseen = 0, moves = 0;
  uint64_t seen[NODES];
  for (size_t i = 0; i < n; i++) {
    if (strcmp(x[i].kind, "assign") || strcmp(x[i].id, id)) continue;
    int known = 0;
    for (int k = 0; k < nseen; k++) known |= seen[k] == x[i].receiver;
    if (known) {
      moves++;
      continue;
    }
    assert_true(nseen < NODES - 1);
    seen[nseen++] = x[i].receiver;
    early += x[i].t_us < origin_done;
  }
  assert_int_equal(nseen, NODES - 1);
  assert_int_equal(early, NODES - 1);
  /* A receiver moved off a sender judged quiet may be handed a busy copy
   * (th_check_tree leaves moves out of the limit), and its bytes from the
   * origin are then one copy's more per move. */
  if (moves) print_message("  %d receiver(s) moved off a quiet sender\n", moves);
  char why[256];
  int peak = 0;
  int bad = th_check_tree(x, n, id, max_senders, &peak, why, sizeof why);
  if (bad) {
    for (size_t i = 0; i < n; i++) /* the record, to tell what happened */
      print_message("  seq %llu +%llu us %s %016llx <- %016llx %s\n", (unsigned long long)x[i].seq,
                    (unsigned long long)x[i].t_us, x[i].kind, (unsigned long long)x[i].receiver,
                    (unsigned long long)x[i].sender, x[i].id);
    fail_msg("%s", why);
  }
  assert_true(peak >= 1 && peak <= max_senders);
  uint64_t sent = th_counter(c[0], "data_bytes_sent") - sent0;
  if (max_senders == 1 && !moves) {
    /* a chain: the origin sends exactly one copy */
    assert_int_equal(sent, size);
  } else {
    assert_true(sent >= size && sent <= (uint64_t)(max_senders + moves) * size);
  }
  free(x);
  free(data);
  for (int i = 0; i < NODES; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

/* A 24 MiB object put at node 0 is got at node 1 and then, while node 1's
 * copy is still arriving (streams paced to 24 MB/s), at node 2. Streams go
 * from the pool with write(2) by default and with sendfile(2) under
 * --sendfile - node 0's from its complete copy, node 1's from a copy still
 * arriving; either way every byte arrives intact. */
static void sendfile_paths(int off) {
  hpl__lc *lc = th_cluster(3, 128 * MB, NULL,
                           off ? "--faults slow_send=24M"
                               : "--sendfile --faults slow_send=24M");
  hpl_client *c[3];
  for (int i = 0; i < 3; i++) c[i] = th_connect(lc, i);
  const uint64_t size = 24 * MB;
  th_put_pattern(c[0], "sf/x", size, 5);
  th_getter g1 = {.c = c[1], .id = "sf/x", .timeout = th_ms(30000), .size = size,
                  .want = th_pattern_sum(size, 5)};
  th_get_start(&g1);
  th_sleep_ms(300); /* node 1's copy is partial for about a second */
  th_getter g2 = g1;
  g2.c = c[2];
  th_get_start(&g2);
  th_get_join(&g1);
  th_get_join(&g2);
  assert_int_equal(g1.rc, 0);
  assert_int_equal(g2.rc, 0);
  assert_true(g1.ok && g2.ok);
  uint64_t sent = 0, sf = 0;
  for (int i = 0; i < 3; i++) {
    sent += th_counter(c[i], "data_bytes_sent");
    sf += th_counter(c[i], "sendfile_bytes");
  }
  assert_int_equal(sent, 2 * size); /* a chain: each copy sent once */
  assert_true(th_counter(c[1], "cpu_us") > 0); /* the store's own CPU time is counted */
  assert_int_equal(th_counter(c[0], "paced_conns"), 0); /* no --link-rate: unpaced */
  if (off)
    assert_int_equal(sf, 0);
  else /* a chunk may go by write when a reply is still queued ahead of it */
    assert_true(sf >= sent - 2 * 4 * MB);
  for (int i = 0; i < 3; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

/* --link-rate 80mbit: streams leave paced at 1.25 x 10 MB/s, so 8 MiB from
 * node 0 to node 1 take at least 0.67 s even on loopback (unpaced: a few
 * ms), the bytes arrive intact, and node 0 counts the paced connection. */
static void test_paced_streams(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, "--link-rate 80mbit");
  hpl_client *c[2] = {th_connect(lc, 0), th_connect(lc, 1)};
  const uint64_t size = 8 * MB;
  th_put_pattern(c[0], "pace/x", size, 9);
  th_getter g = {.c = c[1], .id = "pace/x", .timeout = th_ms(30000), .size = size,
                 .want = th_pattern_sum(size, 9)};
  th_get_start(&g);
  th_get_join(&g);
  assert_int_equal(g.rc, 0);
  assert_true(g.ok);
  if (g.ms < 600) fail_msg("8 MiB paced to 12.5 MB/s took %lld ms", (long long)g.ms);
  assert_true(th_counter(c[0], "paced_conns") >= 1);
  assert_int_equal(th_counter(c[0], "pace_failures"), 0);
  for (int i = 0; i < 2; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

static void test_sendfile_streams(void **state) {
  (void)state;
  sendfile_paths(0);
}

static void test_write_streams(void **state) {
  (void)state;
  sendfile_paths(1);
}

static void test_broadcast_during_put(void **state) {
  (void)state;
  broadcast_during_put(1);
}

static void test_broadcast_two_senders(void **state) {
  (void)state;
  broadcast_during_put(2);
}

/* A receiver that joins after copies completed pulls from a complete copy. */
static void test_late_joiner(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(4, 256 * MB, NULL, NULL);
  hpl_client *c[4];
  for (int i = 0; i < 4; i++) c[i] = th_connect(lc, i);
  th_put_pattern(c[0], "late/x", 8 * MB, 3);
  /* nodes 1 and 2 fetch it (one from the other, or both from node 0) */
  hpl_buf *b;
  assert_int_equal(hpl_get(c[1], "late/x", th_ms(10000), &b), 0);
  hpl_release(c[1], b);
  assert_int_equal(hpl_get(c[2], "late/x", th_ms(10000), &b), 0);
  hpl_release(c[2], b);
  assert_int_equal(hpl_get(c[3], "late/x", th_ms(10000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 8 * MB, 3));
  hpl_release(c[3], b);
  size_t n;
  th_xfer *x = th_transfers(c[0], 0, &n);
  uint64_t me = th_node_id(c[3]);
  /* replay: the sender given to node 3 had a complete copy at that moment */
  int found = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(x[i].kind, "assign") || x[i].receiver != me || strcmp(x[i].id, "late/x")) continue;
    found = 1;
    int complete = 0;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(x[j].kind, "done") && x[j].receiver == x[i].sender && !strcmp(x[j].id, "late/x"))
        complete = 1;
    assert_true(complete);
  }
  assert_true(found);
  free(x);
  for (int i = 0; i < 4; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

/* Many objects, many receivers at once: all bytes right, record clean. */
static void test_many_concurrent_broadcasts(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(NODES, 512 * MB, NULL, "--chunk 256K");
  hpl_client *c[NODES];
  for (int i = 0; i < NODES; i++) c[i] = th_connect(lc, i);
  enum { OBJS = 4 };
  char ids[OBJS][32];
  uint64_t sizes[OBJS] = {3 * MB + 17, 9 * MB, 70000, 20 * MB};
  uint64_t sums[OBJS];
  for (int k = 0; k < OBJS; k++) {
    snprintf(ids[k], sizeof ids[k], "many/%d", k);
    uint8_t *d = malloc(sizes[k]);
    hpl__fill_pattern(d, sizes[k], (uint64_t)k + 100);
    sums[k] = hpl__checksum(d, sizes[k]);
    /* objects start on different nodes */
    assert_int_equal(hpl_put(c[k % NODES], ids[k], d, sizes[k], th_ms(10000)), 0);
    free(d);
  }
  th_getter r[NODES][OBJS];
  for (int i = 0; i < NODES; i++)
    for (int k = 0; k < OBJS; k++) {
      r[i][k] = (th_getter){.c = c[i], .id = ids[k], .timeout = th_ms(60000), .size = sizes[k],
                            .want = sums[k]};
      th_get_start(&r[i][k]);
    }
  for (int i = 0; i < NODES; i++)
    for (int k = 0; k < OBJS; k++) {
      th_get_join(&r[i][k]);
      assert_int_equal(r[i][k].rc, 0);
      assert_true(r[i][k].ok);
    }
  size_t n;
  th_xfer *x = th_transfers(c[0], 0, &n);
  char why[256];
  if (th_check_tree(x, n, "many/", 1, NULL, why, sizeof why)) fail_msg("%s", why);
  free(x);
  for (int i = 0; i < NODES; i++) hpl_close(c[i]);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_paced_streams, th_teardown),
      cmocka_unit_test_teardown(test_sendfile_streams, th_teardown),
      cmocka_unit_test_teardown(test_write_streams, th_teardown),
      cmocka_unit_test_teardown(test_broadcast_during_put, th_teardown),
      cmocka_unit_test_teardown(test_broadcast_two_senders, th_teardown),
      cmocka_unit_test_teardown(test_late_joiner, th_teardown),
      cmocka_unit_test_teardown(test_many_concurrent_broadcasts, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
