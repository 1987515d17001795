/* crpc_read.c - the client's RPC layer, reading (crpc_int.h): one read of
 * the socket, the frames it completes (each copied out with its payload
 * 64-byte aligned, or handed over in the read buffer itself), their tags
 * checked under a session, and each handed to its ticket (an async one
 * joins the ready list) or dropped as an orphan. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uthash.h>
#include <utlist.h>

#include "crpc_int.h"
#include "cwait.h"
#include "hoplite.h"
#include "record.h"
#include "util.h"

#define CRPC_CMSG_FDS 4 /* descriptors one read makes room for; the kernel drops any beyond */
#define CRPC_HANDOVER_MIN 4096 /* a frame with a larger payload, alone in a read, takes
                                  the read buffer over; a smaller one is copied out */
#define CRPC_PAYLOAD_ALIGN 64  /* a copied-out frame's payload starts this aligned */
#define CRPC_RELEASE_MS 5000   /* how long an orphan hold's RELEASE may take */

static const char *errstr(int err, char *buf, size_t len) { return strerror_r(err, buf, len); }

/* ------------------------------------------------------------------ tickets */


/* An async ticket that is done joins the ready list (r->lock held). */
static void ready_locked(hpl__crpc *r, pending *p) {
  if (!p->async || p->in_ready) return;
  p->in_ready = 1;
  /* the eventfd says "look", once per batch; the pump's caller looks anyway */
  int first = r->ready == NULL && !r->pumping;
  DL_APPEND2(r->ready, p, rprev, rnext);
  if (first) hpl__crpc_notify_locked(r);
}


static pending *find_locked(hpl__crpc *r, uint64_t id) {
  pending *p = NULL;
  HASH_FIND(hh, r->pending, &id, sizeof id, p);
  return p && !p->done ? p : NULL;
}

/* A reply nobody waits for any more (its caller gave up, or none asked).
 * A GET_REP that granted a hold gets a RELEASE, or the store would keep the
 * object pinned for as long as the connection lives. */
void hpl__crpc_drop_orphan(hpl__crpc *r, hpl__crpc_msg *m) {
  if (m->type == HPL__MSG_GET_REP) {
    Hplpb__GetRep *g = (Hplpb__GetRep *)hpl__crpc_msg_unpack(m, HPL__MSG_GET_REP);
    if (g && g->status == 0) {
      Hplpb__HandleReq rel = HPLPB__HANDLE_REQ__INIT;
      rel.handle = g->handle;
      hpl__crpc_req q = {.type = HPL__MSG_RELEASE, .m = &rel.base};
      size_t done;
      hpl__crpc_send_frames(r, &q, 1, NULL, hpl__deadline_ms(CRPC_RELEASE_MS), &done);
    }
    if (g) protobuf_c_message_free_unpacked(&g->base, NULL);
  }
  hpl__crpc_msg_free(m);
}

/* Hand a complete frame to its caller (crpc_int.h). */
void hpl__crpc_deliver(hpl__crpc *r, hpl__crpc_msg *m) {
  crpc_lock(r);
  pending *p = find_locked(r, m->req_id);
  if (p) {
    p->msg = *m;
    p->done = 1;
    m->buf = NULL;
    ready_locked(r, p);
    crpc_wake(r);
  }
  crpc_unlock(r);
  if (m->buf) hpl__crpc_drop_orphan(r, m);
}

/* A frame for `id` was skipped for want of memory: its caller fails. */
void hpl__crpc_deliver_error(hpl__crpc *r, uint64_t id, int status) {
  crpc_lock(r);
  pending *p = find_locked(r, id);
  if (p) {
    p->status = status;
    p->done = 1;
    ready_locked(r, p);
    crpc_wake(r);
  }
  crpc_unlock(r);
}

/* ------------------------------------------------------------------ frames */

/* The frame under way has its tag checked over cur.buf once whole: a
 * covered payload, with a buffer that kept room for the MAC's head
 * (frame_begin). Without memory the tag is computed as the bytes come. */
static int cur_in_place(const hpl__crpc *r) {
  return r->tagged && r->cur.buf && r->cur.payload_len;
}

static void frame_end(hpl__crpc *r) {
  hpl__crpc_msg m = r->cur;
  memset(&r->cur, 0, sizeof r->cur);
  if (m.buf) hpl__crpc_deliver(r, &m);
  else hpl__crpc_deliver_error(r, m.req_id, HPL_ENOMEM);
}

/* Header and message of a frame are in (both checked against the limits
 * by the framer): copy them into a buffer of their own with room for the
 * payload, which frame_payload() fills; the payload starts 64-byte
 * aligned in it. Under a session the buffer starts with room for the MAC's
 * head too (hpl__fmac_head), so the frame's tag is checked over the buffer
 * in place once the payload is in (cur_in_place), not over a copy made as
 * it arrives. Without memory the frame is still read to its end, its tag
 * computed as it comes, then its caller fails with HPL_ENOMEM. */
static void frame_begin(hpl__crpc *r, const hpl__frame_hdr *h, const uint8_t *msg) {
  hpl__crpc_msg *m = &r->cur;
  r->cur_got = 0;
  /* The message goes right before a payload that starts aligned, so a
   * small object's bytes can stay where they are (cdirect.c): malloc (its
   * per-thread cache; aligned_alloc has none) with room to slide the
   * message along until the payload's address is aligned. */
  int span = r->tagged && h->payload_len; /* a frame without one was checked already */
  size_t head = span ? HPL__FMAC_HEAD_LEN : 0;
  size_t size = head + (size_t)h->msg_len + (size_t)h->payload_len;
  uint8_t *buf = malloc(size + (h->payload_len ? CRPC_PAYLOAD_ALIGN - 1 : 0) + 1);
  size_t at = buf && h->payload_len ? ((uintptr_t)buf + head + h->msg_len) % CRPC_PAYLOAD_ALIGN : 0;
  size_t pad = (CRPC_PAYLOAD_ALIGN - at) % CRPC_PAYLOAD_ALIGN;
  *m = (hpl__crpc_msg){.type = h->type, .req_id = h->req_id, .buf = buf, .msg_off = pad + head,
                       .msg_len = h->msg_len, .payload_off = pad + head + h->msg_len,
                       .payload_len = h->payload_len};
  if (m->buf && h->msg_len) /* msg is NULL when empty */
    memcpy(m->buf + m->msg_off, msg, h->msg_len);
  if (span && buf) hpl__fmac_head(&r->rx, h, buf + pad);
  else if (span) hpl__fmac_begin(&r->rx, h, msg, h->msg_len);
}

/* The tag of the frame under way (with a session), once whole. 0 or
 * HPL_ECONN with the reason in why[]. */
static int frame_check(hpl__crpc *r, const hpl__frame_hdr *h, char *why, size_t wlen) {
  if (!r->tagged) return 0;
  int rc;
  if (cur_in_place(r)) { /* the head, the message and the payload, in cur.buf */
    size_t head = r->cur.msg_off - HPL__FMAC_HEAD_LEN;
    rc = hpl__fmac_check_span(&r->rx, r->cur.buf + head,
                              HPL__FMAC_HEAD_LEN + r->cur.msg_len + r->cur.payload_len, r->fr.tag);
  } else {
    rc = hpl__fmac_check(&r->rx, r->fr.tag);
  }
  if (rc == 0) return 0;
  snprintf(why, wlen, "a %s frame from the peer (request %llu) fails its MAC check: changed, "
           "replayed or reordered on the way", hpl__msg_name(h->type),
           (unsigned long long)h->req_id);
  return HPL_ECONN;
}

static int frame_payload(hpl__crpc *r, const uint8_t *chunk, size_t len, char *why, size_t wlen) {
  if (r->cur.buf) memcpy(r->cur.buf + r->cur.payload_off + r->cur_got, chunk, len);
  if (r->tagged && !cur_in_place(r)) hpl__fmac_add(&r->rx, chunk, len);
  r->cur_got += len;
  if (hpl__framer_payload_left(&r->fr) != 0) return 0;
  hpl__frame_hdr h = {.type = (uint16_t)r->cur.type, .req_id = r->cur.req_id};
  if (frame_check(r, &h, why, wlen) != 0) return HPL_ECONN;
  frame_end(r);
  return 0;
}

/* ------------------------------------------------------------------ reading */

/* Keep the descriptors an SCM_RIGHTS message brought, up to the limit;
 * close the rest. */
static void keep_fds(hpl__crpc *r, struct msghdr *mh) {
  if (!CMSG_FIRSTHDR(mh)) return; /* most reads bring none */
  crpc_lock(r);
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof fd, sizeof fd);
      if (r->nfds < HPL__CRPC_MAX_FDS) r->fds[r->nfds++] = fd;
      else close(fd);
    }
  }
  crpc_unlock(r);
}

/* Feed rbuf[0..n) to the framer and deliver every frame it completes.
 * 0, or HPL_ECONN with the reason in why[] when the bytes are no frames. */
static int parse(hpl__crpc *r, size_t n, char *why, size_t wlen) {
  size_t used = 0;
  while (used < n) {
    int ev;
    const uint8_t *chunk = NULL;
    size_t clen = 0;
    long k = hpl__framer_feed(&r->fr, r->rbuf + used, n - used, &ev, &chunk, &clen);
    if (k < 0) {
      snprintf(why, wlen, "bad frame from the peer: %s",
               r->fr.why ? r->fr.why : hpl_strerror((int)k));
      return HPL_ECONN;
    }
    size_t at = used;
    used += (size_t)k;
    if (ev == HPL__FR_MSG) {
      const hpl__frame_hdr *h = &r->fr.hdr;
      size_t tlen = r->tagged ? HPL__FRAME_TAG_LEN : 0;
      if (r->tagged && !(h->flags & HPL__FRAME_F_TAG_PAYLOAD) != !h->payload_len) {
        snprintf(why, wlen, "bad frame from the peer: a payload not covered by its MAC");
        return HPL_ECONN;
      }
      if (r->tagged && h->payload_len == 0) {
        hpl__fmac_begin(&r->rx, h, r->fr.msg, h->msg_len);
        if (frame_check(r, h, why, wlen) != 0) return HPL_ECONN;
      }
      if (h->payload_len > CRPC_HANDOVER_MIN && at == 0 &&
          (size_t)k == HPL__FRAME_HDR_LEN + h->msg_len + tlen && h->payload_len == n - used) {
        /* The whole frame, and nothing else, is this read: the read buffer
         * becomes the frame's (once its tag matched). */
        if (r->tagged) {
          hpl__fmac_begin(&r->rx, h, r->fr.msg, h->msg_len);
          hpl__fmac_add(&r->rx, r->rbuf + used, h->payload_len);
          if (frame_check(r, h, why, wlen) != 0) return HPL_ECONN;
        }
        hpl__crpc_msg m = {.type = h->type, .req_id = h->req_id, .buf = r->rbuf,
                           .msg_off = HPL__FRAME_HDR_LEN, .msg_len = h->msg_len,
                           .payload_off = used, .payload_len = h->payload_len};
        hpl__framer_payload_skip(&r->fr, h->payload_len);
        r->rbuf = NULL;
        hpl__crpc_deliver(r, &m);
        return 0;
      }
      frame_begin(r, h, r->fr.msg);
      if (h->payload_len == 0) frame_end(r);
    } else if (ev == HPL__FR_PAYLOAD) {
      if (frame_payload(r, chunk, clen, why, wlen) != 0) return HPL_ECONN;
    }
  }
  return 0;
}

/* One recvmsg (flags: 0 or MSG_DONTWAIT) into the read buffer, and deliver
 * what it completes. Nothing there (or a signal) is 0 with *drained
 * untouched; a read sets *drained (may be NULL) to whether it was short.
 * 0, HPL_ENOMEM or HPL_ECONN (why[]). */
static int read_once(hpl__crpc *r, int flags, int *drained, char *why, size_t wlen) {
  char eb[96];
  if (!r->rbuf && !(r->rbuf = malloc(r->rcap))) return HPL_ENOMEM;
  struct iovec iov = {.iov_base = r->rbuf, .iov_len = r->rcap};
  union {
    char buf[CMSG_SPACE(CRPC_CMSG_FDS * sizeof(int))];
    struct cmsghdr align;
  } cbuf;
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
                      .msg_controllen = sizeof cbuf.buf};
  ssize_t n = recvmsg(r->fd, &mh, flags | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  if (n < 0) {
    snprintf(why, wlen, "cannot read: %s", errstr(errno, eb, sizeof eb));
    return HPL_ECONN;
  }
  keep_fds(r, &mh);
  if (drained) *drained = (size_t)n < r->rcap;
  if (n == 0) {
    snprintf(why, wlen, "the peer closed the connection");
    return HPL_ECONN;
  }
  hpl__record_add(&r->rec, r->rbuf, (size_t)n);
  return parse(r, (size_t)n, why, wlen);
}

/* The reader's turn (reader role held, r->lock not): wait for bytes until
 * the deadline, read once, and deliver what that completes. Returns 0 (go
 * on), HPL_ETIMEDOUT, HPL_ENOMEM (no read buffer), or HPL_ECONN with the
 * reason in why[]. */
int hpl__crpc_read_some(hpl__crpc *r, uint64_t deadline, int *drained, char *why, size_t wlen) {
  char eb[96];
  int64_t left = hpl__ms_left(deadline);
  if (left == 0) return HPL_ETIMEDOUT;
  /* With time to spare the read itself waits (one syscall per reply, not
   * poll then read), for at most CRPC_RECV_CAP_MS, after which the caller
   * looks at its deadline again; close to the deadline poll waits exactly. */
  int block = r->block_recv && (left < 0 || left > CRPC_RECV_CAP_MS);
  if (!block) {
    struct pollfd pfd = {.fd = r->fd, .events = POLLIN};
    int pr = poll(&pfd, 1, hpl__cwait_poll_ms(deadline));
    if (pr == 0) return HPL_ETIMEDOUT;
    if (pr < 0) {
      if (errno == EINTR) return 0;
      snprintf(why, wlen, "cannot wait for replies: %s", errstr(errno, eb, sizeof eb));
      return HPL_ECONN;
    }
  }
  return read_once(r, block ? 0 : MSG_DONTWAIT, drained, why, wlen);
}

int hpl__crpc_read_now(hpl__crpc *r, int *drained, char *why, size_t wlen) {
  *drained = 1; /* unless a read fills the buffer */
  return read_once(r, MSG_DONTWAIT, drained, why, wlen);
}

/* ------------------------------------------------------------------ messages */

void hpl__crpc_msg_free(hpl__crpc_msg *m) {
  if (!m) return;
  free(m->buf);
  memset(m, 0, sizeof *m);
}

ProtobufCMessage *hpl__crpc_msg_unpack(const hpl__crpc_msg *m, unsigned type) {
  return hpl__msg_unpack(type, m->buf + m->msg_off, m->msg_len);
}
