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
 * enter the handshake's MACs; 4: keys per node, HELLO names the node (auth.h) */
#define AUTH_VERSION 4
#define CRED_MAGIC "hoplite node credential v1"
#define AUTH_FLAGS_KNOWN (HPL__AUTH_F_ENCRYPT | HPL__AUTH_F_AES)
static const uint8_t magic_hello[4] = {'H', 'P', 'L', 'A'};
static const uint8_t magic_chal[4] = {'H', 'P', 'L', 'a'};

static int sodium_ready(void) { return sodium_init() >= 0; }

/* HMAC-SHA256(key, label | name). */
static void derive(const uint8_t key[HPL__AUTH_KEY_LEN], const char *label, const char *name,
                   uint8_t out[HPL__AUTH_KEY_LEN]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key, HPL__AUTH_KEY_LEN);
  crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
  if (name) crypto_auth_hmacsha256_update(&st, (const uint8_t *)name, strlen(name));
  crypto_auth_hmacsha256_final(&st, out);
  sodium_memzero(&st, sizeof st);
}

/* The keys every holder of the secret derives the same way. */
static void from_secret(hpl__auth *a) {
  derive(a->key, "hoplite role data", NULL, a->data_key);
  /* the /metrics token's bytes (metrics.h), so that a node credential
   * carries them and not the secret */
  static const char context[] = "hoplite metrics token v1";
  crypto_generichash(a->metrics_key, sizeof a->metrics_key, (const uint8_t *)context,
                     sizeof context - 1, a->key, sizeof a->key);
}

int hpl__auth_name_ok(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n < 1 || n > HPL__AUTH_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = name[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '.' || ch == '_' || ch == ':' || ch == '-'))
      return 0;
  }
  return 1;
}

/* One "WORD HEX64" line of a credential into out. 0 or -1. */
static int cred_key(char *line, const char *word, uint8_t out[HPL__AUTH_KEY_LEN]) {
  size_t wl = strlen(word), bin = 0;
  if (!line || strncmp(line, word, wl) != 0 || line[wl] != ' ') return -1;
  const char *hex = line + wl + 1;
  if (strlen(hex) != 2 * HPL__AUTH_KEY_LEN ||
      sodium_hex2bin(out, HPL__AUTH_KEY_LEN, hex, strlen(hex), NULL, &bin, NULL) != 0 ||
      bin != HPL__AUTH_KEY_LEN)
    return -1;
  return 0;
}

/* A node credential's text (hpl__auth_write_node) into out. 0 or -1. */
static int parse_cred(char *text, hpl__auth *out) {
  char *save = NULL, *line[5];
  for (int i = 0; i < 5; i++) {
    line[i] = strtok_r(i ? NULL : text, "\n", &save);
    if (line[i]) {
      size_t n = strlen(line[i]);
      if (n && line[i][n - 1] == '\r') line[i][n - 1] = 0;
    }
  }
  if (!line[0] || strcmp(line[0], CRED_MAGIC) != 0 || !line[1] || strncmp(line[1], "name ", 5) ||
      !hpl__auth_name_ok(line[1] + 5) || cred_key(line[2], "node", out->node_key) ||
      cred_key(line[3], "data", out->data_key) || cred_key(line[4], "metrics", out->metrics_key) ||
      strtok_r(NULL, "\n", &save))
    return -1;
  snprintf(out->name, sizeof out->name, "%s", line[1] + 5);
  return 0;
}

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
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) {
    snprintf(err, errlen, "cannot read the secret file %s: %s", path, strerror(errno));
    return HPL_ESYS;
  }
  buf[n] = 0;
  int rc = 0;
  if (!sodium_ready()) {
    snprintf(err, errlen, "libsodium cannot start");
    rc = HPL_ESYS;
  } else if (!strncmp(buf, CRED_MAGIC, strlen(CRED_MAGIC))) {
    if (parse_cred(buf, out) != 0) {
      snprintf(err, errlen, "the node credential %s is damaged; make it again with `hoplite "
               "secret --node NAME --secret SECRET FILE`", path);
      rc = HPL_EINVAL;
    }
  } else {
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
    buf[n] = 0;
    size_t bin = 0;
    if (n != 2 * HPL__AUTH_KEY_LEN ||
        sodium_hex2bin(out->key, sizeof out->key, buf, (size_t)n, NULL, &bin, NULL) != 0 ||
        bin != HPL__AUTH_KEY_LEN) {
      snprintf(err, errlen, "the secret file %s must hold %d hex digits (256 bits), or a node "
               "credential; make one with `hoplite secret FILE`", path, 2 * HPL__AUTH_KEY_LEN);
      rc = HPL_EINVAL;
    } else {
      out->has_secret = 1;
      from_secret(out);
    }
  }
  sodium_memzero(buf, sizeof buf);
  if (rc) {
    sodium_memzero(out, sizeof *out);
    return rc;
  }
  out->on = 1;
  return 0;
}

int hpl__auth_bind(hpl__auth *a, const char *name, char *err, size_t errlen) {
  if (!a->on) return 0;
  if (!a->has_secret) { /* a credential: its own name only */
    if (name && *name && strcmp(name, a->name) != 0) {
      snprintf(err, errlen, "the node credential is node '%s', not '%s': a store can be only "
               "the node its credential names (drop --name, or make a credential for '%s')",
               a->name, name, name);
      return HPL_EAUTH;
    }
    return 0;
  }
  if (!hpl__auth_name_ok(name)) {
    snprintf(err, errlen, "'%s' is no node name (1-%d letters, digits or ._:-)", name ? name : "",
             HPL__AUTH_NAME_MAX);
    return HPL_EINVAL;
  }
  snprintf(a->name, sizeof a->name, "%s", name);
  derive(a->key, "hoplite node ", name, a->node_key);
  return 0;
}

/* Write `len` bytes of `text` to a new 0600 file. 0 or HPL_ESYS/HPL_EEXIST. */
static int write_new(const char *path, const char *text, size_t len, const char *what, char *err,
                     size_t errlen) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create the %s file %s: %s", what, path, strerror(errno));
    return errno == EEXIST ? HPL_EEXIST : HPL_ESYS;
  }
  ssize_t w = write(fd, text, len);
  if (w != (ssize_t)len || fsync(fd) != 0) {
    snprintf(err, errlen, "cannot write the %s file %s: %s", what, path, strerror(errno));
    close(fd);
    unlink(path);
    return HPL_ESYS;
  }
  close(fd);
  return 0;
}

int hpl__auth_write_node(const hpl__auth *a, const char *name, const char *path, char *err,
                         size_t errlen) {
  if (!a->on || !a->has_secret) {
    snprintf(err, errlen, "a node credential is made from the cluster secret, not from another "
             "credential");
    return HPL_EINVAL;
  }
  hpl__auth n = *a;
  int rc = hpl__auth_bind(&n, name, err, errlen);
  if (rc) {
    sodium_memzero(&n, sizeof n);
    return rc;
  }
  char hk[3][2 * HPL__AUTH_KEY_LEN + 1], text[512];
  sodium_bin2hex(hk[0], sizeof hk[0], n.node_key, HPL__AUTH_KEY_LEN);
  sodium_bin2hex(hk[1], sizeof hk[1], n.data_key, HPL__AUTH_KEY_LEN);
  sodium_bin2hex(hk[2], sizeof hk[2], n.metrics_key, HPL__AUTH_KEY_LEN);
  int len = snprintf(text, sizeof text, CRED_MAGIC "\nname %s\nnode %s\ndata %s\nmetrics %s\n",
                     name, hk[0], hk[1], hk[2]);
  rc = write_new(path, text, (size_t)len, "credential", err, errlen);
  sodium_memzero(&n, sizeof n);
  sodium_memzero(hk, sizeof hk);
  sodium_memzero(text, sizeof text);
  return rc;
}

int hpl__auth_create(const char *path, char *err, size_t errlen) {
  if (!sodium_ready()) {
    snprintf(err, errlen, "libsodium cannot start");
    return HPL_ESYS;
  }
  uint8_t key[HPL__AUTH_KEY_LEN];
  char hex[2 * HPL__AUTH_KEY_LEN + 2];
  randombytes_buf(key, sizeof key);
  sodium_bin2hex(hex, sizeof hex, key, sizeof key);
  size_t len = strlen(hex);
  hex[len++] = '\n';
  int rc = write_new(path, hex, len, "secret", err, errlen);
  sodium_memzero(key, sizeof key);
  sodium_memzero(hex, sizeof hex);
  return rc;
}

int hpl__auth_key(const hpl__auth *a, int role, const char *name,
                 uint8_t out[HPL__AUTH_KEY_LEN]) {
  uint8_t nk[HPL__AUTH_KEY_LEN];
  switch (role) {
    case HPL__ROLE_DATA: memcpy(out, a->data_key, HPL__AUTH_KEY_LEN); return a->on ? 0 : HPL_EAUTH;
    case HPL__ROLE_ADMIN:
      if (!a->has_secret) break;
      derive(a->key, "hoplite role admin", NULL, out);
      return 0;
    case HPL__ROLE_NODE:
    case HPL__ROLE_READER:
      if (!hpl__auth_name_ok(name)) break;
      if (a->has_secret)
        derive(a->key, "hoplite node ", name, nk);
      else if (a->on && !strcmp(name, a->name))
        memcpy(nk, a->node_key, sizeof nk);
      else
        break;
      if (role == HPL__ROLE_NODE)
        memcpy(out, nk, HPL__AUTH_KEY_LEN);
      else
        derive(nk, "hoplite reader", NULL, out);
      sodium_memzero(nk, sizeof nk);
      return 0;
    default: break;
  }
  memset(out, 0, HPL__AUTH_KEY_LEN);
  return HPL_EAUTH;
}

int hpl__auth_role_key(const hpl__auth *a, int role, uint8_t out[HPL__AUTH_KEY_LEN]) {
  return hpl__auth_key(a, role, a->name, out);
}

/* MAC(rk, label | nc | ns | fo | fa | role | name). */
static void hs_mac(const hpl__auth_hs *hs, const uint8_t rk[HPL__AUTH_KEY_LEN], const char *label,
                   uint8_t out[crypto_auth_hmacsha256_BYTES]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, rk, HPL__AUTH_KEY_LEN);
  crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
  crypto_auth_hmacsha256_update(&st, hs->nc, sizeof hs->nc);
  crypto_auth_hmacsha256_update(&st, hs->ns, sizeof hs->ns);
  uint8_t flags[3] = {hs->fo, hs->fa, (uint8_t)hs->role};
  crypto_auth_hmacsha256_update(&st, flags, sizeof flags);
  uint8_t name[HPL__AUTH_NAME_MAX + 1] = {0};
  memcpy(name, hs->name, strlen(hs->name));
  crypto_auth_hmacsha256_update(&st, name, sizeof name);
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

void hpl__auth_open(hpl__auth_hs *hs, int role, const char *name, unsigned flags,
                    uint8_t hello[HPL__AUTH_HELLO_LEN]) {
  memset(hs, 0, sizeof *hs);
  (void)sodium_ready();
  hs->role = role;
  if (name) snprintf(hs->name, sizeof hs->name, "%s", name);
  hs->fo = (uint8_t)(flags & AUTH_FLAGS_KNOWN);
  randombytes_buf(hs->nc, sizeof hs->nc);
  memcpy(hello, magic_hello, 4);
  hello[4] = AUTH_VERSION;
  hello[5] = (uint8_t)role;
  hello[6] = hs->fo;
  hello[7] = 0;
  memcpy(hello + 8, hs->nc, sizeof hs->nc);
  memset(hello + 8 + HPL__AUTH_NONCE_LEN, 0, HPL__AUTH_NAME_MAX + 1);
  memcpy(hello + 8 + HPL__AUTH_NONCE_LEN, hs->name, strlen(hs->name));
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
  /* the name: NUL-padded, nothing after its end; required by NODE and
   * READER, none for the others */
  const uint8_t *nm = hello + 8 + HPL__AUTH_NONCE_LEN;
  size_t nl = strnlen((const char *)nm, HPL__AUTH_NAME_MAX + 1);
  if (nl > HPL__AUTH_NAME_MAX) return HPL_EAUTH;
  for (size_t i = nl; i <= HPL__AUTH_NAME_MAX; i++)
    if (nm[i]) return HPL_EAUTH;
  memcpy(hs->name, nm, nl);
  hs->name[nl] = 0;
  int named = role == HPL__ROLE_NODE || role == HPL__ROLE_READER;
  if (named ? !hpl__auth_name_ok(hs->name) : nl != 0) return HPL_EAUTH;
  uint8_t rk[HPL__AUTH_KEY_LEN];
  if (hpl__auth_key(a, role, hs->name, rk) != 0) return HPL_EAUTH;
  hs->role = role;
  hs->fo = hello[6];
  hs->fa = (uint8_t)hpl__auth_flags(a->encrypt);
  memcpy(hs->nc, hello + 8, sizeof hs->nc);
  randombytes_buf(hs->ns, sizeof hs->ns);
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
  if (hpl__auth_key(a, hs->role, hs->name, rk) != 0) return HPL_EAUTH;
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
  out->gmac = (hs->fo & hs->fa & HPL__AUTH_F_AES) != 0;
  sodium_memzero(&st, sizeof st);
  sodium_memzero(prk, sizeof prk);
}
