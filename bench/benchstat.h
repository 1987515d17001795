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
#include <sys/resource.h>
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

/* What a timed part costs its process beyond time: CPU (user_us: the part
 * of it in user space, as the kernel's ticks apportion it), minor page faults
 * and context switches given up and taken (HPL_BENCH_TRACE). */
typedef struct {
  uint64_t cpu_ns, user_us, minflt, nvcsw, nivcsw;
} hpl__bench_usage;

/* This process's usage so far (system calls: read it outside a timed part). */
static inline hpl__bench_usage hpl__bench_usage_now(void) {
  struct rusage ru = {0};
  getrusage(RUSAGE_SELF, &ru);
  return (hpl__bench_usage){.cpu_ns = hpl__bench_cpu_ns(),
                            .user_us = (uint64_t)ru.ru_utime.tv_sec * 1000000u +
                                       (uint64_t)ru.ru_utime.tv_usec,
                            .minflt = (uint64_t)ru.ru_minflt,
                            .nvcsw = (uint64_t)ru.ru_nvcsw,
                            .nivcsw = (uint64_t)ru.ru_nivcsw};
}

/* acc += (now - since), field by field. */
static inline void hpl__bench_usage_add(hpl__bench_usage *acc, hpl__bench_usage since,
                                        hpl__bench_usage now) {
  acc->cpu_ns += now.cpu_ns - since.cpu_ns;
  acc->user_us += now.user_us - since.user_us;
  acc->minflt += now.minflt - since.minflt;
  acc->nvcsw += now.nvcsw - since.nvcsw;
  acc->nivcsw += now.nivcsw - since.nivcsw;
}

#endif
