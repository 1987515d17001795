/* cwait.c - waiting with deadlines in the client library (see cwait.h). */
#include "cwait.h"

#include <errno.h>
#include <poll.h>

#include "hoplite.h"
#include "util.h"

#define POLL_MAX_MS 1000000

int hpl__cwait_poll_ms(uint64_t deadline) {
  int64_t left = hpl__ms_left(deadline);
  return left < 0 ? -1 : left > POLL_MAX_MS ? POLL_MAX_MS : (int)left;
}

int hpl__cwait_poll(int fd, short events, uint64_t deadline) {
  struct pollfd pf = {.fd = fd, .events = events};
  for (;;) {
    int n = poll(&pf, 1, hpl__cwait_poll_ms(deadline));
    if (n > 0) return 1;
    if (n < 0 && errno != EINTR) return -1;
    if (hpl__ms_left(deadline) == 0) return 0;
  }
}

struct timespec hpl__cwait_ts(uint64_t deadline) {
  struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
                        .tv_nsec = (long)(deadline % 1000) * 1000000L};
  return ts;
}

void hpl__cwait_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}

int hpl__cwait_cond(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t deadline) {
  if (deadline == UINT64_MAX) return pthread_cond_wait(cv, m);
  struct timespec ts = hpl__cwait_ts(deadline);
  return pthread_cond_timedwait(cv, m, &ts);
}

void hpl__turn_init(hpl__turn *t) {
  pthread_mutex_init(&t->m, NULL);
  hpl__cwait_cond_init(&t->cv);
  t->busy = 0;
  t->waiters = 0;
}

void hpl__turn_destroy(hpl__turn *t) {
  pthread_mutex_destroy(&t->m);
  pthread_cond_destroy(&t->cv);
}

/* 1 if the turn was free and is now the caller's. Sequentially consistent,
 * as the waiter count's accesses: a giver that reads no waiters stored
 * `busy = 0` before any waiter's count, so that waiter's next try takes it. */
static int turn_try(hpl__turn *t) {
  int free_ = 0;
  return __atomic_compare_exchange_n(&t->busy, &free_, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

int hpl__turn_take(hpl__turn *t, uint64_t deadline) {
  if (turn_try(t)) return 0;
  pthread_mutex_lock(&t->m);
  __atomic_add_fetch(&t->waiters, 1, __ATOMIC_SEQ_CST);
  int rc = 0, late = 0;
  /* a wake-up that comes with the timeout still takes a free turn */
  while (!turn_try(t)) {
    if (late) {
      rc = HPL_ETIMEDOUT;
      break;
    }
    late = hpl__cwait_cond(&t->cv, &t->m, deadline) == ETIMEDOUT;
  }
  __atomic_sub_fetch(&t->waiters, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&t->m);
  return rc;
}

void hpl__turn_give(hpl__turn *t) {
  __atomic_store_n(&t->busy, 0, __ATOMIC_SEQ_CST);
  if (!__atomic_load_n(&t->waiters, __ATOMIC_SEQ_CST)) return;
  /* under the mutex: a waiter between its count and its wait holds it */
  pthread_mutex_lock(&t->m);
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->m);
}
