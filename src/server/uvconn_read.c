/* uvconn_read.c - a framed connection's reading (uvconn.h): bytes read
 * into the connection's buffer (or, for a streamed payload, straight into
 * its sink) go through the framer, each frame's message is unpacked and
 * handed to on_frame, its payload buffered or streamed. A connection
 * handles at most HPL__CONN_FRAME_BUDGET frames per loop turn before it
 * yields; a frame's time limit is uvconn_timer.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"
#include "uvconn_int.h"

static void conn_process(hpl__conn *c);

/* ------------------------------------------------------------------ turns */

static void conn_idle_turn(uv_idle_t *h) {
  hpl__conn *c = h->data;
  uv_idle_stop(h);
  if (c->closing) return;
  conn_process(c);
  if (c->closing) return;
  hpl__conn_track_frame(c);
  if (!c->paused && !uv_is_active((uv_handle_t *)h)) hpl__conn_read_start(c);
}

/* The connection used its frames for this loop turn: stop reading, go on
 * with what is buffered on the next turn (after every other handle). */
static void conn_yield(hpl__conn *c) {
  if (c->reading) uv_read_stop(c->s);
  c->reading = 0;
  if (!c->idle) {
    if (!(c->idle = malloc(sizeof *c->idle))) {
      hpl__conn_close(c, HPL_ENOMEM);
      return;
    }
    uv_idle_init(c->s->loop, c->idle);
    c->idle->data = c;
    c->handles++;
  }
  uv_idle_start(c->idle, conn_idle_turn);
}

void hpl__conn_kick(hpl__conn *c) {
  if (!c->closing) conn_yield(c);
}

void hpl__conn_hold(hpl__conn *c, int on) {
  on = on != 0;
  if (c->closing || c->held_by_owner == on) return;
  c->held_by_owner = on;
  if (on) {
    if (c->reading) uv_read_stop(c->s);
    c->reading = 0;
  } else if (!c->out_over) {
    hpl__conn_kick(c);
  }
}

/* One more frame this turn; 0 once the budget is used up. */
static int conn_frame_budget(hpl__conn *c) {
  uint64_t now = uv_now(c->s->loop);
  if (c->turn_ms != now) {
    c->turn_ms = now;
    c->turn_frames = 0;
  }
  return ++c->turn_frames <= HPL__CONN_FRAME_BUDGET;
}

/* ------------------------------------------------------------------ frames */

/* A frame whose payload (if any) has been fully delivered is finished. */
static void conn_frame_done(hpl__conn *c) {
  if (c->cur_msg) protobuf_c_message_free_unpacked(c->cur_msg, NULL);
  c->cur_msg = NULL;
  free(c->pbuf);
  c->pbuf = NULL;
  c->pgot = 0;
  c->have_sink = 0;
}

void hpl__conn_mac_failed(hpl__conn *c, const hpl__frame_hdr *h, const char *why) {
  HPL__LOG_WARN("%s: %s frame (request %llu, %llu-byte payload) %s: changed, replayed, "
                "reordered or dropped on the way; closing the connection",
                c->label, hpl__msg_name(h->type), (unsigned long long)h->req_id,
                (unsigned long long)h->payload_len, why);
  if (c->o.auth_failures) (*c->o.auth_failures)++;
  hpl__conn_close(c, HPL_EAUTH);
}

/* The message of the current frame is unpacked (its tag, if any, checked
 * before): 0, or -1 with c failed. */
static int conn_unpack(hpl__conn *c) {
  /* a sealed frame's buffered payload was opened together with its message,
   * which leads pbuf */
  const uint8_t *msg = c->rx.seal && c->pbuf ? c->pbuf : c->fr.msg;
  c->cur_msg = hpl__msg_unpack(c->cur.type, msg, c->cur.msg_len);
  if (c->cur_msg) return 0;
  char why[96];
  snprintf(why, sizeof why, "cannot decode %s message (%u bytes)", hpl__msg_name(c->cur.type),
           c->cur.msg_len);
  hpl__conn_fail(c, why);
  return -1;
}

static size_t conn_stream_put(hpl__conn *c, const uint8_t *p, size_t len);

/* A sealed frame's header, message and tag arrived (frame.h): one whose
 * payload is buffered is opened with it (conn_buffered_done); otherwise its
 * message is opened now and a streamed payload expected in records, which
 * the framer does not see (conn_sealed_in). 0, or -1 with c closed. */
static int conn_sealed_msg(hpl__conn *c) {
  int cover = (c->cur.flags & HPL__FRAME_F_TAG_PAYLOAD) != 0;
  if (!(c->cur.flags & HPL__FRAME_F_SEALED) ||
      (c->o.stream_payloads ? cover : cover != (c->cur.payload_len > 0))) {
    hpl__conn_fail(c, !(c->cur.flags & HPL__FRAME_F_SEALED)
                          ? "a frame not sealed on a sealed connection"
                          : "a payload sealed the wrong way for this connection");
    return -1;
  }
  if (cover) return 0; /* opened once the payload is whole */
  if (hpl__fseal_open(&c->rx, &c->cur, c->fr.msg, c->cur.msg_len, c->fr.tag, &c->srx_seq)) {
    hpl__conn_mac_failed(c, &c->cur, "fails to open");
    return -1;
  }
  if (c->cur.payload_len) {
    if (!c->srec && !(c->srec = malloc(HPL__CONN_SREC))) {
      hpl__conn_close(c, HPL_ENOMEM);
      return -1;
    }
    hpl__framer_payload_skip(&c->fr, c->cur.payload_len); /* records are ours */
    c->srx_left = c->cur.payload_len;
    c->srx_idx = 1;
    c->shave = c->slen = c->sout = 0;
  }
  return 0;
}

/* A sealed record is whole in srec: open it, into the sink straight when it
 * has room for all of it, else in place (then taken from sout). Nothing of
 * it counts before its tag matched. 0 or -1 (c closed). */
static int conn_sealed_open(hpl__conn *c, size_t n) {
  const uint8_t *ct = c->srec + HPL__FRAME_REC_HDR, *tag = ct + n;
  size_t room = 0;
  uint8_t *dst = c->have_sink ? c->sink.buf(c, c->sink.arg, c->pgot, &room) : NULL;
  int direct = dst && room >= n;
  if (hpl__fseal_record_open(&c->rx, c->srx_seq, c->srx_idx, ct,
                             direct ? dst : c->srec + HPL__FRAME_REC_HDR, n, tag) != 0) {
    hpl__conn_mac_failed(c, &c->cur, "has a stream record that fails to open");
    return -1;
  }
  c->srx_idx++;
  c->srx_left -= n;
  c->shave = 0;
  if (!direct) {
    c->sout = 0;
    c->slen = n;
    return 0;
  }
  uint64_t off = c->pgot;
  c->pgot += n;
  int last = c->pgot == c->cur.payload_len;
  c->sink.got(c, c->sink.arg, off, n);
  if (last && !c->closing) conn_frame_done(c);
  return 0;
}

/* Bytes of a sealed stream (records, frame.h) from p[0, len): gathered
 * into srec, each record opened and its plaintext handed to the sink.
 * Returns the bytes taken; it stops early when the sink pauses with
 * plaintext left (sout < slen) or c closes. */
static size_t conn_sealed_in(hpl__conn *c, const uint8_t *p, size_t len) {
  size_t used = 0;
  while (!c->closing) {
    while (c->sout < c->slen && !c->closing) {
      size_t n = conn_stream_put(c, c->srec + HPL__FRAME_REC_HDR + c->sout, c->slen - c->sout);
      if (n == 0) return used; /* the sink paused */
      c->sout += n;
    }
    c->sout = c->slen = 0;
    if (used == len || !c->srx_left || c->closing) return used;
    size_t rlen = 0;
    if (c->shave >= HPL__FRAME_REC_HDR)
      for (int i = 0; i < 4; i++) rlen |= (size_t)c->srec[i] << (8 * i);
    size_t want = c->shave < HPL__FRAME_REC_HDR ? HPL__FRAME_REC_HDR
                                                : HPL__FRAME_REC_HDR + rlen + HPL__FRAME_TAG_LEN;
    size_t n = want - c->shave < len - used ? want - c->shave : len - used;
    memcpy(c->srec + c->shave, p + used, n);
    c->shave += n;
    used += n;
    if (c->shave == HPL__FRAME_REC_HDR) {
      for (int i = 0; i < 4; i++) rlen |= (size_t)c->srec[i] << (8 * i);
      if (rlen == 0 || rlen > HPL__FRAME_REC_MAX || rlen > c->srx_left) {
        hpl__conn_fail(c, "a sealed stream record of a length out of bounds");
        return used;
      }
    } else if (c->shave == want && conn_sealed_open(c, rlen) != 0) {
      return used;
    }
  }
  return used;
}

/* A buffered payload is whole, the n bytes at p (in pbuf, or in rbuf when
 * it arrived whole there): its tag (a sealed frame's: opened in pbuf with
 * its message), then the message, then on_frame. */
static void conn_buffered_done(hpl__conn *c, const uint8_t *p, size_t n) {
  if (c->rx.seal ? hpl__fseal_open(&c->rx, &c->cur, c->pbuf, c->poff + c->pgot, c->fr.tag, NULL)
                 : c->rx.on && hpl__fmac_check(&c->rx, c->fr.tag) != 0) {
    hpl__conn_mac_failed(c, &c->cur, c->rx.seal ? "fails to open" : "fails its MAC check");
    return;
  }
  if (conn_unpack(c) != 0) return;
  c->o.on_frame(c, &c->cur, c->cur_msg, p, n);
  conn_frame_done(c);
}

/* A buffered frame whose payload is in rbuf already, whole (not sealed):
 * handed up from rbuf without a copy. */
static void conn_in_place(hpl__conn *c) {
  const uint8_t *p = c->rbuf + c->rpos;
  size_t n = (size_t)c->cur.payload_len;
  hpl__framer_payload_skip(&c->fr, n);
  c->rpos += n;
  if (c->rx.on) hpl__fmac_add(&c->rx, p, n);
  conn_buffered_done(c, p, n);
}

/* Header, message and tag complete: check what the tag can check now,
 * unpack and dispatch (or start buffering). A buffered payload is unpacked
 * and handed up only once it is whole and its tag matched. */
static void conn_on_msg(hpl__conn *c) {
  c->cur = c->fr.hdr;
  if (c->rx.seal) {
    if (conn_sealed_msg(c) != 0) return;
  } else if (c->cur.flags & HPL__FRAME_F_SEALED) {
    hpl__conn_fail(c, "a sealed frame on a connection that is not sealed");
    return;
  } else if (c->rx.on) {
    int cover = (c->cur.flags & HPL__FRAME_F_TAG_PAYLOAD) != 0;
    if (c->o.stream_payloads ? cover : cover != (c->cur.payload_len > 0)) {
      hpl__conn_fail(c, cover ? "a payload covered by the MAC on a data stream"
                              : "a payload not covered by the MAC on a control connection");
      return;
    }
    hpl__fmac_begin(&c->rx, &c->cur, c->fr.msg, c->cur.msg_len);
    if ((c->cur.payload_len == 0 || c->o.stream_payloads) && hpl__fmac_check(&c->rx, c->fr.tag)) {
      hpl__conn_mac_failed(c, &c->cur, "fails its MAC check");
      return;
    }
  }
  if (c->cur.payload_len == 0) {
    if (conn_unpack(c) != 0) return;
    c->o.on_frame(c, &c->cur, c->cur_msg, NULL, 0);
    conn_frame_done(c);
    return;
  }
  if (c->o.stream_payloads) {
    if (conn_unpack(c) != 0) return;
    c->have_sink = 0;
    c->o.on_frame(c, &c->cur, c->cur_msg, NULL, c->cur.payload_len);
    if (!c->closing && !c->have_sink) hpl__conn_fail(c, "unexpected payload");
    return;
  }
  if (!c->rx.seal && c->cur.payload_len <= c->rlen - c->rpos) {
    conn_in_place(c);
    return;
  }
  c->poff = c->rx.seal ? c->cur.msg_len : 0;
  c->pbuf = malloc(c->poff + c->cur.payload_len);
  if (!c->pbuf) {
    HPL__LOG_ERROR("%s: out of memory for a %llu-byte payload", c->label,
                   (unsigned long long)c->cur.payload_len);
    hpl__conn_close(c, HPL_ENOMEM);
    return;
  }
  if (c->poff) memcpy(c->pbuf, c->fr.msg, c->poff);
  c->pgot = 0;
}

/* Payload bytes that arrived in rbuf (not direct). Returns bytes consumed,
 * which is less than len only when the sink has no room. */
static size_t conn_on_payload(hpl__conn *c, const uint8_t *p, size_t len) {
  if (!c->o.stream_payloads) {
    memcpy(c->pbuf + c->poff + c->pgot, p, len);
    if (c->rx.on) hpl__fmac_add(&c->rx, p, len);
    c->pgot += len;
    if (c->pgot == c->cur.payload_len) conn_buffered_done(c, c->pbuf + c->poff, c->pgot);
    return len;
  }
  return conn_stream_put(c, p, len);
}

/* Plaintext stream bytes to the sink, as it has room. Returns bytes
 * taken; fewer than len only when the sink has no room. */
static size_t conn_stream_put(hpl__conn *c, const uint8_t *p, size_t len) {
  size_t used = 0;
  while (used < len && !c->closing) {
    size_t room = 0;
    uint8_t *dst = c->sink.buf(c, c->sink.arg, c->pgot, &room);
    if (!dst || room == 0) break;
    size_t n = len - used < room ? len - used : room;
    memcpy(dst, p + used, n);
    uint64_t off = c->pgot;
    c->pgot += n;
    used += n;
    int last = c->pgot == c->cur.payload_len;
    c->sink.got(c, c->sink.arg, off, n);
    if (last) conn_frame_done(c);
  }
  return used;
}

/* Run the framer over unprocessed bytes in rbuf. Stops early when a sink
 * pauses (bytes stay in rbuf) or the connection closes. */
static void conn_process(hpl__conn *c) {
  if (c->hs != HPL__HS_OPEN && !hpl__conn_handshake(c)) {
    if (c->rpos == c->rlen) c->rpos = c->rlen = 0;
    return;
  }
  while ((c->rpos < c->rlen || c->sout < c->slen) && !c->closing) {
    /* output over its bound (uvconn_out.c), or held by the owner: no new
     * frame until that ends */
    if ((c->out_over || c->held_by_owner) && c->fr.state == 0 && c->fr.hhave == 0) return;
    int ev;
    const uint8_t *chunk = NULL;
    size_t clen = 0;
    if (c->srx_left || c->sout < c->slen) { /* a sealed stream's records */
      c->rpos += conn_sealed_in(c, c->rbuf + c->rpos, c->rlen - c->rpos);
      if (c->sout < c->slen && !c->closing) {
        c->paused = 1;
        return;
      }
      continue;
    }
    /* A streamed payload's bytes after its message in rbuf (or a paused
     * chunk) go through the sink only. The framer moves past them first,
     * so that a sink asking from its got() of the last bytes finds the
     * frame over (hpl__conn_between_frames: a puller parks its connection
     * there); what the sink leaves is given back. */
    if (c->fr.state == 2 && c->cur_msg && c->o.stream_payloads) {
      uint64_t left = hpl__framer_payload_left(&c->fr);
      size_t avail = c->rlen - c->rpos;
      size_t want = avail < left ? avail : (size_t)left;
      hpl__framer_payload_skip(&c->fr, want);
      size_t used = conn_on_payload(c, c->rbuf + c->rpos, want);
      c->rpos += used;
      if (used < want) {
        hpl__framer_payload_unskip(&c->fr, want - used);
        c->paused = 1;
        return;
      }
      continue;
    }
    long r = hpl__framer_feed(&c->fr, c->rbuf + c->rpos, c->rlen - c->rpos, &ev, &chunk, &clen);
    if (r < 0) {
      hpl__conn_fail(c, c->fr.why ? c->fr.why : "bad frame");
      return;
    }
    c->rpos += (size_t)r;
    if (ev == HPL__FR_MSG) {
      conn_on_msg(c);
      if (!conn_frame_budget(c) && c->rpos < c->rlen && !c->closing) {
        conn_yield(c); /* fairness: the rest waits for the next turn */
        return;
      }
    } else if (ev == HPL__FR_PAYLOAD) {
      if (!c->cur_msg && !c->pbuf) continue; /* frame already failed */
      /* buffered mode consumes everything; stream mode may pause */
      size_t used = conn_on_payload(c, chunk, clen);
      if (used < clen) {
        /* un-consume the rest: give it back to the framer and rbuf */
        size_t back = clen - used;
        c->rpos -= back;
        hpl__framer_payload_unskip(&c->fr, back);
        c->paused = 1;
        return;
      }
    }
  }
  if (c->rpos == c->rlen) c->rpos = c->rlen = 0;
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  hpl__conn *c = h->data;
  (void)suggested;
  c->direct = 0;
  c->sink_full = 0;
  /* A payload's rest of at most HPL__CONN_DIRECT_MIN bytes comes through
   * rbuf instead (a small copy: a read that fills its buffer exactly makes
   * libuv read once more, to find nothing) */
  if (c->o.stream_payloads && c->have_sink &&
      hpl__framer_payload_left(&c->fr) > HPL__CONN_DIRECT_MIN && c->rpos == c->rlen) {
    size_t room = 0;
    uint8_t *dst = c->sink.buf(c, c->sink.arg, c->pgot, &room);
    uint64_t left = hpl__framer_payload_left(&c->fr);
    if (!dst || room == 0) {
      buf->base = NULL;
      buf->len = 0; /* -> UV_ENOBUFS: pause */
      c->sink_full = 1;
      return;
    }
    if (room > left) room = (size_t)left;
    if (room > HPL__CONN_MAX_DIRECT) room = HPL__CONN_MAX_DIRECT;
    c->direct = 1;
    buf->base = (char *)dst;
    buf->len = room;
    return;
  }
  if (c->rpos == c->rlen) {
    c->rpos = c->rlen = 0;
  } else if (c->rpos > 0 && c->rlen == c->rcap) { /* make room behind what is left */
    memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
    c->rlen -= c->rpos;
    c->rpos = 0;
  }
  buf->base = (char *)c->rbuf + c->rlen;
  buf->len = c->rcap - c->rlen;
  if (buf->len == 0) buf->base = NULL; /* -> UV_ENOBUFS: the backlog first */
}

static void conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  hpl__conn *c = s->data;
  if (c->closing) return;
  if (nread == UV_ENOBUFS) {
    if (!c->sink_full) { /* rbuf full of frames not handled yet */
      conn_yield(c);
      return;
    }
    uv_read_stop(s);
    c->reading = 0;
    c->paused = 1;
    return;
  }
  if (nread < 0) {
    if (nread != UV_EOF) HPL__LOG_DEBUG("%s: read error: %s", c->label, uv_strerror((int)nread));
    if (c->hs != HPL__HS_OPEN) { /* gone before it proved anything: a failed handshake */
      hpl__conn_hs_failed(c, "the peer left during the handshake");
    }
    hpl__conn_close(c, HPL_ECONN);
    return;
  }
  if (nread == 0) return;
  if (c->direct) {
    c->direct = 0;
    uint64_t off = c->pgot;
    hpl__framer_payload_skip(&c->fr, (uint64_t)nread);
    c->pgot += (uint64_t)nread;
    int last = c->pgot == c->cur.payload_len;
    c->sink.got(c, c->sink.arg, off, (size_t)nread);
    if (last && !c->closing) conn_frame_done(c);
    return;
  }
  if (c->hs == HPL__HS_OPEN) hpl__record_add(&c->rec, c->rbuf + c->rlen, (size_t)nread);
  c->rlen += (size_t)nread;
  conn_process(c);
  if (c->closing) return;
  if (c->paused && c->reading) {
    uv_read_stop(s);
    c->reading = 0;
  }
  hpl__conn_track_frame(c);
}

void hpl__conn_read_start(hpl__conn *c) {
  if (c->reading || c->closing || c->out_over || c->held_by_owner) return;
  int rc = uv_read_start(c->s, conn_alloc, conn_read);
  if (rc) {
    HPL__LOG_WARN("%s: cannot read: %s", c->label, uv_strerror(rc));
    hpl__conn_close(c, HPL_ECONN);
    return;
  }
  c->reading = 1;
}

void hpl__conn_resume(hpl__conn *c) {
  if (c->closing || !c->paused) return;
  c->paused = 0;
  conn_process(c); /* leftover bytes first */
  if (!c->paused && !c->closing && !(c->idle && uv_is_active((uv_handle_t *)c->idle)))
    hpl__conn_read_start(c);
}

void hpl__conn_recv_payload(hpl__conn *c, const hpl__sink *sink) {
  c->sink = *sink;
  c->have_sink = 1;
  c->pgot = 0;
}
