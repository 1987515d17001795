/*
 * putint.h - what put.c (the entry points: CREATE, PROGRESS, SEAL, PUT,
 * ABORT, the client leaving) and putseal.c (sealing, the directory's
 * answers) share: a put's record, its states, and the helpers both call.
 * Nothing outside these two files includes it.
 *
 * A put's state (hpl__put_state) changes by hpl__put_set_state only, which
 * logs each change at debug level.
 */
#ifndef HPL_STORE_PUTINT_H
#define HPL_STORE_PUTINT_H

#include <stdint.h>

#include "put.h"
#include "putcopy.h"
#include "room.h"

typedef enum hpl__put_state {
  HPL__PUT_ROOM,        /* the buffer does not fit yet: waiting for room (room.c) */
  HPL__PUT_ANNOUNCING,  /* large object: LOC_ADD(partial, origin) out; CREATE not answered yet */
  HPL__PUT_WRITING,     /* the client writes (CREATE answered); its bytes are copied in as
                         * PROGRESS says they are final */
  HPL__PUT_COPYING,     /* SEAL arrived: the rest of the client's bytes are being copied in */
  HPL__PUT_DIGESTING,   /* SEAL (or PUT): the last units are hashed (objdig.c), then on */
  HPL__PUT_INLINING,    /* SEAL (or PUT) of a small object: INLINE_PUT out */
  HPL__PUT_REGISTERING, /* SEAL (or PUT) of an object not yet advertised - the inline cache was
                         * full, or it is larger than the inline limit: LOC_ADD(complete,
                         * origin) out */
  HPL__PUT_ENDED,       /* sealed or undone; freed once no request is out */
  HPL__PUT_NSTATES
} hpl__put_state;

/* A client's put (o->put, cl->puts). */
typedef struct hpl__put {
  struct hpl__put *prev, *next; /* the client's list (utlist) */
  hpl__store *s;
  hpl__obj *o;       /* referenced: the creator's reference */
  hpl__stclient *cl; /* referenced */
  uint64_t req;      /* the CREATE, SEAL or PUT waiting for the directory */
  hpl__put_state state;
  int asking;         /* a directory request is out */
  int whole;          /* a PUT: created, filled and sealed by one request, answered once */
  int64_t timeout_ms; /* the CREATE's or PUT's */
  hpl__room room;     /* HPL__PUT_ROOM */
  uint8_t *payload;   /* HPL__PUT_ROOM of a PUT: its bytes, until there is room for them */
  int published;      /* the client PUBLISHed the bytes (PutReq.published): retracted
                         at the directory if the put fails */
  uint64_t inline_out; /* HPL__PUT_INLINING: its bytes counted in s->inline_out */
  int batch;          /* one of several objects of a client's call (PutReq.batch) */
  int owned;          /* the request's lifetime (lifetime.c, once sealed) */
  uint64_t ttl_ms;
  uint64_t t0;        /* uv_hrtime() when the CREATE or PUT arrived (put_hist) */
  /* a CREATE's bytes, copied from the client's memory (putcopy.h) up to
   * what PROGRESS said is final, all of them at SEAL; a failure stays in
   * cp.rc for the SEAL */
  hpl__pcopier cp;
  uint64_t seal_req;  /* HPL__PUT_COPYING: the SEAL, answered once the bytes are in */
  int64_t seal_timeout_ms;
} hpl__put;

/* put.c: the put's one state change, logged at debug level. */
void hpl__put_set_state(hpl__put *p, hpl__put_state to);

/* put.c: free the put (its references on the object and the client go,
 * it leaves o->put and cl->puts) if it has ENDED and neither a directory
 * request nor a copy job is out; else nothing. The caller must not use
 * `p` after. */
void hpl__put_free_maybe(hpl__put *p);

/* put.c: answer the put's CREATE (p->req) with the object's place in the
 * pool and its handle; or refuse CREATE `req` of `cl` with `status` and
 * `detail` (NULL: none; borrowed for the call). Nothing is sent on a closed
 * session; no error reaches the caller (hpl__session_send). */
void hpl__put_send_create_rep(hpl__put *p);
void hpl__put_send_create_err(hpl__stclient *cl, uint64_t req, int status, const char *detail);

/* put.c: take the put back (ABORT, or its client left while it was being
 * written or sealed): the directory forgets an advertised copy -
 * acknowledged to `x` if not NULL (then answered and freed here, by the
 * acknowledgement or at once if the request cannot go out; pass one only
 * for an advertised object), else by a one-way note - and waiters hear
 * the put is gone. `p` may be freed: the caller must not use it after. */
void hpl__put_drop(hpl__put *p, hpl__creq *x);

/* putseal.c: the put is over without an object: a published copy is
 * retracted at the directory, waiters get `status` and `detail`, the
 * object leaves the table and the put is ENDED (not freed: the caller
 * calls hpl__put_free_maybe). */
void hpl__put_undo(hpl__put *p, int status, const char *detail);

/* putseal.c: LOC_ADD for our copy as the origin of the object (complete
 * or, while the client writes, partial); its answer comes to the put's
 * state (the put is `asking` until then). 0, or HPL_ENOMEM if the request
 * could not be queued (nothing was sent). */
int hpl__put_announce(hpl__put *p, int complete, int64_t timeout_ms);

/* putseal.c: seal the put's object, whose bytes are all written, for
 * request `req` (answered here, at once or once the directory did, also
 * with an error: the object deleted, no memory). The put may end and be
 * freed: the caller must not use `p` after. */
void hpl__put_seal_now(hpl__put *p, uint64_t req, int64_t timeout_ms);

#endif
