/* bench_dirpick.c - the directory's sender choice alone (directory/objpick.c
 * hpl__dtab_pick_sender), timed at a given number of copies in one chain:
 * the broadcast's case, receivers asking one after another, each put behind
 * the chain's idle end. Prints µs per pick for the next `picks` askers once
 * the chain holds `copies` copies, and the time the chain took to build.
 *
 *   bench_dirpick [picks] copies...      (default: 200 100 1000 10000)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "objects.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One chain of `copies` copies (node 1 the complete origin), then `picks`
 * more askers timed. Exits on a pick that does not land at the chain's end. */
static void run(uint64_t copies, uint64_t picks) {
  hpl__dtab t;
  hpl__dtab_init(&t, 1);
  hpl__dir_obj *o = hpl__dtab_get(&t, "bench");
  hpl__dtab_add_loc(&t, o, 1, 1ull << 30, 1, 1);
  uint64_t s;
  double t0 = now_s();
  for (uint64_t n = 2; n <= copies; n++)
    if (hpl__dtab_pick_sender(&t, o, n, 0, &s) != 0 || s != n - 1) {
      fprintf(stderr, "pick for %llu: not behind %llu\n", (unsigned long long)n,
              (unsigned long long)(n - 1));
      exit(1);
    }
  double built = now_s() - t0;
  double took = 0, worst = 0;
  for (uint64_t n = copies + 1; n <= copies + picks; n++) {
    t0 = now_s();
    int rc = hpl__dtab_pick_sender(&t, o, n, 0, &s);
    double one = now_s() - t0;
    took += one;
    if (one > worst) worst = one;
    if (rc != 0 || s != n - 1) {
      fprintf(stderr, "pick for %llu: not behind %llu\n", (unsigned long long)n,
              (unsigned long long)(n - 1));
      exit(1);
    }
  }
  printf("%8llu copies  %6llu picks  %10.2f us/pick  max %8.2f us  (chain built in %.3f s)\n",
         (unsigned long long)copies, (unsigned long long)picks, took * 1e6 / (double)picks,
         worst * 1e6, built);
  hpl__dtab_clear(&t);
}

int main(int argc, char **argv) {
  uint64_t picks = argc > 1 ? strtoull(argv[1], NULL, 10) : 200;
  if (argc <= 2) {
    uint64_t def[] = {100, 1000, 10000};
    for (int i = 0; i < 3; i++) run(def[i], picks);
    return 0;
  }
  for (int i = 2; i < argc; i++) run(strtoull(argv[i], NULL, 10), picks);
  return 0;
}
