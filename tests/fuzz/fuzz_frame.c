/* fuzz_frame.c - libFuzzer target: the frame parser fed in pieces, every
 * message it yields unpacked as its type, the same bytes as tagged frames
 * of a session (tags checked), and the handshake (version 4: roles NODE,
 * READER, DATA, ADMIN; node names; an acceptor holding the secret or a
 * node's credential): its parsers fed the bytes, and whole handshakes
 * whose outcome is checked against what auth.h promises. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "frame.h"
#include "proto.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ALL_ROLES (1u << HPL__ROLE_NODE | 1u << HPL__ROLE_READER | 1u << HPL__ROLE_DATA | \
                   1u << HPL__ROLE_ADMIN)

/* The two kinds of acceptor: the cluster secret (the directory) and node
 * n1's credential (a store: `hoplite secret --node n1`). */
static hpl__auth secret, cred;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  char sp[] = "/tmp/hpl-fuzz-secret-XXXXXX", cp[64], err[256];
  int fd = mkstemp(sp);
  if (fd < 0) abort();
  close(fd);
  unlink(sp);
  snprintf(cp, sizeof cp, "%s.cred", sp);
  if (hpl__auth_create(sp, err, sizeof err) != 0 || hpl__auth_load(sp, &secret, err, sizeof err) ||
      hpl__auth_write_node(&secret, "n1", cp, err, sizeof err) != 0 ||
      hpl__auth_load(cp, &cred, err, sizeof err) != 0)
    abort();
  unlink(sp);
  unlink(cp);
  return 0;
}

/* One whole handshake: an opener holding the secret claims `role` as
 * `name` with `flags`, the acceptor `a` takes any role. Aborts when the
 * outcome is not the one auth.h promises. */
static void handshake(const hpl__auth *a, int role, const char *name, unsigned flags) {
  hpl__auth_hs o, ac;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  uint8_t rk[HPL__AUTH_KEY_LEN], ak[HPL__AUTH_KEY_LEN];
  hpl__auth_open(&o, role, name, flags, hello);
  int named = role == HPL__ROLE_NODE || role == HPL__ROLE_READER;
  int want = role >= HPL__ROLE_NODE && role <= HPL__ROLE_ADMIN &&
             (named ? hpl__auth_name_ok(o.name) && (a->has_secret || !strcmp(o.name, a->name))
                    : !o.name[0] && (role == HPL__ROLE_DATA || a->has_secret));
  int rc = hpl__auth_accept(&ac, a, ALL_ROLES, hello, chal);
  if ((rc == 0) != want) abort();
  if (rc) return;
  if (hpl__auth_key(&secret, role, o.name, rk) != 0 || hpl__auth_answer(&o, rk, chal, proof) != 0 ||
      hpl__auth_verify(&ac, a, proof) != 0 || hpl__auth_key(a, role, ac.name, ak) != 0 ||
      memcmp(rk, ak, sizeof rk) != 0 || hpl__auth_seal(&o) != hpl__auth_seal(&ac))
    abort();
  hpl__auth_keys ko, ka;
  hpl__auth_session(&o, rk, 1, &ko);
  hpl__auth_session(&ac, ak, 0, &ka);
  if (memcmp(ko.send, ka.recv, sizeof ko.send) || memcmp(ko.recv, ka.send, sizeof ko.recv)) abort();
  /* another name's key does not pass */
  if (named) {
    char mine[HPL__AUTH_NAME_MAX + 1], other[HPL__AUTH_NAME_MAX + 1];
    snprintf(mine, sizeof mine, "%s", o.name);
    snprintf(other, sizeof other, "%s", o.name);
    other[0] = other[0] == 'z' ? 'y' : 'z';
    if (hpl__auth_key(&secret, role, other, rk) != 0) abort();
    hpl__auth_open(&o, role, mine, flags, hello);
    if (hpl__auth_accept(&ac, a, ALL_ROLES, hello, chal) != 0 ||
        hpl__auth_answer(&o, rk, chal, proof) == 0 || hpl__auth_verify(&ac, a, proof) == 0)
      abort();
  }
}

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
  /* the handshake's messages, the bytes as a HELLO and PROOF to an
   * acceptor holding the secret or node n1's credential (data[-1]'s top
   * bit), taking every role */
  const hpl__auth *holder = (data[-1] & 0x80) ? &cred : &secret;
  if (size >= HPL__AUTH_HELLO_LEN + HPL__AUTH_PROOF_LEN) {
    hpl__auth_hs hs;
    uint8_t chal[HPL__AUTH_CHALLENGE_LEN];
    if (hpl__auth_accept(&hs, holder, ALL_ROLES, data, chal) == 0) {
      /* what it took is what the HELLO said */
      if (hs.role != data[5] || strncmp(hs.name, (const char *)data + 40, HPL__AUTH_NAME_MAX + 1))
        abort();
      (void)hpl__auth_verify(&hs, holder, data + HPL__AUTH_HELLO_LEN);
    }
  }
  /* ... and as a CHALLENGE to an opener (node n1) */
  if (size >= HPL__AUTH_CHALLENGE_LEN) {
    uint8_t hello[HPL__AUTH_HELLO_LEN], proof[HPL__AUTH_PROOF_LEN], rk[HPL__AUTH_KEY_LEN];
    hpl__auth_hs hs;
    hpl__auth_open(&hs, HPL__ROLE_NODE, "n1", hpl__auth_flags(size & 1), hello); /* either end may ask to seal */
    if (hpl__auth_key(&cred, HPL__ROLE_NODE, "n1", rk) != 0) abort();
    (void)hpl__auth_answer(&hs, rk, data, proof);
  }
  /* a whole handshake whose role, name and flags come from the last bytes:
   * it succeeds exactly when the acceptor takes that role and name, and
   * both ends then agree on the session */
  if (size >= 3) {
    int role = data[size - 1] % 6;
    size_t nl = data[size - 2] % 72;
    char name[80];
    memcpy(name, data, nl < size ? nl : size);
    name[nl < size ? nl : size] = 0;
    handshake(holder, role, name, data[size - 3] & 7);
  }
  return 0;
}
