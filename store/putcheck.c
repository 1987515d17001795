/* putcheck.c - a whole PUT's checks before a put begins (see putcheck.h). */
#include "putcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dirlink.h"
#include "hoplite.h"
#include "lifetime.h"
#include "objects.h"

static void confirm_done(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  hpl__creq *x = arg;
  if (rep->status == 0)
    s->ctr.puts++;
  hpl__session_reply(x->cl, x->req, rep->status, rep->detail);
  hpl__session_creq_done(x);
  free(x);
}

int hpl__putcheck_held(hpl__store *s, hpl__stclient *cl, uint64_t req,
                       const Hplpb__PutReq *m, const uint8_t *payload,
                       uint64_t plen) {
  hpl__obj *o = m->published ? hpl__obj_find(s, m->id) : NULL;
  if (!o || o->primary || o->state != HPL__OBJ_SEALED || o->size != plen ||
      (plen && memcmp(o->data, payload, plen) != 0))
    return 0;
  hpl__creq *x = calloc(1, sizeof *x);
  if (!x)
    return 0;
  hpl__session_creq_init(x, cl, req);
  Hplpb__InlinePutReq ip = HPLPB__INLINE_PUT_REQ__INIT;
  ip.id = o->id;
  ip.size = plen;
  if (hpl__dirlink_request(s, HPL__MSG_INLINE_PUT, &ip.base, payload, plen,
                           m->timeout_ms, confirm_done, x) == 0)
    return 1;
  hpl__session_creq_done(x);
  free(x);
  return 0;
}

int hpl__putcheck_whole(hpl__stclient *cl, uint64_t req, const Hplpb__PutReq *m,
                        uint64_t plen) {
  char why[160];
  int rc = 0;
  if (plen != m->size) {
    snprintf(why, sizeof why, "PUT of %llu bytes came with %llu bytes",
             (unsigned long long)m->size, (unsigned long long)plen);
    rc = HPL_EINVAL;
  } else if (hpl__lifetime_check(m->ttl_ms, why, sizeof why)) {
    rc = HPL_EINVAL;
  }
  if (rc)
    hpl__session_reply(cl, req, rc, why);
  return rc;
}
