/*
 * bench_shuffle.c - one participant's part of bench_coll's shuffle: make a
 * node's partitions, put them and get its own, check them, delete them
 * (see bench_shuffle.h; bench_coll.c does the timing).
 */
#include "bench_shuffle.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* One node's participant between the calls. */
typedef struct bsh_node {
  int hosts, rep;
  uint64_t size, cap; /* partition size; bytes allocated per partition */
  uint8_t *part[HPL__BSH_MAXN]; /* part[j]: the bytes for node j (NULL for j == idx) */
  hpl_buf *got[HPL__BSH_MAXN];  /* got[j]: node j's partition for this node */
  uint8_t *want;                /* hpl__bsh_check's scratch: the expected bytes */
  uint64_t t0, t_put, t_got;    /* hpl__bsh_run: entered, puts done, gets done (ns) */
} bsh_node;

static bsh_node nodes[HPL__BSH_MAXN];

void hpl__bsh_id(char *out, size_t cap, int rep, int from, int to) {
  snprintf(out, cap, "shuf/%d/%d/%d", rep, from, to);
}

/* The pattern seed of partition (from -> to) of repetition rep: distinct
 * for every (from, to, rep, size) of a run. */
static uint64_t seed_of(int rep, int from, int to, uint64_t size) {
  return ((uint64_t)(rep + 2) << 48) ^ ((uint64_t)from << 32) ^ ((uint64_t)to << 16) ^
         (size * 0x9e3779b97f4a7c15ull);
}

int hpl__bsh_prepare(int idx, int hosts, int rep, uint64_t size) {
  if (idx < 0 || idx >= HPL__BSH_MAXN || hosts < 2 || hosts > HPL__BSH_MAXN || idx >= hosts)
    return HPL_EINVAL;
  bsh_node *n = &nodes[idx];
  if (n->cap < size || n->hosts != hosts) {
    hpl__bsh_free(idx);
    for (int j = 0; j < hosts; j++) {
      if (j == idx) continue;
      if (!(n->part[j] = malloc(size ? size : 1))) {
        hpl__bsh_free(idx);
        return HPL_ENOMEM;
      }
    }
    n->cap = size;
  }
  n->hosts = hosts;
  n->rep = rep;
  n->size = size;
  /* HPL_BENCH_SHUFFLE_MIXUP=1 (for the test that the check catches it):
   * node 0 gives each peer the bytes meant for the next one */
  int mix = idx == 0 && getenv("HPL_BENCH_SHUFFLE_MIXUP");
  for (int j = 0; j < hosts; j++) {
    if (j == idx) continue;
    int to = mix ? (j + 1) % hosts : j;
    hpl__fill_pattern(n->part[j], size, seed_of(rep, idx, to, size));
  }
  return 0;
}

/* HPL_BENCH_SHUFFLE_GETS=pairwise (a diagnostic): one hpl_get at a time,
 * from node idx+1, idx+2, ... (mod hosts; gids is in that order), as MPI's
 * pairwise all-to-all exchanges, so each node receives from one peer at a
 * time. bufs[k], rcs[k] as hpl_get_many's. */
static int get_pairwise(hpl_client *c, const bsh_node *n, const char *const *gids,
                        int64_t timeout_ms, hpl_buf **bufs, int *rcs) {
  int first = 0;
  for (int k = 0; k < n->hosts - 1; k++) {
    rcs[k] = hpl_get(c, gids[k], timeout_ms, &bufs[k]);
    if (rcs[k] && !first) first = rcs[k];
  }
  return first;
}

/* HPL_BENCH_SHUFFLE_GETS=overlap (bench_coll --overlap): the gets are
 * submitted asynchronously before the puts (hpl_async_get), so a partition
 * moves as soon as its maker has sealed it, while this node still puts its
 * own; then this node waits for its gets. The puts are the same
 * hpl_put_many as in the default mode. */
static int submit_gets(hpl_client *c, const char *const *gids, int k, int64_t timeout_ms) {
  for (int m = 0; m < k; m++) {
    int rc = hpl_async_get(c, gids[m], timeout_ms, (uint64_t)m);
    if (rc) return rc;
  }
  /* a submission is only queued: this sends them (nothing completes yet) */
  hpl_completion none[1];
  int n = hpl_async_poll(c, none, 0);
  return n < 0 ? n : 0;
}

/* Wait for the k gets submit_gets sent; bufs[m], rcs[m] as hpl_get_many's. */
static int reap_gets(hpl_client *c, int k, int64_t timeout_ms, hpl_buf **bufs, int *rcs) {
  int fd, left = k, first = 0;
  for (int m = 0; m < k; m++) {
    bufs[m] = NULL;
    rcs[m] = HPL_ETIMEDOUT;
  }
  if (hpl_async_fd(c, &fd)) return HPL_ESYS;
  uint64_t end = hpl__now_ns() + (uint64_t)timeout_ms * 1000000ull;
  hpl_completion done[HPL__BSH_MAXN];
  while (left > 0) {
    int n = hpl_async_poll(c, done, HPL__BSH_MAXN);
    if (n < 0) return n;
    for (int i = 0; i < n; i++) {
      uint64_t m = done[i].tag;
      if (m >= (uint64_t)k) continue;
      rcs[m] = done[i].status;
      bufs[m] = done[i].buf;
      if (done[i].status && !first) first = done[i].status;
      left--;
    }
    if (!left || n) continue;
    uint64_t now = hpl__now_ns();
    if (now >= end) return HPL_ETIMEDOUT;
    int64_t wait = hpl_async_timeout_ms(c);
    int ms = (int)((end - now) / 1000000ull) + 1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    (void)poll(&p, 1, wait >= 0 && wait < ms ? (int)wait : ms);
  }
  return first;
}

int hpl__bsh_run(hpl_client *c, int idx, int64_t timeout_ms) {
  if (idx < 0 || idx >= HPL__BSH_MAXN || !nodes[idx].hosts) return HPL_EINVAL;
  bsh_node *n = &nodes[idx];
  char pid[HPL__BSH_MAXN][48], gid[HPL__BSH_MAXN][48];
  const char *pids[HPL__BSH_MAXN], *gids[HPL__BSH_MAXN];
  const void *data[HPL__BSH_MAXN];
  uint64_t sizes[HPL__BSH_MAXN];
  int rcs[HPL__BSH_MAXN], k = 0;
  /* peers in turn from the next node on (k-th: node idx+1+k), the order
   * of pairwise exchange: every node's first partition put is for a
   * different receiver, and every receiver asks a different sender first
   * (in node order, all of them were for node 0 and asked node 0 first;
   * 8-host 64 KiB shuffle at 200 Mbit/s, 2026-12-01: 28.8 ms against
   * 30.0-31.9, with --overlap 26.3-26.4 against 29.6-31.4) */
  for (int s = 1; s < n->hosts; s++) {
    int j = (idx + s) % n->hosts;
    hpl__bsh_id(pid[k], sizeof pid[k], n->rep, idx, j);
    hpl__bsh_id(gid[k], sizeof gid[k], n->rep, j, idx);
    pids[k] = pid[k];
    gids[k] = gid[k];
    data[k] = n->part[j];
    sizes[k] = n->size;
    k++;
  }
  const char *order = getenv("HPL_BENCH_SHUFFLE_GETS");
  int overlap = order && !strcmp(order, "overlap");
  hpl_buf *bufs[HPL__BSH_MAXN];
  n->t0 = hpl__now_ns();
  int rc = overlap ? submit_gets(c, gids, k, timeout_ms) : 0;
  if (!rc) rc = hpl_put_many(c, pids, data, sizes, (size_t)k, timeout_ms, rcs);
  n->t_put = hpl__now_ns();
  if (rc) return rc; /* (overlap: the handle's pending gets end with it) */
  if (overlap)
    rc = reap_gets(c, k, timeout_ms, bufs, rcs);
  else if (order && !strcmp(order, "pairwise"))
    rc = get_pairwise(c, n, gids, timeout_ms, bufs, rcs);
  else
    rc = hpl_get_many(c, gids, (size_t)k, timeout_ms, bufs, rcs);
  n->t_got = hpl__now_ns();
  /* got[j] for j != idx, from the order asked */
  for (int m = 0; m < n->hosts - 1; m++) {
    int j = (idx + 1 + m) % n->hosts;
    n->got[j] = rcs[m] == 0 ? bufs[m] : NULL;
  }
  if (rc) {
    for (int j = 0; j < n->hosts; j++) {
      hpl_release(c, n->got[j]);
      n->got[j] = NULL;
    }
  }
  return rc;
}

int hpl__bsh_check(hpl_client *c, int idx) {
  if (idx < 0 || idx >= HPL__BSH_MAXN) return 1;
  bsh_node *n = &nodes[idx];
  int bad = 0;
  if (getenv("HPL_BENCH_TRACE")) /* read only now: the timed part is over */
    fprintf(stderr, "bench_shuffle: rep %d node %d: puts %.2f ms, then gets %.2f ms\n", n->rep,
            idx, (double)(n->t_put - n->t0) / 1e6, (double)(n->t_got - n->t_put) / 1e6);
  if (!n->want && !(n->want = malloc(n->cap ? n->cap : 1))) {
    fprintf(stderr, "bench_shuffle: node %d: no memory to check its partitions\n", idx);
    bad = 1;
  }
  for (int j = 0; j < n->hosts; j++) {
    if (j == idx) continue;
    hpl_buf *b = n->got[j];
    char id[48];
    hpl__bsh_id(id, sizeof id, n->rep, j, idx);
    if (!b) {
      fprintf(stderr, "bench_shuffle: node %d: partition %s was not got\n", idx, id);
      bad++;
      continue;
    }
    if (n->want) {
      hpl__fill_pattern(n->want, n->size, seed_of(n->rep, j, idx, n->size));
      if (hpl_buf_size(b) != n->size || memcmp(hpl_buf_data(b), n->want, n->size) != 0) {
        fprintf(stderr, "bench_shuffle: node %d: partition %s has the wrong %s\n", idx, id,
                hpl_buf_size(b) != n->size ? "size" : "bytes");
        bad++;
      }
    }
    hpl_release(c, b);
    n->got[j] = NULL;
  }
  return bad;
}

int hpl__bsh_drop(hpl_client *c, int idx, int hosts, int rep) {
  char id[HPL__BSH_MAXN][48];
  const char *ids[HPL__BSH_MAXN];
  int rcs[HPL__BSH_MAXN], k = 0;
  if (hosts < 2 || hosts > HPL__BSH_MAXN) return HPL_EINVAL;
  for (int j = 0; j < hosts; j++) {
    if (j == idx) continue;
    hpl__bsh_id(id[k], sizeof id[k], rep, idx, j);
    ids[k] = id[k];
    k++;
  }
  return hpl_delete_many(c, ids, (size_t)k, 30000, rcs);
}

void hpl__bsh_free(int idx) {
  if (idx < 0 || idx >= HPL__BSH_MAXN) return;
  bsh_node *n = &nodes[idx];
  for (int j = 0; j < HPL__BSH_MAXN; j++) {
    free(n->part[j]);
    n->part[j] = NULL;
  }
  free(n->want);
  n->want = NULL;
  n->cap = 0;
  n->hosts = 0;
}
