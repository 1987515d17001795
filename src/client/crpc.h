/*
 * crpc.h - the client's RPC layer over one connected stream socket.
 *
 * The one place in the client library where bytes meet the framer
 * (frame.h): requests go out as frames, replies come back through an
 * hpl__framer and are matched to their callers by request id. Any number of
 * threads may call at once. Waiting is leader/follower: if nobody is reading
 * the socket, a waiting caller reads it itself (blocked in poll, never
 * spinning) and hands replies that belong to others over through a condition
 * variable; otherwise it sleeps until its reply arrives, the reader role is
 * free, or its deadline passes. A single-threaded caller so gets its reply
 * with no thread switch.
 *
 * A handle whose byte stream can no longer be trusted is *broken*: a write
 * that stopped part-way through a frame (timeout or error), a read error,
 * end of stream, or bytes the framer rejects. Breaking shuts the socket down
 * (which wakes any reader), every waiting caller then fails with HPL_ECONN,
 * and so does every later call, at once, with hpl__crpc_broken() saying
 * why. A call that merely times out leaves the handle usable; its reply, if
 * it ever comes, is dropped (a GET_REP that granted a hold is answered with
 * a RELEASE so the store does not keep the object pinned).
 *
 * Deadlines are absolute hpl__now_ms() values (UINT64_MAX: none); no call
 * blocks past its deadline. The layer never prints.
 *
 * Several requests may be in flight on one handle, from several threads or
 * from one: hpl__crpc_start() sends a batch of requests (in as few writes
 * as it can) and returns a ticket per request; hpl__crpc_finish() waits
 * for one ticket's reply. hpl__crpc_call() is the two in one.
 *
 * An authentication handshake is done by the connecting code before
 * hpl__crpc_new() (cdirect.c), which hands the session's keys over in the
 * options; frames the peer sends unasked carry
 * request id 0 and are dropped today unless hpl__crpc_greeting() waits for
 * one.
 *
 * Callers: the store connection (cstore.c, and through it every request
 * of ccall.c), the direct path to the directory (cdirect.c), test_crpc,
 * fuzz_client.
 */
#ifndef HPL_CRPC_H
#define HPL_CRPC_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "proto.h"

typedef struct hpl__crpc hpl__crpc;

/* A received frame: its header fields and one buffer holding its message
 * and payload. The receiver owns `buf` (release with hpl__crpc_msg_free). */
typedef struct hpl__crpc_msg {
  unsigned type;
  uint64_t req_id;
  uint8_t *buf;
  size_t msg_off; /* protobuf message: buf[msg_off .. msg_off + msg_len) */
  uint32_t msg_len;
  size_t payload_off; /* payload: buf[payload_off .. payload_off + payload_len);
                         64-byte aligned unless the frame took over a read
                         buffer whole (payloads over 4 KiB) */
  uint64_t payload_len;
} hpl__crpc_msg;

typedef struct hpl__crpc_opts {
  /* What the peer may send; a frame outside these breaks the handle
   * before anything is allocated for it. */
  hpl__frame_limits lim;
  /* Bytes read per recv. A frame with a payload that arrives whole in one
   * read is handed to its caller in the read buffer itself (no copy), so a
   * connection whose replies carry payloads sizes this to its largest
   * frame. 0: a default of 16 KiB. */
  size_t rbuf_size;
  /* A session (auth.h, frame.h): the keys of the frames this end sends and
   * receives (copied), NULL without one. With them every frame both ways
   * is tagged, payloads covered; a frame whose tag does not match breaks
   * the handle ("... fails its MAC check") before anything of it is
   * handed to a caller. */
  const uint8_t *send_key, *recv_key;
  int gmac; /* with the keys: GMAC tags (hpl__auth_keys.gmac, frame.h) */
  /* The caller lets one thread at a time use the handle (cdirect.c holds
   * its own turn around every use): the handle then takes no locks, wakes
   * nobody and keeps a finished ticket for the next request instead of
   * freeing it, which a woken process pays for in cache misses
   * (bench/footprint.py). Such a handle has no async tickets
   * (hpl__crpc_start_async fails with HPL_EINVAL). */
  int solo;
} hpl__crpc_opts;

/* Most descriptors kept from SCM_RIGHTS messages until taken; more are
 * closed on arrival. */
#define HPL__CRPC_MAX_FDS 2

/* Wrap a connected stream socket `fd` (Unix or TCP; blocking or not). The
 * handle owns fd from this call on: on failure fd is closed.
 * Returns 0 with *out set, or HPL_ENOMEM. */
int hpl__crpc_new(int fd, const hpl__crpc_opts *o, hpl__crpc **out);

/* Close the socket and free the handle, descriptors not taken included.
 * NULL is a no-op. Must not race with any other call on the handle. */
void hpl__crpc_free(hpl__crpc *r);

/* One request of a batch for hpl__crpc_start(). */
typedef struct hpl__crpc_req {
  unsigned type;
  const ProtobufCMessage *m; /* NULL: an empty message */
  const void *payload;       /* plen bytes sent after the message; NULL if plen is 0 */
  uint64_t plen;
} hpl__crpc_req;

/* A request that went out and whose reply nobody has taken yet. */
typedef struct hpl__crpc_ticket hpl__crpc_ticket;

/* Most requests one hpl__crpc_start() takes. */
#define HPL__CRPC_MAX_BATCH 4096

/* Send reqs[0..n) (n <= HPL__CRPC_MAX_BATCH), each under a fresh request
 * id, in order and in as few writes as the socket takes, without waiting
 * for any reply. Messages and payloads are only read during the call.
 * *started is how many requests went out whole: tickets[0..*started) are
 * theirs, and each must be passed to hpl__crpc_finish() exactly once (the
 * handle must outlive them). The requests from *started on were not sent.
 * Returns 0 (*started == n), or why the rest did not go out: HPL_EINVAL
 * (n too large; nothing sent), HPL_ENOMEM (nothing sent), HPL_ETIMEDOUT (the
 * deadline passed; a request cut off part-way also breaks the handle),
 * HPL_ECONN (the handle is or became broken). */
int hpl__crpc_start(hpl__crpc *r, const hpl__crpc_req *reqs, size_t n, uint64_t deadline,
                    hpl__crpc_ticket **tickets, size_t *started);

/* Wait until the deadline for the reply to a started request, and free
 * the ticket either way. Tickets may be finished in any order and from any
 * thread; replies that arrive for other tickets meanwhile are kept for
 * them. Result and *out as for hpl__crpc_call(). */
int hpl__crpc_finish(hpl__crpc *r, hpl__crpc_ticket *t, uint64_t deadline, hpl__crpc_msg *out);

/* Send request `type` with message `m` (NULL: empty) under a fresh request
 * id and wait for the reply echoing it (hpl__crpc_start of one request,
 * then hpl__crpc_finish). On success (0) *out is the reply,
 * owned by the caller, whatever its type; interpreting it is the caller's
 * business. Errors, *out untouched:
 *   HPL_ENOMEM     no memory for the request, or for the reply (the reply
 *                  is then skipped and the handle stays usable);
 *   HPL_ETIMEDOUT  the deadline passed first (nothing is sent once it has
 *                  passed; if the request was cut off part-way, the handle
 *                  is broken as well);
 *   HPL_ECONN      the handle is or became broken (hpl__crpc_broken). */
int hpl__crpc_call(hpl__crpc *r, unsigned type, const ProtobufCMessage *m, uint64_t deadline,
                   hpl__crpc_msg *out);

/* Send a one-way frame (request id 0); no reply is expected. `m` is packed
 * before this returns. Errors: HPL_ENOMEM, HPL_ETIMEDOUT (nothing or part of
 * the frame went out; in the second case the handle is broken), HPL_ECONN. */
int hpl__crpc_send(hpl__crpc *r, unsigned type, const ProtobufCMessage *m, uint64_t deadline);

/* hpl__crpc_send of one-way frames reqs[0..n) (n <= HPL__CRPC_MAX_BATCH)
 * with their payloads (only read during the call), in as few writes as the
 * socket takes. *sent is how many went out whole. Errors as
 * hpl__crpc_send, and HPL_EINVAL for n too large (nothing sent). */
int hpl__crpc_send_reqs(hpl__crpc *r, const hpl__crpc_req *reqs, size_t n, uint64_t deadline,
                        size_t *sent);

/* ---- tickets nobody waits on (crpc_async.c), for an event loop
 * (casync.c). Their replies are read by hpl__crpc_pump (or by any caller
 * waiting in the layer meanwhile, on any thread) and put on the handle's
 * ready list, and the eventfd of hpl__crpc_set_notify is written. */

/* hpl__crpc_start, but each ticket i carries users[i] and joins the ready
 * list once answered or failed (HPL_ENOMEM). Each started ticket must end
 * with hpl__crpc_finish (once ready, or once the handle is broken: it then
 * returns at once) or hpl__crpc_forget. */
int hpl__crpc_start_async(hpl__crpc *r, const hpl__crpc_req *reqs, size_t n, uint64_t deadline,
                          void *const *users, hpl__crpc_ticket **tickets, size_t *started);

/* Take up to max tickets off the ready list, oldest first: their users in
 * users[]. Returns how many. The tickets stay the caller's (finish them). */
size_t hpl__crpc_ready(hpl__crpc *r, void **users, size_t max);

/* 1 if tickets wait on the ready list, else 0. */
int hpl__crpc_ready_waiting(hpl__crpc *r);

/* Give up on a started ticket: unregistered and freed; its reply, if it
 * came or comes, is dropped (a granted hold is released). */
void hpl__crpc_forget(hpl__crpc *r, hpl__crpc_ticket *t);

/* Read whatever the socket holds now, without waiting, at most max_reads
 * reads, delivering what completes. Does nothing while another thread
 * holds the reader role (it delivers). 0, or HPL_ECONN: the handle is or
 * became broken. */
int hpl__crpc_pump(hpl__crpc *r, int max_reads);

/* The eventfd (-1: none) written whenever an async ticket becomes ready or
 * the handle breaks, except for tickets hpl__crpc_pump itself made ready
 * (its caller looks at the ready list next). After each write *written
 * (NULL: none) is set to 1 (atomic). The caller keeps owning both. */
void hpl__crpc_set_notify(hpl__crpc *r, int fd, int *written);

/* The socket, for a caller's poll set (never read or written but by this
 * layer). */
int hpl__crpc_fd(const hpl__crpc *r);

/* Wait for the frame the peer sends unasked when a connection opens (a
 * store's HELLO: request id 0). Call it before any hpl__crpc_call, from one
 * thread. Descriptors that came with it are kept for hpl__crpc_take_fds.
 * Returns 0 with *out set (owned by the caller), or as hpl__crpc_call. */
int hpl__crpc_greeting(hpl__crpc *r, uint64_t deadline, hpl__crpc_msg *out);

/* Move up to `max` descriptors received with SCM_RIGHTS (oldest first) into
 * fds[]; the caller owns them from then on. Returns how many. */
int hpl__crpc_take_fds(hpl__crpc *r, int *fds, int max);

/* NULL while the handle is usable, else why it broke: a string owned by the
 * handle that stays valid and unchanged until hpl__crpc_free. */
const char *hpl__crpc_broken(hpl__crpc *r);

/* Free a message's buffer and clear it. NULL or a cleared message: no-op. */
void hpl__crpc_msg_free(hpl__crpc_msg *m);

/* Unpack a message as `type` (which must be the protobuf type of the frame,
 * see proto.h); NULL if it does not decode. Free the result with
 * protobuf_c_message_free_unpacked(). */
ProtobufCMessage *hpl__crpc_msg_unpack(const hpl__crpc_msg *m, unsigned type);

#endif
