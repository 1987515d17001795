/*
 * crpc_int.h - the inside of the client's RPC layer (crpc.h), shared by its
 * files and nothing else:
 *   crpc.c       the handle, tickets, leader/follower waiting;
 *   crpc_read.c  reading: framing replies, checking their tags, handing
 *                each to its ticket;
 *   crpc_send.c  writing frames: packing a batch, tagging it (a session's
 *                MACs, frame.h), one writer at a time; breaking the handle
 *                and its eventfd note (the others call down to it);
 *   crpc_async.c tickets nobody waits on (hpl__crpc_start_async): the ready
 *                list, reading without waiting (hpl__crpc_pump).
 */
#ifndef HPL_CRPC_INT_H
#define HPL_CRPC_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <uthash.h>

#include "crpc.h"
#include "cwait.h"
#include "record.h"

#define CRPC_RECV_CAP_MS 100 /* a blocking read gives up after this (SO_RCVTIMEO), and is
                                used only while the deadline is further away than that */

/* A caller waiting for the reply with request id `id` (a ticket). */
typedef struct hpl__crpc_ticket {
  uint64_t id;
  UT_hash_handle hh;
  int done;
  int status; /* with done: 0, or HPL_ENOMEM if the reply could not be kept */
  hpl__crpc_msg msg;
  /* started by hpl__crpc_start_async: once done it joins the handle's
   * ready list (rprev/rnext, utlist DL) until hpl__crpc_ready takes it */
  int async, in_ready;
  void *user;
  struct hpl__crpc_ticket *rprev, *rnext;
} pending;

struct hpl__crpc {
  int fd;
  hpl__turn writer;      /* one writer at a time: frames never interleave */
  pthread_mutex_t lock;  /* the fields up to the reader state */
  pthread_cond_t cv;     /* a reply arrived, the reader role fell free, or the handle broke */
  int reading;           /* a caller holds the reader role */
  int block_recv;        /* the socket reads blocking, capped by SO_RCVTIMEO (read_some) */
  int broken;            /* set once (atomic store); writers read it without the lock */
  char why[192];         /* with broken: the reason, never changed again */
  pending *pending;
  pending *ready;  /* async tickets answered (or failed), oldest first */
  int notify_fd;   /* an eventfd written when one joins `ready` or the handle breaks; -1 */
  int *notify_written; /* set to 1 after each such write (hpl__crpc_set_notify) */
  int pumping;     /* the reader role is hpl__crpc_pump's: what it delivers is not notified */
  uint64_t next_id;
  int fds[HPL__CRPC_MAX_FDS];
  int nfds;
  hpl__record rec; /* $HPL_RECORD_DIR: what the peer sent, for fuzz corpora */
  int solo;        /* hpl__crpc_opts.solo: no locks, no wake-ups (crpc_lock) */
  pending *spare;  /* solo: a finished ticket kept for the next request */
  /* Reader state: only the thread holding the reader role touches it, so
   * it carries over from one reader to the next. */
  hpl__framer fr;
  uint8_t *rbuf; /* NULL after it was handed over with a frame */
  size_t rcap;
  hpl__crpc_msg cur; /* the frame whose payload is arriving */
  uint64_t cur_got;
  /* the session (opts send_key/recv_key): tx under the writer turn, rx
   * with the reader state */
  int tagged;
  hpl__fmac tx, rx;
};

/* r->lock, and waking its waiters, unless the handle is solo (one thread
 * at a time: hpl__crpc_opts.solo), which needs neither. */
static inline void crpc_lock(hpl__crpc *r) {
  if (!r->solo) pthread_mutex_lock(&r->lock);
}
static inline void crpc_unlock(hpl__crpc *r) {
  if (!r->solo) pthread_mutex_unlock(&r->lock);
}
static inline void crpc_wake(hpl__crpc *r) {
  if (!r->solo) pthread_cond_broadcast(&r->cv);
}

/* Mark the handle broken (r->lock held). The first reason stays. The socket
 * is shut down, which wakes a reader blocked in poll and tells the peer;
 * every waiter wakes. */
void hpl__crpc_break_locked(hpl__crpc *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Write the handle's eventfd (hpl__crpc_set_notify; r->lock held). */
void hpl__crpc_notify_locked(hpl__crpc *r);

/* A reply nobody waits for any more (taken: freed here). A GET_REP that
 * granted a hold is answered with a RELEASE. r->lock not held. */
void hpl__crpc_drop_orphan(hpl__crpc *r, hpl__crpc_msg *m);

/* Hand a complete frame to its ticket (crpc_read.c); the frame is taken either
 * way: nobody waiting for it, it is dropped as an orphan. r->lock not held. */
void hpl__crpc_deliver(hpl__crpc *r, hpl__crpc_msg *m);

/* A frame for `id` was skipped for want of memory: its caller fails with
 * `status`. r->lock not held. */
void hpl__crpc_deliver_error(hpl__crpc *r, uint64_t id, int status);

/* The reader's turn (reader role held, r->lock not): wait for bytes until
 * the deadline, read once, and deliver what that completes. *drained (NULL:
 * not wanted) is set to 1 when the read took less than the buffer holds
 * (the socket was empty then), else 0. 0 (go on), HPL_ETIMEDOUT, HPL_ENOMEM
 * (no read buffer), or HPL_ECONN with the reason in why[] (the caller
 * breaks the handle). */
int hpl__crpc_read_some(hpl__crpc *r, uint64_t deadline, int *drained, char *why, size_t wlen);

/* As hpl__crpc_read_some, but only what the socket holds now: one read
 * that does not wait. *drained is 1 unless the read filled the buffer
 * (nothing there counts as drained). 0, HPL_ENOMEM or HPL_ECONN. */
int hpl__crpc_read_now(hpl__crpc *r, int *drained, char *why, size_t wlen);

/* Register waiters ps[0..n) (allocated here): under fresh request ids, or
 * (fresh == 0, n == 1) for id 0. 0, or HPL_ENOMEM or HPL_ECONN with
 * nothing registered. */
int hpl__crpc_enlist(hpl__crpc *r, pending **ps, size_t n, int fresh);

/* Unregister and free waiters whose requests never went out. */
void hpl__crpc_unlist(hpl__crpc *r, pending **ps, size_t n);

/* Send the frames of reqs[0..n) (request ids from ps[], NULL: one-way)
 * whole, in order, before the deadline; *done is how many went out whole.
 * One writer at a time, so frames never interleave; a frame cut off
 * part-way breaks the handle, as it would misframe everything after it.
 * With a session each frame is tagged when the writer turn is held, so
 * sequence numbers follow the wire; those of frames that did not go are
 * given back. Nothing goes out once the deadline has passed. 0,
 * HPL_EINVAL, HPL_ENOMEM, HPL_ETIMEDOUT, HPL_ECONN. */
int hpl__crpc_send_frames(hpl__crpc *r, const hpl__crpc_req *reqs, size_t n,
                          struct hpl__crpc_ticket *const *ps, uint64_t deadline, size_t *done);

#endif
