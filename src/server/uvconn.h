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
 *
 * Callers: the directory's connections (directory/server.c), the store's
 * clients, data port, puller and directory link (store/clients.c,
 * session.h, dataport.c, puller.c, dirlink.c), test_uvconn. The files
 * behind it are listed in uvconn_int.h.
 */
#ifndef HPL_UVCONN_H
#define HPL_UVCONN_H

#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "frame.h"
#include "proto.h"

/* Frames one connection may have handled per loop turn before it yields to
 * the others (fairness: one busy peer cannot starve heartbeats). */
#define HPL__CONN_FRAME_BUDGET 256
/* A frame that has begun arriving must be complete within this long (a
 * streamed payload excepted: its owner watches it). Slow peers are cut. */
#define HPL__CONN_FRAME_TIMEOUT_MS 30000

typedef struct hpl__conn hpl__conn;

/* A frame arrived. `m` is its unpacked message (freed after the call).
 * Buffered mode: payload/payload_len is the whole payload (valid during the
 * call only). Stream mode with hdr->payload_len > 0: payload is NULL and the
 * handler must call hpl__conn_recv_payload() before returning, or the
 * connection is closed as a protocol error. */
typedef void (*hpl__conn_frame_cb)(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                                  const uint8_t *payload, uint64_t payload_len);

/* The connection is gone (peer closed, error, or hpl__conn_close). `status`
 * is 0 for a local close, else a negative HPL_E* code. Called exactly once;
 * the connection is freed right after. */
typedef void (*hpl__conn_close_cb)(hpl__conn *c, int status);

/* A write finished (status 0) or was abandoned (negative, the connection is
 * closing). Memory given to the write may be reused from here on. */
typedef void (*hpl__conn_write_cb)(hpl__conn *c, int status, void *arg);

/* Stream-mode payload destination. buf() returns where the payload bytes
 * starting at payload offset `off` go and sets *len to the room there; NULL or
 * *len == 0 pauses reading until hpl__conn_resume(). got() reports `n` bytes
 * written at `off` (off + n == payload_len means the payload is complete). */
typedef struct hpl__sink {
  uint8_t *(*buf)(hpl__conn *c, void *arg, uint64_t off, size_t *len);
  void (*got)(hpl__conn *c, void *arg, uint64_t off, size_t n);
  void *arg;
} hpl__sink;

typedef struct hpl__conn_opts {
  hpl__frame_limits lim;
  int stream_payloads; /* 1: stream mode (see hpl__sink), 0: buffered */
  hpl__conn_frame_cb on_frame;
  hpl__conn_close_cb on_close;
  void *data; /* owner's pointer, see hpl__conn_data() */
  const char *label; /* for logs, copied */
  /* Authentication (auth.h): with auth->on, the connection starts with the
   * handshake and frames nothing before it succeeded (writes made meanwhile
   * wait); it fails, or times out after HPL__AUTH_TIMEOUT_MS, with on_close
   * status HPL_EAUTH / HPL_ETIMEDOUT. The opener claims auth_role; an
   * acceptor (auth_role 0) takes the roles in the auth_roles bit mask
   * (1 << role). auth_failures (may be NULL) counts failed handshakes and
   * frames that fail their MAC check. Once the handshake succeeded every
   * frame both ways is tagged (frame.h, sessions); a frame whose tag does
   * not match closes the connection (on_close status HPL_EAUTH) and is
   * never handed to on_frame. With auth->encrypt (or when the peer asks)
   * the session is sealed instead (frame.h): every frame encrypted, a
   * streamed payload in records each opened before its bytes reach the
   * sink, and hpl__conn_sendfile always answers 1. */
  const hpl__auth *auth;
  int auth_role;
  unsigned auth_roles;
  uint64_t *auth_failures;
  /* 1: small frames without a completion callback (hpl__conn_send with the
   * payload copied or none) made during one loop turn go out in one write,
   * before the loop next polls; fewer system calls when many small
   * requests or replies go one way. Order is kept with other writes. */
  int cork;
  /* Output bound (uvconn_out.c). What the connection has queued to send
   * and that the process holds for it (every frame's header and message,
   * copied payloads and sealed records, and each write's bookkeeping;
   * not payloads referenced without a copy nor sendfile's pool pages)
   * may reach out_max bytes and out_max_frames frames (0: the defaults
   * below). Past either, the connection stops reading its peer (it gets
   * no new requests handled, so makes no new replies) until the queue is
   * back to half; a peer that stays past it for out_stall_ms (0: default)
   * is cut: logged (rate-limited) and counted in *out_cut (may be NULL)
   * and hpl__conn_out_stats. Replies to requests taken before the pause
   * still queue (the owner bounds those: hpl__conn_hold), and so do
   * messages the server makes on its own; the thread's total bound
   * (hpl__conn_out_set_total) catches what that adds up to. */
  size_t out_max;
  unsigned out_max_frames;
  unsigned out_stall_ms;
  uint64_t *out_cut;
  /* Bytes one read of the peer may take (0: HPL__CONN_RBUF): more for a
   * peer that sends many payload-carrying frames at once (a store's local
   * clients), so that they take fewer reads and are handed up from the
   * read buffer without a copy (on_frame). */
  size_t rbuf;
} hpl__conn_opts;

/* Default read buffer of a connection (hpl__conn_opts.rbuf): 64 KiB of
 * payload with the frame around it in one read (a 64 KiB object's PUT, or
 * the reply that streams it). */
#define HPL__CONN_RBUF (68u * 1024)

/* Default output bound of a connection (hpl__conn_opts.out_max...). */
#define HPL__CONN_OUT_MAX (16u << 20)
#define HPL__CONN_OUT_MAX_FRAMES 65536u
#define HPL__CONN_OUT_STALL_MS 10000u
/* Default bound of the output queued by every connection of a thread
 * together (one server's loop); past it the largest queue is cut. */
#define HPL__CONN_OUT_TOTAL_MAX ((size_t)256 << 20)

/* Accepted connections still in the handshake (not authenticated yet)
 * take slots of their own: at most HPL__CONN_HS_MAX of a thread's (one
 * server's) and HPL__CONN_HS_PER_ADDR from one source address; when a new
 * one finds them full the oldest (from its address first) is closed. They
 * also make room when a listener is at its limit (hpl__conn_admit): the
 * oldest in the handshake goes and the newcomer is taken, so idle
 * strangers cannot keep authenticated peers out. */
#define HPL__CONN_HS_MAX 1024u
#define HPL__CONN_HS_PER_ADDR 128u
/* ... but one from the same address goes only once it has waited this
 * long (a burst of honest peers from one host is not cut short; the
 * thread's limit stays hard). */
#define HPL__CONN_HS_GRACE_MS 250u
/* Failed handshakes are logged at most once per this long (a summary). */
#define HPL__CONN_HS_LOG_MS 10000u

/* Set the thread's handshake slots (0: the defaults above). */
void hpl__conn_hs_limits(unsigned max, unsigned per_addr);

/* Connections in the handshake now (*pending), and since the start those
 * closed to make room (*evicted) and handshakes that failed (*failed, the
 * evicted included). Any may be NULL. */
void hpl__conn_hs_stats(uint64_t *pending, uint64_t *evicted, uint64_t *failed);

/* The thread's total output bound (0: HPL__CONN_OUT_TOTAL_MAX). A server
 * sets it once before it accepts connections. */
void hpl__conn_out_set_total(size_t max);

/* The thread's output: bytes queued now by every connection
 * (*queued), and since the start connections that were paused for their
 * output (*paused), cut for it (*cut: past their bound too long)
 * and cut to keep the total under its bound (*shed). Any may be NULL. */
void hpl__conn_out_stats(uint64_t *queued, uint64_t *paused, uint64_t *cut, uint64_t *shed);

/* Both of the above together, for a server's metrics list. */
typedef struct hpl__conn_stats {
  uint64_t hs_pending, hs_evicted;                 /* hpl__conn_hs_stats */
  uint64_t out_queued, out_paused, out_cut, out_shed; /* hpl__conn_out_stats */
} hpl__conn_stats;
void hpl__conn_stats_get(hpl__conn_stats *st);

/* The connection layer's gauges and counters as hpl__metric initialisers
 * (metrics.h; the caller includes it), to place in a server's list: each
 * name prefixed by the string literal `pfx`, `who` (a string literal) names
 * the connections that have a handshake, `st` is a filled hpl__conn_stats. */
#define HPL__CONN_METRICS(pfx, who, st)                                                        \
  {pfx "handshakes", (st).hs_pending, "handshakes", HPL__M_GAUGE, 0,                          \
   who " accepted and not authenticated yet"},                                                 \
  {pfx "handshakes_evicted", (st).hs_evicted, "handshakes_evicted_total", HPL__M_COUNTER, 0,  \
   who " closed in their handshake to make room for newer ones"},                              \
  {pfx "out_queued", (st).out_queued, "output_queued_bytes", HPL__M_GAUGE, 0,                 \
   "Bytes queued to send to every connection (bounded: --max-output)"},                       \
  {pfx "out_paused", (st).out_paused, "output_paused_total", HPL__M_COUNTER, 0,               \
   "Times a connection's output passed its bound and its requests waited"},                   \
  {pfx "out_cut", (st).out_cut, "output_cut_total", HPL__M_COUNTER, 0,                        \
   "Connections closed for staying past their output bound (--max-output-stall-ms)"},         \
  {pfx "out_shed", (st).out_shed, "output_shed_total", HPL__M_COUNTER, 0,                     \
   "Connections closed as the largest queue while all output was over its bound"}

/* Connections one listener takes per loop turn (hpl__conn_listen). */
#define HPL__CONN_ACCEPTS_PER_TURN 32

/* uv_listen, with the listener's accepts paced: hpl__conn_accept takes at
 * most HPL__CONN_ACCEPTS_PER_TURN per loop turn, and the rest wait for the
 * next turn (the callback `cb` is called again then), so a flood of
 * connections cannot hold up the events of established ones. Returns 0 or
 * a libuv error. hpl__conn_unlisten before closing the listener. */
int hpl__conn_listen(uv_stream_t *server, int backlog, uv_connection_cb cb);
/* Stop pacing `server` (its handles are closed; call before uv_close of
 * the listener). A listener never paced is ignored. */
void hpl__conn_unlisten(uv_stream_t *server);

/* Accept one connection on a listening stream (TCP, with Nagle off, or a
 * Unix socket, as the listener is). Returns the new stream (malloc'd, to be
 * handed to hpl__conn_new or closed), or NULL when there is nothing to
 * accept, no memory, or the listener's turn is used up (hpl__conn_listen:
 * its callback runs again next turn). `peer` (may be NULL) gets a TCP
 * peer's numeric address ("?" if unknown, "" for a Unix socket). */
uv_stream_t *hpl__conn_accept(uv_stream_t *server, char *peer, size_t plen);
/* Mark a connected TCP handle as carrying control traffic (requests and
 * replies, or a puller's side of a data connection): hpl__sock_control
 * (util.h) on its descriptor. A connection that streams object bytes out is
 * left unmarked, so the host's default queue sends control packets ahead
 * of those bytes. A handle without a descriptor is ignored. */
void hpl__conn_mark_control(uv_tcp_t *t);

/* A server's connection limit, checked for each new connection `t` (from
 * hpl__conn_accept, or made by a test) before it is served. Returns 0
 * while fewer than `max` are `open`: serve t. At the limit the server is
 * full and t is taken and closed at once (closed and freed; the caller
 * must not use it): returns 1, *refused counted, and the first refusal and
 * every 1000th after it logged as a warning naming `what` (the listener:
 * "data port", "local clients", ...), the number open and the refusals.
 * Used by the store's local socket, and through hpl__conn_admit by the
 * directory's listener and the store's data port. */
int hpl__conn_full(uv_stream_t *t, unsigned open, unsigned max, uint64_t *refused,
                   const char *what);

/* hpl__conn_full, then the owner's state for the new connection: `size`
 * zeroed bytes (malloc'd, the caller's to free). NULL when the server is
 * full or memory is short: t is then closed and freed. At the limit the
 * oldest connection of the thread still in the handshake is closed to
 * make room, if there is one, and t is taken (the owner's count passes
 * `max` until that close has run). */
void *hpl__conn_admit(uv_stream_t *t, unsigned open, unsigned max, uint64_t *refused,
                      const char *what, size_t size);

/* Wrap an initialised, connected stream (uv_tcp_t or uv_pipe_t allocated
 * with malloc; the conn takes ownership and frees it on close) and start
 * reading. Returns NULL (and closes the stream) on failure. */
hpl__conn *hpl__conn_new(uv_stream_t *s, const hpl__conn_opts *o);

void *hpl__conn_data(const hpl__conn *c);
void hpl__conn_set_data(hpl__conn *c, void *data);

/* Hand c to a new owner, for a connection kept open between uses (the
 * store's idle data connections, store/dconns.c): from the next event on
 * its frames go to on_frame, its close to on_close (neither NULL), and
 * hpl__conn_data answers `data`. May be called from inside c's own
 * callbacks (a sink's last got() included); what was read or written so far
 * is not touched. */
void hpl__conn_rebind(hpl__conn *c, hpl__conn_frame_cb on_frame, hpl__conn_close_cb on_close,
                      void *data);

/* 1 when c may carry another request: open, authenticated (or without a
 * handshake), its reading not held, and every frame it has received so
 * far whole, the last one's payload included (it may be asked from inside
 * the sink's got() of that payload's last bytes); else 0. Bytes already
 * read beyond that frame are a new frame, handed to on_frame as usual. */
int hpl__conn_between_frames(const hpl__conn *c);
const char *hpl__conn_label(const hpl__conn *c);
uv_stream_t *hpl__conn_stream(hpl__conn *c);
int hpl__conn_closing(const hpl__conn *c);
/* The role the peer proved (HPL__ROLE_*), 0 without authentication or
 * before the handshake finished. */
int hpl__conn_role(const hpl__conn *c);
/* The node name the peer proved (auth.h: NODE and READER roles), "" for
 * other roles, without authentication or before the handshake finished.
 * Valid as long as the connection. */
const char *hpl__conn_peer_name(const hpl__conn *c);

/* Send a frame: `m` (may be NULL) is packed now; `payload` of `plen` bytes
 * follows. With copy != 0 the payload is copied and cb may be NULL; else the
 * caller keeps `payload` alive until cb. With payload NULL and plen > 0 only
 * the header announces plen bytes, which the caller then streams with
 * hpl__conn_write(). Returns 0 or a negative code (then cb is never called). */
int hpl__conn_send(hpl__conn *c, unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                  const void *payload, uint64_t plen, int copy, hpl__conn_write_cb cb, void *arg);

/* Send a frame packed by the caller (frame[0..len): header with flags 0,
 * message, payload, as hpl__msg_frame makes it): copied, and tagged like
 * every frame on a connection with a session. Returns 0, HPL_EINVAL (not
 * one whole frame), or a negative code. */
int hpl__conn_send_packed(hpl__conn *c, const uint8_t *frame, size_t len);

/* Write raw bytes (the rest of a payload announced by an earlier frame). The
 * caller keeps `p` alive until cb. Returns 0 or a negative code (cb not
 * called). */
int hpl__conn_write(hpl__conn *c, const void *p, size_t len, hpl__conn_write_cb cb, void *arg);

/* As hpl__conn_write, but a write the socket takes whole at once ends
 * there: returns 2 (every byte went; cb is not called and `p` is free
 * again), 0 (queued; cb tells as for hpl__conn_write), or a negative code
 * (cb not called). Saves a finished write request's callback and the
 * poll-set change libuv makes for it on the next loop turn. */
int hpl__conn_write_now(hpl__conn *c, const void *p, size_t len, hpl__conn_write_cb cb,
                        void *arg);

/* A frame announcing a payload of plen bytes that streams after it (as
 * hpl__conn_send with payload NULL), and the stream's first len bytes
 * `lead` (0 < len <= plen), in one write when the socket takes them:
 * one system call and one segment instead of two. The lead is as
 * hpl__conn_write_now's bytes: returns 2 (everything went; cb is not
 * called), 0 (queued; the caller keeps `lead` alive until cb),
 * HPL_EINVAL (len is 0, above plen or above 4 GiB; nothing sent), or
 * another negative code (cb not called). A sealed connection, or one still in
 * its handshake, gets the frame and then hpl__conn_write_now's write of
 * the lead; a negative code may then come after the frame went. */
int hpl__conn_send_lead(hpl__conn *c, unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                        uint64_t plen, const void *lead, size_t len, hpl__conn_write_cb cb,
                        void *arg);

/* As hpl__conn_write, but bytes [off, off + len) of the file `fd` (the
 * store's pool memfd) go to a TCP socket with sendfile(2): the kernel takes
 * the pages as they are, without a copy through user space. Only when
 * nothing else is queued on c (no write, no sendfile); `fd` stays owned by
 * the caller and must stay open until cb. Returns
 *   2: every byte went now (cb is not called);
 *   0: the rest goes when the socket has room; cb tells once all went (0)
 *      or the connection closed (HPL_ECONN); writes made meanwhile wait
 *      behind it, in order;
 *   1: not possible now (something queued, not TCP, or sendfile refused
 *      before sending a byte): nothing was sent, use hpl__conn_write;
 *   or a negative code (the connection is closing; cb not called). */
int hpl__conn_sendfile(hpl__conn *c, int fd, uint64_t off, size_t len, hpl__conn_write_cb cb,
                       void *arg);

/* Bytes queued in the kernel-facing write queue (backpressure signal). */
size_t hpl__conn_write_queue(const hpl__conn *c);
/* What c's output holds of the process's memory, in bytes (see
 * hpl__conn_opts.out_max), and whether its reading is paused for it. */
size_t hpl__conn_out_queued(const hpl__conn *c);
int hpl__conn_out_paused(const hpl__conn *c);

/* Stream mode, from inside on_frame: deliver this frame's payload to `sink`.
 * `sink` is copied. */
void hpl__conn_recv_payload(hpl__conn *c, const hpl__sink *sink);

/* Stream mode: read again after the sink paused by returning no room. */
void hpl__conn_resume(hpl__conn *c);

/* The owner's pause (on != 0): no new frame of c is handled, and c is not
 * read, until it is lifted (on 0); frames already buffered wait. For
 * bounded work per peer: a server holds a peer with too many requests in
 * progress. Independent of the sink's pause and of the output bound's. */
void hpl__conn_hold(hpl__conn *c, int on);

/* Close (idempotent). Pending writes get their callbacks with an error, then
 * on_close runs with `status`. */
void hpl__conn_close(hpl__conn *c, int status);

/* Protocol error on this connection: log `why` and close it. */
void hpl__conn_fail(hpl__conn *c, const char *why);

/* Helper for replies: send a Reply{status, detail} frame. */
int hpl__conn_reply(hpl__conn *c, uint64_t req_id, int status, const char *detail);

#endif
