/*
 * auth.h - the cluster secret and the handshake that opens every TCP
 * connection of an authenticated cluster (store<->directory,
 * client<->directory, store<->store). Pure: fed bytes, never touches a
 * socket; the MAC is HMAC-SHA256 from libsodium.
 *
 * The handshake, before any frame:
 *   1. opener -> acceptor  HELLO     "HPLA", version 4, role, flags Fo, a
 *                                    zero byte, 32-byte nonce Nc, and the
 *                                    name the opener speaks for (64 bytes,
 *                                    NUL-padded; all zero for DATA, ADMIN)
 *                                                                   (104 bytes)
 *   2. acceptor -> opener  CHALLENGE "HPLa", version 4, flags Fa, 2 zero
 *                                    bytes, 32-byte nonce Ns,
 *                                    MAC(Kr, "acceptor" | Nc | Ns | Fo | Fa | role | name)
 *                                                                    (72 bytes)
 *   3. opener -> acceptor  PROOF     MAC(Kr, "opener" | Nc | Ns | Fo | Fa | role | name)
 *                                                                    (32 bytes)
 * Flags (version 3 on): HPL__AUTH_F_ENCRYPT this end asks for encryption
 * (--encrypt), HPL__AUTH_F_AES this end has AES-256-GCM in hardware. Both
 * enter both MACs, so a relay that clears a bit fails the handshake rather
 * than downgrading it. The connection is sealed (frame.h, HPL__FRAME_F_SEALED)
 * when either end asks; with AES-256-GCM when both have it, else
 * ChaCha20-Poly1305 IETF (hpl__auth_seal).
 *
 * Kr is the key of the role (and name) the opener claims, derived from the
 * cluster secret S with HMAC-SHA256 (version 4: keys per node):
 *   NODE   (a store's directory link)      K_node(N) = HMAC(S, "hoplite node " N)
 *   READER (a local client of node N)      HMAC(K_node(N), "hoplite reader")
 *   DATA   (store <-> store data ports)    HMAC(S, "hoplite role data")
 *   ADMIN  (the CLI holding the secret)    HMAC(S, "hoplite role admin")
 * A store is given a node credential (hpl__auth_write_node: its name,
 * K_node and the DATA key, `hoplite secret --node`), never the secret: it
 * can prove its own name to the directory and hand its clients their
 * READER key, but cannot be another node; the directory, holding S,
 * derives the key of whatever name a HELLO claims. A store given the whole
 * secret derives its own credential (hpl__auth_bind). The name the
 * acceptor checked is the connection's (hs->name): the directory binds it
 * to the node that registers and to what a reader may publish.
 * Both nonces are fresh random bytes, so a
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
 * acceptor sends (frame.h: HPL__FRAME_F_TAG, hpl__fmac): GMAC (AES-256-GCM
 * with no plaintext) when both ends' flags say they have AES in hardware,
 * else keyed BLAKE2b (hpl__auth_keys.gmac). Fresh nonces make
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
#define HPL__AUTH_NAME_MAX 63 /* bytes of a node name (HELLO carries 64, NUL-padded) */
#define HPL__AUTH_HELLO_LEN 104
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
  int gmac; /* both ends have AES in hardware (HPL__AUTH_F_AES): frames carry GMAC
               tags instead of BLAKE2b (frame.h, hpl__fmac_init_as) */
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
  HPL__ROLE_NODE = 1,   /* a store's directory link, as node `name` */
  HPL__ROLE_READER = 2, /* a local client of node `name`: direct reads, PUBLISH */
  HPL__ROLE_DATA = 3,   /* a store's data-port connection to another store */
  HPL__ROLE_ADMIN = 4,  /* a tool holding the cluster secret (`hoplite --admin`) */
};

/* What one end holds: the cluster secret, a node credential, or nothing. */
typedef struct hpl__auth {
  int on;                              /* 0: no secret, no handshake */
  int has_secret;                      /* key holds the cluster secret: every key derives */
  uint8_t key[HPL__AUTH_KEY_LEN];      /* the secret itself (has_secret) */
  char name[HPL__AUTH_NAME_MAX + 1];   /* the node this end is ("" : none bound yet) */
  uint8_t node_key[HPL__AUTH_KEY_LEN]; /* K_node(name), when name is set */
  uint8_t data_key[HPL__AUTH_KEY_LEN]; /* the DATA role's key */
  uint8_t metrics_key[HPL__AUTH_KEY_LEN]; /* the /metrics token's bytes (metrics.h):
                                             BLAKE2b(key = secret, "hoplite metrics token v1") */
  int encrypt;                         /* --encrypt: ask every connection to be sealed */
} hpl__auth;

/* One handshake in progress. */
typedef struct hpl__auth_hs {
  int role;
  char name[HPL__AUTH_NAME_MAX + 1]; /* the name the opener claims ("" for DATA, ADMIN) */
  uint8_t nc[HPL__AUTH_NONCE_LEN], ns[HPL__AUTH_NONCE_LEN];
  uint8_t fo, fa; /* the opener's and the acceptor's flags (HPL__AUTH_F_*) */
} hpl__auth_hs;

/* Read a secret file: 64 hex digits (256 bits), optional trailing newline;
 * or a node credential (hpl__auth_write_node), which binds out->name. The
 * file must not be readable by group or others. Returns 0, or HPL_EINVAL /
 * HPL_ESYS with a message in err. */
int hpl__auth_load(const char *path, hpl__auth *out, char *err, size_t errlen);

/* Is `name` a node name a credential may carry: 1-63 bytes of letters,
 * digits and "._:-". Pure. */
int hpl__auth_name_ok(const char *name);

/* Make `a` speak for node `name`: with the secret, derive its node key;
 * with a credential, check that it is the credential's name (an empty
 * `name` takes the credential's). 0, or HPL_EINVAL (a bad name) /
 * HPL_EAUTH (another node's credential) with a message in err. */
int hpl__auth_bind(hpl__auth *a, const char *name, char *err, size_t errlen);

/* Write the credential of node `name` (derived from the secret in `a`) to
 * `path` (created 0600, must not exist). 0, or HPL_EINVAL (no secret in
 * `a`, a bad name) / HPL_EEXIST / HPL_ESYS with a message in err. */
int hpl__auth_write_node(const hpl__auth *a, const char *name, const char *path, char *err,
                         size_t errlen);

/* Write a new random secret to `path` (created with mode 0600, must not
 * exist). Returns 0 or HPL_ESYS / HPL_EEXIST with a message in err. */
int hpl__auth_create(const char *path, char *err, size_t errlen);

/* The key of `role` for node `name` (NODE, READER; ignored for the others)
 * as this end can derive it: anything with the secret; with a credential
 * only its own node's keys and DATA. 0, or HPL_EAUTH (this end cannot; out
 * is zeroed). */
int hpl__auth_key(const hpl__auth *a, int role, const char *name, uint8_t out[HPL__AUTH_KEY_LEN]);

/* hpl__auth_key for this end's own name (a->name). */
int hpl__auth_role_key(const hpl__auth *a, int role, uint8_t out[HPL__AUTH_KEY_LEN]);

/* The flags this end sends: HPL__AUTH_F_ENCRYPT when `encrypt`, and
 * HPL__AUTH_F_AES when the CPU has AES-256-GCM (libsodium says so). */
unsigned hpl__auth_flags(int encrypt);

/* Opener: start a handshake claiming `role` as node `name` (NODE, READER;
 * NULL or "" for the others; cut at HPL__AUTH_NAME_MAX) with `flags`
 * (hpl__auth_flags); writes HELLO. */
void hpl__auth_open(hpl__auth_hs *hs, int role, const char *name, unsigned flags,
                    uint8_t hello[HPL__AUTH_HELLO_LEN]);
/* Opener: check the CHALLENGE with key `rk` (the role's key, from
 * hpl__auth_role_key); on success write the PROOF. 0 or HPL_EAUTH. */
int hpl__auth_answer(hpl__auth_hs *hs, const uint8_t rk[HPL__AUTH_KEY_LEN],
                     const uint8_t challenge[HPL__AUTH_CHALLENGE_LEN],
                     uint8_t proof[HPL__AUTH_PROOF_LEN]);

/* Acceptor: check HELLO (magic, version, a role among `roles`, a bit mask
 * of 1 << role, known flags, a valid name for NODE and READER and none for
 * the others, a key this end can derive) and write the CHALLENGE with this
 * end's flags (hpl__auth_flags(a->encrypt)). 0 or HPL_EAUTH. */
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
