/* putcopy.c - copying a local client's bytes into an object (see putcopy.h). */
#include "putcopy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "hoplite.h"

/* One process_vm_readv call moves at most this much (the kernel may stop
 * short; the loop goes on from there). */
#define PCOPY_STEP (64u << 20)

int hpl__pcopy_now(pid_t pid, uint64_t src, uint8_t *dst, uint64_t n, char *detail, size_t dlen) {
  uint64_t done = 0;
  while (done < n) {
    uint64_t k = n - done < PCOPY_STEP ? n - done : PCOPY_STEP;
    struct iovec local = {.iov_base = dst + done, .iov_len = (size_t)k};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)(src + done), .iov_len = (size_t)k};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got <= 0) {
      int err = got < 0 ? errno : EFAULT;
      snprintf(detail, dlen,
               "cannot read the client's bytes %llu-%llu (pid %d, process_vm_readv: %s)",
               (unsigned long long)done, (unsigned long long)(done + k), (int)pid, strerror(err));
      return err == ESRCH ? HPL_ECONN : HPL_EINVAL;
    }
    done += (uint64_t)got;
  }
  return 0;
}

static void pcopy_run(uv_work_t *w) {
  hpl__pcopy *j = (hpl__pcopy *)w;
  j->detail[0] = 0;
  j->status = hpl__pcopy_now(j->pid, j->src, j->dst, j->n, j->detail, sizeof j->detail);
}

static void pcopy_done(uv_work_t *w, int status) {
  hpl__pcopy *j = (hpl__pcopy *)w;
  if (status == UV_ECANCELED && j->status == 0) {
    j->status = HPL_ECANCELED;
    snprintf(j->detail, sizeof j->detail, "the copy of the client's bytes was cancelled");
  }
  j->done(j, j->status, j->detail);
}

int hpl__pcopy_start(uv_loop_t *loop, hpl__pcopy *j) {
  j->work.data = j;
  j->status = 0;
  return uv_queue_work(loop, &j->work, pcopy_run, pcopy_done) == 0 ? 0 : HPL_ESYS;
}

static void copier_job_done(hpl__pcopy *j, int status, const char *detail) {
  hpl__pcopier *k = j->arg;
  k->out--;
  if (status && !k->step_rc) {
    k->step_rc = status;
    snprintf(k->step_why, sizeof k->step_why, "%s", detail);
  }
  if (k->out) return; /* the step's other job is still out */
  if (k->step_rc) {
    k->rc = k->step_rc;
    snprintf(k->why, sizeof k->why, "%s", k->step_why);
  } else {
    k->copied += k->step;
  }
  k->advanced(k);
}

void hpl__pcopier_run(hpl__pcopier *k) {
  while (!k->out && !k->rc && k->copied < k->want) {
    uint64_t n = k->want - k->copied;
    /* the first steps are small, so receivers of a large object start
     * soon; then they double up to the largest */
    uint64_t step = k->copied < HPL__PCOPY_FIRST ? HPL__PCOPY_FIRST : k->copied;
    if (step > HPL__PCOPY_STEP) step = HPL__PCOPY_STEP;
    if (n > step) n = step;
    if (n <= HPL__PCOPY_SMALL) {
      k->rc = hpl__pcopy_now(k->pid, k->src + k->copied, k->dst + k->copied, n, k->why,
                             sizeof k->why);
      if (!k->rc) k->copied += n;
      continue;
    }
    /* a step of at most HPL__PCOPY_INLINE: the loop copies the first part
     * itself while the thread pool copies the others; a larger one goes
     * to the thread pool whole */
    int here = n <= HPL__PCOPY_INLINE;
    k->step = n;
    k->step_rc = 0;
    uint64_t part = (n / HPL__PCOPY_JOBS + 4095) & ~(uint64_t)4095, at = here ? part : 0;
    for (int i = here; i < HPL__PCOPY_JOBS && at < n; i++) {
      uint64_t m = i == HPL__PCOPY_JOBS - 1 || n - at < part ? n - at : part;
      k->job[i] = (hpl__pcopy){.pid = k->pid, .src = k->src + k->copied + at,
                               .dst = k->dst + k->copied + at, .n = m, .arg = k,
                               .done = copier_job_done};
      if (hpl__pcopy_start(k->loop, &k->job[i]) != 0) {
        k->step_rc = HPL_ESYS;
        snprintf(k->step_why, sizeof k->step_why, "cannot queue the copy of the client's bytes");
        break;
      }
      k->out++;
      at += m;
    }
    if (here && !k->step_rc) {
      uint64_t m = at == part ? n : part; /* all of it if nothing was queued */
      k->step_rc = hpl__pcopy_now(k->pid, k->src + k->copied, k->dst + k->copied, m,
                                  k->step_why, sizeof k->step_why);
      if (!k->step_rc && m == n) {
        k->copied += n;
        continue;
      }
    }
    if (k->out) return; /* advanced() follows when the jobs are back */
    k->rc = k->step_rc;
    snprintf(k->why, sizeof k->why, "%s", k->step_why);
  }
}
