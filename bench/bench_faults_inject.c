/* bench_faults_inject.c - bench_faults' fault kinds and how each is
 * injected: kill -9 a store, cut a host off or slow it (cluster.sh on the
 * emulated cluster), stop a store, kill the directory (or the leading
 * standby one), kill the source once a receiver holds a copy (srckill's
 * watcher), and the corrupting stores' fault point. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hoplite.h"
#include "util.h"
#include "bench_faults.h"

/* corrupt: every store is started with a fault point that flips a byte in
 * the first CORRUPT_CHUNKS chunks of each stream it sends of an object
 * whose id starts with "r:fc/<its index>/", or of a reduce stream into a
 * target whose id starts with "fc/<its index>/" (the prefix rule of
 * store/faults.c); a corrupt run names its broadcast object (or its reduce
 * target) after its victim, so that node alone lies, from the start of the
 * run, in every stream it serves. */
#define CORRUPT_CHUNKS 2

const char *const hpl__bf_fk_names[HPL__BF_NFK] = {"kill",    "cut",     "slow",    "pause",
                                                   "dirkill", "srckill", "corrupt", "dirhost"};

int hpl__bf_fk_index(int kind) {
  int i = 0;
  while (i < HPL__BF_NFK - 1 && kind != 1 << i) i++;
  return i;
}

/* Received units that failed their digests, summed over the live stores
 * (their corrupt_units counters). */
uint64_t hpl__bf_corrupt_caught(const hpl__bf_cfg *g) {
  uint64_t sum = 0, v;
  for (int i = 0; i < g->hosts; i++)
    if (hpl__bf_alive[i] && hpl__bf_cs[i] && hpl_counter(hpl__bf_cs[i], "corrupt_units", 5000, &v) == 0) sum += v;
  return sum;
}

/* Restart every store with its corrupt fault point (HPL__FK_CORRUPT). */
void hpl__bf_corrupt_setup(hpl__bf_cfg *g) {
  for (int i = 0; i < g->hosts; i++) {
    char a[96], err[512];
    snprintf(a, sizeof a, "--faults prefix=r:fc/%d/,corrupt_send=%d", i, CORRUPT_CHUNKS);
    hpl_close(hpl__bf_cs[i]);
    hpl__bf_cs[i] = NULL;
    if (hpl__lc_signal(hpl__bf_lc, i, SIGTERM) || hpl__lc_set_store_args(hpl__bf_lc, i, a) ||
        hpl__lc_restart(hpl__bf_lc, i, err, sizeof err)) {
      fprintf(stderr, "bench_faults: restart node %d with '%s' failed\n", i, a);
      exit(1);
    }
    if (hpl_connect(hpl__lc_socket(hpl__bf_lc, i), 10000, &hpl__bf_cs[i])) hpl__bf_die("reconnect");
  }
}

/* Kill store i with SIGKILL and reap it. *close_s: how long after the
 * signal its connections closed (-1 if not measured), read as the EOF of
 * a connection to its Unix socket opened just before: a dying process's
 * files close only once its memory (the store's pool) is unmapped, and
 * that is when its peers and the directory hear of the kill. */
static void kill_node(int i, double *close_s) {
  hpl__bf_alive[i] = 0;
  *close_s = -1;
  pid_t pid = hpl__lc_store_pid(hpl__bf_lc, i);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  const char *path = hpl__lc_socket(hpl__bf_lc, i);
  if (fd >= 0 && pid > 0 && strlen(path) < sizeof sa.sun_path) {
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
      uint64_t t0 = hpl__now_ns();
      if (kill(pid, SIGKILL) == 0) {
        char buf[256];
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        for (;;) { /* until EOF or an error; whatever the store sent first is read past */
          int n = poll(&pf, 1, 10000);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) break;
          ssize_t r = read(fd, buf, sizeof buf);
          if (r > 0 || (r < 0 && errno == EINTR)) continue;
          *close_s = (double)(hpl__now_ns() - t0) / 1e9;
          break;
        }
      }
    }
  }
  if (fd >= 0) close(fd);
  hpl__lc_signal(hpl__bf_lc, i, SIGKILL); /* (again, if sent) and reaped */
  /* the handle's connection is dead; its get returned or will return */
}

/* The srckill watcher: polls the receivers (hpl_contains on their handles,
 * which may be shared between threads) every millisecond, and kills node 0
 * as soon as one of them holds a complete copy. Gives up when every
 * receiver's get has returned without a complete copy anywhere, or at the
 * deadline. The main thread joins it before touching the cluster again
 * (the localcluster API is not thread-safe). */
void *hpl__bf_watch_main(void *arg) {
  hpl__bf_watcher *w = arg;
  hpl__sleep_until_ns(w->start_ns);
  while (hpl__now_ns() < w->deadline_ns) {
    int done = 1;
    for (int i = 0; i < w->np; i++) {
      int local = 0;
      if (hpl_contains(hpl__bf_cs[w->ps[i].node], w->id, 1000, &local) == 0 && local) {
        hpl__bf_alive[0] = 0;
        w->kill_ns = hpl__now_ns(); /* the signal; reaping the store takes longer */
        hpl__lc_signal(hpl__bf_lc, 0, SIGKILL);
        w->holder = w->ps[i].node;
        return NULL;
      }
      done &= __atomic_load_n(&w->ps[i].finished, __ATOMIC_ACQUIRE);
    }
    if (done) return NULL;
    hpl__sleep_until_ns(hpl__now_ns() + 1000000ull);
  }
  return NULL;
}

/* Run `cluster.sh VERB HOST [ARG]` for the emulated cluster; nonzero on
 * failure. Blocking, from the bench's main thread (no event loop here).
 * The command runs at nice -20: it plays the network failing, not a
 * process of the system under test, and at normal priority its dozen
 * forks queued behind the busy stores for 0.3 s and more (faults26). */
int hpl__bf_cluster_cmd(const hpl__bf_cfg *g, const char *verb, int host, const char *arg) {
  char hs[16];
  snprintf(hs, sizeof hs, "%d", host);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setenv("HPL_NS_PREFIX", g->netns, 1);
    setenv("HPL_NS_QUIET", "1", 1);
    (void)setpriority(PRIO_PROCESS, 0, -20); /* best effort: root only */
    execl(g->cluster_sh, g->cluster_sh, verb, hs, arg, (char *)NULL);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Pick a node in the middle of the current tree/chain of `id` from the
 * directory's record: one that both receives and sends, at the depth
 * nearest half the deepest. *depth: its hops from node 0 along the
 * record's latest assignments (0: unknown). */
static int middle_node(int op, const char *id, int fallback, int *depth) {
  char *text;
  *depth = 0;
  if (hpl_transfers(hpl__bf_cs[0], 0, 5000, &text, NULL)) return fallback;
  uint64_t ids[HPL__BF_MAXN];
  for (int i = 0; i < HPL__BF_MAXN; i++) ids[i] = 0;
  int best = fallback, nup[HPL__BF_MAXN] = {0}, ndown[HPL__BF_MAXN] = {0};
  int parent[HPL__BF_MAXN];
  for (int i = 0; i < HPL__BF_MAXN; i++) parent[i] = -1;
  (void)op;
  for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
    char kind[16], oid[300];
    unsigned long long seq, t, r, s;
    if (sscanf(l, "%llu %llu %15s %llx %llx %299s", &seq, &t, kind, &r, &s, oid) != 6) continue;
    if (strcmp(kind, "assign") || strcmp(oid, id)) continue;
    int ri = -1, si = -1;
    for (int i = 0; i < HPL__BF_MAXN; i++) {
      if (!hpl__bf_cs[i]) continue;
      if (!ids[i]) hpl_counter(hpl__bf_cs[i], "node_id", 2000, &ids[i]);
      if (ids[i] == r) nup[i]++, ri = i;
      if (ids[i] == s) ndown[i]++, si = i;
    }
    if (ri >= 0) parent[ri] = si;
  }
  hpl_free(text);
  /* each node's hops from node 0 along the latest assignments (0: none
   * known; a walk longer than the nodes is a cycle in the record) */
  int dep[HPL__BF_MAXN], dmax = 0;
  for (int i = 0; i < HPL__BF_MAXN; i++) {
    int d = 0, j = i;
    while (j > 0 && parent[j] >= 0 && d <= HPL__BF_MAXN) j = parent[j], d++;
    dep[i] = j == 0 && d <= HPL__BF_MAXN ? d : 0;
    if (dep[i] > dmax) dmax = dep[i];
  }
  /* the relay (receives and sends) nearest the chain's middle depth; the
   * lowest-numbered relay when no depth is known */
  int bestd = -1;
  for (int i = 1; i < HPL__BF_MAXN; i++) {
    if (!nup[i] || !ndown[i]) continue;
    int off = dep[i] ? abs(2 * dep[i] - (dmax + 1)) : 1 << 20;
    if (bestd < 0 || off < bestd) bestd = off, best = i;
  }
  *depth = dep[best];
  return best;
}

/* At `kill_frac` of `nofault` seconds after `start` (the participants'
 * start), apply fault `kind` to victims[0..nkill) (victims[v] = -2: the
 * middle of the chain, written back): kill them, cut victims[0] off (or
 * stop its store) for `cut_s` seconds, or slow it; or kill the directory
 * for `cut_s` seconds. The srckill watcher injects its own. */
void hpl__bf_inject(hpl__bf_cfg *g, int op, const char *id, int kind, int nkill, int *victims,
                    double kill_frac, double nofault, uint64_t start, double cut_s,
                    hpl__bf_outcome *oc) {
  char slow_rate[32] = "";
  if (kind == HPL__FK_SLOW) {
    uint64_t bps = 0;
    hpl__parse_rate(g->rate, &bps);
    snprintf(slow_rate, sizeof slow_rate, "%llubit",
             (unsigned long long)((double)bps / g->slow_factor));
  }
  hpl__sleep_until_ns(start + (uint64_t)(kill_frac * nofault * 1e9));
  oc->fault_at = (double)(hpl__now_ns() - start) / 1e9;
  for (int v = 0; v < nkill; v++) {
    int victim = victims[v] == -2 ? middle_node(op, op ? "" : id, 1 + (g->hosts - 1) / 2,
                                                &oc->victim_depth)
                                  : victims[v];
    if (op == 1 && victims[v] == -2) victim = 1 + (g->hosts - 1) / 2;
    victims[v] = victim;
    if (kind == HPL__FK_KILL) {
      /* the signal went out at fault_done (the reap after it is not the fault) */
      uint64_t k0 = hpl__now_ns();
      double cs;
      kill_node(victim, &cs);
      if (v == 0) oc->kill_close_s = cs, oc->fault_done = (double)(k0 - start) / 1e9;
    }
  }
  if (kind != HPL__FK_KILL) oc->fault_done = (double)(hpl__now_ns() - start) / 1e9;
  if (kind == HPL__FK_CUT) {
    if (hpl__bf_cluster_cmd(g, "cut", victims[0], NULL)) hpl__bf_die("cluster.sh cut failed");
    oc->fault_done = (double)(hpl__now_ns() - start) / 1e9;
    hpl__sleep_until_ns(hpl__now_ns() + (uint64_t)(cut_s * 1e9));
    if (hpl__bf_cluster_cmd(g, "uncut", victims[0], NULL)) hpl__bf_die("cluster.sh uncut failed");
  } else if (kind == HPL__FK_SLOW) {
    if (hpl__bf_cluster_cmd(g, "ratelimit", victims[0], slow_rate)) hpl__bf_die("cluster.sh ratelimit failed");
    oc->fault_done = (double)(hpl__now_ns() - start) / 1e9;
  } else if (kind == HPL__FK_PAUSE) {
    if (hpl__lc_signal(hpl__bf_lc, victims[0], SIGSTOP)) hpl__bf_die("SIGSTOP failed");
    oc->fault_done = (double)(hpl__now_ns() - start) / 1e9;
    hpl__sleep_until_ns(hpl__now_ns() + (uint64_t)(cut_s * 1e9));
    if (hpl__lc_signal(hpl__bf_lc, victims[0], SIGCONT)) hpl__bf_die("SIGCONT failed");
  } else if (kind == HPL__FK_DIRHOST) { /* for good: healed once the survivors are done */
    if (hpl__bf_cluster_cmd(g, "cut", victims[0], NULL)) hpl__bf_die("cluster.sh cut failed");
    oc->fault_done = (double)(hpl__now_ns() - start) / 1e9;
  } else if (kind == HPL__FK_DIRKILL && hpl__bf_hd) { /* the leading one of the standby directories */
    int l = hpl__hd_leader(hpl__bf_hd, 5000, NULL);
    if (l < 0 || hpl__hd_signal(hpl__bf_hd, l, SIGKILL)) hpl__bf_die("killing the leading directory failed");
    oc->fault_done = (double)(hpl__now_ns() - start) / 1e9;
    hpl__sleep_until_ns(hpl__now_ns() + (uint64_t)(cut_s * 1e9));
    char err[512];
    if (hpl__hd_restart(hpl__bf_hd, l, err, sizeof err)) {
      fprintf(stderr, "bench_faults: restart directory %d: %s\n", l, err);
      exit(1);
    }
  } else if (kind == HPL__FK_DIRKILL) {
    if (hpl__lc_signal(hpl__bf_lc, -1, SIGKILL)) hpl__bf_die("killing the directory failed");
    oc->fault_done = (double)(hpl__now_ns() - start) / 1e9;
    hpl__sleep_until_ns(hpl__now_ns() + (uint64_t)(cut_s * 1e9));
    char err[512];
    if (hpl__lc_restart(hpl__bf_lc, -1, err, sizeof err)) {
      fprintf(stderr, "bench_faults: restart the directory: %s\n", err);
      exit(1);
    }
  }
}
