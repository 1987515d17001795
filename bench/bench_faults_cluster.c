/* bench_faults_cluster.c - the cluster bench_faults runs against: the
 * local cluster's handle, the standby directories' (dirhost), a client
 * per node and which stores are alive; restarting dead stores between
 * runs, waiting for stores to register again after the directory's
 * restart, and the leak check after the last run. */
#include <stdio.h>
#include <stdlib.h>

#include "hoplite.h"
#include "util.h"
#include "bench_faults.h"

hpl__lc *hpl__bf_lc;
hpl__hd *hpl__bf_hd;
hpl_client *hpl__bf_cs[HPL__BF_MAXN];
int hpl__bf_alive[HPL__BF_MAXN];

/* Stores restarted since the last warm-up (hpl__bf_restart_dead sets it). */
int hpl__bf_restarted;

void hpl__bf_restart_dead(hpl__bf_cfg *g) {
  for (int i = 0; i < g->hosts; i++) {
    if (hpl__bf_alive[i]) continue;
    hpl__bf_restarted = 1;
    char err[512];
    if (hpl__lc_restart(hpl__bf_lc, i, err, sizeof err)) {
      fprintf(stderr, "bench_faults: restart node %d: %s\n", i, err);
      exit(1);
    }
    if (hpl_connect(hpl__lc_socket(hpl__bf_lc, i), 10000, &hpl__bf_cs[i])) hpl__bf_die("reconnect");
    hpl__bf_alive[i] = 1;
  }
}

/* The first live store's client (node 0's store may be dead after srckill). */
hpl_client *hpl__bf_any_live(const hpl__bf_cfg *g) {
  for (int i = 0; i < g->hosts; i++)
    if (hpl__bf_alive[i] && hpl__bf_cs[i]) return hpl__bf_cs[i];
  return NULL;
}

/* Every live store's "dir_registrations" counter into v[] (0 if unknown). */
void hpl__bf_registrations(const hpl__bf_cfg *g, uint64_t *v) {
  for (int i = 0; i < g->hosts; i++) {
    v[i] = 0;
    if (hpl__bf_alive[i] && hpl__bf_cs[i]) hpl_counter(hpl__bf_cs[i], "dir_registrations", 2000, &v[i]);
  }
}

/* After the directory's restart: wait (at most timeout_ms, polling every
 * 10 ms) until every live store registered with it again, so the next run
 * starts on a whole cluster. Returns the number of stores that did not. */
int hpl__bf_wait_registered(const hpl__bf_cfg *g, const uint64_t *before, int64_t timeout_ms) {
  uint64_t end = hpl__now_ns() + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    uint64_t now[HPL__BF_MAXN];
    hpl__bf_registrations(g, now);
    int missing = 0;
    for (int i = 0; i < g->hosts; i++) missing += hpl__bf_alive[i] && now[i] <= before[i];
    if (!missing || hpl__now_ns() >= end) return missing;
    hpl__sleep_until_ns(hpl__now_ns() + 10000000ull);
  }
}

/* After the last run every object is deleted, so what a store still has
 * allocated in its pool is leaked. Prints one line per such store (after
 * giving the frees up to 4 s: reduce tasks a restarted directory did not
 * adopt hold their outputs for up to 3 s, HPL__RDTASK_ORPHAN_MS, unless room is
 * wanted) and returns how many there are. */
int hpl__bf_leak_check(const hpl__bf_cfg *g) {
  int n = 0;
  for (int i = 0; i < g->hosts; i++) {
    uint64_t alloc = 0, objs = 0;
    if (!hpl__bf_cs[i]) continue;
    for (int t = 0; t < 400; t++) {
      if (hpl_counter(hpl__bf_cs[i], "pool_allocated", 2000, &alloc) || !alloc) break;
      hpl__sleep_until_ns(hpl__now_ns() + 10000000ull);
    }
    if (!alloc) continue;
    hpl_counter(hpl__bf_cs[i], "objects", 2000, &objs);
    printf("  LEAK: node %d still has %llu B of its pool allocated (%llu objects) after every "
           "object was deleted\n", i, (unsigned long long)alloc, (unsigned long long)objs);
    n++;
  }
  return n;
}
