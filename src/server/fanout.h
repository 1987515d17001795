/* fanout.h - write to many sockets at once: one io_uring submission, or a
 * helper thread.
 *
 * A server answering many connections in one loop turn (the directory with
 * many clients, or serving every waiting get of an object that just landed)
 * spends most of the turn in those writes, one after another: each is a
 * system call, and over veth and loopback each also runs the receiver's
 * network stack and wake-up on the writer's CPU. Two engines:
 *  - HPL__FANOUT_RING hands the whole batch to the kernel in one
 *    io_uring_enter (a sendmsg per item), which halves the writer's CPU per
 *    small reply on this project's machines (bench_dirfloor: a bare server's
 *    7 us per request against 14 us with a write each);
 *  - HPL__FANOUT_THREAD spreads the batch over the calling thread and one
 *    helper thread: both take the next write from a shared counter, so a
 *    helper that is slow to wake never delays the batch by more than the one
 *    write it took. It spends CPU (the helper's wake-ups) to use a second
 *    core.
 * Either way each write is a single nonblocking send; what the socket does
 * not take is left to the caller.
 *
 * One fan-out per process, used from one thread (the event loop's).
 * The ring's sends run one after another in the batch's order; the
 * thread's do not. Callers: the connection layer's corked writes
 * (uvconn_fd.c), started by the directory (directory/server.c, counted in
 * its /metrics) and by the store (store/server.c, the ring only). */
#ifndef HPL_FANOUT_H
#define HPL_FANOUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef enum {
  HPL__FANOUT_RING,   /* one io_uring submission per batch */
  HPL__FANOUT_THREAD, /* the calling thread and a helper thread */
} hpl__fanout_kind;

typedef struct hpl__fanout_item {
  int fd;                  /* a nonblocking stream socket */
  const struct iovec *iov; /* what to write, in order (kept by the caller) */
  unsigned iovcnt;
  ssize_t result; /* out: bytes written (0: the socket was full), or -errno */
} hpl__fanout_item;

/* Start the fan-out of this kind: set up the ring, or start the helper
 * thread. Returns 0, or a negative HPL_* code (HPL_ESYS: the kernel refused
 * io_uring; HPL_ENOMEM: no thread), and then hpl__fanout_on() stays 0.
 * Calling it again while running does nothing. */
int hpl__fanout_start(hpl__fanout_kind kind);

/* Stop: join the helper or close the ring (both idle between batches).
 * Safe to call when it never started. */
void hpl__fanout_stop(void);

/* 1 while a fan-out runs. */
int hpl__fanout_on(void);

/* The smallest batch worth a fan-out (0 when none runs): 2 for the ring (it
 * saves a system call from the second write on), 4 for the thread (fewer
 * are not worth waking the helper for). */
size_t hpl__fanout_min(void);

/* Write every item once (sendmsg, MSG_DONTWAIT | MSG_NOSIGNAL) and return
 * when all are done; each item's result is set. The ring submits them
 * together; the thread and the caller each take the next one. With no
 * fan-out running, or a ring the kernel stopped taking (then never used
 * again), the caller writes them one by one. `it` stays owned by the
 * caller. Never fails as a whole. */
void hpl__fanout_write(hpl__fanout_item *it, size_t n);

/* Counters since start: batches written, their items, the items the helper
 * wrote (the thread's engine), and the items whose socket took only part
 * of the bytes (or none). Any pointer may be NULL. */
void hpl__fanout_stats(uint64_t *batches, uint64_t *items, uint64_t *helper_items,
                       uint64_t *partial);

#endif
