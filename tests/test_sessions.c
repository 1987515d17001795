/* test_sessions.c - sessions bound to the handshake (auth.h, frame.h): an
 * on-path TCP relay without the cluster secret passes the handshake through
 * untouched and then rewrites the bytes of inline objects in what the
 * directory sends. Every frame after the handshake carries a MAC, so the
 * rewritten frames are refused: the get returns the right bytes or fails
 * with an error, never the relay's bytes. Real servers on loopback. */
#include <arpa/inet.h>
#include <errno.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "harness.h"
#include "relay.h"
#include "util.h"

#define MB (1ull << 20)
#define OBJ_SIZE 1024
#define OBJ_BYTE 'Q'

/* ---- what the relay (relay.h) between a store and the directory does to
 * what the directory sends after the first 72 bytes (the handshake's
 * CHALLENGE): every run of 16 OBJ_BYTEs rewritten to "MITM...", or, with
 * tag_flip, a tag byte of every frame but the first flipped. */
#define TRACK_CONNS 64

/* tag_flip: where the directory's current frame is, on one connection. */
typedef struct frame_track {
  uint8_t hdr[HPL__FRAME_HDR_LEN];
  uint64_t fpos, flen, tag_at; /* position in it, its length (0: header not read), its tag */
  unsigned frames;
} frame_track;

typedef struct attack {
  volatile int tag_flip;
  volatile unsigned rewrites;
  frame_track ft[TRACK_CONNS]; /* connections past these pass untouched */
} attack;

/* tag_flip: follow the directory's frames in buf[0, n), `at` bytes into
 * what it sent (the handshake's 72 bytes skipped), and flip the first byte
 * of the tag of every frame after the first (its REGISTER_REP), which
 * leaves the framing intact and fails the MAC. Returns the bytes flipped. */
static int flip_tags(frame_track *pp, uint64_t at, uint8_t *buf, size_t n) {
  int k = 0;
  size_t i = 0;
  if (at < 72) i = 72 - at < n ? (size_t)(72 - at) : n;
  for (; i < n; i++) {
    if (pp->fpos < HPL__FRAME_HDR_LEN) pp->hdr[pp->fpos] = buf[i];
    if (pp->fpos == pp->tag_at && pp->flen && pp->frames > 1) {
      buf[i] ^= 0x01;
      k++;
    }
    pp->fpos++;
    if (pp->fpos == HPL__FRAME_HDR_LEN && !pp->flen) {
      hpl__frame_limits lim = {.max_msg = 1u << 24, .max_payload = 1ull << 40,
                               .max_type = HPL__MSG_MAX_, .tagged = 1};
      hpl__frame_hdr h;
      if (hpl__frame_decode_hdr(pp->hdr, sizeof pp->hdr, &lim, &h, NULL) != 0) return k;
      pp->tag_at = HPL__FRAME_HDR_LEN + h.msg_len;
      pp->flen = pp->tag_at + HPL__FRAME_TAG_LEN + h.payload_len;
      pp->frames++;
    }
    if (pp->flen && pp->fpos == pp->flen) pp->fpos = pp->flen = 0;
  }
  return k;
}

static int rewrite(uint8_t *p, size_t n) {
  int k = 0;
  for (size_t i = 0; i + 16 <= n; i++) {
    size_t j = 0;
    while (j < 16 && p[i + j] == OBJ_BYTE) j++;
    if (j < 16) continue;
    for (j = 0; j < 16; j++) p[i + j] = (uint8_t)"MITM"[j % 4];
    i += 15;
    k++;
  }
  return k;
}

/* th_relay_fn: the attack on what the directory sends. */
static void tamper(void *arg, unsigned conn, uint64_t at, uint8_t *buf, size_t n) {
  attack *t = arg;
  if (t->tag_flip) {
    if (conn < TRACK_CONNS) t->rewrites += (unsigned)flip_tags(&t->ft[conn], at, buf, n);
    return;
  }
  size_t skip = at < 72 ? (size_t)(72 - at) : 0;
  if (skip < n) t->rewrites += (unsigned)rewrite(buf + skip, n - skip);
}

/* A store of cluster lc, without a node of its own, whose link to the
 * directory passes a relay doing to it what t says (set before: the store
 * connects at once); its socket, log and work directory. */
typedef struct relayed {
  th_relay *r;
  pid_t pid;
  char work[32], sock[128], log[128];
} relayed;

/* Start x's relay and store, and wait until the store is ready. */
static void relayed_start(relayed *x, hpl__lc *lc, attack *t) {
  char ready[128], dir[64];
  x->r = th_relay_start(hpl__lc_dir_port(lc), tamper, t);
  snprintf(x->work, sizeof x->work, "/tmp/hpl-relay-XXXXXX");
  assert_non_null(mkdtemp(x->work));
  snprintf(x->sock, sizeof x->sock, "%s/store.sock", x->work);
  snprintf(ready, sizeof ready, "%s/ready", x->work);
  snprintf(x->log, sizeof x->log, "%s/store.log", x->work);
  snprintf(dir, sizeof dir, "127.0.0.1:%d", th_relay_port(x->r));
  x->pid = th_spawn_store(dir, x->sock, ready, hpl__lc_secret(lc), x->log, NULL);
  for (int i = 0; i < 200 && access(ready, F_OK) != 0; i++) th_sleep_ms(50);
  assert_int_equal(access(ready, F_OK), 0);
}

/* Kill x's store (its relay, log and work directory stay). */
static void relayed_kill(relayed *x) {
  kill(x->pid, SIGKILL);
  waitpid(x->pid, NULL, 0);
}

/* Remove x's work directory (its log with it). */
static void relayed_clean(const relayed *x) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", x->work);
  if (system(cmd)) {
  }
}

/* A 1 KiB object put on node 0 of a real cluster; a store behind the relay
 * gets it (by a direct read of its client, or by asking the directory
 * itself). The relay rewrites the inline bytes it carries: the get fails or
 * returns the object's bytes, and the rewritten frames are counted. */
static void test_relay_rewrites_inline_reply(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, NULL, NULL);
  hpl_client *c0 = th_connect(lc, 0);
  uint8_t obj[OBJ_SIZE];
  memset(obj, OBJ_BYTE, sizeof obj);
  assert_int_equal(hpl_put(c0, "mitm/x", obj, sizeof obj, th_ms(5000)), 0);

  static attack t;
  memset(&t, 0, sizeof t);
  relayed x;
  relayed_start(&x, lc, &t);

  hpl_client *c = NULL;
  assert_int_equal(hpl_connect(x.sock, th_ms(5000), &c), 0);
  hpl_buf *b = NULL;
  int rc = hpl_get(c, "mitm/x", th_ms(3000), &b);
  int right = 0, mitm = 0;
  if (rc == 0) {
    right = hpl_buf_size(b) == OBJ_SIZE && memcmp(hpl_buf_data(b), obj, OBJ_SIZE) == 0;
    mitm = !right;
    hpl_release(c, b);
  }
  uint64_t macf = th_counter(c, "auth_failures");
  hpl_close(c);
  relayed_kill(&x);
  unsigned nconns = th_relay_conns(x.r);
  th_relay_stop(x.r);
  uint64_t dir_macf = th_dir_counter(lc, "dir_auth_failures");
  hpl_close(c0);
  th_stop(lc, mitm);
  char cmd[256];
  if (mitm || t.rewrites == 0 || macf + dir_macf == 0 || getenv("HPL_TEST_VERBOSE")) {
    snprintf(cmd, sizeof cmd, "grep -m5 -i 'mac\\|auth' %s >&2", x.log);
    if (system(cmd)) {
    }
  }
  relayed_clean(&x);
  fprintf(stderr, "relay: %u connections, %u rewrites; get: %s (%s); auth_failures store %llu, "
          "directory %llu\n", nconns, t.rewrites, hpl_strerror(rc),
          rc ? "failed" : right ? "right bytes" : "THE RELAY'S BYTES",
          (unsigned long long)macf, (unsigned long long)dir_macf);
  assert_true(t.rewrites > 0); /* the relay did change what it carried */
  if (mitm) fail_msg("the get returned the relay's bytes");
  assert_true(macf > 0); /* the store (or its client) refused the rewritten frames */
}

/* A relay that breaks the tag of every frame the directory sends after
 * the registration's answer: a store holding an object (so its HELD is
 * answered at once) registers, has a frame refused, reconnects, ... It
 * must back off (before: the backoff started over at each registration,
 * 2 connections a second here, 15 a second while a client retried) and
 * say what failed: a MAC, not the cluster secret. */
static void test_relay_breaks_every_tag(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  static attack t;
  memset(&t, 0, sizeof t);
  t.tag_flip = 1;
  relayed x;
  relayed_start(&x, lc, &t);
  hpl_client *c = NULL;
  assert_int_equal(hpl_connect(x.sock, th_ms(5000), &c), 0);
  uint8_t obj[256 * 1024];
  memset(obj, 'b', sizeof obj);
  int rc = hpl_put(c, "tags/x", obj, sizeof obj, th_ms(3000)); /* may fail: the link breaks */
  (void)rc;
  unsigned c0 = th_relay_conns(x.r);
  th_sleep_ms(4000);
  unsigned conns = th_relay_conns(x.r) - c0;
  hpl_close(c);
  relayed_kill(&x);
  th_relay_stop(x.r);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "grep -q 'failed its session MAC check' %s", x.log);
  int said_mac = system(cmd) == 0;
  snprintf(cmd, sizeof cmd, "grep -q 'wrong or missing cluster secret' %s", x.log);
  int said_secret = system(cmd) == 0;
  fprintf(stderr, "relay: %u connections in 4 s, %u tags flipped\n", conns, t.rewrites);
  relayed_clean(&x);
  th_stop(lc, 0);
  assert_true(t.rewrites > 0);
  assert_true(said_mac);     /* the log says what failed */
  assert_false(said_secret); /* ...and does not blame the secret */
  assert_true(conns <= 4); /* backing off (up to 5 s apart); before: about 2 a second */
}

/* A peer from before sessions: its version-1 HELLO fails the handshake
 * (counted); one that does the handshake but then sends a frame without a
 * tag is closed at that frame, and nothing it asked is answered. */
static void test_peer_without_sessions(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, NULL, NULL);
  uint64_t fails0 = th_dir_counter(lc, "dir_auth_failures");
  /* 1. a version-1 HELLO */
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)hpl__lc_dir_port(lc))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  hpl__auth_hs hs;
  uint8_t hello[HPL__AUTH_HELLO_LEN];
  hpl__auth_open(&hs, HPL__ROLE_NODE, "n1", 0, hello);
  hello[4] = 1;
  assert_int_equal(send(fd, hello, sizeof hello, MSG_NOSIGNAL), (ssize_t)sizeof hello);
  assert_true(th_wire_closed(fd, th_ms(3000)));
  close(fd);
  assert_true(th_dir_counter(lc, "dir_auth_failures") > fails0);
  /* 2. the handshake, then an untagged COUNTERS request */
  fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
  Hplpb__CountersReq r = HPLPB__COUNTERS_REQ__INIT;
  size_t len;
  uint8_t *f = hpl__msg_frame(HPL__MSG_COUNTERS, 7, &r.base, 0, &len);
  assert_int_equal(send(fd, f, len, MSG_NOSIGNAL), (ssize_t)len);
  free(f);
  uint8_t b[64];
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  assert_int_equal(poll(&pf, 1, (int)th_ms(3000)), 1);
  assert_true(recv(fd, b, sizeof b, 0) <= 0); /* closed, no reply */
  close(fd);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "grep -q 'frame without a MAC' %s", hpl__lc_dir_log(lc));
  assert_int_equal(system(cmd), 0); /* the log says why */
  th_stop(lc, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_relay_rewrites_inline_reply, th_teardown),
      cmocka_unit_test_teardown(test_relay_breaks_every_tag, th_teardown),
      cmocka_unit_test_teardown(test_peer_without_sessions, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
