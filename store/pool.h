/*
 * pool.h - the store's shared-memory pool.
 *
 * `capacity` bytes mapped once at one base, carved by a dedicated jemalloc
 * arena whose extent hooks (poolext.c) hand out ranges of that mapping (a real free list:
 * freed ranges are reused, split and merged). The memory is a row of chunk
 * memfds that only the store can write: each is sealed F_SEAL_FUTURE_WRITE
 * once the store has mapped it, so clients can map it read-only and nothing
 * else (poolseg.c). An allocation is addressed on the wire by its offset
 * from the pool base; clients map the chunks it lies in.
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

/* Most chunk memfds a pool is made of (see hpl__pool_chunk_fd). */
#define HPL__POOL_MAX_CHUNKS 128

/* Alignment of every allocation (enough for any SIMD reduce kernel). */
#define HPL__POOL_ALIGN 64

/* Create a pool of `capacity` bytes (rounded up to the page size; 0 or less
 * than 16 MiB becomes 16 MiB; more than 2^47 is HPL_EINVAL). `name` labels
 * the chunk memfds (visible in /proc/PID/fd; at most 128 of them). With `prefault` the pages are
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

/* The chunks. Chunk k holds pool bytes [k * chunk, (k + 1) * chunk) (the
 * last one may be shorter). hpl__pool_chunk_fd gives its memfd (owned by
 * the pool, sealed: map it read-only) and its generation in *gen (NULL:
 * not wanted), or -1 for no such chunk; a trim that gives a chunk's pages
 * back replaces its memfd and bumps its generation, so a mapping of an
 * older generation no longer shows the pool. hpl__pool_fd_at: the memfd
 * holding pool byte `off`, that byte's offset in it (*foff) and how many
 * bytes the memfd has from there (*avail); -1 past the pool. */
uint64_t hpl__pool_chunk(const hpl__pool *p);
size_t hpl__pool_nchunks(const hpl__pool *p);
int hpl__pool_chunk_fd(const hpl__pool *p, size_t k, uint32_t *gen);
uint32_t hpl__pool_chunk_gen(const hpl__pool *p, size_t k);
int hpl__pool_fd_at(const hpl__pool *p, uint64_t off, uint64_t *foff, uint64_t *avail);
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

/* Give the pages of free ranges back to the kernel, a whole chunk at a
 * time (a chunk entirely inside a free range gets a fresh memfd; the old
 * one's pages go once no client maps it: see hpl__pool_chunk_fd). They read
 * as zero when used again, after a page fault each: a pool that is filled
 * again soon after pays for that, so callers trim only after a quiet while.
 * The lowest `keep` free bytes stay (placement is lowest-first, so the next
 * allocations land there, warm). Walks the free list from where the last
 * call stopped, at most `max_ranges` ranges per call; *more says whether
 * ranges are left for another call of this walk (with the same keep). Does
 * nothing (and returns 0) when nothing was freed since the last walk
 * began. Returns the bytes given back (chunks given back before count
 * again). A free range keeps the pages of the chunks it only partly
 * covers. */
uint64_t hpl__pool_trim(hpl__pool *p, uint64_t keep, size_t max_ranges, int *more);

/* Who is told when a trim gave a chunk a fresh memfd (new generation):
 * recycled(arg, k) runs from hpl__pool_trim, after it (the pool may be
 * used again from it). One listener; NULL stops telling. The store's
 * clients module hands the new memfd to the clients that map the chunk,
 * so they drop the old one's pages. */
void hpl__pool_listen(hpl__pool *p, void (*recycled)(void *arg, size_t k), void *arg);

/* Bytes of the chunk memfds backed by memory now (pages touched and not
 * given back), from fstat. */
uint64_t hpl__pool_resident(const hpl__pool *p);

/* The most bytes ever held by callers at once (hpl__pool_allocated). */
uint64_t hpl__pool_high_water(const hpl__pool *p);

#endif
