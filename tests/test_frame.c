/* test_frame.c - the framing codec and message table, fed bytes, no sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <sodium.h>

#include "auth.h"
#include "frame.h"
#include "hoplite.h"
#include "proto.h"

static const hpl__frame_limits lim = {
    .max_msg = 1024, .max_payload = 4096, .max_type = HPL__MSG_MAX_};

/* Build a complete frame: header + packed message + payload. */
static uint8_t *make_frame(unsigned type, uint64_t req, const ProtobufCMessage *m,
                           const uint8_t *payload, uint64_t plen, size_t *len) {
  size_t hl;
  uint8_t *h = hpl__msg_frame(type, req, m, plen, &hl);
  assert_non_null(h);
  h = realloc(h, hl + plen);
  if (plen) memcpy(h + hl, payload, plen);
  *len = hl + plen;
  return h;
}

static void test_header_round_trip(void **state) {
  (void)state;
  hpl__frame_hdr in = {.type = HPL__MSG_GET,
                       .flags = 0,
                       .msg_len = 77,
                       .req_id = 0x0102030405060708ull,
                       .payload_len = 4000};
  uint8_t buf[HPL__FRAME_HDR_LEN];
  hpl__frame_encode_hdr(&in, buf);
  /* little-endian on the wire, whatever the host */
  assert_int_equal(buf[0], 0x48); /* 'H' */
  assert_int_equal(buf[16], 0x08);
  assert_int_equal(buf[23], 0x01);
  hpl__frame_hdr out;
  assert_int_equal(hpl__frame_decode_hdr(buf, sizeof buf, &lim, &out, NULL), 0);
  assert_int_equal(out.magic, HPL__FRAME_MAGIC);
  assert_int_equal(out.version, HPL__FRAME_VERSION);
  assert_int_equal(out.type, HPL__MSG_GET);
  assert_int_equal(out.msg_len, 77);
  assert_true(out.req_id == in.req_id);
  assert_true(out.payload_len == 4000);
}

static void test_short_header_needs_more(void **state) {
  (void)state;
  uint8_t buf[HPL__FRAME_HDR_LEN] = {0};
  hpl__frame_hdr out;
  for (size_t n = 0; n < HPL__FRAME_HDR_LEN; n++)
    assert_int_equal(hpl__frame_decode_hdr(buf, n, &lim, &out, NULL), 1);
}

static void corrupt_and_expect(size_t off, uint8_t val, int want, const char *why_part) {
  hpl__frame_hdr in = {.type = HPL__MSG_GET, .msg_len = 10, .req_id = 1, .payload_len = 0};
  uint8_t buf[HPL__FRAME_HDR_LEN];
  hpl__frame_encode_hdr(&in, buf);
  buf[off] = val;
  hpl__frame_hdr out;
  const char *why = NULL;
  assert_int_equal(hpl__frame_decode_hdr(buf, sizeof buf, &lim, &out, &why), want);
  assert_non_null(why);
  assert_non_null(strstr(why, why_part));
}

static void test_bad_headers(void **state) {
  (void)state;
  corrupt_and_expect(0, 'X', HPL_EPROTO, "magic");
  corrupt_and_expect(4, 2, HPL_EPROTO, "version");
  corrupt_and_expect(6, 0, HPL_EPROTO, "type");   /* type 0 */
  corrupt_and_expect(6, 200, HPL_EPROTO, "type"); /* unknown type */
  corrupt_and_expect(8, 1, HPL_EPROTO, "flags");
  corrupt_and_expect(13, 0x10, HPL_ETOOBIG, "message"); /* msg_len 4106 > 1024 */
  corrupt_and_expect(25, 0x20, HPL_ETOOBIG, "payload"); /* payload 8192 > 4096 */
  corrupt_and_expect(31, 0x80, HPL_ETOOBIG, "payload"); /* huge payload */
}

/* Feed a stream of frames in pieces of `step` bytes; collect what the framer
 * reports and compare with what was sent. */
static void feed_in_steps(size_t step) {
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = "object/one";
  g.timeout_ms = -1;
  Hplpb__InlinePutReq p = HPLPB__INLINE_PUT_REQ__INIT;
  p.id = "small";
  p.size = 300;
  uint8_t payload[300];
  for (int i = 0; i < 300; i++) payload[i] = (uint8_t)(i * 7);
  size_t l1, l2, l3;
  uint8_t *f1 = make_frame(HPL__MSG_GET, 5, &g.base, NULL, 0, &l1);
  uint8_t *f2 = make_frame(HPL__MSG_INLINE_PUT, 6, &p.base, payload, sizeof payload, &l2);
  uint8_t *f3 = make_frame(HPL__MSG_HEARTBEAT, 7, NULL, NULL, 0, &l3); /* empty message */
  size_t total = l1 + l2 + l3;
  uint8_t *all = malloc(total);
  memcpy(all, f1, l1);
  memcpy(all + l1, f2, l2);
  memcpy(all + l1 + l2, f3, l3);

  hpl__framer f;
  hpl__framer_init(&f, &lim);
  int frames = 0;
  uint8_t got_payload[300];
  size_t pgot = 0;
  for (size_t off = 0; off < total;) {
    size_t n = total - off < step ? total - off : step;
    size_t used = 0;
    while (used < n || (f.state == 1 && f.mhave == f.hdr.msg_len)) {
      int ev;
      const uint8_t *chunk;
      size_t clen;
      long r = hpl__framer_feed(&f, all + off + used, n - used, &ev, &chunk, &clen);
      assert_true(r >= 0);
      used += (size_t)r;
      if (ev == HPL__FR_MSG) {
        frames++;
        ProtobufCMessage *m = hpl__msg_unpack(f.hdr.type, f.msg, f.hdr.msg_len);
        assert_non_null(m);
        if (frames == 1) {
          assert_int_equal(f.hdr.type, HPL__MSG_GET);
          assert_string_equal(((Hplpb__GetReq *)m)->id, "object/one");
          assert_int_equal(((Hplpb__GetReq *)m)->timeout_ms, -1);
        } else if (frames == 2) {
          assert_int_equal(f.hdr.type, HPL__MSG_INLINE_PUT);
          assert_int_equal(f.hdr.payload_len, 300);
          assert_int_equal(((Hplpb__InlinePutReq *)m)->size, 300);
        } else {
          assert_int_equal(f.hdr.type, HPL__MSG_HEARTBEAT);
          assert_int_equal(f.hdr.req_id, 7);
        }
        protobuf_c_message_free_unpacked(m, NULL);
      } else if (ev == HPL__FR_PAYLOAD) {
        assert_true(pgot + clen <= sizeof got_payload);
        memcpy(got_payload + pgot, chunk, clen);
        pgot += clen;
      } else if (r == 0) {
        break;
      }
    }
    off += n;
  }
  assert_int_equal(frames, 3);
  assert_int_equal(pgot, 300);
  assert_memory_equal(got_payload, payload, 300);
  assert_int_equal(hpl__framer_payload_left(&f), 0);
  hpl__framer_free(&f);
  free(f1);
  free(f2);
  free(f3);
  free(all);
}

static void test_stream_whole(void **state) {
  (void)state;
  feed_in_steps(1 << 20);
}
static void test_stream_byte_by_byte(void **state) {
  (void)state;
  feed_in_steps(1);
}
static void test_stream_odd_pieces(void **state) {
  (void)state;
  feed_in_steps(7);
  feed_in_steps(33);
}

static void test_framer_rejects_oversized(void **state) {
  (void)state;
  hpl__frame_hdr h = {.type = HPL__MSG_GET, .msg_len = 2000, .req_id = 1};
  uint8_t buf[HPL__FRAME_HDR_LEN + 16] = {0};
  hpl__frame_encode_hdr(&h, buf);
  hpl__framer f;
  hpl__framer_init(&f, &lim);
  int ev;
  const uint8_t *c;
  size_t cl;
  long r = hpl__framer_feed(&f, buf, sizeof buf, &ev, &c, &cl);
  assert_int_equal(r, HPL_ETOOBIG);
  assert_non_null(f.why);
  /* nothing was allocated for the oversized message */
  assert_null(f.msg);
  hpl__framer_free(&f);
}

static void test_framer_rejects_garbage(void **state) {
  (void)state;
  uint8_t junk[64];
  for (int i = 0; i < 64; i++) junk[i] = (uint8_t)(i * 31 + 5);
  hpl__framer f;
  hpl__framer_init(&f, &lim);
  int ev;
  const uint8_t *c;
  size_t cl;
  assert_int_equal(hpl__framer_feed(&f, junk, sizeof junk, &ev, &c, &cl), HPL_EPROTO);
  hpl__framer_free(&f);
}

static void test_truncated_message_waits(void **state) {
  (void)state;
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = "abc";
  size_t len;
  uint8_t *fr = make_frame(HPL__MSG_GET, 1, &g.base, NULL, 0, &len);
  hpl__framer f;
  hpl__framer_init(&f, &lim);
  int ev;
  const uint8_t *c;
  size_t cl;
  /* everything but the last byte: consumed, no frame yet */
  long r = hpl__framer_feed(&f, fr, len - 1, &ev, &c, &cl);
  assert_int_equal(r, (long)len - 1);
  assert_int_equal(ev, HPL__FR_NONE);
  r = hpl__framer_feed(&f, fr + len - 1, 1, &ev, &c, &cl);
  assert_int_equal(r, 1);
  assert_int_equal(ev, HPL__FR_MSG);
  hpl__framer_free(&f);
  free(fr);
}

static void test_undecodable_message(void **state) {
  (void)state;
  /* a field header promising 100 bytes that are not there */
  uint8_t bad[] = {0x0a, 100, 'x'};
  assert_null(hpl__msg_unpack(HPL__MSG_GET, bad, sizeof bad));
  assert_null(hpl__msg_unpack(9999, bad, 0));
}

static void test_payload_skip(void **state) {
  (void)state;
  Hplpb__PullRep r = HPLPB__PULL_REP__INIT;
  r.size = 1000;
  size_t len;
  uint8_t *fr = make_frame(HPL__MSG_PULL_REP, 3, &r.base, NULL, 0, &len);
  /* patch the header to announce 1000 payload bytes that the caller reads
   * into its own buffer */
  hpl__frame_hdr h;
  hpl__frame_decode_hdr(fr, len, &lim, &h, NULL);
  h.payload_len = 1000;
  hpl__frame_encode_hdr(&h, fr);
  hpl__framer f;
  hpl__framer_init(&f, &lim);
  int ev;
  const uint8_t *c;
  size_t cl;
  assert_int_equal(hpl__framer_feed(&f, fr, len, &ev, &c, &cl), (long)len);
  assert_int_equal(ev, HPL__FR_MSG);
  assert_int_equal(hpl__framer_payload_left(&f), 1000);
  hpl__framer_payload_skip(&f, 600);
  assert_int_equal(hpl__framer_payload_left(&f), 400);
  hpl__framer_payload_skip(&f, 400);
  assert_int_equal(hpl__framer_payload_left(&f), 0);
  /* the next frame parses normally */
  assert_int_equal(hpl__framer_feed(&f, fr, len, &ev, &c, &cl), (long)len);
  assert_int_equal(ev, HPL__FR_MSG);
  hpl__framer_free(&f);
  free(fr);
}

static void test_ids_and_errors(void **state) {
  (void)state;
  assert_true(hpl__id_valid("a"));
  assert_true(hpl__id_valid("weights/step-1 (v2) \xc3\xa9"));
  assert_false(hpl__id_valid(""));
  assert_false(hpl__id_valid(NULL));
  assert_false(hpl__id_valid("tab\there"));
  assert_false(hpl__id_valid("nl\n"));
  assert_false(hpl__id_valid("del\x7f"));
  char longid[HPL_ID_MAX + 2];
  memset(longid, 'x', sizeof longid);
  longid[HPL_ID_MAX] = 0;
  assert_true(hpl__id_valid(longid));
  longid[HPL_ID_MAX] = 'x';
  longid[HPL_ID_MAX + 1] = 0;
  assert_false(hpl__id_valid(longid));
  assert_string_equal(hpl_errname(HPL_ETIMEDOUT), "HPL_ETIMEDOUT");
  assert_string_equal(hpl_strerror(HPL_OK), "success");
  assert_string_equal(hpl_strerror(-999), "unknown error");
  assert_int_equal(hpl_dtype_size(HPL_DT_F64), 8);
  assert_int_equal(hpl_dtype_size(99), 0);
  /* every message type has a descriptor and a name */
  unsigned known = 0;
  for (unsigned t = 1; t <= HPL__MSG_MAX_; t++)
    if (hpl__msg_descriptor(t)) {
      known++;
      assert_string_not_equal(hpl__msg_name(t), "?");
    }
  assert_true(known >= 30);
}

/* ---- session MACs (frame.h: HPL__FRAME_F_TAG, hpl__fmac) */

static const uint8_t skey[HPL__FRAME_KEY_LEN] = {7, 7, 7, 7, 1, 2, 3, 4};
static int use_gmac; /* the tests below with GMAC tags (test_gmac_*) */

/* Append one tagged frame to out (at *len): header, message, tag, payload;
 * `cover`: the tag covers the payload (HPL__FRAME_F_TAG_PAYLOAD). */
static void seal(hpl__fmac *m, unsigned type, uint64_t req, const ProtobufCMessage *msg,
                 const uint8_t *payload, uint64_t plen, int cover, uint8_t *out, size_t *len) {
  size_t mlen = msg ? protobuf_c_message_pack(msg, out + *len + HPL__FRAME_HDR_LEN) : 0;
  hpl__frame_hdr h = {.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req,
                      .payload_len = plen,
                      .flags = HPL__FRAME_F_TAG | (cover ? HPL__FRAME_F_TAG_PAYLOAD : 0)};
  hpl__frame_encode_hdr(&h, out + *len);
  hpl__fmac_begin(m, &h, out + *len + HPL__FRAME_HDR_LEN, mlen);
  if (cover) hpl__fmac_add(m, payload, plen);
  uint8_t *tag = out + *len + HPL__FRAME_HDR_LEN + mlen;
  hpl__fmac_end(m, tag);
  if (plen) memcpy(tag + HPL__FRAME_TAG_LEN, payload, plen);
  *len += HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + plen;
}

/* Feed bytes[0..len) in pieces of `step` to a tagged framer and check each
 * frame's tag as a receiver does (payload covered when the flag says so).
 * Returns how many frames passed before the first that failed (or the
 * end); *bad is 1 if one was refused (framer error or tag). */
static int open_frames(const uint8_t *bytes, size_t len, size_t step, int *bad) {
  hpl__frame_limits tl = lim;
  tl.tagged = 1;
  hpl__framer f;
  hpl__framer_init(&f, &tl);
  hpl__fmac m;
  hpl__fmac_init_as(&m, skey, use_gmac);
  int ok = 0;
  *bad = 0;
  size_t off = 0;
  while (off < len && !*bad) {
    size_t n = len - off < step ? len - off : step;
    const uint8_t *p = bytes + off;
    while (n > 0 && !*bad) {
      int ev;
      const uint8_t *chunk;
      size_t clen;
      long k = hpl__framer_feed(&f, p, n, &ev, &chunk, &clen);
      if (k < 0) {
        *bad = 1;
        break;
      }
      p += k, n -= (size_t)k, off += (size_t)k;
      if (ev == HPL__FR_MSG) {
        hpl__fmac_begin(&m, &f.hdr, f.msg, f.hdr.msg_len);
        if (f.hdr.payload_len == 0) {
          if (hpl__fmac_check(&m, f.tag) != 0) *bad = 1;
          else ok++;
        }
      } else if (ev == HPL__FR_PAYLOAD) {
        if (f.hdr.flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&m, chunk, clen);
        if (hpl__framer_payload_left(&f) == 0) {
          if (hpl__fmac_check(&m, f.tag) != 0) *bad = 1;
          else ok++;
        }
      }
      if (k == 0 && ev == HPL__FR_NONE) break;
    }
  }
  hpl__framer_free(&f);
  hpl__fmac_wipe(&m);
  return ok;
}

/* Three frames (with and without payloads), each alone in `out[i]`. */
static void three_frames(uint8_t out[3][512], size_t lens[3]) {
  hpl__fmac m;
  hpl__fmac_init_as(&m, skey, use_gmac);
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = "an/object";
  uint8_t pay[100];
  memset(pay, 'P', sizeof pay);
  for (int i = 0; i < 3; i++) lens[i] = 0;
  seal(&m, HPL__MSG_GET, 1, &g.base, NULL, 0, 1, out[0], &lens[0]);
  seal(&m, HPL__MSG_PUT, 2, &g.base, pay, sizeof pay, 1, out[1], &lens[1]);
  seal(&m, HPL__MSG_GET, 3, NULL, NULL, 0, 1, out[2], &lens[2]);
  hpl__fmac_wipe(&m);
}

static size_t cat(uint8_t *dst, uint8_t src[3][512], const size_t lens[3], const int *order,
                  int n) {
  size_t len = 0;
  for (int i = 0; i < n; i++) {
    memcpy(dst + len, src[order[i]], lens[order[i]]);
    len += lens[order[i]];
  }
  return len;
}

static void test_tagged_round_trip(void **state) {
  (void)state;
  uint8_t fr[3][512], all[1536];
  size_t lens[3];
  three_frames(fr, lens);
  int order[] = {0, 1, 2}, bad;
  size_t len = cat(all, fr, lens, order, 3);
  for (size_t step = 1; step <= len; step += 37) {
    assert_int_equal(open_frames(all, len, step, &bad), 3);
    assert_int_equal(bad, 0);
  }
}

/* Every single flipped bit of the second frame (header, message, tag,
 * covered payload) is refused: the first frame passes, the second never. */
static void test_tagged_bit_flips(void **state) {
  (void)state;
  uint8_t fr[3][512], all[1536];
  size_t lens[3];
  three_frames(fr, lens);
  int order[] = {0, 1, 2}, bad;
  size_t len = cat(all, fr, lens, order, 3);
  for (size_t byte = lens[0]; byte < lens[0] + lens[1]; byte++)
    for (int bit = 0; bit < 8; bit++) {
      all[byte] ^= (uint8_t)(1u << bit);
      int ok = open_frames(all, len, 64, &bad);
      all[byte] ^= (uint8_t)(1u << bit);
      if (ok != 1) fail_msg("flipped bit %d of byte %zu: %d frames passed", bit, byte, ok);
    }
}

/* A replayed frame, two swapped frames, a frame dropped: refused. */
static void test_tagged_replay_reorder_drop(void **state) {
  (void)state;
  uint8_t fr[3][512], all[2048];
  size_t lens[3];
  three_frames(fr, lens);
  int bad;
  int replay[] = {0, 1, 1, 2};
  size_t len = cat(all, fr, lens, replay, 4);
  assert_int_equal(open_frames(all, len, 4096, &bad), 2);
  assert_int_equal(bad, 1);
  int first_again[] = {0, 0};
  len = cat(all, fr, lens, first_again, 2);
  assert_int_equal(open_frames(all, len, 4096, &bad), 1);
  assert_int_equal(bad, 1);
  int swapped[] = {0, 2, 1};
  len = cat(all, fr, lens, swapped, 3);
  assert_int_equal(open_frames(all, len, 4096, &bad), 1);
  assert_int_equal(bad, 1);
  int dropped[] = {0, 2};
  len = cat(all, fr, lens, dropped, 2);
  assert_int_equal(open_frames(all, len, 4096, &bad), 1);
  assert_int_equal(bad, 1);
  /* another key (another connection's, or another direction's) */
  hpl__fmac other;
  uint8_t k2[HPL__FRAME_KEY_LEN] = {8};
  hpl__fmac_init_as(&other, k2, use_gmac);
  len = 0;
  seal(&other, HPL__MSG_GET, 1, NULL, NULL, 0, 1, all, &len);
  hpl__fmac_wipe(&other);
  assert_int_equal(open_frames(all, len, 4096, &bad), 0);
  assert_int_equal(bad, 1);
}

/* Sessions on one end only: an untagged frame on a tagged connection, and
 * a tagged frame on an untagged one, are protocol errors at once. */
static void test_tagged_mismatch(void **state) {
  (void)state;
  size_t len;
  uint8_t *plain = make_frame(HPL__MSG_GET, 1, NULL, NULL, 0, &len);
  hpl__frame_limits tl = lim;
  tl.tagged = 1;
  hpl__frame_hdr h;
  const char *why = NULL;
  assert_int_equal(hpl__frame_decode_hdr(plain, len, &tl, &h, &why), HPL_EPROTO);
  assert_non_null(strstr(why, "without a MAC"));
  free(plain);
  uint8_t fr[3][512];
  size_t lens[3];
  three_frames(fr, lens);
  assert_int_equal(hpl__frame_decode_hdr(fr[0], lens[0], &lim, &h, &why), HPL_EPROTO);
}

/* The same with GMAC tags (both ends with AES in hardware). */
static void test_gmac_round_trip(void **state) {
  use_gmac = 1;
  test_tagged_round_trip(state);
  use_gmac = 0;
}
static void test_gmac_bit_flips(void **state) {
  use_gmac = 1;
  test_tagged_bit_flips(state);
  use_gmac = 0;
}
static void test_gmac_replay_reorder_drop(void **state) {
  use_gmac = 1;
  test_tagged_replay_reorder_drop(state);
  use_gmac = 0;
}

/* A GMAC tag is AES-256-GCM's (libsodium's, one call) over no plaintext
 * with the frame as associated data, whatever pieces it is fed in; and a
 * session uses GMAC only when both ends' flags say AES. */
static void gmac_matches(size_t plen);

static void test_gmac_is_aes_gcm(void **state) {
  (void)state;
  if (sodium_init() < 0 || !crypto_aead_aes256gcm_is_available()) skip();
  gmac_matches(300);  /* one call (frame.c: HPL__FMAC_SMALL) */
  gmac_matches(3000); /* streamed through OpenSSL */
  gmac_matches(HPL__FMAC_SMALL - 8 - HPL__FRAME_HDR_LEN - 11); /* exactly what fits */
  /* negotiation: both AES -> GMAC; either without -> BLAKE2b */
  hpl__auth_hs hs = {.fo = HPL__AUTH_F_AES, .fa = HPL__AUTH_F_AES};
  hpl__auth_keys k;
  hpl__auth_session(&hs, skey, 1, &k);
  assert_int_equal(k.gmac, 1);
  hs.fa = 0;
  hpl__auth_session(&hs, skey, 1, &k);
  assert_int_equal(k.gmac, 0);
  hs.fa = HPL__AUTH_F_AES | HPL__AUTH_F_ENCRYPT, hs.fo = HPL__AUTH_F_ENCRYPT;
  hpl__auth_session(&hs, skey, 0, &k);
  assert_int_equal(k.gmac, 0);
}

/* A frame with a plen-byte covered payload, tagged by hpl__fmac (GMAC)
 * with the payload fed in pieces, against one libsodium call. */
static void gmac_matches(size_t plen) {
  static uint8_t out[8192], pay[4096], ad[8 + 8192];
  for (size_t i = 0; i < plen; i++) pay[i] = (uint8_t)(i * 7);
  Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
  g.id = "an/object"; /* an 11-byte message */
  hpl__fmac m;
  hpl__fmac_init_as(&m, skey, 1);
  for (int rep = 0; rep < 2; rep++) { /* the second frame: seq + 1, state reused */
    size_t mlen = protobuf_c_message_pack(&g.base, out + HPL__FRAME_HDR_LEN);
    hpl__frame_hdr h = {.type = HPL__MSG_PUT, .msg_len = (uint32_t)mlen, .req_id = 9,
                        .payload_len = plen, .flags = HPL__FRAME_F_TAG | HPL__FRAME_F_TAG_PAYLOAD};
    hpl__frame_encode_hdr(&h, out);
    uint64_t seq = m.seq;
    hpl__fmac_begin(&m, &h, out + HPL__FRAME_HDR_LEN, mlen);
    for (size_t off = 0; off < plen; off += 700) /* in pieces */
      hpl__fmac_add(&m, pay + off, plen - off < 700 ? plen - off : 700);
    uint8_t tag[HPL__FRAME_TAG_LEN], want[16], nonce[12], none[1];
    hpl__fmac_end(&m, tag);
    for (int i = 0; i < 8; i++) ad[i] = (uint8_t)(seq >> (8 * i));
    memcpy(ad + 8, out, HPL__FRAME_HDR_LEN + mlen);
    memcpy(ad + 8 + HPL__FRAME_HDR_LEN + mlen, pay, plen);
    memcpy(nonce, ad, 8);
    memset(nonce + 8, 0xff, 4);
    unsigned long long tlen = 0;
    crypto_aead_aes256gcm_encrypt_detached(none, want, &tlen, NULL, 0, ad,
                                           8 + HPL__FRAME_HDR_LEN + mlen + plen, NULL, nonce,
                                           skey);
    assert_memory_equal(tag, want, HPL__FRAME_TAG_LEN);
  }
  hpl__fmac_wipe(&m);
}

/* hpl__fmac_check_span, the receiver's in-place check over a frame kept
 * whole after room for the MAC's head, accepts exactly the tags that
 * begin/add/end make (GMAC in one call and streamed, BLAKE2b) and refuses
 * a frame with one byte changed; either way the sequence moves on. */
static void test_fmac_check_span(void **state) {
  (void)state;
  int gmac_ok = sodium_init() >= 0 && crypto_aead_aes256gcm_is_available();
  static uint8_t buf[HPL__FMAC_HEAD_LEN + 64 + 8192], pay[8192];
  for (int gmac = 0; gmac <= gmac_ok; gmac++) {
    const size_t sizes[] = {0, 300, HPL__FMAC_SMALL - HPL__FMAC_HEAD_LEN - 11, 3000, 8000};
    hpl__fmac tx, rx;
    hpl__fmac_init_as(&tx, skey, gmac);
    hpl__fmac_init_as(&rx, skey, gmac);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
      size_t plen = sizes[k];
      for (size_t i = 0; i < plen; i++) pay[i] = (uint8_t)(i * 13 + k);
      Hplpb__GetReq g = HPLPB__GET_REQ__INIT;
      g.id = "an/object"; /* an 11-byte message */
      uint8_t *msg = buf + HPL__FMAC_HEAD_LEN;
      size_t mlen = protobuf_c_message_pack(&g.base, msg);
      hpl__frame_hdr h = {.type = HPL__MSG_PEEK_REP, .msg_len = (uint32_t)mlen, .req_id = 3,
                          .payload_len = plen,
                          .flags = HPL__FRAME_F_TAG | (plen ? HPL__FRAME_F_TAG_PAYLOAD : 0)};
      memcpy(msg + mlen, pay, plen);
      uint8_t tag[HPL__FRAME_TAG_LEN];
      for (int bad = 0; bad <= 1; bad++) { /* a good frame, then one changed on the way */
        hpl__fmac_begin(&tx, &h, msg, mlen);
        hpl__fmac_add(&tx, pay, plen);
        hpl__fmac_end(&tx, tag);
        uint64_t seq = rx.seq;
        hpl__fmac_head(&rx, &h, buf);
        if (bad) msg[(mlen + plen) / 2] ^= 0x01;
        int rc = hpl__fmac_check_span(&rx, buf, HPL__FMAC_HEAD_LEN + mlen + plen, tag);
        if (bad) msg[(mlen + plen) / 2] ^= 0x01;
        assert_int_equal(rc, bad ? HPL_EAUTH : 0);
        assert_int_equal(rx.seq, seq + 1);
      }
    }
    hpl__fmac_wipe(&tx);
    hpl__fmac_wipe(&rx);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_round_trip),
      cmocka_unit_test(test_short_header_needs_more),
      cmocka_unit_test(test_bad_headers),
      cmocka_unit_test(test_stream_whole),
      cmocka_unit_test(test_stream_byte_by_byte),
      cmocka_unit_test(test_stream_odd_pieces),
      cmocka_unit_test(test_framer_rejects_oversized),
      cmocka_unit_test(test_framer_rejects_garbage),
      cmocka_unit_test(test_truncated_message_waits),
      cmocka_unit_test(test_undecodable_message),
      cmocka_unit_test(test_payload_skip),
      cmocka_unit_test(test_ids_and_errors),
      cmocka_unit_test(test_tagged_round_trip),
      cmocka_unit_test(test_tagged_bit_flips),
      cmocka_unit_test(test_tagged_replay_reorder_drop),
      cmocka_unit_test(test_tagged_mismatch),
      cmocka_unit_test(test_gmac_round_trip),
      cmocka_unit_test(test_gmac_bit_flips),
      cmocka_unit_test(test_gmac_replay_reorder_drop),
      cmocka_unit_test(test_gmac_is_aes_gcm),
      cmocka_unit_test(test_fmac_check_span),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
