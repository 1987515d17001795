/* cdial.c - opening a client library connection to the directory: address,
 * connect with a deadline, handshake, RPC handle (see cdial.h). */
#include "cdial.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "cwait.h"
#include "hoplite.h"
#include "util.h"

int hpl__cdial_numeric(const char *addr, int port, hpl__cdial_addr *out) {
  struct sockaddr_in *a4 = (struct sockaddr_in *)&out->sa;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&out->sa;
  memset(&out->sa, 0, sizeof out->sa);
  if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    out->len = sizeof *a4;
    return 0;
  }
  if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    out->len = sizeof *a6;
    return 0;
  }
  return -1;
}

int hpl__cdial_resolve(const char *hostport, hpl__cdial_addr *out, char *why, size_t wlen) {
  char host[256];
  const char *colon = hostport ? strrchr(hostport, ':') : NULL;
  const char *h = hostport;
  size_t hlen = colon ? (size_t)(colon - hostport) : 0;
  if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') { /* [v6]:port */
    h++;
    hlen -= 2;
  }
  char *end;
  long port = colon ? strtol(colon + 1, &end, 10) : -1;
  if (!colon || hlen == 0 || hlen >= sizeof host || !colon[1] || *end || port < 1 ||
      port > 65535)
    return hpl__errf(why, wlen, HPL_EINVAL, "'%s' is not HOST:PORT (a port of 1-65535)",
                     hostport ? hostport : "(null)");
  memcpy(host, h, hlen);
  host[hlen] = 0;
  if (hpl__cdial_numeric(host, (int)port, out) == 0) return 0;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV}, *res = NULL;
  int rc = getaddrinfo(host, colon + 1, &hints, &res);
  if (rc != 0 || !res || res->ai_addrlen > sizeof out->sa) {
    if (res) freeaddrinfo(res);
    return hpl__errf(why, wlen, HPL_EINVAL, "cannot resolve '%s': %s", host,
                     rc ? gai_strerror(rc) : "no address");
  }
  memset(&out->sa, 0, sizeof out->sa);
  memcpy(&out->sa, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

/* Send (to_send) or receive exactly len bytes on the non-blocking fd
 * before the deadline. 0, HPL_ETIMEDOUT, or HPL_ECONN (an error, or the
 * peer closed). */
static int io_full(int fd, uint8_t *p, size_t len, int to_send, uint64_t deadline) {
  while (len) {
    ssize_t n = to_send ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return HPL_ECONN;
    int w = hpl__cwait_poll(fd, to_send ? POLLOUT : POLLIN, deadline);
    if (w == 0) return HPL_ETIMEDOUT;
    if (w < 0) return HPL_ECONN;
  }
  return 0;
}

/* connect(2) on the non-blocking fd, waiting for it until the deadline.
 * 0, HPL_ETIMEDOUT or HPL_ECONN (why set). */
static int connect_until(int fd, const hpl__cdial_addr *a, uint64_t deadline, char *why,
                         size_t wlen) {
  if (connect(fd, (const struct sockaddr *)&a->sa, a->len) == 0) return 0;
  if (errno != EINPROGRESS)
    return hpl__errf(why, wlen, HPL_ECONN, "cannot connect: %s", strerror(errno));
  int err = 0, n = hpl__cwait_poll(fd, POLLOUT, deadline);
  socklen_t el = sizeof err;
  if (n == 0) return hpl__errf(why, wlen, HPL_ETIMEDOUT, "no connection before the deadline");
  if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)
    return hpl__errf(why, wlen, HPL_ECONN, "cannot connect: %s", strerror(err ? err : errno));
  return 0;
}

/* The handshake (auth.h) claiming as->role before any frame; *keys gets
 * the session's. 0 or an error of hpl__cdial (why set). A client does not
 * seal frames (the RPC layer only tags them): a directory that asks for
 * encryption is refused here, after its PROOF went out (it then closes). */
static int handshake(int fd, const hpl__cdial_as *as, uint64_t deadline, hpl__auth_keys *keys,
                     char *why, size_t wlen) {
  hpl__auth_hs hs;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  hpl__auth_open(&hs, as->role, as->name, hpl__auth_flags(0), hello);
  int rc = io_full(fd, hello, sizeof hello, 1, deadline);
  if (rc == 0) rc = io_full(fd, chal, sizeof chal, 0, deadline);
  if (rc == HPL_ETIMEDOUT)
    return hpl__errf(why, wlen, rc, "no handshake answer before the deadline");
  if (rc)
    return hpl__errf(why, wlen, rc, "the connection closed during the handshake (no hoplite "
                     "directory with a cluster secret there, or one that refuses this role)");
  if (hpl__auth_answer(&hs, as->key, chal, proof) != 0)
    return hpl__errf(why, wlen, HPL_EAUTH, "the directory's handshake fails its MAC: it holds "
                     "another cluster secret");
  if ((rc = io_full(fd, proof, sizeof proof, 1, deadline)) != 0)
    return hpl__errf(why, wlen, rc, "the handshake's proof did not go out");
  if (hpl__auth_seal(&hs) != HPL__SEAL_NONE)
    return hpl__errf(why, wlen, HPL_EUNAVAIL, "the directory seals its connections "
                     "(--encrypt), which the client library cannot do: reach it through a store");
  hpl__auth_session(&hs, as->key, 1, keys);
  return 0;
}

int hpl__cdial(const hpl__cdial_addr *addr, const hpl__cdial_as *as, const hpl__crpc_opts *o,
               uint64_t deadline, hpl__crpc **out, char *why, size_t wlen) {
  int fd = socket(addr->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return hpl__errf(why, wlen, HPL_ESYS, "socket: %s", strerror(errno));
  int rc = connect_until(fd, addr, deadline, why, wlen);
  if (rc) {
    close(fd);
    return rc;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  (void)hpl__sock_control(fd); /* ahead of bulk bytes at this host (util.h) */
  hpl__auth_keys keys;
  hpl__crpc_opts ro = *o;
  if (as->key) {
    if ((rc = handshake(fd, as, deadline, &keys, why, wlen)) != 0) {
      close(fd);
      return rc;
    }
    ro.send_key = keys.send; /* every frame tagged from here on (frame.h) */
    ro.recv_key = keys.recv;
    ro.gmac = keys.gmac;
  }
  rc = hpl__crpc_new(fd, &ro, out); /* takes fd, closed on failure */
  if (as->key) sodium_memzero(&keys, sizeof keys);
  return rc ? hpl__errf(why, wlen, rc, "out of memory") : 0;
}
