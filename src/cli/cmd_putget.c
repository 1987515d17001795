/* cmd_putget.c - `hoplite put` and `hoplite get`: an object from a file
 * or stdin into the store, and back out, with a progress bar for large
 * ones (cli.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

int hpl__cli_put(hpl_client *c, hpl__cli_opts *o, int argc, char **argv) {
  if (argc != 2) hpl__cli_die("usage: hoplite put ID FILE|-");
  const char *id = argv[0], *file = argv[1];
  hpl__cli_progress pg;
  if (strcmp(file, "-") == 0) {
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    ssize_t n;
    hpl__cli_progress_init(&pg, "put", id, 0);
    while (buf && (n = read(STDIN_FILENO, buf + len, cap - len)) > 0) {
      len += (size_t)n;
      if (len == cap) buf = realloc(buf, cap *= 2);
      hpl__cli_progress_show(&pg, len, 0);
    }
    if (!buf) hpl__cli_die("out of memory");
    hpl__cli_progress_show(&pg, len, 1);
    hpl__cli_check(c, hpl_put(c, id, buf, len, o->timeout_ms), "put");
    free(buf);
    fprintf(stderr, "put %s: %zu bytes\n", id, len);
    return 0;
  }
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) hpl__cli_die("%s: %s", file, strerror(errno));
  hpl_buf *b;
  hpl__cli_check(c, hpl_create(c, id, (uint64_t)st.st_size, o->timeout_ms, &b), "create");
  uint8_t *p = hpl_buf_data(b);
  uint64_t off = 0, size = (uint64_t)st.st_size;
  hpl__cli_progress_init(&pg, "put", id, size);
  /* in pieces: receivers may pull what is final, and the bar moves */
  const uint64_t piece = 8ull << 20;
  while (off < size) {
    ssize_t n = read(fd, p + off, (size_t)(size - off < piece ? size - off : piece));
    if (n <= 0) {
      hpl_abort(c, b);
      hpl__cli_die("%s: read failed", file);
    }
    off += (uint64_t)n;
    hpl_buf_progress(c, b, off);
    hpl__cli_progress_show(&pg, off, 0);
  }
  close(fd);
  hpl__cli_progress_show(&pg, off, 1);
  hpl__cli_check(c, hpl_seal(c, b, o->timeout_ms), "seal");
  fprintf(stderr, "put %s: %llu bytes\n", id, (unsigned long long)off);
  return 0;
}

/* A get on a thread of its own while the caller draws its progress. */
typedef struct get_job {
  hpl_client *c;
  const char *id;
  int64_t timeout_ms;
  hpl_buf *b;
  int rc, done;
  char detail[512]; /* hpl_errdetail is per thread: copied for the caller */
  pthread_mutex_t mu;
  pthread_cond_t cv;
} get_job;

static void *get_thread(void *arg) {
  get_job *j = arg;
  int rc = hpl_get(j->c, j->id, j->timeout_ms, &j->b);
  pthread_mutex_lock(&j->mu);
  j->rc = rc;
  if (rc) snprintf(j->detail, sizeof j->detail, "%s", hpl_errdetail(j->c));
  j->done = 1;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

/* hpl_get with a progress bar: the get runs on a thread; every 200 ms this
 * one asks the store how much of the object it holds and redraws. A get
 * that fails there ends the program (with the thread's detail); returns 0,
 * or hpl_get's code when no thread could be started and it ran here. */
static int get_with_progress(hpl_client *c, const char *id, int64_t timeout_ms, hpl_buf **out) {
  get_job j = {.c = c, .id = id, .timeout_ms = timeout_ms};
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&j.mu, NULL);
  pthread_cond_init(&j.cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_t t;
  if (pthread_create(&t, NULL, get_thread, &j) != 0) return hpl_get(c, id, timeout_ms, out);
  hpl__cli_progress pg;
  hpl__cli_progress_init(&pg, "get", id, 0);
  pthread_mutex_lock(&j.mu);
  while (!j.done) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)HPL__PROGRESS_EVERY_NS;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (pthread_cond_timedwait(&j.cv, &j.mu, &ts) == 0 || j.done) continue;
    pthread_mutex_unlock(&j.mu);
    uint64_t held, size;
    if (hpl_held_bytes(c, id, 1000, &held, &size) == 0 && size) {
      pg.total = size;
      hpl__cli_progress_show(&pg, held, 0);
    }
    pthread_mutex_lock(&j.mu);
  }
  pthread_mutex_unlock(&j.mu);
  pthread_join(t, NULL);
  pthread_mutex_destroy(&j.mu);
  pthread_cond_destroy(&j.cv);
  if (j.rc) {
    if (pg.drawn) fputc('\n', stderr);
    hpl__cli_die("get: %s (%s)", hpl_strerror(j.rc), j.detail);
  }
  pg.total = hpl_buf_size(j.b);
  hpl__cli_progress_show(&pg, pg.total, 1);
  *out = j.b;
  return 0;
}

int hpl__cli_get(hpl_client *c, hpl__cli_opts *o, int argc, char **argv) {
  if (argc < 1 || argc > 2) hpl__cli_die("usage: hoplite get ID [FILE|-]");
  hpl_buf *b;
  uint64_t t0 = hpl__now_ns();
  if (isatty(STDERR_FILENO))
    hpl__cli_check(c, get_with_progress(c, argv[0], o->timeout_ms, &b), "get");
  else
    hpl__cli_check(c, hpl_get(c, argv[0], o->timeout_ms, &b), "get");
  double ms = (double)(hpl__now_ns() - t0) / 1e6;
  int fd = STDOUT_FILENO;
  if (argc == 2 && strcmp(argv[1], "-") != 0) {
    fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) hpl__cli_die("%s: %s", argv[1], strerror(errno));
  }
  const uint8_t *p = hpl_buf_data(b);
  uint64_t size = hpl_buf_size(b), off = 0;
  while (off < size) {
    ssize_t n = write(fd, p + off, (size_t)(size - off));
    if (n <= 0) hpl__cli_die("write failed: %s", strerror(errno));
    off += (uint64_t)n;
  }
  if (fd != STDOUT_FILENO) close(fd);
  fprintf(stderr, "get %s: %llu bytes in %.2f ms\n", argv[0], (unsigned long long)size, ms);
  hpl_release(c, b);
  return 0;
}
