/* test_pool.c - unit tests of the store's shared-memory pool (store/pool.c).
 *
 * Figures that are part of the store's contract (how many 64 MiB objects fit
 * in 1 GiB, the usable fraction with 1 MiB objects) are printed as well as
 * asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hoplite.h"
#include "pool.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* Deterministic pseudo-random numbers (xorshift64*). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

/* A size between lo and hi, log-uniform so small and big sizes both occur. */
static uint64_t rng_size(uint64_t lo, uint64_t hi) {
  unsigned lg_lo = 63u - (unsigned)__builtin_clzll(lo);
  unsigned lg_hi = 63u - (unsigned)__builtin_clzll(hi);
  unsigned lg = lg_lo + (unsigned)(rng() % (lg_hi - lg_lo + 1));
  uint64_t s = (1ull << lg) + rng() % (1ull << lg);
  if (s < lo) s = lo;
  if (s > hi) s = hi;
  return s;
}

static hpl__pool *pool_new(uint64_t capacity) {
  hpl__pool *p = NULL;
  assert_int_equal(hpl__pool_create(capacity, "test-pool", 0, &p), HPL_OK);
  assert_non_null(p);
  return p;
}

/* ptr is aligned and [ptr, ptr+size) lies inside the mapping. */
static void assert_in_pool(hpl__pool *p, const void *ptr, uint64_t size) {
  const uint8_t *b = hpl__pool_base(p);
  const uint8_t *q = ptr;
  assert_non_null(q);
  assert_int_equal((uintptr_t)q % HPL__POOL_ALIGN, 0);
  assert_true(q >= b);
  assert_true((uint64_t)(q - b) + size <= hpl__pool_capacity(p));
}

/* Allocate `size`-byte objects until the pool refuses; returns how many fit
 * and stores them in objs (at most max). */
static size_t fill(hpl__pool *p, uint64_t size, void **objs, size_t max) {
  size_t n = 0;
  while (n < max) {
    void *o = hpl__pool_alloc(p, size);
    if (!o) break;
    assert_in_pool(p, o, size);
    objs[n++] = o;
  }
  return n;
}

/* ------------------------------------------------------------------------ */

/* Capacity rounding, the 16 MiB minimum and argument errors. */
static void test_create_capacity(void **state) {
  (void)state;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  hpl__pool *p = pool_new(0);
  assert_int_equal(hpl__pool_capacity(p), 16 * MiB);
  assert_true(hpl__pool_chunk_fd(p, 0, NULL) >= 0);
  assert_int_equal(hpl__pool_nchunks(p), 16 * MiB / hpl__pool_chunk(p));
  assert_non_null(hpl__pool_base(p));
  hpl__pool_destroy(p);

  p = pool_new(16 * MiB + 1);
  assert_int_equal(hpl__pool_capacity(p), 16 * MiB + page);
  hpl__pool_destroy(p);

  p = pool_new(100 * MiB + 3);
  assert_int_equal(hpl__pool_capacity(p), 100 * MiB + page);
  hpl__pool_destroy(p);

  /* No name, or a name longer than memfd allows: still a pool. */
  assert_int_equal(hpl__pool_create(16 * MiB, NULL, 0, &p), HPL_OK);
  hpl__pool_destroy(p);
  char longname[400];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  assert_int_equal(hpl__pool_create(16 * MiB, longname, 0, &p), HPL_OK);
  hpl__pool_destroy(p);

  assert_int_equal(hpl__pool_create(16 * MiB, "x", 0, NULL), HPL_EINVAL);
  p = (hpl__pool *)0x1;
  assert_int_equal(hpl__pool_create(1ull << 60, "x", 0, &p), HPL_EINVAL);
  assert_ptr_equal(p, (hpl__pool *)0x1); /* out untouched on failure */
  hpl__pool_destroy(NULL);
}

/* Size 0 gives the base, which must not be freed for real; free(NULL) and
 * frees of foreign pointers are ignored; oversize requests fail cleanly. */
static void test_size_zero_and_null(void **state) {
  (void)state;
  hpl__pool *p = pool_new(16 * MiB);
  uint64_t used0 = hpl__pool_used(p);
  void *z1 = hpl__pool_alloc(p, 0);
  void *z2 = hpl__pool_alloc(p, 0);
  assert_ptr_equal(z1, hpl__pool_base(p));
  assert_ptr_equal(z2, hpl__pool_base(p));
  assert_int_equal(hpl__pool_allocated(p), 0);
  hpl__pool_free(p, z1);
  hpl__pool_free(p, z2);
  hpl__pool_free(p, NULL);
  int local;
  hpl__pool_free(p, &local); /* not ours: ignored */
  assert_int_equal(hpl__pool_used(p), used0);
  assert_int_equal(hpl__pool_allocated(p), 0);

  /* A real allocation never sits at the size-0 address. */
  void *a = hpl__pool_alloc(p, 1);
  assert_in_pool(p, a, 1);
  assert_ptr_not_equal(a, hpl__pool_base(p));
  assert_true(hpl__pool_allocated(p) >= 1);
  hpl__pool_free(p, a);
  assert_int_equal(hpl__pool_allocated(p), 0);

  assert_null(hpl__pool_alloc(p, 17 * MiB));
  assert_null(hpl__pool_alloc(p, UINT64_MAX));
  assert_null(hpl__pool_alloc(NULL, 64));
  hpl__pool_free(NULL, a);
  hpl__pool_destroy(p);
}

/* Assorted sizes from 1 B to 70 MiB: aligned and inside the mapping. */
static void test_alignment(void **state) {
  (void)state;
  hpl__pool *p = pool_new(1 * GiB);
  enum { N = 64 };
  void *live[N] = {0};
  static const uint64_t fixed[] = {
      1,       2,           3,       63,          64,       65,
      100,     4095,        4096,    4097,        16 * KiB, 16 * KiB + 1,
      1 * MiB, 4 * MiB - 1, 4 * MiB, 8 * MiB + 7, 64 * MiB, 70 * MiB};
  size_t nfixed = sizeof fixed / sizeof fixed[0];
  unsigned checked = 0;
  for (unsigned round = 0; round < 1500; round++) {
    unsigned k = (unsigned)(rng() % N);
    if (live[k]) {
      hpl__pool_free(p, live[k]);
      live[k] = NULL;
    }
    uint64_t s = round < nfixed ? fixed[round] : rng_size(1, 70 * MiB);
    void *o = hpl__pool_alloc(p, s);
    if (!o) { /* pool momentarily full: make room and insist */
      for (unsigned j = 0; j < N; j++) {
        hpl__pool_free(p, live[j]);
        live[j] = NULL;
      }
      o = hpl__pool_alloc(p, s);
      assert_non_null(o);
    }
    assert_in_pool(p, o, s);
    ((uint8_t *)o)[0] = 1;
    ((uint8_t *)o)[s - 1] = 2;
    live[k] = o;
    checked++;
  }
  assert_int_equal(checked, 1500);
  for (unsigned j = 0; j < N; j++) hpl__pool_free(p, live[j]);
  assert_int_equal(hpl__pool_allocated(p), 0);
  hpl__pool_destroy(p);
}

/* Fill an object with a pattern derived from its tag. */
static void pattern_fill(uint8_t *o, uint64_t size, uint32_t tag) {
  for (uint64_t i = 0; i < size; i += 8) {
    uint64_t v = ((uint64_t)tag << 32) ^ i;
    memcpy(o + i, &v, size - i < 8 ? size - i : 8);
  }
}

static int pattern_ok(const uint8_t *o, uint64_t size, uint32_t tag) {
  for (uint64_t i = 0; i < size; i += 8) {
    uint64_t v = ((uint64_t)tag << 32) ^ i;
    if (memcmp(o + i, &v, size - i < 8 ? size - i : 8) != 0) return 0;
  }
  return 1;
}

typedef struct live_obj {
  uint8_t *ptr;
  uint64_t size;
  uint32_t tag;
} live_obj;

static int live_cmp(const void *a, const void *b) {
  const live_obj *x = a, *y = b;
  return x->ptr < y->ptr ? -1 : x->ptr > y->ptr;
}

/* Live allocations never overlap: each holds its own pattern through a long
 * mix of allocations and frees, and sorted by address they are disjoint. */
static void test_no_overlap(void **state) {
  (void)state;
  hpl__pool *p = pool_new(256 * MiB);
  enum { N = 400 };
  live_obj objs[N];
  memset(objs, 0, sizeof objs);
  uint32_t next_tag = 1;
  for (unsigned round = 0; round < 4000; round++) {
    unsigned k = (unsigned)(rng() % N);
    if (objs[k].ptr) {
      assert_true(pattern_ok(objs[k].ptr, objs[k].size, objs[k].tag));
      hpl__pool_free(p, objs[k].ptr);
      objs[k].ptr = NULL;
    }
    uint64_t s = rng_size(1, 2 * MiB);
    uint8_t *o = hpl__pool_alloc(p, s);
    assert_non_null(o); /* at most 400 x 2 MiB live in 256 MiB: fits */
    assert_in_pool(p, o, s);
    objs[k] = (live_obj){o, s, next_tag++};
    pattern_fill(o, s, objs[k].tag);
  }
  unsigned n = 0;
  for (unsigned j = 0; j < N; j++) {
    if (!objs[j].ptr) continue;
    assert_true(pattern_ok(objs[j].ptr, objs[j].size, objs[j].tag));
    objs[n++] = objs[j];
  }
  qsort(objs, n, sizeof objs[0], live_cmp);
  for (unsigned j = 1; j < n; j++) assert_true(objs[j - 1].ptr + objs[j - 1].size <= objs[j].ptr);
  for (unsigned j = 0; j < n; j++) hpl__pool_free(p, objs[j].ptr);
  assert_int_equal(hpl__pool_allocated(p), 0);
  hpl__pool_destroy(p);
}

/* 64 MiB objects allocated and freed 100 times in a 256 MiB pool, alone and
 * with up to three live at once: never fails, and the pool's usage returns to
 * where it started. */
static void test_reuse_64m(void **state) {
  (void)state;
  hpl__pool *p = pool_new(256 * MiB);
  uint64_t used0 = hpl__pool_used(p);
  for (int i = 0; i < 100; i++) {
    void *o = hpl__pool_alloc(p, 64 * MiB);
    assert_in_pool(p, o, 64 * MiB);
    memset(o, i, 4096);
    hpl__pool_free(p, o);
  }
  assert_int_equal(hpl__pool_used(p), used0);

  void *ring[3] = {0};
  for (int i = 0; i < 100; i++) {
    hpl__pool_free(p, ring[i % 3]);
    ring[i % 3] = hpl__pool_alloc(p, 64 * MiB);
    assert_in_pool(p, ring[i % 3], 64 * MiB);
  }
  for (int i = 0; i < 3; i++) hpl__pool_free(p, ring[i]);
  printf("    reuse: used at start %llu B, after 200 x 64 MiB alloc/free %llu B\n",
         (unsigned long long)used0, (unsigned long long)hpl__pool_used(p));
  assert_int_equal(hpl__pool_used(p), used0);
  assert_int_equal(hpl__pool_allocated(p), 0);
  hpl__pool_destroy(p);
}

/* 64 MiB objects in 1 GiB until the pool is full: at least 15 of the 16
 * possible fit, the next request fails with NULL, and freeing one makes
 * room again. */
static void test_exhaustion_1g(void **state) {
  (void)state;
  hpl__pool *p = pool_new(1 * GiB);
  uint64_t used0 = hpl__pool_used(p);
  void *objs[32];
  size_t n = fill(p, 64 * MiB, objs, 32);
  printf(
      "    exhaustion: %zu x 64 MiB objects live in a 1 GiB pool (used %llu B, "
      "largest free %llu B)\n",
      n, (unsigned long long)hpl__pool_used(p), (unsigned long long)hpl__pool_largest_free(p));
  assert_true(n >= 15);
  assert_true(n <= 16);
  assert_true(hpl__pool_largest_free(p) < 64 * MiB);
  assert_null(hpl__pool_alloc(p, 64 * MiB));
  assert_null(hpl__pool_alloc(p, 64 * MiB));
  assert_true(hpl__pool_allocated(p) >= n * 64 * MiB);

  hpl__pool_free(p, objs[n / 2]);
  objs[n / 2] = hpl__pool_alloc(p, 64 * MiB);
  assert_in_pool(p, objs[n / 2], 64 * MiB);
  assert_null(hpl__pool_alloc(p, 64 * MiB));

  /* Smaller objects still fit in what is left. */
  void *small = hpl__pool_alloc(p, 1 * MiB);
  assert_in_pool(p, small, 1 * MiB);
  hpl__pool_free(p, small);

  for (size_t i = 0; i < n; i++) hpl__pool_free(p, objs[i]);
  assert_int_equal(hpl__pool_used(p), used0);
  assert_int_equal(hpl__pool_allocated(p), 0);
  hpl__pool_destroy(p);
}

/* Allocate many small objects (4 B .. 256 KiB) up to about `total` bytes,
 * free every other one, allocate more, then free everything. */
static void fragment(hpl__pool *p, uint64_t total) {
  enum { N = 12000 };
  static void *objs[N];
  size_t n = 0;
  uint64_t sum = 0;
  while (n < N && sum < total) {
    uint64_t s = rng_size(4, 256 * KiB);
    void *o = hpl__pool_alloc(p, s);
    assert_in_pool(p, o, s);
    objs[n++] = o;
    sum += s;
  }
  for (size_t i = 0; i < n; i += 2) {
    hpl__pool_free(p, objs[i]);
    objs[i] = NULL;
  }
  for (size_t i = 0; i < n; i += 2) {
    objs[i] = hpl__pool_alloc(p, rng_size(4, 128 * KiB));
    assert_non_null(objs[i]);
  }
  /* While fragmented, the largest-free estimate is a size that fits. */
  uint64_t lf = hpl__pool_largest_free(p);
  assert_true(lf > 0);
  void *big = hpl__pool_alloc(p, lf);
  assert_in_pool(p, big, lf);
  hpl__pool_free(p, big);
  for (size_t i = 0; i < n; i++) hpl__pool_free(p, objs[i]);
}

/* A 500 MiB object in a 1 GiB pool, ten times, before and after the pool
 * was fragmented by small objects (all freed again). */
static void test_big_500m(void **state) {
  (void)state;
  hpl__pool *p = pool_new(1 * GiB);
  uint64_t used0 = hpl__pool_used(p);
  for (int i = 0; i < 10; i++) {
    void *o = hpl__pool_alloc(p, 500 * MiB);
    assert_in_pool(p, o, 500 * MiB);
    hpl__pool_free(p, o);
  }
  fragment(p, 400 * MiB);
  assert_int_equal(hpl__pool_allocated(p), 0);
  for (int i = 0; i < 10; i++) {
    void *o = hpl__pool_alloc(p, 500 * MiB);
    assert_in_pool(p, o, 500 * MiB);
    /* and something else beside it */
    void *o2 = hpl__pool_alloc(p, 300 * MiB);
    assert_in_pool(p, o2, 300 * MiB);
    hpl__pool_free(p, o);
    hpl__pool_free(p, o2);
  }
  printf("    500 MiB: used at start %llu B, after fragmentation and frees %llu B\n",
         (unsigned long long)used0, (unsigned long long)hpl__pool_used(p));
  /* Only jemalloc metadata may have grown. */
  assert_true(hpl__pool_used(p) <= used0 + 8 * MiB);
  hpl__pool_destroy(p);
}

/* How much of a 1 GiB pool can be live at once in 1 MiB objects. */
static void test_usable_fraction_1m(void **state) {
  (void)state;
  hpl__pool *p = pool_new(1 * GiB);
  static void *objs[1100];
  size_t n = fill(p, 1 * MiB, objs, 1100);
  double frac = (double)(n * MiB) / (double)hpl__pool_capacity(p);
  printf("    usable fraction: %zu x 1 MiB live in a 1 GiB pool = %.2f%% (used %llu B)\n", n,
         100.0 * frac, (unsigned long long)hpl__pool_used(p));
  assert_true(n < 1024);
  assert_true(frac >= 0.90);
  for (size_t i = 0; i < n; i++) hpl__pool_free(p, objs[i]);
  /* Same again, after the pool is back to empty. */
  size_t n2 = fill(p, 1 * MiB, objs, 1100);
  assert_int_equal(n2, n);
  for (size_t i = 0; i < n2; i++) hpl__pool_free(p, objs[i]);
  hpl__pool_destroy(p);
}

/* The chunk memfds really are the pool: a second mapping of each one (read
 * only) sees the writes made through the pool. And only the store's own
 * mapping can write them: the kernel refuses a writable mapping, pwrite,
 * resizing and mprotect to write, also through a descriptor opened again
 * read-write through /proc/self/fd (what a client of the same user could
 * do). Also the one prefaulted pool of the suite. */
static void test_shared_memfd(void **state) {
  (void)state;
  hpl__pool *p = NULL;
  assert_int_equal(hpl__pool_create(16 * MiB, "test-shared", 1, &p), HPL_OK);
  uint64_t cap = hpl__pool_capacity(p), chunk = hpl__pool_chunk(p);
  size_t n = hpl__pool_nchunks(p);
  assert_true(n >= 2 && chunk * n >= cap);
  /* a read-only view of the whole pool, chunk by chunk, as clients map it */
  uint8_t *view = mmap(NULL, cap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(view != MAP_FAILED);
  for (size_t k = 0; k < n; k++) {
    uint32_t gen = 0;
    int fd = hpl__pool_chunk_fd(p, k, &gen);
    assert_true(fd >= 0 && gen >= 1);
    uint64_t len = cap - k * chunk < chunk ? cap - k * chunk : chunk;
    assert_true(mmap(view + k * chunk, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) !=
                MAP_FAILED);
    /* nobody else can write it */
    errno = 0;
    assert_true(mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
    assert_int_equal(errno, EPERM);
    assert_true(pwrite(fd, "x", 1, 0) < 0);
    assert_true(ftruncate(fd, 0) != 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rw = open(path, O_RDWR);
    if (rw >= 0) {
      assert_true(mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) == MAP_FAILED);
      assert_true(pwrite(rw, "x", 1, 0) < 0);
      assert_true(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) != 0);
      close(rw);
    }
  }
  assert_true(mprotect(view, chunk, PROT_READ | PROT_WRITE) != 0);

  uint8_t *o = hpl__pool_alloc(p, 3 * MiB); /* spans chunks (1 MiB each here) */
  assert_in_pool(p, o, 3 * MiB);
  uint64_t off = (uint64_t)(o - hpl__pool_base(p));
  pattern_fill(o, 3 * MiB, 77);
  assert_true(pattern_ok(view + off, 3 * MiB, 77));
  uint64_t foff = 0, avail = 0;
  int fd = hpl__pool_fd_at(p, off, &foff, &avail);
  assert_true(fd >= 0 && foff == off % chunk && avail == chunk - foff);
  uint8_t byte = 0;
  assert_int_equal(pread(fd, &byte, 1, (off_t)foff), 1);
  assert_int_equal(byte, o[0]);

  uint8_t *s = hpl__pool_alloc(p, 24);
  assert_in_pool(p, s, 24);
  memcpy(s, "hello, shared memory!!!", 24);
  assert_memory_equal(view + (s - hpl__pool_base(p)), "hello, shared memory!!!", 24);

  hpl__pool_free(p, o);
  hpl__pool_free(p, s);
  munmap(view, cap);
  hpl__pool_destroy(p);
}

/* Counters: allocated follows usable sizes, used covers it, both return. */
static void test_accounting(void **state) {
  (void)state;
  hpl__pool *p = pool_new(64 * MiB);
  uint64_t used0 = hpl__pool_used(p);
  uint64_t lf0 = hpl__pool_largest_free(p);
  assert_true(used0 > 0); /* the arena's metadata lives in the pool */
  assert_true(used0 < 4 * MiB);
  assert_true(lf0 >= 32 * MiB);
  assert_true(lf0 <= hpl__pool_capacity(p) - used0);

  void *a = hpl__pool_alloc(p, 100);
  void *b = hpl__pool_alloc(p, 10 * MiB);
  void *c = hpl__pool_alloc(p, 10 * MiB + 1);
  assert_in_pool(p, a, 100);
  assert_in_pool(p, b, 10 * MiB);
  assert_in_pool(p, c, 10 * MiB + 1);
  uint64_t al = hpl__pool_allocated(p);
  assert_true(al >= 20 * MiB + 101);
  assert_true(al <= 20 * MiB + 101 + 3 * MiB); /* size-class rounding */
  assert_true(hpl__pool_used(p) >= used0 + 20 * MiB);
  assert_true(hpl__pool_largest_free(p) < lf0);

  hpl__pool_free(p, b);
  assert_true(hpl__pool_allocated(p) < al - 9 * MiB);
  hpl__pool_free(p, a);
  hpl__pool_free(p, c);
  assert_int_equal(hpl__pool_allocated(p), 0);
  assert_int_equal(hpl__pool_used(p), used0);
  assert_int_equal(hpl__pool_largest_free(p), lf0);
  hpl__pool_destroy(p);
}

/* Many pools at once, each allocating only inside itself, then many
 * create/destroy cycles (arena indexes are recycled). */
static void test_many_pools(void **state) {
  (void)state;
  enum { LIVE = 40, CYCLES = 300 };
  hpl__pool *pools[LIVE];
  void *objs[LIVE];
  for (int i = 0; i < LIVE; i++) {
    pools[i] = pool_new(16 * MiB);
    objs[i] = hpl__pool_alloc(pools[i], (uint64_t)(i + 1) * 4096);
    assert_in_pool(pools[i], objs[i], (uint64_t)(i + 1) * 4096);
    memset(objs[i], i, (size_t)(i + 1) * 4096);
  }
  for (int i = 0; i < LIVE; i++) {
    const uint8_t *o = objs[i];
    assert_int_equal(o[0], (uint8_t)i);
    assert_int_equal(o[(size_t)(i + 1) * 4096 - 1], (uint8_t)i);
    if (i % 2) hpl__pool_free(pools[i], objs[i]);
    hpl__pool_destroy(pools[i]); /* live allocations are discarded */
  }
  for (int i = 0; i < CYCLES; i++) {
    hpl__pool *p = pool_new(16 * MiB);
    void *o = hpl__pool_alloc(p, 8 * MiB);
    assert_in_pool(p, o, 8 * MiB);
    if (i % 3) hpl__pool_free(p, o);
    hpl__pool_destroy(p);
  }
}

/* jemalloc's metadata grows through the hooks: with ~20000 extents live the
 * arena needs more descriptor blocks, which must come from the pool and be
 * zeroed even though every byte of the pool was dirtied beforehand. */
static void test_metadata_growth(void **state) {
  (void)state;
  hpl__pool *p = pool_new(1 * GiB);
  uint64_t used0 = hpl__pool_used(p);
  static void *objs[20000];
  size_t n = fill(p, 1 * MiB, objs, 1100);
  for (size_t i = 0; i < n; i++) memset(objs[i], 0xa5, 1 * MiB);
  for (size_t i = 0; i < n; i++) hpl__pool_free(p, objs[i]);

  for (size_t i = 0; i < 20000; i++) {
    objs[i] = hpl__pool_alloc(p, 16 * KiB);
    assert_in_pool(p, objs[i], 16 * KiB);
    memset(objs[i], 0x3c, 64);
  }
  uint64_t used_full = hpl__pool_used(p);
  for (size_t i = 0; i < 20000; i += 2) hpl__pool_free(p, objs[i]);
  for (size_t i = 0; i < 20000; i += 2) {
    objs[i] = hpl__pool_alloc(p, 16 * KiB);
    assert_in_pool(p, objs[i], 16 * KiB);
  }
  for (size_t i = 0; i < 20000; i++) hpl__pool_free(p, objs[i]);
  uint64_t used_end = hpl__pool_used(p);
  printf("    metadata: used %llu B fresh, %llu B with 20000 x 16 KiB live, %llu B after\n",
         (unsigned long long)used0, (unsigned long long)used_full, (unsigned long long)used_end);
  assert_true(used_end >= used0);
  assert_true(used_end <= used0 + 16 * MiB);
  /* The big free run is intact: metadata was kept at the top. (896 MiB is
   * a jemalloc size class; 900 MiB would be rounded up to 1 GiB.) */
  void *o = hpl__pool_alloc(p, 896 * MiB);
  assert_in_pool(p, o, 896 * MiB);
  hpl__pool_free(p, o);
  hpl__pool_destroy(p);
}

/* Freed pages go back to the kernel: 48 MiB written and freed stay in the
 * memfd until a trim walk punches them out; a walk never touches what is
 * still allocated, and walks again only after something was freed. */
static void test_trim_gives_pages_back(void **state) {
  (void)state;
  hpl__pool *p;
  assert_int_equal(hpl__pool_create(128 * MiB, "test-trim", 0, &p), 0);
  uint64_t idle = hpl__pool_resident(p);
  uint8_t *keep = hpl__pool_alloc(p, 8 * MiB);
  assert_non_null(keep);
  memset(keep, 0x5a, 8 * MiB);
  uint8_t *a[6];
  for (int i = 0; i < 6; i++) {
    assert_non_null(a[i] = hpl__pool_alloc(p, 8 * MiB));
    memset(a[i], 0xa5, 8 * MiB);
  }
  uint64_t full = hpl__pool_resident(p);
  printf("pool resident: %llu KiB idle, %llu KiB with 56 MiB written\n",
         (unsigned long long)(idle / KiB), (unsigned long long)(full / KiB));
  assert_true(full >= idle + 56 * MiB);
  int more = 1;
  while (more) hpl__pool_trim(p, 0, 64, &more); /* whatever jemalloc freed setting up */
  assert_true(hpl__pool_resident(p) >= full); /* live ranges keep their pages */
  assert_int_equal(hpl__pool_trim(p, 0, 64, &more), 0); /* nothing freed since */
  size_t mid = (size_t)((uint64_t)(a[3] - hpl__pool_base(p)) / hpl__pool_chunk(p));
  uint32_t gen = hpl__pool_chunk_gen(p, mid);
  for (int i = 0; i < 6; i++) hpl__pool_free(p, a[i]);
  assert_true(hpl__pool_resident(p) >= full); /* freeing alone keeps the pages */
  uint64_t punched = 0;
  int walks = 0;
  do {
    punched += hpl__pool_trim(p, 0, 1, &more); /* one range per call: resumable walk */
    walks++;
  } while (more && walks < 1000);
  uint64_t after = hpl__pool_resident(p);
  printf("pool resident after freeing 48 MiB and a trim: %llu KiB (%llu KiB punched)\n",
         (unsigned long long)(after / KiB), (unsigned long long)(punched / KiB));
  assert_true(punched >= 48 * MiB);
  /* pages go back a whole chunk at a time: the chunk the kept object
   * shares with the freed ones keeps its pages */
  assert_true(after <= full - 48 * MiB + hpl__pool_chunk(p));
  /* a chunk given back is a new memfd: clients must map it again */
  assert_true(hpl__pool_chunk_gen(p, mid) > gen);
  for (uint64_t i = 0; i < 8 * MiB; i += 4096) assert_int_equal(keep[i], 0x5a);
  assert_int_equal(hpl__pool_trim(p, 0, 64, &more), 0); /* nothing freed since */
  assert_true(hpl__pool_high_water(p) >= 56 * MiB);
  /* with keep, the lowest free bytes stay warm: free 48 MiB again (written
   * first) and trim keeping 32 MiB: at least 32 MiB stay resident */
  for (int i = 0; i < 6; i++) {
    assert_non_null(a[i] = hpl__pool_alloc(p, 8 * MiB));
    memset(a[i], 0x3c, 8 * MiB);
  }
  for (int i = 0; i < 6; i++) hpl__pool_free(p, a[i]);
  do hpl__pool_trim(p, 32 * MiB, 64, &more);
  while (more);
  uint64_t kept = hpl__pool_resident(p);
  printf("pool resident after a trim keeping 32 MiB: %llu KiB\n", (unsigned long long)(kept / KiB));
  assert_true(kept >= 8 * MiB + 32 * MiB);
  assert_true(kept <= 8 * MiB + 32 * MiB + 4 * MiB);
  hpl__pool_free(p, keep);
  hpl__pool_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_capacity), cmocka_unit_test(test_size_zero_and_null),
      cmocka_unit_test(test_alignment),       cmocka_unit_test(test_no_overlap),
      cmocka_unit_test(test_reuse_64m),       cmocka_unit_test(test_exhaustion_1g),
      cmocka_unit_test(test_big_500m),        cmocka_unit_test(test_usable_fraction_1m),
      cmocka_unit_test(test_shared_memfd),    cmocka_unit_test(test_accounting),
      cmocka_unit_test(test_many_pools),      cmocka_unit_test(test_metadata_growth),
      cmocka_unit_test(test_trim_gives_pages_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
