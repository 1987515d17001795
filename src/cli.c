/* cli.c - the `hoplite` command: local clusters, object commands, demo. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

static const char *prog = "hoplite";

static void usage(FILE *f) {
  fprintf(f,
          "usage: hoplite COMMAND [options]\n"
          "\n"
          "Local cluster (directory + stores on 127.0.0.1):\n"
          "  cluster up [--nodes N] [--memory BYTES] [--dir PATH] [--verbose]\n"
          "             start it and keep it running until Ctrl-C (cleans up after itself)\n"
          "  demo [--nodes N] [--size BYTES]\n"
          "             start a cluster, broadcast an object and print what happened\n"
          "  secret FILE\n"
          "             write a new cluster secret (256 bits, mode 0600) for --auth-file\n"
          "\n"
          "Objects (talk to a store; pick it with -s SOCKET, -n NODE of the local\n"
          "cluster, or $HOPLITE_SOCKET):\n"
          "  put ID FILE|-          store a file (or stdin) as object ID\n"
          "  get [-t MS] ID [FILE|-] write object ID to FILE (default stdout)\n"
          "  stat ID [--json]       size and copies\n"
          "  ls [PREFIX] [--json]   list objects, page by page as the directory sends them\n"
          "  rm ID                  delete an object everywhere\n"
          "  counters               the store's counters\n"
          "  transfers [SINCE]      the directory's record of who pulled from whom\n"
          "\n"
          "Timeouts default to 30000 ms (-t MS, -1 waits forever). --json prints one JSON\n"
          "object per line (ids: valid UTF-8 as it is, other bytes as \\udcXX escapes, as\n"
          "Python's \"surrogateescape\" reads them).\n");
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static void cluster_dir(char *out, size_t len) {
  snprintf(out, len, "/tmp/hoplite-%u/cluster", (unsigned)getuid());
}

/* ------------------------------------------------------------------ object commands */

typedef struct conn_opts {
  const char *socket;
  int node;
  int64_t timeout_ms;
  int json; /* --json: one JSON object per line */
} conn_opts;

static hpl_client *open_client(const conn_opts *o) {
  char path[256];
  const char *sock = o->socket;
  if (!sock && o->node >= 0) {
    char dir[200];
    cluster_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/node-%d.sock", dir, o->node);
    sock = path;
  }
  if (!sock) sock = getenv(HPL_SOCKET_ENV);
  if (!sock) {
    char dir[200];
    cluster_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/node-0.sock", dir);
    sock = path;
  }
  hpl_client *c;
  int rc = hpl_connect(sock, 5000, &c);
  if (rc)
    die("cannot connect to the store at %s: %s (is a store running? `hoplite cluster up` starts "
        "a local one)",
        sock, hpl_strerror(rc));
  return c;
}

static void check(hpl_client *c, int rc, const char *what) {
  if (rc) die("%s: %s (%s)", what, hpl_strerror(rc), hpl_errdetail(c));
}

static int cmd_put(hpl_client *c, conn_opts *o, int argc, char **argv) {
  if (argc != 2) die("usage: hoplite put ID FILE|-");
  const char *id = argv[0], *file = argv[1];
  if (strcmp(file, "-") == 0) {
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    ssize_t n;
    while (buf && (n = read(STDIN_FILENO, buf + len, cap - len)) > 0) {
      len += (size_t)n;
      if (len == cap) buf = realloc(buf, cap *= 2);
    }
    if (!buf) die("out of memory");
    check(c, hpl_put(c, id, buf, len, o->timeout_ms), "put");
    free(buf);
    fprintf(stderr, "put %s: %zu bytes\n", id, len);
    return 0;
  }
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) die("%s: %s", file, strerror(errno));
  hpl_buf *b;
  check(c, hpl_create(c, id, (uint64_t)st.st_size, o->timeout_ms, &b), "create");
  uint8_t *p = hpl_buf_data(b);
  uint64_t off = 0;
  while (off < (uint64_t)st.st_size) {
    ssize_t n = read(fd, p + off, (size_t)((uint64_t)st.st_size - off));
    if (n <= 0) {
      hpl_abort(c, b);
      die("%s: read failed", file);
    }
    off += (uint64_t)n;
    hpl_buf_progress(c, b, off);
  }
  close(fd);
  check(c, hpl_seal(c, b, o->timeout_ms), "seal");
  fprintf(stderr, "put %s: %llu bytes\n", id, (unsigned long long)off);
  return 0;
}

static int cmd_get(hpl_client *c, conn_opts *o, int argc, char **argv) {
  if (argc < 1 || argc > 2) die("usage: hoplite get ID [FILE|-]");
  hpl_buf *b;
  uint64_t t0 = hpl__now_ns();
  check(c, hpl_get(c, argv[0], o->timeout_ms, &b), "get");
  double ms = (double)(hpl__now_ns() - t0) / 1e6;
  int fd = STDOUT_FILENO;
  if (argc == 2 && strcmp(argv[1], "-") != 0) {
    fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("%s: %s", argv[1], strerror(errno));
  }
  const uint8_t *p = hpl_buf_data(b);
  uint64_t size = hpl_buf_size(b), off = 0;
  while (off < size) {
    ssize_t n = write(fd, p + off, (size_t)(size - off));
    if (n <= 0) die("write failed: %s", strerror(errno));
    off += (uint64_t)n;
  }
  if (fd != STDOUT_FILENO) close(fd);
  fprintf(stderr, "get %s: %llu bytes in %.2f ms\n", argv[0], (unsigned long long)size, ms);
  hpl_release(c, b);
  return 0;
}

/* ------------------------------------------------------------------ JSON output */

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if none starts
 * there (a stray byte, an overlong form, a surrogate, beyond U+10FFFF). A
 * NUL ends every sequence, so p is never read past its string's end. */
static size_t utf8_seq(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp, min;
  if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1f, min = 0x80;
  else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0f, min = 0x800;
  else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3fu);
  }
  return cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : n;
}

/* `s` as a JSON string. Ids are bytes: valid UTF-8 goes out as it is, '"',
 * '\\' and control characters escaped; every other byte as \udcXX, the lone
 * surrogate of Python's "surrogateescape", so that
 * json.loads(line)["id"].encode("utf-8", "surrogateescape") is the id. */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = utf8_seq(p);
    if (n == 0)
      fprintf(f, "\\udc%02x", *p++);
    else if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p++);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\u%04x", *p++);
    else {
      fwrite(p, 1, n, f);
      p += n;
    }
  }
  fputc('"', f);
}

static void json_object(const char *id, unsigned long long size, unsigned copies,
                        unsigned complete, int inl, int local) {
  fputs("{\"id\": ", stdout);
  json_str(stdout, id);
  printf(", \"size\": %llu, \"copies\": %u, \"complete\": %u, \"inline\": %s", size, copies,
         complete, inl ? "true" : "false");
  if (local >= 0) printf(", \"local\": %s", local ? "true" : "false");
  fputs("}\n", stdout);
}

/* Take --json out of a command's arguments (it may come after them). */
static int take_json(conn_opts *o, int argc, char **argv) {
  int k = 0;
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--json") == 0) o->json = 1;
    else argv[k++] = argv[i];
  return k;
}

static int cmd_stat(hpl_client *c, conn_opts *o, int argc, char **argv) {
  argc = take_json(o, argc, argv);
  if (argc != 1) die("usage: hoplite stat ID [--json]");
  uint64_t size;
  uint32_t copies, complete;
  int inl, local = 0;
  check(c, hpl_stat(c, argv[0], o->timeout_ms, &size, &copies, &complete, &inl), "stat");
  hpl_contains(c, argv[0], o->timeout_ms, &local);
  if (o->json) {
    json_object(argv[0], (unsigned long long)size, copies, complete, inl, local);
    return 0;
  }
  char b[32];
  printf("id        %s\nsize      %llu (%s)\ncopies    %u (%u complete)\ninline    %s\n"
         "local     %s\n",
         argv[0], (unsigned long long)size, hpl__fmt_bytes(size, b, sizeof b), copies, complete,
         inl ? "yes (served by the directory)" : "no", local ? "yes" : "no");
  return 0;
}

/* Print one page of hpl_list_page text: "ID\tSIZE\tCOPIES\tCOMPLETE\tINLINE\n"
 * lines (ids hold no tabs or newlines). */
static void ls_page(char *text, int json) {
  for (char *line = text, *end; *line; line = end + 1) {
    if (!(end = strchr(line, '\n'))) break;
    *end = 0;
    char *f[5];
    int k = 0;
    for (char *t = line; k < 5; t++) {
      f[k++] = t;
      if (!(t = strchr(t, '\t'))) break;
      *t = 0;
    }
    if (k != 5) continue;
    if (json)
      json_object(f[0], strtoull(f[1], NULL, 10), (unsigned)strtoul(f[2], NULL, 10),
                  (unsigned)strtoul(f[3], NULL, 10), f[4][0] == '1', -1);
    else
      printf("%-40s %14s %7s %9s %7s\n", f[0], f[1], f[2], f[3], f[4][0] == '1' ? "yes" : "no");
  }
}

/* Page after page, each printed as it arrives: memory for one page only. */
static int cmd_ls(hpl_client *c, conn_opts *o, int argc, char **argv) {
  argc = take_json(o, argc, argv);
  if (argc > 1) die("usage: hoplite ls [PREFIX] [--json]");
  const char *prefix = argc > 0 ? argv[0] : "";
  if (!o->json) printf("%-40s %14s %7s %9s %7s\n", "ID", "SIZE", "COPIES", "COMPLETE", "INLINE");
  char *after = NULL;
  do {
    char *text, *next;
    check(c, hpl_list_page(c, prefix, after, 0, o->timeout_ms, &text, &next), "ls");
    ls_page(text, o->json);
    fflush(stdout);
    hpl_free(text);
    hpl_free(after);
    after = next;
  } while (after);
  return 0;
}

static int cmd_rm(hpl_client *c, conn_opts *o, int argc, char **argv) {
  if (argc != 1) die("usage: hoplite rm ID");
  check(c, hpl_delete(c, argv[0], o->timeout_ms), "rm");
  return 0;
}

static int cmd_transfers(hpl_client *c, conn_opts *o, int argc, char **argv) {
  uint64_t since = argc > 0 ? strtoull(argv[0], NULL, 10) : 0;
  char *text;
  check(c, hpl_transfers(c, since, o->timeout_ms, &text, NULL), "transfers");
  printf("%-8s %-14s %-9s %-16s %-16s %s\n", "SEQ", "T_US", "KIND", "RECEIVER", "SENDER", "ID");
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    char seq[24], t[24], kind[16], r[24], snd[24];
    int off = 0;
    if (sscanf(line, "%23s %23s %15s %23s %23s %n", seq, t, kind, r, snd, &off) == 5)
      printf("%-8s %-14s %-9s %-16s %-16s %s\n", seq, t, kind, r, snd, line + off);
  }
  hpl_free(text);
  return 0;
}

static int cmd_counters(hpl_client *c, conn_opts *o, int argc, char **argv) {
  (void)argc, (void)argv;
  char *text;
  check(c, hpl_counters(c, o->timeout_ms, &text), "counters");
  fputs(text, stdout);
  hpl_free(text);
  return 0;
}

/* ------------------------------------------------------------------ cluster up */

static int cmd_cluster(int argc, char **argv) {
  if (argc < 1 || strcmp(argv[0], "up") != 0) die("usage: hoplite cluster up [--nodes N] ...");
  int nodes = 3, verbose = 0;
  uint64_t memory = 1ull << 30;
  char dir[256];
  cluster_dir(dir, sizeof dir);
  static struct option opts[] = {{"nodes", 1, 0, 'n'}, {"memory", 1, 0, 'm'},
                                 {"dir", 1, 0, 'd'},   {"verbose", 0, 0, 'v'},
                                 {0, 0, 0, 0}};
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "n:m:d:v", opts, NULL)) != -1) {
    switch (ch) {
      case 'n': nodes = atoi(optarg); break;
      case 'm':
        if (hpl__parse_size(optarg, &memory)) die("bad --memory '%s'", optarg);
        break;
      case 'd': snprintf(dir, sizeof dir, "%s", optarg); break;
      case 'v': verbose = 1; break;
      default: die("usage: hoplite cluster up [--nodes N] [--memory BYTES] [--dir PATH]");
    }
  }
  if (nodes < 1 || nodes > 256) die("--nodes must be 1..256");
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
                   .remove_work_dir = 1, .store_args = store_args};
  hpl__lc *lc;
  char err[512];
  int rc = hpl__lc_start(&o, &lc, err, sizeof err);
  if (rc) die("cannot start the cluster: %s", err);
  char path[512], b[32];
  snprintf(path, sizeof path, "%s/cluster.env", dir);
  FILE *env = fopen(path, "w");
  printf("hoplite cluster up: directory on 127.0.0.1:%d, %d stores with %s pools each\n",
         hpl__lc_dir_port(lc), nodes, hpl__fmt_bytes(memory, b, sizeof b));
  for (int i = 0; i < nodes; i++) {
    printf("  node-%d  socket %s  pid %d%s%s\n", i, hpl__lc_socket(lc, i), (int)hpl__lc_store_pid(lc, i),
           verbose ? "" : "  log ", verbose ? "" : hpl__lc_store_log(lc, i));
    if (env) fprintf(env, "HOPLITE_SOCKET_%d=%s\n", i, hpl__lc_socket(lc, i));
  }
  if (env) fclose(env);
  printf("Cluster secret: %s (more stores join with --auth-file %s)\n", hpl__lc_secret(lc),
         hpl__lc_secret(lc));
  printf("Use it:  export %s=%s   (or `hoplite -n 1 ...` for node-1)\n"
         "Stop it: Ctrl-C\n",
         HPL_SOCKET_ENV, hpl__lc_socket(lc, 0));
  fflush(stdout);
  int sig;
  for (;;) {
    siginfo_t si;
    sig = sigwaitinfo(&set, &si);
    if (sig < 0) continue;
    if (sig == SIGCHLD) {
      int status;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) continue;
      fprintf(stderr, "%s: process %d exited (%s %d); stopping the cluster\n", prog, (int)pid,
              WIFSIGNALED(status) ? "signal" : "status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      break;
    }
    break;
  }
  printf("\nstopping the cluster...\n");
  hpl__lc_stop(lc);
  printf("stopped.\n");
  return 0;
}

/* `hoplite secret FILE`: a new cluster secret for --auth-file. */
static int cmd_secret(int argc, char **argv) {
  if (argc != 1) die("usage: hoplite secret FILE   (a new 256-bit cluster secret, mode 0600)");
  char err[512];
  if (hpl__auth_create(argv[0], err, sizeof err) != 0) die("%s", err);
  printf("wrote a new cluster secret to %s; give it to every server with --auth-file %s\n",
         argv[0], argv[0]);
  return 0;
}

/* ------------------------------------------------------------------ demo */

int hpl__cli_demo(int argc, char **argv);

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
      !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  signal(SIGPIPE, SIG_IGN);
  conn_opts o = {.socket = NULL, .node = -1, .timeout_ms = 30000};
  static struct option opts[] = {{"socket", 1, 0, 's'}, {"node", 1, 0, 'n'},
                                 {"timeout", 1, 0, 't'}, {"json", 0, 0, 'j'},
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
        default: usage(stderr); return 2;
      }
    }
    if (pass == 0) {
      if (optind >= argc) {
        usage(stderr);
        return 2;
      }
      cmd = argv[optind];
      if (!strcmp(cmd, "cluster")) return cmd_cluster(argc - optind - 1, argv + optind + 1);
      if (!strcmp(cmd, "secret")) return cmd_secret(argc - optind - 1, argv + optind + 1);
      if (!strcmp(cmd, "demo")) return hpl__cli_demo(argc - optind, argv + optind);
      optind++;
      /* getopt restarts its scan from optind */
    }
  }
  int (*fn)(hpl_client *, conn_opts *, int, char **) = NULL;
  if (!strcmp(cmd, "put")) fn = cmd_put;
  else if (!strcmp(cmd, "get")) fn = cmd_get;
  else if (!strcmp(cmd, "stat")) fn = cmd_stat;
  else if (!strcmp(cmd, "ls")) fn = cmd_ls;
  else if (!strcmp(cmd, "rm")) fn = cmd_rm;
  else if (!strcmp(cmd, "counters")) fn = cmd_counters;
  else if (!strcmp(cmd, "transfers")) fn = cmd_transfers;
  if (!fn) {
    fprintf(stderr, "%s: unknown command '%s'\n", prog, cmd);
    usage(stderr);
    return 2;
  }
  hpl_client *c = open_client(&o);
  int rc = fn(c, &o, argc - optind, argv + optind);
  hpl_close(c);
  return rc;
}
