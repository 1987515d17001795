/* bench_faults.c - failure-injection runs: broadcasts and reduces while
 * stores are killed (kill -9), hosts cut off or slowed down, stores
 * stopped, or the directory killed, at random moments.
 *
 *   bench_faults [--runs 50] [--hosts 8] [--sizes 1M,16M,64M,256M]
 *                [--ops bcast,reduce] [--two-kill 0.3] [--seed S]
 *                [--faults kill,cut,slow,pause,dirkill,srckill,corrupt,dirhost]
 *                [--slow-factor 10] [--pause-s 1,8] [--dir-down 1.0]
 *                [--work-dir DIR (kept: the servers' logs; default a
 *                 temporary one, removed at the end)]
 *                [--netns PREFIX --addrs A0,A1,... --cluster-sh PATH]
 *                [--rate 1gbit] [--store-args "..."] [--out FILE]
 *                [--src-copies]
 *   bench_faults --scenario bcast-midchain|reduce-subset --size 256M [...]
 *
 * Random runs: first the no-fault time of each size and op (median of 3);
 * then each run picks an op, a size, a fault kind among --faults, a victim
 * and a moment in [10%, 90%] of the no-fault time:
 *   kill  kill -9 the victim's store (two victims with probability
 *         --two-kill); victims are restarted after the run;
 *   cut   take the victim host's switch port down (cluster.sh cut) for a
 *         random 0.5-3 s, then bring it back: the partition heals, and the
 *         victim's own get (it is alive) must then finish correctly too;
 *   slow  lower the victim host's rate to RATE/--slow-factor for the rest of
 *         the run (a straggler); its own get must finish correctly;
 *   pause stop the victim's store (SIGSTOP) for a random MIN-MAX s
 *         (--pause-s MIN,MAX, default 1,8), then let it go on (SIGCONT):
 *         nothing closes, as with a partition, and its own get must finish
 *         correctly too. Works on loopback as well.
 *   dirkill kill -9 the directory, leave it down for --dir-down seconds
 *         (default 1.0), then restart it on the same port; the stores
 *         reconnect by themselves. Every participant is a survivor. Works
 *         on loopback as well. A reduce that finished while the directory
 *         was down is unknown to the restarted one (hpl_reduce_sources:
 *         HPL_ENOTFOUND): its bytes are then checked against any k of the
 *         N sources, and the run line says so.
 *   srckill broadcast only (a reduce drawn with it runs as a broadcast):
 *         node 0, which put the object, is killed with SIGKILL as soon as
 *         the first receiver holds a complete copy (a watcher thread polls
 *         the receivers with hpl_contains); the random moment does not
 *         apply. Every receiver is a survivor. Works on loopback as well.
 *   corrupt the victim (not node 0) flips a byte in the first chunks of
 *         every stream it serves in the run (the fault point corrupt_send,
 *         which every store is restarted with at the start): in a
 *         broadcast, of the object (it is a receiver); in a reduce, of its
 *         slot's reduce stream (its source is not touched: a leaf slot's
 *         stream is its source, so then nothing is corrupted). Receivers
 *         must detect it, re-pull (elsewhere, or a spare takes the slot),
 *         and end with exact bytes. Its own get (it is alive) must finish
 *         correctly.
 *   dirhost the cluster runs with standby directories (src/cli/hadirs.h):
 *         etcd in the switch namespace (on BASE.254, so a cut host loses
 *         it too), two directories on the last two hosts (--lease-ms 1000, or
 *         bench_faults' own --lease-ms MS,
 *         port 7400; neither the source nor the receivers' only host), the
 *         stores given both. The leading directory's host (asked of etcd
 *         before the run; its store is the victim) is cut off at the
 *         moment and stays cut until the survivors are done and a
 *         directory on another host leads (the old one has fenced itself
 *         and stands by); then the cut heals and the victim's own get
 *         must finish correctly too. Afterwards the run's object (a
 *         reduce's target) must be stat-able with a complete copy. With
 *         dirhost among --faults every kind runs against the standbys
 *         (dirkill kills the leading one and restarts it 1 s later, as a
 *         standby).
 * cut, slow and dirhost need the emulated cluster (--netns, --cluster-sh).
 * Broadcast: node 0 holds the object (killed only by srckill), every other
 * node gets it. Reduce: every node holds a source (f32, sums exact in any
 * order), node 0 reduces the first N-1 (N-2 with two kills) of them into a
 * target, so spares exist. --src-copies: before each reduce (untimed),
 * node i+1 (mod N) also gets a copy of node i's source, so a slot whose
 * node fails can go on from another copy where it stopped instead of a
 * spare starting the chain above it over. Dead stores (and the directory) are restarted
 * between runs; a run after such a restart is preceded by an untimed
 * no-fault reduce and broadcast of the largest size (warm_restarted: a
 * fresh store's first writes into its pool are slow on this VM), and the
 * no-fault times by two untimed runs of their op and size.
 * A run that does not finish within 10x the no-fault time +
 * 30 s (plus the fault's duration) is a hang.
 *
 * Scenarios (the targets): bcast-midchain kills the receiver in the
 * middle of the chain at 50% of the no-fault time of a broadcast to N-1;
 * reduce-subset kills a source node in the middle of the tree of a reduce
 * of N-1 of N sources at 40%. Both print survivors' time over no-fault.
 *
 * Output: one line per run and a summary: runs, completed, hangs (must be
 * 0), wrong bytes (must be 0), lost-object errors (with whether every copy
 * had died, which is the only excuse), time over the no-fault time; then
 * per fault kind the median, p90 and max of that ratio, and per fault kind
 * and size the median and p90 and the target check: survivors'
 * time <= 1.3 x no-fault + 0.5 s (runs over it, and the worst time minus
 * that limit; for reduces that lose a source so late that even
 * (1 + the moment the fault acted) x no-fault is over the limit - the sink
 * has to receive again what it had, so no exact reduce can do better - how
 * many are also over that floor + 0.5 s); and a LEAK line for each store that still has
 * pool memory allocated once every object is deleted. HPL_BENCH_LOG_LEVEL
 * sets the servers' log level (default warn; with --work-dir the logs
 * stay).
 * --out FILE appends tab-separated lines:
 *   run N OP SIZE KIND:VICTIM FRAC SECS RATIO DONE WRONG LOST HANG
 *       KIND NOFAULT LIMIT SECS-LIMIT PARAM ACTED
 *     (PARAM: cut/pause/dirkill duration, srckill time of the kill (-1:
 *     none), slow factor, 0 for kill; ACTED: seconds from the start until
 *     the fault's command was done - kill -9, SIGSTOP, the cut or the
 *     slowdown - or srckill's kill, 0 where none was made)
 *   kindsize KIND SIZE RUNS MEDIAN P90 OVER_LIMIT WORST_SECS-LIMIT
 *   summary RUNS RUNS_OK HANGS WRONG LOST OTHER MEDIAN P90 MAX
 *   leaks STORES (stores with pool memory still allocated at the end)
 * and for a scenario: NAME SIZE HOSTS SECS NOFAULT RATIO DONE WRONG LOST
 * HANG. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "auth.h"
#include "hadirs.h"
#include "localcluster.h"
#include "util.h"
#include "benchstat.h"

#define MAXN 32

typedef struct cfg {
  int hosts, runs, nsizes, do_bcast, do_reduce;
  double two_kill, slow_factor;
  double pause_min, pause_max; /* --pause-s */
  double dir_down;             /* --dir-down */
  unsigned lease_ms;           /* --lease-ms: the standby directories' (dirhost; default 1000) */
  int faults; /* FK_* bits */
  int src_copies; /* --src-copies */
  uint64_t sizes[16];
  const char *netns, *rate, *store_args, *scenario, *cluster_sh;
  const char *work_dir; /* --work-dir: kept after the run (logs) */
  const char *addrs[MAXN];
  uint64_t seed;
  FILE *out;
} cfg;

enum {
  FK_KILL = 1,
  FK_CUT = 2,
  FK_SLOW = 4,
  FK_PAUSE = 8,
  FK_DIRKILL = 16,
  FK_SRCKILL = 32,
  FK_CORRUPT = 64,
  FK_DIRHOST = 128
};
#define NFK 8
static const char *const fk_names[NFK] = {"kill",    "cut",     "slow",    "pause",
                                          "dirkill", "srckill", "corrupt", "dirhost"};
/* corrupt: every store is started with a fault point that flips a byte in
 * the first CORRUPT_CHUNKS chunks of each stream it sends of an object
 * whose id starts with "r:fc/<its index>/", or of a reduce stream into a
 * target whose id starts with "fc/<its index>/" (the prefix rule of
 * store/faults.c); a corrupt run names its broadcast object (or its reduce
 * target) after its victim, so that node alone lies, from the start of the
 * run, in every stream it serves. */
#define CORRUPT_CHUNKS 2
/* FK_* bit -> index into fk_names */
static int fk_index(int kind) {
  int i = 0;
  while (i < NFK - 1 && kind != 1 << i) i++;
  return i;
}

static hpl__lc *lc;
/* --faults dirhost: etcd and two standby directories (hadirs.h); every
 * kind then runs against them (dirkill kills the leading one) */
static hpl__hd *hd;
#define HA_ETCD_PORT 23790 /* in the switch namespace, on BASE.254 */
#define HA_DIR_PORT 7400   /* every directory's, on its host's address */
static hpl_client *cs[MAXN];
static int alive[MAXN];

static void die(const char *m) {
  fprintf(stderr, "bench_faults: %s\n", m);
  exit(1);
}

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* ------------------------------------------------------------------ participants */

typedef struct part {
  int node;
  int op; /* 0 bcast receiver, 1 reduce sink */
  const char *id;
  const char *const *srcs;
  int nsrc, k;
  uint64_t size, sum;
  uint64_t start_ns, end_ns;
  int64_t timeout_ms;
  int rc, bad;
  int unlisted; /* reduce: hpl_reduce_sources did not know it (checked against any k of N) */
  int finished; /* set (atomically) when the thread is done */
  char why[160]; /* bad: what was wrong */
  char included[1024];
} part;

static void *part_main(void *arg) {
  part *p = arg;
  hpl_buf *b = NULL;
  hpl_client *c = cs[p->node];
  hpl__sleep_until_ns(p->start_ns);
  if (p->op == 0) {
    p->rc = hpl_get(c, p->id, p->timeout_ms, &b);
  } else {
    p->rc = hpl_reduce(c, p->id, p->srcs, (size_t)p->nsrc, (size_t)p->k, HPL_OP_SUM, HPL_DT_F32,
                       p->timeout_ms);
    if (!p->rc) p->rc = hpl_get(c, p->id, p->timeout_ms, &b);
  }
  p->end_ns = hpl__now_ns();
  if (p->rc) {
    __atomic_store_n(&p->finished, 1, __ATOMIC_RELEASE);
    return NULL;
  }
  if (p->op == 0) {
    p->bad = hpl_buf_size(b) != p->size || hpl__checksum(hpl_buf_data(b), p->size) != p->sum;
    if (p->bad)
      snprintf(p->why, sizeof p->why, "%llu bytes, checksum %s",
               (unsigned long long)hpl_buf_size(b), hpl_buf_size(b) == p->size ? "differs" : "-");
  } else {
    char *text = NULL;
    int src_rc = hpl_reduce_sources(c, p->id, 10000, &text);
    if (src_rc == 0) {
      snprintf(p->included, sizeof p->included, "%s", text);
      hpl_free(text);
    }
    /* source i holds i + (j % 5): the sum over the included sources */
    const float *r = hpl_buf_data(b);
    if (src_rc == HPL_ENOTFOUND && hpl_buf_size(b) == p->size && p->size >= 4) {
      /* The directory forgot the reduce (it restarted after the reduce
       * finished): which sources went in is unknown, but element j must be
       * S + k * (j % 5) with S the sum of k distinct indices of 0..N-1,
       * which is any integer from 0+..+(k-1) to (N-k)+..+(N-1). */
      p->unlisted = 1;
      double sum = r[0], lo = p->k * (p->k - 1) / 2.0, hi = lo + (double)p->k * (p->nsrc - p->k);
      if (sum != (double)(long)sum || sum < lo || sum > hi) {
        p->bad = 1;
        snprintf(p->why, sizeof p->why, "element 0 is %g, not a sum of %d of the %d sources "
                 "(sources unknown: the directory forgot the reduce)", sum, p->k, p->nsrc);
      }
      for (size_t j = 0; !p->bad && j < p->size / 4; j++)
        if (r[j] != (float)(sum + p->k * (int)(j % 5))) {
          p->bad = 1;
          snprintf(p->why, sizeof p->why, "element %zu is %g, want %g (sources unknown: the "
                   "directory forgot the reduce)", j, (double)r[j], sum + p->k * (int)(j % 5));
        }
      hpl_release(c, b);
      __atomic_store_n(&p->finished, 1, __ATOMIC_RELEASE);
      return NULL;
    }
    int idx[MAXN], n = 0;
    for (char *l = strtok(p->included, "\n"); l && n < MAXN; l = strtok(NULL, "\n")) {
      const char *slash = strrchr(l, '/');
      idx[n++] = slash ? atoi(slash + 1) : 0;
    }
    p->bad = n != p->k || hpl_buf_size(b) != p->size;
    if (p->bad)
      snprintf(p->why, sizeof p->why, "%d sources listed of %d (hpl_reduce_sources: %s), %llu bytes",
               n, p->k, src_rc ? hpl_errname(src_rc) : "ok", (unsigned long long)hpl_buf_size(b));
    for (size_t j = 0; !p->bad && j < p->size / 4; j++) {
      float want = 0;
      for (int i = 0; i < n; i++) want += (float)(idx[i] + (int)(j % 5));
      if (r[j] != want) {
        p->bad = 1;
        snprintf(p->why, sizeof p->why, "element %zu is %g, the listed sources sum to %g", j,
                 (double)r[j], (double)want);
      }
    }
  }
  hpl_release(c, b);
  __atomic_store_n(&p->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* ------------------------------------------------------------------ one run */

typedef struct outcome {
  double secs;        /* start to last survivor (the cut or slowed host's own get excluded) */
  double victim_secs; /* cut/slow: start to the victim's own completion */
  double kill_secs;   /* srckill: start to the kill of node 0 (-1: not killed) */
  /* start to the fault command's start and to its end (kill -9, SIGSTOP, the
   * cluster.sh command that cuts or slows): the fault has acted by fault_done */
  double fault_at, fault_done;
  int holder;         /* srckill: the receiver seen holding the first complete copy */
  int completed, hangs, wrong, lost, lost_excused, other;
  int unlisted; /* reduces whose sources the (restarted) directory did not know */
  /* standby directories (dirkill, dirhost): who leads after the run, its
   * term; dirhost: when the cut host was healed (its survivors done) */
  int new_leader_host;
  uint64_t new_term;
  double heal_secs;
  int unstated; /* objects without a complete copy afterwards (hpl_stat) */
} outcome;

static void put_pattern(int node, const char *id, uint64_t size, uint64_t seed) {
  uint8_t *d = malloc(size);
  hpl__fill_pattern(d, size, seed);
  int rc = hpl_put(cs[node], id, d, size, 300000);
  free(d);
  if (rc) {
    fprintf(stderr, "bench_faults: put %s: %s (%s)\n", id, hpl_strerror(rc), hpl_errdetail(cs[node]));
    exit(1);
  }
}

/* --src-copies: node `node` gets a copy of source `id` (a thread). */
typedef struct {
  int node;
  const char *id;
  int rc;
} copier;

static void *copy_main(void *arg) {
  copier *cp = arg;
  hpl_buf *b = NULL;
  cp->rc = hpl_get(cs[cp->node], cp->id, 300000, &b);
  if (cp->rc == 0) hpl_release(cs[cp->node], b);
  return NULL;
}

static void put_source(int node, const char *id, uint64_t size) {
  size_t n = size / 4;
  float *d = malloc(size);
  for (size_t j = 0; j < n; j++) d[j] = (float)(node + (int)(j % 5));
  int rc = hpl_put(cs[node], id, d, size, 300000);
  free(d);
  if (rc) {
    fprintf(stderr, "bench_faults: put %s: %s\n", id, hpl_strerror(rc));
    exit(1);
  }
}

/* Stores restarted since the last warm-up (restart_dead sets it). */
static int restarted;

static void restart_dead(cfg *g) {
  for (int i = 0; i < g->hosts; i++) {
    if (alive[i]) continue;
    restarted = 1;
    char err[512];
    if (hpl__lc_restart(lc, i, err, sizeof err)) {
      fprintf(stderr, "bench_faults: restart node %d: %s\n", i, err);
      exit(1);
    }
    if (hpl_connect(hpl__lc_socket(lc, i), 10000, &cs[i])) die("reconnect");
    alive[i] = 1;
  }
}

/* Received units that failed their digests, summed over the live stores
 * (their corrupt_units counters). */
static uint64_t corrupt_caught(const cfg *g) {
  uint64_t sum = 0, v;
  for (int i = 0; i < g->hosts; i++)
    if (alive[i] && cs[i] && hpl_counter(cs[i], "corrupt_units", 5000, &v) == 0) sum += v;
  return sum;
}

/* Restart every store with its corrupt fault point (FK_CORRUPT). */
static void corrupt_setup(cfg *g) {
  for (int i = 0; i < g->hosts; i++) {
    char a[96], err[512];
    snprintf(a, sizeof a, "--faults prefix=r:fc/%d/,corrupt_send=%d", i, CORRUPT_CHUNKS);
    hpl_close(cs[i]);
    cs[i] = NULL;
    if (hpl__lc_signal(lc, i, SIGTERM) || hpl__lc_set_store_args(lc, i, a) ||
        hpl__lc_restart(lc, i, err, sizeof err)) {
      fprintf(stderr, "bench_faults: restart node %d with '%s' failed\n", i, a);
      exit(1);
    }
    if (hpl_connect(hpl__lc_socket(lc, i), 10000, &cs[i])) die("reconnect");
  }
}

static void kill_node(int i) {
  alive[i] = 0;
  hpl__lc_signal(lc, i, SIGKILL);
  /* the handle's connection is dead; its get returned or will return */
}

/* The first live store's client (node 0's store may be dead after srckill). */
static hpl_client *any_live(const cfg *g) {
  for (int i = 0; i < g->hosts; i++)
    if (alive[i] && cs[i]) return cs[i];
  return NULL;
}

/* The srckill watcher: polls the receivers (hpl_contains on their handles,
 * which may be shared between threads) every millisecond, and kills node 0
 * as soon as one of them holds a complete copy. Gives up when every
 * receiver's get has returned without a complete copy anywhere, or at the
 * deadline. The main thread joins it before touching the cluster again
 * (the localcluster API is not thread-safe). */
typedef struct watcher {
  const char *id;
  part *ps;
  int np;
  uint64_t start_ns, deadline_ns;
  uint64_t kill_ns; /* 0: not killed */
  int holder;
} watcher;

static void *watch_main(void *arg) {
  watcher *w = arg;
  hpl__sleep_until_ns(w->start_ns);
  while (hpl__now_ns() < w->deadline_ns) {
    int done = 1;
    for (int i = 0; i < w->np; i++) {
      int local = 0;
      if (hpl_contains(cs[w->ps[i].node], w->id, 1000, &local) == 0 && local) {
        alive[0] = 0;
        w->kill_ns = hpl__now_ns(); /* the signal; reaping the store takes longer */
        hpl__lc_signal(lc, 0, SIGKILL);
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

/* Every live store's "dir_registrations" counter into v[] (0 if unknown). */
static void registrations(const cfg *g, uint64_t *v) {
  for (int i = 0; i < g->hosts; i++) {
    v[i] = 0;
    if (alive[i] && cs[i]) hpl_counter(cs[i], "dir_registrations", 2000, &v[i]);
  }
}

/* After the directory's restart: wait (at most timeout_ms, polling every
 * 10 ms) until every live store registered with it again, so the next run
 * starts on a whole cluster. Returns the number of stores that did not. */
static int wait_registered(const cfg *g, const uint64_t *before, int64_t timeout_ms) {
  uint64_t end = hpl__now_ns() + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    uint64_t now[MAXN];
    registrations(g, now);
    int missing = 0;
    for (int i = 0; i < g->hosts; i++) missing += alive[i] && now[i] <= before[i];
    if (!missing || hpl__now_ns() >= end) return missing;
    hpl__sleep_until_ns(hpl__now_ns() + 10000000ull);
  }
}

/* Run `cluster.sh VERB HOST [ARG]` for the emulated cluster; nonzero on
 * failure. Blocking, from the bench's main thread (no event loop here).
 * The command runs at nice -20: it plays the network failing, not a
 * process of the system under test, and at normal priority its dozen
 * forks queued behind the busy stores for 0.3 s and more (faults26). */
static int cluster_cmd(const cfg *g, const char *verb, int host, const char *arg) {
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

/* dirhost, once the survivors are done: wait (up to 10 s) until a
 * directory on another host leads - the cut one has lost its lease by then
 * and stands by, so the loss was for good - and heal the cut. A run
 * without a failover counts as an error. */
static void heal_dirhost(cfg *g, int host, outcome *oc, uint64_t start) {
  uint64_t end = hpl__now_ns() + 10000000000ull;
  int l;
  uint64_t term = 0;
  while ((l = hpl__hd_leader(hd, 1000, &term)) < 0 || hpl__hd_host(hd, l) == host) {
    if (hpl__now_ns() >= end) break;
    hpl__sleep_until_ns(hpl__now_ns() + 50000000ull);
  }
  if (l < 0 || hpl__hd_host(hd, l) == host) {
    fprintf(stderr, "bench_faults: no directory on another host leads 10 s after host %d's cut\n",
            host);
    oc->other++;
  }
  oc->heal_secs = (double)(hpl__now_ns() - start) / 1e9;
  if (cluster_cmd(g, "uncut", host, NULL)) die("cluster.sh uncut failed");
}

/* After a fault of the leading standby directory (its host cut off, or
 * the process killed): note who leads now, restart a directory whose
 * process is gone (a cut one fenced itself and stands by again), and check
 * that the run's object (a broadcast's; a reduce's target) is known with a
 * complete copy. */
static void ha_after(cfg *g, outcome *oc, int op, const char *id) {
  int l = hpl__hd_leader(hd, 10000, &oc->new_term);
  oc->new_leader_host = l < 0 ? -1 : hpl__hd_host(hd, l);
  if (l < 0) {
    fprintf(stderr, "bench_faults: no directory leads 10 s after the run\n");
    oc->other++;
  }
  for (int d = 0; d < 2; d++)
    if (!hpl__hd_alive(hd, d)) {
      char err[512];
      fprintf(stderr, "bench_faults: directory %d (host %d) had exited; restarted (log %s)\n", d,
              hpl__hd_host(hd, d), hpl__hd_log(hd, d));
      if (hpl__hd_restart(hd, d, err, sizeof err)) die(err);
    }
  hpl_client *c = any_live(g);
  uint64_t size = 0;
  uint32_t copies = 0, complete = 0;
  int inl = 0;
  (void)op;
  int rc = c ? hpl_stat(c, id, 10000, &size, &copies, &complete, &inl) : HPL_ECONN;
  if (rc || (!complete && !inl)) {
    fprintf(stderr, "bench_faults: after the failover %s: %s, %u complete copies of %u\n", id,
            rc ? hpl_strerror(rc) : "known", complete, copies);
    oc->unstated++;
  }
}

/* Pick a node in the middle of the current tree/chain of `id` from the
 * directory's record: one that both receives and sends. */
static int middle_node(int op, const char *id, int fallback) {
  char *text;
  if (hpl_transfers(cs[0], 0, 5000, &text, NULL)) return fallback;
  uint64_t ids[MAXN];
  for (int i = 0; i < MAXN; i++) ids[i] = 0;
  int best = fallback, nup[MAXN] = {0}, ndown[MAXN] = {0};
  (void)op;
  for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
    char kind[16], oid[300];
    unsigned long long seq, t, r, s;
    if (sscanf(l, "%llu %llu %15s %llx %llx %299s", &seq, &t, kind, &r, &s, oid) != 6) continue;
    if (strcmp(kind, "assign") || strcmp(oid, id)) continue;
    for (int i = 0; i < MAXN; i++) {
      if (!cs[i]) continue;
      if (!ids[i]) hpl_counter(cs[i], "node_id", 2000, &ids[i]);
      if (ids[i] == r) nup[i]++;
      if (ids[i] == s) ndown[i]++;
    }
  }
  hpl_free(text);
  for (int i = 1; i < MAXN; i++)
    if (nup[i] && ndown[i]) {
      best = i;
      break;
    }
  return best;
}

/* Run op on `size` bytes; after `kill_frac` of `nofault` seconds, apply
 * fault `kind` to `victims` (victims[0] = -2: pick the middle of the
 * chain): kill them, cut victims[0] off (or stop its store) for `cut_s`
 * seconds, or slow it; or kill the directory for `cut_s` seconds. srckill
 * (a broadcast) kills node 0 when the first receiver completes instead.
 * nofault < 0: no fault at all (the no-fault measurement). */
static outcome run_one(cfg *g, int op, uint64_t size, int run, int kind, int nkill, int *victims,
                       double kill_frac, double nofault, int k_reduce, double cut_s) {
  outcome oc = {0};
  char id[96], pre[16] = "f/";
  if (kind == FK_CORRUPT) /* the object itself, or the reduce streams into the target */
    snprintf(pre, sizeof pre, "%sfc/%d/", op ? "" : "r:", victims[0]);
  snprintf(id, sizeof id, "%s%s/%d/%llu", pre, op ? "reduce" : "bcast", run,
           (unsigned long long)size);
  static char sids[MAXN][96];
  static const char *srcs[MAXN];
  uint64_t sum = 0;
  if (op == 0) {
    uint8_t *d = malloc(size);
    hpl__fill_pattern(d, size, (uint64_t)run);
    sum = hpl__checksum(d, size);
    free(d);
    put_pattern(0, id, size, (uint64_t)run);
  } else {
    for (int i = 0; i < g->hosts; i++) {
      snprintf(sids[i], sizeof sids[i], "%ssrc/%d/%llu/%d", pre, run, (unsigned long long)size, i);
      srcs[i] = sids[i];
      put_source(i, sids[i], size);
    }
    if (g->src_copies) { /* every copy at once: each node sends one, gets one */
      copier cp[MAXN];
      pthread_t ct[MAXN];
      for (int i = 0; i < g->hosts; i++) {
        cp[i] = (copier){.node = (i + 1) % g->hosts, .id = sids[i]};
        pthread_create(&ct[i], NULL, copy_main, &cp[i]);
      }
      for (int i = 0; i < g->hosts; i++) {
        pthread_join(ct[i], NULL);
        if (cp[i].rc) {
          fprintf(stderr, "bench_faults: copy of %s to node %d: %s\n", sids[i], cp[i].node,
                  hpl_strerror(cp[i].rc));
          exit(1);
        }
      }
    }
  }
  int64_t timeout = nofault > 0 ? (int64_t)(nofault * 10 * 1000) + 30000 : 300000;
  if (nofault > 0 && (kind == FK_CUT || kind == FK_PAUSE))
    timeout += (int64_t)(cut_s * 1000) + 15000;
  if (nofault > 0 && kind == FK_SLOW) timeout += (int64_t)(nofault * g->slow_factor * 1000);
  if (nofault > 0 && kind == FK_DIRKILL) timeout += (int64_t)(cut_s * 1000) + 15000;
  if (nofault > 0 && kind == FK_DIRHOST) timeout += 15000;
  if (nofault > 0 && kind == FK_SRCKILL) timeout += 15000;
  oc.kill_secs = -1;
  oc.holder = -1;
  char slow_rate[32] = "";
  if (kind == FK_SLOW) {
    uint64_t bps = 0;
    hpl__parse_rate(g->rate, &bps);
    snprintf(slow_rate, sizeof slow_rate, "%llubit",
             (unsigned long long)((double)bps / g->slow_factor));
  }
  part ps[MAXN];
  pthread_t th[MAXN];
  int np = 0;
  uint64_t start = hpl__now_ns() + 20 * 1000000ull;
  if (op == 0) {
    for (int i = 1; i < g->hosts; i++) {
      ps[np] = (part){.node = i, .op = 0, .id = id, .size = size, .sum = sum, .start_ns = start,
                      .timeout_ms = timeout};
      pthread_create(&th[np], NULL, part_main, &ps[np]);
      np++;
    }
  } else {
    ps[np] = (part){.node = 0, .op = 1, .id = id, .srcs = srcs, .nsrc = g->hosts, .k = k_reduce,
                    .size = size, .start_ns = start, .timeout_ms = timeout};
    pthread_create(&th[np], NULL, part_main, &ps[np]);
    np++;
  }
  watcher w = {0};
  pthread_t wth;
  int watching = kind == FK_SRCKILL && op == 0 && nofault >= 0;
  if (watching) {
    w = (watcher){.id = id, .ps = ps, .np = np, .start_ns = start,
                  .deadline_ns = start + (uint64_t)timeout * 1000000ull};
    pthread_create(&wth, NULL, watch_main, &w);
  }
  uint64_t regs[MAXN];
  if ((kind == FK_DIRKILL || kind == FK_DIRHOST) && nofault >= 0) registrations(g, regs);
  if (nkill > 0 && nofault >= 0 && !watching) {
    hpl__sleep_until_ns(start + (uint64_t)(kill_frac * nofault * 1e9));
    oc.fault_at = (double)(hpl__now_ns() - start) / 1e9;
    for (int v = 0; v < nkill; v++) {
      int victim = victims[v] == -2 ? middle_node(op, op ? "" : id, 1 + (g->hosts - 1) / 2)
                                    : victims[v];
      if (op == 1 && victims[v] == -2) victim = 1 + (g->hosts - 1) / 2;
      victims[v] = victim;
      if (kind == FK_KILL) kill_node(victim);
    }
    oc.fault_done = (double)(hpl__now_ns() - start) / 1e9;
    if (kind == FK_CUT) {
      if (cluster_cmd(g, "cut", victims[0], NULL)) die("cluster.sh cut failed");
      oc.fault_done = (double)(hpl__now_ns() - start) / 1e9;
      hpl__sleep_until_ns(hpl__now_ns() + (uint64_t)(cut_s * 1e9));
      if (cluster_cmd(g, "uncut", victims[0], NULL)) die("cluster.sh uncut failed");
    } else if (kind == FK_SLOW) {
      if (cluster_cmd(g, "ratelimit", victims[0], slow_rate)) die("cluster.sh ratelimit failed");
      oc.fault_done = (double)(hpl__now_ns() - start) / 1e9;
    } else if (kind == FK_PAUSE) {
      if (hpl__lc_signal(lc, victims[0], SIGSTOP)) die("SIGSTOP failed");
      oc.fault_done = (double)(hpl__now_ns() - start) / 1e9;
      hpl__sleep_until_ns(hpl__now_ns() + (uint64_t)(cut_s * 1e9));
      if (hpl__lc_signal(lc, victims[0], SIGCONT)) die("SIGCONT failed");
    } else if (kind == FK_DIRHOST) { /* for good: healed once the survivors are done */
      if (cluster_cmd(g, "cut", victims[0], NULL)) die("cluster.sh cut failed");
      oc.fault_done = (double)(hpl__now_ns() - start) / 1e9;
    } else if (kind == FK_DIRKILL && hd) { /* the leading one of the standby directories */
      int l = hpl__hd_leader(hd, 5000, NULL);
      if (l < 0 || hpl__hd_signal(hd, l, SIGKILL)) die("killing the leading directory failed");
      oc.fault_done = (double)(hpl__now_ns() - start) / 1e9;
      hpl__sleep_until_ns(hpl__now_ns() + (uint64_t)(cut_s * 1e9));
      char err[512];
      if (hpl__hd_restart(hd, l, err, sizeof err)) {
        fprintf(stderr, "bench_faults: restart directory %d: %s\n", l, err);
        exit(1);
      }
    } else if (kind == FK_DIRKILL) {
      if (hpl__lc_signal(lc, -1, SIGKILL)) die("killing the directory failed");
      oc.fault_done = (double)(hpl__now_ns() - start) / 1e9;
      hpl__sleep_until_ns(hpl__now_ns() + (uint64_t)(cut_s * 1e9));
      char err[512];
      if (hpl__lc_restart(lc, -1, err, sizeof err)) {
        fprintf(stderr, "bench_faults: restart the directory: %s\n", err);
        exit(1);
      }
    }
  }
  if (watching) {
    pthread_join(wth, NULL);
    if (w.kill_ns) {
      oc.kill_secs = (double)(w.kill_ns - start) / 1e9;
      oc.fault_done = oc.kill_secs;
      oc.holder = w.holder;
    }
  }
  uint64_t last = start;
  /* survivors first: dirhost heals the cut host only once they are done
   * (then the cut host's own get must finish too) */
  int order[MAXN], no = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < np; i++) {
      int victim = 0;
      for (int v = 0; v < nkill; v++) victim |= ps[i].node == victims[v];
      if (victim == pass) order[no++] = i;
    }
  int healed = kind != FK_DIRHOST || nkill == 0 || nofault < 0;
  for (int oi = 0; oi < np; oi++) {
    int i = order[oi];
    int victim = 0; /* dirkill and srckill: every participant is a survivor */
    for (int v = 0; v < nkill && kind != FK_DIRKILL && kind != FK_SRCKILL; v++)
      victim |= ps[i].node == victims[v];
    if (victim && !healed) {
      heal_dirhost(g, victims[0], &oc, start);
      healed = 1;
    }
    pthread_join(th[i], NULL);
    if (victim && kind == FK_KILL) continue; /* its own get died with it */
    if (ps[i].rc == HPL_ETIMEDOUT) {
      oc.hangs++;
    } else if (ps[i].rc == HPL_ELOST) {
      oc.lost++;
    } else if (ps[i].rc) {
      oc.other++;
      fprintf(stderr, "bench_faults: run %d node %d: %s (%s)\n", run, ps[i].node,
              hpl_strerror(ps[i].rc), hpl_errdetail(cs[ps[i].node]));
    } else if (ps[i].bad) {
      oc.wrong++;
      fprintf(stderr, "bench_faults: run %d node %d: wrong result: %s\n", run, ps[i].node,
              ps[i].why);
    } else {
      oc.completed++;
    }
    oc.unlisted += ps[i].unlisted;
    if (victim) oc.victim_secs = (double)(ps[i].end_ns - start) / 1e9;
    else if (ps[i].end_ns > last) last = ps[i].end_ns;
  }
  oc.secs = (double)(last - start) / 1e9;
  if (!healed) heal_dirhost(g, victims[0], &oc, start); /* a reduce: no participant there */
  if (kind == FK_SLOW && nkill > 0 && nofault >= 0 &&
      cluster_cmd(g, "ratelimit", victims[0], g->rate))
    die("cluster.sh ratelimit (restore) failed");
  /* a lost error is excused only if every copy died: for a broadcast the
   * source (node 0) never dies, for a reduce there is always a spare */
  oc.lost_excused = 0;
  for (int v = 0; kind == FK_KILL && v < nkill; v++) {
    hpl_close(cs[victims[v]]);
    cs[victims[v]] = NULL;
  }
  if (watching && w.kill_ns) {
    hpl_close(cs[0]);
    cs[0] = NULL;
  }
  if ((kind == FK_DIRKILL || kind == FK_DIRHOST) && nofault >= 0) {
    int missing = wait_registered(g, regs, 30000);
    if (missing) {
      fprintf(stderr, "bench_faults: run %d: %d store(s) not registered again 30 s after the"
              " directory's restart\n", run, missing);
      oc.other++;
    }
  }
  if ((kind == FK_DIRKILL || kind == FK_DIRHOST) && nofault >= 0 && hd) ha_after(g, &oc, op, id);
  /* clean up for the next run (node 0's store may be dead: srckill) */
  hpl_client *dc = any_live(g);
  hpl_delete(dc, id, 30000);
  if (op == 1)
    for (int i = 0; i < g->hosts; i++)
      if (alive[i] || g->src_copies) hpl_delete(dc, sids[i], 30000);
  restart_dead(g);
  return oc;
}

/* After the last run every object is deleted, so what a store still has
 * allocated in its pool is leaked. Prints one line per such store (after
 * giving the frees up to 4 s: reduce tasks a restarted directory did not
 * adopt hold their outputs for up to 3 s, HPL__RDTASK_ORPHAN_MS, unless room is
 * wanted) and returns how many there are. */
static int leak_check(const cfg *g) {
  int n = 0;
  for (int i = 0; i < g->hosts; i++) {
    uint64_t alloc = 0, objs = 0;
    if (!cs[i]) continue;
    for (int t = 0; t < 400; t++) {
      if (hpl_counter(cs[i], "pool_allocated", 2000, &alloc) || !alloc) break;
      hpl__sleep_until_ns(hpl__now_ns() + 10000000ull);
    }
    if (!alloc) continue;
    hpl_counter(cs[i], "objects", 2000, &objs);
    printf("  LEAK: node %d still has %llu B of its pool allocated (%llu objects) after every "
           "object was deleted\n", i, (unsigned long long)alloc, (unsigned long long)objs);
    n++;
  }
  return n;
}

/* Untimed no-fault runs of `op` and `size` (ids from 200000 on): on this
 * VM the first write to a pool page a store has not written before costs
 * several microseconds (a 256 MiB stream into a fresh pool: ~0.5 s of
 * system time; then ~0.06 s), so a store's first runs - after the
 * cluster's start, or its own restart after a fault - are slower for
 * reasons that are not the fault being measured. */
static void warm_up(cfg *g, int op, uint64_t size, int k, int n) {
  static int seq = 200000;
  for (int r = 0; r < n; r++) {
    int none[1] = {0};
    run_one(g, op, size, seq++, FK_KILL, 0, none, 0, -1, k, 0);
  }
  restarted = 0;
}

/* After a store restart, before the next timed run: one untimed reduce and
 * one untimed broadcast of the largest size. A restarted store's pool pages
 * are cold; on this VM a page's first write costs several µs, and with
 * every store faulting at once on 2 cores a chain through a restarted store
 * ran at less than half speed (README-bench, Caveats). Warming only the
 * next run's op and size left a 256 MiB reduce after a 64 MiB broadcast
 * cold: 3.6-4.0x no-fault for a fault that costs 1.0x on warm pools. */
static void warm_restarted(cfg *g, int k_reduce) {
  if (!restarted) return;
  uint64_t big = 0;
  for (int i = 0; i < g->nsizes; i++)
    if (g->sizes[i] > big) big = g->sizes[i];
  warm_up(g, 1, big, k_reduce, 1);
  warm_up(g, 0, big, k_reduce, 1);
}

static double median3(cfg *g, int op, uint64_t size, int k) {
  double v[3];
  warm_up(g, op, size, k, 2);
  for (int r = 0; r < 3; r++) {
    int none[1] = {0};
    v[r] = run_one(g, op, size, 100000 + r, FK_KILL, 0, none, 0, -1, k, 0).secs;
  }
  double a = v[0], b = v[1], c = v[2];
  if (a > b) { double t = a; a = b; b = t; }
  if (b > c) { double t = b; b = c; c = t; }
  if (a > b) { double t = a; a = b; b = t; }
  return b;
}

/* The p90 index in a sorted array of n > 0 values (as the overall summary). */
static int p90_at(int n) { return (n * 9) / 10 < n ? (n * 9) / 10 : n - 1; }

/* One random run, kept for the summaries. */
typedef struct runrec {
  int kf, k;             /* fault kind index, size index */
  int op;                /* 0 bcast, 1 reduce */
  double secs, nf, ratio;
  double frac;           /* the fault's moment, as a fraction of the no-fault time */
  double acted;          /* when the fault had acted (outcome.fault_done, never before the
                            drawn moment), as a fraction of the no-fault time */
} runrec;

/* A reduce that loses a contributing source at fraction `acted` of its
 * no-fault time `nofault` (when the fault had acted: a cut or a slowdown
 * acts when its command is done, not at the drawn moment) must recompute
 * the result from byte 0 without it: the sink receives the bytes it had
 * again, so even with instant detection it needs about (1 + acted) x
 * no-fault. 0 where that does not apply (broadcasts; dirkill and srckill
 * lose no source). */
static double reduce_floor(const runrec *r) {
  if (r->op != 1 || !((1 << r->kf) & (FK_KILL | FK_CUT | FK_PAUSE | FK_SLOW | FK_DIRHOST)))
    return 0;
  return (1 + r->acted) * r->nf;
}

/* The target: survivors' time <= 1.3 x no-fault + 0.5 s. */
static double target_limit(double nofault) { return 1.3 * nofault + 0.5; }

/* --faults dirhost: etcd in the switch namespace (on BASE.254, so a cut
 * host loses it with everything else), and two standby directories, on
 * the last two hosts (neither the broadcast's source, node 0, nor the
 * receivers' only host), with the cluster's secret; the stores get both
 * addresses (o->dir_list). The work directory is made here when none is
 * given (the directories' logs go there too), and o points at it. */
static int ha_start(cfg *g, hpl__lc_opts *o, char *work, size_t wlen) {
  char err[512], secret[300], etcd_ip[64];
  if (g->work_dir) {
    snprintf(work, wlen, "%s", g->work_dir);
    mkdir(work, 0700);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(work, wlen, "%s/hoplite-faults-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(work)) die("mkdtemp failed");
    o->remove_work_dir = 1;
  }
  o->work_dir = work;
  snprintf(secret, sizeof secret, "%s/cluster.secret", work);
  if (access(secret, F_OK) != 0 && hpl__auth_create(secret, err, sizeof err)) die(err);
  snprintf(etcd_ip, sizeof etcd_ip, "%s", g->addrs[0]);
  char *dot = strrchr(etcd_ip, '.');
  if (!dot) die("--addrs: not IPv4 addresses");
  snprintf(dot + 1, sizeof etcd_ip - (size_t)(dot + 1 - etcd_ip), "254");
  hpl__hd_opts h = {.ndirs = 2,
                    .work_dir = work,
                    .secret = secret,
                    .netns_prefix = g->netns,
                    .host = {g->hosts - 1, g->hosts - 2},
                    .host_addr = {g->addrs[g->hosts - 1], g->addrs[g->hosts - 2]},
                    .etcd_ip = etcd_ip,
                    .etcd_port = HA_ETCD_PORT,
                    .dir_port = HA_DIR_PORT,
                    .lease_ms = g->lease_ms ? g->lease_ms : 1000,
                    .dir_args = o->dir_args,
                    .log_level = o->log_level};
  if (hpl__hd_start(&h, &hd, err, sizeof err)) {
    fprintf(stderr, "bench_faults: standby directories: %s\n", err);
    return 1;
  }
  o->dir_list = hpl__hd_dir_list(hd);
  return 0;
}

int main(int argc, char **argv) {
  cfg g = {.hosts = 8, .runs = 50, .two_kill = 0.3, .rate = "none", .seed = 0,
           .slow_factor = 10, .faults = FK_KILL, .pause_min = 1, .pause_max = 8, .dir_down = 1.0};
  const char *sizes = "1M,16M,64M,256M", *ops = "bcast,reduce", *addrs = NULL, *out = NULL;
  const char *faults = "kill";
  static struct option opts[] = {
      {"runs", 1, 0, 'r'},      {"hosts", 1, 0, 'n'},     {"sizes", 1, 0, 's'},
      {"size", 1, 0, 's'},      {"ops", 1, 0, 'o'},       {"two-kill", 1, 0, 't'},
      {"seed", 1, 0, 'S'},      {"netns", 1, 0, 'N'},     {"addrs", 1, 0, 'a'},
      {"rate", 1, 0, 'R'},      {"store-args", 1, 0, 'A'}, {"out", 1, 0, 'O'},
      {"scenario", 1, 0, 'c'},  {"faults", 1, 0, 'f'},    {"slow-factor", 1, 0, 'F'},
      {"cluster-sh", 1, 0, 'C'}, {"pause-s", 1, 0, 'P'},     {"dir-down", 1, 0, 'D'},
      {"work-dir", 1, 0, 'W'},      {"src-copies", 0, 0, 'K'}, {"lease-ms", 1, 0, 'L'},
      {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
      case 'r': g.runs = atoi(optarg); break;
      case 'n': g.hosts = atoi(optarg); break;
      case 's': sizes = optarg; break;
      case 'o': ops = optarg; break;
      case 't': g.two_kill = atof(optarg); break;
      case 'S': g.seed = strtoull(optarg, NULL, 10); break;
      case 'N': g.netns = optarg; break;
      case 'a': addrs = optarg; break;
      case 'R': g.rate = optarg; break;
      case 'A': g.store_args = optarg; break;
      case 'O': out = optarg; break;
      case 'c': g.scenario = optarg; break;
      case 'f': faults = optarg; break;
      case 'F': g.slow_factor = atof(optarg); break;
      case 'C': g.cluster_sh = optarg; break;
      case 'P':
        if (sscanf(optarg, "%lf,%lf", &g.pause_min, &g.pause_max) != 2 || g.pause_min <= 0 ||
            g.pause_max < g.pause_min)
          die("--pause-s takes MIN,MAX in seconds, 0 < MIN <= MAX (like 1,8)");
        break;
      case 'W': g.work_dir = optarg; break;
      case 'K': g.src_copies = 1; break;
      case 'L': g.lease_ms = (unsigned)atoi(optarg); break;
      case 'D':
        g.dir_down = atof(optarg);
        if (g.dir_down < 0) die("--dir-down takes seconds, at least 0");
        break;
      default: die("see the comment at the top of bench/bench_faults.c for usage");
    }
  }
  if (g.hosts < 3 || g.hosts > MAXN) die("--hosts must be 3..32");
  g.faults = 0;
  char *fl = strdup(faults);
  for (char *t = strtok(fl, ","); t; t = strtok(NULL, ",")) {
    int k = 0;
    while (k < NFK && strcmp(t, fk_names[k])) k++;
    if (k == NFK)
      die("--faults takes kill, cut, slow, pause, dirkill, srckill, corrupt and dirhost, "
          "comma-separated");
    g.faults |= 1 << k;
  }
  free(fl);
  if (!g.faults) die("--faults names no fault kind");
  if ((g.faults & (FK_CUT | FK_SLOW | FK_DIRHOST)) && (!g.netns || !g.cluster_sh))
    die("--faults cut, slow and dirhost need the emulated cluster: --netns, --addrs and "
        "--cluster-sh");
  uint64_t bps;
  if ((g.faults & FK_SLOW) && (hpl__parse_rate(g.rate, &bps) || g.slow_factor < 1.5))
    die("--faults slow needs --rate (like 1gbit) and --slow-factor of at least 1.5");
  g.do_bcast = strstr(ops, "bcast") != NULL;
  g.do_reduce = strstr(ops, "reduce") != NULL;
  char *sz = strdup(sizes);
  for (char *t = strtok(sz, ","); t && g.nsizes < 16; t = strtok(NULL, ","))
    if (hpl__parse_size(t, &g.sizes[g.nsizes++]) || g.sizes[g.nsizes - 1] % 4)
      die("bad size (sizes must be multiples of 4)");
  free(sz);
  if (!g.seed) g.seed = hpl__random_u64();
  if (g.netns) {
    if (!addrs) die("--netns needs --addrs");
    char *a = strdup(addrs);
    int n = 0;
    for (char *t = strtok(a, ","); t && n < MAXN; t = strtok(NULL, ",")) g.addrs[n++] = t;
    if (n < g.hosts) die("--addrs lists fewer hosts than --hosts");
  }
  if (out && !(g.out = fopen(out, "a"))) die("cannot open --out");
  uint64_t maxs = 0;
  for (int k = 0; k < g.nsizes; k++)
    if (g.sizes[k] > maxs) maxs = g.sizes[k];
  char sargs[512];
  snprintf(sargs, sizeof sargs, "--stall-timeout-ms 3000 %s", g.store_args ? g.store_args : "");
  hpl__lc_opts o = {.nodes = g.hosts,
                   .memory = 4 * maxs + (128ull << 20),
                   .netns_prefix = g.netns,
                   .host_addrs = g.netns ? g.addrs : NULL,
                   .store_args = sargs,
                   /* the clean-up after a run deletes every node's sources from one */
                   .dir_args = "--delete-any",
                   .log_level = getenv("HPL_BENCH_LOG_LEVEL") ? getenv("HPL_BENCH_LOG_LEVEL") : "warn",
                   .work_dir = g.work_dir,
                   .timeout_ms = 20000};
  char err[512];
  char ha_work[256] = "";
  if (g.faults & FK_DIRHOST) {
    if (ha_start(&g, &o, ha_work, sizeof ha_work)) return 1;
    printf("standby directories: etcd %s, directories %s (leader key %s)\n",
           hpl__hd_etcd_url(hd), hpl__hd_dir_list(hd), hpl__hd_leader_key(hd));
  }
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_faults: %s\n", err);
    hpl__hd_stop(hd);
    return 1;
  }
  for (int i = 0; i < g.hosts; i++) {
    if (hpl_connect(hpl__lc_socket(lc, i), 10000, &cs[i])) die("connect");
    alive[i] = 1;
  }
  if (g.faults & FK_CORRUPT) corrupt_setup(&g);
  printf("bench_faults: %d hosts%s%s, seed %llu, logs in %s\n", g.hosts, g.netns ? " (emulated, rate " : "",
         g.netns ? g.rate : "", (unsigned long long)g.seed, hpl__lc_work_dir(lc));
  if (g.netns) printf(")\n");
  if (g.src_copies) printf("reduce sources: node i+1 holds a copy of node i's (--src-copies)\n");
  fflush(stdout);
  int status = 0;

  if (g.scenario) {
    int op = !strcmp(g.scenario, "reduce-subset");
    if (!op && strcmp(g.scenario, "bcast-midchain")) die("unknown --scenario");
    uint64_t size = g.sizes[0];
    double nf = median3(&g, op, size, g.hosts - 1);
    double frac = op ? 0.4 : 0.5;
    double ratios[5];
    int bad = 0;
    for (int r = 0; r < 3; r++) {
      int victims[1] = {-2};
      if (restarted) warm_up(&g, op, size, g.hosts - 1, 1);
      outcome oc = run_one(&g, op, size, r, FK_KILL, 1, victims, frac, nf, g.hosts - 1, 0);
      ratios[r] = oc.secs / nf;
      printf("%s %llu B: killed node %d at %.0f%%: %.3f s vs %.3f s no-fault = %.2fx; "
             "completed %d, wrong %d, lost %d, hangs %d\n",
             g.scenario, (unsigned long long)size, victims[0], frac * 100, oc.secs, nf, ratios[r],
             oc.completed, oc.wrong, oc.lost, oc.hangs);
      bad |= oc.wrong || oc.hangs || oc.lost || oc.other;
      if (g.out)
        fprintf(g.out, "%s\t%llu\t%d\t%.4f\t%.4f\t%.3f\t%d\t%d\t%d\t%d\n", g.scenario,
                (unsigned long long)size, g.hosts, oc.secs, nf, ratios[r], oc.completed, oc.wrong,
                oc.lost, oc.hangs);
    }
    qsort(ratios, 3, sizeof *ratios, hpl__bench_cmp_double);
    printf("%s: median time over no-fault %.2fx (runs: %.2f %.2f %.2f)\n", g.scenario, ratios[1],
           ratios[0], ratios[1], ratios[2]);
    status = bad;
  } else {
    /* no-fault times */
    /* srckill runs broadcasts even with --ops reduce */
    double nf[2][16];
    for (int op = 0; op < 2; op++)
      for (int k = 0; k < g.nsizes; k++) {
        if ((op == 0 && !g.do_bcast && !(g.faults & FK_SRCKILL)) || (op == 1 && !g.do_reduce))
          continue;
        nf[op][k] = median3(&g, op, g.sizes[k], g.hosts - 1);
        printf("no-fault %-6s %10llu B: %.3f s\n", op ? "reduce" : "bcast",
               (unsigned long long)g.sizes[k], nf[op][k]);
      }
    int tot_runs = 0, tot_done = 0, tot_hang = 0, tot_wrong = 0, tot_lost = 0, tot_other = 0;
    int tot_unlisted = 0;
    int runs_ok = 0;
    double *ratio = calloc((size_t)g.runs, sizeof *ratio);
    runrec *rec = calloc((size_t)g.runs, sizeof *rec);
    double *kratio[NFK];
    int kn[NFK] = {0};
    for (int f = 0; f < NFK; f++) kratio[f] = calloc((size_t)g.runs, sizeof **kratio);
    for (int run = 0; run < g.runs; run++) {
      int op = g.do_bcast && g.do_reduce ? (int)(rnd(&g.seed) % 2) : g.do_reduce;
      int k = (int)(rnd(&g.seed) % (uint64_t)g.nsizes);
      int kinds[NFK], nk = 0;
      for (int f = 0; f < NFK; f++)
        if (g.faults & (1 << f)) kinds[nk++] = 1 << f;
      int kind = kinds[rnd(&g.seed) % (uint64_t)nk];
      double cut_s = 0.5 + 2.5 * (double)(rnd(&g.seed) % 1000) / 1000.0;
      if (kind == FK_PAUSE)
        cut_s = g.pause_min +
                (g.pause_max - g.pause_min) * (double)(rnd(&g.seed) % 1000) / 1000.0;
      if (kind == FK_DIRKILL) cut_s = g.dir_down;
      int nkill = kind == FK_KILL && (double)(rnd(&g.seed) % 1000) / 1000.0 < g.two_kill ? 2 : 1;
      if (kind == FK_CORRUPT) nkill = 0; /* nothing happens at a time: the victim lies throughout */
      int victims[2];
      victims[0] = 1 + (int)(rnd(&g.seed) % (uint64_t)(g.hosts - 1));
      do victims[1] = 1 + (int)(rnd(&g.seed) % (uint64_t)(g.hosts - 1));
      while (victims[1] == victims[0]);
      double frac = 0.1 + 0.8 * (double)(rnd(&g.seed) % 1000) / 1000.0;
      if (kind == FK_DIRKILL) victims[0] = -1;
      uint64_t old_term = 0;
      if (kind == FK_DIRHOST) { /* the leading directory's host */
        int l = hpl__hd_leader(hd, 10000, &old_term);
        if (l < 0) die("no directory leads before a dirhost run");
        victims[0] = hpl__hd_host(hd, l);
      }
      if (kind == FK_SRCKILL) {
        op = 0; /* broadcast only */
        victims[0] = 0;
      }
      int kr = g.hosts - (nkill ? nkill : 1); /* spares for every victim (a liar's too) */
      warm_restarted(&g, kr);
      uint64_t caught = kind == FK_CORRUPT ? corrupt_caught(&g) : 0;
      outcome oc =
          run_one(&g, op, g.sizes[k], run, kind, nkill, victims, frac, nf[op][k], kr, cut_s);
      ratio[run] = oc.secs / nf[op][k];
      int kf = fk_index(kind);
      kratio[kf][kn[kf]++] = ratio[run];
      rec[run] = (runrec){.kf = kf, .k = k, .op = op, .secs = oc.secs, .nf = nf[op][k],
                          .ratio = ratio[run], .frac = frac,
                          .acted = oc.fault_done / nf[op][k]};
      oc.lost += oc.unstated; /* an object no longer known with a complete copy */
      int ok = oc.hangs == 0 && oc.wrong == 0 && oc.lost == 0 && oc.other == 0;
      runs_ok += ok;
      tot_runs++;
      tot_done += oc.completed;
      tot_hang += oc.hangs;
      tot_wrong += oc.wrong;
      tot_lost += oc.lost;
      tot_other += oc.other;
      tot_unlisted += oc.unlisted;
      char vs[32], extra[160] = "";
      double param = 0; /* the TSV's last column */
      if (nkill == 2) snprintf(vs, sizeof vs, "kill:%d,%d", victims[0], victims[1]);
      else if (kind == FK_DIRKILL) snprintf(vs, sizeof vs, "dirkill:dir");
      else snprintf(vs, sizeof vs, "%s:%d", fk_names[fk_index(kind)], victims[0]);
      if (kind == FK_CUT || kind == FK_PAUSE || kind == FK_DIRKILL) param = cut_s;
      else if (kind == FK_SLOW) param = g.slow_factor;
      else if (kind == FK_SRCKILL) param = oc.kill_secs;
      if (op == 1 && kind == FK_CUT)
        snprintf(extra, sizeof extra, " (cut %.1f s; cut by %.3f s)", cut_s, oc.fault_done);
      else if (op == 1 && kind == FK_SLOW)
        snprintf(extra, sizeof extra, " (slowed %.0fx; tc ran %.2f-%.2f s)", g.slow_factor,
                 oc.fault_at, oc.fault_done);
      else if (kind == FK_CORRUPT)
        snprintf(extra, sizeof extra, " (%llu bad units caught)",
                 (unsigned long long)(corrupt_caught(&g) - caught));
      else if (kind == FK_CUT)
        snprintf(extra, sizeof extra,
                 " (cut %.1f s; cut by %.3f s; the cut host itself done at %.3f s)", cut_s,
                 oc.fault_done, oc.victim_secs);
      else if (kind == FK_SLOW)
        snprintf(extra, sizeof extra,
                 " (slowed %.0fx; tc ran %.2f-%.2f s; the slow host itself done at %.3f s)",
                 g.slow_factor, oc.fault_at, oc.fault_done, oc.victim_secs);
      else if (op == 0 && kind == FK_PAUSE)
        snprintf(extra, sizeof extra, " (stopped %.1f s; the stopped store itself done at %.3f s)",
                 cut_s, oc.victim_secs);
      else if (kind == FK_PAUSE)
        snprintf(extra, sizeof extra, " (stopped %.1f s)", cut_s);
      else if (kind == FK_DIRKILL && hd)
        snprintf(extra, sizeof extra, " (leading directory down %.1f s; host %d leads, term %llu)",
                 cut_s, oc.new_leader_host, (unsigned long long)oc.new_term);
      else if (kind == FK_DIRKILL)
        snprintf(extra, sizeof extra, " (directory down %.1f s)", cut_s);
      else if (kind == FK_DIRHOST)
        snprintf(extra, sizeof extra,
                 " (leader's host %d cut by %.3f s, term %llu; host %d leads after, term %llu%s;"
                 " healed at %.3f s, host %d itself done at %.3f s)",
                 victims[0], oc.fault_done, (unsigned long long)old_term, oc.new_leader_host,
                 (unsigned long long)oc.new_term,
                 oc.new_term > old_term && oc.new_leader_host != victims[0] ? "" : ": no failover",
                 oc.heal_secs, victims[0], op == 0 ? oc.victim_secs : 0.0);
      else if (kind == FK_SRCKILL && oc.kill_secs >= 0)
        snprintf(extra, sizeof extra,
                 " (node 0 killed at %.3f s, when node %d held the first complete copy)",
                 oc.kill_secs, oc.holder);
      else if (kind == FK_SRCKILL)
        snprintf(extra, sizeof extra, " (node 0 not killed: no receiver completed)");
      printf("run %2d %-6s %10llu B %-11s at %3.0f%%: %.3f s (%.2fx no-fault) %s "
             "[done %d wrong %d lost %d hang %d]%s%s\n",
             run, op ? "reduce" : "bcast", (unsigned long long)g.sizes[k], vs, frac * 100, oc.secs,
             ratio[run], ok ? "ok" : "FAILED", oc.completed, oc.wrong, oc.lost, oc.hangs, extra,
             oc.unlisted ? " (sources unknown: the restarted directory forgot the reduce)" : "");
      fflush(stdout);
      double lim = target_limit(nf[op][k]);
      if (g.out)
        fprintf(g.out, "run\t%d\t%s\t%llu\t%s\t%.2f\t%.4f\t%.3f\t%d\t%d\t%d\t%d"
                "\t%s\t%.4f\t%.4f\t%.4f\t%.3f\t%.4f\n", run,
                op ? "reduce" : "bcast", (unsigned long long)g.sizes[k], vs, frac, oc.secs,
                ratio[run], oc.completed, oc.wrong, oc.lost, oc.hangs, fk_names[kf], nf[op][k], lim,
                oc.secs - lim, param, oc.fault_done);
    }
    qsort(ratio, (size_t)g.runs, sizeof *ratio, hpl__bench_cmp_double);
    printf("\nSUMMARY: runs %d, completed %d (runs), survivors done %d, hangs %d, wrong bytes %d, "
           "lost-object errors %d (none excused: a source or spare always survives), other errors %d;"
           " time over no-fault: median %.2fx, p90 %.2fx, max %.2fx\n",
           tot_runs, runs_ok, tot_done, tot_hang, tot_wrong, tot_lost, tot_other,
           ratio[g.runs / 2], ratio[p90_at(g.runs)], ratio[g.runs - 1]);
    if (tot_unlisted)
      printf("  %d reduce(s) finished while the directory was down and the restarted directory did"
             " not know them (hpl_reduce_sources: no such reduce); their bytes were checked"
             " against any %s of the sources\n", tot_unlisted, "k");
    if (g.out)
      fprintf(g.out, "summary\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\n", tot_runs, runs_ok,
              tot_hang, tot_wrong, tot_lost, tot_other, ratio[g.runs / 2], ratio[p90_at(g.runs)],
              ratio[g.runs - 1]);
    for (int f = 0; f < NFK; f++) {
      if (!kn[f]) continue;
      qsort(kratio[f], (size_t)kn[f], sizeof **kratio, hpl__bench_cmp_double);
      printf("  %-7s runs %2d: survivors' time over no-fault median %.2fx, p90 %.2fx, max %.2fx\n",
             fk_names[f], kn[f], kratio[f][kn[f] / 2], kratio[f][p90_at(kn[f])],
             kratio[f][kn[f] - 1]);
    }
    /* per kind and size (both ops together): the ratio, and the target */
    printf("per fault kind and size (target: survivors' time <= 1.3 x no-fault + 0.5 s):\n");
    double *rs = calloc((size_t)g.runs, sizeof *rs);
    int missed = 0;
    for (int f = 0; f < NFK; f++)
      for (int k = 0; k < g.nsizes; k++) {
        int n = 0, over = 0, floored = 0, over_floor = 0;
        double worst = -1e300;
        for (int r = 0; r < g.runs; r++) {
          if (rec[r].kf != f || rec[r].k != k) continue;
          rs[n++] = rec[r].ratio;
          double ex = rec[r].secs - target_limit(rec[r].nf), floor_s = reduce_floor(&rec[r]);
          over += ex > 0;
          if (ex > worst) worst = ex;
          /* over the target, but a reduce whose floor alone is over it */
          if (ex > 0 && floor_s > 0 && floor_s > target_limit(rec[r].nf)) {
            floored++;
            over_floor += rec[r].secs > floor_s + 0.5;
          }
        }
        if (!n) continue;
        qsort(rs, (size_t)n, sizeof *rs, hpl__bench_cmp_double);
        missed += over;
        printf("  %-7s %10llu B runs %3d: median %.2fx, p90 %.2fx; over the limit %d, worst "
               "time - limit %+.3f s",
               fk_names[f], (unsigned long long)g.sizes[k], n, rs[n / 2], rs[p90_at(n)], over,
               worst);
        if (floored)
          printf(" (%d of them reduces faulted so late that (1 + the moment the fault acted) x"
                 " no-fault is over the limit; %d of those over that floor + 0.5 s)", floored, over_floor);
        printf("\n");
        if (g.out)
          fprintf(g.out, "kindsize\t%s\t%llu\t%d\t%.3f\t%.3f\t%d\t%.4f\n", fk_names[f],
                  (unsigned long long)g.sizes[k], n, rs[n / 2], rs[p90_at(n)], over, worst);
      }
    printf("  runs over the target: %d of %d\n", missed, g.runs);
    free(rs);
    int leaks = leak_check(&g);
    if (g.out) fprintf(g.out, "leaks\t%d\n", leaks);
    status = tot_hang || tot_wrong || tot_lost || tot_other;
    free(ratio);
    free(rec);
    for (int f = 0; f < NFK; f++) free(kratio[f]);
  }
  for (int i = 0; i < g.hosts; i++)
    if (cs[i]) hpl_close(cs[i]);
  if (hpl__lc_check(lc, err, sizeof err)) {
    fprintf(stderr, "bench_faults: %s\n", err);
    status = 1;
  }
  hpl__lc_stop(lc);
  hpl__hd_stop(hd);
  if (ha_work[0]) rmdir(ha_work); /* (lc removed what it held) */
  return status;
}
