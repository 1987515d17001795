/* bench_floods.c - what a flood by a peer that is let in (or that only
 * connects) does to the servers: the resident memory of the directory and
 * of store 0, and a legitimate client's get latency meanwhile (issue 41's
 * figures for its closing note).
 *
 *   bench_floods [--secs S] [--kinds peek,list,idle,publish] [--cap-mib M]
 *                [--idle N]
 *
 * Each kind gets a fresh local cluster (two stores, a cluster secret) and
 * runs for S seconds (30):
 *   peek     the reader key over TCP sends PEEKs of a 60 KiB inline object
 *            to the directory as fast as it can and never reads;
 *   list     a raw local client of store 0 (its HELLO read) sends LISTs
 *            with large replies and never reads;
 *   idle     N (8000) TCP connections that never handshake to the directory
 *            and N to store 0's data port, reopened when the server drops
 *            them (at most 500 per target every 250 ms);
 *   publish  the reader key PUBLISHes fresh 64 KiB objects naming store 0's
 *            node, one after another as fast as the replies come.
 * Meanwhile the RSS (VmRSS) of the directory and of store 0 is sampled
 * every 250 ms, and every 50 ms a client of store 0 puts a fresh 1 KiB and
 * a fresh 1 MiB object which a client of store 1 gets (timed) and store 0's
 * client then deletes. A flood stops early when a server passes --cap-mib
 * (3072): the trees before issue 41 grow without bound.
 *
 * Builds in the tree before per-node credentials (handshake v3: no node
 * name, roles STORE/READER) too: #ifdef HPL__AUTH_NAME_MAX in benchwire.h.
 * Old servers: build this file and benchwire.h in that tree. Prints one
 * line per kind. */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "benchwire.h"
#include "hoplite.h"
#include "localcluster.h"
#include "proto.h"
#include "util.h"

#define MIB (1ull << 20)

static struct {
  int secs, idle_n;
  uint64_t cap;
  char kinds[128];
} g = {.secs = 30, .idle_n = 8000, .cap = 3072 * MIB, .kinds = "peek,list,idle,publish"};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* VmRSS of pid in bytes (0 if unreadable). */
static uint64_t rss_of(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  unsigned long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) break;
  if (f) fclose(f);
  return (uint64_t)kb * 1024;
}

/* ---- the floods */

typedef struct flood {
  const char *kind;
  hpl__lc *lc;
  uint64_t node0; /* store 0's node id (publish) */
  int stop;       /* set by main (atomic) */
  int fd;         /* the offender's connection (peek, list, publish), -1 none */
  double t0;
  double cut_s;   /* when the server dropped the offender (-1: never) */
  uint64_t sent, ok, refused, dropped, opened;
  char why[160];  /* the first refusal's detail, or why the flood could not start */
} flood;

static int stopping(flood *f) { return __atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); }

static void mark_cut(flood *f) {
  if (!stopping(f) && f->cut_s < 0) f->cut_s = now_s() - f->t0;
}

/* The reader key's connection to the directory ("node-0": store 0's). */
static int reader_connect(flood *f, hpl__bench_wire *w) {
  memset(w, 0, sizeof *w);
  w->fd = hpl__bench_tcp_connect(hpl__lc_dir_port(f->lc));
  if (w->fd < 0 ||
      hpl__bench_wire_handshake(w, hpl__lc_secret(f->lc), HPL__ROLE_READER, "node-0") != 0) {
    snprintf(f->why, sizeof f->why, "the reader handshake failed");
    return -1;
  }
  __atomic_store_n(&f->fd, w->fd, __ATOMIC_RELEASE);
  return 0;
}

static void flood_peek(flood *f) {
  hpl__bench_wire w;
  if (reader_connect(f, &w) != 0) return;
  Hplpb__PeekReq pk = HPLPB__PEEK_REQ__INIT;
  pk.id = "floods/inline";
  while (!stopping(f)) {
    size_t len;
    uint8_t *fr = hpl__bench_wire_frame(&w, HPL__MSG_PEEK, f->sent + 1, &pk.base, NULL, 0, &len);
    int rc = fr ? hpl__bench_send_all(w.fd, fr, len) : -1;
    free(fr);
    if (rc != 0) {
      mark_cut(f);
      break;
    }
    f->sent++;
  }
}

static void flood_list(flood *f) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", hpl__lc_socket(f->lc, 0));
  hpl__bench_wire w = {.fd = fd};
  hpl__frame_hdr h;
  uint8_t *msg = NULL;
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      hpl__bench_wire_read(&w, &h, &msg, 5000) != 0 || h.type != HPL__MSG_HELLO) {
    snprintf(f->why, sizeof f->why, "no HELLO from store 0");
    free(msg);
    if (fd >= 0) close(fd);
    return;
  }
  free(msg);
  __atomic_store_n(&f->fd, fd, __ATOMIC_RELEASE);
  Hplpb__ListReq lr = HPLPB__LIST_REQ__INIT;
  lr.prefix = "floods/list/";
  lr.timeout_ms = 10000;
  size_t len;
  uint8_t *fr = hpl__msg_frame(HPL__MSG_LIST, 1, &lr.base, 0, &len);
  while (fr && !stopping(f)) {
    if (hpl__bench_send_all(fd, fr, len) != 0) {
      mark_cut(f);
      break;
    }
    f->sent++;
  }
  free(fr);
}

static void flood_publish(flood *f) {
  hpl__bench_wire w;
  if (reader_connect(f, &w) != 0) return;
  uint8_t *bytes = calloc(1, 64 * 1024);
  Hplpb__InlinePutReq m = HPLPB__INLINE_PUT_REQ__INIT;
  char id[64];
  m.id = id;
  m.size = 64 * 1024;
  m.node = f->node0;
  while (bytes && !stopping(f)) {
    uint64_t req = f->sent + 1;
    snprintf(id, sizeof id, "floods/pub/%llu", (unsigned long long)req);
    size_t len;
    uint8_t *fr = hpl__bench_wire_frame(&w, HPL__MSG_PUBLISH, req, &m.base, bytes, m.size, &len);
    int rc = fr ? hpl__bench_send_all(w.fd, fr, len) : -1;
    free(fr);
    f->sent += rc == 0;
    while (rc == 0 && !stopping(f)) { /* its reply (others skipped) */
      hpl__frame_hdr h;
      uint8_t *msg;
      if (hpl__bench_wire_read(&w, &h, &msg, 10000) != 0) {
        rc = -1;
        break;
      }
      if (h.type == HPL__MSG_REPLY && h.req_id == req) {
        Hplpb__Reply *r = (Hplpb__Reply *)hpl__msg_unpack(h.type, msg, h.msg_len);
        if (r && r->status == 0) {
          f->ok++;
        } else {
          if (!f->refused++)
            snprintf(f->why, sizeof f->why, "%s: %s", r ? hpl_strerror(r->status) : "?",
                     r && r->detail ? r->detail : "");
        }
        if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
        free(msg);
        break;
      }
      free(msg);
    }
    if (rc != 0) {
      mark_cut(f);
      break;
    }
  }
  free(bytes);
}

/* Non-blocking connect to 127.0.0.1:port (pending counts as open). */
static int idle_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

static int data_port(hpl__lc *lc, int node) {
  char path[512];
  snprintf(path, sizeof path, "%s/node-%d.ready", hpl__lc_work_dir(lc), node);
  FILE *fp = fopen(path, "r");
  int port = -1;
  if (fp && fscanf(fp, "%d", &port) != 1) port = -1;
  if (fp) fclose(fp);
  return port;
}

static void flood_idle(flood *f) {
  int n = g.idle_n, ports[2] = {hpl__lc_dir_port(f->lc), data_port(f->lc, 0)};
  struct pollfd *pf = calloc((size_t)(2 * n), sizeof *pf);
  if (!pf || ports[1] <= 0) {
    snprintf(f->why, sizeof f->why, "no memory or no data port");
    free(pf);
    return;
  }
  for (int i = 0; i < 2 * n; i++) pf[i].fd = -1;
  while (!stopping(f)) {
    int reopened[2] = {0, 0};
    for (int i = 0; i < 2 * n; i++) { /* open what is missing (500 per target a round) */
      int t = i / n;
      if (pf[i].fd >= 0 || reopened[t] >= 500) continue;
      pf[i].fd = idle_open(ports[t]);
      pf[i].events = POLLIN | POLLRDHUP;
      if (pf[i].fd >= 0) {
        f->opened++;
        if (f->opened > (uint64_t)(2 * n)) reopened[t]++;
      } else {
        reopened[t]++; /* out of descriptors or ports: try again next round */
      }
    }
    poll(pf, (nfds_t)(2 * n), 250);
    for (int i = 0; i < 2 * n; i++) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) continue;
      char b[64];
      ssize_t k = recv(pf[i].fd, b, sizeof b, MSG_DONTWAIT);
      if (k > 0 || (k < 0 && errno == EAGAIN)) continue;
      f->dropped++; /* reset or closed by the server */
      mark_cut(f);
      close(pf[i].fd);
      pf[i].fd = -1;
    }
  }
  for (int i = 0; i < 2 * n; i++)
    if (pf[i].fd >= 0) close(pf[i].fd);
  free(pf);
}

static void *flood_main(void *arg) {
  flood *f = arg;
  if (!strcmp(f->kind, "peek")) flood_peek(f);
  else if (!strcmp(f->kind, "list")) flood_list(f);
  else if (!strcmp(f->kind, "idle")) flood_idle(f);
  else if (!strcmp(f->kind, "publish")) flood_publish(f);
  return NULL;
}

/* ---- the legitimate client */

#define LEGIT_MAX 4096

typedef struct legit {
  hpl_client *a, *b; /* of store 0 (puts, deletes), of store 1 (gets) */
  const char *kind;
  int stop;
  double ms[2][LEGIT_MAX]; /* get latencies: 1 KiB, 1 MiB */
  int n[2];
  double put_ms[2][LEGIT_MAX]; /* the puts' (on store 0, the flooded one for `list`) */
  int np[2];
  int errs;
  char first_err[200];
} legit;

static void legit_err(legit *l, const char *what, const char *id, int rc, hpl_client *c) {
  if (!l->errs++)
    snprintf(l->first_err, sizeof l->first_err, "%s %s: %s (%s)", what, id, hpl_strerror(rc),
             hpl_errdetail(c));
}

static void *legit_main(void *arg) {
  legit *l = arg;
  const uint64_t sizes[2] = {1024, MIB};
  uint8_t *data = malloc(MIB);
  if (!data) return NULL;
  hpl__fill_pattern(data, MIB, 41);
  char id[128];
  for (int k = 0; !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE); k++) {
    double tick = now_s();
    for (int s = 0; s < 2 && l->n[s] < LEGIT_MAX; s++) {
      snprintf(id, sizeof id, "floods/legit/%s/%d-%d", l->kind, k, s);
      double p0 = now_s();
      int rc = hpl_put(l->a, id, data, sizes[s], 5000);
      if (rc == 0) l->put_ms[s][l->np[s]++] = (now_s() - p0) * 1e3;
      if (rc) {
        legit_err(l, "put", id, rc, l->a);
        continue;
      }
      hpl_buf *b = NULL;
      double t0 = now_s();
      rc = hpl_get(l->b, id, 5000, &b);
      double took = (now_s() - t0) * 1e3;
      if (rc == 0 && hpl_buf_size(b) != sizes[s]) rc = HPL_EPROTO;
      if (b) hpl_release(l->b, b);
      if (rc) legit_err(l, "get", id, rc, l->b);
      else l->ms[s][l->n[s]++] = took;
      rc = hpl_delete(l->a, id, 5000);
      if (rc && rc != HPL_ENOTFOUND) legit_err(l, "delete", id, rc, l->a);
    }
    double left = 0.050 - (now_s() - tick);
    if (left > 0) {
      struct timespec ts = {0, (long)(left * 1e9)};
      nanosleep(&ts, NULL);
    }
  }
  free(data);
  return NULL;
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* "p50/p99/max" of n latencies (sorted in place), "-" without any. */
static void pct(double *v, int n, char *out, size_t len) {
  if (n == 0) {
    snprintf(out, len, "-");
    return;
  }
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  int i50 = (n * 50 + 99) / 100 - 1, i99 = (n * 99 + 99) / 100 - 1; /* nearest rank */
  snprintf(out, len, "%.1f/%.1f/%.1f", v[i50], v[i99], v[n - 1]);
}

/* ---- one flood on a fresh cluster */

static int run_kind(const char *kind) {
  hpl__lc_opts o = {.nodes = 2, .memory = 256 * MIB};
  hpl__lc *lc;
  char err[256];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_floods: %s\n", err);
    return 1;
  }
  static legit l;
  memset(&l, 0, sizeof l);
  l.kind = kind;
  flood f = {.kind = kind, .lc = lc, .fd = -1, .cut_s = -1};
  if (hpl_connect(hpl__lc_socket(lc, 0), 5000, &l.a) ||
      hpl_connect(hpl__lc_socket(lc, 1), 5000, &l.b) ||
      hpl_counter(l.a, "node_id", 5000, &f.node0)) {
    fprintf(stderr, "bench_floods: cannot connect to the cluster\n");
    hpl__lc_stop(lc);
    return 1;
  }
  uint8_t *obj = malloc(60 * 1024);
  hpl__fill_pattern(obj, 60 * 1024, 7);
  int rc = hpl_put(l.a, "floods/inline", obj, 60 * 1024, 5000);
  char id[256];
  for (int i = 0; rc == 0 && !strcmp(kind, "list") && i < 300; i++) { /* large LIST replies */
    snprintf(id, sizeof id, "floods/list/%0200d", i);
    rc = hpl_put(l.a, id, obj, 100, 5000);
  }
  free(obj);
  if (rc) fprintf(stderr, "bench_floods: setup put: %s\n", hpl_strerror(rc));
  sleep(1);
  pid_t dir = hpl__lc_dir_pid(lc), st = hpl__lc_store_pid(lc, 0);
  uint64_t d0 = rss_of(dir), s0 = rss_of(st), dpk = d0, spk = s0, dend = d0, send_ = s0;
  pthread_t ft, lt;
  f.t0 = now_s();
  pthread_create(&lt, NULL, legit_main, &l);
  pthread_create(&ft, NULL, flood_main, &f);
  double capped = -1, t = 0;
  while ((t = now_s() - f.t0) < g.secs) {
    struct timespec ts = {0, 250 * 1000000L};
    nanosleep(&ts, NULL);
    dend = rss_of(dir);
    send_ = rss_of(st);
    if (dend > dpk) dpk = dend;
    if (send_ > spk) spk = send_;
    if (dend > g.cap || send_ > g.cap) {
      capped = now_s() - f.t0;
      break;
    }
  }
  __atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&l.stop, 1, __ATOMIC_RELEASE);
  int ffd = __atomic_load_n(&f.fd, __ATOMIC_ACQUIRE);
  if (ffd >= 0) shutdown(ffd, SHUT_RDWR); /* a send blocked on a full socket returns */
  pthread_join(ft, NULL);
  pthread_join(lt, NULL);
  if (f.fd >= 0) close(f.fd);

  char p1[64], p2[64], q1[64], q2[64], off[200];
  pct(l.ms[0], l.n[0], p1, sizeof p1);
  pct(l.ms[1], l.n[1], p2, sizeof p2);
  pct(l.put_ms[0], l.np[0], q1, sizeof q1);
  pct(l.put_ms[1], l.np[1], q2, sizeof q2);
  if (!strcmp(kind, "idle"))
    snprintf(off, sizeof off, "%llu opened, %llu dropped by the servers (first after %.1f s)",
             (unsigned long long)f.opened, (unsigned long long)f.dropped, f.cut_s);
  else if (f.cut_s >= 0)
    snprintf(off, sizeof off, "disconnected after %.1f s (%llu sent)", f.cut_s,
             (unsigned long long)f.sent);
  else
    snprintf(off, sizeof off, "not disconnected (%llu sent)", (unsigned long long)f.sent);
  if (!strcmp(kind, "idle") && f.cut_s < 0)
    snprintf(off, sizeof off, "%llu opened, none dropped", (unsigned long long)f.opened);
  printf("%-8s dir MiB %5llu/%5llu/%5llu  store0 MiB %5llu/%5llu/%5llu  get 1KiB ms %s (n=%d)  "
         "get 1MiB ms %s (n=%d)  errors %d  offender: %s; puts ms 1KiB %s, 1MiB %s",
         kind, (unsigned long long)(d0 / MIB), (unsigned long long)(dpk / MIB),
         (unsigned long long)(dend / MIB), (unsigned long long)(s0 / MIB),
         (unsigned long long)(spk / MIB), (unsigned long long)(send_ / MIB), p1, l.n[0], p2,
         l.n[1], l.errs, off, q1, q2);
  if (!strcmp(kind, "publish"))
    printf("; %llu accepted, %llu refused", (unsigned long long)f.ok,
           (unsigned long long)f.refused);
  if (capped >= 0) printf("; STOPPED at %.1f s: a server passed %llu MiB", capped,
                          (unsigned long long)(g.cap / MIB));
  if (f.why[0]) printf("; first refusal/failure: %s", f.why);
  if (l.errs) printf("; first client error: %s", l.first_err);
  printf("\n");
  fflush(stdout);
  hpl_close(l.a);
  hpl_close(l.b);
  hpl__lc_stop(lc);
  return 0;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"secs", 1, NULL, 's'}, {"kinds", 1, NULL, 'k'},
                                       {"cap-mib", 1, NULL, 'c'}, {"idle", 1, NULL, 'i'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 's') g.secs = atoi(optarg);
    else if (c == 'k') snprintf(g.kinds, sizeof g.kinds, "%s", optarg);
    else if (c == 'c') g.cap = strtoull(optarg, NULL, 10) * MIB;
    else if (c == 'i') g.idle_n = atoi(optarg);
    else {
      fprintf(stderr, "usage: bench_floods [--secs S] [--kinds peek,list,idle,publish] "
                      "[--cap-mib M] [--idle N]\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl; /* the idle flood's descriptors; the servers inherit it too */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 2 * (rlim_t)g.idle_n + 1000) g.idle_n = (int)(rl.rlim_cur - 1000) / 2;
  }
  printf("# %d s per flood, RSS start/peak/end, legitimate gets on store 1 of fresh objects "
         "put on store 0 every 50 ms (p50/p99/max), cap %llu MiB per server\n",
         g.secs, (unsigned long long)(g.cap / MIB));
  int rc = 0;
  char kinds[128];
  snprintf(kinds, sizeof kinds, "%s", g.kinds);
  for (char *save, *k = strtok_r(kinds, ",", &save); k; k = strtok_r(NULL, ",", &save))
    rc |= run_kind(k);
  return rc;
}
