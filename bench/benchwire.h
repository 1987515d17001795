/*
 * benchwire.h - a raw wire peer for the benchmarks that speak the protocol
 * themselves: a TCP connection, the opener's handshake claiming a role (and,
 * with handshake v4, a node name), and frames tagged with the session's
 * keys (auth.h, frame.h). Header-only; used by bench_floods.c. Builds
 * against the tree before per-node credentials (handshake v3, no names)
 * too: #ifdef HPL__AUTH_NAME_MAX.
 */
#ifndef HPL_BENCHWIRE_H
#define HPL_BENCHWIRE_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include "auth.h"
#include "frame.h"
#include "proto.h"
#include "util.h"

/* One raw connection: its descriptor (the caller's) and, after a
 * handshake, its session's frame MACs. */
typedef struct hpl__bench_wire {
  int fd;
  int tagged;
  hpl__fmac tx, rx;
} hpl__bench_wire;

/* Exactly n bytes within timeout_ms: 0, or -1 (closed, error, timeout). */
static inline int hpl__bench_read_full(int fd, void *buf, size_t n, int64_t timeout_ms) {
  uint8_t *p = buf;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
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

/* All n bytes (blocking): 0, or -1 (the peer closed, an error). */
static inline int hpl__bench_send_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* A blocking TCP connection to 127.0.0.1:port (TCP_NODELAY), or -1. */
static inline int hpl__bench_tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* The opener's handshake on w->fd claiming `role` as node `name` (the old
 * handshake has no name) with the key derived from the secret file; then
 * w's frames are tagged. 0 or -1. */
static inline int hpl__bench_wire_handshake(hpl__bench_wire *w, const char *secret, int role,
                                            const char *name) {
  hpl__auth a;
  char err[256];
  if (hpl__auth_load(secret, &a, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  uint8_t rk[HPL__AUTH_KEY_LEN], hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN],
      proof[HPL__AUTH_PROOF_LEN];
  hpl__auth_hs hs;
#ifdef HPL__AUTH_NAME_MAX
  int rc = hpl__auth_key(&a, role, name, rk);
  hpl__auth_open(&hs, role, name, 0, hello);
#else
  (void)name;
  int rc = 0;
  hpl__auth_role_key(&a, role, rk);
  hpl__auth_open(&hs, role, 0, hello);
#endif
  sodium_memzero(&a, sizeof a);
  if (rc == 0 && hpl__bench_send_all(w->fd, hello, sizeof hello) == 0 &&
      hpl__bench_read_full(w->fd, chal, sizeof chal, 5000) == 0 &&
      hpl__auth_answer(&hs, rk, chal, proof) == 0 &&
      hpl__bench_send_all(w->fd, proof, sizeof proof) == 0) {
    hpl__auth_keys k;
    hpl__auth_session(&hs, rk, 1, &k);
    hpl__fmac_init_as(&w->tx, k.send, k.gmac);
    hpl__fmac_init_as(&w->rx, k.recv, k.gmac);
    sodium_memzero(&k, sizeof k);
    w->tagged = 1;
  } else {
    rc = -1;
  }
  sodium_memzero(rk, sizeof rk);
  return rc;
}

/* One whole frame for w (tagged when w has a session): *len bytes, the
 * caller frees it; NULL without memory. */
static inline uint8_t *hpl__bench_wire_frame(hpl__bench_wire *w, unsigned type, uint64_t req,
                                             const ProtobufCMessage *m, const void *payload,
                                             uint64_t plen, size_t *len) {
  size_t mlen = protobuf_c_message_get_packed_size(m);
  uint8_t *f = malloc(HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + plen);
  if (!f) return NULL;
  hpl__frame_hdr h = {.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req,
                      .payload_len = plen};
  if (w->tagged) h.flags = HPL__FRAME_F_TAG | (plen ? HPL__FRAME_F_TAG_PAYLOAD : 0);
  hpl__frame_encode_hdr(&h, f);
  protobuf_c_message_pack(m, f + HPL__FRAME_HDR_LEN);
  uint8_t *at = f + HPL__FRAME_HDR_LEN + mlen;
  if (w->tagged) {
    hpl__fmac_begin(&w->tx, &h, f + HPL__FRAME_HDR_LEN, mlen);
    if (plen) hpl__fmac_add(&w->tx, payload, plen);
    hpl__fmac_end(&w->tx, at);
    at += HPL__FRAME_TAG_LEN;
  }
  if (plen) memcpy(at, payload, plen);
  *len = (size_t)(at - f) + plen;
  return f;
}

/* Read one frame within timeout_ms (its tag checked when w is tagged):
 * header in *h, message then payload in *msg (the caller frees it). 0 or
 * -1 (closed, timed out, bad frame). */
static inline int hpl__bench_wire_read(hpl__bench_wire *w, hpl__frame_hdr *h, uint8_t **msg,
                                       int64_t timeout_ms) {
  hpl__frame_limits lim = {.max_msg = 1u << 24, .max_payload = 1u << 24,
                           .max_type = HPL__MSG_MAX_, .tagged = w->tagged};
  uint8_t hdr[HPL__FRAME_HDR_LEN], tag[HPL__FRAME_TAG_LEN];
  *msg = NULL;
  if (hpl__bench_read_full(w->fd, hdr, sizeof hdr, timeout_ms) != 0 ||
      hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, h, NULL) != 0)
    return -1;
  uint8_t *b = malloc(h->msg_len + h->payload_len + 1);
  if (!b) return -1;
  if (hpl__bench_read_full(w->fd, b, h->msg_len, timeout_ms) != 0 ||
      (w->tagged && hpl__bench_read_full(w->fd, tag, sizeof tag, timeout_ms) != 0) ||
      hpl__bench_read_full(w->fd, b + h->msg_len, h->payload_len, timeout_ms) != 0) {
    free(b);
    return -1;
  }
  if (w->tagged) {
    hpl__fmac_begin(&w->rx, h, b, h->msg_len);
    if (h->flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&w->rx, b + h->msg_len, h->payload_len);
    if (hpl__fmac_check(&w->rx, tag) != 0) {
      free(b);
      return -1;
    }
  }
  *msg = b;
  return 0;
}

#endif
