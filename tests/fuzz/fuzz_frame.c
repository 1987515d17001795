/* fuzz_frame.c - libFuzzer target: the frame parser fed in pieces, every
 * message it yields unpacked as its type, the same bytes as tagged frames
 * of a session (tags checked), and the handshake's parsers. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "auth.h"
#include "frame.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  /* the first byte picks the piece sizes the bytes arrive in */
  size_t step = (size_t)(data[0] % 64) + 1;
  data++, size--;
  hpl__frame_limits lim = {.max_msg = 1u << 20, .max_payload = 1u << 20,
                           .max_type = HPL__MSG_MAX_};
  hpl__framer fr;
  hpl__framer_init(&fr, &lim);
  size_t off = 0;
  while (off < size) {
    size_t n = size - off < step ? size - off : step;
    const uint8_t *p = data + off;
    while (n > 0) {
      int ev;
      const uint8_t *chunk;
      size_t clen;
      long k = hpl__framer_feed(&fr, p, n, &ev, &chunk, &clen);
      if (k < 0) goto done;
      p += k;
      n -= (size_t)k;
      off += (size_t)k;
      if (ev == HPL__FR_MSG) {
        ProtobufCMessage *m = hpl__msg_unpack(fr.hdr.type, fr.msg, fr.hdr.msg_len);
        if (m) {
          const char *detail;
          (void)hpl__msg_status(m, &detail);
          protobuf_c_message_free_unpacked(m, NULL);
        }
      }
      if (k == 0 && ev == HPL__FR_NONE) break;
    }
  }
done:
  hpl__framer_free(&fr);
  /* the same bytes as a session's frames: a tagged framer, each frame's
   * tag checked (payload covered when flagged) with a fixed key */
  {
    static hpl__fmac rx; /* 64-byte aligned */
    uint8_t key[HPL__FRAME_KEY_LEN];
    memset(key, 9, sizeof key);
    hpl__fmac_init(&rx, key);
    hpl__frame_limits tl = lim;
    tl.tagged = 1;
    hpl__framer tf;
    hpl__framer_init(&tf, &tl);
    const uint8_t *p = data;
    size_t n = size;
    while (n > 0) {
      int ev;
      const uint8_t *chunk;
      size_t clen;
      long k = hpl__framer_feed(&tf, p, n < step ? n : step, &ev, &chunk, &clen);
      if (k < 0) break;
      p += k;
      n -= (size_t)k;
      if (ev == HPL__FR_MSG) {
        hpl__fmac_begin(&rx, &tf.hdr, tf.msg, tf.hdr.msg_len);
        if (tf.hdr.payload_len == 0 && hpl__fmac_check(&rx, tf.tag) != 0) break;
      } else if (ev == HPL__FR_PAYLOAD) {
        if (tf.hdr.flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&rx, chunk, clen);
        if (hpl__framer_payload_left(&tf) == 0 && hpl__fmac_check(&rx, tf.tag) != 0) break;
      }
      if (k == 0 && ev == HPL__FR_NONE) break;
    }
    hpl__framer_free(&tf);
    hpl__fmac_wipe(&rx);
  }
  /* the handshake's messages, with a fixed key */
  if (size >= HPL__AUTH_HELLO_LEN + HPL__AUTH_PROOF_LEN) {
    hpl__auth a = {.on = 1};
    memset(a.key, 7, sizeof a.key);
    hpl__auth_hs hs;
    uint8_t chal[HPL__AUTH_CHALLENGE_LEN];
    if (hpl__auth_accept(&hs, &a, 1u << HPL__ROLE_NODE | 1u << HPL__ROLE_READER, data, chal) == 0)
      (void)hpl__auth_verify(&hs, &a, data + HPL__AUTH_HELLO_LEN);
  }
  if (size >= HPL__AUTH_CHALLENGE_LEN) {
    uint8_t hello[HPL__AUTH_HELLO_LEN], proof[HPL__AUTH_PROOF_LEN], rk[HPL__AUTH_KEY_LEN];
    memset(rk, 7, sizeof rk);
    hpl__auth_hs hs;
    hpl__auth_open(&hs, HPL__ROLE_NODE, "n1", hpl__auth_flags(size & 1), hello); /* either end may ask to seal */
    (void)hpl__auth_answer(&hs, rk, data, proof);
  }
  return 0;
}
