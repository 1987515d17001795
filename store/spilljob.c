/* spilljob.c - the spill module's I/O jobs, run on libuv's thread pool:
 * plain system calls on a request's file and buffer, one chunk at a time
 * (see spill.h for the O_DIRECT rules). They touch only their own request
 * or file and the immutable path. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "spillint.h"
#include "util.h"

/* Move n bytes between fd at off and buf; *moved counts what was moved.
 * Returns 0, an errno, -1 when a read met the end of the file, or -2 when
 * an O_DIRECT transfer (`direct`) came back short of a whole block, so the
 * rest cannot go direct. */
static int xfer(int fd, int write, int direct, uint8_t *buf, uint64_t off, uint64_t n,
                uint64_t *moved) {
  uint64_t k = 0;
  int e = 0;
  while (k < n) {
    if (direct && k % HPL__SPILL_ALIGN) {
      e = -2;
      break;
    }
    size_t want = n - k > (1u << 30) ? (1u << 30) : (size_t)(n - k);
    ssize_t got = write ? pwrite(fd, buf + k, want, (off_t)(off + k))
                        : pread(fd, buf + k, want, (off_t)(off + k));
    if (got < 0) {
      if (errno == EINTR) continue;
      e = errno;
      break;
    }
    if (got == 0) {
      e = write ? EIO : -1;
      break;
    }
    k += (uint64_t)got;
  }
  *moved += k;
  return e;
}

/* One chunk of a request: [j_off, j_off + j_len) of the file. The part
 * where buffer and file offset are congruent modulo HPL__SPILL_ALIGN, cut
 * to whole blocks, goes through an O_DIRECT descriptor; the head and tail
 * around it through a buffered one. */
void hpl__spill_io_run(uv_work_t *w) {
  hpl__sp_req *r = w->data;
  uint64_t t0 = hpl__now_ns();
  const char *path = r->f->path;
  uint8_t *buf = r->buf + (r->j_off - r->off);
  uint64_t off = r->j_off, n = r->j_len;
  int acc = r->write ? O_WRONLY : O_RDONLY;
  int bfd = -1, dfd = -1, e = 0;

  uint64_t head = n, mid = 0;
  if (r->j_direct && ((uintptr_t)buf - (uintptr_t)off) % HPL__SPILL_ALIGN == 0) {
    head = (HPL__SPILL_ALIGN - off % HPL__SPILL_ALIGN) % HPL__SPILL_ALIGN;
    if (head > n) head = n;
    mid = (n - head) & ~(uint64_t)(HPL__SPILL_ALIGN - 1);
  }
  uint64_t tail = n - head - mid;

  if (r->j_create) {
    bfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (bfd < 0) {
      e = errno;
      goto out;
    }
    r->j_created = 1;
  }
  if (mid) {
    dfd = open(path, acc | O_DIRECT | O_CLOEXEC);
    if (dfd < 0) {
      if (errno != EINVAL) {
        e = errno;
        goto out;
      }
      r->j_refused = 1; /* the file system refuses O_DIRECT: all buffered */
      head = n;
      mid = tail = 0;
    }
  }
  if ((head || tail || r->j_refused) && bfd < 0) {
    bfd = open(path, acc | O_CLOEXEC);
    if (bfd < 0) {
      e = errno;
      goto out;
    }
  }

  if (head && (e = xfer(bfd, r->write, 0, buf, off, head, &r->j_moved)) != 0) goto out;
  if (mid) {
    uint64_t m = 0;
    e = xfer(dfd, r->write, 1, buf + head, off + head, mid, &m);
    r->j_moved += m;
    r->j_direct_bytes += m;
    if ((e == EINVAL && m == 0) || e == -2) {
      /* EINVAL at once: accepted at open, refused for transfers (a block
       * size above ours); -2: a short transfer (end of file, a size
       * limit) left us off the block grid. The rest goes buffered, where
       * the end of file or the real error shows. */
      if (e == EINVAL) r->j_refused = 1;
      if (bfd < 0 && (bfd = open(path, acc | O_CLOEXEC)) < 0) {
        e = errno;
        goto out;
      }
      e = xfer(bfd, r->write, 0, buf + head + m, off + head + m, mid - m, &r->j_moved);
    }
    if (e) goto out;
  }
  if (tail) e = xfer(bfd, r->write, 0, buf + head + mid, off + head + mid, tail, &r->j_moved);

out:
  if (dfd >= 0) close(dfd);
  if (bfd >= 0 && close(bfd) != 0 && r->write && e == 0 && errno != EINTR) e = errno;
  if (e == -1) {
    r->j_eof = 1;
    e = EIO;
  }
  r->j_err = e;
  r->j_ns = hpl__now_ns() - t0;
}

static int unlink_path(const char *path) {
  return unlink(path) == 0 || errno == ENOENT ? 0 : errno;
}

void hpl__spill_req_unlink_run(uv_work_t *w) {
  hpl__sp_req *r = w->data;
  r->unlink_err = unlink_path(r->f->path);
}

void hpl__spill_file_unlink_run(uv_work_t *w) {
  hpl__sp_file *f = w->data;
  f->unlink_err = unlink_path(f->path);
}
