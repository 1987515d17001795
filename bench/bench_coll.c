/* bench_coll.c - hoplite collectives on a cluster of real processes, on
 * loopback or on the emulated hosts of bench/cluster.sh.
 *
 *   bench_coll --op bcast|reduce|allreduce|allreduce-rs|shuffle
 *              [--sizes 1K,1M,64M] [--hosts N] [--reps R]
 *              [--netns PREFIX --addrs A0,A1,...] [--rate 1gbit|none]
 *              [--memory BYTES] [--store-args "..."] [--dir-args "..."]
 *              [--impl NAME] [--no-header] [--out FILE] [--extra-out FILE]
 *              [--procs] [--put-timed] [--pace] [--overlap] [--pin] [--server-nice N] [--store-arg WORD]
 *              [--no-control-prio] [--dir-host K]
 *
 * Timing, as bench/README-bench.md: the driver picks a start time a few ms
 * ahead on CLOCK_MONOTONIC (one clock for every namespace), every
 * participant sleeps until it (clock_nanosleep, absolute), runs its part,
 * and reads the clock when done; a sample is the latest finish minus the
 * start. The driver (this process's main thread) stays out of the timed
 * part unless it puts: it does not wake at the start, reads /proc/stat
 * before it, and is woken only by the last participant to finish. Bytes
 * are verified at every participant in every repetition, after the timed
 * part. One warm-up repetition is not counted.
 *
 * bcast: node 0 holds a sealed object; nodes 1..N-1 get it concurrently.
 * The object is deleted between repetitions so each one broadcasts again.
 * With --put-timed the put is part of the sample: the receivers ask for the
 * object 5 ms before the start (their gets wait for it), node 0's client
 * puts it at the start.
 *
 * Participants are threads of this process by default. With --procs each
 * node's participant is a process of its own (this program re-run as
 * `bench_coll --worker I --socket PATH [--netns PREFIX]`, inside host I's
 * namespace, driven through a pipe), as task workers are: a thread of one
 * process shares that process's wake-ups and connections, which hides what
 * a separate process pays. The put (node 0) stays in this process, itself
 * a separate process from every receiver, whose main thread joins host 0's
 * namespace once the cluster and the workers are started.
 *
 * --store-arg WORD (repeatable) appends WORD to the stores' arguments, so a
 * mode given as one string of words (run_coll.sh --extra-mode) can add one,
 * e.g. --store-arg --integrity=fast.
 *
 * --pace tells every store its link's rate (--link-rate, the --rate given
 * here), so its streams leave paced (store/dataport.c); the impl name
 * gets "+paced".
 *
 * --pin (with --procs; or HPL_BENCH_PIN=1, which mpi_coll and gloo_coll
 * read too) runs worker i, and node 0's put, on CPU i mod the CPUs, as a
 * launcher binds one rank per core; the impl name gets "+pin". The hosts
 * are namespaces of one machine: unpinned, the workers woken at the start
 * time all land on the CPU whose timer woke them (bench/results/
 * small-objects-issue42h-2026-11-30.md).
 *
 * --no-control-prio leaves every socket of the run unmarked
 * (HOPLITE_CONTROL_PRIO=0, docs/operations.md): control packets wait in the
 * hosts' queues behind bulk bytes, as before 2026-11-30; the impl name gets
 * "+noprio".
 *
 * --dir-host K (with --netns) runs the directory on emulated host K
 * instead of host 0. K from --hosts on is a host with no store and no
 * worker, so the directory's link carries no object bytes (bring the
 * cluster up with one host more); the impl name then gets "+dirhost".
 *
 * --overlap (shuffle): every node submits its gets asynchronously before
 * its puts (bench_shuffle.c), as a task runtime with the async API would;
 * the impl name gets "+overlap".
 *
 * --server-nice N sets the nice value of every thread of the directory and
 * the stores once they are up (as a unit's Nice= would; below 0 needs
 * CAP_SYS_NICE): an experiment on who gets a CPU first when every
 * participant wakes at once on a machine with fewer CPUs than processes.
 *
 * reduce: every node holds a source (f32, small integers so any order sums
 * exactly); node 0 reduces them (sum) into a target and gets it.
 * allreduce: every node calls hpl_allreduce with the same arguments.
 * allreduce-rs (an experiment towards a reduce-scatter + allgather
 * allreduce, built from the public API): node i range-reduces slice i of
 * the sources (hpl_reduce_range; it starts that reduce, so the slice is
 * produced at node i), gets all slices (hpl_get_many), and assembles them
 * into an object of its own (hpl_create, one copy, hpl_seal). The timed
 * part covers all of that, the copy included.
 * Sources stay across repetitions; targets are deleted between them.
 *
 * shuffle (issue 42; the participant's part is bench_shuffle.c): every node
 * puts one partition of SIZE bytes for every other node (hpl_put_many) and
 * gets the hosts-1 partitions addressed to it (hpl_get_many; gets wait for
 * partitions not put yet). Filling the partitions' bytes is an untimed job
 * before each repetition; the makers delete them after it. The ratio's
 * bound is (hosts-1) * SIZE / B, what each node receives.
 *
 * Output (stdout, and appended to --out): TSV rows
 *   op size hosts impl median_s min_s max_s ratio_to_bound cpu_pct
 * (cpu_pct: the machine's busy share while the timed parts ran, "-" when
 * they were too short for /proc/stat's 10 ms ticks; stderr also
 * gives it as CPU seconds per GiB that crossed a link)
 * where impl gets "+procs" and "+put" appended for those modes.
 * and, to --extra-out, per size: op size hosts impl source_bytes_sent copies
 * (bytes that left node 0's data port per repetition, in object copies).
 * With HPL_BENCH_TRACE set, each --procs worker prints at its exit what a
 * job cost it on average from its sleep to its end (CPU, the part in user
 * space, minor faults, context switches), and every op prints every node's finish time
 * per repetition to stderr. */
/* This file: the options, main and the driver (the cluster, the sizes,
 * the repetitions); the rest of the program is in bench_coll_*.c
 * (bench_coll.h lists them). */
#include <errno.h>
#include <getopt.h>
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "benchpin.h"
#include "localcluster.h"
#include "util.h"
#include "bench_shuffle.h"
#include "bench_coll.h"

void hpl__bc_die(const char *msg) {
  fprintf(stderr, "bench_coll: %s\n", msg);
  exit(1);
}


/* --server-nice: every thread of process `pid` gets nice value `nice`
 * (setpriority(PRIO_PROCESS) moves one thread on Linux, and the servers
 * start their threads before we get here). 0 or -1. */
static int renice_all(pid_t pid, int nice) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  int rc = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (setpriority(PRIO_PROCESS, (id_t)atoi(e->d_name), nice)) rc = -1;
  }
  closedir(d);
  return rc;
}

static int run(hpl__bc_cfg *g) {
  hpl__lc_opts o = {.nodes = g->hosts,
                   .memory = g->memory,
                   .netns_prefix = g->netns,
                   .host_addrs = g->netns ? g->addrs : NULL,
                   .dir_host = g->dir_host,
                   .store_args = g->store_args,
                   .dir_args = g->dir_args,
                   .log_level = getenv("HPL_BENCH_LOG_LEVEL") ? getenv("HPL_BENCH_LOG_LEVEL")
                                                              : "warn",
                   /* kept (with the servers' logs) when given */
                   .work_dir = getenv("HPL_BENCH_WORK_DIR"),
                   .timeout_ms = 20000};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_coll: cannot start the cluster: %s\n", err);
    return 1;
  }
  if (g->set_nice) {
    int bad = renice_all(hpl__lc_dir_pid(lc), g->nice);
    for (int i = 0; i < g->hosts; i++) bad |= renice_all(hpl__lc_store_pid(lc, i), g->nice);
    if (bad) fprintf(stderr, "bench_coll: --server-nice %d: %s\n", g->nice, strerror(errno));
  }
  hpl_client *cs[HPL__BC_MAXN];
  for (int i = 0; i < g->hosts; i++)
    if (hpl_connect(hpl__lc_socket(lc, i), 10000, &cs[i])) hpl__bc_die("cannot connect to a store");
  struct hpl__bc_worker ws[HPL__BC_MAXN];
  if (g->procs) {
    g->w = ws;
    hpl__bc_start_workers(g, lc);
  }
  /* this thread is node 0's client (the put): it lives on host 0, as the
   * root of an MPI broadcast does, so its library reaches the directory
   * directly like any worker's there */
  hpl__bc_join_host(0);
  /* node 0's put runs here: CPU 0, as worker 0 */
  if (g->pin && g->procs && hpl__bench_pin(0, 0)) fprintf(stderr, "bench_coll: --pin: %s\n", strerror(errno));
  char impl[96];
  snprintf(impl, sizeof impl, "%s%s%s%s%s%s%s%s", g->impl, g->procs ? "+procs" : "",
           g->put_timed ? "+put" : "", g->pace ? "+paced" : "", g->overlap ? "+overlap" : "",
           g->pin && g->procs ? "+pin" : "", g->noprio ? "+noprio" : "",
           g->dir_host >= g->hosts ? "+dirhost" : "");
  g->impl = impl;
  double B = hpl__bc_parse_rate(g->rate);
  if (g->header) hpl__bc_emit(g, "op\tsize\thosts\timpl\tmedian_s\tmin_s\tmax_s\tratio_to_bound\tcpu_pct\n");
  int status = 0;
  for (int k = 0; k < g->nsizes; k++) {
    uint64_t size = g->sizes[k];
    int is_bcast = !strcmp(g->op, "bcast"), is_shuffle = !strcmp(g->op, "shuffle");
    uint8_t *data = NULL;
    uint64_t sum = 0;
    if (is_bcast) {
      data = malloc(size ? size : 1);
      if (!data) hpl__bc_die("out of memory");
      hpl__fill_pattern(data, size, size ^ 0x5eed);
      sum = hpl__checksum(data, size);
    } else if (!is_shuffle) {
      hpl__bc_reduce_sources(g, cs, size);
    }
    double v[256];
    uint64_t srcb = 0, srcb_total = 0;
    int n = 0, bad = 0;
    for (int r = -1; r < g->reps && r < 256; r++) {
      double s = is_bcast     ? hpl__bc_bcast_once(g, cs, size, r, &srcb, data, sum)
                 : is_shuffle ? hpl__bc_shuffle_once(g, cs, size, r)
                              : hpl__bc_reduce_once(g, cs, size, r);
      if (s < 0) {
        bad = 1;
        break;
      }
      if (r >= 0) {
        v[n++] = s;
        srcb_total += srcb;
      } else {
        g->cpu_busy = g->cpu_total = g->store_cpu_us = 0; /* the warm-up does not count */
      }
    }
    free(data);
    if (!is_bcast && !is_shuffle) hpl__bc_drop_sources(g, cs, size);
    status |= hpl__bc_report_size(g, size, v, n, bad, srcb_total, B);
  }
  if (g->procs) hpl__bc_stop_workers(g);
  if (g->pace) { /* the stores did pace their streams */
    uint64_t paced = 0, failed = 0, opened = 0, v;
    for (int i = 0; i < g->hosts; i++) {
      if (hpl_counter(cs[i], "paced_conns", 5000, &v) == 0) paced += v;
      if (hpl_counter(cs[i], "pace_failures", 5000, &v) == 0) failed += v;
      if (hpl_counter(cs[i], "data_conns_opened", 5000, &v) == 0) opened += v;
    }
    fprintf(stderr, "bench_coll: --pace: %llu data connections paced, %llu not (%llu opened)\n",
            (unsigned long long)paced, (unsigned long long)failed, (unsigned long long)opened);
    /* objects the directory serves inline (a small broadcast) open none */
    if ((opened && !paced) || failed) status = 1;
  }
  for (int i = 0; i < g->hosts; i++) {
    hpl__bsh_free(i); /* a shuffle's partitions made by threads */
    hpl_close(cs[i]);
  }
  if (hpl__lc_check(lc, err, sizeof err)) {
    fprintf(stderr, "bench_coll: %s\n", err);
    status = 1;
  }
  hpl__lc_stop(lc);
  return status;
}

int main(int argc, char **argv) {
  hpl__bc_cfg g = {.op = "bcast", .impl = "hoplite", .rate = "none", .hosts = 4, .reps = 5, .header = 1};
  const char *sizes = "1K,1M,64M", *addrs = NULL;
  static struct option opts[] = {
      {"op", 1, 0, 'o'},         {"sizes", 1, 0, 's'},     {"hosts", 1, 0, 'n'},
      {"reps", 1, 0, 'r'},       {"netns", 1, 0, 'N'},     {"addrs", 1, 0, 'a'},
      {"rate", 1, 0, 'R'},       {"memory", 1, 0, 'm'},    {"store-args", 1, 0, 'S'},
      {"dir-args", 1, 0, 'D'},   {"impl", 1, 0, 'i'},      {"no-header", 0, 0, 'H'},
      {"out", 1, 0, 'O'},        {"extra-out", 1, 0, 'E'}, {"procs", 0, 0, 'P'},
      {"put-timed", 0, 0, 'T'},  {"worker", 1, 0, 'W'},    {"socket", 1, 0, 'k'},
      {"server-nice", 1, 0, 'V'}, {"pace", 0, 0, 'p'},   {"store-arg", 1, 0, 'A'},
      {"overlap", 0, 0, 'L'},    {"pin", 0, 0, 'I'},        {"no-control-prio", 0, 0, 'C'},
      {"dir-host", 1, 0, 'd'},   {0, 0, 0, 0}};
  int worker = -1;
  if (hpl__bench_pin_wanted()) g.pin = 1; /* as mpi_coll and gloo_coll */
  char more[512] = ""; /* --store-arg: appended to --store-args, one word each */
  size_t nmore = 0;
  const char *sock = NULL;
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
      case 'o': g.op = optarg; break;
      case 's': sizes = optarg; break;
      case 'n': g.hosts = atoi(optarg); break;
      case 'r': g.reps = atoi(optarg); break;
      case 'N': g.netns = hpl__bc_host_prefix = optarg; break;
      case 'a': addrs = optarg; break;
      case 'R': g.rate = optarg; break;
      case 'm':
        if (hpl__parse_size(optarg, &g.memory)) hpl__bc_die("bad --memory");
        break;
      case 'S': g.store_args = optarg; break;
      case 'A': {
        int w = snprintf(more + nmore, sizeof more - nmore, " %s", optarg);
        if (w < 0 || (size_t)w >= sizeof more - nmore) hpl__bc_die("--store-arg: too many");
        nmore += (size_t)w;
        break;
      }
      case 'D': g.dir_args = optarg; break;
      case 'i': g.impl = optarg; break;
      case 'H': g.header = 0; break;
      case 'P': g.procs = 1; break;
      case 'T': g.put_timed = 1; break;
      case 'p': g.pace = 1; break;
      case 'L': g.overlap = 1; break;
      case 'I': g.pin = 1; break;
      case 'C': /* read by the library and the servers, all started after this */
        if (setenv("HOPLITE_CONTROL_PRIO", "0", 1)) hpl__bc_die("setenv failed");
        g.noprio = 1;
        break;
      case 'd': g.dir_host = atoi(optarg); break;
      case 'W': worker = atoi(optarg); break;
      case 'k': sock = optarg; break;
      case 'V':
        g.nice = atoi(optarg);
        g.set_nice = 1;
        break;
      case 'O':
        if (!(g.out = fopen(optarg, "a"))) hpl__bc_die("cannot open --out");
        break;
      case 'E':
        if (!(g.extra = fopen(optarg, "a"))) hpl__bc_die("cannot open --extra-out");
        break;
      default: hpl__bc_die("see the comment at the top of bench/bench_coll.c for usage");
    }
  }
  if (worker >= 0) {
    if (!sock) hpl__bc_die("--worker needs --socket");
    return hpl__bc_worker_main(worker, sock);
  }
  if (g.put_timed && strcmp(g.op, "bcast")) hpl__bc_die("--put-timed is for --op bcast");
  if (g.overlap && strcmp(g.op, "shuffle")) hpl__bc_die("--overlap is for --op shuffle");
  /* the workers (threads, or processes started after this) read it */
  if (g.overlap && setenv("HPL_BENCH_SHUFFLE_GETS", "overlap", 1)) hpl__bc_die("setenv failed");
  if (strcmp(g.op, "bcast") && strcmp(g.op, "reduce") && strcmp(g.op, "allreduce") &&
      strcmp(g.op, "allreduce-rs") && strcmp(g.op, "shuffle"))
    hpl__bc_die("--op must be bcast, reduce, allreduce, allreduce-rs or shuffle");
  if (g.hosts < 2 || g.hosts > HPL__BC_MAXN) hpl__bc_die("--hosts must be 2..64");
  char store_args[1100];
  if (g.pace || nmore) {
    uint64_t bps;
    if (g.pace && hpl__parse_rate(g.rate, &bps)) hpl__bc_die("--pace needs a --rate (the links' rate)");
    if (snprintf(store_args, sizeof store_args, "%s%s%s%s", g.store_args ? g.store_args : "",
                 more, g.pace ? " --link-rate " : "", g.pace ? g.rate : "") >=
        (int)sizeof store_args)
      hpl__bc_die("--store-args too long");
    g.store_args = store_args + (store_args[0] == ' '); /* (no --store-args: no leading blank) */
  }
  if (g.reps < 1) g.reps = 1;
  char *sz = strdup(sizes);
  for (char *t = strtok(sz, ","); t && g.nsizes < 32; t = strtok(NULL, ","))
    if (hpl__parse_size(t, &g.sizes[g.nsizes++])) hpl__bc_die("bad size in --sizes");
  uint64_t maxs = 0;
  for (int k = 0; k < g.nsizes; k++)
    if (g.sizes[k] > maxs) maxs = g.sizes[k];
  /* bcast: a copy and a spare; reduce: source, stream, target (and a
   * forwarded copy for allreduce); allreduce-rs: source, slice streams,
   * the slices, the assembled copy and room to spare; shuffle: the node's
   * hosts-1 partitions, the hosts-1 it gets, and two spare */
  if (!g.memory)
    g.memory = (!strcmp(g.op, "bcast")          ? 3
                : !strcmp(g.op, "allreduce-rs") ? 6
                : !strcmp(g.op, "shuffle")      ? 2 * (uint64_t)g.hosts
                                                : 4) * maxs +
               (128ull << 20);
  if (g.netns) {
    if (!addrs) hpl__bc_die("--netns needs --addrs");
    char *a = strdup(addrs);
    int n = 0;
    for (char *t = strtok(a, ","); t && n < HPL__BC_MAXN; t = strtok(NULL, ",")) g.addrs[n++] = t;
    if (n < g.hosts) hpl__bc_die("--addrs lists fewer hosts than --hosts");
    if (g.dir_host < 0 || g.dir_host >= n) hpl__bc_die("--dir-host: not a host --addrs lists");
  } else if (g.dir_host) {
    hpl__bc_die("--dir-host needs --netns");
  }
  return run(&g);
}
