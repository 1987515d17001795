/* session.c - a local client's session: references, holds, replies (see
 * session.h). */
#include "session.h"

#include <stdlib.h>

#include "hoplite.h"
#include "log.h"

st_client *session_new(store *s, hpl__conn *c, uint64_t id) {
  st_client *cl = calloc(1, sizeof *cl);
  if (!cl) return NULL;
  cl->s = s;
  cl->c = c;
  cl->id = id;
  cl->refs = 1; /* the connection's */
  return cl;
}

void session_ref(st_client *cl) { cl->refs++; }

void session_unref(st_client *cl) {
  if (--cl->refs == 0) free(cl);
}

void session_closed(st_client *cl) {
  store *s = cl->s;
  cl->closed = 1;
  cl->c = NULL;
  st_hold *h, *tmp;
  HASH_ITER(hh, cl->holds, h, tmp) {
    st_obj *o = store_find_inst(s, h->inst);
    HASH_DEL(cl->holds, h);
    for (int i = 0; o && i < h->count; i++) store_obj_unref(s, o);
    free(h);
  }
  LOG_DEBUG("client %llu disconnected", (unsigned long long)cl->id);
  session_unref(cl);
}

void session_send(st_client *cl, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  if (!cl->closed) hpl__conn_send(cl->c, type, req, m, NULL, 0, 0, NULL, NULL);
}

void session_reply(st_client *cl, uint64_t req, int status, const char *detail) {
  if (!cl->closed) hpl__conn_reply(cl->c, req, status, detail);
}

int session_hold(st_client *cl, st_obj *o) {
  st_hold *h = NULL;
  HASH_FIND(hh, cl->holds, &o->inst, sizeof o->inst, h);
  if (!h) {
    if (!(h = calloc(1, sizeof *h))) return HPL_ENOMEM;
    h->inst = o->inst;
    HASH_ADD(hh, cl->holds, inst, sizeof h->inst, h);
  }
  h->count++;
  store_obj_ref(cl->s, o);
  return 0;
}

void session_release(st_client *cl, uint64_t inst) {
  st_hold *h = NULL;
  HASH_FIND(hh, cl->holds, &inst, sizeof inst, h);
  if (!h) return; /* unknown or already released: ignore */
  st_obj *o = store_find_inst(cl->s, inst);
  if (--h->count == 0) {
    HASH_DEL(cl->holds, h);
    free(h);
  }
  if (o) store_obj_unref(cl->s, o);
}

void session_creq_init(st_creq *x, st_client *cl, uint64_t req) {
  x->cl = cl;
  x->req = req;
  session_ref(cl);
}

void session_creq_done(st_creq *x) {
  session_unref(x->cl);
  x->cl = NULL;
}
