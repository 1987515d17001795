/* session.c - a local client's session: references, holds, replies (see
 * session.h). */
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hoplite.h"
#include "log.h"
#include "pool.h"

hpl__stclient *hpl__session_new(hpl__store *s, hpl__conn *c, uint64_t id) {
  hpl__stclient *cl = calloc(1, sizeof *cl);
  if (!cl) return NULL;
  cl->s = s;
  cl->c = c;
  cl->id = id;
  cl->refs = 1; /* the connection's */
  cl->chan = -1;
  cl->sent_gen = calloc(hpl__pool_nchunks(s->pool), sizeof *cl->sent_gen);
  if (!cl->sent_gen) {
    free(cl);
    return NULL;
  }
  return cl;
}

void hpl__session_ref(hpl__stclient *cl) { cl->refs++; }

void hpl__session_unref(hpl__stclient *cl) {
  if (--cl->refs) return;
  if (cl->chan >= 0) close(cl->chan);
  free(cl->sent_gen);
  free(cl);
}

/* Send the memfds of chunks ks[0..n) at their current generations on the
 * client's chunk channel, in one message that never blocks; the client has
 * them once it reads it. 0, or -1 (errno: the channel is full or gone). */
static int chunks_send(hpl__stclient *cl, const uint32_t *ks, uint32_t n) {
  const hpl__pool *p = cl->s->pool;
  uint32_t msg[1 + 2 * HPL__POOL_MAX_CHUNKS];
  int fds[HPL__POOL_MAX_CHUNKS];
  msg[0] = n;
  for (uint32_t i = 0; i < n; i++) {
    msg[1 + 2 * i] = ks[i];
    fds[i] = hpl__pool_chunk_fd(p, ks[i], &msg[2 + 2 * i]);
  }
  struct iovec iov = {.iov_base = msg, .iov_len = (1 + 2 * (size_t)n) * sizeof *msg};
  char cbuf[CMSG_SPACE(sizeof fds)];
  memset(cbuf, 0, sizeof cbuf);
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                      .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
  memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
  if (cl->chan < 0) {
    errno = ENOTCONN;
    return -1;
  }
  if (sendmsg(cl->chan, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) return -1;
  for (uint32_t i = 0; i < n; i++) cl->sent_gen[msg[1 + 2 * i]] = msg[2 + 2 * i];
  return 0;
}

int hpl__session_chunks(hpl__stclient *cl, uint64_t off, uint64_t size, uint32_t *gens,
                        size_t *ngens, char *detail, size_t dlen) {
  const hpl__pool *p = cl->s->pool;
  uint64_t chunk = hpl__pool_chunk(p);
  *ngens = 0;
  if (size == 0) return 0;
  size_t first = (size_t)(off / chunk), last = (size_t)((off + size - 1) / chunk);
  uint32_t ks[HPL__POOL_MAX_CHUNKS];
  uint32_t n = 0;
  for (size_t k = first; k <= last && k < hpl__pool_nchunks(p); k++) {
    uint32_t gen = hpl__pool_chunk_gen(p, k);
    gens[(*ngens)++] = gen;
    if (cl->sent_gen[k] != gen) ks[n++] = (uint32_t)k;
  }
  if (n == 0 || chunks_send(cl, ks, n) == 0) return 0;
  snprintf(detail, dlen, "cannot pass the pool's memory to client %llu (its chunk channel: %s)",
           (unsigned long long)cl->id, strerror(errno));
  return HPL_ESYS;
}

void hpl__session_chunk_renewed(hpl__stclient *cl, size_t k) {
  if (cl->closed || k >= hpl__pool_nchunks(cl->s->pool) || cl->sent_gen[k] == 0 ||
      cl->sent_gen[k] == hpl__pool_chunk_gen(cl->s->pool, k))
    return;
  uint32_t kk = (uint32_t)k;
  (void)chunks_send(cl, &kk, 1); /* full: its next GET there sends it */
}

void hpl__session_closed(hpl__stclient *cl) {
  hpl__store *s = cl->s;
  cl->closed = 1;
  cl->c = NULL;
  hpl__hold *h, *tmp;
  HASH_ITER(hh, cl->holds, h, tmp) {
    hpl__obj *o = hpl__obj_find_inst(s, h->inst);
    HASH_DEL(cl->holds, h);
    for (int i = 0; o && i < h->count; i++) hpl__obj_unref(s, o);
    free(h);
  }
  HPL__LOG_DEBUG("client %llu disconnected", (unsigned long long)cl->id);
  hpl__session_unref(cl);
}

void hpl__session_send(hpl__stclient *cl, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  if (!cl->closed) hpl__conn_send(cl->c, type, req, m, NULL, 0, 0, NULL, NULL);
}

void hpl__session_reply(hpl__stclient *cl, uint64_t req, int status, const char *detail) {
  if (!cl->closed) hpl__conn_reply(cl->c, req, status, detail);
}

int hpl__session_hold(hpl__stclient *cl, hpl__obj *o) {
  hpl__hold *h = NULL;
  HASH_FIND(hh, cl->holds, &o->inst, sizeof o->inst, h);
  if (!h) {
    if (!(h = calloc(1, sizeof *h))) return HPL_ENOMEM;
    h->inst = o->inst;
    HASH_ADD(hh, cl->holds, inst, sizeof h->inst, h);
  }
  h->count++;
  hpl__obj_ref(cl->s, o);
  return 0;
}

void hpl__session_release(hpl__stclient *cl, uint64_t inst) {
  hpl__hold *h = NULL;
  HASH_FIND(hh, cl->holds, &inst, sizeof inst, h);
  if (!h) return; /* unknown or already released: ignore */
  hpl__obj *o = hpl__obj_find_inst(cl->s, inst);
  if (--h->count == 0) {
    HASH_DEL(cl->holds, h);
    free(h);
  }
  if (o) hpl__obj_unref(cl->s, o);
}

void hpl__session_creq_init(hpl__creq *x, hpl__stclient *cl, uint64_t req) {
  x->cl = cl;
  x->req = req;
  hpl__session_ref(cl);
  if (++cl->npending >= HPL__SESSION_MAX_PENDING && !cl->closed && cl->c)
    hpl__conn_hold(cl->c, 1);
}

void hpl__session_creq_done(hpl__creq *x) {
  hpl__stclient *cl = x->cl;
  if (--cl->npending <= HPL__SESSION_MAX_PENDING / 2 && !cl->closed && cl->c)
    hpl__conn_hold(cl->c, 0);
  hpl__session_unref(x->cl);
  x->cl = NULL;
}
