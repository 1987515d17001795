/*
 * uvconn.h - a framed hoplite connection on a libuv stream (TCP or Unix).
 *
 * Used by the servers on their event-loop thread only. Reads go through the
 * framer (frame.h); each complete frame's message is unpacked and handed to
 * on_frame. Payloads are either buffered whole (control connections, small
 * bounded payloads) or streamed straight into a destination the owner names
 * (data connections), with no intermediate copy for bytes read after the
 * header. Writes queue header+message in one malloc'd buffer and reference
 * payload memory without copying it until the write callback runs.
 */
#ifndef HPL_UVCONN_H
#define HPL_UVCONN_H

#include <stdint.h>
#include <uv.h>

#include "frame.h"
#include "proto.h"

typedef struct hpl_conn hpl_conn;

/* A frame arrived. `m` is its unpacked message (freed after the call).
 * Buffered mode: payload/payload_len is the whole payload (valid during the
 * call only). Stream mode with hdr->payload_len > 0: payload is NULL and the
 * handler must call hpl_conn_recv_payload() before returning, or the
 * connection is closed as a protocol error. */
typedef void (*hpl_conn_frame_cb)(hpl_conn *c, const hpl_frame_hdr *h, ProtobufCMessage *m,
                                  const uint8_t *payload, uint64_t payload_len);

/* The connection is gone (peer closed, error, or hpl_conn_close). `status`
 * is 0 for a local close, else a negative HPL_E* code. Called exactly once;
 * the connection is freed right after. */
typedef void (*hpl_conn_close_cb)(hpl_conn *c, int status);

/* A write finished (status 0) or was abandoned (negative, the connection is
 * closing). Memory given to the write may be reused from here on. */
typedef void (*hpl_conn_write_cb)(hpl_conn *c, int status, void *arg);

/* Stream-mode payload destination. buf() returns where the payload bytes
 * starting at payload offset `off` go and sets *len to the room there; NULL or
 * *len == 0 pauses reading until hpl_conn_resume(). got() reports `n` bytes
 * written at `off` (off + n == payload_len means the payload is complete). */
typedef struct hpl_sink {
  uint8_t *(*buf)(hpl_conn *c, void *arg, uint64_t off, size_t *len);
  void (*got)(hpl_conn *c, void *arg, uint64_t off, size_t n);
  void *arg;
} hpl_sink;

typedef struct hpl_conn_opts {
  hpl_frame_limits lim;
  int stream_payloads; /* 1: stream mode (see hpl_sink), 0: buffered */
  hpl_conn_frame_cb on_frame;
  hpl_conn_close_cb on_close;
  void *data; /* owner's pointer, see hpl_conn_data() */
  const char *label; /* for logs, copied */
} hpl_conn_opts;

/* Wrap an initialised, connected stream (uv_tcp_t or uv_pipe_t allocated
 * with malloc; the conn takes ownership and frees it on close) and start
 * reading. Returns NULL (and closes the stream) on failure. */
hpl_conn *hpl_conn_new(uv_stream_t *s, const hpl_conn_opts *o);

void *hpl_conn_data(const hpl_conn *c);
void hpl_conn_set_data(hpl_conn *c, void *data);
const char *hpl_conn_label(const hpl_conn *c);
uv_stream_t *hpl_conn_stream(hpl_conn *c);
int hpl_conn_closing(const hpl_conn *c);

/* Send a frame: `m` (may be NULL) is packed now; `payload` of `plen` bytes
 * follows. With copy != 0 the payload is copied and cb may be NULL; else the
 * caller keeps `payload` alive until cb. With payload NULL and plen > 0 only
 * the header announces plen bytes, which the caller then streams with
 * hpl_conn_write(). Returns 0 or a negative code (then cb is never called). */
int hpl_conn_send(hpl_conn *c, unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                  const void *payload, uint64_t plen, int copy, hpl_conn_write_cb cb, void *arg);

/* Write raw bytes (the rest of a payload announced by an earlier frame). The
 * caller keeps `p` alive until cb. Returns 0 or a negative code (cb not
 * called). */
int hpl_conn_write(hpl_conn *c, const void *p, size_t len, hpl_conn_write_cb cb, void *arg);

/* Bytes queued in the kernel-facing write queue (backpressure signal). */
size_t hpl_conn_write_queue(const hpl_conn *c);

/* Stream mode, from inside on_frame: deliver this frame's payload to `sink`.
 * `sink` is copied. */
void hpl_conn_recv_payload(hpl_conn *c, const hpl_sink *sink);

/* Stream mode: read again after the sink paused by returning no room. */
void hpl_conn_resume(hpl_conn *c);

/* Close (idempotent). Pending writes get their callbacks with an error, then
 * on_close runs with `status`. */
void hpl_conn_close(hpl_conn *c, int status);

/* Protocol error on this connection: log `why` and close it. */
void hpl_conn_fail(hpl_conn *c, const char *why);

/* Helper for replies: send a Reply{status, detail} frame. */
int hpl_conn_reply(hpl_conn *c, uint64_t req_id, int status, const char *detail);

#endif
