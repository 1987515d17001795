/* bench_dir.c - the directory (and a store) at many objects.
 *
 *   bench_dir [--inline N] [--large M] [--large-size BYTES] [--secs S]
 *             [--procs 1,4,16] [--batch B] [--out FILE] [--label NAME]
 *
 * Starts a cluster of two stores (A, B), loads N inline objects of 100 B
 * and M objects of --large-size on A, and measures, with client
 * processes (one connection each, as task workers are):
 *  - put / get / stat / delete rates and latencies at each --procs level,
 *    one request at a time ("single"), and with --batch B requests in
 *    flight per connection ("batch", if the library has hpl_*_many);
 *    gets run on B, which holds no copy: small objects come from the
 *    directory;
 *  - listing everything (paged with hpl_list_page when the library has it,
 *    else hpl_list) while a prober process times stats every millisecond,
 *    and how many stores the directory declared dead meanwhile;
 *  - node loss (a store that holds nothing is killed) and client
 *    disconnects on A: the worst stat latency right after each;
 *  - memory: the directory's and the stores' RSS (heap: RssAnon) and the
 *    pool in use, before loading, after loading, after deleting everything.
 *
 * Old servers (another tree's build): HOPLITE_BIN_DIR=/old/build and
 * --no-auth; the old client library with LD_LIBRARY_PATH=/old/build (the
 * functions it lacks are looked up at run time and skipped).
 * Prints a table and, with --out, appends TSV rows (label metric value). */

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

/* ---- options and output */

static struct {
  uint64_t ninline, nlarge, large_size;
  int secs, batch, no_auth;
  int notfound_ok; /* deletes: "not found" is not an error */
  int procs[8], nprocs;
  const char *out, *label;
} g = {.ninline = 1000000, .nlarge = 20000, .large_size = 70 << 10, .secs = 3, .batch = 64,
       .label = "hoplite"};

static FILE *tsv;

static void report(const char *metric, double v, const char *unit) {
  printf("  %-44s %14.1f %s\n", metric, v, unit);
  fflush(stdout);
  if (tsv) {
    fprintf(tsv, "%s\t%s\t%.3f\n", g.label, metric, v);
    fflush(tsv);
  }
}

static void die(const char *what, hpl_client *c, int rc) {
  fprintf(stderr, "bench_dir: %s: %s (%s)\n", what, hpl_strerror(rc), c ? hpl_errdetail(c) : "");
  exit(1);
}

/* ---- optional library functions (newer than some libraries we run with) */

typedef int (*list_page_fn)(hpl_client *, const char *, const char *, size_t, int64_t, char **,
                            char **);
typedef int (*get_many_fn)(hpl_client *, const char *const *, size_t, int64_t, hpl_buf **, int *);
typedef int (*put_many_fn)(hpl_client *, const char *const *, const void *const *,
                           const uint64_t *, size_t, int64_t, int *);
typedef int (*ids_many_fn)(hpl_client *, const char *const *, size_t, int64_t, int *);
typedef int (*stat_many_fn)(hpl_client *, const char *const *, size_t, int64_t, uint64_t *, int *);
static list_page_fn list_page;
static get_many_fn get_many;
static put_many_fn put_many;
static stat_many_fn stat_many;
static ids_many_fn delete_many;

static void find_functions(void) {
  list_page = (list_page_fn)dlsym(RTLD_DEFAULT, "hpl_list_page");
  get_many = (get_many_fn)dlsym(RTLD_DEFAULT, "hpl_get_many");
  put_many = (put_many_fn)dlsym(RTLD_DEFAULT, "hpl_put_many");
  stat_many = (stat_many_fn)dlsym(RTLD_DEFAULT, "hpl_stat_many");
  delete_many = (ids_many_fn)dlsym(RTLD_DEFAULT, "hpl_delete_many");
}

/* ---- latency histogram: 1 us buckets up to 10 ms, then 1 ms up to 10 s */

#define H_FINE 10000
#define H_COARSE 10000
typedef struct hist {
  uint64_t n, sum_us, max_us;
  uint32_t fine[H_FINE], coarse[H_COARSE];
} hist;

static void h_add(hist *h, uint64_t us) {
  h->n++;
  h->sum_us += us;
  if (us > h->max_us) h->max_us = us;
  if (us < H_FINE) h->fine[us]++;
  else h->coarse[us / 1000 < H_COARSE ? us / 1000 : H_COARSE - 1]++;
}

static void h_merge(hist *a, const hist *b) {
  a->n += b->n;
  a->sum_us += b->sum_us;
  if (b->max_us > a->max_us) a->max_us = b->max_us;
  for (int i = 0; i < H_FINE; i++) a->fine[i] += b->fine[i];
  for (int i = 0; i < H_COARSE; i++) a->coarse[i] += b->coarse[i];
}

static double h_pct(const hist *h, double p) {
  uint64_t want = (uint64_t)(p * (double)h->n), seen = 0;
  for (int i = 0; i < H_FINE; i++)
    if ((seen += h->fine[i]) > want) return i / 1000.0;
  for (int i = 0; i < H_COARSE; i++)
    if ((seen += h->coarse[i]) > want) return (double)i;
  return h->max_us / 1000.0;
}

/* ---- worker processes */

typedef struct worker_out {
  hist h;
  uint64_t ops, errors;
  int first_rc;
} worker_out;

static hpl__lc *lc;

static hpl_client *connect_node(int node) {
  hpl_client *c;
  int rc = hpl_connect(hpl__lc_socket(lc, node), 10000, &c);
  if (rc) die("connect", NULL, rc);
  return c;
}

enum { OP_PUT, OP_GET, OP_STAT, OP_DELETE };
static const char *op_name[] = {"put", "get", "stat", "delete"};

static void inline_id(char *out, size_t len, uint64_t i) { snprintf(out, len, "i%09llu", (unsigned long long)i); }

/* Worker w of n: `op` one at a time or `batch` per call, for secs seconds
 * (timed) and/or over its share of the inline ids [base, base + limit)
 * (limit > 0). Ids: untimed ranges and deletes take inline ids of their
 * share; puts otherwise make p<run>/<w>/<k>; gets and stats pick loaded
 * inline ids at random. */
static void worker(int op, int w, int n, int node, int batch, int run, uint64_t base,
                   uint64_t limit, int timed, worker_out *res) {
  hpl_client *c = connect_node(node);
  uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(w + 1) + (uint64_t)run;
  uint8_t payload[100];
  memset(payload, w, sizeof payload);
  char ids[256][32];
  const char *idp[256];
  const void *datap[256];
  uint64_t sizes[256];
  int rcs[256];
  hpl_buf *bufs[256];
  if (batch > 256) batch = 256;
  uint64_t share = limit ? (limit + (uint64_t)n - 1) / (uint64_t)n : 0;
  uint64_t from = base + share * (uint64_t)w;
  uint64_t to = from + share > base + limit ? base + limit : from + share;
  uint64_t end = hpl__now_ms() + (uint64_t)g.secs * 1000, k = 0;
  for (;;) {
    if ((limit && from + k >= to) || (timed && hpl__now_ms() >= end)) break;
    int m = batch;
    if (limit && (uint64_t)m > to - from - k) m = (int)(to - from - k);
    for (int j = 0; j < m; j++) {
      if (op == OP_PUT && !limit)
        snprintf(ids[j], sizeof ids[j], "p%d/%d/%llu", run, w, (unsigned long long)(k + j));
      else if (limit)
        inline_id(ids[j], sizeof ids[j], from + k + (uint64_t)j);
      else {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        inline_id(ids[j], sizeof ids[j], (seed >> 20) % g.ninline);
      }
      idp[j] = ids[j];
      datap[j] = payload;
      sizes[j] = sizeof payload;
    }
    uint64_t t0 = hpl__now_ns();
    int rc = 0;
    if (batch > 1) {
      switch (op) {
        case OP_PUT: rc = put_many(c, idp, datap, sizes, (size_t)m, 30000, rcs); break;
        case OP_GET: rc = get_many(c, idp, (size_t)m, 30000, bufs, rcs); break;
        case OP_STAT: rc = stat_many(c, idp, (size_t)m, 30000, NULL, rcs); break;
        case OP_DELETE: rc = delete_many(c, idp, (size_t)m, 30000, rcs); break;
      }
      for (int j = 0; j < m; j++) {
        if (rcs[j] && !(g.notfound_ok && rcs[j] == HPL_ENOTFOUND)) {
          res->errors++;
          if (!res->first_rc) res->first_rc = rcs[j];
        } else if (op == OP_GET) {
          hpl_release(c, bufs[j]);
        }
      }
    } else {
      hpl_buf *b;
      switch (op) {
        case OP_PUT: rc = hpl_put(c, idp[0], payload, sizeof payload, 30000); break;
        case OP_GET:
          rc = hpl_get(c, idp[0], 30000, &b);
          if (!rc) hpl_release(c, b);
          break;
        case OP_STAT: rc = hpl_stat(c, idp[0], 30000, NULL, NULL, NULL, NULL); break;
        case OP_DELETE: rc = hpl_delete(c, idp[0], 30000); break;
      }
      if (rc && !(g.notfound_ok && rc == HPL_ENOTFOUND)) {
        res->errors++;
        if (!res->first_rc) res->first_rc = rc;
      }
    }
    uint64_t us = (hpl__now_ns() - t0) / 1000;
    for (int j = 0; j < m; j++) h_add(&res->h, batch > 1 ? us : us); /* per request: its call */
    res->ops += (uint64_t)m;
    k += (uint64_t)m;
  }
  hpl_close(c);
}

/* Run `op` in n processes (see worker); returns ops/s and fills *h. */
static double run_procs(int op, int n, int node, int batch, int run, uint64_t base, uint64_t limit,
                        int timed, hist *h) {
  worker_out *outs = mmap(NULL, sizeof *outs * (size_t)n, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (outs == MAP_FAILED) die("mmap", NULL, HPL_ESYS);
  memset(outs, 0, sizeof *outs * (size_t)n);
  uint64_t t0 = hpl__now_ns();
  pid_t *pids = calloc((size_t)n, sizeof *pids);
  for (int w = 0; w < n; w++) {
    pids[w] = fork();
    if (pids[w] == 0) {
      worker(op, w, n, node, batch, run, base, limit, timed, &outs[w]);
      _exit(0);
    }
  }
  for (int w = 0; w < n; w++) waitpid(pids[w], NULL, 0);
  double secs = (double)(hpl__now_ns() - t0) / 1e9;
  uint64_t ops = 0, errors = 0;
  int first = 0;
  memset(h, 0, sizeof *h);
  for (int w = 0; w < n; w++) {
    ops += outs[w].ops;
    errors += outs[w].errors;
    if (!first) first = outs[w].first_rc;
    h_merge(h, &outs[w].h);
  }
  if (errors)
    fprintf(stderr, "bench_dir: %s: %llu of %llu failed (first: %s)\n", op_name[op],
            (unsigned long long)errors, (unsigned long long)ops, hpl_strerror(first));
  munmap(outs, sizeof *outs * (size_t)n);
  free(pids);
  return (double)ops / secs;
}

/* ---- server facts */

static uint64_t proc_status(pid_t pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  uint64_t kb = 0;
  size_t kl = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl) && line[kl] == ':') kb = strtoull(line + kl + 1, NULL, 10);
  if (f) fclose(f);
  return kb * 1024;
}

static uint64_t counter(hpl_client *c, const char *name) {
  uint64_t v = 0;
  return hpl_counter(c, name, 10000, &v) == 0 ? v : 0;
}

/* A directory counter through a store (they are proxied as COUNTERS? no:
 * the store answers COUNTERS itself), so read the directory's over the
 * transfer record: nodes declared dead are logged there as node-gone. */
static uint64_t nodes_gone(hpl_client *c) {
  uint64_t since = 0, n = 0;
  for (;;) {
    char *text = NULL;
    uint64_t next = since;
    if (hpl_transfers(c, since, 10000, &text, &next)) break;
    for (char *l = strstr(text, "node-gone"); l; l = strstr(l + 1, "node-gone")) n++;
    int empty = !*text;
    hpl_free(text);
    if (empty || next == since) break;
    since = next;
  }
  return n;
}

static void memory(const char *when, hpl_client *a, hpl_client *b, uint64_t objs) {
  pid_t d = hpl__lc_dir_pid(lc);
  char m[96];
  snprintf(m, sizeof m, "%s: directory RSS", when);
  report(m, (double)proc_status(d, "VmRSS") / 1048576.0, "MiB");
  for (int i = 0; i < 2; i++) {
    hpl_client *c = i ? b : a;
    pid_t p = hpl__lc_store_pid(lc, i);
    snprintf(m, sizeof m, "%s: store %c heap (RssAnon)", when, 'A' + i);
    report(m, (double)proc_status(p, "RssAnon") / 1048576.0, "MiB");
    snprintf(m, sizeof m, "%s: store %c pool in use", when, 'A' + i);
    report(m, (double)counter(c, "pool_used") / 1048576.0, "MiB");
    snprintf(m, sizeof m, "%s: store %c objects", when, 'A' + i);
    report(m, (double)counter(c, "objects"), "");
  }
  (void)objs;
}

/* ---- a prober: stat latency every millisecond until told to stop */

typedef struct probe {
  volatile int stop;
  hist h;
} probe;

static pid_t probe_start(probe *p, int node) {
  memset(p, 0, sizeof *p);
  pid_t pid = fork();
  if (pid == 0) {
    hpl_client *c = connect_node(node);
    while (!p->stop) {
      uint64_t t0 = hpl__now_ns();
      hpl_stat(c, "i000000001", 10000, NULL, NULL, NULL, NULL);
      h_add(&p->h, (hpl__now_ns() - t0) / 1000);
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    hpl_close(c);
    _exit(0);
  }
  return pid;
}

static void probe_stop(probe *p, pid_t pid) {
  p->stop = 1;
  waitpid(pid, NULL, 0);
}

/* ---- the phases */

static void load(hpl_client *a) {
  hist h;
  uint64_t t0 = hpl__now_ms();
  int batch = put_many ? g.batch : 1;
  /* inline objects i000000000.. by 16 processes */
  double rate = run_procs(OP_PUT, 16, 0, batch, -1, 0, g.ninline, 0, &h);
  report("load: inline objects/s (16 procs)", rate, "ops/s");
  uint8_t *big = malloc(g.large_size);
  memset(big, 7, g.large_size);
  char id[32];
  uint64_t t1 = hpl__now_ms();
  for (uint64_t i = 0; i < g.nlarge; i++) {
    snprintf(id, sizeof id, "L%08llu", (unsigned long long)i);
    int rc = hpl_put(a, id, big, g.large_size, 30000);
    if (rc) die("put large", a, rc);
  }
  free(big);
  report("load: large objects/s (1 proc)",
         g.nlarge ? (double)g.nlarge * 1000.0 / (double)(hpl__now_ms() - t1 + 1) : 0, "ops/s");
  report("load: seconds", (double)(hpl__now_ms() - t0) / 1000.0, "s");
}

/* Rates of `ops` (a bit mask of 1 << OP_*) at every level, single and
 * batched. Deletes take consecutive slices of the loaded inline ids from
 * *del_base on (so run them last). */
static void rates(unsigned ops, uint64_t *del_base) {
  static int run = 0;
  for (int mode = 0; mode < 2; mode++) {
    int batch = mode ? g.batch : 1;
    if (mode && (!put_many || !get_many || !stat_many || !delete_many)) break;
    for (int pi = 0; pi < g.nprocs; pi++) {
      int n = g.procs[pi];
      for (int op = 0; op < 4; op++) {
        if (!(ops & (1u << op))) continue;
        hist h;
        char m[96];
        double r;
        if (op == OP_DELETE) {
          uint64_t slice = g.ninline / 8; /* at most this many per level */
          r = run_procs(op, n, 0, batch, ++run, *del_base, slice, 1, &h);
          *del_base += slice;
        } else {
          r = run_procs(op, n, op == OP_GET ? 1 : 0, batch, ++run, 0, 0, 1, &h);
        }
        snprintf(m, sizeof m, "%s %s/s, %d procs%s", op_name[op], "ops", n,
                 mode ? " (batch)" : "");
        report(m, r, "ops/s");
        snprintf(m, sizeof m, "%s p50/p99 ms, %d procs%s", op_name[op], n, mode ? " (batch)" : "");
        printf("  %-44s %8.3f / %.3f ms\n", m, h_pct(&h, 0.5), h_pct(&h, 0.99));
        if (tsv) fprintf(tsv, "%s\t%s p50_ms\t%.3f\n%s\t%s p99_ms\t%.3f\n", g.label, m,
                         h_pct(&h, 0.5), g.label, m, h_pct(&h, 0.99));
      }
    }
  }
}

static void listing(hpl_client *a) {
  probe *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint64_t dead0 = nodes_gone(a);
  pid_t pid = probe_start(p, 1);
  struct timespec ts = {0, 200000000};
  nanosleep(&ts, NULL);
  uint64_t t0 = hpl__now_ms(), listed = 0;
  int rc = 0;
  if (list_page) {
    char *after = NULL;
    do {
      char *text = NULL, *next = NULL;
      rc = list_page(a, "", after, 0, 60000, &text, &next);
      if (rc) break;
      for (char *l = text; *l; l++) listed += *l == '\n';
      hpl_free(text);
      hpl_free(after);
      after = next;
    } while (after);
    hpl_free(after);
  } else {
    char *text = NULL;
    rc = hpl_list(a, "", 600000, &text);
    if (!rc) {
      for (char *l = text; *l; l++) listed += *l == '\n';
      hpl_free(text);
    }
  }
  uint64_t took = hpl__now_ms() - t0;
  nanosleep(&ts, NULL);
  probe_stop(p, pid);
  report(list_page ? "list (paged): seconds" : "list (one call): seconds", (double)took / 1000.0,
         "s");
  report("list: objects listed", (double)listed, "");
  if (rc) printf("  list failed: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(a));
  report("list: result (0 ok)", (double)rc, "");
  report("stat during list: p50", h_pct(&p->h, 0.5), "ms");
  report("stat during list: p99", h_pct(&p->h, 0.99), "ms");
  report("stat during list: max", (double)p->h.max_us / 1000.0, "ms");
  report("stores declared dead during list", (double)(nodes_gone(a) - dead0), "");
  munmap(p, sizeof *p);
}

static void losses(void) {
  probe *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  char err[256];
  int idx = hpl__lc_add_store(lc, "--memory 64M", err, sizeof err);
  if (idx < 0) {
    fprintf(stderr, "bench_dir: add store: %s\n", err);
    return;
  }
  pid_t pid = probe_start(p, 1);
  struct timespec ts = {0, 300000000};
  nanosleep(&ts, NULL);
  hpl__lc_signal(lc, idx, SIGKILL);
  nanosleep(&ts, NULL);
  nanosleep(&ts, NULL);
  probe_stop(p, pid);
  report("node loss (empty store killed): worst stat", (double)p->h.max_us / 1000.0, "ms");
  /* the directory's own account (newer directories log it): the last loss */
  char path[4096], line[512];
  double gone_ms = -1;
  snprintf(path, sizeof path, "%s/directory.log", hpl__lc_work_dir(lc));
  FILE *f = fopen(path, "r");
  while (f && fgets(line, sizeof line, f)) {
    char *r = strstr(line, "copies dropped in ");
    if (r) gone_ms = atof(r + strlen("copies dropped in "));
  }
  if (f) fclose(f);
  report("node loss: the directory's time to drop it (-1: not logged)", gone_ms < 0 ? -1 : gone_ms * 1000, "us");
  /* client disconnects at A, which holds every object */
  uint64_t t0 = hpl__now_ns();
  for (int i = 0; i < 50; i++) {
    hpl_client *c = connect_node(0);
    hpl_stat(c, "i000000001", 10000, NULL, NULL, NULL, NULL);
    hpl_close(c);
  }
  hpl_client *c = connect_node(0);
  uint64_t v;
  hpl_counter(c, "objects", 10000, &v); /* after the last close was handled */
  hpl_close(c);
  report("client connect+stat+close at A, each",
         (double)(hpl__now_ns() - t0) / 51.0 / 1e6, "ms");
  munmap(p, sizeof *p);
}

/* The directory stops for 5 s, so the stores' heartbeats go unanswered and
 * they connect again: how long until the store holding everything is
 * listed again (the last object it loaded has a complete copy), and the
 * stat latency meanwhile (from the moment the directory runs again). */
static void reconnect(hpl_client *a) {
  char last[32];
  if (g.nlarge)
    snprintf(last, sizeof last, "L%08llu", (unsigned long long)(g.nlarge - 1));
  else
    inline_id(last, sizeof last, g.ninline ? g.ninline - 1 : 0);
  probe *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  hpl__lc_signal(lc, -1, SIGSTOP);
  struct timespec ts = {5, 0};
  nanosleep(&ts, NULL);
  hpl__lc_signal(lc, -1, SIGCONT);
  uint64_t t0 = hpl__now_ms();
  pid_t pid = probe_start(p, 1);
  int listed = 0;
  while (hpl__now_ms() - t0 < 300000) {
    uint32_t complete = 0;
    if (hpl_stat(a, last, 10000, NULL, NULL, &complete, NULL) == 0 && complete > 0) {
      /* listed; but right after the pause it may still be the old listing */
      uint64_t v;
      if (hpl_counter(a, "dir_registrations", 1000, &v) != 0 || v >= 2) {
        listed = 1;
        break;
      }
    }
    struct timespec w = {0, 20000000};
    nanosleep(&w, NULL);
  }
  uint64_t took = hpl__now_ms() - t0;
  /* the store's own account of re-reporting (newer stores log it) */
  char path[4096], line[512];
  double rr_ms = -1, rr_n = 0;
  snprintf(path, sizeof path, "%s/node-0.log", hpl__lc_work_dir(lc));
  for (int tries = 0; tries < 600 && rr_ms < 0; tries++) {
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      char *r = strstr(line, "re-reported ");
      unsigned long long n, ms;
      if (r && sscanf(r, "re-reported %llu objects to the directory in %llu ms", &n, &ms) == 2)
        rr_n = (double)n, rr_ms = (double)ms; /* the last one */
    }
    if (f) fclose(f);
    if (rr_ms < 0) {
      struct timespec w = {0, 100000000};
      nanosleep(&w, NULL);
    }
  }
  probe_stop(p, pid);
  /* every large object and every 100th small one is listed with a complete
   * copy again (the loaded ones; the rate phases' puts are not checked) */
  uint64_t unlisted = 0, checked = 0;
  char id[32];
  for (uint64_t i = 0; i < g.nlarge + g.ninline; i += i < g.nlarge ? 1 : 100) {
    if (i < g.nlarge)
      snprintf(id, sizeof id, "L%08llu", (unsigned long long)i);
    else
      inline_id(id, sizeof id, i - g.nlarge);
    uint32_t complete = 0;
    if (hpl_stat(a, id, 10000, NULL, NULL, &complete, NULL) != 0 || complete == 0) unlisted++;
    checked++;
  }
  report("directory stopped 5 s: seconds until listed again", listed ? (double)took / 1000.0 : -1,
         "s");
  report("  objects checked after it", (double)checked, "");
  report("  ... without a complete copy listed", (double)unlisted, "");
  report("  store A re-reported objects", rr_n, "");
  report("  ... in (store's log; -1: not logged)", rr_ms, "ms");
  report("  stat meanwhile: p99", h_pct(&p->h, 0.99), "ms");
  report("  stat meanwhile: max", (double)p->h.max_us / 1000.0, "ms");
  munmap(p, sizeof *p);
}

static void delete_all(uint64_t del_base) {
  hist h;
  int batch = delete_many ? g.batch : 1;
  /* every loaded small object: the timed delete phases stopped part-way
   * through their slices (those already deleted answer "not found") */
  (void)del_base;
  g.notfound_ok = 1;
  double r = run_procs(OP_DELETE, 16, 0, batch, 0, 0, g.ninline, 0, &h);
  g.notfound_ok = 0;
  report("delete every small object left: ids/s (16 procs)", r, "ops/s");
  hpl_client *a = connect_node(0);
  char id[32];
  uint64_t lfail = 0;
  for (uint64_t i = 0; i < g.nlarge; i++) {
    snprintf(id, sizeof id, "L%08llu", (unsigned long long)i);
    int rc = hpl_delete(a, id, 30000);
    if (rc && lfail++ < 3) fprintf(stderr, "bench_dir: delete %s: %s\n", id, hpl_strerror(rc));
  }
  report("delete the large objects: failed", (double)lfail, "");
  /* what the rate phases put: page by page (a page may be empty and still
   * have a next one: the directory bounds what one answer scans) */
  uint64_t deleted = 0, failed = 0;
  char *after = NULL;
  for (;;) {
    char *text = NULL, *next = NULL;
    int rc = list_page ? list_page(a, "p", after, 0, 60000, &text, &next)
                       : hpl_list(a, "p", 60000, &text);
    if (rc) {
      fprintf(stderr, "bench_dir: listing to delete: %s\n", hpl_strerror(rc));
      hpl_free(text);
      break;
    }
    int any = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
      char *tab = strchr(l, '\t');
      if (tab) *tab = 0;
      if (hpl_delete(a, l, 30000) == 0)
        deleted++;
      else
        failed++;
      any = 1;
    }
    hpl_free(text);
    hpl_free(after);
    after = next; /* NULL after the last page */
    if (!list_page ? !any : !after) break;
  }
  hpl_free(after);
  report("delete the rate phases' objects: deleted", (double)deleted, "");
  report("delete the rate phases' objects: failed", (double)failed, "");
  hpl_close(a);
}

static int parse_procs(const char *s) {
  g.nprocs = 0;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *t = strtok(buf, ","); t && g.nprocs < 8; t = strtok(NULL, ","))
    if ((g.procs[g.nprocs++] = atoi(t)) < 1) return -1;
  return g.nprocs ? 0 : -1;
}

int main(int argc, char **argv) {
  parse_procs("1,4,16");
  static struct option opts[] = {{"inline", 1, 0, 'i'}, {"large", 1, 0, 'l'},
                                 {"large-size", 1, 0, 's'}, {"secs", 1, 0, 't'},
                                 {"procs", 1, 0, 'p'}, {"batch", 1, 0, 'b'},
                                 {"out", 1, 0, 'o'}, {"label", 1, 0, 'L'},
                                 {"no-auth", 0, 0, 'n'}, {0, 0, 0, 0}};
  int ch;
  uint64_t v;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
      case 'i': g.ninline = strtoull(optarg, NULL, 10); break;
      case 'l': g.nlarge = strtoull(optarg, NULL, 10); break;
      case 's':
        if (hpl__parse_size(optarg, &v)) goto usage;
        g.large_size = v;
        break;
      case 't': g.secs = atoi(optarg); break;
      case 'p':
        if (parse_procs(optarg)) goto usage;
        break;
      case 'b': g.batch = atoi(optarg); break;
      case 'o': g.out = optarg; break;
      case 'L': g.label = optarg; break;
      case 'n': g.no_auth = 1; break;
      default:
      usage:
        fprintf(stderr, "usage: bench_dir [--inline N] [--large M] [--large-size BYTES] "
                        "[--secs S] [--procs 1,4,16] [--batch B] [--out FILE] [--label NAME] "
                        "[--no-auth]\n");
        return 2;
    }
  }
  if (g.batch < 1) g.batch = 1;
  signal(SIGPIPE, SIG_IGN);
  find_functions();
  if (g.out && !(tsv = fopen(g.out, "a"))) {
    perror(g.out);
    return 1;
  }
  uint64_t mem = (256ull << 20) + g.ninline * 256 + g.nlarge * (g.large_size + 8192) * 5 / 4;
  /* --delete-any: the delete phases remove what clients of both stores put */
  hpl__lc_opts o = {.nodes = 2, .memory = mem, .no_auth = g.no_auth, .timeout_ms = 60000,
                   .dir_args = "--delete-any"};
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_dir: %s\n", err);
    return 1;
  }
  printf("bench_dir %s: %llu inline objects (100 B), %llu of %llu B; library functions: "
         "list_page %s, *_many %s\n",
         g.label, (unsigned long long)g.ninline, (unsigned long long)g.nlarge,
         (unsigned long long)g.large_size, list_page ? "yes" : "no", get_many ? "yes" : "no");
  hpl_client *a = connect_node(0), *b = connect_node(1);
  memory("before loading", a, b, 0);
  load(a);
  memory("after loading", a, b, g.ninline + g.nlarge);
  uint64_t del_base = 0;
  rates(1u << OP_PUT | 1u << OP_GET | 1u << OP_STAT, &del_base);
  listing(a);
  const char *skip = getenv("BENCH_DIR_SKIP"); /* for experiments: "losses,reconnect" */
  if (!skip || !strstr(skip, "losses")) losses();
  if (!skip || !strstr(skip, "reconnect")) reconnect(a);
  rates(1u << OP_DELETE, &del_base);
  delete_all(del_base);
  struct timespec ts = {1, 0};
  nanosleep(&ts, NULL);
  memory("after deleting all", a, b, 0);
  hpl_close(a);
  hpl_close(b);
  hpl__lc_stop(lc);
  if (tsv) fclose(tsv);
  return 0;
}
