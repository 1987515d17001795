/* test_bounds.c - what a peer that is let in can take of a server (issue
 * 41): a client that sends requests and never reads its replies gets its
 * requests paused and is then cut, the server's memory stays within its
 * bounds, and other clients are served meanwhile. Real servers on
 * loopback. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "harness.h"
#include "proto.h"
#include "util.h"

#define MB (1ull << 20)

/* Resident memory of process `pid` in bytes (0 if unreadable). */
static uint64_t rss_of(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  uint64_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %llu kB", (unsigned long long *)&kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}

/* A peer that writes the same frame again and again and never reads, until
 * its write fails (the server closed the connection) or `ms` pass. */
typedef struct flood {
  int fd;
  uint8_t *frame; /* one whole frame, for a connection without a session */
  size_t len;
  const ProtobufCMessage *m; /* else made anew each time (tagged: no replays) */
  unsigned type;
  int64_t ms;
  int cut;           /* out: a write failed: the server closed it */
  uint64_t sent;     /* out: frames written */
  int64_t cut_after; /* out: ms from the start to the failed write */
} flood;

static void *flood_run(void *arg) {
  flood *f = arg;
  int64_t t0 = (int64_t)hpl__now_ms();
  while ((int64_t)hpl__now_ms() - t0 < f->ms) {
    if (f->m) {
      free(f->frame);
      f->frame = th_wire_frame(f->fd, f->type, f->sent + 1, f->m, NULL, 0, &f->len);
      if (!f->frame) break;
    }
    ssize_t n = send(f->fd, f->frame, f->len, MSG_NOSIGNAL);
    if (n != (ssize_t)f->len) {
      f->cut = 1;
      f->cut_after = (int64_t)hpl__now_ms() - t0;
      break;
    }
    f->sent++;
  }
  return NULL;
}

/* While `f` floods: the largest growth of pid's RSS over `base`, and the
 * slowest of gets by `c` made every 100 ms (ms), of the objects named by
 * the format `idf` with 0, 1, 2, ... */
static void watch(flood *f, pthread_t th, pid_t pid, uint64_t base, hpl_client *c,
                  const char *idf, uint64_t *grew, int64_t *slowest) {
  char id[256];
  int k = 0;
  *grew = 0;
  *slowest = 0;
  for (int64_t t0 = (int64_t)hpl__now_ms(); (int64_t)hpl__now_ms() - t0 < f->ms + 500;) {
    uint64_t r = rss_of(pid);
    if (r > base && r - base > *grew) *grew = r - base;
    if (c) {
      int64_t g0 = (int64_t)hpl__now_ms();
      hpl_buf *b = NULL;
      snprintf(id, sizeof id, idf, k++);
      assert_int_equal(hpl_get(c, id, th_ms(5000), &b), 0);
      hpl_release(c, b);
      int64_t took = (int64_t)hpl__now_ms() - g0;
      if (took > *slowest) *slowest = took;
    }
    if (f->cut) break;
    th_sleep_ms(100);
  }
  pthread_join(th, NULL);
}

/* 300 small objects "bounds/list/<200 digits>": long ids, large LIST
 * replies. */
static void put_list_objects(hpl_client *A) {
  char id[256];
  for (int i = 0; i < 300; i++) {
    snprintf(id, sizeof id, "bounds/list/%0200d", i);
    th_put_pattern(A, id, 100, (uint64_t)i);
  }
}

/* The reader key (every local client has it) over TCP: PEEKs of a 60 KiB
 * inline object, never reading a reply. Before the bound the directory
 * grew by gigabytes; now it stops reading the peer at --max-output, cuts
 * it after --max-output-stall-ms, and another node's gets go on. */
static void test_dir_reader_never_reads(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, "--max-output 4M --max-output-stall-ms 2000", NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  th_put_pattern(A, "bounds/inline", 60 * 1024, 7);
  hpl_buf *b = NULL;
  assert_int_equal(hpl_get(B, "bounds/inline", th_ms(5000), &b), 0); /* B's store holds it too */
  hpl_release(B, b);
  char id[64];
  for (int i = 0; i < 150; i++) { /* one for each get of the watch */
    snprintf(id, sizeof id, "bounds/other/%d", i);
    th_put_pattern(A, id, 1000, (uint64_t)i);
  }
  int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_READER);
  Hplpb__PeekReq pk = HPLPB__PEEK_REQ__INIT;
  pk.id = "bounds/inline";
  flood f = {.fd = fd, .ms = th_ms(8000), .m = &pk.base, .type = HPL__MSG_PEEK};
  pid_t dir = hpl__lc_dir_pid(lc);
  uint64_t base = rss_of(dir), grew;
  int64_t slowest;
  uint64_t cut0 = th_dir_counter(lc, "dir_out_cut");
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, flood_run, &f), 0);
  /* B's store asks the directory for small objects it does not hold */
  watch(&f, th, dir, base, B, "bounds/other/%d", &grew, &slowest);
  print_message("directory RSS +%llu MiB, %llu PEEKs sent, cut %d after %lld ms, slowest get "
                "%lld ms\n",
                (unsigned long long)(grew >> 20), (unsigned long long)f.sent, f.cut,
                (long long)f.cut_after, (long long)slowest);
  assert_true(f.cut);
  assert_true(grew < 64 * MB);
  assert_true(slowest < th_ms(200)); /* the issue asks 50 ms: printed; slack for a loaded CI */
  assert_true(th_dir_counter(lc, "dir_out_cut") >= cut0 + 1);
  assert_true(th_dir_counter(lc, "dir_out_paused") >= 1);
  free(f.frame);
  close(fd);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* Two such readers, each within its own bound but over the directory's
 * total together: the largest queue's connection is shed (before either
 * one's stall deadline), and the directory's memory stays bounded. */
static void test_dir_total_sheds_largest(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB,
                           "--max-output 6M --max-output-total 8M --max-output-stall-ms 60000",
                           NULL);
  hpl_client *A = th_connect(lc, 0);
  th_put_pattern(A, "bounds/inline", 60 * 1024, 7);
  Hplpb__PeekReq pk = HPLPB__PEEK_REQ__INIT;
  pk.id = "bounds/inline";
  flood f[2];
  pthread_t th[2];
  uint64_t shed0 = th_dir_counter(lc, "dir_out_shed");
  pid_t dir = hpl__lc_dir_pid(lc);
  uint64_t base = rss_of(dir), grew = 0;
  for (int i = 0; i < 2; i++) {
    int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_READER);
    /* until one is cut: the kernel's socket buffers take several MiB of
     * each before the directory queues any, slowly on a loaded machine */
    f[i] = (flood){.fd = fd, .ms = th_ms(30000), .m = &pk.base, .type = HPL__MSG_PEEK};
    assert_int_equal(pthread_create(&th[i], NULL, flood_run, &f[i]), 0);
  }
  for (int64_t t0 = (int64_t)hpl__now_ms(); (int64_t)hpl__now_ms() - t0 < th_ms(30000);) {
    uint64_t r = rss_of(dir);
    if (r > base && r - base > grew) grew = r - base;
    if (f[0].cut || f[1].cut) break;
    th_sleep_ms(100);
  }
  uint64_t shed = th_dir_counter(lc, "dir_out_shed") - shed0;
  for (int i = 0; i < 2; i++) shutdown(f[i].fd, SHUT_RDWR); /* ends the other flood */
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    free(f[i].frame);
    close(f[i].fd);
  }
  print_message("directory RSS +%llu MiB, shed %llu\n", (unsigned long long)(grew >> 20),
                (unsigned long long)shed);
  assert_true(shed >= 1);
  assert_true(grew < 64 * MB);
  hpl_close(A);
  th_stop(lc, 0);
}

/* A local client that sends LISTs and never reads: its store pauses and
 * then cuts it; the store's memory stays bounded and another client's gets
 * go on. */
static void test_store_client_never_reads(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, NULL, "--max-output 4M --max-output-stall-ms 2000");
  hpl_client *A = th_connect(lc, 0);
  put_list_objects(A);
  int fd = th_wire_local(lc, 0);
  Hplpb__ListReq lr = HPLPB__LIST_REQ__INIT;
  lr.prefix = "bounds/list/";
  lr.timeout_ms = th_ms(10000);
  flood f = {.fd = fd, .ms = th_ms(8000)};
  f.frame = hpl__msg_frame(HPL__MSG_LIST, 1, &lr.base, 0, &f.len);
  assert_non_null(f.frame);
  pid_t st = hpl__lc_store_pid(lc, 0);
  uint64_t base = rss_of(st), grew;
  int64_t slowest;
  uint64_t cut0 = th_counter(A, "out_cut");
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, flood_run, &f), 0);
  watch(&f, th, st, base, A, "bounds/list/%0200d", &grew, &slowest);
  print_message("store RSS +%llu MiB, %llu LISTs sent, cut %d after %lld ms, slowest get %lld ms\n",
                (unsigned long long)(grew >> 20), (unsigned long long)f.sent, f.cut,
                (long long)f.cut_after, (long long)slowest);
  assert_true(f.cut);
  assert_true(grew < 64 * MB);
  assert_true(slowest < th_ms(200)); /* the issue asks 50 ms: printed; slack for a loaded CI */
  assert_true(th_counter(A, "out_cut") >= cut0 + 1);
  free(f.frame);
  close(fd);
  hpl_close(A);
  th_stop(lc, 0);
}

/* The same client, but one that reads late (after 1 s, within the stall
 * window): its requests wait while its replies are over the bound, go on
 * as it reads, and every one is answered; nobody is cut. */
typedef struct writer {
  int fd, n;
  uint8_t *frame;
  size_t len;
  int failed;
} writer;

static void *writer_run(void *arg) {
  writer *w = arg;
  for (int i = 0; i < w->n && !w->failed; i++)
    w->failed = send(w->fd, w->frame, w->len, MSG_NOSIGNAL) != (ssize_t)w->len;
  return NULL;
}

static void test_store_late_reader_served(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, NULL, "--max-output 4M --max-output-stall-ms 3000");
  hpl_client *A = th_connect(lc, 0);
  put_list_objects(A);
  int fd = th_wire_local(lc, 0);
  Hplpb__ListReq lr = HPLPB__LIST_REQ__INIT;
  lr.prefix = "bounds/list/";
  lr.timeout_ms = th_ms(10000);
  writer w = {.fd = fd, .n = 1500}; /* ~90 MB of replies: over 20 x the bound */
  w.frame = hpl__msg_frame(HPL__MSG_LIST, 1, &lr.base, 0, &w.len);
  uint64_t cut0 = th_counter(A, "out_cut"), paused0 = th_counter(A, "out_paused");
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, writer_run, &w), 0);
  th_sleep_ms(1000);
  int got = 0;
  for (; got < w.n; got++) {
    hpl__frame_hdr h;
    uint8_t *msg = NULL;
    if (th_wire_read_raw(fd, &h, &msg, th_ms(10000)) != 0) break;
    if (h.type != hpl__msg_reply_type(HPL__MSG_LIST)) {
      Hplpb__Reply *e = (Hplpb__Reply *)hpl__msg_unpack(h.type, msg, h.msg_len);
      print_message("reply %d: type %u status %d %s\n", got, h.type, e ? e->status : 0,
                    e ? e->detail : "?");
    }
    Hplpb__ListRep *r = (Hplpb__ListRep *)hpl__msg_unpack(h.type, msg, h.msg_len);
    free(msg);
    assert_non_null(r);
    assert_int_equal(h.type, hpl__msg_reply_type(HPL__MSG_LIST));
    assert_int_equal(r->status, 0);
    assert_int_equal(r->n_objects, 300);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  }
  print_message("%d of %d LIST replies read, cut %llu, paused %llu\n", got, w.n,
                (unsigned long long)(th_counter(A, "out_cut") - cut0),
                (unsigned long long)(th_counter(A, "out_paused") - paused0));
  pthread_join(th, NULL);
  assert_false(w.failed);
  assert_int_equal(got, w.n);
  assert_true(th_counter(A, "out_paused") >= paused0 + 1);
  assert_int_equal(th_counter(A, "out_cut"), cut0);
  free(w.frame);
  close(fd);
  hpl_close(A);
  th_stop(lc, 0);
}

/* Open n TCP connections to 127.0.0.1:port that never say a word (fds
 * into fds[]); returns how many opened. */
static int open_idle(int port, int *fds, int n) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int k = 0;
  for (; k < n; k++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
      close(fd);
      break;
    }
    fds[k] = fd;
  }
  return k;
}

/* Strangers holding thousands of idle connections (no handshake) to the
 * directory and to a data port: before, they took the 4096 connection
 * slots and legitimate handshakes were reset. Now they only take handshake
 * slots of their own (the oldest go), and stores, clients and transfers
 * carry on. */
static void test_idle_strangers(void **state) {
  (void)state;
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = rl.rlim_max; /* the servers started below inherit it */
  setrlimit(RLIMIT_NOFILE, &rl);
  int n = 8000;
  if (rl.rlim_cur < 2 * (rlim_t)n + 1000) n = (int)(rl.rlim_cur - 1000) / 2;
  assert_true(n > 4096 / 2);
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  int *fds = calloc((size_t)(2 * n), sizeof *fds);
  assert_non_null(fds);
  int k1 = open_idle(hpl__lc_dir_port(lc), fds, n);
  int k2 = open_idle(th_data_port(lc, 0), fds + k1, n);
  print_message("%d idle connections to the directory, %d to store 0's data port\n", k1, k2);
  assert_true(k1 > 4096 / 2 && k2 > 4096 / 2);
  /* 10 of 10 legitimate handshakes, to the directory and to the data port */
  for (int i = 0; i < 10; i++) {
    int fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
    assert_int_equal(th_wire_handshake(fd, hpl__lc_secret(lc), HPL__ROLE_NODE), 0);
    close(fd);
    fd = th_wire_connect(th_data_port(lc, 0), NULL, 0);
    assert_int_equal(th_wire_handshake(fd, hpl__lc_secret(lc), HPL__ROLE_DATA), 0);
    close(fd);
  }
  /* puts and gets across the stores: the directory and the data port serve */
  char id[64];
  for (int i = 0; i < 4; i++) {
    snprintf(id, sizeof id, "bounds/strangers/%d", i);
    th_put_pattern(A, id, 2 * MB, (uint64_t)i);
    hpl_buf *b = NULL;
    assert_int_equal(hpl_get(B, id, th_ms(10000), &b), 0);
    assert_int_equal(hpl_buf_size(b), 2 * MB);
    hpl_release(B, b);
  }
  uint64_t ev = th_dir_counter(lc, "dir_handshakes_evicted");
  uint64_t sev = th_counter(A, "handshakes_evicted");
  print_message("evicted in the handshake: directory %llu, data port %llu\n",
                (unsigned long long)ev, (unsigned long long)sev);
  assert_true(ev >= 1 && sev >= 1);
  for (int i = 0; i < k1 + k2; i++) close(fds[i]);
  free(fds);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* Idle connections to the metrics endpoint (no request, no token) do not
 * keep scrapes out: before, 16 of them blocked every scrape. */
static void test_metrics_idle(void **state) {
  (void)state;
  char dargs[256], path[256];
  snprintf(path, sizeof path, "/tmp/hpl-bounds-mport-%d", (int)getpid());
  snprintf(dargs, sizeof dargs, "--metrics-listen 127.0.0.1:0 --metrics-port-file %s", path);
  hpl__lc *lc = th_cluster(1, 64 * MB, dargs, NULL);
  FILE *f = fopen(path, "r");
  int port = 0;
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%d", &port), 1);
  fclose(f);
  unlink(path);
  int idle[64];
  int k = open_idle(port, idle, 64);
  assert_int_equal(k, 64);
  th_sleep_ms(100);
  for (int round = 0; round < 3; round++) { /* answered, also while they stay */
    int fd = th_wire_connect(port, NULL, 0);
    const char *req = "GET /metrics HTTP/1.0\r\n\r\n";
    assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char rep[64] = "";
    ssize_t n = recv(fd, rep, sizeof rep - 1, 0);
    assert_true(n > 0);
    assert_non_null(strstr(rep, "HTTP/1.")); /* 401 without a token: an answer */
    close(fd);
    th_sleep_ms(200);
  }
  for (int i = 0; i < k; i++) close(idle[i]);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dir_reader_never_reads),
      cmocka_unit_test(test_dir_total_sheds_largest),
      cmocka_unit_test(test_store_client_never_reads),
      cmocka_unit_test(test_store_late_reader_served),
      cmocka_unit_test(test_idle_strangers),
      cmocka_unit_test(test_metrics_idle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
