/*
 * pool.h - the store's shared-memory pool.
 *
 * One memfd of `capacity` bytes, mapped once, carved by a dedicated jemalloc
 * arena whose extent hooks hand out ranges of that mapping (a real free list:
 * freed ranges are reused, split and merged). Clients map the same memfd, so
 * an allocation is addressed on the wire by its offset from the pool base.
 *
 * Not thread-safe: the store calls it from its event-loop thread only.
 * jemalloc must be the allocator of the process that uses this module (the
 * store links it). pool.c defines jemalloc's malloc_conf ("retain:false"):
 * no other file may define it, further options belong in that string.
 */
#ifndef HPL_POOL_H
#define HPL_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct hpl__pool hpl__pool;

/* Alignment of every allocation (enough for any SIMD reduce kernel). */
#define HPL__POOL_ALIGN 64

/* Create a pool of `capacity` bytes (rounded up to the page size; 0 or less
 * than 16 MiB becomes 16 MiB; more than 2^47 is HPL_EINVAL). `name` labels
 * the memfd (visible in /proc/PID/fd). With `prefault` the pages are
 * populated up front so first writes do not fault.
 * Returns 0 and *out, or HPL_EINVAL (bad capacity, or jemalloc runs with
 * retain:true, e.g. forced through MALLOC_CONF, which would strand freed
 * ranges), HPL_ESYS (errno kept) or HPL_ENOMEM.
 *
 * Sizes are rounded to jemalloc's size classes (four per doubling), and
 * each large allocation carries 4 KiB of overhead: 15 objects of 64 MiB fit
 * in a 1 GiB pool, and 1 MiB objects fill 99% of it. */
int hpl__pool_create(uint64_t capacity, const char *name, int prefault, hpl__pool **out);

/* Unmap and close; every allocation becomes invalid. NULL is a no-op. */
void hpl__pool_destroy(hpl__pool *p);

/* Allocate `size` bytes, HPL__POOL_ALIGN-aligned, inside the mapping.
 * size 0 returns a valid, unique-enough pointer inside the mapping that must
 * not be written (the pool base); freeing it is a no-op.
 * Returns NULL when the pool cannot fit the request (never aborts). */
void *hpl__pool_alloc(hpl__pool *p, uint64_t size);

/* Return an allocation (NULL is a no-op). */
void hpl__pool_free(hpl__pool *p, void *ptr);

int hpl__pool_fd(const hpl__pool *p);             /* the memfd, owned by the pool */
uint8_t *hpl__pool_base(const hpl__pool *p);      /* start of the mapping */
uint64_t hpl__pool_capacity(const hpl__pool *p);  /* mapping size in bytes */
/* Bytes currently taken from the region by jemalloc (extents in use,
 * including size-class rounding and jemalloc's own metadata). */
uint64_t hpl__pool_used(const hpl__pool *p);
/* Bytes the caller currently holds (sum of usable sizes: requested sizes
 * rounded up to jemalloc's size classes). */
uint64_t hpl__pool_allocated(const hpl__pool *p);
/* Largest single allocation that could currently succeed, for error
 * messages (an estimate from the free list). */
uint64_t hpl__pool_largest_free(const hpl__pool *p);

/* Give the pages of free ranges back to the kernel (a punched hole in the
 * memfd: every process mapping the pool drops them, and they read as zero
 * when used again, after a page fault each: a pool that is filled again
 * soon after pays for that, so callers trim only after a quiet while).
 * The lowest `keep` free bytes stay (placement is lowest-first, so the next
 * allocations land there, warm). Walks the free list from where the last
 * call stopped, at most `max_ranges` ranges per call; *more says whether
 * ranges are left for another call of this walk (with the same keep). Does
 * nothing (and returns 0) when nothing was freed since the last walk
 * began. Returns the bytes punched (holes punched before count again: the
 * kernel skips them). */
uint64_t hpl__pool_trim(hpl__pool *p, uint64_t keep, size_t max_ranges, int *more);

/* Bytes of the memfd backed by memory now (pages touched and not given
 * back), from fstat; 0 if it fails. */
uint64_t hpl__pool_resident(const hpl__pool *p);

/* The most bytes ever held by callers at once (hpl__pool_allocated). */
uint64_t hpl__pool_high_water(const hpl__pool *p);

#endif
