/* bench_spill.c - the store's spill files (store/spill.c) against dd on the
 * same directory.
 *
 * usage: bench_spill [--dir DIR] [--total BYTES] [--object BYTES]
 *                    [--reps N] [--serial] [--buffered] [--no-dd]
 * Defaults: /var/tmp, 1024M in objects of 256M, 1 repetition.
 *
 * hoplite: page-aligned objects (like the pool's large allocations),
 * prefaulted, all written through the module at once (it runs at most
 * HPL__SPILL_JOBS jobs of 16 MiB), then read back whole into zeroed
 * buffers and checked. With --serial one object at a time, so one job
 * (one 16 MiB transfer) is in flight, as with dd. Time is wall time from the first submit to the
 * last callback; CPU is getrusage of the whole process (the loop and the
 * thread pool) over the same span.
 * dd: dd if=/dev/zero of=F bs=16M count=N oflag=direct conv=fsync, then
 * dd if=F of=/dev/null bs=16M iflag=direct; CPU from wait4.
 * Between writing and reading, the page cache is dropped (echo 3 >
 * /proc/sys/vm/drop_caches) when that is allowed; the output says if not.
 * Prints a table and the ratios hoplite/dd; asserts nothing but the bytes. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "hoplite.h"
#include "spill.h"
#include "util.h"

#define MiB (1ull << 20)
#define DD_BS (16 * MiB)

typedef struct phase {
  double wall_s, cpu_s;
  uint64_t bytes;
} phase;

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec / 1e6; }

static double cpu_self(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
}

static const char *fs_name(const char *dir) {
  struct statfs s;
  if (statfs(dir, &s) != 0) return "unknown";
  switch ((unsigned long)s.f_type) {
  case 0xEF53: return "ext2/3/4";
  case 0x58465342: return "xfs";
  case 0x9123683E: return "btrfs";
  case 0x01021994: return "tmpfs";
  case 0x794c7630: return "overlayfs";
  case 0x6969: return "nfs";
  case 0x2FC12FC1: return "zfs";
  case 0xF2F52010: return "f2fs";
  default: return "other";
  }
}

/* Drop the page cache; returns "" or why not. */
static const char *drop_caches(void) {
  static char why[160];
  sync();
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) {
    snprintf(why, sizeof why, "cannot open /proc/sys/vm/drop_caches: %s%s", strerror(errno),
             geteuid() ? " (not root)" : "");
    return why;
  }
  ssize_t n = write(fd, "3\n", 2);
  int e = errno;
  close(fd);
  if (n != 2) {
    snprintf(why, sizeof why, "writing /proc/sys/vm/drop_caches failed: %s", strerror(e));
    return why;
  }
  return "";
}

/* ------------------------------------------------------------------ hoplite */

typedef struct bench {
  uv_loop_t loop;
  hpl__spill *sp;
  int pending, failed;
} bench;

static void done_cb(void *arg, int status, int sys_errno, const char *detail) {
  bench *b = arg;
  b->pending--;
  if (status != 0) {
    fprintf(stderr, "bench_spill: %s\n", detail);
    b->failed = 1;
  }
}

static int serial;

static void run_hoplite(const char *dir, unsigned flags, uint8_t **obj, const uint64_t *size,
                        const uint64_t *sum, int nobj, phase *w, phase *r, char *drop_note,
                        size_t dnlen, int *direct) {
  bench b;
  memset(&b, 0, sizeof b);
  uv_loop_init(&b.loop);
  char detail[512];
  if (hpl__spill_open(&b.loop, dir, flags, &b.sp, detail, sizeof detail) != 0) {
    fprintf(stderr, "bench_spill: %s\n", detail);
    exit(1);
  }
  uv_run(&b.loop, UV_RUN_DEFAULT); /* the stale-file sweep, not timed */
  *direct = hpl__spill_direct(b.sp);
  uint64_t *file = calloc((size_t)nobj, sizeof *file);

  double c0 = cpu_self();
  uint64_t t0 = hpl__now_ns();
  for (int i = 0; i < nobj; i++) {
    if (hpl__spill_write(b.sp, obj[i], size[i], done_cb, &b, &file[i], NULL) != 0) {
      fprintf(stderr, "bench_spill: %s\n", hpl__spill_errdetail(b.sp));
      exit(1);
    }
    b.pending++;
    if (serial) uv_run(&b.loop, UV_RUN_DEFAULT);
  }
  uv_run(&b.loop, UV_RUN_DEFAULT);
  w->wall_s = (double)(hpl__now_ns() - t0) / 1e9;
  w->cpu_s = cpu_self() - c0;
  if (b.failed || b.pending) exit(1);

  const char *why = drop_caches();
  snprintf(drop_note, dnlen, "%s", why);
  for (int i = 0; i < nobj; i++) memset(obj[i], 0, size[i]);

  c0 = cpu_self();
  t0 = hpl__now_ns();
  for (int i = 0; i < nobj; i++) {
    if (hpl__spill_read(b.sp, file[i], 0, obj[i], size[i], done_cb, &b, NULL) != 0) {
      fprintf(stderr, "bench_spill: %s\n", hpl__spill_errdetail(b.sp));
      exit(1);
    }
    b.pending++;
    if (serial) uv_run(&b.loop, UV_RUN_DEFAULT);
  }
  uv_run(&b.loop, UV_RUN_DEFAULT);
  r->wall_s = (double)(hpl__now_ns() - t0) / 1e9;
  r->cpu_s = cpu_self() - c0;
  if (b.failed || b.pending) exit(1);
  for (int i = 0; i < nobj; i++) {
    if (hpl__checksum(obj[i], size[i]) != sum[i]) {
      fprintf(stderr, "bench_spill: object %d came back different\n", i);
      exit(1);
    }
  }
  hpl__spill_counters c;
  hpl__spill_counters_get(b.sp, &c);
  w->bytes = c.bytes_written;
  r->bytes = c.bytes_read;
  if (c.direct_bytes + c.buffered_bytes != w->bytes + r->bytes) {
    fprintf(stderr, "bench_spill: counters disagree\n");
    exit(1);
  }
  hpl__spill_close(b.sp);
  uv_run(&b.loop, UV_RUN_DEFAULT);
  uv_loop_close(&b.loop);
  free(file);
}

/* ----------------------------------------------------------------------- dd */

/* Run argv, wait; wall and CPU of the child. Returns its exit status. */
static int run_cmd(char *const argv[], phase *p) {
  uint64_t t0 = hpl__now_ns();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2); /* dd's own report */
    execvp(argv[0], argv);
    _exit(127);
  }
  int st = 0;
  struct rusage ru;
  if (wait4(pid, &st, 0, &ru) != pid) return -1;
  p->wall_s = (double)(hpl__now_ns() - t0) / 1e9;
  p->cpu_s = tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_dd(const char *dir, uint64_t total, phase *w, phase *r, char *drop_note,
                  size_t dnlen) {
  char file[4096], of[4200], iff[4200], count[32];
  snprintf(file, sizeof file, "%s/bench-spill-dd.%d", dir, (int)getpid());
  uint64_t n = (total + DD_BS - 1) / DD_BS;
  snprintf(count, sizeof count, "count=%llu", (unsigned long long)n);
  snprintf(of, sizeof of, "of=%s", file);
  snprintf(iff, sizeof iff, "if=%s", file);
  char *wargv[] = {"dd", "if=/dev/zero", of, "bs=16M", count, "oflag=direct", "conv=fsync", NULL};
  char *rargv[] = {"dd", iff, "of=/dev/null", "bs=16M", "iflag=direct", NULL};
  int rc = run_cmd(wargv, w);
  if (rc == 0) {
    snprintf(drop_note, dnlen, "%s", drop_caches());
    rc = run_cmd(rargv, r);
  }
  unlink(file);
  w->bytes = r->bytes = n * DD_BS;
  return rc;
}

/* --------------------------------------------------------------------- main */

static void row(const char *what, const phase *p) {
  double mbs = (double)p->bytes / p->wall_s / 1e6;
  printf("%-16s %10.1f %10.3f %10.3f %8.1f%%\n", what, mbs, p->wall_s, p->cpu_s,
         100.0 * p->cpu_s / p->wall_s);
}

static void best(phase *acc, const phase *p) {
  if (acc->wall_s == 0 || p->wall_s < acc->wall_s) *acc = *p;
}

int main(int argc, char **argv) {
  const char *dir = "/var/tmp";
  uint64_t total = 1024 * MiB, objsize = 256 * MiB;
  int reps = 1, use_dd = 1;
  unsigned flags = 0;
  static struct option opts[] = {{"dir", 1, 0, 'd'},      {"total", 1, 0, 't'},
                                 {"object", 1, 0, 'o'},   {"reps", 1, 0, 'r'},
                                 {"buffered", 0, 0, 'b'}, {"no-dd", 0, 0, 'n'},
                                 {"serial", 0, 0, 's'},   {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "d:t:o:r:bns", opts, NULL)) != -1) {
    if (ch == 'd') dir = optarg;
    else if (ch == 't' && hpl__parse_size(optarg, &total) == 0 && total > 0) continue;
    else if (ch == 'o' && hpl__parse_size(optarg, &objsize) == 0 && objsize > 0) continue;
    else if (ch == 'r' && (reps = atoi(optarg)) > 0) continue;
    else if (ch == 'b') flags |= HPL__SPILL_BUFFERED;
    else if (ch == 'n') use_dd = 0;
    else if (ch == 's') serial = 1;
    else {
      fprintf(stderr, "usage: bench_spill [--dir DIR] [--total BYTES] [--object BYTES] "
                      "[--reps N] [--serial] [--buffered] [--no-dd]\n");
      return 2;
    }
  }
  int nobj = (int)((total + objsize - 1) / objsize);
  uint8_t **obj = calloc((size_t)nobj, sizeof *obj);
  uint64_t *size = calloc((size_t)nobj, sizeof *size), *sum = calloc((size_t)nobj, sizeof *sum);
  for (int i = 0; i < nobj; i++) {
    size[i] = i == nobj - 1 ? total - (uint64_t)i * objsize : objsize;
    obj[i] = mmap(NULL, size[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                  -1, 0);
    if (obj[i] == MAP_FAILED) {
      perror("bench_spill: mmap");
      return 1;
    }
    hpl__fill_pattern(obj[i], size[i], (uint64_t)i + 1);
    sum[i] = hpl__checksum(obj[i], size[i]);
  }

  phase hw = {0}, hr = {0}, dw = {0}, dr = {0};
  char hnote[200] = "", dnote[200] = "";
  int direct = 0;
  for (int k = 0; k < reps; k++) {
    phase w, r;
    run_hoplite(dir, flags, obj, size, sum, nobj, &w, &r, hnote, sizeof hnote, &direct);
    best(&hw, &w);
    best(&hr, &r);
    if (use_dd) {
      if (run_dd(dir, total, &w, &r, dnote, sizeof dnote) != 0) {
        fprintf(stderr, "bench_spill: dd failed in %s (does the file system take O_DIRECT?)\n",
                dir);
        use_dd = 0;
      } else {
        best(&dw, &w);
        best(&dr, &r);
      }
    }
  }

  char tb[32], ob[32];
  printf("bench_spill: %s (%s), %s in %d object(s) of %s, %s, %s, best of %d\n", dir,
         fs_name(dir), hpl__fmt_bytes(total, tb, sizeof tb), nobj,
         hpl__fmt_bytes(objsize, ob, sizeof ob), direct ? "O_DIRECT" : "buffered",
         serial ? "one object at a time" : "all objects at once", reps);
  printf("page cache before reads: %s\n", hnote[0] ? hnote : "dropped");
  printf("\n%-16s %10s %10s %10s %9s\n", "", "MB/s", "wall s", "cpu s", "cpu");
  row("hoplite write", &hw);
  row("hoplite read", &hr);
  if (use_dd) {
    row("dd write", &dw);
    row("dd read", &dr);
    printf("\nhoplite/dd: write %.2f, read %.2f\n",
           ((double)hw.bytes / hw.wall_s) / ((double)dw.bytes / dw.wall_s),
           ((double)hr.bytes / hr.wall_s) / ((double)dr.bytes / dr.wall_s));
  }
  for (int i = 0; i < nobj; i++) munmap(obj[i], size[i]);
  free(obj);
  free(size);
  free(sum);
  return 0;
}
