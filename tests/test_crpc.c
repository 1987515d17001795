/* test_crpc.c - the client RPC layer (src/client/crpc.c) against a scripted peer:
 * a thread on the other end of a socketpair that reads frames and answers
 * as each test's script says. No store, no directory.
 *
 * The peer never calls cmocka (its failures would longjmp across threads):
 * it records what it saw and sets `bad`, and the test asserts after
 * joining it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <cmocka.h>
#include <sodium.h>

#include "crpc.h"
#include "cwait.h"
#include "hoplite.h"
#include "proto.h"
#include "util.h"
#include "wirepeer.h"

/* ------------------------------------------------------------------ the peer */

typedef wp_frame frame;

typedef struct peer peer;
struct peer {
  wp_peer w; /* its end of the socketpair (-1 once the script closed it), what went wrong */
  pthread_t th;
  void (*script)(peer *);
  sem_t go; /* the test lets the script continue */
  /* what scripts record */
  uint64_t release_handle;
  uint64_t release_req;
  int releases;
  int saw_eof;
  unsigned types[8];
};

#define peer_bad(p, ...) wp_bad(&(p)->w, __VA_ARGS__)
#define peer_read(p, f) wp_read(&(p)->w, f)
#define peer_expect(p, type, f) wp_expect(&(p)->w, type, f)
#define frame_free wp_free
#define write_exact wp_write_exact

static void peer_send_split(peer *p, unsigned type, uint64_t req, const ProtobufCMessage *m,
                            const void *payload, size_t plen, size_t piece) {
  wp_send(&p->w, type, req, m, payload, plen, piece);
}

static void peer_send(peer *p, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  wp_send(&p->w, type, req, m, NULL, 0, 0);
}

static void get_rep(peer *p, uint64_t req, int status, uint64_t handle) {
  Hplpb__GetRep r = HPLPB__GET_REP__INIT;
  r.status = status;
  r.handle = handle;
  peer_send(p, HPL__MSG_GET_REP, req, &r.base);
}

static void *peer_main(void *arg) {
  peer *p = arg;
  p->script(p);
  return NULL;
}

/* ------------------------------------------------------------------ fixture */

static const hpl__crpc_opts store_like = {
    .lim = {.max_msg = 1u << 20, .max_payload = 0, .max_type = HPL__MSG_MAX_}};

static hpl__crpc *R; /* the client's end */

static void start(peer *p, void (*script)(peer *), const hpl__crpc_opts *o) {
  memset(p, 0, sizeof *p);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct timeval tv = {.tv_sec = 10};
  setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* a lost test ends */
  assert_int_equal(hpl__crpc_new(sv[0], o, &R), 0);
  p->w.fd = sv[1];
  p->script = script;
  sem_init(&p->go, 0, 0);
  assert_int_equal(pthread_create(&p->th, NULL, peer_main, p), 0);
}

/* Join the peer, check it had no complaint, free the handle. */
static void finish(peer *p) {
  pthread_join(p->th, NULL);
  if (p->w.fd >= 0) close(p->w.fd);
  sem_destroy(&p->go);
  hpl__crpc_free(R);
  R = NULL;
  if (p->w.bad[0]) fail_msg("peer: %s", p->w.bad);
}

static uint64_t ms_since(uint64_t t0) { return hpl__now_ms() - t0; }

/* An upper bound on "at once": `ms`, times $HPL_TEST_TIMEOUT_SCALE (the
 * sanitizer build runs slower), like the harness's th_ms. */
static uint64_t at_once(uint64_t ms) {
  const char *e = getenv("HPL_TEST_TIMEOUT_SCALE");
  double k = e ? atof(e) : 1.0;
  return (uint64_t)((double)ms * (k >= 1.0 ? k : 1.0));
}

/* A GET for `id`; returns the call's result and the reply's handle. */
static int get(const char *id, int64_t timeout_ms, uint64_t *handle) {
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = (char *)id;
  hpl__crpc_msg m;
  int rc = hpl__crpc_call(R, HPL__MSG_GET, &g.base, hpl__deadline_ms(timeout_ms), &m);
  if (rc) return rc;
  Hplpb__GetRep *rep = m.type == HPL__MSG_GET_REP
                           ? (Hplpb__GetRep *)hpl__crpc_msg_unpack(&m, HPL__MSG_GET_REP)
                           : NULL;
  hpl__crpc_msg_free(&m);
  if (!rep) return HPL_EPROTO;
  if (handle) *handle = rep->handle;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

typedef struct caller {
  pthread_t th;
  char id[32];
  int64_t timeout_ms;
  int rc;
  uint64_t handle;
  uint64_t ms; /* how long the call took */
} caller;

static void *caller_main(void *arg) {
  caller *c = arg;
  uint64_t t0 = hpl__now_ms();
  c->rc = get(c->id, c->timeout_ms, &c->handle);
  c->ms = ms_since(t0);
  return NULL;
}

static void callers_start(caller *cs, int n, int64_t timeout_ms) {
  for (int i = 0; i < n; i++) {
    snprintf(cs[i].id, sizeof cs[i].id, "obj-%d", i);
    cs[i].timeout_ms = timeout_ms;
    assert_int_equal(pthread_create(&cs[i].th, NULL, caller_main, &cs[i]), 0);
  }
}

static void callers_join(caller *cs, int n) {
  for (int i = 0; i < n; i++) pthread_join(cs[i].th, NULL);
}

/* ------------------------------------------------------------------ tests */

#define NCALLERS 4
#define ROUNDS 3

/* Read every caller's GET, then answer in the reverse order; the handle
 * says whose answer it is (1000 + the number in the id). */
static void script_reverse(peer *p) {
  for (int round = 0; round < ROUNDS; round++) {
    frame f[NCALLERS];
    for (int i = 0; i < NCALLERS; i++)
      if (peer_expect(p, HPL__MSG_GET, &f[i]) != 0) return;
    for (int i = NCALLERS - 1; i >= 0; i--) {
      const char *id = ((Hplpb__GetReq *)f[i].m)->id;
      get_rep(p, f[i].h.req_id, 0, 1000 + (uint64_t)atoi(id + 4));
      frame_free(&f[i]);
    }
  }
}

static void test_out_of_order_replies(void **state) {
  (void)state;
  peer p;
  start(&p, script_reverse, &store_like);
  for (int round = 0; round < ROUNDS; round++) {
    caller cs[NCALLERS] = {0};
    callers_start(cs, NCALLERS, 5000);
    callers_join(cs, NCALLERS);
    for (int i = 0; i < NCALLERS; i++) {
      assert_int_equal(cs[i].rc, 0);
      assert_int_equal(cs[i].handle, 1000 + (uint64_t)i);
    }
  }
  assert_null(hpl__crpc_broken(R));
  finish(&p);
}

/* Two GETs whose callers give up; then their late answers (one granting a
 * hold, one a failure), the CONTAINS that follows, and what the client
 * sent meanwhile. */
static void script_late(peer *p) {
  frame a, b, c, rel, d;
  if (peer_expect(p, HPL__MSG_GET, &a) != 0 || peer_expect(p, HPL__MSG_GET, &b) != 0) return;
  sem_wait(&p->go); /* both callers timed out */
  get_rep(p, a.h.req_id, 0, 77);             /* a hold nobody takes */
  get_rep(p, b.h.req_id, HPL_ENOTFOUND, 78); /* no hold: nothing to release */
  if (peer_expect(p, HPL__MSG_CONTAINS, &c) != 0) return;
  /* the client read both late replies while waiting for CONTAINS_REP */
  if (peer_expect(p, HPL__MSG_RELEASE, &rel) != 0) return;
  p->release_handle = ((Hplpb__HandleReq *)rel.m)->handle;
  p->release_req = rel.h.req_id;
  Hplpb__ContainsRep cr = HPLPB__CONTAINS_REP__INIT;
  cr.local = 1;
  peer_send(p, HPL__MSG_CONTAINS_REP, c.h.req_id, &cr.base);
  /* the next frame is the next request, not a second RELEASE */
  if (peer_expect(p, HPL__MSG_STAT, &d) != 0) return;
  peer_send(p, HPL__MSG_STAT_REP, d.h.req_id, NULL);
  frame_free(&a);
  frame_free(&b);
  frame_free(&c);
  frame_free(&rel);
  frame_free(&d);
}

static void test_late_reply_dropped_and_hold_released(void **state) {
  (void)state;
  peer p;
  start(&p, script_late, &store_like);
  assert_int_equal(get("a", 100, NULL), HPL_ETIMEDOUT);
  assert_int_equal(get("b", 100, NULL), HPL_ETIMEDOUT);
  assert_null(hpl__crpc_broken(R)); /* a timeout alone does not break it */
  sem_post(&p.go);
  Hplpb__IdReq idr = HPLPB__ID_REQ__INIT;
  idr.id = "c";
  hpl__crpc_msg m;
  assert_int_equal(hpl__crpc_call(R, HPL__MSG_CONTAINS, &idr.base, hpl__deadline_ms(5000), &m), 0);
  assert_int_equal(m.type, HPL__MSG_CONTAINS_REP); /* not one of the late GET_REPs */
  Hplpb__ContainsRep *cr = (Hplpb__ContainsRep *)hpl__crpc_msg_unpack(&m, HPL__MSG_CONTAINS_REP);
  assert_non_null(cr);
  assert_int_equal(cr->local, 1);
  protobuf_c_message_free_unpacked(&cr->base, NULL);
  hpl__crpc_msg_free(&m);
  assert_int_equal(hpl__crpc_call(R, HPL__MSG_STAT, &idr.base, hpl__deadline_ms(5000), &m), 0);
  assert_int_equal(m.type, HPL__MSG_STAT_REP);
  hpl__crpc_msg_free(&m);
  finish(&p);
  assert_int_equal(p.release_handle, 77);
  assert_int_equal(p.release_req, 0); /* one-way */
}

/* Read the callers' requests, then hang up. */
static void script_close(peer *p) {
  frame f;
  for (int i = 0; i < 3; i++) {
    if (peer_expect(p, HPL__MSG_GET, &f) != 0) return;
    frame_free(&f);
  }
  close(p->w.fd);
  p->w.fd = -1;
}

/* Every later call and send on a broken handle fails at once. */
static void assert_fails_at_once(void) {
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(get("later", 5000, NULL), HPL_ECONN);
  Hplpb__HandleReq n = HPLPB__HANDLE_REQ__INIT;
  assert_int_equal(hpl__crpc_send(R, HPL__MSG_RELEASE, &n.base, hpl__deadline_ms(5000)), HPL_ECONN);
  assert_true(ms_since(t0) < at_once(500));
}

static void test_peer_close_fails_waiters(void **state) {
  (void)state;
  peer p;
  start(&p, script_close, &store_like);
  caller cs[3] = {0};
  callers_start(cs, 3, 5000);
  callers_join(cs, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(cs[i].rc, HPL_ECONN);
    assert_true(cs[i].ms < 4000);
  }
  const char *why = hpl__crpc_broken(R);
  assert_non_null(why);
  assert_non_null(strstr(why, "closed"));
  assert_fails_at_once();
  finish(&p);
}

/* Answer the request with bytes that are no frame. */
static void script_garbage(peer *p) {
  frame f;
  if (peer_expect(p, HPL__MSG_GET, &f) != 0) return;
  frame_free(&f);
  uint8_t junk[64];
  for (int i = 0; i < 64; i++) junk[i] = (uint8_t)(i * 31 + 5);
  write_exact(p->w.fd, junk, sizeof junk);
}

static void test_garbage_breaks_the_handle(void **state) {
  (void)state;
  peer p;
  start(&p, script_garbage, &store_like);
  assert_int_equal(get("x", 5000, NULL), HPL_ECONN);
  const char *why = hpl__crpc_broken(R);
  assert_non_null(why);
  assert_non_null(strstr(why, "bad frame"));
  assert_non_null(strstr(why, "magic"));
  assert_fails_at_once();
  finish(&p);
}

/* Read nothing until told; then drain what the client sent and see the
 * stream end. */
static void script_deaf(peer *p) {
  sem_wait(&p->go);
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = read(p->w.fd, buf, sizeof buf);
    if (n > 0) continue;
    p->saw_eof = n == 0;
    return;
  }
}

/* An id far longer than the socket buffers hold: a GET naming it stops
 * part-way when the peer does not read. */
static char *huge_id(void) {
  size_t big = 4u << 20;
  char *id = malloc(big + 1);
  memset(id, 'x', big);
  id[big] = 0;
  return id;
}

static void test_partial_write_breaks_the_handle(void **state) {
  (void)state;
  peer p;
  start(&p, script_deaf, &store_like);
  char *id = huge_id();
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(get(id, 200, NULL), HPL_ETIMEDOUT);
  assert_true(ms_since(t0) >= 190);
  free(id);
  const char *why = hpl__crpc_broken(R);
  assert_non_null(why);
  assert_non_null(strstr(why, "timed out after"));
  /* the stream is cut mid-frame: nothing may follow on it */
  assert_fails_at_once();
  sem_post(&p.go);
  finish(&p);
  assert_true(p.saw_eof); /* the socket was shut down */
}

static void *big_get(void *arg) {
  caller *c = arg;
  char *id = huge_id();
  uint64_t t0 = hpl__now_ms();
  c->rc = get(id, c->timeout_ms, NULL);
  c->ms = ms_since(t0);
  free(id);
  return NULL;
}

/* A sender waiting for another one to finish writing gives up at its own
 * deadline, and having written nothing it leaves the handle usable. */
static void test_waiting_writer_keeps_its_deadline(void **state) {
  (void)state;
  peer p;
  start(&p, script_deaf, &store_like);
  caller writer = {.timeout_ms = 1500};
  assert_int_equal(pthread_create(&writer.th, NULL, big_get, &writer), 0);
  /* the writer is stuck on the full socket by now (100 ms was too short
   * on a loaded machine: the RELEASE then went out before it) */
  usleep(400000);
  Hplpb__HandleReq n = HPLPB__HANDLE_REQ__INIT;
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(hpl__crpc_send(R, HPL__MSG_RELEASE, &n.base, hpl__deadline_ms(150)),
                   HPL_ETIMEDOUT);
  uint64_t took = ms_since(t0);
  assert_true(took >= 140 && took < 1000);
  assert_null(hpl__crpc_broken(R)); /* the writer still holds the stream */
  pthread_join(writer.th, NULL);
  assert_int_equal(writer.rc, HPL_ETIMEDOUT);
  assert_non_null(hpl__crpc_broken(R)); /* it was cut off part-way */
  sem_post(&p.go);
  finish(&p);
}

/* Answer nothing; after the test's signal, answer the one request that
 * still waits (the second of two). */
static void script_answer_second(peer *p) {
  frame a, b;
  if (peer_expect(p, HPL__MSG_GET, &a) != 0 || peer_expect(p, HPL__MSG_GET, &b) != 0) return;
  sem_wait(&p->go);
  const char *id = ((Hplpb__GetReq *)b.m)->id;
  uint64_t req = strcmp(id, "waits") == 0 ? b.h.req_id : a.h.req_id;
  get_rep(p, req, 0, 5);
  frame_free(&a);
  frame_free(&b);
}

/* A short call times out on time whether it is the reader or not; the
 * other caller, reader or not, still gets its reply afterwards. */
static void timeouts_with(int short_first) {
  peer p;
  start(&p, script_answer_second, &store_like);
  caller lng = {.timeout_ms = 5000}, shrt = {.timeout_ms = 200};
  strcpy(lng.id, "waits");
  strcpy(shrt.id, "gives-up");
  caller *first = short_first ? &shrt : &lng, *second = short_first ? &lng : &shrt;
  assert_int_equal(pthread_create(&first->th, NULL, caller_main, first), 0);
  usleep(50000); /* the first caller is the reader now */
  assert_int_equal(pthread_create(&second->th, NULL, caller_main, second), 0);
  pthread_join(shrt.th, NULL);
  assert_int_equal(shrt.rc, HPL_ETIMEDOUT);
  assert_true(shrt.ms >= 190 && shrt.ms < 1500);
  sem_post(&p.go);
  pthread_join(lng.th, NULL);
  assert_int_equal(lng.rc, 0);
  assert_int_equal(lng.handle, 5);
  assert_null(hpl__crpc_broken(R));
  finish(&p);
}

static void test_timeout_of_follower(void **state) {
  (void)state;
  timeouts_with(0);
}

static void test_timeout_of_reader_hands_over(void **state) {
  (void)state;
  timeouts_with(1);
}

/* Never answer; see the one-way note go out. */
static void script_silent(peer *p) {
  frame f;
  if (peer_expect(p, HPL__MSG_GET, &f) != 0) return;
  frame_free(&f);
  if (peer_expect(p, HPL__MSG_PROGRESS, &f) != 0) return;
  p->types[0] = f.h.type;
  p->release_req = f.h.req_id;
  frame_free(&f);
}

static void test_timeout_and_one_way_send(void **state) {
  (void)state;
  peer p;
  start(&p, script_silent, &store_like);
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(get("nobody-answers", 150, NULL), HPL_ETIMEDOUT);
  uint64_t took = ms_since(t0);
  assert_true(took >= 140 && took < 1500);
  /* a deadline already past: no wait at all */
  t0 = hpl__now_ms();
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = "past";
  hpl__crpc_msg m;
  assert_int_equal(hpl__crpc_call(R, HPL__MSG_GET, &g.base, hpl__now_ms() - 1, &m),
                   HPL_ETIMEDOUT);
  assert_true(ms_since(t0) < at_once(100));
  Hplpb__ProgressNote n = HPLPB__PROGRESS_NOTE__INIT;
  n.handle = 9;
  n.bytes = 100;
  assert_int_equal(hpl__crpc_send(R, HPL__MSG_PROGRESS, &n.base, hpl__deadline_ms(5000)), 0);
  finish(&p);
  assert_int_equal(p.types[0], HPL__MSG_PROGRESS);
  assert_int_equal(p.release_req, 0);
}

/* ------------------------------------------------------------ greeting, payloads */

static int count_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 1024; fd++)
    if (fcntl(fd, F_GETFD) != -1) n++;
  return n;
}

/* HELLO with three descriptors attached (one more than the client keeps). */
static void script_hello(peer *p) {
  Hplpb__Hello h = HPLPB__HELLO__INIT;
  h.pool_size = 4096;
  size_t len;
  uint8_t *f = hpl__msg_frame(HPL__MSG_HELLO, 0, &h.base, 0, &len);
  int fds[3];
  for (int i = 0; i < 3; i++) fds[i] = memfd_create("test", MFD_CLOEXEC);
  struct iovec iov = {.iov_base = f, .iov_len = len};
  union {
    char buf[CMSG_SPACE(sizeof fds)];
    struct cmsghdr align;
  } cbuf;
  memset(&cbuf, 0, sizeof cbuf);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
                       .msg_controllen = sizeof cbuf.buf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof fds);
  memcpy(CMSG_DATA(cm), fds, sizeof fds);
  if (sendmsg(p->w.fd, &msg, MSG_NOSIGNAL) != (ssize_t)len) peer_bad(p, "sendmsg failed");
  for (int i = 0; i < 3; i++) close(fds[i]);
  free(f);
}

static void test_greeting_with_descriptors(void **state) {
  (void)state;
  int before = count_fds();
  peer p;
  start(&p, script_hello, &store_like);
  hpl__crpc_msg m;
  assert_int_equal(hpl__crpc_greeting(R, hpl__deadline_ms(5000), &m), 0);
  assert_int_equal(m.type, HPL__MSG_HELLO);
  assert_int_equal(m.req_id, 0);
  Hplpb__Hello *h = (Hplpb__Hello *)hpl__crpc_msg_unpack(&m, HPL__MSG_HELLO);
  assert_non_null(h);
  assert_int_equal(h->pool_size, 4096);
  protobuf_c_message_free_unpacked(&h->base, NULL);
  hpl__crpc_msg_free(&m);
  int fds[3] = {-1, -1, -1};
  assert_int_equal(hpl__crpc_take_fds(R, fds, 3), HPL__CRPC_MAX_FDS);
  struct stat st;
  assert_int_equal(fstat(fds[0], &st), 0);
  assert_int_equal(fstat(fds[1], &st), 0);
  assert_int_equal(hpl__crpc_take_fds(R, fds + 2, 1), 0);
  close(fds[0]);
  close(fds[1]);
  finish(&p);
  assert_int_equal(count_fds(), before); /* the third one was closed */
}

#define PAYLOAD_MAX 8192
static const hpl__crpc_opts peek_like = {
    .lim = {.max_msg = 1024, .max_payload = PAYLOAD_MAX, .max_type = HPL__MSG_MAX_},
    .rbuf_size = HPL__FRAME_HDR_LEN + 1024 + PAYLOAD_MAX};

static void fill(uint8_t *b, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 13 + (size_t)seed);
}

/* PEEK replies with payloads: a large one whole, a small one whole, one
 * in pieces, then one over the limit. */
static void script_payloads(peer *p) {
  static uint8_t pl[PAYLOAD_MAX + 100];
  size_t sizes[4] = {6000, 1000, 2500, PAYLOAD_MAX + 1};
  size_t pieces[4] = {0, 0, 700, 0};
  for (int i = 0; i < 4; i++) {
    frame f;
    if (peer_expect(p, HPL__MSG_PEEK, &f) != 0) return;
    Hplpb__PeekRep r = HPLPB__PEEK_REP__INIT;
    r.size = sizes[i];
    r.inline_ = 1;
    fill(pl, sizes[i], i);
    peer_send_split(p, HPL__MSG_PEEK_REP, f.h.req_id, &r.base, pl, sizes[i], pieces[i]);
    frame_free(&f);
  }
}

static int peek(hpl__crpc_msg *m) {
  Hplpb__PeekReq r = HPLPB__PEEK_REQ__INIT;
  r.id = "small";
  return hpl__crpc_call(R, HPL__MSG_PEEK, &r.base, hpl__deadline_ms(5000), m);
}

static void test_replies_with_payloads(void **state) {
  (void)state;
  peer p;
  start(&p, script_payloads, &peek_like);
  uint8_t want[PAYLOAD_MAX];
  hpl__crpc_msg m;
  /* over 4 KiB, whole in one read: the read buffer itself, header included */
  assert_int_equal(peek(&m), 0);
  assert_int_equal(m.payload_len, 6000);
  assert_int_equal(m.msg_off, HPL__FRAME_HDR_LEN);
  assert_int_equal(m.payload_off, HPL__FRAME_HDR_LEN + m.msg_len);
  fill(want, 6000, 0);
  assert_memory_equal(m.buf + m.payload_off, want, 6000);
  hpl__crpc_msg_free(&m);
  /* small, whole in one read: copied out, the payload 64-byte aligned */
  assert_int_equal(peek(&m), 0);
  assert_int_equal(m.payload_len, 1000);
  assert_int_equal((uintptr_t)(m.buf + m.payload_off) % 64, 0);
  assert_int_equal(m.payload_off, m.msg_off + m.msg_len);
  fill(want, 1000, 1);
  assert_memory_equal(m.buf + m.payload_off, want, 1000);
  hpl__crpc_msg_free(&m);
  /* in pieces: assembled in a buffer of its own, the payload aligned */
  assert_int_equal(peek(&m), 0);
  assert_int_equal(m.payload_len, 2500);
  assert_int_equal((uintptr_t)(m.buf + m.payload_off) % 64, 0);
  fill(want, 2500, 2);
  assert_memory_equal(m.buf + m.payload_off, want, 2500);
  Hplpb__PeekRep *r = (Hplpb__PeekRep *)hpl__crpc_msg_unpack(&m, HPL__MSG_PEEK_REP);
  assert_non_null(r);
  assert_int_equal(r->size, 2500);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  hpl__crpc_msg_free(&m);
  /* over the limit: refused from the header, the handle breaks */
  assert_int_equal(peek(&m), HPL_ECONN);
  assert_non_null(strstr(hpl__crpc_broken(R), "payload longer"));
  finish(&p);
}

/* ------------------------------------------------------------------ batches */

#define NBATCH 5

/* Every request of the batch arrives before any answer goes out; then the
 * answers, in reverse order (handle 1000 + the number in the id). */
static void script_batch(peer *p) {
  frame f[NBATCH];
  for (int i = 0; i < NBATCH; i++)
    if (peer_expect(p, HPL__MSG_GET, &f[i]) != 0) return;
  for (int i = NBATCH - 1; i >= 0; i--) {
    get_rep(p, f[i].h.req_id, 0, 1000 + (uint64_t)atoi(((Hplpb__GetReq *)f[i].m)->id + 4));
    frame_free(&f[i]);
  }
}

typedef struct finisher {
  pthread_t th;
  hpl__crpc_ticket *t;
  int rc;
  uint64_t handle;
} finisher;

static int ticket_handle(hpl__crpc_ticket *t, uint64_t *handle) {
  hpl__crpc_msg m;
  int rc = hpl__crpc_finish(R, t, hpl__deadline_ms(5000), &m);
  if (rc) return rc;
  Hplpb__GetRep *g = (Hplpb__GetRep *)hpl__crpc_msg_unpack(&m, HPL__MSG_GET_REP);
  hpl__crpc_msg_free(&m);
  if (!g) return HPL_EPROTO;
  *handle = g->handle;
  protobuf_c_message_free_unpacked(&g->base, NULL);
  return 0;
}

static void *finisher_main(void *arg) {
  finisher *f = arg;
  f->rc = ticket_handle(f->t, &f->handle);
  return NULL;
}

/* One thread sends a batch; its tickets are finished in any order, one of
 * them by another thread. */
static void test_batch_tickets_any_order(void **state) {
  (void)state;
  peer p;
  start(&p, script_batch, &store_like);
  Hplpb__GetReq g[NBATCH];
  hpl__crpc_req q[NBATCH];
  char ids[NBATCH][16];
  for (int i = 0; i < NBATCH; i++) {
    hplpb__get_req__init(&g[i]);
    snprintf(ids[i], sizeof ids[i], "obj-%d", i);
    g[i].id = ids[i];
    q[i] = (hpl__crpc_req){.type = HPL__MSG_GET, .m = &g[i].base};
  }
  hpl__crpc_ticket *t[NBATCH];
  size_t started;
  assert_int_equal(hpl__crpc_start(R, q, NBATCH, hpl__deadline_ms(5000), t, &started), 0);
  assert_int_equal(started, NBATCH);
  finisher other = {.t = t[2]};
  assert_int_equal(pthread_create(&other.th, NULL, finisher_main, &other), 0);
  static const int order[] = {4, 0, 3, 1};
  for (int k = 0; k < 4; k++) {
    uint64_t h = 0;
    assert_int_equal(ticket_handle(t[order[k]], &h), 0);
    assert_int_equal(h, 1000 + (uint64_t)order[k]);
  }
  pthread_join(other.th, NULL);
  assert_int_equal(other.rc, 0);
  assert_int_equal(other.handle, 1002);
  /* nothing to send, too much to send */
  assert_int_equal(hpl__crpc_start(R, q, 0, hpl__deadline_ms(5000), t, &started), 0);
  assert_int_equal(started, 0);
  assert_int_equal(hpl__crpc_start(R, q, HPL__CRPC_MAX_BATCH + 1, hpl__deadline_ms(5000), t,
                                   &started), HPL_EINVAL);
  assert_null(hpl__crpc_broken(R));
  finish(&p);
}

/* Read nothing until told, then count every byte until the stream ends. */
static size_t deaf_bytes;
static void script_deaf_count(peer *p) {
  sem_wait(&p->go);
  uint8_t buf[65536];
  ssize_t n;
  while ((n = read(p->w.fd, buf, sizeof buf)) > 0) deaf_bytes += (size_t)n;
}

/* A batch bigger than the socket takes, to a peer that reads nothing: the
 * frames that went out whole have tickets, the call says why the rest did
 * not, and a frame cut off part-way broke the handle. */
static void test_batch_cut_off(void **state) {
  (void)state;
  enum { N = 64, PL = 32768 };
  peer p;
  deaf_bytes = 0;
  start(&p, script_deaf_count, &store_like);
  static uint8_t payload[PL];
  Hplpb__PutReq m = HPLPB__PUT_REQ__INIT;
  m.id = "x";
  m.size = PL;
  hpl__crpc_req q[N];
  for (int i = 0; i < N; i++)
    q[i] = (hpl__crpc_req){.type = HPL__MSG_PUT, .m = &m.base, .payload = payload, .plen = PL};
  size_t flen = HPL__FRAME_HDR_LEN + protobuf_c_message_get_packed_size(&m.base) + PL;
  hpl__crpc_ticket *t[N];
  size_t started;
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(hpl__crpc_start(R, q, N, hpl__deadline_ms(200), t, &started), HPL_ETIMEDOUT);
  assert_true(ms_since(t0) < 2000);
  assert_true(started > 0 && started < N);
  const char *why = hpl__crpc_broken(R);
  for (size_t i = 0; i < started; i++) {
    hpl__crpc_msg r;
    assert_int_equal(hpl__crpc_finish(R, t[i], hpl__deadline_ms(100), &r),
                     why ? HPL_ECONN : HPL_ETIMEDOUT);
  }
  if (!why) hpl__crpc_free(R), R = NULL; /* ended exactly on a frame: close it ourselves */
  else assert_non_null(strstr(why, "timed out after"));
  sem_post(&p.go);
  pthread_join(p.th, NULL);
  /* whole frames for the tickets, then at most part of one more */
  assert_true(deaf_bytes >= started * flen && deaf_bytes < (started + 1) * flen);
  close(p.w.fd);
  sem_destroy(&p.go);
  hpl__crpc_free(R);
  R = NULL;
  if (p.w.bad[0]) fail_msg("peer: %s", p.w.bad);
}

/* ------------------------------------------------------------------ sessions */

static const uint8_t k_up[HPL__FRAME_KEY_LEN] = {1, 2, 3}, k_down[HPL__FRAME_KEY_LEN] = {4, 5, 6};

/* Read one tagged frame from fd and check its tag with rx; the frame's
 * header in *h. 0, or -1 (short read or a tag that does not match). */
static int read_tagged(int fd, hpl__fmac *rx, hpl__frame_hdr *h) {
  uint8_t hdr[HPL__FRAME_HDR_LEN], msg[4096], tag[HPL__FRAME_TAG_LEN];
  hpl__frame_limits lim = {.max_msg = sizeof msg, .max_payload = sizeof msg,
                           .max_type = HPL__MSG_MAX_, .tagged = 1};
  if (wp_read_exact(fd, hdr, sizeof hdr) || hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, h, NULL) ||
      h->msg_len + h->payload_len > sizeof msg || wp_read_exact(fd, msg, h->msg_len) ||
      wp_read_exact(fd, tag, sizeof tag) || wp_read_exact(fd, msg + h->msg_len, h->payload_len))
    return -1;
  hpl__fmac_begin(rx, h, msg, h->msg_len);
  if (h->flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(rx, msg + h->msg_len, h->payload_len);
  return hpl__fmac_check(rx, tag) == 0 ? 0 : -1;
}

/* Write a tagged PEEK_REP with `plen` payload bytes; with flip >= 0 that
 * byte of the whole frame is changed after tagging (on the way). */
static void write_tagged_rep(int fd, hpl__fmac *tx, uint64_t req, const uint8_t *payload,
                             size_t plen, long flip) {
  uint8_t f[4096];
  Hplpb__PeekRep r = HPLPB__PEEK_REP__INIT;
  r.inline_ = 1;
  r.size = plen;
  size_t mlen = protobuf_c_message_pack(&r.base, f + HPL__FRAME_HDR_LEN);
  hpl__frame_hdr h = {.type = HPL__MSG_PEEK_REP, .msg_len = (uint32_t)mlen, .req_id = req,
                      .payload_len = plen,
                      .flags = HPL__FRAME_F_TAG | (plen ? HPL__FRAME_F_TAG_PAYLOAD : 0)};
  hpl__frame_encode_hdr(&h, f);
  uint8_t *tag = f + HPL__FRAME_HDR_LEN + mlen;
  hpl__fmac_begin(tx, &h, f + HPL__FRAME_HDR_LEN, mlen);
  hpl__fmac_add(tx, payload, plen);
  hpl__fmac_end(tx, tag);
  memcpy(tag + HPL__FRAME_TAG_LEN, payload, plen);
  size_t len = HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + plen;
  if (flip >= 0) f[flip] ^= 0x20;
  assert_int_equal(wp_write_exact(fd, f, len), 0);
}

/* With session keys the handle tags what it sends (in order, payloads
 * covered) and checks every reply: a good one is delivered, one changed
 * on the way breaks the handle, saying so, and is never delivered. */
static int session_gmac; /* test_session_tags with GMAC tags (test_session_tags_gmac) */

static void test_session_tags(void **state) {
  (void)state;
  static hpl__fmac peer_rx, peer_tx;
  hpl__fmac_init_as(&peer_rx, k_up, session_gmac);
  hpl__fmac_init_as(&peer_tx, k_down, session_gmac);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  hpl__crpc_opts o = {.lim = {.max_msg = 1024, .max_payload = 4096, .max_type = HPL__MSG_MAX_},
                      .rbuf_size = 8192, .send_key = k_up, .recv_key = k_down,
                      .gmac = session_gmac};
  hpl__crpc *r;
  assert_int_equal(hpl__crpc_new(sv[0], &o, &r), 0);
  uint8_t obj[100];
  memset(obj, 'Q', sizeof obj);
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = "s/x";
  for (int round = 0; round < 3; round++) {
    hpl__crpc_req q = {.type = HPL__MSG_PEEK, .m = &g.base, .payload = round == 1 ? obj : NULL,
                       .plen = round == 1 ? 10 : 0};
    hpl__crpc_ticket *t;
    size_t started;
    assert_int_equal(hpl__crpc_start(r, &q, 1, hpl__deadline_ms(5000), &t, &started), 0);
    hpl__frame_hdr h;
    assert_int_equal(read_tagged(sv[1], &peer_rx, &h), 0); /* tagged, in sequence */
    assert_int_equal(h.type, HPL__MSG_PEEK);
    /* round 2: one byte of the payload changed on the way */
    long flip = round == 2 ? (long)(HPL__FRAME_HDR_LEN + 4 + HPL__FRAME_TAG_LEN + 50) : -1;
    write_tagged_rep(sv[1], &peer_tx, h.req_id, obj, sizeof obj, flip);
    hpl__crpc_msg m = {0};
    int rc = hpl__crpc_finish(r, t, hpl__deadline_ms(5000), &m);
    if (round < 2) {
      assert_int_equal(rc, 0);
      assert_int_equal(m.payload_len, sizeof obj);
      assert_memory_equal(m.buf + m.payload_off, obj, sizeof obj);
      hpl__crpc_msg_free(&m);
    } else {
      assert_int_equal(rc, HPL_ECONN);
      assert_null(m.buf);
      const char *why = hpl__crpc_broken(r);
      assert_non_null(why);
      assert_non_null(strstr(why, "MAC"));
    }
  }
  hpl__crpc_free(r);
  close(sv[1]);
  hpl__fmac_wipe(&peer_rx);
  hpl__fmac_wipe(&peer_tx);
}

/* The same with GMAC tags (both ends with AES in hardware), whose small
 * frames the handle checks in place (frame.h, hpl__fmac_check_span). */
static void test_session_tags_gmac(void **state) {
  if (sodium_init() < 0 || !crypto_aead_aes256gcm_is_available()) skip();
  session_gmac = 1;
  test_session_tags(state);
  session_gmac = 0;
}

/* A reply sent twice (replayed) fails the second time. */
static void test_session_replay(void **state) {
  (void)state;
  static hpl__fmac peer_rx, peer_tx, replay_tx;
  hpl__fmac_init(&peer_rx, k_up);
  hpl__fmac_init(&peer_tx, k_down);
  hpl__fmac_init(&replay_tx, k_down);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  hpl__crpc_opts o = {.lim = {.max_msg = 1024, .max_payload = 4096, .max_type = HPL__MSG_MAX_},
                      .send_key = k_up, .recv_key = k_down};
  hpl__crpc *r;
  assert_int_equal(hpl__crpc_new(sv[0], &o, &r), 0);
  uint8_t obj[8] = "original";
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = "s/y";
  hpl__crpc_req q = {.type = HPL__MSG_PEEK, .m = &g.base};
  hpl__crpc_ticket *t[2];
  size_t started;
  assert_int_equal(hpl__crpc_start(r, &q, 1, hpl__deadline_ms(5000), &t[0], &started), 0);
  assert_int_equal(hpl__crpc_start(r, &q, 1, hpl__deadline_ms(5000), &t[1], &started), 0);
  hpl__frame_hdr h0, h1;
  assert_int_equal(read_tagged(sv[1], &peer_rx, &h0), 0);
  assert_int_equal(read_tagged(sv[1], &peer_rx, &h1), 0);
  write_tagged_rep(sv[1], &peer_tx, h0.req_id, obj, sizeof obj, -1);
  /* the relay sends the first reply again, its request id made the second's:
   * same key, but sequence number 0 again */
  write_tagged_rep(sv[1], &replay_tx, h1.req_id, obj, sizeof obj, -1);
  hpl__crpc_msg m = {0};
  assert_int_equal(hpl__crpc_finish(r, t[0], hpl__deadline_ms(5000), &m), 0);
  hpl__crpc_msg_free(&m);
  assert_int_equal(hpl__crpc_finish(r, t[1], hpl__deadline_ms(5000), &m), HPL_ECONN);
  assert_non_null(strstr(hpl__crpc_broken(r), "MAC"));
  hpl__crpc_free(r);
  close(sv[1]);
}

/* ---- hpl__turn (cwait.h): one holder at a time, waiters woken, a deadline kept */

typedef struct turn_run {
  hpl__turn t;
  long count; /* changed only by the turn's holder */
} turn_run;

static void *turn_worker(void *arg) {
  turn_run *tr = arg;
  for (int i = 0; i < 20000; i++) {
    if (hpl__turn_take(&tr->t, UINT64_MAX) != 0) abort();
    long v = tr->count; /* a read-modify-write that a second holder would break */
    if ((i & 255) == 0) sched_yield();
    tr->count = v + 1;
    hpl__turn_give(&tr->t);
  }
  return NULL;
}

/* Four threads taking and giving one turn 20 000 times each: every change
 * of the count survives, so two never held it at once, and nobody hangs
 * (a giver that missed a waiter would leave it asleep). A held turn makes a
 * taker with a deadline fail after it, not before; given back, it is free. */
static void test_turn(void **state) {
  (void)state;
  static turn_run tr;
  hpl__turn_init(&tr.t);
  tr.count = 0;
  pthread_t th[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, turn_worker, &tr), 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  assert_int_equal(tr.count, 4 * 20000);
  assert_int_equal(hpl__turn_take(&tr.t, UINT64_MAX), 0);
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(hpl__turn_take(&tr.t, t0 + 50), HPL_ETIMEDOUT);
  assert_true(hpl__now_ms() >= t0 + 50);
  hpl__turn_give(&tr.t);
  assert_int_equal(hpl__turn_take(&tr.t, 0), 0); /* free: taken at once, even with no time */
  hpl__turn_give(&tr.t);
  hpl__turn_destroy(&tr.t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_out_of_order_replies),
      cmocka_unit_test(test_late_reply_dropped_and_hold_released),
      cmocka_unit_test(test_peer_close_fails_waiters),
      cmocka_unit_test(test_garbage_breaks_the_handle),
      cmocka_unit_test(test_partial_write_breaks_the_handle),
      cmocka_unit_test(test_waiting_writer_keeps_its_deadline),
      cmocka_unit_test(test_timeout_of_follower),
      cmocka_unit_test(test_timeout_of_reader_hands_over),
      cmocka_unit_test(test_timeout_and_one_way_send),
      cmocka_unit_test(test_greeting_with_descriptors),
      cmocka_unit_test(test_replies_with_payloads),
      cmocka_unit_test(test_batch_tickets_any_order),
      cmocka_unit_test(test_batch_cut_off),
      cmocka_unit_test(test_session_tags),
      cmocka_unit_test(test_session_tags_gmac),
      cmocka_unit_test(test_turn),
      cmocka_unit_test(test_session_replay),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
