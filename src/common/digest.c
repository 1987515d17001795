/* digest.c - unit digests, lists and roots of object bytes (see digest.h). */
#include "digest.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>
#include <xxhash.h>

/* SHA-256 fetched from libcrypto's providers once per process: passing
 * EVP_sha256() to every digest call makes OpenSSL 3 look the algorithm up
 * again each time (a locked table lookup that cost more than hashing a
 * small object's 100 bytes: ~0.3 us of ~0.5 per call, measured). Kept
 * until the process ends; any thread may use it. With it, the key of each
 * thread's digest context (freed when its thread ends: the client library
 * runs on its callers' threads, which come and go). */
static EVP_MD *sha256_md;
static pthread_key_t ctx_key;
static int ctx_key_ok;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *ctx) { EVP_MD_CTX_free(ctx); }

static void sha256_fetch(void) {
  sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
  ctx_key_ok = pthread_key_create(&ctx_key, ctx_free) == 0;
}

/* The fetched SHA-256, or EVP_sha256() if the fetch failed (it works as
 * before, only slower). */
static const EVP_MD *sha256(void) {
  pthread_once(&sha256_once, sha256_fetch);
  return sha256_md ? sha256_md : EVP_sha256();
}

/* The calling thread's digest context, made at its first digest and kept
 * until the thread ends (a new one per call was a third of a small
 * object's hashing), or NULL without memory; *owned: the caller frees it
 * (no thread key could be made). */
static EVP_MD_CTX *thread_ctx(int *owned) {
  pthread_once(&sha256_once, sha256_fetch);
  *owned = !ctx_key_ok;
  if (!ctx_key_ok) return EVP_MD_CTX_new();
  EVP_MD_CTX *ctx = pthread_getspecific(ctx_key);
  if (!ctx && (ctx = EVP_MD_CTX_new()) && pthread_setspecific(ctx_key, ctx) != 0) *owned = 1;
  return ctx;
}

/* SHA-256 of pieces pc[0..n) into out (zeroes, which match nothing real,
 * if libcrypto fails). */
static void sha256_pieces(const hpl__digest_piece *pc, unsigned n, uint8_t out[HPL__DIGEST_LEN]) {
  int owned = 0;
  EVP_MD_CTX *ctx = thread_ctx(&owned);
  unsigned int len = 0;
  int ok = ctx && EVP_DigestInit_ex(ctx, sha256(), NULL) == 1;
  for (unsigned i = 0; ok && i < n; i++) ok = EVP_DigestUpdate(ctx, pc[i].p, pc[i].n) == 1;
  if (!ok || EVP_DigestFinal_ex(ctx, out, &len) != 1) memset(out, 0, HPL__DIGEST_LEN);
  if (owned) EVP_MD_CTX_free(ctx);
}

static const char *const names[HPL__DIGEST_NALGOS] = {"off", "sha256", "fast"};

const char *hpl__digest_algo_name(int algo) {
  return algo >= 0 && algo < HPL__DIGEST_NALGOS ? names[algo] : "?";
}

int hpl__digest_algo_parse(const char *name, int *algo) {
  for (int i = 0; i < HPL__DIGEST_NALGOS; i++) {
    if (!strcmp(name, names[i])) {
      *algo = i;
      return 0;
    }
  }
  return -1;
}

int hpl__digest_algo_on(int algo) {
  return algo == HPL__DIGEST_SHA256 || algo == HPL__DIGEST_FAST;
}

uint64_t hpl__digest_unit(uint64_t size) {
  if (size <= (4ull << 20)) return HPL__DIGEST_UNIT_MIN;
  if (size <= (8ull << 20)) return 2 * HPL__DIGEST_UNIT_MIN;
  return HPL__DIGEST_UNIT;
}

uint64_t hpl__digest_units(uint64_t size) {
  uint64_t unit = hpl__digest_unit(size);
  return size == 0 ? 1 : (size + unit - 1) / unit;
}

uint64_t hpl__digest_unit_of(uint64_t size, uint64_t off) { return off / hpl__digest_unit(size); }

void hpl__digest_unit_span(uint64_t size, uint64_t u, uint64_t *off, uint64_t *len) {
  uint64_t unit = hpl__digest_unit(size);
  uint64_t a = u * unit;
  if (a > size) a = size;
  uint64_t b = a + unit > size ? size : a + unit;
  *off = a;
  if (len) *len = b - a;
}

void hpl__digest_bytes(int algo, const void *p, size_t n, uint8_t out[HPL__DIGEST_LEN]) {
  memset(out, 0, HPL__DIGEST_LEN);
  if (algo == HPL__DIGEST_FAST) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(p, n));
    memcpy(out, c.digest, sizeof c.digest);
    return;
  }
  if (algo != HPL__DIGEST_SHA256) return;
  hpl__digest_piece one = {.p = p, .n = n};
  sha256_pieces(&one, 1, out);
}

void hpl__digest_pieces(int algo, const hpl__digest_piece *pc, unsigned n,
                        uint8_t out[HPL__DIGEST_LEN]) {
  if (n == 1) {
    hpl__digest_bytes(algo, pc[0].p, pc[0].n, out);
    return;
  }
  memset(out, 0, HPL__DIGEST_LEN);
  if (algo == HPL__DIGEST_FAST) {
    XXH3_state_t *st = XXH3_createState();
    if (!st || XXH3_128bits_reset(st) != XXH_OK) {
      XXH3_freeState(st); /* out stays zero: matches nothing real */
      return;
    }
    for (unsigned i = 0; i < n; i++) (void)XXH3_128bits_update(st, pc[i].p, pc[i].n);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    memcpy(out, c.digest, sizeof c.digest);
    XXH3_freeState(st);
    return;
  }
  if (algo != HPL__DIGEST_SHA256) return;
  sha256_pieces(pc, n, out);
}

unsigned hpl__digest_unit_pieces(uint64_t size, uint64_t u,
                                 const uint8_t *(*at)(void *arg, uint64_t pos, uint64_t *n),
                                 void *arg, hpl__digest_piece *pc, unsigned max) {
  static const uint8_t empty[1];
  uint64_t off, len;
  hpl__digest_unit_span(size, u, &off, &len);
  unsigned k = 0;
  while (len > 0) {
    uint64_t n = len;
    const uint8_t *p = at(arg, off, &n);
    if (!p || n == 0 || k == max) return 0;
    pc[k++] = (hpl__digest_piece){p, (size_t)n};
    off += n;
    len -= n;
  }
  if (k == 0 && max > 0) pc[k++] = (hpl__digest_piece){empty, 0};
  return k;
}

void hpl__digest_units_make(int algo, const uint8_t *data, uint64_t size, uint64_t u0,
                            uint64_t u1, uint8_t *list) {
  for (uint64_t u = u0; u < u1; u++) {
    uint64_t off, len;
    hpl__digest_unit_span(size, u, &off, &len);
    hpl__digest_bytes(algo, data + off, (size_t)len, list + u * HPL__DIGEST_LEN);
  }
}

void hpl__digest_root(int algo, const uint8_t *list, uint64_t nunits,
                      uint8_t out[HPL__DIGEST_LEN]) {
  hpl__digest_bytes(algo, list, (size_t)(nunits * HPL__DIGEST_LEN), out);
}

int hpl__digest_equal(const uint8_t *a, const uint8_t *b) {
  return CRYPTO_memcmp(a, b, HPL__DIGEST_LEN) == 0;
}

int hpl__digest_check_bytes(int algo, const uint8_t *list, size_t list_len, const uint8_t *data,
                            uint64_t size) {
  if (algo == HPL__DIGEST_OFF) return 1;
  uint64_t n = hpl__digest_units(size);
  if (!hpl__digest_algo_on(algo) || list_len != n * HPL__DIGEST_LEN) return 0;
  for (uint64_t u = 0; u < n; u++)
    if (!hpl__digest_check_unit(algo, data, size, u, list)) return 0;
  return 1;
}

int hpl__digest_check_unit(int algo, const uint8_t *data, uint64_t size, uint64_t u,
                           const uint8_t *list) {
  uint64_t off, len;
  uint8_t d[HPL__DIGEST_LEN];
  hpl__digest_unit_span(size, u, &off, &len);
  hpl__digest_bytes(algo, data + off, (size_t)len, d);
  return hpl__digest_equal(d, list + u * HPL__DIGEST_LEN);
}
