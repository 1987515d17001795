/* fanout.c - write to many sockets at once: in one io_uring submission, or
 * with a helper thread (see fanout.h). */
#include "fanout.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "hoplite.h"
#include "log.h"

/* What runs: nothing, the ring, the ring after the kernel stopped taking
 * it (closed at stop; the loop writes each connection itself meanwhile),
 * or the helper thread. */
typedef enum { FO_OFF, FO_RING, FO_RING_STOPPED, FO_THREAD } fo_mode;

/* The batch being written. The loop thread opens it under `mu`, both
 * threads claim items with `next`, and the loop thread closes it under `mu`
 * and then waits only while the helper is inside it (`helper_in`): a helper
 * that wakes after the close finds nothing and goes back to sleep. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_t thread;
  int stopping;
  fo_mode mode;
  struct io_uring ring; /* FO_RING's and FO_RING_STOPPED's */
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

static void note_partial(const hpl__fanout_item *x) {
  size_t want = 0;
  for (unsigned i = 0; i < x->iovcnt; i++) want += x->iov[i].iov_len;
  if (x->result >= 0 && (size_t)x->result < want) atomic_fetch_add(&fo.partial, 1);
}

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
  note_partial(x);
}

/* ------------------------------------------------------------------ the ring */

#define RING_ENTRIES 256
#define NOT_YET INT64_MIN /* an item's result before its completion */

static void ring_stopped(const char *why, int err) {
  if (fo.mode == FO_RING)
    HPL__LOG_WARN("io_uring %s (%s): replies are written one by one from now on", why,
                  strerror(-err));
  fo.mode = FO_RING_STOPPED;
}

/* Up to RING_ENTRIES items as one submission, waiting for every one
 * submitted: MSG_DONTWAIT makes each send complete at once with what the
 * socket took, or -EAGAIN, instead of waiting for room (the kernel does not
 * retry a send that asked not to wait), so the wait is one nonblocking send
 * per item. Items the kernel did not take are written one by one, and the
 * ring is not used again (what it left queued is never submitted); one
 * whose completion cannot be read fails with -EIO, so its connection
 * closes instead of sending twice. */
static void ring_batch(hpl__fanout_item *it, size_t m) {
  static struct msghdr mh[RING_ENTRIES];
  for (size_t i = 0; i < m; i++) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&fo.ring); /* empty: m fit */
    memset(&mh[i], 0, sizeof mh[i]);
    mh[i].msg_iov = (struct iovec *)it[i].iov;
    mh[i].msg_iovlen = it[i].iovcnt;
    io_uring_prep_sendmsg(sqe, it[i].fd, &mh[i], MSG_DONTWAIT | MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, i);
    it[i].result = NOT_YET;
  }
  int rc;
  do {
    rc = io_uring_submit_and_wait(&fo.ring, (unsigned)m);
  } while (rc == -EINTR);
  size_t sub = rc > 0 ? (size_t)rc : 0;
  if (sub < m) ring_stopped("took only part of a batch", rc < 0 ? rc : -EAGAIN);
  for (size_t seen = 0; seen < sub; seen++) {
    struct io_uring_cqe *cqe;
    int w;
    do {
      w = io_uring_wait_cqe(&fo.ring, &cqe);
    } while (w == -EINTR);
    if (w != 0) {
      ring_stopped("lost a completion", w);
      break;
    }
    hpl__fanout_item *x = &it[io_uring_cqe_get_data64(cqe)];
    x->result = cqe->res >= 0 ? cqe->res : cqe->res == -EAGAIN ? 0 : cqe->res;
    io_uring_cqe_seen(&fo.ring, cqe);
    note_partial(x);
  }
  for (size_t i = 0; i < m; i++) {
    if (it[i].result != NOT_YET) continue;
    if (i < sub) it[i].result = -EIO;
    else write_one(&it[i]);
  }
}

static int ring_start(void) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  /* the loop's thread alone submits, and completions are only read while
   * it waits for them: no task work interrupts it elsewhere */
  p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  /* then what older kernels have: 5.18 (SUBMIT_ALL), and none (a send the
   * kernel refuses at submission then ends the ring: ring_batch) */
  static const unsigned older[] = {IORING_SETUP_SUBMIT_ALL, 0};
  for (size_t i = 0; io_uring_queue_init_params(RING_ENTRIES, &fo.ring, &p) != 0; i++) {
    if (i == sizeof older / sizeof older[0]) return HPL_ESYS;
    memset(&p, 0, sizeof p);
    p.flags = older[i];
  }
  return 0;
}

/* ------------------------------------------------------------------ the helper thread */

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

int hpl__fanout_start(hpl__fanout_kind kind) {
  if (fo.mode != FO_OFF) return 0;
  if (kind == HPL__FANOUT_RING) {
    int rc = ring_start();
    if (rc == 0) fo.mode = FO_RING;
    return rc;
  }
  fo.stopping = 0;
  /* the helper takes no signals: they stay with the loop's thread */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&fo.thread, NULL, helper_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) return HPL_ENOMEM;
  fo.mode = FO_THREAD;
  return 0;
}

void hpl__fanout_stop(void) {
  if (fo.mode == FO_OFF) return;
  if (fo.mode != FO_THREAD) {
    io_uring_queue_exit(&fo.ring);
    fo.mode = FO_OFF;
    return;
  }
  pthread_mutex_lock(&fo.mu);
  fo.stopping = 1;
  pthread_cond_signal(&fo.work);
  pthread_mutex_unlock(&fo.mu);
  pthread_join(fo.thread, NULL);
  fo.mode = FO_OFF;
}

int hpl__fanout_on(void) { return fo.mode == FO_RING || fo.mode == FO_THREAD; }

size_t hpl__fanout_min(void) { return fo.mode == FO_RING ? 2 : fo.mode == FO_THREAD ? 4 : 0; }

void hpl__fanout_write(hpl__fanout_item *it, size_t n) {
  if (!n) return;
  atomic_fetch_add(&fo.batches, 1);
  atomic_fetch_add(&fo.items, n);
  atomic_store(&fo.next, 0);
  size_t base = 0;
  for (size_t m; base < n && fo.mode == FO_RING; base += m) {
    m = n - base < RING_ENTRIES ? n - base : RING_ENTRIES;
    ring_batch(it + base, m);
  }
  /* what is left, one by one: no fan-out, a ring the kernel stopped
   * taking, or a batch too small to wake the helper for */
  if (fo.mode != FO_THREAD || n < hpl__fanout_min()) {
    claim_all(it + base, n - base);
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
