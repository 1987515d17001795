/* harness.c - see harness.h: clusters (start, stop, logs), patterns,
 * getters, counters; the raw protocol peers are in harness_wire.c. */
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
#include <signal.h>
#include <sys/prctl.h>
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

hpl__lc *th_group_start(int nodes, uint64_t memory, const char *dir_args, hpl_client **const *cs,
                        int nc) {
  hpl__lc *lc = th_cluster(nodes, memory, dir_args, NULL);
  th_untrack(lc);
  for (int i = 0; i < nc; i++) *cs[i] = th_connect(lc, i);
  return lc;
}

void th_group_stop(hpl__lc *lc, hpl_client *const *cs, int nc) {
  for (int i = 0; i < nc; i++) hpl_close(cs[i]);
  char err[256];
  th_stop(lc, hpl__lc_check(lc, err, sizeof err) != 0);
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

void th_wait_counter(hpl_client *c, const char *name, uint64_t want, const char *what) {
  uint64_t deadline = hpl__deadline_ms(th_ms(20000));
  uint64_t v;
  while ((v = th_counter(c, name)) != want && hpl__ms_left(deadline) > 0) th_sleep_ms(100);
  if (v != want)
    fail_msg("%s: counter %s is %llu, not %llu", what, name, (unsigned long long)v,
             (unsigned long long)want);
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
  int moved; /* the receiver had a sender of this object before: a move */
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
    int moved = 0;
    for (size_t j = 0; j < ne; j++) moved |= !strcmp(e[j].id, t->id) && e[j].receiver == t->receiver;
    snprintf(e[ne].id, sizeof e[ne].id, "%s", t->id);
    e[ne].receiver = t->receiver;
    e[ne].sender = t->sender;
    e[ne].live = 1;
    e[ne].moved = moved;
    ne++;
    /* a moved receiver may be handed a busy copy (the quiet sender's own
     * upstream, directory/objpick.c hpl__dtab_pick_bypass): its edge is
     * outside the limit, and not counted against later ones */
    if (moved) continue;
    int serving = 0;
    for (size_t j = 0; j < ne; j++)
      if (e[j].live && !e[j].moved && !strcmp(e[j].id, t->id) && e[j].sender == t->sender) serving++;
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
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test killed by its timeout leaves no store */
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

int th_sh(const char *fmt, ...) {
  char cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

int th_cluster_sh(const char *prefix, const char *fmt, ...) {
  char args[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  return th_sh("HPL_NS_PREFIX=%s HPL_NS_QUIET=1 %s/bench/cluster.sh %s", prefix, HPL_SRC_DIR, args);
}

const char *th_netns_unusable(void) {
  if (getuid() != 0) return "needs root for network namespaces";
  char probe[32];
  snprintf(probe, sizeof probe, "hplprobe%d", (int)(getpid() % 100000));
  if (th_sh("ip netns add %s 2>/dev/null && ip netns del %s", probe, probe) != 0)
    return "this machine refuses 'ip netns add' (no network namespaces)";
  return NULL;
}

void th_cluster_up(const char *prefix, int hosts, const char *rate, char (*addrs_buf)[TH_ADDR_LEN],
                   const char **addrs) {
  if (th_cluster_sh(prefix, "up %d %s", hosts, rate) != 0) {
    th_cluster_sh(prefix, "down --kill >/dev/null 2>&1");
    fail_msg("cannot bring up the emulated cluster");
  }
  for (int i = 0; i < hosts; i++) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "HPL_NS_PREFIX=%s %s/bench/cluster.sh addr %d", prefix, HPL_SRC_DIR,
             i);
    FILE *p = popen(cmd, "r");
    int ok = p && fgets(addrs_buf[i], TH_ADDR_LEN, p);
    if (p) pclose(p);
    if (!ok) {
      th_cluster_sh(prefix, "down --kill >/dev/null 2>&1");
      fail_msg("no address for host %d", i);
    }
    addrs_buf[i][strcspn(addrs_buf[i], "\n")] = 0;
    addrs[i] = addrs_buf[i];
  }
}
