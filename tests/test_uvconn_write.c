/* test_uvconn_write.c - the servers' framed connection (src/server/uvconn.c)
 * writing on a socketpair: frames, raw stream bytes, writes that end at
 * once, a frame with its stream's first bytes, corked frames, and a close
 * with writes pending. The plumbing is uvtest.c's. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include <uv.h>

#include "fanout.h"
#include "hoplite.h"
#include "log.h"
#include "proto.h"
#include "util.h"
#include "uvconn.h"
#include "uvtest.h"

/* ------------------------------------------------------------------ writing */

static void test_writes(void **state) {
  (void)state;
  rec r = {0};
  int peer;
  hpl__conn *c = open_conn(&r, 0, &peer);
  uint8_t pl[5000], got[5000];
  pattern(pl, sizeof pl, 9);
  Hplpb__GetRep g = HPLPB__GET_REP__INIT;
  g.handle = 42;
  hpl__frame_hdr h;

  /* copied payload, no callback */
  assert_int_equal(hpl__conn_send(c, HPL__MSG_GET_REP, 3, &g.base, pl, 100, 1, NULL, NULL), 0);
  run_now();
  ProtobufCMessage *m = peer_frame(peer, &h, got, sizeof got);
  assert_int_equal(h.type, HPL__MSG_GET_REP);
  assert_int_equal(h.req_id, 3);
  assert_int_equal(((Hplpb__GetRep *)m)->handle, 42);
  assert_int_equal(h.payload_len, 100);
  assert_memory_equal(got, pl, 100);
  protobuf_c_message_free_unpacked(m, NULL);

  /* payload by reference: the callback says when it may be reused */
  assert_int_equal(hpl__conn_send(c, HPL__MSG_GET_REP, 4, &g.base, pl, sizeof pl, 0, on_write, &r),
                   0);
  run_until(&r.write_cbs);
  assert_int_equal(r.write_cbs, 1);
  assert_int_equal(r.write_status, 0);
  assert_int_equal(hpl__conn_write_queue(c), 0);
  m = peer_frame(peer, &h, got, sizeof got);
  assert_int_equal(h.req_id, 4);
  assert_memory_equal(got, pl, sizeof pl);
  protobuf_c_message_free_unpacked(m, NULL);

  /* a header announcing a payload, then the payload as raw writes */
  assert_int_equal(hpl__conn_send(c, HPL__MSG_GET_REP, 5, &g.base, NULL, 3000, 0, NULL, NULL), 0);
  assert_int_equal(hpl__conn_write(c, pl, 1000, NULL, NULL), 0);
  r.write_cbs = 0;
  assert_int_equal(hpl__conn_write(c, pl + 1000, 2000, on_write, &r), 0);
  run_until(&r.write_cbs);
  m = peer_frame(peer, &h, got, sizeof got);
  assert_int_equal(h.req_id, 5);
  assert_int_equal(h.payload_len, 3000);
  assert_memory_equal(got, pl, 3000);
  protobuf_c_message_free_unpacked(m, NULL);

  /* a Reply */
  assert_int_equal(hpl__conn_reply(c, 6, HPL_ENOTFOUND, "no such thing"), 0);
  run_now();
  m = peer_frame(peer, &h, got, sizeof got);
  assert_int_equal(h.type, HPL__MSG_REPLY);
  assert_int_equal(((Hplpb__Reply *)m)->status, HPL_ENOTFOUND);
  assert_string_equal(((Hplpb__Reply *)m)->detail, "no such thing");
  protobuf_c_message_free_unpacked(m, NULL);
  close_all(&r, peer, 0);
  rec_free(&r);
}

#define BIG_WRITE (4u << 20) /* more than the socketpair holds */

/* open_conn, and two BIG_WRITE buffers for the caller to free: *pl with a
 * pattern (seed), *got for what the peer reads. */
static hpl__conn *open_big(rec *r, int *peer, unsigned seed, uint8_t **pl, uint8_t **got) {
  *pl = malloc(BIG_WRITE);
  *got = malloc(BIG_WRITE);
  assert_true(*pl && *got);
  pattern(*pl, BIG_WRITE, seed);
  return open_conn(r, 0, peer);
}

/* hpl__conn_write_now: a write the socket takes whole ends at once (2, no
 * callback); behind a queued write it waits its turn (0, callback). */
static void test_write_now(void **state) {
  (void)state;
  rec r = {0};
  int peer;
  uint8_t *pl, *got;
  const size_t big = BIG_WRITE;
  hpl__conn *c = open_big(&r, &peer, 5, &pl, &got);
  Hplpb__GetRep g = HPLPB__GET_REP__INIT;
  hpl__frame_hdr h;

  /* nothing queued: it goes now */
  assert_int_equal(hpl__conn_send(c, HPL__MSG_GET_REP, 1, &g.base, NULL, 3000, 0, NULL, NULL), 0);
  assert_int_equal(hpl__conn_write_now(c, pl, 3000, on_write, &r), 2);
  assert_int_equal(hpl__conn_write_queue(c), 0);
  run_now();
  assert_int_equal(r.write_cbs, 0); /* never called */
  ProtobufCMessage *m = peer_frame(peer, &h, got, 3000);
  assert_int_equal(h.req_id, 1);
  assert_memory_equal(got, pl, 3000);
  protobuf_c_message_free_unpacked(m, NULL);

  /* behind a write the socket could not take: queued, in order, told */
  assert_int_equal(hpl__conn_send(c, HPL__MSG_GET_REP, 2, &g.base, NULL, big + 3000, 0, NULL, NULL),
                   0);
  assert_int_equal(hpl__conn_write(c, pl, big, on_write, &r), 0);
  assert_true(hpl__conn_write_queue(c) > 0);
  assert_int_equal(hpl__conn_write_now(c, pl + 100, 3000, on_write, &r), 0);
  uint8_t hb[HPL__FRAME_HDR_LEN], msg[64];
  read_all(peer, hb, sizeof hb);
  static const hpl__frame_limits any = {.max_msg = 1 << 20, .max_payload = 1 << 30,
                                        .max_type = HPL__MSG_MAX_};
  assert_int_equal(hpl__frame_decode_hdr(hb, sizeof hb, &any, &h, NULL), 0);
  assert_true(h.msg_len <= sizeof msg);
  read_all(peer, msg, h.msg_len);
  size_t have = 0;
  for (int i = 0; i < 100000 && have < big + 3000; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    ssize_t k = recv(peer, got + (have < big ? have : 0), have < big ? big - have : 3000,
                     MSG_DONTWAIT);
    if (k > 0 && have < big) {
      have += (size_t)k;
    } else if (k > 0) {
      assert_int_equal(k, 3000); /* the small write, after all of the big one */
      assert_memory_equal(got, pl + 100, 3000);
      have += 3000;
    }
  }
  assert_int_equal(have, big + 3000);
  run_until(&r.write_cbs);
  for (int i = 0; i < 10 && r.write_cbs < 2; i++) run_now();
  assert_int_equal(r.write_cbs, 2);
  assert_int_equal(r.write_status, 0);
  close_all(&r, peer, 0);
  rec_free(&r);
  free(pl);
  free(got);
}

/* A streamed payload's last bytes (at most HPL__CONN_DIRECT_MIN) arriving
 * with the next frame come through the read buffer: all of them reach the
 * sink, in order, before the next frame is delivered. */
static void test_small_rest_with_next_frame(void **state) {
  (void)state;
  const uint64_t n = 70000;
  uint8_t *payload;
  size_t len, end1;
  uint8_t *buf = put_then_heartbeat("rest", n, 11, &payload, &len, &end1);
  rec r = {0};
  r.allow = BIG;
  int peer;
  open_stream(&r, &peer);
  write_all(peer, buf, end1 - 3000); /* all but the payload's last 3000 bytes */
  for (int i = 0; i < 1000 && r.got < n - 3000; i++) uv_run(&loop, UV_RUN_NOWAIT);
  assert_int_equal(r.got, n - 3000);
  assert_int_equal(r.frames, 1);
  write_all(peer, buf + end1 - 3000, len - (end1 - 3000)); /* the rest and the HEARTBEAT */
  for (int i = 0; i < 1000 && r.frames < 2; i++) uv_run(&loop, UV_RUN_NOWAIT);
  assert_int_equal(r.got, n);
  expect_sink_then_heartbeat(&r, payload, n);
  close_all(&r, peer, 0);
  rec_free(&r);
  free(payload);
  free(buf);
}

/* Bytes the peer end can read now, without waiting. */
static size_t readable(int fd) {
  uint8_t b[65536];
  ssize_t n = recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 ? (size_t)n : 0;
}

static void expect_reqs(int peer, uint64_t from, uint64_t to) {
  hpl__frame_hdr h;
  uint8_t got[16];
  for (uint64_t q = from; q <= to; q++) {
    ProtobufCMessage *m = peer_frame(peer, &h, got, sizeof got);
    assert_int_equal(h.req_id, q);
    protobuf_c_message_free_unpacked(m, NULL);
  }
}

/* Corked writes wait for the loop, keep their order, and go before a
 * callback write, at the frame limit, and before a close. */
static void test_corked_writes(void **state) {
  (void)state;
  rec ra = {0}, rb = {0};
  int pa, pb;
  open_cork = 1;
  hpl__conn *a = open_conn(&ra, 0, &pa), *b = open_conn(&rb, 0, &pb);
  open_cork = 0;
  /* frames made in one turn wait for it to end */
  assert_int_equal(hpl__conn_reply(a, 1, 0, NULL), 0);
  assert_int_equal(hpl__conn_reply(b, 2, 0, NULL), 0);
  assert_int_equal(hpl__conn_reply(a, 3, 0, NULL), 0);
  assert_true(hpl__conn_write_queue(a) > 0);
  assert_int_equal(readable(pa) + readable(pb), 0);
  run_now();
  assert_int_equal(hpl__conn_write_queue(a), 0);
  expect_reqs(pa, 1, 1);
  expect_reqs(pa, 3, 3);
  expect_reqs(pb, 2, 2);
  /* a write with a callback is not corked and goes after what is */
  assert_int_equal(hpl__conn_reply(a, 4, 0, NULL), 0);
  static const uint8_t raw[5] = "abcde";
  ra.write_cbs = 0;
  assert_int_equal(hpl__conn_write(a, raw, sizeof raw, on_write, &ra), 0);
  assert_true(readable(pa) > 0); /* flushed at once, in order */
  expect_reqs(pa, 4, 4);
  uint8_t got[5];
  read_all(pa, got, sizeof got);
  assert_memory_equal(got, raw, sizeof raw);
  run_until(&ra.write_cbs);
  /* more than a turn may cork: the first ones go at once, all in order */
  for (uint64_t q = 10; q < 110; q++) assert_int_equal(hpl__conn_reply(a, q, 0, NULL), 0);
  assert_true(readable(pa) > 0);
  run_now();
  expect_reqs(pa, 10, 109);
  /* a close sends what is corked first */
  assert_int_equal(hpl__conn_reply(b, 7, HPL_EPROTO, "last words"), 0);
  hpl__conn_close(b, 0);
  expect_reqs(pb, 7, 7);
  run_until(&rb.closes);
  close(pb);
  close_all(&ra, pa, 0);
  rec_free(&ra);
  rec_free(&rb);
}

/* Each loop flushes its own corked connections: a turn of one loop leaves
 * the frames corked on another loop's connections alone (two loops in one
 * process, each on its thread, must not write for each other). */
static void test_corks_per_loop(void **state) {
  (void)state;
  uv_loop_t l2;
  assert_int_equal(uv_loop_init(&l2), 0);
  rec ra = {0}, rb = {0};
  int pa, pb;
  open_cork = 1;
  hpl__conn *a = open_conn(&ra, 0, &pa);
  open_loop = &l2;
  hpl__conn *b = open_conn(&rb, 0, &pb);
  open_loop = &loop;
  open_cork = 0;
  assert_int_equal(hpl__conn_reply(a, 1, 0, NULL), 0);
  assert_int_equal(hpl__conn_reply(b, 2, 0, NULL), 0);
  run_now(); /* the first loop's turns only */
  expect_reqs(pa, 1, 1);
  assert_int_equal(readable(pb), 0);
  assert_true(hpl__conn_write_queue(b) > 0);
  for (int i = 0; i < 3; i++) uv_run(&l2, UV_RUN_NOWAIT);
  assert_int_equal(hpl__conn_write_queue(b), 0);
  expect_reqs(pb, 2, 2);
  hpl__conn_close(b, 0);
  while (!rb.closes) uv_run(&l2, UV_RUN_ONCE);
  close(pb);
  close_all(&ra, pa, 0);
  uv_run(&l2, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&l2), 0);
  rec_free(&ra);
  rec_free(&rb);
}

static void test_close_with_writes_pending(void **state) {
  (void)state;
  rec r = {0};
  int peer;
  hpl__conn *c = open_conn(&r, 0, &peer);
  size_t big = 8u << 20; /* more than the socket takes: the write stays queued */
  uint8_t *pl = calloc(1, big);
  assert_int_equal(hpl__conn_send(c, HPL__MSG_GET_REP, 1, NULL, pl, big, 0, on_write, &r), 0);
  run_now();
  assert_true(hpl__conn_write_queue(c) > 0);
  assert_int_equal(r.write_cbs, 0);
  hpl__conn_close(c, 0);
  /* closing: nothing more is accepted, and the refused write's callback
   * never runs */
  assert_int_equal(hpl__conn_send(c, HPL__MSG_HEARTBEAT, 0, NULL, NULL, 0, 1, on_write, &r),
                   HPL_ECONN);
  run_until(&r.closes);
  assert_int_equal(r.write_cbs, 1);
  assert_int_equal(r.write_status, HPL_ECONN);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.close_status, 0);
  close(peer);
  free(pl);
  rec_free(&r);
}

/* Read exactly n bytes from the peer end while the loop runs (it has more
 * queued than the socket holds). */
static void recv_running(int peer, uint8_t *buf, size_t n) {
  size_t have = 0;
  for (int i = 0; i < 1000000 && have < n; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    ssize_t k = recv(peer, buf + have, n - have, MSG_DONTWAIT);
    if (k > 0) have += (size_t)k;
  }
  assert_int_equal(have, n);
}

/* hpl__conn_send_lead: the frame and its stream's first bytes go at once
 * (the peer can read both before the loop runs or anything else is
 * written; that they are one write shows in strace, not here); the
 * rest of the stream follows; behind a queued write it waits its turn and
 * its callback tells; a lead longer than the payload is refused. */
static void test_send_lead(void **state) {
  (void)state;
  rec r = {0};
  int peer;
  uint8_t *pl, *got;
  const size_t big = BIG_WRITE;
  hpl__conn *c = open_big(&r, &peer, 11, &pl, &got);
  Hplpb__PullRep pr = HPLPB__PULL_REP__INIT;
  pr.size = 3000;
  size_t head = HPL__FRAME_HDR_LEN + protobuf_c_message_get_packed_size(&pr.base);
  hpl__frame_hdr h;

  /* nothing queued: frame and lead go now, in one write */
  assert_int_equal(hpl__conn_send_lead(c, HPL__MSG_PULL_REP, 7, &pr.base, 3000, pl, 1000, on_write,
                                       &r),
                   2);
  assert_int_equal(hpl__conn_write_queue(c), 0);
  assert_int_equal(readable(peer), head + 1000);
  assert_int_equal(hpl__conn_write_now(c, pl + 1000, 2000, on_write, &r), 2);
  ProtobufCMessage *m = peer_frame(peer, &h, got, 3000);
  assert_int_equal(h.type, HPL__MSG_PULL_REP);
  assert_int_equal(h.req_id, 7);
  assert_int_equal(h.payload_len, 3000);
  assert_int_equal(((Hplpb__PullRep *)m)->size, 3000);
  assert_memory_equal(got, pl, 3000);
  protobuf_c_message_free_unpacked(m, NULL);

  /* the whole payload as the lead */
  assert_int_equal(
      hpl__conn_send_lead(c, HPL__MSG_PULL_REP, 8, &pr.base, 500, pl + 7, 500, on_write, &r), 2);
  m = peer_frame(peer, &h, got, 500);
  assert_int_equal(h.req_id, 8);
  assert_memory_equal(got, pl + 7, 500);
  protobuf_c_message_free_unpacked(m, NULL);
  assert_int_equal(r.write_cbs, 0); /* nothing was queued: never called */

  /* behind a write the socket could not take: queued, in order, told */
  assert_int_equal(hpl__conn_send(c, HPL__MSG_GET_REP, 9, NULL, pl, big, 0, on_write, &r), 0);
  assert_true(hpl__conn_write_queue(c) > 0);
  assert_int_equal(
      hpl__conn_send_lead(c, HPL__MSG_PULL_REP, 10, &pr.base, 3000, pl + 3, 3000, on_write, &r), 0);
  size_t n9 = HPL__FRAME_HDR_LEN + big, total = n9 + head + 3000;
  uint8_t *all = malloc(total);
  recv_running(peer, all, total);
  static const hpl__frame_limits any = {.max_msg = 1 << 20, .max_payload = 1 << 30,
                                        .max_type = HPL__MSG_MAX_};
  assert_int_equal(hpl__frame_decode_hdr(all, total, &any, &h, NULL), 0);
  assert_int_equal(h.req_id, 9);
  assert_memory_equal(all + HPL__FRAME_HDR_LEN, pl, big);
  assert_int_equal(hpl__frame_decode_hdr(all + n9, total - n9, &any, &h, NULL), 0);
  assert_int_equal(h.req_id, 10);
  assert_int_equal(h.payload_len, 3000);
  assert_memory_equal(all + n9 + head, pl + 3, 3000);
  free(all);
  run_until(&r.write_cbs);
  while (r.write_cbs < 2) uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(r.write_status, 0);
  assert_int_equal(hpl__conn_write_queue(c), 0);

  /* refused: no bytes, or more than the frame announces */
  assert_int_equal(hpl__conn_send_lead(c, HPL__MSG_PULL_REP, 11, &pr.base, 10, pl, 11, NULL, NULL),
                   HPL_EINVAL);
  assert_int_equal(hpl__conn_send_lead(c, HPL__MSG_PULL_REP, 12, &pr.base, 10, pl, 0, NULL, NULL),
                   HPL_EINVAL);
  assert_int_equal(readable(peer), 0);
  free(pl);
  free(got);
  close_all(&r, peer, 0);
  rec_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_writes),
      cmocka_unit_test(test_write_now),
      cmocka_unit_test(test_send_lead),
      cmocka_unit_test(test_small_rest_with_next_frame),
      cmocka_unit_test(test_close_with_writes_pending),
      cmocka_unit_test(test_corked_writes),
      cmocka_unit_test(test_corks_per_loop),
  };
  return cmocka_run_group_tests(tests, uvt_setup, uvt_teardown);
}
