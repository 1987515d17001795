/* harness.c - see harness.h. */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "auth.h"
#include "frame.h"
#include "util.h"

int64_t th_ms(int64_t ms) {
  const char *s = getenv("HPL_TEST_TIMEOUT_SCALE");
  double k = s ? atof(s) : 1.0;
  if (k < 1) k = 1;
  return (int64_t)((double)ms * k);
}

#define TH_MAX_LIVE 8
static hpl__lc *th_live[TH_MAX_LIVE]; /* clusters started and not stopped */

int th_teardown(void **state) {
  (void)state;
  for (int i = 0; i < TH_MAX_LIVE; i++) {
    if (!th_live[i]) continue;
    fprintf(stderr, "----- the test left a cluster running; its logs:\n");
    th_dump_logs(th_live[i]);
    hpl__lc_stop(th_live[i]);
    th_live[i] = NULL;
  }
  return 0;
}

void th_untrack(hpl__lc *lc) {
  for (int i = 0; i < TH_MAX_LIVE; i++)
    if (th_live[i] == lc) th_live[i] = NULL;
}

hpl__lc *th_cluster(int nodes, uint64_t memory, const char *dir_args, const char *store_args) {
  hpl__lc_opts o = {.nodes = nodes,
                   .memory = memory,
                   .bin_dir = getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR,
                   .dir_args = dir_args,
                   .store_args = store_args,
                   .log_level = getenv("HPL_TEST_LOG_LEVEL"),
                   .timeout_ms = (int)th_ms(15000),
                   /* servers older than the secret (HOPLITE_BIN_DIR) need none */
                   .no_auth = getenv("HPL_TEST_NO_AUTH") != NULL};
  hpl__lc *lc = NULL;
  char err[512];
  int rc = hpl__lc_start(&o, &lc, err, sizeof err);
  if (rc) fail_msg("cannot start the cluster: %s", err);
  for (int i = 0; i < TH_MAX_LIVE; i++)
    if (!th_live[i]) {
      th_live[i] = lc;
      break;
    }
  return lc;
}

static void dump_file(const char *title, const char *path) {
  if (!path || !*path) return;
  FILE *f = fopen(path, "r");
  if (!f) return;
  fprintf(stderr, "----- %s (%s)\n", title, path);
  char line[1024];
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
}

void th_dump_logs(hpl__lc *lc) {
  dump_file("directory", hpl__lc_dir_log(lc));
  for (int i = 0; i < hpl__lc_nodes(lc); i++) {
    char t[32];
    snprintf(t, sizeof t, "node-%d", i);
    dump_file(t, hpl__lc_store_log(lc, i));
  }
}

void th_stop(hpl__lc *lc, int dump) {
  if (!lc) return;
  for (int i = 0; i < TH_MAX_LIVE; i++)
    if (th_live[i] == lc) th_live[i] = NULL;
  char err[512];
  int dead = hpl__lc_check(lc, err, sizeof err);
  if (dump || dead || getenv("HPL_TEST_DUMP_LOGS")) th_dump_logs(lc);
  hpl__lc_stop(lc);
  if (dead) fail_msg("a server crashed during the test: %s", err);
}

hpl_client *th_connect(hpl__lc *lc, int node) {
  hpl_client *c = NULL;
  int rc = hpl_connect(hpl__lc_socket(lc, node), th_ms(5000), &c);
  if (rc) fail_msg("cannot connect to node-%d: %s", node, hpl_strerror(rc));
  return c;
}

uint64_t th_counter(hpl_client *c, const char *name) {
  uint64_t v = 0;
  int rc = hpl_counter(c, name, th_ms(5000), &v);
  if (rc) fail_msg("counter %s: %s (%s)", name, hpl_strerror(rc), hpl_errdetail(c));
  return v;
}

void th_put_pattern(hpl_client *c, const char *id, uint64_t size, uint64_t seed) {
  void *d = malloc(size ? size : 1);
  assert_non_null(d);
  hpl__fill_pattern(d, size, seed);
  int rc = hpl_put(c, id, d, size, th_ms(30000));
  free(d);
  if (rc) fail_msg("put %s (%llu B): %s (%s)", id, (unsigned long long)size, hpl_strerror(rc),
                   hpl_errdetail(c));
}

int th_check_pattern(const void *buf, uint64_t size, uint64_t seed) {
  /* compare against a regenerated copy in 1 MiB pieces */
  const uint8_t *p = buf;
  void *want = malloc(size ? size : 1);
  if (!want) return 0;
  hpl__fill_pattern(want, size, seed);
  int ok = memcmp(p, want, size) == 0;
  free(want);
  return ok;
}

int64_t th_shm_offset(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[1024];
  int64_t off = -1;
  uintptr_t a = (uintptr_t)p;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi, foff;
    if (sscanf(line, "%lx-%lx %*s %lx", &lo, &hi, &foff) != 3) continue;
    if (a >= lo && a < hi && strstr(line, "memfd:")) {
      off = (int64_t)(a - lo + foff);
      break;
    }
  }
  fclose(f);
  return off;
}

th_xfer *th_transfers(hpl_client *c, uint64_t since, size_t *n) {
  size_t cap = 256, k = 0;
  th_xfer *v = malloc(cap * sizeof *v);
  assert_non_null(v);
  for (;;) {
    char *text;
    uint64_t next = since;
    int rc = hpl_transfers(c, since, th_ms(5000), &text, &next);
    if (rc) fail_msg("transfers: %s (%s)", hpl_strerror(rc), hpl_errdetail(c));
    size_t got = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
      if (k == cap) v = realloc(v, (cap *= 2) * sizeof *v);
      th_xfer *x = &v[k];
      unsigned long long seq, t, r, s;
      int off = 0;
      if (sscanf(line, "%llu %llu %15s %llx %llx %n", &seq, &t, x->kind, &r, &s, &off) != 5)
        fail_msg("bad transfer line '%s'", line);
      x->seq = seq;
      x->t_us = t;
      x->receiver = r;
      x->sender = s;
      snprintf(x->id, sizeof x->id, "%s", line + off);
      k++;
      got++;
    }
    hpl_free(text);
    if (got == 0 || next == since) break;
    since = next;
  }
  *n = k;
  return v;
}

/* Active edges of the replay: receiver <- sender for one object. */
typedef struct edge {
  char id[HPL_ID_MAX + 1];
  uint64_t receiver, sender;
  int live;
} edge;

int th_check_tree(const th_xfer *x, size_t n, const char *prefix, int max_senders,
                  int *max_serving, char *why, size_t whylen) {
  edge *e = calloc(n + 1, sizeof *e);
  size_t ne = 0;
  int bad = 0, peak = 0;
  size_t plen = strlen(prefix);
  why[0] = 0;
  for (size_t i = 0; i < n; i++) {
    const th_xfer *t = &x[i];
    int gone = !strcmp(t->kind, "node-gone");
    if (!gone && strncmp(t->id, prefix, plen) != 0) continue;
    for (size_t j = 0; j < ne; j++) {
      if (!e[j].live) continue;
      int same = !strcmp(e[j].id, t->id);
      if (gone && (e[j].receiver == t->receiver || e[j].sender == t->receiver)) e[j].live = 0;
      if (!strcmp(t->kind, "delete") && same) e[j].live = 0;
      if ((!strcmp(t->kind, "done") || !strcmp(t->kind, "assign")) && same &&
          e[j].receiver == t->receiver)
        e[j].live = 0;
      if (!strcmp(t->kind, "remove") && same &&
          (e[j].receiver == t->receiver || e[j].sender == t->receiver))
        e[j].live = 0;
    }
    if (strcmp(t->kind, "assign") != 0) continue;
    /* a cycle: following senders from the new sender reaches the receiver */
    uint64_t cur = t->sender;
    for (size_t hops = 0; cur && hops <= ne; hops++) {
      if (cur == t->receiver) {
        if (!bad++) snprintf(why, whylen, "seq %llu: assigning %016llx <- %016llx closes a cycle",
                             (unsigned long long)t->seq, (unsigned long long)t->receiver,
                             (unsigned long long)t->sender);
        break;
      }
      uint64_t up = 0;
      for (size_t j = 0; j < ne; j++)
        if (e[j].live && !strcmp(e[j].id, t->id) && e[j].receiver == cur) up = e[j].sender;
      cur = up;
    }
    snprintf(e[ne].id, sizeof e[ne].id, "%s", t->id);
    e[ne].receiver = t->receiver;
    e[ne].sender = t->sender;
    e[ne].live = 1;
    ne++;
    int serving = 0;
    for (size_t j = 0; j < ne; j++)
      if (e[j].live && !strcmp(e[j].id, t->id) && e[j].sender == t->sender) serving++;
    if (serving > peak) peak = serving;
    if (serving > max_senders && !bad++)
      snprintf(why, whylen, "seq %llu: %016llx serves %d receivers of '%s' at once (max %d)",
               (unsigned long long)t->seq, (unsigned long long)t->sender, serving, t->id,
               max_senders);
  }
  free(e);
  if (max_serving) *max_serving = peak;
  return bad;
}

uint64_t th_node_id(hpl_client *c) { return th_counter(c, "node_id"); }

void th_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void *th_get_main(void *arg) {
  th_getter *g = arg;
  uint64_t t0 = hpl__now_ms();
  hpl_buf *b = NULL;
  g->rc = hpl_get(g->c, g->id, g->timeout, &b);
  g->done_ms = hpl__now_ms();
  g->ms = g->done_ms - t0;
  if (g->rc == 0) {
    g->ok = hpl_buf_size(b) == g->size && hpl__checksum(hpl_buf_data(b), g->size) == g->want;
    g->in_pool = th_shm_offset(hpl_buf_data(b)) >= 0;
    hpl_release(g->c, b);
  }
  return NULL;
}

void th_get_start(th_getter *g) {
  if (pthread_create(&g->thread, NULL, th_get_main, g) != 0) fail_msg("pthread_create");
}

void th_get_join(th_getter *g) { pthread_join(g->thread, NULL); }

uint64_t th_pattern_sum(uint64_t size, uint64_t seed) {
  void *d = malloc(size ? size : 1);
  assert_non_null(d);
  hpl__fill_pattern(d, size, seed);
  uint64_t sum = hpl__checksum(d, size);
  free(d);
  return sum;
}

/* ------------------------------------------------------------------ raw peers */

/* Exactly n bytes within the deadline: 0, or -1 on EOF, error or timeout. */
static int read_full(int fd, uint8_t *p, size_t n, uint64_t deadline) {
  while (n) {
    int64_t left = hpl__ms_left(deadline);
    if (left == 0) return -1;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int pr = poll(&pf, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return -1;
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* The sessions of raw connections (auth.h, frame.h): after a handshake
 * every frame both ways is tagged. Found by descriptor and socket inode
 * (a descriptor number is reused once closed). */
#define TH_SESSIONS 64
static struct th_session {
  int fd;
  ino_t ino;
  hpl__fmac tx, rx;
} th_sessions[TH_SESSIONS];
static pthread_mutex_t th_sessions_mu = PTHREAD_MUTEX_INITIALIZER;

static ino_t fd_ino(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* fd's session, or NULL (a connection without a handshake). */
static struct th_session *session_of(int fd) {
  ino_t ino = fd_ino(fd);
  struct th_session *found = NULL;
  pthread_mutex_lock(&th_sessions_mu);
  for (int i = 0; i < TH_SESSIONS && !found; i++)
    if (th_sessions[i].tx.on && th_sessions[i].fd == fd && th_sessions[i].ino == ino)
      found = &th_sessions[i];
  pthread_mutex_unlock(&th_sessions_mu);
  return found;
}

static void session_set(int fd, const hpl__auth_keys *k) {
  ino_t ino = fd_ino(fd);
  pthread_mutex_lock(&th_sessions_mu);
  struct th_session *slot = NULL;
  for (int i = 0; i < TH_SESSIONS; i++) /* the fd's old entry, or a free one, or the oldest */
    if (th_sessions[i].fd == fd || !th_sessions[i].tx.on) {
      slot = &th_sessions[i];
      if (th_sessions[i].fd == fd) break;
    }
  static int next;
  if (!slot) slot = &th_sessions[next++ % TH_SESSIONS];
  slot->fd = fd;
  slot->ino = ino;
  hpl__fmac_init(&slot->tx, k->send);
  hpl__fmac_init(&slot->rx, k->recv);
  pthread_mutex_unlock(&th_sessions_mu);
}

int th_wire_handshake_key(int fd, const uint8_t key[32], int role, const char *name) {
  hpl__auth_hs hs;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  hpl__auth_open(&hs, role, name, 0, hello);
  if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) return -1;
  if (read_full(fd, chal, sizeof chal, hpl__deadline_ms(th_ms(5000))) != 0) return -1;
  if (hpl__auth_answer(&hs, key, chal, proof) != 0) return -1;
  if (send(fd, proof, sizeof proof, MSG_NOSIGNAL) != (ssize_t)sizeof proof) return -1;
  hpl__auth_keys k;
  hpl__auth_session(&hs, key, 1, &k);
  session_set(fd, &k);
  return 0;
}

int th_wire_tagged(int fd) { return session_of(fd) != NULL; }

int th_wire_accept(int fd, const char *secret, unsigned roles) {
  hpl__auth a;
  char err[256];
  if (!secret || !*secret || hpl__auth_load(secret, &a, err, sizeof err) != 0) return -1;
  hpl__auth_hs hs;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  uint64_t deadline = hpl__deadline_ms(th_ms(5000));
  if (read_full(fd, hello, sizeof hello, deadline) != 0) return -1;
  if (hpl__auth_accept(&hs, &a, roles, hello, chal) != 0) return -1;
  if (send(fd, chal, sizeof chal, MSG_NOSIGNAL) != (ssize_t)sizeof chal) return -1;
  if (read_full(fd, proof, sizeof proof, deadline) != 0) return -1;
  if (hpl__auth_verify(&hs, &a, proof) != 0) return -1;
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_key(&a, hs.role, hs.name, rk);
  hpl__auth_keys k;
  hpl__auth_session(&hs, rk, 0, &k);
  session_set(fd, &k);
  return 0;
}

uint8_t *th_wire_frame_stream(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                              uint64_t plen, size_t *len) {
  size_t mlen = m ? protobuf_c_message_get_packed_size(m) : 0;
  uint8_t *f = malloc(HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + 1);
  if (!f) return NULL;
  struct th_session *ss = session_of(fd);
  hpl__frame_hdr h = {.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req,
                      .payload_len = plen};
  if (ss) h.flags = HPL__FRAME_F_TAG;
  hpl__frame_encode_hdr(&h, f);
  if (mlen) protobuf_c_message_pack(m, f + HPL__FRAME_HDR_LEN);
  uint8_t *at = f + HPL__FRAME_HDR_LEN + mlen;
  if (ss) {
    hpl__fmac_begin(&ss->tx, &h, f + HPL__FRAME_HDR_LEN, mlen);
    hpl__fmac_end(&ss->tx, at);
    at += HPL__FRAME_TAG_LEN;
  }
  *len = (size_t)(at - f);
  return f;
}

int th_wire_read_raw(int fd, hpl__frame_hdr *h, uint8_t **msg, int64_t timeout_ms) {
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  struct th_session *ss = session_of(fd);
  hpl__frame_limits lim = {.max_msg = 1u << 20, .max_payload = 1u << 20,
                           .max_type = HPL__MSG_MAX_, .tagged = ss != NULL};
  uint8_t hdr[HPL__FRAME_HDR_LEN], tag[HPL__FRAME_TAG_LEN];
  *msg = NULL;
  if (read_full(fd, hdr, sizeof hdr, deadline) ||
      hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, h, NULL) != 0)
    return -1;
  uint8_t *b = malloc(h->msg_len + h->payload_len + 1);
  if (!b) return -1;
  if (read_full(fd, b, h->msg_len, deadline) || (ss && read_full(fd, tag, sizeof tag, deadline)) ||
      read_full(fd, b + h->msg_len, h->payload_len, deadline)) {
    free(b);
    return -1;
  }
  if (ss) {
    hpl__fmac_begin(&ss->rx, h, b, h->msg_len);
    if (h->flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&ss->rx, b + h->msg_len, h->payload_len);
    if (hpl__fmac_check(&ss->rx, tag) != 0) {
      free(b);
      return -1;
    }
  }
  *msg = b;
  return 0;
}

hpl__fmac *th_wire_rx(int fd) {
  struct th_session *ss = session_of(fd);
  return ss ? &ss->rx : NULL;
}

uint8_t *th_wire_frame(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                       const void *payload, uint64_t plen, size_t *len) {
  size_t mlen = m ? protobuf_c_message_get_packed_size(m) : 0;
  uint8_t *f = malloc(HPL__FRAME_HDR_LEN + mlen + HPL__FRAME_TAG_LEN + plen + 1);
  if (!f) return NULL;
  struct th_session *ss = session_of(fd);
  hpl__frame_hdr h = {.type = (uint16_t)type, .msg_len = (uint32_t)mlen, .req_id = req,
                      .payload_len = plen};
  if (ss) h.flags = HPL__FRAME_F_TAG | (plen ? HPL__FRAME_F_TAG_PAYLOAD : 0);
  hpl__frame_encode_hdr(&h, f);
  if (mlen) protobuf_c_message_pack(m, f + HPL__FRAME_HDR_LEN);
  uint8_t *at = f + HPL__FRAME_HDR_LEN + mlen;
  if (ss) {
    hpl__fmac_begin(&ss->tx, &h, f + HPL__FRAME_HDR_LEN, mlen);
    if (plen) hpl__fmac_add(&ss->tx, payload, plen);
    hpl__fmac_end(&ss->tx, at);
    at += HPL__FRAME_TAG_LEN;
  }
  if (plen) memcpy(at, payload, plen);
  *len = (size_t)(at - f) + plen;
  return f;
}

int th_wire_handshake(int fd, const char *secret, int role) {
  /* a NODE a name of its own (each wire peer is another node), a READER
   * the local cluster's first store's; th_wire_handshake_as for others */
  static unsigned peers;
  char name[HPL__AUTH_NAME_MAX + 1] = "";
  if (role == HPL__ROLE_NODE)
    snprintf(name, sizeof name, "peer-%d-%u", (int)getpid(), ++peers);
  else if (role == HPL__ROLE_READER)
    snprintf(name, sizeof name, "node-0");
  return th_wire_handshake_as(fd, secret, role, name);
}

int th_wire_handshake_as(int fd, const char *secret, int role, const char *name) {
  if (!secret || !*secret) return 0;
  hpl__auth a;
  char err[256];
  if (hpl__auth_load(secret, &a, err, sizeof err) != 0) fail_msg("%s", err);
  uint8_t rk[HPL__AUTH_KEY_LEN];
  if (hpl__auth_key(&a, role, name, rk) != 0) return -1;
  return th_wire_handshake_key(fd, rk, role, name);
}

int th_wire_connect(int port, const char *secret, int role) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  int one = 1; /* the handshake's last message and the first frame go at once */
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (th_wire_handshake(fd, secret, role) != 0) fail_msg("the handshake on port %d failed", port);
  return fd;
}

void th_wire_send(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  th_wire_send_payload(fd, type, req, m, NULL, 0);
}

void th_wire_send_payload(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                          const void *payload, uint64_t plen) {
  size_t len;
  uint8_t *f = th_wire_frame(fd, type, req, m, payload, plen, &len);
  assert_non_null(f);
  assert_int_equal(send(fd, f, len, MSG_NOSIGNAL), (ssize_t)len);
  free(f);
}

ProtobufCMessage *th_wire_wait_payload(int fd, unsigned type, uint64_t req, uint8_t **payload,
                                       uint64_t *plen) {
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  struct th_session *ss = session_of(fd);
  hpl__frame_limits lim = {.max_msg = 1u << 20, .max_payload = 1u << 24,
                           .max_type = HPL__MSG_MAX_, .tagged = ss != NULL};
  for (;;) {
    uint8_t hdr[HPL__FRAME_HDR_LEN], tag[HPL__FRAME_TAG_LEN];
    hpl__frame_hdr h;
    if (read_full(fd, hdr, sizeof hdr, deadline)) fail_msg("no %s reply", hpl__msg_name(type));
    assert_int_equal(hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, &h, NULL), 0);
    uint8_t *msg = malloc(h.msg_len + h.payload_len + 1);
    assert_non_null(msg);
    assert_int_equal(read_full(fd, msg, h.msg_len, deadline), 0);
    if (ss) assert_int_equal(read_full(fd, tag, sizeof tag, deadline), 0);
    assert_int_equal(read_full(fd, msg + h.msg_len, h.payload_len, deadline), 0);
    if (ss) {
      hpl__fmac_begin(&ss->rx, &h, msg, h.msg_len);
      if (h.flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&ss->rx, msg + h.msg_len, h.payload_len);
      if (hpl__fmac_check(&ss->rx, tag) != 0)
        fail_msg("a %s frame fails its MAC check", hpl__msg_name(h.type));
    }
    if (h.type == type && h.req_id == req) {
      ProtobufCMessage *m = hpl__msg_unpack(h.type, msg, h.msg_len);
      assert_non_null(m);
      if (payload) {
        *payload = malloc(h.payload_len + 1);
        assert_non_null(*payload);
        memcpy(*payload, msg + h.msg_len, h.payload_len);
        *plen = h.payload_len;
      }
      free(msg);
      return m;
    }
    free(msg);
  }
}

ProtobufCMessage *th_wire_wait(int fd, unsigned type, uint64_t req) {
  return th_wire_wait_payload(fd, type, req, NULL, NULL);
}

int th_wire_closed(int fd, int64_t timeout_ms) {
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  uint8_t b[4096];
  for (;;) {
    int64_t left = hpl__ms_left(deadline);
    if (left == 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, (int)left) <= 0) continue;
    ssize_t n = recv(fd, b, sizeof b, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return 1;
  }
}

/* One counter over a fresh connection; UINT64_MAX when the directory
 * refused the connection (try) or fails the test (th_dir_counter). */
static uint64_t dir_counter(hpl__lc *lc, const char *name, int may_refuse) {
  char err[256];
  if (hpl__lc_check(lc, err, sizeof err)) fail_msg("a server died: %s", err);
  int fd;
  if (may_refuse) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)hpl__lc_dir_port(lc))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        th_wire_handshake(fd, hpl__lc_secret(lc), HPL__ROLE_NODE) != 0) {
      close(fd);
      return UINT64_MAX;
    }
  } else {
    fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
  }
  Hplpb__CountersReq r = HPLPB__COUNTERS_REQ__INIT;
  th_wire_send(fd, HPL__MSG_COUNTERS, 7, &r.base);
  Hplpb__CountersRep *rep = (Hplpb__CountersRep *)th_wire_wait(fd, HPL__MSG_COUNTERS_REP, 7);
  uint64_t v = UINT64_MAX;
  for (size_t i = 0; i < rep->n_counters; i++)
    if (!strcmp(rep->counters[i]->name, name)) v = rep->counters[i]->value;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  close(fd);
  if (v == UINT64_MAX) fail_msg("the directory has no counter %s", name);
  return v;
}

uint64_t th_dir_counter(hpl__lc *lc, const char *name) { return dir_counter(lc, name, 0); }

uint64_t th_dir_counter_try(hpl__lc *lc, const char *name) { return dir_counter(lc, name, 1); }

int th_data_port(hpl__lc *lc, int node) {
  char path[512];
  snprintf(path, sizeof path, "%s/node-%d.ready", hpl__lc_work_dir(lc), node);
  FILE *f = fopen(path, "r");
  int port = -1;
  if (f) {
    if (fscanf(f, "%d", &port) != 1) port = -1;
    fclose(f);
  }
  assert_true(port > 0);
  return port;
}

pid_t th_spawn_store(const char *dir_addr, const char *sock, const char *ready,
                     const char *secret, const char *log, const char *extra) {
  char exe[512];
  const char *bin = getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR;
  snprintf(exe, sizeof exe, "%s/hoplite-store", bin);
  pid_t pid = fork();
  if (pid == 0) {
    int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(lfd, 2);
    execl(exe, exe, "--directory", dir_addr, "--socket", sock, "--memory", "64M", "--ready-file",
          ready, "--auth-file", secret, extra, (char *)NULL);
    _exit(127);
  }
  assert_true(pid > 0);
  return pid;
}

int th_add_store(hpl__lc *lc, const char *memory, const char *args) {
  char err[512], full[512];
  snprintf(full, sizeof full, "--memory %s %s", memory, args ? args : "");
  int i = hpl__lc_add_store(lc, full, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

static void fill_u32(uint32_t *b, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) b[i] = (uint32_t)(i * 2654435761u) ^ (seed * 40503u + 7);
}

void th_put_sum(hpl_client *c, const char *id, uint64_t size, uint32_t seed, uint32_t *ref,
                int64_t timeout_ms) {
  size_t n = (size_t)(size / 4);
  uint32_t *b = malloc(size);
  assert_non_null(b);
  fill_u32(b, n, seed);
  for (size_t i = 0; i < n; i++) ref[i] += b[i];
  int rc = hpl_put(c, id, b, size, timeout_ms);
  if (rc) fail_msg("put %s: %s", id, hpl_strerror(rc));
  free(b);
}

int th_wire_local(hpl__lc *lc, int node) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", hpl__lc_socket(lc, node));
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  protobuf_c_message_free_unpacked(th_wire_wait(fd, HPL__MSG_HELLO, 0), NULL);
  return fd;
}
