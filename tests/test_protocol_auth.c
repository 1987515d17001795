/* test_protocol_auth.c - the wire protocol of per-node credentials (issue
 * 41, handshake version 4), spoken by raw peers to real servers: HELLOs the
 * directory refuses (wrong key for the name, names where none belong or
 * malformed, version 3), what a node credential can and cannot prove, a
 * REGISTER bound to the proven name and one store per name, a reader
 * publishing for its own node only, DELETE by the object's maker (or an
 * admin), and a store's refusing HELLO on its local socket as a raw client
 * reads it. test_protocol.c covers every message in every state. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "harness.h"
#include "proto.h"
#include "util.h"

#define MB (1ull << 20)

static hpl__lc *lc;
static hpl_client *A, *B;

static int setup(void **state) {
  (void)state;
  lc = th_group_start(2, 64 * MB, NULL, (hpl_client **[]){&A, &B}, 2);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  th_group_stop(lc, (hpl_client *[]){A, B}, 2);
  return 0;
}

/* Up to n bytes the peer sends on fd before it closes or timeout_ms pass. */
static size_t read_some(int fd, uint8_t *buf, size_t n, int64_t timeout_ms) {
  size_t have = 0;
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  while (have < n) {
    int64_t left = hpl__ms_left(deadline);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (left == 0 || poll(&p, 1, (int)left) <= 0) break;
    ssize_t r = recv(fd, buf + have, n - have, 0);
    if (r <= 0) break;
    have += (size_t)r;
  }
  return have;
}

/* Wait until the directory's counter `name` reaches `want` (a closed
 * connection is counted when the directory sees it); its last value. */
static uint64_t counter_reaches(const char *name, uint64_t want) {
  uint64_t v = 0;
  for (int i = 0; i < 100 && (v = th_dir_counter(lc, name)) < want; i++) th_sleep_ms(20);
  return v;
}

/* The HELLO bytes are sent to the directory: 1 if it answers with a
 * CHALLENGE, 0 if it closes without a byte. */
static int dir_takes_hello(const uint8_t hello[HPL__AUTH_HELLO_LEN]) {
  int fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(send(fd, hello, HPL__AUTH_HELLO_LEN, MSG_NOSIGNAL), HPL__AUTH_HELLO_LEN);
  uint8_t chal[HPL__AUTH_CHALLENGE_LEN];
  size_t n = read_some(fd, chal, sizeof chal, th_ms(5000));
  if (n == 0) assert_true(th_wire_closed(fd, th_ms(2000)));
  close(fd);
  assert_true(n == 0 || n == sizeof chal);
  return n == sizeof chal;
}

/* HELLOs the directory refuses before it says anything: a name for DATA
 * (which the directory does not take) or ADMIN, bad characters, 64 bytes
 * without a NUL, bytes after the NUL, version 3, no role. The controls
 * (the HELLO unchanged, a READER's, an ADMIN's, a 63-byte name) are
 * answered with a CHALLENGE. Each connection is a failed handshake (the
 * controls' peer leaves after the CHALLENGE), counted. */
static void test_hello_refused(void **state) {
  (void)state;
  hpl__auth_hs hs;
  uint8_t good[HPL__AUTH_HELLO_LEN], h[HPL__AUTH_HELLO_LEN];
  uint8_t *name = h + 8 + HPL__AUTH_NONCE_LEN; /* auth.h: 64 bytes, NUL-padded */
  uint64_t failed0 = th_dir_counter(lc, "dir_auth_failures");
  int conns = 0;
  hpl__auth_open(&hs, HPL__ROLE_NODE, "node-0", 0, good);
  assert_int_equal(dir_takes_hello(good), 1);
  hpl__auth_open(&hs, HPL__ROLE_READER, "node-1", 0, h);
  assert_int_equal(dir_takes_hello(h), 1);
  hpl__auth_open(&hs, HPL__ROLE_ADMIN, NULL, 0, h);
  assert_int_equal(dir_takes_hello(h), 1);
  conns += 3;
  static const struct {
    const char *what;
    int role, version;
    const char *name;
    size_t len; /* bytes of name to write (beyond strlen: the rest of the literal) */
  } bad[] = {
      {"DATA with a name", HPL__ROLE_DATA, 4, "node-0", 6},
      {"DATA without one (not at the directory)", HPL__ROLE_DATA, 4, "", 0},
      {"ADMIN with a name", HPL__ROLE_ADMIN, 4, "node-0", 6},
      {"NODE without a name", HPL__ROLE_NODE, 4, "", 0},
      {"a space and '!' in the name", HPL__ROLE_NODE, 4, "node 0!", 7},
      {"a '/' in the name", HPL__ROLE_READER, 4, "node/0", 6},
      {"bytes after the name's NUL", HPL__ROLE_NODE, 4, "node-0\0x", 8},
      {"version 3", HPL__ROLE_NODE, 3, "node-0", 6},
      {"no role", 0, 4, "node-0", 6},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memcpy(h, good, sizeof h);
    h[4] = (uint8_t)bad[i].version;
    h[5] = (uint8_t)bad[i].role;
    memset(name, 0, HPL__AUTH_NAME_MAX + 1);
    memcpy(name, bad[i].name, bad[i].len);
    if (dir_takes_hello(h)) fail_msg("a HELLO with %s was taken", bad[i].what);
    conns++;
  }
  memcpy(h, good, sizeof h); /* 64 non-zero bytes: no NUL ends the name */
  memset(name, 'a', HPL__AUTH_NAME_MAX + 1);
  assert_int_equal(dir_takes_hello(h), 0);
  name[HPL__AUTH_NAME_MAX] = 0; /* 63 of them are a name */
  assert_int_equal(dir_takes_hello(h), 1);
  conns += 2;
  assert_int_equal(counter_reaches("dir_auth_failures", failed0 + (uint64_t)conns),
                   failed0 + (uint64_t)conns);
}

/* A store's node credential (`hoplite secret --node`, the file a local
 * cluster gives each store) proves its own name and nothing else: no key
 * for another node's name, nor READER of another node, nor ADMIN; a HELLO
 * naming node-1 made with node-0's key fails (the directory's CHALLENGE
 * does not check, and the proof it can make is refused and counted). */
static void test_credential_own_name_only(void **state) {
  (void)state;
  char path[600], err[256], cmd[1600];
  const char *bin = getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR;
  snprintf(path, sizeof path, "%s/auth-node-7.cred", hpl__lc_work_dir(lc));
  snprintf(cmd, sizeof cmd, "%s/hoplite secret --node node-7 --secret %s %s", bin,
           hpl__lc_secret(lc), path);
  assert_int_equal(system(cmd), 0);
  hpl__auth cred;
  assert_int_equal(hpl__auth_load(path, &cred, err, sizeof err), 0);
  assert_int_equal(cred.has_secret, 0);
  assert_string_equal(cred.name, "node-7");
  uint8_t k7[HPL__AUTH_KEY_LEN], k[HPL__AUTH_KEY_LEN];
  assert_int_equal(hpl__auth_key(&cred, HPL__ROLE_NODE, "node-7", k7), 0);
  assert_int_equal(hpl__auth_key(&cred, HPL__ROLE_READER, "node-7", k), 0);
  assert_int_equal(hpl__auth_key(&cred, HPL__ROLE_NODE, "node-1", k), HPL_EAUTH);
  assert_int_equal(hpl__auth_key(&cred, HPL__ROLE_READER, "node-1", k), HPL_EAUTH);
  assert_int_equal(hpl__auth_key(&cred, HPL__ROLE_ADMIN, NULL, k), HPL_EAUTH);
  /* its own name: the directory lets it in */
  int fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(th_wire_handshake_key(fd, k7, HPL__ROLE_NODE, "node-7"), 0);
  Hplpb__CountersReq cq = HPLPB__COUNTERS_REQ__INIT;
  th_wire_send(fd, HPL__MSG_COUNTERS, 1, &cq.base);
  protobuf_c_message_free_unpacked(th_wire_wait(fd, HPL__MSG_COUNTERS_REP, 1), NULL);
  close(fd);
  /* node-1's name with node-7's key, and ADMIN with it */
  uint64_t failed0 = th_dir_counter(lc, "dir_auth_failures");
  for (int admin = 0; admin < 2; admin++) {
    fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
    hpl__auth_hs hs;
    uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
    hpl__auth_open(&hs, admin ? HPL__ROLE_ADMIN : HPL__ROLE_NODE, admin ? NULL : "node-1", 0,
                   hello);
    assert_int_equal(send(fd, hello, sizeof hello, MSG_NOSIGNAL), (ssize_t)sizeof hello);
    assert_int_equal(read_some(fd, chal, sizeof chal, th_ms(5000)), sizeof chal);
    assert_int_equal(hpl__auth_answer(&hs, k7, chal, proof), HPL_EAUTH);
    memset(proof, 0, sizeof proof); /* all it can send */
    assert_int_equal(send(fd, proof, sizeof proof, MSG_NOSIGNAL), (ssize_t)sizeof proof);
    assert_true(th_wire_closed(fd, th_ms(5000)));
    close(fd);
  }
  assert_int_equal(counter_reaches("dir_auth_failures", failed0 + 2), failed0 + 2);
  unlink(path);
}

/* REGISTER on fd (request `req`) as node `id`, the request naming `name`;
 * the status (0 from REGISTER_REP, else the Reply's). */
static int do_register(int fd, uint64_t req, uint64_t id, const char *name) {
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = id;
  r.addr = "127.0.0.1";
  r.data_port = 9;
  r.name = (char *)name;
  r.incarnation = id;
  return th_wire_register(fd, req, &r, NULL, 0);
}

/* The name the directory lists for node `id` (STATUS over fd), into out;
 * 0, or -1 if it lists no such node. */
static int listed_name(int fd, uint64_t id, char *out, size_t olen) {
  Hplpb__StatusReq q = HPLPB__STATUS_REQ__INIT;
  th_wire_send(fd, HPL__MSG_STATUS, 90, &q.base);
  Hplpb__StatusRep *rep = (Hplpb__StatusRep *)th_wire_wait(fd, HPL__MSG_STATUS_REP, 90);
  int rc = -1;
  for (size_t i = 0; i < rep->n_nodes; i++)
    if (rep->nodes[i]->id == id) {
      snprintf(out, olen, "%s", rep->nodes[i]->name);
      rc = 0;
    }
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return rc;
}

/* A registration is the proven name's, whatever the request says; a
 * second connection of that name, or of a live store's, is refused
 * (HPL_EEXIST) and counted, and the live ones keep their names. */
static void test_register_bound_to_name(void **state) {
  (void)state;
  const char *secret = hpl__lc_secret(lc);
  int port = hpl__lc_dir_port(lc);
  uint64_t taken0 = th_dir_counter(lc, "dir_takeovers_refused");
  int fd = th_wire_connect(port, NULL, 0);
  assert_int_equal(th_wire_handshake_as(fd, secret, HPL__ROLE_NODE, "auth-n9"), 0);
  assert_int_equal(do_register(fd, 1, 0xa0a09, "node-1"), 0); /* claims node-1's name */
  char name[128];
  assert_int_equal(listed_name(fd, 0xa0a09, name, sizeof name), 0);
  assert_string_equal(name, "auth-n9");
  assert_int_equal(listed_name(fd, th_node_id(B), name, sizeof name), 0);
  assert_string_equal(name, "node-1");
  /* auth-n9 again, while the first is live */
  int fd2 = th_wire_connect(port, NULL, 0);
  assert_int_equal(th_wire_handshake_as(fd2, secret, HPL__ROLE_NODE, "auth-n9"), 0);
  assert_int_equal(do_register(fd2, 1, 0xa0a10, "auth-n9"), HPL_EEXIST);
  /* a live store's name, with a new id */
  int fd3 = th_wire_connect(port, NULL, 0);
  assert_int_equal(th_wire_handshake_as(fd3, secret, HPL__ROLE_NODE, "node-0"), 0);
  assert_int_equal(do_register(fd3, 1, 0xa0a11, "node-0"), HPL_EEXIST);
  assert_int_equal(th_dir_counter(lc, "dir_takeovers_refused"), taken0 + 2);
  assert_int_equal(listed_name(fd, 0xa0a10, name, sizeof name), -1);
  assert_int_equal(listed_name(fd, 0xa0a11, name, sizeof name), -1);
  assert_int_equal(listed_name(fd, th_node_id(A), name, sizeof name), 0);
  assert_string_equal(name, "node-0");
  close(fd2);
  close(fd3);
  close(fd);
  /* the real store is untouched */
  th_put_pattern(A, "auth/after-takeover", 1000, 4);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "auth/after-takeover", th_ms(10000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 1000, 4));
  hpl_release(B, b);
}

/* PUBLISH over fd; its status, the detail into why. */
static int publish(int fd, uint64_t req, const char *id, uint64_t node, char *why, size_t wlen) {
  Hplpb__InlinePutReq m = HPLPB__INLINE_PUT_REQ__INIT;
  m.id = (char *)id;
  m.size = 4;
  m.node = node;
  th_wire_send_payload(fd, HPL__MSG_PUBLISH, req, &m.base, "PUB!", 4);
  Hplpb__Reply *r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, req);
  int st = r->status;
  snprintf(why, wlen, "%s", r->detail ? r->detail : "");
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return st;
}

/* A reader of node-0 (its key derives from node-0's) publishes for node-0
 * but not for node-1, though node-1 is live on the same host. */
static void test_reader_publishes_for_own_node(void **state) {
  (void)state;
  int fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(th_wire_handshake_as(fd, hpl__lc_secret(lc), HPL__ROLE_READER, "node-0"), 0);
  uint64_t ignored0 = th_dir_counter(lc, "dir_publishes_ignored");
  char why[256];
  assert_int_equal(publish(fd, 1, "auth/pub-1", th_node_id(B), why, sizeof why), HPL_EUNAVAIL);
  assert_non_null(strstr(why, "node node-0's, not node node-1's"));
  assert_int_equal(th_dir_counter(lc, "dir_publishes_ignored"), ignored0 + 1);
  uint64_t sz;
  assert_int_equal(hpl_stat(B, "auth/pub-1", th_ms(2000), &sz, NULL, NULL, NULL), HPL_ENOTFOUND);
  assert_int_equal(publish(fd, 2, "auth/pub-0", th_node_id(A), why, sizeof why), 0);
  close(fd);
}

/* A PUBLISH whose payload was changed after its tag was made (the frame
 * arrives whole in one read, so the directory checks it in its read
 * buffer): the connection is closed as an auth failure and nothing is
 * published; the same frame unchanged is published. */
static void test_changed_payload_refused(void **state) {
  (void)state;
  uint8_t pl[3000];
  for (size_t i = 0; i < sizeof pl; i++) pl[i] = (uint8_t)(i * 13 + 1);
  Hplpb__InlinePutReq m = HPLPB__INLINE_PUT_REQ__INIT;
  m.id = "auth/changed";
  m.size = sizeof pl;
  m.node = th_node_id(A);
  uint64_t failed0 = th_dir_counter(lc, "dir_auth_failures");
  int fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(th_wire_handshake_as(fd, hpl__lc_secret(lc), HPL__ROLE_READER, "node-0"), 0);
  size_t len;
  uint8_t *f = th_wire_frame(fd, HPL__MSG_PUBLISH, 1, &m.base, pl, sizeof pl, &len);
  assert_non_null(f);
  f[len - 100] ^= 0x20; /* a payload byte */
  assert_int_equal(send(fd, f, len, MSG_NOSIGNAL), (ssize_t)len);
  free(f);
  assert_true(th_wire_closed(fd, th_ms(3000)));
  close(fd);
  assert_int_equal(th_dir_counter(lc, "dir_auth_failures"), failed0 + 1);
  uint64_t sz;
  assert_int_equal(hpl_stat(B, "auth/changed", th_ms(2000), &sz, NULL, NULL, NULL), HPL_ENOTFOUND);
  /* unchanged, on a new connection */
  fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(th_wire_handshake_as(fd, hpl__lc_secret(lc), HPL__ROLE_READER, "node-0"), 0);
  th_wire_send_payload(fd, HPL__MSG_PUBLISH, 2, &m.base, pl, sizeof pl);
  Hplpb__Reply *r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, 2);
  assert_int_equal(r->status, 0);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  close(fd);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "auth/changed", th_ms(10000), &b), 0);
  assert_int_equal(hpl_buf_size(b), sizeof pl);
  assert_memory_equal(hpl_buf_data(b), pl, sizeof pl);
  hpl_release(B, b);
}

/* DELETE over fd: its status. */
static int delete_over(int fd, uint64_t req, const char *id) {
  Hplpb__IdReq q = HPLPB__ID_REQ__INIT;
  q.id = (char *)id;
  th_wire_send(fd, HPL__MSG_DELETE, req, &q.base);
  Hplpb__Reply *r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, req);
  int st = r->status;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return st;
}

/* An object node-0 made: another live node cannot delete it (HPL_EPERM,
 * counted; still there), an admin can. */
static void test_delete_by_maker(void **state) {
  (void)state;
  th_put_pattern(A, "auth/victim", 300 * 1024, 6);
  int fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(th_wire_handshake_as(fd, hpl__lc_secret(lc), HPL__ROLE_NODE, "auth-n10"), 0);
  assert_int_equal(do_register(fd, 1, 0xa0a0a, "auth-n10"), 0);
  uint64_t refused0 = th_dir_counter(lc, "dir_deletes_refused");
  assert_int_equal(delete_over(fd, 2, "auth/victim"), HPL_EPERM);
  assert_int_equal(th_dir_counter(lc, "dir_deletes_refused"), refused0 + 1);
  close(fd);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "auth/victim", th_ms(10000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 300 * 1024, 6));
  hpl_release(B, b);
  fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_ADMIN);
  assert_int_equal(delete_over(fd, 3, "auth/victim"), 0);
  close(fd);
  assert_int_equal(hpl_stat(B, "auth/victim", th_ms(2000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  assert_int_equal(th_dir_counter(lc, "dir_deletes_refused"), refused0 + 1);
}

/* The store's first frame to a raw local client: its HELLO (a refusal:
 * status and detail set, nothing else). */
static Hplpb__Hello *local_hello(hpl__lc *l, int *fd) {
  *fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", hpl__lc_socket(l, 0));
  assert_int_equal(connect(*fd, (struct sockaddr *)&a, sizeof a), 0);
  return (Hplpb__Hello *)th_wire_wait(*fd, HPL__MSG_HELLO, 0);
}

/* One user's raw local clients past --max-clients-per-uid: the next one's
 * HELLO says HPL_ETOOMANY and why (Hello fields 61, 62), with no pool or
 * node in it, and the socket closes; once one leaves, a client is let in. */
static void test_local_refusal_read_raw(void **state) {
  (void)state;
  hpl__lc *l = th_cluster(1, 64 * MB, NULL, "--max-clients-per-uid 4");
  int fds[8], n = 0, fd;
  Hplpb__Hello *h = NULL;
  for (; n < 8; n++) {
    h = local_hello(l, &fd);
    if (h->status) break;
    assert_true(h->pool_size > 0 && h->node_id != 0);
    protobuf_c_message_free_unpacked(&h->base, NULL);
    fds[n] = fd;
  }
  assert_true(n <= 4 && n >= 2); /* the harness may hold a client or two */
  assert_int_equal(h->status, HPL_ETOOMANY);
  assert_non_null(strstr(h->detail, "--max-clients-per-uid"));
  assert_int_equal(h->pool_size, 0);
  assert_int_equal(h->node_id, 0);
  protobuf_c_message_free_unpacked(&h->base, NULL);
  assert_true(th_wire_closed(fd, th_ms(5000)));
  close(fd);
  assert_string_equal(hpl_strerror(HPL_ETOOMANY),
                      "too many clients: the store's limit for this user or in all is reached");
  close(fds[--n]);
  int st = HPL_ETOOMANY;
  for (int i = 0; i < 100 && st; i++) { /* the store sees the close a moment later */
    h = local_hello(l, &fd);
    st = h->status;
    protobuf_c_message_free_unpacked(&h->base, NULL);
    if (st) {
      close(fd);
      th_sleep_ms(20);
    }
  }
  assert_int_equal(st, 0);
  close(fd);
  while (n > 0) close(fds[--n]);
  th_untrack(l);
  th_stop(l, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello_refused),
      cmocka_unit_test(test_credential_own_name_only),
      cmocka_unit_test(test_register_bound_to_name),
      cmocka_unit_test(test_reader_publishes_for_own_node),
      cmocka_unit_test(test_changed_payload_refused),
      cmocka_unit_test(test_delete_by_maker),
      cmocka_unit_test_teardown(test_local_refusal_read_raw, th_teardown),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
