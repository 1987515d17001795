/* benchpin.h - binding a benchmark's rank to one CPU, the same way in every
 * implementation: bench_coll --pin (its workers), and HPL_BENCH_PIN=1 for
 * bench_coll, bench_reqrep, mpi_coll and gloo_coll. Rank i goes to CPU i mod
 * the online CPUs. The emulated hosts are namespaces of one machine, so a
 * launcher's own binding would put every host's first rank on CPU 0.
 * Header-only (C and C++), as mpi_coll and gloo_coll are built apart. */
#ifndef HPL_BENCHPIN_H
#define HPL_BENCHPIN_H

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* 1 if the environment asks for binding (HPL_BENCH_PIN=1), else 0. */
static inline int hpl__bench_pin_wanted(void) {
  const char *e = getenv("HPL_BENCH_PIN");
  return e && strcmp(e, "1") == 0;
}

/* Bind process `pid` (0: the caller) to CPU `rank` mod the online CPUs.
 * Returns 0, or -1 with errno set (sched_setaffinity's). */
static inline int hpl__bench_pin(pid_t pid, int rank) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET((int)(rank % (n > 0 ? n : 1)), &set);
  return sched_setaffinity(pid, sizeof set, &set);
}

#endif
