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
