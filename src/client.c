/* client.c - libhoplite (see include/hoplite.h).
 *
 * One Unix-socket connection per handle. Calls from any thread send a
 * framed request and wait for the reply with the same request id. Waiting
 * is leader/follower: if nobody is reading the socket, the waiting caller
 * reads it itself (blocked in poll, no spinning) and hands replies that
 * belong to other callers over through a condition variable; otherwise it
 * sleeps on that variable until its reply arrives, the reader role is free,
 * or its deadline passes. So a single-threaded caller gets its reply with
 * no thread switch. A reply whose caller gave up is dropped; if it granted
 * a hold, the hold is released. The pool memfd arrives with the store's
 * HELLO frame and is mapped once.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#include "hoplite.h"
#include "proto.h"
#include "util.h"

/* A reply the caller waits for. */
typedef struct pending {
  uint64_t id;
  UT_hash_handle hh;
  int done;
  int status; /* HPL_ECONN if the connection died */
  unsigned type;
  uint8_t *msg;
  size_t msg_len;
} pending;

struct hpl_buf {
  hpl_client *c;
  struct hpl_buf *prev, *next;
  uint8_t *data;
  uint64_t size;
  uint64_t handle;
  int created; /* from hpl_create, not yet sealed */
  uint8_t *own; /* NULL, or the library's own allocation that data points
                 * into (a small object read from the directory) */
  char id[HPL_ID_MAX + 1];
};

struct hpl_client {
  int fd;
  uint8_t *base;
  uint64_t pool_size;
  uint64_t node_id;
  uint32_t inline_max;
  pthread_mutex_t lock;  /* pending, next_id, closed, bufs */
  pthread_cond_t cv;     /* signalled when any reply arrives or on close */
  pthread_mutex_t wlock; /* one writer at a time */
  int reading; /* a caller is the reader */
  hpl__framer fr; /* parse state, kept across readers */
  uint8_t rbuf[16384];
  int closed;
  pending *pending;
  uint64_t next_id;
  hpl_buf *bufs;
  /* small objects straight from the directory (direct_get) */
  const uint8_t *filter; /* the store's presence filter, read-only */
  uint32_t filter_slots;
  char dir_addr[64];
  int dir_port;
  uint64_t netns; /* the store's network namespace (inode) */
  pthread_mutex_t dlock; /* the directory connection: one exchange at a time */
  int dfd;
  uint64_t dretry_ms; /* no new connection attempt before this */
  uint64_t dnext_id;
};

/* Grace added to the store's own timeouts before the client gives up on a
 * store that does not answer at all. */
#define CLIENT_GRACE_MS 2000
#define PUT_CHUNK (8u << 20)
#define CLIENT_POPULATE_MIN (1u << 20)

/* ------------------------------------------------------------------ errors */

static __thread struct {
  const hpl_client *c;
  char msg[512];
} tls_err;

static int fail(const hpl_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(const hpl_client *c, int code, const char *fmt, ...) {
  tls_err.c = c;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_err.msg, sizeof tls_err.msg, fmt, ap);
  va_end(ap);
  return code;
}

const char *hpl_errdetail(const hpl_client *c) {
  return c && tls_err.c == c ? tls_err.msg : "";
}

/* ------------------------------------------------------------------ socket i/o */

/* Write all of buf before the deadline. 0 or HPL_ECONN / HPL_ETIMEDOUT. */
static int write_all(int fd, const uint8_t *buf, size_t len, uint64_t deadline) {
  while (len) {
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      buf += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int64_t left = hpl__ms_left(deadline);
      if (left == 0) return HPL_ETIMEDOUT;
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int r = poll(&p, 1, left < 0 ? -1 : (int)(left > 1000000 ? 1000000 : left));
      if (r < 0 && errno != EINTR) return HPL_ECONN;
      continue;
    }
    return HPL_ECONN;
  }
  return 0;
}

/* Read exactly len bytes (blocking, for the reader thread and connect).
 * 0 on success, HPL_ECONN on EOF/error, HPL_ETIMEDOUT past the deadline. */
static int read_all(int fd, uint8_t *buf, size_t len, uint64_t deadline) {
  while (len) {
    if (deadline != UINT64_MAX) {
      int64_t left = hpl__ms_left(deadline);
      if (left == 0) return HPL_ETIMEDOUT;
      struct pollfd p = {.fd = fd, .events = POLLIN};
      int r = poll(&p, 1, (int)(left > 1000000 ? 1000000 : left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) continue;
    }
    ssize_t n = recv(fd, buf, len, 0);
    if (n > 0) {
      buf += n;
      len -= (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return HPL_ECONN;
    }
  }
  return 0;
}

static const hpl__frame_limits client_limits = {
    .max_msg = HPL__MAX_MSG_CTRL, .max_payload = 0, .max_type = HPL__MSG_MAX_};

static void send_release(hpl_client *c, uint64_t handle);

/* One frame arrived: hand it to its caller (or release an orphan hold).
 * Called without c->lock. */
static void deliver(hpl_client *c, const hpl__frame_hdr *h, const uint8_t *m) {
  uint8_t *msg = malloc(h->msg_len ? h->msg_len : 1);
  if (!msg) return;
  memcpy(msg, m, h->msg_len);
  pthread_mutex_lock(&c->lock);
  pending *p = NULL;
  HASH_FIND(hh, c->pending, &h->req_id, sizeof h->req_id, p);
  if (p) {
    p->done = 1;
    p->type = h->type;
    p->msg = msg;
    p->msg_len = h->msg_len;
    msg = NULL;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->lock);
  if (!msg) return;
  /* nobody waits any more; give back a hold it may have granted */
  if (h->type == HPL__MSG_GET_REP) {
    Hplpb__GetRep *g = (Hplpb__GetRep *)hpl__msg_unpack(h->type, msg, h->msg_len);
    if (g && g->status == 0) send_release(c, g->handle);
    if (g) protobuf_c_message_free_unpacked(&g->base, NULL);
  }
  free(msg);
}

/* As the reader: wait (poll) until bytes arrive or the deadline passes, read
 * what is there and deliver every complete frame. Returns 0, HPL_ETIMEDOUT,
 * or HPL_ECONN when the connection is gone or sent garbage. */
static int read_some(hpl_client *c, uint64_t deadline) {
  int64_t left = hpl__ms_left(deadline);
  if (left == 0) return HPL_ETIMEDOUT;
  struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
  int r = poll(&pfd, 1, left < 0 ? -1 : (int)(left > 1000000 ? 1000000 : left));
  if (r == 0) return HPL_ETIMEDOUT;
  if (r < 0) return errno == EINTR ? 0 : HPL_ECONN;
  ssize_t n = recv(c->fd, c->rbuf, sizeof c->rbuf, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (n <= 0) return HPL_ECONN;
  size_t used = 0;
  while (used < (size_t)n) {
    int ev;
    const uint8_t *chunk;
    size_t clen;
    long k = hpl__framer_feed(&c->fr, c->rbuf + used, (size_t)n - used, &ev, &chunk, &clen);
    if (k < 0) return HPL_ECONN; /* the store never sends bad frames */
    used += (size_t)k;
    if (ev == HPL__FR_MSG) deliver(c, &c->fr.hdr, c->fr.msg);
    /* payloads are refused by the limits (max_payload 0) */
  }
  return 0;
}

/* Wait for p's reply until the deadline; c->lock is held on entry and exit.
 * Returns with p->done set, or c->closed, or the deadline passed. */
static void wait_reply(hpl_client *c, pending *p, uint64_t deadline) {
  struct timespec ts;
  if (deadline != UINT64_MAX) {
    ts.tv_sec = (time_t)(deadline / 1000);
    ts.tv_nsec = (long)(deadline % 1000) * 1000000L;
  }
  while (!p->done && !c->closed) {
    if (!c->reading) {
      c->reading = 1;
      pthread_mutex_unlock(&c->lock);
      int rc = read_some(c, deadline);
      pthread_mutex_lock(&c->lock);
      c->reading = 0;
      if (rc == HPL_ECONN) c->closed = 1;
      /* someone else may take over reading, or has its reply now */
      pthread_cond_broadcast(&c->cv);
      if (rc == HPL_ETIMEDOUT) return;
      continue;
    }
    int w = deadline == UINT64_MAX ? pthread_cond_wait(&c->cv, &c->lock)
                                   : pthread_cond_timedwait(&c->cv, &c->lock, &ts);
    if (w == ETIMEDOUT) return;
  }
}

/* Send a frame (header + message). */
static int send_frame(hpl_client *c, unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                      uint64_t deadline) {
  size_t len;
  uint8_t *frame = hpl__msg_frame(type, req_id, m, 0, &len);
  if (!frame) return HPL_ENOMEM;
  pthread_mutex_lock(&c->wlock);
  int rc = write_all(c->fd, frame, len, deadline);
  pthread_mutex_unlock(&c->wlock);
  free(frame);
  return rc;
}

static void send_release(hpl_client *c, uint64_t handle) {
  Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
  r.handle = handle;
  send_frame(c, HPL__MSG_RELEASE, 0, &r.base, hpl__deadline_ms(5000));
}

/* A request and its reply. On success *out is the unpacked reply (of type
 * `rtype`) whose status is 0; the caller frees it. On failure the detail is
 * set and nothing is returned. timeout_ms is the store-side timeout; the
 * client waits CLIENT_GRACE_MS longer for the store's own answer. */
static int call(hpl_client *c, unsigned type, const ProtobufCMessage *m, unsigned rtype,
                int64_t timeout_ms, ProtobufCMessage **out) {
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : hpl__deadline_ms(timeout_ms + CLIENT_GRACE_MS);
  pending *p = calloc(1, sizeof *p);
  if (!p) return fail(c, HPL_ENOMEM, "out of memory");
  pthread_mutex_lock(&c->lock);
  if (c->closed) {
    pthread_mutex_unlock(&c->lock);
    free(p);
    return fail(c, HPL_ECONN, "the connection to the store is closed");
  }
  p->id = ++c->next_id;
  HASH_ADD(hh, c->pending, id, sizeof p->id, p);
  pthread_mutex_unlock(&c->lock);

  int rc = send_frame(c, type, p->id, m, deadline);
  pthread_mutex_lock(&c->lock);
  if (rc == 0) {
    wait_reply(c, p, deadline);
    if (!p->done) rc = c->closed ? HPL_ECONN : HPL_ETIMEDOUT;
  }
  HASH_DEL(c->pending, p);
  pthread_mutex_unlock(&c->lock);
  if (rc) {
    free(p->msg);
    free(p);
    if (rc == HPL_ETIMEDOUT)
      return fail(c, rc, "the store did not answer %s within %lld ms", hpl__msg_name(type),
                  (long long)timeout_ms + CLIENT_GRACE_MS);
    return fail(c, rc, "the connection to the store is closed");
  }
  /* Every reply message starts with status and detail, so a generic Reply
   * decodes the outcome of any of them. */
  Hplpb__Reply *st = (Hplpb__Reply *)hpl__msg_unpack(HPL__MSG_REPLY, p->msg, p->msg_len);
  if (!st) {
    free(p->msg);
    free(p);
    return fail(c, HPL_EPROTO, "undecodable reply to %s", hpl__msg_name(type));
  }
  if (st->status != 0) {
    rc = fail(c, st->status, "%s", st->detail && *st->detail ? st->detail
                                                             : hpl_strerror(st->status));
  } else if (p->type != rtype) {
    rc = fail(c, HPL_EPROTO, "reply of type %s to %s", hpl__msg_name(p->type), hpl__msg_name(type));
  } else if (out) {
    *out = hpl__msg_unpack(rtype, p->msg, p->msg_len);
    if (!*out) rc = fail(c, HPL_EPROTO, "undecodable %s", hpl__msg_name(rtype));
  }
  protobuf_c_message_free_unpacked(&st->base, NULL);
  free(p->msg);
  free(p);
  return rc;
}

/* ------------------------------------------------------------------ handles */

int hpl_connect(const char *socket_path, int64_t timeout_ms, hpl_client **out) {
  if (!out) return HPL_EINVAL;
  if (!socket_path) socket_path = getenv(HPL_SOCKET_ENV);
  if (!socket_path || !*socket_path) return HPL_EINVAL;
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(socket_path) >= sizeof a.sun_path) return HPL_EINVAL;
  strcpy(a.sun_path, socket_path);
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return HPL_ESYS;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return HPL_ECONN;
  }
  /* HELLO: the header comes with the pool's memfd (and the filter's) */
  uint8_t hdr[HPL__FRAME_HDR_LEN];
  int memfd = -1, ffd = -1;
  size_t got = 0;
  while (got < sizeof hdr) {
    int64_t left = hpl__ms_left(deadline);
    if (left == 0) goto timeout;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, left < 0 ? -1 : (int)left) <= 0) continue;
    struct iovec iov = {.iov_base = hdr + got, .iov_len = sizeof hdr - got};
    char cbuf[CMSG_SPACE(2 * sizeof(int))];
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof cbuf};
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      goto broken;
    }
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      int fds[2] = {-1, -1};
      memcpy(fds, CMSG_DATA(cm), (nfd > 2 ? 2 : nfd) * sizeof(int));
      for (size_t i = 2; i < nfd; i++) { /* more than we asked for: close them */
        int extra;
        memcpy(&extra, CMSG_DATA(cm) + i * sizeof(int), sizeof extra);
        close(extra);
      }
      if (memfd < 0) {
        memfd = fds[0];
        ffd = fds[1];
      } else {
        if (fds[0] >= 0) close(fds[0]);
        if (fds[1] >= 0) close(fds[1]);
      }
    }
    got += (size_t)n;
  }
  hpl__frame_hdr h;
  if (hpl__frame_decode_hdr(hdr, sizeof hdr, &client_limits, &h, NULL) != 0 ||
      h.type != HPL__MSG_HELLO || memfd < 0)
    goto broken;
  uint8_t *mbuf = malloc(h.msg_len ? h.msg_len : 1);
  if (!mbuf) goto broken;
  int rc = read_all(fd, mbuf, h.msg_len, deadline);
  Hplpb__Hello *hello = rc ? NULL : (Hplpb__Hello *)hpl__msg_unpack(HPL__MSG_HELLO, mbuf, h.msg_len);
  free(mbuf);
  if (rc == HPL_ETIMEDOUT) goto timeout;
  if (!hello || hello->pool_size == 0) {
    if (hello) protobuf_c_message_free_unpacked(&hello->base, NULL);
    goto broken;
  }
  hpl_client *c = calloc(1, sizeof *c);
  if (!c) {
    protobuf_c_message_free_unpacked(&hello->base, NULL);
    close(memfd);
    if (ffd >= 0) close(ffd);
    close(fd);
    return HPL_ENOMEM;
  }
  c->fd = fd;
  c->dfd = -1;
  c->pool_size = hello->pool_size;
  c->node_id = hello->node_id;
  c->inline_max = hello->inline_max;
  uint32_t slots = hello->filter_slots;
  struct stat fst;
  if (ffd >= 0 && slots && slots <= (1u << 24) && (slots & (slots - 1)) == 0 &&
      fstat(ffd, &fst) == 0 && fst.st_size >= (off_t)slots) {
    void *f = mmap(NULL, slots, PROT_READ, MAP_SHARED, ffd, 0);
    if (f != MAP_FAILED) {
      c->filter = f;
      c->filter_slots = slots;
    }
  }
  if (ffd >= 0) close(ffd);
  const char *direct = getenv("HPL_DIRECT_GETS");
  if (hello->dir_addr && strlen(hello->dir_addr) < sizeof c->dir_addr && hello->dir_port &&
      hello->dir_port <= 65535 && !(direct && !strcmp(direct, "0"))) {
    strcpy(c->dir_addr, hello->dir_addr);
    c->dir_port = (int)hello->dir_port;
    c->netns = hello->netns;
  }
  protobuf_c_message_free_unpacked(&hello->base, NULL);
  c->base = mmap(NULL, c->pool_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  close(memfd);
  if (c->base == MAP_FAILED) {
    if (c->filter) munmap((void *)c->filter, c->filter_slots);
    close(fd);
    free(c);
    return HPL_ESYS;
  }
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->dlock, NULL);
  pthread_mutex_init(&c->wlock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &ca);
  pthread_condattr_destroy(&ca);
  hpl__framer_init(&c->fr, &client_limits);
  *out = c;
  return 0;
timeout:
  if (memfd >= 0) close(memfd);
  if (ffd >= 0) close(ffd);
  close(fd);
  return HPL_ETIMEDOUT;
broken:
  if (memfd >= 0) close(memfd);
  if (ffd >= 0) close(ffd);
  close(fd);
  return HPL_EPROTO;
}

void hpl_close(hpl_client *c) {
  if (!c) return;
  close(c->fd);
  hpl__framer_free(&c->fr);
  while (c->bufs) {
    hpl_buf *b = c->bufs;
    c->bufs = b->next;
    free(b->own);
    free(b);
  }
  if (c->dfd >= 0) close(c->dfd);
  if (c->filter) munmap((void *)c->filter, c->filter_slots);
  pthread_mutex_destroy(&c->dlock);
  pending *p, *tmp;
  HASH_ITER(hh, c->pending, p, tmp) {
    HASH_DEL(c->pending, p);
    free(p->msg);
    free(p);
  }
  munmap(c->base, c->pool_size);
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->wlock);
  pthread_cond_destroy(&c->cv);
  if (tls_err.c == c) tls_err.c = NULL;
  free(c);
}

/* ------------------------------------------------------------------ buffers */

static void buf_link(hpl_client *c, hpl_buf *b) {
  pthread_mutex_lock(&c->lock);
  b->next = c->bufs;
  if (c->bufs) c->bufs->prev = b;
  c->bufs = b;
  pthread_mutex_unlock(&c->lock);
}

static hpl_buf *buf_new(hpl_client *c, const char *id, uint64_t off, uint64_t size,
                        uint64_t handle, int created) {
  if (off > c->pool_size || size > c->pool_size - off) return NULL;
  hpl_buf *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->c = c;
  b->data = c->base + off;
  b->size = size;
  b->handle = handle;
  b->created = created;
  snprintf(b->id, sizeof b->id, "%s", id);
  buf_link(c, b);
  return b;
}

static void buf_free(hpl_client *c, hpl_buf *b) {
  pthread_mutex_lock(&c->lock);
  if (b->prev) b->prev->next = b->next; else c->bufs = b->next;
  if (b->next) b->next->prev = b->prev;
  pthread_mutex_unlock(&c->lock);
  free(b->own);
  free(b);
}

void *hpl_buf_data(const hpl_buf *b) { return b ? b->data : NULL; }
uint64_t hpl_buf_size(const hpl_buf *b) { return b ? b->size : 0; }
const char *hpl_buf_id(const hpl_buf *b) { return b ? b->id : NULL; }
int hpl_buf_shared(const hpl_buf *b) { return b && !b->own; }

/* ------------------------------------------------------------------ objects */

#define CHECK_ID(c, id)                                                              \
  do {                                                                               \
    if (!(c)) return HPL_EINVAL;                                                     \
    if (!hpl__id_valid(id))                                                           \
      return fail((c), HPL_EINVAL, "invalid object id (1-%d bytes, no control characters)", \
                  HPL_ID_MAX);                                                       \
  } while (0)

int hpl_create(hpl_client *c, const char *id, uint64_t size, int64_t timeout_ms, hpl_buf **out) {
  CHECK_ID(c, id);
  if (!out) return fail(c, HPL_EINVAL, "out must not be NULL");
  Hplpb__CreateReq r = HPLPB__CREATE_REQ__INIT;
  r.id = (char *)id;
  r.size = size;
  r.timeout_ms = timeout_ms;
  Hplpb__CreateRep *rep = NULL;
  int rc = call(c, HPL__MSG_CREATE, &r.base, HPL__MSG_CREATE_REP, timeout_ms,
                (ProtobufCMessage **)&rep);
  if (rc) return rc;
  hpl_buf *b = buf_new(c, id, rep->offset, size, rep->handle, 1);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  if (!b) return fail(c, HPL_EPROTO, "store returned a region outside the pool");
  if (size >= CLIENT_POPULATE_MIN) {
    /* map the region's pages in one call rather than one fault per page;
     * an old kernel without MADV_POPULATE_WRITE just faults as usual */
    uintptr_t a = (uintptr_t)b->data & ~(uintptr_t)4095;
    uintptr_t e = ((uintptr_t)b->data + size + 4095) & ~(uintptr_t)4095;
    madvise((void *)a, e - a, MADV_POPULATE_WRITE);
  }
  *out = b;
  return 0;
}

int hpl_buf_progress(hpl_client *c, hpl_buf *b, uint64_t bytes) {
  if (!c || !b || !b->created || bytes > b->size)
    return c ? fail(c, HPL_EINVAL, "not a buffer being created, or bytes beyond its size")
             : HPL_EINVAL;
  Hplpb__ProgressNote n = HPLPB__PROGRESS_NOTE__INIT;
  n.handle = b->handle;
  n.bytes = bytes;
  int rc = send_frame(c, HPL__MSG_PROGRESS, 0, &n.base, hpl__deadline_ms(5000));
  return rc ? fail(c, rc, "cannot reach the store") : 0;
}

int hpl_seal(hpl_client *c, hpl_buf *b, int64_t timeout_ms) {
  if (!c || !b) return c ? fail(c, HPL_EINVAL, "NULL buffer") : HPL_EINVAL;
  if (!b->created) return fail(c, HPL_EINVAL, "buffer is not being created");
  Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
  r.handle = b->handle;
  r.timeout_ms = timeout_ms;
  int rc = call(c, HPL__MSG_SEAL, &r.base, HPL__MSG_REPLY, timeout_ms, NULL);
  buf_free(c, b);
  return rc;
}

void hpl_abort(hpl_client *c, hpl_buf *b) {
  if (!c || !b) return;
  if (b->created) {
    Hplpb__HandleReq r = HPLPB__HANDLE_REQ__INIT;
    r.handle = b->handle;
    /* wait (bounded) until the store and directory forgot the object */
    call(c, HPL__MSG_ABORT, &r.base, HPL__MSG_REPLY, 5000, NULL);
  }
  buf_free(c, b);
}

int hpl_put(hpl_client *c, const char *id, const void *data, uint64_t size, int64_t timeout_ms) {
  CHECK_ID(c, id);
  if (size && !data) return fail(c, HPL_EINVAL, "data is NULL");
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  hpl_buf *b;
  int rc = hpl_create(c, id, size, timeout_ms, &b);
  if (rc) return rc;
  /* copy in chunks and tell the store how far we got, so receivers already
   * pulling the object can forward the first bytes */
  int notify = size > c->inline_max;
  for (uint64_t off = 0; off < size;) {
    uint64_t n = size - off < PUT_CHUNK ? size - off : PUT_CHUNK;
    memcpy(b->data + off, (const uint8_t *)data + off, n);
    off += n;
    if (notify && off < size) hpl_buf_progress(c, b, off);
  }
  int64_t left = hpl__ms_left(deadline);
  return hpl_seal(c, b, timeout_ms < 0 ? -1 : left);
}

/* ------------------------------------------------------------------ small objects */

/* The directory holds objects of at most inline_max bytes itself. A get of
 * one that this node certainly does not hold (its slot in the store's
 * presence filter is 0) reads it straight from the directory: two process
 * wake-ups (directory, caller) instead of four (store, directory, store,
 * caller). Anything else - not inline, not there yet, the directory not
 * reachable from here - and the get goes to the store as usual, so this
 * path never fails a get. */

#define DIRECT_WAIT_MS 500     /* one exchange with the directory, at most */
#define DIRECT_RETRY_MS 5000   /* after a failed connect, before trying again */
#define PEEK_MAX_MSG 1024      /* a PEEK_REP message (status, size, flag) is tiny */

/* Connect to the directory (caller holds dlock). 0 or -1. */
static int dir_connect(hpl_client *c, uint64_t deadline) {
  if (c->dfd >= 0) return 0;
  if (hpl__now_ms() < c->dretry_ms) return -1;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t sl;
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, c->dir_addr, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)c->dir_port);
    sl = sizeof *a4;
  } else if (inet_pton(AF_INET6, c->dir_addr, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)c->dir_port);
    sl = sizeof *a6;
  } else {
    c->dretry_ms = UINT64_MAX; /* not an address: never */
    return -1;
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) goto failed;
  if (connect(fd, (struct sockaddr *)&ss, sl) != 0) {
    if (errno != EINPROGRESS) goto failed;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int64_t left = hpl__ms_left(deadline);
    int err = 0;
    socklen_t el = sizeof err;
    if (left == 0 || poll(&p, 1, (int)left) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)
      goto failed;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->dfd = fd;
  return 0;
failed:
  if (fd >= 0) close(fd);
  c->dretry_ms = hpl__now_ms() + DIRECT_RETRY_MS;
  return -1;
}

/* One PEEK exchange (caller holds dlock). 0 with *out set, 1 if the
 * directory has no inline bytes for `id`, -1 if the connection failed (it
 * is closed then). */
static int peek(hpl_client *c, const char *id, uint64_t deadline, hpl_buf **out) {
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = (char *)id;
  uint64_t req = ++c->dnext_id;
  size_t len;
  uint8_t *frame = hpl__msg_frame(HPL__MSG_PEEK, req, &r.base, 0, &len);
  if (!frame) return 1;
  int rc = write_all(c->dfd, frame, len, deadline);
  free(frame);
  hpl__frame_hdr h;
  Hplpb__PeekRep *rep = NULL;
  const hpl__frame_limits lim = {
      .max_msg = PEEK_MAX_MSG, .max_payload = c->inline_max, .max_type = HPL__MSG_MAX_};
  /* the reply usually arrives whole: one poll and one recv for all of it */
  size_t cap = HPL__FRAME_HDR_LEN + PEEK_MAX_MSG + c->inline_max, have = 0;
  uint8_t *buf = malloc(cap), *body;
  if (rc || !buf) goto broken;
  while (have < HPL__FRAME_HDR_LEN) {
    int64_t left = hpl__ms_left(deadline);
    struct pollfd p = {.fd = c->dfd, .events = POLLIN};
    if (left == 0 || (poll(&p, 1, (int)left) < 0 && errno != EINTR)) goto broken;
    ssize_t n = recv(c->dfd, buf + have, cap - have, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) goto broken;
    if (n > 0) have += (size_t)n;
  }
  if (hpl__frame_decode_hdr(buf, HPL__FRAME_HDR_LEN, &lim, &h, NULL) != 0 ||
      h.type != HPL__MSG_PEEK_REP || h.req_id != req || h.payload_len > c->inline_max)
    goto broken;
  size_t total = HPL__FRAME_HDR_LEN + h.msg_len + (size_t)h.payload_len;
  if (have > total ||
      (have < total && read_all(c->dfd, buf + have, total - have, deadline) != 0))
    goto broken; /* more than one reply, or the rest did not come */
  body = buf + HPL__FRAME_HDR_LEN;
  rep = (Hplpb__PeekRep *)hpl__msg_unpack(HPL__MSG_PEEK_REP, body, h.msg_len);
  if (!rep) goto broken;
  int found = rep->status == 0 && rep->inline_ && rep->size == h.payload_len;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  if (!found) {
    free(buf);
    return 1;
  }
  /* the reply buffer becomes the object's: trimmed to the reply, no copy */
  hpl_buf *b = calloc(1, sizeof *b);
  uint8_t *own = b ? realloc(buf, total) : NULL;
  if (!own) {
    free(b);
    free(buf);
    return 1;
  }
  b->c = c;
  b->own = own;
  b->data = own + HPL__FRAME_HDR_LEN + h.msg_len;
  b->size = h.payload_len;
  snprintf(b->id, sizeof b->id, "%s", id);
  buf_link(c, b);
  *out = b;
  return 0;
broken:
  free(buf);
  close(c->dfd);
  c->dfd = -1;
  return -1;
}

/* Whether the calling thread shares the store's network namespace: only
 * then does it reach the directory the way the store does (a client in
 * another namespace might route the address somewhere else entirely). */
static int same_netns(const hpl_client *c) {
  struct stat st;
  return c->netns && stat("/proc/thread-self/ns/net", &st) == 0 && (uint64_t)st.st_ino == c->netns;
}

/* 0 with *out set, or 1: ask the store. */
static int direct_get(hpl_client *c, const char *id, uint64_t deadline, hpl_buf **out) {
  if (!c->filter || !c->dir_port ||
      __atomic_load_n(&c->filter[hpl__filter_slot(id, c->filter_slots)], __ATOMIC_ACQUIRE) ||
      !same_netns(c))
    return 1;
  uint64_t dl = hpl__deadline_ms(DIRECT_WAIT_MS);
  if (deadline < dl) dl = deadline;
  pthread_mutex_lock(&c->dlock);
  int rc = dir_connect(c, dl) == 0 ? peek(c, id, dl, out) : 1;
  pthread_mutex_unlock(&c->dlock);
  return rc == 0 ? 0 : 1;
}

int hpl_get(hpl_client *c, const char *id, int64_t timeout_ms, hpl_buf **out) {
  CHECK_ID(c, id);
  if (!out) return fail(c, HPL_EINVAL, "out must not be NULL");
  if (timeout_ms != 0 && direct_get(c, id, hpl__deadline_ms(timeout_ms), out) == 0) return 0;
  Hplpb__GetReq r = HPLPB__GET_REQ__INIT;
  r.id = (char *)id;
  r.timeout_ms = timeout_ms;
  Hplpb__GetRep *rep = NULL;
  int rc = call(c, HPL__MSG_GET, &r.base, HPL__MSG_GET_REP, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  hpl_buf *b = buf_new(c, id, rep->offset, rep->size, rep->handle, 0);
  if (!b) {
    send_release(c, rep->handle);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return fail(c, HPL_EPROTO, "store returned a region outside the pool");
  }
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  *out = b;
  return 0;
}

void hpl_release(hpl_client *c, hpl_buf *b) {
  if (!c || !b) return;
  if (b->created) {
    hpl_abort(c, b);
    return;
  }
  if (!b->own) send_release(c, b->handle);
  buf_free(c, b);
}

int hpl_contains(hpl_client *c, const char *id, int64_t timeout_ms, int *out_local) {
  CHECK_ID(c, id);
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = (char *)id;
  r.timeout_ms = timeout_ms;
  Hplpb__ContainsRep *rep = NULL;
  int rc = call(c, HPL__MSG_CONTAINS, &r.base, HPL__MSG_CONTAINS_REP, timeout_ms,
                (ProtobufCMessage **)&rep);
  if (rc) return rc;
  if (out_local) *out_local = rep->local ? 1 : 0;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

int hpl_stat(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t *size,
             uint32_t *copies, uint32_t *complete, int *is_inline) {
  CHECK_ID(c, id);
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = (char *)id;
  r.timeout_ms = timeout_ms;
  Hplpb__StatRep *rep = NULL;
  int rc = call(c, HPL__MSG_STAT, &r.base, HPL__MSG_STAT_REP, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  if (size) *size = rep->size;
  if (copies) *copies = rep->copies;
  if (complete) *complete = rep->complete;
  if (is_inline) *is_inline = rep->inline_ ? 1 : 0;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return 0;
}

int hpl_delete(hpl_client *c, const char *id, int64_t timeout_ms) {
  CHECK_ID(c, id);
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = (char *)id;
  r.timeout_ms = timeout_ms;
  return call(c, HPL__MSG_DELETE, &r.base, HPL__MSG_REPLY, timeout_ms, NULL);
}

/* Growable text for list-style results. */
typedef struct text {
  char *p;
  size_t len, cap;
} text;

static int text_addf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int text_addf(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if (t->p && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return 0;
    }
    size_t cap = (t->cap ? t->cap * 2 : 256) + (size_t)n;
    char *np = realloc(t->p, cap);
    if (!np) return -1;
    t->p = np;
    t->cap = cap;
  }
}

static int text_done(hpl_client *c, text *t, char **out) {
  if (!t->p && text_addf(t, "%s", "") != 0) return fail(c, HPL_ENOMEM, "out of memory");
  *out = t->p;
  return 0;
}

int hpl_list(hpl_client *c, const char *prefix, int64_t timeout_ms, char **out) {
  if (!c) return HPL_EINVAL;
  if (!out) return fail(c, HPL_EINVAL, "out must not be NULL");
  Hplpb__ListReq r = HPLPB__LIST_REQ__INIT;
  r.prefix = (char *)(prefix ? prefix : "");
  r.timeout_ms = timeout_ms;
  Hplpb__ListRep *rep = NULL;
  int rc = call(c, HPL__MSG_LIST, &r.base, HPL__MSG_LIST_REP, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  text t = {0};
  for (size_t i = 0; i < rep->n_objects; i++) {
    Hplpb__ObjInfo *o = rep->objects[i];
    if (text_addf(&t, "%s\t%llu\t%u\t%u\t%d\n", o->id, (unsigned long long)o->size, o->copies,
                  o->complete, o->inline_ ? 1 : 0) != 0) {
      free(t.p);
      protobuf_c_message_free_unpacked(&rep->base, NULL);
      return fail(c, HPL_ENOMEM, "out of memory");
    }
  }
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return text_done(c, &t, out);
}

int hpl_counters(hpl_client *c, int64_t timeout_ms, char **out) {
  if (!c) return HPL_EINVAL;
  if (!out) return fail(c, HPL_EINVAL, "out must not be NULL");
  Hplpb__CountersReq r = HPLPB__COUNTERS_REQ__INIT;
  r.timeout_ms = timeout_ms;
  Hplpb__CountersRep *rep = NULL;
  int rc = call(c, HPL__MSG_COUNTERS, &r.base, HPL__MSG_COUNTERS_REP, timeout_ms,
                (ProtobufCMessage **)&rep);
  if (rc) return rc;
  text t = {0};
  for (size_t i = 0; i < rep->n_counters; i++) {
    if (text_addf(&t, "%s %llu\n", rep->counters[i]->name,
                  (unsigned long long)rep->counters[i]->value) != 0) {
      free(t.p);
      protobuf_c_message_free_unpacked(&rep->base, NULL);
      return fail(c, HPL_ENOMEM, "out of memory");
    }
  }
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return text_done(c, &t, out);
}

int hpl_counter(hpl_client *c, const char *name, int64_t timeout_ms, uint64_t *value) {
  if (!c || !name) return c ? fail(c, HPL_EINVAL, "name is NULL") : HPL_EINVAL;
  Hplpb__CountersReq r = HPLPB__COUNTERS_REQ__INIT;
  r.timeout_ms = timeout_ms;
  Hplpb__CountersRep *rep = NULL;
  int rc = call(c, HPL__MSG_COUNTERS, &r.base, HPL__MSG_COUNTERS_REP, timeout_ms,
                (ProtobufCMessage **)&rep);
  if (rc) return rc;
  rc = fail(c, HPL_ENOTFOUND, "no counter '%s'", name);
  for (size_t i = 0; i < rep->n_counters; i++)
    if (strcmp(rep->counters[i]->name, name) == 0) {
      if (value) *value = rep->counters[i]->value;
      rc = 0;
      break;
    }
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return rc;
}

int hpl_transfers(hpl_client *c, uint64_t since, int64_t timeout_ms, char **out,
                  uint64_t *next_since) {
  if (!c) return HPL_EINVAL;
  if (!out) return fail(c, HPL_EINVAL, "out must not be NULL");
  static const char *kinds[] = {"?", "assign", "done", "remove", "node-gone", "delete", "reset"};
  Hplpb__TransfersReq r = HPLPB__TRANSFERS_REQ__INIT;
  r.since = since;
  r.timeout_ms = timeout_ms;
  Hplpb__TransfersRep *rep = NULL;
  int rc = call(c, HPL__MSG_TRANSFERS, &r.base, HPL__MSG_TRANSFERS_REP, timeout_ms,
                (ProtobufCMessage **)&rep);
  if (rc) return rc;
  text t = {0};
  for (size_t i = 0; i < rep->n_transfers; i++) {
    Hplpb__Transfer *x = rep->transfers[i];
    const char *k = x->kind < 7 ? kinds[x->kind] : "?";
    if (text_addf(&t, "%llu %llu %s %016llx %016llx %s\n", (unsigned long long)x->seq,
                  (unsigned long long)x->t_us, k, (unsigned long long)x->receiver,
                  (unsigned long long)x->sender, x->id && *x->id ? x->id : "-") != 0) {
      free(t.p);
      protobuf_c_message_free_unpacked(&rep->base, NULL);
      return fail(c, HPL_ENOMEM, "out of memory");
    }
  }
  if (next_since) *next_since = rep->next;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return text_done(c, &t, out);
}

int hpl_reduce(hpl_client *c, const char *target, const char *const *sources, size_t nsources,
               size_t num_objects, hpl_op op, hpl_dtype dtype, int64_t timeout_ms) {
  CHECK_ID(c, target);
  if (!sources || nsources == 0) return fail(c, HPL_EINVAL, "no sources");
  if (num_objects > nsources)
    return fail(c, HPL_EINVAL, "num_objects (%zu) exceeds the number of sources (%zu)",
                num_objects, nsources);
  if ((unsigned)op > HPL_OP_PROD) return fail(c, HPL_EINVAL, "unknown op %d", (int)op);
  if (!hpl_dtype_size((int)dtype)) return fail(c, HPL_EINVAL, "unknown dtype %d", (int)dtype);
  for (size_t i = 0; i < nsources; i++)
    if (!hpl__id_valid(sources[i])) return fail(c, HPL_EINVAL, "source %zu has an invalid id", i);
  Hplpb__ReduceReq r = HPLPB__REDUCE_REQ__INIT;
  r.target = (char *)target;
  r.n_sources = nsources;
  r.sources = (char **)sources;
  r.num_objects = (uint32_t)num_objects;
  r.op = (uint32_t)op;
  r.dtype = (uint32_t)dtype;
  r.timeout_ms = timeout_ms;
  return call(c, HPL__MSG_REDUCE, &r.base, HPL__MSG_REDUCE_REP, timeout_ms, NULL);
}

int hpl_reduce_sources(hpl_client *c, const char *target, int64_t timeout_ms, char **out) {
  CHECK_ID(c, target);
  if (!out) return fail(c, HPL_EINVAL, "out must not be NULL");
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = (char *)target;
  r.timeout_ms = timeout_ms;
  Hplpb__ReduceInfoRep *rep = NULL;
  int rc = call(c, HPL__MSG_REDUCE_INFO, &r.base, HPL__MSG_REDUCE_INFO_REP, timeout_ms,
                (ProtobufCMessage **)&rep);
  if (rc) return rc;
  text t = {0};
  for (size_t i = 0; i < rep->n_sources; i++)
    if (text_addf(&t, "%s\n", rep->sources[i]) != 0) {
      free(t.p);
      protobuf_c_message_free_unpacked(&rep->base, NULL);
      return fail(c, HPL_ENOMEM, "out of memory");
    }
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return text_done(c, &t, out);
}

int hpl_allreduce(hpl_client *c, const char *target, const char *const *sources, size_t nsources,
                  size_t num_objects, hpl_op op, hpl_dtype dtype, int64_t timeout_ms,
                  hpl_buf **out) {
  if (!out) return c ? fail(c, HPL_EINVAL, "out must not be NULL") : HPL_EINVAL;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  int rc = hpl_reduce(c, target, sources, nsources, num_objects, op, dtype, timeout_ms);
  if (rc) return rc;
  return hpl_get(c, target, timeout_ms < 0 ? -1 : hpl__ms_left(deadline), out);
}

void hpl_free(void *p) { free(p); }
