/*
 * frame.h - the one framing used on every hoplite connection.
 *
 * A frame is a fixed 32-byte little-endian header, a protobuf message of
 * msg_len bytes, then payload_len raw payload bytes:
 *
 *   off  size  field
 *     0     4  magic        HPL__FRAME_MAGIC
 *     4     2  version      HPL__FRAME_VERSION
 *     6     2  type         message type (proto.h)
 *     8     4  flags        reserved, must be 0 in this version
 *    12     4  msg_len      protobuf message length
 *    16     8  req_id       request id; replies echo it, 0 = one-way
 *    24     8  payload_len  raw bytes after the message
 *
 * This module is pure: it is fed bytes and never touches a socket.
 *
 * Callers: proto.h (frames of messages), the servers' connections
 * (src/server/uvconn_read.c), the client's RPC layer (src/client/crpc.c),
 * tests and fuzz targets.
 */
#ifndef HPL_FRAME_H
#define HPL_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define HPL__FRAME_MAGIC 0x4c504f48u /* "HOPL" read as little-endian */
#define HPL__FRAME_VERSION 1
#define HPL__FRAME_HDR_LEN 32

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
} hpl__frame_limits;

/* Write `h` (magic and version are filled in) into out[HPL__FRAME_HDR_LEN]. */
void hpl__frame_encode_hdr(const hpl__frame_hdr *h, uint8_t *out);

/* Parse and check a header from buf[0..len). Returns 1 if len is too short,
 * 0 and fills *out when valid, HPL_EPROTO or HPL_ETOOBIG otherwise; then
 * *why (if not NULL) points at a static description. */
int hpl__frame_decode_hdr(const uint8_t *buf, size_t len, const hpl__frame_limits *lim,
                         hpl__frame_hdr *out, const char **why);

/* Incremental parser. Feed it whatever bytes arrive; it reports:
 *   HPL__FR_MSG      the header and message of a frame are complete:
 *                   f->hdr and f->msg (f->hdr.msg_len bytes) are valid until
 *                   the next feed; hdr.payload_len payload bytes follow.
 *   HPL__FR_PAYLOAD  chunk/chunk_len is the next piece of the payload
 *                   (pointing into the fed bytes). When
 *                   hpl__framer_payload_left() is 0 the frame is done.
 *   HPL__FR_NONE     everything fed was consumed; feed more.
 * A caller that has its own destination for a payload may read straight into
 * it and report the bytes with hpl__framer_payload_skip() instead. */
enum { HPL__FR_NONE = 0, HPL__FR_MSG = 1, HPL__FR_PAYLOAD = 2 };

typedef struct hpl__framer {
  hpl__frame_limits lim;
  int state; /* 0 header, 1 message, 2 payload */
  hpl__frame_hdr hdr;
  uint8_t hbuf[HPL__FRAME_HDR_LEN];
  size_t hhave;
  uint8_t *msg; /* owned, capacity mcap */
  size_t mcap;
  size_t mhave;
  uint64_t pleft;
  const char *why; /* reason of the last error */
} hpl__framer;

void hpl__framer_init(hpl__framer *f, const hpl__frame_limits *lim);
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

#endif
