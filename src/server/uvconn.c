/* uvconn.c - framed connections on libuv streams (see uvconn.h). */
#include "uvconn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>
#include <utlist.h>

#include "fanout.h"
#include "hoplite.h"
#include "log.h"
#include "record.h"
#include "trace.h"
#include "util.h"

#define CONN_RBUF 65536
#define CONN_MAX_DIRECT (8u << 20) /* largest single read into a sink */

/* Handshake states (auth.h). */
enum { HS_DONE = 0, HS_HELLO, HS_PROOF, HS_CHAL };

struct hpl__conn {
  uv_stream_t *s;
  hpl__conn_opts o;
  char label[64];
  hpl__framer fr;
  uint8_t *rbuf;
  size_t rpos, rlen;  /* unprocessed bytes in rbuf (kept while a sink is paused) */
  int direct;         /* the current read goes straight into the sink */
  int sink_full;      /* the last alloc found the sink without room */
  int reading;        /* uv_read_start is active */
  int paused;         /* the sink had no room */
  int closing;
  int close_status;
  /* current frame, between its message and the end of its payload */
  hpl__frame_hdr cur;
  ProtobufCMessage *cur_msg;
  uint8_t *pbuf;     /* buffered mode */
  uint64_t pgot;
  int have_sink;
  hpl__sink sink;
  size_t wq_bytes;
  /* the handshake (auth.h): nothing is framed or sent before it is done */
  int hs;                      /* HS_* */
  int role;                    /* the opener's role, once authenticated */
  hpl__auth_hs ahs;
  uint8_t hsbuf[HPL__AUTH_CHALLENGE_LEN];
  size_t hshave, hswant;
  struct conn_wreq *held, *held_tail; /* writes made before the handshake ended */
  /* limits: the handshake's and a frame's time, frames per loop turn */
  uv_timer_t *timer;
  uint64_t frame_since_ms; /* a frame began arriving (0: between frames) */
  uint64_t turn_ms;        /* loop time of the turn frames are counted in */
  unsigned turn_frames;
  uv_idle_t *idle;         /* frames wait in rbuf for the next loop turn */
  /* corked writes (opts.cork): small frames made during one loop turn go
   * out together, flushed before the loop polls and after it has run the
   * I/O callbacks (so nothing waits across a poll) */
  struct conn_wreq *cork, *cork_tail;
  unsigned cork_n;
  size_t cork_bytes;
  uv_prepare_t *cork_prep;
  uv_check_t *cork_chk;
  struct hpl__conn *cork_prev, *cork_next; /* the corked connections, in order */
  int cork_listed;
  /* a sendfile in progress (hpl__conn_sendfile): the socket is watched
   * through a duplicate of its fd, which libuv's stream does not own */
  uv_poll_t *sf_poll;
  int sf_fd;               /* the duplicate (-1: none yet) */
  int sf_in;               /* the file being sent */
  uint64_t sf_off, sf_left;
  hpl__conn_write_cb sf_cb;
  void *sf_arg;
  int handles;             /* handles (stream, timer, idle) not yet closed */
  hpl__record rec;         /* $HPL_RECORD_DIR: frames received, for fuzz corpora */
};

typedef struct conn_wreq {
  uv_write_t req;
  hpl__conn *c;
  hpl__conn_write_cb cb;
  void *arg;
  uint8_t *owned;
  size_t bytes;
  struct conn_wreq *next; /* held before the handshake ended, or corked */
  uv_buf_t bufs[2];
  unsigned nbufs;
} conn_wreq;

static void conn_read_start(hpl__conn *c);
static void conn_process(hpl__conn *c);
static void conn_flush(void);
static void conn_flush_one(hpl__conn *c);
static void conn_flush_for(hpl__conn *c);
static void conn_flush_fanout(void);

/* Connections with corked writes, in the order of their first one: they
 * are flushed in that order, so messages keep the order they were made in
 * across connections too (a store's note to the directory goes before the
 * reply that lets its client tell others). Not in a process that started
 * the fan-out (fanout.h; the directory): there a turn with many corked
 * connections writes them at once, each one's own frames still in order.
 * One loop per process. */
static hpl__conn *cork_list;
static int cork_flushing;

/* A loop turn flushes at most this much per connection at once. */
#define CORK_MAX_FRAMES 64
#define CORK_MAX_BYTES (256u * 1024)
static int conn_submit(hpl__conn *c, conn_wreq *w, uv_buf_t *bufs, unsigned nbufs);
static void conn_release_held(hpl__conn *c);

void *hpl__conn_data(const hpl__conn *c) { return c->o.data; }
void hpl__conn_set_data(hpl__conn *c, void *data) { c->o.data = data; }
const char *hpl__conn_label(const hpl__conn *c) { return c->label; }
uv_stream_t *hpl__conn_stream(hpl__conn *c) { return c->s; }
int hpl__conn_closing(const hpl__conn *c) { return c->closing; }
size_t hpl__conn_write_queue(const hpl__conn *c) { return c->wq_bytes; }
int hpl__conn_role(const hpl__conn *c) { return c->hs == HS_DONE ? c->role : 0; }

/* One of the connection's handles closed; the last one frees it. */
static void conn_handle_closed(uv_handle_t *h) {
  hpl__conn *c = h->data;
  if (h == (uv_handle_t *)c->s) {
    if (c->o.on_close) c->o.on_close(c, c->close_status);
  } else {
    free(h);
  }
  if (--c->handles > 0) return;
  hpl__record_close(&c->rec);
  if (c->cur_msg) protobuf_c_message_free_unpacked(c->cur_msg, NULL);
  free(c->pbuf);
  free(c->rbuf);
  hpl__framer_free(&c->fr);
  free(c->s);
  free(c);
}

void hpl__conn_close(hpl__conn *c, int status) {
  if (c->closing) return;
  if (c->cork) { /* a last reply goes before the close (and what was corked before it) */
    conn_flush_for(c);
    if (c->closing) return; /* the flush failed and closed it */
  }
  c->closing = 1;
  c->close_status = status;
  if (c->reading) uv_read_stop(c->s);
  c->reading = 0;
  /* writes held for the handshake never go: their owners hear so */
  while (c->held) {
    conn_wreq *w = c->held;
    c->held = w->next;
    c->wq_bytes -= w->bytes;
    if (w->cb) w->cb(c, HPL_ECONN, w->arg);
    free(w->owned);
    free(w);
  }
  while (c->cork) { /* only left if the flush itself closed the connection */
    conn_wreq *w = c->cork;
    c->cork = w->next;
    free(w->owned);
    free(w);
  }
  if (c->sf_left) { /* an unfinished sendfile: its owner hears so */
    c->wq_bytes -= c->sf_left;
    c->sf_left = 0;
    hpl__conn_write_cb cb = c->sf_cb;
    c->sf_cb = NULL;
    if (cb) cb(c, HPL_ECONN, c->sf_arg);
  }
  if (c->sf_poll) { /* uv_close stops the polling at once: the fd may go */
    uv_close((uv_handle_t *)c->sf_poll, conn_handle_closed);
    close(c->sf_fd);
    c->sf_fd = -1;
  }
  if (c->timer) uv_close((uv_handle_t *)c->timer, conn_handle_closed);
  if (c->idle) uv_close((uv_handle_t *)c->idle, conn_handle_closed);
  if (c->cork_prep) uv_close((uv_handle_t *)c->cork_prep, conn_handle_closed);
  if (c->cork_chk) uv_close((uv_handle_t *)c->cork_chk, conn_handle_closed);
  uv_close((uv_handle_t *)c->s, conn_handle_closed);
}

/* ------------------------------------------------------------------ limits */

static void conn_timer_fired(uv_timer_t *t) {
  hpl__conn *c = t->data;
  if (c->closing) return;
  uint64_t now = hpl__now_ms();
  if (c->hs != HS_DONE) {
    LOG_INFO("%s: no handshake within %d ms: closing", c->label, HPL__AUTH_TIMEOUT_MS);
    if (c->o.auth_failures) (*c->o.auth_failures)++;
    hpl__conn_close(c, HPL_ETIMEDOUT);
    return;
  }
  if (!c->frame_since_ms) return;
  if (now - c->frame_since_ms >= HPL__CONN_FRAME_TIMEOUT_MS) {
    LOG_WARN("%s: a frame has been arriving for %llu ms: closing (peer too slow)", c->label,
             (unsigned long long)(now - c->frame_since_ms));
    hpl__conn_close(c, HPL_ETIMEDOUT);
    return;
  }
  uv_timer_start(t, conn_timer_fired, c->frame_since_ms + HPL__CONN_FRAME_TIMEOUT_MS - now, 0);
}

static void conn_timer_arm(hpl__conn *c, uint64_t ms) {
  if (!c->timer) {
    if (!(c->timer = malloc(sizeof *c->timer))) return;
    uv_timer_init(c->s->loop, c->timer);
    c->timer->data = c;
    c->handles++;
  }
  uv_timer_start(c->timer, conn_timer_fired, ms, 0);
}

/* After reading: a frame that has begun and not ended must end within
 * HPL__CONN_FRAME_TIMEOUT_MS (a streamed payload is its owner's to watch). */
static void conn_track_frame(hpl__conn *c) {
  int mid = c->fr.state != 0 || c->fr.hhave > 0;
  if (!mid || (c->o.stream_payloads && c->have_sink)) {
    c->frame_since_ms = 0;
    return;
  }
  if (c->frame_since_ms) return;
  c->frame_since_ms = hpl__now_ms();
  conn_timer_arm(c, HPL__CONN_FRAME_TIMEOUT_MS);
}

static void conn_idle_turn(uv_idle_t *h) {
  hpl__conn *c = h->data;
  uv_idle_stop(h);
  if (c->closing) return;
  conn_process(c);
  if (c->closing) return;
  conn_track_frame(c);
  if (!c->paused && !uv_is_active((uv_handle_t *)h)) conn_read_start(c);
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

/* One more frame this turn; 0 once the budget is used up. */
static int conn_frame_budget(hpl__conn *c) {
  uint64_t now = uv_now(c->s->loop);
  if (c->turn_ms != now) {
    c->turn_ms = now;
    c->turn_frames = 0;
  }
  return ++c->turn_frames <= HPL__CONN_FRAME_BUDGET;
}

/* ------------------------------------------------------------------ handshake */

/* Send handshake bytes (copied), ahead of everything held. */
static void conn_send_raw(hpl__conn *c, const uint8_t *p, size_t len) {
  conn_wreq *w = calloc(1, sizeof *w);
  uint8_t *copy = malloc(len);
  if (!w || !copy) {
    free(w);
    free(copy);
    hpl__conn_close(c, HPL_ENOMEM);
    return;
  }
  memcpy(copy, p, len);
  w->owned = copy;
  uv_buf_t b = uv_buf_init((char *)copy, (unsigned)len);
  int hs = c->hs;
  c->hs = HS_DONE; /* let it through */
  conn_submit(c, w, &b, 1);
  if (!c->closing) c->hs = hs;
}

static void conn_auth_failed(hpl__conn *c, const char *why) {
  LOG_INFO("%s: authentication failed (%s): closing", c->label, why);
  if (c->o.auth_failures) (*c->o.auth_failures)++;
  hpl__conn_close(c, HPL_EAUTH);
}

static void conn_hs_done(hpl__conn *c) {
  c->hs = HS_DONE;
  hpl__record_add(&c->rec, c->rbuf + c->rpos, c->rlen - c->rpos); /* frames behind it */
  c->role = c->ahs.role;
  c->hshave = c->hswant = 0;
  if (c->timer) uv_timer_stop(c->timer);
  conn_release_held(c);
}

/* Writes held (for the handshake, or behind a sendfile) go now, in the
 * order they were made. */
static void conn_release_held(hpl__conn *c) {
  while (c->held && !c->closing && c->hs == HS_DONE && !c->sf_left) {
    conn_wreq *w = c->held;
    c->held = w->next;
    c->wq_bytes -= w->bytes;
    conn_submit(c, w, w->bufs, w->nbufs);
  }
}

/* A whole handshake message is in hsbuf: check it and answer. */
static void conn_hs_step(hpl__conn *c) {
  uint8_t out[HPL__AUTH_CHALLENGE_LEN], rk[HPL__AUTH_KEY_LEN];
  c->hshave = 0;
  switch (c->hs) {
    case HS_HELLO:
      if (hpl__auth_accept(&c->ahs, c->o.auth, c->o.auth_roles, c->hsbuf, out) != 0) {
        conn_auth_failed(c, "no hoplite handshake, or a role this port does not take");
        return;
      }
      conn_send_raw(c, out, HPL__AUTH_CHALLENGE_LEN);
      c->hs = HS_PROOF;
      c->hswant = HPL__AUTH_PROOF_LEN;
      return;
    case HS_PROOF:
      if (hpl__auth_verify(&c->ahs, c->o.auth, c->hsbuf) != 0) {
        conn_auth_failed(c, "the peer does not hold the cluster secret");
        return;
      }
      conn_hs_done(c);
      return;
    case HS_CHAL:
      hpl__auth_role_key(c->o.auth, c->o.auth_role, rk);
      if (hpl__auth_answer(&c->ahs, rk, c->hsbuf, out) != 0) {
        conn_auth_failed(c, "the peer does not hold the cluster secret");
        return;
      }
      conn_send_raw(c, out, HPL__AUTH_PROOF_LEN);
      conn_hs_done(c);
      return;
  }
}

/* Feed buffered bytes to the handshake. 1 once it is done (the rest of
 * rbuf is frames), 0 while it needs more bytes or failed. */
static int conn_handshake(hpl__conn *c) {
  while (c->hs != HS_DONE && c->rpos < c->rlen && !c->closing) {
    size_t n = c->hswant - c->hshave;
    if (n > c->rlen - c->rpos) n = c->rlen - c->rpos;
    memcpy(c->hsbuf + c->hshave, c->rbuf + c->rpos, n);
    c->hshave += n;
    c->rpos += n;
    if (c->hshave == c->hswant) conn_hs_step(c);
  }
  return c->hs == HS_DONE && !c->closing;
}

void hpl__conn_fail(hpl__conn *c, const char *why) {
  if (c->closing) return;
  LOG_WARN("%s: protocol error, closing connection: %s", c->label, why);
  hpl__conn_close(c, HPL_EPROTO);
}

/* A frame whose payload (if any) has been fully delivered is finished. */
static void conn_frame_done(hpl__conn *c) {
  if (c->cur_msg) protobuf_c_message_free_unpacked(c->cur_msg, NULL);
  c->cur_msg = NULL;
  free(c->pbuf);
  c->pbuf = NULL;
  c->pgot = 0;
  c->have_sink = 0;
}

/* Header and message complete: unpack and dispatch (or start buffering). */
static void conn_on_msg(hpl__conn *c) {
  c->cur = c->fr.hdr;
  c->cur_msg = hpl__msg_unpack(c->cur.type, c->fr.msg, c->cur.msg_len);
  if (!c->cur_msg) {
    char why[96];
    snprintf(why, sizeof why, "cannot decode %s message (%u bytes)", hpl__msg_name(c->cur.type),
             c->cur.msg_len);
    hpl__conn_fail(c, why);
    return;
  }
  if (c->cur.payload_len == 0) {
    c->o.on_frame(c, &c->cur, c->cur_msg, NULL, 0);
    conn_frame_done(c);
    return;
  }
  if (c->o.stream_payloads) {
    c->have_sink = 0;
    c->o.on_frame(c, &c->cur, c->cur_msg, NULL, c->cur.payload_len);
    if (!c->closing && !c->have_sink) hpl__conn_fail(c, "unexpected payload");
    return;
  }
  c->pbuf = malloc(c->cur.payload_len);
  if (!c->pbuf) {
    LOG_ERROR("%s: out of memory for a %llu-byte payload", c->label,
              (unsigned long long)c->cur.payload_len);
    hpl__conn_close(c, HPL_ENOMEM);
    return;
  }
  c->pgot = 0;
}

/* Payload bytes that arrived in rbuf (not direct). Returns bytes consumed,
 * which is less than len only when the sink has no room. */
static size_t conn_on_payload(hpl__conn *c, const uint8_t *p, size_t len) {
  if (!c->o.stream_payloads) {
    memcpy(c->pbuf + c->pgot, p, len);
    c->pgot += len;
    if (c->pgot == c->cur.payload_len) {
      c->o.on_frame(c, &c->cur, c->cur_msg, c->pbuf, c->pgot);
      conn_frame_done(c);
    }
    return len;
  }
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
  if (c->hs != HS_DONE && !conn_handshake(c)) {
    if (c->rpos == c->rlen) c->rpos = c->rlen = 0;
    return;
  }
  while (c->rpos < c->rlen && !c->closing) {
    int ev;
    const uint8_t *chunk = NULL;
    size_t clen = 0;
    /* A paused payload chunk is re-fed through the sink only. */
    if (c->fr.state == 2 && c->cur_msg && c->o.stream_payloads) {
      uint64_t left = hpl__framer_payload_left(&c->fr);
      size_t avail = c->rlen - c->rpos;
      size_t want = avail < left ? avail : (size_t)left;
      size_t used = conn_on_payload(c, c->rbuf + c->rpos, want);
      hpl__framer_payload_skip(&c->fr, used);
      c->rpos += used;
      if (used < want) {
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
      if (!c->cur_msg) continue; /* frame already failed */
      /* buffered mode consumes everything; stream mode may pause */
      size_t used = conn_on_payload(c, chunk, clen);
      if (used < clen) {
        /* un-consume the rest: give it back to the framer and rbuf */
        size_t back = clen - used;
        c->rpos -= back;
        c->fr.pleft += back;
        c->fr.state = 2;
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
  if (c->o.stream_payloads && c->have_sink && hpl__framer_payload_left(&c->fr) > 0 &&
      c->rpos == c->rlen) {
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
    if (room > CONN_MAX_DIRECT) room = CONN_MAX_DIRECT;
    c->direct = 1;
    buf->base = (char *)dst;
    buf->len = room;
    return;
  }
  if (c->rpos == c->rlen) {
    c->rpos = c->rlen = 0;
  } else if (c->rpos > 0 && c->rlen == CONN_RBUF) { /* make room behind what is left */
    memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
    c->rlen -= c->rpos;
    c->rpos = 0;
  }
  buf->base = (char *)c->rbuf + c->rlen;
  buf->len = CONN_RBUF - c->rlen;
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
    if (nread != UV_EOF) LOG_DEBUG("%s: read error: %s", c->label, uv_strerror((int)nread));
    if (c->hs != HS_DONE) { /* gone before it proved anything: a failed handshake */
      LOG_INFO("%s: the peer left during the handshake", c->label);
      if (c->o.auth_failures) (*c->o.auth_failures)++;
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
  if (c->hs == HS_DONE) hpl__record_add(&c->rec, c->rbuf + c->rlen, (size_t)nread);
  c->rlen += (size_t)nread;
  conn_process(c);
  if (c->closing) return;
  if (c->paused && c->reading) {
    uv_read_stop(s);
    c->reading = 0;
  }
  conn_track_frame(c);
}

static void conn_read_start(hpl__conn *c) {
  if (c->reading || c->closing) return;
  int rc = uv_read_start(c->s, conn_alloc, conn_read);
  if (rc) {
    LOG_WARN("%s: cannot read: %s", c->label, uv_strerror(rc));
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
    conn_read_start(c);
}

void hpl__conn_recv_payload(hpl__conn *c, const hpl__sink *sink) {
  c->sink = *sink;
  c->have_sink = 1;
  c->pgot = 0;
}

hpl__conn *hpl__conn_new(uv_stream_t *s, const hpl__conn_opts *o) {
  hpl__conn *c = calloc(1, sizeof *c);
  uint8_t *rbuf = malloc(CONN_RBUF);
  if (!c || !rbuf) {
    free(c);
    free(rbuf);
    uv_close((uv_handle_t *)s, (uv_close_cb)free);
    return NULL;
  }
  c->sf_fd = -1;
  c->s = s;
  c->o = *o;
  static int cork_off = -1; /* HOPLITE_NO_CORK=1: every write at once (for comparisons) */
  if (cork_off < 0) cork_off = getenv("HOPLITE_NO_CORK") != NULL;
  if (cork_off) c->o.cork = 0;
  c->rbuf = rbuf;
  snprintf(c->label, sizeof c->label, "%s", o->label ? o->label : "conn");
  hpl__framer_init(&c->fr, &o->lim);
  s->data = c;
  c->handles = 1;
  hpl__record_open(&c->rec, c->label);
  if (o->auth && o->auth->on) {
    conn_timer_arm(c, HPL__AUTH_TIMEOUT_MS);
    if (o->auth_role) { /* we open: HELLO, then wait for the CHALLENGE */
      uint8_t hello[HPL__AUTH_HELLO_LEN];
      hpl__auth_open(&c->ahs, o->auth_role, hello);
      conn_send_raw(c, hello, sizeof hello);
      c->hs = HS_CHAL;
      c->hswant = HPL__AUTH_CHALLENGE_LEN;
    } else {
      c->hs = HS_HELLO;
      c->hswant = HPL__AUTH_HELLO_LEN;
    }
  }
  conn_read_start(c);
  return c;
}

static void conn_write_done(uv_write_t *req, int status) {
  conn_wreq *w = (conn_wreq *)req;
  hpl__conn *c = w->c;
  c->wq_bytes -= w->bytes;
  if (status && !c->closing) {
    LOG_DEBUG("%s: write failed: %s", c->label, uv_strerror(status));
    hpl__conn_close(c, HPL_ECONN);
  }
  if (w->cb) w->cb(c, status ? HPL_ECONN : 0, w->arg);
  free(w->owned);
  free(w);
}

/* Queue w (its bufs as given) as a libuv write request. */
static int conn_queue_write(hpl__conn *c, conn_wreq *w, uv_buf_t *bufs, unsigned nbufs) {
  int rc = uv_write(&w->req, c->s, bufs, nbufs, conn_write_done);
  if (rc) {
    free(w->owned);
    free(w);
    hpl__conn_close(c, HPL_ECONN);
    return HPL_ECONN;
  }
  c->wq_bytes += w->bytes;
  return 0;
}

static void cork_prep_cb(uv_prepare_t *h) { (void)h, conn_flush(); }
static void cork_chk_cb(uv_check_t *h) { (void)h, conn_flush(); }

/* Flush every corked connection, in order (with a fan-out, the ones with
 * nothing queued before their corked frames go first, all at once). */
static void conn_flush(void) {
  if (cork_flushing) return;
  cork_flushing = 1;
  if (hpl__fanout_on()) conn_flush_fanout();
  while (cork_list) {
    hpl__conn *c = cork_list;
    DL_DELETE2(cork_list, c, cork_prev, cork_next);
    c->cork_listed = 0;
    conn_flush_one(c);
  }
  cork_flushing = 0;
}

/* Flush before c writes otherwise: everything (in order), or, inside a
 * flush, c itself at once. */
static void conn_flush_for(hpl__conn *c) {
  if (!cork_flushing) {
    conn_flush();
    return;
  }
  if (c->cork_listed) {
    DL_DELETE2(cork_list, c, cork_prev, cork_next);
    c->cork_listed = 0;
  }
  conn_flush_one(c);
}

/* Take c's corked frames off it: their list, and in `iov` (k of them) the
 * frames one write can send now, none if something else is queued. */
static conn_wreq *flush_take(hpl__conn *c, struct iovec *iov, unsigned *k) {
  if (c->cork_prep) uv_prepare_stop(c->cork_prep);
  if (c->cork_chk) uv_check_stop(c->cork_chk);
  conn_wreq *list = c->cork;
  c->cork = c->cork_tail = NULL;
  c->cork_n = 0;
  c->wq_bytes -= c->cork_bytes;
  c->cork_bytes = 0;
  *k = 0;
  if (c->wq_bytes) return list;
  for (conn_wreq *w = list; w && *k < CORK_MAX_FRAMES; w = w->next) {
    iov[*k].iov_base = w->bufs[0].base;
    iov[*k].iov_len = w->bufs[0].len;
    (*k)++;
  }
  return list;
}

/* After `done` bytes of list went: free what went, queue the rest in order. */
static void flush_finish(hpl__conn *c, conn_wreq *list, size_t done) {
  while (list) {
    conn_wreq *w = list;
    list = w->next;
    if (done >= w->bytes) {
      done -= w->bytes;
      free(w->owned);
      free(w);
      continue;
    }
    w->bufs[0].base += done;
    w->bufs[0].len -= done;
    w->bytes -= done;
    done = 0;
    if (c->closing) { /* an earlier write failed and closed it */
      free(w->owned);
      free(w);
      continue;
    }
    uv_buf_t rest = w->bufs[0]; /* uv_write copies the array */
    conn_queue_write(c, w, &rest, 1);
  }
}

/* Send what c has corked: one write for all of it when nothing else is
 * queued; what the socket does not take becomes write requests, in order. */
static void conn_flush_one(hpl__conn *c) {
  struct iovec iov[CORK_MAX_FRAMES];
  unsigned k;
  conn_wreq *list = flush_take(c, iov, &k);
  hpl__trace("flush", NULL);
  int n = k ? uv_try_write(c->s, (const uv_buf_t *)iov, k) : 0;
  flush_finish(c, list, n > 0 ? (size_t)n : 0);
}

/* Whether c may go in a fan-out batch (nothing queued ahead of its corked
 * frames), and its socket in *fd. */
static int fanout_fd(hpl__conn *c, uv_os_fd_t *fd) {
  return c->wq_bytes == c->cork_bytes && uv_fileno((uv_handle_t *)c->s, fd) == 0;
}

/* The corked connections with nothing queued before their frames, up to
 * FANOUT_MAX of them, written at once by hpl__fanout_write (a server
 * answering many waiting clients in one turn); the others stay listed.
 * Their order across connections is not kept: only servers that do not
 * need it start the fan-out. The loop waits for the batch, which is one
 * nonblocking send per connection; the helper's part of it runs meanwhile. */
#define FANOUT_MAX 256
static void conn_flush_fanout(void) {
  static hpl__fanout_item it[FANOUT_MAX];
  static hpl__conn *cs[FANOUT_MAX];
  static conn_wreq *lists[FANOUT_MAX];
  static struct iovec iov[FANOUT_MAX][CORK_MAX_FRAMES];
  size_t n = 0, eligible = 0;
  uv_os_fd_t fd;
  for (hpl__conn *c = cork_list; c && eligible < HPL__FANOUT_MIN; c = c->cork_next)
    eligible += fanout_fd(c, &fd);
  if (eligible < HPL__FANOUT_MIN) return;
  for (hpl__conn *c = cork_list, *next; c && n < FANOUT_MAX; c = next) {
    next = c->cork_next;
    if (!fanout_fd(c, &fd)) continue;
    DL_DELETE2(cork_list, c, cork_prev, cork_next);
    c->cork_listed = 0;
    unsigned k;
    cs[n] = c;
    lists[n] = flush_take(c, iov[n], &k);
    it[n] = (hpl__fanout_item){.fd = fd, .iov = iov[n], .iovcnt = k};
    n++;
  }
  hpl__trace("flush.fanout", NULL);
  hpl__fanout_write(it, n);
  for (size_t i = 0; i < n; i++)
    flush_finish(cs[i], lists[i], it[i].result > 0 ? (size_t)it[i].result : 0);
}

/* Cork w (a single owned buffer, nobody to tell). */
static int conn_cork(hpl__conn *c, conn_wreq *w, uv_buf_t buf) {
  if (!c->cork_prep) {
    uv_prepare_t *p = malloc(sizeof *p);
    uv_check_t *k = malloc(sizeof *k);
    if (!p || !k) {
      free(p);
      free(k);
      return -1;
    }
    uv_loop_t *loop = c->s->loop;
    uv_prepare_init(loop, p);
    uv_check_init(loop, k);
    p->data = k->data = c;
    c->cork_prep = p;
    c->cork_chk = k;
    c->handles += 2;
  }
  w->bufs[0] = buf;
  w->nbufs = 1;
  w->next = NULL;
  if (c->cork)
    c->cork_tail->next = w;
  else
    c->cork = w;
  c->cork_tail = w;
  c->cork_n++;
  c->cork_bytes += w->bytes;
  c->wq_bytes += w->bytes;
  if (c->cork_n == 1) {
    uv_prepare_start(c->cork_prep, cork_prep_cb);
    uv_check_start(c->cork_chk, cork_chk_cb);
    if (!c->cork_listed) {
      DL_APPEND2(cork_list, c, cork_prev, cork_next);
      c->cork_listed = 1;
    }
  }
  if (c->cork_n >= CORK_MAX_FRAMES || c->cork_bytes >= CORK_MAX_BYTES) conn_flush();
  return 0;
}

static int conn_submit(hpl__conn *c, conn_wreq *w, uv_buf_t *bufs, unsigned nbufs) {
  w->c = c;
  w->bytes = 0;
  for (unsigned i = 0; i < nbufs; i++) w->bytes += bufs[i].len;
  if (c->hs != HS_DONE || c->sf_left) { /* after the handshake (or sendfile), in order */
    for (unsigned i = 0; i < nbufs; i++) w->bufs[i] = bufs[i];
    w->nbufs = nbufs;
    w->next = NULL;
    if (c->held)
      c->held_tail->next = w;
    else
      c->held = w;
    c->held_tail = w;
    c->wq_bytes += w->bytes;
    return 0;
  }
  if (c->o.cork && !w->cb && nbufs == 1 && w->owned && conn_cork(c, w, bufs[0]) == 0) return 0;
  if (c->cork) {
    conn_flush_for(c); /* in order */
    if (c->closing) {
      free(w->owned);
      free(w);
      return HPL_ECONN;
    }
  }
  if (c->wq_bytes == 0 && !w->cb) {
    /* nothing queued and nobody to tell: write now, and queue only what
     * the socket did not take (a control reply usually goes whole, with
     * no write request and no poll-set change) */
    int n = uv_try_write(c->s, bufs, nbufs);
    if (n == (int)w->bytes) {
      free(w->owned);
      free(w);
      return 0;
    }
    for (unsigned i = 0; n > 0 && i < nbufs; i++) {
      size_t k = (size_t)n < bufs[i].len ? (size_t)n : bufs[i].len;
      bufs[i].base += k;
      bufs[i].len -= k;
      n -= (int)k;
      w->bytes -= k;
    }
  }
  return conn_queue_write(c, w, bufs, nbufs);
}

int hpl__conn_send(hpl__conn *c, unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                  const void *payload, uint64_t plen, int copy, hpl__conn_write_cb cb, void *arg) {
  if (c->closing) return HPL_ECONN;
  if ((copy || payload) && plen > UINT32_MAX) return HPL_ETOOBIG;
  size_t mlen = m ? protobuf_c_message_get_packed_size(m) : 0;
  size_t extra = copy && payload ? (size_t)plen : 0;
  conn_wreq *w = calloc(1, sizeof *w);
  uint8_t *buf = malloc(HPL__FRAME_HDR_LEN + mlen + extra + 1);
  if (!w || !buf) {
    free(w);
    free(buf);
    return HPL_ENOMEM;
  }
  hpl__frame_hdr h = {.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req_id,
                     .payload_len = plen};
  hpl__frame_encode_hdr(&h, buf);
  if (mlen) protobuf_c_message_pack(m, buf + HPL__FRAME_HDR_LEN);
  if (extra) memcpy(buf + HPL__FRAME_HDR_LEN + mlen, payload, (size_t)plen);
  w->owned = buf;
  w->cb = cb;
  w->arg = arg;
  uv_buf_t bufs[2];
  unsigned n = 1;
  bufs[0] = uv_buf_init((char *)buf, (unsigned)(HPL__FRAME_HDR_LEN + mlen + extra));
  if (!copy && plen && payload) bufs[n++] = uv_buf_init((char *)payload, (unsigned)plen);
  return conn_submit(c, w, bufs, n);
}

int hpl__conn_write(hpl__conn *c, const void *p, size_t len, hpl__conn_write_cb cb, void *arg) {
  if (c->closing) return HPL_ECONN;
  conn_wreq *w = calloc(1, sizeof *w);
  if (!w) return HPL_ENOMEM;
  w->cb = cb;
  w->arg = arg;
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
  return conn_submit(c, w, &b, 1);
}

/* Send what the socket takes of the pending sendfile: 0 when all went, 1
 * when the socket is full, or -errno. */
static int sf_push(hpl__conn *c, int sock) {
  while (c->sf_left) {
    off_t off = (off_t)c->sf_off;
    size_t n = c->sf_left > (1u << 30) ? (1u << 30) : (size_t)c->sf_left;
    ssize_t k = sendfile(sock, c->sf_in, &off, n);
    if (k > 0) {
      c->sf_off += (uint64_t)k;
      c->sf_left -= (uint64_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
    return k < 0 ? -errno : -EIO; /* 0: the file ended early */
  }
  return 0;
}

static void sf_writable(uv_poll_t *h, int status, int events) {
  (void)events;
  hpl__conn *c = h->data;
  if (c->closing || !c->sf_left) return;
  uint64_t before = c->sf_left;
  int rc = status < 0 ? -EIO : sf_push(c, c->sf_fd);
  c->wq_bytes -= (size_t)(before - c->sf_left);
  if (rc == 1) return; /* still full: wait for room again */
  uv_poll_stop(h);
  if (rc < 0) {
    LOG_DEBUG("%s: sendfile failed: %s", c->label, strerror(-rc));
    hpl__conn_close(c, HPL_ECONN); /* tells sf_cb */
    return;
  }
  hpl__conn_write_cb cb = c->sf_cb;
  c->sf_cb = NULL;
  conn_release_held(c);
  if (cb) cb(c, 0, c->sf_arg);
}

int hpl__conn_sendfile(hpl__conn *c, int fd, uint64_t off, size_t len, hpl__conn_write_cb cb,
                       void *arg) {
  if (c->closing) return HPL_ECONN;
  uv_os_fd_t sock;
  if (c->hs != HS_DONE || c->wq_bytes || c->cork || c->held || c->sf_left ||
      c->s->type != UV_TCP || uv_fileno((uv_handle_t *)c->s, &sock) != 0)
    return 1;
  if (!len) return 2;
  c->sf_in = fd;
  c->sf_off = off;
  c->sf_left = len;
  int rc = sf_push(c, sock);
  if (rc == 0) return 2;
  if (rc < 0) {
    int sent = c->sf_left != len;
    c->sf_left = 0;
    if (!sent && (rc == -EINVAL || rc == -ENOSYS || rc == -EOPNOTSUPP)) return 1;
    LOG_DEBUG("%s: sendfile failed: %s", c->label, strerror(-rc));
    hpl__conn_close(c, HPL_ECONN);
    return HPL_ECONN;
  }
  if (!c->sf_poll) { /* the first wait: a duplicate fd to watch for room */
    uv_poll_t *p = malloc(sizeof *p);
    int dfd = p ? dup(sock) : -1;
    if (dfd < 0 || uv_poll_init(c->s->loop, p, dfd) != 0) {
      if (dfd >= 0) close(dfd);
      free(p);
      c->sf_left = 0;
      hpl__conn_close(c, HPL_ECONN);
      return HPL_ECONN;
    }
    p->data = c;
    c->sf_poll = p;
    c->sf_fd = dfd;
    c->handles++;
  }
  c->sf_cb = cb;
  c->sf_arg = arg;
  c->wq_bytes += c->sf_left;
  uv_poll_start(c->sf_poll, UV_WRITABLE, sf_writable);
  return 0;
}

int hpl__conn_reply(hpl__conn *c, uint64_t req_id, int status, const char *detail) {
  Hplpb__Reply r = HPLPB__REPLY__INIT;
  r.status = status;
  r.detail = (char *)(detail ? detail : "");
  return hpl__conn_send(c, HPL__MSG_REPLY, req_id, &r.base, NULL, 0, 0, NULL, NULL);
}

uv_stream_t *hpl__conn_accept(uv_stream_t *server, char *peer, size_t plen) {
  int tcp = server->type == UV_TCP;
  uv_stream_t *t = malloc(tcp ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t));
  if (!t) return NULL;
  if (tcp)
    uv_tcp_init(server->loop, (uv_tcp_t *)t);
  else
    uv_pipe_init(server->loop, (uv_pipe_t *)t, 0);
  if (uv_accept(server, t) != 0) {
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    return NULL;
  }
  if (peer && plen) snprintf(peer, plen, "%s", tcp ? "?" : "");
  if (!tcp) return t;
  uv_tcp_nodelay((uv_tcp_t *)t, 1);
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (peer && plen && uv_tcp_getpeername((uv_tcp_t *)t, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET)
      uv_ip4_name((struct sockaddr_in *)&ss, peer, plen);
    else if (ss.ss_family == AF_INET6)
      uv_ip6_name((struct sockaddr_in6 *)&ss, peer, plen);
  }
  return t;
}
