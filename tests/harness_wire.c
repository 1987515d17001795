/* harness_wire.c - the test harness's raw protocol peers (harness.h, "raw
 * protocol peers"): TCP connections that do the handshake of a role and
 * name themselves, frames tagged with their session, an acceptor's side
 * for tests that play a data port, and a raw local client. Split from
 * harness.c (cluster start/stop, patterns, getters). */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "frame.h"
#include "util.h"

/* ------------------------------------------------------------------ raw peers */

/* Exactly n bytes within the deadline: 0, or -1 on EOF, error or timeout. */
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

/* The sessions of raw connections (auth.h, frame.h): after a handshake
 * every frame both ways is tagged. Found by descriptor and socket inode
 * (a descriptor number is reused once closed). */
#define TH_SESSIONS 64
static struct th_session {
  int fd;
  ino_t ino;
  hpl__fmac tx, rx;
} th_sessions[TH_SESSIONS];
static pthread_mutex_t th_sessions_mu = PTHREAD_MUTEX_INITIALIZER;

static ino_t fd_ino(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* fd's session, or NULL (a connection without a handshake). */
static struct th_session *session_of(int fd) {
  ino_t ino = fd_ino(fd);
  struct th_session *found = NULL;
  pthread_mutex_lock(&th_sessions_mu);
  for (int i = 0; i < TH_SESSIONS && !found; i++)
    if (th_sessions[i].tx.on && th_sessions[i].fd == fd && th_sessions[i].ino == ino)
      found = &th_sessions[i];
  pthread_mutex_unlock(&th_sessions_mu);
  return found;
}

static void session_set(int fd, const hpl__auth_keys *k) {
  ino_t ino = fd_ino(fd);
  pthread_mutex_lock(&th_sessions_mu);
  struct th_session *slot = NULL;
  for (int i = 0; i < TH_SESSIONS; i++) /* the fd's old entry, or a free one, or the oldest */
    if (th_sessions[i].fd == fd || !th_sessions[i].tx.on) {
      slot = &th_sessions[i];
      if (th_sessions[i].fd == fd) break;
    }
  static int next;
  if (!slot) slot = &th_sessions[next++ % TH_SESSIONS];
  slot->fd = fd;
  slot->ino = ino;
  hpl__fmac_wipe(&slot->tx); /* a slot taken over: its old session goes */
  hpl__fmac_wipe(&slot->rx);
  hpl__fmac_init_as(&slot->tx, k->send, k->gmac);
  hpl__fmac_init_as(&slot->rx, k->recv, k->gmac);
  pthread_mutex_unlock(&th_sessions_mu);
}

int th_wire_handshake_key(int fd, const uint8_t key[32], int role, const char *name) {
  hpl__auth_hs hs;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  hpl__auth_open(&hs, role, name, 0, hello);
  if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) return -1;
  if (read_full(fd, chal, sizeof chal, hpl__deadline_ms(th_ms(5000))) != 0) return -1;
  if (hpl__auth_answer(&hs, key, chal, proof) != 0) return -1;
  if (send(fd, proof, sizeof proof, MSG_NOSIGNAL) != (ssize_t)sizeof proof) return -1;
  hpl__auth_keys k;
  hpl__auth_session(&hs, key, 1, &k);
  session_set(fd, &k);
  return 0;
}

int th_wire_tagged(int fd) { return session_of(fd) != NULL; }

int th_wire_accept(int fd, const char *secret, unsigned roles) {
  hpl__auth a;
  char err[256];
  if (!secret || !*secret || hpl__auth_load(secret, &a, err, sizeof err) != 0) return -1;
  hpl__auth_hs hs;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  uint64_t deadline = hpl__deadline_ms(th_ms(5000));
  if (read_full(fd, hello, sizeof hello, deadline) != 0) return -1;
  if (hpl__auth_accept(&hs, &a, roles, hello, chal) != 0) return -1;
  if (send(fd, chal, sizeof chal, MSG_NOSIGNAL) != (ssize_t)sizeof chal) return -1;
  if (read_full(fd, proof, sizeof proof, deadline) != 0) return -1;
  if (hpl__auth_verify(&hs, &a, proof) != 0) return -1;
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_key(&a, hs.role, hs.name, rk);
  hpl__auth_keys k;
  hpl__auth_session(&hs, rk, 0, &k);
  session_set(fd, &k);
  return 0;
}

uint8_t *th_wire_frame_stream(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                              uint64_t plen, size_t *len) {
  size_t mlen = m ? protobuf_c_message_get_packed_size(m) : 0;
  uint8_t *f = malloc(HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + 1);
  if (!f) return NULL;
  struct th_session *ss = session_of(fd);
  hpl__frame_hdr h = {.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req,
                      .payload_len = plen};
  if (ss) h.flags = HPL__FRAME_F_TAG;
  hpl__frame_encode_hdr(&h, f);
  if (mlen) protobuf_c_message_pack(m, f + HPL__FRAME_HDR_LEN);
  uint8_t *at = f + HPL__FRAME_HDR_LEN + mlen;
  if (ss) {
    hpl__fmac_begin(&ss->tx, &h, f + HPL__FRAME_HDR_LEN, mlen);
    hpl__fmac_end(&ss->tx, at);
    at += HPL__FRAME_TAG_LEN;
  }
  *len = (size_t)(at - f);
  return f;
}

int th_wire_read_raw(int fd, hpl__frame_hdr *h, uint8_t **msg, int64_t timeout_ms) {
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  struct th_session *ss = session_of(fd);
  hpl__frame_limits lim = {.max_msg = 1u << 20, .max_payload = 1u << 20,
                           .max_type = HPL__MSG_MAX_, .tagged = ss != NULL};
  uint8_t hdr[HPL__FRAME_HDR_LEN], tag[HPL__FRAME_TAG_LEN];
  *msg = NULL;
  if (read_full(fd, hdr, sizeof hdr, deadline) ||
      hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, h, NULL) != 0)
    return -1;
  uint8_t *b = malloc(h->msg_len + h->payload_len + 1);
  if (!b) return -1;
  if (read_full(fd, b, h->msg_len, deadline) || (ss && read_full(fd, tag, sizeof tag, deadline)) ||
      read_full(fd, b + h->msg_len, h->payload_len, deadline)) {
    free(b);
    return -1;
  }
  if (ss) {
    hpl__fmac_begin(&ss->rx, h, b, h->msg_len);
    if (h->flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&ss->rx, b + h->msg_len, h->payload_len);
    if (hpl__fmac_check(&ss->rx, tag) != 0) {
      free(b);
      return -1;
    }
  }
  *msg = b;
  return 0;
}

hpl__fmac *th_wire_rx(int fd) {
  struct th_session *ss = session_of(fd);
  return ss ? &ss->rx : NULL;
}

uint8_t *th_wire_frame(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                       const void *payload, uint64_t plen, size_t *len) {
  size_t mlen = m ? protobuf_c_message_get_packed_size(m) : 0;
  uint8_t *f = malloc(HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + plen + 1);
  if (!f) return NULL;
  struct th_session *ss = session_of(fd);
  hpl__frame_hdr h = {.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req,
                      .payload_len = plen};
  if (ss) h.flags = HPL__FRAME_F_TAG | (plen ? HPL__FRAME_F_TAG_PAYLOAD : 0);
  hpl__frame_encode_hdr(&h, f);
  if (mlen) protobuf_c_message_pack(m, f + HPL__FRAME_HDR_LEN);
  uint8_t *at = f + HPL__FRAME_HDR_LEN + mlen;
  if (ss) {
    hpl__fmac_begin(&ss->tx, &h, f + HPL__FRAME_HDR_LEN, mlen);
    if (plen) hpl__fmac_add(&ss->tx, payload, plen);
    hpl__fmac_end(&ss->tx, at);
    at += HPL__FRAME_TAG_LEN;
  }
  if (plen) memcpy(at, payload, plen);
  *len = (size_t)(at - f) + plen;
  return f;
}

int th_wire_handshake(int fd, const char *secret, int role) {
  /* a NODE a name of its own (each wire peer is another node), a READER
   * the local cluster's first store's; th_wire_handshake_as for others */
  static unsigned peers;
  char name[HPL__AUTH_NAME_MAX + 1] = "";
  if (role == HPL__ROLE_NODE)
    snprintf(name, sizeof name, "peer-%d-%u", (int)getpid(), ++peers);
  else if (role == HPL__ROLE_READER)
    snprintf(name, sizeof name, "node-0");
  return th_wire_handshake_as(fd, secret, role, name);
}

int th_wire_handshake_as(int fd, const char *secret, int role, const char *name) {
  if (!secret || !*secret) return 0;
  hpl__auth a;
  char err[256];
  if (hpl__auth_load(secret, &a, err, sizeof err) != 0) fail_msg("%s", err);
  uint8_t rk[HPL__AUTH_KEY_LEN];
  if (hpl__auth_key(&a, role, name, rk) != 0) return -1;
  return th_wire_handshake_key(fd, rk, role, name);
}

int th_wire_connect(int port, const char *secret, int role) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  int one = 1; /* the handshake's last message and the first frame go at once */
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (th_wire_handshake(fd, secret, role) != 0) fail_msg("the handshake on port %d failed", port);
  return fd;
}

void th_wire_send(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  th_wire_send_payload(fd, type, req, m, NULL, 0);
}

void th_wire_send_payload(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                          const void *payload, uint64_t plen) {
  size_t len;
  uint8_t *f = th_wire_frame(fd, type, req, m, payload, plen, &len);
  assert_non_null(f);
  assert_int_equal(send(fd, f, len, MSG_NOSIGNAL), (ssize_t)len);
  free(f);
}

ProtobufCMessage *th_wire_wait_payload(int fd, unsigned type, uint64_t req, uint8_t **payload,
                                       uint64_t *plen) {
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  struct th_session *ss = session_of(fd);
  hpl__frame_limits lim = {.max_msg = 1u << 20, .max_payload = 1u << 24,
                           .max_type = HPL__MSG_MAX_, .tagged = ss != NULL};
  for (;;) {
    uint8_t hdr[HPL__FRAME_HDR_LEN], tag[HPL__FRAME_TAG_LEN];
    hpl__frame_hdr h;
    if (read_full(fd, hdr, sizeof hdr, deadline)) fail_msg("no %s reply", hpl__msg_name(type));
    assert_int_equal(hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, &h, NULL), 0);
    uint8_t *msg = malloc(h.msg_len + h.payload_len + 1);
    assert_non_null(msg);
    assert_int_equal(read_full(fd, msg, h.msg_len, deadline), 0);
    if (ss) assert_int_equal(read_full(fd, tag, sizeof tag, deadline), 0);
    assert_int_equal(read_full(fd, msg + h.msg_len, h.payload_len, deadline), 0);
    if (ss) {
      hpl__fmac_begin(&ss->rx, &h, msg, h.msg_len);
      if (h.flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&ss->rx, msg + h.msg_len, h.payload_len);
      if (hpl__fmac_check(&ss->rx, tag) != 0)
        fail_msg("a %s frame fails its MAC check", hpl__msg_name(h.type));
    }
    if (h.type == type && h.req_id == req) {
      ProtobufCMessage *m = hpl__msg_unpack(h.type, msg, h.msg_len);
      assert_non_null(m);
      if (payload) {
        *payload = malloc(h.payload_len + 1);
        assert_non_null(*payload);
        memcpy(*payload, msg + h.msg_len, h.payload_len);
        *plen = h.payload_len;
      }
      free(msg);
      return m;
    }
    free(msg);
  }
}

ProtobufCMessage *th_wire_wait(int fd, unsigned type, uint64_t req) {
  return th_wire_wait_payload(fd, type, req, NULL, NULL);
}

int th_wire_closed(int fd, int64_t timeout_ms) {
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  uint8_t b[4096];
  for (;;) {
    int64_t left = hpl__ms_left(deadline);
    if (left == 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, (int)left) <= 0) continue;
    ssize_t n = recv(fd, b, sizeof b, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return 1;
  }
}

int th_wire_register(int fd, uint64_t req, const Hplpb__RegisterReq *r, char *detail, size_t dlen) {
  th_wire_send(fd, HPL__MSG_REGISTER, req, &r->base);
  for (;;) {
    hpl__frame_hdr h;
    uint8_t *msg = NULL;
    assert_int_equal(th_wire_read_raw(fd, &h, &msg, th_ms(10000)), 0);
    if (h.req_id != req) {
      free(msg);
      continue;
    }
    ProtobufCMessage *m = hpl__msg_unpack(h.type, msg, h.msg_len);
    free(msg);
    assert_non_null(m);
    const char *why = NULL;
    int st = hpl__msg_status(m, &why);
    if (detail && dlen) snprintf(detail, dlen, "%s", why ? why : "");
    protobuf_c_message_free_unpacked(m, NULL);
    return st;
  }
}

int th_wire_local(hpl__lc *lc, int node) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", hpl__lc_socket(lc, node));
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  protobuf_c_message_free_unpacked(th_wire_wait(fd, HPL__MSG_HELLO, 0), NULL);
  return fd;
}
