/* test_spill.c - unit tests of the store's spill files (store/spill.c).
 *
 * Real files in mkdtemp directories under /tmp (and /dev/shm), a real
 * libuv loop and thread pool. The checks that need a process of their own
 * (a file-size limit, an unprivileged user) run in a forked child that
 * reports through its exit status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "hoplite.h"
#include "spill.h"
#include "util.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* What a callback saw. */
typedef struct rec {
  int calls;
  int status;
  int err;
  char detail[1024];
} rec;

static void rec_cb(void *arg, int status, int sys_errno, const char *detail) {
  rec *r = arg;
  r->calls++;
  r->status = status;
  r->err = sys_errno;
  snprintf(r->detail, sizeof r->detail, "%s", detail);
}

static char *tmpdir_new(const char *base) {
  char *d = malloc(256);
  snprintf(d, 256, "%s/hpl-test-spill.XXXXXX", base);
  assert_non_null(mkdtemp(d));
  return d;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static void tmpdir_free(char *d) {
  nftw(d, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(d);
}

/* Entries of a directory other than . and .. (-1 if it does not exist). */
static int dir_entries(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static int path_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static uint64_t file_size_on_disk(const char *p) {
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  return (uint64_t)st.st_size;
}

static uint8_t *aligned_buf(uint64_t size) {
  void *p = NULL;
  assert_int_equal(posix_memalign(&p, 4096, size ? size : 1), 0);
  return p;
}

/* Whether the file system under `dir` accepts O_DIRECT (what open() should
 * find out by itself). */
static int fs_takes_direct(const char *dir) {
  char p[512];
  snprintf(p, sizeof p, "%s/direct-probe", dir);
  int fd = open(p, O_WRONLY | O_CREAT | O_DIRECT, 0600);
  int ok = fd >= 0;
  if (ok) close(fd);
  unlink(p);
  return ok;
}

static hpl__spill *spill_new(uv_loop_t *loop, const char *dir, unsigned flags) {
  hpl__spill *sp = NULL;
  char detail[512];
  int rc = hpl__spill_open(loop, dir, flags, &sp, detail, sizeof detail);
  if (rc != 0) fprintf(stderr, "spill open: %s\n", detail);
  assert_int_equal(rc, HPL_OK);
  assert_non_null(sp);
  return sp;
}

/* Close, run the loop until the spill is gone, close the loop (fails if a
 * handle was left open). */
static void spill_end(uv_loop_t *loop, hpl__spill *sp) {
  hpl__spill_close(sp);
  uv_run(loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(loop), 0);
}

static uint64_t write_sync(uv_loop_t *loop, hpl__spill *sp, const void *buf, uint64_t len) {
  rec r = {0};
  uint64_t f = 0;
  assert_int_equal(hpl__spill_write(sp, buf, len, rec_cb, &r, &f, NULL), HPL_OK);
  assert_int_equal(r.calls, 0); /* never from inside the call */
  uv_run(loop, UV_RUN_DEFAULT);
  assert_int_equal(r.calls, 1);
  if (r.status != 0) fprintf(stderr, "write: %s\n", r.detail);
  assert_int_equal(r.status, HPL_OK);
  assert_string_equal(r.detail, "");
  assert_true(f != 0);
  return f;
}

static void read_sync(uv_loop_t *loop, hpl__spill *sp, uint64_t f, uint64_t off, void *buf,
                      uint64_t len) {
  rec r = {0};
  assert_int_equal(hpl__spill_read(sp, f, off, buf, len, rec_cb, &r, NULL), HPL_OK);
  assert_int_equal(r.calls, 0);
  uv_run(loop, UV_RUN_DEFAULT);
  assert_int_equal(r.calls, 1);
  if (r.status != 0) fprintf(stderr, "read: %s\n", r.detail);
  assert_int_equal(r.status, HPL_OK);
}

static void counters(hpl__spill *sp, hpl__spill_counters *c) { hpl__spill_counters_get(sp, c); }

/* A child's check: report the line through the exit status and stderr. */
#define CHILD_CHECK(cond)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "child: check failed at line %d: %s\n", __LINE__, #cond);             \
      _exit(1);                                                                             \
    }                                                                                       \
  } while (0)

static void wait_child(pid_t pid) {
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* ------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------- */

/* Sizes 0 .. 40 MiB from page-aligned buffers, byte-exact back; the split
 * between O_DIRECT and the page cache, and the chunking, are exact. */
static void test_roundtrip_sizes(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  int direct = fs_takes_direct(dir);
  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *sp = spill_new(&loop, dir, 0);
  assert_int_equal(hpl__spill_direct(sp), direct);
  assert_int_equal(strncmp(hpl__spill_dir(sp), dir, strlen(dir)), 0);
  assert_non_null(strstr(hpl__spill_dir(sp), "/hpl-spill-"));

  static const uint64_t sizes[] = {0, 1, 4095, 4096, 16 * MiB + 7, 40 * MiB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  uint64_t ids[N], total = 0;
  uint8_t *bufs[N];
  for (int i = 0; i < N; i++) {
    bufs[i] = aligned_buf(sizes[i]);
    hpl__fill_pattern(bufs[i], sizes[i], 100 + (uint64_t)i);
    ids[i] = write_sync(&loop, sp, bufs[i], sizes[i]);
    total += sizes[i];
    char path[512];
    assert_int_equal(hpl__spill_file_path(sp, ids[i], path, sizeof path), HPL_OK);
    assert_int_equal(file_size_on_disk(path), sizes[i]);
    uint64_t sz = 1;
    assert_int_equal(hpl__spill_file_size(sp, ids[i], &sz), HPL_OK);
    assert_int_equal(sz, sizes[i]);
  }
  hpl__spill_counters c;
  counters(sp, &c);
  assert_int_equal(c.writes, N);
  assert_int_equal(c.files_live, N);
  assert_int_equal(c.bytes_live, total);
  assert_int_equal(c.bytes_written, total);
  assert_int_equal(c.errors, 0);
  /* jobs: one each for 0..4096, two for 16 MiB + 7, three for 40 MiB */
  assert_int_equal(c.jobs, 4 + 2 + 3);
  assert_int_equal(c.job_bytes_max, HPL__SPILL_CHUNK);
  assert_true(c.write_busy_ns > 0 && c.write_io_ns > 0);
  uint64_t aligned = 4096 + 16 * MiB + 40 * MiB, unaligned = 1 + 4095 + 7;
  assert_int_equal(c.direct_bytes, direct ? aligned : 0);
  assert_int_equal(c.buffered_bytes, direct ? unaligned : aligned + unaligned);

  /* Read back whole, into page-aligned buffers and into odd addresses. */
  for (int i = 0; i < N; i++) {
    uint8_t *back = aligned_buf(sizes[i] + 1);
    memset(back, 0xee, sizes[i] + 1);
    read_sync(&loop, sp, ids[i], 0, back, sizes[i]);
    assert_memory_equal(back, bufs[i], sizes[i]);
    assert_int_equal(back[sizes[i]], 0xee); /* nothing past the end */
    memset(back, 0xee, sizes[i] + 1);
    read_sync(&loop, sp, ids[i], 0, back + 1, sizes[i]);
    assert_memory_equal(back + 1, bufs[i], sizes[i]);
    free(back);
  }
  hpl__spill_counters c2;
  counters(sp, &c2);
  assert_int_equal(c2.reads, 2 * N);
  assert_int_equal(c2.bytes_read, 2 * total);
  assert_int_equal(c2.direct_bytes - c.direct_bytes, direct ? aligned : 0);
  assert_true(c2.read_busy_ns > 0);
  assert_true(c2.job_bytes_max <= HPL__SPILL_CHUNK);

  for (int i = 0; i < N; i++) free(bufs[i]);
  spill_end(&loop, sp);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_free(dir);
}

/* Ranged reads at unaligned offsets and into unaligned buffers (a peer's
 * range stream), one that goes head + O_DIRECT + tail; bad ranges. */
static void test_ranges(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  int direct = fs_takes_direct(dir);
  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *sp = spill_new(&loop, dir, 0);
  const uint64_t size = 5 * MiB + 123;
  uint8_t *src = aligned_buf(size);
  hpl__fill_pattern(src, size, 7);
  uint64_t f = write_sync(&loop, sp, src, size);
  uint8_t *dst = aligned_buf(size + 8192);

  struct {
    uint64_t off, len;
    unsigned mis; /* buffer misalignment */
  } fixed[] = {{0, 1, 0},           {1, 4095, 3},          {4097, 1 * MiB, 0},
               {size - 1, 1, 5},    {size, 0, 0},          {4 * MiB, size - 4 * MiB, 17},
               {12388, 1 * MiB, 100}, {0, size, 4095}};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    uint8_t *b = dst + fixed[i].mis;
    memset(dst, 0, size + 8192);
    read_sync(&loop, sp, f, fixed[i].off, b, fixed[i].len);
    assert_memory_equal(b, src + fixed[i].off, fixed[i].len);
  }
  /* 4 MiB ranges at random offsets, as a peer's stream would ask */
  uint64_t x = 12345;
  for (int i = 0; i < 12; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t off = (x >> 20) % size;
    uint64_t len = size - off < 4 * MiB ? size - off : 4 * MiB;
    read_sync(&loop, sp, f, off, dst + (x & 63), len);
    assert_memory_equal(dst + (x & 63), src + off, len);
  }

  /* Buffer and offset congruent modulo 4096: the middle goes direct. */
  hpl__spill_counters c0, c1;
  counters(sp, &c0);
  uint64_t off = 3 * 4096 + 100;
  read_sync(&loop, sp, f, off, dst + 100, 1 * MiB + 50);
  assert_memory_equal(dst + 100, src + off, 1 * MiB + 50);
  counters(sp, &c1);
  assert_int_equal(c1.direct_bytes - c0.direct_bytes, direct ? 1 * MiB - 4096 : 0);
  assert_int_equal(c1.buffered_bytes - c0.buffered_bytes,
                   direct ? 4096 + 50 : 1 * MiB + 50);

  /* Bad ranges and ids: refused at once, no callback. */
  rec r = {0};
  assert_int_equal(hpl__spill_read(sp, f, size, dst, 1, rec_cb, &r, NULL), HPL_EINVAL);
  assert_non_null(strstr(hpl__spill_errdetail(sp), "beyond"));
  assert_int_equal(hpl__spill_read(sp, f, 1, dst, size, rec_cb, &r, NULL), HPL_EINVAL);
  assert_int_equal(hpl__spill_read(sp, f, UINT64_MAX, dst, 2, rec_cb, &r, NULL), HPL_EINVAL);
  assert_int_equal(hpl__spill_read(sp, f, 2, dst, UINT64_MAX - 1, rec_cb, &r, NULL), HPL_EINVAL);
  assert_int_equal(hpl__spill_read(sp, f, 0, NULL, 1, rec_cb, &r, NULL), HPL_EINVAL);
  assert_int_equal(hpl__spill_read(sp, f, 0, dst, 1, NULL, &r, NULL), HPL_EINVAL);
  assert_int_equal(hpl__spill_read(sp, f + 1000, 0, dst, 1, rec_cb, &r, NULL), HPL_ENOTFOUND);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(r.calls, 0);

  /* A file shorter on disk than the spill thinks: a read error naming it. */
  char path[512];
  assert_int_equal(hpl__spill_file_path(sp, f, path, sizeof path), HPL_OK);
  assert_int_equal(truncate(path, 1000), 0);
  assert_int_equal(hpl__spill_read(sp, f, 0, dst, 2 * MiB, rec_cb, &r, NULL), HPL_OK);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(r.calls, 1);
  assert_int_equal(r.status, HPL_ESYS);
  assert_int_equal(r.err, EIO);
  assert_non_null(strstr(r.detail, "spill read of 2.0 MiB from "));
  assert_non_null(strstr(r.detail, path));
  assert_non_null(strstr(r.detail, "ends early"));
  counters(sp, &c1);
  assert_int_equal(c1.errors, 1);

  free(src);
  free(dst);
  spill_end(&loop, sp);
  tmpdir_free(dir);
}

/* 20 writes at once, then 20 reads at once: all byte-exact, never more
 * than HPL__SPILL_JOBS jobs in the pool, files counted. */
static void test_many_concurrent(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *sp = spill_new(&loop, dir, 0);
  enum { N = 20 };
  uint8_t *src[N], *dst[N];
  uint64_t size[N], ids[N], reqs[N], total = 0;
  rec w[N], r[N];
  memset(w, 0, sizeof w);
  memset(r, 0, sizeof r);
  for (int i = 0; i < N; i++) {
    size[i] = (uint64_t)(i + 1) * 1 * MiB / 2 + (i % 3 ? 0 : (uint64_t)i * 77);
    src[i] = aligned_buf(size[i] + 64);
    dst[i] = aligned_buf(size[i] + 64);
    hpl__fill_pattern(src[i] + (i & 1), size[i], 1000 + (uint64_t)i);
    total += size[i];
  }
  for (int i = 0; i < N; i++)
    assert_int_equal(hpl__spill_write(sp, src[i] + (i & 1), size[i], rec_cb, &w[i], &ids[i],
                                      &reqs[i]),
                     HPL_OK);
  for (int i = 1; i < N; i++) {
    assert_true(ids[i] != ids[i - 1]);
    assert_true(reqs[i] != reqs[i - 1]);
  }
  /* not written yet: reads refused */
  assert_int_equal(hpl__spill_read(sp, ids[0], 0, dst[0], 1, rec_cb, &r[0], NULL), HPL_ESTATE);
  uv_run(&loop, UV_RUN_DEFAULT);
  for (int i = 0; i < N; i++) {
    assert_int_equal(w[i].calls, 1);
    assert_int_equal(w[i].status, HPL_OK);
  }
  hpl__spill_counters c;
  counters(sp, &c);
  assert_int_equal(c.files_live, N);
  assert_int_equal(c.bytes_live, total);
  assert_int_equal(c.jobs_max, HPL__SPILL_JOBS);
  assert_int_equal(dir_entries(hpl__spill_dir(sp)), N + 1); /* + the lock file */

  for (int i = 0; i < N; i++)
    assert_int_equal(hpl__spill_read(sp, ids[i], 0, dst[i] + 3, size[i], rec_cb, &r[i], NULL),
                     HPL_OK);
  uv_run(&loop, UV_RUN_DEFAULT);
  for (int i = 0; i < N; i++) {
    assert_int_equal(r[i].calls, 1);
    assert_int_equal(r[i].status, HPL_OK);
    assert_memory_equal(dst[i] + 3, src[i] + (i & 1), size[i]);
    free(src[i]);
    free(dst[i]);
  }
  counters(sp, &c);
  assert_int_equal(c.bytes_read, total);
  assert_int_equal(c.jobs_max, HPL__SPILL_JOBS);
  spill_end(&loop, sp);
  tmpdir_free(dir);
}

/* remove: the file leaves the disk, the id names nothing, reads in flight
 * are cancelled first. */
static void test_remove(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *sp = spill_new(&loop, dir, 0);
  uint64_t size = 20 * MiB;
  uint8_t *buf = aligned_buf(size);
  hpl__fill_pattern(buf, size, 3);
  uint64_t a = write_sync(&loop, sp, buf, size);
  uint64_t b = write_sync(&loop, sp, buf, 1000);
  char pa[512], pb[512];
  assert_int_equal(hpl__spill_file_path(sp, a, pa, sizeof pa), HPL_OK);
  assert_int_equal(hpl__spill_file_path(sp, b, pb, sizeof pb), HPL_OK);
  assert_true(path_exists(pa) && path_exists(pb));

  assert_int_equal(hpl__spill_remove(sp, b), HPL_OK);
  assert_int_equal(hpl__spill_remove(sp, b), HPL_ENOTFOUND);
  uint64_t sz;
  assert_int_equal(hpl__spill_file_size(sp, b, &sz), HPL_ENOTFOUND);
  rec r = {0};
  assert_int_equal(hpl__spill_read(sp, b, 0, buf, 1, rec_cb, &r, NULL), HPL_ENOTFOUND);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_false(path_exists(pb));
  assert_true(path_exists(pa));
  hpl__spill_counters c;
  counters(sp, &c);
  assert_int_equal(c.files_live, 1);
  assert_int_equal(c.bytes_live, size);

  /* Remove with two reads pending: both told ECANCELED, then unlinked. */
  uint8_t *dst = aligned_buf(size);
  rec r1 = {0}, r2 = {0};
  assert_int_equal(hpl__spill_read(sp, a, 0, dst, size, rec_cb, &r1, NULL), HPL_OK);
  assert_int_equal(hpl__spill_read(sp, a, 4 * MiB, dst, 4 * MiB, rec_cb, &r2, NULL), HPL_OK);
  assert_int_equal(hpl__spill_remove(sp, a), HPL_OK);
  assert_int_equal(r1.calls + r2.calls, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(r1.calls, 1);
  assert_int_equal(r2.calls, 1);
  assert_int_equal(r1.status, HPL_ECANCELED);
  assert_int_equal(r2.status, HPL_ECANCELED);
  assert_non_null(strstr(r1.detail, "cancelled"));
  assert_false(path_exists(pa));
  counters(sp, &c);
  assert_int_equal(c.files_live, 0);
  assert_int_equal(c.bytes_live, 0);
  assert_int_equal(c.cancelled, 2);
  assert_int_equal(dir_entries(hpl__spill_dir(sp)), 1); /* the lock */

  free(buf);
  free(dst);
  spill_end(&loop, sp);
  tmpdir_free(dir);
}

/* close: pending requests told ECANCELED ("closing"), every file and the
 * subdirectory removed, the loop left clean; files of others stay. */
static void test_close_removes_all(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  char other[512];
  snprintf(other, sizeof other, "%s/not-ours", dir);
  close(open(other, O_WRONLY | O_CREAT, 0600));
  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *sp = spill_new(&loop, dir, 0);
  char sub[512];
  snprintf(sub, sizeof sub, "%s", hpl__spill_dir(sp));
  uint64_t size = 40 * MiB;
  uint8_t *buf = aligned_buf(size);
  hpl__fill_pattern(buf, size, 9);
  for (int i = 0; i < 3; i++) write_sync(&loop, sp, buf, 1 * MiB + (uint64_t)i);
  assert_int_equal(dir_entries(sub), 4);
  rec w = {0}, r = {0};
  uint64_t f, f1 = 0;
  uint8_t *dst = aligned_buf(1 * MiB);
  assert_int_equal(hpl__spill_write(sp, buf, size, rec_cb, &w, &f, NULL), HPL_OK);
  f1 = f - 1; /* the third small file */
  assert_int_equal(hpl__spill_read(sp, f1, 0, dst, 1 * MiB, rec_cb, &r, NULL), HPL_OK);
  hpl__spill_close(sp);
  assert_int_equal(w.calls + r.calls, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(w.calls, 1);
  assert_int_equal(w.status, HPL_ECANCELED);
  assert_non_null(strstr(w.detail, "closing"));
  assert_int_equal(r.calls, 1);
  assert_int_equal(r.status, HPL_ECANCELED);
  assert_false(path_exists(sub));
  assert_true(path_exists(other));
  assert_int_equal(dir_entries(dir), 1);
  assert_int_equal(uv_loop_close(&loop), 0);

  /* Closing an idle spill, and closing before the loop ever ran. */
  uv_loop_init(&loop);
  sp = spill_new(&loop, dir, 0);
  snprintf(sub, sizeof sub, "%s", hpl__spill_dir(sp));
  assert_true(path_exists(sub));
  spill_end(&loop, sp);
  assert_false(path_exists(sub));
  hpl__spill_close(NULL);
  free(dst);
  free(buf);
  tmpdir_free(dir);
}

/* Directories that cannot be used: clear errors, errno kept. */
static void test_unwritable_dir(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *sp = (hpl__spill *)0x1;
  char detail[512], path[512];

  /* a component is a regular file */
  snprintf(path, sizeof path, "%s/file", dir);
  close(open(path, O_WRONLY | O_CREAT, 0600));
  snprintf(path, sizeof path, "%s/file/spill", dir);
  errno = 0;
  assert_int_equal(hpl__spill_open(&loop, path, 0, &sp, detail, sizeof detail), HPL_ESYS);
  assert_int_equal(errno, ENOTDIR);
  assert_null(sp);
  assert_non_null(strstr(detail, path));
  assert_non_null(strstr(detail, "Not a directory"));

  /* the path is a regular file */
  snprintf(path, sizeof path, "%s/file", dir);
  assert_int_equal(hpl__spill_open(&loop, path, 0, &sp, detail, sizeof detail), HPL_ESYS);
  assert_non_null(strstr(detail, "not a directory"));

  assert_int_equal(hpl__spill_open(&loop, "", 0, &sp, detail, sizeof detail), HPL_EINVAL);
  assert_non_null(strstr(detail, "empty"));
  assert_int_equal(hpl__spill_open(&loop, NULL, 0, &sp, detail, sizeof detail), HPL_EINVAL);
  assert_int_equal(hpl__spill_open(&loop, dir, 0x80, &sp, detail, sizeof detail), HPL_EINVAL);
  assert_int_equal(hpl__spill_open(&loop, dir, 0, NULL, NULL, 0), HPL_EINVAL);

  /* a directory without write permission, as a user that cannot override
   * it (root drops to nobody in a child) */
  snprintf(path, sizeof path, "%s/ro", dir);
  assert_int_equal(mkdir(path, 0555), 0);
  assert_int_equal(chmod(dir, 0755), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (geteuid() == 0) {
      CHILD_CHECK(setresgid(65534, 65534, 65534) == 0);
      CHILD_CHECK(setresuid(65534, 65534, 65534) == 0);
    }
    uv_loop_t l2;
    CHILD_CHECK(uv_loop_init(&l2) == 0);
    hpl__spill *s2 = NULL;
    char d2[512];
    errno = 0;
    int rc = hpl__spill_open(&l2, path, 0, &s2, d2, sizeof d2);
    fprintf(stderr, "child: %s\n", d2);
    CHILD_CHECK(rc == HPL_ESYS);
    CHILD_CHECK(errno == EACCES);
    CHILD_CHECK(s2 == NULL);
    CHILD_CHECK(strstr(d2, "is not writable") != NULL);
    CHILD_CHECK(strstr(d2, path) != NULL);
    CHILD_CHECK(strstr(d2, "Permission denied") != NULL);
    CHILD_CHECK(dir_entries(path) == 0); /* nothing left behind */
    _exit(0);
  }
  wait_child(pid);
  assert_int_equal(uv_loop_close(&loop), 0);
  tmpdir_free(dir);
}

/* The file system refuses more bytes (RLIMIT_FSIZE stands in for a full
 * disk: EFBIG instead of ENOSPC, the same path): status, errno, detail,
 * partial file gone, counters, and the spill still works afterwards. */
static void test_no_space(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {3 * MiB, 3 * MiB};
    CHILD_CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    uv_loop_t loop;
    CHILD_CHECK(uv_loop_init(&loop) == 0);
    hpl__spill *sp = NULL;
    char d[512];
    CHILD_CHECK(hpl__spill_open(&loop, dir, 0, &sp, d, sizeof d) == 0);
    uint64_t size = 20 * MiB;
    uint8_t *buf = aligned_buf(size);
    hpl__fill_pattern(buf, size, 5);
    rec r = {0};
    uint64_t f = 0;
    CHILD_CHECK(hpl__spill_write(sp, buf, size, rec_cb, &r, &f, NULL) == 0);
    char path[512];
    CHILD_CHECK(hpl__spill_file_path(sp, f, path, sizeof path) == 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    fprintf(stderr, "child: %s\n", r.detail);
    CHILD_CHECK(r.calls == 1);
    CHILD_CHECK(r.status == HPL_ESYS);
    CHILD_CHECK(r.err == EFBIG);
    CHILD_CHECK(strstr(r.detail, "spill write of 20.0 MiB to ") != NULL);
    CHILD_CHECK(strstr(r.detail, path) != NULL);
    CHILD_CHECK(strstr(r.detail, "failed at offset 3.0 MiB") != NULL);
    CHILD_CHECK(strstr(r.detail, strerror(EFBIG)) != NULL);
    CHILD_CHECK(!path_exists(path)); /* gone before the callback */
    CHILD_CHECK(dir_entries(hpl__spill_dir(sp)) == 1);
    uint64_t sz;
    CHILD_CHECK(hpl__spill_file_size(sp, f, &sz) == HPL_ENOTFOUND);
    hpl__spill_counters c;
    hpl__spill_counters_get(sp, &c);
    CHILD_CHECK(c.errors == 1);
    CHILD_CHECK(c.files_live == 0);
    CHILD_CHECK(c.bytes_live == 0);
    CHILD_CHECK(c.bytes_written == 3 * MiB);
    CHILD_CHECK(c.writes == 0);
    /* a write under the limit still works */
    rec r2 = {0};
    CHILD_CHECK(hpl__spill_write(sp, buf, 1 * MiB + 1, rec_cb, &r2, &f, NULL) == 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHILD_CHECK(r2.calls == 1 && r2.status == 0);
    hpl__spill_close(sp);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHILD_CHECK(uv_loop_close(&loop) == 0);
    CHILD_CHECK(dir_entries(dir) == 0);
    free(buf);
    _exit(0);
  }
  wait_child(pid);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_free(dir);
}

/* Cancel: the callback runs exactly once, later, with HPL_ECANCELED,
 * whatever the stage; a cancelled write leaves no file. */
static void test_cancel(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *sp = spill_new(&loop, dir, 0);
  uint64_t size = 40 * MiB;
  uint8_t *buf = aligned_buf(size);
  hpl__fill_pattern(buf, size, 11);
  char sub[512];
  snprintf(sub, sizeof sub, "%s", hpl__spill_dir(sp));

  /* 1. A write cancelled at once (its first job queued or running), and a
   * second one queued behind two others. */
  rec w[4];
  memset(w, 0, sizeof w);
  uint64_t f[4], q[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(hpl__spill_write(sp, buf, size, rec_cb, &w[i], &f[i], &q[i]), HPL_OK);
  assert_int_equal(hpl__spill_cancel(sp, q[0]), HPL_OK);
  assert_int_equal(hpl__spill_cancel(sp, q[3]), HPL_OK);
  assert_int_equal(hpl__spill_cancel(sp, q[3]), HPL_OK); /* again: no change */
  assert_int_equal(w[0].calls + w[3].calls, 0);
  uint64_t sz;
  assert_int_equal(hpl__spill_file_size(sp, f[0], &sz), HPL_OK); /* until its callback */
  uv_run(&loop, UV_RUN_DEFAULT);
  for (int i = 0; i < 4; i++) assert_int_equal(w[i].calls, 1);
  assert_int_equal(w[0].status, HPL_ECANCELED);
  assert_int_equal(w[3].status, HPL_ECANCELED);
  assert_int_equal(w[1].status, HPL_OK);
  assert_int_equal(w[2].status, HPL_OK);
  assert_non_null(strstr(w[0].detail, "spill write of 40.0 MiB to "));
  assert_non_null(strstr(w[0].detail, "cancelled"));
  assert_null(strstr(w[0].detail, "closing"));
  assert_int_equal(hpl__spill_file_size(sp, f[0], &sz), HPL_ENOTFOUND);
  assert_int_equal(hpl__spill_file_size(sp, f[3], &sz), HPL_ENOTFOUND);
  assert_int_equal(hpl__spill_cancel(sp, q[0]), HPL_ENOTFOUND); /* callback has run */
  assert_int_equal(hpl__spill_cancel(sp, 999999), HPL_ENOTFOUND);
  assert_int_equal(dir_entries(sub), 3); /* f[1], f[2], lock */
  hpl__spill_counters c;
  counters(sp, &c);
  assert_int_equal(c.files_live, 2);
  assert_int_equal(c.bytes_live, 2 * size);
  assert_int_equal(c.cancelled, 2);

  /* 2. A write whose bytes are all on disk but whose callback has not run
   * yet (libuv runs the drain in the idle phase of the next iteration). */
  rec w2 = {0};
  uint64_t f2, q2;
  assert_int_equal(hpl__spill_write(sp, buf, 4096, rec_cb, &w2, &f2, &q2), HPL_OK);
  uint64_t jobs0 = c.jobs;
  for (int i = 0; i < 1000; i++) {
    counters(sp, &c);
    if (c.jobs > jobs0 || w2.calls) break;
    uv_run(&loop, UV_RUN_ONCE);
  }
  assert_int_equal(c.jobs, jobs0 + 1);
  assert_int_equal(w2.calls, 0);
  char p2[512];
  assert_int_equal(hpl__spill_file_path(sp, f2, p2, sizeof p2), HPL_OK);
  assert_true(path_exists(p2));
  assert_int_equal(hpl__spill_cancel(sp, q2), HPL_OK);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(w2.calls, 1);
  assert_int_equal(w2.status, HPL_ECANCELED);
  assert_false(path_exists(p2));

  /* 3. Reads: cancelled while queued or running; the buffer is no longer
   * written once the callback ran (a read that finished would have filled
   * it completely). */
  uint8_t *dst = aligned_buf(size);
  rec r[3];
  memset(r, 0, sizeof r);
  uint64_t rq[3];
  for (int i = 0; i < 3; i++)
    assert_int_equal(hpl__spill_read(sp, f[1], 0, dst, size, rec_cb, &r[i], &rq[i]), HPL_OK);
  for (int i = 0; i < 3; i++) assert_int_equal(hpl__spill_cancel(sp, rq[i]), HPL_OK);
  uv_run(&loop, UV_RUN_DEFAULT);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(r[i].calls, 1);
    assert_int_equal(r[i].status, HPL_ECANCELED);
    assert_int_equal(r[i].err, 0);
  }
  counters(sp, &c);
  assert_true(c.bytes_read < 3 * size); /* they stopped early */
  assert_int_equal(c.reads, 0);
  /* the file is intact and readable */
  read_sync(&loop, sp, f[1], 0, dst, size);
  assert_memory_equal(dst, buf, size);

  free(dst);
  free(buf);
  spill_end(&loop, sp);
  tmpdir_free(dir);
}

/* /dev/shm (tmpfs): open() detects whether O_DIRECT is taken (tmpfs took
 * it only from Linux 6.6 on) and the bytes come back either way; with
 * HPL__SPILL_BUFFERED nothing goes direct. */
static void test_tmpfs_and_buffered(void **state) {
  (void)state;
  char *dirs[2] = {tmpdir_new("/dev/shm"), tmpdir_new("/tmp")};
  for (int k = 0; k < 3; k++) {
    const char *dir = dirs[k == 0 ? 0 : 1];
    unsigned flags = k == 2 ? HPL__SPILL_BUFFERED : 0;
    int direct = k == 2 ? 0 : fs_takes_direct(dir);
    if (k == 0)
      fprintf(stderr, "/dev/shm %s O_DIRECT on this kernel\n", direct ? "accepts" : "refuses");
    uv_loop_t loop;
    uv_loop_init(&loop);
    hpl__spill *sp = spill_new(&loop, dir, flags);
    assert_int_equal(hpl__spill_direct(sp), direct);
    uint64_t size = 16 * MiB + 7;
    uint8_t *src = aligned_buf(size), *dst = aligned_buf(size);
    hpl__fill_pattern(src, size, 77 + (uint64_t)k);
    uint64_t f = write_sync(&loop, sp, src, size);
    read_sync(&loop, sp, f, 0, dst, size);
    assert_memory_equal(dst, src, size);
    hpl__spill_counters c;
    counters(sp, &c);
    assert_int_equal(c.direct_bytes, direct ? 2 * 16 * MiB : 0);
    assert_int_equal(c.buffered_bytes, direct ? 2 * 7 : 2 * size);
    free(src);
    free(dst);
    spill_end(&loop, sp);
  }
  tmpdir_free(dirs[0]);
  tmpdir_free(dirs[1]);
}

/* Set a path's modification time `ago` seconds back. */
static void age(const char *p, int ago) {
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= ago;
  ts[1] = ts[0];
  assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
}

/* open() removes dead stores' subdirectories and nothing else: not a live
 * spill's, not a young one's, not other files. */
static void test_stale_cleanup(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  char p[512];
  static const char *dead[] = {"hpl-spill-1-dead", "hpl-spill-3-nolock"};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, dead[i]);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/%s/0000000000000001", dir, dead[i]);
    close(open(p, O_WRONLY | O_CREAT, 0600));
    if (i == 0) {
      snprintf(p, sizeof p, "%s/%s/lock", dir, dead[i]);
      close(open(p, O_WRONLY | O_CREAT, 0600));
      age(p, 3600);
    }
    snprintf(p, sizeof p, "%s/%s", dir, dead[i]);
    age(p, 3600);
  }
  snprintf(p, sizeof p, "%s/hpl-spill-2-young", dir); /* just being created */
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(p, sizeof p, "%s/hpl-spill-2-young/lock", dir);
  close(open(p, O_WRONLY | O_CREAT, 0600));
  snprintf(p, sizeof p, "%s/other-old", dir); /* not ours at all */
  assert_int_equal(mkdir(p, 0700), 0);
  age(p, 3600);

  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *a = spill_new(&loop, dir, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  hpl__spill_counters c;
  counters(a, &c);
  assert_int_equal(c.stale_removed, 2);
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, dead[i]);
    assert_false(path_exists(p));
  }
  /* Age A's own subdirectory and lock: still live (locked), so B keeps it. */
  char sub_a[512];
  snprintf(sub_a, sizeof sub_a, "%s", hpl__spill_dir(a));
  snprintf(p, sizeof p, "%s/lock", sub_a);
  age(p, 3600);
  age(sub_a, 3600);
  hpl__spill *b = spill_new(&loop, dir, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  counters(b, &c);
  assert_int_equal(c.stale_removed, 0);
  assert_true(path_exists(sub_a));
  snprintf(p, sizeof p, "%s/hpl-spill-2-young/lock", dir);
  assert_true(path_exists(p));
  snprintf(p, sizeof p, "%s/other-old", dir);
  assert_true(path_exists(p));
  assert_int_equal(dir_entries(dir), 4); /* a, b, young, other-old */
  hpl__spill_close(a);
  hpl__spill_close(b);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
  assert_int_equal(dir_entries(dir), 2);
  tmpdir_free(dir);
}

/* Callbacks may call the module: a write from a write's callback, a
 * cancel of a still pending request, close. */
typedef struct chain {
  hpl__spill *sp;
  const uint8_t *buf;
  rec first, second, victim;
  uint64_t victim_req, second_file;
  int close_in_cb;
} chain;

static void chain_second_cb(void *arg, int status, int e, const char *detail) {
  chain *ch = arg;
  rec_cb(&ch->second, status, e, detail);
  if (ch->close_in_cb) hpl__spill_close(ch->sp);
}

static void chain_first_cb(void *arg, int status, int e, const char *detail) {
  chain *ch = arg;
  rec_cb(&ch->first, status, e, detail);
  assert_int_equal(hpl__spill_cancel(ch->sp, ch->victim_req), HPL_OK);
  assert_int_equal(hpl__spill_write(ch->sp, ch->buf, 5000, chain_second_cb, ch,
                                    &ch->second_file, NULL),
                   HPL_OK);
}

static void test_reentrant_callbacks(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  uv_loop_t loop;
  uv_loop_init(&loop);
  chain ch;
  memset(&ch, 0, sizeof ch);
  ch.sp = spill_new(&loop, dir, 0);
  uint8_t *buf = aligned_buf(40 * MiB);
  hpl__fill_pattern(buf, 40 * MiB, 1);
  ch.buf = buf;
  uint64_t f1, f2;
  assert_int_equal(hpl__spill_write(ch.sp, buf, 1000, chain_first_cb, &ch, &f1, NULL), HPL_OK);
  assert_int_equal(
      hpl__spill_write(ch.sp, buf, 40 * MiB, rec_cb, &ch.victim, &f2, &ch.victim_req), HPL_OK);
  ch.close_in_cb = 1;
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(ch.first.calls, 1);
  assert_int_equal(ch.first.status, HPL_OK);
  assert_int_equal(ch.victim.calls, 1);
  assert_int_equal(ch.victim.status, HPL_ECANCELED);
  assert_int_equal(ch.second.calls, 1);
  assert_int_equal(ch.second.status, HPL_OK);
  /* closed from the second callback: everything gone, loop clean */
  assert_int_equal(uv_loop_close(&loop), 0);
  assert_int_equal(dir_entries(dir), 0);
  free(buf);
  tmpdir_free(dir);
}

/* Argument checks of write: refused at once with a detail, no callback. */
static void test_write_args(void **state) {
  (void)state;
  char *dir = tmpdir_new("/tmp");
  uv_loop_t loop;
  uv_loop_init(&loop);
  hpl__spill *sp = spill_new(&loop, dir, 0);
  rec r = {0};
  uint64_t f = 0;
  uint8_t b[16] = {0};
  assert_int_equal(hpl__spill_write(sp, NULL, 1, rec_cb, &r, &f, NULL), HPL_EINVAL);
  assert_true(strlen(hpl__spill_errdetail(sp)) > 0);
  assert_int_equal(hpl__spill_write(sp, b, 1, NULL, &r, &f, NULL), HPL_EINVAL);
  assert_int_equal(hpl__spill_write(sp, b, 1, rec_cb, &r, NULL, NULL), HPL_EINVAL);
  assert_int_equal(hpl__spill_write(sp, b, HPL__SPILL_MAX_SIZE + 1, rec_cb, &r, &f, NULL),
                   HPL_EINVAL);
  assert_non_null(strstr(hpl__spill_errdetail(sp), "larger"));
  assert_int_equal(hpl__spill_write(NULL, b, 1, rec_cb, &r, &f, NULL), HPL_EINVAL);
  assert_int_equal(f, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(r.calls, 0);
  hpl__spill_counters c;
  counters(sp, &c);
  assert_int_equal(c.files_live, 0);
  assert_int_equal(c.jobs, 0);
  spill_end(&loop, sp);
  tmpdir_free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_space),          cmocka_unit_test(test_unwritable_dir),
      cmocka_unit_test(test_roundtrip_sizes),   cmocka_unit_test(test_ranges),
      cmocka_unit_test(test_many_concurrent),   cmocka_unit_test(test_remove),
      cmocka_unit_test(test_close_removes_all), cmocka_unit_test(test_cancel),
      cmocka_unit_test(test_tmpfs_and_buffered), cmocka_unit_test(test_stale_cleanup),
      cmocka_unit_test(test_reentrant_callbacks), cmocka_unit_test(test_write_args),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
