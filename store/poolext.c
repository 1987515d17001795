/* poolext.c - the pool's free list and the jemalloc extent hooks that hand
 * its ranges out and take them back (see pool.h, poolint.h; the arena and
 * the calls are pool.c's).
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
 * Zeroing. The interval [clean_lo, clean_hi) has never been handed out and
 * still reads as zero (fresh memfd pages). An extent asked for zeroed is
 * memset only where it lies outside that interval.
 */
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "poolint.h"

/* ------------------------------------------------------------------------
 * Free list
 * ---------------------------------------------------------------------- */

/* Index of the first free range that starts after `off` (nranges if none). */
size_t hpl__pool_range_upper(const hpl__pool *p, uint64_t off) {
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
  size_t i = hpl__pool_range_upper(p, off);
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
bool hpl__pool_contains(const hpl__pool *p, const void *addr, uint64_t size, uint64_t *off) {
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
    if (hpl__pool_contains(p, new_addr, size, &off) &&
        ((uintptr_t)new_addr & (alignment - 1)) == 0) {
      size_t j = hpl__pool_range_upper(p, off);
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
  if (size == 0 || !hpl__pool_contains(p, addr, size, &off)) return -1;
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
  return !hpl__pool_contains((hpl__pool *)h, addr, size, &off);
}

/* Merging is free too, for two adjacent ranges of the mapping. */
static bool pool_extent_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b,
                              size_t size_b, bool committed, unsigned arena_ind) {
  uint64_t off;
  (void)committed, (void)arena_ind;
  if ((uint8_t *)addr_a + size_a != (uint8_t *)addr_b) return true;
  return !hpl__pool_contains((hpl__pool *)h, addr_a, (uint64_t)size_a + size_b, &off);
}

/* ------------------------------------------------------------------------
 * The hooks' table
 * ---------------------------------------------------------------------- */

void hpl__pool_hooks_init(hpl__pool *p) {
  p->hooks.alloc = pool_extent_alloc;
  p->hooks.dalloc = pool_extent_dalloc;
  p->hooks.destroy = pool_extent_destroy;
  p->hooks.commit = pool_extent_commit;
  p->hooks.decommit = pool_extent_refuse;
  p->hooks.purge_lazy = pool_extent_refuse;
  p->hooks.purge_forced = pool_extent_refuse;
  p->hooks.split = pool_extent_split;
  p->hooks.merge = pool_extent_merge;
}
