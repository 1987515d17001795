/* uvconn_hs.c - a framed connection's handshake (auth.h): the opener's
 * HELLO, the acceptor's CHALLENGE, the opener's PROOF, each checked with
 * the cluster's keys; until it is done nothing is framed and writes wait
 * (uvconn_write.c holds them). Its time limit is the connection's timer
 * (uvconn_read.c). */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "log.h"
#include "uvconn_int.h"

/* Send handshake bytes (copied), ahead of everything held. */
static void conn_send_raw(hpl__conn *c, const uint8_t *p, size_t len) {
  hpl__conn_wreq *w = calloc(1, sizeof *w);
  uint8_t *copy = malloc(len);
  if (!w || !copy) {
    free(w);
    free(copy);
    hpl__conn_close(c, HPL_ENOMEM);
    return;
  }
  memcpy(copy, p, len);
  w->owned = copy;
  uv_buf_t b = uv_buf_init((char *)copy, (unsigned)len);
  hpl__conn_submit_first(c, w, &b, 1);
}

/* The handshake's one transition function (hpl__conn_hs in uvconn_int.h). */
static void hs_set_state(hpl__conn *c, hpl__conn_hs to) {
  static const char *const names[] = {"open", "hello", "proof", "challenge"};
  HPL__LOG_DEBUG("conn '%s': handshake %s -> %s", c->label, names[c->hs], names[to]);
  c->hs = to;
}

void hpl__conn_hs_start(hpl__conn *c) {
  hpl__conn_timer_arm(c, HPL__AUTH_TIMEOUT_MS);
  if (c->o.auth_role) { /* we open: HELLO, then wait for the CHALLENGE */
    uint8_t hello[HPL__AUTH_HELLO_LEN];
    int named = c->o.auth_role == HPL__ROLE_NODE || c->o.auth_role == HPL__ROLE_READER;
    hpl__auth_open(&c->ahs, c->o.auth_role, named ? c->o.auth->name : NULL,
                   hpl__auth_flags(c->o.auth->encrypt), hello);
    conn_send_raw(c, hello, sizeof hello);
    hs_set_state(c, HPL__HS_CHAL);
    c->hswant = HPL__AUTH_CHALLENGE_LEN;
  } else {
    hs_set_state(c, HPL__HS_HELLO);
    c->hswant = HPL__AUTH_HELLO_LEN;
    hpl__conn_hs_join(c); /* an accepted connection: a handshake slot */
  }
}

static void conn_auth_failed(hpl__conn *c, const char *why) {
  hpl__conn_hs_failed(c, why);
  hpl__conn_close(c, HPL_EAUTH);
}

/* The handshake succeeded: the session's keys (auth.h), from here on every
 * frame both ways is tagged. */
static void conn_hs_done(hpl__conn *c) {
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_keys k;
  int opener = c->o.auth_role != 0;
  (void)hpl__auth_key(c->o.auth, c->ahs.role, c->ahs.name, rk); /* checked in the handshake */
  hpl__auth_session(&c->ahs, rk, opener, &k);
  hpl__fmac_init_as(&c->tx, k.send, k.gmac);
  hpl__fmac_init_as(&c->rx, k.recv, k.gmac);
  int seal = hpl__auth_seal(&c->ahs);
  if (seal) { /* --encrypt at either end: every frame sealed (frame.h) */
    hpl__fseal_init(&c->tx, seal, k.seal_send);
    hpl__fseal_init(&c->rx, seal, k.seal_recv);
    HPL__LOG_DEBUG("conn '%s': sealed with %s", c->label,
                   seal == HPL__SEAL_AES ? "AES-256-GCM" : "ChaCha20-Poly1305");
  }
  hpl__framer_tagged(&c->fr);
  sodium_memzero(rk, sizeof rk);
  sodium_memzero(&k, sizeof k);
  c->role = c->ahs.role;
  hpl__conn_hs_leave(c);
  hs_set_state(c, HPL__HS_OPEN);
  hpl__record_add(&c->rec, c->rbuf + c->rpos, c->rlen - c->rpos); /* frames behind it */
  c->hshave = c->hswant = 0;
  if (c->timer) uv_timer_stop(c->timer);
  hpl__conn_release_held(c);
}

/* A whole handshake message is in hsbuf: check it and answer. */
static void conn_hs_step(hpl__conn *c) {
  uint8_t out[HPL__AUTH_CHALLENGE_LEN], rk[HPL__AUTH_KEY_LEN];
  c->hshave = 0;
  switch (c->hs) {
    case HPL__HS_HELLO:
      if (hpl__auth_accept(&c->ahs, c->o.auth, c->o.auth_roles, c->hsbuf, out) != 0) {
        conn_auth_failed(c, "no hoplite handshake, or a role or node name this port does not "
                         "take");
        return;
      }
      conn_send_raw(c, out, HPL__AUTH_CHALLENGE_LEN);
      hs_set_state(c, HPL__HS_PROOF);
      c->hswant = HPL__AUTH_PROOF_LEN;
      return;
    case HPL__HS_PROOF:
      if (hpl__auth_verify(&c->ahs, c->o.auth, c->hsbuf) != 0) {
        conn_auth_failed(c, "the peer does not hold the cluster secret");
        return;
      }
      conn_hs_done(c);
      return;
    case HPL__HS_OPEN:
      return; /* not reached: bytes go to the handshake only before it ends */
    case HPL__HS_CHAL:
      if (hpl__auth_key(c->o.auth, c->ahs.role, c->ahs.name, rk) != 0 ||
          hpl__auth_answer(&c->ahs, rk, c->hsbuf, out) != 0) {
        conn_auth_failed(c, "the peer does not hold the cluster secret");
        return;
      }
      conn_send_raw(c, out, HPL__AUTH_PROOF_LEN);
      conn_hs_done(c);
      return;
  }
}

int hpl__conn_handshake(hpl__conn *c) {
  while (c->hs != HPL__HS_OPEN && c->rpos < c->rlen && !c->closing) {
    size_t n = c->hswant - c->hshave;
    if (n > c->rlen - c->rpos) n = c->rlen - c->rpos;
    memcpy(c->hsbuf + c->hshave, c->rbuf + c->rpos, n);
    c->hshave += n;
    c->rpos += n;
    if (c->hshave == c->hswant) conn_hs_step(c);
  }
  return c->hs == HPL__HS_OPEN && !c->closing;
}
