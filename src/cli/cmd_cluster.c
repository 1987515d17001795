/* cmd_cluster.c - `hoplite cluster up [--ha]` (a local cluster of real
 * processes, localcluster.h, kept running until a signal; with --ha a
 * local etcd and two directories, one leading) and `hoplite
 * secret` (a cluster secret, or the /metrics token it gives) (cli.h). */
#include <getopt.h>
#include <sodium.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "cli.h"
#include "localcluster.h"
#include "metrics.h"
#include "util.h"

/* The running cluster's child `pid` exited with `status`. A directory
 * under a lease may go while another runs (the test of a failover): say
 * which one leads next, and start the one that went again as a standby.
 * Returns 1 to go on, 0 to stop the cluster. */
static int child_exited(hpl__lc *lc, pid_t pid, int status) {
  int who = hpl__lc_reaped(lc, pid, status), live = 0;
  const char *how = WIFSIGNALED(status) ? "signal" : "status";
  int code = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
  for (int k = 0; k < hpl__lc_dirs(lc); k++) live += hpl__lc_dir_pid_at(lc, k) > 0;
  if (who == HPL__LC_UNKNOWN) return 1; /* not a server (none other is started) */
  if (who >= 0 || who == HPL__LC_ETCD || hpl__lc_dirs(lc) < 2 || !live) {
    fprintf(stderr, "%s: process %d exited (%s %d); stopping the cluster\n", HPL__CLI_NAME,
            (int)pid, how, code);
    return 0;
  }
  int k = -1 - who;
  printf("directory-%d (127.0.0.1:%d, pid %d) exited (%s %d); %d left\n", k,
         hpl__lc_dir_port_at(lc, k), (int)pid, how, code, live);
  fflush(stdout);
  int lead = hpl__lc_leader(lc, 10000); /* a lease and a few of etcd's elections at most */
  if (lead >= 0)
    printf("directory-%d (127.0.0.1:%d) leads\n", lead, hpl__lc_dir_port_at(lc, lead));
  else
    printf("no directory leads after 10 s (see their logs in the cluster's directory)\n");
  /* as a supervisor would (systemd's Restart=, a StatefulSet): back as a standby */
  char err[256];
  if (hpl__lc_restart(lc, who, err, sizeof err) == 0)
    printf("directory-%d restarted: it stands by\n", k);
  else
    printf("directory-%d could not be restarted: %s\n", k, err);
  fflush(stdout);
  return 1;
}

int hpl__cli_cluster(int argc, char **argv) {
  if (argc < 1 || strcmp(argv[0], "up") != 0)
    hpl__cli_die("usage: hoplite cluster up [--nodes N] ...");
  int nodes = 3, verbose = 0, ha = 0;
  uint64_t memory = 1ull << 30;
  char dir[256];
  hpl__cli_cluster_dir(dir, sizeof dir);
  static struct option opts[] = {{"nodes", 1, 0, 'n'}, {"memory", 1, 0, 'm'},
                                 {"dir", 1, 0, 'd'},   {"verbose", 0, 0, 'v'},
                                 {"ha", 0, 0, 'H'},    {0, 0, 0, 0}};
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "n:m:d:v", opts, NULL)) != -1) {
    switch (ch) {
      case 'n': nodes = atoi(optarg); break;
      case 'm':
        if (hpl__parse_size(optarg, &memory)) hpl__cli_die("bad --memory '%s'", optarg);
        break;
      case 'd': snprintf(dir, sizeof dir, "%s", optarg); break;
      case 'v': verbose = 1; break;
      case 'H': ha = 1; break;
      default:
        hpl__cli_die("usage: hoplite cluster up [--nodes N] [--memory BYTES] [--dir PATH] [--ha]");
    }
  }
  if (nodes < 1 || nodes > 256) hpl__cli_die("--nodes must be 1..256");
  char parent[256];
  snprintf(parent, sizeof parent, "%s", dir);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = 0;
    mkdir(parent, 0700);
  }
  /* signals are taken synchronously below */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, NULL);
  /* a full pool spills to files under the work directory (each store
   * makes its own subdirectory there) */
  char store_args[320];
  snprintf(store_args, sizeof store_args, "--spill-dir %s/spill", dir);
  hpl__lc_opts o = {.nodes = nodes, .memory = memory, .work_dir = dir, .logs_to_stderr = verbose,
                   .remove_work_dir = 1, .store_args = store_args, .ha_dirs = ha ? 2 : 0};
  hpl__lc *lc;
  char err[512];
  int rc = hpl__lc_start(&o, &lc, err, sizeof err);
  if (rc) hpl__cli_die("cannot start the cluster: %s", err);
  char path[512], b[32];
  snprintf(path, sizeof path, "%s/cluster.env", dir);
  FILE *env = fopen(path, "w");
  if (ha) {
    printf("hoplite cluster up: %d directories under a leader lease in etcd (%s, pid %d), %d "
           "stores with %s pools each\n",
           hpl__lc_dirs(lc), hpl__lc_etcd_url(lc), (int)hpl__lc_etcd_pid(lc), nodes,
           hpl__fmt_bytes(memory, b, sizeof b));
    int lead = hpl__lc_leader(lc, 0);
    for (int k = 0; k < hpl__lc_dirs(lc); k++)
      printf("  directory-%d  127.0.0.1:%d  pid %d  %s\n", k, hpl__lc_dir_port_at(lc, k),
             (int)hpl__lc_dir_pid_at(lc, k), k == lead ? "leads" : "stands by");
  } else {
    printf("hoplite cluster up: directory on 127.0.0.1:%d, %d stores with %s pools each\n",
           hpl__lc_dir_port(lc), nodes, hpl__fmt_bytes(memory, b, sizeof b));
  }
  for (int i = 0; i < nodes; i++) {
    printf("  node-%d  socket %s  pid %d%s%s\n", i, hpl__lc_socket(lc, i),
           (int)hpl__lc_store_pid(lc, i), verbose ? "" : "  log ",
           verbose ? "" : hpl__lc_store_log(lc, i));
    if (env) fprintf(env, "HOPLITE_SOCKET_%d=%s\n", i, hpl__lc_socket(lc, i));
  }
  if (env) fclose(env);
  printf("Cluster secret: %s (more stores join with --auth-file %s)\n", hpl__lc_secret(lc),
         hpl__lc_secret(lc));
  printf("Use it:  export %s=%s   (or `hoplite -n 1 ...` for node-1)\n"
         "Stop it: Ctrl-C\n",
         HPL_SOCKET_ENV, hpl__lc_socket(lc, 0));
  fflush(stdout);
  for (int run = 1; run;) {
    siginfo_t si;
    int sig = sigwaitinfo(&set, &si);
    if (sig < 0) continue;
    if (sig != SIGCHLD) break;
    int status;
    pid_t pid;
    while (run && (pid = waitpid(-1, &status, WNOHANG)) > 0) run = child_exited(lc, pid, status);
  }
  printf("\nstopping the cluster...\n");
  hpl__lc_stop(lc);
  printf("stopped.\n");
  return 0;
}

/* `hoplite secret FILE`: a new cluster secret for --auth-file.
 * `hoplite secret --metrics-token FILE`: the bearer token /metrics wants
 * from scrapers of a cluster with that secret (metrics.h).
 * `hoplite secret --node NAME --secret SECRET FILE`: node NAME's credential
 * (auth.h), what its store gets instead of the secret. */
int hpl__cli_secret(int argc, char **argv) {
  char err[512];
  if (argc == 5 && !strcmp(argv[0], "--node") && !strcmp(argv[2], "--secret")) {
    hpl__auth a;
    if (hpl__auth_load(argv[3], &a, err, sizeof err) != 0) hpl__cli_die("%s", err);
    int rc = hpl__auth_write_node(&a, argv[1], argv[4], err, sizeof err);
    sodium_memzero(&a, sizeof a);
    if (rc != 0) hpl__cli_die("%s", err);
    printf("wrote node %s's credential to %s; start its store with --auth-file %s (it can be "
           "that node only)\n", argv[1], argv[4], argv[4]);
    return 0;
  }
  if (argc == 2 && !strcmp(argv[0], "--metrics-token")) {
    hpl__auth a;
    char token[HPL__METRICS_TOKEN_LEN + 1];
    if (hpl__auth_load(argv[1], &a, err, sizeof err) != 0) hpl__cli_die("%s", err);
    if (hpl__metrics_token(&a, token) != 0) hpl__cli_die("libsodium cannot start");
    printf("%s\n", token);
    return 0;
  }
  if (argc != 1)
    hpl__cli_die("usage: hoplite secret FILE   (a new 256-bit cluster secret, mode 0600)\n"
                 "       hoplite secret --metrics-token FILE   (the bearer token for /metrics)\n"
                 "       hoplite secret --node NAME --secret SECRET FILE   (node NAME's "
                 "credential)");
  if (hpl__auth_create(argv[0], err, sizeof err) != 0) hpl__cli_die("%s", err);
  printf("wrote a new cluster secret to %s; give it to every server with --auth-file %s\n",
         argv[0], argv[0]);
  return 0;
}
