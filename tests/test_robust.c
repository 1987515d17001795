/* test_robust.c - malformed input to every server port and a killed store. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "frame.h"
#include "auth.h"
#include "harness.h"
#include "proto.h"
#include "util.h"

#define MB (1ull << 20)

static hpl__lc *lc;
static hpl_client *A, *B;

static int setup(void **state) {
  (void)state;
  lc = th_group_start(3, 256 * MB, NULL, (hpl_client **[]){&A, &B}, 2);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  th_group_stop(lc, (hpl_client *[]){A, B}, 2);
  return 0;
}

static int unix_connect(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

/* The cluster still works: a put on A and a get on B of a pulled object. */
static void still_serving(const char *id) {
  th_put_pattern(A, id, 2 * MB, 9);
  hpl_buf *b;
  int rc = hpl_get(B, id, th_ms(10000), &b);
  if (rc) fail_msg("get %s after abuse: %s (%s)", id, hpl_strerror(rc), hpl_errdetail(B));
  assert_true(th_check_pattern(hpl_buf_data(b), 2 * MB, 9));
  hpl_release(B, b);
}

static void send_all(int fd, const void *p, size_t n) {
  assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Bad frames of several kinds against one endpoint. */
typedef int (*opener)(void);

static void abuse(opener open_fn, int skip_hello) {
  uint8_t junk[200];
  for (int i = 0; i < 200; i++) junk[i] = (uint8_t)(i * 13 + 1);
  /* 1. garbage */
  int fd = open_fn();
  send_all(fd, junk, sizeof junk);
  assert_true(th_wire_closed(fd, (int)th_ms(5000)));
  close(fd);
  /* 2. a valid header announcing an enormous message */
  hpl__frame_hdr h = {.type = HPL__MSG_GET, .msg_len = 0x7fffffff, .req_id = 1};
  uint8_t hdr[HPL__FRAME_HDR_LEN];
  hpl__frame_encode_hdr(&h, hdr);
  fd = open_fn();
  send_all(fd, hdr, sizeof hdr);
  assert_true(th_wire_closed(fd, (int)th_ms(5000)));
  close(fd);
  /* 3. a header with an enormous payload */
  h.msg_len = 4;
  h.payload_len = 1ull << 62;
  hpl__frame_encode_hdr(&h, hdr);
  fd = open_fn();
  send_all(fd, hdr, sizeof hdr);
  assert_true(th_wire_closed(fd, (int)th_ms(5000)));
  close(fd);
  /* 4. a valid header whose message does not decode */
  h.msg_len = 3;
  h.payload_len = 0;
  hpl__frame_encode_hdr(&h, hdr);
  uint8_t frame[HPL__FRAME_HDR_LEN + 3];
  memcpy(frame, hdr, sizeof hdr);
  frame[HPL__FRAME_HDR_LEN] = 0x0a;
  frame[HPL__FRAME_HDR_LEN + 1] = 100;
  frame[HPL__FRAME_HDR_LEN + 2] = 'x';
  fd = open_fn();
  send_all(fd, frame, sizeof frame);
  assert_true(th_wire_closed(fd, (int)th_ms(5000)));
  close(fd);
  /* 5. a truncated frame, then the peer goes away: the server must cope */
  fd = open_fn();
  h.msg_len = 50;
  hpl__frame_encode_hdr(&h, hdr);
  send_all(fd, hdr, sizeof hdr);
  send_all(fd, junk, 10);
  close(fd);
  /* 6. many half-open connections at once, closed abruptly */
  int fds[32];
  for (int i = 0; i < 32; i++) {
    fds[i] = open_fn();
    send_all(fds[i], hdr, 7);
  }
  for (int i = 0; i < 32; i++) close(fds[i]);
  (void)skip_hello;
}

/* A raw TCP connection: without the handshake, whatever comes is refused
 * before it is parsed as frames. */
static int open_raw(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}
static int open_directory_raw(void) { return open_raw(hpl__lc_dir_port(lc)); }
static int open_data_port_raw(void) { return open_raw(th_data_port(lc, 1)); }
/* Authenticated: the bytes reach the framer. */
static int open_directory(void) {
  return th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
}
static int open_data_port(void) {
  return th_wire_connect(th_data_port(lc, 1), hpl__lc_secret(lc), HPL__ROLE_DATA);
}
static int open_client_socket(void) { return unix_connect(hpl__lc_socket(lc, 1)); }

static void test_directory_survives_bad_frames(void **state) {
  (void)state;
  abuse(open_directory_raw, 0);
  abuse(open_directory, 0);
  still_serving("robust/dir");
}

static void test_data_port_survives_bad_frames(void **state) {
  (void)state;
  abuse(open_data_port_raw, 0);
  abuse(open_data_port, 0);
  still_serving("robust/data");
  /* a well-formed PULL of an unknown object gets an error, not a hang */
  int fd = open_data_port();
  Hplpb__PullReq r = HPLPB__PULL_REQ__INIT;
  r.id = "no/such/object";
  size_t len;
  uint8_t *f = th_wire_frame(fd, HPL__MSG_PULL, 9, &r.base, NULL, 0, &len); /* tagged */
  send_all(fd, f, len);
  free(f);
  Hplpb__PullRep *rep = (Hplpb__PullRep *)th_wire_wait(fd, HPL__MSG_PULL_REP, 9); /* checked */
  assert_int_equal(rep->status, HPL_ENOTFOUND);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  close(fd);
}

static void test_client_socket_survives_bad_frames(void **state) {
  (void)state;
  abuse(open_client_socket, 1);
  still_serving("robust/client");
}

/* kill -9 a store: the directory and the other stores keep serving; what
 * only it held is reported lost, inline objects are still served. */
static void test_killed_store(void **state) {
  (void)state;
  hpl_client *C = th_connect(lc, 2);
  th_put_pattern(C, "only-on-c", 3 * MB, 4);
  th_put_pattern(C, "small-on-c", 100, 4);
  th_put_pattern(A, "on-a", 3 * MB, 5);
  hpl_close(C);
  assert_int_equal(hpl__lc_signal(lc, 2, SIGKILL), 0);
  hpl_buf *b;
  uint64_t t0 = hpl__now_ms();
  int rc = hpl_get(B, "only-on-c", th_ms(10000), &b);
  assert_int_equal(rc, HPL_ELOST);
  assert_true(hpl__now_ms() - t0 < (uint64_t)th_ms(5000));
  assert_int_equal(hpl_get(B, "small-on-c", th_ms(10000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 100, 4));
  hpl_release(B, b);
  assert_int_equal(hpl_get(B, "on-a", th_ms(10000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 3 * MB, 5));
  hpl_release(B, b);
  still_serving("robust/after-kill");
  /* the node comes back with a fresh store and takes part again */
  char err[256];
  if (hpl__lc_restart(lc, 2, err, sizeof err)) fail_msg("restart: %s", err);
  C = th_connect(lc, 2);
  assert_int_equal(hpl_get(C, "on-a", th_ms(10000), &b), 0);
  hpl_release(C, b);
  hpl_close(C);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_directory_survives_bad_frames),
      cmocka_unit_test(test_data_port_survives_bad_frames),
      cmocka_unit_test(test_client_socket_survives_bad_frames),
      cmocka_unit_test(test_killed_store),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
