/* uvconn_accept.c - a server's new connections (uvconn.h): taking one off
 * a listening stream, and the connection limit every listener applies. */
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "uvconn_int.h"

uv_stream_t *hpl__conn_accept(uv_stream_t *server, char *peer, size_t plen) {
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
