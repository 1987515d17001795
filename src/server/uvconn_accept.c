/* uvconn_accept.c - a server's new connections (uvconn.h): taking one off
 * a listening stream, at most so many per loop turn, and the connection
 * limit every listener applies. */
#include <stdio.h>
#include <stdlib.h>
#include <utlist.h>

#include "log.h"
#include "util.h"
#include "uvconn_int.h"

/* ------------------------------------------------------------------ pacing */

/* One listener's accepts in this loop turn. libuv accepts for as long as
 * the listening socket has connections and the callback takes them, so a
 * flood of connections (strangers cut and coming back, thousands a second)
 * made one turn of accepts, evictions and closes last 10 ms and more, and
 * requests on established connections waited behind it. Past the budget
 * the callback takes none (libuv stops watching the listener until it
 * does) and an idle handle hands the pending one over at the next turn,
 * after the other connections' events. */
typedef struct accept_pace {
  uv_stream_t *server;
  uv_connection_cb cb;
  uv_check_t check; /* after each poll: a new turn's budget */
  uv_idle_t later;  /* a connection left pending: taken next turn */
  unsigned used;
  int handles;      /* handles not closed yet (the struct goes with the last) */
  struct accept_pace *next;
} accept_pace;

static _Thread_local accept_pace *paces;

static accept_pace *pace_of(const uv_stream_t *server) {
  accept_pace *p;
  LL_FOREACH(paces, p) if (p->server == server) return p;
  return NULL;
}

static void pace_turn(uv_check_t *h) { ((accept_pace *)h->data)->used = 0; }

static void pace_later(uv_idle_t *h) {
  accept_pace *p = h->data;
  uv_idle_stop(h);
  if (!uv_is_closing((uv_handle_t *)p->server)) p->cb(p->server, 0);
}

static void pace_closed(uv_handle_t *h) {
  accept_pace *p = h->data;
  if (--p->handles == 0) free(p);
}

int hpl__conn_listen(uv_stream_t *server, int backlog, uv_connection_cb cb) {
  accept_pace *p = calloc(1, sizeof *p);
  if (!p) return UV_ENOMEM;
  p->server = server;
  p->cb = cb;
  int rc = uv_listen(server, backlog, cb);
  if (rc) {
    free(p);
    return rc;
  }
  uv_check_init(server->loop, &p->check);
  uv_idle_init(server->loop, &p->later);
  p->check.data = p->later.data = p;
  p->handles = 2;
  uv_check_start(&p->check, pace_turn);
  uv_unref((uv_handle_t *)&p->check); /* neither keeps a stopping loop alive */
  uv_unref((uv_handle_t *)&p->later);
  LL_PREPEND(paces, p);
  return 0;
}

void hpl__conn_unlisten(uv_stream_t *server) {
  accept_pace *p = pace_of(server);
  if (!p) return;
  LL_DELETE(paces, p);
  uv_close((uv_handle_t *)&p->check, pace_closed);
  uv_close((uv_handle_t *)&p->later, pace_closed);
}

/* May the listener take one more connection this turn? If not, the next
 * turn calls its callback again. */
static int pace_take(uv_stream_t *server) {
  accept_pace *p = pace_of(server);
  if (!p || p->used < HPL__CONN_ACCEPTS_PER_TURN) {
    if (p) p->used++;
    return 1;
  }
  if (!uv_is_active((uv_handle_t *)&p->later)) uv_idle_start(&p->later, pace_later);
  return 0;
}

/* ------------------------------------------------------------------ accept */

uv_stream_t *hpl__conn_accept(uv_stream_t *server, char *peer, size_t plen) {
  if (!pace_take(server)) return NULL;
  int tcp = server->type == UV_TCP;
  uv_stream_t *t = malloc(tcp ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t));
  if (!t) return NULL;
  if (tcp)
    uv_tcp_init(server->loop, (uv_tcp_t *)t);
  else
    uv_pipe_init(server->loop, (uv_pipe_t *)t, 0);
  if (uv_accept(server, t) != 0) {
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    return NULL;
  }
  if (peer && plen) snprintf(peer, plen, "%s", tcp ? "?" : "");
  if (!tcp) return t;
  uv_tcp_nodelay((uv_tcp_t *)t, 1);
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (peer && plen && uv_tcp_getpeername((uv_tcp_t *)t, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET)
      uv_ip4_name((struct sockaddr_in *)&ss, peer, plen);
    else if (ss.ss_family == AF_INET6)
      uv_ip6_name((struct sockaddr_in6 *)&ss, peer, plen);
  }
  return t;
}

int hpl__conn_full(uv_stream_t *t, unsigned open, unsigned max, uint64_t *refused,
                   const char *what) {
  if (open < max) return 0;
  if ((*refused)++ % 1000 == 0)
    HPL__LOG_WARN("%s: refusing connections: %u open, the most --max-connections allows "
                  "(%llu refused)", what, open, (unsigned long long)*refused);
  uv_close((uv_handle_t *)t, (uv_close_cb)free);
  return 1;
}

void *hpl__conn_admit(uv_stream_t *t, unsigned open, unsigned max, uint64_t *refused,
                      const char *what, size_t size) {
  /* at the limit, a stranger still in the handshake makes room (uvconn_admit.c) */
  if (open >= max && hpl__conn_hs_make_room()) open = 0;
  if (hpl__conn_full(t, open, max, refused, what)) return NULL;
  void *state = calloc(1, size);
  if (!state) uv_close((uv_handle_t *)t, (uv_close_cb)free);
  return state;
}

void hpl__conn_mark_control(uv_tcp_t *t) {
  uv_os_fd_t fd;
  if (uv_fileno((const uv_handle_t *)t, &fd) == 0) (void)hpl__sock_control(fd);
}
