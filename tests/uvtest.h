/* uvtest.h - what the tests of the servers' framed connection share
 * (test_uvconn.c, test_uvconn_write.c): one end of a socketpair wrapped by
 * hpl__conn on a libuv loop, a record of what its callbacks saw, and the
 * plumbing to drive the loop and the other end by hand. Every helper fails
 * the running cmocka test on what it does not expect. */
#ifndef HPL_UVTEST_H
#define HPL_UVTEST_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto.h"
#include "uvconn.h"

extern uv_loop_t loop; /* the tests' loop (uvt_setup, uvt_teardown) */

#define MAX_FRAMES 8
#define BIG (200u * 1000u) /* a streamed payload larger than the read buffer */

/* What the callbacks saw on one connection. */
typedef struct rec {
  hpl__conn *c;
  int frames;
  unsigned types[MAX_FRAMES];
  uint64_t reqs[MAX_FRAMES];
  char ids[MAX_FRAMES][32]; /* GET ids */
  uint8_t *payloads[MAX_FRAMES]; /* buffered payloads, copied */
  uint64_t plens[MAX_FRAMES];
  int closes;
  int close_status;
  /* stream mode */
  int take_payload;   /* on_frame takes a payload into the sink below */
  uint8_t *sink;      /* BIG bytes */
  uint64_t allow;     /* the sink has room below this offset only */
  uint64_t got;       /* bytes reported by got(), always contiguous */
  int got_gap;        /* got() reported an offset out of order */
  int frames_at_end;  /* frames seen when the payload completed */
  /* writes */
  int write_cbs;
  int write_status;
} rec;

/* Frees what r's callbacks copied (not r). */
void rec_free(rec *r);

extern const hpl__frame_limits lim; /* the limits of open_conn's connections */
extern int open_cork;         /* the next open_conn corks its writes */
extern uv_loop_t *open_loop;  /* the loop of the next open_conn (default &loop) */

/* A connection over one end of a socketpair, recording into r (stream:
 * payloads are streamed); *peer is the other end, the caller's to close. */
hpl__conn *open_conn(rec *r, int stream, int *peer);
/* Run the loop until *flag becomes non-zero (or 5 s pass: a failure). */
void run_until(const int *flag);
/* Let the loop handle whatever the socket holds now. */
void run_now(void);
/* Close the connection (if still open) and the peer; on_close ran once,
 * with want_status. */
void close_all(rec *r, int peer, int want_status);
/* Write or read exactly n bytes on the peer end (blocking). */
void write_all(int fd, const void *p, size_t n);
void read_all(int fd, void *p, size_t n);
/* Append a frame (header, message, payload) to buf at *len. */
void add_frame(uint8_t *buf, size_t *len, unsigned type, uint64_t req, const ProtobufCMessage *m,
               const uint8_t *payload, uint64_t plen);
/* n bytes of a pattern that depends on seed. */
void pattern(uint8_t *b, size_t n, unsigned seed);
/* An INLINE_PUT `id` carrying n pattern bytes (seed; *payload gets them,
 * the caller frees it), then a HEARTBEAT, into a new buffer (the caller
 * frees it): its length in *len, where the first frame ends in *end1. */
uint8_t *put_then_heartbeat(const char *id, uint64_t n, unsigned seed, uint8_t **payload,
                            size_t *len, size_t *end1);
/* open_conn for a connection that takes payloads into r's sink (BIG
 * bytes, freed by rec_free). */
void open_stream(rec *r, int *peer);
/* put_then_heartbeat's frames arrived on a stream connection: the sink
 * holds the n payload bytes, reported in order, and the HEARTBEAT came
 * after. */
void expect_sink_then_heartbeat(const rec *r, const uint8_t *payload, uint64_t n);
/* A write callback (arg: the rec) that counts and keeps the status. */
void on_write(hpl__conn *c, int status, void *arg);
/* Read one frame from the peer end: header into *h, payload (<= cap)
 * into `payload`; the message, unpacked (the caller frees it). */
ProtobufCMessage *peer_frame(int peer, hpl__frame_hdr *h, uint8_t *payload, size_t cap);
/* cmocka group set-up and tear-down: the loop, quiet logs (protocol
 * errors are expected); tear-down fails if anything was left running. */
int uvt_setup(void **state);
int uvt_teardown(void **state);

#endif
