/* test_hardening.c - defects an outside reviewer found, each with the
 * sequence that showed it (see issue 11), and what a peer without the
 * cluster secret can do (nothing). Real servers on loopback.
 *
 * The first tests also run against servers built from an older tree:
 *   HOPLITE_BIN_DIR=/old/build HPL_TEST_NO_AUTH=1 build/tests/test_hardening */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "harness.h"
#include "proto.h"
#include "util.h"

#define MB (1ull << 20)

static int dir_connect(hpl__lc *lc) {
  return th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
}

static void send_register(int fd, uint64_t node, uint64_t req) {
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = node;
  r.addr = "127.0.0.1";
  r.data_port = 9;
  r.name = "raw";
  th_wire_send(fd, HPL__MSG_REGISTER, req, &r.base);
}

/* The reviewer's script: two connections; REGISTER twice on the first
 * (nodes X, then Y), REGISTER Y on the second, close both. The directory
 * died with SIGSEGV about a second later: X still named the first
 * connection, which was freed, and the sweep wrote through it. */
static void test_double_register(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, "--heartbeat-ms 200 --heartbeat-timeout-ms 600", NULL);
  int a = dir_connect(lc), b = dir_connect(lc);
  send_register(a, 0xabc1, 1);
  send_register(a, 0xabc2, 2);
  send_register(b, 0xabc2, 1);
  th_sleep_ms(200);
  close(a);
  close(b);
  th_sleep_ms((int)th_ms(2000)); /* several sweeps */
  char err[256];
  if (hpl__lc_check(lc, err, sizeof err)) fail_msg("%s", err);
  /* and it still serves */
  hpl_client *c = th_connect(lc, 0);
  th_put_pattern(c, "hard/after-register", 1000, 3);
  hpl_close(c);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 1);
  th_stop(lc, 0);
}

/* A small object a node does not hold is first asked of the directory
 * (direct read). That try must come out of the get's timeout, and a
 * directory that does not answer must not cost every later get the same
 * wait: each get here ends within its timeout (plus scheduling slack). */
static void test_get_timeout_includes_direct_read(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *c = th_connect(lc, 1);
  assert_int_equal(hpl__lc_signal(lc, -1, SIGSTOP), 0);
  const int64_t timeout = 300;
  for (int i = 0; i < 4; i++) {
    char id[32];
    snprintf(id, sizeof id, "hard/absent-%d", i);
    hpl_buf *b;
    uint64_t t0 = hpl__now_ms();
    int rc = hpl_get(c, id, timeout, &b);
    uint64_t took = hpl__now_ms() - t0;
    assert_int_equal(rc, HPL_ETIMEDOUT);
    if (took > (uint64_t)(timeout + th_ms(150)))
      fail_msg("get %d with a %lld ms timeout took %llu ms", i, (long long)timeout,
               (unsigned long long)took);
  }
  assert_int_equal(hpl__lc_signal(lc, -1, SIGCONT), 0);
  hpl_close(c);
  th_stop(lc, 0);
}

/* A reduce tree node dies while the sink's combine step still runs on the
 * thread pool (each step held 600 ms by a fault point; streams at loopback
 * speed arrive in steps large enough to go there): the sink's new task must
 * not write the target while the old step still does. Before, the old step
 * wrote into bytes the new generation had already received, and the result
 * was wrong. */
static void test_reduce_reset_during_combine(void **state) {
  (void)state;
  enum { N = 4 };
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *C[N];
  int idx[N];
  for (int i = 0; i < N; i++) {
    char err[256];
    idx[i] = hpl__lc_add_store(lc,
                               i == 0 ? "--memory 256M --faults combine_delay_ms=600"
                                      : "--memory 256M",
                               err, sizeof err);
    if (idx[i] < 0) fail_msg("add store: %s", err);
    C[i] = th_connect(lc, idx[i]);
  }
  const size_t n = 16 * MB / 4;
  float *d = malloc(n * 4);
  assert_non_null(d);
  char ids[N][32];
  const char *srcs[N];
  for (int i = 0; i < N; i++) { /* the sink's own source first: it takes the root */
    snprintf(ids[i], sizeof ids[i], "rc/s%d", i);
    srcs[i] = ids[i];
    for (size_t j = 0; j < n; j++) d[j] = (float)(i + 1) * (float)(1 + (int)(j % 7));
    assert_int_equal(hpl_put(C[i], ids[i], d, n * 4, th_ms(10000)), 0);
  }
  /* 3 of 4: the last one put is the spare that replaces the killed node */
  assert_int_equal(hpl_reduce(C[0], "rc/t", srcs, N, N - 1, HPL_OP_SUM, HPL_DT_F32, th_ms(5000)),
                   0);
  th_sleep_ms(300);
  hpl_close(C[2]);
  assert_int_equal(hpl__lc_signal(lc, idx[2], SIGKILL), 0);
  hpl_buf *b;
  int rc = hpl_get(C[0], "rc/t", th_ms(60000), &b);
  if (rc) fail_msg("get: %s (%s)", hpl_strerror(rc), hpl_errdetail(C[0]));
  /* s0, s1 and the spare s3 (s2 died with its node) */
  char *text;
  assert_int_equal(hpl_reduce_sources(C[0], "rc/t", th_ms(5000), &text), 0);
  float k = 0;
  for (int i = 0; i < N; i++)
    if (strstr(text, ids[i])) k += (float)(i + 1);
  hpl_free(text);
  const float *res = hpl_buf_data(b);
  for (size_t j = 0; j < n; j++) {
    float want = k * (float)(1 + (int)(j % 7));
    if (res[j] != want) fail_msg("element %zu: %f, want %f (sources sum %f)", j, res[j], want, k);
  }
  hpl_release(C[0], b);
  free(d);
  for (int i = 0; i < N; i++)
    if (i != 2) hpl_close(C[i]);
  th_stop(lc, 0);
}

/* ---- a fake directory: one store's link, scripted */

typedef struct fake_dir {
  int lfd, port;
  hpl__auth auth;
  unsigned wrong_reply; /* the type it answers ACQUIRE with */
  int acquires;         /* ACQUIREs seen */
  pthread_t thread;
  volatile int stop;
} fake_dir;

static int read_n(int fd, uint8_t *p, size_t n) {
  while (n) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 200) <= 0) return -1;
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* A reply, tagged with the session's tx (frame.h). */
static void reply_frame(int fd, hpl__fmac *tx, unsigned type, uint64_t req,
                        const ProtobufCMessage *m) {
  uint8_t f[4096];
  size_t mlen = protobuf_c_message_pack(m, f + HPL__FRAME_HDR_LEN);
  hpl__frame_hdr h = {.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req,
                      .flags = HPL__FRAME_F_TAG};
  hpl__frame_encode_hdr(&h, f);
  hpl__fmac_begin(tx, &h, f + HPL__FRAME_HDR_LEN, mlen);
  hpl__fmac_end(tx, f + HPL__FRAME_HDR_LEN + mlen);
  size_t len = HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN;
  if (send(fd, f, len, MSG_NOSIGNAL) != (ssize_t)len) {
  }
}

static void *fake_dir_main(void *arg) {
  fake_dir *d = arg;
  int fd = -1;
  while (!d->stop && fd < 0) {
    struct pollfd pf = {.fd = d->lfd, .events = POLLIN};
    if (poll(&pf, 1, 100) == 1) fd = accept(d->lfd, NULL, NULL);
  }
  if (fd < 0) return NULL;
  hpl__auth_hs hs;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  if (read_n(fd, hello, sizeof hello) || hpl__auth_accept(&hs, &d->auth, 1u << HPL__ROLE_NODE,
                                                          hello, chal) ||
      send(fd, chal, sizeof chal, MSG_NOSIGNAL) != (ssize_t)sizeof chal ||
      read_n(fd, proof, sizeof proof) || hpl__auth_verify(&hs, &d->auth, proof)) {
    close(fd);
    return NULL;
  }
  /* the session (auth.h): every frame after the handshake is tagged */
  static hpl__fmac tx, rx;
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_keys k;
  hpl__auth_key(&d->auth, HPL__ROLE_NODE, hs.name, rk); /* the name the store proved */
  hpl__auth_session(&hs, rk, 0, &k);
  hpl__fmac_wipe(&tx); /* the previous run's session, if any */
  hpl__fmac_wipe(&rx);
  hpl__fmac_init_as(&tx, k.send, k.gmac);
  hpl__fmac_init_as(&rx, k.recv, k.gmac);
  hpl__frame_limits lim = {.max_msg = 1u << 20, .max_payload = 1u << 20,
                           .max_type = HPL__MSG_MAX_, .tagged = 1};
  while (!d->stop) {
    uint8_t hdr[HPL__FRAME_HDR_LEN], body[1 << 16], tag[HPL__FRAME_TAG_LEN];
    hpl__frame_hdr h;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 100) <= 0) continue;
    if (read_n(fd, hdr, sizeof hdr) || hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, &h, NULL) ||
        h.msg_len + h.payload_len > sizeof body || read_n(fd, body, h.msg_len) ||
        read_n(fd, tag, sizeof tag) || read_n(fd, body + h.msg_len, h.payload_len))
      break;
    hpl__fmac_begin(&rx, &h, body, h.msg_len);
    if (h.flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&rx, body + h.msg_len, h.payload_len);
    if (hpl__fmac_check(&rx, tag) != 0) break;
    if (h.type == HPL__MSG_REGISTER) {
      Hplpb__RegisterRep r = HPLPB__REGISTER_REP__INIT;
      r.inline_max = 65536;
      r.heartbeat_ms = 500;
      r.max_senders = 1;
      r.instance = 1;
      reply_frame(fd, &tx, HPL__MSG_REGISTER_REP, h.req_id, &r.base);
    } else if (h.type == HPL__MSG_ACQUIRE) {
      /* an answer of another type than the request's: a StatRep that
       * claims success, with fields an AcquireRep would read differently */
      d->acquires++;
      Hplpb__StatRep r = HPLPB__STAT_REP__INIT;
      r.size = 1ull << 40;
      r.copies = 7;
      reply_frame(fd, &tx, d->wrong_reply, h.req_id, &r.base);
    } else if (h.req_id) {
      Hplpb__Reply r = HPLPB__REPLY__INIT;
      reply_frame(fd, &tx, HPL__MSG_REPLY, h.req_id, &r.base);
    }
  }
  hpl__fmac_wipe(&tx);
  hpl__fmac_wipe(&rx);
  close(fd);
  return NULL;
}

/* A store whose directory answers a request with a message of another
 * type: the store takes it as a protocol error (the get fails with
 * HPL_EPROTO) instead of reading it as the type it expected, and keeps
 * running. */
static void test_reply_of_the_wrong_type(void **state) {
  (void)state;
  char work[] = "/tmp/hpl-fakedir-XXXXXX", secret[128], sock[128], ready[128], log[128];
  assert_non_null(mkdtemp(work));
  snprintf(secret, sizeof secret, "%s/secret", work);
  snprintf(sock, sizeof sock, "%s/store.sock", work);
  snprintf(ready, sizeof ready, "%s/ready", work);
  snprintf(log, sizeof log, "%s/store.log", work);
  char err[256];
  assert_int_equal(hpl__auth_create(secret, err, sizeof err), 0);
  fake_dir d = {.wrong_reply = HPL__MSG_STAT_REP};
  assert_int_equal(hpl__auth_load(secret, &d.auth, err, sizeof err), 0);
  d.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  assert_int_equal(bind(d.lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(d.lfd, 4), 0);
  assert_int_equal(getsockname(d.lfd, (struct sockaddr *)&a, &al), 0);
  d.port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&d.thread, NULL, fake_dir_main, &d), 0);
  char dir[64], exe[512];
  snprintf(dir, sizeof dir, "127.0.0.1:%d", d.port);
  const char *bin = getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR;
  snprintf(exe, sizeof exe, "%s/hoplite-store", bin);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test killed by its timeout leaves no store */
    int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(lfd, 2);
    if (getenv("HPL_TEST_NO_AUTH"))
      execl(exe, exe, "--directory", dir, "--socket", sock, "--memory", "64M", "--ready-file",
            ready, (char *)NULL);
    else
      execl(exe, exe, "--directory", dir, "--socket", sock, "--memory", "64M", "--ready-file",
            ready, "--auth-file", secret, (char *)NULL);
    _exit(127);
  }
  assert_true(pid > 0);
  for (int i = 0; i < 100 && access(ready, F_OK) != 0; i++) th_sleep_ms(50);
  assert_int_equal(access(ready, F_OK), 0);
  hpl_client *c = NULL;
  assert_int_equal(hpl_connect(sock, th_ms(5000), &c), 0);
  hpl_buf *b;
  int rc = hpl_get(c, "fake/x", th_ms(3000), &b);
  if (rc == 0) hpl_release(c, b);
  hpl_close(c);
  int alive = kill(pid, 0) == 0 && waitpid(pid, NULL, WNOHANG) == 0;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  d.stop = 1;
  pthread_join(d.thread, NULL);
  close(d.lfd);
  char cmd[256];
  if (rc != HPL_EPROTO || !alive) {
    snprintf(cmd, sizeof cmd, "cat %s >&2", log);
    if (system(cmd)) {
    }
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", work);
  if (system(cmd)) {
  }
  assert_true(d.acquires >= 1);
  assert_true(alive);
  if (rc != HPL_EPROTO) fail_msg("get: %s, expected HPL_EPROTO", hpl_strerror(rc));
}

/* ---- a peer without the cluster secret */

static uint64_t store_counter(hpl__lc *lc, int node, const char *name) {
  hpl_client *c = th_connect(lc, node);
  uint64_t v = th_counter(c, name);
  hpl_close(c);
  return v;
}

/* Register, delete, put, pull from a data port, read directly: each refused
 * before anything changes, and counted. */
static void test_no_secret_no_access(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *A = th_connect(lc, 0);
  th_put_pattern(A, "sec/big", 2 * MB, 1);
  th_put_pattern(A, "sec/small", 100, 2);
  char wrong[256], err[256];
  snprintf(wrong, sizeof wrong, "%s/wrong.secret", hpl__lc_work_dir(lc));
  assert_int_equal(hpl__auth_create(wrong, err, sizeof err), 0);
  int dport = hpl__lc_dir_port(lc), data = th_data_port(lc, 0);
  uint64_t nodes0 = th_dir_counter(lc, "dir_nodes"),
           fails0 = th_dir_counter(lc, "dir_auth_failures");
  /* 1. register (and delete) with the wrong secret: refused at the handshake */
  int fd = th_wire_connect(dport, NULL, 0);
  assert_int_equal(th_wire_handshake(fd, wrong, HPL__ROLE_NODE), -1);
  assert_true(th_wire_closed(fd, th_ms(3000)));
  close(fd);
  /* 2. frames without any handshake: never parsed */
  fd = th_wire_connect(dport, NULL, 0);
  Hplpb__RegisterReq reg = HPLPB__REGISTER_REQ__INIT;
  reg.node_id = 0xbad;
  reg.addr = "127.0.0.1";
  reg.data_port = 9;
  th_wire_send(fd, HPL__MSG_REGISTER, 1, &reg.base);
  Hplpb__IdReq del = HPLPB__ID_REQ__INIT;
  del.id = "sec/big";
  th_wire_send(fd, HPL__MSG_DELETE, 2, &del.base);
  assert_true(th_wire_closed(fd, th_ms(3000)));
  close(fd);
  /* 3. a reader (the key stores hand their clients) may only PEEK, STAT, PUBLISH */
  hpl__auth good;
  assert_int_equal(hpl__auth_load(hpl__lc_secret(lc), &good, err, sizeof err), 0);
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_key(&good, HPL__ROLE_READER, "node-0", rk);
  fd = th_wire_connect(dport, NULL, 0);
  assert_int_equal(th_wire_handshake_key(fd, rk, HPL__ROLE_READER, "node-0"), 0);
  th_wire_send(fd, HPL__MSG_DELETE, 3, &del.base);
  assert_true(th_wire_closed(fd, th_ms(3000)));
  close(fd);
  /* ... and a reader key cannot pass as a store */
  fd = th_wire_connect(dport, NULL, 0);
  assert_int_equal(th_wire_handshake_key(fd, rk, HPL__ROLE_NODE, "node-0"), -1);
  close(fd);
  /* 4. a direct read with a wrong reader key */
  hpl__auth bad;
  assert_int_equal(hpl__auth_load(wrong, &bad, err, sizeof err), 0);
  hpl__auth_key(&bad, HPL__ROLE_READER, "node-0", rk);
  fd = th_wire_connect(dport, NULL, 0);
  assert_int_equal(th_wire_handshake_key(fd, rk, HPL__ROLE_READER, "node-0"), -1);
  close(fd);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), nodes0);
  assert_true(th_dir_counter(lc, "dir_auth_failures") >= fails0 + 4);
  /* 5. a pull from a data port: nothing but a close comes back */
  uint64_t sent0 = th_counter(A, "data_bytes_sent"), sfails0 = th_counter(A, "auth_failures");
  fd = th_wire_connect(data, NULL, 0);
  assert_int_equal(th_wire_handshake(fd, wrong, HPL__ROLE_DATA), -1);
  close(fd);
  fd = th_wire_connect(data, NULL, 0);
  Hplpb__PullReq pull = HPLPB__PULL_REQ__INIT;
  pull.id = "sec/big";
  th_wire_send(fd, HPL__MSG_PULL, 1, &pull.base);
  assert_true(th_wire_closed(fd, th_ms(3000)));
  close(fd);
  assert_int_equal(th_counter(A, "data_bytes_sent"), sent0);
  assert_true(th_counter(A, "auth_failures") >= sfails0 + 2);
  /* 6. a whole store with the wrong secret: its puts never reach the
   * cluster, it never registers */
  char sock[256], ready[256], log[256], dir[64];
  snprintf(sock, sizeof sock, "%s/intruder.sock", hpl__lc_work_dir(lc));
  snprintf(ready, sizeof ready, "%s/intruder.ready", hpl__lc_work_dir(lc));
  snprintf(log, sizeof log, "%s/intruder.log", hpl__lc_work_dir(lc));
  snprintf(dir, sizeof dir, "127.0.0.1:%d", dport);
  pid_t pid = th_spawn_store(dir, sock, ready, wrong, log, NULL);
  hpl_client *X = NULL;
  for (int i = 0; i < 100 && hpl_connect(sock, 1000, &X) != 0; i++) th_sleep_ms(50);
  assert_non_null(X);
  uint8_t small[100] = {1};
  assert_int_equal(hpl_put(X, "sec/intruder", small, sizeof small, 1000), HPL_ETIMEDOUT);
  hpl_close(X);
  assert_int_not_equal(access(ready, F_OK), 0); /* never registered */
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  /* nothing changed: both objects are there, whole; no intruder object */
  hpl_client *B = th_connect(lc, 1);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "sec/big", th_ms(5000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 2 * MB, 1));
  hpl_release(B, b);
  assert_int_equal(hpl_get(B, "sec/small", th_ms(5000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 100, 2));
  hpl_release(B, b);
  assert_int_equal(hpl_stat(B, "sec/intruder", th_ms(5000), NULL, NULL, NULL, NULL),
                   HPL_ENOTFOUND);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), nodes0);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* Servers without a secret stay on loopback unless told. */
static void test_exposure_rule(void **state) {
  (void)state;
  char cmd[1024];
  const char *bin = getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR;
  snprintf(cmd, sizeof cmd, "%s/hoplite-directory --listen 0.0.0.0:0 2>/dev/null", bin);
  int st = system(cmd);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  snprintf(cmd, sizeof cmd,
           "%s/hoplite-store --directory 10.1.2.3:7700 --socket /tmp/x.sock 2>/dev/null", bin);
  st = system(cmd); /* data port on 0.0.0.0 by default for a remote directory */
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  snprintf(cmd, sizeof cmd,
           "timeout --preserve-status -s INT 2 %s/hoplite-directory --listen 0.0.0.0:0 --insecure "
           "2>/dev/null",
           bin);
  st = system(cmd); /* runs until the timeout stops it */
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Another user's process on the socket of `lc`'s store 0, made reachable
 * (misconfigured) for the test: 1 if refused with HPL_EAUTH (the HELLO
 * says why), 0 if served, 2 otherwise. */
static int other_user_connects(hpl__lc *lc) {
  const char *sock = hpl__lc_socket(lc, 0);
  assert_int_equal(chmod(hpl__lc_work_dir(lc), 0711), 0);
  assert_int_equal(chmod(sock, 0666), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    hpl_client *c = NULL;
    int rc = hpl_connect(sock, 2000, &c);
    _exit(rc == 0 ? 0 : rc == HPL_EAUTH ? 1 : 2);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_int_equal(chmod(hpl__lc_work_dir(lc), 0700), 0);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* Local clients: only this user's processes (and root) reach a store;
 * --insecure (which lets the socket's directory be open) does not change
 * that. */
static void test_local_peers(void **state) {
  (void)state;
  if (geteuid() != 0) skip(); /* needs another uid to try */
  hpl__lc *lc = th_cluster(1, 64 * MB, NULL, "--insecure");
  assert_int_equal(other_user_connects(lc), 1); /* refused, and told so */
  assert_int_equal(store_counter(lc, 0, "clients_refused"), 1);
  th_stop(lc, 0);
  lc = th_cluster(1, 64 * MB, NULL, NULL);
  assert_int_equal(other_user_connects(lc), 1);
  assert_int_equal(store_counter(lc, 0, "clients_refused"), 1);
  th_stop(lc, 0);
  /* and a store will not start with its socket in a directory others can enter */
  char dir[] = "/tmp/hpl-opendir-XXXXXX", cmd[1024];
  assert_non_null(mkdtemp(dir));
  assert_int_equal(chmod(dir, 0755), 0);
  const char *bin = getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR;
  snprintf(cmd, sizeof cmd, "%s/hoplite-store --directory 127.0.0.1:1 --socket %s/s.sock "
           "--memory 16M 2>/dev/null", bin, dir);
  int rc = system(cmd);
  rmdir(dir);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_double_register, th_teardown),
      cmocka_unit_test_teardown(test_get_timeout_includes_direct_read, th_teardown),
      cmocka_unit_test_teardown(test_reduce_reset_during_combine, th_teardown),
      cmocka_unit_test(test_reply_of_the_wrong_type),
      cmocka_unit_test_teardown(test_no_secret_no_access, th_teardown),
      cmocka_unit_test(test_exposure_rule),
      cmocka_unit_test_teardown(test_local_peers, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
