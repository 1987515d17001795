/* test_encrypt.c - --encrypt (auth.h, frame.h: sealed connections). An
 * on-path TCP relay records what it carries and looks for 1 KiB of an
 * object's bytes in it: an inline object a store behind the relay gets
 * from the directory, and a 4 MiB object pulled from a data port
 * advertised through the relay. Without --encrypt the relay finds them
 * (the check works), with it never; the bytes arrive exact either way. A
 * relay that flips one ciphertext byte gets the connection closed (counted
 * in auth_failures). Real servers on loopback. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "relay.h"

#define MB (1ull << 20)
#define PAT 1024
#define REC_CAP (16 * MB)

/* What the relay (relay.h) saw: what the server side sent, recorded (up
 * to REC_CAP); with flip, the byte right after the first frame header of
 * the first connection (its message's or tag's first byte, after the
 * 72-byte CHALLENGE) is flipped, once. */
typedef struct seen {
  int flip, flipped;
  uint8_t *rec;
  size_t rlen;
} seen;

/* th_relay_fn: flip (once) and record. */
static void record(void *arg, unsigned conn, uint64_t at, uint8_t *buf, size_t n) {
  seen *v = arg;
  const uint64_t flip_at = 72 + 32;
  if (v->flip && !v->flipped && conn == 0 && at <= flip_at && flip_at < at + n) {
    buf[flip_at - at] ^= 0x01;
    v->flipped = 1;
  }
  size_t room = REC_CAP - v->rlen, take = n < room ? n : room;
  memcpy(v->rec + v->rlen, buf, take);
  v->rlen += take;
}

static th_relay *relay_start(seen *v, int target, int flip) {
  *v = (seen){.flip = flip, .rec = malloc(REC_CAP)};
  assert_non_null(v->rec);
  return th_relay_start(target, record, v);
}

/* Stops the relay; 1 if it carried pat[0, PAT). */
static int relay_stop(th_relay *r, seen *v, const uint8_t *pat) {
  th_relay_stop(r);
  int found = memmem(v->rec, v->rlen, pat, PAT) != NULL;
  fprintf(stderr, "relay: %zu bytes from the server side, pattern %s\n", v->rlen,
          found ? "FOUND" : "not found");
  free(v->rec);
  return found;
}

static void fill(uint8_t *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = (uint8_t)(x >> 24);
  }
}

/* A 1 KiB inline object put on node 0; a store behind the relay (to the
 * directory) gets it. Returns whether the relay saw its bytes; with
 * `flip`, asserts the flipped frame closed a connection. */
static int inline_through_relay(int encrypt, int flip) {
  const char *args = encrypt ? "--encrypt" : NULL;
  hpl__lc *lc = th_cluster(1, 64 * MB, args, args);
  hpl_client *c0 = th_connect(lc, 0);
  uint8_t obj[PAT];
  fill(obj, sizeof obj, 7);
  seen v;
  th_relay *r = relay_start(&v, hpl__lc_dir_port(lc), flip);
  char work[] = "/tmp/hpl-enc-XXXXXX", sock[128], ready[128], log[128], dir[64];
  assert_non_null(mkdtemp(work));
  snprintf(sock, sizeof sock, "%s/store.sock", work);
  snprintf(ready, sizeof ready, "%s/ready", work);
  snprintf(log, sizeof log, "%s/store.log", work);
  snprintf(dir, sizeof dir, "127.0.0.1:%d", th_relay_port(r));
  pid_t pid =
      th_spawn_store(dir, sock, ready, hpl__lc_secret(lc), log, encrypt ? "--encrypt" : NULL);
  for (int i = 0; i < 200 && access(ready, F_OK) != 0; i++) th_sleep_ms(50);
  assert_int_equal(access(ready, F_OK), 0);
  hpl_client *c = NULL;
  assert_int_equal(hpl_connect(sock, th_ms(5000), &c), 0);
  assert_int_equal(hpl_put(c0, "enc/x", obj, sizeof obj, th_ms(5000)), 0);
  hpl_buf *b = NULL;
  int rc = hpl_get(c, "enc/x", th_ms(10000), &b);
  int right = rc == 0 && hpl_buf_size(b) == PAT && memcmp(hpl_buf_data(b), obj, PAT) == 0;
  if (rc == 0) hpl_release(c, b);
  uint64_t authf = th_counter(c, "auth_failures");
  hpl_close(c);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  int found = relay_stop(r, &v, obj);
  hpl_close(c0);
  th_stop(lc, 0);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "grep -m3 -i 'mac\\|open\\|seal' %s >&2; rm -rf %s", log, work);
  if (system(cmd)) {
  }
  fprintf(stderr, "encrypt %d flip %d: get %s, auth_failures %llu\n", encrypt, flip,
          hpl_strerror(rc), (unsigned long long)authf);
  assert_true(right); /* the store's link reconnects after a closed connection */
  if (flip) {
    assert_int_equal(v.flipped, 1);
    assert_true(authf >= 1);
  }
  return found;
}

static void test_inline_clear(void **state) {
  (void)state;
  assert_true(inline_through_relay(0, 0)); /* the relay can see an inline object */
}

static void test_inline_sealed(void **state) {
  (void)state;
  assert_false(inline_through_relay(1, 0));
}

static void test_flipped_byte_closes(void **state) {
  (void)state;
  assert_false(inline_through_relay(1, 1));
}

/* A 4 MiB object broadcast from A to B, A's data port advertised through
 * the relay. Returns whether the relay saw 1 KiB of it. */
static int stream_through_relay(int encrypt) {
  const char *args = encrypt ? "--encrypt" : NULL;
  seen v;
  th_relay *r = relay_start(&v, 0, 0); /* its target is set below */
  hpl__lc *lc = th_cluster(0, 0, args, NULL);
  char sargs[128], err[512];
  snprintf(sargs, sizeof sargs, "--memory 64M --data-advertise-port %d%s", th_relay_port(r),
           encrypt ? " --encrypt" : "");
  int ia = hpl__lc_add_store(lc, sargs, err, sizeof err);
  if (ia < 0) fail_msg("add store: %s", err);
  th_relay_set_target(r, th_data_port(lc, ia));
  snprintf(sargs, sizeof sargs, "--memory 64M%s", encrypt ? " --encrypt" : "");
  int ib = hpl__lc_add_store(lc, sargs, err, sizeof err);
  if (ib < 0) fail_msg("add store: %s", err);
  hpl_client *A = th_connect(lc, ia), *B = th_connect(lc, ib);
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "enc/big", size, 33);
  hpl_buf *buf;
  uint8_t pat[PAT];
  assert_int_equal(hpl_get(A, "enc/big", th_ms(5000), &buf), 0);
  memcpy(pat, (const uint8_t *)hpl_buf_data(buf) + 3 * MB + 17, PAT);
  hpl_release(A, buf);
  assert_int_equal(hpl_get(B, "enc/big", th_ms(20000), &buf), 0);
  int exact = hpl_buf_size(buf) == size && th_check_pattern(hpl_buf_data(buf), size, 33);
  hpl_release(B, buf);
  uint64_t authf = th_counter(B, "auth_failures");
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
  int found = relay_stop(r, &v, pat);
  assert_true(exact);
  assert_int_equal(authf, 0);
  assert_true(v.rlen >= size); /* the stream did go through the relay */
  return found;
}

static void test_stream_clear(void **state) {
  (void)state;
  assert_true(stream_through_relay(0));
}

static void test_stream_sealed(void **state) {
  (void)state;
  assert_false(stream_through_relay(1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_inline_clear, th_teardown),
      cmocka_unit_test_teardown(test_inline_sealed, th_teardown),
      cmocka_unit_test_teardown(test_flipped_byte_closes, th_teardown),
      cmocka_unit_test_teardown(test_stream_clear, th_teardown),
      cmocka_unit_test_teardown(test_stream_sealed, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
