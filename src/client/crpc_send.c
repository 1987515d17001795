/* crpc_send.c - the client's RPC layer, writing (crpc_int.h): a batch of
 * requests packed into frames, tagged under a session, written whole by
 * one writer at a time; and the two marks on the handle that writers and
 * readers both make: broken, and the eventfd note. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "crpc_int.h"
#include "hoplite.h"
#include "util.h"

static const char *errstr(int err, char *buf, size_t len) { return strerror_r(err, buf, len); }

/* ------------------------------------------------------------------ the handle's state */

void hpl__crpc_break_locked(hpl__crpc *r, const char *fmt, ...) {
  if (!r->broken) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    __atomic_store_n(&r->broken, 1, __ATOMIC_RELEASE); /* also read without the lock */
    shutdown(r->fd, SHUT_RDWR);
    hpl__crpc_notify_locked(r);
  }
  crpc_wake(r);
}

void hpl__crpc_notify_locked(hpl__crpc *r) {
  uint64_t one = 1;
  if (r->notify_fd < 0) return;
  if (write(r->notify_fd, &one, sizeof one) < 0) {
    /* full (never with a counter this small) or closed: nothing to do */
  }
  if (r->notify_written) __atomic_store_n(r->notify_written, 1, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------ writing */

/* Write iov[0..niov) whole before the deadline; iov is advanced in place.
 * Returns 0, HPL_ETIMEDOUT or HPL_ECONN (*err = errno). *sent is how many
 * bytes went out either way. */
static int write_iov(int fd, struct iovec *iov, size_t niov, uint64_t deadline, size_t *sent,
                     int *err) {
  *sent = 0;
  for (;;) {
    while (niov && iov->iov_len == 0) iov++, niov--;
    if (!niov) return 0;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = niov < IOV_MAX ? niov : IOV_MAX};
    ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *sent += (size_t)n;
      for (size_t k = (size_t)n; k;) { /* n never exceeds what the iovecs hold */
        size_t step = k < iov->iov_len ? k : iov->iov_len;
        iov->iov_base = (uint8_t *)iov->iov_base + step;
        iov->iov_len -= step;
        k -= step;
        if (iov->iov_len == 0) iov++, niov--;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int w = hpl__cwait_poll(fd, POLLOUT, deadline);
      if (w == 0) return HPL_ETIMEDOUT;
      if (w < 0) {
        *err = errno;
        return HPL_ECONN;
      }
      continue; /* writable, or an error send() reports */
    }
    *err = n < 0 ? errno : EPIPE;
    return HPL_ECONN;
  }
}

/* Frames for reqs[0..n), packed for one write: headers and messages in
 * `packed`, payloads where the caller has them, iov[0..niov) in stream
 * order; frame i ends at byte ends[i] of the stream. */
#define OUT_FEW 4          /* frames of a batch packed without allocating, */
#define OUT_FEW_BYTES 1024 /* when their headers, messages and tags fit here */

typedef struct outgoing {
  uint8_t *packed;
  struct iovec *iov;
  size_t niov;
  size_t *ends;
  hpl__frame_hdr *hdrs; /* with a session: each frame's header, */
  uint8_t **tags;       /* and where its tag goes (after its message) */
  int few;              /* the arrays are the ones below (nothing to free) */
  struct {
    uint8_t packed[OUT_FEW_BYTES];
    struct iovec iov[2 * OUT_FEW];
    size_t ends[OUT_FEW];
    hpl__frame_hdr hdrs[OUT_FEW];
    uint8_t *tags[OUT_FEW];
  } in;
} outgoing;

static void outgoing_free(outgoing *o) {
  if (o->few) return;
  free(o->packed);
  free(o->iov);
  free(o->ends);
  free(o->hdrs);
  free(o->tags);
}

/* With the writer turn held: the frames' tags, in the order they go. */
static void outgoing_tag(hpl__crpc *r, outgoing *o, const hpl__crpc_req *reqs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const hpl__frame_hdr *h = &o->hdrs[i];
    hpl__fmac_begin(&r->tx, h, o->tags[i] - h->msg_len, h->msg_len);
    if (reqs[i].plen) hpl__fmac_add(&r->tx, reqs[i].payload, reqs[i].plen);
    hpl__fmac_end(&r->tx, o->tags[i]);
  }
}

/* Pack reqs[0..n) under the request ids of ps[] (NULL: one-way, id 0).
 * 0, HPL_EINVAL (a payload length without a payload) or HPL_ENOMEM. */
static int outgoing_pack(outgoing *o, const hpl__crpc_req *reqs, size_t n, pending *const *ps,
                         int tagged) {
  size_t total = 0, tlen = tagged ? HPL__FRAME_TAG_LEN : 0;
  for (size_t i = 0; i < n; i++) {
    if (reqs[i].plen && !reqs[i].payload) return HPL_EINVAL;
    total += HPL__FRAME_HDR_LEN + tlen +
             (reqs[i].m ? protobuf_c_message_get_packed_size(reqs[i].m) : 0);
  }
  o->niov = 0;
  if ((o->few = n <= OUT_FEW && total <= OUT_FEW_BYTES)) {
    o->packed = o->in.packed;
    o->iov = o->in.iov;
    o->ends = o->in.ends;
    o->hdrs = o->in.hdrs;
    o->tags = o->in.tags;
  } else {
    o->packed = malloc(total);
    o->iov = malloc(2 * n * sizeof *o->iov);
    o->ends = malloc(n * sizeof *o->ends);
    o->hdrs = tagged ? malloc(n * sizeof *o->hdrs) : NULL;
    o->tags = tagged ? malloc(n * sizeof *o->tags) : NULL;
  }
  if (!o->packed || !o->iov || !o->ends || (tagged && (!o->hdrs || !o->tags))) {
    outgoing_free(o);
    return HPL_ENOMEM;
  }
  uint8_t *at = o->packed;
  size_t end = 0;
  struct iovec *cur = NULL; /* the iovec that headers go on extending */
  for (size_t i = 0; i < n; i++) {
    const hpl__crpc_req *q = &reqs[i];
    size_t mlen = q->m ? protobuf_c_message_pack(q->m, at + HPL__FRAME_HDR_LEN) : 0;
    hpl__frame_hdr h = {.type = (uint16_t)q->type, .msg_len = (uint32_t)mlen,
                        .req_id = ps ? ps[i]->id : 0, .payload_len = q->plen};
    if (tagged) {
      h.flags = HPL__FRAME_F_TAG | (q->plen ? HPL__FRAME_F_TAG_PAYLOAD : 0);
      o->hdrs[i] = h;
      o->tags[i] = at + HPL__FRAME_HDR_LEN + mlen;
    }
    hpl__frame_encode_hdr(&h, at);
    if (!cur) {
      cur = &o->iov[o->niov++];
      *cur = (struct iovec){.iov_base = at, .iov_len = 0};
    }
    cur->iov_len += HPL__FRAME_HDR_LEN + mlen + tlen;
    at += HPL__FRAME_HDR_LEN + mlen + tlen;
    if (q->plen) {
      o->iov[o->niov++] = (struct iovec){.iov_base = (void *)q->payload, .iov_len = q->plen};
      cur = NULL;
    }
    end += HPL__FRAME_HDR_LEN + mlen + tlen + q->plen;
    o->ends[i] = end;
  }
  return 0;
}

int hpl__crpc_send_frames(hpl__crpc *r, const hpl__crpc_req *reqs, size_t n, pending *const *ps,
                          uint64_t deadline, size_t *done) {
  *done = 0;
  if (hpl__ms_left(deadline) == 0) return HPL_ETIMEDOUT;
  outgoing o;
  int rc = outgoing_pack(&o, reqs, n, ps, r->tagged);
  if (rc) return rc;
  if (hpl__turn_take(&r->writer, deadline) != 0) {
    outgoing_free(&o);
    return HPL_ETIMEDOUT; /* another writer held the socket until our deadline */
  }
  rc = __atomic_load_n(&r->broken, __ATOMIC_ACQUIRE) ? HPL_ECONN : 0;
  size_t sent = 0;
  int err = 0;
  uint64_t seq0 = r->tx.seq;
  if (r->tagged) outgoing_tag(r, &o, reqs, n); /* seq in the order frames go */
  if (rc == 0) rc = write_iov(r->fd, o.iov, o.niov, deadline, &sent, &err);
  while (*done < n && o.ends[*done] <= sent) ++*done;
  r->tx.seq = seq0 + *done; /* frames that did not go are made again, with these numbers */
  size_t whole = *done ? o.ends[*done - 1] : 0;
  if (rc == HPL_ECONN && err) {
    char eb[96];
    crpc_lock(r);
    hpl__crpc_break_locked(r, "cannot send %s: %s", hpl__msg_name(reqs[*done].type),
                 errstr(err, eb, sizeof eb));
    crpc_unlock(r);
  } else if (rc == HPL_ETIMEDOUT && sent > whole) {
    crpc_lock(r);
    hpl__crpc_break_locked(r, "sending %s timed out after %zu of its %zu bytes",
                 hpl__msg_name(reqs[*done].type), sent - whole, o.ends[*done] - whole);
    crpc_unlock(r);
  }
  hpl__turn_give(&r->writer);
  outgoing_free(&o);
  return rc;
}
