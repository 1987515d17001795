/* frame.c - frame header codec and incremental parser (see frame.h). */
#include "frame.h"

#include <endian.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "hoplite.h"

/* Little-endian fields, whatever the host: one load or store each once
 * compiled (the byte loops these replaced stayed loops: about 130
 * instructions per header, three headers per small request). */
static void put16(uint8_t *p, uint16_t v) {
  v = htole16(v);
  memcpy(p, &v, sizeof v);
}
static void put32(uint8_t *p, uint32_t v) {
  v = htole32(v);
  memcpy(p, &v, sizeof v);
}
static void put64(uint8_t *p, uint64_t v) {
  v = htole64(v);
  memcpy(p, &v, sizeof v);
}
static uint16_t get16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, sizeof v);
  return le16toh(v);
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return le32toh(v);
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return le64toh(v);
}

void hpl__frame_encode_hdr(const hpl__frame_hdr *h, uint8_t *out) {
  put32(out + 0, HPL__FRAME_MAGIC);
  put16(out + 4, HPL__FRAME_VERSION);
  put16(out + 6, h->type);
  put32(out + 8, h->flags);
  put32(out + 12, h->msg_len);
  put64(out + 16, h->req_id);
  put64(out + 24, h->payload_len);
}

int hpl__frame_decode_hdr(const uint8_t *buf, size_t len, const hpl__frame_limits *lim,
                         hpl__frame_hdr *out, const char **why) {
  const char *dummy;
  if (!why) why = &dummy;
  if (len < HPL__FRAME_HDR_LEN) return 1;
  hpl__frame_hdr h;
  h.magic = get32(buf + 0);
  h.version = get16(buf + 4);
  h.type = get16(buf + 6);
  h.flags = get32(buf + 8);
  h.msg_len = get32(buf + 12);
  h.req_id = get64(buf + 16);
  h.payload_len = get64(buf + 24);
  if (h.magic != HPL__FRAME_MAGIC) {
    *why = "bad magic";
    return HPL_EPROTO;
  }
  if (h.version != HPL__FRAME_VERSION) {
    *why = "unsupported protocol version";
    return HPL_EPROTO;
  }
  if (h.type == 0 || h.type > lim->max_type) {
    *why = "unknown message type";
    return HPL_EPROTO;
  }
  if (lim->tagged && !(h.flags & HPL__FRAME_F_TAG)) {
    *why = "frame without a MAC on a connection with a session (a peer without sessions?)";
    return HPL_EPROTO;
  }
  if (h.flags & ~(lim->tagged ? HPL__FRAME_F_TAG | HPL__FRAME_F_TAG_PAYLOAD | HPL__FRAME_F_SEALED
                               : 0u)) {
    *why = lim->tagged ? "unknown flags" : "unknown flags (a tagged frame without a session?)";
    return HPL_EPROTO;
  }
  if (h.msg_len > lim->max_msg) {
    *why = "message longer than this connection accepts";
    return HPL_ETOOBIG;
  }
  if (h.payload_len > lim->max_payload) {
    *why = "payload longer than this connection accepts";
    return HPL_ETOOBIG;
  }
  *out = h;
  return 0;
}

void hpl__framer_init(hpl__framer *f, const hpl__frame_limits *lim) {
  memset(f, 0, sizeof *f);
  f->lim = *lim;
}

void hpl__framer_free(hpl__framer *f) {
  free(f->msg);
  f->msg = NULL;
  f->mcap = 0;
}

void hpl__framer_tagged(hpl__framer *f) { f->lim.tagged = 1; }

uint64_t hpl__framer_payload_left(const hpl__framer *f) { return f->state == 2 ? f->pleft : 0; }

void hpl__framer_payload_skip(hpl__framer *f, uint64_t n) {
  if (f->state != 2) return;
  if (n > f->pleft) n = f->pleft;
  f->pleft -= n;
  if (f->pleft == 0) f->state = 0;
}

void hpl__framer_payload_unskip(hpl__framer *f, uint64_t n) {
  if (!n) return;
  f->pleft += n;
  f->state = 2;
}

long hpl__framer_feed(hpl__framer *f, const uint8_t *data, size_t len, int *ev,
                     const uint8_t **chunk, size_t *chunk_len) {
  size_t used = 0;
  *ev = HPL__FR_NONE;
  while (used < len || (f->state == 1 && f->mhave == f->hdr.msg_len)) {
    if (f->state == 0) {
      size_t take = HPL__FRAME_HDR_LEN - f->hhave;
      if (take > len - used) take = len - used;
      memcpy(f->hbuf + f->hhave, data + used, take);
      f->hhave += take;
      used += take;
      if (f->hhave < HPL__FRAME_HDR_LEN) break;
      int rc = hpl__frame_decode_hdr(f->hbuf, f->hhave, &f->lim, &f->hdr, &f->why);
      if (rc != 0) return rc < 0 ? rc : HPL_EPROTO;
      f->hhave = 0;
      f->mhave = 0;
      if (f->hdr.msg_len > f->mcap) {
        size_t cap = f->hdr.msg_len < 256 ? 256 : f->hdr.msg_len;
        uint8_t *m = realloc(f->msg, cap);
        if (!m) {
          f->why = "out of memory for message";
          return HPL_ENOMEM;
        }
        f->msg = m;
        f->mcap = cap;
      }
      f->state = 1;
    } else if (f->state == 1) {
      size_t take = f->hdr.msg_len - f->mhave;
      if (take > len - used) take = len - used;
      if (take) memcpy(f->msg + f->mhave, data + used, take);
      f->mhave += take;
      used += take;
      if (f->mhave < f->hdr.msg_len) break;
      if (f->hdr.flags & HPL__FRAME_F_TAG) {
        f->thave = 0;
        f->state = 3;
        continue;
      }
      f->pleft = f->hdr.payload_len;
      f->state = f->pleft ? 2 : 0;
      *ev = HPL__FR_MSG;
      return (long)used;
    } else if (f->state == 3) {
      size_t take = HPL__FRAME_TAG_LEN - f->thave;
      if (take > len - used) take = len - used;
      memcpy(f->tag + f->thave, data + used, take);
      f->thave += take;
      used += take;
      if (f->thave < HPL__FRAME_TAG_LEN) break;
      f->pleft = f->hdr.payload_len;
      f->state = f->pleft ? 2 : 0;
      *ev = HPL__FR_MSG;
      return (long)used;
    } else {
      size_t take = len - used;
      if (take > f->pleft) take = (size_t)f->pleft;
      *chunk = data + used;
      *chunk_len = take;
      f->pleft -= take;
      if (f->pleft == 0) f->state = 0;
      *ev = HPL__FR_PAYLOAD;
      return (long)(used + take);
    }
  }
  return (long)used;
}

/* ------------------------------------------------------------------ session MACs */

void hpl__fmac_init(hpl__fmac *m, const uint8_t key[HPL__FRAME_KEY_LEN]) {
  memset(m, 0, sizeof *m);
  memcpy(m->key, key, HPL__FRAME_KEY_LEN);
  m->on = 1;
}

/* A GMAC session's small-frame state: libsodium's precomputed AES-GCM key
 * (one call per frame) and the frame so far, while it fits. */
typedef struct gsmall {
  crypto_aead_aes256gcm_state st; /* first: its 16-byte alignment */
  uint8_t buf[HPL__FMAC_SMALL];
} gsmall;

void hpl__fmac_init_as(hpl__fmac *m, const uint8_t key[HPL__FRAME_KEY_LEN], int gmac) {
  hpl__fmac_init(m, key);
  if (!gmac) return;
  /* the key schedules once per connection; each frame only sets its nonce */
  EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
  gsmall *g = aligned_alloc(_Alignof(gsmall), sizeof(gsmall));
  if (x && g && EVP_EncryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, NULL) == 1 &&
      crypto_aead_aes256gcm_beforenm(&g->st, key) == 0) {
    m->gcm = x;
    m->small = g;
    return;
  }
  EVP_CIPHER_CTX_free(x);
  free(g);
  m->failed = 1; /* no memory: every frame fails its MAC, the connection ends */
}

void hpl__fmac_wipe(hpl__fmac *m) {
  EVP_CIPHER_CTX_free(m->gcm); /* OpenSSL clears the key schedule */
  if (m->small) {
    sodium_memzero(m->small, sizeof(gsmall));
    free(m->small);
  }
  sodium_memzero(m, sizeof *m);
}

/* GMAC of a frame: AES-256-GCM with no plaintext, the frame as associated
 * data, the nonce the 8-byte little-endian sequence number and 4 bytes of
 * 0xff (the key is not the sealing key anyway). A frame that fits
 * HPL__FMAC_SMALL is gathered and tagged with one libsodium call; a larger
 * one spills into OpenSSL's context, which takes the bytes as they come.
 * Both compute the same standard GCM tag. */
static void gmac_nonce(const hpl__fmac *m, uint8_t nonce[12]) {
  put64(nonce, m->seq);
  memset(nonce + 8, 0xff, 4);
}

static void gmac_stream(hpl__fmac *m, const void *p, size_t n) {
  while (n && !m->failed) { /* EVP takes int lengths */
    int step = n > (1u << 30) ? 1 << 30 : (int)n, out = 0;
    if (EVP_EncryptUpdate(m->gcm, NULL, &out, p, step) != 1) m->failed = 1;
    p = (const uint8_t *)p + step;
    n -= (size_t)step;
  }
}

static void gmac_add(hpl__fmac *m, const void *p, size_t n) {
  gsmall *g = m->small;
  if (!m->spilled && m->glen + n <= HPL__FMAC_SMALL) {
    if (n) memcpy(g->buf + m->glen, p, n);
    m->glen += n;
    return;
  }
  if (!m->spilled) { /* too large for one call: on with OpenSSL */
    uint8_t nonce[12];
    gmac_nonce(m, nonce);
    m->spilled = 1;
    if (EVP_EncryptInit_ex(m->gcm, NULL, NULL, NULL, nonce) != 1) m->failed = 1;
    gmac_stream(m, g->buf, m->glen);
  }
  gmac_stream(m, p, n);
}

/* The tag of ad[0..n) (at most HPL__FMAC_SMALL bytes) in one libsodium call. */
static void gmac_one(const hpl__fmac *m, const uint8_t *ad, size_t n,
                     uint8_t tag[HPL__FRAME_TAG_LEN]) {
  uint8_t nonce[12], none[16];
  unsigned long long tlen = 0;
  gmac_nonce(m, nonce);
  crypto_aead_aes256gcm_encrypt_detached_afternm(none, tag, &tlen, NULL, 0, ad, n, NULL, nonce,
                                                 &m->small->st);
}

static void gmac_final(hpl__fmac *m, uint8_t tag[HPL__FRAME_TAG_LEN]) {
  uint8_t none[16];
  int out = 0;
  if (!m->failed && !m->spilled) {
    gmac_one(m, m->small->buf, m->glen, tag);
    return;
  }
  if (m->failed || EVP_EncryptFinal_ex(m->gcm, none, &out) != 1 ||
      EVP_CIPHER_CTX_ctrl(m->gcm, EVP_CTRL_GCM_GET_TAG, HPL__FRAME_TAG_LEN, tag) != 1) {
    m->failed = 1;
    memset(tag, 0, HPL__FRAME_TAG_LEN);
  }
}

void hpl__fmac_head(const hpl__fmac *m, const hpl__frame_hdr *h,
                    uint8_t head[HPL__FMAC_HEAD_LEN]) {
  put64(head, m->seq);
  hpl__frame_encode_hdr(h, head + 8);
}

/* A new frame's MAC, nothing fed yet. */
static void fmac_start(hpl__fmac *m) {
  if (m->gcm) {
    m->glen = 0;
    m->spilled = 0;
  } else {
    crypto_generichash_init(&m->run, m->key, HPL__FRAME_KEY_LEN, HPL__FRAME_TAG_LEN);
  }
}

void hpl__fmac_add(hpl__fmac *m, const void *p, size_t n) {
  if (m->gcm) gmac_add(m, p, n);
  else if (n) crypto_generichash_update(&m->run, p, n);
}

void hpl__fmac_begin(hpl__fmac *m, const hpl__frame_hdr *h, const uint8_t *msg, size_t mlen) {
  uint8_t head[HPL__FMAC_HEAD_LEN];
  hpl__fmac_head(m, h, head);
  fmac_start(m);
  hpl__fmac_add(m, head, sizeof head);
  hpl__fmac_add(m, msg, mlen);
}

static void fmac_final(hpl__fmac *m, uint8_t tag[HPL__FRAME_TAG_LEN]) {
  if (m->gcm) gmac_final(m, tag);
  else crypto_generichash_final(&m->run, tag, HPL__FRAME_TAG_LEN);
}

void hpl__fmac_end(hpl__fmac *m, uint8_t tag[HPL__FRAME_TAG_LEN]) {
  fmac_final(m, tag);
  m->seq++;
}

/* A computed tag against the one that came; seq moves on. */
static int fmac_compare(hpl__fmac *m, const uint8_t want[HPL__FRAME_TAG_LEN],
                        const uint8_t tag[HPL__FRAME_TAG_LEN]) {
  m->seq++;
  if (m->failed) return HPL_EAUTH;
  return sodium_memcmp(want, tag, HPL__FRAME_TAG_LEN) == 0 ? 0 : HPL_EAUTH;
}

int hpl__fmac_check(hpl__fmac *m, const uint8_t tag[HPL__FRAME_TAG_LEN]) {
  uint8_t want[HPL__FRAME_TAG_LEN];
  fmac_final(m, want);
  return fmac_compare(m, want, tag);
}

int hpl__fmac_check_span(hpl__fmac *m, const uint8_t *p, size_t n,
                         const uint8_t tag[HPL__FRAME_TAG_LEN]) {
  uint8_t want[HPL__FRAME_TAG_LEN];
  if (m->gcm && n <= HPL__FMAC_SMALL && !m->failed) {
    gmac_one(m, p, n, want); /* in place, not over a gathered copy */
  } else {
    fmac_start(m);
    hpl__fmac_add(m, p, n); /* a larger GMAC frame streams through OpenSSL */
    fmac_final(m, want);
  }
  return fmac_compare(m, want, tag);
}

/* ------------------------------------------------------------ sealing */

void hpl__fseal_init(hpl__fmac *m, int kind, const uint8_t key[HPL__FRAME_KEY_LEN]) {
  memcpy(m->skey, key, HPL__FRAME_KEY_LEN);
  m->seal = kind;
}

static void seal_nonce(uint8_t nonce[12], uint64_t seq, uint32_t idx) {
  put32(nonce, idx);
  for (int i = 0; i < 8; i++) nonce[4 + i] = (uint8_t)(seq >> (8 * i));
}

/* One AEAD encryption (detached tag) with the direction's algorithm. */
static void seal_enc(const hpl__fmac *m, const uint8_t nonce[12], const uint8_t *ad, size_t adlen,
                     const uint8_t *in, uint8_t *out, size_t n, uint8_t tag[HPL__FRAME_TAG_LEN]) {
  if (m->seal == HPL__SEAL_AES)
    crypto_aead_aes256gcm_encrypt_detached(out, tag, NULL, in, n, ad, adlen, NULL, nonce, m->skey);
  else
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(out, tag, NULL, in, n, ad, adlen, NULL,
                                                       nonce, m->skey);
}

static int seal_dec(const hpl__fmac *m, const uint8_t nonce[12], const uint8_t *ad, size_t adlen,
                    const uint8_t *in, uint8_t *out, size_t n, const uint8_t tag[HPL__FRAME_TAG_LEN]) {
  int r = m->seal == HPL__SEAL_AES
              ? crypto_aead_aes256gcm_decrypt_detached(out, NULL, in, n, tag, ad, adlen, nonce,
                                                       m->skey)
              : crypto_aead_chacha20poly1305_ietf_decrypt_detached(out, NULL, in, n, tag, ad,
                                                                   adlen, nonce, m->skey);
  return r == 0 ? 0 : HPL_EAUTH;
}

uint64_t hpl__fseal_frame(hpl__fmac *m, const hpl__frame_hdr *h, uint8_t *p, size_t n,
                          uint8_t tag[HPL__FRAME_TAG_LEN]) {
  uint8_t ad[HPL__FRAME_HDR_LEN], nonce[12];
  hpl__frame_encode_hdr(h, ad);
  uint64_t seq = m->seq++;
  seal_nonce(nonce, seq, 0);
  seal_enc(m, nonce, ad, sizeof ad, p, p, n, tag);
  return seq;
}

int hpl__fseal_open(hpl__fmac *m, const hpl__frame_hdr *h, uint8_t *p, size_t n,
                    const uint8_t tag[HPL__FRAME_TAG_LEN], uint64_t *seq) {
  uint8_t ad[HPL__FRAME_HDR_LEN], nonce[12];
  hpl__frame_encode_hdr(h, ad);
  uint64_t s = m->seq++;
  if (seq) *seq = s;
  seal_nonce(nonce, s, 0);
  return seal_dec(m, nonce, ad, sizeof ad, p, p, n, tag);
}

void hpl__fseal_record(const hpl__fmac *m, uint64_t seq, uint32_t idx, const uint8_t *in,
                       uint8_t *out, size_t n, uint8_t tag[HPL__FRAME_TAG_LEN]) {
  uint8_t ad[HPL__FRAME_REC_HDR], nonce[12];
  put32(ad, (uint32_t)n);
  seal_nonce(nonce, seq, idx);
  seal_enc(m, nonce, ad, sizeof ad, in, out, n, tag);
}

int hpl__fseal_record_open(const hpl__fmac *m, uint64_t seq, uint32_t idx, const uint8_t *in,
                           uint8_t *out, size_t n, const uint8_t tag[HPL__FRAME_TAG_LEN]) {
  uint8_t ad[HPL__FRAME_REC_HDR], nonce[12];
  put32(ad, (uint32_t)n);
  seal_nonce(nonce, seq, idx);
  return seal_dec(m, nonce, ad, sizeof ad, in, out, n, tag);
}
