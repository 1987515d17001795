/*
 * uvconn_int.h - the inside of a framed connection (uvconn.h), shared by
 * the files of the connection layer and by nothing else:
 *   uvconn.c        a connection's life: opening, closing, its handles;
 *   uvconn_hs.c     the handshake and its keys (auth.h);
 *   uvconn_read.c   reading and framing, with frames per loop turn;
 *   uvconn_timer.c  the time limits: the handshake's, a frame's;
 *   uvconn_write.c  writing: the write queue, writes held for the
 *                   handshake or a sendfile, corked writes and the list of
 *                   corked connections of each loop;
 *   uvconn_fd.c     writing straight to the socket's descriptor: the
 *                   fan-out of corked frames, sendfile(2);
 *   uvconn_accept.c accepting, with the connection limit;
 *   uvconn_admit.c  accepted connections in the handshake: their slots,
 *                   per address too, and summaries of failed handshakes;
 *   uvconn_out.c    the output bound: what each connection's queue holds,
 *                   pausing a peer that does not read, cutting one that
 *                   stays behind, the thread's total.
 * Event-loop thread only, like the connection itself.
 */
#ifndef HPL_UVCONN_INT_H
#define HPL_UVCONN_INT_H

#include <stdint.h>
#include <sys/uio.h>
#include <uv.h>

#include "record.h"
#include "uvconn.h"

#define HPL__CONN_MAX_DIRECT (8u << 20) /* largest single read into a sink */
#define HPL__CONN_DIRECT_MIN 4096u      /* a payload's rest up to this goes through rbuf */
#define HPL__CONN_SREC (HPL__FRAME_REC_HDR + HPL__FRAME_REC_MAX + HPL__FRAME_TAG_LEN)
/* A loop turn flushes at most this much per connection at once. */
#define HPL__CORK_MAX_FRAMES 64
#define HPL__CORK_MAX_BYTES (256u * 1024)

/* A connection's handshake (auth.h), one state machine (uvconn_hs.c):
 * HPL__HS_OPEN is where frames flow, from the start without a handshake or
 * once it succeeded; an acceptor goes OPEN -> HELLO (waits for the
 * opener's HELLO) -> PROOF (sent its CHALLENGE, waits for the PROOF) ->
 * OPEN, an opener OPEN -> CHAL (sent its HELLO, waits for the CHALLENGE)
 * -> OPEN. A failure closes the connection in the state it is in. */
typedef enum hpl__conn_hs {
  HPL__HS_OPEN = 0,
  HPL__HS_HELLO,
  HPL__HS_PROOF,
  HPL__HS_CHAL
} hpl__conn_hs;

/* One write: libuv's request, what it sends and whom to tell. */
typedef struct hpl__conn_wreq {
  uv_write_t req;
  hpl__conn *c;
  hpl__conn_write_cb cb;
  void *arg;
  uint8_t *owned;
  size_t bytes;
  size_t charged; /* counted in c->out_mem (uvconn_out.c): 0 until submitted */
  struct hpl__conn_wreq *prev, *next; /* held before the handshake ended, or corked (utlist) */
  /* a frame made before the handshake ended: its tag is made when it is
   * released (the session's keys exist then), in the order frames were made */
  int need_tag;
  hpl__frame_hdr tag_hdr;     /* its header as encoded (flags included) */
  uint8_t *tag_at;            /* its message is the tag_hdr.msg_len bytes before */
  const uint8_t *tag_payload; /* covered payload (NULL: none) */
  uv_buf_t bufs[2];
  unsigned nbufs;
  int now_ok; /* its owner takes "every byte went now" (2, cb not called) */
} hpl__conn_wreq;

/* The connections of one loop with corked writes, in the order of their
 * first one: they are flushed in that order, so messages keep the order
 * they were made in across connections too (a store's note to the
 * directory goes before the reply that lets its client tell others). Not
 * in a process that started the fan-out (fanout.h; the directory): there a
 * turn with many corked connections writes them at once, each one's own
 * frames still in order. One per loop (uvconn_write.c finds a loop's), so
 * two loops in one process never flush each other's connections. */
typedef struct hpl__conn_corks {
  uv_loop_t *loop;
  struct hpl__conn *list;       /* utlist DL through cork_prev/cork_next */
  int flushing;                 /* a flush runs: a nested one only does its own connection */
  unsigned users;               /* connections pointing here; freed at 0 */
  struct hpl__conn_corks *next; /* every loop's (utlist LL) */
} hpl__conn_corks;

struct hpl__conn {
  uv_stream_t *s;
  hpl__conn_opts o;
  char label[64];
  hpl__framer fr;
  uint8_t *rbuf;
  size_t rcap;        /* rbuf's size (hpl__conn_opts.rbuf) */
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
  size_t poff;       /* where the payload starts in pbuf (a sealed frame's message leads) */
  uint64_t pgot;
  int have_sink;
  hpl__sink sink;
  size_t wq_bytes;
  /* the handshake (auth.h): nothing is framed or sent before it is done */
  hpl__conn_hs hs;
  int role;                    /* the opener's role, once authenticated */
  hpl__auth_hs ahs;
  uint8_t hsbuf[HPL__AUTH_HELLO_LEN]; /* the longest handshake message */
  size_t hshave, hswant;
  hpl__conn_wreq *held;             /* writes made before the handshake ended (utlist DL) */
  /* the session (auth.h, frame.h): once the handshake succeeded every frame
   * sent is tagged with tx, every frame received checked with rx */
  int tagged;                       /* frames carry tags (a handshake is configured) */
  hpl__fmac tx, rx;                 /* tx.seal / rx.seal: the session is sealed (--encrypt) */
  /* sealed streams (frame.h): the payload of the last frame sent without
   * its bytes goes in records (hpl__conn_write) */
  uint64_t stx_seq, stx_left;
  uint32_t stx_idx;
  /* ... and the one being received: records gathered in srec (length,
   * ciphertext, tag; HPL__CONN_SREC bytes, made on first use), opened in
   * place and only then handed to the sink; sout..slen plaintext not yet
   * taken (the sink paused) */
  uint64_t srx_seq, srx_left;
  uint32_t srx_idx;
  uint8_t *srec;
  size_t shave, slen, sout;
  /* limits: the handshake's and a frame's time, frames per loop turn */
  uv_timer_t *timer;
  uint64_t frame_since_ms; /* a frame began arriving (0: between frames) */
  uint64_t turn_ms;        /* loop time of the turn frames are counted in */
  unsigned turn_frames;
  uv_idle_t *idle;         /* frames wait in rbuf for the next loop turn */
  /* corked writes (opts.cork): small frames made during one loop turn go
   * out together, flushed before the loop polls and after it has run the
   * I/O callbacks (so nothing waits across a poll) */
  hpl__conn_wreq *cork;         /* utlist DL */
  unsigned cork_n;
  size_t cork_bytes;
  uv_prepare_t *cork_prep;
  uv_check_t *cork_chk;
  hpl__conn_corks *corks;                  /* this loop's corked connections (set with cork_prep) */
  struct hpl__conn *cork_prev, *cork_next; /* in corks, in order */
  int cork_listed;
  /* a sendfile in progress (hpl__conn_sendfile): the socket is watched
   * through a duplicate of its fd, which libuv's stream does not own */
  uv_poll_t *sf_poll;
  int sf_fd;               /* the duplicate (-1: none yet) */
  int sf_in;               /* the file being sent */
  uint64_t sf_off, sf_left;
  hpl__conn_write_cb sf_cb;
  void *sf_arg;
  /* the output bound (uvconn_out.c) */
  size_t out_mem;          /* bytes the queued writes hold (hpl__conn_wreq.charged) */
  unsigned out_frames;     /* writes queued */
  int out_over;            /* over the bound: not reading until it drains */
  int held_by_owner;       /* hpl__conn_hold: not reading until lifted */
  /* an accepted connection in the handshake (uvconn_admit.c) */
  uint8_t peer_ip[16];     /* its source address (IPv4 in the first 4 bytes) */
  struct hpl__conn *hs_prev, *hs_next; /* the thread's, oldest first (utlist DL) */
  int hs_listed;
  uint64_t hs_since_ms;    /* when it took its slot */
  int out_cut_now;         /* to be cut when out_timer fires (the total was over) */
  uv_timer_t *out_timer;   /* the stall deadline, or the deferred cut */
  struct hpl__conn *out_prev, *out_next; /* the thread's connections (utlist DL) */
  int out_listed;
  int handles;             /* handles (stream, timer, idle, ...) not yet closed */
  hpl__record rec;         /* $HPL_RECORD_DIR: frames received, for fuzz corpora */
};

/* ------------------------------------------------------------ uvconn.c */

/* A handle of c's other than its stream closed (uv_close callback): the
 * last one frees c. */
void hpl__conn_handle_closed(uv_handle_t *h);

/* ------------------------------------------------------------ uvconn_hs.c */

/* Start the handshake of a new connection whose options ask for one:
 * the opener sends its HELLO, the acceptor waits for one. */
void hpl__conn_hs_start(hpl__conn *c);

/* Feed buffered bytes to the handshake. 1 once it is done (the rest of
 * rbuf is frames), 0 while it needs more bytes or failed (then closed). */
int hpl__conn_handshake(hpl__conn *c);

/* ------------------------------------------------------------ uvconn_read.c */

/* A frame received failed its MAC check: log, count, close. */
void hpl__conn_mac_failed(hpl__conn *c, const hpl__frame_hdr *h, const char *why);

/* Start reading (a no-op while reading or closing); a failure closes c. */
void hpl__conn_read_start(hpl__conn *c);

/* ------------------------------------------------------------ uvconn_timer.c */

/* (Re)arm c's timer to fire in `ms` (the handshake's or a frame's time);
 * its first use makes it. */
void hpl__conn_timer_arm(hpl__conn *c, uint64_t ms);

/* After a read: a frame begun and not ended starts c's frame timer (one
 * that ended, or a streamed payload, stops counting). */
void hpl__conn_track_frame(hpl__conn *c);

/* ------------------------------------------------------------ uvconn_write.c */

/* Queue or write w (bufs[0..nbufs), w->owned, w->cb set), keeping the
 * order of every write: held during the handshake or a sendfile, corked
 * when c corks and nobody waits for it, else written. Takes w. 0, 2 (only
 * for a w with now_ok: every byte went at once, w->cb not called), or
 * HPL_ECONN (c is closing then, or the write failed and closed it). */
int hpl__conn_submit(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t *bufs, unsigned nbufs);

/* hpl__conn_submit for the handshake's own bytes: ahead of the writes
 * held for its end. */
int hpl__conn_submit_first(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t *bufs, unsigned nbufs);

/* A frame's header and message are in buf (HPL__FRAME_HDR_LEN + h->msg_len
 * bytes; h->flags are set here), with room for the tag after the message
 * and then, with `copy`, plen payload bytes copied from payload. Tag it
 * (now, or when the handshake ended) and submit it with the payload
 * (referenced when not copied). Takes w and buf. 0 or a negative code. */
int hpl__conn_submit_frame(hpl__conn *c, hpl__conn_wreq *w, uint8_t *buf, hpl__frame_hdr *h,
                           const void *payload, uint64_t plen, int copy);

/* Writes held (for the handshake, or behind a sendfile) go now, in the
 * order they were made. */
void hpl__conn_release_held(hpl__conn *c);

/* Queue w (its bufs as given) as a libuv write request. Takes w; 0 or
 * HPL_ECONN (the write failed: c is closed). */
int hpl__conn_queue_write(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t *bufs, unsigned nbufs);

/* Closing c: its writes held or left corked are dropped (held ones'
 * owners are told HPL_ECONN). */
void hpl__conn_drop_writes(hpl__conn *c);

/* ------------------------------------------------------------ uvconn_cork.c */

/* Cork w (a single owned buffer, nobody to tell): it goes with the loop
 * turn's other corked frames. 0, or -1 without memory for the handles (w
 * is then written the usual way). */
int hpl__conn_cork(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t buf);

/* What is corked on c goes now: everything corked on c's loop (in order),
 * or, from inside a flush, c's own frames at once. */
void hpl__conn_flush_for(hpl__conn *c);

/* c is being freed: it lets go of its loop's cork list. */
void hpl__conn_corks_leave(hpl__conn *c);

/* Take c's corked frames off it: their list, and in `iov` (*k of them,
 * at most HPL__CORK_MAX_FRAMES) the frames one write can send now, none if
 * something else is queued. */
hpl__conn_wreq *hpl__conn_cork_take(hpl__conn *c, struct iovec *iov, unsigned *k);

/* After `done` bytes of list (from hpl__conn_cork_take) went: free what
 * went, queue the rest in order. */
void hpl__conn_cork_finish(hpl__conn *c, hpl__conn_wreq *list, size_t done);

/* ------------------------------------------------------------ uvconn_admit.c */

/* An accepted connection starts its handshake: it takes a slot, and the
 * oldest from its address, or the oldest of all, is closed first when
 * those are full. It leaves when the handshake ends or it closes. */
void hpl__conn_hs_join(hpl__conn *c);
void hpl__conn_hs_leave(hpl__conn *c);

/* A handshake failed (`why`): counted (c's auth_failures too) and logged,
 * the first and then a summary at most every HPL__CONN_HS_LOG_MS. The
 * caller closes c. */
void hpl__conn_hs_failed(hpl__conn *c, const char *why);

/* Close the oldest connection in the handshake to make room: 1, or 0 if
 * there is none. */
int hpl__conn_hs_make_room(void);

/* ------------------------------------------------------------ uvconn_out.c */

/* A new connection joins its thread's list; at its end it leaves it and
 * its queue's last bytes leave the thread's total. */
void hpl__conn_out_join(hpl__conn *c);
void hpl__conn_out_leave(hpl__conn *c);

/* w is queued (held, corked or written) holding `owned` bytes of memory
 * of its own: counted (once; a larger `owned` later counts the rest), and
 * c paused, or cut at the next loop turn, past its bounds. */
void hpl__conn_out_charge(hpl__conn *c, hpl__conn_wreq *w, size_t owned);

/* Free w and what it owns, taking it off c's count. */
void hpl__conn_wreq_free(hpl__conn *c, hpl__conn_wreq *w);

/* c is closing: its output timer goes. */
void hpl__conn_out_close(hpl__conn *c);

/* ------------------------------------------------------------ uvconn_read.c (2) */

/* Go on reading c on the next loop turn, frames left in its buffer first
 * (its output drained). */
void hpl__conn_kick(hpl__conn *c);

/* ------------------------------------------------------------ uvconn_fd.c */

/* With the fan-out running (fanout.h): write the corked connections of
 * the list with nothing queued before their frames in one batch. */
void hpl__conn_flush_fanout(hpl__conn_corks *k);

/* A sendfile ended: a pending one's owner hears HPL_ECONN, and its poll
 * handle and descriptor are closed (c is closing). */
void hpl__conn_sendfile_close(hpl__conn *c);

#endif
