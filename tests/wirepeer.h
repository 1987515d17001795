/*
 * wirepeer.h - the far end of a connection in tests that play a store (or
 * any peer) themselves: whole frames read and written on a socket, from a
 * thread of the test's own. Nothing here calls cmocka (a failure would
 * longjmp across threads): what goes wrong is written into the peer's
 * `bad`, which the test checks after joining the thread.
 *
 * Used by test_crpc.c (a scripted peer of the RPC layer) and test_batch.c
 * (a fake store behind the public API).
 */
#ifndef HPL_TEST_WIREPEER_H
#define HPL_TEST_WIREPEER_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

typedef struct wp_peer {
  int fd;        /* the peer's end of the connection; -1 once closed */
  char bad[256]; /* the first thing that went wrong, "" if nothing */
} wp_peer;

/* A frame read: header, unpacked message (NULL if it did not decode) and
 * payload (NULL if none). */
typedef struct wp_frame {
  hpl__frame_hdr h;
  ProtobufCMessage *m;
  uint8_t *payload;
} wp_frame;

/* Record what went wrong (the first report stays). */
void wp_bad(wp_peer *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Read or write exactly n bytes. 0, or -1 (end of stream, error, or the
 * socket's SO_RCVTIMEO). */
int wp_read_exact(int fd, void *buf, size_t n);
int wp_write_exact(int fd, const void *buf, size_t n);

/* Read one whole frame (messages and payloads of up to 16 MiB). 0, or -1
 * at the end of the stream (a bad header is also reported in bad). */
int wp_read(wp_peer *p, wp_frame *f);
/* Read a frame that must be of `type`; -1 (reported) otherwise. */
int wp_expect(wp_peer *p, unsigned type, wp_frame *f);
void wp_free(wp_frame *f);

/* Send a frame with an optional payload, in pieces of `piece` bytes (0:
 * one write) with a short pause between them. */
void wp_send(wp_peer *p, unsigned type, uint64_t req, const ProtobufCMessage *m,
             const void *payload, size_t plen, size_t piece);

#endif
