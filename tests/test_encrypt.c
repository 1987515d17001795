/* test_encrypt.c - --encrypt (auth.h, frame.h: sealed connections). An
 * on-path TCP relay records what it carries and looks for 1 KiB of an
 * object's bytes in it: an inline object a store behind the relay gets
 * from the directory, and a 4 MiB object pulled from a data port
 * advertised through the relay. Without --encrypt the relay finds them
 * (the check works), with it never; the bytes arrive exact either way. A
 * relay that flips one ciphertext byte gets the connection closed (counted
 * in auth_failures). Real servers on loopback. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"

#define MB (1ull << 20)
#define PAT 1024
#define REC_CAP (16 * MB)

/* The relay: every connection accepted is joined to `target`; what the
 * server side sends is recorded (up to REC_CAP); with flip, the byte right
 * after the first frame header of the first connection (its message's or
 * tag's first byte, after the 72-byte CHALLENGE) is flipped, once. */
typedef struct relay {
  int lfd, port;
  volatile int target, stop, flip, flipped;
  uint8_t *rec;
  size_t rlen;
  pthread_t thread;
} relay;

typedef struct cpair {
  int a, b;
  uint64_t from_b;
  int flip;
} cpair;

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
  cpair cp[MAXC];
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
        int flip = r->flip && !r->flipped;
        if (flip) r->flipped = -1; /* claimed by this connection */
        cp[nc++] = (cpair){.a = a, .b = b, .flip = flip};
      } else {
        if (a >= 0) close(a);
        if (b >= 0) close(b);
      }
      continue;
    }
    for (int i = 0; i < nc; i++) {
      for (int side = 0; side < 2; side++) {
        struct pollfd *p = &pf[1 + 2 * i + side];
        if (!(p->revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t k = recv(p->fd, buf, 65536, 0);
        int to = side == 0 ? cp[i].b : cp[i].a;
        if (k > 0 && side == 1) {
          const uint64_t at = 72 + 32;
          if (cp[i].flip && cp[i].from_b <= at && at < cp[i].from_b + (uint64_t)k) {
            buf[at - cp[i].from_b] ^= 0x01;
            cp[i].flip = 0;
            r->flipped = 1;
          }
          cp[i].from_b += (uint64_t)k;
          size_t room = REC_CAP - r->rlen;
          size_t take = (size_t)k < room ? (size_t)k : room;
          memcpy(r->rec + r->rlen, buf, take);
          r->rlen += take;
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

static void relay_start(relay *r, int target) {
  memset(r, 0, sizeof *r);
  r->target = target;
  r->rec = malloc(REC_CAP);
  assert_non_null(r->rec);
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

/* Stops the relay; 1 if it carried pat[0, PAT). */
static int relay_stop(relay *r, const uint8_t *pat) {
  r->stop = 1;
  pthread_join(r->thread, NULL);
  close(r->lfd);
  int found = memmem(r->rec, r->rlen, pat, PAT) != NULL;
  fprintf(stderr, "relay: %zu bytes from the server side, pattern %s\n", r->rlen,
          found ? "FOUND" : "not found");
  free(r->rec);
  return found;
}

static pid_t spawn_store(const char *dir_addr, const char *sock, const char *ready,
                         const char *secret, const char *log, int encrypt) {
  char exe[512];
  const char *bin = getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR;
  snprintf(exe, sizeof exe, "%s/hoplite-store", bin);
  pid_t pid = fork();
  if (pid == 0) {
    int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(lfd, 2);
    execl(exe, exe, "--directory", dir_addr, "--socket", sock, "--memory", "64M", "--ready-file",
          ready, "--auth-file", secret, encrypt ? "--encrypt" : (char *)NULL, (char *)NULL);
    _exit(127);
  }
  assert_true(pid > 0);
  return pid;
}

static void fill(uint8_t *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = (uint8_t)(x >> 24);
  }
}

/* A 1 KiB inline object put on node 0; a store behind the relay (to the
 * directory) gets it. Returns whether the relay saw its bytes; with
 * `flip`, asserts the flipped frame closed a connection. */
static int inline_through_relay(int encrypt, int flip) {
  const char *args = encrypt ? "--encrypt" : NULL;
  hpl__lc *lc = th_cluster(1, 64 * MB, args, args);
  hpl_client *c0 = th_connect(lc, 0);
  uint8_t obj[PAT];
  fill(obj, sizeof obj, 7);
  relay r;
  relay_start(&r, hpl__lc_dir_port(lc));
  r.flip = flip;
  char work[] = "/tmp/hpl-enc-XXXXXX", sock[128], ready[128], log[128], dir[64];
  assert_non_null(mkdtemp(work));
  snprintf(sock, sizeof sock, "%s/store.sock", work);
  snprintf(ready, sizeof ready, "%s/ready", work);
  snprintf(log, sizeof log, "%s/store.log", work);
  snprintf(dir, sizeof dir, "127.0.0.1:%d", r.port);
  pid_t pid = spawn_store(dir, sock, ready, hpl__lc_secret(lc), log, encrypt);
  for (int i = 0; i < 200 && access(ready, F_OK) != 0; i++) th_sleep_ms(50);
  assert_int_equal(access(ready, F_OK), 0);
  hpl_client *c = NULL;
  assert_int_equal(hpl_connect(sock, th_ms(5000), &c), 0);
  assert_int_equal(hpl_put(c0, "enc/x", obj, sizeof obj, th_ms(5000)), 0);
  hpl_buf *b = NULL;
  int rc = hpl_get(c, "enc/x", th_ms(10000), &b);
  int right = rc == 0 && hpl_buf_size(b) == PAT && memcmp(hpl_buf_data(b), obj, PAT) == 0;
  if (rc == 0) hpl_release(c, b);
  uint64_t authf = th_counter(c, "auth_failures");
  hpl_close(c);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  int found = relay_stop(&r, obj);
  hpl_close(c0);
  th_stop(lc, 0);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "grep -m3 -i 'mac\\|open\\|seal' %s >&2; rm -rf %s", log, work);
  if (system(cmd)) {
  }
  fprintf(stderr, "encrypt %d flip %d: get %s, auth_failures %llu\n", encrypt, flip,
          hpl_strerror(rc), (unsigned long long)authf);
  assert_true(right); /* the store's link reconnects after a closed connection */
  if (flip) {
    assert_int_equal(r.flipped, 1);
    assert_true(authf >= 1);
  }
  return found;
}

static void test_inline_clear(void **state) {
  (void)state;
  assert_true(inline_through_relay(0, 0)); /* the relay can see an inline object */
}

static void test_inline_sealed(void **state) {
  (void)state;
  assert_false(inline_through_relay(1, 0));
}

static void test_flipped_byte_closes(void **state) {
  (void)state;
  assert_false(inline_through_relay(1, 1));
}

/* A 4 MiB object broadcast from A to B, A's data port advertised through
 * the relay. Returns whether the relay saw 1 KiB of it. */
static int stream_through_relay(int encrypt) {
  const char *args = encrypt ? "--encrypt" : NULL;
  relay r;
  relay_start(&r, 0);
  hpl__lc *lc = th_cluster(0, 0, args, NULL);
  char sargs[128], err[512];
  snprintf(sargs, sizeof sargs, "--memory 64M --data-advertise-port %d%s", r.port,
           encrypt ? " --encrypt" : "");
  int ia = hpl__lc_add_store(lc, sargs, err, sizeof err);
  if (ia < 0) fail_msg("add store: %s", err);
  r.target = th_data_port(lc, ia);
  snprintf(sargs, sizeof sargs, "--memory 64M%s", encrypt ? " --encrypt" : "");
  int ib = hpl__lc_add_store(lc, sargs, err, sizeof err);
  if (ib < 0) fail_msg("add store: %s", err);
  hpl_client *A = th_connect(lc, ia), *B = th_connect(lc, ib);
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "enc/big", size, 33);
  hpl_buf *buf;
  uint8_t pat[PAT];
  assert_int_equal(hpl_get(A, "enc/big", th_ms(5000), &buf), 0);
  memcpy(pat, (const uint8_t *)hpl_buf_data(buf) + 3 * MB + 17, PAT);
  hpl_release(A, buf);
  assert_int_equal(hpl_get(B, "enc/big", th_ms(20000), &buf), 0);
  int exact = hpl_buf_size(buf) == size && th_check_pattern(hpl_buf_data(buf), size, 33);
  hpl_release(B, buf);
  uint64_t authf = th_counter(B, "auth_failures");
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
  int found = relay_stop(&r, pat);
  assert_true(exact);
  assert_int_equal(authf, 0);
  assert_true(r.rlen >= size); /* the stream did go through the relay */
  return found;
}

static void test_stream_clear(void **state) {
  (void)state;
  assert_true(stream_through_relay(0));
}

static void test_stream_sealed(void **state) {
  (void)state;
  assert_false(stream_through_relay(1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_inline_clear, th_teardown),
      cmocka_unit_test_teardown(test_inline_sealed, th_teardown),
      cmocka_unit_test_teardown(test_flipped_byte_closes, th_teardown),
      cmocka_unit_test_teardown(test_stream_clear, th_teardown),
      cmocka_unit_test_teardown(test_stream_sealed, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
