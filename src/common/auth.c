/* auth.c - cluster secret and connection handshake (see auth.h). */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hoplite.h"

/* 2: frames after the handshake carry MACs; 3: and the flags (encryption)
 * enter the handshake's MACs (auth.h) */
#define AUTH_VERSION 3
#define AUTH_FLAGS_KNOWN (HPL__AUTH_F_ENCRYPT | HPL__AUTH_F_AES)
static const uint8_t magic_hello[4] = {'H', 'P', 'L', 'A'};
static const uint8_t magic_chal[4] = {'H', 'P', 'L', 'a'};

static int sodium_ready(void) { return sodium_init() >= 0; }

int hpl__auth_load(const char *path, hpl__auth *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(err, errlen, "cannot read the secret file %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return HPL_ESYS;
  }
  if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
    close(fd);
    snprintf(err, errlen, "the secret file %s must be a regular file readable by its owner only "
             "(chmod 600)", path);
    return HPL_EINVAL;
  }
  char buf[130];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) {
    snprintf(err, errlen, "cannot read the secret file %s: %s", path, strerror(errno));
    return HPL_ESYS;
  }
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
  buf[n] = 0;
  size_t bin = 0;
  if (!sodium_ready() || n != 2 * HPL__AUTH_KEY_LEN ||
      sodium_hex2bin(out->key, sizeof out->key, buf, (size_t)n, NULL, &bin, NULL) != 0 ||
      bin != HPL__AUTH_KEY_LEN) {
    sodium_memzero(buf, sizeof buf);
    snprintf(err, errlen, "the secret file %s must hold %d hex digits (256 bits); make one with "
             "`hoplite secret FILE`", path, 2 * HPL__AUTH_KEY_LEN);
    return HPL_EINVAL;
  }
  sodium_memzero(buf, sizeof buf);
  out->on = 1;
  return 0;
}

int hpl__auth_create(const char *path, char *err, size_t errlen) {
  if (!sodium_ready()) {
    snprintf(err, errlen, "libsodium cannot start");
    return HPL_ESYS;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create the secret file %s: %s", path, strerror(errno));
    return errno == EEXIST ? HPL_EEXIST : HPL_ESYS;
  }
  uint8_t key[HPL__AUTH_KEY_LEN];
  char hex[2 * HPL__AUTH_KEY_LEN + 2];
  randombytes_buf(key, sizeof key);
  sodium_bin2hex(hex, sizeof hex, key, sizeof key);
  size_t len = strlen(hex);
  hex[len++] = '\n';
  ssize_t w = write(fd, hex, len);
  sodium_memzero(key, sizeof key);
  sodium_memzero(hex, sizeof hex);
  if (w != (ssize_t)len || fsync(fd) != 0) {
    snprintf(err, errlen, "cannot write the secret file %s: %s", path, strerror(errno));
    close(fd);
    unlink(path);
    return HPL_ESYS;
  }
  close(fd);
  return 0;
}

void hpl__auth_role_key(const hpl__auth *a, int role, uint8_t out[HPL__AUTH_KEY_LEN]) {
  char label[32];
  int n = snprintf(label, sizeof label, "hoplite role %d", role);
  crypto_auth_hmacsha256(out, (const uint8_t *)label, (unsigned long long)n, a->key);
}

/* MAC(rk, label | nc | ns). */
static void hs_mac(const hpl__auth_hs *hs, const uint8_t rk[HPL__AUTH_KEY_LEN], const char *label,
                   uint8_t out[crypto_auth_hmacsha256_BYTES]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, rk, HPL__AUTH_KEY_LEN);
  crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
  crypto_auth_hmacsha256_update(&st, hs->nc, sizeof hs->nc);
  crypto_auth_hmacsha256_update(&st, hs->ns, sizeof hs->ns);
  uint8_t flags[2] = {hs->fo, hs->fa};
  crypto_auth_hmacsha256_update(&st, flags, sizeof flags);
  crypto_auth_hmacsha256_final(&st, out);
  sodium_memzero(&st, sizeof st);
}

unsigned hpl__auth_flags(int encrypt) {
  unsigned f = encrypt ? HPL__AUTH_F_ENCRYPT : 0;
  if (sodium_ready() && crypto_aead_aes256gcm_is_available()) f |= HPL__AUTH_F_AES;
  return f;
}

int hpl__auth_seal(const hpl__auth_hs *hs) {
  if (!((hs->fo | hs->fa) & HPL__AUTH_F_ENCRYPT)) return HPL__SEAL_NONE;
  return (hs->fo & hs->fa & HPL__AUTH_F_AES) ? HPL__SEAL_AES : HPL__SEAL_CHACHA;
}

void hpl__auth_open(hpl__auth_hs *hs, int role, unsigned flags,
                    uint8_t hello[HPL__AUTH_HELLO_LEN]) {
  memset(hs, 0, sizeof *hs);
  (void)sodium_ready();
  hs->role = role;
  hs->fo = (uint8_t)(flags & AUTH_FLAGS_KNOWN);
  randombytes_buf(hs->nc, sizeof hs->nc);
  memcpy(hello, magic_hello, 4);
  hello[4] = AUTH_VERSION;
  hello[5] = (uint8_t)role;
  hello[6] = hs->fo;
  hello[7] = 0;
  memcpy(hello + 8, hs->nc, sizeof hs->nc);
}

int hpl__auth_answer(hpl__auth_hs *hs, const uint8_t rk[HPL__AUTH_KEY_LEN],
                     const uint8_t challenge[HPL__AUTH_CHALLENGE_LEN],
                     uint8_t proof[HPL__AUTH_PROOF_LEN]) {
  if (memcmp(challenge, magic_chal, 4) != 0 || challenge[4] != AUTH_VERSION ||
      (challenge[5] & ~AUTH_FLAGS_KNOWN))
    return HPL_EAUTH;
  hs->fa = challenge[5];
  memcpy(hs->ns, challenge + 8, sizeof hs->ns);
  uint8_t want[crypto_auth_hmacsha256_BYTES];
  hs_mac(hs, rk, "acceptor", want);
  int ok = sodium_memcmp(want, challenge + 8 + HPL__AUTH_NONCE_LEN, sizeof want) == 0;
  if (ok) hs_mac(hs, rk, "opener", proof);
  sodium_memzero(want, sizeof want);
  return ok ? 0 : HPL_EAUTH;
}

int hpl__auth_accept(hpl__auth_hs *hs, const hpl__auth *a, unsigned roles,
                     const uint8_t hello[HPL__AUTH_HELLO_LEN],
                     uint8_t challenge[HPL__AUTH_CHALLENGE_LEN]) {
  memset(hs, 0, sizeof *hs);
  int role = hello[5];
  if (!a->on || memcmp(hello, magic_hello, 4) != 0 || hello[4] != AUTH_VERSION || role < 1 ||
      role > 31 || !(roles & (1u << role)) || (hello[6] & ~AUTH_FLAGS_KNOWN) || hello[7] ||
      !sodium_ready())
    return HPL_EAUTH;
  hs->role = role;
  hs->fo = hello[6];
  hs->fa = (uint8_t)hpl__auth_flags(a->encrypt);
  memcpy(hs->nc, hello + 8, sizeof hs->nc);
  randombytes_buf(hs->ns, sizeof hs->ns);
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_role_key(a, role, rk);
  memcpy(challenge, magic_chal, 4);
  challenge[4] = AUTH_VERSION;
  challenge[5] = hs->fa;
  challenge[6] = challenge[7] = 0;
  memcpy(challenge + 8, hs->ns, sizeof hs->ns);
  hs_mac(hs, rk, "acceptor", challenge + 8 + HPL__AUTH_NONCE_LEN);
  sodium_memzero(rk, sizeof rk);
  return 0;
}

int hpl__auth_verify(const hpl__auth_hs *hs, const hpl__auth *a,
                     const uint8_t proof[HPL__AUTH_PROOF_LEN]) {
  uint8_t rk[HPL__AUTH_KEY_LEN], want[crypto_auth_hmacsha256_BYTES];
  hpl__auth_role_key(a, hs->role, rk);
  hs_mac(hs, rk, "opener", want);
  int ok = sodium_memcmp(want, proof, sizeof want) == 0;
  sodium_memzero(rk, sizeof rk);
  sodium_memzero(want, sizeof want);
  return ok ? 0 : HPL_EAUTH;
}

/* HKDF-Expand with one output block: HMAC(prk, info | 0x01). */
static void hkdf_expand1(const uint8_t prk[crypto_auth_hmacsha256_BYTES], const char *info,
                         uint8_t out[HPL__AUTH_KEY_LEN]) {
  static const uint8_t one = 1;
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, prk, crypto_auth_hmacsha256_BYTES);
  crypto_auth_hmacsha256_update(&st, (const uint8_t *)info, strlen(info));
  crypto_auth_hmacsha256_update(&st, &one, 1);
  crypto_auth_hmacsha256_final(&st, out);
  sodium_memzero(&st, sizeof st);
}

void hpl__auth_session(const hpl__auth_hs *hs, const uint8_t rk[HPL__AUTH_KEY_LEN], int opener,
                       hpl__auth_keys *out) {
  uint8_t salt[2 * HPL__AUTH_NONCE_LEN], prk[crypto_auth_hmacsha256_BYTES];
  memcpy(salt, hs->nc, HPL__AUTH_NONCE_LEN);
  memcpy(salt + HPL__AUTH_NONCE_LEN, hs->ns, HPL__AUTH_NONCE_LEN);
  crypto_auth_hmacsha256_state st; /* HKDF-Extract: HMAC(salt, IKM = rk) */
  crypto_auth_hmacsha256_init(&st, salt, sizeof salt);
  crypto_auth_hmacsha256_update(&st, rk, HPL__AUTH_KEY_LEN);
  crypto_auth_hmacsha256_final(&st, prk);
  hkdf_expand1(prk, "hoplite v2 opener->acceptor", opener ? out->send : out->recv);
  hkdf_expand1(prk, "hoplite v2 acceptor->opener", opener ? out->recv : out->send);
  hkdf_expand1(prk, "hoplite v3 aead opener->acceptor", opener ? out->seal_send : out->seal_recv);
  hkdf_expand1(prk, "hoplite v3 aead acceptor->opener", opener ? out->seal_recv : out->seal_send);
  sodium_memzero(&st, sizeof st);
  sodium_memzero(prk, sizeof prk);
}
