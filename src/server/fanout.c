/* fanout.c - write to many sockets at once with a helper thread (see fanout.h). */
#include "fanout.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "hoplite.h"

/* The batch being written. The loop thread opens it under `mu`, both
 * threads claim items with `next`, and the loop thread closes it under `mu`
 * and then waits only while the helper is inside it (`helper_in`): a helper
 * that wakes after the close finds nothing and goes back to sleep. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_t thread;
  int running, stopping;
  int open;          /* a batch may be joined */
  int helper_in;     /* the helper is claiming items of the open batch */
  uint64_t gen;      /* batches opened */
  hpl__fanout_item *it;
  size_t n;
  atomic_size_t next; /* the next item to claim */
  atomic_uint_fast64_t batches, items, helper_items, partial;
} fo = {.mu = PTHREAD_MUTEX_INITIALIZER,
        .work = PTHREAD_COND_INITIALIZER,
        .done = PTHREAD_COND_INITIALIZER};

static void write_one(hpl__fanout_item *x) {
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = (struct iovec *)x->iov;
  mh.msg_iovlen = x->iovcnt;
  ssize_t k;
  do {
    k = sendmsg(x->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (k < 0 && errno == EINTR);
  if (k >= 0) x->result = k;
  else x->result = errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
  size_t want = 0;
  for (unsigned i = 0; i < x->iovcnt; i++) want += x->iov[i].iov_len;
  if (x->result >= 0 && (size_t)x->result < want) atomic_fetch_add(&fo.partial, 1);
}

/* Claim and write items until none is left; returns how many. */
static size_t claim_all(hpl__fanout_item *it, size_t n) {
  size_t did = 0;
  for (;;) {
    size_t i = atomic_fetch_add(&fo.next, 1);
    if (i >= n) return did;
    write_one(&it[i]);
    did++;
  }
}

static void *helper_main(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&fo.mu);
  for (;;) {
    while (!fo.stopping && !(fo.open && fo.gen != seen)) pthread_cond_wait(&fo.work, &fo.mu);
    if (fo.stopping) break;
    seen = fo.gen;
    fo.helper_in = 1;
    hpl__fanout_item *it = fo.it;
    size_t n = fo.n;
    pthread_mutex_unlock(&fo.mu);
    size_t did = claim_all(it, n);
    atomic_fetch_add(&fo.helper_items, did);
    pthread_mutex_lock(&fo.mu);
    fo.helper_in = 0;
    pthread_cond_signal(&fo.done);
  }
  pthread_mutex_unlock(&fo.mu);
  return NULL;
}

int hpl__fanout_start(void) {
  if (fo.running) return 0;
  fo.stopping = 0;
  /* the helper takes no signals: they stay with the loop's thread */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&fo.thread, NULL, helper_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) return HPL_ENOMEM;
  fo.running = 1;
  return 0;
}

void hpl__fanout_stop(void) {
  if (!fo.running) return;
  pthread_mutex_lock(&fo.mu);
  fo.stopping = 1;
  pthread_cond_signal(&fo.work);
  pthread_mutex_unlock(&fo.mu);
  pthread_join(fo.thread, NULL);
  fo.running = 0;
}

int hpl__fanout_on(void) { return fo.running; }

void hpl__fanout_write(hpl__fanout_item *it, size_t n) {
  if (!n) return;
  atomic_fetch_add(&fo.batches, 1);
  atomic_fetch_add(&fo.items, n);
  atomic_store(&fo.next, 0);
  if (!fo.running || n < HPL__FANOUT_MIN) {
    claim_all(it, n);
    return;
  }
  pthread_mutex_lock(&fo.mu);
  fo.it = it;
  fo.n = n;
  fo.gen++;
  fo.open = 1;
  pthread_cond_signal(&fo.work);
  pthread_mutex_unlock(&fo.mu);
  claim_all(it, n);
  /* every item is claimed; wait only for the one the helper may still be
   * writing (bounded: one nonblocking send) */
  pthread_mutex_lock(&fo.mu);
  fo.open = 0;
  while (fo.helper_in) pthread_cond_wait(&fo.done, &fo.mu);
  fo.it = NULL;
  fo.n = 0;
  pthread_mutex_unlock(&fo.mu);
}

void hpl__fanout_stats(uint64_t *batches, uint64_t *items, uint64_t *helper_items,
                       uint64_t *partial) {
  if (batches) *batches = atomic_load(&fo.batches);
  if (partial) *partial = atomic_load(&fo.partial);
  if (items) *items = atomic_load(&fo.items);
  if (helper_items) *helper_items = atomic_load(&fo.helper_items);
}
