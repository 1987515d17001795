/* test_dir_waiters.c - a store's pending ACQUIREs (waiters) at the
 * directory when its node goes away or moves to another connection.
 *
 * A real store holds object X; node N speaks the store<->directory
 * protocol over raw TCP: it asks for X (and is given the store as its
 * sender: N now holds a partial copy), then asks again while that copy is
 * busy, so its second ACQUIRE waits. Then N re-registers on a new
 * connection, or falls silent until the liveness sweep declares it dead,
 * or closes its connection: each time N's partial copy is dropped, which
 * re-examines X's waiters, and the directory must neither serve N's old
 * waiter nor crash. Last, one connection cannot register two nodes (that
 * would leave the first one's waiters on a connection it no longer owns). */
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
#include <unistd.h>
#include <cmocka.h>

#include "frame.h"
#include "harness.h"
#include "proto.h"
#include "util.h"

#define NODE_ID 0x5eed0001ull

static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

static void wire_send(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  size_t len;
  uint8_t *f = hpl__msg_frame(type, req, m, 0, &len);
  assert_non_null(f);
  assert_int_equal(send(fd, f, len, MSG_NOSIGNAL), (ssize_t)len);
  free(f);
}

/* Read exactly n bytes within the deadline: 0, or -1 on EOF/error/timeout. */
static int read_full(int fd, uint8_t *p, size_t n, uint64_t deadline) {
  while (n) {
    int64_t left = hpl__ms_left(deadline);
    if (left == 0) return -1;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int pr = poll(&pf, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return -1;
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* The next frame of `type` with request id `req` (others are skipped, as
 * are payloads). Fails the test if none arrives in time. */
static ProtobufCMessage *wire_wait(int fd, unsigned type, uint64_t req) {
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  hpl__frame_limits lim = {.max_msg = 1u << 20, .max_payload = 1u << 24,
                           .max_type = HPL__MSG_MAX_};
  for (;;) {
    uint8_t hdr[HPL__FRAME_HDR_LEN];
    hpl__frame_hdr h;
    if (read_full(fd, hdr, sizeof hdr, deadline)) fail_msg("no %s reply", hpl__msg_name(type));
    assert_int_equal(hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, &h, NULL), 0);
    uint8_t *msg = malloc(h.msg_len + h.payload_len + 1);
    assert_non_null(msg);
    assert_int_equal(read_full(fd, msg, h.msg_len + h.payload_len, deadline), 0);
    if (h.type == type && h.req_id == req) {
      ProtobufCMessage *m = hpl__msg_unpack(h.type, msg, h.msg_len);
      free(msg);
      assert_non_null(m);
      return m;
    }
    free(msg);
  }
}

/* 1 if the peer closes the connection within timeout_ms (what it sends
 * first is skipped). */
static int closed_by_peer(int fd, int64_t timeout_ms) {
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  uint8_t b;
  while (read_full(fd, &b, 1, deadline) == 0) {
  }
  return hpl__ms_left(deadline) > 0;
}

static void do_register(int fd, uint64_t req) {
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = NODE_ID;
  r.addr = "127.0.0.1";
  r.data_port = 9;
  r.name = "raw";
  wire_send(fd, HPL__MSG_REGISTER, req, &r.base);
  Hplpb__RegisterRep *rep = (Hplpb__RegisterRep *)wire_wait(fd, HPL__MSG_REGISTER_REP, req);
  assert_int_equal(rep->status, 0);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/* A round trip on fd: everything sent before has been handled. */
static void sync_heartbeat(int fd, uint64_t req) {
  Hplpb__Heartbeat hb = HPLPB__HEARTBEAT__INIT;
  hb.node_id = NODE_ID;
  wire_send(fd, HPL__MSG_HEARTBEAT, req, &hb.base);
  protobuf_c_message_free_unpacked(wire_wait(fd, HPL__MSG_REPLY, req), NULL);
}

/* The directory process is alive and answers; returns a counter's value. */
static uint64_t dir_counter(hpl__lc *lc, const char *name) {
  char err[256];
  if (hpl__lc_check(lc, err, sizeof err)) fail_msg("directory died: %s", err);
  int fd = tcp_connect(hpl__lc_dir_port(lc));
  Hplpb__CountersReq r = HPLPB__COUNTERS_REQ__INIT;
  wire_send(fd, HPL__MSG_COUNTERS, 7, &r.base);
  Hplpb__CountersRep *rep = (Hplpb__CountersRep *)wire_wait(fd, HPL__MSG_COUNTERS_REP, 7);
  uint64_t v = UINT64_MAX;
  for (size_t i = 0; i < rep->n_counters; i++)
    if (!strcmp(rep->counters[i]->name, name)) v = rep->counters[i]->value;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  close(fd);
  assert_true(v != UINT64_MAX);
  return v;
}

/* An ACQUIRE of `id` that must be answered with a sender at once; returns
 * the sender's node id. */
static uint64_t acquire_now(int fd, const char *id, uint64_t req) {
  Hplpb__AcquireReq q = HPLPB__ACQUIRE_REQ__INIT;
  q.id = (char *)id;
  q.timeout_ms = 0;
  wire_send(fd, HPL__MSG_ACQUIRE, req, &q.base);
  Hplpb__AcquireRep *rep = (Hplpb__AcquireRep *)wire_wait(fd, HPL__MSG_ACQUIRE_REP, req);
  assert_int_equal(rep->status, 0);
  uint64_t sender = rep->sender_node;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return sender;
}

/* A store holds `id` (2 MiB); N registers, is given the store as its
 * sender for `id`, and asks again: that ACQUIRE waits (the only other copy
 * is busy serving N). Returns N's connection. */
static int node_waiting(hpl__lc *lc, const char *id) {
  hpl_client *c = th_connect(lc, 0);
  th_put_pattern(c, id, 2u << 20, 1);
  uint64_t store = th_node_id(c);
  hpl_close(c);
  int fd = tcp_connect(hpl__lc_dir_port(lc));
  do_register(fd, 1);
  assert_int_equal(acquire_now(fd, id, 2), store);
  Hplpb__AcquireReq q = HPLPB__ACQUIRE_REQ__INIT;
  q.id = (char *)id;
  q.timeout_ms = th_ms(60000);
  wire_send(fd, HPL__MSG_ACQUIRE, 3, &q.base);
  sync_heartbeat(fd, 4);
  assert_int_equal(dir_counter(lc, "dir_waits"), 1);
  return fd;
}

/* N, on `fd` (a new connection if -1), is given a sender for `id` at
 * once: its old waiter neither holds the store's copy busy nor was
 * served. Then the cluster stops. */
static void served_again_and_stop(hpl__lc *lc, int fd, const char *id) {
  if (fd < 0) {
    fd = tcp_connect(hpl__lc_dir_port(lc));
    do_register(fd, 11);
  }
  assert_int_not_equal(acquire_now(fd, id, 12), 0);
  close(fd);
  th_untrack(lc);
  th_stop(lc, 0);
}

/* N re-registers on a new connection (it reconnected before the directory
 * noticed the old one died): the old connection is closed, N's copies and
 * its waiter are dropped (a store re-sends pending requests itself). */
static void test_reregister_drops_waiters(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64u << 20, NULL, NULL);
  int old = node_waiting(lc, "w/rereg");
  int fd = tcp_connect(hpl__lc_dir_port(lc));
  do_register(fd, 11);
  assert_true(closed_by_peer(old, th_ms(5000)));
  close(old);
  assert_int_equal(dir_counter(lc, "dir_nodes"), 2);
  served_again_and_stop(lc, fd, "w/rereg");
}

/* N falls silent (its connection stays open): the liveness sweep declares
 * it dead, which drops its copy and its waiter. */
static void test_sweep_drops_waiters(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64u << 20, "--heartbeat-ms 100 --heartbeat-timeout-ms 600", NULL);
  int fd = node_waiting(lc, "w/sweep");
  assert_true(closed_by_peer(fd, th_ms(5000)));
  close(fd);
  assert_int_equal(dir_counter(lc, "dir_nodes_dead"), 1);
  assert_int_equal(dir_counter(lc, "dir_nodes"), 1);
  served_again_and_stop(lc, -1, "w/sweep");
}

/* N closes its connection (the path that always dropped waiters). */
static void test_close_drops_waiters(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64u << 20, NULL, NULL);
  int fd = node_waiting(lc, "w/close");
  close(fd);
  /* nothing tells us when the directory has seen the close: ask, briefly */
  uint64_t deadline = hpl__deadline_ms(th_ms(5000));
  while (dir_counter(lc, "dir_nodes") != 1 && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  assert_int_equal(dir_counter(lc, "dir_nodes_dead"), 1);
  served_again_and_stop(lc, -1, "w/close");
}

/* A connection registers one node: a REGISTER for another id on it is
 * refused (its waiters and copies stay the first node's). */
static void test_one_node_per_connection(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  int fd = tcp_connect(hpl__lc_dir_port(lc));
  do_register(fd, 1);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = NODE_ID + 1;
  r.addr = "127.0.0.1";
  r.data_port = 10;
  wire_send(fd, HPL__MSG_REGISTER, 2, &r.base);
  Hplpb__Reply *rep = (Hplpb__Reply *)wire_wait(fd, HPL__MSG_REPLY, 2);
  assert_int_equal(rep->status, HPL_EINVAL);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  sync_heartbeat(fd, 3);
  assert_int_equal(dir_counter(lc, "dir_nodes"), 1);
  close(fd);
  th_untrack(lc);
  th_stop(lc, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_reregister_drops_waiters, th_teardown),
      cmocka_unit_test_teardown(test_sweep_drops_waiters, th_teardown),
      cmocka_unit_test_teardown(test_close_drops_waiters, th_teardown),
      cmocka_unit_test_teardown(test_one_node_per_connection, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
