/* pool.c - the store's shared-memory pool (see pool.h).
 *
 * Layout. `capacity` bytes are mapped once at `base`, a row of chunk memfds
 * only the store can write (poolseg.c). A private
 * jemalloc arena carves it: the arena's extent hooks (below) hand out page
 * ranges of the mapping and take them back, so jemalloc never maps memory of
 * its own for this arena. Its metadata (arena_t, extent descriptors) lives in
 * "base blocks" that jemalloc also obtains through these hooks, so it takes
 * a little pool space too.
 *
 * Free list. The free ranges of the mapping are kept in an array sorted by
 * address; adjacent free ranges are always coalesced, so two entries are
 * never adjacent. Lookups by address (dalloc, alloc at a fixed new_addr) are
 * binary searches; placement scans the array. The array lives in its own
 * anonymous mapping sized for the worst case (every other page free), so the
 * hooks never call malloc while jemalloc is inside the arena, and only the
 * part actually used is ever touched.
 *
 * Placement. Extents for data (objects, jemalloc slabs) are placed
 * address-ordered first-fit from the low end of the pool. jemalloc's own
 * metadata blocks are placed last-fit from the high end: they are never
 * given back before the arena is destroyed, and kept at the top they cannot
 * split the big free run that large objects need. They are recognised by
 * their alignment: jemalloc asks huge-page (2 MiB) alignment for them, while
 * every data extent of this arena is page-aligned (allocations ask for
 * HPL__POOL_ALIGN only).
 *
 * The first page of the mapping is never handed to jemalloc: size-0
 * allocations return the pool base, which therefore can never be the address
 * of a real allocation, and freeing it is a no-op.
 *
 * Zeroing. The interval [clean_lo, clean_hi) has never been handed out and
 * still reads as zero (fresh memfd pages). An extent asked for zeroed is
 * memset only where it lies outside that interval.
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
 * Free list
 * ---------------------------------------------------------------------- */

/* Index of the first free range that starts after `off` (nranges if none). */
static size_t pool_range_upper(const hpl__pool *p, uint64_t off) {
  size_t lo = 0, hi = p->nranges;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (p->ranges[mid].off <= off)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Remove [off, off+len) from free range i, which must contain it. Returns 0,
 * or -1 (nothing changed) when the split would overflow the array. */
static int pool_range_take(hpl__pool *p, size_t i, uint64_t off, uint64_t len) {
  hpl__pool_range *r = &p->ranges[i];
  uint64_t before = off - r->off;
  uint64_t after = r->off + r->len - (off + len);
  if (before == 0 && after == 0) {
    memmove(r, r + 1, (p->nranges - i - 1) * sizeof *r);
    p->nranges--;
  } else if (before == 0) {
    r->off = off + len;
    r->len = after;
  } else if (after == 0) {
    r->len = before;
  } else {
    if (p->nranges == p->maxranges) return -1;
    memmove(r + 2, r + 1, (p->nranges - i - 1) * sizeof *r);
    r->len = before;
    r[1].off = off + len;
    r[1].len = after;
    p->nranges++;
  }
  return 0;
}

/* Return [off, off+len) to the free list, merging it with free neighbours.
 * Returns 0, or -1 (nothing changed) if the range overlaps a free range
 * (a double free) or the array is full. */
static int pool_range_give(hpl__pool *p, uint64_t off, uint64_t len) {
  size_t i = pool_range_upper(p, off);
  hpl__pool_range *prev = i > 0 ? &p->ranges[i - 1] : NULL;
  hpl__pool_range *next = i < p->nranges ? &p->ranges[i] : NULL;
  if (prev && prev->off + prev->len > off) return -1;
  if (next && off + len > next->off) return -1;
  int join_prev = prev && prev->off + prev->len == off;
  int join_next = next && off + len == next->off;
  if (join_prev && join_next) {
    prev->len += len + next->len;
    memmove(next, next + 1, (p->nranges - i - 1) * sizeof *next);
    p->nranges--;
  } else if (join_prev) {
    prev->len += len;
  } else if (join_next) {
    next->off = off;
    next->len += len;
  } else {
    if (p->nranges == p->maxranges) return -1;
    memmove(&p->ranges[i + 1], &p->ranges[i], (p->nranges - i) * sizeof *p->ranges);
    p->ranges[i].off = off;
    p->ranges[i].len = len;
    p->nranges++;
  }
  return 0;
}

/* Find room for `len` bytes whose address is a multiple of `align`: the
 * lowest such place when `low`, else the highest. Returns the range index
 * and sets *off, or returns SIZE_MAX when nothing fits. */
static size_t pool_range_find(const hpl__pool *p, uint64_t len, uint64_t align, int low,
                              uint64_t *off) {
  uintptr_t base = (uintptr_t)p->base;
  for (size_t k = 0; k < p->nranges; k++) {
    size_t i = low ? k : p->nranges - 1 - k;
    const hpl__pool_range *r = &p->ranges[i];
    if (r->len < len) continue;
    uint64_t at;
    if (low) {
      at = ((base + r->off + align - 1) & ~(uintptr_t)(align - 1)) - base;
      if (at - r->off > r->len - len) continue;
    } else {
      uintptr_t a = (base + r->off + r->len - len) & ~(uintptr_t)(align - 1);
      if (a < base + r->off) continue;
      at = a - base;
    }
    *off = at;
    return i;
  }
  return SIZE_MAX;
}

/* ------------------------------------------------------------------------
 * Extent hooks. jemalloc's convention: bool hooks return false on success,
 * true to refuse (the extent then stays as it was).
 * ---------------------------------------------------------------------- */

/* True when [addr, addr+size) lies inside the mapping; sets *off. */
static bool pool_contains(const hpl__pool *p, const void *addr, uint64_t size, uint64_t *off) {
  uintptr_t a = (uintptr_t)addr, b = (uintptr_t)p->base;
  if (a < b || a - b > p->capacity || size > p->capacity - (a - b)) return false;
  *off = a - b;
  return true;
}

/* Zero the parts of [off, off+len) that may have been handed out before. */
static void pool_zero_dirty(hpl__pool *p, uint64_t off, uint64_t len, uint64_t clean_lo,
                            uint64_t clean_hi) {
  uint64_t end = off + len;
  uint64_t lo = off > clean_lo ? off : clean_lo;
  uint64_t hi = end < clean_hi ? end : clean_hi;
  if (lo >= hi) {
    memset(p->base + off, 0, len);
    return;
  }
  if (lo > off) memset(p->base + off, 0, lo - off);
  if (end > hi) memset(p->base + hi, 0, end - hi);
}

/* Hand jemalloc `size` bytes aligned to `alignment`: exactly at new_addr if
 * given (NULL if that range is not entirely free), else wherever the
 * placement policy finds room. Always committed; zeroed when *zero asks for
 * it, and *zero reports true when the range is known to be zero anyway. */
static void *pool_extent_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t alignment,
                               bool *zero, bool *commit, unsigned arena_ind) {
  hpl__pool *p = (hpl__pool *)h;
  (void)arena_ind;
  if (size == 0 || size > p->capacity || alignment == 0 || (alignment & (alignment - 1)) ||
      alignment > p->capacity)
    return NULL;

  pthread_mutex_lock(&p->mu);
  uint64_t off = 0;
  size_t i;
  if (new_addr) {
    i = SIZE_MAX;
    if (pool_contains(p, new_addr, size, &off) && ((uintptr_t)new_addr & (alignment - 1)) == 0) {
      size_t j = pool_range_upper(p, off);
      if (j > 0 && off + size <= p->ranges[j - 1].off + p->ranges[j - 1].len) i = j - 1;
    }
  } else {
    i = pool_range_find(p, size, alignment, alignment <= p->page, &off);
  }
  if (i == SIZE_MAX || pool_range_take(p, i, off, size) != 0) {
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  p->used += size;
  /* Shrink the clean interval to whichever side of this range is larger. */
  uint64_t clean_lo = p->clean_lo, clean_hi = p->clean_hi;
  uint64_t end = off + size;
  if (off < clean_hi && end > clean_lo) {
    uint64_t below = off > clean_lo ? off - clean_lo : 0;
    uint64_t above = clean_hi > end ? clean_hi - end : 0;
    if (above >= below)
      p->clean_lo = end > clean_lo ? end : clean_lo;
    else
      p->clean_hi = off;
  }
  pthread_mutex_unlock(&p->mu);

  if (*zero)
    pool_zero_dirty(p, off, size, clean_lo, clean_hi);
  else
    *zero = off >= clean_lo && end <= clean_hi;
  *commit = true;
  return p->base + off;
}

/* Take a range back into the free list. Returns 0, or -1 if it is not a
 * range of this pool that is currently handed out. */
static int pool_release(hpl__pool *p, void *addr, size_t size) {
  uint64_t off;
  if (size == 0 || !pool_contains(p, addr, size, &off)) return -1;
  pthread_mutex_lock(&p->mu);
  int rc = pool_range_give(p, off, size);
  if (rc == 0) {
    p->used -= size;
    p->freed = 1;
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* jemalloc is done with an extent: reuse it. */
static bool pool_extent_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed,
                               unsigned arena_ind) {
  (void)committed;
  (void)arena_ind;
  return pool_release((hpl__pool *)h, addr, size) != 0;
}

/* Arena destruction: same as dalloc, but jemalloc cannot be refused. */
static void pool_extent_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed,
                                unsigned arena_ind) {
  (void)committed;
  (void)arena_ind;
  (void)pool_release((hpl__pool *)h, addr, size);
}

/* Every page of the mapping is always committed: commit succeeds... */
static bool pool_extent_commit(extent_hooks_t *h, void *addr, size_t size, size_t offset,
                               size_t length, unsigned arena_ind) {
  (void)h, (void)addr, (void)size, (void)offset, (void)length, (void)arena_ind;
  return false;
}

/* ...and decommit and both purges are refused: pages stay as they are. */
static bool pool_extent_refuse(extent_hooks_t *h, void *addr, size_t size, size_t offset,
                               size_t length, unsigned arena_ind) {
  (void)h, (void)addr, (void)size, (void)offset, (void)length, (void)arena_ind;
  return true;
}

/* Splitting is free: the free list only tracks free ranges. */
static bool pool_extent_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a,
                              size_t size_b, bool committed, unsigned arena_ind) {
  uint64_t off;
  (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
  return !pool_contains((hpl__pool *)h, addr, size, &off);
}

/* Merging is free too, for two adjacent ranges of the mapping. */
static bool pool_extent_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b,
                              size_t size_b, bool committed, unsigned arena_ind) {
  uint64_t off;
  (void)committed, (void)arena_ind;
  if ((uint8_t *)addr_a + size_a != (uint8_t *)addr_b) return true;
  return !pool_contains((hpl__pool *)h, addr_a, (uint64_t)size_a + size_b, &off);
}

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

  p->hooks.alloc = pool_extent_alloc;
  p->hooks.dalloc = pool_extent_dalloc;
  p->hooks.destroy = pool_extent_destroy;
  p->hooks.commit = pool_extent_commit;
  p->hooks.decommit = pool_extent_refuse;
  p->hooks.purge_lazy = pool_extent_refuse;
  p->hooks.purge_forced = pool_extent_refuse;
  p->hooks.split = pool_extent_split;
  p->hooks.merge = pool_extent_merge;

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
  if (!pool_contains(p, ptr, usable, &off) || off < p->page) {
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
  if (!p || !ptr || ptr == (void *)p->base || !pool_contains(p, ptr, 1, &off)) return;
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
  size_t i = pool_range_upper(p, p->trim_at);
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
