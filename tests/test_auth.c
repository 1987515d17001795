/* test_auth.c - the cluster secret and the connection handshake
 * (src/common/auth.c): a good handshake passes, and every way of getting it wrong
 * is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "hoplite.h"

static char dir[64];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/hpl-auth-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void secret(const char *name, hpl__auth *a) {
  char path[128], err[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  assert_int_equal(hpl__auth_create(path, err, sizeof err), 0);
  assert_int_equal(hpl__auth_load(path, a, err, sizeof err), 0);
  assert_true(a->on);
}

/* One handshake between an opener with key `ok` (the whole secret) and an
 * acceptor with `ak`. Returns 0 or where it failed: 1 accept, 2 answer,
 * 3 verify. */
static int handshake(const hpl__auth *ok, int role, const hpl__auth *ak, unsigned roles) {
  hpl__auth_hs o, a;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_key(ok, role, "n1", rk);
  hpl__auth_open(&o, role, "n1", 0, hello);
  if (hpl__auth_accept(&a, ak, roles, hello, chal) != 0) return 1;
  if (hpl__auth_answer(&o, rk, chal, proof) != 0) return 2;
  if (hpl__auth_verify(&a, ak, proof) != 0) return 3;
  return 0;
}

static void test_handshake(void **state) {
  (void)state;
  hpl__auth k1, k2;
  secret("k1", &k1);
  secret("k2", &k2);
  assert_memory_not_equal(k1.key, k2.key, sizeof k1.key);
  unsigned any = 1u << HPL__ROLE_NODE | 1u << HPL__ROLE_READER;
  assert_int_equal(handshake(&k1, HPL__ROLE_NODE, &k1, any), 0);
  assert_int_equal(handshake(&k1, HPL__ROLE_READER, &k1, any), 0);
  /* the wrong secret: the opener refuses the acceptor's MAC first */
  assert_int_equal(handshake(&k2, HPL__ROLE_NODE, &k1, any), 2);
  /* a role the acceptor does not take */
  assert_int_equal(handshake(&k1, HPL__ROLE_READER, &k1, 1u << HPL__ROLE_NODE), 1);
  /* an acceptor without a secret takes nobody */
  hpl__auth none = {0};
  assert_int_equal(handshake(&k1, HPL__ROLE_NODE, &none, any), 1);
}

/* Session keys (auth.h): fixed inputs give the HKDF values computed
 * independently (Python's hmac/hashlib); both ends of a handshake get
 * matching keys; the directions differ; another nonce or role key changes
 * them. */
static void test_session_keys(void **state) {
  (void)state;
  static const uint8_t want_oa[32] = {
      0x5a, 0x69, 0x53, 0x35, 0x0e, 0xb6, 0xbd, 0xb9, 0xf6, 0x3f, 0x22, 0x7e, 0xa2, 0x9d, 0x3d, 0xd8,
      0xe8, 0x35, 0x95, 0x15, 0x9b, 0xd2, 0x3a, 0x8a, 0x71, 0x6b, 0x3d, 0xd5, 0x59, 0xbe, 0xf7, 0xf3};
  static const uint8_t want_ao[32] = {
      0x4c, 0xf3, 0x42, 0xa6, 0x1d, 0x12, 0xae, 0x32, 0x47, 0x16, 0x70, 0x76, 0xec, 0xc2, 0x37, 0xb6,
      0x29, 0x0a, 0xe2, 0x5a, 0xb6, 0xfd, 0x7a, 0x7d, 0xcc, 0x49, 0x4f, 0xe1, 0xbc, 0x93, 0xa6, 0xef};
  hpl__auth_hs hs = {.role = HPL__ROLE_NODE};
  uint8_t rk[HPL__AUTH_KEY_LEN];
  memset(rk, 1, sizeof rk);
  memset(hs.nc, 2, sizeof hs.nc);
  memset(hs.ns, 3, sizeof hs.ns);
  hpl__auth_keys o, a, x;
  hpl__auth_session(&hs, rk, 1, &o);
  hpl__auth_session(&hs, rk, 0, &a);
  assert_memory_equal(o.send, want_oa, 32);
  assert_memory_equal(o.recv, want_ao, 32);
  assert_memory_equal(a.recv, o.send, 32); /* what one end sends, the other checks */
  assert_memory_equal(a.send, o.recv, 32);
  assert_memory_not_equal(o.send, o.recv, 32); /* the directions differ */
  hs.ns[31] ^= 1;                              /* another nonce */
  hpl__auth_session(&hs, rk, 1, &x);
  assert_memory_not_equal(x.send, o.send, 32);
  assert_memory_not_equal(x.recv, o.recv, 32);
  hs.ns[31] ^= 1;
  hs.nc[0] ^= 0x80;
  hpl__auth_session(&hs, rk, 1, &x);
  assert_memory_not_equal(x.send, o.send, 32);
  hs.nc[0] ^= 0x80;
  rk[5] ^= 4; /* another role key */
  hpl__auth_session(&hs, rk, 1, &x);
  assert_memory_not_equal(x.send, o.send, 32);

  /* a real handshake: both ends derive the same pair */
  hpl__auth k;
  secret("ks", &k);
  hpl__auth_hs ho, ha;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  hpl__auth_key(&k, HPL__ROLE_READER, "n1", rk);
  hpl__auth_open(&ho, HPL__ROLE_READER, "n1", 0, hello);
  assert_int_equal(hpl__auth_accept(&ha, &k, 1u << HPL__ROLE_READER, hello, chal), 0);
  assert_int_equal(hpl__auth_answer(&ho, rk, chal, proof), 0);
  assert_int_equal(hpl__auth_verify(&ha, &k, proof), 0);
  hpl__auth_session(&ho, rk, 1, &o);
  hpl__auth_session(&ha, rk, 0, &a);
  assert_memory_equal(o.send, a.recv, 32);
  assert_memory_equal(o.recv, a.send, 32);
}

/* A version-1 HELLO (a peer from before sessions) is refused (and so is
 * any other version than this one). */
static void test_old_version_refused(void **state) {
  (void)state;
  hpl__auth k;
  secret("kv", &k);
  hpl__auth_hs o, a;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN];
  hpl__auth_open(&o, HPL__ROLE_NODE, "n1", 0, hello);
  assert_int_equal(hello[4], 4);
  hello[4] = 1;
  assert_int_equal(hpl__auth_accept(&a, &k, 1u << HPL__ROLE_NODE, hello, chal), HPL_EAUTH);
}

/* A reader's key (handed to local clients) cannot pass as a store. */
static void test_role_keys(void **state) {
  (void)state;
  hpl__auth k;
  secret("k3", &k);
  uint8_t store_k[HPL__AUTH_KEY_LEN], reader_k[HPL__AUTH_KEY_LEN];
  hpl__auth_key(&k, HPL__ROLE_NODE, "n1", store_k);
  hpl__auth_key(&k, HPL__ROLE_READER, "n1", reader_k);
  assert_memory_not_equal(store_k, reader_k, sizeof store_k);
  hpl__auth_hs o, a;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  hpl__auth_open(&o, HPL__ROLE_NODE, "n1", 0, hello); /* claims store, holds only the reader key */
  assert_int_equal(hpl__auth_accept(&a, &k, 1u << HPL__ROLE_NODE, hello, chal), 0);
  assert_int_equal(hpl__auth_answer(&o, reader_k, chal, proof), HPL_EAUTH);
  /* and forging the proof with the reader key fails at the acceptor */
  memcpy(o.ns, chal + 8, HPL__AUTH_NONCE_LEN);
  memset(proof, 0, sizeof proof);
  assert_int_equal(hpl__auth_verify(&a, &k, proof), HPL_EAUTH);
}

/* Tampering with any byte of a message, replaying, or reflecting fails. */
static void test_tampering(void **state) {
  (void)state;
  hpl__auth k;
  secret("k4", &k);
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_key(&k, HPL__ROLE_NODE, "n1", rk);
  unsigned roles = 1u << HPL__ROLE_NODE;
  for (int i = 0; i < HPL__AUTH_CHALLENGE_LEN; i++) {
    hpl__auth_hs o, a;
    uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[32];
    hpl__auth_open(&o, HPL__ROLE_NODE, "n1", 0, hello);
    assert_int_equal(hpl__auth_accept(&a, &k, roles, hello, chal), 0);
    chal[i] ^= 0x40;
    /* the nonce bytes change what the MAC covers; every other byte is
     * checked directly: all must fail */
    if (i == 5 || i == 6 || i == 7) continue; /* reserved bytes, ignored by the opener */
    assert_int_equal(hpl__auth_answer(&o, rk, chal, proof), HPL_EAUTH);
  }
  for (int i = 0; i < HPL__AUTH_PROOF_LEN; i++) {
    hpl__auth_hs o, a;
    uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[32];
    hpl__auth_open(&o, HPL__ROLE_NODE, "n1", 0, hello);
    assert_int_equal(hpl__auth_accept(&a, &k, roles, hello, chal), 0);
    assert_int_equal(hpl__auth_answer(&o, rk, chal, proof), 0);
    proof[i] ^= 1;
    assert_int_equal(hpl__auth_verify(&a, &k, proof), HPL_EAUTH);
  }
  /* replay: a proof recorded from one handshake does not pass another
   * (the acceptor's nonce is fresh) */
  hpl__auth_hs o, a, a2;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], chal2[HPL__AUTH_CHALLENGE_LEN],
      proof[32];
  hpl__auth_open(&o, HPL__ROLE_NODE, "n1", 0, hello);
  assert_int_equal(hpl__auth_accept(&a, &k, roles, hello, chal), 0);
  assert_int_equal(hpl__auth_answer(&o, rk, chal, proof), 0);
  assert_int_equal(hpl__auth_verify(&a, &k, proof), 0);
  assert_int_equal(hpl__auth_accept(&a2, &k, roles, hello, chal2), 0);
  assert_memory_not_equal(chal, chal2, sizeof chal);
  assert_int_equal(hpl__auth_verify(&a2, &k, proof), HPL_EAUTH);
  /* reflection: the acceptor's own MAC sent back as a proof */
  assert_int_equal(hpl__auth_verify(&a2, &k, chal2 + 8 + HPL__AUTH_NONCE_LEN), HPL_EAUTH);
  /* a bad hello: wrong magic, version, reserved bytes */
  uint8_t bad[HPL__AUTH_HELLO_LEN];
  for (int i = 0; i < 8; i++) {
    if (i == 5) continue; /* the role, tested above */
    memcpy(bad, hello, sizeof bad);
    bad[i] ^= 0x10;
    assert_int_equal(hpl__auth_accept(&a2, &k, roles, bad, chal2), HPL_EAUTH);
  }
}

static void test_secret_files(void **state) {
  (void)state;
  char path[128], err[256];
  hpl__auth a;
  snprintf(path, sizeof path, "%s/k5", dir);
  assert_int_equal(hpl__auth_create(path, err, sizeof err), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  /* never overwritten */
  assert_int_equal(hpl__auth_create(path, err, sizeof err), HPL_EEXIST);
  /* readable by others: refused with a message saying so */
  chmod(path, 0644);
  assert_int_equal(hpl__auth_load(path, &a, err, sizeof err), HPL_EINVAL);
  assert_non_null(strstr(err, "chmod 600"));
  assert_false(a.on);
  /* too short, not hex */
  const char *bodies[] = {"abcd\n",
                          "zz"
                          "00000000000000000000000000000000000000000000000000000000000000",
                          ""};
  for (size_t i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/bad%zu", dir, i);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(bodies[i], f);
    fclose(f);
    chmod(path, 0600);
    assert_int_equal(hpl__auth_load(path, &a, err, sizeof err), HPL_EINVAL);
  }
  snprintf(path, sizeof path, "%s/missing", dir);
  assert_int_equal(hpl__auth_load(path, &a, err, sizeof err), HPL_ESYS);
}

/* Encryption is negotiated (auth.h, version 3): sealed when either end
 * asks, and a relay that clears the opener's or the acceptor's
 * HPL__AUTH_F_ENCRYPT bit fails the handshake instead of downgrading it. */
static int hs_flags(const hpl__auth *k, unsigned fo, int aenc, int clear_o, int clear_a,
                    int *seal_o, int *seal_a) {
  hpl__auth_hs o, a;
  hpl__auth ak = *k;
  ak.encrypt = aenc;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_key(k, HPL__ROLE_NODE, "n1", rk);
  hpl__auth_open(&o, HPL__ROLE_NODE, "n1", fo, hello);
  if (clear_o) hello[6] &= (uint8_t)~HPL__AUTH_F_ENCRYPT;
  if (hpl__auth_accept(&a, &ak, 1u << HPL__ROLE_NODE, hello, chal) != 0) return 1;
  if (clear_a) chal[5] &= (uint8_t)~HPL__AUTH_F_ENCRYPT;
  if (hpl__auth_answer(&o, rk, chal, proof) != 0) return 2;
  if (hpl__auth_verify(&a, &ak, proof) != 0) return 3;
  *seal_o = hpl__auth_seal(&o);
  *seal_a = hpl__auth_seal(&a);
  return 0;
}

static void test_encrypt_negotiated(void **state) {
  (void)state;
  hpl__auth k;
  secret("ke", &k);
  int so = -1, sa = -1;
  assert_int_equal(hs_flags(&k, hpl__auth_flags(0), 0, 0, 0, &so, &sa), 0);
  assert_int_equal(so, HPL__SEAL_NONE);
  assert_int_equal(sa, HPL__SEAL_NONE);
  assert_int_equal(hs_flags(&k, hpl__auth_flags(1), 0, 0, 0, &so, &sa), 0);
  assert_int_not_equal(so, HPL__SEAL_NONE);
  assert_int_equal(so, sa);
  assert_int_equal(hs_flags(&k, hpl__auth_flags(0), 1, 0, 0, &so, &sa), 0);
  assert_int_not_equal(so, HPL__SEAL_NONE);
  assert_int_equal(so, sa);
  /* an opener without AES hardware: ChaCha20-Poly1305 */
  assert_int_equal(hs_flags(&k, HPL__AUTH_F_ENCRYPT, 1, 0, 0, &so, &sa), 0);
  assert_int_equal(so, HPL__SEAL_CHACHA);
  assert_int_equal(sa, HPL__SEAL_CHACHA);
  /* downgrades fail: the acceptor's MAC (opener's bit), the opener's check */
  assert_int_equal(hs_flags(&k, hpl__auth_flags(1), 0, 1, 0, &so, &sa), 2);
  assert_int_equal(hs_flags(&k, hpl__auth_flags(0), 1, 0, 1, &so, &sa), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_handshake),
      cmocka_unit_test(test_role_keys),
      cmocka_unit_test(test_session_keys),
      cmocka_unit_test(test_old_version_refused),
      cmocka_unit_test(test_tampering),
      cmocka_unit_test(test_secret_files),
      cmocka_unit_test(test_encrypt_negotiated),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
