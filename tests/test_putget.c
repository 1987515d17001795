/* test_putget.c - put/get across real processes on loopback. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "harness.h"
#include "localcluster.h"
#include "proto.h"
#include "util.h"

#define MB (1ull << 20)

static hpl__lc *lc;
static hpl_client *A, *B, *C;

static int setup(void **state) {
  (void)state;
  lc = th_group_start(3, 768 * MB, NULL, (hpl_client **[]){&A, &B, &C}, 3);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  th_group_stop(lc, (hpl_client *[]){A, B, C}, 3);
  return 0;
}

static void get_and_check(hpl_client *c, const char *id, uint64_t size, uint64_t seed) {
  hpl_buf *b = NULL;
  int rc = hpl_get(c, id, th_ms(30000), &b);
  if (rc) fail_msg("get %s: %s (%s)", id, hpl_strerror(rc), hpl_errdetail(c));
  assert_int_equal(hpl_buf_size(b), size);
  assert_string_equal(hpl_buf_id(b), id);
  assert_true(th_check_pattern(hpl_buf_data(b), size, seed));
  hpl_release(c, b);
}

/* Put on A, get on B and C, for sizes around the inline limit and large. */
static void test_sizes(void **state) {
  (void)state;
  const uint64_t sizes[] = {0, 1, 65535, 65536, 65537, MB, 100 * MB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint64_t size = sizes[i];
    char id[64];
    snprintf(id, sizeof id, "sizes/%llu", (unsigned long long)size);
    uint64_t rb0 = th_counter(B, "data_bytes_received"), rc0 = th_counter(C, "data_bytes_received");
    uint64_t sa0 = th_counter(A, "data_bytes_sent");
    uint64_t ib0 = th_counter(B, "inline_gets"), ic0 = th_counter(C, "inline_gets");
    th_put_pattern(A, id, size, size + 1);
    get_and_check(B, id, size, size + 1);
    get_and_check(C, id, size, size + 1);
    /* the local copy on A is served from its own pool */
    get_and_check(A, id, size, size + 1);
    uint64_t rb = th_counter(B, "data_bytes_received") - rb0;
    uint64_t rcv = th_counter(C, "data_bytes_received") - rc0;
    uint64_t sa = th_counter(A, "data_bytes_sent") - sa0;
    uint64_t ib = th_counter(B, "inline_gets") - ib0, ic = th_counter(C, "inline_gets") - ic0;
    if (size <= 65536) {
      /* inline: read by B's and C's clients straight from the directory;
       * neither their stores nor any data port took part */
      assert_int_equal(rb, 0);
      assert_int_equal(rcv, 0);
      assert_int_equal(sa, 0);
      assert_int_equal(ib, 0);
      assert_int_equal(ic, 0);
      int inl = 0;
      assert_int_equal(hpl_stat(A, id, th_ms(5000), NULL, NULL, NULL, &inl), 0);
      assert_int_equal(inl, 1);
    } else {
      assert_int_equal(rb, size);
      assert_int_equal(rcv, size);
      assert_int_equal(ib, 0);
      assert_int_equal(ic, 0);
      /* B and C pulled one copy each, from A or from each other */
      assert_true(sa >= size && sa <= 2 * size);
      uint64_t s;
      uint32_t copies, complete;
      int inl = 1;
      assert_int_equal(hpl_stat(B, id, th_ms(5000), &s, &copies, &complete, &inl), 0);
      assert_int_equal(s, size);
      assert_int_equal(copies, 3);
      assert_int_equal(complete, 3);
      assert_int_equal(inl, 0);
    }
  }
}

/* Small objects: a client reads them from the directory when its node holds
 * no copy (a private buffer, outside the pool); a local copy is still served
 * zero-copy by the store; with HPL_DIRECT_GETS=0 the store fetches it. */
static void test_small_direct(void **state) {
  (void)state;
  th_put_pattern(A, "small/x", 1000, 5);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "small/x", th_ms(5000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 1000, 5));
  assert_int_equal(th_shm_offset(hpl_buf_data(b)), -1); /* the library's own copy */
  /* aligned like the pool's objects: element arrays may be read in place */
  assert_int_equal((uintptr_t)hpl_buf_data(b) % 64, 0);
  hpl_release(B, b);
  assert_int_equal(hpl_get(A, "small/x", th_ms(5000), &b), 0);
  assert_true(th_shm_offset(hpl_buf_data(b)) >= 0); /* A's local copy, in its pool */
  assert_int_equal((uintptr_t)hpl_buf_data(b) % 64, 0);
  hpl_release(A, b);
  /* not inline: the directory says so and the store fetches it */
  th_put_pattern(A, "small/big", 200000, 6);
  get_and_check(B, "small/big", 200000, 6);
  /* gone: the direct read finds nothing, the store's get waits and times out */
  assert_int_equal(hpl_delete(A, "small/x", th_ms(5000)), 0);
  assert_int_equal(hpl_get(C, "small/x", 300, &b), HPL_ETIMEDOUT);
  /* the store path, as before */
  th_put_pattern(A, "small/y", 1000, 7);
  setenv("HPL_DIRECT_GETS", "0", 1);
  hpl_client *d = th_connect(lc, 2);
  unsetenv("HPL_DIRECT_GETS");
  uint64_t ic0 = th_counter(C, "inline_gets");
  assert_int_equal(hpl_get(d, "small/y", th_ms(5000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 1000, 7));
  assert_true(th_shm_offset(hpl_buf_data(b)) >= 0);
  hpl_release(d, b);
  assert_int_equal(th_counter(C, "inline_gets") - ic0, 1);
  /* now C holds a copy: its clients get it from the store, zero-copy */
  assert_int_equal(hpl_get(C, "small/y", th_ms(5000), &b), 0);
  assert_true(th_shm_offset(hpl_buf_data(b)) >= 0);
  hpl_release(C, b);
  hpl_close(d);
}

/* A thread in another network namespace than the stores (task runtimes
 * move workers into containers): the direct path must not connect from
 * there - the directory's address may lead somewhere else entirely - but
 * a connection made from the store's namespace serves it, since a socket
 * keeps the namespace it was made in. */
typedef struct ns_thread {
  hpl_client *c;
  pthread_barrier_t *bar;
  int port;
  int skipped;                 /* unshare refused (not root) */
  int rc1, pool1, rc2, pool2;  /* the gets before and after the connection */
  uint64_t ms1;
  int decoy_accepts;           /* connections the decoy listener took */
} ns_thread;

static int ns_get(hpl_client *c, const char *id, int *in_pool) {
  hpl_buf *b = NULL;
  int rc = hpl_get(c, id, th_ms(5000), &b);
  if (rc == 0) {
    *in_pool = th_shm_offset(hpl_buf_data(b)) >= 0;
    if (!th_check_pattern(hpl_buf_data(b), 1000, 11)) rc = -1;
    hpl_release(c, b);
  }
  return rc;
}

static void *ns_thread_run(void *arg) {
  ns_thread *t = arg;
  int decoy = -1;
  if (unshare(CLONE_NEWNET) != 0) {
    t->skipped = 1;
    pthread_barrier_wait(t->bar);
    return NULL;
  }
  /* a decoy listening at the directory's address in this namespace */
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  if (s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) == 0) {
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t->port)};
      inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
      decoy = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (decoy < 0 || bind(decoy, (struct sockaddr *)&a, sizeof a) != 0 || listen(decoy, 8) != 0)
        t->decoy_accepts = -100; /* the test fails: no decoy */
    }
  }
  if (s >= 0) close(s);
  uint64_t t0 = hpl__now_ms();
  t->rc1 = ns_get(t->c, "netns/1", &t->pool1); /* no connection yet */
  t->ms1 = hpl__now_ms() - t0;
  pthread_barrier_wait(t->bar); /* the main thread connects */
  pthread_barrier_wait(t->bar);
  t->rc2 = ns_get(t->c, "netns/2", &t->pool2); /* over the main thread's connection */
  while (decoy >= 0) {
    int c = accept4(decoy, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) break;
    close(c);
    t->decoy_accepts++;
  }
  if (decoy >= 0) close(decoy);
  return NULL;
}

static void test_direct_other_netns(void **state) {
  (void)state;
  th_put_pattern(A, "netns/1", 1000, 11);
  th_put_pattern(A, "netns/m", 1000, 11);
  th_put_pattern(A, "netns/2", 1000, 11);
  hpl_client *h = th_connect(lc, 1); /* a fresh handle: no directory connection */
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  ns_thread t = {.c = h, .bar = &bar, .port = hpl__lc_dir_port(lc)};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, ns_thread_run, &t), 0);
  pthread_barrier_wait(&bar);
  int rc_m = -1, pool_m = -1;
  if (!t.skipped) {
    rc_m = ns_get(h, "netns/m", &pool_m); /* connects from here */
    pthread_barrier_wait(&bar);
  }
  pthread_join(th, NULL);
  pthread_barrier_destroy(&bar);
  hpl_close(h);
  if (t.skipped) skip(); /* needs CAP_SYS_ADMIN for unshare(CLONE_NEWNET) */
  /* before any connection: through B's store (its pool), at once, and
   * nothing reached the decoy */
  assert_int_equal(t.decoy_accepts, 0);
  assert_int_equal(t.rc1, 0);
  assert_int_equal(t.pool1, 1);
  assert_true(t.ms1 < (uint64_t)th_ms(400));
  assert_int_equal(rc_m, 0);
  assert_int_equal(pool_m, 0); /* the directory's bytes */
  /* once the store's namespace made the connection, it serves this thread */
  assert_int_equal(t.rc2, 0);
  assert_int_equal(t.pool2, 0);
}

/* A get issued before the put waits for it, then succeeds. A small one
 * waits at the directory, which pushes the bytes straight to the client
 * when they land (B's store is not involved); meanwhile other gets on the
 * same handle are not held up behind it. A large one is granted: the
 * directory answers the waiting PEEK by naming a sender to B's store
 * itself, which then pulls without an ACQUIRE of its own. */
static void test_get_before_put(void **state) {
  (void)state;
  const uint64_t sizes[] = {1000, 8 * MB};
  th_put_pattern(A, "later/there", 1000, 8);
  for (int i = 0; i < 2; i++) {
    char id[32];
    snprintf(id, sizeof id, "later/%d", i);
    uint64_t inl0 = th_counter(B, "inline_gets"), rem0 = th_counter(B, "remote_gets");
    uint64_t gr0 = th_counter(B, "grants_taken"), ask0 = th_dir_counter(lc, "dir_acquires");
    th_getter g = {.c = B, .id = id, .timeout = th_ms(20000), .size = sizes[i],
                   .want = th_pattern_sum(sizes[i], 7)};
    uint64_t start = hpl__now_ms();
    th_get_start(&g);
    th_sleep_ms(200);
    /* an object that is there, through the same handle, while g waits */
    hpl_buf *b;
    uint64_t t0 = hpl__now_ms();
    assert_int_equal(hpl_get(B, "later/there", th_ms(5000), &b), 0);
    assert_true(hpl__now_ms() - t0 < (uint64_t)th_ms(150));
    assert_true(th_check_pattern(hpl_buf_data(b), 1000, 8));
    hpl_release(B, b);
    th_sleep_ms(200);
    uint64_t put_at = hpl__now_ms();
    th_put_pattern(A, id, sizes[i], 7);
    th_get_join(&g);
    assert_int_equal(g.rc, 0);
    assert_true(g.ok);
    assert_true(g.done_ms >= put_at);
    assert_true(put_at - start >= 390);
    /* small: the directory's bytes, in the library's own buffer; "later/there"
     * went to B's store the first time (g was waiting at the directory),
     * which has held a copy since. Large: B's store fetched it. */
    assert_int_equal(g.in_pool, sizes[i] > 64 * 1024);
    assert_int_equal(th_counter(B, "inline_gets"), inl0 + (i == 0));
    assert_int_equal(th_counter(B, "remote_gets"), rem0 + 1);
    /* large: the directory answered g's PEEK by naming a sender to B's
     * store (a GRANT), so that store never asked it (no ACQUIRE; the one
     * ACQUIRE is B's store's of "later/there", the first time) */
    assert_int_equal(th_counter(B, "grants_taken"), gr0 + (i == 1));
    assert_int_equal(th_dir_counter(lc, "dir_acquires"), ask0 + (i == 0));
  }
}

/* A granted get whose GRANT reaches the store after the GET (fault point
 * grant_delay_ms on every store). Within HPL__FETCH_GRANT_WAIT_MS (200 ms) the
 * store takes it and never asks the directory; later, the store asks
 * (an ACQUIRE) and ignores the grant when it comes. Either way the bytes
 * are right and the directory's view stays whole: a third node's get
 * works and every copy ends complete. */
static void grant_late(uint64_t delay_ms) {
  char args[64];
  snprintf(args, sizeof args, "--faults grant_delay_ms=%llu", (unsigned long long)delay_ms);
  hpl__lc *g = th_cluster(3, 64 * MB, NULL, args);
  hpl_client *a = th_connect(g, 0), *b = th_connect(g, 1), *c = th_connect(g, 2);
  th_put_pattern(a, "grant/x", 8 * MB, 21);
  uint64_t ask0 = th_dir_counter(g, "dir_acquires"), pg0 = th_dir_counter(g, "dir_peeks_granted");
  hpl_buf *buf;
  assert_int_equal(hpl_get(b, "grant/x", th_ms(10000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), 8 * MB, 21));
  hpl_release(b, buf);
  th_sleep_ms(delay_ms + 300); /* the late grant has been handled */
  int late = delay_ms > 200;
  assert_int_equal(th_dir_counter(g, "dir_peeks_granted"), pg0 + 1);
  assert_int_equal(th_counter(b, "grants_taken"), !late);
  assert_int_equal(th_counter(b, "grant_waits_expired"), late);
  assert_int_equal(th_counter(b, "grants_ignored"), late);
  assert_int_equal(th_dir_counter(g, "dir_acquires"), ask0 + late);
  assert_int_equal(hpl_get(c, "grant/x", th_ms(10000), &buf), 0);
  assert_true(th_check_pattern(hpl_buf_data(buf), 8 * MB, 21));
  hpl_release(c, buf);
  uint32_t copies = 0, complete = 0;
  assert_int_equal(hpl_stat(a, "grant/x", th_ms(5000), NULL, &copies, &complete, NULL), 0);
  assert_int_equal(copies, 3);
  assert_int_equal(complete, 3);
  hpl_close(a);
  hpl_close(b);
  hpl_close(c);
  th_stop(g, 0);
}

static void test_grant_in_time(void **state) {
  (void)state;
  grant_late(50);
}

static void test_grant_too_late(void **state) {
  (void)state;
  grant_late(600);
}

/* `getter` waits for `id` (1000 bytes) while `putter` puts it: the get
 * must end with the pattern for `seed`. */
static void put_while_waiting(hpl_client *putter, hpl_client *getter, const char *id,
                              uint64_t seed) {
  th_getter g = {.c = getter, .id = id, .timeout = th_ms(10000), .size = 1000,
                 .want = th_pattern_sum(1000, seed)};
  th_get_start(&g);
  th_sleep_ms(200);
  th_put_pattern(putter, id, 1000, seed);
  th_get_join(&g);
  assert_int_equal(g.rc, 0);
  assert_true(g.ok);
}

/* A small put is published to the directory while it goes to the store:
 * a get waiting at the directory has the bytes (dir_publishes), the
 * store's own INLINE_PUT confirms them (dir_publishes_confirmed) and the
 * putting node's copy is listed. A put of an id that exists is not taken
 * (dir_publishes_ignored) and fails as before. A put that fails at its
 * store after publishing - here an object of that id is being created on
 * the same node - is taken back: nobody finds it afterwards. Of a batch,
 * objects over 2 KiB are not published. */
static void test_publish(void **state) {
  (void)state;
  uint64_t p0 = th_dir_counter(lc, "dir_publishes");
  uint64_t c0 = th_dir_counter(lc, "dir_publishes_confirmed");
  uint64_t i0 = th_dir_counter(lc, "dir_publishes_ignored");
  uint64_t r0 = th_dir_counter(lc, "dir_publishes_retracted");
  uint64_t puts0 = th_counter(A, "inline_puts");
  put_while_waiting(A, B, "pub/x", 9);
  assert_int_equal(th_dir_counter(lc, "dir_publishes"), p0 + 1);
  assert_int_equal(th_dir_counter(lc, "dir_publishes_confirmed"), c0 + 1);
  assert_int_equal(th_counter(A, "inline_puts"), puts0 + 1);
  uint32_t copies = 0, complete = 0;
  assert_int_equal(hpl_stat(C, "pub/x", th_ms(5000), NULL, &copies, &complete, NULL), 0);
  assert_int_equal(copies, 1);
  assert_int_equal(complete, 1);
  /* another put of that id, other bytes, from another node */
  uint8_t other[1000];
  memset(other, 0x5a, sizeof other);
  assert_int_equal(hpl_put(C, "pub/x", other, sizeof other, th_ms(5000)), HPL_EEXIST);
  assert_int_equal(th_dir_counter(lc, "dir_publishes_ignored"), i0 + 1);
  get_and_check(B, "pub/x", 1000, 9);
  /* a put that its store refuses: A is writing an object of that id */
  hpl_buf *w;
  assert_int_equal(hpl_create(A, "pub/y", 1000, th_ms(5000), &w), 0);
  hpl_client *a2 = th_connect(lc, 0);
  assert_int_equal(hpl_put(a2, "pub/y", other, sizeof other, th_ms(5000)), HPL_EEXIST);
  assert_int_equal(th_dir_counter(lc, "dir_publishes"), p0 + 2);
  assert_int_equal(th_dir_counter(lc, "dir_publishes_retracted"), r0 + 1);
  assert_int_equal(hpl_stat(C, "pub/y", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "pub/y", 300, &b), HPL_ETIMEDOUT);
  /* the writer's own put goes on */
  hpl__fill_pattern(hpl_buf_data(w), 1000, 10);
  assert_int_equal(hpl_seal(A, w, th_ms(5000)), 0);
  get_and_check(B, "pub/y", 1000, 10);
  hpl_close(a2);
  /* of a batch, an inline object over 2 KiB is not published (its bytes
   * would cross the directory's link twice): the store's INLINE_PUT alone
   * brings it; one of 2 KiB is; a single put of 4 KiB is too */
  uint64_t p1 = th_dir_counter(lc, "dir_publishes");
  uint64_t puts1 = th_counter(A, "inline_puts");
  static uint8_t big[4096], small[2048];
  hpl__fill_pattern(big, sizeof big, 12);
  hpl__fill_pattern(small, sizeof small, 13);
  const char *ids[] = {"pub/many-4k", "pub/many-2k"};
  const void *data[] = {big, small};
  uint64_t sizes[] = {sizeof big, sizeof small};
  int rcs[2];
  assert_int_equal(hpl_put_many(A, ids, data, sizes, 2, th_ms(5000), rcs), 0);
  assert_int_equal(th_dir_counter(lc, "dir_publishes"), p1 + 1);
  assert_int_equal(th_counter(A, "inline_puts"), puts1 + 2);
  get_and_check(B, "pub/many-4k", 4096, 12);
  get_and_check(B, "pub/many-2k", 2048, 13);
  th_put_pattern(A, "pub/one-4k", 4096, 14);
  assert_int_equal(th_dir_counter(lc, "dir_publishes"), p1 + 2);
}

/* A put whose bytes node 0's store already holds, fetched from what was
 * published for it: the PUBLISH is made by hand (a raw reader naming a
 * store), a client of node 0 that reads through its store (direct gets
 * off) fetches it, and then A's put of the same bytes arrives there. The
 * store asks the directory with its INLINE_PUT instead of failing the put
 * as "exists on this node": the directory confirms bytes published for
 * this node (the put succeeds), and refuses bytes published for another
 * (HPL_EEXIST; they stay, nothing is retracted). */
static void publish_then_fetched(const char *id, int for_node0) {
  uint8_t bytes[500];
  memset(bytes, 0x33, sizeof bytes);
  uint64_t node = for_node0 ? th_node_id(A) : th_node_id(B);
  int rd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0); /* a client of that node */
  assert_int_equal(th_wire_handshake_as(rd, hpl__lc_secret(lc), HPL__ROLE_READER,
                                        for_node0 ? "node-0" : "node-1"), 0);
  Hplpb__InlinePutReq m = HPLPB__INLINE_PUT_REQ__INIT;
  m.id = (char *)id;
  m.size = sizeof bytes;
  m.node = node;
  th_wire_send_payload(rd, HPL__MSG_PUBLISH, 1, &m.base, bytes, sizeof bytes);
  protobuf_c_message_free_unpacked(th_wire_wait(rd, HPL__MSG_REPLY, 1), NULL);
  close(rd);
  setenv("HPL_DIRECT_GETS", "0", 1);
  hpl_client *via_store = th_connect(lc, 0);
  unsetenv("HPL_DIRECT_GETS");
  hpl_buf *b;
  assert_int_equal(hpl_get(via_store, id, th_ms(5000), &b), 0);
  assert_true(th_shm_offset(hpl_buf_data(b)) >= 0); /* node 0's store holds a copy */
  hpl_release(via_store, b);
  hpl_close(via_store);
  uint64_t c0 = th_dir_counter(lc, "dir_publishes_confirmed");
  uint64_t r0 = th_dir_counter(lc, "dir_publishes_retracted");
  int rc = hpl_put(A, id, bytes, sizeof bytes, th_ms(5000));
  assert_int_equal(rc, for_node0 ? 0 : HPL_EEXIST);
  assert_int_equal(th_dir_counter(lc, "dir_publishes_confirmed"), c0 + (for_node0 ? 1 : 0));
  assert_int_equal(th_dir_counter(lc, "dir_publishes_retracted"), r0);
  uint32_t copies = 0, complete = 0;
  assert_int_equal(hpl_stat(C, id, th_ms(5000), NULL, &copies, &complete, NULL), 0);
  assert_int_equal(copies, 1); /* node 0's, listed since it fetched it */
  assert_int_equal(complete, copies);
  assert_int_equal(hpl_get(C, id, th_ms(5000), &b), 0);
  assert_int_equal(hpl_buf_size(b), sizeof bytes);
  assert_memory_equal(hpl_buf_data(b), bytes, sizeof bytes);
  hpl_release(C, b);
}

static void test_publish_fetched_first(void **state) {
  (void)state;
  publish_then_fetched("pubf/mine", 1);
  publish_then_fetched("pubf/other", 0);
}

/* The directory started with --no-publish: stores tell their clients not
 * to publish, and small puts are seen once their store has put them. */
static void test_no_publish(void **state) {
  (void)state;
  hpl__lc *g = th_cluster(2, 64 * MB, "--no-publish", NULL);
  hpl_client *a = th_connect(g, 0), *b = th_connect(g, 1);
  put_while_waiting(a, b, "nopub/x", 11);
  assert_int_equal(th_dir_counter(g, "dir_publishes"), 0);
  assert_int_equal(th_dir_counter(g, "dir_publishes_ignored"), 0); /* none was sent */
  assert_int_equal(th_counter(a, "inline_puts"), 1);
  hpl_close(a);
  hpl_close(b);
  th_stop(g, 0);
}

/* A get of an object that never appears fails with HPL_ETIMEDOUT in time. */
static void test_get_timeout(void **state) {
  (void)state;
  hpl_buf *b = NULL;
  uint64_t t0 = hpl__now_ms();
  int rc = hpl_get(B, "never/appears", 500, &b);
  uint64_t el = hpl__now_ms() - t0;
  assert_int_equal(rc, HPL_ETIMEDOUT);
  assert_null(b);
  assert_true(el >= 490);
  assert_true(el < (uint64_t)th_ms(3000));
  assert_non_null(strstr(hpl_errdetail(B), "never/appears"));
  /* timeout 0 fails at once for an object not held locally */
  t0 = hpl__now_ms();
  assert_int_equal(hpl_get(B, "never/appears", 0, &b), HPL_ETIMEDOUT);
  assert_true(hpl__now_ms() - t0 < (uint64_t)th_ms(200));
  /* and the store keeps working afterwards */
  th_put_pattern(A, "after-timeout", 100, 3);
  get_and_check(B, "after-timeout", 100, 3);
}

/* Two client processes on one node get the same remote object: one
 * transfer, and both see the same shared memory. */
static void test_two_processes_one_transfer(void **state) {
  (void)state;
  const uint64_t size = 16 * MB;
  /* a fresh node so its counters only see this object */
  char err[256];
  int node = hpl__lc_add_store(lc, NULL, err, sizeof err);
  if (node < 0) fail_msg("add store: %s", err);
  th_put_pattern(A, "shared/one", size, 11);
  int pipes[2][2];
  pid_t pids[2];
  for (int k = 0; k < 2; k++) {
    assert_int_equal(pipe(pipes[k]), 0);
    pids[k] = fork();
    assert_true(pids[k] >= 0);
    if (pids[k] == 0) {
      hpl_client *c;
      int64_t res[3] = {-1, -1, -1};
      if (hpl_connect(hpl__lc_socket(lc, node), 5000, &c) == 0) {
        hpl_buf *b;
        int rc = hpl_get(c, "shared/one", 30000, &b);
        res[0] = rc;
        if (rc == 0) {
          res[1] = th_shm_offset(hpl_buf_data(b));
          res[2] = th_check_pattern(hpl_buf_data(b), hpl_buf_size(b), 11);
          hpl_release(c, b);
        }
        hpl_close(c);
      }
      ssize_t w = write(pipes[k][1], res, sizeof res);
      _exit(w == sizeof res ? 0 : 1);
    }
    close(pipes[k][1]);
  }
  int64_t res[2][3];
  for (int k = 0; k < 2; k++) {
    assert_int_equal(read(pipes[k][0], res[k], sizeof res[k]), sizeof res[k]);
    close(pipes[k][0]);
    int st;
    waitpid(pids[k], &st, 0);
    assert_int_equal(res[k][0], 0);
    assert_int_equal(res[k][2], 1);
    assert_true(res[k][1] >= 0);
  }
  assert_int_equal(res[0][1], res[1][1]); /* same offset in the same memfd */
  hpl_client *c = th_connect(lc, node);
  assert_int_equal(th_counter(c, "pulls_made"), 1);
  assert_int_equal(th_counter(c, "data_bytes_received"), size);
  hpl_close(c);
}

/* An object a client holds survives delete until released. */
static void test_delete_while_held(void **state) {
  (void)state;
  const uint64_t size = 4 * MB;
  th_put_pattern(A, "del/x", size, 21);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "del/x", th_ms(10000), &b), 0);
  uint64_t alloc_held = th_counter(B, "pool_allocated");
  assert_int_equal(hpl_delete(A, "del/x", th_ms(5000)), 0);
  assert_int_equal(hpl_stat(C, "del/x", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  /* deleting again: not found */
  assert_int_equal(hpl_delete(A, "del/x", th_ms(5000)), HPL_ENOTFOUND);
  /* still readable through the held view */
  assert_true(th_check_pattern(hpl_buf_data(b), size, 21));
  int local = 1;
  assert_int_equal(hpl_contains(B, "del/x", th_ms(5000), &local), 0);
  assert_int_equal(local, 0);
  assert_int_equal(th_counter(B, "pool_allocated"), alloc_held);
  /* the id can be reused at once, with other content */
  th_put_pattern(A, "del/x", size, 22);
  assert_true(th_check_pattern(hpl_buf_data(b), size, 21));
  hpl_release(B, b);
  assert_true(th_counter(B, "pool_allocated") <= alloc_held - size);
  get_and_check(B, "del/x", size, 22);
  get_and_check(C, "del/x", size, 22);
}

static void test_errors(void **state) {
  (void)state;
  th_put_pattern(A, "dup", 200 * 1024, 1);
  /* the same id on another node: refused, cluster-wide */
  void *d = calloc(1, 200 * 1024);
  assert_int_equal(hpl_put(B, "dup", d, 200 * 1024, th_ms(5000)), HPL_EEXIST);
  assert_int_equal(hpl_put(A, "dup", d, 200 * 1024, th_ms(5000)), HPL_EEXIST);
  assert_int_equal(hpl_put(B, "dup-small", d, 10, th_ms(5000)), 0);
  assert_int_equal(hpl_put(C, "dup-small", d, 10, th_ms(5000)), HPL_EEXIST);
  free(d);
  /* bad ids */
  hpl_buf *b;
  assert_int_equal(hpl_get(A, "", 100, &b), HPL_EINVAL);
  assert_int_equal(hpl_get(A, "bad\nid", 100, &b), HPL_EINVAL);
  assert_int_equal(hpl_put(A, NULL, "x", 1, 100), HPL_EINVAL);
  assert_int_equal(hpl_put(A, "x", NULL, 1, 100), HPL_EINVAL);
  assert_int_equal(hpl_stat(A, "nope", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  assert_non_null(strstr(hpl_errdetail(A), "nope"));
  /* a socket nobody listens on */
  hpl_client *c;
  assert_int_equal(hpl_connect("/nonexistent/hoplite.sock", 1000, &c), HPL_ECONN);
  assert_int_equal(hpl_connect(NULL, 1000, &c), getenv(HPL_SOCKET_ENV) ? HPL_ECONN : HPL_EINVAL);
  /* create, abort: nothing remains, and the id is free again */
  assert_int_equal(hpl_create(A, "aborted", 3 * MB, th_ms(5000), &b), 0);
  hpl_abort(A, b);
  assert_int_equal(hpl_get(B, "aborted", 300, &b), HPL_ETIMEDOUT);
  th_put_pattern(C, "aborted", 3 * MB, 5);
  get_and_check(A, "aborted", 3 * MB, 5);
}

/* A full pool gives a clear error and the store keeps serving. */
static void test_pool_full(void **state) {
  (void)state;
  hpl__lc *small = th_cluster(1, 64 * MB, NULL, NULL);
  hpl_client *c = th_connect(small, 0);
  void *d = malloc(100 * MB);
  memset(d, 1, 100 * MB);
  assert_int_equal(hpl_put(c, "too-big", d, 100 * MB, th_ms(5000)), HPL_ENOMEM);
  assert_non_null(strstr(hpl_errdetail(c), "pool"));
  /* fill it with 8 MiB objects until it refuses: each is the only copy,
   * so nothing can be let go, and a put waits for room until its timeout */
  int n = 0, rc = 0;
  char id[32];
  uint64_t t0 = 0;
  for (; n < 32; n++) {
    snprintf(id, sizeof id, "fill/%d", n);
    t0 = hpl__now_ms();
    rc = hpl_put(c, id, d, 8 * MB, 300);
    if (rc) break;
  }
  assert_int_equal(rc, HPL_ENOMEM);
  assert_true(hpl__now_ms() - t0 >= 290);
  assert_non_null(strstr(hpl_errdetail(c), "only copies"));
  assert_true(n >= 5); /* most of the pool is usable */
  /* free one, and the next put fits again */
  assert_int_equal(hpl_delete(c, "fill/0", th_ms(5000)), 0);
  assert_int_equal(hpl_put(c, "fill/again", d, 8 * MB, th_ms(5000)), 0);
  hpl_buf *b;
  assert_int_equal(hpl_get(c, "fill/1", th_ms(5000), &b), 0);
  hpl_release(c, b);
  free(d);
  hpl_close(c);
  th_stop(small, 0);
}

/* One handle shared by threads: concurrent gets and puts. */
typedef struct worker {
  hpl_client *c;
  int idx;
  int failures;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 20; i++) {
    char id[48];
    snprintf(id, sizeof id, "mt/%d/%d", w->idx, i);
    uint64_t size = (uint64_t)(1000 + i * 7000 + w->idx * 100);
    void *d = malloc(size);
    hpl__fill_pattern(d, size, (uint64_t)(w->idx * 100 + i));
    if (hpl_put(w->c, id, d, size, 10000) != 0) w->failures++;
    hpl_buf *b;
    if (hpl_get(w->c, id, 10000, &b) != 0) {
      w->failures++;
    } else {
      if (hpl_buf_size(b) != size || memcmp(hpl_buf_data(b), d, size) != 0) w->failures++;
      hpl_release(w->c, b);
    }
    free(d);
  }
  return NULL;
}

static void test_threads_share_handle(void **state) {
  (void)state;
  worker w[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){.c = B, .idx = i};
    pthread_create(&t[i], NULL, worker_main, &w[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(w[i].failures, 0);
  }
  get_and_check(C, "mt/3/19", 1000 + 19 * 7000 + 300, 319);
}

/* RssShmem of process pid, in bytes (the pool pages it has mapped in). */
static uint64_t rss_shmem(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  uint64_t kb = UINT64_MAX;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "RssShmem: %llu kB", (unsigned long long *)&kb) == 1) break;
  fclose(f);
  assert_true(kb != UINT64_MAX);
  return kb * 1024;
}

/* The store gives pool pages back: 96 MiB put and deleted leave its
 * resident memory (RssShmem, and the pool's own count) near where it was
 * before, once frees have paused for --trim-ms. */
static void test_memory_given_back(void **state) {
  (void)state;
  hpl__lc *one = th_cluster(1, 256 * MB, NULL, "--trim-ms 200 --trim-keep 0");
  hpl_client *c = th_connect(one, 0);
  pid_t pid = hpl__lc_store_pid(one, 0);
  uint64_t idle = rss_shmem(pid);
  char id[32];
  for (int i = 0; i < 6; i++) {
    snprintf(id, sizeof id, "rss/%d", i);
    th_put_pattern(c, id, 16 * MB, (uint64_t)i);
  }
  /* the store touched the pages: the first put's bytes are checked there */
  hpl_buf *b;
  assert_int_equal(hpl_get(c, "rss/0", th_ms(5000), &b), 0);
  hpl_release(c, b);
  uint64_t full_pool = th_counter(c, "pool_resident");
  assert_true(full_pool >= 96 * MB);
  for (int i = 0; i < 6; i++) {
    snprintf(id, sizeof id, "rss/%d", i);
    assert_int_equal(hpl_delete(c, id, th_ms(5000)), 0);
  }
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_counter(c, "pool_resident") > 16 * MB && hpl__ms_left(deadline) > 0) th_sleep_ms(50);
  uint64_t after_pool = th_counter(c, "pool_resident"), after = rss_shmem(pid);
  fprintf(stderr, "store RssShmem %llu KiB idle, pool resident %llu KiB with 96 MiB, "
          "after deleting: pool %llu KiB, RssShmem %llu KiB\n",
          (unsigned long long)(idle >> 10), (unsigned long long)(full_pool >> 10),
          (unsigned long long)(after_pool >> 10), (unsigned long long)(after >> 10));
  assert_true(after_pool <= 16 * MB);
  assert_true(after <= idle + 16 * MB);
  assert_true(th_counter(c, "pool_trims") >= 1);
  assert_true(th_counter(c, "pool_high_water") >= 96 * MB);
  hpl_close(c);
  th_stop(one, 0);
}

/* A pool populated on purpose (--prefault) keeps its pages: a trimmed page
 * would fault in again on its next use. With no --trim-ms, nothing is
 * given back after the default 10 s pause; (--trim-ms given: as above). */
static void test_prefault_keeps_pages(void **state) {
  (void)state;
  hpl__lc *one = th_cluster(1, 64 * MB, NULL, "--prefault --trim-keep 0");
  hpl_client *c = th_connect(one, 0);
  uint64_t populated = th_counter(c, "pool_resident");
  assert_true(populated >= 60 * MB);
  th_put_pattern(c, "pk/0", 16 * MB, 1);
  assert_int_equal(hpl_delete(c, "pk/0", th_ms(5000)), 0);
  th_sleep_ms(10500); /* past the default trim pause */
  uint64_t after = th_counter(c, "pool_resident");
  fprintf(stderr, "prefaulted pool: %llu KiB resident at start, %llu KiB 10.5 s after a delete\n",
          (unsigned long long)(populated >> 10), (unsigned long long)(after >> 10));
  assert_int_equal(th_counter(c, "pool_trims"), 0);
  assert_true(after >= populated);
  hpl_close(c);
  th_stop(one, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_prefault_keeps_pages),
      cmocka_unit_test(test_small_direct),
      cmocka_unit_test(test_direct_other_netns),
      cmocka_unit_test(test_get_before_put),
      cmocka_unit_test(test_grant_in_time),
      cmocka_unit_test(test_grant_too_late),
      cmocka_unit_test(test_publish),
      cmocka_unit_test(test_no_publish),
      cmocka_unit_test(test_publish_fetched_first),
      cmocka_unit_test(test_get_timeout),
      cmocka_unit_test(test_two_processes_one_transfer),
      cmocka_unit_test(test_delete_while_held),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_pool_full),
      cmocka_unit_test(test_memory_given_back),
      cmocka_unit_test(test_threads_share_handle),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
