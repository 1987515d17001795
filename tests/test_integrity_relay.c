/* test_integrity_relay.c - a byte-flipping relay on a data port: stores A
 * and C hold copies of a 4 MiB object and advertise relays in front of
 * their data ports (--data-advertise-port). The relays pass the handshake
 * and the frames' tags through untouched and flip one payload byte in the
 * middle of the first stream after they are armed, once. The receiver B
 * ends with the exact bytes (the unit is pulled again from the other
 * copy), counts the bad unit, and the directory counts the report. Real
 * servers on loopback. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"

#define MB (1ull << 20)
#define FLIP_AT (2 * MB) /* byte of a stream (server to puller) flipped */

/* Shared by the relays: once armed, the first connection accepted flips
 * its byte FLIP_AT. */
static volatile int g_armed, g_claimed, g_flipped;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct relay {
  int lfd, port;
  volatile int target; /* the data port behind it (set once the store is up) */
  volatile int stop;
  pthread_t thread;
} relay;

typedef struct conn_pair {
  int a, b;         /* a: the puller's side, b: the store's */
  uint64_t from_b;  /* bytes the store sent */
  int flip;         /* this connection carries the flip */
} conn_pair;

static int send_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void *relay_main(void *arg) {
  relay *r = arg;
  enum { MAXC = 16 };
  conn_pair cp[MAXC];
  int nc = 0;
  uint8_t *buf = malloc(65536);
  while (!r->stop) {
    struct pollfd pf[1 + 2 * MAXC];
    int n = 0;
    pf[n++] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
    for (int i = 0; i < nc; i++) {
      pf[n++] = (struct pollfd){.fd = cp[i].a, .events = POLLIN};
      pf[n++] = (struct pollfd){.fd = cp[i].b, .events = POLLIN};
    }
    if (poll(pf, (nfds_t)n, 50) <= 0) continue;
    if ((pf[0].revents & POLLIN) && nc < MAXC) {
      int a = accept(r->lfd, NULL, NULL);
      int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->target)};
      d.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (a >= 0 && b >= 0 && connect(b, (struct sockaddr *)&d, sizeof d) == 0) {
        int one = 1;
        setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int flip = 0;
        pthread_mutex_lock(&g_mu);
        if (g_armed && !g_claimed) flip = g_claimed = 1;
        pthread_mutex_unlock(&g_mu);
        cp[nc++] = (conn_pair){.a = a, .b = b, .flip = flip};
      } else {
        if (a >= 0) close(a);
        if (b >= 0) close(b);
      }
      continue; /* pf[] no longer matches cp[] */
    }
    for (int i = 0; i < nc; i++) {
      for (int side = 0; side < 2; side++) {
        struct pollfd *p = &pf[1 + 2 * i + side];
        if (!(p->revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t k = recv(p->fd, buf, 65536, 0);
        int to = side == 0 ? cp[i].b : cp[i].a;
        if (k > 0 && side == 1) { /* from the store */
          if (cp[i].flip && cp[i].from_b <= FLIP_AT && FLIP_AT < cp[i].from_b + (uint64_t)k) {
            buf[FLIP_AT - cp[i].from_b] ^= 0x20;
            cp[i].flip = 0;
            g_flipped = 1;
          }
          cp[i].from_b += (uint64_t)k;
        }
        if (k <= 0 || send_all(to, buf, (size_t)k) != 0) {
          close(cp[i].a);
          close(cp[i].b);
          cp[i] = cp[--nc];
          goto next_turn;
        }
      }
    }
  next_turn:;
  }
  for (int i = 0; i < nc; i++) close(cp[i].a), close(cp[i].b);
  free(buf);
  return NULL;
}

static void relay_start(relay *r) {
  memset(r, 0, sizeof *r);
  r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  assert_int_equal(bind(r->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(r->lfd, 16), 0);
  assert_int_equal(getsockname(r->lfd, (struct sockaddr *)&a, &al), 0);
  r->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&r->thread, NULL, relay_main, r), 0);
}

static void relay_stop(relay *r) {
  r->stop = 1;
  pthread_join(r->thread, NULL);
  close(r->lfd);
}

static int add(hpl__lc *lc, const char *args) {
  char err[512], full[256];
  snprintf(full, sizeof full, "--memory 256M %s", args ? args : "");
  int i = hpl__lc_add_store(lc, full, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

static void test_flipping_relay(void **state) {
  (void)state;
  relay ra, rc;
  relay_start(&ra);
  relay_start(&rc);
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  char args[64];
  snprintf(args, sizeof args, "--data-advertise-port %d", ra.port);
  int ia = add(lc, args);
  ra.target = th_data_port(lc, ia);
  snprintf(args, sizeof args, "--data-advertise-port %d", rc.port);
  int ic = add(lc, args);
  rc.target = th_data_port(lc, ic);
  hpl_client *A = th_connect(lc, ia), *C = th_connect(lc, ic);
  hpl_client *B = th_connect(lc, add(lc, NULL));
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "relay/x", size, 21);
  hpl_buf *buf;
  assert_int_equal(hpl_get(C, "relay/x", th_ms(20000), &buf), 0); /* through A's relay, clean */
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 21));
  hpl_release(C, buf);
  g_armed = 1;
  assert_int_equal(hpl_get(B, "relay/x", th_ms(20000), &buf), 0);
  int exact = hpl_buf_size(buf) == size && th_check_pattern(hpl_buf_data(buf), size, 21);
  hpl_release(B, buf);
  assert_true(g_flipped); /* the relay did change a byte of B's first stream */
  assert_true(exact);
  assert_int_equal(th_counter(B, "corrupt_units"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), 1);
  assert_int_equal(th_counter(B, "auth_failures"), 0); /* tags passed untouched */
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
  relay_stop(&ra);
  relay_stop(&rc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_flipping_relay, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
