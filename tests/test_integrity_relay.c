/* test_integrity_relay.c - a byte-flipping relay on a data port: stores A
 * and C hold copies of a 4 MiB object and advertise relays in front of
 * their data ports (--data-advertise-port). The relays pass the handshake
 * and the frames' tags through untouched and flip one payload byte in the
 * middle of the first stream after they are armed, once. The receiver B
 * ends with the exact bytes (the unit is pulled again from the other
 * copy), counts the bad unit, and the directory counts the report. Real
 * servers on loopback. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"
#include "relay.h"

#define MB (1ull << 20)
#define FLIP_AT (2 * MB) /* byte of a stream (server to puller) flipped */

/* Shared by the relays: once armed, the first connection that carries
 * bytes from its store afterwards flips its byte FLIP_AT. */
static volatile int g_armed, g_flipped;
static const void *g_claim_relay; /* the connection that flips: its relay, */
static unsigned g_claim_conn;     /* and its number there */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* th_relay_fn of both relays (arg: the relay's own tag). */
static void flip_once(void *arg, unsigned conn, uint64_t at, uint8_t *buf, size_t n) {
  pthread_mutex_lock(&g_mu);
  if (g_armed && !g_claim_relay) {
    g_claim_relay = arg;
    g_claim_conn = conn;
  }
  int mine = g_claim_relay == arg && g_claim_conn == conn && !g_flipped;
  if (mine && at <= FLIP_AT && FLIP_AT < at + n) {
    buf[FLIP_AT - at] ^= 0x20;
    g_flipped = 1;
  }
  pthread_mutex_unlock(&g_mu);
}

static int add(hpl__lc *lc, const char *args) {
  char err[512], full[256];
  snprintf(full, sizeof full, "--memory 256M %s", args ? args : "");
  int i = hpl__lc_add_store(lc, full, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

static void test_flipping_relay(void **state) {
  (void)state;
  static const char tag_a = 'a', tag_c = 'c';
  th_relay *ra = th_relay_start(0, flip_once, (void *)&tag_a); /* targets set below */
  th_relay *rc = th_relay_start(0, flip_once, (void *)&tag_c);
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  char args[64];
  snprintf(args, sizeof args, "--data-advertise-port %d", th_relay_port(ra));
  int ia = add(lc, args);
  th_relay_set_target(ra, th_data_port(lc, ia));
  snprintf(args, sizeof args, "--data-advertise-port %d", th_relay_port(rc));
  int ic = add(lc, args);
  th_relay_set_target(rc, th_data_port(lc, ic));
  hpl_client *A = th_connect(lc, ia), *C = th_connect(lc, ic);
  hpl_client *B = th_connect(lc, add(lc, NULL));
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "relay/x", size, 21);
  hpl_buf *buf;
  assert_int_equal(hpl_get(C, "relay/x", th_ms(20000), &buf), 0); /* through A's relay, clean */
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 21));
  hpl_release(C, buf);
  g_armed = 1;
  assert_int_equal(hpl_get(B, "relay/x", th_ms(20000), &buf), 0);
  int exact = hpl_buf_size(buf) == size && th_check_pattern(hpl_buf_data(buf), size, 21);
  hpl_release(B, buf);
  assert_true(g_flipped); /* the relay did change a byte of B's first stream */
  assert_true(exact);
  assert_int_equal(th_counter(B, "corrupt_units"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), 1);
  assert_int_equal(th_counter(B, "auth_failures"), 0); /* tags passed untouched */
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
  th_relay_stop(ra);
  th_relay_stop(rc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_flipping_relay, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
