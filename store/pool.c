/* pool.c - the store's shared-memory pool: its jemalloc arena and the calls
 * (see pool.h).
 *
 * Layout. `capacity` bytes are mapped once at `base`, a row of chunk memfds
 * only the store can write (poolseg.c). A private
 * jemalloc arena carves it: the arena's extent hooks (poolext.c) hand out page
 * ranges of the mapping and take them back, so jemalloc never maps memory of
 * its own for this arena. Its metadata (arena_t, extent descriptors) lives in
 * "base blocks" that jemalloc also obtains through these hooks, so it takes
 * a little pool space too.
 *
 * The first page of the mapping is never handed to jemalloc: size-0
 * allocations return the pool base, which therefore can never be the address
 * of a real allocation, and freeing it is a no-op.
 */
#include "pool.h"

#include <errno.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hoplite.h"
#include "poolint.h"

/* jemalloc reads this at startup. With retain:true, jemalloc grows an arena
 * by more than it needs and keeps the surplus in the arena's "retained" set,
 * which is never handed back to dalloc, so the free list never sees it and
 * much of a pool is lost (see DESIGN.md). Declared with default
 * visibility by jemalloc.h; repeated here because the project builds with
 * -fvisibility=hidden and a hidden definition would never be seen by
 * libjemalloc. */
__attribute__((visibility("default"))) const char *malloc_conf = "retain:false";

#define POOL_MIN_CAPACITY (16ull << 20)
/* Largest capacity accepted: the user half of the x86-64 address space. */
#define POOL_MAX_CAPACITY (1ull << 47)

/* ------------------------------------------------------------------------
 * Pool
 * ---------------------------------------------------------------------- */

/* Write an ssize_t setting of arena `ind` ("dirty_decay_ms", ...). Returns
 * mallctl's result (0 or an errno value). */
static int pool_arena_set(unsigned ind, const char *what, ssize_t value) {
  char name[64];
  snprintf(name, sizeof name, "arena.%u.%s", ind, what);
  return mallctl(name, NULL, NULL, &value, sizeof value);
}

/* Destroy the arena (discarding what it still holds), unmap, close, free.
 * Keeps errno. */
static void pool_teardown(hpl__pool *p) {
  int saved = errno;
  if (p->have_arena) {
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", p->arena);
    (void)mallctl(name, NULL, NULL, NULL, 0);
  }
  hpl__pool_seg_free(p);
  if (p->ranges) munmap(p->ranges, p->ranges_bytes);
  pthread_mutex_destroy(&p->mu);
  free(p);
  errno = saved;
}

/* Create the memfd, map it, set up the free list and the arena. Returns 0
 * and *out, or an HPL_E* code: HPL_EINVAL for a bad argument or when
 * jemalloc runs with retain:true, HPL_ENOMEM when the pool struct cannot be
 * allocated, HPL_ESYS (errno tells why) when a system call or mallctl
 * fails. */
int hpl__pool_create(uint64_t capacity, const char *name, int prefault, hpl__pool **out) {
  if (!out || capacity > POOL_MAX_CAPACITY) return HPL_EINVAL;
  long pg = sysconf(_SC_PAGESIZE);
  uint64_t page = pg > 0 ? (uint64_t)pg : 4096;
  capacity = (capacity + page - 1) & ~(page - 1);
  if (capacity < POOL_MIN_CAPACITY) capacity = POOL_MIN_CAPACITY;

  hpl__pool *p = calloc(1, sizeof *p);
  if (!p) return HPL_ENOMEM;
  pthread_mutex_init(&p->mu, NULL);
  p->page = page;
  p->prefault = prefault;
  p->capacity = capacity;

  bool oblivious = true;
  size_t bsz = sizeof oblivious;
  if (mallctl("opt.cache_oblivious", &oblivious, &bsz, NULL, 0) != 0) oblivious = true;
  p->large_pad = oblivious ? page : 0;
  /* With retain:true (MALLOC_CONF can override malloc_conf) jemalloc keeps
   * over-sized pieces of what it grows in the arena and never hands them
   * back: measured, a 1 GiB pool then holds 11 live 64 MiB objects instead
   * of 15 and a 500 MiB allocation fails. Refuse rather than break the
   * pool's contract quietly. */
  bool retain = false;
  bsz = sizeof retain;
  if (mallctl("opt.retain", &retain, &bsz, NULL, 0) == 0 && retain) {
    pool_teardown(p);
    errno = EINVAL;
    return HPL_EINVAL;
  }

  char label[250]; /* memfd names are at most 249 bytes */
  snprintf(label, sizeof label, "%s", name && *name ? name : "hoplite-pool");
  if (hpl__pool_seg_init(p, label) != 0) goto fail_sys;
  void *m;

  /* Free ranges are separated by at least one used page. */
  p->maxranges = (size_t)(capacity / page / 2 + 2);
  p->ranges_bytes = (p->maxranges * sizeof *p->ranges + page - 1) & ~(page - 1);
  m = mmap(NULL, p->ranges_bytes, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) goto fail_sys;
  p->ranges = m;
  p->ranges[0].off = page; /* page 0 is the size-0 address, never handed out */
  p->ranges[0].len = capacity - page;
  p->nranges = 1;
  p->clean_lo = 0;
  p->clean_hi = capacity;

  hpl__pool_hooks_init(p);

  /* The arena allocates its own metadata through the hooks right here. */
  extent_hooks_t *hp = &p->hooks;
  unsigned ind;
  size_t isz = sizeof ind;
  int rc = mallctl("arenas.create", &ind, &isz, &hp, sizeof hp);
  if (rc != 0) {
    errno = rc;
    goto fail_sys;
  }
  p->arena = ind;
  p->have_arena = 1;
  /* Freed extents go straight back to dalloc instead of lingering. */
  rc = pool_arena_set(ind, "dirty_decay_ms", 0);
  if (rc == 0) rc = pool_arena_set(ind, "muzzy_decay_ms", 0);
  if (rc != 0) {
    errno = rc;
    goto fail_sys;
  }
  *out = p;
  return HPL_OK;

fail_sys:
  pool_teardown(p);
  return HPL_ESYS;
}

void hpl__pool_destroy(hpl__pool *p) {
  if (p) pool_teardown(p);
}

/* Allocate from the arena, never from anywhere else: anything jemalloc
 * returns outside the mapping is given back and reported as failure. */
void *hpl__pool_alloc(hpl__pool *p, uint64_t size) {
  if (!p) return NULL;
  if (size == 0) return p->base;
  if (size > p->capacity) return NULL;
  void *ptr = mallocx(
      (size_t)size, MALLOCX_ARENA(p->arena) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(HPL__POOL_ALIGN));
  if (!ptr) return NULL;
  size_t usable = sallocx(ptr, 0);
  uint64_t off;
  if (!hpl__pool_contains(p, ptr, usable, &off) || off < p->page) {
    /* A jemalloc bug or misuse: never hand out memory outside the pool. */
    dallocx(ptr, MALLOCX_TCACHE_NONE);
    return NULL;
  }
  p->allocated += usable;
  if (p->allocated > p->high_water) p->high_water = p->allocated;
  return ptr;
}

/* Free an allocation; NULL, the size-0 address and pointers outside the
 * mapping are ignored. */
void hpl__pool_free(hpl__pool *p, void *ptr) {
  uint64_t off;
  if (!p || !ptr || ptr == (void *)p->base || !hpl__pool_contains(p, ptr, 1, &off)) return;
  size_t usable = sallocx(ptr, 0);
  sdallocx(ptr, usable, MALLOCX_TCACHE_NONE);
  p->allocated -= usable;
}

uint8_t *hpl__pool_base(const hpl__pool *p) { return p->base; }

uint64_t hpl__pool_capacity(const hpl__pool *p) { return p->capacity; }

uint64_t hpl__pool_used(const hpl__pool *p) {
  hpl__pool *q = (hpl__pool *)p; /* the mutex is not part of the value */
  pthread_mutex_lock(&q->mu);
  uint64_t v = q->used;
  pthread_mutex_unlock(&q->mu);
  return v;
}

uint64_t hpl__pool_allocated(const hpl__pool *p) { return p->allocated; }

/* Largest free range, less jemalloc's per-extent padding, rounded down to a
 * jemalloc large size class (four classes per power of two). */
uint64_t hpl__pool_largest_free(const hpl__pool *p) {
  hpl__pool *q = (hpl__pool *)p;
  uint64_t best = 0;
  pthread_mutex_lock(&q->mu);
  for (size_t i = 0; i < q->nranges; i++)
    if (q->ranges[i].len > best) best = q->ranges[i].len;
  pthread_mutex_unlock(&q->mu);
  if (best <= q->large_pad) return 0;
  best -= q->large_pad;
  if (best < 4 * q->page) return best & ~(uint64_t)(HPL__POOL_ALIGN - 1);
  unsigned lg = 63u - (unsigned)__builtin_clzll(best);
  return best & ~((1ull << (lg - 2)) - 1);
}

uint64_t hpl__pool_trim(hpl__pool *p, uint64_t keep, size_t max_ranges, int *more) {
  uint64_t punched = 0;
  *more = 0;
  pthread_mutex_lock(&p->mu);
  if (!p->freed && p->trim_at == 0) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  if (p->trim_at == 0) { /* a new walk: frees from now on need another */
    p->freed = 0;
    p->trim_kept = 0;
  }
  size_t i = hpl__pool_range_upper(p, p->trim_at);
  if (i > 0 && p->ranges[i - 1].off + p->ranges[i - 1].len > p->trim_at) i--;
  size_t n = 0;
  for (; i < p->nranges && n < max_ranges; i++, n++) {
    const hpl__pool_range *r = &p->ranges[i];
    uint64_t lo = r->off > p->trim_at ? r->off : p->trim_at;
    uint64_t warm = keep > p->trim_kept ? keep - p->trim_kept : 0; /* still to leave */
    uint64_t avail = r->off + r->len - lo;
    if (warm >= avail) {
      p->trim_kept += avail;
      continue;
    }
    p->trim_kept += warm;
    lo += warm;
    punched += hpl__pool_seg_trim(p, lo, r->off + r->len);
  }
  if (i < p->nranges) {
    p->trim_at = p->ranges[i].off;
    *more = 1;
  } else {
    p->trim_at = 0; /* frees since this walk began wait for the next one */
  }
  /* the listener hears of the chunks given fresh memfds, outside the lock */
  uint32_t done[HPL__POOL_MAX_CHUNKS];
  size_t ndone = p->nrecycled;
  memcpy(done, p->recycled, ndone * sizeof *done);
  p->nrecycled = 0;
  pthread_mutex_unlock(&p->mu);
  for (size_t k = 0; k < ndone && p->on_recycled; k++) p->on_recycled(p->on_recycled_arg, done[k]);
  return punched;
}

uint64_t hpl__pool_high_water(const hpl__pool *p) { return p->high_water; }
