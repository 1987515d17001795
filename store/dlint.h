/*
 * dlint.h - what the directory link's files share (dirlink.c: requests,
 * notes, the directory's messages; dlconn.c: the connection's life;
 * dlheld.c: re-reporting what we hold; dlprobe.c: another directory
 * leading while ours is silent): the link's record. Nothing outside
 * the module includes it.
 */
#ifndef HPL_STORE_DLINT_H
#define HPL_STORE_DLINT_H

#include <stdint.h>
#include <uthash.h>

#include "dirlink.h"
#include "objects.h"
#include "uvconn.h"
#include "uvtimer.h"

enum {
  HPL__DL_DOWN = 0,
  HPL__DL_RESOLVING,
  HPL__DL_CONNECTING,
  HPL__DL_REGISTERING,
  HPL__DL_READY
};

typedef struct hpl__dlprobe hpl__dlprobe; /* dlprobe.c */

typedef struct hpl__dl_req {
  UT_hash_handle hh;
  uint64_t id;
  unsigned type;
  uint8_t *frame; /* header + message + payload, ready to send */
  size_t flen;
  int sent;       /* on the current connection */
  hpl__dl_reply_cb cb;
  void *arg;
  hpl__otimer timer;
  struct hpl__dirlink *dl;
  uint64_t seq; /* send order */
} hpl__dl_req;

typedef struct hpl__dirlink {
  hpl__store *s;
  int state;
  hpl__conn *c;
  uv_getaddrinfo_t gai;
  uv_connect_t creq;
  uv_tcp_t *tcp;
  uv_timer_t retry;
  uv_timer_t hb;
  uv_timer_t held_delay; /* fault point held_delay_ms: the re-report waits */
  uint64_t backoff_ms;
  uint64_t ready_ms;    /* when the link last became ready (dlconn.c: a link that stays
                           up RECONNECT_STABLE_MS resets the backoff when it goes) */
  int tampered;         /* the last connection closed on a frame that failed its MAC */
  hpl__dl_req *pending;
  uint64_t next_id;
  uint64_t seq;
  uint64_t register_req;
  uint64_t last_heard_ms;
  int registered_once;
  uint64_t instance; /* the directory's, from the last registration */
  uint64_t term;     /* the highest leader term registered with (0: none, no standbys) */
  int dir_idx;       /* which of cfg.dir_hosts is tried now */
  hpl__dlprobe *probe; /* dlprobe.c: is another directory leading? (NULL: not asking) */
  int probe_next;      /*   ...the address asked last */
  uv_timer_t probe_t;  /*   ...its tick (dlprobe.c's) */
  uint64_t probe_hb_ms; /*  ...the heartbeat interval it measures silence by */
  uint64_t hb_sent_ns;  /* when the last heartbeat went out */
  uint32_t rtt_us;      /* its round trip, reported with the next one */
  char peer_addr[64];   /* the directory's numeric address, for clients */
  int peer_port;
  int stopping;
  hpl__dl_msg_fn handlers[HPL__MSG_MAX_ + 1]; /* directory-started messages */
  void (*registered)(hpl__store *s, int restarted);
  size_t (*incoming)(hpl__store *s, hpl__dl_incoming *out, size_t max); /* for heartbeats */
  size_t (*clients)(const hpl__store *s);                                /* for heartbeats */
  uint64_t incarnation; /* random per process (RegisterReq.incarnation) */
  hpl__dl_caps caps;         /* the directory's, from the last registration */
  /* re-reporting what we hold after registering (HELD, one piece at a time) */
  hpl__walk held_walk;
  uint64_t held_gen;    /* bumped per connection: answers of older pieces are ignored */
  int held_adopt;       /* the directory is new to us: it takes unknown objects */
  int held_inline;      /* it restarted: it lost the small objects' bytes too */
  size_t held_sent;
  uint64_t held_t0_ms;
  int held_pre;           /* deletes and reduces first (handoff.h), then copies */
  uint64_t held_tomb_cur; /*   ...how far they were sent (handoff.c's cursors) */
  uint64_t held_rd_cur;
} hpl__dirlink;

/* dirlink.c. A frame from the directory that is neither the answer to
 * REGISTER nor a PROBE: one of its own messages (to its handler), or a
 * reply to a pending request. Send every request still waiting (after
 * registering), oldest first. The connection was lost: requests sent on
 * it go again after registering, heartbeats and HELD pieces are dropped.
 * Stopping: every pending request ends with HPL_ECANCELED. */
void hpl__dirlink_frame_in(hpl__dirlink *dl, hpl__conn *c, const hpl__frame_hdr *h,
                           ProtobufCMessage *m, const uint8_t *payload, uint64_t plen);
void hpl__dirlink_flush(hpl__dirlink *dl);
void hpl__dirlink_requests_lost(hpl__dirlink *dl);
void hpl__dirlink_requests_cancel(hpl__dirlink *dl);
/* A hpl__dl_reply_cb for requests whose answer changes nothing here (the
 * directory's state is what counts, and a failure is retried at the next
 * registration). */
void hpl__dirlink_ignore_reply(hpl__store *s, const hpl__dl_reply *r, void *arg);

/* dlheld.c. After registering: re-report everything we hold, piece by
 * piece (adopt: the directory is new to us and takes unknown objects;
 * with_inline: it restarted and lost the small objects' bytes too). Stop
 * re-reporting (connection lost, stopping): answers of pieces already out
 * are ignored. */
void hpl__dirlink_held_start(hpl__dirlink *dl, int adopt, int with_inline);
void hpl__dirlink_held_stop(hpl__dirlink *dl);

/* dlprobe.c. With several directories: once the directory has been
 * silent for an interval and a fifth (a heartbeat went unanswered), try
 * one other address (in turn) every fifth of an interval for a
 * connection; one that accepts leads (only a leader listens), so the link
 * closes and registers there at once.
 * Init: the tick's timer (with the link). Arm: the link is ready and
 * heartbeats every interval_ms (nothing with one directory). Stop: the
 * tick stops and the probe under way is cancelled (closing, stopping).
 * Close: the timer's handle closes (hpl__dirlink_stop). */
void hpl__dirlink_probe_init(hpl__dirlink *dl);
void hpl__dirlink_probe_arm(hpl__dirlink *dl, uint64_t interval_ms);
void hpl__dirlink_probe_stop(hpl__dirlink *dl);
void hpl__dirlink_probe_close(hpl__dirlink *dl);

#endif
