/* uvconn_write.c - a framed connection's writing (uvconn.h): frames and raw
 * bytes become libuv write requests, in the order they were made; writes
 * made during the handshake or behind a sendfile are held until it ends.
 * A corking connection's small frames wait for the loop turn's end
 * (uvconn_cork.c). */
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "uvconn_int.h"

/* ------------------------------------------------------------------ the write queue */

static void conn_write_done(uv_write_t *req, int status) {
  hpl__conn_wreq *w = (hpl__conn_wreq *)req;
  hpl__conn *c = w->c;
  c->wq_bytes -= w->bytes;
  if (status && !c->closing) {
    HPL__LOG_DEBUG("%s: write failed: %s", c->label, uv_strerror(status));
    hpl__conn_close(c, HPL_ECONN);
  }
  if (w->cb) w->cb(c, status ? HPL_ECONN : 0, w->arg);
  hpl__conn_wreq_free(c, w);
}

int hpl__conn_queue_write(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t *bufs, unsigned nbufs) {
  int rc = uv_write(&w->req, c->s, bufs, nbufs, conn_write_done);
  if (rc) {
    hpl__conn_wreq_free(c, w);
    hpl__conn_close(c, HPL_ECONN);
    return HPL_ECONN;
  }
  c->wq_bytes += w->bytes;
  return 0;
}

/* ------------------------------------------------------------------ writes in order */

/* w (w->c and w->bytes set) goes now: corked, or written after what is. */
static int conn_send_now(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t *bufs, unsigned nbufs) {
  if (c->o.cork && !w->cb && nbufs == 1 && w->owned && hpl__conn_cork(c, w, bufs[0]) == 0) return 0;
  if (c->cork) {
    hpl__conn_flush_for(c); /* in order */
    if (c->closing) {
      hpl__conn_wreq_free(c, w);
      return HPL_ECONN;
    }
  }
  if (c->wq_bytes == 0 && (!w->cb || w->now_ok)) {
    /* nothing queued, and nobody to tell or an owner who takes "it went
     * now": write now, and queue only what the socket did not take (a
     * control reply or a small copy usually goes whole, with no write
     * request, no callback and no poll-set change: a finished write request
     * costs libuv an epoll_ctl on the next turn) */
    int n = uv_try_write(c->s, bufs, nbufs);
    if (n == (int)w->bytes) {
      int told = w->cb != NULL;
      hpl__conn_wreq_free(c, w);
      return told ? 2 : 0;
    }
    for (unsigned i = 0; n > 0 && i < nbufs; i++) {
      size_t k = (size_t)n < bufs[i].len ? (size_t)n : bufs[i].len;
      bufs[i].base += k;
      bufs[i].len -= k;
      n -= (int)k;
      w->bytes -= k;
    }
  }
  return hpl__conn_queue_write(c, w, bufs, nbufs);
}

static void wreq_set(hpl__conn *c, hpl__conn_wreq *w, const uv_buf_t *bufs, unsigned nbufs) {
  w->c = c;
  w->bytes = 0;
  for (unsigned i = 0; i < nbufs; i++) w->bytes += bufs[i].len;
}

/* The tag of a frame made before the handshake ended. */
static void conn_tag(hpl__conn *c, hpl__conn_wreq *w) {
  const uint8_t *msg = w->tag_at - w->tag_hdr.msg_len;
  hpl__fmac_begin(&c->tx, &w->tag_hdr, msg, w->tag_hdr.msg_len);
  if (w->tag_payload) hpl__fmac_add(&c->tx, w->tag_payload, w->tag_hdr.payload_len);
  hpl__fmac_end(&c->tx, w->tag_at);
  w->need_tag = 0;
}

/* A sealed connection (frame.h): the frame's message (and a payload it
 * carries) encrypted, the AEAD's tag where the MAC's goes. A carried payload
 * is copied into one new buffer with the message (control payloads are
 * small), so bufs become one. A payload streamed later is sealed in
 * records by hpl__conn_write. 0 or HPL_ENOMEM. */
static int conn_seal(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t *bufs, unsigned *nbufs) {
  hpl__frame_hdr h = w->tag_hdr;
  size_t mlen = h.msg_len, plen = w->tag_payload ? (size_t)h.payload_len : 0;
  h.flags |= HPL__FRAME_F_SEALED;
  uint8_t *msg = w->tag_at - mlen;
  w->need_tag = 0;
  if (!plen) {
    hpl__frame_encode_hdr(&h, msg - HPL__FRAME_HDR_LEN);
    uint64_t seq = hpl__fseal_frame(&c->tx, &h, msg, mlen, w->tag_at);
    if (h.payload_len) { /* its bytes follow in records */
      c->stx_seq = seq;
      c->stx_idx = 1;
      c->stx_left = h.payload_len;
    }
    return 0;
  }
  size_t total = HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + plen;
  uint8_t *nb = malloc(total), tag[HPL__FRAME_TAG_LEN];
  if (!nb) return HPL_ENOMEM;
  uint8_t *body = nb + HPL__FRAME_HDR_LEN;
  hpl__frame_encode_hdr(&h, nb);
  memcpy(body, msg, mlen);
  memcpy(body + mlen, w->tag_payload, plen);
  hpl__fseal_frame(&c->tx, &h, body, mlen + plen, tag);
  memmove(body + mlen + HPL__FRAME_TAG_LEN, body + mlen, plen);
  memcpy(body + mlen, tag, sizeof tag);
  free(w->owned);
  w->owned = nb;
  bufs[0] = uv_buf_init((char *)nb, (unsigned)total);
  *nbufs = 1;
  return 0;
}

int hpl__conn_submit(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t *bufs, unsigned nbufs) {
  wreq_set(c, w, bufs, nbufs);
  if (w->need_tag && c->hs == HPL__HS_OPEN && c->tx.seal) { /* in the order frames go */
    if (conn_seal(c, w, bufs, &nbufs) != 0) {
      if (w->cb) w->cb(c, HPL_ENOMEM, w->arg);
      hpl__conn_wreq_free(c, w);
      hpl__conn_close(c, HPL_ENOMEM);
      return HPL_ECONN;
    }
    wreq_set(c, w, bufs, nbufs);
  } else if (w->need_tag && c->hs == HPL__HS_OPEN) {
    conn_tag(c, w);
  }
  hpl__conn_out_charge(c, w, w->owned ? bufs[0].len : 0);
  if (c->hs != HPL__HS_OPEN || c->sf_left) { /* after the handshake (or sendfile), in order */
    for (unsigned i = 0; i < nbufs; i++) w->bufs[i] = bufs[i];
    w->nbufs = nbufs;
    w->now_ok = 0; /* its owner was told "queued": the cb must come */
    DL_APPEND(c->held, w);
    c->wq_bytes += w->bytes;
    return 0;
  }
  return conn_send_now(c, w, bufs, nbufs);
}

int hpl__conn_submit_first(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t *bufs, unsigned nbufs) {
  wreq_set(c, w, bufs, nbufs);
  hpl__conn_out_charge(c, w, w->owned ? bufs[0].len : 0);
  return conn_send_now(c, w, bufs, nbufs);
}

void hpl__conn_release_held(hpl__conn *c) {
  hpl__conn_wreq *w;
  while ((w = c->held) && !c->closing && c->hs == HPL__HS_OPEN && !c->sf_left) {
    DL_DELETE(c->held, w);
    c->wq_bytes -= w->bytes;
    hpl__conn_submit(c, w, w->bufs, w->nbufs);
  }
}

void hpl__conn_drop_writes(hpl__conn *c) {
  hpl__conn_wreq *w;
  while ((w = c->held)) { /* writes held for the handshake never go: their owners hear so */
    DL_DELETE(c->held, w);
    c->wq_bytes -= w->bytes;
    if (w->cb) w->cb(c, HPL_ECONN, w->arg);
    hpl__conn_wreq_free(c, w);
  }
  while ((w = c->cork)) { /* only left if the flush itself closed the connection */
    DL_DELETE(c->cork, w);
    hpl__conn_wreq_free(c, w);
  }
}

/* hpl__conn_submit_frame, and with `lead` the first len bytes of a payload
 * streamed later (payload NULL) in the same write request. */
static int frame_submit(hpl__conn *c, hpl__conn_wreq *w, uint8_t *buf, hpl__frame_hdr *h,
                        const void *payload, uint64_t plen, int copy, const void *lead,
                        size_t len) {
  size_t mlen = h->msg_len, tlen = c->tagged ? HPL__FRAME_TAG_LEN : 0;
  size_t extra = copy && payload ? (size_t)plen : 0;
  uint8_t *tag_at = buf + HPL__FRAME_HDR_LEN + mlen;
  if (extra) memcpy(tag_at + tlen, payload, (size_t)plen);
  h->flags = 0;
  if (c->tagged) { /* a payload streamed later (payload NULL) is not covered */
    h->flags = HPL__FRAME_F_TAG | (payload && plen ? HPL__FRAME_F_TAG_PAYLOAD : 0);
    w->need_tag = 1;
    w->tag_hdr = *h;
    w->tag_at = tag_at;
    w->tag_payload = payload && plen ? (extra ? tag_at + tlen : payload) : NULL;
  }
  hpl__frame_encode_hdr(h, buf);
  w->owned = buf;
  uv_buf_t bufs[2];
  unsigned n = 1;
  bufs[0] = uv_buf_init((char *)buf, (unsigned)(HPL__FRAME_HDR_LEN + mlen + tlen + extra));
  if (!copy && plen && payload) bufs[n++] = uv_buf_init((char *)payload, (unsigned)plen);
  if (lead) bufs[n++] = uv_buf_init((char *)lead, (unsigned)len);
  return hpl__conn_submit(c, w, bufs, n);
}

int hpl__conn_submit_frame(hpl__conn *c, hpl__conn_wreq *w, uint8_t *buf, hpl__frame_hdr *h,
                           const void *payload, uint64_t plen, int copy) {
  return frame_submit(c, w, buf, h, payload, plen, copy, NULL, 0);
}

/* A write request for a frame of message m, its buffer with room for the
 * header, the message, a tag and `extra` payload bytes, the message packed
 * into it; NULL (nothing allocated) without memory. */
static hpl__conn_wreq *frame_new(unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                                 uint64_t plen, size_t extra, uint8_t **buf, hpl__frame_hdr *h) {
  size_t mlen = m ? protobuf_c_message_get_packed_size(m) : 0;
  hpl__conn_wreq *w = calloc(1, sizeof *w);
  *buf = malloc(HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + extra + 1);
  if (!w || !*buf) {
    free(w);
    free(*buf);
    return NULL;
  }
  *h = (hpl__frame_hdr){.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req_id,
                        .payload_len = plen};
  if (mlen) protobuf_c_message_pack(m, *buf + HPL__FRAME_HDR_LEN);
  return w;
}

int hpl__conn_send(hpl__conn *c, unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                  const void *payload, uint64_t plen, int copy, hpl__conn_write_cb cb, void *arg) {
  if (c->closing) return HPL_ECONN;
  if ((copy || payload) && plen > UINT32_MAX) return HPL_ETOOBIG;
  uint8_t *buf;
  hpl__frame_hdr h;
  hpl__conn_wreq *w = frame_new(type, req_id, m, plen, copy && payload ? (size_t)plen : 0, &buf, &h);
  if (!w) return HPL_ENOMEM;
  w->cb = cb;
  w->arg = arg;
  return hpl__conn_submit_frame(c, w, buf, &h, payload, plen, copy);
}

int hpl__conn_send_lead(hpl__conn *c, unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                        uint64_t plen, const void *lead, size_t len, hpl__conn_write_cb cb,
                        void *arg) {
  if (c->closing) return HPL_ECONN;
  if (!len || len > plen || len > UINT32_MAX) return HPL_EINVAL;
  if (c->hs != HPL__HS_OPEN || c->tx.seal) { /* two writes, as before */
    int rc = hpl__conn_send(c, type, req_id, m, NULL, plen, 0, NULL, NULL);
    return rc ? rc : hpl__conn_write_now(c, lead, len, cb, arg);
  }
  uint8_t *buf;
  hpl__frame_hdr h;
  hpl__conn_wreq *w = frame_new(type, req_id, m, plen, 0, &buf, &h);
  if (!w) return HPL_ENOMEM;
  w->cb = cb;
  w->arg = arg;
  w->now_ok = 1;
  return frame_submit(c, w, buf, &h, NULL, plen, 0, lead, len);
}

int hpl__conn_send_packed(hpl__conn *c, const uint8_t *frame, size_t len) {
  if (c->closing) return HPL_ECONN;
  hpl__frame_limits any = {.max_msg = UINT32_MAX, .max_payload = UINT32_MAX,
                           .max_type = UINT16_MAX};
  hpl__frame_hdr h;
  if (hpl__frame_decode_hdr(frame, len, &any, &h, NULL) != 0 ||
      len != HPL__FRAME_HDR_LEN + (size_t)h.msg_len + h.payload_len)
    return HPL_EINVAL;
  hpl__conn_wreq *w = calloc(1, sizeof *w);
  uint8_t *buf = malloc(len + HPL__FRAME_TAG_LEN + 1);
  if (!w || !buf) {
    free(w);
    free(buf);
    return HPL_ENOMEM;
  }
  memcpy(buf + HPL__FRAME_HDR_LEN, frame + HPL__FRAME_HDR_LEN, h.msg_len);
  return hpl__conn_submit_frame(c, w, buf, &h, frame + HPL__FRAME_HDR_LEN + h.msg_len,
                                h.payload_len, 1);
}

/* A sealed stream's bytes p[0, len) as records (frame.h) in a new buffer
 * of total *out bytes; NULL with no memory. */
static uint8_t *conn_seal_records(hpl__conn *c, const uint8_t *p, size_t len, size_t *out) {
  size_t nrec = (len + HPL__FRAME_REC_MAX - 1) / HPL__FRAME_REC_MAX;
  size_t total = len + nrec * (HPL__FRAME_REC_HDR + HPL__FRAME_TAG_LEN);
  uint8_t *buf = malloc(total), *q = buf;
  if (!buf) return NULL;
  while (len) {
    size_t n = len < HPL__FRAME_REC_MAX ? len : HPL__FRAME_REC_MAX;
    for (int i = 0; i < 4; i++) q[i] = (uint8_t)(n >> (8 * i));
    hpl__fseal_record(&c->tx, c->stx_seq, c->stx_idx++, p, q + HPL__FRAME_REC_HDR, n,
                      q + HPL__FRAME_REC_HDR + n);
    q += HPL__FRAME_REC_HDR + n + HPL__FRAME_TAG_LEN;
    p += n;
    len -= n;
  }
  *out = total;
  return buf;
}

/* hpl__conn_write and hpl__conn_write_now: now_ok lets a write the socket
 * takes whole end at once (2, cb not called). */
static int conn_write(hpl__conn *c, const void *p, size_t len, hpl__conn_write_cb cb, void *arg,
                      int now_ok) {
  if (c->closing) return HPL_ECONN;
  /* on a connection that may be sealed the stream's frame must have gone
   * first (a sealed stream is encrypted record by record as it is written) */
  if (len && c->tagged && (c->hs != HPL__HS_OPEN || (c->tx.seal && len > c->stx_left))) {
    HPL__LOG_WARN("%s: %zu stream bytes written %s", c->label, len,
                  c->hs != HPL__HS_OPEN ? "before the handshake ended" : "beyond their frame");
    return HPL_EINVAL;
  }
  hpl__conn_wreq *w = calloc(1, sizeof *w);
  if (!w) return HPL_ENOMEM;
  w->cb = cb;
  w->arg = arg;
  w->now_ok = now_ok;
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
  if (len && c->tx.seal) {
    size_t total = 0;
    if (!(w->owned = conn_seal_records(c, p, len, &total))) {
      free(w);
      return HPL_ENOMEM;
    }
    c->stx_left -= len;
    b = uv_buf_init((char *)w->owned, (unsigned)total);
  }
  return hpl__conn_submit(c, w, &b, 1);
}

int hpl__conn_write(hpl__conn *c, const void *p, size_t len, hpl__conn_write_cb cb, void *arg) {
  return conn_write(c, p, len, cb, arg, 0);
}

int hpl__conn_write_now(hpl__conn *c, const void *p, size_t len, hpl__conn_write_cb cb,
                        void *arg) {
  return conn_write(c, p, len, cb, arg, 1);
}

int hpl__conn_reply(hpl__conn *c, uint64_t req_id, int status, const char *detail) {
  Hplpb__Reply r = HPLPB__REPLY__INIT;
  r.status = status;
  r.detail = (char *)(detail ? detail : "");
  return hpl__conn_send(c, HPL__MSG_REPLY, req_id, &r.base, NULL, 0, 0, NULL, NULL);
}
