/*
 * cwait.h - waiting with deadlines in the client library.
 *
 * Deadlines are absolute hpl__now_ms() values (CLOCK_MONOTONIC), UINT64_MAX
 * for none. Helpers turn them into poll(2) timeouts and timespecs for
 * condition variables on CLOCK_MONOTONIC, and a *turn* lets one thread at a
 * time into a section, waiting for it no longer than a deadline (a mutex
 * and a condition variable rather than pthread_mutex_clocklock, which
 * thread checkers do not model). Used by crpc.c and cdirect.c.
 */
#ifndef HPL_CWAIT_H
#define HPL_CWAIT_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* poll(2) timeout for a deadline: -1 for none, else the milliseconds left
 * (0 once it has passed), capped so that it fits an int. */
int hpl__cwait_poll_ms(uint64_t deadline);

/* Wait until fd has one of `events` (or an error or hangup) or the
 * deadline passes: a blocking poll(2), resumed for what is left of the
 * wait after a signal or after its own timeout's cap, never past the
 * deadline (a deadline already passed: one look, no wait). 1 ready, 0 the
 * deadline passed, -1 poll failed (errno set). */
int hpl__cwait_poll(int fd, short events, uint64_t deadline);

/* The deadline as an absolute CLOCK_MONOTONIC time. */
struct timespec hpl__cwait_ts(uint64_t deadline);

/* Initialise a condition variable that measures time on CLOCK_MONOTONIC. */
void hpl__cwait_cond_init(pthread_cond_t *cv);

/* Wait on cv (m held) until signalled or the deadline. 0, or ETIMEDOUT. */
int hpl__cwait_cond(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t deadline);

/* A turn: one holder at a time. Taking a free turn and giving one back
 * that nobody waits for are one atomic operation each; the mutex and the
 * condition variable are for waiters only. */
typedef struct hpl__turn {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int busy;    /* atomic: held */
  int waiters; /* atomic, changed under m: threads waiting to take it */
} hpl__turn;

void hpl__turn_init(hpl__turn *t);
void hpl__turn_destroy(hpl__turn *t);
/* Take the turn, waiting at most until the deadline. 0 or HPL_ETIMEDOUT. */
int hpl__turn_take(hpl__turn *t, uint64_t deadline);
/* Give a taken turn back; one waiter gets it. */
void hpl__turn_give(hpl__turn *t);

#endif
