/*
 * fuzz_loop.h - feeding one fuzz input to a server running in this process:
 * a socketpair, one end served by the server as a connection, the input
 * written to the other end, then EOF; the loop runs until the server has
 * closed its end (or a bound on loop turns). For a server holding a secret,
 * the input's handshake is answered and its frames tagged on the way
 * (fuzz_feed_authed). Shared by the server targets.
 */
#ifndef HPL_FUZZ_LOOP_H
#define HPL_FUZZ_LOOP_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "auth.h"
#include "frame.h"

/* A connected pair: *ours stays with the caller (non-blocking), the other
 * end is returned as an initialised uv_pipe_t for the server to take. */
static inline uv_stream_t *fuzz_pair(uv_loop_t *loop, int *ours) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) abort();
  uv_pipe_t *p = malloc(sizeof *p);
  if (!p) abort();
  uv_pipe_init(loop, p, 0);
  if (uv_pipe_open(p, sv[1]) != 0) abort();
  *ours = sv[0];
  return (uv_stream_t *)p;
}

/* Write the input (as the socket takes it, running the loop between
 * writes), send EOF, and run the loop until the server closed its end
 * (what it sends is read and dropped). Closes `fd`. */
static inline void fuzz_feed(uv_loop_t *loop, int fd, const uint8_t *data, size_t size) {
  size_t off = 0;
  int eof_sent = 0, closed = 0;
  uint8_t sink[65536];
  for (int turn = 0; turn < 20000 && !closed; turn++) {
    if (off < size) {
      ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) off += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) off = size; /* closed on us */
    } else if (!eof_sent) {
      shutdown(fd, SHUT_WR);
      eof_sent = 1;
    }
    uv_run(loop, UV_RUN_NOWAIT);
    for (;;) {
      ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed = 1;
      break;
    }
  }
  close(fd);
  uv_run(loop, UV_RUN_NOWAIT); /* the server notices */
}

/* Read n bytes from fd into out, running the loop meanwhile (the server
 * answers on it). 0, or -1 if the server closed or stayed silent. */
static inline int fuzz_read(uv_loop_t *loop, int fd, uint8_t *out, size_t n) {
  size_t have = 0;
  for (int turn = 0; turn < 2000 && have < n; turn++) {
    uv_run(loop, UV_RUN_NOWAIT);
    ssize_t r = recv(fd, out + have, n - have, MSG_DONTWAIT);
    if (r > 0) have += (size_t)r;
    else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return -1;
  }
  return have == n ? 0 : -1;
}

/* Bytes of untagged frames (as in[0..n)) re-encoded as a session's frames
 * tagged by tx: every whole frame gets HPL__FRAME_F_TAG (and _TAG_PAYLOAD
 * with a payload) and its tag; from the first bytes that are no whole
 * valid frame on, the rest is copied as it is (the server refuses it).
 * Returns a malloc'd buffer of *outlen bytes, NULL without memory. */
static inline uint8_t *fuzz_tag_frames(hpl__fmac *tx, const uint8_t *in, size_t n,
                                       size_t *outlen) {
  hpl__frame_limits lim = {.max_msg = 1u << 20, .max_payload = 1u << 20, .max_type = 0xffff};
  size_t frames = n / HPL__FRAME_HDR_LEN + 1;
  uint8_t *out = malloc(n + frames * HPL__FRAME_TAG_LEN + 1);
  if (!out) return NULL;
  size_t off = 0, o = 0;
  hpl__frame_hdr h;
  while (hpl__frame_decode_hdr(in + off, n - off, &lim, &h, NULL) == 0 &&
         n - off - HPL__FRAME_HDR_LEN >= h.msg_len + h.payload_len) {
    const uint8_t *msg = in + off + HPL__FRAME_HDR_LEN, *pay = msg + h.msg_len;
    h.flags = HPL__FRAME_F_TAG | (h.payload_len ? HPL__FRAME_F_TAG_PAYLOAD : 0);
    hpl__frame_encode_hdr(&h, out + o);
    memcpy(out + o + HPL__FRAME_HDR_LEN, msg, h.msg_len);
    o += HPL__FRAME_HDR_LEN + h.msg_len;
    hpl__fmac_begin(tx, &h, msg, h.msg_len);
    if (h.payload_len) hpl__fmac_add(tx, pay, h.payload_len);
    hpl__fmac_end(tx, out + o);
    o += HPL__FRAME_TAG_LEN;
    memcpy(out + o, pay, h.payload_len);
    o += h.payload_len;
    off += HPL__FRAME_HDR_LEN + h.msg_len + h.payload_len;
  }
  memcpy(out + o, in + off, n - off);
  *outlen = o + n - off;
  return out;
}

/* An input that opens with a handshake HELLO (HPL__AUTH_HELLO_LEN bytes,
 * sent as they are: any version, role, flags, name) to a server holding
 * the secret `a`: if the server answers with a CHALLENGE, this end proves
 * the role and name the HELLO claims (the keys derived from `a`, as a
 * genuine peer of that name would), and the rest of the input, read as
 * untagged frames, is sent as the session's tagged frames
 * (fuzz_tag_frames). A sealed session (a HELLO asking for encryption),
 * or a refused handshake: the rest goes as it is. Then as fuzz_feed.
 * Closes fd. */
static inline void fuzz_feed_authed(uv_loop_t *loop, int fd, const hpl__auth *a,
                                    const uint8_t *data, size_t size) {
  static hpl__fmac tx; /* 64-byte aligned (its BLAKE2b state) */
  const uint8_t *hello = data;
  uint8_t chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN], rk[HPL__AUTH_KEY_LEN];
  data += HPL__AUTH_HELLO_LEN, size -= HPL__AUTH_HELLO_LEN;
  if (send(fd, hello, HPL__AUTH_HELLO_LEN, MSG_NOSIGNAL | MSG_DONTWAIT) !=
          (ssize_t)HPL__AUTH_HELLO_LEN ||
      fuzz_read(loop, fd, chal, sizeof chal) != 0) {
    fuzz_feed(loop, fd, data, size);
    return;
  }
  /* the handshake as the HELLO's sender holds it (auth.h: hpl__auth_open) */
  hpl__auth_hs hs;
  memset(&hs, 0, sizeof hs);
  hs.role = hello[5];
  hs.fo = hello[6] & (HPL__AUTH_F_ENCRYPT | HPL__AUTH_F_AES);
  memcpy(hs.nc, hello + 8, HPL__AUTH_NONCE_LEN);
  memcpy(hs.name, hello + 8 + HPL__AUTH_NONCE_LEN, HPL__AUTH_NAME_MAX);
  if (hpl__auth_key(a, hs.role, hs.name, rk) != 0 || hpl__auth_answer(&hs, rk, chal, proof) != 0 ||
      send(fd, proof, sizeof proof, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof proof ||
      hpl__auth_seal(&hs) != HPL__SEAL_NONE) {
    fuzz_feed(loop, fd, data, size);
    return;
  }
  hpl__auth_keys k;
  hpl__auth_session(&hs, rk, 1, &k);
  hpl__fmac_init_as(&tx, k.send, k.gmac);
  size_t n = 0;
  uint8_t *framed = fuzz_tag_frames(&tx, data, size, &n);
  if (!framed) abort();
  fuzz_feed(loop, fd, framed, n);
  free(framed);
  hpl__fmac_wipe(&tx);
}

#endif
