/* bench_memory.c - a store whose pool is full: spilling and restoring
 * through the store against dd on the same directory, a get of a spilled
 * object against one in memory, and a working set several times the pool
 * streamed through one node.
 *
 * usage: bench_memory [--pool BYTES] [--object BYTES] [--factor N] [--dir DIR]
 *   --pool    the store's pool (default 640M; made 2.5 objects if smaller, so
 *             two objects fit and a third does not)
 *   --object  object size (default 256M; the working set uses a quarter)
 *   --factor  the working set is this many pools (default 3)
 *   --dir     the spill directory's parent (default /var/tmp)
 * Starts its own one-store cluster. As root the page cache is dropped
 * before each read back, so reads come from the disk (else say so).
 * Prints figures; asserts nothing but the bytes read back. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

static int root;

static void die_rc(hpl_client *c, int rc, const char *what) {
  if (!rc) return;
  fprintf(stderr, "bench_memory: %s: %s (%s)\n", what, hpl_strerror(rc),
          c ? hpl_errdetail(c) : "");
  exit(1);
}

static void drop_caches(void) {
  if (!root) return;
  sync();
  FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
  if (f) {
    fputs("3\n", f);
    fclose(f);
  }
}

/* CPU seconds (user + system) of process pid so far. */
static double proc_cpu(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  if (p) sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static uint64_t counter(hpl_client *c, const char *name) {
  uint64_t v = 0;
  die_rc(c, hpl_counter(c, name, 10000, &v), name);
  return v;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double mbps(uint64_t bytes, double s) { return s > 0 ? (double)bytes / s / 1e6 : 0; }

/* dd writes then reads `bytes` (direct I/O) in dir; MB/s of each. */
static void run_dd(const char *dir, uint64_t bytes, double *w, double *r) {
  char cmd[512], file[300];
  snprintf(file, sizeof file, "%s/bench-memory-dd.%d", dir, (int)getpid());
  unsigned count = (unsigned)(bytes >> 24);
  snprintf(cmd, sizeof cmd, "dd if=/dev/zero of=%s bs=16M count=%u oflag=direct conv=fsync "
           "status=none", file, count);
  double t0 = now_s();
  int rc = system(cmd);
  *w = rc ? 0 : mbps((uint64_t)count << 24, now_s() - t0);
  drop_caches();
  snprintf(cmd, sizeof cmd, "dd if=%s of=/dev/null bs=16M iflag=direct status=none", file);
  t0 = now_s();
  rc = system(cmd);
  *r = rc ? 0 : mbps((uint64_t)count << 24, now_s() - t0);
  unlink(file);
}

/* A get of `id`, timed; its bytes must have checksum `sum`. */
static double get_s(hpl_client *c, const char *id, uint64_t size, uint64_t sum) {
  hpl_buf *b;
  double t0 = now_s();
  die_rc(c, hpl_get(c, id, 600000, &b), id);
  double s = now_s() - t0;
  if (hpl_buf_size(b) != size || hpl__checksum(hpl_buf_data(b), size) != sum) {
    fprintf(stderr, "bench_memory: '%s' read back wrong\n", id);
    exit(1);
  }
  hpl_release(c, b);
  return s;
}

int main(int argc, char **argv) {
  uint64_t pool = 640ull << 20, obj = 256ull << 20;
  int factor = 3;
  const char *dir = "/var/tmp";
  static struct option opts[] = {{"pool", 1, 0, 'p'}, {"object", 1, 0, 'o'},
                                 {"factor", 1, 0, 'f'}, {"dir", 1, 0, 'd'}, {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "p:o:f:d:", opts, NULL)) != -1) {
    if (ch == 'p' && hpl__parse_size(optarg, &pool) == 0) continue;
    if (ch == 'o' && hpl__parse_size(optarg, &obj) == 0) continue;
    if (ch == 'f' && (factor = atoi(optarg)) > 0) continue;
    if (ch == 'd') {
      dir = optarg;
      continue;
    }
    fprintf(stderr, "usage: bench_memory [--pool BYTES] [--object BYTES] [--factor N] [--dir DIR]\n");
    return 2;
  }
  if (pool < obj / 2 * 5) pool = obj / 2 * 5;
  if (pool >= obj * 3) obj = pool / 5 * 2 & ~((1ull << 20) - 1);
  root = geteuid() == 0;
  char spill[400], args[512];
  snprintf(spill, sizeof spill, "%s/bench-memory-%d", dir, (int)getpid());
  snprintf(args, sizeof args, "--spill-dir %s", spill);
  hpl__lc_opts o = {.nodes = 1, .memory = pool, .store_args = args};
  hpl__lc *lc;
  char err[512];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_memory: %s\n", err);
    return 1;
  }
  pid_t spid = hpl__lc_store_pid(lc, 0);
  hpl_client *c;
  die_rc(NULL, hpl_connect(hpl__lc_socket(lc, 0), 5000, &c), "connect");
  char a[32], b[32];
  printf("bench_memory: pool %s, objects %s, spill directory %s (%s)\n",
         hpl__fmt_bytes(pool, a, sizeof a), hpl__fmt_bytes(obj, b, sizeof b), spill,
         root ? "page cache dropped before reads" : "not root: reads may come from the page cache");

  /* 1. a get of an object in memory, spilled with room free, and spilled
   *    when room must be made by spilling another */
  uint8_t *data = malloc(obj);
  uint64_t sum[3];
  const char *ids[3] = {"m/a", "m/b", "m/c"};
  for (int i = 0; i < 2; i++) {
    hpl__fill_pattern(data, obj, (uint64_t)i + 1);
    sum[i] = hpl__checksum(data, obj);
    die_rc(c, hpl_put(c, ids[i], data, obj, 600000), "put");
  }
  double mem_s = get_s(c, "m/a", obj, sum[0]);
  hpl__fill_pattern(data, obj, 3);
  sum[2] = hpl__checksum(data, obj);
  double cpu0 = proc_cpu(spid), t0 = now_s();
  die_rc(c, hpl_put(c, "m/c", data, obj, 600000), "put m/c"); /* m/b (least recent) spills */
  double put_spill_s = now_s() - t0, put_cpu = proc_cpu(spid) - cpu0;
  uint64_t spilled = counter(c, "spilled");
  die_rc(c, hpl_delete(c, "m/c", 10000), "delete m/c");
  drop_caches();
  cpu0 = proc_cpu(spid);
  double free_s = get_s(c, "m/b", obj, sum[1]); /* room is free: read back only */
  double free_cpu = proc_cpu(spid) - cpu0;
  die_rc(c, hpl_put(c, "m/c", data, obj, 600000), "put m/c"); /* m/a goes to disk */
  drop_caches();
  /* m/b's file was kept: making room for m/a only drops m/b's buffer */
  double full_s = get_s(c, "m/a", obj, sum[0]);
  printf("\n1. one object of %s\n", b);
  printf("  put that spills another first   %8.3f s (%5.0f MB/s; store CPU %.2f s; %llu spilled)\n",
         put_spill_s, mbps(obj, put_spill_s), put_cpu, (unsigned long long)spilled);
  printf("  get, in memory                  %8.6f s\n", mem_s);
  printf("  get, spilled, room free         %8.3f s (%5.0f MB/s read back; store CPU %.2f s)\n",
         free_s, mbps(obj, free_s), free_cpu);
  printf("  get, spilled, room to be made   %8.3f s (%5.0f MB/s; another object on disk too "
         "drops its buffer)\n", full_s, mbps(obj, full_s));
  for (int i = 0; i < 3; i++) die_rc(c, hpl_delete(c, ids[i], 10000), "delete");

  /* 2. a working set of `factor` pools in objects of a quarter `obj`: put
   *    all, then get each back (byte-exact) */
  uint64_t part = obj / 4, total = pool * (uint64_t)factor, n = total / part;
  uint64_t *sums = calloc(n, sizeof *sums);
  char id[64];
  uint64_t sp0 = counter(c, "spilled_bytes"), rs0 = counter(c, "restored_bytes"), sp1;
  cpu0 = proc_cpu(spid);
  t0 = now_s();
  for (uint64_t i = 0; i < n; i++) {
    snprintf(id, sizeof id, "w/%llu", (unsigned long long)i);
    hpl__fill_pattern(data, part, 100 + i);
    sums[i] = hpl__checksum(data, part);
    die_rc(c, hpl_put(c, id, data, part, 600000), id);
  }
  double put_s = now_s() - t0, put_c = proc_cpu(spid) - cpu0;
  sp1 = counter(c, "spilled_bytes");
  drop_caches();
  cpu0 = proc_cpu(spid);
  t0 = now_s();
  for (uint64_t i = 0; i < n; i++) {
    snprintf(id, sizeof id, "w/%llu", (unsigned long long)i);
    get_s(c, id, part, sums[i]);
  }
  double get_all = now_s() - t0, get_c = proc_cpu(spid) - cpu0;
  uint64_t hw = counter(c, "pool_high_water"), errs = counter(c, "spill_errors");
  printf("\n2. working set of %d pools: %llu objects of %s (%s)\n", factor, (unsigned long long)n,
         hpl__fmt_bytes(part, a, sizeof a), hpl__fmt_bytes(n * part, b, sizeof b));
  printf("  put all       %7.2f s (%5.0f MB/s; store CPU %.2f s; %s spilled)\n", put_s,
         mbps(n * part, put_s), put_c, hpl__fmt_bytes(sp1 - sp0, a, sizeof a));
  printf("  get all back  %7.2f s (%5.0f MB/s; store CPU %.2f s; %s restored, %s spilled "
         "again to make room)\n", get_all, mbps(n * part, get_all), get_c,
         hpl__fmt_bytes(counter(c, "restored_bytes") - rs0, a, sizeof a),
         hpl__fmt_bytes(counter(c, "spilled_bytes") - sp1, b, sizeof b));
  printf("  every byte checked; pool high-water %s of %s; spill errors %llu\n",
         hpl__fmt_bytes(hw, a, sizeof a), hpl__fmt_bytes(pool, b, sizeof b),
         (unsigned long long)errs);
  for (uint64_t i = 0; i < n; i++) {
    snprintf(id, sizeof id, "w/%llu", (unsigned long long)i);
    hpl_delete(c, id, 10000);
  }
  hpl_close(c);
  hpl__lc_stop(lc);

  /* 3. dd on the same directory, same run */
  double dw, dr;
  run_dd(dir, 1ull << 30, &dw, &dr);
  printf("\n3. dd on %s, 1 GiB, direct I/O: write %.0f MB/s (with fsync), read %.0f MB/s\n", dir,
         dw, dr);
  printf("   store/dd: spill (put that spills) %.2f, restore (get, room free) %.2f\n",
         dw > 0 ? mbps(obj, put_spill_s) / dw : 0, dr > 0 ? mbps(obj, free_s) / dr : 0);
  free(sums);
  free(data);
  return errs ? 1 : 0;
}
