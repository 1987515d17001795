/*
 * poolint.h - what the pool module's files share (pool.c: the jemalloc
 * arena and the calls; poolext.c: the free list and the arena's extent
 * hooks; poolseg.c: the memory under it, chunk memfds that only the store
 * can write): the pool's record. Nothing outside the module includes it.
 */
#ifndef HPL_STORE_POOLINT_H
#define HPL_STORE_POOLINT_H

#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool.h"

typedef struct hpl__pool_range {
  uint64_t off; /* start, in bytes from the pool base */
  uint64_t len;
} hpl__pool_range;

struct hpl__pool {
  extent_hooks_t hooks; /* must stay first: jemalloc passes &hooks back to us */
  pthread_mutex_t mu;   /* guards the free list and `used` (hooks may run on
                           any thread jemalloc decides to use) */
  uint8_t *base;
  uint64_t capacity;
  uint64_t page;
  uint64_t large_pad; /* bytes jemalloc adds to each large extent */
  /* the memory: `nchunks` memfds of `chunk` bytes (the last may be
   * shorter), mapped one after the other at base (poolseg.c) */
  uint64_t chunk;
  size_t nchunks;
  int *cfd;       /* each chunk's memfd */
  uint32_t *cgen; /* each chunk's generation: a new memfd replaced the old one */
  int prefault;
  size_t nrecycled;       /* chunks given fresh memfds by the trim under way */
  uint32_t recycled[HPL__POOL_MAX_CHUNKS]; /* ...and which */
  void (*on_recycled)(void *arg, size_t k);
  void *on_recycled_arg;
  unsigned arena;
  int have_arena;

  hpl__pool_range *ranges; /* free ranges, sorted by off, never adjacent */
  size_t nranges;
  size_t maxranges;
  size_t ranges_bytes; /* size of the ranges mapping */

  uint64_t clean_lo, clean_hi; /* never handed out: still zero */
  uint64_t used;               /* bytes held by jemalloc (live extents) */
  uint64_t allocated;          /* usable bytes held by callers */
  uint64_t high_water;         /* most `allocated` ever */
  int freed;                   /* ranges were freed since the last complete trim walk */
  uint64_t trim_at;            /* where the next trim walk goes on (an offset) */
  uint64_t trim_kept;          /* free bytes this walk has left warm so far */
};

/* poolext.c. The arena's extent hooks go into p->hooks (before
 * arenas.create). */
void hpl__pool_hooks_init(hpl__pool *p);
/* Index of the first free range that starts after `off` (nranges if
 * none); the caller holds p->mu. */
size_t hpl__pool_range_upper(const hpl__pool *p, uint64_t off);
/* True when [addr, addr+size) lies inside the mapping; sets *off. */
bool hpl__pool_contains(const hpl__pool *p, const void *addr, uint64_t size, uint64_t *off);

/* poolseg.c. Reserve the address range and map every chunk: 0, or -1
 * (errno kept; what was made stays for hpl__pool_seg_free). */
int hpl__pool_seg_init(hpl__pool *p, const char *label);
/* Unmap and close everything hpl__pool_seg_init made. */
void hpl__pool_seg_free(hpl__pool *p);
/* Give back the pages of the whole chunks inside [lo, hi) (offsets; the
 * caller holds p->mu and the range is free): each is replaced by a fresh
 * memfd. Returns the bytes given back (chunks already empty count too). */
uint64_t hpl__pool_seg_trim(hpl__pool *p, uint64_t lo, uint64_t hi);

#endif
