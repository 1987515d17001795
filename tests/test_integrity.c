/* test_integrity.c - digests checked at every hop, with real processes:
 * a store that sends corrupted units (fault point corrupt_send) while a
 * good copy exists elsewhere (the receiver ends with exact bytes, the
 * corruption is counted and that copy is no longer named), and when the
 * only copy lies (the get fails with HPL_ECORRUPT naming the node); a
 * lying copy is still freed by a delete (it is unlisted, not forgotten); a
 * lying peer (the test speaking the protocol) that claims a complete copy
 * it never received and serves wrong bytes. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "digest.h"
#include "util.h"

#include "harness.h"

#define MB (1ull << 20)

static int add(hpl__lc *lc, const char *args) {
  char err[512], full[512];
  snprintf(full, sizeof full, "--memory 256M %s", args ? args : "");
  int i = hpl__lc_add_store(lc, full, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

/* (a) A (the origin) flips a byte in the streams it sends to B; C got a
 * good copy from A first. B's get returns the exact bytes (the bad unit is
 * not counted, B moves to C), B counts the bad unit, the directory the
 * report. */
static void test_corrupt_sender_other_copy(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  int b = add(lc, NULL);
  hpl_client *B = th_connect(lc, b);
  char args[160];
  snprintf(args, sizeof args, "--faults corrupt_send=100,prefix=cs/,to_node=%llx",
           (unsigned long long)th_node_id(B));
  hpl_client *A = th_connect(lc, add(lc, args));
  hpl_client *C = th_connect(lc, add(lc, NULL));
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "cs/x", size, 3);
  hpl_buf *buf;
  assert_int_equal(hpl_get(C, "cs/x", th_ms(20000), &buf), 0); /* A -> C: not faulty */
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 3));
  hpl_release(C, buf);
  assert_int_equal(th_counter(C, "corrupt_units"), 0);
  assert_int_equal(hpl_get(B, "cs/x", th_ms(20000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 3));
  hpl_release(B, buf);
  assert_int_equal(th_counter(B, "corrupt_units"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), 1);
  hpl_close(A);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
}

/* (b) The only copy lies: every stream A sends is corrupted. B's get fails
 * with HPL_ECORRUPT and a detail naming A; it never returns wrong bytes. */
static void test_only_copy_lies(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *A = th_connect(lc, add(lc, "--faults corrupt_send=1000,prefix=lie/"));
  hpl_client *B = th_connect(lc, add(lc, NULL));
  th_put_pattern(A, "lie/x", 4 * MB, 9);
  char aid[32];
  snprintf(aid, sizeof aid, "%016llx", (unsigned long long)th_node_id(A));
  hpl_buf *buf = NULL;
  int rc = hpl_get(B, "lie/x", th_ms(20000), &buf);
  assert_int_equal(rc, HPL_ECORRUPT);
  const char *detail = hpl_errdetail(B);
  if (!strstr(detail, aid)) fail_msg("detail '%s' does not name node %s", detail, aid);
  assert_true(th_counter(B, "corrupt_units") >= 1);
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), 1);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* (c) A copy reported corrupt is unlisted but still freed by a delete. L
 * got a good copy from the origin A and lies in every stream it serves; A
 * dies, so B's get can only pull from L: it fails with HPL_ECORRUPT, and
 * L's copy is no longer named. L's own copy still reads back locally. The
 * directory restarts: L re-reports its copy as unlisted, and C's get does
 * not pull from it. A delete of the id reaches L: its pool is empty again
 * (before, the unlisted copy stayed there forever). The id put again
 * afterwards is a new object: L gets its new bytes. */
static void test_corrupt_copy_freed_after_delete(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  int a = add(lc, NULL);
  hpl_client *A = th_connect(lc, a);
  hpl_client *L = th_connect(lc, add(lc, "--faults corrupt_send=1000,prefix=lk/"));
  hpl_client *B = th_connect(lc, add(lc, NULL));
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "lk/x", size, 21);
  hpl_buf *buf = NULL;
  assert_int_equal(hpl_get(L, "lk/x", th_ms(20000), &buf), 0); /* A -> L: A does not lie */
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 21));
  hpl_release(L, buf);
  uint64_t dead = th_dir_counter(lc, "dir_nodes_dead");
  hpl_close(A);
  assert_int_equal(hpl__lc_signal(lc, a, SIGKILL), 0);
  for (int i = 0; i < 200 && th_dir_counter(lc, "dir_nodes_dead") == dead; i++) th_sleep_ms(50);
  assert_int_equal(hpl_get(B, "lk/x", th_ms(20000), &buf), HPL_ECORRUPT);
  assert_true(th_counter(B, "corrupt_units") >= 1);
  assert_true(th_dir_counter(lc, "dir_corrupt_reports") >= 1);
  /* L's copy is not named, but it is L's and still exact */
  assert_int_equal(hpl_get(L, "lk/x", th_ms(20000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 21));
  hpl_release(L, buf);
  assert_int_equal(th_counter(L, "objects"), 1);
  assert_true(th_counter(L, "pool_allocated") >= size);
  /* a restarted directory hears of L's copy again (HELD) but, told it was
   * unlisted, names it to nobody: C's get never pulls from L */
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  char err[256];
  if (hpl__lc_restart(lc, -1, err, sizeof err)) fail_msg("restart: %s", err);
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_dir_counter_try(lc, "dir_held_taken") < 1 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(20);
  assert_int_equal(th_dir_counter(lc, "dir_held_taken"), 1);
  hpl_client *C = th_connect(lc, add(lc, NULL));
  assert_int_not_equal(hpl_get(C, "lk/x", th_ms(5000), &buf), 0);
  assert_int_equal(th_counter(C, "corrupt_units"), 0);
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), 0);
  hpl_close(C);
  /* and a delete reaches it */
  assert_int_equal(hpl_delete(B, "lk/x", th_ms(10000)), 0);
  uint64_t left = 0;
  for (int i = 0; i < 100 && (left = th_counter(L, "pool_allocated")) != 0; i++) th_sleep_ms(50);
  if (left) fail_msg("the unlisted copy's node still has %llu B of its pool allocated after "
                     "the delete", (unsigned long long)left);
  assert_int_equal(th_counter(L, "objects"), 0);
  /* the id again: a new object, L pulls it from B (B does not lie) */
  th_put_pattern(B, "lk/x", size, 22);
  assert_int_equal(hpl_get(L, "lk/x", th_ms(20000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 22));
  hpl_release(L, buf);
  hpl_close(L);
  hpl_close(B);
  th_stop(lc, 0);
}

/* ---- a lying peer: registered as a store, claims a complete copy of an
 * object it never received, and serves 'E's for it on its data port. Its
 * threads use no cmocka (they only count). */
typedef struct liar {
  const char *secret;
  int dir_fd, lfd, port;
  uint64_t node;
  volatile int stop;
  volatile unsigned pulls, conns;
  pthread_t dir_thread, data_thread;
} liar;

static int send_frame(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  size_t len;
  uint8_t *f = th_wire_frame(fd, type, req, m, NULL, 0, &len);
  int rc = f && send(fd, f, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
  free(f);
  return rc;
}

/* The directory link: heartbeats, and whatever the directory sends read
 * (its tags checked in order) and answered when it is a probe. */
static void *liar_dir_main(void *arg) {
  liar *l = arg;
  uint64_t seq = 1000, next_hb = 0;
  while (!l->stop) {
    if (hpl__now_ms() >= next_hb) {
      Hplpb__Heartbeat hb = HPLPB__HEARTBEAT__INIT;
      hb.node_id = l->node;
      hb.sent_us = hpl__now_ns() / 1000;
      send_frame(l->dir_fd, HPL__MSG_HEARTBEAT, ++seq, &hb.base);
      next_hb = hpl__now_ms() + 150;
    }
    struct pollfd pf = {.fd = l->dir_fd, .events = POLLIN};
    if (poll(&pf, 1, 50) <= 0) continue;
    hpl__frame_hdr h;
    uint8_t *msg;
    if (th_wire_read_raw(l->dir_fd, &h, &msg, 2000) != 0) break;
    if (h.type == HPL__MSG_HEARTBEAT && h.req_id) { /* a probe: answered at once */
      Hplpb__Heartbeat hb = HPLPB__HEARTBEAT__INIT;
      hb.node_id = l->node;
      hb.sent_us = hpl__now_ns() / 1000;
      send_frame(l->dir_fd, HPL__MSG_HEARTBEAT, 0, &hb.base);
    }
    free(msg);
  }
  return NULL;
}

/* One puller: the handshake as a store's data port, then every PULL gets
 * the whole rest of the object as 'E's. */
static void liar_serve(liar *l, int fd) {
  if (th_wire_accept(fd, l->secret, 1u << HPL__ROLE_DATA) != 0) return;
  while (!l->stop) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 50) <= 0) continue;
    hpl__frame_hdr h;
    uint8_t *msg;
    if (th_wire_read_raw(fd, &h, &msg, 2000) != 0) return;
    Hplpb__PullReq *q = h.type == HPL__MSG_PULL
                            ? (Hplpb__PullReq *)hpl__msg_unpack(h.type, msg, h.msg_len)
                            : NULL;
    free(msg);
    if (!q) continue;
    uint64_t size = 1 * MB, off = q->offset < size ? q->offset : size;
    protobuf_c_message_free_unpacked(&q->base, NULL);
    l->pulls++;
    Hplpb__PullRep r = HPLPB__PULL_REP__INIT;
    r.size = size;
    size_t len;
    uint8_t *f = th_wire_frame_stream(fd, HPL__MSG_PULL_REP, h.req_id, &r.base, size - off, &len);
    uint8_t *e = malloc(size);
    if (e) memset(e, 'E', size);
    int ok = f && e && send(fd, f, len, MSG_NOSIGNAL) == (ssize_t)len &&
             send(fd, e, size - off, MSG_NOSIGNAL) == (ssize_t)(size - off);
    free(f);
    free(e);
    if (!ok) return;
  }
}

static void *liar_data_main(void *arg) {
  liar *l = arg;
  while (!l->stop) { /* one puller at a time is enough here */
    struct pollfd pf = {.fd = l->lfd, .events = POLLIN};
    if (poll(&pf, 1, 50) <= 0) continue;
    int fd = accept(l->lfd, NULL, NULL);
    if (fd < 0) continue;
    l->conns++;
    liar_serve(l, fd);
    close(fd);
  }
  return NULL;
}

/* Register as a store (data port: our listener) and claim a complete copy
 * of `id` (`size` bytes) that we never received. */
static void liar_start(liar *l, hpl__lc *lc, const char *id, uint64_t size) {
  memset(l, 0, sizeof *l);
  l->secret = hpl__lc_secret(lc);
  l->node = 0x11a7000000000001ull;
  l->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  assert_int_equal(bind(l->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l->lfd, 16), 0);
  assert_int_equal(getsockname(l->lfd, (struct sockaddr *)&a, &al), 0);
  l->port = ntohs(a.sin_port);
  l->dir_fd = th_wire_connect(hpl__lc_dir_port(lc), l->secret, HPL__ROLE_NODE);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = l->node;
  r.addr = "127.0.0.1";
  r.data_port = (uint32_t)l->port;
  r.capacity = 1ull << 30;
  r.name = "liar";
  r.incarnation = 7;
  assert_int_equal(th_wire_register(l->dir_fd, 1, &r, NULL, 0), 0);
  Hplpb__LocAddReq q = HPLPB__LOC_ADD_REQ__INIT;
  q.id = (char *)id;
  q.size = size;
  q.complete = 1;
  th_wire_send(l->dir_fd, HPL__MSG_LOC_ADD, 2, &q.base);
  Hplpb__Reply *rr = (Hplpb__Reply *)th_wire_wait(l->dir_fd, HPL__MSG_REPLY, 2);
  assert_int_equal(rr->status, 0);
  protobuf_c_message_free_unpacked(&rr->base, NULL);
  assert_int_equal(pthread_create(&l->dir_thread, NULL, liar_dir_main, l), 0);
  assert_int_equal(pthread_create(&l->data_thread, NULL, liar_data_main, l), 0);
}

static void liar_stop(liar *l) {
  l->stop = 1;
  pthread_join(l->dir_thread, NULL);
  pthread_join(l->data_thread, NULL);
  close(l->dir_fd);
  close(l->lfd);
}

/* (c) A 1 MiB object put on A; the liar claims a complete copy of it.
 * Receivers, three at a time, get it until the liar was pulled from: each
 * ends with the exact bytes (the liar's unit fails its digest, the unit is
 * pulled again from a good copy), the liar is reported, and later
 * receivers never pull from it again. */
static void test_lying_peer(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *A = th_connect(lc, add(lc, NULL));
  const uint64_t size = 1 * MB;
  th_put_pattern(A, "liar/x", size, 5);
  liar l;
  liar_start(&l, lc, "liar/x", size);
  enum { PER_ROUND = 3, ROUNDS = 4 };
  hpl_client *rc[PER_ROUND * (ROUNDS + 1)];
  int n = 0;
  for (int round = 0; round <= ROUNDS; round++) {
    int last = l.pulls > 0; /* one more round after the liar was caught */
    th_getter g[PER_ROUND];
    for (int i = 0; i < PER_ROUND; i++) {
      rc[n + i] = th_connect(lc, add(lc, NULL));
      g[i] = (th_getter){.c = rc[n + i], .id = "liar/x", .timeout = th_ms(20000), .size = size,
                         .want = th_pattern_sum(size, 5)};
    }
    for (int i = 0; i < PER_ROUND; i++) th_get_start(&g[i]);
    for (int i = 0; i < PER_ROUND; i++) th_get_join(&g[i]);
    for (int i = 0; i < PER_ROUND; i++) {
      if (g[i].rc != 0) fail_msg("get %d: %s", n + i, hpl_strerror(g[i].rc));
      if (!g[i].ok) fail_msg("get %d returned wrong bytes", n + i);
    }
    n += PER_ROUND;
    if (last) break;
  }
  unsigned pulls = l.pulls;
  fprintf(stderr, "%d receivers, the liar was pulled from %u times\n", n, pulls);
  assert_true(pulls >= 1);
  uint64_t corrupt = 0;
  for (int i = 0; i < n; i++) corrupt += th_counter(rc[i], "corrupt_units");
  assert_int_equal(corrupt, pulls); /* every stream it served was caught */
  assert_int_equal(th_dir_counter(lc, "dir_corrupt_reports"), pulls);
  /* the round after it was caught did not pull from it: not named again */
  hpl_client *late = th_connect(lc, add(lc, NULL));
  hpl_buf *buf;
  assert_int_equal(hpl_get(late, "liar/x", th_ms(20000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 5));
  hpl_release(late, buf);
  assert_int_equal(l.pulls, pulls);
  liar_stop(&l);
  for (int i = 0; i < n; i++) hpl_close(rc[i]);
  hpl_close(late);
  hpl_close(A);
  th_stop(lc, 0);
}

/* (d) Digests survive a directory restart: A puts, B gets (B's copy has
 * the digests; B corrupts every stream it sends). A goes, the directory is
 * killed and restarted, B re-reports its copy (with its digests). C's get
 * can only pull from B: it fails with HPL_ECORRUPT naming B and never
 * returns B's flipped bytes (before: the re-reported copy came back
 * without digests and C took the bytes unverified). */
static void test_digests_survive_restart(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *A = th_connect(lc, add(lc, NULL));
  int ib = add(lc, "--faults corrupt_send=1000,prefix=rs/");
  hpl_client *B = th_connect(lc, ib);
  hpl_client *C = th_connect(lc, add(lc, NULL));
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "rs/x", size, 31);
  hpl_buf *buf;
  assert_int_equal(hpl_get(B, "rs/x", th_ms(20000), &buf), 0); /* from A: clean */
  assert_true(th_check_pattern(hpl_buf_data(buf), size, 31));
  hpl_release(B, buf);
  hpl_close(A);
  assert_int_equal(hpl__lc_signal(lc, 0, SIGKILL), 0);
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  char err[256];
  if (hpl__lc_restart(lc, -1, err, sizeof err)) fail_msg("restart: %s", err);
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_dir_counter(lc, "dir_held_taken") < 1 && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  assert_true(th_dir_counter(lc, "dir_held_taken") >= 1);
  assert_int_equal(th_dir_counter(lc, "dir_held_digests"), 1);
  char bid[32];
  snprintf(bid, sizeof bid, "%016llx", (unsigned long long)th_node_id(B));
  int rc = hpl_get(C, "rs/x", th_ms(20000), &buf);
  if (rc == 0) {
    int ok = th_check_pattern(hpl_buf_data(buf), size, 31);
    hpl_release(C, buf);
    fail_msg("the get returned %s bytes from the only (corrupting) copy", ok ? "exact" : "wrong");
  }
  assert_int_equal(rc, HPL_ECORRUPT);
  if (!strstr(hpl_errdetail(C), bid))
    fail_msg("detail '%s' does not name node %s", hpl_errdetail(C), bid);
  assert_true(th_counter(C, "corrupt_units") >= 1);
  hpl_close(B);
  hpl_close(C);
  th_stop(lc, 0);
}

/* (e) After a restart, two stores re-report copies of one object whose
 * digests differ (the test plays the second): the directory cannot tell
 * which is right, so it names no sender for it: gets fail with
 * HPL_ECORRUPT naming both nodes, and the conflict is counted. */
static void test_reported_digests_conflict(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  hpl_client *A = th_connect(lc, add(lc, NULL));
  hpl_client *C = th_connect(lc, add(lc, NULL));
  const uint64_t size = 1 * MB;
  th_put_pattern(A, "rc/x", size, 41);
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  char err[256];
  if (hpl__lc_restart(lc, -1, err, sizeof err)) fail_msg("restart: %s", err);
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_dir_counter(lc, "dir_held_digests") < 1 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(20);
  assert_int_equal(th_dir_counter(lc, "dir_held_digests"), 1);
  /* the other reporter: digests over 'E's */
  int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = 0x11a7000000000002ull;
  r.addr = "127.0.0.1";
  r.data_port = 9;
  r.name = "other";
  r.incarnation = 3;
  assert_int_equal(th_wire_register(fd, 1, &r, NULL, 0), 0);
  uint64_t n = hpl__digest_units(size);
  uint8_t *e = malloc(size), *list = malloc(n * HPL__DIGEST_LEN), root[HPL__DIGEST_LEN];
  memset(e, 'E', size);
  hpl__digest_units_make(HPL__DIGEST_SHA256, e, size, 0, n, list);
  hpl__digest_root(HPL__DIGEST_SHA256, list, n, root);
  Hplpb__HeldObject h = HPLPB__HELD_OBJECT__INIT, *hp = &h;
  h.id = "rc/x";
  h.size = size;
  h.complete = 1;
  h.digest_algo = HPL__DIGEST_SHA256;
  h.digests = (ProtobufCBinaryData){.data = list, .len = n * HPL__DIGEST_LEN};
  h.digest_root = (ProtobufCBinaryData){.data = root, .len = HPL__DIGEST_LEN};
  Hplpb__HeldNote hn = HPLPB__HELD_NOTE__INIT;
  hn.held = &hp;
  hn.n_held = 1;
  hn.adopt = 1;
  th_wire_send(fd, HPL__MSG_HELD, 2, &hn.base);
  Hplpb__Reply *rr = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, 2);
  assert_int_equal(rr->status, 0);
  protobuf_c_message_free_unpacked(&rr->base, NULL);
  free(e);
  free(list);
  assert_int_equal(th_dir_counter(lc, "dir_digest_conflicts"), 1);
  hpl_buf *buf;
  int rc = hpl_get(C, "rc/x", th_ms(5000), &buf);
  assert_int_equal(rc, HPL_ECORRUPT);
  if (!strstr(hpl_errdetail(C), "11a7000000000002"))
    fail_msg("detail '%s' does not name the other reporter", hpl_errdetail(C));
  close(fd);
  hpl_close(A);
  hpl_close(C);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_corrupt_sender_other_copy),
      cmocka_unit_test(test_only_copy_lies),
      cmocka_unit_test_teardown(test_corrupt_copy_freed_after_delete, th_teardown),
      cmocka_unit_test_teardown(test_lying_peer, th_teardown),
      cmocka_unit_test_teardown(test_digests_survive_restart, th_teardown),
      cmocka_unit_test_teardown(test_reported_digests_conflict, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
