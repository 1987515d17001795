/*
 * benchstat.h - the order statistics the benchmarks print: a qsort
 * comparator for doubles and the median of a sample (sorted in place).
 * Header-only; used by the bench_*.c programs (mpi_coll.c, built by
 * mpicc outside CMake, keeps its own).
 */
#ifndef HPL_BENCHSTAT_H
#define HPL_BENCHSTAT_H

#include <stdlib.h>

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

#endif
