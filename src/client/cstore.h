/*
 * cstore.h - opening a client's connection to the store on its node: the
 * Unix socket, the store's HELLO frame with the client's end of the chunk
 * channel (and the presence filter's memfd) attached, the presence filter's
 * mapping, and the pool's: the address range is reserved at HELLO, and each
 * chunk memfd is mapped into it read-only when a reply first names bytes in
 * it (hpl__cstore_map). The store seals the chunks: the kernel lets no
 * client map them writable, write them or resize them.
 *
 * Used by hpl_connect/hpl_close (client.c). Bytes are read through the RPC
 * layer (crpc.h); this file only interprets the HELLO.
 */
#ifndef HPL_CSTORE_H
#define HPL_CSTORE_H

#include <stdint.h>

#include "crpc.h"

/* What a client holds of its store once connected. */
typedef struct hpl__cstore {
  hpl__crpc *rpc;   /* the store connection */
  uint8_t *base;    /* the pool's address range, pool_size bytes: chunks mapped
                       read-only where hpl__cstore_map put them, the rest reserved */
  uint64_t pool_size;
  struct hpl__cchunks *chunks; /* the chunk channel and what is mapped (cstore.c) */
  uint64_t node_id;
  uint32_t inline_max;   /* objects up to this size are inline at the directory */
  const uint8_t *filter; /* the store's presence filter (read-only), or NULL */
  uint32_t filter_slots; /* a power of two when filter is set */
  char dir_addr[64];     /* where the directory listens, as the store reaches */
  int dir_port;          /* it; 0 if the store did not say */
  uint64_t netns;        /* the store's network namespace (inode), 0 if unknown */
  int dir_publish;       /* the directory takes PUBLISH of small objects (cdirect.h) */
  uint64_t dir_term;     /* its leader term (standby directories; 0: none) */
  int have_reader_key;   /* the cluster has a secret: direct reads authenticate */
  uint8_t reader_key[32]; /* with this key (role READER, auth.h) */
  char node_name[64];     /* ... as this node (the store's name, Hello.node_name) */
} hpl__cstore;

/* Connect to the store listening on the Unix socket `path`, read its HELLO
 * and map what it sent, all before the deadline (hpl__now_ms() scale,
 * UINT64_MAX: none). On success (0) *out is filled and owned by the caller
 * (hpl__cstore_close). Errors, *out untouched: HPL_EINVAL (path too long),
 * HPL_ESYS (no socket, or mmap failed), HPL_ECONN (cannot connect),
 * HPL_ETIMEDOUT, HPL_EPROTO (no store at the other end, or a HELLO without
 * a pool), HPL_ENOMEM. */
int hpl__cstore_open(const char *path, uint64_t deadline, hpl__cstore *out);

/* Make sure pool bytes [off, off + size) are mapped, at the chunk
 * generations a GET reply named (gens[0..ngens), from chunk off / chunk
 * on): a chunk mapped at another generation (or not at all) is mapped
 * again from the memfd that the store sent on the chunk channel before its
 * reply (read until it is there; another thread may be doing the same).
 * Thread-safe. Returns 0, or HPL_EPROTO (the reply or the channel does not
 * add up: the chunks are not mapped; the detail says why), HPL_ESYS. */
int hpl__cstore_map(hpl__cstore *s, uint64_t off, uint64_t size, const uint32_t *gens,
                    size_t ngens, char *why, size_t wlen);

/* Map what the chunk channel brought meanwhile without waiting: the store
 * sends a chunk's new memfd when a trim gave the old one's pages back, and
 * mapping it over the old one lets those pages go. Called at the start of
 * gets and releases; a no-op while another thread reads the channel, and
 * within 10 ms of the last time it read it (a syscall each time would cost
 * small gets a tenth of their CPU). Thread-safe. */
void hpl__cstore_poll(hpl__cstore *s);

/* Close the connection and unmap the pool and the filter: pointers into
 * them become invalid. No call on s->rpc may be running. */
void hpl__cstore_close(hpl__cstore *s);

#endif
