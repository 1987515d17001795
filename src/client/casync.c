/* casync.c - libhoplite's asynchronous requests (include/hoplite.h,
 * casync_int.h): a handle's async state and descriptor, the send queue,
 * deadlines, the completion queue, and hpl_async_poll / cancel /
 * timeout_ms / count / fd. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <utlist.h>

#include "casync_int.h"
#include "trace.h"

#define FLUSH_BATCH 64            /* requests per write */
#define FLUSH_BYTES (16u << 10)   /* ... and at most about this many bytes of them */
#define FLUSH_SEND_MS 1000        /* a write once POLLOUT said there is room */
#define PUMP_READS 16             /* reads per hpl_async_poll */
#define REPLIES_PER_POLL 64       /* replies turned into completions per poll (a loop stays responsive) */
#define FLUSH_PER_POLL 512        /* requests sent per flush */

/* ------------------------------------------------------------------ state */

void hpl__aset_state(hpl__casync *a, hpl__areq *q, hpl__astate s) {
  static const char *const names[] = {"async.queued", "async.sent", "async.done"};
  if (q->state == HPL__AS_QUEUED && s != HPL__AS_QUEUED) DL_DELETE(a->queue, q);
  q->state = s;
  hpl__trace(names[s], q->id);
}

static void heap_swap(hpl__casync *a, size_t i, size_t j) {
  hpl__areq *t = a->heap[i];
  a->heap[i] = a->heap[j];
  a->heap[j] = t;
  a->heap[i]->hidx = i;
  a->heap[j]->hidx = j;
}

static void heap_fix(hpl__casync *a, size_t i) {
  while (i > 0 && a->heap[(i - 1) / 2]->deadline > a->heap[i]->deadline) {
    heap_swap(a, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    if (l < a->nheap && a->heap[l]->deadline < a->heap[m]->deadline) m = l;
    if (l + 1 < a->nheap && a->heap[l + 1]->deadline < a->heap[m]->deadline) m = l + 1;
    if (m == i) return;
    heap_swap(a, i, m);
    i = m;
  }
}

static void heap_remove(hpl__casync *a, hpl__areq *q) {
  size_t i = q->hidx;
  if (i == SIZE_MAX) return;
  q->hidx = SIZE_MAX;
  if (i != --a->nheap) {
    a->heap[i] = a->heap[a->nheap];
    a->heap[i]->hidx = i;
    heap_fix(a, i);
  }
}

void hpl__aheap_set(hpl__casync *a, hpl__areq *q, uint64_t deadline) {
  q->deadline = deadline;
  if (deadline == UINT64_MAX) {
    heap_remove(a, q);
    return;
  }
  if (q->hidx == SIZE_MAX) { /* room was made at submission (count <= capheap) */
    q->hidx = a->nheap;
    a->heap[a->nheap++] = q;
  }
  heap_fix(a, q->hidx);
}

void hpl__afail(hpl__casync *a, hpl__areq *q, int rc, const char *fmt, ...) {
  if (q->state == HPL__AS_DONE) return;
  heap_remove(a, q);
  hpl__aset_state(a, q, HPL__AS_DONE);
  q->t = NULL;
  q->status = rc;
  if (rc && fmt && !q->detail) {
    char msg[HPL_ASYNC_DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t len = strlen(q->id) + strlen(msg) + 8;
    if ((q->detail = malloc(len))) snprintf(q->detail, len, "'%s': %s", q->id, msg);
  }
  DL_APPEND(a->done, q);
}

void hpl__awake(hpl__casync *a) {
  uint64_t one = 1;
  if (write(a->evfd, &one, sizeof one) < 0) {
    /* EAGAIN only when the counter is near 2^64: it is readable then anyway */
  }
  __atomic_store_n(&a->ev_written, 1, __ATOMIC_RELEASE); /* after the write: see rearm */
}

void hpl__aqueue(hpl__casync *a, hpl__areq *q) {
  q->t = NULL;
  DL_APPEND(a->queue, q);
  hpl__aset_state(a, q, HPL__AS_QUEUED);
}

/* ------------------------------------------------------------------ set-up */

static void epoll_sock(hpl_client *c, hpl__casync *a, int op, int out) {
  struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.fd = 1};
  if (epoll_ctl(a->epfd, op, hpl__crpc_fd(c->st.rpc), &ev) == 0) a->out_armed = out;
}

int hpl__casync_get(hpl_client *c, hpl__casync **out) {
  pthread_mutex_lock(&c->lock);
  hpl__casync *a = c->async;
  int rc = 0;
  if (!a && (a = calloc(1, sizeof *a))) {
    a->epfd = epoll_create1(EPOLL_CLOEXEC);
    a->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = 0};
    if (a->epfd < 0 || a->evfd < 0 || epoll_ctl(a->epfd, EPOLL_CTL_ADD, a->evfd, &ev) != 0) {
      rc = hpl__cfail(c, HPL_ESYS, "cannot set up the async descriptor: %s", strerror(errno));
      if (a->epfd >= 0) close(a->epfd);
      if (a->evfd >= 0) close(a->evfd);
      free(a);
      a = NULL;
    } else {
      pthread_mutex_init(&a->lock, NULL);
      a->sock_in = !hpl__crpc_broken(c->st.rpc);
      if (a->sock_in) epoll_sock(c, a, EPOLL_CTL_ADD, 0);
      hpl__crpc_set_notify(c->st.rpc, a->evfd, &a->ev_written);
      c->async = a;
    }
  } else if (!a) {
    rc = hpl__cfail(c, HPL_ENOMEM, "out of memory");
  }
  pthread_mutex_unlock(&c->lock);
  if (a) *out = a;
  return rc;
}

void hpl__casync_free(hpl_client *c) {
  hpl__casync *a = c->async;
  if (!a) return;
  hpl__crpc_set_notify(c->st.rpc, -1, NULL);
  hpl__areq *q, *tmp;
  HASH_ITER(hh, a->by_tag, q, tmp) { /* tickets go with the connection (crpc) */
    HASH_DEL(a->by_tag, q);
    hpl__aop_free(c, q, 1);
    free(q->detail);
    free(q); /* a done get's buffer is on c's list: hpl_close frees it */
  }
  free(a->heap);
  close(a->epfd);
  close(a->evfd);
  pthread_mutex_destroy(&a->lock);
  free(a);
  c->async = NULL;
}

int hpl_async_fd(hpl_client *c, int *fd) {
  if (!c || !fd) return c ? hpl__cfail(c, HPL_EINVAL, "fd must not be NULL") : HPL_EINVAL;
  HPL__NOT_ADMIN(c);
  hpl__casync *a;
  int rc = hpl__casync_get(c, &a);
  if (rc == 0) *fd = a->epfd;
  return rc;
}

/* ------------------------------------------------------------------ progress */

/* Send what is queued while the socket has room (a->lock held). */
static void flush(hpl_client *c, hpl__casync *a) {
  size_t sent = 0;
  while (a->queue && sent < FLUSH_PER_POLL && !hpl__crpc_broken(c->st.rpc)) {
    struct pollfd pfd = {.fd = hpl__crpc_fd(c->st.rpc), .events = POLLOUT};
    if (poll(&pfd, 1, 0) != 1 || !(pfd.revents & POLLOUT)) break;
    hpl__amsg msgs[FLUSH_BATCH];
    hpl__crpc_req reqs[FLUSH_BATCH];
    void *users[FLUSH_BATCH];
    hpl__crpc_ticket *ts[FLUSH_BATCH];
    size_t n = 0, bytes = 0, started = 0;
    for (hpl__areq *q = a->queue; q && n < FLUSH_BATCH; q = q->next) {
      hpl__aop_build(c, q, &msgs[n], &reqs[n]);
      bytes += 64 + reqs[n].plen + strlen(q->id);
      users[n++] = q;
      if (bytes >= FLUSH_BYTES) break;
    }
    int rc = hpl__crpc_start_async(c->st.rpc, reqs, n, hpl__deadline_ms(FLUSH_SEND_MS), users,
                                   ts, &started);
    sent += started;
    for (size_t i = 0; i < started; i++) {
      hpl__areq *q = users[i];
      hpl__aset_state(a, q, HPL__AS_SENT);
      q->t = ts[i];
    }
    if (started < n) {
      if (rc == HPL_ENOMEM) /* nothing of the rest went: fail the first, go on later */
        hpl__afail(a, users[started], HPL_ENOMEM, "out of memory to send it");
      break; /* broken (the poll completes everything), or no room after all */
    }
  }
  int want_out = a->queue != NULL && !hpl__crpc_broken(c->st.rpc);
  if (a->sock_in && want_out != a->out_armed) epoll_sock(c, a, EPOLL_CTL_MOD, want_out);
}

/* The store connection broke: every request completes (replies already
 * delivered still count), and the socket leaves the descriptor (it would
 * poll readable for ever). */
static void broken(hpl_client *c, hpl__casync *a) {
  const char *why = hpl__crpc_broken(c->st.rpc);
  if (a->sock_in) {
    epoll_ctl(a->epfd, EPOLL_CTL_DEL, hpl__crpc_fd(c->st.rpc), NULL);
    a->sock_in = a->out_armed = 0;
  }
  int again = 1;
  while (again) { /* a reply may queue a next phase, which then fails too */
    again = 0;
    hpl__areq *q, *tmp;
    HASH_ITER(hh, a->by_tag, q, tmp) {
      if (q->state == HPL__AS_SENT) {
        hpl__crpc_msg rep = {0};
        int rc = hpl__crpc_finish(c->st.rpc, q->t, 0, &rep); /* at once: broken */
        q->t = NULL;
        hpl__aop_reply(c, a, q, rc, &rep);
        again = 1;
      } else if (q->state == HPL__AS_QUEUED) {
        q->status = q->phase == HPL__AP_ABORT ? q->status : HPL_ECONN;
        hpl__afail(a, q, q->status, "the connection to the store is closed: %s", why ? why : "?");
      }
    }
  }
}

/* Replies that arrived, up to a budget (a->lock held). */
static void replies(hpl_client *c, hpl__casync *a) {
  void *users[64];
  size_t total = 0, k;
  while (total < REPLIES_PER_POLL && (k = hpl__crpc_ready(c->st.rpc, users, 64)) > 0) {
    total += k;
    for (size_t i = 0; i < k; i++) {
      hpl__areq *q = users[i];
      hpl__crpc_msg rep = {0};
      int rc = hpl__crpc_finish(c->st.rpc, q->t, 0, &rep); /* at once: it is done */
      q->t = NULL;
      hpl__aop_reply(c, a, q, rc, &rep);
    }
  }
}

/* Requests whose deadline passed (a->lock held). */
static void expire(hpl_client *c, hpl__casync *a) {
  uint64_t now = hpl__now_ms();
  while (a->nheap && a->heap[0]->deadline <= now) {
    hpl__areq *q = a->heap[0];
    heap_remove(a, q);
    if (q->state == HPL__AS_SENT) hpl__crpc_forget(c->st.rpc, q->t);
    if (q->state == HPL__AS_QUEUED) DL_DELETE(a->queue, q);
    q->state = HPL__AS_SENT; /* neither queued nor holding a ticket: give_up decides */
    q->t = NULL;
    hpl__aop_give_up(a, q, HPL_ETIMEDOUT);
  }
}

/* The eventfd says "poll again" exactly while completions or replies wait.
 * It is read only if written since the last look: every writer sets
 * ev_written after its write, so a write this misses leaves the flag set
 * and the descriptor readable, and the next poll reads it (one poll more,
 * never a wake-up lost, never a descriptor left readable for nothing). */
static void rearm(hpl_client *c, hpl__casync *a) {
  uint64_t v;
  if (__atomic_exchange_n(&a->ev_written, 0, __ATOMIC_ACQ_REL) &&
      read(a->evfd, &v, sizeof v) < 0 && errno != EAGAIN)
    return;
  if (a->done != NULL || hpl__crpc_ready_waiting(c->st.rpc)) hpl__awake(a);
}

static void fill(hpl_completion *o, hpl__areq *q) {
  memset(o, 0, offsetof(hpl_completion, detail));
  o->tag = q->tag;
  o->op = q->op;
  o->status = q->status;
  o->buf = q->status == 0 ? q->buf : NULL;
  o->size = q->size;
  o->copies = q->copies;
  o->complete = q->complete;
  o->is_inline = q->is_inline;
  snprintf(o->detail, sizeof o->detail, "%s",
           q->status ? (q->detail ? q->detail : hpl_strerror(q->status)) : "");
}

int hpl_async_poll(hpl_client *c, hpl_completion *out, int max) {
  if (!c || !out || max < 0) return c ? hpl__cfail(c, HPL_EINVAL, "out NULL or max < 0") : HPL_EINVAL;
  HPL__NOT_ADMIN(c);
  hpl__casync *a;
  int rc = hpl__casync_get(c, &a);
  if (rc) return rc;
  pthread_mutex_lock(&a->lock);
  hpl__cstore_poll(&c->st); /* chunks given back meanwhile */
  flush(c, a);
  int brk = hpl__crpc_pump(c->st.rpc, PUMP_READS) == HPL_ECONN;
  replies(c, a);
  if (brk) broken(c, a);
  expire(c, a);
  flush(c, a); /* next phases */
  if (hpl__crpc_broken(c->st.rpc)) broken(c, a);
  int n = 0;
  while (n < max && a->done) {
    hpl__areq *q = a->done;
    DL_DELETE(a->done, q);
    HASH_DEL(a->by_tag, q);
    a->count--;
    fill(&out[n++], q);
    hpl__aop_free(c, q, 0);
    free(q->detail);
    free(q);
  }
  rearm(c, a);
  pthread_mutex_unlock(&a->lock);
  return n;
}

int64_t hpl_async_timeout_ms(hpl_client *c) {
  if (!c || !c->async) return -1;
  hpl__casync *a = c->async;
  pthread_mutex_lock(&a->lock);
  /* queued requests waiting for room in the socket (EPOLLOUT armed) need
   * no poll before the descriptor says so */
  int now = a->done || (a->queue && !a->out_armed);
  int64_t ms = now ? 0 : a->nheap ? hpl__ms_left(a->heap[0]->deadline) : -1;
  pthread_mutex_unlock(&a->lock);
  return ms;
}

int hpl_async_cancel(hpl_client *c, uint64_t tag) {
  if (!c) return HPL_EINVAL;
  hpl__casync *a = c->async;
  hpl__areq *q = NULL;
  if (a) pthread_mutex_lock(&a->lock);
  if (a) HASH_FIND(hh, a->by_tag, &tag, sizeof tag, q);
  int rc = q && q->state != HPL__AS_DONE ? 0 : HPL_ENOTFOUND;
  if (rc == 0 && q->phase != HPL__AP_ABORT) { /* an abort under way stays */
    if (q->state == HPL__AS_SENT) hpl__crpc_forget(c->st.rpc, q->t);
    if (q->state == HPL__AS_QUEUED) DL_DELETE(a->queue, q);
    q->state = HPL__AS_SENT;
    q->t = NULL;
    hpl__aop_give_up(a, q, HPL_ECANCELED);
  }
  if (a) {
    if (rc == 0) hpl__awake(a);
    pthread_mutex_unlock(&a->lock);
  }
  return rc ? hpl__cfail(c, rc, "no pending async request has tag %llu", (unsigned long long)tag)
            : 0;
}

size_t hpl_async_count(hpl_client *c) {
  if (!c || !c->async) return 0;
  pthread_mutex_lock(&c->async->lock);
  size_t n = c->async->count;
  pthread_mutex_unlock(&c->async->lock);
  return n;
}
