/* test_uvconn.c - the servers' framed connection (src/server/uvconn.c) on a
 * socketpair: one end is a libuv pipe wrapped by hpl__conn, the test writes
 * and reads the other end by hand and runs the loop in between. */
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

static uv_loop_t loop;

/* ------------------------------------------------------------------ what the callbacks saw */

#define MAX_FRAMES 8
#define BIG (200u * 1000u) /* a streamed payload larger than the read buffer */

typedef struct rec {
  hpl__conn *c;
  int frames;
  unsigned types[MAX_FRAMES];
  uint64_t reqs[MAX_FRAMES];
  char ids[MAX_FRAMES][32]; /* GET ids */
  uint8_t *payloads[MAX_FRAMES]; /* buffered payloads, copied */
  uint64_t plens[MAX_FRAMES];
  int closes;
  int close_status;
  /* stream mode */
  int take_payload;   /* on_frame takes a payload into the sink below */
  uint8_t *sink;      /* BIG bytes */
  uint64_t allow;     /* the sink has room below this offset only */
  uint64_t got;       /* bytes reported by got(), always contiguous */
  int got_gap;        /* got() reported an offset out of order */
  int frames_at_end;  /* frames seen when the payload completed */
  /* writes */
  int write_cbs;
  int write_status;
} rec;

static void on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                     const uint8_t *payload, uint64_t plen);

static void on_close(hpl__conn *c, int status) {
  rec *r = hpl__conn_data(c);
  r->closes++;
  r->close_status = status;
  r->c = NULL;
}

static uint8_t *sink_buf(hpl__conn *c, void *arg, uint64_t off, size_t *len) {
  rec *r = arg;
  if (off >= r->allow) {
    *len = 0;
    return NULL; /* no room: pause */
  }
  uint64_t room = r->allow - off;
  *len = room < 4096 ? (size_t)room : 4096;
  return r->sink + off;
}

static void sink_got(hpl__conn *c, void *arg, uint64_t off, size_t n) {
  rec *r = arg;
  if (off != r->got) r->got_gap = 1;
  r->got = off + n;
  if (r->got == BIG) r->frames_at_end = r->frames;
}

static void on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                     const uint8_t *payload, uint64_t plen) {
  rec *r = hpl__conn_data(c);
  assert_true(r->frames < MAX_FRAMES);
  int i = r->frames++;
  r->types[i] = h->type;
  r->reqs[i] = h->req_id;
  if (h->type == HPL__MSG_GET)
    snprintf(r->ids[i], sizeof r->ids[i], "%s", ((Hplpb__GetReq *)m)->id);
  r->plens[i] = plen;
  if (payload) {
    r->payloads[i] = malloc(plen);
    memcpy(r->payloads[i], payload, plen);
  }
  if (!payload && plen && r->take_payload) {
    hpl__sink s = {.buf = sink_buf, .got = sink_got, .arg = r};
    hpl__conn_recv_payload(c, &s);
  }
}

static void rec_free(rec *r) {
  for (int i = 0; i < r->frames; i++) free(r->payloads[i]);
  free(r->sink);
}

/* ------------------------------------------------------------------ plumbing */

static const hpl__frame_limits lim = {
    .max_msg = 1024, .max_payload = BIG, .max_type = HPL__MSG_MAX_};

static int open_cork; /* the next open_conn corks its writes */
static uv_loop_t *open_loop = &loop; /* the loop of the next open_conn */

/* A connection over one end of a socketpair; *peer is the other end. */
static hpl__conn *open_conn(rec *r, int stream, int *peer) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  uv_pipe_t *p = malloc(sizeof *p);
  assert_int_equal(uv_pipe_init(open_loop, p, 0), 0);
  assert_int_equal(uv_pipe_open(p, sv[0]), 0);
  hpl__conn_opts o = {.lim = lim, .stream_payloads = stream, .on_frame = on_frame,
                      .on_close = on_close, .data = r, .label = "test", .cork = open_cork};
  r->c = hpl__conn_new((uv_stream_t *)p, &o);
  assert_non_null(r->c);
  *peer = sv[1];
  return r->c;
}

static int timer_fired;
static void on_timer(uv_timer_t *t) { timer_fired = 1; }

/* Run the loop until *flag becomes non-zero (or 5 s pass: a failure). */
static void run_until(const int *flag) {
  uv_timer_t t;
  uv_timer_init(&loop, &t);
  timer_fired = 0;
  uv_timer_start(&t, on_timer, 5000, 0);
  while (!*flag && !timer_fired) uv_run(&loop, UV_RUN_ONCE);
  uv_timer_stop(&t);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  assert_false(timer_fired);
}

/* Let the loop handle whatever the socket holds now. */
static void run_now(void) {
  for (int i = 0; i < 3; i++) uv_run(&loop, UV_RUN_NOWAIT);
}

/* Close the connection (if still open) and the peer; on_close ran once. */
static void close_all(rec *r, int peer, int want_status) {
  if (r->c) hpl__conn_close(r->c, 0);
  run_until(&r->closes);
  assert_int_equal(r->closes, 1);
  assert_int_equal(r->close_status, want_status);
  close(peer);
  run_now();
  assert_int_equal(r->closes, 1); /* still once */
}

static void write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    assert_true(k > 0);
    b += k;
    n -= (size_t)k;
  }
}

/* Read exactly n bytes from the peer end (blocking). */
static void read_all(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n) {
    ssize_t k = read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    assert_true(k > 0);
    b += k;
    n -= (size_t)k;
  }
}

/* Append a frame (header, message, payload) to buf at *len. */
static void add_frame(uint8_t *buf, size_t *len, unsigned type, uint64_t req,
                      const ProtobufCMessage *m, const uint8_t *payload, uint64_t plen) {
  size_t fl;
  uint8_t *f = hpl__msg_frame(type, req, m, plen, &fl);
  memcpy(buf + *len, f, fl);
  *len += fl;
  if (plen) memcpy(buf + *len, payload, plen);
  *len += plen;
  free(f);
}

static void pattern(uint8_t *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 7 + seed + (i >> 9));
}

/* ------------------------------------------------------------------ reading */

/* Three frames: a GET, an INLINE_PUT with a 300-byte payload, an empty
 * HEARTBEAT. ends[i] is where frame i ends in the stream. */
static size_t three_frames(uint8_t *buf, size_t ends[3], uint8_t payload[300]) {
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = "object/one";
  Hplpb__InlinePutReq ip = HPLPB__INLINE_PUT_REQ__INIT;
  ip.id = "small";
  ip.size = 300;
  pattern(payload, 300, 1);
  size_t len = 0;
  add_frame(buf, &len, HPL__MSG_GET, 5, &g.base, NULL, 0);
  ends[0] = len;
  add_frame(buf, &len, HPL__MSG_INLINE_PUT, 6, &ip.base, payload, 300);
  ends[1] = len;
  add_frame(buf, &len, HPL__MSG_HEARTBEAT, 7, NULL, NULL, 0);
  ends[2] = len;
  return len;
}

static void check_three(const rec *r, const uint8_t payload[300]) {
  assert_int_equal(r->frames, 3);
  assert_int_equal(r->types[0], HPL__MSG_GET);
  assert_int_equal(r->reqs[0], 5);
  assert_string_equal(r->ids[0], "object/one");
  assert_int_equal(r->types[1], HPL__MSG_INLINE_PUT);
  assert_int_equal(r->plens[1], 300);
  assert_memory_equal(r->payloads[1], payload, 300);
  assert_int_equal(r->types[2], HPL__MSG_HEARTBEAT);
  assert_int_equal(r->reqs[2], 7);
  assert_int_equal(r->plens[2], 0);
}

static int frames_before(const size_t ends[3], size_t k) {
  int n = 0;
  for (int i = 0; i < 3; i++) n += ends[i] <= k;
  return n;
}

static void test_split_at_every_byte(void **state) {
  (void)state;
  uint8_t buf[1024], payload[300];
  size_t ends[3];
  size_t total = three_frames(buf, ends, payload);
  for (size_t k = 1; k < total; k++) {
    rec r = {0};
    int peer;
    open_conn(&r, 0, &peer);
    write_all(peer, buf, k);
    run_now();
    assert_int_equal(r.frames, frames_before(ends, k)); /* nothing early, nothing late */
    write_all(peer, buf + k, total - k);
    run_now();
    check_three(&r, payload);
    close_all(&r, peer, 0);
    rec_free(&r);
  }
}

static void test_byte_by_byte(void **state) {
  (void)state;
  uint8_t buf[1024], payload[300];
  size_t ends[3];
  size_t total = three_frames(buf, ends, payload);
  rec r = {0};
  int peer;
  open_conn(&r, 0, &peer);
  for (size_t k = 0; k < total; k++) {
    write_all(peer, buf + k, 1);
    run_now();
    assert_int_equal(r.frames, frames_before(ends, k + 1));
  }
  check_three(&r, payload);
  /* the peer hanging up closes the connection as a lost peer */
  close(peer);
  run_until(&r.closes);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.close_status, HPL_ECONN);
  rec_free(&r);
}

/* Write what the socket takes of buf[*off..len) without blocking. */
static void pump(int fd, const uint8_t *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t k = send(fd, buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k <= 0) return;
    *off += (size_t)k;
  }
}

/* Pump and run the loop until the sink holds `want` bytes. */
static void stream_until(rec *r, int peer, const uint8_t *buf, size_t len, size_t *off,
                         uint64_t want) {
  for (int i = 0; i < 100000 && r->got < want; i++) {
    pump(peer, buf, len, off);
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  assert_int_equal(r->got, want);
}

/* An INLINE_PUT `id` carrying n pattern bytes (seed; *payload gets them,
 * the caller frees it), then a HEARTBEAT, into a new buffer (the caller
 * frees it): its length in *len, where the first frame ends in *end1. */
static uint8_t *put_then_heartbeat(const char *id, uint64_t n, unsigned seed, uint8_t **payload,
                                   size_t *len, size_t *end1) {
  uint8_t *buf = malloc(n + 1024);
  *payload = malloc(n);
  assert_true(buf && *payload);
  pattern(*payload, n, seed);
  Hplpb__InlinePutReq ip = HPLPB__INLINE_PUT_REQ__INIT;
  ip.id = (char *)id;
  ip.size = n;
  *len = 0;
  add_frame(buf, len, HPL__MSG_INLINE_PUT, 1, &ip.base, *payload, n);
  *end1 = *len;
  add_frame(buf, len, HPL__MSG_HEARTBEAT, 2, NULL, NULL, 0);
  return buf;
}

/* A connection that takes payloads into r's sink (BIG bytes). */
static void open_stream(rec *r, int *peer) {
  r->take_payload = 1;
  r->sink = calloc(1, BIG);
  open_conn(r, 1, peer);
}

static void test_streamed_payload_pause_resume(void **state) {
  (void)state;
  uint8_t *payload;
  size_t len, end1;
  uint8_t *buf = put_then_heartbeat("big", BIG, 3, &payload, &len, &end1);
  rec r = {0};
  int peer;
  open_stream(&r, &peer);
  size_t off = 0;
  /* Room for 50000 bytes: the first read (64 KiB) holds more, so the
   * connection pauses with bytes left in its buffer. */
  const uint64_t steps[2] = {50000, 150000};
  for (int s = 0; s < 2; s++) {
    r.allow = steps[s];
    if (s) hpl__conn_resume(r.c);
    stream_until(&r, peer, buf, len, &off, steps[s]);
    for (int i = 0; i < 20; i++) { /* paused: nothing more arrives */
      pump(peer, buf, len, &off);
      uv_run(&loop, UV_RUN_NOWAIT);
    }
    assert_int_equal(r.got, steps[s]);
    assert_int_equal(r.frames, 1); /* the HEARTBEAT waits behind the payload */
  }
  /* the second pause came while reading straight into the sink */
  r.allow = BIG;
  hpl__conn_resume(r.c);
  stream_until(&r, peer, buf, len, &off, BIG);
  for (int i = 0; i < 100 && r.frames < 2; i++) {
    pump(peer, buf, len, &off);
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  assert_int_equal(off, len);
  assert_false(r.got_gap);
  assert_memory_equal(r.sink, payload, BIG);
  assert_int_equal(r.frames_at_end, 1);
  assert_int_equal(r.frames, 2);
  assert_int_equal(r.types[1], HPL__MSG_HEARTBEAT);
  close_all(&r, peer, 0);
  rec_free(&r);
  free(payload);
  free(buf);
}

/* Feed `bad` (followed by a good frame that must never be delivered) and
 * expect the connection to close once with HPL_EPROTO. */
static void expect_protocol_error(const uint8_t *bad, size_t n, int stream) {
  uint8_t buf[2048];
  memcpy(buf, bad, n);
  size_t len = n;
  add_frame(buf, &len, HPL__MSG_HEARTBEAT, 9, NULL, NULL, 0);
  rec r = {0};
  int peer;
  open_conn(&r, stream, &peer);
  write_all(peer, buf, len);
  run_until(&r.closes);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.close_status, HPL_EPROTO);
  assert_int_equal(r.frames, stream ? 1 : 0);
  /* the connection's end is closed: the peer reads end of stream */
  uint8_t b;
  assert_int_equal(read(peer, &b, 1), 0);
  close(peer);
  run_now();
  assert_int_equal(r.closes, 1);
  rec_free(&r);
}

static void bad_header(uint32_t msg_len, uint64_t payload_len, uint16_t type, uint8_t *out) {
  hpl__frame_hdr h = {.type = type, .msg_len = msg_len, .req_id = 1, .payload_len = payload_len};
  hpl__frame_encode_hdr(&h, out);
}

static void test_bad_frames_close_with_eproto(void **state) {
  (void)state;
  uint8_t f[HPL__FRAME_HDR_LEN + 64];
  bad_header(lim.max_msg + 1, 0, HPL__MSG_GET, f); /* message over the limit */
  expect_protocol_error(f, HPL__FRAME_HDR_LEN, 0);
  bad_header(0, lim.max_payload + 1, HPL__MSG_INLINE_PUT, f); /* payload over it */
  expect_protocol_error(f, HPL__FRAME_HDR_LEN, 0);
  bad_header(0, 0, 200, f); /* unknown type */
  expect_protocol_error(f, HPL__FRAME_HDR_LEN, 0);
  bad_header(16, 0, HPL__MSG_GET, f); /* a message that does not decode */
  memset(f + HPL__FRAME_HDR_LEN, 0xff, 16);
  expect_protocol_error(f, HPL__FRAME_HDR_LEN + 16, 0);
  memset(f, 'x', HPL__FRAME_HDR_LEN); /* no frame at all */
  expect_protocol_error(f, HPL__FRAME_HDR_LEN, 0);
  /* stream mode: a payload the handler does not take */
  Hplpb__InlinePutReq ip = HPLPB__INLINE_PUT_REQ__INIT;
  ip.id = "x";
  uint8_t pl[10] = {0};
  size_t len = 0;
  uint8_t buf[256];
  add_frame(buf, &len, HPL__MSG_INLINE_PUT, 1, &ip.base, pl, sizeof pl);
  expect_protocol_error(buf, len, 1);
}

/* ------------------------------------------------------------------ writing */

static void on_write(hpl__conn *c, int status, void *arg) {
  rec *r = arg;
  r->write_cbs++;
  r->write_status = status;
}

/* Read one frame from the peer end: header, message, payload (<= cap). */
static ProtobufCMessage *peer_frame(int peer, hpl__frame_hdr *h, uint8_t *payload, size_t cap) {
  static const hpl__frame_limits any = {.max_msg = 1 << 20, .max_payload = 1 << 30,
                                        .max_type = HPL__MSG_MAX_};
  uint8_t hb[HPL__FRAME_HDR_LEN], msg[1024];
  read_all(peer, hb, sizeof hb);
  assert_int_equal(hpl__frame_decode_hdr(hb, sizeof hb, &any, h, NULL), 0);
  assert_true(h->msg_len <= sizeof msg && h->payload_len <= cap);
  read_all(peer, msg, h->msg_len);
  read_all(peer, payload, (size_t)h->payload_len);
  return hpl__msg_unpack(h->type, msg, h->msg_len);
}

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

/* hpl__conn_write_now: a write the socket takes whole ends at once (2, no
 * callback); behind a queued write it waits its turn (0, callback). */
static void test_write_now(void **state) {
  (void)state;
  rec r = {0};
  int peer;
  hpl__conn *c = open_conn(&r, 0, &peer);
  const size_t big = 4u << 20; /* more than the socketpair holds */
  uint8_t *pl = malloc(big), *got = malloc(big);
  pattern(pl, big, 5);
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
  assert_false(r.got_gap);
  assert_memory_equal(r.sink, payload, n);
  assert_int_equal(r.frames, 2);
  assert_int_equal(r.types[1], HPL__MSG_HEARTBEAT);
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

/* ------------------------------------------------------------------ the connection limit */

/* Under the limit a new connection is left to its server; at it, it is
 * closed at once and counted. */
static void test_full(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  uv_pipe_t *p = malloc(sizeof *p);
  assert_int_equal(uv_pipe_init(&loop, p, 0), 0);
  assert_int_equal(uv_pipe_open(p, sv[0]), 0);
  uint64_t refused = 0;
  const char *what = "test";
  assert_int_equal(hpl__conn_full((uv_stream_t *)p, 1, 2, &refused, what), 0);
  assert_int_equal(refused, 0);
  assert_int_equal(hpl__conn_full((uv_stream_t *)p, 2, 2, &refused, what), 1);
  assert_int_equal(refused, 1);
  run_now(); /* closed and freed */
  char b;
  assert_int_equal(read(sv[1], &b, 1), 0); /* the peer sees the end */
  close(sv[1]);
  /* hpl__conn_admit: the same, with the owner's state when there is room */
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  p = malloc(sizeof *p);
  assert_int_equal(uv_pipe_init(&loop, p, 0), 0);
  assert_int_equal(uv_pipe_open(p, sv[0]), 0);
  uint64_t *st = hpl__conn_admit((uv_stream_t *)p, 0, 1, &refused, what, sizeof *st);
  assert_non_null(st);
  assert_int_equal(*st, 0);
  free(st);
  assert_null(hpl__conn_admit((uv_stream_t *)p, 1, 1, &refused, what, sizeof *st));
  assert_int_equal(refused, 2);
  run_now();
  assert_int_equal(read(sv[1], &b, 1), 0);
  close(sv[1]);
}

/* ------------------------------------------------------------------ fan-out */

/* Read exactly n bytes from the peer while the loop runs (the connection
 * may still have to write them): waits in poll, 5 s at most. */
static void pump_read(int peer, uint8_t *p, size_t n) {
  uint64_t deadline = hpl__deadline_ms(5000);
  while (n) {
    ssize_t k = recv(peer, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    assert_true(k < 0 && (errno == EAGAIN || errno == EINTR));
    assert_true(hpl__ms_left(deadline) > 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    struct pollfd pf = {.fd = peer, .events = POLLIN};
    poll(&pf, 1, 10);
  }
}

/* The next frame on the peer, read while the loop runs; its request id. */
static uint64_t pump_frame(int peer, uint8_t *payload, size_t cap, uint64_t *plen) {
  static const hpl__frame_limits any = {.max_msg = 1 << 20, .max_payload = 1 << 30,
                                        .max_type = HPL__MSG_MAX_};
  uint8_t hb[HPL__FRAME_HDR_LEN], msg[1024];
  hpl__frame_hdr h;
  pump_read(peer, hb, sizeof hb);
  assert_int_equal(hpl__frame_decode_hdr(hb, sizeof hb, &any, &h, NULL), 0);
  assert_true(h.msg_len <= sizeof msg && h.payload_len <= cap);
  pump_read(peer, msg, h.msg_len);
  pump_read(peer, payload, (size_t)h.payload_len);
  *plen = h.payload_len;
  return h.req_id;
}

#define FO_CONNS 6
#define FO_BIG 100000

/* With the fan-out running (each engine: the state names it), the
 * connections corked in one loop turn are written in one batch. Every frame
 * still arrives, in order on each connection: also where the socket took
 * nothing (its buffer was already full) or only part (a small send buffer),
 * the rest going as the peer reads. */
static const hpl__fanout_kind fanout_ring = HPL__FANOUT_RING, fanout_thread = HPL__FANOUT_THREAD;

static void test_corked_fanout(void **state) {
  hpl__fanout_kind kind = *(const hpl__fanout_kind *)*state;
  int rc = hpl__fanout_start(kind);
  if (rc == HPL_ESYS && kind == HPL__FANOUT_RING) {
    /* a sandbox refusing io_uring (seccomp, kernel.io_uring_disabled): the
     * servers then fall back, and so does this test */
    fprintf(stderr, "test_corked_fanout: io_uring refused here, the ring is not tested\n");
    skip();
  }
  assert_int_equal(rc, 0);
  assert_true(hpl__fanout_on());
  assert_int_equal(hpl__fanout_min(), kind == HPL__FANOUT_RING ? 2 : 4);
  rec r[FO_CONNS];
  int peer[FO_CONNS];
  memset(r, 0, sizeof r);
  open_cork = 1;
  for (int i = 0; i < FO_CONNS; i++) open_conn(&r[i], 0, &peer[i]);
  open_cork = 0;
  /* connection 0's socket is full before its turn: bytes written past
   * libuv, which the peer reads first */
  uv_os_fd_t fd;
  assert_int_equal(uv_fileno((uv_handle_t *)hpl__conn_stream(r[0].c), &fd), 0);
  static uint8_t junk[1u << 16];
  size_t njunk = 0;
  for (;;) {
    ssize_t k = send(fd, junk, sizeof junk, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k <= 0) break;
    njunk += (size_t)k;
  }
  assert_true(njunk > 0);
  /* connection 1's send buffer is small: its big frame goes in part */
  assert_int_equal(uv_fileno((uv_handle_t *)hpl__conn_stream(r[1].c), &fd), 0);
  int small = 4096;
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  uint64_t b0, i0, p0, b1, i1, p1;
  hpl__fanout_stats(&b0, &i0, NULL, &p0);
  static uint8_t pl[FO_BIG], got[FO_BIG];
  pattern(pl, sizeof pl, 3);
  for (int i = 0; i < FO_CONNS; i++)
    assert_int_equal(hpl__conn_reply(r[i].c, 100 + (uint64_t)i, 0, NULL), 0);
  assert_int_equal(hpl__conn_send(r[1].c, HPL__MSG_GET_REP, 200, NULL, pl, FO_BIG, 1, NULL, NULL),
                   0);
  assert_int_equal(hpl__conn_reply(r[1].c, 201, 0, NULL), 0);
  run_now();
  hpl__fanout_stats(&b1, &i1, NULL, &p1);
  assert_int_equal(b1 - b0, 1);        /* one batch ... */
  assert_int_equal(i1 - i0, FO_CONNS); /* ... of every connection */
  assert_true(p1 - p0 >= 2);           /* 0 took nothing, 1 only part */
  assert_true(hpl__conn_write_queue(r[0].c) > 0);
  assert_true(hpl__conn_write_queue(r[1].c) > 0);
  uint64_t plen;
  static uint8_t skip[sizeof junk];
  for (size_t left = njunk; left;) {
    size_t k = left < sizeof skip ? left : sizeof skip;
    pump_read(peer[0], skip, k);
    left -= k;
  }
  for (int i = 0; i < FO_CONNS; i++) {
    assert_int_equal(pump_frame(peer[i], got, sizeof got, &plen), 100 + (uint64_t)i);
    assert_int_equal(plen, 0);
  }
  assert_int_equal(pump_frame(peer[1], got, sizeof got, &plen), 200);
  assert_int_equal(plen, FO_BIG);
  assert_memory_equal(got, pl, FO_BIG);
  assert_int_equal(pump_frame(peer[1], got, sizeof got, &plen), 201);
  for (int i = 0; i < FO_CONNS; i++) {
    assert_int_equal(hpl__conn_write_queue(r[i].c), 0);
    close_all(&r[i], peer[i], 0);
    rec_free(&r[i]);
  }
  hpl__fanout_stop();
  assert_false(hpl__fanout_on());
}

static int setup(void **state) {
  (void)state;
  hpl__log_setup("test_uvconn", HPL__LOG_ERROR); /* protocol errors are expected */
  return uv_loop_init(&loop);
}

static int teardown(void **state) {
  (void)state;
  uv_run(&loop, UV_RUN_DEFAULT); /* nothing may be left running */
  return uv_loop_close(&loop);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_at_every_byte),
      cmocka_unit_test(test_byte_by_byte),
      cmocka_unit_test(test_streamed_payload_pause_resume),
      cmocka_unit_test(test_bad_frames_close_with_eproto),
      cmocka_unit_test(test_writes),
      cmocka_unit_test(test_write_now),
      cmocka_unit_test(test_small_rest_with_next_frame),
      cmocka_unit_test(test_close_with_writes_pending),
      cmocka_unit_test(test_corked_writes),
      cmocka_unit_test(test_corks_per_loop),
      cmocka_unit_test_prestate(test_corked_fanout, (void *)&fanout_ring),
      cmocka_unit_test_prestate(test_corked_fanout, (void *)&fanout_thread),
      cmocka_unit_test(test_full),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
