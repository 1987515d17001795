/* uvconn_accept.c - taking a new connection off a server's listening
 * stream (uvconn.h). */
#include <stdio.h>
#include <stdlib.h>

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
