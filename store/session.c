/* session.c - a local client's session: references, holds, replies (see
 * session.h). */
#include "session.h"

#include <stdlib.h>

#include "hoplite.h"
#include "log.h"

hpl__stclient *hpl__session_new(hpl__store *s, hpl__conn *c, uint64_t id) {
  hpl__stclient *cl = calloc(1, sizeof *cl);
  if (!cl) return NULL;
  cl->s = s;
  cl->c = c;
  cl->id = id;
  cl->refs = 1; /* the connection's */
  return cl;
}

void hpl__session_ref(hpl__stclient *cl) { cl->refs++; }

void hpl__session_unref(hpl__stclient *cl) {
  if (--cl->refs == 0) free(cl);
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
}

void hpl__session_creq_done(hpl__creq *x) {
  hpl__session_unref(x->cl);
  x->cl = NULL;
}
