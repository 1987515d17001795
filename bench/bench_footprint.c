/* bench_footprint.c - the memory a small request touches in the client,
 * for bench/footprint.py, which runs this under valgrind's lackey tool.
 *
 *   bench_footprint get|stat|put [N] [SIZE]
 *
 * A cluster of two stores (with its secret, as deployed), then N requests
 * of one kind from a client of store 1, one at a time: `get` reads (and
 * releases) an object of SIZE bytes (default 1024) that store 0 put (a
 * direct read from the directory), `stat` asks about it, `put` puts fresh
 * objects of SIZE bytes. Each request lies between two stores to the
 * global hpl_footprint_mark, which footprint.py finds in the access trace
 * by the address this program prints at its end ("MARK 0x..."), with its
 * memory map ("MAP ..." lines, as /proc/self/maps). Why it matters: a
 * process woken for one request finds little of its code and data still in
 * the caches, so every distinct cache line the request touches is a miss
 * (bench/results/small-objects-issue42i-2026-11-30.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "localcluster.h"

volatile int hpl_footprint_mark;

static int one(hpl_client *c, const char *kind, int i, const void *data, size_t size) {
  char id[64];
  int rc;
  if (!strcmp(kind, "put")) {
    snprintf(id, sizeof id, "fp/put/%d", i);
    hpl_footprint_mark = 1;
    rc = hpl_put(c, id, data, size, 5000);
    hpl_footprint_mark = 2;
  } else if (!strcmp(kind, "stat")) {
    hpl_footprint_mark = 1;
    rc = hpl_stat(c, "fp/obj", 5000, NULL, NULL, NULL, NULL);
    hpl_footprint_mark = 2;
  } else {
    hpl_buf *b = NULL;
    hpl_footprint_mark = 1;
    rc = hpl_get(c, "fp/obj", 5000, &b);
    hpl_footprint_mark = 2;
    if (rc == 0) hpl_release(c, b);
  }
  if (rc) fprintf(stderr, "bench_footprint: %s %d: %s\n", kind, i, hpl_errdetail(c));
  return rc;
}

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : "get";
  int n = argc > 2 ? atoi(argv[2]) : 40;
  size_t size = argc > 3 ? (size_t)atol(argv[3]) : 1024;
  if (strcmp(kind, "get") && strcmp(kind, "stat") && strcmp(kind, "put")) {
    fprintf(stderr, "usage: bench_footprint get|stat|put [N] [SIZE]\n");
    return 2;
  }
  hpl__lc_opts o = {.nodes = 2, .memory = 64ull << 20};
  hpl__lc *lc;
  char err[256];
  if (hpl__lc_start(&o, &lc, err, sizeof err)) {
    fprintf(stderr, "bench_footprint: %s\n", err);
    return 1;
  }
  hpl_client *a = NULL, *b = NULL;
  uint8_t *data = malloc(size ? size : 1);
  int rc = !data || hpl_connect(hpl__lc_socket(lc, 0), 5000, &a) ||
           hpl_connect(hpl__lc_socket(lc, 1), 5000, &b);
  if (!rc) {
    memset(data, 'x', size);
    rc = hpl_put(a, "fp/obj", data, size, 5000);
  }
  for (int i = 0; i < n && !rc; i++) rc = one(b, kind, i, data, size);
  printf("MARK %p\n", (void *)&hpl_footprint_mark);
  FILE *m = fopen("/proc/self/maps", "r");
  char line[512];
  while (m && fgets(line, sizeof line, m)) printf("MAP %s", line);
  if (m) fclose(m);
  hpl_close(a);
  hpl_close(b);
  hpl__lc_stop(lc);
  free(data);
  return rc ? 1 : 0;
}
