/* crpc.c - the client's RPC layer over one connected stream socket: the
 * handle, its tickets, leader/follower waiting for replies, broken handles
 * (see crpc.h; reading replies and handing them over is in crpc_read.c,
 * writing in crpc_send.c, crpc_int.h). */
#include "crpc_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uthash.h>
#include <utlist.h>

#include "cwait.h"
#include "record.h"
#include "hoplite.h"
#include "util.h"

#define CRPC_RBUF_DEFAULT 16384

/* ------------------------------------------------------------------ helpers */


/* Send a one-way frame (request id 0), as send_frames. */
static int send_note(hpl__crpc *r, unsigned type, const ProtobufCMessage *m, uint64_t deadline) {
  hpl__crpc_req q = {.type = type, .m = m};
  size_t done;
  return hpl__crpc_send_frames(r, &q, 1, NULL, deadline, &done);
}

/* Wait until p is answered, the handle breaks, or the deadline passes;
 * r->lock is held on entry and exit. Returns 0 (answered or broken),
 * HPL_ETIMEDOUT, or HPL_ENOMEM. */
static int await_locked(hpl__crpc *r, pending *p, uint64_t deadline) {
  while (!p->done && !r->broken) {
    if (!r->reading) {
      r->reading = 1;
      crpc_unlock(r);
      char why[sizeof r->why] = "";
      int rc = hpl__crpc_read_some(r, deadline, NULL, why, sizeof why);
      crpc_lock(r);
      r->reading = 0;
      if (rc == HPL_ECONN) hpl__crpc_break_locked(r, "%s", why);
      /* another waiter may take the reader role over, or has its reply */
      crpc_wake(r);
      if (rc == HPL_ETIMEDOUT || rc == HPL_ENOMEM) return rc;
      continue;
    }
    if (hpl__cwait_cond(&r->cv, &r->lock, deadline) == ETIMEDOUT) return HPL_ETIMEDOUT;
  }
  return 0;
}

/* Register waiters ps[0..n): under fresh request ids, or (fresh == 0, n
 * == 1) for id 0, the frame nobody asked for. 0, or HPL_ENOMEM or HPL_ECONN
 * (the handle is broken) with nothing registered. */
/* A fresh ticket: a solo handle's spare, or a new one (NULL without memory). */
static pending *ticket_new(hpl__crpc *r) {
  pending *p = r->spare;
  if (!p) return hpl__zalloc(sizeof *p);
  r->spare = NULL;
  memset(p, 0, sizeof *p);
  return p;
}

/* A ticket done with (its message taken or freed): a solo handle keeps one. */
static void ticket_free(hpl__crpc *r, pending *p) {
  if (r->solo && !r->spare) r->spare = p;
  else free(p);
}

int hpl__crpc_enlist(hpl__crpc *r, pending **ps, size_t n, int fresh) {
  for (size_t i = 0; i < n; i++)
    if (!(ps[i] = ticket_new(r))) {
      while (i--) ticket_free(r, ps[i]);
      return HPL_ENOMEM;
    }
  crpc_lock(r);
  int rc = r->broken ? HPL_ECONN : 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (fresh) {
      if (++r->next_id == 0) ++r->next_id; /* 0 is for frames nobody asked for */
      ps[i]->id = r->next_id;
    }
    HASH_ADD(hh, r->pending, id, sizeof ps[i]->id, ps[i]);
  }
  crpc_unlock(r);
  if (rc)
    for (size_t i = 0; i < n; i++) ticket_free(r, ps[i]);
  return rc;
}

/* Unregister and free waiters whose requests never went out (a reply
 * cannot have come for them). */
void hpl__crpc_unlist(hpl__crpc *r, pending **ps, size_t n) {
  crpc_lock(r);
  for (size_t i = 0; i < n; i++) HASH_DEL(r->pending, ps[i]);
  crpc_unlock(r);
  for (size_t i = 0; i < n; i++) {
    hpl__crpc_msg_free(&ps[i]->msg);
    ticket_free(r, ps[i]);
  }
}

/* Wait for p's reply (its request went out); then unregister and free p
 * and pass the reply (or the error) on. */
static int finish(hpl__crpc *r, pending *p, uint64_t deadline, hpl__crpc_msg *out) {
  crpc_lock(r);
  int rc = await_locked(r, p, deadline);
  if (p->done) rc = p->status; /* a reply that made it beats a timeout */
  else if (rc == 0) rc = HPL_ECONN;
  HASH_DEL(r->pending, p);
  if (p->in_ready) DL_DELETE2(r->ready, p, rprev, rnext);
  crpc_unlock(r);
  if (rc == 0) *out = p->msg;
  else hpl__crpc_msg_free(&p->msg);
  ticket_free(r, p);
  return rc;
}

/* ------------------------------------------------------------------ API */

int hpl__crpc_new(int fd, const hpl__crpc_opts *o, hpl__crpc **out) {
  /* aligned as its MAC states ask (hpl__fmac) */
  size_t size = (sizeof(hpl__crpc) + _Alignof(hpl__crpc) - 1) / _Alignof(hpl__crpc) *
                _Alignof(hpl__crpc);
  hpl__crpc *r = aligned_alloc(_Alignof(hpl__crpc), size);
  if (!r) {
    close(fd);
    return HPL_ENOMEM;
  }
  memset(r, 0, sizeof *r);
  r->fd = fd;
  r->notify_fd = -1;
  /* reads may block (bounded by SO_RCVTIMEO, read_some); writes never do
   * (MSG_DONTWAIT, crpc_send.c) */
  struct timeval cap = {.tv_sec = 0, .tv_usec = CRPC_RECV_CAP_MS * 1000};
  int fl = fcntl(fd, F_GETFL);
  r->block_recv = fl >= 0 && (!(fl & O_NONBLOCK) || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0) &&
                  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &cap, sizeof cap) == 0;
  if (o->send_key && o->recv_key) {
    r->tagged = 1;
    hpl__fmac_init_as(&r->tx, o->send_key, o->gmac);
    hpl__fmac_init_as(&r->rx, o->recv_key, o->gmac);
  }
  r->solo = o->solo;
  r->rcap = o->rbuf_size ? o->rbuf_size : CRPC_RBUF_DEFAULT;
  hpl__framer_init(&r->fr, &o->lim);
  if (r->tagged) hpl__framer_tagged(&r->fr);
  pthread_mutex_init(&r->lock, NULL);
  hpl__cwait_cond_init(&r->cv);
  hpl__turn_init(&r->writer);
  hpl__record_open(&r->rec, "crpc");
  *out = r;
  return 0;
}

void hpl__crpc_free(hpl__crpc *r) {
  if (!r) return;
  hpl__record_close(&r->rec);
  close(r->fd);
  for (int i = 0; i < r->nfds; i++) close(r->fds[i]);
  pending *p, *tmp;
  HASH_ITER(hh, r->pending, p, tmp) { /* none unless a caller broke the rules */
    HASH_DEL(r->pending, p);
    hpl__crpc_msg_free(&p->msg);
    free(p);
  }
  hpl__crpc_msg_free(&r->cur);
  hpl__framer_free(&r->fr);
  hpl__fmac_wipe(&r->tx);
  hpl__fmac_wipe(&r->rx);
  free(r->rbuf);
  free(r->spare);
  pthread_mutex_destroy(&r->lock);
  hpl__turn_destroy(&r->writer);
  pthread_cond_destroy(&r->cv);
  free(r);
}

int hpl__crpc_start(hpl__crpc *r, const hpl__crpc_req *reqs, size_t n, uint64_t deadline,
                    hpl__crpc_ticket **tickets, size_t *started) {
  *started = 0;
  if (n == 0) return 0;
  if (n > HPL__CRPC_MAX_BATCH) return HPL_EINVAL;
  /* registered before anything is sent: another thread reading the socket
   * may see the replies before this call returns */
  int rc = hpl__crpc_enlist(r, tickets, n, 1);
  if (rc) return rc;
  rc = hpl__crpc_send_frames(r, reqs, n, tickets, deadline, started);
  if (*started < n) hpl__crpc_unlist(r, tickets + *started, n - *started);
  return rc;
}

int hpl__crpc_finish(hpl__crpc *r, hpl__crpc_ticket *t, uint64_t deadline, hpl__crpc_msg *out) {
  return finish(r, t, deadline, out);
}

int hpl__crpc_call(hpl__crpc *r, unsigned type, const ProtobufCMessage *m, uint64_t deadline,
                   hpl__crpc_msg *out) {
  hpl__crpc_req q = {.type = type, .m = m};
  hpl__crpc_ticket *t;
  size_t started;
  int rc = hpl__crpc_start(r, &q, 1, deadline, &t, &started);
  return started ? finish(r, t, deadline, out) : rc;
}

int hpl__crpc_send(hpl__crpc *r, unsigned type, const ProtobufCMessage *m, uint64_t deadline) {
  return send_note(r, type, m, deadline);
}

int hpl__crpc_send_reqs(hpl__crpc *r, const hpl__crpc_req *reqs, size_t n, uint64_t deadline,
                        size_t *sent) {
  *sent = 0;
  if (n > HPL__CRPC_MAX_BATCH) return HPL_EINVAL;
  return n ? hpl__crpc_send_frames(r, reqs, n, NULL, deadline, sent) : 0;
}

int hpl__crpc_greeting(hpl__crpc *r, uint64_t deadline, hpl__crpc_msg *out) {
  pending *p;
  int rc = hpl__crpc_enlist(r, &p, 1, 0);
  return rc ? rc : finish(r, p, deadline, out);
}

int hpl__crpc_take_fds(hpl__crpc *r, int *fds, int max) {
  crpc_lock(r);
  int n = r->nfds < max ? r->nfds : max;
  memcpy(fds, r->fds, (size_t)n * sizeof *fds);
  memmove(r->fds, r->fds + n, (size_t)(r->nfds - n) * sizeof *fds);
  r->nfds -= n;
  crpc_unlock(r);
  return n;
}

const char *hpl__crpc_broken(hpl__crpc *r) {
  crpc_lock(r);
  const char *why = r->broken ? r->why : NULL;
  crpc_unlock(r);
  return why;
}
