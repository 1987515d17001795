/* test_protocol.c - every message type in every connection state, sent to
 * the directory, a store's data port and a store's client socket: each is
 * answered (a reply echoing its request id) or the connection is closed;
 * no server dies; the servers keep serving; no object's bytes change. Then
 * the limits on what one peer may hold: connections, waiting requests. */
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

#include "auth.h"
#include "frame.h"
#include "harness.h"
#include "proto.h"
#include "util.h"

#define MB (1ull << 20)

static hpl__lc *lc;
static hpl_client *A, *B;
static uint64_t sum_big, sum_small, node_a;

static int setup(void **state) {
  (void)state;
  lc = th_group_start(2, 128 * MB, "--max-connections 64", (hpl_client **[]){&A, &B}, 2);
  th_put_pattern(A, "p/big", 3 * MB, 1);
  th_put_pattern(A, "p/small", 200, 2);
  sum_big = th_pattern_sum(3 * MB, 1);
  sum_small = th_pattern_sum(200, 2);
  node_a = th_node_id(A);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  th_group_stop(lc, (hpl_client *[]){A, B}, 2);
  return 0;
}

/* A message of `type` with every field given something plausible: ids
 * name an existing object, strings "x", numbers 1. Free with free(). */
static ProtobufCMessage *plausible(unsigned type, const char *id) {
  const ProtobufCMessageDescriptor *d = hpl__msg_descriptor(type);
  if (!d) return NULL;
  ProtobufCMessage *m = calloc(1, d->sizeof_message + 64);
  static char *srcs[1];
  srcs[0] = (char *)"p/small";
  protobuf_c_message_init(d, m);
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    char *at = (char *)m + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      if (f->type == PROTOBUF_C_TYPE_STRING) {
        *(size_t *)((char *)m + f->quantifier_offset) = 1;
        *(char ***)at = srcs;
      }
      continue;
    }
    switch (f->type) {
      case PROTOBUF_C_TYPE_STRING:
        *(const char **)at = !strcmp(f->name, "addr") || !strcmp(f->name, "sender_addr")
                                 ? "127.0.0.1"
                             : !strcmp(f->name, "id") || !strcmp(f->name, "target") ? id
                             : !strcmp(f->name, "source")                           ? "p/small"
                                                                                    : "x";
        break;
      case PROTOBUF_C_TYPE_UINT32:
      case PROTOBUF_C_TYPE_INT32:
      case PROTOBUF_C_TYPE_SINT32:
      case PROTOBUF_C_TYPE_BOOL: *(uint32_t *)at = 1; break;
      case PROTOBUF_C_TYPE_UINT64:
      case PROTOBUF_C_TYPE_INT64:
      case PROTOBUF_C_TYPE_SINT64: *(uint64_t *)at = 1; break;
      default: break; /* bytes, sub-messages: empty */
    }
  }
  return m;
}

typedef enum { OUT_REPLY, OUT_CLOSED, OUT_SILENT } outcome;

/* Send `type` (request id 77) on fd and see what comes back within
 * wait_ms: a frame echoing 77, the connection closed, or nothing. With
 * eof, nothing more is sent after it (shutdown). */
static outcome poke_eof(int fd, unsigned type, const char *id, int wait_ms, int eof);
static outcome poke(int fd, unsigned type, const char *id, int wait_ms) {
  return poke_eof(fd, type, id, wait_ms, 0);
}

static outcome poke_eof(int fd, unsigned type, const char *id, int wait_ms, int eof) {
  ProtobufCMessage *m = plausible(type, id);
  if (!m) return OUT_SILENT;
  uint8_t one = 1;
  size_t len;
  /* tagged when fd has a session; the payload byte of an INLINE_PUT goes
   * in a write of its own */
  int put = type == HPL__MSG_INLINE_PUT, tagged = th_wire_tagged(fd);
  uint8_t *f = th_wire_frame(fd, type, 77, m, &one, put ? 1 : 0, &len);
  free(m);
  assert_non_null(f);
  ssize_t w = send(fd, f, len - (size_t)put, MSG_NOSIGNAL);
  if (w == (ssize_t)len - put && put) w = send(fd, f + len - 1, 1, MSG_NOSIGNAL) + w;
  free(f);
  if (w != (ssize_t)len) return OUT_CLOSED;
  if (eof) shutdown(fd, SHUT_WR);
  uint64_t deadline = hpl__deadline_ms(wait_ms);
  uint8_t buf[1 << 16];
  size_t have = 0;
  hpl__frame_limits lim = {.max_msg = 1u << 24, .max_payload = 1u << 24,
                           .max_type = HPL__MSG_MAX_, .tagged = tagged};
  for (;;) {
    int64_t left = hpl__ms_left(deadline);
    if (left == 0) return OUT_SILENT;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, (int)left) <= 0) continue;
    ssize_t n = recv(fd, buf + have, sizeof buf - have, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return OUT_CLOSED;
    if (n < 0) continue;
    have += (size_t)n;
    /* skip whole frames until one echoes 77 */
    for (;;) {
      hpl__frame_hdr h;
      if (have < HPL__FRAME_HDR_LEN) break;
      assert_int_equal(hpl__frame_decode_hdr(buf, have, &lim, &h, NULL), 0);
      if (h.req_id == 77) return OUT_REPLY;
      size_t flen = HPL__FRAME_HDR_LEN + h.msg_len + (tagged ? HPL__FRAME_TAG_LEN : 0) +
                    (size_t)h.payload_len;
      if (flen > sizeof buf) return OUT_REPLY; /* a big unrelated frame: good enough */
      if (have < flen) break;
      memmove(buf, buf + flen, have - flen);
      have -= flen;
    }
  }
}

static int unix_connect(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

static void do_register(int fd, uint64_t node) {
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = node;
  r.addr = "127.0.0.1";
  r.data_port = 9;
  assert_int_equal(th_wire_register(fd, 5, &r, NULL, 0), 0);
}

enum { ST_RAW, ST_AUTHED, ST_REGISTERED, ST_OTHER_NODE, ST_READER, ST_ADMIN, ST_NSTATES };
static const char *state_name[] = {"before the handshake", "before REGISTER", "registered",
                                    "registered as another node's id", "as a reader",
                                    "as an admin"};

/* A directory connection in state st. */
static int dir_open(int st) {
  int port = hpl__lc_dir_port(lc);
  if (st == ST_RAW) return th_wire_connect(port, NULL, 0);
  if (st == ST_READER) {
    hpl__auth a;
    char err[256];
    uint8_t rk[HPL__AUTH_KEY_LEN];
    assert_int_equal(hpl__auth_load(hpl__lc_secret(lc), &a, err, sizeof err), 0);
    hpl__auth_key(&a, HPL__ROLE_READER, "node-0", rk);
    int fd = th_wire_connect(port, NULL, 0);
    assert_int_equal(th_wire_handshake_key(fd, rk, HPL__ROLE_READER, "node-0"), 0);
    return fd;
  }
  if (st == ST_ADMIN) return th_wire_connect(port, hpl__lc_secret(lc), HPL__ROLE_ADMIN);
  int fd = th_wire_connect(port, hpl__lc_secret(lc), HPL__ROLE_NODE);
  if (st == ST_REGISTERED) do_register(fd, 0xfeed0000 + (uint64_t)rand());
  /* a real store's id: the directory moves that node here (a reconnect) */
  if (st == ST_OTHER_NODE) do_register(fd, 0xfeed1000);
  return fd;
}

/* The servers are alive, serve, and hold the same bytes. */
static void unharmed(const char *what) {
  char err[256];
  if (hpl__lc_check(lc, err, sizeof err)) fail_msg("after %s: %s", what, err);
  hpl_buf *b;
  int rc = hpl_get(B, "p/big", th_ms(10000), &b);
  if (rc) fail_msg("after %s: get: %s (%s)", what, hpl_strerror(rc), hpl_errdetail(B));
  assert_int_equal(hpl_buf_size(b), 3 * MB);
  assert_int_equal(hpl__checksum(hpl_buf_data(b), 3 * MB), sum_big);
  hpl_release(B, b);
  assert_int_equal(hpl_get(B, "p/small", th_ms(10000), &b), 0);
  assert_int_equal(hpl__checksum(hpl_buf_data(b), 200), sum_small);
  hpl_release(B, b);
}

/* Types a peer may send without waiting for an answer. */
static int one_way(unsigned t) {
  return t == HPL__MSG_PROGRESS || t == HPL__MSG_RELEASE || t == HPL__MSG_UPSTREAM_GONE ||
         t == HPL__MSG_REDUCE_FAIL || t == HPL__MSG_REDUCE_TASK || t == HPL__MSG_REDUCE_SINK ||
         t == HPL__MSG_REDUCE_END || t == HPL__MSG_LOC_NOTE || t == HPL__MSG_DROP ||
         t == HPL__MSG_HELLO || t == HPL__MSG_QUIET || t == HPL__MSG_PUBLISH;
}

/* Objects whose bytes must not change, whatever a message says. */
static const char *ids[] = {"p/big", "p/small", "p/none"};

static void test_directory_every_state(void **state) {
  (void)state;
  int counts[ST_NSTATES][3] = {{0}};
  for (int st = 0; st < ST_NSTATES; st++)
    for (unsigned t = 1; t <= HPL__MSG_MAX_; t++) {
      if (!hpl__msg_descriptor(t)) continue;
      if (t == HPL__MSG_DELETE || t == HPL__MSG_LOC_ADD || t == HPL__MSG_INLINE_PUT) {
        /* changes objects on purpose when allowed: only a missing id */
      }
      for (int k = 0; k < 3; k++) {
        const char *id = (t == HPL__MSG_DELETE || t == HPL__MSG_LOC_NOTE ||
                          t == HPL__MSG_LOC_ADD || t == HPL__MSG_INLINE_PUT ||
                          t == HPL__MSG_REDUCE || t == HPL__MSG_DROP)
                             ? "p/none"
                             : ids[k];
        int fd = dir_open(st);
        /* without a handshake the bytes go nowhere: the directory closes
         * once it has 40 of them, or (fewer, EOF) when they stop */
        if (st == ST_RAW && k > 0) {
          close(fd);
          continue;
        }
        outcome o = poke_eof(fd, t, id, st == ST_RAW ? (int)th_ms(2000) : 300, st == ST_RAW);
        counts[st][o]++;
        if (st == ST_RAW && o != OUT_CLOSED)
          fail_msg("%s %s: not closed", hpl__msg_name(t), state_name[st]);
        /* a reader may PEEK, STAT and PUBLISH (an id that exists, or with
         * no store named: ignored, so no object changes) */
        if (st == ST_READER && t != HPL__MSG_PEEK && t != HPL__MSG_PUBLISH &&
            t != HPL__MSG_STAT && o != OUT_CLOSED)
          fail_msg("%s %s: not closed", hpl__msg_name(t), state_name[st]);
        if (o == OUT_SILENT && !one_way(t) && hpl__msg_reply_type(t))
          fail_msg("%s %s: neither answered nor closed", hpl__msg_name(t), state_name[st]);
        close(fd);
      }
    }
  for (int st = 0; st < ST_NSTATES; st++)
    print_message("directory %-34s: %3d answered, %3d closed, %3d silent (one-way)\n",
                  state_name[st], counts[st][0], counts[st][1], counts[st][2]);
  unharmed("the directory's sequences");
}

static void test_data_port_every_state(void **state) {
  (void)state;
  int port = th_data_port(lc, 0);
  /* stores speak DATA to each other: a node's or a reader's key is no
   * way in */
  for (int role = HPL__ROLE_NODE; role <= HPL__ROLE_ADMIN; role++) {
    if (role == HPL__ROLE_DATA) continue;
    int fd = th_wire_connect(port, NULL, 0);
    assert_int_equal(th_wire_handshake_as(fd, hpl__lc_secret(lc), role,
                                          role == HPL__ROLE_ADMIN ? NULL : "node-0"), -1);
    close(fd);
  }
  for (int authed = 0; authed < 2; authed++)
    for (unsigned t = 1; t <= HPL__MSG_MAX_; t++) {
      if (!hpl__msg_descriptor(t)) continue;
      int fd = th_wire_connect(port, authed ? hpl__lc_secret(lc) : NULL, HPL__ROLE_DATA);
      outcome o = poke_eof(fd, t, "p/big", authed ? 300 : (int)th_ms(2000), !authed);
      if (!authed && o != OUT_CLOSED) fail_msg("data port, %s without a handshake: not closed",
                                               hpl__msg_name(t));
      if (authed && t != HPL__MSG_PULL && o != OUT_CLOSED)
        fail_msg("data port, %s: not closed", hpl__msg_name(t));
      if (authed && t == HPL__MSG_PULL && o == OUT_SILENT) {
        /* plausible() asks for a reduce stream (internal = 1): it waits for
         * that stream to appear, 10 s at most */
        uint64_t t0 = hpl__now_ms();
        Hplpb__PullRep *rep = (Hplpb__PullRep *)th_wire_wait(fd, HPL__MSG_PULL_REP, 77);
        assert_int_equal(rep->status, HPL_ENOTFOUND);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        assert_true(hpl__now_ms() - t0 <= (uint64_t)th_ms(11000));
        o = OUT_REPLY;
      }
      close(fd);
    }
  unharmed("the data port's sequences");
}

static void test_client_socket_every_type(void **state) {
  (void)state;
  const char *sock = hpl__lc_socket(lc, 0);
  for (unsigned t = 1; t <= HPL__MSG_MAX_; t++) {
    if (!hpl__msg_descriptor(t)) continue;
    for (int k = 0; k < 3; k++) {
      int fd = unix_connect(sock);
      /* CREATE of an existing id must fail; of a new one it is a put that
       * the client's leaving aborts */
      outcome o = poke(fd, t, t == HPL__MSG_DELETE ? "p/none" : ids[k], 300);
      if (o == OUT_SILENT && !one_way(t) && hpl__msg_reply_type(t))
        fail_msg("store socket, %s: neither answered nor closed", hpl__msg_name(t));
      close(fd);
    }
  }
  unharmed("the store socket's sequences");
}

/* After the peer was declared dead: a node that registered and then went
 * silent is swept; its connection is closed, and a new REGISTER puts it
 * back. */
static void test_after_declared_dead(void **state) {
  (void)state;
  hpl__lc *l2 = th_cluster(1, 64 * MB, "--heartbeat-ms 100 --heartbeat-timeout-ms 300", NULL);
  int fd = th_wire_connect(hpl__lc_dir_port(l2), hpl__lc_secret(l2), HPL__ROLE_NODE);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = 0xdead1;
  r.addr = "127.0.0.1";
  r.data_port = 9;
  th_wire_send(fd, HPL__MSG_REGISTER, 1, &r.base);
  protobuf_c_message_free_unpacked(th_wire_wait(fd, HPL__MSG_REGISTER_REP, 1), NULL);
  assert_true(th_wire_closed(fd, th_ms(3000))); /* swept */
  for (unsigned t = 1; t <= HPL__MSG_MAX_; t++) { /* on the dead connection: nothing */
    if (!hpl__msg_descriptor(t)) continue;
    assert_int_equal(poke(fd, t, "p/none", 50) == OUT_REPLY, 0);
  }
  close(fd);
  assert_int_equal(th_dir_counter(l2, "dir_nodes_dead"), 1);
  th_untrack(l2);
  th_stop(l2, 0);
}

/* A peer that starts a handshake and stops is cut after 2 s. */
static void test_slow_handshake(void **state) {
  (void)state;
  int fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(send(fd, "HPLA", 4, MSG_NOSIGNAL), 4);
  uint64_t t0 = hpl__now_ms();
  assert_true(th_wire_closed(fd, th_ms(5000)));
  uint64_t took = hpl__now_ms() - t0;
  assert_true(took >= 1500 && took <= (uint64_t)th_ms(4000));
  close(fd);
}

/* The directory keeps at most --max-connections (64 here) open: past it a
 * stranger still in its handshake is closed to make room (the oldest),
 * or, with none, the newcomer is refused. */
static void test_connection_limit(void **state) {
  (void)state;
  int fds[80], n = 0;
  uint64_t refused0 = th_dir_counter(lc, "dir_conns_refused") +
                      th_dir_counter(lc, "dir_handshakes_evicted");
  uint64_t open0 = th_dir_counter(lc, "dir_conns");
  for (int i = 0; i < 80; i++) fds[n++] = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  th_sleep_ms(200);
  int closed = 0;
  for (int i = 0; i < n; i++) closed += th_wire_closed(fds[i], 20);
  for (int i = 0; i < n; i++) close(fds[i]);
  /* the ones over the limit were closed at once (the rest wait for their
   * handshake); the counter says so */
  /* open0 counted the connection that read it */
  assert_true(closed >= 80 - (64 - ((int)open0 - 1)));
  /* once they are gone, connections are taken again (on a loaded machine
   * the directory may still be full when the first tries come) */
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  uint64_t now_open;
  while ((now_open = th_dir_counter_try(lc, "dir_conns")) > open0 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(50);
  assert_true(now_open <= open0);
  assert_true(th_dir_counter(lc, "dir_conns_refused") +
                  th_dir_counter(lc, "dir_handshakes_evicted") >=
              refused0 + (uint64_t)(80 - 64));
  unharmed("the connection limit");
}

/* One node may have at most HPL__MAX_WAITING_PER_PEER ACQUIREs waiting. */
static void test_waiting_limit(void **state) {
  (void)state;
  int fd = dir_open(ST_REGISTERED);
  Hplpb__AcquireReq q = HPLPB__ACQUIRE_REQ__INIT;
  q.id = "p/never";
  q.timeout_ms = th_ms(60000);
  size_t len, total = 0;
  uint8_t *all = NULL;
  for (int i = 0; i <= HPL__MAX_WAITING_PER_PEER; i++) { /* tagged in order (a session) */
    uint8_t *f = th_wire_frame(fd, HPL__MSG_ACQUIRE, 1000 + (uint64_t)i, &q.base, NULL, 0, &len);
    if (!all) all = malloc(len * (HPL__MAX_WAITING_PER_PEER + 1));
    assert_non_null(all);
    memcpy(all + total, f, len);
    total += len;
    free(f);
  }
  size_t off = 0;
  while (off < total) {
    ssize_t w = send(fd, all + off, total - off, MSG_NOSIGNAL);
    assert_true(w > 0);
    off += (size_t)w;
  }
  free(all);
  Hplpb__AcquireRep *rep = (Hplpb__AcquireRep *)th_wire_wait(
      fd, HPL__MSG_ACQUIRE_REP, 1000 + HPL__MAX_WAITING_PER_PEER);
  assert_int_equal(rep->status, HPL_EUNAVAIL);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  assert_int_equal(th_dir_counter(lc, "dir_waits") >= HPL__MAX_WAITING_PER_PEER, 1);
  close(fd); /* its waiters go with it */
  unharmed("the waiting limit");
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  srand((unsigned)getpid());
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_directory_every_state),
      cmocka_unit_test(test_data_port_every_state),
      cmocka_unit_test(test_client_socket_every_type),
      cmocka_unit_test_teardown(test_after_declared_dead, th_teardown),
      cmocka_unit_test(test_slow_handshake),
      cmocka_unit_test(test_connection_limit),
      cmocka_unit_test(test_waiting_limit),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
