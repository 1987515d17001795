/*
 * puller.h - the generic puller: one byte stream pulled from a peer's data
 * port (an object, or a reduce stream), received straight into memory its
 * owner names, watched for stalls and stragglers.
 *
 * Callers: fetch.c (objects), rdtask.c (children's streams), rdsink.c (a
 * reduce result), server.c (stop).
 */
#ifndef HPL_STORE_PULLER_H
#define HPL_STORE_PULLER_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

typedef struct st_puller st_puller;

/* What the owner supplies. buf() says where stream bytes from `off`
 * (an offset in the object, the requested offset included) go, with room in *len (0: pause; call
 * puller_paused and later puller_resume); got() reports bytes written there;
 * done() runs once when the stream completed (status 0) or failed (a
 * negative code and a detail), never after puller_cancel(). */
typedef struct puller_ops {
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
   * rate makes likely (puller_quiet_window_ms) although we have room: the
   * sender may be stopped or cut off. The stream goes on; no further call
   * until the owner re-arms it with puller_suspect_done (may be NULL). */
  void (*suspect)(void *arg, uint64_t quiet_ms);
  /* the sender's node id (0: unknown). With `suspect`: once the stream
   * has been quiet for half its window, the directory (if it takes them)
   * gets a QUIET note naming it and probes it, so that its verdict on the
   * silent report at the whole window is ready by then */
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
} puller_ops;

/* Start pulling `key` (an object id, or with internal a reduce stream key)
 * from addr:port, bytes [offset, size). Returns the puller, or NULL if it
 * cannot start (bad address, no memory; done() is not called then). */
st_puller *puller_start(store *s, const char *addr, int port, const char *key, int internal,
                        uint64_t offset, uint64_t size, const puller_ops *ops, void *arg);

/* Abandon a pull: done() is not called. NULL is a no-op. */
void puller_cancel(st_puller *p);

/* The owner's buffer is full (its buf() returned no room): not a stall. */
void puller_paused(st_puller *p);
/* Room again: read on. */
void puller_resume(st_puller *p);

/* The owner has handled a `suspect` call: call it again if the stream is
 * still silent `retry_ms` from now (0: a quiet window from now). */
void puller_suspect_done(st_puller *p, uint64_t retry_ms);

/* How long the stream may deliver nothing before `suspect` is called:
 * 100 ms plus the time 12 MiB take at `rate` bytes/s (about 210 ms at
 * 1 Gbit/s), 1 s while no rate is known, at most `cap_ms` (0: no cap). */
uint64_t puller_quiet_window_ms(double rate, uint64_t cap_ms);

/* The rate the stream has been seeing, bytes/s: its samples while bytes
 * flow, else what arrived over the time since it started (0: nothing yet).
 * For reports (`hoplite status`). */
double puller_rate(const st_puller *p);

/* End every pull (store stopping); done() is not called. */
void puller_stop_all(store *s);

#endif
