/*
 * frame.h - the one framing used on every hoplite connection.
 *
 * A frame is a fixed 32-byte little-endian header, a protobuf message of
 * msg_len bytes, on an authenticated connection a 16-byte tag, then
 * payload_len raw payload bytes:
 *
 *   off  size  field
 *     0     4  magic        HPL__FRAME_MAGIC
 *     4     2  version      HPL__FRAME_VERSION
 *     6     2  type         message type (proto.h)
 *     8     4  flags        HPL__FRAME_F_*; 0 without a session
 *    12     4  msg_len      protobuf message length
 *    16     8  req_id       request id; replies echo it, 0 = one-way
 *    24     8  payload_len  raw bytes after the message (and tag)
 *
 * Sessions (auth.h, handshake version 2). After the handshake every frame
 * in both directions has HPL__FRAME_F_TAG set and HPL__FRAME_TAG_LEN bytes
 * between its message and its payload:
 *   tag = BLAKE2b-128(key = the direction's session key,
 *                     seq (8 bytes LE) | header (32) | message [| payload])
 * seq counts the frames of that direction from 0 and is never sent: a
 * replayed, dropped or reordered frame has the wrong seq and fails. With
 * HPL__FRAME_F_TAG_PAYLOAD the payload is covered too: set on every frame
 * whose sender holds its payload when it sends it (control connections:
 * store<->directory, client<->directory; a receiver that buffers payloads
 * requires it whenever payload_len > 0 and checks the tag before it hands
 * anything up). Clear on a data-port stream, whose bulk bytes go straight
 * into the pool (and with sendfile on the sending side): header and message
 * are covered, the bytes are checked per unit by their digests; a receiver
 * that streams payloads refuses the flag. The flags are inside the tag, so
 * an attacker cannot clear them. A frame whose tag does not match closes
 * the connection, counted (auth_failures) and logged; its content is never
 * handed up. A peer without sessions (flags 0) fails at the first frame
 * ("frame without a MAC"), and a version-1 handshake fails before that.
 * BLAKE2b-128 (keyed crypto_generichash) rather than HMAC-SHA256: about
 * 2.5x less CPU for a 100-byte frame here (docs/design.md, Sessions).
 *
 * Sealed connections (--encrypt, negotiated in the handshake: auth.h,
 * hpl__auth_seal). Every frame has HPL__FRAME_F_TAG | HPL__FRAME_F_SEALED
 * and the tag is the AEAD's (ChaCha20-Poly1305 IETF or AES-256-GCM, key:
 * the direction's seal key), no BLAKE2b MAC is made. The header travels in
 * the clear as associated data; the nonce is (4 bytes record index 0,
 * 8 bytes seq LE). With HPL__FRAME_F_TAG_PAYLOAD the ciphertext is message
 * | payload as one (the message's part before the tag, the payload's after
 * it), else only the message. A payload without that flag (a data-port
 * stream) follows as records: 4-byte plaintext length n LE (1..
 * HPL__FRAME_REC_MAX, as associated data), n bytes of ciphertext, a
 * 16-byte tag; record i (from 1) has nonce (i, the frame's seq), so
 * records cannot be dropped, reordered or moved between frames; the
 * plaintext lengths add up to payload_len (hpl__fseal_record).
 *
 * This module is pure: it is fed bytes and never touches a socket.
 *
 * Callers: proto.h (frames of messages), the servers' connections
 * (src/server/uvconn_read.c), the client's RPC layer (src/client/crpc.c),
 * tests and fuzz targets.
 */
#ifndef HPL_FRAME_H
#define HPL_FRAME_H

#include <sodium.h>
#include <stddef.h>
#include <stdint.h>

#define HPL__FRAME_MAGIC 0x4c504f48u /* "HOPL" read as little-endian */
#define HPL__FRAME_VERSION 1
#define HPL__FRAME_HDR_LEN 32
#define HPL__FRAME_F_TAG 0x1u         /* a tag follows the message */
#define HPL__FRAME_F_TAG_PAYLOAD 0x2u /* the tag covers the payload too */
#define HPL__FRAME_F_SEALED 0x4u      /* message (and payload) encrypted, see above */
#define HPL__FRAME_TAG_LEN 16
#define HPL__FRAME_REC_HDR 4            /* a sealed record's length */
#define HPL__FRAME_REC_MAX 65536u       /* largest plaintext of a sealed record */
#define HPL__FRAME_KEY_LEN 32
/* Bytes of a frame (sequence number, header, message, covered payload) a
 * GMAC session tags with one call; larger frames stream through OpenSSL. */
#define HPL__FMAC_SMALL 1280 /* a 1 KiB object with its header and message */

typedef struct hpl__frame_hdr {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t flags;
  uint32_t msg_len;
  uint64_t req_id;
  uint64_t payload_len;
} hpl__frame_hdr;

/* What a connection accepts. A frame outside these limits is a protocol
 * error detected from the header alone, before anything is allocated. */
typedef struct hpl__frame_limits {
  uint32_t max_msg;     /* largest protobuf message */
  uint64_t max_payload; /* largest payload */
  uint16_t max_type;    /* types 1..max_type are known */
  int tagged;           /* 1: a session is on: every frame has HPL__FRAME_F_TAG
                           and a tag (flags other than the F_TAG* refused);
                           0: flags must be 0 */
} hpl__frame_limits;

/* Write `h` (magic and version are filled in) into out[HPL__FRAME_HDR_LEN]. */
void hpl__frame_encode_hdr(const hpl__frame_hdr *h, uint8_t *out);

/* Parse and check a header from buf[0..len). Returns 1 if len is too short,
 * 0 and fills *out when valid, HPL_EPROTO or HPL_ETOOBIG otherwise; then
 * *why (if not NULL) points at a static description. */
int hpl__frame_decode_hdr(const uint8_t *buf, size_t len, const hpl__frame_limits *lim,
                         hpl__frame_hdr *out, const char **why);

/* Incremental parser. Feed it whatever bytes arrive; it reports:
 *   HPL__FR_MSG      the header and message of a frame are complete (and
 *                   with lim.tagged its tag): f->hdr, f->msg (f->hdr.msg_len
 *                   bytes) and f->tag are valid until the next frame's
 *                   header is fed; hdr.payload_len payload bytes follow.
 *                   The framer checks no tag: that is hpl__fmac's.
 *   HPL__FR_PAYLOAD  chunk/chunk_len is the next piece of the payload
 *                   (pointing into the fed bytes). When
 *                   hpl__framer_payload_left() is 0 the frame is done.
 *   HPL__FR_NONE     everything fed was consumed; feed more.
 * A caller that has its own destination for a payload may read straight into
 * it and report the bytes with hpl__framer_payload_skip() instead. */
enum { HPL__FR_NONE = 0, HPL__FR_MSG = 1, HPL__FR_PAYLOAD = 2 };

typedef struct hpl__framer {
  hpl__frame_limits lim;
  int state; /* 0 header, 1 message, 2 payload, 3 tag */
  hpl__frame_hdr hdr;
  uint8_t hbuf[HPL__FRAME_HDR_LEN];
  size_t hhave;
  uint8_t *msg; /* owned, capacity mcap */
  size_t mcap;
  size_t mhave;
  uint64_t pleft;
  uint8_t tag[HPL__FRAME_TAG_LEN];
  size_t thave;
  const char *why; /* reason of the last error */
} hpl__framer;

void hpl__framer_init(hpl__framer *f, const hpl__frame_limits *lim);
/* The session began (between two frames): from the next frame on every
 * frame must be tagged (lim.tagged). */
void hpl__framer_tagged(hpl__framer *f);
void hpl__framer_free(hpl__framer *f);

/* Consume up to `len` bytes. Returns the number consumed (>= 0) and sets *ev,
 * or a negative error (HPL_EPROTO, HPL_ETOOBIG, HPL_ENOMEM) after which the
 * framer must not be fed again (f->why says why). */
long hpl__framer_feed(hpl__framer *f, const uint8_t *data, size_t len, int *ev,
                     const uint8_t **chunk, size_t *chunk_len);

/* Payload bytes of the current frame still to come (0 outside a payload). */
uint64_t hpl__framer_payload_left(const hpl__framer *f);

/* Account for n payload bytes the caller received into its own buffer. n must
 * not exceed hpl__framer_payload_left(). */
void hpl__framer_payload_skip(hpl__framer *f, uint64_t n);

/* Give back the last n payload bytes skipped or fed that the caller could
 * not take after all (its sink was full): they are payload still to come,
 * as if never consumed (a frame that ended with them is under way again). */
void hpl__framer_payload_unskip(hpl__framer *f, uint64_t n);

/* One direction of a session's MACs (see the layout above): the key and
 * the sequence number of the next frame, and the MAC of the frame under
 * way. No allocation; lives in its connection (64-byte aligned: the
 * BLAKE2b state asks for it). The sender: hpl__fmac_begin, _add for a
 * covered payload, _end writes the tag. The receiver: _begin, _add,
 * _check. Each frame's _end or _check moves seq on. Not thread-safe: one
 * direction of one connection, used by whoever owns it. */
typedef struct hpl__fmac {
  crypto_generichash_state run; /* the frame under way (BLAKE2b) */
  void *gcm;  /* EVP_CIPHER_CTX keyed for GMAC tags (hpl__fmac_init_as), or NULL */
  struct gsmall *small; /* GMAC: one-call state and the frame while it fits (frame.c) */
  size_t glen;          /* GMAC: bytes of the frame under way gathered there */
  int spilled;          /* GMAC: the frame outgrew it; OpenSSL's context has it */
  int failed; /* GMAC: OpenSSL failed (no memory): every check fails */
  uint8_t key[HPL__FRAME_KEY_LEN];
  uint64_t seq;
  int on; /* 0: no session (the other calls must not be made) */
  int seal; /* HPL__SEAL_* (auth.h): 0, or frames are sealed with skey */
  uint8_t skey[HPL__FRAME_KEY_LEN];
} hpl__fmac;

/* What a frame's MAC covers ahead of its message: the sequence number
 * (8 bytes, little-endian) and the encoded header. */
#define HPL__FMAC_HEAD_LEN (8 + HPL__FRAME_HDR_LEN)

/* Key the MAC (copied; the caller wipes its copy), seq 0: BLAKE2b tags. */
void hpl__fmac_init(hpl__fmac *m, const uint8_t key[HPL__FRAME_KEY_LEN]);
/* As hpl__fmac_init, with GMAC tags instead when `gmac` (both ends of the
 * session have AES in hardware: hpl__auth_keys.gmac): AES-256-GCM under
 * the same key with no plaintext, the 8-byte sequence number and 0xffffffff
 * as nonce, header, message and payload as associated data; about a sixth
 * of BLAKE2b's CPU for a small frame. Holds an OpenSSL context: the owner
 * must call hpl__fmac_wipe, and never copy the struct. Without memory for
 * it the MAC fails every frame (the connection then ends, HPL_EAUTH). */
void hpl__fmac_init_as(hpl__fmac *m, const uint8_t key[HPL__FRAME_KEY_LEN], int gmac);
/* Forget the key (and free a GMAC context). */
void hpl__fmac_wipe(hpl__fmac *m);
/* Start the tag of the next frame: seq, header `h` (encoded as on the
 * wire: its flags as sent, HPL__FRAME_F_TAG included) and its message. */
void hpl__fmac_begin(hpl__fmac *m, const hpl__frame_hdr *h, const uint8_t *msg, size_t mlen);
/* Covered payload bytes, in order. */
void hpl__fmac_add(hpl__fmac *m, const void *p, size_t n);
/* Sender: the frame's tag; seq moves on. */
void hpl__fmac_end(hpl__fmac *m, uint8_t tag[HPL__FRAME_TAG_LEN]);
/* Receiver: 0 if `tag` (from the wire) is the frame's, compared in
 * constant time, else HPL_EAUTH; seq moves on either way. */
int hpl__fmac_check(hpl__fmac *m, const uint8_t tag[HPL__FRAME_TAG_LEN]);
/* The receiver's other way, for a frame it keeps whole in one buffer
 * anyway: hpl__fmac_head writes head[] (the next frame's sequence number
 * and h), the caller puts the message and the payload right after it, and
 * hpl__fmac_check_span checks the tag over p[0..n) (head included) and
 * moves seq on, as hpl__fmac_check. The same tag as _begin/_add/_check,
 * without their copy of the frame (GMAC gathers a small frame to tag it
 * in one call). 0 or HPL_EAUTH. */
void hpl__fmac_head(const hpl__fmac *m, const hpl__frame_hdr *h,
                    uint8_t head[HPL__FMAC_HEAD_LEN]);
int hpl__fmac_check_span(hpl__fmac *m, const uint8_t *p, size_t n,
                         const uint8_t tag[HPL__FRAME_TAG_LEN]);

/* Sealed connections (see above). After hpl__fmac_init: frames of this
 * direction are sealed with `kind` (HPL__SEAL_CHACHA or HPL__SEAL_AES, the
 * latter only where crypto_aead_aes256gcm_is_available()) under `key`
 * (copied); hpl__fmac_wipe forgets it too. */
void hpl__fseal_init(hpl__fmac *m, int kind, const uint8_t key[HPL__FRAME_KEY_LEN]);
/* Sender: encrypt p[0, n) (message, then a covered payload) in place for
 * the frame whose header is `h` (flags as sent), write its tag; returns the
 * frame's seq (for its records) and moves seq on. */
uint64_t hpl__fseal_frame(hpl__fmac *m, const hpl__frame_hdr *h, uint8_t *p, size_t n,
                          uint8_t tag[HPL__FRAME_TAG_LEN]);
/* Receiver: check and decrypt p[0, n) in place; *seq (may be NULL) gets
 * the frame's seq; seq moves on either way. 0, or HPL_EAUTH (p is then
 * garbage and must not be used). */
int hpl__fseal_open(hpl__fmac *m, const hpl__frame_hdr *h, uint8_t *p, size_t n,
                    const uint8_t tag[HPL__FRAME_TAG_LEN], uint64_t *seq);
/* Record `idx` (>= 1) of the streamed payload of frame `seq`: encrypt
 * in[0, n) (n <= HPL__FRAME_REC_MAX) into out (may be in), tag into tag.
 * Thread-safe (reads m only). */
void hpl__fseal_record(const hpl__fmac *m, uint64_t seq, uint32_t idx, const uint8_t *in,
                       uint8_t *out, size_t n, uint8_t tag[HPL__FRAME_TAG_LEN]);
/* Receiver: check and decrypt a record into out (may be in). 0 or
 * HPL_EAUTH (out is then garbage: zeroed or untouched, never counted). */
int hpl__fseal_record_open(const hpl__fmac *m, uint64_t seq, uint32_t idx, const uint8_t *in,
                           uint8_t *out, size_t n, const uint8_t tag[HPL__FRAME_TAG_LEN]);

#endif
