/* bench_coll_job.c - one participant's part of a bench_coll repetition
 * (a job): its timed part (a get, a reduce, an allreduce, the allreduce-rs
 * experiment, or the shuffle's, bench_shuffle.c), the check of every byte
 * it got, and running it as a thread of this process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"
#include "bench_shuffle.h"
#include "bench_coll.h"

const char *hpl__bc_host_prefix;
void hpl__bc_join_host(int i) {
  if (hpl__bc_host_prefix && hpl__lc_enter_host(hpl__bc_host_prefix, i) != 0)
    fprintf(stderr, "bench_coll: cannot enter host %d's namespace: %s\n", i, strerror(errno));
}

/* Slice i of n of `size` bytes of f32: its offset and length. */
static void rs_slice(uint64_t size, int n, int i, uint64_t *off, uint64_t *len) {
  uint64_t per = size / 4 / (uint64_t)n * 4;
  *off = per * (uint64_t)i;
  *len = i == n - 1 ? size - *off : per;
}

/* allreduce-rs (see the top): *b is this node's assembled copy. */
static int allreduce_rs(hpl_client *c, const hpl__bc_job *j, const char *const *srcs, hpl_buf **b) {
  int n = j->hosts, rc;
  uint64_t off, len;
  char sids[HPL__BC_MAXN][96], aid[96];
  const char *sp[HPL__BC_MAXN];
  for (int i = 0; i < n; i++) {
    snprintf(sids[i], sizeof sids[i], "%s/s%d", j->id, i);
    sp[i] = sids[i];
  }
  rs_slice(j->size, n, j->idx, &off, &len);
  rc = hpl_reduce_range(c, sp[j->idx], srcs, (size_t)n, 0, HPL_OP_SUM, HPL_DT_F32, off, len,
                        300000);
  if (rc) return rc;
  hpl_buf *parts[HPL__BC_MAXN];
  int rcs[HPL__BC_MAXN];
  rc = hpl_get_many(c, sp, (size_t)n, 300000, parts, rcs);
  if (rc) {
    for (int i = 0; i < n; i++)
      if (rcs[i] == 0) hpl_release(c, parts[i]);
    return rc;
  }
  hpl_buf *w = NULL;
  snprintf(aid, sizeof aid, "%s/a%d", j->id, j->idx);
  rc = hpl_create(c, aid, j->size, 300000, &w);
  for (int i = 0; i < n; i++) {
    if (rc == 0) {
      rs_slice(j->size, n, i, &off, &len);
      if (hpl_buf_size(parts[i]) == len)
        memcpy((uint8_t *)hpl_buf_data(w) + off, hpl_buf_data(parts[i]), len);
      else
        rc = HPL_EMISMATCH;
    }
    hpl_release(c, parts[i]);
  }
  if (rc) {
    if (w) hpl_abort(c, w);
    return rc;
  }
  if ((rc = hpl_seal(c, w, 300000))) return rc;
  return hpl_get(c, aid, 300000, b);
}

/* The timed part: *b holds the result on success. */
int hpl__bc_job_timed(hpl_client *c, const hpl__bc_job *j, hpl_buf **b, uint64_t *end_ns) {
  int rc;
  if (j->kind == HPL__BC_JOB_SHUFFLE_PREP) { /* untimed: start_ns is 0 */
    rc = hpl__bsh_prepare(j->idx, j->hosts, j->rep, j->size);
    *end_ns = hpl__now_ns();
    return rc;
  }
  hpl__sleep_until_ns(j->start_ns);
  if (j->kind == HPL__BC_JOB_SHUFFLE) {
    rc = hpl__bsh_run(c, j->idx, 300000);
  } else if (j->kind == HPL__BC_JOB_GET) {
    rc = hpl_get(c, j->id, 300000, b);
  } else {
    char ids[HPL__BC_MAXN][64];
    const char *srcs[HPL__BC_MAXN];
    for (int i = 0; i < j->hosts; i++) {
      snprintf(ids[i], sizeof ids[i], "bench/%s/src/%llu/%d", j->op, (unsigned long long)j->size, i);
      srcs[i] = ids[i];
    }
    if (j->kind == HPL__BC_JOB_ALLREDUCE_RS) {
      rc = allreduce_rs(c, j, srcs, b);
    } else if (j->kind == HPL__BC_JOB_ALLREDUCE) {
      rc = hpl_allreduce(c, j->id, srcs, (size_t)j->hosts, 0, HPL_OP_SUM, HPL_DT_F32, 300000, b);
    } else {
      rc = hpl_reduce(c, j->id, srcs, (size_t)j->hosts, 0, HPL_OP_SUM, HPL_DT_F32, 300000);
      if (rc == 0) rc = hpl_get(c, j->id, 300000, b);
    }
  }
  *end_ns = hpl__now_ns();
  return rc;
}

/* Source i of a reduce holds i + (k % 7) at element k (small integers: any
 * order of summing is exact), so the sum at k is hosts * (k % 7) +
 * hosts * (hosts - 1) / 2. */
float hpl__bc_reduce_elem(int i, size_t k) { return (float)(i + (int)(k % 7)); }

/* 1 if the result of a job's timed part is wrong. */
int hpl__bc_job_bad(hpl_client *c, const hpl__bc_job *j, hpl_buf *b) {
  if (j->kind == HPL__BC_JOB_SHUFFLE_PREP) return 0;
  if (j->kind == HPL__BC_JOB_SHUFFLE) return hpl__bsh_check(c, j->idx) != 0;
  if (hpl_buf_size(b) != j->size) return 1;
  if (j->kind == HPL__BC_JOB_GET) return hpl__checksum(hpl_buf_data(b), j->size) != j->sum;
  const float *v = hpl_buf_data(b);
  float base = (float)(j->hosts * (j->hosts - 1) / 2);
  for (size_t k = 0; k < j->size / 4; k++)
    if (v[k] != (float)j->hosts * (float)(k % 7) + base) return 1;
  return 0;
}

void *hpl__bc_part_thread(void *arg) {
  hpl__bc_part *p = arg;
  hpl_buf *b = NULL;
  hpl__bc_join_host(p->j.idx);
  p->r.rc = hpl__bc_job_timed(p->c, &p->j, &b, &p->r.end_ns);
  /* verify only once everyone is done: checking early would take CPU from
   * participants still in the pipeline */
  pthread_mutex_lock(&p->gt->mu);
  if (++p->gt->done == p->gt->n) /* the last one wakes the driver: nobody */
    pthread_cond_broadcast(&p->gt->cv); /* else takes a CPU while others run */
  while (!p->gt->open) pthread_cond_wait(&p->gt->cv, &p->gt->mu);
  pthread_mutex_unlock(&p->gt->mu);
  if (p->r.rc) {
    snprintf(p->r.err, sizeof p->r.err, "%s", hpl_errdetail(p->c));
    return NULL;
  }
  p->r.bad = hpl__bc_job_bad(p->c, &p->j, b);
  hpl_release(p->c, b);
  return NULL;
}
