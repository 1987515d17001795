/* test_connreuse.c - a store's pulls reuse idle connections to the
 * sender's data port (store/dconns.c, store/puller.c). On real processes:
 * one store gets several objects one after another from another store;
 * after the first, every pull takes the idle connection the last one left
 * (data_conns_reused grows, the sender sees one connection); a large copy
 * connects anew; idle ones go after --data-idle-ms; with reuse off every
 * pull connects anew; a sender that closes a connection as it is taken
 * again (the fault point cut_reused: what a restart or any drop of the
 * connection does at the worst moment) costs no get: the pull asks once
 * more on a new one; and a sender killed and started again on the same
 * port leaves no idle connection behind. Small copies (a few KiB, whose
 * reply comes in one read) are reused as well. With --link-rate or
 * --pull-window, copies' connections are opened with a bounded receive
 * buffer (data_conns_windowed; without either, none is), and a reduce
 * stream's connection, which keeps the kernel's sizing, is not kept for
 * copies. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"
#include "hoplite.h"

#define NOBJ 8

/* Object k's size: `base` or twice it (100 KiB: 100 and 200 KiB; 3 KiB
 * objects are copies only while the directory's inline limit is below them). */
#define SIZE(base, k) ((base) * ((k) % 2 ? 1u : 2u))

/* Node 1 puts NOBJ objects (below 4 MiB: store/fetch.c's REUSE_MAX);
 * node 0 gets them one after another, each checked. Returns the cluster;
 * c[0], c[1] its clients. */
static hpl__lc *get_in_turn_at(const char *dir_args, const char *store_args, uint32_t base,
                               hpl_client **c) {
  hpl__lc *lc = th_cluster(2, 64ull << 20, dir_args, store_args);
  c[0] = th_connect(lc, 0);
  c[1] = th_connect(lc, 1);
  for (int k = 0; k < NOBJ; k++) {
    char id[32];
    snprintf(id, sizeof id, "cr/%d", k);
    th_put_pattern(c[1], id, SIZE(base, k), (uint64_t)k + 1);
  }
  for (int k = 0; k < NOBJ; k++) {
    char id[32];
    snprintf(id, sizeof id, "cr/%d", k);
    hpl_buf *b = NULL;
    uint64_t size = SIZE(base, k);
    assert_int_equal(hpl_get(c[0], id, th_ms(20000), &b), 0);
    assert_int_equal(hpl_buf_size(b), size);
    assert_true(th_check_pattern(hpl_buf_data(b), size, (uint64_t)k + 1));
    hpl_release(c[0], b);
    /* the sender holds one connection at most: the one being reused */
    assert_true(th_counter(c[1], "data_conns") <= 1);
  }
  assert_int_equal(th_counter(c[0], "pulls_made"), NOBJ);
  assert_int_equal(th_counter(c[0], "pull_failures"), 0);
  return lc;
}

static hpl__lc *get_in_turn(const char *store_args, hpl_client **c) {
  return get_in_turn_at(NULL, store_args, 100u << 10, c);
}

static void stop(hpl__lc *lc, hpl_client **c) {
  hpl_close(c[0]);
  hpl_close(c[1]);
  th_stop(lc, 0);
}

static void test_pulls_reuse_the_connection(void **state) {
  (void)state;
  hpl_client *c[2];
  hpl__lc *lc = get_in_turn("--data-idle-ms 400", c);
  uint64_t opened = th_counter(c[0], "data_conns_opened");
  uint64_t reused = th_counter(c[0], "data_conns_reused");
  fprintf(stderr, "%d pulls: %llu connections opened, %llu reused\n", NOBJ,
          (unsigned long long)opened, (unsigned long long)reused);
  assert_int_equal(opened, 1);
  assert_int_equal(reused, NOBJ - 1);
  assert_int_equal(th_counter(c[0], "data_conns_retried"), 0);
  assert_int_equal(th_counter(c[0], "data_conns_idle"), 1);
  assert_int_equal(th_counter(c[1], "data_conns"), 1);
  /* a copy below 4 MiB (one that waits for an inbound slot) reuses it too */
  th_put_pattern(c[1], "cr/mid", 1u << 20, 76);
  hpl_buf *b = NULL;
  assert_int_equal(hpl_get(c[0], "cr/mid", th_ms(20000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 1u << 20, 76));
  hpl_release(c[0], b);
  assert_int_equal(th_counter(c[0], "data_conns_opened"), 1);
  assert_int_equal(th_counter(c[0], "data_conns_reused"), NOBJ);
  /* a longer one connects anew (fetch.c), and its connection is kept too */
  th_put_pattern(c[1], "cr/big", 5u << 20, 77);
  assert_int_equal(hpl_get(c[0], "cr/big", th_ms(20000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 5u << 20, 77));
  hpl_release(c[0], b);
  assert_int_equal(th_counter(c[0], "data_conns_opened"), 2);
  assert_int_equal(th_counter(c[0], "data_conns_reused"), NOBJ);
  assert_int_equal(th_counter(c[0], "data_conns_idle"), 2);
  /* their idle time over, the connections go, on both sides */
  int64_t until = th_ms(5000);
  for (int64_t t = 0; t < until; t += 50) {
    if (th_counter(c[0], "data_conns_idle") == 0 && th_counter(c[1], "data_conns") == 0) break;
    th_sleep_ms(50);
  }
  assert_int_equal(th_counter(c[0], "data_conns_idle"), 0);
  assert_int_equal(th_counter(c[1], "data_conns"), 0);
  /* and the next pull connects anew */
  th_put_pattern(c[1], "cr/late", 150u << 10, 99);
  assert_int_equal(hpl_get(c[0], "cr/late", th_ms(20000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 150u << 10, 99));
  hpl_release(c[0], b);
  assert_int_equal(th_counter(c[0], "data_conns_opened"), 3);
  assert_int_equal(th_counter(c[0], "data_conns_reused"), NOBJ);
  stop(lc, c);
}


/* Small copies (3 and 6 KiB, below the inline limit of 1 KiB here: pulled
 * from node 1) reuse the connection too. Their reply arrives in one read
 * with its header, so the puller asks whether the connection is between
 * frames from inside got() of bytes the framer had not yet moved past:
 * that made 90 % of the 8-host 4 KiB shuffle's pulls connect anew. */
static void test_small_pulls_reuse(void **state) {
  (void)state;
  hpl_client *c[2];
  hpl__lc *lc = get_in_turn_at("--inline-max 1K", "--data-idle-ms 5000", 3u << 10, c);
  assert_int_equal(th_counter(c[0], "data_conns_opened"), 1);
  assert_int_equal(th_counter(c[0], "data_conns_reused"), NOBJ - 1);
  assert_int_equal(th_counter(c[0], "data_conns_retried"), 0);
  assert_int_equal(th_counter(c[1], "data_conns"), 1);
  stop(lc, c);
}
/* A store told its link rate opens copies' connections with a bounded
 * receive buffer (1.25 ms of the link, at least 32 KiB: store/dconns.c),
 * and reuses them as before; --pull-window sets it outright, and 0, no
 * rate, or a window above net.core.rmem_max (which the kernel would cap
 * it to, never to grow it again) leaves it to the kernel. */
static void test_copy_windows(void **state) {
  (void)state;
  const char *args[] = {"--data-idle-ms 5000 --link-rate 200mbit",
                        "--data-idle-ms 5000 --pull-window 96K", "--data-idle-ms 5000",
                        "--data-idle-ms 5000 --link-rate 1gbit --pull-window 0",
                        "--data-idle-ms 5000 --pull-window 1G"};
  for (int i = 0; i < 5; i++) {
    hpl_client *c[2];
    hpl__lc *lc = get_in_turn(args[i], c);
    uint64_t windowed = th_counter(c[0], "data_conns_windowed");
    fprintf(stderr, "%s: %llu windowed\n", args[i], (unsigned long long)windowed);
    assert_int_equal(th_counter(c[0], "data_conns_opened"), 1);
    assert_int_equal(th_counter(c[0], "data_conns_reused"), NOBJ - 1);
    assert_int_equal(windowed, i < 2 ? 1 : 0);
    stop(lc, c);
  }
}

/* A reduce stream's connection keeps the kernel's sizing: when it ends it
 * is closed, not kept for copies (whose connections all have the store's
 * window). */
static void test_reduce_streams_not_windowed(void **state) {
  (void)state;
  hpl_client *c[2];
  hpl__lc *lc = get_in_turn("--data-idle-ms 5000 --pull-window 64K", c);
  uint64_t opened = th_counter(c[0], "data_conns_opened") + th_counter(c[1], "data_conns_opened");
  uint64_t windowed =
      th_counter(c[0], "data_conns_windowed") + th_counter(c[1], "data_conns_windowed");
  uint64_t idle = th_counter(c[0], "data_conns_idle") + th_counter(c[1], "data_conns_idle");
  assert_int_equal(windowed, 1);
  th_put_pattern(c[0], "rd/a", 1u << 20, 5);
  th_put_pattern(c[1], "rd/b", 1u << 20, 6);
  const char *src[2] = {"rd/a", "rd/b"};
  assert_int_equal(hpl_reduce(c[0], "rd/sum", src, 2, 2, HPL_OP_SUM, HPL_DT_U8, th_ms(10000)), 0);
  hpl_buf *b = NULL;
  assert_int_equal(hpl_get(c[0], "rd/sum", th_ms(20000), &b), 0);
  assert_int_equal(hpl_buf_size(b), 1u << 20);
  hpl_release(c[0], b);
  uint64_t opened2 = th_counter(c[0], "data_conns_opened") + th_counter(c[1], "data_conns_opened");
  uint64_t windowed2 =
      th_counter(c[0], "data_conns_windowed") + th_counter(c[1], "data_conns_windowed");
  uint64_t idle2 = th_counter(c[0], "data_conns_idle") + th_counter(c[1], "data_conns_idle");
  fprintf(stderr, "reduce: opened %llu -> %llu, windowed %llu -> %llu, idle %llu -> %llu\n",
          (unsigned long long)opened, (unsigned long long)opened2, (unsigned long long)windowed,
          (unsigned long long)windowed2, (unsigned long long)idle, (unsigned long long)idle2);
  assert_true(opened2 > opened); /* the reduce's stream came on a new connection */
  assert_int_equal(windowed2, windowed);
  assert_int_equal(idle2, idle);
  stop(lc, c);
}

static void test_reuse_off(void **state) {
  (void)state;
  hpl_client *c[2];
  hpl__lc *lc = get_in_turn("--data-idle-ms 0", c);
  assert_int_equal(th_counter(c[0], "data_conns_opened"), NOBJ);
  assert_int_equal(th_counter(c[0], "data_conns_reused"), 0);
  assert_int_equal(th_counter(c[0], "data_conns_idle"), 0);
  stop(lc, c);
}

/* The sender closes the first three connections taken again, unanswered:
 * each of those pulls asks again on a new connection (which the next one
 * reuses), and every get succeeds. */
static void test_closed_as_taken_retries(void **state) {
  (void)state;
  hpl_client *c[2];
  hpl__lc *lc = get_in_turn("--faults cut_reused=3", c);
  uint64_t opened = th_counter(c[0], "data_conns_opened");
  uint64_t reused = th_counter(c[0], "data_conns_reused");
  uint64_t retried = th_counter(c[0], "data_conns_retried");
  fprintf(stderr, "%d pulls: %llu connections opened, %llu reused, %llu retried\n", NOBJ,
          (unsigned long long)opened, (unsigned long long)reused, (unsigned long long)retried);
  assert_int_equal(retried, 3);
  assert_int_equal(reused, NOBJ - 1);
  assert_int_equal(opened, 1 + 3);
  stop(lc, c);
}

/* The sender is killed and started again on the same data port: the
 * receiver's idle connection to it is gone (the cache heard the close),
 * and the next get from the new store connects anew and succeeds. */
static void test_sender_restarted(void **state) {
  (void)state;
  hpl_client *c[2];
  hpl__lc *lc = get_in_turn(NULL, c);
  assert_int_equal(th_counter(c[0], "data_conns_idle"), 1);
  int port = th_data_port(lc, 1);
  assert_true(port > 0);
  hpl_close(c[1]);
  assert_int_equal(hpl__lc_signal(lc, 1, SIGKILL), 0);
  char args[64], err[256];
  snprintf(args, sizeof args, "--data-listen 127.0.0.1:%d", port);
  assert_int_equal(hpl__lc_set_store_args(lc, 1, args), 0);
  if (hpl__lc_restart(lc, 1, err, sizeof err)) fail_msg("restart: %s", err);
  assert_int_equal(th_data_port(lc, 1), port);
  int64_t until = th_ms(5000);
  for (int64_t t = 0; t < until && th_counter(c[0], "data_conns_idle") != 0; t += 20)
    th_sleep_ms(20);
  assert_int_equal(th_counter(c[0], "data_conns_idle"), 0);
  c[1] = th_connect(lc, 1);
  th_put_pattern(c[1], "cr/after", 120u << 10, 42);
  hpl_buf *b = NULL;
  assert_int_equal(hpl_get(c[0], "cr/after", th_ms(20000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 120u << 10, 42));
  hpl_release(c[0], b);
  assert_int_equal(th_counter(c[0], "data_conns_opened"), 2);
  assert_int_equal(th_counter(c[0], "pull_failures"), 0);
  stop(lc, c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_pulls_reuse_the_connection, th_teardown),
      cmocka_unit_test_teardown(test_small_pulls_reuse, th_teardown),
      cmocka_unit_test_teardown(test_copy_windows, th_teardown),
      cmocka_unit_test_teardown(test_reduce_streams_not_windowed, th_teardown),
      cmocka_unit_test_teardown(test_reuse_off, th_teardown),
      cmocka_unit_test_teardown(test_closed_as_taken_retries, th_teardown),
      cmocka_unit_test_teardown(test_sender_restarted, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
