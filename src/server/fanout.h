/* fanout.h - write to many sockets at once with a helper thread.
 *
 * Over veth (and loopback) a write to a TCP socket runs the receiver's
 * network stack and wake-up on the writer's CPU, so a server answering many
 * connections in one loop turn (the directory serving every waiting get of
 * an object that just landed) spends most of the turn in those writes, one
 * after another. hpl__fanout_write spreads such a batch over the calling
 * thread and one helper thread: both take the next write from a shared
 * counter, so a helper that is slow to wake never delays the batch by more
 * than the one write it took. Each write is a single nonblocking sendmsg;
 * what the socket does not take is left to the caller.
 *
 * One fan-out per process, used from one thread (the event loop's).
 * Callers: the connection layer's corked writes (uvconn_fd.c), started by
 * the directory (directory/server.c), counted in its /metrics. */
#ifndef HPL_FANOUT_H
#define HPL_FANOUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Batches smaller than this are not worth waking the helper for. */
#define HPL__FANOUT_MIN 4

typedef struct hpl__fanout_item {
  int fd;                  /* a nonblocking stream socket */
  const struct iovec *iov; /* what to write, in order (kept by the caller) */
  unsigned iovcnt;
  ssize_t result; /* out: bytes written (0: the socket was full), or -errno */
} hpl__fanout_item;

/* Start the helper thread. Returns 0, or a negative HPL_* code (no thread:
 * hpl__fanout_on() stays 0). Calling it again while running does nothing. */
int hpl__fanout_start(void);

/* Stop and join the helper (waits for nothing else: it is idle between
 * batches). Safe to call when it never started. */
void hpl__fanout_stop(void);

/* 1 while the helper runs. */
int hpl__fanout_on(void);

/* Write every item once (sendmsg, MSG_DONTWAIT | MSG_NOSIGNAL), the calling
 * thread and the helper each taking the next one, and return when all are
 * done; each item's result is set. Without the helper the caller writes
 * them all. `it` stays owned by the caller. Never fails as a whole. */
void hpl__fanout_write(hpl__fanout_item *it, size_t n);

/* Counters since start: batches written, their items, the items the helper
 * wrote, and the items whose socket took only part of the bytes (or none).
 * Any pointer may be NULL. */
void hpl__fanout_stats(uint64_t *batches, uint64_t *items, uint64_t *helper_items,
                       uint64_t *partial);

#endif
