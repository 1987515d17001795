/* bench_pullfloor.h - what bench_pullfloor's processes share: the messages
 * between the hosts, their directory and (--worker-proc) their workers, the
 * state all of them see in shared memory, and the roles other than a host's
 * server (bench_pullfloor_roles.c). */
#ifndef HPL_BENCH_PULLFLOOR_H
#define HPL_BENCH_PULLFLOOR_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 16
#define MAXREPS 200
#define MAXSIZE (64u << 20)

enum { MSG_LOC = 1, MSG_LOOK = 2 };
typedef struct msg { uint32_t kind, rep, host; } msg; /* host -> directory */
typedef struct where { uint32_t rep, from; } where;  /* directory -> host */
typedef struct pull { uint32_t rep, to; } pull;      /* host -> host */

/* worker <-> its host's server (--worker-proc), one datagram each */
enum { WM_PUT = 1, WM_GET = 2, WM_OK = 3, WM_DONE = 4 };
typedef struct wmsg { uint32_t kind, rep; } wmsg;

typedef struct shared {
  pthread_barrier_t bar; /* the hosts, their workers and the driver */
  uint16_t dir_port, data_port[MAXN];
  uint64_t start_ns[MAXREPS + 1];
  uint64_t end_ns[MAXN][MAXREPS + 1];
  uint64_t cpu_ns[MAXN + 1]; /* each process's CPU over the timed rounds (MAXN: the directory) */
  uint64_t wcpu_ns[MAXN];    /* each worker's (--worker-proc) */
  uint8_t digest[MAXN][MAXN][32]; /* --sha256: [from][to], made at the put */
  int failed, bad_to, bad_from; /* wrong bytes: the first receiver and source found */
} shared;

/* Print what failed with errno's text and exit(1). */
static inline __attribute__((noreturn)) void hpl__pf_die(const char *what) {
  fprintf(stderr, "bench_pullfloor: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* The pattern of partition (from -> to) of a repetition. */
static inline uint64_t hpl__pf_seed(int rep, int from, int to, uint64_t size) {
  return ((uint64_t)(rep + 7) << 40) ^ ((uint64_t)from << 24) ^ ((uint64_t)to << 8) ^ size;
}

/* The directory's process for `hosts` hosts, accepting on lfd until every
 * connection it accepted has closed; its CPU over the timed rounds goes to
 * sh->cpu_ns[MAXN]. Exits the process on an error. */
void hpl__pf_directory(shared *sh, int hosts, int lfd);

/* Host idx's worker (--worker-proc) for rounds 0..reps: fills its own copy
 * of its partitions (untimed), then at each start copies them into part[j]
 * (memory shared with its server), asks the server to put them (WM_PUT) and
 * then to get its own (WM_GET), over the datagram socket `sock`, and takes
 * the end time when WM_DONE comes. It waits at sh->bar as the servers do.
 * mixup: fill each peer's partition with the next peer's pattern (the
 * check's test). Exits the process on an error. */
void hpl__pf_worker(shared *sh, int idx, int hosts, int reps, int sock, uint8_t *const *part,
                    uint64_t size, int mixup);

#endif
