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
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "hoplite.h"
#include "localcluster.h"
#include "metrics.h"
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
          "  secret --metrics-token FILE\n"
          "             print the bearer token servers with this secret want on /metrics\n"
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
          "  status [--watch [SECONDS]] [--json]\n"
          "                         the whole cluster: nodes (liveness, heartbeat age, pool,\n"
          "                         objects), transfers in flight, reduces running;\n"
          "                         --watch refreshes every SECONDS (default 1) until Ctrl-C\n"
          "\n"
          "Timeouts default to 30000 ms (-t MS, -1 waits forever). --json prints one JSON\n"
          "object per line (ids: valid UTF-8 as it is, other bytes as \\udcXX escapes, as\n"
          "Python's \"surrogateescape\" reads them). put and get of objects of 1 MiB or\n"
          "more draw a progress bar (rate, ETA) on stderr when it is a terminal.\n");
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
  double watch_s; /* status --watch: refresh every this many seconds (0: once) */
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

/* ------------------------------------------------------------------ progress */

/* Objects this large get a progress bar (when stderr is a terminal). */
#define PROGRESS_MIN (1ull << 20)
#define PROGRESS_EVERY_NS 200000000ull /* redrawn at most this often */

/* A progress bar on stderr: "put ID [####    ]  45%  45.0 MiB / 100.0 MiB
 * 12.3 MB/s  ETA 5s", redrawn in place (\r), ended with a newline. Only
 * when stderr is a terminal: nothing at all otherwise. */
typedef struct progress {
  int on;
  const char *what, *id;
  uint64_t total; /* 0: unknown (stdin) */
  uint64_t t0_ns, last_ns;
  int drawn;
} progress;

static void progress_init(progress *p, const char *what, const char *id, uint64_t total) {
  *p = (progress){.on = isatty(STDERR_FILENO), .what = what, .id = id, .total = total,
                  .t0_ns = hpl__now_ns()};
}

static void fmt_secs(double s, char *buf, size_t len) {
  if (s < 60) snprintf(buf, len, "%.0fs", s);
  else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* Show `done` bytes (of p->total): at most every PROGRESS_EVERY_NS, or
 * now and for the last time with `final`. Small objects show nothing. */
static void progress_show(progress *p, uint64_t done, int final) {
  if (!p->on || (p->total ? p->total : done) < PROGRESS_MIN) return;
  uint64_t now = hpl__now_ns();
  if (!final && p->drawn && now - p->last_ns < PROGRESS_EVERY_NS) return;
  p->last_ns = now;
  p->drawn = 1;
  double secs = (double)(now - p->t0_ns) / 1e9;
  double rate = secs > 0 ? (double)done / secs : 0;
  char d[32], t[32], eta[32] = "", tail[128];
  hpl__fmt_bytes(done, d, sizeof d);
  double f = 0;
  if (p->total) {
    f = done >= p->total ? 1.0 : (double)done / (double)p->total;
    hpl__fmt_bytes(p->total, t, sizeof t);
    if (final) {
      strcpy(eta, "in ");
      fmt_secs(secs, eta + 3, sizeof eta - 3);
    } else if (rate > 0) {
      strcpy(eta, "ETA ");
      fmt_secs((double)(p->total - (done < p->total ? done : p->total)) / rate, eta + 4,
               sizeof eta - 4);
    }
    snprintf(tail, sizeof tail, "%3d%%  %s / %s  %.1f MB/s  %s", (int)(f * 100), d, t,
             rate / 1e6, eta);
  } else {
    snprintf(tail, sizeof tail, "%s  %.1f MB/s", d, rate / 1e6);
  }
  /* one line of the terminal: the id and the bar share what the rest leaves */
  struct winsize ws;
  int cols = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 80;
  int avail = cols - 1 - (int)strlen(p->what) - 1 - (int)strlen(tail) - 4;
  int idw = (int)strlen(p->id), barw = 30;
  if (idw > avail - 10) idw = avail - 10 > 8 ? avail - 10 : 8;
  if (barw > avail - idw) barw = avail - idw > 5 ? avail - idw : 5;
  char bar[32];
  if (!p->total) barw = 0;
  int k = (int)(f * barw);
  memset(bar, '#', (size_t)k);
  memset(bar + k, '.', (size_t)(barw - k));
  bar[barw] = 0;
  fprintf(stderr, "\r%s %.*s%s%s%s %s\033[K", p->what, idw, p->id, barw ? " [" : "", bar,
          barw ? "]" : "", tail);
  if (final) fputc('\n', stderr);
  fflush(stderr);
}

/* ------------------------------------------------------------------ put, get */

static int cmd_put(hpl_client *c, conn_opts *o, int argc, char **argv) {
  if (argc != 2) die("usage: hoplite put ID FILE|-");
  const char *id = argv[0], *file = argv[1];
  progress pg;
  if (strcmp(file, "-") == 0) {
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    ssize_t n;
    progress_init(&pg, "put", id, 0);
    while (buf && (n = read(STDIN_FILENO, buf + len, cap - len)) > 0) {
      len += (size_t)n;
      if (len == cap) buf = realloc(buf, cap *= 2);
      progress_show(&pg, len, 0);
    }
    if (!buf) die("out of memory");
    progress_show(&pg, len, 1);
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
  uint64_t off = 0, size = (uint64_t)st.st_size;
  progress_init(&pg, "put", id, size);
  /* in pieces: receivers may pull what is final, and the bar moves */
  const uint64_t piece = 8ull << 20;
  while (off < size) {
    ssize_t n = read(fd, p + off, (size_t)(size - off < piece ? size - off : piece));
    if (n <= 0) {
      hpl_abort(c, b);
      die("%s: read failed", file);
    }
    off += (uint64_t)n;
    hpl_buf_progress(c, b, off);
    progress_show(&pg, off, 0);
  }
  close(fd);
  progress_show(&pg, off, 1);
  check(c, hpl_seal(c, b, o->timeout_ms), "seal");
  fprintf(stderr, "put %s: %llu bytes\n", id, (unsigned long long)off);
  return 0;
}

/* A get on a thread of its own while the caller draws its progress. */
typedef struct get_job {
  hpl_client *c;
  const char *id;
  int64_t timeout_ms;
  hpl_buf *b;
  int rc, done;
  char detail[512]; /* hpl_errdetail is per thread: copied for the caller */
  pthread_mutex_t mu;
  pthread_cond_t cv;
} get_job;

static void *get_thread(void *arg) {
  get_job *j = arg;
  int rc = hpl_get(j->c, j->id, j->timeout_ms, &j->b);
  pthread_mutex_lock(&j->mu);
  j->rc = rc;
  if (rc) snprintf(j->detail, sizeof j->detail, "%s", hpl_errdetail(j->c));
  j->done = 1;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

/* hpl_get with a progress bar: the get runs on a thread; every 200 ms this
 * one asks the store how much of the object it holds and redraws. A get
 * that fails there ends the program (with the thread's detail); returns 0,
 * or hpl_get's code when no thread could be started and it ran here. */
static int get_with_progress(hpl_client *c, const char *id, int64_t timeout_ms, hpl_buf **out) {
  get_job j = {.c = c, .id = id, .timeout_ms = timeout_ms};
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&j.mu, NULL);
  pthread_cond_init(&j.cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_t t;
  if (pthread_create(&t, NULL, get_thread, &j) != 0) return hpl_get(c, id, timeout_ms, out);
  progress pg;
  progress_init(&pg, "get", id, 0);
  pthread_mutex_lock(&j.mu);
  while (!j.done) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)PROGRESS_EVERY_NS;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (pthread_cond_timedwait(&j.cv, &j.mu, &ts) == 0 || j.done) continue;
    pthread_mutex_unlock(&j.mu);
    uint64_t held, size;
    if (hpl_held_bytes(c, id, 1000, &held, &size) == 0 && size) {
      pg.total = size;
      progress_show(&pg, held, 0);
    }
    pthread_mutex_lock(&j.mu);
  }
  pthread_mutex_unlock(&j.mu);
  pthread_join(t, NULL);
  pthread_mutex_destroy(&j.mu);
  pthread_cond_destroy(&j.cv);
  if (j.rc) {
    if (pg.drawn) fputc('\n', stderr);
    die("get: %s (%s)", hpl_strerror(j.rc), j.detail);
  }
  pg.total = hpl_buf_size(j.b);
  progress_show(&pg, pg.total, 1);
  *out = j.b;
  return 0;
}

static int cmd_get(hpl_client *c, conn_opts *o, int argc, char **argv) {
  if (argc < 1 || argc > 2) die("usage: hoplite get ID [FILE|-]");
  hpl_buf *b;
  uint64_t t0 = hpl__now_ns();
  if (isatty(STDERR_FILENO))
    check(c, get_with_progress(c, argv[0], o->timeout_ms, &b), "get");
  else
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

/* ------------------------------------------------------------------ status */

/* One node of a status snapshot (an hpl_status text "node" line). */
typedef struct st_node {
  char id[17], state[16], addr[80], name[96];
  unsigned long long age;
  int stats;
  unsigned long long used, cap, objs, sent, recv;
  unsigned clients;
} st_node;

/* A node's name for the tables: its name, else its id's first 8 digits. */
static const char *node_label(const st_node *v, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].id, id)) return strcmp(v[i].name, "-") ? v[i].name : v[i].id;
  return id;
}

static void fmt_ms(unsigned long long ms, char *buf, size_t len) {
  if (ms < 10000) snprintf(buf, len, "%.1fs", (double)ms / 1000);
  else fmt_secs((double)ms / 1000, buf, len);
}

/* Render an hpl_status text snapshot as tables on stdout. */
static void status_render(char *text) {
  size_t nn = 0, cap = 16;
  st_node *v = malloc(cap * sizeof *v);
  char *xfers = NULL, *reduces = NULL; /* their lines, kept for after the nodes */
  size_t nx = 0, nr = 0;
  unsigned long long up = 0, hb = 0, objs = 0, inl = 0;
  unsigned tn = 0, tx = 0, tr = 0;
  char inst[17] = "?";
  if (!v) die("out of memory");
  for (char *line = text, *end; *line; line = end + 1) {
    if (!(end = strchr(line, '\n'))) break;
    *end = 0;
    int off = 0;
    if (!strncmp(line, "cluster ", 8)) {
      sscanf(line + 8, "%16s %llu %llu %llu %llu %u %u %u", inst, &up, &hb, &objs, &inl, &tn,
             &tx, &tr);
    } else if (!strncmp(line, "node ", 5)) {
      if (nn == cap && !(v = realloc(v, (cap *= 2) * sizeof *v))) die("out of memory");
      st_node *n = &v[nn];
      char f[6][24];
      if (sscanf(line + 5, "%16s %15s %llu %23s %23s %23s %23s %23s %23s %79s %n", n->id,
                 n->state, &n->age, f[0], f[1], f[2], f[3], f[4], f[5], n->addr, &off) != 10)
        continue;
      snprintf(n->name, sizeof n->name, "%s", line + 5 + off);
      n->stats = strcmp(f[0], "-") != 0;
      n->used = strtoull(f[0], NULL, 10), n->cap = strtoull(f[1], NULL, 10);
      n->objs = strtoull(f[2], NULL, 10), n->sent = strtoull(f[3], NULL, 10);
      n->recv = strtoull(f[4], NULL, 10), n->clients = (unsigned)strtoul(f[5], NULL, 10);
      nn++;
    } else if (!strncmp(line, "transfer ", 9)) {
      nx++;
      if (!xfers) xfers = line;
    } else if (!strncmp(line, "reduce ", 7)) {
      nr++;
      if (!reduces) reduces = line;
    }
  }
  char b1[32], b2[32], b3[32], b4[32];
  fmt_ms(up, b1, sizeof b1);
  printf("hoplite cluster  instance %s  up %s  %u node%s  %llu objects (%s inline)\n\n", inst, b1,
         tn, tn == 1 ? "" : "s", objs, hpl__fmt_bytes(inl, b2, sizeof b2));
  printf("%-16s %-9s %9s  %-28s %8s %10s %10s  %s\n", "NODE", "STATE", "HEARTBEAT", "POOL USED",
         "OBJECTS", "SENT", "RECEIVED", "ADDRESS");
  for (size_t i = 0; i < nn; i++) {
    st_node *n = &v[i];
    char pool[64] = "-", o[24] = "-", sent[24] = "-", recv[24] = "-", age[32];
    if (n->stats) {
      hpl__fmt_bytes(n->used, b3, sizeof b3);
      hpl__fmt_bytes(n->cap, b4, sizeof b4);
      snprintf(pool, sizeof pool, "%s / %s (%d%%)", b3, b4,
               n->cap ? (int)((double)n->used * 100 / (double)n->cap) : 0);
      snprintf(o, sizeof o, "%llu", n->objs);
      hpl__fmt_bytes(n->sent, sent, sizeof sent);
      hpl__fmt_bytes(n->recv, recv, sizeof recv);
    }
    fmt_ms(n->age, age, sizeof age);
    printf("%-16s %-9s %9s  %-28s %8s %10s %10s  %s\n", node_label(n, 1, n->id), n->state, age,
           pool, o, sent, recv, n->addr);
  }
  if (tn > nn) printf("... and %u more\n", tn - (unsigned)nn);
  printf("\nTRANSFERS IN FLIGHT: %u\n", tx);
  if (nx)
    printf("%-32s %-16s %-16s %-30s %10s\n", "OBJECT", "FROM", "TO", "PROGRESS", "RATE");
  for (char *line = xfers; line && nx; line += strlen(line) + 1) {
    if (strncmp(line, "transfer ", 9)) continue;
    nx--;
    char to[17], from[17], pct[64];
    unsigned long long held, size, rate, age;
    int off = 0;
    if (sscanf(line + 9, "%16s %16s %llu %llu %llu %llu %n", to, from, &held, &size, &rate, &age,
               &off) != 6)
      continue;
    hpl__fmt_bytes(held, b3, sizeof b3);
    hpl__fmt_bytes(size, b4, sizeof b4);
    snprintf(pct, sizeof pct, "%s / %s %3d%%", b3, b4,
             size ? (int)((double)held * 100 / (double)size) : 0);
    char r[24];
    snprintf(r, sizeof r, "%.1f MB/s", (double)rate / 1e6);
    printf("%-32s %-16s %-16s %-30s %10s\n", line + 9 + off, node_label(v, nn, from),
           node_label(v, nn, to), pct, r);
  }
  printf("\nREDUCES RUNNING: %u\n", tr);
  if (nr) printf("%-32s %-16s %-10s %9s  %s\n", "TARGET", "SINK", "JOINED", "ELAPSED", "SIZE");
  for (char *line = reduces; line && nr; line += strlen(line) + 1) {
    if (strncmp(line, "reduce ", 7)) continue;
    nr--;
    char sink[17], joined[32], el[32];
    unsigned j, need, srcs;
    unsigned long long ms, size;
    int off = 0;
    if (sscanf(line + 7, "%16s %u %u %u %llu %llu %n", sink, &j, &need, &srcs, &ms, &size,
               &off) != 6)
      continue;
    snprintf(joined, sizeof joined, "%u/%u", j, need);
    fmt_ms(ms, el, sizeof el);
    printf("%-32s %-16s %-10s %9s  %s\n", line + 7 + off, node_label(v, nn, sink), joined, el,
           size ? hpl__fmt_bytes(size, b3, sizeof b3) : "?");
  }
  free(v);
}

/* `hoplite status [--watch [SECONDS]] [--json]`: one snapshot, or one
 * every SECONDS until Ctrl-C (the screen cleared in between on a
 * terminal; without one, snapshots follow each other, a blank line apart,
 * or one JSON object per line). */
static int cmd_status(hpl_client *c, conn_opts *o, int argc, char **argv) {
  argc = take_json(o, argc, argv);
  if (argc > 0) die("usage: hoplite status [--watch [SECONDS]] [--json]");
  int tty = isatty(STDOUT_FILENO);
  for (int first = 1;; first = 0) {
    char *text;
    int rc = hpl_status(c, o->json ? HPL_STATUS_JSON : HPL_STATUS_TEXT, o->timeout_ms, &text);
    if (rc && (!o->watch_s || rc == HPL_ECONN)) check(c, rc, "status");
    if (o->watch_s && tty && !o->json) fputs("\033[H\033[2J", stdout);
    else if (o->watch_s && !first && !o->json) fputc('\n', stdout);
    if (o->watch_s && !o->json) {
      time_t now = time(NULL);
      char when[64];
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
      printf("every %.1fs   %s   (Ctrl-C ends)\n", o->watch_s, when);
    }
    if (rc)
      printf("status: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(c));
    else if (o->json)
      fputs(text, stdout);
    else
      status_render(text);
    if (!rc) hpl_free(text);
    fflush(stdout);
    if (!o->watch_s) return 0;
    struct timespec ts = {.tv_sec = (time_t)o->watch_s,
                          .tv_nsec = (long)((o->watch_s - (double)(time_t)o->watch_s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
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

/* `hoplite secret FILE`: a new cluster secret for --auth-file.
 * `hoplite secret --metrics-token FILE`: the bearer token /metrics wants
 * from scrapers of a cluster with that secret (metrics.h). */
static int cmd_secret(int argc, char **argv) {
  char err[512];
  if (argc == 2 && !strcmp(argv[0], "--metrics-token")) {
    hpl__auth a;
    char token[HPL__METRICS_TOKEN_LEN + 1];
    if (hpl__auth_load(argv[1], &a, err, sizeof err) != 0) die("%s", err);
    if (hpl__metrics_token(&a, token) != 0) die("libsodium cannot start");
    printf("%s\n", token);
    return 0;
  }
  if (argc != 1)
    die("usage: hoplite secret FILE   (a new 256-bit cluster secret, mode 0600)\n"
        "       hoplite secret --metrics-token FILE   (the bearer token for /metrics)");
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
                                 {"watch", 2, 0, 'w'},   {0, 0, 0, 0}};
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
        case 'w': { /* --watch [SECONDS], --watch=SECONDS */
          const char *arg = optarg;
          char *end;
          if (!arg && optind < argc && strtod(argv[optind], &end) > 0 && !*end)
            arg = argv[optind++];
          o.watch_s = arg ? strtod(arg, &end) : 1.0;
          if (arg && (*end || !(o.watch_s >= 0.1 && o.watch_s <= 86400)))
            die("--watch takes seconds between refreshes (0.1 to 86400), not '%s'", arg);
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
  else if (!strcmp(cmd, "status")) fn = cmd_status;
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
