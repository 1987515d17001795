/*
 * puller.h - the generic puller: one byte stream pulled from a peer's data
 * port (an object, or a reduce stream), received straight into an object
 * (hpl__puller_start_into) or into memory its owner names, watched for stalls,
 * silence and stragglers. What it sees it reports to its owner through
 * hpl__puller_ops; the owner decides, and talks to the directory.
 *
 * Callers: fetch.c (objects), rdcombine.c (reduce children's streams),
 * rdsink.c (a reduce result), ring.c (a ring's incoming stream), server.c
 * (init, the quiet listener, stop, free).
 */
#ifndef HPL_STORE_PULLER_H
#define HPL_STORE_PULLER_H

#include <stddef.h>
#include <stdint.h>

#include "objects.h"
#include "store.h"

typedef struct hpl__puller hpl__puller;

/* What the owner supplies. buf() says where stream bytes from `off` (an
 * offset in the stream, the requested offset included) go, with room in
 * *len (0: pause; call hpl__puller_paused and later hpl__puller_resume); got()
 * reports bytes written there. A pull into an object (hpl__puller_start_into)
 * has no buf(), and got() (may be NULL there) hears of bytes once they
 * arrived in the object. done() runs once when the stream completed
 * (status 0) or failed (a negative code and a detail), never after
 * hpl__puller_cancel(). */
typedef struct hpl__puller_ops {
  uint8_t *(*buf)(void *arg, uint64_t off, size_t *len);
  void (*got)(void *arg, uint64_t off, size_t n);
  void (*done)(void *arg, int status, const char *detail);
  /* 0: no monitor; 1: stall detection; 2: also straggler detection (the
   * sender's copy is complete, so it could go full speed) */
  int monitor;
  /* monitor 1: the stream crawls (below the straggler ratio for
   * straggler_ms) although the sender's copy is partial, so it may only be
   * waiting for its own upstream; called at most once per straggler_ms / 2
   * (a stream that is not resumable, i.e. a reduce stream: / 4) with the
   * rate over that window (bytes/s), the stream goes on (may be NULL) */
  void (*slow)(void *arg, double rate);
  /* monitor >= 1: the stream has delivered nothing for longer than its
   * rate makes likely (hpl__puller_quiet_window_ms) although we have room: the
   * sender may be stopped or cut off. The stream goes on; no further call
   * until the owner re-arms it with hpl__puller_suspect_done (may be NULL). */
  void (*suspect)(void *arg, uint64_t quiet_ms);
  /* the sender's node id (0: unknown). With `suspect`: once the stream
   * has been quiet for half its window, the store's quiet listener hears
   * of the peer (hpl__puller_on_quiet) */
  uint64_t peer;
  int no_stall; /* never end the stream for silence (a reduce stream may
                   wait for its sender's own inputs); `suspect` still runs */
  uint32_t gen; /* generation the receiver's bytes belong to */
  int resumable; /* another sender would go on from our offset (a copy's
                    pull), not start the whole stream over (a reduce
                    stream): what the straggler check weighs a move by */
  /* monitor 2: the stream is about to end as a straggler (done() follows
   * with HPL_ETIMEDOUT): this node's own link may be the slow one (may be
   * NULL) */
  void (*straggled)(void *arg);
  /* 1: the pull may go on an idle connection to its sender that an earlier
   * pull left (dconns.c) instead of a new one (fetch.c decides when).
   * Whatever this says, a pull that ends whole leaves its connection
   * there for later ones (if it was opened with the store's copy window,
   * the one every idle connection has). */
  int reuse;
  /* 1: a copy's pull: a new connection gets cfg.pull_window as its
   * receive buffer (dconns.h says why); 0: a reduce or ring stream's, which
   * the kernel sizes. */
  int windowed;
  /* a copy's pull: the ask round of its fetch (hpl__puller_asking; 0:
   * none). While no inbound slot is held, a copy whose round still has
   * fetches waiting for their first answer waits a little for them. */
  uint64_t round;
} hpl__puller_ops;

/* Start pulling `key` (an object id, or with internal a reduce stream key)
 * from addr:port, bytes [offset, size). Returns the puller, or NULL if it
 * cannot start (bad address, no memory; done() is not called then). */
hpl__puller *hpl__puller_start(hpl__store *s, const char *addr, int port, const char *key,
                               int internal, uint64_t offset, uint64_t size,
                               const hpl__puller_ops *ops, void *arg);

/* Pull `key` straight into object `o`'s buffer (o->data; stream byte x
 * lands at o->data + x), bytes [offset, o->size): the one place where
 * bytes received from a peer become an object's bytes. With `progress`,
 * bytes that arrived are o's progress from then on (hpl__obj_progress:
 * served on, a get answered once all are there); without, they are the
 * owner's to use (a reduce child's stream in the output it is combined
 * into). ops->buf must be NULL; ops->got (may be NULL) hears of each
 * piece after that. The owner holds a reference on `o` and keeps its
 * buffer until the pull ends. As hpl__puller_start otherwise. */
hpl__puller *hpl__puller_start_into(hpl__store *s, const char *addr, int port, const char *key,
                                    int internal, hpl__obj *o, uint64_t offset, int progress,
                                    const hpl__puller_ops *ops, void *arg);

/* More of the object's digests are known (a pull into an object with
 * progress): bytes received beyond its progress are checked now, and a
 * stream that has delivered everything ends once all of it is verified. */
void hpl__puller_digests_more(hpl__puller *p);

/* In done() of a pull into an object that ended HPL_ECORRUPT (a received
 * unit did not match its digest; its bytes were not counted): that unit. */
uint64_t hpl__puller_corrupt_unit(const hpl__puller *p);

/* fetch.c: fetches that began asking the directory within a few ms of
 * each other (the gets of one request, or of one burst) are an ask round;
 * `round` is the newest (numbered from 1) and `asking` how many of its
 * fetches still wait for their first answer. While no inbound slot is
 * held, the first copies wait up to cfg.fill_hold_ms for those answers,
 * so the slots go in ring order over all the round's senders rather than
 * to whichever answered first (pullslot.c). */
void hpl__puller_asking(hpl__store *s, uint64_t round, unsigned asking);

/* Abandon a pull: done() is not called. NULL is a no-op. */
void hpl__puller_cancel(hpl__puller *p);

/* The owner's buffer is full (its buf() returned no room): not a stall. */
void hpl__puller_paused(hpl__puller *p);
/* Room again: read on. */
void hpl__puller_resume(hpl__puller *p);

/* The owner has handled a `suspect` call: call it again if the stream is
 * still silent `retry_ms` from now (0: a quiet window from now). */
void hpl__puller_suspect_done(hpl__puller *p, uint64_t retry_ms);

/* A new directory instance registered this store (a restart, a failover):
 * reports of quiet streams made to the old one are lost, so every stream
 * waiting out its retry is judged again at the next check. */
void hpl__puller_suspect_anew(hpl__store *s);

/* How long the stream may deliver nothing before `suspect` is called:
 * 100 ms plus the time 12 MiB take at `rate` bytes/s (about 210 ms at
 * 1 Gbit/s), 1 s while no rate is known, at most `cap_ms` (0: no cap). */
uint64_t hpl__puller_quiet_window_ms(double rate, uint64_t cap_ms);

/* The rate the stream has been seeing, bytes/s: its samples while bytes
 * flow, else what arrived over the time since it started (0: nothing yet).
 * For reports (`hoplite status`). */
double hpl__puller_rate(const hpl__puller *p);

/* This node's usual rate, bytes/s: recent pulls from complete senders
 * (the straggler baseline; 0: none measured yet). */
double hpl__puller_usual_rate(const hpl__store *s);

/* The rate of the pull from a complete sender that just completed, for
 * the directory's cost model (0: not measured), and forget it: its owner
 * takes it from its done() (fetch.c). */
double hpl__puller_take_rate(hpl__store *s);

/* fn runs when a stream with `suspect` and a peer has been quiet for half
 * its window (server.c installs hpl__dirlink_quiet: the directory probes
 * the sender, so that its verdict on the silent report at the whole window
 * is ready by then). It returns 1 if the sender was reported, and is
 * called again in the same quiet spell only after it returned 0. One per
 * store; none set: nobody hears. */
void hpl__puller_on_quiet(hpl__store *s, int (*fn)(hpl__store *s, uint64_t peer));

/* Make the module's context (0 or HPL_ENOMEM); end every pull (store
 * stopping; done() is not called); free the context (after the loop). */
int hpl__puller_init(hpl__store *s);
void hpl__puller_stop_all(hpl__store *s);
void hpl__puller_free(hpl__store *s);

#endif
