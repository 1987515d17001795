/* cli.c - the `hoplite` command: its arguments, the usage text, and
 * which command runs (the commands are in cmd_*.c and demo.c, cli.h);
 * connecting to the store the object commands talk to. */
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: hoplite COMMAND [options]\n"
          "\n"
          "Local cluster (directory + stores on 127.0.0.1):\n"
          "  cluster up [--nodes N] [--memory BYTES] [--dir PATH] [--verbose] [--ha]\n"
          "             start it and keep it running until Ctrl-C (cleans up after itself);\n"
          "             --ha: a local etcd and two directories, one leading, one standing by\n"
          "  demo [--nodes N] [--size BYTES]\n"
          "             start a cluster, broadcast an object and print what happened\n"
          "  secret FILE\n"
          "             write a new cluster secret (256 bits, mode 0600) for --auth-file\n"
          "  secret --metrics-token FILE\n"
          "             print the bearer token servers with this secret want on /metrics\n"
          "  secret --node NAME --secret SECRET FILE\n"
          "             write node NAME's credential: its store's --auth-file, so that it\n"
          "             can be that node only (docs/operations.md)\n"
          "\n"
          "Objects (talk to a store; pick it with -s SOCKET, -n NODE of the local\n"
          "cluster, or $HOPLITE_SOCKET):\n"
          "  put ID FILE|-          store a file (or stdin) as object ID\n"
          "  get [-t MS] ID [FILE|-] write object ID to FILE (default stdout)\n"
          "  stat ID [--json]       size and copies\n"
          "  ls [PREFIX] [--json]   list objects, page by page as the directory sends them\n"
          "  rm ID...               delete objects everywhere\n"
          "  counters               the store's counters\n"
          "  transfers [SINCE]      the directory's record of who pulled from whom\n"
          "  status [--watch [SECONDS]] [--json]\n"
          "                         the whole cluster: nodes (liveness, heartbeat age, pool,\n"
          "                         objects), transfers in flight, reduces running;\n"
          "                         --watch refreshes every SECONDS (default 1) until Ctrl-C\n"
          "\n"
          "Admin (the directory itself, as the admin role: needs the cluster secret):\n"
          "  --admin [--directory HOST:PORT] [--auth-file SECRET] rm|stat|ls|status|counters|transfers\n"
          "                         $HOPLITE_DIRECTORY and $HOPLITE_AUTH_FILE are the defaults,\n"
          "                         else the local cluster's directory and secret;\n"
          "                         rm deletes any object, whichever node made it (a store's\n"
          "                         client may delete only what its own node made); counters\n"
          "                         are the directory's; no put or get (docs/operations.md)\n"
          "\n"
          "Timeouts default to 30000 ms (-t MS, -1 waits forever). --json prints one JSON\n"
          "object per line (ids: valid UTF-8 as it is, other bytes as \\udcXX escapes, as\n"
          "Python's \"surrogateescape\" reads them). put and get of objects of 1 MiB or\n"
          "more draw a progress bar (rate, ETA) on stderr when it is a terminal.\n");
}

void hpl__cli_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", HPL__CLI_NAME);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

void hpl__cli_cluster_dir(char *out, size_t len) {
  snprintf(out, len, "/tmp/hoplite-%u/cluster", (unsigned)getuid());
}

/* The admin handle of --admin: the directory as the admin role. Without
 * --directory and $HOPLITE_DIRECTORY, the local cluster's (`hoplite
 * cluster up`: its port file and, unless one is named, its secret). */
static hpl_client *open_admin(const hpl__cli_opts *o) {
  const char *dir = o->directory ? o->directory : getenv(HPL_DIRECTORY_ENV);
  const char *secret = o->auth_file;
  char local[64], lsecret[256], work[200], pfile[256], p[256];
  if (!dir || !*dir) {
    hpl__cli_cluster_dir(work, sizeof work);
    /* with --ha, the directory that leads wrote its port file last */
    snprintf(pfile, sizeof pfile, "%s/directory.port", work);
    struct stat st, best;
    int have = stat(pfile, &best) == 0;
    for (int k = 1; k < 4; k++) {
      snprintf(p, sizeof p, "%s/directory-%d.port", work, k);
      if (stat(p, &st) == 0 && (!have || st.st_mtim.tv_sec > best.st_mtim.tv_sec ||
                                (st.st_mtim.tv_sec == best.st_mtim.tv_sec &&
                                 st.st_mtim.tv_nsec > best.st_mtim.tv_nsec))) {
        have = 1, best = st;
        snprintf(pfile, sizeof pfile, "%s", p);
      }
    }
    FILE *f = fopen(pfile, "r");
    int port = 0;
    if (!f || fscanf(f, "%d", &port) != 1 || port <= 0 || port > 65535)
      hpl__cli_die("--admin needs the directory's address: --directory HOST:PORT or $"
                   HPL_DIRECTORY_ENV " (no local cluster running either)");
    fclose(f);
    snprintf(local, sizeof local, "127.0.0.1:%d", port);
    dir = local;
    snprintf(lsecret, sizeof lsecret, "%s/cluster.secret", work);
    if (!secret && !getenv(HPL_AUTH_FILE_ENV) && access(lsecret, R_OK) == 0) secret = lsecret;
  }
  hpl_client *c;
  int rc = hpl_connect_admin(dir, secret, 5000, &c);
  if (rc)
    hpl__cli_die("cannot reach the directory as admin: %s (%s)", hpl_strerror(rc),
                 hpl_errdetail(NULL));
  return c;
}

static hpl_client *open_client(const hpl__cli_opts *o) {
  if (o->admin) return open_admin(o);
  char path[256];
  const char *sock = o->socket;
  if (!sock && o->node >= 0) {
    char dir[200];
    hpl__cli_cluster_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/node-%d.sock", dir, o->node);
    sock = path;
  }
  if (!sock) sock = getenv(HPL_SOCKET_ENV);
  if (!sock) {
    char dir[200];
    hpl__cli_cluster_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/node-0.sock", dir);
    sock = path;
  }
  hpl_client *c;
  int rc = hpl_connect(sock, 5000, &c);
  if (rc)
    hpl__cli_die(
        "cannot connect to the store at %s: %s (is a store running? `hoplite cluster up` starts "
        "a local one)",
        sock, hpl_strerror(rc));
  return c;
}

void hpl__cli_check(hpl_client *c, int rc, const char *what) {
  if (rc) hpl__cli_die("%s: %s (%s)", what, hpl_strerror(rc), hpl_errdetail(c));
}

/* Take --json out of a command's arguments (it may come after them). */
int hpl__cli_take_json(hpl__cli_opts *o, int argc, char **argv) {
  int k = 0;
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--json") == 0) o->json = 1;
    else argv[k++] = argv[i];
  return k;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
      !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  signal(SIGPIPE, SIG_IGN);
  hpl__cli_opts o = {.socket = NULL, .node = -1, .timeout_ms = 30000};
  static struct option opts[] = {{"socket", 1, 0, 's'}, {"node", 1, 0, 'n'},
                                 {"timeout", 1, 0, 't'}, {"json", 0, 0, 'j'},
                                 {"watch", 2, 0, 'w'},   {"admin", 0, 0, 'A'},
                                 {"directory", 1, 0, 'D'}, {"auth-file", 1, 0, 'F'},
                                 {0, 0, 0, 0}};
  /* store options may come before or after the command */
  int ch, pass;
  const char *cmd = NULL;
  optind = 1;
  for (pass = 0; pass < 2; pass++) {
    while ((ch = getopt_long(argc, argv, "+s:n:t:", opts, NULL)) != -1) {
      switch (ch) {
        case 's': o.socket = optarg; break;
        case 'n': o.node = atoi(optarg); break;
        case 't': o.timeout_ms = strtoll(optarg, NULL, 10); break;
        case 'j': o.json = 1; break;
        case 'A': o.admin = 1; break;
        case 'D': o.directory = optarg; break;
        case 'F': o.auth_file = optarg; break;
        case 'w': { /* --watch [SECONDS], --watch=SECONDS */
          const char *arg = optarg;
          char *end;
          if (!arg && optind < argc && strtod(argv[optind], &end) > 0 && !*end)
            arg = argv[optind++];
          o.watch_s = arg ? strtod(arg, &end) : 1.0;
          if (arg && (*end || !(o.watch_s >= 0.1 && o.watch_s <= 86400)))
            hpl__cli_die("--watch takes seconds between refreshes (0.1 to 86400), not '%s'", arg);
          break;
        }
        default: usage(stderr); return 2;
      }
    }
    if (pass == 0) {
      if (optind >= argc) {
        usage(stderr);
        return 2;
      }
      cmd = argv[optind];
      if (!strcmp(cmd, "cluster")) return hpl__cli_cluster(argc - optind - 1, argv + optind + 1);
      if (!strcmp(cmd, "secret")) return hpl__cli_secret(argc - optind - 1, argv + optind + 1);
      if (!strcmp(cmd, "demo")) return hpl__cli_demo(argc - optind, argv + optind);
      optind++;
      /* getopt restarts its scan from optind */
    }
  }
  int (*fn)(hpl_client *, hpl__cli_opts *, int, char **) = NULL;
  if (!strcmp(cmd, "put")) fn = hpl__cli_put;
  else if (!strcmp(cmd, "get")) fn = hpl__cli_get;
  else if (!strcmp(cmd, "stat")) fn = hpl__cli_stat;
  else if (!strcmp(cmd, "ls")) fn = hpl__cli_ls;
  else if (!strcmp(cmd, "rm")) fn = hpl__cli_rm;
  else if (!strcmp(cmd, "counters")) fn = hpl__cli_counters;
  else if (!strcmp(cmd, "transfers")) fn = hpl__cli_transfers;
  else if (!strcmp(cmd, "status")) fn = hpl__cli_status;
  if (!fn) {
    fprintf(stderr, "%s: unknown command '%s'\n", HPL__CLI_NAME, cmd);
    usage(stderr);
    return 2;
  }
  if (o.admin && (fn == hpl__cli_put || fn == hpl__cli_get))
    hpl__cli_die("--admin: the directory only deletes, stats and lists (rm, stat, ls, status, "
                 "counters, transfers); %s goes to a store (-s SOCKET, -n NODE)", cmd);
  hpl_client *c = open_client(&o);
  int rc = fn(c, &o, argc - optind, argv + optind);
  hpl_close(c);
  return rc;
}
