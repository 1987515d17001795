/*
 * benchstat.h - the order statistics the benchmarks print: a qsort
 * comparator for doubles and the median of a sample (sorted in place);
 * and the calling process's CPU time.
 * Header-only; used by the bench_*.c programs (mpi_coll.c, built by
 * mpicc outside CMake, keeps its own).
 */
#ifndef HPL_BENCHSTAT_H
#define HPL_BENCHSTAT_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* qsort comparator: ascending doubles. */
static inline int hpl__bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n) (n > 0); sorts v. */
static inline double hpl__bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, hpl__bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* This process's CPU time so far, ns (a system call: read it outside a
 * timed part). */
static inline uint64_t hpl__bench_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
