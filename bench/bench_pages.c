/* bench_pages.c - what the ways of writing a created object cost in pages
 * alone (no store): the kernel's side of the choice documented in
 * docs/design.md ("Sealed means immutable", Writing).
 *
 *   warm      fill a shared mapping whose pages are mapped already (what a
 *             client did when it wrote the pool itself, before issue 40)
 *   copy      fill a warm memfd of the writer's, then memcpy it into a warm
 *             shared mapping (hpl_create now: the store copies the stage)
 *   fresh     a new memfd per object: ftruncate, map writable, fill, unmap,
 *             F_SEAL_WRITE (a per-object memfd handed to the writer)
 *   prepared  the same, its pages allocated beforehand (fallocate, not
 *             timed) and mapped with MAP_POPULATE (timed)
 *
 * usage: bench_pages [--size BYTES] [--reps N]   (default 1 MiB and 256 MiB)
 * Prints the median of each, in microseconds; asserts nothing. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "benchstat.h"
#include "util.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void *map_or_die(size_t len, int prot, int flags, int fd) {
  void *m = mmap(NULL, len, prot, flags, fd, 0);
  if (m == MAP_FAILED) {
    perror("bench_pages: mmap");
    exit(1);
  }
  return m;
}

/* One object through a fresh memfd; `prepared`: pages allocated first. */
static double fresh_once(size_t sz, int r, int prepared) {
  int fd = memfd_create("bench-pages", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, (off_t)sz) != 0) exit(1);
  if (prepared && fallocate(fd, 0, 0, (off_t)sz) != 0) exit(1);
  double t0 = now_us();
  uint8_t *p = map_or_die(sz, PROT_READ | PROT_WRITE,
                          MAP_SHARED | (prepared ? MAP_POPULATE : 0), fd);
  memset(p, r, sz);
  munmap(p, sz);
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) != 0) exit(1);
  double t = now_us() - t0;
  close(fd);
  return t;
}

static void one_size(size_t sz, int reps) {
  double *w = calloc((size_t)reps, sizeof *w), *c = calloc((size_t)reps, sizeof *c);
  double *f = calloc((size_t)reps, sizeof *f), *pr = calloc((size_t)reps, sizeof *pr);
  int sfd = memfd_create("bench-stage", MFD_CLOEXEC);
  if (!w || !c || !f || !pr || sfd < 0 || ftruncate(sfd, (off_t)sz) != 0) exit(1);
  uint8_t *pool = map_or_die(sz, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1);
  uint8_t *stage = map_or_die(sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, sfd);
  for (int r = -1; r < reps; r++) { /* run -1: untimed warm-up */
    double t0 = now_us();
    memset(pool, r, sz);
    double t1 = now_us();
    memset(stage, r, sz);
    memcpy(pool, stage, sz);
    double t2 = now_us();
    double tf = fresh_once(sz, r, 0), tp = fresh_once(sz, r, 1);
    if (r < 0) continue;
    w[r] = t1 - t0;
    c[r] = t2 - t1;
    f[r] = tf;
    pr[r] = tp;
  }
  printf("%10zu B  warm %10.1f  copy %10.1f  fresh %10.1f  prepared %10.1f  us (median of %d)\n",
         sz, hpl__bench_median(w, reps), hpl__bench_median(c, reps), hpl__bench_median(f, reps), hpl__bench_median(pr, reps), reps);
  munmap(pool, sz);
  munmap(stage, sz);
  close(sfd);
  free(w), free(c), free(f), free(pr);
}

int main(int argc, char **argv) {
  uint64_t size = 0;
  int reps = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--size") && hpl__parse_size(argv[i + 1], &size) != 0) {
      fprintf(stderr, "bench_pages: bad --size '%s' (BYTES with K/M/G)\n", argv[i + 1]);
      return 2;
    }
    if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
  }
  if (size) {
    one_size((size_t)size, reps ? reps : 10);
    return 0;
  }
  one_size(1u << 20, reps ? reps : 200);
  one_size(256u << 20, reps ? reps : 10);
  return 0;
}
