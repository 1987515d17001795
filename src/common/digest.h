/*
 * digest.h - object digests: the hash of each fixed-size verification unit
 * of an object's bytes, the list of them, and a root over the list. Pure
 * (no I/O, no event loop); the hashes come from kept libraries: SHA-256 from
 * OpenSSL libcrypto, XXH3-128 from libxxhash.
 *
 * An object of `size` bytes has hpl__digest_units(size) units of
 * hpl__digest_unit(size) bytes (the last one may be short; an empty object
 * has one empty unit). Every digest is HPL__DIGEST_LEN (32) bytes: a SHA-256,
 * or an XXH3-128 (its canonical big-endian 16 bytes) followed by 16 zero
 * bytes. The root is the same algorithm over the concatenated unit digests.
 *
 * Callers: store/objdig.c (making and checking an object's digests),
 * store/rddig.c and store/rdver.c (reduce and ring streams' units),
 * directory/digests.c (keeping them), src/client/cdirect.c (inline reads),
 * tests/test_digest.c, bench (cost per GiB).
 */
#ifndef HPL_DIGEST_H
#define HPL_DIGEST_H

#include <stddef.h>
#include <stdint.h>

/* The largest verification unit, 128 KiB: the unit of every object over
 * 8 MiB. A relay forwards only verified units, so each hop of a chain adds
 * about one unit's time on the wire (~1 ms at 1 Gbit/s, ~5 ms at
 * 200 Mbit/s); a 256 MiB object has 2048 digests (64 KiB). Smaller objects
 * have smaller units (hpl__digest_unit), so their hops add less. */
#define HPL__DIGEST_UNIT (128u * 1024u)
/* The smallest unit, that of every object up to 4 MiB (at most 128 units). */
#define HPL__DIGEST_UNIT_MIN (32u * 1024u)
#define HPL__DIGEST_LEN 32
/* Most units one object's list may have (8 MiB of digests: objects up to
 * 32 GiB; larger objects travel without digests, see docs/design.md). */
#define HPL__DIGEST_MAX_UNITS (256u * 1024u)

/* The unit of an object (or a stream) of `size` bytes: 32 KiB up to 4 MiB,
 * 64 KiB up to 8 MiB, 128 KiB (HPL__DIGEST_UNIT) above. Every unit size
 * divides HPL__DIGEST_UNIT, so a boundary of the largest unit is one of
 * every size's. Part of the wire format: the maker, the directory and every
 * receiver of an object derive its units from its size alone. */
uint64_t hpl__digest_unit(uint64_t size);

/* Algorithms: numbers are part of the wire format (digest_algo fields). */
typedef enum hpl__digest_algo {
  HPL__DIGEST_OFF = 0,    /* no digests (benchmarks) */
  HPL__DIGEST_SHA256 = 1, /* the default: stops a liar and a relay */
  HPL__DIGEST_FAST = 2,   /* XXH3-128: detects accidents only */
  HPL__DIGEST_NALGOS
} hpl__digest_algo;

/* "off", "sha256", "fast"; "?" for an unknown number. */
const char *hpl__digest_algo_name(int algo);
/* Parse one of those names into *algo: 0, or -1 for an unknown name. */
int hpl__digest_algo_parse(const char *name, int *algo);
/* Whether `algo` is a known algorithm other than off. */
int hpl__digest_algo_on(int algo);

/* Units of an object of `size` bytes: ceil(size / unit), at least 1. */
uint64_t hpl__digest_units(uint64_t size);
/* Bytes [*off, *off + *len) of unit `u` of an object of `size` bytes
 * (len may be NULL: the unit's start only). */
void hpl__digest_unit_span(uint64_t size, uint64_t u, uint64_t *off, uint64_t *len);
/* The unit of an object of `size` bytes that byte `off` lies in (units
 * wholly below `off`, when off is a unit boundary). */
uint64_t hpl__digest_unit_of(uint64_t size, uint64_t off);

/* The digest of `n` bytes at `p` with `algo` (SHA256 or FAST) into out. */
void hpl__digest_bytes(int algo, const void *p, size_t n, uint8_t out[HPL__DIGEST_LEN]);

/* A piece of a unit whose bytes are not contiguous (a ring's stream:
 * slices of the target, store/ring.c). */
typedef struct hpl__digest_piece {
  const uint8_t *p;
  size_t n;
} hpl__digest_piece;

/* The digest of the concatenation of `n` pieces (the same as
 * hpl__digest_bytes over them laid end to end), into out. */
void hpl__digest_pieces(int algo, const hpl__digest_piece *pc, unsigned n,
                        uint8_t out[HPL__DIGEST_LEN]);

/* The pieces of unit `u` of a stream of `size` bytes whose bytes are not
 * contiguous: at(arg, pos, &n) returns a pointer to stream byte `pos` and
 * sets *n to how many of the wanted *n bytes lie there contiguously. At
 * most `max` pieces into pc (pointers are at()'s, not owned). Returns
 * their number (an empty unit: one empty piece), or 0 if at() found no
 * bytes or the unit needs more than `max` pieces. */
unsigned hpl__digest_unit_pieces(uint64_t size, uint64_t u,
                                 const uint8_t *(*at)(void *arg, uint64_t pos, uint64_t *n),
                                 void *arg, hpl__digest_piece *pc, unsigned max);

/* Digests of units [u0, u1) of the object at `data` (`size` bytes) into
 * list + u0 * HPL__DIGEST_LEN (the caller's array of all units). */
void hpl__digest_units_make(int algo, const uint8_t *data, uint64_t size, uint64_t u0,
                            uint64_t u1, uint8_t *list);

/* The root: `algo` over `nunits` digests in `list`. */
void hpl__digest_root(int algo, const uint8_t *list, uint64_t nunits,
                      uint8_t out[HPL__DIGEST_LEN]);

/* Constant-time comparison of two digests: 1 if equal. */
int hpl__digest_equal(const uint8_t *a, const uint8_t *b);

/* Check unit `u` of the object at `data` (`size` bytes) against its
 * digest in `list` (all units): 1 if it matches, 0 if not. */
int hpl__digest_check_unit(int algo, const uint8_t *data, uint64_t size, uint64_t u,
                           const uint8_t *list);

/* Check all of an object's bytes (`size` bytes at `data`) against a digest
 * list of `list_len` bytes from the wire: 1 if algo is off or every unit
 * matches, 0 if a unit does not, the list does not fit, or the algorithm
 * is unknown. CPU work of the whole object: for small objects (inline
 * bytes) on a loop. */
int hpl__digest_check_bytes(int algo, const uint8_t *list, size_t list_len, const uint8_t *data,
                            uint64_t size);

#endif
