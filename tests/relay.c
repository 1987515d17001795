/* relay.c - an on-path TCP relay for tests (see relay.h). */
#include "relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#define RELAY_MAXC 16
#define RELAY_BUF 65536

typedef struct relay_pair {
  int a, b;         /* a: the client's side, b: the target's */
  unsigned conn;    /* accept order */
  uint64_t from_b;  /* bytes the target sent on it */
} relay_pair;

struct th_relay {
  int lfd, port;
  volatile int target;
  volatile int stop;
  volatile unsigned conns;
  th_relay_fn fn;
  void *arg;
  pthread_t thread;
};

static int send_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Accept one connection and open its other end; 1 if it was added. */
static int relay_accept(th_relay *r, relay_pair *cp) {
  int a = accept(r->lfd, NULL, NULL);
  int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->target)};
  d.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (a < 0 || b < 0 || connect(b, (struct sockaddr *)&d, sizeof d) != 0) {
    if (a >= 0) close(a);
    if (b >= 0) close(b);
    return 0;
  }
  int one = 1;
  setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *cp = (relay_pair){.a = a, .b = b, .conn = r->conns++};
  return 1;
}

static void *relay_main(void *arg) {
  th_relay *r = arg;
  relay_pair cp[RELAY_MAXC];
  int nc = 0;
  uint8_t *buf = malloc(RELAY_BUF);
  while (buf && !r->stop) {
    struct pollfd pf[1 + 2 * RELAY_MAXC];
    int n = 0;
    pf[n++] = (struct pollfd){.fd = r->lfd, .events = nc < RELAY_MAXC ? POLLIN : 0};
    for (int i = 0; i < nc; i++) {
      pf[n++] = (struct pollfd){.fd = cp[i].a, .events = POLLIN};
      pf[n++] = (struct pollfd){.fd = cp[i].b, .events = POLLIN};
    }
    if (poll(pf, (nfds_t)n, 50) <= 0) continue; /* wakes to see `stop` */
    if (pf[0].revents & POLLIN) {
      nc += relay_accept(r, &cp[nc]);
      continue; /* pf[] no longer matches cp[] */
    }
    for (int i = 0; i < nc; i++) {
      for (int side = 0; side < 2; side++) {
        if (!(pf[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t k = recv(side ? cp[i].b : cp[i].a, buf, RELAY_BUF, 0);
        if (k > 0 && side == 1) {
          if (r->fn) r->fn(r->arg, cp[i].conn, cp[i].from_b, buf, (size_t)k);
          cp[i].from_b += (uint64_t)k;
        }
        if (k <= 0 || send_all(side ? cp[i].a : cp[i].b, buf, (size_t)k) != 0) {
          close(cp[i].a);
          close(cp[i].b);
          cp[i] = cp[--nc];
          goto next_turn; /* pf[] no longer matches cp[] */
        }
      }
    }
  next_turn:;
  }
  for (int i = 0; i < nc; i++) close(cp[i].a), close(cp[i].b);
  free(buf);
  return NULL;
}

th_relay *th_relay_start(int target, th_relay_fn fn, void *arg) {
  th_relay *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->target = target;
  r->fn = fn;
  r->arg = arg;
  r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  assert_int_equal(bind(r->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(r->lfd, RELAY_MAXC), 0);
  assert_int_equal(getsockname(r->lfd, (struct sockaddr *)&a, &al), 0);
  r->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&r->thread, NULL, relay_main, r), 0);
  return r;
}

void th_relay_set_target(th_relay *r, int target) { r->target = target; }

int th_relay_port(const th_relay *r) { return r->port; }

unsigned th_relay_conns(const th_relay *r) { return r->conns; }

void th_relay_stop(th_relay *r) {
  if (!r) return;
  r->stop = 1;
  pthread_join(r->thread, NULL);
  close(r->lfd);
  free(r);
}
