/* spilldir.c - the spill area (see spill.h, Placement): opening it (our
 * private subdirectory, its lock, the O_DIRECT probe) and the jobs that
 * remove dead stores' subdirectories and, at close, our own. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "spillint.h"
#include "util.h"

/* Unlink every entry of directory fd `dfd` (ours, or a dead store's). */
static void remove_entries(int dfd) {
  int fd = dup(dfd);
  if (fd < 0) return;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    unlinkat(dfd, e->d_name, 0);
  }
  closedir(d);
}

/* Remove the subdirectories of dead stores: named hpl-spill-*, not ours,
 * lock file not locked (or missing), and untouched for HPL__SPILL_STALE_S (a
 * store is between mkdir and flock for microseconds only). */
void hpl__spill_clean_run(uv_work_t *w) {
  hpl__spill *sp = w->data;
  DIR *d = opendir(sp->root);
  if (!d) return;
  int rfd = dirfd(d);
  const char *own = strrchr(sp->subdir, '/') + 1;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, HPL__SPILL_PREFIX, strlen(HPL__SPILL_PREFIX)) != 0 ||
        strcmp(e->d_name, own) == 0)
      continue;
    int sfd = openat(rfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0) continue;
    struct stat st;
    int stale = 0;
    int lk = openat(sfd, HPL__SPILL_LOCK, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (lk >= 0) {
      if (flock(lk, LOCK_EX | LOCK_NB) == 0 && fstat(lk, &st) == 0 &&
          now - st.st_mtime >= HPL__SPILL_STALE_S)
        stale = 1;
    } else if (errno == ENOENT && fstat(sfd, &st) == 0 && now - st.st_mtime >= HPL__SPILL_STALE_S) {
      stale = 1;
    }
    if (stale) {
      remove_entries(sfd);
      if (unlinkat(rfd, e->d_name, AT_REMOVEDIR) == 0) sp->clean_removed++;
    }
    if (lk >= 0) close(lk); /* releases the flock */
    close(sfd);
  }
  closedir(d);
}

/* Our subdirectory and everything in it (the lock file too: the flock is
 * held until the descriptor closes, after the rmdir). */
void hpl__spill_final_run(uv_work_t *w) {
  hpl__spill *sp = w->data;
  int dfd = open(sp->subdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    remove_entries(dfd);
    close(dfd);
  }
  rmdir(sp->subdir);
  if (sp->lock_fd >= 0) close(sp->lock_fd);
  sp->lock_fd = -1;
}

static void set_detail(char *detail, size_t dlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_detail(char *detail, size_t dlen, const char *fmt, ...) {
  if (!detail || dlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, dlen, fmt, ap);
  va_end(ap);
}

/* mkdir -p with mode 0700 for what it creates. Returns 0 or -1 (errno). */
static int mkdir_p(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int rc = mkdir(path, 0700);
    *p = '/';
    if (rc != 0 && errno != EEXIST) return -1;
  }
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return -1;
  return 0;
}

int hpl__spill_open(uv_loop_t *loop, const char *dir, unsigned flags, hpl__spill **out,
                    char *detail, size_t dlen) {
  set_detail(detail, dlen, "%s", "");
  if (!loop || !dir || !out) {
    set_detail(detail, dlen, "spill open: loop, directory and out are required");
    return HPL_EINVAL;
  }
  *out = NULL;
  size_t n = strlen(dir);
  if (n == 0 || n > PATH_MAX - 64) {
    set_detail(detail, dlen, "spill directory '%.64s%s': %s", dir, n > 64 ? "..." : "",
               n == 0 ? "empty path" : "path too long");
    return HPL_EINVAL;
  }
  if (flags & ~HPL__SPILL_BUFFERED) {
    set_detail(detail, dlen, "spill open: unknown flags 0x%x", flags);
    return HPL_EINVAL;
  }
  char *root = strdup(dir);
  char *sub = malloc(n + 64);
  char path[PATH_MAX];
  if (!root || !sub) {
    free(root);
    free(sub);
    set_detail(detail, dlen, "spill open: out of memory");
    return HPL_ENOMEM;
  }
  while (n > 1 && root[n - 1] == '/') root[--n] = '\0';

  int e = 0, lock_fd = -1, direct = 0;
  struct stat st;
  if (mkdir_p(root) != 0 || stat(root, &st) != 0) {
    e = errno;
    set_detail(detail, dlen, "cannot create spill directory %s: %s", root, strerror(e));
    goto fail;
  }
  if (!S_ISDIR(st.st_mode)) {
    e = ENOTDIR;
    set_detail(detail, dlen, "spill directory %s is not a directory", root);
    goto fail;
  }
  for (int tries = 0;; tries++) {
    snprintf(sub, n + 64, "%s/" HPL__SPILL_PREFIX "%d-%08x", root, (int)getpid(),
             (unsigned)hpl__random_u64());
    if (mkdir(sub, 0700) == 0) break;
    if (errno != EEXIST || tries == 16) {
      e = errno;
      set_detail(detail, dlen, "spill directory %s is not writable: cannot create %s: %s", root,
                 sub, strerror(e));
      goto fail;
    }
  }
  snprintf(path, sizeof path, "%s/" HPL__SPILL_LOCK, sub);
  lock_fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    e = errno;
    set_detail(detail, dlen, "spill directory %s: cannot create and lock %s: %s", root, path,
               strerror(e));
    goto fail_sub;
  }
  if (!(flags & HPL__SPILL_BUFFERED)) {
    snprintf(path, sizeof path, "%s/" HPL__SPILL_PROBE, sub);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      direct = 1;
      close(fd);
    } else if (errno != EINVAL) {
      e = errno;
      set_detail(detail, dlen, "spill directory %s is not writable: cannot create %s: %s", root,
                 path, strerror(e));
      unlink(path);
      goto fail_sub;
    }
    unlink(path); /* a file system refusing O_DIRECT may have created it */
  }

  hpl__spill *sp = calloc(1, sizeof *sp);
  if (!sp) {
    e = ENOMEM;
    set_detail(detail, dlen, "spill open: out of memory");
    goto fail_sub;
  }
  sp->loop = loop;
  sp->root = root;
  sp->subdir = sub;
  sp->lock_fd = lock_fd;
  sp->direct = direct;
  uv_idle_init(loop, &sp->idle);
  sp->idle.data = sp;
  sp->clean_work.data = sp;
  if (uv_queue_work(loop, &sp->clean_work, hpl__spill_clean_run, hpl__spill_clean_done) == 0)
    sp->jobs_out++;
  *out = sp;
  return HPL_OK;

fail_sub:
  if (lock_fd >= 0) close(lock_fd);
  snprintf(path, sizeof path, "%s/" HPL__SPILL_LOCK, sub);
  unlink(path);
  rmdir(sub);
fail:
  free(root);
  free(sub);
  errno = e;
  return e == ENOMEM ? HPL_ENOMEM : HPL_ESYS;
}
