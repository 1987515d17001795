/* test_sockprio.c - which sockets carry the control mark (util.h,
 * hpl__sock_control), on real processes. The directory's connections, a
 * store's link to the directory, a store's pulls from another store and a
 * client's direct connection to the directory have SO_PRIORITY 6, so a
 * host's default queue sends their requests and acknowledgements ahead of
 * bulk bytes; the connection a store streams object bytes out of keeps
 * priority 0, and one it serves a reduce's digests on is marked. Another
 * process's sockets are looked at through pidfd_getfd(2).
 * HOPLITE_CONTROL_PRIO=0 turns the mark off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "harness.h"
#include "hoplite.h"
#include "util.h"

/* One connected TCP socket of a process: its ports and its priority. */
typedef struct sock_seen {
  int lport, rport, prio;
} sock_seen;

static int sock_info(int fd, sock_seen *s) {
  struct sockaddr_in l, r;
  socklen_t ll = sizeof l, rl = sizeof r;
  if (getsockname(fd, (struct sockaddr *)&l, &ll) != 0 || l.sin_family != AF_INET) return -1;
  if (getpeername(fd, (struct sockaddr *)&r, &rl) != 0) return -1; /* listening */
  socklen_t pl = sizeof s->prio;
  if (getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &s->prio, &pl) != 0) return -1;
  s->lport = ntohs(l.sin_port);
  s->rport = ntohs(r.sin_port);
  return 0;
}

/* Every connected IPv4 TCP socket of `pid` (at most max), copied into this
 * process with pidfd_getfd. Returns how many. */
static int sockets_of(pid_t pid, sock_seen *out, int max) {
  int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
  assert_true(pfd >= 0);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    if (e->d_name[0] == '.') continue;
    int fd = (int)syscall(SYS_pidfd_getfd, pfd, atoi(e->d_name), 0);
    if (fd < 0) {
      assert_true(errno == EBADF); /* closed meanwhile; EPERM would be a setup failure */
      continue;
    }
    if (sock_info(fd, &out[n]) == 0) n++;
    close(fd);
  }
  closedir(d);
  close(pfd);
  return n;
}

/* A large object pulled by node 1 from node 0, a small one read by node
 * 1's client straight from the directory; then every socket is looked at. */
static void test_marks(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64ull << 20, NULL, "--data-idle-ms 60000");
  hpl_client *a = th_connect(lc, 0), *b = th_connect(lc, 1);
  th_put_pattern(a, "prio/large", 1 << 20, 1);
  th_put_pattern(a, "prio/small", 100, 2);
  for (int i = 0; i < 2; i++) {
    hpl_buf *buf = NULL;
    assert_int_equal(hpl_get(b, i ? "prio/small" : "prio/large", th_ms(10000), &buf), 0);
    hpl_release(b, buf);
  }
  int dport = hpl__lc_dir_port(lc);
  sock_seen s[256];

  /* The directory: every connection it accepted. */
  int n = sockets_of(hpl__lc_dir_pid(lc), s, 256);
  int seen = 0;
  for (int i = 0; i < n; i++)
    if (s[i].lport == dport) {
      assert_int_equal(s[i].prio, 6);
      seen++;
    }
  assert_true(seen >= 3); /* two stores' links and node 1's client */

  /* Node 1 pulled: its link to the directory and its pull are marked. */
  n = sockets_of(hpl__lc_store_pid(lc, 1), s, 256);
  int pulls = 0;
  for (int i = 0; i < n; i++) {
    assert_int_equal(s[i].prio, 6);
    if (s[i].rport != dport) pulls++;
  }
  assert_true(pulls >= 1);

  /* Node 0 sent: the data connection it accepted streams bytes, unmarked;
   * its link to the directory is marked. */
  n = sockets_of(hpl__lc_store_pid(lc, 0), s, 256);
  int links = 0, data = 0;
  for (int i = 0; i < n; i++) {
    if (s[i].rport == dport) {
      assert_int_equal(s[i].prio, 6);
      links++;
    } else {
      assert_int_equal(s[i].prio, 0);
      data++;
    }
  }
  assert_int_equal(links, 1);
  assert_true(data >= 1);

  /* This process's clients: node 1's direct connection to the directory. */
  n = sockets_of(getpid(), s, 256);
  seen = 0;
  for (int i = 0; i < n; i++)
    if (s[i].rport == dport) {
      assert_int_equal(s[i].prio, 6);
      seen++;
    }
  assert_true(seen >= 1);
  hpl_close(a);
  hpl_close(b);
  th_stop(lc, 0);
}

/* SO_PRIORITY of the store-side end of this test's connection from local
 * port `port` (-1: not found). */
static int store_end_prio(hpl__lc *lc, int port) {
  sock_seen s[256];
  int n = sockets_of(hpl__lc_store_pid(lc, 0), s, 256);
  for (int i = 0; i < n; i++)
    if (s[i].rport == port) return s[i].prio;
  return -1;
}

/* A PULL that asks for digests (as a reduce's parent asks its child):
 * the store marks the connection it arrived on, which the data port
 * otherwise leaves unmarked. Looked at while the connection is held
 * open here, so nothing depends on a reduce's timing. */
static void test_digest_stream_marked(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64ull << 20, NULL, "--integrity sha256");
  hpl_client *a = th_connect(lc, 0);
  th_put_pattern(a, "prio/dig", 1 << 20, 3);
  int fd = th_wire_connect(th_data_port(lc, 0), NULL, 0);
  const char *secret = hpl__lc_secret(lc);
  if (secret && *secret)
    assert_int_equal(th_wire_handshake(fd, secret, HPL__ROLE_DATA), 0);
  struct sockaddr_in me;
  socklen_t ml = sizeof me;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &ml), 0);
  int port = ntohs(me.sin_port);
  int prio = store_end_prio(lc, port);
  assert_int_equal(prio, 0); /* a data connection, unmarked until it asks */
  Hplpb__PullReq pull = HPLPB__PULL_REQ__INIT;
  pull.id = "prio/dig";
  pull.digests = 1;
  th_wire_send(fd, HPL__MSG_PULL, 1, &pull.base);
  for (int t = 0; t < 500 && prio != 6; t++) {
    th_sleep_ms(10);
    prio = store_end_prio(lc, port);
  }
  assert_int_equal(prio, 6);
  close(fd);
  hpl_close(a);
  th_stop(lc, 0);
}

/* The priority hpl__sock_control leaves on a new socket, in a child whose
 * environment has HOPLITE_CONTROL_PRIO=value (NULL: unset). */
static int prio_with_env(const char *value) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (value)
      setenv("HOPLITE_CONTROL_PRIO", value, 1);
    else
      unsetenv("HOPLITE_CONTROL_PRIO");
    int fd = socket(AF_INET, SOCK_STREAM, 0), prio = -1;
    socklen_t pl = sizeof prio;
    if (fd < 0 || hpl__sock_control(fd) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, &pl) != 0)
      prio = -1;
    _exit(write(p[1], &prio, sizeof prio) == sizeof prio ? 0 : 1);
  }
  close(p[1]);
  int prio = -2, st = 0;
  assert_int_equal(read(p[0], &prio, sizeof prio), (int)sizeof prio);
  close(p[0]);
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return prio;
}

static void test_switch(void **state) {
  (void)state;
  assert_int_equal(prio_with_env(NULL), 6);
  assert_int_equal(prio_with_env("1"), 6);
  assert_int_equal(prio_with_env("0"), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_marks, th_teardown),
      cmocka_unit_test_teardown(test_digest_stream_marked, th_teardown),
      cmocka_unit_test(test_switch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
