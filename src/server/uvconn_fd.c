/* uvconn_fd.c - a framed connection's writes straight to its socket's
 * descriptor, around libuv's write queue: the fan-out of a loop turn's
 * corked frames to many connections at once (fanout.h), and sendfile(2)
 * of pool bytes (hpl__conn_sendfile). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>
#include <utlist.h>

#include "fanout.h"
#include "hoplite.h"
#include "log.h"
#include "trace.h"
#include "uvconn_int.h"

/* ------------------------------------------------------------------ fan-out */

/* Whether c may go in a fan-out batch (nothing queued ahead of its corked
 * frames), and its socket in *fd. */
static int fanout_fd(hpl__conn *c, uv_os_fd_t *fd) {
  return c->wq_bytes == c->cork_bytes && uv_fileno((uv_handle_t *)c->s, fd) == 0;
}

/* The corked connections with nothing queued before their frames, up to
 * FANOUT_MAX of them, written at once by hpl__fanout_write (a server
 * answering many waiting clients in one turn); the others stay listed.
 * The ring writes them in the cork list's order; the helper thread does
 * not keep the order across connections, so only the directory, which
 * needs none, starts that one. The loop waits for the batch, which is one
 * nonblocking send per connection (in one io_uring submission, or shared
 * with the helper thread: fanout.h).
 * The batch's arrays are static: the fan-out is one per process, used from
 * one loop's thread (fanout.h). */
#define FANOUT_MAX 256
void hpl__conn_flush_fanout(hpl__conn_corks *k) {
  static hpl__fanout_item it[FANOUT_MAX];
  static hpl__conn *cs[FANOUT_MAX];
  static hpl__conn_wreq *lists[FANOUT_MAX];
  static struct iovec iov[FANOUT_MAX][HPL__CORK_MAX_FRAMES];
  size_t n = 0, eligible = 0, min = hpl__fanout_min();
  uv_os_fd_t fd;
  for (hpl__conn *c = k->list; c && eligible < min; c = c->cork_next)
    eligible += fanout_fd(c, &fd);
  if (eligible < min) return;
  for (hpl__conn *c = k->list, *next; c && n < FANOUT_MAX; c = next) {
    next = c->cork_next;
    if (!fanout_fd(c, &fd)) continue;
    DL_DELETE2(k->list, c, cork_prev, cork_next);
    c->cork_listed = 0;
    unsigned m;
    cs[n] = c;
    lists[n] = hpl__conn_cork_take(c, iov[n], &m);
    it[n] = (hpl__fanout_item){.fd = fd, .iov = iov[n], .iovcnt = m};
    n++;
  }
  hpl__trace("flush.fanout", NULL);
  hpl__fanout_write(it, n);
  for (size_t i = 0; i < n; i++)
    hpl__conn_cork_finish(cs[i], lists[i], it[i].result > 0 ? (size_t)it[i].result : 0);
}

/* ------------------------------------------------------------------ sendfile */

/* Send what the socket takes of the pending sendfile: 0 when all went, 1
 * when the socket is full, or -errno. */
static int sf_push(hpl__conn *c, int sock) {
  while (c->sf_left) {
    off_t off = (off_t)c->sf_off;
    size_t n = c->sf_left > (1u << 30) ? (1u << 30) : (size_t)c->sf_left;
    ssize_t k = sendfile(sock, c->sf_in, &off, n);
    if (k > 0) {
      c->sf_off += (uint64_t)k;
      c->sf_left -= (uint64_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
    return k < 0 ? -errno : -EIO; /* 0: the file ended early */
  }
  return 0;
}

static void sf_writable(uv_poll_t *h, int status, int events) {
  (void)events;
  hpl__conn *c = h->data;
  if (c->closing || !c->sf_left) return;
  uint64_t before = c->sf_left;
  int rc = status < 0 ? -EIO : sf_push(c, c->sf_fd);
  c->wq_bytes -= (size_t)(before - c->sf_left);
  if (rc == 1) return; /* still full: wait for room again */
  uv_poll_stop(h);
  if (rc < 0) {
    HPL__LOG_DEBUG("%s: sendfile failed: %s", c->label, strerror(-rc));
    hpl__conn_close(c, HPL_ECONN); /* tells sf_cb */
    return;
  }
  hpl__conn_write_cb cb = c->sf_cb;
  c->sf_cb = NULL;
  hpl__conn_release_held(c);
  if (cb) cb(c, 0, c->sf_arg);
}

int hpl__conn_sendfile(hpl__conn *c, int fd, uint64_t off, size_t len, hpl__conn_write_cb cb,
                       void *arg) {
  if (c->closing) return HPL_ECONN;
  uv_os_fd_t sock;
  if (c->hs != HPL__HS_OPEN || c->tx.seal || c->wq_bytes || c->cork || c->held || c->sf_left ||
      c->s->type != UV_TCP || uv_fileno((uv_handle_t *)c->s, &sock) != 0)
    return 1;
  if (!len) return 2;
  c->sf_in = fd;
  c->sf_off = off;
  c->sf_left = len;
  int rc = sf_push(c, sock);
  if (rc == 0) return 2;
  if (rc < 0) {
    int sent = c->sf_left != len;
    c->sf_left = 0;
    if (!sent && (rc == -EINVAL || rc == -ENOSYS || rc == -EOPNOTSUPP)) return 1;
    HPL__LOG_DEBUG("%s: sendfile failed: %s", c->label, strerror(-rc));
    hpl__conn_close(c, HPL_ECONN);
    return HPL_ECONN;
  }
  if (!c->sf_poll) { /* the first wait: a duplicate fd to watch for room */
    uv_poll_t *p = malloc(sizeof *p);
    int dfd = p ? dup(sock) : -1;
    if (dfd < 0 || uv_poll_init(c->s->loop, p, dfd) != 0) {
      if (dfd >= 0) close(dfd);
      free(p);
      c->sf_left = 0;
      hpl__conn_close(c, HPL_ECONN);
      return HPL_ECONN;
    }
    p->data = c;
    c->sf_poll = p;
    c->sf_fd = dfd;
    c->handles++;
  }
  c->sf_cb = cb;
  c->sf_arg = arg;
  c->wq_bytes += c->sf_left;
  uv_poll_start(c->sf_poll, UV_WRITABLE, sf_writable);
  return 0;
}

void hpl__conn_sendfile_close(hpl__conn *c) {
  if (c->sf_left) { /* an unfinished sendfile: its owner hears so */
    c->wq_bytes -= c->sf_left;
    c->sf_left = 0;
    hpl__conn_write_cb cb = c->sf_cb;
    c->sf_cb = NULL;
    if (cb) cb(c, HPL_ECONN, c->sf_arg);
  }
  if (c->sf_poll) { /* uv_close stops the polling at once: the fd may go */
    uv_close((uv_handle_t *)c->sf_poll, hpl__conn_handle_closed);
    close(c->sf_fd);
    c->sf_fd = -1;
  }
}
