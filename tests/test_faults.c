/* test_faults.c - failures of real processes and fault points: streams
 * resume from the bytes held, chains re-attach without cycles, reduce trees
 * reset their ancestors and stay correct, lost objects fail in bounded
 * time, a restarted directory is caught up, SIGTERM hands off. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1ull << 20)

static hpl__lc *cluster0(const char *dir_args) { return th_cluster(0, 0, dir_args, NULL); }

static int add(hpl__lc *lc, const char *args) {
  char err[512];
  char full[512];
  snprintf(full, sizeof full, "--memory 256M %s", args ? args : "");
  int i = hpl__lc_add_store(lc, full, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

static char *hexid(hpl_client *c, char *buf, size_t len) {
  snprintf(buf, len, "%llx", (unsigned long long)th_node_id(c));
  return buf;
}

/* A puts a 16 MiB object `id` and each of the n receivers gets it: a
 * healthy pull from which their stores learn their usual rates. */
static void learn_rates(hpl_client *A, const char *id, hpl_client **rx, int n) {
  hpl_buf *buf;
  th_put_pattern(A, id, 16 * MB, 5);
  for (int i = 0; i < n; i++) {
    assert_int_equal(hpl_get(rx[i], id, th_ms(20000), &buf), 0);
    hpl_release(rx[i], buf);
  }
}

/* The newest transfer record A's directory holds (0: none): records after
 * it belong to what comes next. */
static uint64_t last_xfer_seq(hpl_client *A) {
  size_t n;
  th_xfer *x = th_transfers(A, 0, &n);
  uint64_t seq = 0;
  for (size_t k = 0; k < n; k++)
    if (x[k].seq > seq) seq = x[k].seq;
  free(x);
  return seq;
}

/* A stream cut after 12 MiB: the receiver resumes from its 12 MiB; nothing
 * is sent or received twice. */
static void test_resume_offset(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  int b = add(lc, NULL);
  hpl_client *B = th_connect(lc, b);
  char bid[32], args[128];
  snprintf(args, sizeof args, "--faults drop_after=12M,to_node=%s", hexid(B, bid, sizeof bid));
  int a = add(lc, args);
  hpl_client *A = th_connect(lc, a);
  const uint64_t size = 32 * MB;
  th_put_pattern(A, "res/x", size, 1);
  hpl_buf *buf;
  assert_int_equal(hpl_get(B, "res/x", th_ms(20000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 1));
  hpl_release(B, buf);
  assert_int_equal(th_counter(B, "pull_failures"), 1);
  assert_int_equal(th_counter(B, "pull_resumes"), 1);
  assert_int_equal(th_counter(B, "bytes_kept_on_resume"), 12 * MB);
  assert_int_equal(th_counter(B, "data_bytes_received"), size); /* nothing twice */
  assert_int_equal(th_counter(A, "data_bytes_sent"), size);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* A sender that goes silent is left for another copy after a quiet window
 * (well before the stall timeout): the directory probes it, finds it alive
 * with a complete copy (so the path to it is at fault) and names another;
 * a crawling one (a straggler) too. The receiver keeps its bytes. */
static void stall_or_straggle(const char *fault, const char *recv_args, const char *counter) {
  hpl__lc *lc = cluster0(NULL);
  int b = add(lc, recv_args);
  hpl_client *B = th_connect(lc, b);
  char bid[32], args[160];
  snprintf(args, sizeof args, "--faults %s,prefix=st/,to_node=%s", fault,
           hexid(B, bid, sizeof bid));
  int a = add(lc, args);
  int c = add(lc, NULL);
  hpl_client *A = th_connect(lc, a), *C = th_connect(lc, c);
  const uint64_t size = 48 * MB;
  th_put_pattern(A, "st/x", size, 2);
  /* C makes a second complete copy (the fault only hits streams to B) */
  hpl_buf *buf;
  assert_int_equal(hpl_get(C, "st/x", th_ms(20000), &buf), 0);
  hpl_release(C, buf);
  /* B learns its usual rate from a healthy pull */
  th_put_pattern(C, "st-warm", 16 * MB, 3);
  assert_int_equal(hpl_get(B, "st-warm", th_ms(20000), &buf), 0);
  hpl_release(B, buf);
  uint64_t rx0 = th_counter(B, "data_bytes_received");
  uint64_t t0 = hpl__now_ms();
  /* the directory gives B the origin (A, first complete copy listed) */
  int rc = hpl_get(B, "st/x", th_ms(30000), &buf);
  uint64_t el = hpl__now_ms() - t0;
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(B));
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 2));
  hpl_release(B, buf);
  assert_int_equal(th_counter(B, counter), 1);
  assert_int_equal(th_counter(B, "pull_resumes"), 1);
  assert_true(th_counter(B, "bytes_kept_on_resume") > 0);
  assert_int_equal(th_counter(B, "data_bytes_received") - rx0, size);
  /* the rest came from C, quickly: well under the time A would need */
  assert_true(el < (uint64_t)th_ms(8000));
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
}

/* The straggler check (which would also end this stream, after 1 s at
 * under a fifth of the usual rate) is given 4 s here: on a loaded machine
 * the quiet window stretches towards it, and the test is about the quiet
 * window's path. */
static void test_stall_goes_elsewhere(void **state) {
  (void)state;
  stall_or_straggle("stall_after=8M", "--stall-timeout-ms 5000 --straggler-ms 4000",
                    "suspect_moves");
}

static void test_straggler_goes_elsewhere(void **state) {
  (void)state;
  /* 4 MB/s against the ~GB/s this node sees from healthy copies */
  stall_or_straggle("slow_send=4M", "--straggler-ms 1000 --straggler-ratio 0.2", "stragglers");
}

/* The same crawl with --straggler-ms 4000: finishing at 4 MB/s would take
 * far longer than the whole stream from another copy, so the crawl is
 * judged on half the window (2 s), counted as stragglers_early (before the
 * adaptive window: ended after the whole 4 s, stragglers_early 0). */
static void test_straggler_judged_early(void **state) {
  (void)state;
  stall_or_straggle("slow_send=4M", "--straggler-ms 4000 --straggler-ratio 0.2",
                    "stragglers_early");
}

/* C pulls behind B's partial copy, and B's stream to C crawls (4 MB/s)
 * while B itself still receives from A. C keeps that stream while no other
 * copy is free (it may only be as slow as B's upstream), and moves to A,
 * keeping its bytes, once A is complete and idle: well before the 12 s the
 * crawl would take. */
static void test_slow_partial_sender(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  int c = add(lc, "--straggler-ms 1000 --straggler-ratio 0.2");
  hpl_client *C = th_connect(lc, c);
  char cid[32], bid[32], args[160];
  snprintf(args, sizeof args, "--faults slow_send=4M,prefix=sp/,to_node=%s",
           hexid(C, cid, sizeof cid));
  int b = add(lc, args);
  hpl_client *B = th_connect(lc, b);
  snprintf(args, sizeof args, "--faults slow_send=24M,prefix=sp/,to_node=%s",
           hexid(B, bid, sizeof bid));
  int a = add(lc, args);
  hpl_client *A = th_connect(lc, a);
  /* C learns its usual rate from a healthy pull */
  hpl_buf *buf;
  th_put_pattern(A, "sp-warm", 16 * MB, 5);
  assert_int_equal(hpl_get(C, "sp-warm", th_ms(20000), &buf), 0);
  hpl_release(C, buf);
  const uint64_t size = 48 * MB;
  th_put_pattern(A, "sp/x", size, 4);
  uint64_t rx0 = th_counter(C, "data_bytes_received");
  th_getter gb = {.c = B, .id = "sp/x", .timeout = th_ms(60000), .size = size,
                  .want = th_pattern_sum(size, 4)};
  th_get_start(&gb); /* B takes A's one sending slot, for about 2 s */
  th_sleep_ms(200);
  uint64_t t0 = hpl__now_ms();
  int rc = hpl_get(C, "sp/x", th_ms(60000), &buf); /* so C pulls behind B */
  uint64_t el = hpl__now_ms() - t0;
  th_get_join(&gb);
  if (rc) fail_msg("get on C: %s (%s)", hpl_strerror(rc), hpl_errdetail(C));
  assert_int_equal(gb.rc, 0);
  assert_true(gb.ok);
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 4));
  hpl_release(C, buf);
  fprintf(stderr, "slow partial sender: C done in %llu ms\n", (unsigned long long)el);
  assert_int_equal(th_counter(C, "stragglers"), 1);
  assert_int_equal(th_counter(C, "pull_resumes"), 1);
  assert_true(th_counter(C, "bytes_kept_on_resume") > 0);
  assert_int_equal(th_counter(C, "data_bytes_received") - rx0, size);
  assert_true(el < (uint64_t)th_ms(8000));
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
}

/* A slow host in a chain: A (the origin, sending at 8 MB/s) -> P -> B -> C
 * -> D, where B's links crawl both ways (P's stream into B and everything B
 * sends run at 2 MB/s). B reports its own sender P first (it started
 * first), and moves off it; C then reports B. Nothing above B crawls, so B
 * is the topmost crawling node and C moves off it at once, keeping its
 * bytes (before: B had reported a crawl itself, so it passed for only as
 * slow as its upstream and C waited for an idle complete copy - P's, once
 * P was done, 3 s in). C moves to P, not to A: B's report against P does
 * not count while B is reported itself (before, C shared A's uplink with P
 * and kept about half as many bytes). */
static void test_slow_host_in_chain(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  const char *watch = "--straggler-ms 1000 --straggler-ratio 0.2";
  char args[200], bid[32];
  snprintf(args, sizeof args, "%s --faults slow_send=2M,prefix=sh/", watch);
  int b = add(lc, args);
  hpl_client *B = th_connect(lc, b);
  hexid(B, bid, sizeof bid);
  int c = add(lc, watch), d = add(lc, watch);
  hpl_client *C = th_connect(lc, c), *D = th_connect(lc, d);
  snprintf(args, sizeof args, "--faults slow_send=2M,prefix=sh/,to_node=%s", bid);
  int p = add(lc, args); /* learns no usual rate: judges nobody */
  hpl_client *P = th_connect(lc, p);
  int a = add(lc, "--faults slow_send=8M,prefix=sh/");
  hpl_client *A = th_connect(lc, a);
  hpl_client *rx[4] = {P, B, C, D};
  learn_rates(A, "sh-warm", rx + 1, 3); /* B, C and D (P judges nobody) */
  const uint64_t size = 24 * MB;
  th_put_pattern(A, "sh/x", size, 8);
  uint64_t rx0 = th_counter(C, "data_bytes_received");
  uint64_t seq = last_xfer_seq(A);
  uint64_t want = th_pattern_sum(size, 8), started_us[4];
  th_getter g[4];
  for (int i = 0; i < 4; i++) {
    g[i] = (th_getter){.c = rx[i], .id = "sh/x", .timeout = th_ms(60000), .size = size,
                       .want = want};
    started_us[i] = hpl__now_ns() / 1000;
    th_get_start(&g[i]);
    th_sleep_ms(i == 1 ? 300 : 100); /* P, then B well before C (B reports first), D */
  }
  for (int i = 0; i < 4; i++) {
    th_get_join(&g[i]);
    if (g[i].rc) fail_msg("receiver %c: %s", "PBCD"[i], hpl_strerror(g[i].rc));
    assert_true(g[i].ok);
  }
  /* the chain, and when C first got a sender other than B */
  size_t n;
  th_xfer *x = th_transfers(A, seq + 1, &n);
  uint64_t id[4], first[4] = {0}, moved_us = 0, moved_to = 0;
  for (int i = 0; i < 4; i++) id[i] = th_node_id(rx[i]);
  for (size_t k = 0; k < n; k++) {
    if (strcmp(x[k].kind, "assign") || strcmp(x[k].id, "sh/x")) continue;
    for (int i = 0; i < 4; i++)
      if (x[k].receiver == id[i] && !first[i]) first[i] = x[k].sender;
    if (x[k].receiver == id[2] && x[k].sender != id[1] && first[2] == id[1] && !moved_us) {
      moved_us = x[k].t_us;
      moved_to = x[k].sender;
    }
  }
  free(x);
  fprintf(stderr, "slow host: C moved off B %lld ms after its get began, to %s; C resumed %llu, "
          "kept %llu bytes\n", moved_us ? (long long)(moved_us - started_us[2]) / 1000 : -1LL,
          moved_to == id[0] ? "P" : moved_to == th_node_id(A) ? "A" : "another node",
          (unsigned long long)th_counter(C, "pull_resumes"),
          (unsigned long long)th_counter(C, "bytes_kept_on_resume"));
  assert_true(first[1] == id[0] && first[2] == id[1]); /* P -> B -> C */
  assert_true(moved_us != 0);
  /* B, the slow host, reported P; C reported B. P is then not taken for a
   * crawling node: C re-forms the chain on P rather than sharing A's
   * uplink with P */
  assert_true(moved_to == id[0]);
  /* B crawls from about 0.5 s after its start and reports; C's first report
   * comes half a window (0.5 s) after its own start */
  assert_true(moved_us - started_us[2] < (uint64_t)th_ms(2000) * 1000);
  assert_true(th_counter(C, "bytes_kept_on_resume") > 0);
  assert_int_equal(th_counter(C, "data_bytes_received") - rx0, size); /* nothing twice */
  hpl_close(A);
  hpl_close(P);
  hpl_close(B);
  hpl_close(C);
  hpl_close(D);
  th_stop(lc, 0);
}

/* A slow host right below the origin: A (complete; its stream to B paced
 * to 2 MB/s) -> B -> C -> D, where everything B sends is paced too. B's
 * pull from the complete A ends as a straggler, which counts as B's own
 * crawl report (AcquireReq.crawled). C then reports B and moves to A; D,
 * behind C, reports C crawling too, but C's sender was the topmost crawling
 * node and C has just moved off it, so D stays on C (before: nothing above
 * C was known to crawl, and D moved as well, onto A's uplink or onto B). */
static void test_slow_host_below_origin(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  const char *watch = "--straggler-ms 1000 --straggler-ratio 0.2";
  char args[200], bid[32];
  snprintf(args, sizeof args, "%s --faults slow_send=2M,prefix=sb/", watch);
  int b = add(lc, args);
  hpl_client *B = th_connect(lc, b);
  hexid(B, bid, sizeof bid);
  int c = add(lc, watch), d = add(lc, watch);
  hpl_client *C = th_connect(lc, c), *D = th_connect(lc, d);
  snprintf(args, sizeof args, "--faults slow_send=2M,prefix=sb/,to_node=%s", bid);
  int a = add(lc, args);
  hpl_client *A = th_connect(lc, a);
  hpl_client *rx[3] = {B, C, D};
  learn_rates(A, "sb-warm", rx, 3);
  const uint64_t size = 24 * MB;
  th_put_pattern(A, "sb/x", size, 9);
  uint64_t rxd = th_counter(D, "data_bytes_received");
  uint64_t seq = last_xfer_seq(A);
  uint64_t want = th_pattern_sum(size, 9);
  th_getter g[3];
  for (int i = 0; i < 3; i++) {
    g[i] = (th_getter){.c = rx[i], .id = "sb/x", .timeout = th_ms(60000), .size = size,
                       .want = want};
    th_get_start(&g[i]);
    th_sleep_ms(i == 0 ? 300 : 100); /* B well before C (B straggles first), then D */
  }
  for (int i = 0; i < 3; i++) {
    th_get_join(&g[i]);
    if (g[i].rc) fail_msg("receiver %c: %s", "BCD"[i], hpl_strerror(g[i].rc));
    assert_true(g[i].ok);
  }
  size_t n;
  th_xfer *x = th_transfers(A, seq + 1, &n);
  uint64_t id[3], ida = th_node_id(A), first[3] = {0}, moves[3] = {0}, c_to = 0;
  for (int i = 0; i < 3; i++) id[i] = th_node_id(rx[i]);
  for (size_t k = 0; k < n; k++) {
    if (strcmp(x[k].kind, "assign") || strcmp(x[k].id, "sb/x")) continue;
    for (int i = 0; i < 3; i++) {
      if (x[k].receiver != id[i]) continue;
      if (!first[i]) {
        first[i] = x[k].sender;
      } else if (x[k].sender != first[i]) {
        moves[i]++;
        if (i == 1 && !c_to) c_to = x[k].sender;
      }
    }
  }
  free(x);
  fprintf(stderr, "slow host below the origin: B straggled %llu times; C moved %llu times (first "
          "to %s); D moved %llu times\n",
          (unsigned long long)th_counter(B, "stragglers"), (unsigned long long)moves[1],
          c_to == ida ? "A" : c_to ? "another node" : "nowhere", (unsigned long long)moves[2]);
  assert_true(first[0] == ida && first[1] == id[0] && first[2] == id[1]); /* A -> B -> C -> D */
  assert_true(th_counter(B, "stragglers") >= 1);
  assert_true(c_to == ida);
  assert_int_equal(moves[2], 0);
  assert_int_equal(th_counter(D, "data_bytes_received") - rxd, size); /* nothing twice */
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  hpl_close(D);
  th_stop(lc, 0);
}

/* A broadcast chain: an origin feeding `nr` receivers slowly (24 MB/s), a
 * 48 MiB object `id` put there, and each receiver's get started 30 ms
 * after the last (arrival order = chain order), then 600 ms to get going.
 * r, C, g: the receivers' store indexes, clients and getters. */
static hpl_client *chain_start(hpl__lc *lc, const char *id, uint64_t seed, int nr, int *r,
                               hpl_client **C, th_getter *g) {
  int a = add(lc, "--faults slow_send=24M");
  hpl_client *A = th_connect(lc, a);
  for (int i = 0; i < nr; i++) {
    r[i] = add(lc, NULL);
    C[i] = th_connect(lc, r[i]);
  }
  const uint64_t size = 48 * MB;
  th_put_pattern(A, id, size, seed);
  uint64_t want = th_pattern_sum(size, seed);
  for (int i = 0; i < nr; i++) {
    g[i] = (th_getter){.c = C[i], .id = id, .size = size, .want = want, .timeout = th_ms(30000)};
    th_get_start(&g[i]);
    th_sleep_ms(30);
  }
  th_sleep_ms(600);
  return A;
}

/* kill -9 a receiver in the middle of a chain: the ones behind it
 * re-attach (no cycle, per-copy limit kept), keep their bytes, finish. */
static void test_chain_kill(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  enum { R = 5 };
  int r[R];
  hpl_client *C[R];
  th_getter g[R];
  hpl_client *A = chain_start(lc, "chain/x", 4, R, r, C, g);
  const uint64_t size = 48 * MB;
  /* find a receiver in the middle: it has a sender and a receiver */
  size_t n;
  th_xfer *x = th_transfers(A, 0, &n);
  int victim = -1;
  for (int i = 0; i < R && victim < 0; i++) {
    uint64_t id = th_node_id(C[i]);
    int up = 0, down = 0;
    for (size_t k = 0; k < n; k++) {
      if (strcmp(x[k].kind, "assign") || strcmp(x[k].id, "chain/x")) continue;
      up |= x[k].receiver == id;
      down |= x[k].sender == id;
    }
    if (up && down && i > 0) victim = i;
  }
  free(x);
  assert_true(victim > 0);
  /* its own client is still blocked in a get: that get fails when the store
   * dies; the handle is closed only after the thread is done with it */
  assert_int_equal(hpl__lc_signal(lc, r[victim], SIGKILL), 0);
  for (int i = 0; i < R; i++) {
    th_get_join(&g[i]);
    if (i == victim) {
      assert_int_equal(g[i].rc, HPL_ECONN);
      hpl_close(C[i]);
      continue;
    }
    if (g[i].rc) fail_msg("receiver %d: %s", i, hpl_strerror(g[i].rc));
    assert_true(g[i].ok);
  }
  x = th_transfers(A, 0, &n);
  char why[256];
  if (th_check_tree(x, n, "chain/", 1, NULL, why, sizeof why)) fail_msg("%s", why);
  free(x);
  /* somebody behind the victim resumed, keeping its bytes, fetching none twice */
  uint64_t kept = 0;
  for (int i = 0; i < R; i++) {
    if (i == victim) continue;
    kept += th_counter(C[i], "bytes_kept_on_resume");
    assert_int_equal(th_counter(C[i], "data_bytes_received"), size);
  }
  assert_true(kept > 0);
  for (int i = 0; i < R; i++)
    if (i != victim) hpl_close(C[i]);
  hpl_close(A);
  th_stop(lc, 0);
}

/* A receiver in the middle of a chain is stopped (SIGSTOP) for 2.5 s (less
 * than the 3 s heartbeat timeout of a node never heard from steadily): nothing
 * closes, yet the receivers behind it finish while it is still stopped,
 * keeping their bytes and receiving none twice; the directory found it by
 * a probe it did not answer. Once it runs again its own get completes too
 * and it serves as before. */
static void test_chain_pause(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  enum { R = 4 };
  int r[R];
  hpl_client *C[R];
  th_getter g[R];
  hpl_client *A = chain_start(lc, "pause/x", 6, R, r, C, g);
  const uint64_t size = 48 * MB;
  const int victim = 1; /* pulls from C[0], feeds C[2] */
  assert_int_equal(hpl__lc_signal(lc, r[victim], SIGSTOP), 0);
  uint64_t stopped = hpl__now_ms();
  th_sleep_ms(2500);
  uint64_t resumed = hpl__now_ms();
  assert_int_equal(hpl__lc_signal(lc, r[victim], SIGCONT), 0);
  uint64_t kept = 0;
  for (int i = 0; i < R; i++) {
    th_get_join(&g[i]);
    if (g[i].rc) fail_msg("receiver %d: %s", i, hpl_strerror(g[i].rc));
    assert_true(g[i].ok);
    if (i != victim && g[i].done_ms >= resumed)
      fail_msg("receiver %d finished %llu ms after the stop, only once the stopped store ran "
               "again", i, (unsigned long long)(g[i].done_ms - stopped));
    assert_int_equal(th_counter(C[i], "data_bytes_received"), size);
    if (i > victim) kept += th_counter(C[i], "bytes_kept_on_resume");
  }
  assert_true(kept > 0);
  assert_true(th_dir_counter(lc, "dir_suspects") >= 1);
  /* the receiver behind it noticed: a QUIET note at half its window (the
   * directory's probe then moved it), or a silent report at the whole */
  assert_true(
      th_counter(C[victim + 1], "quiet_notes") + th_counter(C[victim + 1], "pull_suspects") >= 1);
  /* the stopped store serves again */
  th_put_pattern(A, "pause/y", 4 * MB, 7);
  hpl_buf *b;
  assert_int_equal(hpl_get(C[victim], "pause/y", th_ms(10000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 4 * MB, 7));
  hpl_release(C[victim], b);
  for (int i = 0; i < R; i++) hpl_close(C[i]);
  hpl_close(A);
  th_stop(lc, 0);
}

/* A reduce test's cluster: n stores whose streams are slowed to 20 MB/s
 * (a reduce lasts long enough to fail a node in), clients C[0..n) (store
 * indexes idx[]), and on nodes 1..n-1, put in order, 24 MiB f32 sources
 * "<prefix>/s<i>" whose element j is i * 10 + j % 3 (ids[i], and srcs[i - 1]
 * names it); the sink (node 0) has none. Returns the element count. */
static size_t slow_sources(hpl__lc *lc, int n, const char *prefix, int *idx, hpl_client **C,
                           char ids[][32], const char **srcs) {
  for (int i = 0; i < n; i++) {
    idx[i] = add(lc, "--faults slow_send=20M");
    C[i] = th_connect(lc, idx[i]);
  }
  const size_t ne = 24 * MB / 4;
  float *d = malloc(ne * 4);
  assert_non_null(d);
  for (int i = 1; i < n; i++) {
    snprintf(ids[i], 32, "%s/s%d", prefix, i);
    srcs[i - 1] = ids[i];
    for (size_t j = 0; j < ne; j++) d[j] = (float)(i * 10 + (int)(j % 3));
    assert_int_equal(hpl_put(C[i], ids[i], d, ne * 4, th_ms(10000)), 0);
  }
  free(d);
  return ne;
}

/* The result of a slow_sources reduce over sources whose indexes add up to
 * `idsum`, `k` of them: element j is idsum * 10 + k * (j % 3). */
static void check_sum(hpl_buf *b, size_t n, int idsum, int k) {
  const float *res = hpl_buf_data(b);
  for (size_t j = 0; j < n; j++) {
    float want = (float)(idsum * 10 + k * (int)(j % 3));
    if (res[j] != want) fail_msg("element %zu: %f, want %f", j, res[j], want);
  }
}

/* A reduce tree loses a node mid-reduce: the spare source takes its slot,
 * ancestors restart, the result is right and says which sources it has. */
static void test_reduce_reset(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  enum { N = 6 };
  hpl_client *C[N];
  int idx[N];
  char ids[N][32];
  const char *srcs[N - 1];
  const size_t n = slow_sources(lc, N, "rr", idx, C, ids, srcs); /* sources on nodes 1..5 */
  /* 4 of 5: s1..s4 in the tree, s5 the spare */
  assert_int_equal(hpl_reduce(C[0], "rr/t", srcs, N - 1, 4, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   0);
  th_sleep_ms(400);
  /* kill the node of s2 (a slot in the middle of the chain) */
  hpl_close(C[2]);
  assert_int_equal(hpl__lc_signal(lc, idx[2], SIGKILL), 0);
  hpl_buf *b;
  int rc = hpl_get(C[0], "rr/t", th_ms(60000), &b);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  check_sum(b, n, 1 + 3 + 4 + 5, 4);
  hpl_release(C[0], b);
  char *text;
  assert_int_equal(hpl_reduce_sources(C[0], "rr/t", th_ms(5000), &text), 0);
  assert_null(strstr(text, "rr/s2"));
  assert_non_null(strstr(text, "rr/s5"));
  hpl_free(text);
  size_t nx;
  th_xfer *x = th_transfers(C[0], 0, &nx);
  int resets = 0;
  for (size_t k = 0; k < nx; k++) resets += !strcmp(x[k].kind, "reset") && !strcmp(x[k].id, "rr/t");
  assert_true(resets >= 1);
  free(x);
  for (int i = 0; i < N; i++)
    if (i != 2) hpl_close(C[i]);
  th_stop(lc, 0);
}

/* A reduce of all its sources (no spare) while the node of a middle slot is
 * stopped (SIGSTOP) for 1.5 s, less than the heartbeat timeout: its stream
 * goes silent, the directory probes the node, gets no answer and takes the
 * slot away - with no spare, the slot waits for a source. Once the node
 * answers again its source counts again and the reduce finishes with every
 * source (before, the slot waited for good and the get timed out). */
static void test_reduce_pause_no_spare(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  enum { N = 4 };
  hpl_client *C[N];
  int idx[N];
  char ids[N][32];
  const char *srcs[N - 1];
  const size_t n = slow_sources(lc, N, "rp", idx, C, ids, srcs); /* sources on nodes 1..3 */
  assert_int_equal(hpl_reduce(C[0], "rp/t", srcs, N - 1, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   0);
  th_sleep_ms(400);
  assert_int_equal(hpl__lc_signal(lc, idx[2], SIGSTOP), 0);
  th_sleep_ms(1500);
  assert_int_equal(hpl__lc_signal(lc, idx[2], SIGCONT), 0);
  hpl_buf *b;
  int rc = hpl_get(C[0], "rp/t", th_ms(20000), &b);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  check_sum(b, n, 1 + 2 + 3, 3);
  hpl_release(C[0], b);
  /* the path under test ran: the stopped node was judged unresponsive */
  assert_true(th_dir_counter(lc, "dir_suspects") >= 1);
  for (int i = 0; i < N; i++) hpl_close(C[i]);
  th_stop(lc, 0);
}

/* Two failures, one spare: the node of s2 stops (SIGSTOP) until the
 * directory judges it unresponsive and the spare s4 takes its slot; it
 * goes on (SIGCONT: once its slot went to the spare; being judged
 * unresponsive comes first, on a receiver's QUIET note, and the slot only
 * goes on the silent report), and then the node of s3 is killed. No spare is left,
 * but s2 is still on a live node: it takes the slot again (before, the
 * slot waited for a source that nothing would bring back, and the get
 * timed out - the hang of faults17's reduce-subset run). */
static void test_reduce_second_failure_reuses_lost(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  enum { N = 5 };
  hpl_client *C[N];
  int idx[N];
  char ids[N][32];
  const char *srcs[N - 1];
  const size_t n = slow_sources(lc, N, "r2", idx, C, ids, srcs); /* sources on nodes 1..4 */
  /* 3 of 4: s1..s3 in the tree, s4 the spare */
  assert_int_equal(hpl_reduce(C[0], "r2/t", srcs, N - 1, 3, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   0);
  th_sleep_ms(400);
  assert_int_equal(hpl__lc_signal(lc, idx[2], SIGSTOP), 0);
  uint64_t until = hpl__now_ms() + (uint64_t)th_ms(8000);
  while (th_dir_counter(lc, "dir_reduce_resets") + th_dir_counter(lc, "dir_reduce_resumes") == 0 &&
         hpl__now_ms() < until)
    th_sleep_ms(50);
  assert_int_equal(hpl__lc_signal(lc, idx[2], SIGCONT), 0);
  assert_true(th_dir_counter(lc, "dir_suspects") >= 1);
  assert_true(th_dir_counter(lc, "dir_reduce_resets") + th_dir_counter(lc, "dir_reduce_resumes") >=
              1);
  th_sleep_ms(200);
  hpl_close(C[3]);
  assert_int_equal(hpl__lc_signal(lc, idx[3], SIGKILL), 0);
  hpl_buf *b;
  int rc = hpl_get(C[0], "r2/t", th_ms(20000), &b);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  check_sum(b, n, 1 + 2 + 4, 3);
  hpl_release(C[0], b);
  assert_true(th_dir_counter(lc, "dir_reduce_lost_reused") >= 1);
  for (int i = 0; i < N; i++)
    if (i != 3) hpl_close(C[i]);
  th_stop(lc, 0);
}

/* The first slot of a chain is lost mid-reduce, so every other slot starts
 * over (a new generation): each writes its new generation into the buffer
 * of its old one, whose pages are already touched, instead of a new buffer
 * - where every page faults in as the bytes arrive, on every node of the
 * chain at once (issue 13: a restarted chain ran at 2/3 speed). So no
 * inner node ever holds more than its source and one stream. */
static void test_reduce_restart_reuses_streams(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  enum { N = 6 };
  hpl_client *C[N];
  int idx[N];
  char ids[N][32];
  const char *srcs[N - 1];
  const size_t n = slow_sources(lc, N, "ru", idx, C, ids, srcs);
  /* s1..s4 in slots 0..3 of the chain (s2..s4 run tasks), s5 the spare */
  assert_int_equal(hpl_reduce(C[0], "ru/t", srcs, N - 1, 4, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   0);
  th_sleep_ms(400);
  hpl_close(C[1]);
  assert_int_equal(hpl__lc_signal(lc, idx[1], SIGKILL), 0);
  hpl_buf *b;
  int rc = hpl_get(C[0], "ru/t", th_ms(60000), &b);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  check_sum(b, n, 2 + 3 + 4 + 5, 4);
  hpl_release(C[0], b);
  size_t nx;
  th_xfer *x = th_transfers(C[0], 0, &nx);
  int resets = 0;
  for (size_t k = 0; k < nx; k++) resets += !strcmp(x[k].kind, "reset") && !strcmp(x[k].id, "ru/t");
  free(x);
  assert_true(resets >= 1);
  /* the inner slots' nodes: a source and one stream at most (a second
   * stream's 24 MiB would show; the pool pads an allocation by far less) */
  for (int i = 2; i <= 4; i++) {
    uint64_t hw = th_counter(C[i], "pool_high_water");
    if (hw >= 2 * n * 4 + 8 * MB)
      fail_msg("node of s%d: pool high water %llu bytes: two generations' streams at once", i,
               (unsigned long long)hw);
  }
  for (int i = 0; i < N; i++)
    if (i != 1) hpl_close(C[i]);
  th_stop(lc, 0);
}

/* A reduce of s1..s4 (on nodes 1..4, a chain: s1..s4 in slots 0..3; the
 * sink, node 0, holds no source, so s4's slot is the root) whose source
 * s`v` also has a copy on a sixth node; node v is killed 400 ms in. The copy's
 * node takes the slot over where it stopped: its task starts at the byte
 * the slot's consumer (node `puller`: the parent's node, or the sink for the
 * root) had reached, not at 0; the consumer pulls on from there, and no
 * other slot starts over (no reset). Before, every ancestor and the target
 * started over from byte 0. */
static void resume_on_copy(const char *prefix, int v, int puller) {
  hpl__lc *lc = cluster0(NULL);
  enum { N = 5 };
  hpl_client *C[N];
  int idx[N];
  char ids[N][32], id[64];
  const char *srcs[N - 1];
  const size_t n = slow_sources(lc, N, prefix, idx, C, ids, srcs);
  int x = add(lc, "--faults slow_send=20M");
  hpl_client *X = th_connect(lc, x);
  hpl_buf *b;
  assert_int_equal(hpl_get(X, ids[v], th_ms(20000), &b), 0); /* the second copy */
  hpl_release(X, b);
  snprintf(id, sizeof id, "%s/t", prefix);
  assert_int_equal(hpl_reduce(C[0], id, srcs, N - 1, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)), 0);
  th_sleep_ms(400);
  hpl_close(C[v]);
  assert_int_equal(hpl__lc_signal(lc, idx[v], SIGKILL), 0);
  int rc = hpl_get(C[0], id, th_ms(60000), &b);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  check_sum(b, n, 1 + 2 + 3 + 4, 4);
  hpl_release(C[0], b);
  assert_int_equal(th_dir_counter(lc, "dir_reduce_resumes"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_reduce_resets"), 0);
  /* the copy's node resumed past byte 0, and the consumer pulled on */
  assert_int_equal(th_counter(X, "reduce_resumes"), 1);
  uint64_t skipped = th_counter(X, "reduce_resumed_bytes");
  if (skipped == 0 || skipped >= n * 4)
    fail_msg("resumed at byte %llu of %zu", (unsigned long long)skipped, n * 4);
  uint64_t moves = 0;
  for (int i = 0; i < N; i++)
    if (i != v) moves += th_counter(C[i], "reduce_child_moves");
  assert_int_equal(moves, 1);
  assert_int_equal(th_counter(C[puller], "reduce_child_moves"), 1);
  for (int i = 0; i < N; i++)
    if (i != v) hpl_close(C[i]);
  hpl_close(X);
  th_stop(lc, 0);
}

/* A slot in the middle of the chain (s2, slot 1, a task with s1 as its
 * child; its parent is s3's slot on node 3). */
static void test_reduce_resumes_on_copy(void **state) {
  (void)state;
  resume_on_copy("rz", 2, 3);
}

/* The root slot, on a node other than the sink: the sink pulls the rest of
 * the result from the root's new node, and the target keeps its bytes. */
static void test_reduce_root_resumes_on_copy(void **state) {
  (void)state;
  resume_on_copy("ro", 4, 0);
}

/* As above, and then the resumed slot's parent is lost too, with no copy
 * of its source: a spare takes the parent's slot, which starts over from
 * byte 0 - below where the resumed slot began. The resumed slot makes its
 * skipped bytes after all (a rebase) and the result is right. */
static void test_reduce_resumed_slot_rebases(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  enum { N = 6 };
  hpl_client *C[N];
  int idx[N];
  char ids[N][32];
  const char *srcs[N - 1];
  const size_t n = slow_sources(lc, N, "rb", idx, C, ids, srcs); /* s1..s5 on nodes 1..5 */
  int x = add(lc, "--faults slow_send=20M");
  hpl_client *X = th_connect(lc, x);
  hpl_buf *b;
  assert_int_equal(hpl_get(X, "rb/s2", th_ms(20000), &b), 0);
  hpl_release(X, b);
  /* 4 of 5: s1..s4 in slots 0..3 of the chain, s5 the spare */
  assert_int_equal(hpl_reduce(C[0], "rb/t", srcs, N - 1, 4, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   0);
  th_sleep_ms(400);
  hpl_close(C[2]);
  assert_int_equal(hpl__lc_signal(lc, idx[2], SIGKILL), 0);
  uint64_t until = hpl__now_ms() + (uint64_t)th_ms(5000);
  while (th_counter(X, "reduce_resumes") == 0 && hpl__now_ms() < until) th_sleep_ms(20);
  assert_int_equal(th_counter(X, "reduce_resumes"), 1);
  th_sleep_ms(150);
  hpl_close(C[3]); /* s3's slot: the resumed slot's parent */
  assert_int_equal(hpl__lc_signal(lc, idx[3], SIGKILL), 0);
  int rc = hpl_get(C[0], "rb/t", th_ms(60000), &b);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  check_sum(b, n, 1 + 2 + 4 + 5, 4);
  hpl_release(C[0], b);
  assert_int_equal(th_dir_counter(lc, "dir_reduce_resumes"), 1);
  assert_true(th_dir_counter(lc, "dir_reduce_resets") >= 1);
  assert_int_equal(th_counter(X, "reduce_rebases"), 1);
  for (int i = 0; i < N; i++)
    if (i != 2 && i != 3) hpl_close(C[i]);
  hpl_close(X);
  th_stop(lc, 0);
}

/* Every copy gone: the get fails with HPL_ELOST quickly, also mid-pull. */
static void test_lost_in_bounded_time(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  int a = add(lc, "--faults slow_send=8M");
  int b = add(lc, NULL);
  hpl_client *A = th_connect(lc, a), *B = th_connect(lc, b);
  th_put_pattern(A, "lost/x", 32 * MB, 5);
  th_getter g = {.c = B, .id = "lost/x", .size = 32 * MB, .want = th_pattern_sum(32 * MB, 5),
                 .timeout = th_ms(60000)};
  th_get_start(&g);
  th_sleep_ms(500);
  hpl_close(A);
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(hpl__lc_signal(lc, a, SIGKILL), 0);
  th_get_join(&g);
  assert_int_equal(g.rc, HPL_ELOST);
  assert_true(hpl__now_ms() - t0 < (uint64_t)th_ms(3000));
  /* later gets fail at once too */
  hpl_buf *buf;
  t0 = hpl__now_ms();
  assert_int_equal(hpl_get(B, "lost/x", th_ms(60000), &buf), HPL_ELOST);
  assert_true(hpl__now_ms() - t0 < (uint64_t)th_ms(1000));
  /* a new put revives the id */
  th_put_pattern(B, "lost/x", MB, 6);
  assert_int_equal(hpl_get(B, "lost/x", th_ms(5000), &buf), 0);
  hpl_release(B, buf);
  hpl_close(B);
  th_stop(lc, 0);
}

/* A node that stops heartbeating is declared dead; when it speaks again it
 * re-registers and its objects are served again. */
static void test_heartbeat_pause(void **state) {
  (void)state;
  hpl__lc *lc = cluster0("--heartbeat-ms 100 --heartbeat-timeout-ms 500");
  int a = add(lc, "--faults hb_pause=1500:1500");
  int b = add(lc, NULL);
  hpl_client *A = th_connect(lc, a), *B = th_connect(lc, b);
  th_put_pattern(A, "hb/x", 2 * MB, 7);
  th_sleep_ms(2300); /* inside the pause, past the timeout */
  uint64_t size;
  assert_int_equal(hpl_stat(B, "hb/x", th_ms(2000), &size, NULL, NULL, NULL), HPL_ELOST);
  th_sleep_ms(1500); /* the pause is over: A re-registers and re-reports */
  hpl_buf *buf;
  int rc = hpl_get(B, "hb/x", th_ms(10000), &buf);
  if (rc) fail_msg("get after the pause: %s (%s)", hpl_strerror(rc), hpl_errdetail(B));
  assert_true(th_check_pattern(hpl_buf_data(buf), 2 * MB, 7));
  hpl_release(B, buf);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* The directory is killed and restarted: gets issued meanwhile finish after
 * it, a transfer between stores is not interrupted, inline objects and a
 * running reduce come back. */
static void test_directory_restart(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  int a = add(lc, "--faults slow_send=16M,prefix=slow/");
  int b = add(lc, NULL), c = add(lc, NULL);
  hpl_client *A = th_connect(lc, a), *B = th_connect(lc, b), *C = th_connect(lc, c);
  th_put_pattern(A, "dr/x", 8 * MB, 8);
  th_put_pattern(A, "dr/small", 100, 9);
  th_put_pattern(A, "slow/y", 32 * MB, 10);
  th_getter slow = {.c = C, .id = "slow/y", .size = 32 * MB, .want = th_pattern_sum(32 * MB, 10),
                    .timeout = th_ms(60000)};
  th_get_start(&slow);
  th_sleep_ms(300); /* the slow transfer is under way */
  /* a reduce whose second source comes after the restart */
  float v[65536];
  for (int i = 0; i < 65536; i++) v[i] = 1.0f;
  assert_int_equal(hpl_put(B, "dr/r1", v, sizeof v, th_ms(5000)), 0);
  const char *srcs[2] = {"dr/r1", "dr/r2"};
  assert_int_equal(hpl_reduce(A, "dr/t", srcs, 2, 0, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)), 0);
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  th_getter g = {.c = B, .id = "dr/x", .size = 8 * MB, .want = th_pattern_sum(8 * MB, 8),
                 .timeout = th_ms(30000)};
  th_get_start(&g);
  th_sleep_ms(700);
  char err[256];
  if (hpl__lc_restart(lc, -1, err, sizeof err)) fail_msg("restart: %s", err);
  th_get_join(&g);
  if (g.rc) fail_msg("get across the restart: %s", hpl_strerror(g.rc));
  assert_true(g.ok);
  th_get_join(&slow);
  assert_int_equal(slow.rc, 0);
  assert_true(slow.ok);
  assert_int_equal(th_counter(C, "pull_resumes"), 0); /* never interrupted */
  hpl_buf *buf;
  assert_int_equal(hpl_get(C, "dr/small", th_ms(10000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), 100, 9));
  hpl_release(C, buf);
  for (int i = 0; i < 65536; i++) v[i] = 2.0f;
  assert_int_equal(hpl_put(C, "dr/r2", v, sizeof v, th_ms(5000)), 0);
  int rc = hpl_get(A, "dr/t", th_ms(20000), &buf);
  if (rc) fail_msg("reduce across the restart: %s (%s)", hpl_strerror(rc), hpl_errdetail(A));
  const float *r = hpl_buf_data(buf);
  for (int i = 0; i < 65536; i++) assert_true(r[i] == 3.0f);
  hpl_release(A, buf);
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
}

/* SIGTERM: the store leaves within its grace period; a receiver it could
 * not finish goes to another copy with its bytes; exit status 0. */
static void test_sigterm_handoff(void **state) {
  (void)state;
  hpl__lc *lc = cluster0(NULL);
  int b = add(lc, NULL);
  hpl_client *B = th_connect(lc, b);
  char bid[32], args[160];
  snprintf(args, sizeof args, "--grace-ms 400 --faults slow_send=8M,to_node=%s",
           hexid(B, bid, sizeof bid));
  int a = add(lc, args);
  int c = add(lc, NULL);
  hpl_client *A = th_connect(lc, a), *C = th_connect(lc, c);
  const uint64_t size = 32 * MB;
  th_put_pattern(A, "term/x", size, 11);
  hpl_buf *buf;
  assert_int_equal(hpl_get(C, "term/x", th_ms(10000), &buf), 0); /* a second copy */
  hpl_release(C, buf);
  th_getter g = {.c = B, .id = "term/x", .size = size, .want = th_pattern_sum(size, 11),
                 .timeout = th_ms(30000)};
  th_get_start(&g);
  th_sleep_ms(400); /* B pulls slowly from A */
  hpl_close(A);
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(hpl__lc_signal(lc, a, SIGTERM), 0);
  uint64_t took = hpl__now_ms() - t0;
  int st = hpl__lc_exit_status(lc, a);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_true(took < (uint64_t)th_ms(3000));
  th_get_join(&g);
  assert_int_equal(g.rc, 0);
  assert_true(g.ok);
  assert_int_equal(th_counter(B, "data_bytes_received"), size);
  uint32_t copies = 0;
  assert_int_equal(hpl_stat(B, "term/x", th_ms(5000), NULL, &copies, NULL, NULL), 0);
  assert_int_equal(copies, 2); /* B and C; A has left */
  /* an idle store leaves at once */
  t0 = hpl__now_ms();
  hpl_close(C);
  assert_int_equal(hpl__lc_signal(lc, c, SIGTERM), 0);
  assert_true(hpl__now_ms() - t0 < (uint64_t)th_ms(1500));
  hpl_close(B);
  th_stop(lc, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_resume_offset, th_teardown),
      cmocka_unit_test_teardown(test_stall_goes_elsewhere, th_teardown),
      cmocka_unit_test_teardown(test_straggler_goes_elsewhere, th_teardown),
      cmocka_unit_test_teardown(test_straggler_judged_early, th_teardown),
      cmocka_unit_test_teardown(test_slow_partial_sender, th_teardown),
      cmocka_unit_test_teardown(test_slow_host_in_chain, th_teardown),
      cmocka_unit_test_teardown(test_slow_host_below_origin, th_teardown),
      cmocka_unit_test_teardown(test_chain_kill, th_teardown),
      cmocka_unit_test_teardown(test_chain_pause, th_teardown),
      cmocka_unit_test_teardown(test_reduce_reset, th_teardown),
      cmocka_unit_test_teardown(test_reduce_pause_no_spare, th_teardown),
      cmocka_unit_test_teardown(test_reduce_second_failure_reuses_lost, th_teardown),
      cmocka_unit_test_teardown(test_reduce_restart_reuses_streams, th_teardown),
      cmocka_unit_test_teardown(test_reduce_resumes_on_copy, th_teardown),
      cmocka_unit_test_teardown(test_reduce_root_resumes_on_copy, th_teardown),
      cmocka_unit_test_teardown(test_reduce_resumed_slot_rebases, th_teardown),
      cmocka_unit_test_teardown(test_lost_in_bounded_time, th_teardown),
      cmocka_unit_test_teardown(test_heartbeat_pause, th_teardown),
      cmocka_unit_test_teardown(test_directory_restart, th_teardown),
      cmocka_unit_test_teardown(test_sigterm_handoff, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
