/* bench_dir.c - the directory (and a store) at many objects.
 *
 *   bench_dir [--inline N] [--large M] [--large-size BYTES] [--secs S]
 *             [--procs 1,4,16] [--batch B] [--out FILE] [--label NAME]
 *
 * Starts a cluster of two stores (A, B), loads N inline objects of 100 B
 * (--small-size: up to 64 KiB)
 * and M objects of --large-size on A, and measures, with client
 * processes (one connection each, as task workers are):
 *  - put / get / stat / delete rates, latencies and CPU per request (the
 *    clients', the stores' and the directory's) at each --procs level,
 *    one request at a time ("single"), and with --batch B requests in
 *    flight per connection ("batch", if the library has hpl_*_many);
 *    gets and stats run on B, which holds no copy: small objects come from
 *    the directory, and stats go to it directly (since issue 42; before,
 *    stats ran on A);
 *  - listing everything (paged with hpl_list_page when the library has it,
 *    else hpl_list) while a prober process times stats every millisecond,
 *    and how many stores the directory declared dead meanwhile;
 *  - node loss (a store that holds nothing is killed) and client
 *    disconnects on A: the worst stat latency right after each;
 *  - memory: the directory's and the stores' RSS (heap: RssAnon) and the
 *    pool in use, before loading, after loading, after deleting everything.
 *
 * --ha: standby directories (a local etcd, two directories under a leader
 * lease; the first leads), for the cost of the lease when nothing fails.
 * Old servers (another tree's build): HOPLITE_BIN_DIR=/old/build and
 * --no-auth; the old client library with LD_LIBRARY_PATH=/old/build (the
 * functions it lacks are looked up at run time and skipped).
 * Prints a table and, with --out, appends TSV rows (label metric value).
 * This file: options, output, the servers' facts, the phases and main;
 * bench_dirprobe.c: the phases timed by a prober (listing, node loss,
 * the directory stopped); bench_dirwork.c: the client worker processes,
 * latency histograms and CPU per request (bench_dir.h). */

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

#include "bench_dir.h"

/* ---- options and output */

hpl__bd_opts hpl__bd = {.ninline = 1000000, .nlarge = 20000, .large_size = 70 << 10,
                        .small_size = 100, .secs = 3,
                        .batch = 64, .label = "hoplite"};
FILE *hpl__bd_tsv;
hpl__lc *hpl__bd_lc;

void hpl__bd_report(const char *metric, double v, const char *unit) {
  printf("  %-44s %14.1f %s\n", metric, v, unit);
  fflush(stdout);
  if (hpl__bd_tsv) {
    fprintf(hpl__bd_tsv, "%s\t%s\t%.3f\n", hpl__bd.label, metric, v);
    fflush(hpl__bd_tsv);
  }
}

void hpl__bd_die(const char *what, hpl_client *c, int rc) {
  fprintf(stderr, "bench_dir: %s: %s (%s)\n", what, hpl_strerror(rc), c ? hpl_errdetail(c) : "");
  exit(1);
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

static void memory(const char *when, hpl_client *a, hpl_client *b, uint64_t objs) {
  pid_t d = hpl__lc_dir_pid(hpl__bd_lc);
  char m[96];
  snprintf(m, sizeof m, "%s: directory RSS", when);
  hpl__bd_report(m, (double)proc_status(d, "VmRSS") / 1048576.0, "MiB");
  for (int i = 0; i < 2; i++) {
    hpl_client *c = i ? b : a;
    pid_t p = hpl__lc_store_pid(hpl__bd_lc, i);
    snprintf(m, sizeof m, "%s: store %c heap (RssAnon)", when, 'A' + i);
    hpl__bd_report(m, (double)proc_status(p, "RssAnon") / 1048576.0, "MiB");
    snprintf(m, sizeof m, "%s: store %c pool in use", when, 'A' + i);
    hpl__bd_report(m, (double)counter(c, "pool_used") / 1048576.0, "MiB");
    snprintf(m, sizeof m, "%s: store %c objects", when, 'A' + i);
    hpl__bd_report(m, (double)counter(c, "objects"), "");
  }
  (void)objs;
}

/* ---- the phases */

static void load(hpl_client *a) {
  hpl__bd_hist h;
  uint64_t t0 = hpl__now_ms();
  int batch = hpl__bd_put_many ? hpl__bd.batch : 1;
  /* inline objects i000000000.. by 16 processes */
  double rate = hpl__bd_run(HPL__BD_PUT, 16, 0, batch, -1, 0, hpl__bd.ninline, 0, &h, NULL);
  hpl__bd_report("load: inline objects/s (16 procs)", rate, "ops/s");
  uint8_t *big = malloc(hpl__bd.large_size);
  memset(big, 7, hpl__bd.large_size);
  char id[32];
  uint64_t t1 = hpl__now_ms();
  for (uint64_t i = 0; i < hpl__bd.nlarge; i++) {
    snprintf(id, sizeof id, "L%08llu", (unsigned long long)i);
    int rc = hpl_put(a, id, big, hpl__bd.large_size, 30000);
    if (rc) hpl__bd_die("put large", a, rc);
  }
  free(big);
  hpl__bd_report("load: large objects/s (1 proc)",
         hpl__bd.nlarge ? (double)hpl__bd.nlarge * 1000.0 / (double)(hpl__now_ms() - t1 + 1) : 0, "ops/s");
  hpl__bd_report("load: seconds", (double)(hpl__now_ms() - t0) / 1000.0, "s");
}

/* Rates of `ops` (a bit mask of 1 << OP_*) at every level, single and
 * batched. Deletes take consecutive slices of the loaded inline ids from
 * *del_base on (so run them last). */
static void rates(unsigned ops, uint64_t *del_base) {
  static int run = 0;
  for (int mode = 0; mode < 2; mode++) {
    int batch = mode ? hpl__bd.batch : 1;
    if (mode && (!hpl__bd_put_many || !hpl__bd_get_many || !hpl__bd_stat_many || !hpl__bd_delete_many)) break;
    for (int pi = 0; pi < hpl__bd.nprocs; pi++) {
      int n = hpl__bd.procs[pi];
      for (int op = 0; op < 4; op++) {
        if (!(ops & (1u << op))) continue;
        hpl__bd_hist h;
        hpl__bd_cpu cpu;
        char m[96];
        double r;
        if (op == HPL__BD_DELETE) {
          uint64_t slice = hpl__bd.ninline / 8; /* at most this many per level */
          r = hpl__bd_run(op, n, 0, batch, ++run, *del_base, slice, 1, &h, &cpu);
          *del_base += slice;
        } else {
          r = hpl__bd_run(op, n, op == HPL__BD_GET || op == HPL__BD_STAT ? 1 : 0, batch, ++run, 0, 0, 1,
                          &h, &cpu);
        }
        snprintf(m, sizeof m, "%s %s/s, %d procs%s", hpl__bd_op_name[op], "ops", n,
                 mode ? " (batch)" : "");
        hpl__bd_report(m, r, "ops/s");
        snprintf(m, sizeof m, "%s p50/p99 ms, %d procs%s", hpl__bd_op_name[op], n, mode ? " (batch)" : "");
        printf("  %-44s %8.3f / %.3f ms\n", m, hpl__bd_h_pct(&h, 0.5), hpl__bd_h_pct(&h, 0.99));
        if (hpl__bd_tsv) fprintf(hpl__bd_tsv, "%s\t%s p50_ms\t%.3f\n%s\t%s p99_ms\t%.3f\n", hpl__bd.label, m,
                         hpl__bd_h_pct(&h, 0.5), hpl__bd.label, m, hpl__bd_h_pct(&h, 0.99));
        /* CPU per request, every process involved (the issue-42 budget) */
        snprintf(m, sizeof m, "%s CPU us/op, %d procs%s", hpl__bd_op_name[op], n,
                 mode ? " (batch)" : "");
        double all = cpu.client_us + cpu.store_us + cpu.dir_us;
        printf("  %-44s %14.1f us (client %.1f, stores %.1f, directory %.1f)\n", m, all,
               cpu.client_us, cpu.store_us, cpu.dir_us);
        if (hpl__bd_tsv)
          fprintf(hpl__bd_tsv, "%s\t%s\t%.3f\n%s\t%s client\t%.3f\n%s\t%s stores\t%.3f\n"
                  "%s\t%s directory\t%.3f\n", hpl__bd.label, m, all, hpl__bd.label, m,
                  cpu.client_us, hpl__bd.label, m, cpu.store_us, hpl__bd.label, m, cpu.dir_us);
      }
    }
  }
}

static void delete_all(uint64_t del_base) {
  hpl__bd_hist h;
  int batch = hpl__bd_delete_many ? hpl__bd.batch : 1;
  /* every loaded small object: the timed delete phases stopped part-way
   * through their slices (those already deleted answer "not found") */
  (void)del_base;
  hpl__bd.notfound_ok = 1;
  double r = hpl__bd_run(HPL__BD_DELETE, 16, 0, batch, 0, 0, hpl__bd.ninline, 0, &h, NULL);
  hpl__bd.notfound_ok = 0;
  hpl__bd_report("delete every small object left: ids/s (16 procs)", r, "ops/s");
  hpl_client *a = hpl__bd_connect(0);
  char id[32];
  uint64_t lfail = 0;
  for (uint64_t i = 0; i < hpl__bd.nlarge; i++) {
    snprintf(id, sizeof id, "L%08llu", (unsigned long long)i);
    int rc = hpl_delete(a, id, 30000);
    if (rc && lfail++ < 3) fprintf(stderr, "bench_dir: delete %s: %s\n", id, hpl_strerror(rc));
  }
  hpl__bd_report("delete the large objects: failed", (double)lfail, "");
  /* what the rate phases put: page by page (a page may be empty and still
   * have a next one: the directory bounds what one answer scans) */
  uint64_t deleted = 0, failed = 0;
  char *after = NULL;
  for (;;) {
    char *text = NULL, *next = NULL;
    int rc = hpl__bd_list_page ? hpl__bd_list_page(a, "p", after, 0, 60000, &text, &next)
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
    if (!hpl__bd_list_page ? !any : !after) break;
  }
  hpl_free(after);
  hpl__bd_report("delete the rate phases' objects: deleted", (double)deleted, "");
  hpl__bd_report("delete the rate phases' objects: failed", (double)failed, "");
  hpl_close(a);
}

static int parse_procs(const char *s) {
  hpl__bd.nprocs = 0;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *t = strtok(buf, ","); t && hpl__bd.nprocs < 8; t = strtok(NULL, ","))
    if ((hpl__bd.procs[hpl__bd.nprocs++] = atoi(t)) < 1) return -1;
  return hpl__bd.nprocs ? 0 : -1;
}

int main(int argc, char **argv) {
  parse_procs("1,4,16");
  static struct option opts[] = {{"inline", 1, 0, 'i'}, {"large", 1, 0, 'l'},
                                 {"large-size", 1, 0, 's'}, {"secs", 1, 0, 't'},
                                 {"procs", 1, 0, 'p'}, {"batch", 1, 0, 'b'},
                                 {"out", 1, 0, 'o'}, {"label", 1, 0, 'L'},
                                 {"no-auth", 0, 0, 'n'}, {"small-size", 1, 0, 'S'}, {"ha", 0, 0, 'H'},
                                 {0, 0, 0, 0}};
  int ch;
  uint64_t v;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
      case 'i': hpl__bd.ninline = strtoull(optarg, NULL, 10); break;
      case 'l': hpl__bd.nlarge = strtoull(optarg, NULL, 10); break;
      case 's':
        if (hpl__parse_size(optarg, &v)) goto usage;
        hpl__bd.large_size = v;
        break;
      case 't': hpl__bd.secs = atoi(optarg); break;
      case 'p':
        if (parse_procs(optarg)) goto usage;
        break;
      case 'b': hpl__bd.batch = atoi(optarg); break;
      case 'o': hpl__bd.out = optarg; break;
      case 'L': hpl__bd.label = optarg; break;
      case 'n': hpl__bd.no_auth = 1; break;
      case 'H': hpl__bd.ha = 1; break;
      case 'S':
        if (hpl__parse_size(optarg, &v) || v < 1 || v > HPL__BD_SMALL_MAX) goto usage;
        hpl__bd.small_size = v;
        break;
      default:
      usage:
        fprintf(stderr, "usage: bench_dir [--inline N] [--large M] [--large-size BYTES] "
                        "[--secs S] [--procs 1,4,16] [--batch B] [--out FILE] [--label NAME] "
                        "[--no-auth] [--small-size BYTES] [--ha]\n");
        return 2;
    }
  }
  if (hpl__bd.batch < 1) hpl__bd.batch = 1;
  signal(SIGPIPE, SIG_IGN);
  hpl__bd_find_functions();
  if (hpl__bd.out && !(hpl__bd_tsv = fopen(hpl__bd.out, "a"))) {
    perror(hpl__bd.out);
    return 1;
  }
  uint64_t mem = (256ull << 20) + hpl__bd.ninline * (hpl__bd.small_size + 156) + hpl__bd.nlarge * (hpl__bd.large_size + 8192) * 5 / 4;
  /* --delete-any: the delete phases remove what clients of both stores put;
   * BENCH_DIR_DIR_ARGS and BENCH_DIR_STORE_ARGS add the directory's and the
   * stores' options of an A/B */
  char dir_args[512];
  const char *extra = getenv("BENCH_DIR_DIR_ARGS");
  snprintf(dir_args, sizeof dir_args, "--delete-any%s%s", extra ? " " : "", extra ? extra : "");
  hpl__lc_opts o = {.nodes = 2, .memory = mem, .no_auth = hpl__bd.no_auth, .timeout_ms = 60000,
                   .dir_args = dir_args, .store_args = getenv("BENCH_DIR_STORE_ARGS"),
                   .ha_dirs = hpl__bd.ha ? 2 : 0};
  char err[512];
  if (hpl__lc_start(&o, &hpl__bd_lc, err, sizeof err)) {
    fprintf(stderr, "bench_dir: %s\n", err);
    return 1;
  }
  printf("bench_dir %s: %llu inline objects (%llu B), %llu of %llu B; library functions: "
         "hpl__bd_list_page %s, *_many %s\n",
         hpl__bd.label, (unsigned long long)hpl__bd.ninline,
         (unsigned long long)hpl__bd.small_size, (unsigned long long)hpl__bd.nlarge,
         (unsigned long long)hpl__bd.large_size, hpl__bd_list_page ? "yes" : "no", hpl__bd_get_many ? "yes" : "no");
  hpl_client *a = hpl__bd_connect(0), *b = hpl__bd_connect(1);
  memory("before loading", a, b, 0);
  load(a);
  memory("after loading", a, b, hpl__bd.ninline + hpl__bd.nlarge);
  uint64_t del_base = 0;
  rates(1u << HPL__BD_PUT | 1u << HPL__BD_GET | 1u << HPL__BD_STAT, &del_base);
  hpl__bd_listing(a);
  const char *skip = getenv("BENCH_DIR_SKIP"); /* for experiments: "losses,reconnect" */
  if (!skip || !strstr(skip, "losses")) hpl__bd_losses();
  if (!skip || !strstr(skip, "reconnect")) hpl__bd_reconnect(a);
  rates(1u << HPL__BD_DELETE, &del_base);
  delete_all(del_base);
  struct timespec ts = {1, 0};
  nanosleep(&ts, NULL);
  memory("after deleting all", a, b, 0);
  hpl_close(a);
  hpl_close(b);
  hpl__lc_stop(hpl__bd_lc);
  if (hpl__bd_tsv) fclose(hpl__bd_tsv);
  return 0;
}
