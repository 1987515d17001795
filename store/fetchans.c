/* fetchans.c - a fetch's answer from the directory (an ACQUIRE's reply,
 * or a GRANT): the object's generation, size and digests adopted, its
 * buffer allocated (or the answer kept until there is room), an inline
 * object's bytes checked; what event it amounts to (see fetchint.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataport.h"
#include "fetchint.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"

static void room_done(hpl__room *r, int status, const char *detail);
static hpl__fetch_event answer_bytes(hpl__fetch *f, const Hplpb__AcquireRep *r,
                                     const uint8_t *payload, uint64_t plen,
                                     char *detail, size_t dlen, int *status);

/* Keep what the answer says until its buffer has room. HPL__FEV_ROOM_WAIT, or
 * HPL__FEV_BAD_SENDER with *status if it cannot be kept. */
static hpl__fetch_event hold_answer(hpl__fetch *f, const Hplpb__AcquireRep *r,
                                    const uint8_t *payload, uint64_t plen,
                                    char *detail, size_t dlen, int *status) {
  f->held = *r;
  f->held.base.unknown_fields = NULL;
  f->held.base.n_unknown_fields = 0;
  f->held.detail = "";
  f->held_addr = strdup(r->sender_addr ? r->sender_addr : "");
  f->held.sender_addr = f->held_addr;
  f->held_payload = plen ? malloc(plen) : NULL;
  if (!f->held_addr || (plen && !f->held_payload)) {
    hpl__room_cancel(f->s, &f->room);
    free(f->held_addr);
    free(f->held_payload);
    f->held_addr = NULL;
    f->held_payload = NULL;
    snprintf(detail, dlen, "out of memory");
    *status = HPL_ENOMEM;
    return HPL__FEV_BAD_SENDER;
  }
  if (plen)
    memcpy(f->held_payload, payload, plen);
  HPL__LOG_INFO("'%s': waiting for room in the pool for %llu bytes", f->o->id,
                (unsigned long long)r->size);
  return HPL__FEV_ROOM_WAIT;
}

void hpl__fetch_held_free(hpl__fetch *f) {
  free(f->held_addr);
  free(f->held_payload);
  f->held_addr = NULL;
  f->held_payload = NULL;
}

/* The buffer of a kept answer: allocated (go on as the answer said), or
 * no room in time. */
static void room_done(hpl__room *rm, int status, const char *why) {
  hpl__fetch *f = rm->arg;
  char detail[640];
  hpl__fetch_ctx x = {.r = &f->held, .detail = detail, .status = status};
  hpl__fetch_event ev;
  if (status) {
    snprintf(detail, sizeof detail, "%s", why);
    ev = HPL__FEV_BAD_SENDER;
  } else {
    ev = answer_bytes(f, &f->held, f->held_payload,
                      f->held_payload ? f->held.size : 0, detail, sizeof detail,
                      &x.status);
  }
  hpl__fetch_fire(f, ev, &x); /* leaving ROOM, the kept answer goes */
}

/* An answer naming a sender (or carrying the bytes): adopt its generation,
 * size and bytes. Returns the event it amounts to (HPL__FEV_ROOM_WAIT: the
 * answer is kept until its buffer has room). */
static hpl__fetch_event answer_event(hpl__fetch *f, const Hplpb__AcquireRep *r,
                                     const uint8_t *payload, uint64_t plen,
                                     char *detail, size_t dlen, int *status) {
  hpl__store *s = f->s;
  hpl__obj *o = f->o;
  if (r->gen != o->gen) {
    /* the object's bytes were restarted (a reduce target): ours are void */
    if (o->progress) {
      s->ctr.restarts++;
      hpl__dataport_restart(s, o, r->gen);
    }
    o->gen = r->gen;
  }
  if (o->data && o->size != r->size) {
    snprintf(detail, dlen, "object '%s' changed size (%llu -> %llu)", o->id,
             (unsigned long long)o->size, (unsigned long long)r->size);
    *status = HPL_EMISMATCH;
    return HPL__FEV_BAD_SENDER;
  }
  /* the digests the bytes are checked against (kept with the object) */
  int rc = hpl__objdig_take(o, r->size, r->digest_algo, &r->digests, &r->digest_root,
                            detail, dlen);
  if (rc) {
    *status = rc;
    return HPL__FEV_BAD_SENDER;
  }
  if (!o->dig && !r->inline_ && !r->digests_none && hpl__objdig_needed(s, r->size)) {
    snprintf(detail, dlen, "object '%s': node %016llx named a sender without digests, the "
             "object not said to have none: its bytes cannot be checked here", o->id,
             (unsigned long long)r->sender_node); /* never counted unchecked */
    *status = HPL_ECORRUPT;
    return HPL__FEV_BAD_SENDER;
  }
  if (!o->data) {
    rc = hpl__room_alloc(s, o, r->size, hpl__obj_deadline(o), &f->room,
                             room_done, f, detail, dlen);
    if (rc > 0)
      return hold_answer(f, r, payload, plen, detail, dlen, status);
    if (rc) {
      *status = rc;
      HPL__LOG_WARN("%s", detail);
      return HPL__FEV_BAD_SENDER;
    }
  }
  return answer_bytes(f, r, payload, plen, detail, dlen, status);
}

/* The rest of an answer once the buffer is there: a sender to pull from,
 * or an inline object's bytes. */
static hpl__fetch_event answer_bytes(hpl__fetch *f, const Hplpb__AcquireRep *r,
                                     const uint8_t *payload, uint64_t plen,
                                     char *detail, size_t dlen, int *status) {
  hpl__store *s = f->s;
  hpl__obj *o = f->o;
  if (!r->inline_)
    return HPL__FEV_SENDER;
  if (plen != r->size) {
    snprintf(detail, dlen, "inline reply of the wrong length");
    *status = HPL_EPROTO;
    return HPL__FEV_BAD_SENDER;
  }
  if (plen)
    memcpy(o->data, payload, plen);
  int bad = 0;
  uint64_t unit = 0;
  hpl__objdig_verify(o, plen, &bad, &unit);
  if (bad) {
    snprintf(detail, dlen, "inline bytes of '%s' from the directory do not match their digest",
             o->id);
    *status = HPL_ECORRUPT;
    s->ctr.corrupt_units++;
    return HPL__FEV_BAD_SENDER;
  }
  o->inline_obj = 1;
  s->ctr.inline_gets++;
  return HPL__FEV_INLINE;
}

hpl__fetch_event hpl__fetch_answer(hpl__fetch *f, const hpl__dl_reply *rep,
                                   hpl__fetch_ctx *x, char *detail,
                                   size_t dlen) {
  const Hplpb__AcquireRep *r =
      (const Hplpb__AcquireRep *)rep->m; /* NULL unless status 0 */
  int status = rep->status;
  hpl__fetch_event ev;
  *x = (hpl__fetch_ctx){.r = r, .detail = detail};
  if (f->state == HPL__FETCH_ORPHAN || f->state == HPL__FETCH_END) {
    ev =
        r && !r->inline_ && r->sender_node ? HPL__FEV_SENDER : HPL__FEV_REFUSED;
  } else if (status == HPL_ETIMEDOUT) {
    snprintf(detail, dlen, "object '%s' not available within the timeout",
             f->o->id);
    ev = HPL__FEV_TIMEOUT;
  } else if (status != 0) {
    snprintf(detail, dlen, "%s",
             *rep->detail ? rep->detail : hpl_strerror(status));
    HPL__LOG_INFO("fetch of '%s' failed: %s", f->o->id, detail);
    ev = HPL__FEV_REFUSED;
  } else {
    ev = answer_event(f, r, rep->payload, rep->plen, detail, dlen, &status);
  }
  x->status = status;
  return ev;
}

