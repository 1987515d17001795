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
 *   bench_faults --scenario bcast-midchain|bcast-midchain-pause|reduce-subset --size 256M [...]
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
 * of N-1 of N sources at 40%; bcast-midchain-pause stops (SIGSTOP) the
 * broadcast's mid-chain receiver at 50% for the least --pause-s seconds,
 * then lets it go on. Each prints survivors' time over no-fault.
 *
 * Output: one line per run and a summary: runs, completed, hangs (must be
 * 0), wrong bytes (must be 0), lost-object errors (with whether every copy
 * had died, which is the only excuse), time over the no-fault time; then
 * per fault kind the median, p90 and max of that ratio, and per fault kind
 * and size the median and p90 and the target check: survivors'
 * time <= 1.3 x no-fault + 0.5 s, + 1 s for dirhost (runs over it, and the
 * worst time minus that limit; for reduces that lose a source so late that
 * even (1 + the moment the fault acted) x no-fault (+ the lease for
 * dirhost) is over the limit - the
 * sink has to receive again what it had, so no exact reduce can do better -
 * how many are also over that floor + the same slack); and a LEAK line for each store that still has
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
 * HANG ACTED DEPTH CLOSE (DEPTH: the victim's hops from node 0, 0 unknown;
 * CLOSE: a kill's, s from the SIGKILL until the victim's connections
 * closed, -1 not measured, 0 for a pause). */
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
/* This file: the options and main (start the cluster, run, stop); the
 * rest of the program is in bench_faults_*.c (bench_faults.h lists them). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hoplite.h"
#include "util.h"
#include "bench_faults.h"

void hpl__bf_die(const char *m) {
  fprintf(stderr, "bench_faults: %s\n", m);
  exit(1);
}

int main(int argc, char **argv) {
  hpl__bf_cfg g = {.hosts = 8, .runs = 50, .two_kill = 0.3, .rate = "none", .seed = 0,
           .slow_factor = 10, .faults = HPL__FK_KILL, .pause_min = 1, .pause_max = 8, .dir_down = 1.0};
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
          hpl__bf_die("--pause-s takes MIN,MAX in seconds, 0 < MIN <= MAX (like 1,8)");
        break;
      case 'W': g.work_dir = optarg; break;
      case 'K': g.src_copies = 1; break;
      case 'L': g.lease_ms = (unsigned)atoi(optarg); break;
      case 'D':
        g.dir_down = atof(optarg);
        if (g.dir_down < 0) hpl__bf_die("--dir-down takes seconds, at least 0");
        break;
      default: hpl__bf_die("see the comment at the top of bench/bench_faults.c for usage");
    }
  }
  if (g.hosts < 3 || g.hosts > HPL__BF_MAXN) hpl__bf_die("--hosts must be 3..32");
  g.faults = 0;
  char *fl = strdup(faults);
  for (char *t = strtok(fl, ","); t; t = strtok(NULL, ",")) {
    int k = 0;
    while (k < HPL__BF_NFK && strcmp(t, hpl__bf_fk_names[k])) k++;
    if (k == HPL__BF_NFK)
      hpl__bf_die("--faults takes kill, cut, slow, pause, dirkill, srckill, corrupt and dirhost, "
          "comma-separated");
    g.faults |= 1 << k;
  }
  free(fl);
  if (!g.faults) hpl__bf_die("--faults names no fault kind");
  if ((g.faults & (HPL__FK_CUT | HPL__FK_SLOW | HPL__FK_DIRHOST)) && (!g.netns || !g.cluster_sh))
    hpl__bf_die("--faults cut, slow and dirhost need the emulated cluster: --netns, --addrs and "
        "--cluster-sh");
  uint64_t bps;
  if ((g.faults & HPL__FK_SLOW) && (hpl__parse_rate(g.rate, &bps) || g.slow_factor < 1.5))
    hpl__bf_die("--faults slow needs --rate (like 1gbit) and --slow-factor of at least 1.5");
  g.do_bcast = strstr(ops, "bcast") != NULL;
  g.do_reduce = strstr(ops, "reduce") != NULL;
  char *sz = strdup(sizes);
  for (char *t = strtok(sz, ","); t && g.nsizes < 16; t = strtok(NULL, ","))
    if (hpl__parse_size(t, &g.sizes[g.nsizes++]) || g.sizes[g.nsizes - 1] % 4)
      hpl__bf_die("bad size (sizes must be multiples of 4)");
  free(sz);
  if (!g.seed) g.seed = hpl__random_u64();
  if (g.netns) {
    if (!addrs) hpl__bf_die("--netns needs --addrs");
    char *a = strdup(addrs);
    int n = 0;
    for (char *t = strtok(a, ","); t && n < HPL__BF_MAXN; t = strtok(NULL, ",")) g.addrs[n++] = t;
    if (n < g.hosts) hpl__bf_die("--addrs lists fewer hosts than --hosts");
  }
  if (out && !(g.out = fopen(out, "a"))) hpl__bf_die("cannot open --out");
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
  if (g.faults & HPL__FK_DIRHOST) {
    if (hpl__bf_ha_start(&g, &o, ha_work, sizeof ha_work)) return 1;
    printf("standby directories: etcd %s, directories %s (leader key %s)\n",
           hpl__hd_etcd_url(hpl__bf_hd), hpl__hd_dir_list(hpl__bf_hd), hpl__hd_leader_key(hpl__bf_hd));
  }
  if (hpl__lc_start(&o, &hpl__bf_lc, err, sizeof err)) {
    fprintf(stderr, "bench_faults: %s\n", err);
    hpl__hd_stop(hpl__bf_hd);
    return 1;
  }
  for (int i = 0; i < g.hosts; i++) {
    if (hpl_connect(hpl__lc_socket(hpl__bf_lc, i), 10000, &hpl__bf_cs[i])) hpl__bf_die("connect");
    hpl__bf_alive[i] = 1;
  }
  if (g.faults & HPL__FK_CORRUPT) hpl__bf_corrupt_setup(&g);
  printf("bench_faults: %d hosts%s%s, seed %llu, logs in %s\n", g.hosts, g.netns ? " (emulated, rate " : "",
         g.netns ? g.rate : "", (unsigned long long)g.seed, hpl__lc_work_dir(hpl__bf_lc));
  if (g.netns) printf(")\n");
  if (g.src_copies) printf("reduce sources: node i+1 holds a copy of node i's (--src-copies)\n");
  fflush(stdout);
  int status = 0;
  if (g.scenario)
    status = hpl__bf_scenario(&g);
  else
    status = hpl__bf_random_runs(&g);
  for (int i = 0; i < g.hosts; i++)
    if (hpl__bf_cs[i]) hpl_close(hpl__bf_cs[i]);
  if (hpl__lc_check(hpl__bf_lc, err, sizeof err)) {
    fprintf(stderr, "bench_faults: %s\n", err);
    status = 1;
  }
  hpl__lc_stop(hpl__bf_lc);
  hpl__hd_stop(hpl__bf_hd);
  if (ha_work[0]) rmdir(ha_work); /* (lc removed what it held) */
  return status;
}
