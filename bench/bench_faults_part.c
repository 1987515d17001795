/* bench_faults_part.c - bench_faults' participants: one node's part of a
 * run (a broadcast receiver's get, or the sink's reduce and get) and the
 * check of the bytes it got, and the objects a run puts (the broadcast's,
 * the reduce sources and, with --src-copies, their copies). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "util.h"
#include "bench_faults.h"

void *hpl__bf_part_main(void *arg) {
  hpl__bf_part *p = arg;
  hpl_buf *b = NULL;
  hpl_client *c = hpl__bf_cs[p->node];
  hpl__sleep_until_ns(p->start_ns);
  if (p->op == 0) {
    p->rc = hpl_get(c, p->id, p->timeout_ms, &b);
  } else {
    p->rc = hpl_reduce(c, p->id, p->srcs, (size_t)p->nsrc, (size_t)p->k, HPL_OP_SUM, HPL_DT_F32,
                       p->timeout_ms);
    if (!p->rc) p->rc = hpl_get(c, p->id, p->timeout_ms, &b);
  }
  p->end_ns = hpl__now_ns();
  if (p->rc) {
    __atomic_store_n(&p->finished, 1, __ATOMIC_RELEASE);
    return NULL;
  }
  if (p->op == 0) {
    p->bad = hpl_buf_size(b) != p->size || hpl__checksum(hpl_buf_data(b), p->size) != p->sum;
    if (p->bad)
      snprintf(p->why, sizeof p->why, "%llu bytes, checksum %s",
               (unsigned long long)hpl_buf_size(b), hpl_buf_size(b) == p->size ? "differs" : "-");
  } else {
    char *text = NULL;
    int src_rc = hpl_reduce_sources(c, p->id, 10000, &text);
    if (src_rc == 0) {
      snprintf(p->included, sizeof p->included, "%s", text);
      hpl_free(text);
    }
    /* source i holds i + (j % 5): the sum over the included sources */
    const float *r = hpl_buf_data(b);
    if (src_rc == HPL_ENOTFOUND && hpl_buf_size(b) == p->size && p->size >= 4) {
      /* The directory forgot the reduce (it restarted after the reduce
       * finished): which sources went in is unknown, but element j must be
       * S + k * (j % 5) with S the sum of k distinct indices of 0..N-1,
       * which is any integer from 0+..+(k-1) to (N-k)+..+(N-1). */
      p->unlisted = 1;
      double sum = r[0], lo = p->k * (p->k - 1) / 2.0, hi = lo + (double)p->k * (p->nsrc - p->k);
      if (sum != (double)(long)sum || sum < lo || sum > hi) {
        p->bad = 1;
        snprintf(p->why, sizeof p->why, "element 0 is %g, not a sum of %d of the %d sources "
                 "(sources unknown: the directory forgot the reduce)", sum, p->k, p->nsrc);
      }
      for (size_t j = 0; !p->bad && j < p->size / 4; j++)
        if (r[j] != (float)(sum + p->k * (int)(j % 5))) {
          p->bad = 1;
          snprintf(p->why, sizeof p->why, "element %zu is %g, want %g (sources unknown: the "
                   "directory forgot the reduce)", j, (double)r[j], sum + p->k * (int)(j % 5));
        }
      hpl_release(c, b);
      __atomic_store_n(&p->finished, 1, __ATOMIC_RELEASE);
      return NULL;
    }
    int idx[HPL__BF_MAXN], n = 0;
    for (char *l = strtok(p->included, "\n"); l && n < HPL__BF_MAXN; l = strtok(NULL, "\n")) {
      const char *slash = strrchr(l, '/');
      idx[n++] = slash ? atoi(slash + 1) : 0;
    }
    p->bad = n != p->k || hpl_buf_size(b) != p->size;
    if (p->bad)
      snprintf(p->why, sizeof p->why, "%d sources listed of %d (hpl_reduce_sources: %s), %llu bytes",
               n, p->k, src_rc ? hpl_errname(src_rc) : "ok", (unsigned long long)hpl_buf_size(b));
    for (size_t j = 0; !p->bad && j < p->size / 4; j++) {
      float want = 0;
      for (int i = 0; i < n; i++) want += (float)(idx[i] + (int)(j % 5));
      if (r[j] != want) {
        p->bad = 1;
        snprintf(p->why, sizeof p->why, "element %zu is %g, the listed sources sum to %g", j,
                 (double)r[j], (double)want);
      }
    }
  }
  hpl_release(c, b);
  __atomic_store_n(&p->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

void hpl__bf_put_pattern(int node, const char *id, uint64_t size, uint64_t seed) {
  uint8_t *d = malloc(size);
  hpl__fill_pattern(d, size, seed);
  int rc = hpl_put(hpl__bf_cs[node], id, d, size, 300000);
  free(d);
  if (rc) {
    fprintf(stderr, "bench_faults: put %s: %s (%s)\n", id, hpl_strerror(rc), hpl_errdetail(hpl__bf_cs[node]));
    exit(1);
  }
}

/* --src-copies: node `node` gets a copy of source `id` (a thread). */
typedef struct {
  int node;
  const char *id;
  int rc;
} copier;

static void *copy_main(void *arg) {
  copier *cp = arg;
  hpl_buf *b = NULL;
  cp->rc = hpl_get(hpl__bf_cs[cp->node], cp->id, 300000, &b);
  if (cp->rc == 0) hpl_release(hpl__bf_cs[cp->node], b);
  return NULL;
}

void hpl__bf_put_source(int node, const char *id, uint64_t size) {
  size_t n = size / 4;
  float *d = malloc(size);
  for (size_t j = 0; j < n; j++) d[j] = (float)(node + (int)(j % 5));
  int rc = hpl_put(hpl__bf_cs[node], id, d, size, 300000);
  free(d);
  if (rc) {
    fprintf(stderr, "bench_faults: put %s: %s\n", id, hpl_strerror(rc));
    exit(1);
  }
}

void hpl__bf_copy_sources(const hpl__bf_cfg *g, char (*sids)[96]) {
  copier cp[HPL__BF_MAXN];
  pthread_t ct[HPL__BF_MAXN];
  for (int i = 0; i < g->hosts; i++) {
    cp[i] = (copier){.node = (i + 1) % g->hosts, .id = sids[i]};
    pthread_create(&ct[i], NULL, copy_main, &cp[i]);
  }
  for (int i = 0; i < g->hosts; i++) {
    pthread_join(ct[i], NULL);
    if (cp[i].rc) {
      fprintf(stderr, "bench_faults: copy of %s to node %d: %s\n", sids[i], cp[i].node,
              hpl_strerror(cp[i].rc));
      exit(1);
    }
  }
}
