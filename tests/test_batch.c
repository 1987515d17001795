/* test_batch.c - many requests in flight on one connection, the small put
 * in one request, paged listing.
 *
 * Two parts:
 *  - against a fake store (a thread on a Unix socket that sends a HELLO
 *    and then follows a script): the library really pipelines (the fake
 *    reads every request of a batch before it answers any), a small put is
 *    one PUT frame carrying the bytes, per-request outcomes, and paging
 *    against a directory that pages and one that ignores paging;
 *  - against real processes: pipelining measured in time, one missing id
 *    among many, PUT on the wire, a client leaving mid-PUT, paging with
 *    prefixes and deletes between pages, the CLI's --json read by Python.
 *
 * The fake never calls cmocka (its failures would longjmp across threads):
 * it records what went wrong in `bad` and the test asserts after joining. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"
#include "wirepeer.h"

#define MB (1ull << 20)
#define FAKE_POOL (1u << 20)
#define FAKE_INLINE 65536

/* ------------------------------------------------------------------ the fake store */

typedef struct fake fake;
struct fake {
  wp_peer w; /* the accepted client's connection, what went wrong */
  char dir[64], path[128];
  int lfd, memfd;
  int chan; /* our end of the chunk channel (the pool is one chunk: memfd) */
  uint8_t *pool;
  pthread_t th;
  void (*script)(fake *);
  int n;                     /* the script's parameter: requests in a batch */
  char idbuf[64][16];        /* their ids: "o0", "o1", ... */
  const char *ids[64];
  uint32_t limits[8];        /* LIST: the limits asked */
  char afters[8][64];        /* LIST: the cursors asked */
  int nlists;
};

static void fk_send(fake *f, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  wp_send(&f->w, type, req, m, NULL, 0, 0);
}

static void fk_reply(fake *f, uint64_t req, int status, const char *detail) {
  Hplpb__Reply r = HPLPB__REPLY__INIT;
  r.status = status;
  r.detail = (char *)(detail ? detail : "");
  fk_send(f, HPL__MSG_REPLY, req, &r.base);
}

/* Send `fd` with `msg` (len bytes) on socket `sock`. */
static int fk_sendfd(int sock, const void *msg, size_t len, int fd) {
  struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                      .msg_controllen = sizeof cbuf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* HELLO with the client's end of the chunk channel; the pool (one chunk,
 * generation 1) is on the channel already, before any GET reply names it. */
static void fk_hello(fake *f) {
  Hplpb__Hello h = HPLPB__HELLO__INIT;
  h.pool_size = FAKE_POOL;
  h.node_id = 1;
  h.inline_max = FAKE_INLINE; /* no filter, no directory: every get goes to the "store" */
  h.pool_chunk = FAKE_POOL;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    wp_bad(&f->w, "socketpair: %s", strerror(errno));
    return;
  }
  f->chan = pair[0];
  /* queued before the client has its end (it may close at once) */
  uint32_t chunk[3] = {1, 0, 1}; /* one chunk: chunk 0, generation 1 */
  if (fk_sendfd(f->chan, chunk, sizeof chunk, f->memfd) != 0)
    wp_bad(&f->w, "cannot send the pool on the chunk channel");
  size_t len;
  uint8_t *b = hpl__msg_frame(HPL__MSG_HELLO, 0, &h.base, 0, &len);
  if (fk_sendfd(f->w.fd, b, len, pair[1]) != 0) wp_bad(&f->w, "cannot send HELLO");
  close(pair[1]);
  free(b);
}

static void *fk_main(void *arg) {
  fake *f = arg;
  f->w.fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
  if (f->w.fd < 0) {
    wp_bad(&f->w, "accept: %s", strerror(errno));
    return NULL;
  }
  struct timeval tv = {.tv_sec = 5}; /* a script waiting for what never comes ends */
  setsockopt(f->w.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  fk_hello(f);
  f->script(f);
  return NULL;
}

static hpl_client *fk_start(fake *f, void (*script)(fake *), int n) {
  memset(f, 0, sizeof *f);
  f->script = script;
  f->n = n;
  f->chan = -1;
  for (int i = 0; i < 64; i++) {
    snprintf(f->idbuf[i], sizeof f->idbuf[i], "o%d", i);
    f->ids[i] = f->idbuf[i];
  }
  snprintf(f->dir, sizeof f->dir, "/tmp/hpl-fake-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  snprintf(f->path, sizeof f->path, "%s/s", f->dir);
  f->memfd = memfd_create("fake-pool", MFD_CLOEXEC);
  assert_true(f->memfd >= 0);
  assert_int_equal(ftruncate(f->memfd, FAKE_POOL), 0);
  f->pool = mmap(NULL, FAKE_POOL, PROT_READ | PROT_WRITE, MAP_SHARED, f->memfd, 0);
  assert_true(f->pool != MAP_FAILED);
  f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", f->path);
  assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(f->lfd, 4), 0);
  assert_int_equal(pthread_create(&f->th, NULL, fk_main, f), 0);
  hpl_client *c;
  assert_int_equal(hpl_connect(f->path, 5000, &c), 0);
  return c;
}

/* Close the client, join the fake, check it had no complaint. */
static void fk_finish(fake *f, hpl_client *c) {
  hpl_close(c);
  pthread_join(f->th, NULL);
  if (f->w.fd >= 0) close(f->w.fd);
  close(f->lfd);
  munmap(f->pool, FAKE_POOL);
  close(f->memfd);
  if (f->chan >= 0) close(f->chan);
  unlink(f->path);
  rmdir(f->dir);
  if (f->w.bad[0]) fail_msg("fake store: %s", f->w.bad);
}

/* ------------------------------------------------------------------ fake: pipelining */

/* Read all n requests of a batch before answering any (a client that waits
 * for each answer before it sends the next never gets here: the fake's
 * read times out), then answer them in reverse order; request k (by
 * arrival) is about id "o<k>" and the answer says k. */
static void script_batch(fake *f) {
  wp_frame *r = calloc((size_t)f->n, sizeof *r);
  int got = 0;
  for (; got < f->n; got++)
    if (wp_read(&f->w, &r[got]) != 0) break;
  if (got < f->n) wp_bad(&f->w, "only %d of %d requests arrived before any answer", got, f->n);
  for (int k = got - 1; k >= 0; k--) {
    uint64_t req = r[k].h.req_id;
    switch (r[k].h.type) {
      case HPL__MSG_STAT: {
        const char *id = ((Hplpb__IdReq *)r[k].m)->id;
        if (strcmp(id, "missing") == 0) {
          fk_reply(f, req, HPL_ENOTFOUND, "no object 'missing'");
          break;
        }
        Hplpb__StatRep s = HPLPB__STAT_REP__INIT;
        s.size = (uint64_t)atoi(id + 1);
        fk_send(f, HPL__MSG_STAT_REP, req, &s.base);
        break;
      }
      case HPL__MSG_GET: { /* object k: 16 bytes of k at 64 * k in the pool */
        int i = atoi(((Hplpb__GetReq *)r[k].m)->id + 1);
        memset(f->pool + 64 * i, i, 16);
        Hplpb__GetRep g = HPLPB__GET_REP__INIT;
        g.offset = 64 * (uint64_t)i;
        g.size = 16;
        g.handle = 1000 + (uint64_t)i;
        uint32_t gen = 1;
        g.chunk_gen = &gen;
        g.n_chunk_gen = 1;
        fk_send(f, HPL__MSG_GET_REP, req, &g.base);
        break;
      }
      case HPL__MSG_PUT: { /* the bytes must be the id's number, size times */
        Hplpb__PutReq *p = (Hplpb__PutReq *)r[k].m;
        int i = atoi(p->id + 1), ok = r[k].h.payload_len == p->size;
        for (uint64_t b = 0; ok && b < p->size; b++) ok = r[k].payload[b] == (uint8_t)i;
        if (!ok) wp_bad(&f->w, "PUT %s came with the wrong bytes", p->id);
        fk_reply(f, req, 0, NULL);
        break;
      }
      case HPL__MSG_DELETE: fk_reply(f, req, 0, NULL); break;
      default: wp_bad(&f->w, "unexpected %s", hpl__msg_name(r[k].h.type));
    }
  }
  for (int k = 0; k < got; k++) wp_free(&r[k]);
  free(r);
}

/* The gets' holds come back one-way once released. */
static void script_batch_gets(fake *f) {
  script_batch(f);
  for (int k = 0; k < f->n; k++) {
    wp_frame rel;
    if (wp_expect(&f->w, HPL__MSG_RELEASE, &rel) != 0) break;
    wp_free(&rel);
  }
}

static void test_fake_stat_many_pipelined(void **state) {
  (void)state;
  fake f;
  enum { N = 64 };
  hpl_client *c = fk_start(&f, script_batch, N);
  const char *const *p = f.ids;
  uint64_t sizes[N];
  int rcs[N];
  assert_int_equal(hpl_stat_many(c, p, N, 5000, sizes, rcs), 0);
  for (int i = 0; i < N; i++) {
    assert_int_equal(rcs[i], 0);
    assert_int_equal(sizes[i], (uint64_t)i); /* answers matched by request id, not order */
  }
  fk_finish(&f, c);
}

static void test_fake_get_many_pipelined(void **state) {
  (void)state;
  fake f;
  enum { N = 40 };
  hpl_client *c = fk_start(&f, script_batch_gets, N);
  const char *const *p = f.ids;
  hpl_buf *bufs[N];
  int rcs[N];
  assert_int_equal(hpl_get_many(c, p, N, 5000, bufs, rcs), 0);
  for (int i = 0; i < N; i++) {
    assert_int_equal(rcs[i], 0);
    assert_int_equal(hpl_buf_size(bufs[i]), 16);
    assert_string_equal(hpl_buf_id(bufs[i]), p[i]);
    assert_int_equal(((uint8_t *)hpl_buf_data(bufs[i]))[15], i);
    hpl_release(c, bufs[i]);
  }
  fk_finish(&f, c);
}

static void test_fake_put_many_pipelined(void **state) {
  (void)state;
  fake f;
  enum { N = 30 };
  hpl_client *c = fk_start(&f, script_batch, N);
  const char *const *p = f.ids;
  static uint8_t data[N][3000];
  const void *d[N];
  uint64_t sizes[N];
  int rcs[N];
  for (int i = 0; i < N; i++) {
    sizes[i] = (uint64_t)i * 100;
    memset(data[i], i, sizeof data[i]);
    d[i] = data[i];
  }
  assert_int_equal(hpl_put_many(c, p, d, sizes, N, 5000, rcs), 0);
  for (int i = 0; i < N; i++) assert_int_equal(rcs[i], 0);
  fk_finish(&f, c);
}

/* One failure among many: its code in rcs[] and as the result, the
 * detail naming it; the others succeed. */
static void test_fake_one_failure(void **state) {
  (void)state;
  fake f;
  hpl_client *c = fk_start(&f, script_batch, 5);
  const char *p[5] = {"o0", "o1", "missing", "o3", "o4"};
  uint64_t sizes[5] = {9, 9, 9, 9, 9};
  int rcs[5];
  assert_int_equal(hpl_stat_many(c, p, 5, 5000, sizes, rcs), HPL_ENOTFOUND);
  assert_int_equal(rcs[2], HPL_ENOTFOUND);
  assert_int_equal(sizes[2], 9); /* not written */
  for (int i = 0; i < 5; i++)
    if (i != 2) assert_int_equal(rcs[i], 0);
  assert_int_equal(sizes[4], 4);
  assert_non_null(strstr(hpl_errdetail(c), "'missing' (3 of 5)"));
  fk_finish(&f, c);
}

/* Arguments refused before anything is sent. */
static void script_nothing(fake *f) {
  wp_frame r;
  if (wp_read(&f->w, &r) == 0) {
    wp_bad(&f->w, "a request (%s) arrived", hpl__msg_name(r.h.type));
    wp_free(&r);
  }
}

static void test_fake_batch_arguments(void **state) {
  (void)state;
  fake f;
  hpl_client *c = fk_start(&f, script_nothing, 0);
  const char *p[2] = {"bad\nid", ""};
  int rcs[2];
  assert_int_equal(hpl_delete_many(c, p, 2, 1000, rcs), HPL_EINVAL);
  assert_int_equal(rcs[0], HPL_EINVAL);
  assert_int_equal(rcs[1], HPL_EINVAL);
  assert_int_equal(hpl_delete_many(c, p, 4097, 1000, rcs), HPL_EINVAL);
  assert_int_equal(hpl_delete_many(c, NULL, 2, 1000, rcs), HPL_EINVAL);
  assert_int_equal(hpl_delete_many(c, p, 0, 1000, NULL), 0);
  fk_finish(&f, c);
}

/* ------------------------------------------------------------------ fake: small put */

/* A small put is one PUT carrying the bytes; a large one CREATE, then SEAL. */
static void script_puts(fake *f) {
  wp_frame r;
  if (wp_expect(&f->w, HPL__MSG_PUT, &r) != 0) return;
  Hplpb__PutReq *p = (Hplpb__PutReq *)r.m;
  if (strcmp(p->id, "small") || p->size != 1000 || r.h.payload_len != 1000 ||
      r.payload[999] != 0x5a || p->timeout_ms != 4000)
    wp_bad(&f->w, "the PUT is not the object");
  fk_reply(f, r.h.req_id, 0, NULL);
  wp_free(&r);
  /* an object of exactly the inline limit still fits one PUT */
  if (wp_expect(&f->w, HPL__MSG_PUT, &r) != 0) return;
  if (r.h.payload_len != FAKE_INLINE)
    wp_bad(&f->w, "PUT of %llu bytes", (unsigned long long)r.h.payload_len);
  fk_reply(f, r.h.req_id, HPL_EEXIST, "object 'edge' already exists");
  wp_free(&r);
  if (wp_expect(&f->w, HPL__MSG_CREATE, &r) != 0) return;
  if (((Hplpb__CreateReq *)r.m)->size != FAKE_INLINE + 1) wp_bad(&f->w, "CREATE of the wrong size");
  /* the client keeps the bytes in its own memory and names where (the
   * store copies them from there); this fake shares the process */
  const uint8_t *src = (const uint8_t *)(uintptr_t)((Hplpb__CreateReq *)r.m)->src_addr;
  Hplpb__CreateRep cr = HPLPB__CREATE_REP__INIT;
  cr.offset = 4096;
  cr.handle = 77;
  fk_send(f, HPL__MSG_CREATE_REP, r.h.req_id, &cr.base);
  wp_free(&r);
  if (wp_expect(&f->w, HPL__MSG_SEAL, &r) != 0) return;
  if (((Hplpb__HandleReq *)r.m)->handle != 77 || !src || src[FAKE_INLINE] != 0x5a)
    wp_bad(&f->w, "SEAL of the wrong handle, or the bytes are not where the CREATE said");
  fk_reply(f, r.h.req_id, 0, NULL);
  wp_free(&r);
}

static void test_fake_small_put_is_one_request(void **state) {
  (void)state;
  fake f;
  hpl_client *c = fk_start(&f, script_puts, 0);
  static uint8_t data[FAKE_INLINE + 1];
  memset(data, 0x5a, sizeof data);
  assert_int_equal(hpl_put(c, "small", data, 1000, 4000), 0);
  assert_int_equal(hpl_put(c, "edge", data, FAKE_INLINE, 4000), HPL_EEXIST);
  assert_non_null(strstr(hpl_errdetail(c), "already exists"));
  assert_int_equal(hpl_put(c, "large", data, FAKE_INLINE + 1, 4000), 0);
  fk_finish(&f, c);
}

/* ------------------------------------------------------------------ fake: listing */

static void list_rep(fake *f, uint64_t req, const char *const *ids, int n, const char *next) {
  Hplpb__ListRep r = HPLPB__LIST_REP__INIT;
  Hplpb__ObjInfo infos[16], *ps[16];
  for (int i = 0; i < n; i++) {
    hplpb__obj_info__init(&infos[i]);
    infos[i].id = (char *)ids[i];
    infos[i].size = 10 + (uint64_t)i;
    infos[i].copies = 1;
    infos[i].complete = 1;
    ps[i] = &infos[i];
  }
  r.n_objects = (size_t)n;
  r.objects = ps;
  r.next = (char *)next;
  fk_send(f, HPL__MSG_LIST_REP, req, &r.base);
}

static int fk_list(fake *f, wp_frame *r) {
  if (wp_expect(&f->w, HPL__MSG_LIST, r) != 0) return -1;
  Hplpb__ListReq *l = (Hplpb__ListReq *)r->m;
  if (f->nlists < 8) {
    f->limits[f->nlists] = l->limit;
    snprintf(f->afters[f->nlists], sizeof f->afters[0], "%s", l->after);
    f->nlists++;
  }
  return 0;
}

/* A directory that pages: hpl_list follows the cursor to the end. Then an
 * old one that ignores after and limit and sends everything unsorted with
 * no cursor: the library cuts the page itself. Then a broken one whose
 * cursor does not move: the listing fails instead of looping. */
static void script_list(fake *f) {
  static const char *p1[] = {"a", "b"}, *p2[] = {"c"}, *all[] = {"d", "b", "a", "c", "e"};
  wp_frame r;
  if (fk_list(f, &r) != 0) return;
  list_rep(f, r.h.req_id, p1, 2, "b");
  wp_free(&r);
  if (fk_list(f, &r) != 0) return;
  list_rep(f, r.h.req_id, p2, 1, "");
  wp_free(&r);
  for (int k = 0; k < 3; k++) { /* old directory: pages of 2 */
    if (fk_list(f, &r) != 0) return;
    list_rep(f, r.h.req_id, all, 5, "");
    wp_free(&r);
  }
  for (int k = 0; k < 2; k++) { /* broken: the cursor stays at "a" */
    if (fk_list(f, &r) != 0) return;
    list_rep(f, r.h.req_id, p1, 2, "a");
    wp_free(&r);
  }
}

static void test_fake_list_pages(void **state) {
  (void)state;
  fake f;
  hpl_client *c = fk_start(&f, script_list, 0);
  char *text, *next;
  assert_int_equal(hpl_list(c, "", 5000, &text), 0);
  assert_string_equal(text, "a\t10\t1\t1\t0\nb\t11\t1\t1\t0\nc\t10\t1\t1\t0\n");
  hpl_free(text);
  char *after = NULL;
  char got[64] = "";
  do {
    assert_int_equal(hpl_list_page(c, NULL, after, 2, 5000, &text, &next), 0);
    for (char *l = text; *l; l = strchr(l, '\n') + 1) strncat(got, l, 1);
    hpl_free(text);
    hpl_free(after);
    after = next;
  } while (after);
  assert_string_equal(got, "abcde");
  assert_int_equal(hpl_list(c, "", 5000, &text), HPL_EPROTO);
  assert_non_null(strstr(hpl_errdetail(c), "does not move"));
  fk_finish(&f, c);
  assert_int_equal(f.nlists, 7);
  assert_int_equal(f.limits[0], 0);
  assert_string_equal(f.afters[0], "");
  assert_string_equal(f.afters[1], "b");
  assert_int_equal(f.limits[2], 2);
  assert_string_equal(f.afters[3], "b");
  assert_string_equal(f.afters[4], "d");
}

/* ------------------------------------------------------------------ real cluster */

static hpl__lc *lc;
static hpl_client *A, *B;

static int setup(void **state) {
  (void)state;
  lc = th_group_start(2, 256 * MB, NULL, (hpl_client **[]){&A, &B}, 2);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  hpl_close(A);
  hpl_close(B);
  char err[256];
  int dead = hpl__lc_check(lc, err, sizeof err);
  th_stop(lc, dead);
  if (dead) fail_msg("a server died: %s", err);
  return 0;
}

/* N gets of objects that never come, with a timeout of T each: answered
 * together after about T, not after N x T. */
static void test_gets_wait_together(void **state) {
  (void)state;
  enum { N = 16 };
  char ids[N][32];
  const char *p[N];
  for (int i = 0; i < N; i++) {
    snprintf(ids[i], sizeof ids[i], "never/%d", i);
    p[i] = ids[i];
  }
  hpl_buf *bufs[N];
  int rcs[N];
  int64_t t = th_ms(400);
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(hpl_get_many(B, p, N, t, bufs, rcs), HPL_ETIMEDOUT);
  uint64_t took = hpl__now_ms() - t0;
  for (int i = 0; i < N; i++) assert_int_equal(rcs[i], HPL_ETIMEDOUT);
  assert_true(took >= (uint64_t)t - 5);
  assert_true(took < (uint64_t)(3 * t)); /* one after the other: N x t */
}

static void test_batch_one_missing(void **state) {
  (void)state;
  enum { N = 40 };
  char ids[N][32];
  const char *p[N];
  static uint8_t data[N][200000];
  const void *d[N];
  uint64_t sizes[N];
  int rcs[N];
  for (int i = 0; i < N; i++) {
    snprintf(ids[i], sizeof ids[i], "miss/%02d", i);
    p[i] = ids[i];
    sizes[i] = i % 10 == 9 ? 200000 : 100 + (uint64_t)i; /* some large: create + seal */
    memset(data[i], i, sizes[i]);
    d[i] = data[i];
  }
  uint64_t pub0 = th_dir_counter(lc, "dir_publishes");
  uint64_t conf0 = th_dir_counter(lc, "dir_publishes_confirmed");
  uint64_t ign0 = th_dir_counter(lc, "dir_publishes_ignored");
  /* everything but miss/17 */
  assert_int_equal(hpl_put_many(A, p, d, sizes, 17, th_ms(10000), rcs), 0);
  assert_int_equal(hpl_put_many(A, p + 18, d + 18, sizes + 18, N - 18, th_ms(10000), rcs), 0);
  /* the 35 small ones were each published once, ahead of their PUTs: taken,
   * and then confirmed by their store, unless the store's INLINE_PUT (on
   * another connection) reached the directory first, which makes the
   * publish one of an object that exists */
  uint64_t pub1 = th_dir_counter(lc, "dir_publishes");
  uint64_t ign1 = th_dir_counter(lc, "dir_publishes_ignored");
  assert_int_equal((pub1 - pub0) + (ign1 - ign0), 35);
  assert_int_equal(th_dir_counter(lc, "dir_publishes_confirmed") - conf0, pub1 - pub0);
  uint64_t got[N];
  assert_int_equal(hpl_stat_many(B, p, N, th_ms(5000), got, rcs), HPL_ENOTFOUND);
  for (int i = 0; i < N; i++) {
    assert_int_equal(rcs[i], i == 17 ? HPL_ENOTFOUND : 0);
    if (i != 17) assert_int_equal(got[i], sizes[i]);
  }
  assert_non_null(strstr(hpl_errdetail(B), "miss/17"));
  hpl_buf *bufs[N];
  assert_int_equal(hpl_get_many(B, p, N, th_ms(300), bufs, rcs), HPL_ETIMEDOUT);
  for (int i = 0; i < N; i++) {
    assert_int_equal(rcs[i], i == 17 ? HPL_ETIMEDOUT : 0);
    if (i == 17) continue;
    assert_int_equal(hpl_buf_size(bufs[i]), sizes[i]);
    assert_int_equal(((uint8_t *)hpl_buf_data(bufs[i]))[sizes[i] - 1], i);
    assert_int_equal((uintptr_t)hpl_buf_data(bufs[i]) % 64, 0);
    /* small ones straight from the directory, large ones pulled into B's pool */
    assert_int_equal(hpl_buf_shared(bufs[i]), sizes[i] > 65536);
    hpl_release(B, bufs[i]);
  }
  /* a second put of ids that exist, mixed with new ones */
  const char *again[3] = {"miss/03", "miss/new", "miss/09"};
  assert_int_equal(hpl_put_many(A, again, d, sizes, 3, th_ms(5000), rcs), HPL_EEXIST);
  assert_int_equal(rcs[0], HPL_EEXIST);
  assert_int_equal(rcs[1], 0);
  assert_int_equal(rcs[2], HPL_EEXIST);
  /* the others' publishes were ignored; the new one's was taken (and
   * confirmed) unless its store's INLINE_PUT came first, as above */
  uint64_t pub2 = th_dir_counter(lc, "dir_publishes") - pub1;
  assert_int_equal(pub2 + th_dir_counter(lc, "dir_publishes_ignored") - ign1, 3);
  assert_true(pub2 <= 1);
  assert_int_equal(th_dir_counter(lc, "dir_publishes_confirmed") - conf0, pub1 - pub0 + pub2);
  assert_int_equal(hpl_delete_many(A, p, N, th_ms(5000), rcs), HPL_ENOTFOUND);
  for (int i = 0; i < N; i++) assert_int_equal(rcs[i], i == 17 ? HPL_ENOTFOUND : 0);
  assert_int_equal(hpl_delete(A, "miss/new", th_ms(5000)), 0);
}

static void raw_put(int fd, uint64_t req, const char *id, uint64_t size, const void *payload,
                    uint64_t plen) {
  Hplpb__PutReq p = HPLPB__PUT_REQ__INIT;
  p.id = (char *)id;
  p.size = size;
  p.timeout_ms = th_ms(5000);
  size_t len;
  uint8_t *f = hpl__msg_frame(HPL__MSG_PUT, req, &p.base, plen, &len);
  f = realloc(f, len + plen);
  if (plen) memcpy(f + len, payload, plen);
  assert_int_equal(send(fd, f, len + plen, MSG_NOSIGNAL), (ssize_t)(len + plen));
  free(f);
}

/* PUT on the wire: one request, one Reply, and the object is complete and
 * inline at the directory. */
static void test_put_on_the_wire(void **state) {
  (void)state;
  uint64_t puts0 = th_counter(A, "puts"), inl0 = th_counter(A, "inline_puts");
  int fd = th_wire_local(lc, 0);
  uint8_t data[3000];
  memset(data, 7, sizeof data);
  raw_put(fd, 5, "wire/one", sizeof data, data, sizeof data);
  Hplpb__Reply *r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, 5);
  assert_int_equal(r->status, 0);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  raw_put(fd, 6, "wire/one", sizeof data, data, sizeof data); /* exists */
  r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, 6);
  assert_int_equal(r->status, HPL_EEXIST);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  raw_put(fd, 7, "wire/short", 100, data, 50); /* the bytes are not the object */
  r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, 7);
  assert_int_equal(r->status, HPL_EINVAL);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  raw_put(fd, 8, "wire/empty", 0, NULL, 0);
  r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, 8);
  assert_int_equal(r->status, 0);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  close(fd);
  assert_int_equal(th_counter(A, "puts"), puts0 + 2);
  assert_int_equal(th_counter(A, "inline_puts"), inl0 + 2);
  int inl = 0;
  uint32_t copies = 0, complete = 0;
  uint64_t size = 0;
  assert_int_equal(hpl_stat(B, "wire/one", th_ms(5000), &size, &copies, &complete, &inl), 0);
  assert_int_equal(size, sizeof data);
  assert_int_equal(inl, 1);
  assert_int_equal(complete, 1);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "wire/one", th_ms(5000), &b), 0);
  assert_memory_equal(hpl_buf_data(b), data, sizeof data);
  hpl_release(B, b);
  /* a payload on anything else, or beyond the inline limit, ends the connection */
  fd = th_wire_local(lc, 0);
  Hplpb__IdReq s = HPLPB__ID_REQ__INIT;
  s.id = "wire/one";
  size_t len;
  uint8_t *f = hpl__msg_frame(HPL__MSG_STAT, 9, &s.base, 4, &len);
  f = realloc(f, len + 4);
  memcpy(f + len, "abcd", 4);
  assert_int_equal(send(fd, f, len + 4, MSG_NOSIGNAL), (ssize_t)(len + 4));
  free(f);
  assert_true(th_wire_closed(fd, th_ms(3000)));
  close(fd);
  fd = th_wire_local(lc, 0);
  static uint8_t big[65537];
  raw_put(fd, 10, "wire/big", sizeof big, big, sizeof big);
  assert_true(th_wire_closed(fd, th_ms(3000)));
  close(fd);
  assert_int_equal(hpl_stat(B, "wire/big", th_ms(5000), NULL, NULL, NULL, NULL), HPL_ENOTFOUND);
  /* the library's own small put: the same counters move by one each */
  puts0 = th_counter(A, "puts");
  inl0 = th_counter(A, "inline_puts");
  assert_int_equal(hpl_put(A, "wire/lib", big, 65536, th_ms(5000)), 0);
  assert_int_equal(th_counter(A, "puts"), puts0 + 1);
  assert_int_equal(th_counter(A, "inline_puts"), inl0 + 1);
}

/* The client leaves while its PUT waits for the directory: the PUT came
 * whole, so it is carried out as if the client had stayed (the object is
 * complete on the store and inline at the directory, its bytes intact);
 * nothing is left half-done, and nothing dies. */
static void test_client_leaves_mid_put(void **state) {
  (void)state;
  uint64_t objs0 = th_counter(A, "objects");
  pid_t dir = hpl__lc_dir_pid(lc);
  int fd = th_wire_local(lc, 0);
  uint8_t data[500];
  memset(data, 3, sizeof data);
  assert_int_equal(kill(dir, SIGSTOP), 0); /* INLINE_PUT stays unanswered */
  raw_put(fd, 1, "leave/x", sizeof data, data, sizeof data);
  th_sleep_ms(100);
  close(fd);
  th_sleep_ms(100);
  assert_int_equal(kill(dir, SIGCONT), 0);
  uint64_t deadline = hpl__deadline_ms(th_ms(5000));
  uint32_t complete = 0;
  int inl = 0;
  while ((hpl_stat(A, "leave/x", th_ms(2000), NULL, NULL, &complete, &inl) != 0 || !complete) &&
         hpl__ms_left(deadline) > 0)
    th_sleep_ms(20);
  assert_int_equal(complete, 1);
  assert_int_equal(inl, 1);
  assert_int_equal(th_counter(A, "objects"), objs0 + 1);
  int local = 0;
  assert_int_equal(hpl_contains(A, "leave/x", th_ms(5000), &local), 0);
  assert_int_equal(local, 1);
  hpl_buf *b;
  assert_int_equal(hpl_get(B, "leave/x", th_ms(5000), &b), 0);
  assert_int_equal(hpl_buf_size(b), sizeof data);
  assert_memory_equal(hpl_buf_data(b), data, sizeof data);
  hpl_release(B, b);
  assert_int_equal(hpl_put(A, "leave/x", data, 100, th_ms(5000)), HPL_EEXIST);
  assert_int_equal(hpl_delete(A, "leave/x", th_ms(5000)), 0);
  deadline = hpl__deadline_ms(th_ms(5000));
  while (th_counter(A, "objects") != objs0 && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  assert_int_equal(th_counter(A, "objects"), objs0);
  /* a client that leaves while sealing a small object takes it along (as
   * before): the store keeps nothing of it */
  hpl_client *c = th_connect(lc, 0);
  hpl_buf *w;
  assert_int_equal(hpl_create(c, "leave/y", 10, th_ms(5000), &w), 0);
  assert_int_equal(th_counter(A, "objects"), objs0 + 1);
  hpl_close(c); /* never sealed */
  deadline = hpl__deadline_ms(th_ms(5000));
  while (th_counter(A, "objects") != objs0 && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  assert_int_equal(th_counter(A, "objects"), objs0);
  assert_int_equal(hpl_put(A, "leave/y", data, 10, th_ms(5000)), 0);
}

/* Page through `prefix` `max` at a time; `between` runs after the first
 * page. Returns the ids listed, one per line. */
static char *page_all(const char *prefix, size_t max, void (*between)(void), int *pages) {
  char *all = calloc(1, 1), *after = NULL;
  size_t len = 0;
  *pages = 0;
  do {
    char *text, *next;
    int rc = hpl_list_page(A, prefix, after, max, th_ms(5000), &text, &next);
    if (rc) fail_msg("list_page: %s (%s)", hpl_strerror(rc), hpl_errdetail(A));
    size_t lines = 0;
    for (char *l = text; *l; l = strchr(l, '\n') + 1, lines++) {
      size_t n = strcspn(l, "\t");
      all = realloc(all, len + n + 2);
      memcpy(all + len, l, n);
      len += n;
      all[len++] = '\n';
      all[len] = 0;
    }
    assert_true(max == 0 || lines <= max);
    hpl_free(text);
    hpl_free(after);
    after = next;
    if (++*pages == 1 && between) between();
  } while (after);
  return all;
}

static void delete_page2(void) { assert_int_equal(hpl_delete(A, "pg/a01", th_ms(5000)), 0); }

static void test_list_paging(void **state) {
  (void)state;
  static const char *ids[] = {"pg/a", "pg/a0", "pg/a00", "pg/a01", "pg/a1", "pg/ab",
                              "pg/b", "pg/b/", "pg/b/c", "pg/ba", "pg/\xc3\xbc"};
  enum { N = sizeof ids / sizeof ids[0] };
  uint64_t sizes[N];
  const void *d[N];
  int rcs[N];
  for (int i = 0; i < N; i++) {
    sizes[i] = 1;
    d[i] = "x";
  }
  assert_int_equal(hpl_put_many(A, ids, d, sizes, N, th_ms(5000), rcs), 0);
  th_put_pattern(A, "pg-outside", 10, 1);
  th_put_pattern(A, "pg/large", 100000, 1);
  char want[512] = "";
  for (int i = 0; i < 6; i++) strcat(strcat(want, ids[i]), "\n");
  strcat(want, "pg/b\npg/b/\npg/b/c\npg/ba\npg/large\npg/\xc3\xbc\n");
  int pages;
  for (size_t max = 0; max <= 5; max++) {
    char *got = page_all("pg/", max, NULL, &pages);
    assert_string_equal(got, want);
    /* a last page may come out empty when the one before was full */
    if (max) assert_true(pages >= (12 + (int)max - 1) / (int)max && pages <= 12 / (int)max + 1);
    free(got);
  }
  char *got = page_all("pg/a0", 1, NULL, &pages);
  assert_string_equal(got, "pg/a0\npg/a00\npg/a01\n");
  free(got);
  got = page_all("pg/", 3, delete_page2, &pages); /* pg/a01 would be on page 2 */
  assert_null(strstr(got, "pg/a01"));
  assert_non_null(strstr(got, "pg/a1\npg/ab\n"));
  free(got);
  char *text;
  assert_int_equal(hpl_list(A, "pg/", th_ms(5000), &text), 0);
  assert_int_equal(strncmp(text, "pg/a\t1\t1\t1\t1\n", 13), 0);
  hpl_free(text);
  char *next;
  assert_int_equal(hpl_list_page(A, "pg/\x01", NULL, 0, 1000, &text, &next), HPL_EINVAL);
}

/* The CLI's --json, read by Python: ids with quotes, backslashes and bytes
 * that are not UTF-8 come back byte for byte (surrogateescape). */
static void test_cli_json(void **state) {
  (void)state;
  static const char *ids[] = {"js/q\"uote", "js/back\\slash", "js/\xff\xfe raw",
                              "js/\xc3\xa9t\xc3\xa9"};
  const void *d[4] = {"1", "22", "333", "4444"};
  uint64_t sizes[4] = {1, 2, 3, 4};
  int rcs[4];
  assert_int_equal(hpl_put_many(A, ids, d, sizes, 4, th_ms(5000), rcs), 0);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s/hoplite -s %s ls js/ --json | /usr/bin/python3 -c '"
           "import sys, json\n"
           "want = {b\"js/q\\\"uote\": 1, b\"js/back\\\\slash\": 2, b\"js/\\xff\\xfe raw\": 3,"
           " b\"js/\\xc3\\xa9t\\xc3\\xa9\": 4}\n"
           "got = {}\n"
           "for line in sys.stdin.buffer:\n"
           "    o = json.loads(line)\n"
           "    assert set(o) == {\"id\", \"size\", \"copies\", \"complete\", \"inline\"}, o\n"
           "    assert o[\"inline\"] is True and o[\"copies\"] == 1 and o[\"complete\"] == 1, o\n"
           "    got[o[\"id\"].encode(\"utf-8\", \"surrogateescape\")] = o[\"size\"]\n"
           "assert got == want, got\n"
           "'",
           HPL_BIN_DIR, hpl__lc_socket(lc, 0));
  int st = system(cmd);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  snprintf(cmd, sizeof cmd,
           "%s/hoplite -s %s stat 'js/back\\slash' --json | /usr/bin/python3 -c '"
           "import sys, json\n"
           "o = json.loads(sys.stdin.read())\n"
           "assert o == {\"id\": \"js/back\\\\slash\", \"size\": 2, \"copies\": 1, \"complete\": 1,"
           " \"inline\": True, \"local\": True}, o\n"
           "'",
           HPL_BIN_DIR, hpl__lc_socket(lc, 0));
  st = system(cmd);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const struct CMUnitTest fake_tests[] = {
      cmocka_unit_test(test_fake_stat_many_pipelined),
      cmocka_unit_test(test_fake_get_many_pipelined),
      cmocka_unit_test(test_fake_put_many_pipelined),
      cmocka_unit_test(test_fake_one_failure),
      cmocka_unit_test(test_fake_batch_arguments),
      cmocka_unit_test(test_fake_small_put_is_one_request),
      cmocka_unit_test(test_fake_list_pages),
  };
  const struct CMUnitTest cluster_tests[] = {
      cmocka_unit_test(test_gets_wait_together),
      cmocka_unit_test(test_batch_one_missing),
      cmocka_unit_test(test_put_on_the_wire),
      cmocka_unit_test(test_client_leaves_mid_put),
      cmocka_unit_test(test_list_paging),
      cmocka_unit_test(test_cli_json),
  };
  int failed = cmocka_run_group_tests_name("fake store", fake_tests, NULL, NULL);
  failed += cmocka_run_group_tests_name("cluster", cluster_tests, setup, teardown);
  return failed;
}
