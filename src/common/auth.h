/*
 * auth.h - the cluster secret and the handshake that opens every TCP
 * connection of an authenticated cluster (store<->directory,
 * client<->directory, store<->store). Pure: fed bytes, never touches a
 * socket; the MAC is HMAC-SHA256 from libsodium.
 *
 * The handshake, before any frame:
 *   1. opener -> acceptor  HELLO     "HPLA", version 3, role, flags Fo, a
 *                                    zero byte, 32-byte nonce Nc     (40 bytes)
 *   2. acceptor -> opener  CHALLENGE "HPLa", version 3, flags Fa, 2 zero
 *                                    bytes, 32-byte nonce Ns,
 *                                    MAC(Kr, "acceptor" | Nc | Ns | Fo | Fa)
 *                                                                    (72 bytes)
 *   3. opener -> acceptor  PROOF     MAC(Kr, "opener" | Nc | Ns | Fo | Fa)
 *                                                                    (32 bytes)
 * Flags (version 3): HPL__AUTH_F_ENCRYPT this end asks for encryption
 * (--encrypt), HPL__AUTH_F_AES this end has AES-256-GCM in hardware. Both
 * enter both MACs, so a relay that clears a bit fails the handshake rather
 * than downgrading it. The connection is sealed (frame.h, HPL__FRAME_F_SEALED)
 * when either end asks; with AES-256-GCM when both have it, else
 * ChaCha20-Poly1305 IETF (hpl__auth_seal).
 * Kr = HMAC-SHA256(secret, "hoplite role " ROLE) is the key of the role the
 * opener claims, so a key handed to local clients for direct reads (role
 * READER) cannot register a store. Both nonces are fresh random bytes, so a
 * recorded handshake cannot be replayed, and the two directions use
 * different labels, so a MAC cannot be reflected. The opener checks the
 * acceptor's MAC before it sends anything else; the acceptor reads nothing
 * but the PROOF until it has checked it.
 *
 * Sessions (version 2; a version-1 peer fails the handshake: "no hoplite
 * handshake"). Once the handshake succeeded both ends derive two session
 * keys from Kr and both nonces (hpl__auth_session), HKDF (RFC 5869) with
 * libsodium's HMAC-SHA256:
 *   PRK  = HMAC-SHA256(key = Nc | Ns, Kr)                       (extract)
 *   K_oa = HMAC-SHA256(PRK, "hoplite v2 opener->acceptor" | 0x01)  (expand)
 *   K_ao = HMAC-SHA256(PRK, "hoplite v2 acceptor->opener" | 0x01)
 * and, on a sealed connection, the AEAD keys of the two directions:
 *   E_oa = HMAC-SHA256(PRK, "hoplite v3 aead opener->acceptor" | 0x01)
 *   E_ao = HMAC-SHA256(PRK, "hoplite v3 aead acceptor->opener" | 0x01)
 * K_oa keys the MAC of every frame the opener sends, K_ao of every frame the
 * acceptor sends (frame.h: HPL__FRAME_F_TAG, hpl__fmac). Fresh nonces make
 * the keys fresh per connection, so frames recorded on one connection mean
 * nothing on another, and the two directions never share a key (a frame
 * cannot be reflected back to its sender). Version 2 means "frames after
 * the handshake carry tags": there is no way to turn them off once a secret
 * is configured.
 *
 * Callers: src/server/uvconn.c (servers and the store's outgoing connections),
 * src/client/cdirect.c (clients' direct reads), the servers' main (loading).
 */
#ifndef HPL_AUTH_H
#define HPL_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define HPL__AUTH_KEY_LEN 32
#define HPL__AUTH_NONCE_LEN 32
#define HPL__AUTH_HELLO_LEN 40
#define HPL__AUTH_CHALLENGE_LEN 72
#define HPL__AUTH_PROOF_LEN 32
/* How long a handshake may take before the connection is closed. */
#define HPL__AUTH_TIMEOUT_MS 2000

/* The two keys of one end of a session (hpl__auth_session). */
typedef struct hpl__auth_keys {
  uint8_t send[HPL__AUTH_KEY_LEN]; /* keys the MACs of the frames this end sends */
  uint8_t recv[HPL__AUTH_KEY_LEN]; /* ... and of the frames it receives */
  uint8_t seal_send[HPL__AUTH_KEY_LEN]; /* AEAD key of what this end sends (sealed) */
  uint8_t seal_recv[HPL__AUTH_KEY_LEN]; /* ... and of what it receives */
} hpl__auth_keys;

/* Handshake flags (HELLO byte 6, CHALLENGE byte 5). */
#define HPL__AUTH_F_ENCRYPT 0x1u /* this end asks for encryption */
#define HPL__AUTH_F_AES 0x2u     /* this end has AES-256-GCM in hardware */
/* What a connection's handshake settled (hpl__auth_seal). */
enum {
  HPL__SEAL_NONE = 0,   /* frames tagged (BLAKE2b), not encrypted */
  HPL__SEAL_CHACHA = 1, /* sealed with ChaCha20-Poly1305 IETF */
  HPL__SEAL_AES = 2,    /* sealed with AES-256-GCM */
};

/* Roles a connection's opener may claim. */
enum {
  HPL__ROLE_STORE = 1,  /* a store (directory link, data port pulls) */
  HPL__ROLE_READER = 2, /* a local client's direct reads of small objects */
};

/* A cluster secret (or none). */
typedef struct hpl__auth {
  int on;                              /* 0: no secret, no handshake */
  uint8_t key[HPL__AUTH_KEY_LEN];      /* the secret itself */
  int encrypt;                         /* --encrypt: ask every connection to be sealed */
} hpl__auth;

/* One handshake in progress. */
typedef struct hpl__auth_hs {
  int role;
  uint8_t nc[HPL__AUTH_NONCE_LEN], ns[HPL__AUTH_NONCE_LEN];
  uint8_t fo, fa; /* the opener's and the acceptor's flags (HPL__AUTH_F_*) */
} hpl__auth_hs;

/* Read a secret file: 64 hex digits (256 bits), optional trailing newline.
 * The file must not be readable by group or others. Returns 0, or
 * HPL_EINVAL / HPL_ESYS with a message in err. */
int hpl__auth_load(const char *path, hpl__auth *out, char *err, size_t errlen);

/* Write a new random secret to `path` (created with mode 0600, must not
 * exist). Returns 0 or HPL_ESYS / HPL_EEXIST with a message in err. */
int hpl__auth_create(const char *path, char *err, size_t errlen);

/* The key of `role` derived from the secret (to hand to readers). */
void hpl__auth_role_key(const hpl__auth *a, int role, uint8_t out[HPL__AUTH_KEY_LEN]);

/* The flags this end sends: HPL__AUTH_F_ENCRYPT when `encrypt`, and
 * HPL__AUTH_F_AES when the CPU has AES-256-GCM (libsodium says so). */
unsigned hpl__auth_flags(int encrypt);

/* Opener: start a handshake claiming `role` with `flags` (hpl__auth_flags);
 * writes HELLO. */
void hpl__auth_open(hpl__auth_hs *hs, int role, unsigned flags,
                    uint8_t hello[HPL__AUTH_HELLO_LEN]);
/* Opener: check the CHALLENGE with key `rk` (the role's key, from
 * hpl__auth_role_key); on success write the PROOF. 0 or HPL_EAUTH. */
int hpl__auth_answer(hpl__auth_hs *hs, const uint8_t rk[HPL__AUTH_KEY_LEN],
                     const uint8_t challenge[HPL__AUTH_CHALLENGE_LEN],
                     uint8_t proof[HPL__AUTH_PROOF_LEN]);

/* Acceptor: check HELLO (magic, version, a role among `roles`, a bit mask
 * of 1 << role, known flags) and write the CHALLENGE with this end's flags
 * (hpl__auth_flags(a->encrypt)). 0 or HPL_EAUTH. */
int hpl__auth_accept(hpl__auth_hs *hs, const hpl__auth *a, unsigned roles,
                     const uint8_t hello[HPL__AUTH_HELLO_LEN],
                     uint8_t challenge[HPL__AUTH_CHALLENGE_LEN]);
/* Acceptor: check the PROOF. 0 or HPL_EAUTH. */
int hpl__auth_verify(const hpl__auth_hs *hs, const hpl__auth *a,
                     const uint8_t proof[HPL__AUTH_PROOF_LEN]);

/* After a successful handshake (either end: the opener after
 * hpl__auth_answer, the acceptor after hpl__auth_verify): the session keys
 * of this end, from the role key `rk` (hpl__auth_role_key of hs->role) and
 * both nonces in hs. `opener` is 1 on the opener's side, 0 on the
 * acceptor's; the opener's send key is the acceptor's recv key and the
 * other way round. Pure; the caller wipes *out (sodium_memzero) when done. */
void hpl__auth_session(const hpl__auth_hs *hs, const uint8_t rk[HPL__AUTH_KEY_LEN], int opener,
                       hpl__auth_keys *out);

/* After a successful handshake: how its frames are sealed (HPL__SEAL_*),
 * from both ends' flags in hs. Pure. */
int hpl__auth_seal(const hpl__auth_hs *hs);

#endif
