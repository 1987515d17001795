/* simcpu.c - the emulation machine's CPU under a plain TCP chain (see
 * sim.h): what each relay of bench/p2p.c costs the VM's 2 cores, as model
 * inputs for hpsim compare's chain rows, and `hpsim touchcost`, which
 * measures the one of them that is this machine's own.
 *
 * The chain (bench/p2p_check.sh --chain-only) runs 8 processes, one per
 * emulated host, on the 2 cores: the sender and 7 receivers, 6 of which
 * forward what they read. Each receiver costs the machine, per byte:
 *  - the plain TCP path: 0.927 s per GiB that crossed a link, the chain
 *    processes' own CPU (sender and receiver side of each hop: a relay is
 *    the receiver of one hop and the sender of the next), measured with
 *    p2p_check.sh on the 8-host cluster (bench/results/
 *    sim-validation-2026-11-30c.md, section 3). At 0.25 core that is
 *    290 MB/s, above either link rate: it never limits a chain by itself.
 *  - the first touch of its read buffer: p2p.c's receiver mallocs its
 *    256 KiB buffer (P2P_CHUNK, above glibc's 128 KiB mmap threshold: fresh
 *    zero pages) after accept and read()s into it, so its first reads fault
 *    the buffer's 64 pages in. On this VM (a PVM guest, where a guest page
 *    fault is a trip to the hypervisor) that cost 0.63-0.90 ms of CPU per
 *    256 KiB on a quiet machine (medians 0.67-0.78 over four sets; 0.77 is
 *    taken), against 6-15 us for the same read once the pages are in, and
 *    0.96-1.12 ms (medians) while another session loaded the machine
 *    (`hpsim touchcost`, bench/results/sim-fidelity-2026-12-02b.md):
 *    2.9 ns per byte on top of the 0.86.
 * Each process gets a quarter of the cores while all 8 run (the share the
 * stores get in the rest of hpsim: simredrun.c's cpu_share). So until a
 * receiver holds its first 256 KiB it takes in at most
 * 0.25 / (0.86 + 2.9) ns = 66 MB/s: below 1 Gbit/s's 119.5 MB/s (the
 * pipeline fill is slowed, at every hop at once), above 200 Mbit/s's
 * 23.9 MB/s (hidden by the link). hoplite's stores do not have this phase:
 * their objects land in a pool populated at start (--prefault) and written
 * in the benchmarks' warm-up repetition.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

#define GIB (1024.0 * 1024 * 1024)
#define RELAY_CPU_PER_GIB 0.927 /* s per GiB per hop, sim-validation-2026-11-30c.md */
#define RELAY_BUF (256.0 * 1024) /* bench/p2p.c P2P_CHUNK */
#define RELAY_TOUCH_S 0.77e-3    /* CPU to fault RELAY_BUF in (median), sim-fidelity-2026-12-02b.md */

void hpl__sim_chain_cpu(hpl__sim_params *p, double share) {
  double per_byte = RELAY_CPU_PER_GIB / GIB;
  p->cpu_cap = share / per_byte;
  p->touch_bytes = RELAY_BUF;
  p->touch_cap = share / (per_byte + RELAY_TOUCH_S / RELAY_BUF);
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU s of one read of `len` bytes from fd into buf, whole. */
static double read_all(int fd, char *buf, size_t len) {
  double t0 = cpu_now();
  for (size_t got = 0; got < len;) {
    ssize_t k = read(fd, buf + got, len - got);
    if (k <= 0) break;
    got += (size_t)k;
  }
  return cpu_now() - t0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int hpl__sim_touchcost(void) {
  enum { REPS = 9 };
  size_t len = (size_t)RELAY_BUF;
  int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    perror("hpsim touchcost: /dev/zero");
    return 1;
  }
  double fresh[REPS], again[REPS];
  for (int i = 0; i < REPS; i++) {
    /* fresh anonymous pages each time, as a relay's malloc of 256 KiB */
    char *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) abort();
    fresh[i] = read_all(fd, b, len);
    again[i] = read_all(fd, b, len);
    munmap(b, len);
  }
  close(fd);
  qsort(fresh, REPS, sizeof *fresh, cmp_d);
  qsort(again, REPS, sizeof *again, cmp_d);
  printf("read() of %.0f KiB into fresh pages: CPU %.3f ms median (%.3f-%.3f) of %d; the same "
         "pages again: %.3f ms\nmodel input in simcpu.c: %.3f ms (RELAY_TOUCH_S)\n",
         RELAY_BUF / 1024, fresh[REPS / 2] * 1e3, fresh[0] * 1e3, fresh[REPS - 1] * 1e3, REPS,
         again[REPS / 2] * 1e3, RELAY_TOUCH_S * 1e3);
  return 0;
}
