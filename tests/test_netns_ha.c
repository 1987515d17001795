/* test_netns_ha.c - standby directories on emulated hosts (issue 43): etcd
 * in the switch namespace, two directories (hosts 1 and 2) under a 1 s
 * leader lease, a store on each of 3 hosts at 1 Gbit/s (bench/cluster.sh).
 *   - the leading directory's host is cut off for good in the middle of a
 *     256 MiB broadcast and of a 64 MiB reduce: the survivors finish with
 *     the right bytes, a standby leads, and afterwards (the cut healed)
 *     every object is stat-able with a complete copy;
 *   - the leader is cut off from etcd only (a blackhole route to etcd in
 *     its namespace; the stores still reach it): it stops serving within
 *     its lease, the standby leads after, and the two directories'
 *     transfer records show no two leaders assigning senders at once.
 * The test makes its own namespaces (prefix hplha<pid>) and removes them.
 * Needs root and etcd; exits with 77 (skipped) otherwise. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "auth.h"
#include "hadirs.h"
#include "harness.h"
#include "localcluster.h"
#include "proto.h"
#include "util.h"

#define HOSTS 3
#define MB (1ull << 20)
#define LEASE_MS 1000
#define DIR_PORT 7400

static char prefix[16], etcd_ip[32];
static char addrs_buf[HOSTS][TH_ADDR_LEN];
static const char *addrs[HOSTS];

static void cluster_down(void) {
  th_cluster_sh(prefix, "down --kill >/dev/null 2>&1");
}

static void cluster_cmd(const char *verb, int host) {
  if (th_cluster_sh(prefix, "%s %d", verb,
         host))
    fail_msg("cluster.sh %s %d failed", verb, host);
}

static int setup(void **state) {
  (void)state;
  snprintf(prefix, sizeof prefix, "hplha%d", (int)(getpid() % 100000));
  th_cluster_up(prefix, HOSTS, "1gbit", addrs_buf, addrs);
  snprintf(etcd_ip, sizeof etcd_ip, "%s", addrs[0]);
  snprintf(strrchr(etcd_ip, '.') + 1, 4, "254");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cluster_down();
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ip netns list | grep -q '^%s-'", prefix);
  assert_int_not_equal(system(cmd), 0);
  return 0;
}

/* One cluster: etcd, directories on hosts 2 and 1, a store per host. */
typedef struct ha_cluster {
  char work[128];
  hpl__hd *hd;
  hpl__lc *lc;
  hpl_client *c[HOSTS];
} ha_cluster;

/* The running test's cluster, for ha_teardown after a failure. */
static hpl__hd *live_hd;
static hpl__lc *live_lc;
static char live_work[128];

static void ha_up(ha_cluster *h, const char *dir_args) {
  snprintf(h->work, sizeof h->work, "/tmp/hplha-test-XXXXXX");
  assert_non_null(mkdtemp(h->work));
  snprintf(live_work, sizeof live_work, "%s", h->work);
  char secret[200], err[512];
  snprintf(secret, sizeof secret, "%s/cluster.secret", h->work);
  assert_int_equal(hpl__auth_create(secret, err, sizeof err), 0);
  hpl__hd_opts ho = {.ndirs = 2,
                     .bin_dir = HPL_BIN_DIR,
                     .work_dir = h->work,
                     .secret = secret,
                     .netns_prefix = prefix,
                     .host = {2, 1},
                     .host_addr = {addrs[2], addrs[1]},
                     .etcd_ip = etcd_ip,
                     .etcd_port = 23790,
                     .dir_port = DIR_PORT,
                     .lease_ms = LEASE_MS,
                     .dir_args = dir_args,
                     .timeout_ms = (int)th_ms(20000)};
  if (hpl__hd_start(&ho, &h->hd, err, sizeof err)) fail_msg("standby directories: %s", err);
  live_hd = h->hd;
  hpl__lc_opts o = {.nodes = HOSTS,
                    .memory = 768 * MB,
                    .bin_dir = HPL_BIN_DIR,
                    .work_dir = h->work,
                    .remove_work_dir = !getenv("HPL_TEST_KEEP"), /* the logs */
                    .netns_prefix = prefix,
                    .host_addrs = addrs,
                    .store_args = "--stall-timeout-ms 3000",
                    .dir_list = hpl__hd_dir_list(h->hd),
                    .timeout_ms = (int)th_ms(20000)};
  if (hpl__lc_start(&o, &h->lc, err, sizeof err)) fail_msg("stores: %s", err);
  live_lc = h->lc;
  for (int i = 0; i < HOSTS; i++) h->c[i] = th_connect(h->lc, i);
}

static void ha_down(ha_cluster *h) {
  for (int i = 0; i < HOSTS; i++) hpl_close(h->c[i]);
  th_stop(h->lc, 0);
  hpl__hd_stop(h->hd);
  live_hd = NULL;
  live_lc = NULL;
  live_work[0] = 0;
}

/* After a test that left early: every server's log, then the stores
 * stopped, then etcd and the directories (etcd's data directory goes with
 * them), and the work directory removed. */
static int ha_teardown(void **state) {
  (void)state;
  if (live_hd) {
    for (int i = 0; i < 2; i++) {
      char cmd[400];
      fprintf(stderr, "---- directory %d (host %d):\n", i, hpl__hd_host(live_hd, i));
      snprintf(cmd, sizeof cmd, "tail -n 40 %s >&2", hpl__hd_log(live_hd, i));
      if (system(cmd)) {
      }
    }
  }
  if (live_lc) {
    th_dump_logs(live_lc);
    hpl__lc_stop(live_lc);
  }
  hpl__hd_stop(live_hd);
  if (live_work[0] && !getenv("HPL_TEST_KEEP")) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", live_work);
    if (system(cmd)) {
    }
  }
  live_hd = NULL;
  live_lc = NULL;
  live_work[0] = 0;
  return 0;
}

/* The host of the leading directory (fails the test if none leads). */
static int leader_host(ha_cluster *h, uint64_t *term) {
  int l = hpl__hd_leader(h->hd, (int)th_ms(10000), term);
  if (l < 0) fail_msg("no directory leads");
  return hpl__hd_host(h->hd, l);
}

/* Wait until a directory on another host than `old` leads; its host. */
static int wait_new_leader(ha_cluster *h, int old, uint64_t old_term, uint64_t *term) {
  uint64_t end = hpl__now_ms() + th_ms(10000);
  while (hpl__now_ms() < end) {
    int l = hpl__hd_leader(h->hd, 1000, term);
    if (l >= 0 && hpl__hd_host(h->hd, l) != old && *term > old_term) return hpl__hd_host(h->hd, l);
    th_sleep_ms(50);
  }
  fail_msg("no directory on another host than %d leads 10 s after", old);
  return -1;
}

/* Every store registered with the leader again since `before` (its
 * dir_registrations counter went up). */
static void wait_registered(ha_cluster *h, const uint64_t *before) {
  uint64_t end = hpl__now_ms() + th_ms(20000);
  for (int i = 0; i < HOSTS; i++)
    while (th_counter(h->c[i], "dir_registrations") <= before[i]) {
      if (hpl__now_ms() > end) fail_msg("store %d did not register with the new leader", i);
      th_sleep_ms(20);
    }
}

/* Every id is known to the (new) leader with a complete copy. */
static void assert_stat_complete(hpl_client *c, const char *const *ids, int n) {
  for (int i = 0; i < n; i++) {
    uint64_t size = 0;
    uint32_t copies = 0, complete = 0;
    int inl = 0;
    int rc = hpl_stat(c, ids[i], th_ms(10000), &size, &copies, &complete, &inl);
    if (rc) fail_msg("stat %s after the failover: %s (%s)", ids[i], hpl_strerror(rc),
                     hpl_errdetail(c));
    if (!complete && !inl) fail_msg("%s: no complete copy of %u after the failover", ids[i], copies);
  }
}

static void test_leader_host_cut_mid_broadcast(void **state) {
  (void)state;
  ha_cluster h;
  ha_up(&h, NULL);
  const uint64_t size = 256 * MB;
  th_put_pattern(h.c[0], "hab/warm", 16 * MB, 3);
  th_put_pattern(h.c[0], "hab/x", size, 4);
  uint64_t want = th_pattern_sum(size, 4), term0, term1, regs[HOSTS];
  int lh = leader_host(&h, &term0), other = lh == 1 ? 2 : 1;
  for (int i = 0; i < HOSTS; i++) regs[i] = th_counter(h.c[i], "dir_registrations");
  th_getter r[HOSTS];
  for (int i = 1; i < HOSTS; i++) {
    r[i] = (th_getter){.c = h.c[i], .id = "hab/x", .timeout = th_ms(60000), .size = size,
                       .want = want};
    th_get_start(&r[i]);
  }
  th_sleep_ms(1100); /* about the middle: 256 MiB take ~2.3 s at 1 Gbit/s */
  uint64_t t_cut = hpl__now_ms();
  cluster_cmd("cut", lh);
  th_get_join(&r[other]);
  if (r[other].rc) fail_msg("host %d: %s (%s)", other, hpl_strerror(r[other].rc),
                            hpl_errdetail(h.c[other]));
  assert_true(r[other].ok);
  int nh = wait_new_leader(&h, lh, term0, &term1);
  fprintf(stderr, "broadcast: leader's host %d cut %llu ms after the start; host %d done %lld ms "
          "after the cut; host %d leads (term %llu -> %llu)\n", lh,
          (unsigned long long)(t_cut - (r[other].done_ms - r[other].ms)), other, (long long)(r[other].done_ms - t_cut), nh, (unsigned long long)term0,
          (unsigned long long)term1);
  assert_int_equal(nh, other);
  cluster_cmd("uncut", lh);
  th_get_join(&r[lh]);
  if (r[lh].rc) fail_msg("the cut host %d after the heal: %s (%s)", lh, hpl_strerror(r[lh].rc),
                         hpl_errdetail(h.c[lh]));
  assert_true(r[lh].ok);
  wait_registered(&h, regs);
  const char *ids[] = {"hab/warm", "hab/x"};
  assert_stat_complete(h.c[0], ids, 2);
  /* the new leader serves new objects too */
  th_put_pattern(h.c[lh], "hab/after", 4 * MB, 5);
  hpl_buf *b;
  assert_int_equal(hpl_get(h.c[0], "hab/after", th_ms(20000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 4 * MB, 5));
  hpl_release(h.c[0], b);
  ha_down(&h);
}

/* A reduce (and the get of its result) from a thread. */
typedef struct red {
  hpl_client *c;
  const char *const *srcs;
  int rc;
  uint64_t done_ms;
  hpl_buf *b;
} red;

static void *red_main(void *arg) {
  red *r = arg;
  r->rc = hpl_reduce(r->c, "har/t", r->srcs, HOSTS, 2, HPL_OP_SUM, HPL_DT_F32, th_ms(60000));
  if (!r->rc) r->rc = hpl_get(r->c, "har/t", th_ms(60000), &r->b);
  r->done_ms = hpl__now_ms();
  return NULL;
}

static void test_leader_host_cut_mid_reduce(void **state) {
  (void)state;
  ha_cluster h;
  ha_up(&h, NULL);
  const size_t nf = 16 * MB; /* floats: 64 MiB */
  float *v = malloc(nf * sizeof *v);
  assert_non_null(v);
  char ids[HOSTS][32];
  const char *srcs[HOSTS], *all[HOSTS + 1];
  for (int i = 0; i < HOSTS; i++) {
    for (size_t j = 0; j < nf; j++) v[j] = (float)(2 * i + 1);
    snprintf(ids[i], sizeof ids[i], "har/src-%d", i);
    all[i] = ids[i];
    assert_int_equal(hpl_put(h.c[i], ids[i], v, nf * sizeof *v, th_ms(20000)), 0);
  }
  free(v);
  all[HOSTS] = "har/t";
  uint64_t term0, term1, regs[HOSTS];
  int lh = leader_host(&h, &term0);
  /* the leader's host's source first: it is in the first tree, and the
   * spare (the third) must take its place once the host is gone */
  srcs[0] = ids[lh];
  srcs[1] = ids[0];
  srcs[2] = ids[lh == 1 ? 2 : 1];
  for (int i = 0; i < HOSTS; i++) regs[i] = th_counter(h.c[i], "dir_registrations");
  /* 2 of the 3 sources into host 0; the leader's host (a contributing
   * source's too) is cut in the middle (64 MiB take ~0.6-0.9 s at 1 Gbit/s) */
  red rd = {.c = h.c[0], .srcs = srcs};
  pthread_t t;
  uint64_t t0 = hpl__now_ms();
  assert_int_equal(pthread_create(&t, NULL, red_main, &rd), 0);
  th_sleep_ms(300);
  uint64_t t_cut = hpl__now_ms();
  cluster_cmd("cut", lh);
  pthread_join(t, NULL);
  if (rd.rc) fail_msg("reduce: %s (%s)", hpl_strerror(rd.rc), hpl_errdetail(h.c[0]));
  char *text = NULL;
  int src_rc = hpl_reduce_sources(h.c[0], "har/t", th_ms(10000), &text);
  float want = 0;
  int n = 0;
  const float *r = hpl_buf_data(rd.b);
  /* known even when the reduce ended while no directory led: its sink
   * re-reports the sources to the new leader before anything else */
  if (src_rc) fail_msg("hpl_reduce_sources: %s (%s)", hpl_strerror(src_rc), hpl_errdetail(h.c[0]));
  for (int i = 0; i < HOSTS; i++)
    if (strstr(text, ids[i])) want += (float)(2 * i + 1), n++;
  fprintf(stderr, "reduce: leader's host %d cut %llu ms after the start; done %lld ms after the "
          "cut; sources:\n%s", lh, (unsigned long long)(t_cut - t0),
          (long long)(rd.done_ms - t_cut), text ? text : "(unknown)\n");
  hpl_free(text);
  assert_int_equal(n, 2);
  for (size_t j = 0; j < nf; j++)
    if (r[j] != want) fail_msg("element %zu is %g, the sources sum to %g", j, (double)r[j],
                               (double)want);
  hpl_release(h.c[0], rd.b);
  int nh = wait_new_leader(&h, lh, term0, &term1);
  assert_int_not_equal(nh, lh);
  cluster_cmd("uncut", lh);
  wait_registered(&h, regs);
  assert_stat_complete(h.c[0], all, HOSTS + 1);
  ha_down(&h);
}

/* ------------------------------------------------------------------ fenced from etcd */

/* A poller in host 0's namespace: asks directory `addr` (over a connection
 * of its own) for its transfer record every 20 ms, keeping the assigns,
 * until it refuses or closes: then t_gone_us is when that was seen (the
 * directory served nothing after it). */
typedef struct poller {
  const char *addr, *secret;
  volatile int stop;
  uint64_t t_gone_us;
  uint64_t first_assign_us, last_assign_us, nassign;
  int err;
} poller;

static int poll_connect(poller *p) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(DIR_PORT)};
  if (fd < 0 || inet_pton(AF_INET, p->addr, &a.sin_addr) != 1 ||
      connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      th_wire_handshake(fd, p->secret, HPL__ROLE_NODE) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

static void *poll_main(void *arg) {
  poller *p = arg;
  if (hpl__lc_enter_host(prefix, 0) != 0) {
    p->err = 1;
    return NULL;
  }
  int fd = poll_connect(p);
  if (fd < 0) {
    p->err = 2;
    return NULL;
  }
  uint64_t since = 0, req = 1;
  while (!p->stop) {
    Hplpb__TransfersReq q = HPLPB__TRANSFERS_REQ__INIT;
    q.since = since;
    q.timeout_ms = 1000;
    size_t len;
    uint8_t *f = th_wire_frame(fd, HPL__MSG_TRANSFERS, req, &q.base, NULL, 0, &len);
    int ok = f && send(fd, f, len, MSG_NOSIGNAL) == (ssize_t)len;
    free(f);
    hpl__frame_hdr hh;
    uint8_t *m = NULL;
    Hplpb__TransfersRep *rep = NULL;
    while (ok && !rep) {
      if (th_wire_read_raw(fd, &hh, &m, 2000) != 0) {
        ok = 0;
        break;
      }
      if (hh.type == HPL__MSG_TRANSFERS_REP && hh.req_id == req)
        rep = hplpb__transfers_rep__unpack(NULL, hh.msg_len, m);
      free(m);
      m = NULL;
    }
    req++;
    if (!ok || !rep) {
      p->t_gone_us = hpl__now_ns() / 1000;
      break;
    }
    for (size_t i = 0; i < rep->n_transfers; i++) {
      Hplpb__Transfer *x = rep->transfers[i];
      if (x->kind != HPL__XFER_ASSIGN) continue;
      if (!p->nassign++) p->first_assign_us = x->t_us;
      p->last_assign_us = x->t_us;
    }
    since = rep->next;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    th_sleep_ms(20);
  }
  close(fd);
  return NULL;
}

/* Gets of new objects all the time: assignments at both leaders. */
typedef struct load {
  hpl_client *c[HOSTS];
  volatile int stop;
  int done, failed;
} load;

static void *load_main(void *arg) {
  load *l = arg;
  for (int k = 0; !l->stop; k++) {
    uint8_t *d = malloc(MB);
    if (!d) break;
    for (size_t j = 0; j < MB; j++) d[j] = (uint8_t)(j * 7 + (size_t)k);
    char id2[32];
    snprintf(id2, sizeof id2, "hap/big/%d", k);
    int rc = hpl_put(l->c[0], id2, d, MB, th_ms(20000));
    free(d);
    for (int i = 1; rc == 0 && i < HOSTS; i++) {
      hpl_buf *b;
      rc = hpl_get(l->c[i], id2, th_ms(20000), &b);
      if (rc == 0) hpl_release(l->c[i], b);
    }
    if (rc) l->failed++;
    else l->done++;
  }
  return NULL;
}

static void test_leader_fenced_from_etcd(void **state) {
  (void)state;
  ha_cluster h;
  ha_up(&h, NULL);
  uint64_t term0, term1;
  int lh = leader_host(&h, &term0), other = lh == 1 ? 2 : 1;
  int li = hpl__hd_host(h.hd, 0) == lh ? 0 : 1;
  char secret[200];
  snprintf(secret, sizeof secret, "%s/cluster.secret", h.work);
  poller p = {.addr = addrs[lh], .secret = secret};
  load ld = {.c = {h.c[0], h.c[1], h.c[2]}};
  pthread_t pt, lt;
  assert_int_equal(pthread_create(&lt, NULL, load_main, &ld), 0);
  th_sleep_ms(500);
  assert_int_equal(pthread_create(&pt, NULL, poll_main, &p), 0);
  th_sleep_ms(500);
  uint64_t t_part_us = hpl__now_ns() / 1000;
  if (th_sh("ip -n %s-h%d route add blackhole %s/32", prefix, lh, etcd_ip))
    fail_msg("cannot add the blackhole route in host %d", lh);
  pthread_join(pt, NULL);
  assert_int_equal(p.err, 0);
  int nh = wait_new_leader(&h, lh, term0, &term1);
  assert_int_equal(nh, other);
  th_sleep_ms(2000); /* the new leader assigns for a while */
  ld.stop = 1;
  pthread_join(lt, NULL);
  size_t n;
  th_xfer *x = th_transfers(h.c[0], 0, &n);
  uint64_t first_new = UINT64_MAX, nnew = 0;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(x[i].kind, "assign")) {
      if (x[i].t_us < first_new) first_new = x[i].t_us;
      nnew++;
    }
  free(x);
  th_sh("ip -n %s-h%d route del blackhole %s/32", prefix, lh, etcd_ip);
  fprintf(stderr, "fenced: the old leader (host %d) stopped serving %lld ms after the partition "
          "(lease %d ms); it assigned %llu times (last at %+lld ms), the new leader (host %d, term "
          "%llu -> %llu) %llu times from %+lld ms; load: %d rounds done, %d failed\n", lh,
          (long long)(p.t_gone_us - t_part_us) / 1000, LEASE_MS, (unsigned long long)p.nassign,
          (long long)(p.last_assign_us - t_part_us) / 1000, nh, (unsigned long long)term0,
          (unsigned long long)term1, (unsigned long long)nnew,
          (long long)(first_new - t_part_us) / 1000, ld.done, ld.failed);
  /* it stopped within its lease (20 ms polls, an exec: 150 ms of slack) */
  assert_true(p.t_gone_us > t_part_us);
  assert_true(p.t_gone_us - t_part_us <= (LEASE_MS + 150) * 1000ull);
  /* its log says so */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "grep -q 'no longer leading' %s", hpl__hd_log(h.hd, li));
  assert_int_equal(system(cmd), 0);
  /* both led and assigned, one after the other: the old leader's last
   * assignment and the moment it was seen gone both come before the new
   * leader's first */
  assert_true(p.nassign > 0);
  assert_true(nnew > 0);
  assert_true(p.last_assign_us < first_new);
  assert_true(p.t_gone_us < first_new);
  ha_down(&h);
}

int main(void) {
  if (getenv("HPL_TEST_FILTER")) cmocka_set_test_filter(getenv("HPL_TEST_FILTER"));
  const char *why = th_netns_unusable();
  if (!why && system("command -v etcd >/dev/null 2>&1") != 0)
    why = "no etcd (Debian's etcd-server)";
  if (why) {
    fprintf(stderr, "test_netns_ha: %s; skipped\n", why);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_leader_host_cut_mid_broadcast, ha_teardown),
      cmocka_unit_test_teardown(test_leader_host_cut_mid_reduce, ha_teardown),
      cmocka_unit_test_teardown(test_leader_fenced_from_etcd, ha_teardown)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
