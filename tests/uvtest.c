/* uvtest.c - see uvtest.h. */
#include "uvtest.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "hoplite.h"
#include "log.h"

uv_loop_t loop;

/* ------------------------------------------------------------------ what the callbacks saw */


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

void rec_free(rec *r) {
  for (int i = 0; i < r->frames; i++) free(r->payloads[i]);
  free(r->sink);
}

/* ------------------------------------------------------------------ plumbing */

const hpl__frame_limits lim = {
    .max_msg = 1024, .max_payload = BIG, .max_type = HPL__MSG_MAX_};

int open_cork;
uv_loop_t *open_loop = &loop;

/* A connection over one end of a socketpair; *peer is the other end. */
hpl__conn *open_conn(rec *r, int stream, int *peer) {
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
void run_until(const int *flag) {
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
void run_now(void) {
  for (int i = 0; i < 3; i++) uv_run(&loop, UV_RUN_NOWAIT);
}

/* Close the connection (if still open) and the peer; on_close ran once. */
void close_all(rec *r, int peer, int want_status) {
  if (r->c) hpl__conn_close(r->c, 0);
  run_until(&r->closes);
  assert_int_equal(r->closes, 1);
  assert_int_equal(r->close_status, want_status);
  close(peer);
  run_now();
  assert_int_equal(r->closes, 1); /* still once */
}

void write_all(int fd, const void *p, size_t n) {
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
void read_all(int fd, void *p, size_t n) {
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
void add_frame(uint8_t *buf, size_t *len, unsigned type, uint64_t req,
                      const ProtobufCMessage *m, const uint8_t *payload, uint64_t plen) {
  size_t fl;
  uint8_t *f = hpl__msg_frame(type, req, m, plen, &fl);
  memcpy(buf + *len, f, fl);
  *len += fl;
  if (plen) memcpy(buf + *len, payload, plen);
  *len += plen;
  free(f);
}

void pattern(uint8_t *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 7 + seed + (i >> 9));
}

/* An INLINE_PUT `id` carrying n pattern bytes (seed; *payload gets them,
 * the caller frees it), then a HEARTBEAT, into a new buffer (the caller
 * frees it): its length in *len, where the first frame ends in *end1. */
uint8_t *put_then_heartbeat(const char *id, uint64_t n, unsigned seed, uint8_t **payload,
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
void open_stream(rec *r, int *peer) {
  r->take_payload = 1;
  r->sink = calloc(1, BIG);
  open_conn(r, 1, peer);
}

void expect_sink_then_heartbeat(const rec *r, const uint8_t *payload, uint64_t n) {
  assert_false(r->got_gap);
  assert_memory_equal(r->sink, payload, n);
  assert_int_equal(r->frames, 2);
  assert_int_equal(r->types[1], HPL__MSG_HEARTBEAT);
}

void on_write(hpl__conn *c, int status, void *arg) {
  rec *r = arg;
  r->write_cbs++;
  r->write_status = status;
}

/* Read one frame from the peer end: header, message, payload (<= cap). */
ProtobufCMessage *peer_frame(int peer, hpl__frame_hdr *h, uint8_t *payload, size_t cap) {
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

int uvt_setup(void **state) {
  (void)state;
  hpl__log_setup("test_uvconn", HPL__LOG_ERROR); /* protocol errors are expected */
  return uv_loop_init(&loop);
}

int uvt_teardown(void **state) {
  (void)state;
  uv_run(&loop, UV_RUN_DEFAULT); /* nothing may be left running */
  return uv_loop_close(&loop);
}

