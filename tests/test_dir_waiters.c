/* test_dir_waiters.c - a store's pending ACQUIREs (waiters) at the
 * directory when its node goes away or moves to another connection.
 *
 * A real store holds object X; node N speaks the store<->directory
 * protocol over raw TCP: it asks for X (and is given the store as its
 * sender: N now holds a partial copy), then asks again while that copy is
 * busy, so its second ACQUIRE waits. Then N re-registers on a new
 * connection, or falls silent until the liveness sweep declares it dead,
 * or closes its connection: each time N's partial copy is dropped, which
 * re-examines X's waiters, and the directory must neither serve N's old
 * waiter nor crash. Last, one connection cannot register two nodes (that
 * would leave the first one's waiters on a connection it no longer owns).
 * And a PEEK grants a large object only to the store on its own host; a
 * reader's PUBLISH is served at once, confirmed or retracted only by the
 * node it names. Many readers waiting for one object are all answered in
 * full, with the directory's fan-out thread and without it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "frame.h"
#include "auth.h"
#include "harness.h"
#include "proto.h"
#include "util.h"

#define NODE_ID 0x5eed0001ull

/* Register node `id` at `addr` on fd; `grants`: it takes GRANTs. */
static void register_as(int fd, uint64_t id, const char *addr, int grants, uint64_t req) {
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = id;
  r.addr = (char *)addr;
  r.data_port = 9;
  r.name = "raw";
  r.grants = grants;
  r.incarnation = 0x1ca7; /* the same process each time: a re-registration is its reconnect */
  assert_int_equal(th_wire_register(fd, req, &r, NULL, 0), 0);
}

static void do_register(int fd, uint64_t req) { register_as(fd, NODE_ID, "127.0.0.1", 0, req); }

/* A round trip on fd: everything sent before has been handled. */
static void sync_heartbeat(int fd, uint64_t req) {
  Hplpb__Heartbeat hb = HPLPB__HEARTBEAT__INIT;
  hb.node_id = NODE_ID;
  th_wire_send(fd, HPL__MSG_HEARTBEAT, req, &hb.base);
  protobuf_c_message_free_unpacked(th_wire_wait(fd, HPL__MSG_REPLY, req), NULL);
}

/* An ACQUIRE of `id` that must be answered with a sender at once; returns
 * the sender's node id. */
static uint64_t acquire_now(int fd, const char *id, uint64_t req) {
  Hplpb__AcquireReq q = HPLPB__ACQUIRE_REQ__INIT;
  q.id = (char *)id;
  q.timeout_ms = 0;
  th_wire_send(fd, HPL__MSG_ACQUIRE, req, &q.base);
  Hplpb__AcquireRep *rep = (Hplpb__AcquireRep *)th_wire_wait(fd, HPL__MSG_ACQUIRE_REP, req);
  assert_int_equal(rep->status, 0);
  uint64_t sender = rep->sender_node;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return sender;
}

/* A store holds `id` (2 MiB); N registers, is given the store as its
 * sender for `id`, and asks again: that ACQUIRE waits (the only other copy
 * is busy serving N). Returns N's connection. */
static int node_waiting(hpl__lc *lc, const char *id) {
  hpl_client *c = th_connect(lc, 0);
  th_put_pattern(c, id, 2u << 20, 1);
  uint64_t store = th_node_id(c);
  hpl_close(c);
  int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
  do_register(fd, 1);
  assert_int_equal(acquire_now(fd, id, 2), store);
  Hplpb__AcquireReq q = HPLPB__ACQUIRE_REQ__INIT;
  q.id = (char *)id;
  q.timeout_ms = th_ms(60000);
  th_wire_send(fd, HPL__MSG_ACQUIRE, 3, &q.base);
  sync_heartbeat(fd, 4);
  assert_int_equal(th_dir_counter(lc, "dir_waits"), 1);
  return fd;
}

/* N, on `fd` (a new connection if -1), is given a sender for `id` at
 * once: its old waiter neither holds the store's copy busy nor was
 * served. Then the cluster stops. */
static void served_again_and_stop(hpl__lc *lc, int fd, const char *id) {
  if (fd < 0) {
    fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
    do_register(fd, 11);
  }
  assert_int_not_equal(acquire_now(fd, id, 12), 0);
  close(fd);
  th_untrack(lc);
  th_stop(lc, 0);
}

/* N re-registers on a new connection (it reconnected before the directory
 * noticed the old one died; the same incarnation, so the same process):
 * the old connection is closed and its waiter dropped (a store re-sends
 * pending requests itself). */
static void test_reregister_drops_waiters(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64u << 20, NULL, NULL);
  int old = node_waiting(lc, "w/rereg");
  int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
  do_register(fd, 11);
  assert_true(th_wire_closed(old, th_ms(5000)));
  close(old);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 2);
  assert_int_equal(th_dir_counter(lc, "dir_reconnects"), 1);
  /* the same process: counted as a reconnect, and the new connection serves */
  sync_heartbeat(fd, 12);
  close(fd);
  th_untrack(lc);
  th_stop(lc, 0);
}

/* N falls silent (its connection stays open): the liveness sweep declares
 * it dead, which drops its copy and its waiter. */
static void test_sweep_drops_waiters(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64u << 20, "--heartbeat-ms 100 --heartbeat-timeout-ms 600", NULL);
  int fd = node_waiting(lc, "w/sweep");
  assert_true(th_wire_closed(fd, th_ms(5000)));
  close(fd);
  assert_int_equal(th_dir_counter(lc, "dir_nodes_dead"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 1);
  served_again_and_stop(lc, -1, "w/sweep");
}

/* N closes its connection (the path that always dropped waiters). */
static void test_close_drops_waiters(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64u << 20, NULL, NULL);
  int fd = node_waiting(lc, "w/close");
  close(fd);
  /* nothing tells us when the directory has seen the close: ask, briefly */
  uint64_t deadline = hpl__deadline_ms(th_ms(5000));
  while (th_dir_counter(lc, "dir_nodes") != 1 && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  assert_int_equal(th_dir_counter(lc, "dir_nodes_dead"), 1);
  served_again_and_stop(lc, -1, "w/close");
}

/* A connection registers one node: a REGISTER for another id on it is
 * refused (its waiters and copies stay the first node's). */
static void test_one_node_per_connection(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
  do_register(fd, 1);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = NODE_ID + 1;
  r.addr = "127.0.0.1";
  r.data_port = 10;
  assert_int_equal(th_wire_register(fd, 2, &r, NULL, 0), HPL_EINVAL);
  sync_heartbeat(fd, 3);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 1);
  close(fd);
  th_untrack(lc);
  th_stop(lc, 0);
}

/* What a PEEK of `id` naming store `node` is answered on reader fd rd:
 * whether it was granted (the object is not inline; its size is checked). */
static int peek_granted(int rd, const char *id, uint64_t node, uint64_t size, uint64_t req) {
  Hplpb__PeekReq q = HPLPB__PEEK_REQ__INIT;
  q.id = (char *)id;
  q.node = node;
  th_wire_send(rd, HPL__MSG_PEEK, req, &q.base);
  Hplpb__PeekRep *p = (Hplpb__PeekRep *)th_wire_wait(rd, HPL__MSG_PEEK_REP, req);
  assert_int_equal(p->status, HPL_ENOTFOUND);
  assert_false(p->inline_);
  assert_int_equal(p->size, size);
  int granted = p->granted;
  protobuf_c_message_free_unpacked(&p->base, NULL);
  return granted;
}

/* A PEEK of a large object grants it (a GRANT naming its sender) only to a
 * store at the address the PEEK came from: a node registered at another
 * address is never granted it, whichever node the PEEK names; and a node
 * that holds a copy already is not granted it again. */
static void test_grant_only_to_own_host(void **state) {
  (void)state;
  const uint64_t size = 2u << 20;
  hpl__lc *lc = th_cluster(1, 64u << 20, NULL, NULL);
  hpl_client *c = th_connect(lc, 0);
  th_put_pattern(c, "g/big", size, 1);
  uint64_t store = th_node_id(c);
  hpl_close(c);
  int port = hpl__lc_dir_port(lc);
  int here = th_wire_connect(port, hpl__lc_secret(lc), HPL__ROLE_NODE);
  register_as(here, NODE_ID, "127.0.0.1", 1, 1);
  int away = th_wire_connect(port, hpl__lc_secret(lc), HPL__ROLE_NODE);
  register_as(away, NODE_ID + 1, "127.0.0.2", 1, 1); /* (never connected to) */
  int rd = th_wire_connect(port, hpl__lc_secret(lc), HPL__ROLE_READER);
  assert_false(peek_granted(rd, "g/big", NODE_ID + 1, size, 2));
  assert_false(peek_granted(rd, "g/big", NODE_ID + 7, size, 3)); /* no such node */
  assert_int_equal(th_dir_counter(lc, "dir_peeks_granted"), 0);
  assert_true(peek_granted(rd, "g/big", NODE_ID, size, 4));
  Hplpb__AcquireRep *g = (Hplpb__AcquireRep *)th_wire_wait(here, HPL__MSG_GRANT, 0);
  assert_string_equal(g->id, "g/big");
  assert_int_equal(g->sender_node, store);
  assert_int_equal(g->size, size);
  protobuf_c_message_free_unpacked(&g->base, NULL);
  assert_int_equal(th_dir_counter(lc, "dir_peeks_granted"), 1);
  /* it is listed as pulling a copy now: told to ask its store, no grant */
  assert_false(peek_granted(rd, "g/big", NODE_ID, size, 5));
  assert_int_equal(th_dir_counter(lc, "dir_peeks_granted"), 1);
  close(rd);
  close(away);
  close(here);
  th_untrack(lc);
  th_stop(lc, 0);
}

/* rd PUBLISHes `id` (len bytes of `fill`) for node `node`; req 0: one-way,
 * else the reply's status is returned. */
static int publish(int rd, const char *id, uint64_t node, int fill, uint64_t len, uint64_t req) {
  uint8_t b[256];
  memset(b, fill, sizeof b);
  Hplpb__InlinePutReq m = HPLPB__INLINE_PUT_REQ__INIT;
  m.id = (char *)id;
  m.size = len;
  m.node = node;
  th_wire_send_payload(rd, HPL__MSG_PUBLISH, req, &m.base, b, len);
  if (!req) return 0;
  Hplpb__Reply *r = (Hplpb__Reply *)th_wire_wait(rd, HPL__MSG_REPLY, req);
  int st = r->status;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return st;
}

/* Node fd's INLINE_PUT of `id` (len bytes of `fill`): the reply's status. */
static int inline_put(int fd, const char *id, int fill, uint64_t len, uint64_t req) {
  uint8_t b[256];
  memset(b, fill, sizeof b);
  Hplpb__InlinePutReq m = HPLPB__INLINE_PUT_REQ__INIT;
  m.id = (char *)id;
  m.size = len;
  th_wire_send_payload(fd, HPL__MSG_INLINE_PUT, req, &m.base, b, len);
  Hplpb__Reply *r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, req);
  int st = r->status;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return st;
}

/* Node fd retracts `id` (a LOC_NOTE with a request id: answered once handled). */
static void retract(int fd, const char *id, uint64_t req) {
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = (char *)id;
  n.kind = HPL__LOC_RETRACT;
  th_wire_send(fd, HPL__MSG_LOC_NOTE, req, &n.base);
  protobuf_c_message_free_unpacked(th_wire_wait(fd, HPL__MSG_REPLY, req), NULL);
}

/* Whether a PEEK of `id` on rd finds it inline with `len` bytes (no wait). */
static int peek_inline(int rd, const char *id, uint64_t len, uint64_t req) {
  Hplpb__PeekReq q = HPLPB__PEEK_REQ__INIT;
  q.id = (char *)id;
  th_wire_send(rd, HPL__MSG_PEEK, req, &q.base);
  Hplpb__PeekRep *p = (Hplpb__PeekRep *)th_wire_wait(rd, HPL__MSG_PEEK_REP, req);
  int found = p->status == 0 && p->inline_ && p->size == len;
  protobuf_c_message_free_unpacked(&p->base, NULL);
  return found;
}

/* PUBLISH from a reader's connection: the bytes are served at once; only
 * the named node's INLINE_PUT of the same bytes confirms them (another
 * node's, or other bytes, is a put of an id that exists); only that node's
 * retraction forgets them, and only until they are confirmed; a PUBLISH of
 * an id that exists is ignored. */
static void test_publish_rules(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64u << 20, NULL, NULL);
  int port = hpl__lc_dir_port(lc);
  int n1 = th_wire_connect(port, NULL, 0); /* node "pb-n1", and a client of it */
  assert_int_equal(th_wire_handshake_as(n1, hpl__lc_secret(lc), HPL__ROLE_NODE, "pb-n1"), 0);
  register_as(n1, NODE_ID, "127.0.0.1", 0, 1);
  int n2 = th_wire_connect(port, NULL, 0);
  assert_int_equal(th_wire_handshake_as(n2, hpl__lc_secret(lc), HPL__ROLE_NODE, "pb-n2"), 0);
  register_as(n2, NODE_ID + 1, "127.0.0.1", 0, 1);
  int rd = th_wire_connect(port, NULL, 0), rd2 = th_wire_connect(port, NULL, 0);
  assert_int_equal(th_wire_handshake_as(rd, hpl__lc_secret(lc), HPL__ROLE_READER, "pb-n1"), 0);
  assert_int_equal(th_wire_handshake_as(rd2, hpl__lc_secret(lc), HPL__ROLE_READER, "pb-n2"), 0);
  publish(rd, "pb/x", NODE_ID, 7, 100, 0); /* one-way */
  assert_true(peek_inline(rd, "pb/x", 100, 2));
  assert_int_equal(th_dir_counter(lc, "dir_publishes"), 1);
  assert_int_equal(inline_put(n2, "pb/x", 7, 100, 3), HPL_EEXIST); /* not its publish */
  assert_int_equal(inline_put(n1, "pb/x", 8, 100, 4), HPL_EEXIST); /* other bytes */
  assert_int_equal(th_dir_counter(lc, "dir_publishes_confirmed"), 0);
  assert_int_equal(inline_put(n1, "pb/x", 7, 100, 5), 0);
  assert_int_equal(th_dir_counter(lc, "dir_publishes_confirmed"), 1);
  retract(n1, "pb/x", 6); /* confirmed: stays */
  assert_true(peek_inline(rd, "pb/x", 100, 7));
  /* unconfirmed: only the named node's retraction counts */
  assert_int_equal(publish(rd2, "pb/y", NODE_ID + 1, 9, 50, 8), 0); /* a client of n2 */
  retract(n1, "pb/y", 9);
  assert_true(peek_inline(rd, "pb/y", 50, 10));
  retract(n2, "pb/y", 11);
  assert_false(peek_inline(rd, "pb/y", 50, 12));
  assert_int_equal(th_dir_counter(lc, "dir_publishes_retracted"), 1);
  /* ids that exist, or no node named: ignored */
  assert_int_equal(publish(rd, "pb/x", NODE_ID, 7, 100, 13), HPL_EUNAVAIL);
  assert_int_equal(publish(rd, "pb/z", 0, 7, 100, 14), HPL_EUNAVAIL);
  assert_int_equal(th_dir_counter(lc, "dir_publishes_ignored"), 2);
  assert_int_equal(th_dir_counter(lc, "dir_publishes"), 2);
  close(rd);
  close(rd2);
  close(n2);
  close(n1);
  th_untrack(lc);
  th_stop(lc, 0);
}

/* Reader rd asks for `id`, waiting up to 10 s, and then (same connection,
 * so in order) for an id nobody has: once that answer is in, the first
 * PEEK waits at the directory. */
static void peek_wait(int rd, const char *id, uint64_t req) {
  Hplpb__PeekReq q = HPLPB__PEEK_REQ__INIT;
  q.id = (char *)id;
  q.timeout_ms = th_ms(10000);
  th_wire_send(rd, HPL__MSG_PEEK, req, &q.base);
  Hplpb__PeekReq none = HPLPB__PEEK_REQ__INIT;
  none.id = "fo/nobody";
  th_wire_send(rd, HPL__MSG_PEEK, req + 1, &none.base);
  protobuf_c_message_free_unpacked(th_wire_wait(rd, HPL__MSG_PEEK_REP, req + 1), NULL);
}

#define FO_READERS 8
#define FO_SIZE (200u << 10)

/* Eight readers wait for one 200 KiB inline object; a node's INLINE_PUT
 * then answers all of them in one loop turn. With the fan-out (more than
 * one CPU, no --no-fanout) those replies are written at once, sharing a
 * helper thread; as the readers' receive buffers are small and nobody reads
 * yet, the sockets take only part of each reply and the rest must follow in
 * order. Every reader gets every byte either way. */
static void fanout_round(const char *dir_args, int expect_fanout) {
  char args[128];
  snprintf(args, sizeof args, "--inline-max 2M%s%s", dir_args ? " " : "", dir_args ? dir_args : "");
  hpl__lc *lc = th_cluster(1, 64u << 20, args, NULL);
  int port = hpl__lc_dir_port(lc);
  int n1 = th_wire_connect(port, hpl__lc_secret(lc), HPL__ROLE_NODE);
  register_as(n1, NODE_ID, "127.0.0.1", 0, 1);
  int rd[FO_READERS];
  for (int i = 0; i < FO_READERS; i++) {
    rd[i] = th_wire_connect(port, hpl__lc_secret(lc), HPL__ROLE_READER);
    peek_wait(rd[i], "fo/big", 10);
  }
  assert_int_equal(th_dir_counter(lc, "dir_peek_waits"), FO_READERS);
  uint8_t *b = malloc(FO_SIZE);
  assert_non_null(b);
  for (uint32_t i = 0; i < FO_SIZE; i++) b[i] = (uint8_t)(i * 7 + i / 4093);
  Hplpb__InlinePutReq m = HPLPB__INLINE_PUT_REQ__INIT;
  m.id = "fo/big";
  m.size = FO_SIZE;
  th_wire_send_payload(n1, HPL__MSG_INLINE_PUT, 2, &m.base, b, FO_SIZE);
  Hplpb__Reply *r = (Hplpb__Reply *)th_wire_wait(n1, HPL__MSG_REPLY, 2);
  assert_int_equal(r->status, 0);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  for (int i = 0; i < FO_READERS; i++) {
    uint8_t *got;
    uint64_t len;
    Hplpb__PeekRep *p =
        (Hplpb__PeekRep *)th_wire_wait_payload(rd[i], HPL__MSG_PEEK_REP, 10, &got, &len);
    assert_int_equal(p->status, 0);
    assert_true(p->inline_);
    assert_int_equal(p->size, FO_SIZE);
    assert_int_equal(len, FO_SIZE);
    assert_memory_equal(got, b, FO_SIZE);
    free(got);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    close(rd[i]);
  }
  uint64_t turns = th_dir_counter(lc, "dir_fanouts");
  uint64_t writes = th_dir_counter(lc, "dir_fanout_writes");
  uint64_t partial = th_dir_counter(lc, "dir_fanout_partial");
  print_message("fan-out turns %llu, writes %llu (helper %llu, partial %llu)\n",
                (unsigned long long)turns, (unsigned long long)writes,
                (unsigned long long)th_dir_counter(lc, "dir_fanout_helper_writes"),
                (unsigned long long)partial);
  if (expect_fanout) {
    assert_true(turns >= 1);
    assert_true(writes >= FO_READERS);
  } else {
    assert_int_equal(turns, 0);
    assert_int_equal(writes, 0);
  }
  free(b);
  close(n1);
  th_untrack(lc);
  th_stop(lc, 0);
}

static void test_fanout(void **state) {
  (void)state;
  fanout_round(NULL, sysconf(_SC_NPROCESSORS_ONLN) > 1);
}

static void test_no_fanout(void **state) {
  (void)state;
  fanout_round("--no-fanout", 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_reregister_drops_waiters, th_teardown),
      cmocka_unit_test_teardown(test_sweep_drops_waiters, th_teardown),
      cmocka_unit_test_teardown(test_close_drops_waiters, th_teardown),
      cmocka_unit_test_teardown(test_one_node_per_connection, th_teardown),
      cmocka_unit_test_teardown(test_grant_only_to_own_host, th_teardown),
      cmocka_unit_test_teardown(test_publish_rules, th_teardown),
      cmocka_unit_test_teardown(test_fanout, th_teardown),
      cmocka_unit_test_teardown(test_no_fanout, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
