/* benchfloor.h - what the floor programs on the emulated hosts share
 * (bench_reqrep.c, bench_pullfloor.c): blocking I/O of a whole message,
 * their common options and --addrs list, a process-shared barrier, and running each size of --sizes
 * from a thread of its own (a size's run enters host 0's network
 * namespace, which must not stick to the main thread). Header-only. */
#ifndef HPL_BENCHFLOOR_H
#define HPL_BENCHFLOOR_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* Read (wr == 0) or write all n bytes of p on a blocking descriptor,
 * retrying after signals. Returns 0, or -1 on an error or end of file. */
static inline int hpl__floor_io(int fd, void *p, size_t n, int wr) {
  for (size_t done = 0; done < n;) {
    ssize_t k = wr ? write(fd, (char *)p + done, n - done) : read(fd, (char *)p + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    done += (size_t)k;
  }
  return 0;
}

/* Split a comma-separated list into out[0..max) (each shorter than 64
 * bytes; a longer or empty item ends the list). Returns the count. */
static inline int hpl__floor_addrs(const char *list, char (*out)[64], int max) {
  int n = 0;
  for (const char *p = list; *p && n < max;) {
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= 64) break;
    memcpy(out[n], p, len);
    out[n++][len] = 0;
    p += len + (p[len] == ',');
  }
  return n;
}

/* The options both programs take (their usage lines list them). */
typedef struct hpl__floor_opts {
  const char *prefix, *addr_list, *sizes, *outp, *rate;
  int hosts, reps;
} hpl__floor_opts;

/* Take getopt's option ch (with its argument) if it is a common one:
 * --netns n, --addrs a, --hosts h, --sizes s, --reps r, --out o, --rate t.
 * Returns 1 if taken, 0 if the caller must handle it. */
static inline int hpl__floor_opt(hpl__floor_opts *o, int ch, const char *arg) {
  switch (ch) {
    case 'n': o->prefix = arg; return 1;
    case 'a': o->addr_list = arg; return 1;
    case 'h': o->hosts = atoi(arg); return 1;
    case 's': o->sizes = arg; return 1;
    case 'r': o->reps = atoi(arg); return 1;
    case 'o': o->outp = arg; return 1;
    case 't': o->rate = arg; return 1;
    default: return 0;
  }
}

/* What each size's run is given: the link's rate and the --out file. */
typedef struct hpl__floor_run {
  double rate_Bps; /* bytes per second; 0 if none or unparsable */
  FILE *out;       /* appended to; NULL without --out */
} hpl__floor_run;

/* After the options: --addrs split into addrs[0..max) (at least o->hosts
 * of them), r->rate_Bps from --rate and r->out opened from --out (the
 * caller closes it). Returns 0, or 2 with a message naming prog. */
static inline int hpl__floor_setup(const char *prog, const hpl__floor_opts *o, char (*addrs)[64],
                                   int max, hpl__floor_run *r) {
  if (hpl__floor_addrs(o->addr_list, addrs, max) < o->hosts) {
    fprintf(stderr, "%s: --addrs lists fewer hosts than --hosts\n", prog);
    return 2;
  }
  uint64_t bps = 0;
  r->rate_Bps = hpl__parse_rate(o->rate, &bps) ? 0 : (double)bps / 8;
  r->out = NULL;
  if (o->outp && !(r->out = fopen(o->outp, "a"))) {
    fprintf(stderr, "%s: %s: %s\n", prog, o->outp, strerror(errno));
    return 2;
  }
  return 0;
}

/* Initialize *bar for n waiters, shared between processes (it lives in
 * shared memory the forked processes inherit). Returns pthread's code. */
static inline int hpl__floor_barrier(pthread_barrier_t *bar, unsigned n) {
  pthread_barrierattr_t ba;
  pthread_barrierattr_init(&ba);
  pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
  int rc = pthread_barrier_init(bar, &ba, n);
  pthread_barrierattr_destroy(&ba);
  return rc;
}

typedef struct hpl__floor_job {
  int (*fn)(uint64_t size, void *arg);
  void *arg;
  uint64_t size;
  int rc;
} hpl__floor_job;

static inline void *hpl__floor_job_main(void *a) {
  hpl__floor_job *j = a;
  j->rc = j->fn(j->size, j->arg);
  return NULL;
}

/* fn(size, arg) for each size in the comma-separated list, in order, each
 * on a fresh thread, until one returns nonzero. Returns that value, 0, or
 * 2 (with a message naming prog) for a size that does not parse, -1 if a
 * thread cannot start. */
static inline int hpl__floor_sizes(const char *prog, const char *sizes,
                                   int (*fn)(uint64_t size, void *arg), void *arg) {
  for (const char *p = sizes; *p;) {
    char tok[32];
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof tok) break;
    memcpy(tok, p, len);
    tok[len] = 0;
    p += len + (p[len] == ',');
    hpl__floor_job j = {fn, arg, 0, 0};
    if (hpl__parse_size(tok, &j.size)) {
      fprintf(stderr, "%s: bad size '%s'\n", prog, tok);
      return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, hpl__floor_job_main, &j) != 0) return -1;
    pthread_join(t, NULL);
    if (j.rc) return j.rc;
  }
  return 0;
}

#endif
