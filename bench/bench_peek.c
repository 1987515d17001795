/* bench_peek.c - CPU of the directory and of the client per small remote
 * get (a direct PEEK answered with the object's 100 bytes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"

static double cpu_of(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f || !fgets(buf, sizeof buf, f)) return -1;
  fclose(f);
  char *p = strrchr(buf, ')') + 2;
  unsigned long ut = 0, st = 0;
  int field = 3;
  for (char *t = strtok(p, " "); t; t = strtok(NULL, " "), field++) {
    if (field == 14) ut = strtoul(t, NULL, 10);
    if (field == 15) { st = strtoul(t, NULL, 10); break; }
  }
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}
static double self_cpu(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000, objs = 200;
  hpl__lc_opts o = {.nodes = 2, .memory = 64ull << 20};
  hpl__lc *lc;
  char err[256];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  hpl_client *a, *b;
  if (hpl_connect(hpl__lc_socket(lc, 0), 5000, &a) || hpl_connect(hpl__lc_socket(lc, 1), 5000, &b))
    return 1;
  char id[64], data[100];
  memset(data, 'x', sizeof data);
  for (int i = 0; i < objs; i++) {
    snprintf(id, sizeof id, "peek/%d", i);
    if (hpl_put(a, id, data, sizeof data, 5000)) return 1;
  }
  hpl_buf *buf;
  for (int i = 0; i < 2000; i++) { /* warm */
    snprintf(id, sizeof id, "peek/%d", i % objs);
    if (hpl_get(b, id, 5000, &buf) == 0) hpl_release(b, buf);
  }
  pid_t d = hpl__lc_dir_pid(lc), s1 = hpl__lc_store_pid(lc, 1);
  double d0 = cpu_of(d), s0 = cpu_of(s1), c0 = self_cpu(), t0 = now();
  for (int i = 0; i < n; i++) {
    snprintf(id, sizeof id, "peek/%d", i % objs);
    if (hpl_get(b, id, 5000, &buf) != 0) { fprintf(stderr, "get failed\n"); return 1; }
    hpl_release(b, buf);
  }
  double t = now() - t0, dc = cpu_of(d) - d0, sc = cpu_of(s1) - s0, cc = self_cpu() - c0;
  printf("%d gets of 100 B: %.1f us each; CPU per get: directory %.2f us, store %.2f us, "
         "client %.2f us\n", n, t / n * 1e6, dc / n * 1e6, sc / n * 1e6, cc / n * 1e6);
  hpl_close(a);
  hpl_close(b);
  hpl__lc_stop(lc);
  return 0;
}
