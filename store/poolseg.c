/* poolseg.c - the memory under the pool (see pool.h, poolint.h).
 *
 * The pool's address range is reserved once (PROT_NONE) and filled with
 * chunks: each chunk is its own memfd, mapped read-write by the store at
 * its place (MAP_FIXED) and then sealed F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK
 * | F_SEAL_GROW | F_SEAL_SEAL. From then on the kernel lets nobody map it
 * writable or write it (pwrite, a descriptor opened again through /proc
 * read-write, mprotect of a read-only mapping), nor change its size: only
 * the mapping the store made before the seal can change its bytes. Clients
 * get the chunks' descriptors and map them read-only.
 *
 * A sealed memfd can no longer have holes punched in it, so pages are
 * given back a whole chunk at a time: a free chunk is replaced by a fresh
 * memfd mapped over it (MAP_FIXED swaps the mapping in one call), and the
 * old one is closed; its pages go once no client maps it any more. Each
 * replacement bumps the chunk's generation, which tells clients to map
 * the chunk again (GetRep.chunk_gen).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "poolint.h"

/* Chunks are at least this big, and there are at most POOL_MAX_CHUNKS of
 * them (each is a descriptor of the store, and one message to a client
 * passes up to 253). */
#define POOL_MIN_CHUNK (1ull << 20)
#define POOL_MAX_CHUNKS HPL__POOL_MAX_CHUNKS

#define POOL_SEALS (F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* Bytes of chunk k. */
static uint64_t chunk_len(const hpl__pool *p, size_t k) {
  uint64_t at = (uint64_t)k * p->chunk;
  return p->capacity - at < p->chunk ? p->capacity - at : p->chunk;
}

/* A new memfd for chunk k, mapped read-write at its place (its pages
 * populated when `populate`) and sealed. Returns the descriptor, or -1
 * (errno kept; the old mapping, if any, stays when the new one could not
 * be made). */
static int chunk_make(hpl__pool *p, size_t k, const char *label, int populate) {
  uint64_t len = chunk_len(p, k);
  int fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  void *at = p->base + (uint64_t)k * p->chunk;
  if (ftruncate(fd, (off_t)len) != 0 ||
      mmap(at, len, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_FIXED | (populate ? MAP_POPULATE : 0), fd, 0) == MAP_FAILED) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  /* after the store's own mapping: it keeps writing, nobody else can */
  if (fcntl(fd, F_ADD_SEALS, POOL_SEALS) != 0) {
    int e = errno;
    close(fd); /* the mapping stays until replaced or unmapped */
    errno = e;
    return -1;
  }
  return fd;
}

int hpl__pool_seg_init(hpl__pool *p, const char *label) {
  p->chunk = POOL_MIN_CHUNK;
  while ((p->capacity + p->chunk - 1) / p->chunk > POOL_MAX_CHUNKS) p->chunk <<= 1;
  size_t n = (size_t)((p->capacity + p->chunk - 1) / p->chunk);
  p->cfd = malloc(n * sizeof *p->cfd);
  p->cgen = calloc(n, sizeof *p->cgen);
  if (!p->cfd || !p->cgen) {
    errno = ENOMEM;
    return -1;
  }
  void *m = mmap(NULL, p->capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return -1;
  p->base = m;
  for (size_t k = 0; k < n; k++) {
    p->cfd[k] = chunk_make(p, k, label, p->prefault);
    if (p->cfd[k] < 0) {
      p->nchunks = k;
      return -1;
    }
    p->cgen[k] = 1;
    p->nchunks = k + 1;
  }
  return 0;
}

void hpl__pool_seg_free(hpl__pool *p) {
  int saved = errno;
  for (size_t k = 0; k < p->nchunks; k++) close(p->cfd[k]);
  if (p->base) munmap(p->base, p->capacity);
  free(p->cfd);
  free(p->cgen);
  errno = saved;
}

/* Pages of chunk k now in memory (0 if fstat fails). */
static uint64_t chunk_resident(const hpl__pool *p, size_t k) {
  struct stat st;
  return fstat(p->cfd[k], &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

uint64_t hpl__pool_seg_trim(hpl__pool *p, uint64_t lo, uint64_t hi) {
  uint64_t given = 0;
  size_t k = (size_t)((lo + p->chunk - 1) / p->chunk);
  for (; k < p->nchunks && (uint64_t)k * p->chunk + chunk_len(p, k) <= hi; k++) {
    if (chunk_resident(p, k)) {
      int fd = chunk_make(p, k, "hoplite-pool", 0); /* given back: not populated again */
      if (fd < 0) continue; /* keeps its pages for now */
      close(p->cfd[k]);
      p->cfd[k] = fd;
      p->cgen[k]++;
      if (p->nrecycled < HPL__POOL_MAX_CHUNKS) p->recycled[p->nrecycled++] = (uint32_t)k;
    }
    given += chunk_len(p, k);
  }
  return given;
}

uint64_t hpl__pool_resident(const hpl__pool *p) {
  uint64_t sum = 0;
  for (size_t k = 0; k < p->nchunks; k++) sum += chunk_resident(p, k);
  return sum;
}

void hpl__pool_listen(hpl__pool *p, void (*recycled)(void *arg, size_t k), void *arg) {
  p->on_recycled = recycled;
  p->on_recycled_arg = arg;
}

uint64_t hpl__pool_chunk(const hpl__pool *p) { return p->chunk; }

size_t hpl__pool_nchunks(const hpl__pool *p) { return p->nchunks; }

int hpl__pool_chunk_fd(const hpl__pool *p, size_t k, uint32_t *gen) {
  if (k >= p->nchunks) return -1;
  if (gen) *gen = p->cgen[k];
  return p->cfd[k];
}

uint32_t hpl__pool_chunk_gen(const hpl__pool *p, size_t k) {
  return k < p->nchunks ? p->cgen[k] : 0;
}

int hpl__pool_fd_at(const hpl__pool *p, uint64_t off, uint64_t *foff, uint64_t *avail) {
  if (off >= p->capacity) return -1;
  size_t k = (size_t)(off / p->chunk);
  *foff = off - (uint64_t)k * p->chunk;
  *avail = chunk_len(p, k) - *foff;
  return p->cfd[k];
}
