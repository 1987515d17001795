/* putcopy.c - copying a local client's bytes into an object (see putcopy.h). */
#include "putcopy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hoplite.h"

struct hpl__pcstage {
  int refs;
  const uint8_t *map;
  uint64_t len; /* the memfd's size when mapped: all of it is mapped */
  dev_t dev;
  ino_t ino;
};

/* A duplicate of descriptor fd of process pid (pidfd_getfd: the kernel
 * checks the store may ptrace it, as for process_vm_readv), or -1 with
 * errno set. */
static int take_fd(pid_t pid, int fd) {
  int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pfd < 0) return -1;
  int got = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
  int err = errno;
  close(pfd);
  if (got >= 0) fcntl(got, F_SETFD, FD_CLOEXEC);
  errno = err;
  return got;
}

int hpl__pcstage_get(hpl__pcstage **cache, pid_t pid, int fd, uint64_t off, uint64_t n,
                     hpl__pcstage **out, char *why, size_t wlen) {
  int d = take_fd(pid, fd);
  if (d < 0) {
    snprintf(why, wlen, "cannot take the client's creation memfd (pid %d, descriptor %d: %s)",
             (int)pid, fd, strerror(errno));
    return HPL_EINVAL;
  }
  struct stat st;
  int seals = fcntl(d, F_GET_SEALS); /* only memfds (shmem) have seals */
  if (fstat(d, &st) != 0 || !S_ISREG(st.st_mode) || seals < 0 || !(seals & F_SEAL_SHRINK) ||
      off > (uint64_t)st.st_size || n > (uint64_t)st.st_size - off) {
    snprintf(why, wlen,
             "descriptor %d of the client (pid %d) is not a memfd sealed against shrinking "
             "that holds bytes %llu-%llu", fd, (int)pid, (unsigned long long)off,
             (unsigned long long)(off + n));
    close(d);
    return HPL_EINVAL;
  }
  hpl__pcstage *c = *cache;
  if (c && c->dev == st.st_dev && c->ino == st.st_ino && off + n <= c->len) {
    close(d);
    c->refs++;
    *out = c;
    return 0;
  }
  hpl__pcstage *ns = calloc(1, sizeof *ns);
  void *m = ns && st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, d, 0)
                             : MAP_FAILED;
  int err = errno;
  close(d);
  if (m == MAP_FAILED) {
    free(ns);
    snprintf(why, wlen, "cannot map the client's creation memfd (pid %d): %s", (int)pid,
             ns ? strerror(err) : "out of memory");
    return ns ? HPL_ESYS : HPL_ENOMEM;
  }
  *ns = (hpl__pcstage){.refs = 2, .map = m, .len = (uint64_t)st.st_size, .dev = st.st_dev,
                       .ino = st.st_ino};
  hpl__pcstage_unref(*cache);
  *cache = ns;
  *out = ns;
  return 0;
}

const uint8_t *hpl__pcstage_bytes(const hpl__pcstage *st) { return st->map; }

void hpl__pcstage_unref(hpl__pcstage *st) {
  if (!st || --st->refs > 0) return;
  munmap((void *)st->map, st->len);
  free(st);
}

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
  if (j->map) { /* the client's memfd: its range was checked when it was taken */
    memcpy(j->dst, j->map + j->src, j->n);
    j->status = 0;
    return;
  }
  j->status = hpl__pcopy_now(j->pid, j->src, j->dst, j->n, j->detail, sizeof j->detail);
}

/* Copy n bytes of the copier's source from byte `at` on into dst + at, now. */
static int copier_now(hpl__pcopier *k, uint64_t at, uint64_t n, char *why, size_t wlen) {
  if (k->stage) {
    memcpy(k->dst + at, hpl__pcstage_bytes(k->stage) + k->src + at, n);
    return 0;
  }
  return hpl__pcopy_now(k->pid, k->src + at, k->dst + at, n, why, wlen);
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

int hpl__pcopier_use_memfd(hpl__pcopier *k, hpl__pcstage **cache, int fd, uint64_t off,
                           uint64_t n, char *why, size_t wlen) {
  hpl__pcstage *st = NULL;
  int rc = hpl__pcstage_get(cache, k->pid, fd, off, n, &st, why, wlen);
  if (rc) return rc;
  hpl__pcstage_unref(k->stage);
  k->stage = st;
  k->src = off;
  return 0;
}

void hpl__pcopier_run(hpl__pcopier *k) {
  while (!k->out && !k->rc && k->copied < k->want) {
    uint64_t n = k->want - k->copied;
    /* the first steps are small, so receivers of a large object start
     * soon; then they double up to the largest */
    uint64_t step = k->copied < HPL__PCOPY_FIRST ? HPL__PCOPY_FIRST : k->copied;
    if (step > HPL__PCOPY_STEP) step = HPL__PCOPY_STEP;
    if (n > step) n = step;
    if (n <= HPL__PCOPY_SMALL || (k->stage && n <= HPL__PCOPY_INLINE)) {
      k->rc = copier_now(k, k->copied, n, k->why, sizeof k->why);
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
      k->job[i] = (hpl__pcopy){.pid = k->pid,
                               .map = k->stage ? hpl__pcstage_bytes(k->stage) : NULL,
                               .src = k->src + k->copied + at,
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
      k->step_rc = copier_now(k, k->copied, m, k->step_why, sizeof k->step_why);
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
