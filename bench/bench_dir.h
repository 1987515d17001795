/*
 * bench_dir.h - what the three files of the bench_dir program share:
 * bench_dir.c (options, output, the servers' facts, the phases, main),
 * bench_dirprobe.c (the phases timed by a prober) and bench_dirwork.c (the
 * client worker processes, latency histograms and the CPU each request
 * costs every process). Not a library.
 */
#ifndef HPL_BENCH_DIR_H
#define HPL_BENCH_DIR_H

#include <stdint.h>
#include <stdio.h>

#include "hoplite.h"
#include "localcluster.h"

/* ---- options and output (bench_dir.c) */

typedef struct hpl__bd_opts {
  uint64_t ninline, nlarge, large_size;
  uint64_t small_size; /* --small-size: the inline objects' bytes (100, at most 64K) */
  int secs, batch, no_auth;
  int ha; /* --ha: standby directories under a lease */
  int notfound_ok; /* deletes: "not found" is not an error */
  int procs[8], nprocs;
  const char *out, *label;
} hpl__bd_opts;

#define HPL__BD_SMALL_MAX (64u << 10)

extern hpl__bd_opts hpl__bd;
extern FILE *hpl__bd_tsv;   /* --out, or NULL */
extern hpl__lc *hpl__bd_lc; /* the cluster of two stores */

/* One result line (and, with --out, a TSV row). */
void hpl__bd_report(const char *metric, double v, const char *unit);
/* Print what failed and exit(1). */
void hpl__bd_die(const char *what, hpl_client *c, int rc) __attribute__((noreturn));

/* ---- the phases timed by a prober, a process that stats every
 * millisecond meanwhile (bench_dirprobe.c); each prints its results */

/* Listing everything through `a` (paged when the library can), and how
 * many stores the directory declared dead meanwhile. */
void hpl__bd_listing(hpl_client *a);
/* Node loss (a store that holds nothing is killed) and client disconnects
 * at A: the worst stat latency right after each. */
void hpl__bd_losses(void);
/* The directory stopped for 5 s: how long until `a`'s store is listed
 * again, and the stat latency meanwhile. */
void hpl__bd_reconnect(hpl_client *a);

/* ---- the library's optional functions (bench_dirwork.c): NULL in
 * libraries older than them (HOPLITE_BIN_DIR and LD_LIBRARY_PATH of
 * another tree's build); set by hpl__bd_find_functions */

typedef int (*hpl__bd_list_page_fn)(hpl_client *, const char *, const char *, size_t, int64_t,
                                    char **, char **);
typedef int (*hpl__bd_get_many_fn)(hpl_client *, const char *const *, size_t, int64_t,
                                   hpl_buf **, int *);
typedef int (*hpl__bd_put_many_fn)(hpl_client *, const char *const *, const void *const *,
                                   const uint64_t *, size_t, int64_t, int *);
typedef int (*hpl__bd_ids_many_fn)(hpl_client *, const char *const *, size_t, int64_t, int *);
typedef int (*hpl__bd_stat_many_fn)(hpl_client *, const char *const *, size_t, int64_t,
                                    uint64_t *, int *);
extern hpl__bd_list_page_fn hpl__bd_list_page;
extern hpl__bd_get_many_fn hpl__bd_get_many;
extern hpl__bd_put_many_fn hpl__bd_put_many;
extern hpl__bd_stat_many_fn hpl__bd_stat_many;
extern hpl__bd_ids_many_fn hpl__bd_delete_many;
void hpl__bd_find_functions(void);

/* ---- latency histogram: 1 us buckets up to 10 ms, then 1 ms up to 10 s */

#define HPL__BD_H_FINE 10000
#define HPL__BD_H_COARSE 10000
typedef struct hpl__bd_hist {
  uint64_t n, sum_us, max_us;
  uint32_t fine[HPL__BD_H_FINE], coarse[HPL__BD_H_COARSE];
} hpl__bd_hist;

void hpl__bd_h_add(hpl__bd_hist *h, uint64_t us);
void hpl__bd_h_merge(hpl__bd_hist *a, const hpl__bd_hist *b);
/* The p-th quantile (0..1), in ms. */
double hpl__bd_h_pct(const hpl__bd_hist *h, double p);

/* ---- the client processes (bench_dirwork.c) */

enum { HPL__BD_PUT, HPL__BD_GET, HPL__BD_STAT, HPL__BD_DELETE };
extern const char *const hpl__bd_op_name[4];

/* A client of store `node` (exits the program if it cannot connect). */
hpl_client *hpl__bd_connect(int node);
/* The id of inline object i ("i%09llu"). */
void hpl__bd_inline_id(char *out, size_t len, uint64_t i);

/* CPU time a phase cost, per request, in microseconds: the client
 * processes', both stores' and the directory's (user + system, from
 * getrusage of the reaped workers and /proc/PID/stat of the servers). */
typedef struct hpl__bd_cpu {
  double client_us, store_us, dir_us;
} hpl__bd_cpu;

/* Run `op` in n worker processes (one connection each) on store `node`,
 * one request at a time or `batch` per call, for --secs (timed) and/or
 * over the inline ids [base, base + limit) split between them (limit >
 * 0); `run` numbers the puts' ids. Returns requests per second; fills *h
 * with every request's latency and, if cpu is not NULL, *cpu. Time and CPU
 * run from the moment every worker is connected to the moment every one
 * has made its last request: forking, connecting and closing are not in
 * them (a session's setup is tens of times a request's cost, which would
 * weigh on short phases such as the deletes). */
double hpl__bd_run(int op, int n, int node, int batch, int run, uint64_t base, uint64_t limit,
                   int timed, hpl__bd_hist *h, hpl__bd_cpu *cpu);

#endif
