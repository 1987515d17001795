/* put.c - create, write, seal or abort (see put.h). */
#include "put.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "dirlink.h"
#include "hoplite.h"
#include "lifetime.h"
#include "log.h"
#include "objdig.h"
#include "objects.h"
#include "putcheck.h"
#include "putcopy.h"
#include "room.h"
#include "trace.h"
#include "util.h"

typedef enum put_state {
  PUT_ROOM,        /* the buffer does not fit yet: waiting for room (room.c) */
  PUT_ANNOUNCING,  /* large object: LOC_ADD(partial, origin) out; CREATE not answered yet */
  PUT_WRITING,     /* the client writes (CREATE answered); its bytes are copied in as
                    * PROGRESS says they are final */
  PUT_COPYING,     /* SEAL arrived: the rest of the client's bytes are being copied in */
  PUT_DIGESTING,   /* SEAL (or PUT): the last units are hashed (objdig.c), then on */
  PUT_INLINING,    /* SEAL (or PUT) of a small object: INLINE_PUT out */
  PUT_REGISTERING, /* SEAL (or PUT) of an object not yet advertised - the inline cache was
                    * full, or it is larger than the inline limit: LOC_ADD(complete, origin) out */
  PUT_ENDED,       /* sealed or undone; freed once no request is out */
  PUT_NSTATES
} put_state;

typedef struct hpl__put {
  struct hpl__put *prev, *next; /* the client's list (utlist) */
  hpl__store *s;
  hpl__obj *o;       /* referenced: the creator's reference */
  hpl__stclient *cl; /* referenced */
  uint64_t req;      /* the CREATE, SEAL or PUT waiting for the directory */
  put_state state;
  int asking;         /* a directory request is out */
  int whole;          /* a PUT: created, filled and sealed by one request, answered once */
  int64_t timeout_ms; /* the CREATE's or PUT's */
  hpl__room room;     /* PUT_ROOM */
  uint8_t *payload;   /* PUT_ROOM of a PUT: its bytes, until there is room for them */
  int published;      /* the client PUBLISHed the bytes (PutReq.published): retracted
                         at the directory if the put fails */
  uint64_t inline_out; /* PUT_INLINING: its bytes counted in s->inline_out */
  int owned;          /* the request's lifetime (lifetime.c, once sealed) */
  uint64_t ttl_ms;
  uint64_t t0;        /* uv_hrtime() when the CREATE or PUT arrived (put_hist) */
  /* a CREATE's bytes, copied from the client's memory (putcopy.h) up to
   * what PROGRESS said is final, all of them at SEAL; a failure stays in
   * cp.rc for the SEAL */
  hpl__pcopier cp;
  uint64_t seal_req;  /* PUT_COPYING: the SEAL, answered once the bytes are in */
  int64_t seal_timeout_ms;
} hpl__put;

static const char *state_name(put_state st) {
  static const char *n[] = {"room",      "announcing", "writing",     "copying",
                            "digesting", "inlining",   "registering", "ended"};
  _Static_assert(sizeof n / sizeof n[0] == PUT_NSTATES, "a name per state");
  return st < PUT_NSTATES ? n[st] : "?";
}

/* The put's one state change, logged. */
static void put_set_state(hpl__put *p, put_state to) {
  if (p->state == to) return;
  HPL__LOG_DEBUG("put '%s': %s -> %s", p->o->id, state_name(p->state), state_name(to));
  p->state = to;
}

static void put_free_maybe(hpl__put *p) {
  if (p->state != PUT_ENDED || p->asking || p->cp.out) return;
  hpl__room_cancel(p->s, &p->room);
  free(p->payload);
  if (p->o->put == p) p->o->put = NULL;
  DL_DELETE(p->cl->puts, p);
  hpl__pcstage_unref(p->cp.stage);
  hpl__obj_unref(p->s, p->o);
  hpl__session_unref(p->cl);
  free(p);
}

/* The put is over without an object: tell waiters, take it out. */
static void put_undo(hpl__put *p, int status, const char *detail) {
  hpl__store *s = p->s;
  hpl__obj *o = p->o;
  if (p->published) hpl__dirlink_loc_retract(s, o->id);
  p->published = 0;
  hpl__room_cancel(s, &p->room);
  hpl__objdig_forget(o);
  put_set_state(p, PUT_ENDED);
  hpl__obj_fail(s, o, status, detail);
  if (o->put == p) o->put = NULL;
  hpl__obj_detach(s, o);
}

static void send_create_rep(hpl__put *p) {
  Hplpb__CreateRep r = HPLPB__CREATE_REP__INIT;
  r.offset = (uint64_t)(p->o->data - hpl__pool_base(p->s->pool));
  r.handle = p->o->inst;
  hpl__session_send(p->cl, HPL__MSG_CREATE_REP, p->req, &r.base);
}

static void send_create_err(hpl__stclient *cl, uint64_t req, int status, const char *detail) {
  Hplpb__CreateRep r = HPLPB__CREATE_REP__INIT;
  r.status = status;
  r.detail = (char *)(detail ? detail : "");
  hpl__session_send(cl, HPL__MSG_CREATE_REP, req, &r.base);
}

/* LOC_COMPLETE of the origin's copy, with its digests (the directory
 * names no sender for it before they are in). */
static void note_complete(hpl__store *s, hpl__obj *o) {
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = o->id;
  n.kind = HPL__LOC_COMPLETE;
  hpl__objdig_to_wire(o, 0, &n.digest_algo, &n.digests, &n.digest_root);
  hpl__dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
}

/* Sealed and registered: complete everywhere. */
static void put_finish(hpl__put *p) {
  hpl__store *s = p->s;
  hpl__obj *o = p->o;
  p->published = 0; /* done: nothing to retract */
  s->ctr.puts++;
  hpl__hist_observe(&s->put_hist, uv_hrtime() - p->t0);
  if (!o->inline_obj) note_complete(s, o);
  put_set_state(p, PUT_ENDED);
  o->put = NULL;
  hpl__obj_sealed(s, o);
  if (p->owned || p->ttl_ms) hpl__lifetime_sealed(s, p->cl, o, p->owned, p->ttl_ms);
  hpl__session_reply(p->cl, p->req, 0, NULL);
}

static void dir_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg);

/* Send a request for this put to the directory. 0 or HPL_ENOMEM. */
static int put_ask(hpl__put *p, unsigned type, const ProtobufCMessage *m, const void *payload,
                   uint64_t plen, int64_t timeout_ms) {
  if (hpl__dirlink_request(p->s, type, m, payload, plen, timeout_ms, dir_reply, p) != 0)
    return HPL_ENOMEM;
  p->asking = 1;
  return 0;
}

/* LOC_ADD for our copy as the origin of the object. */
static int put_announce(hpl__put *p, int complete, int64_t timeout_ms) {
  Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
  a.id = p->o->id;
  a.size = p->o->size;
  a.complete = complete;
  a.origin = 1;
  /* at create only the algorithm (the digests follow with LOC_COMPLETE) */
  hpl__objdig_to_wire(p->o, !complete, &a.digest_algo, &a.digests, &a.digest_root);
  return put_ask(p, HPL__MSG_LOC_ADD, &a.base, NULL, 0, timeout_ms);
}

/* Answer to the request of the state the put is in. */
static void dir_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  hpl__put *p = arg;
  hpl__obj *o = p->o;
  int status = rep->status;
  p->asking = 0;
  s->inline_out -= p->inline_out;
  p->inline_out = 0;
  const char *detail = *rep->detail ? rep->detail : hpl_strerror(status);
  /* A client that left takes its unsealed object with it; a PUT carried
   * the whole object, so it is carried out all the same (like any request
   * that arrived whole), only nobody hears. */
  int abandoned = p->cl->closed && !p->whole;
  if (status == HPL_EUNAVAIL && p->state == PUT_INLINING && !abandoned && o->in_table) {
    /* the directory's inline cache is full: register an ordinary copy */
    put_set_state(p, PUT_REGISTERING);
    if (put_announce(p, 1, -1) == 0) return;
    status = HPL_ENOMEM;
    detail = "out of memory";
  }
  int creating = p->state == PUT_ANNOUNCING;
  if (p->state == PUT_ENDED || abandoned || !o->in_table) {
    /* aborted, client gone, or object deleted meanwhile: a location the
     * directory just recorded for us must go again */
    if (status == 0) hpl__dirlink_loc_remove(s, o->id);
    const char *why = "object was deleted while being put";
    if (creating)
      send_create_err(p->cl, p->req, HPL_ESTATE, why);
    else if (p->state != PUT_ENDED)
      hpl__session_reply(p->cl, p->req, HPL_ESTATE, why);
    if (p->state != PUT_ENDED) put_undo(p, HPL_ENOTFOUND, why);
  } else if (status != 0) {
    if (creating)
      send_create_err(p->cl, p->req, status, detail);
    else
      hpl__session_reply(p->cl, p->req, status, detail);
    put_undo(p, status, detail);
  } else if (creating) {
    o->advertised = 1;
    put_set_state(p, PUT_WRITING);
    send_create_rep(p);
  } else {
    o->advertised = 1;
    o->inline_obj = p->state == PUT_INLINING;
    if (o->inline_obj) s->ctr.inline_puts++;
    put_finish(p);
  }
  put_free_maybe(p);
}

/* Refuse a CREATE (with a CreateRep) or a PUT (with a Reply). */
static void put_refuse(hpl__stclient *cl, uint64_t req, int whole, int status, const char *detail) {
  if (whole)
    hpl__session_reply(cl, req, status, detail);
  else
    send_create_err(cl, req, status, detail);
}

static void put_room_done(hpl__room *r, int status, const char *detail);

/* A new object `id` of `size` bytes being put by the client (a primary
 * copy), in state PUT_ROOM while its buffer waits for room in the pool
 * (put_go follows when there is), else with its buffer allocated. NULL if
 * it cannot be (the request is refused). */
static hpl__put *put_begin(hpl__store *s, hpl__stclient *cl, uint64_t req, const char *id,
                         uint64_t size, int whole, int64_t timeout_ms) {
  char detail[640];
  if (hpl__obj_find(s, id)) {
    snprintf(detail, sizeof detail, "object '%s' already exists on this node", id);
    put_refuse(cl, req, whole, HPL_EEXIST, detail);
    return NULL;
  }
  hpl__put *p = calloc(1, sizeof *p);
  hpl__obj *o = p ? hpl__obj_new(s, id, HPL__OBJ_CREATING) : NULL;
  if (!o) {
    free(p);
    put_refuse(cl, req, whole, HPL_ENOMEM, "out of memory");
    return NULL;
  }
  o->primary = 1;
  p->s = s;
  p->o = o;
  p->cl = cl;
  p->req = req;
  p->whole = whole;
  p->timeout_ms = timeout_ms;
  p->t0 = uv_hrtime();
  p->state = PUT_ROOM; /* (calloc made it so) */
  hpl__obj_ref(s, o);
  hpl__session_ref(cl);
  o->put = p;
  DL_APPEND(cl->puts, p);
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : hpl__now_ms() + (uint64_t)timeout_ms;
  int rc = hpl__room_alloc(s, o, size, deadline, &p->room, put_room_done, p, detail, sizeof detail);
  if (rc > 0) return p; /* waits */
  if (rc == 0) {
    put_set_state(p, PUT_WRITING); /* put_go says what comes next */
    return p;
  }
  put_refuse(cl, req, whole, rc, detail);
  put_undo(p, rc, detail);
  put_free_maybe(p);
  return NULL;
}

static void put_seal_now(hpl__put *p, uint64_t req, int64_t timeout_ms);
static void put_drop(hpl__put *p, hpl__creq *x);
static void put_copy_more(hpl__put *p);
static void put_copy_advanced(hpl__pcopier *k);

/* The digests of a put being sealed are made: seal on (or, its client
 * gone, drop it). */
static void digests_ready(hpl__store *s, hpl__obj *o, void *arg) {
  (void)s, (void)o;
  hpl__put *p = arg;
  if (p->state != PUT_DIGESTING) return;
  put_set_state(p, PUT_WRITING);
  if (p->cl->closed && !p->whole)
    put_drop(p, NULL);
  else
    put_seal_now(p, p->req, p->timeout_ms);
}

/* The buffer is allocated: a PUT's bytes go in and it is sealed; a CREATE
 * is answered (a small object at once, a large one once the directory
 * lists it, so pulls can overlap the client's writing). */
static void put_go(hpl__put *p, const uint8_t *payload) {
  hpl__obj *o = p->o;
  if (hpl__objdig_begin(p->s, o, p->s->cfg.integrity) != 0) {
    put_refuse(p->cl, p->req, p->whole, HPL_ENOMEM, "out of memory");
    put_undo(p, HPL_ENOMEM, "out of memory");
    put_free_maybe(p);
    return;
  }
  hpl__objdig_on_made(o, hpl__dirlink_digests); /* receivers pull while it is written */
  if (p->whole) {
    if (o->size) memcpy(o->data, payload, o->size);
    put_seal_now(p, p->req, p->timeout_ms);
    return;
  }
  if (o->size <= hpl__dirlink_caps(p->s)->inline_max) {
    put_set_state(p, PUT_WRITING);
    send_create_rep(p);
    return;
  }
  put_set_state(p, PUT_ANNOUNCING);
  if (put_announce(p, 0, p->timeout_ms) != 0) {
    send_create_err(p->cl, p->req, HPL_ENOMEM, "out of memory");
    put_undo(p, HPL_ENOMEM, "out of memory");
    put_free_maybe(p);
  }
}

static void put_room_done(hpl__room *r, int status, const char *detail) {
  hpl__put *p = r->arg;
  hpl__obj *o = p->o;
  if (status == 0 && !o->in_table) {
    status = HPL_ESTATE;
    detail = "object was deleted while being put";
  }
  if (status != 0) {
    put_refuse(p->cl, p->req, p->whole, status, detail);
    put_undo(p, status, detail);
    put_free_maybe(p);
    return;
  }
  put_go(p, p->payload);
  free(p->payload);
  p->payload = NULL;
}

void hpl__put_create(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__CreateReq *m) {
  char detail[160];
  if (hpl__lifetime_check(m->ttl_ms, detail, sizeof detail)) {
    send_create_err(cl, req, HPL_EINVAL, detail);
    return;
  }
  if (m->size && !m->src_addr) {
    send_create_err(cl, req, HPL_EPROTO,
                    "CREATE names no address of the bytes (a client library older than the "
                    "store: clients no longer write the pool)");
    return;
  }
  hpl__put *p = put_begin(s, cl, req, m->id, m->size, 0, m->timeout_ms);
  if (!p) return;
  p->cp = (hpl__pcopier){.loop = s->loop, .pid = (pid_t)cl->pid, .src = m->src_addr,
                         .arg = p, .advanced = put_copy_advanced};
  if (m->src_memfd && m->size) { /* memcpy from the client's memfd, else process_vm_readv */
    if (hpl__pcopier_use_memfd(&p->cp, &cl->stage, (int)m->src_fd, m->src_off, m->size,
                               detail, sizeof detail) == 0)
      s->ctr.creates_memfd++;
    else
      HPL__LOG_DEBUG("create '%s': copying with process_vm_readv: %s", m->id, detail);
  }
  p->owned = m->owned;
  p->ttl_ms = m->ttl_ms;
  if (p->state != PUT_ROOM) put_go(p, NULL);
}

/* Copy on as far as the client said (putcopy.h): the bytes that are in
 * count as arrived at once (receivers already pull them); a failure is
 * told to a SEAL waiting for it, and the put taken back; without one, the
 * SEAL that comes hears it. Once all are in, a waiting SEAL goes on. */
static void put_copy_more(hpl__put *p) {
  p->cp.dst = p->o->data; /* allocated by now (PUT_WRITING or later) */
  hpl__pcopier_run(&p->cp);
  hpl__objdig_written(p->s, p->o, p->cp.copied);
  hpl__obj_progress(p->s, p->o, p->cp.copied);
  if (p->cp.rc && p->state == PUT_COPYING) {
    hpl__session_reply(p->cl, p->seal_req, p->cp.rc, p->cp.why);
    put_drop(p, NULL);
  } else if (!p->cp.out && p->state == PUT_COPYING && p->cp.copied == p->o->size) {
    put_set_state(p, PUT_WRITING);
    put_seal_now(p, p->seal_req, p->seal_timeout_ms);
  }
}

/* putcopy.c: a step's jobs are back. */
static void put_copy_advanced(hpl__pcopier *k) {
  hpl__put *p = k->arg;
  if (p->state == PUT_ENDED) /* aborted, or its client left, meanwhile */
    put_free_maybe(p);
  else
    put_copy_more(p);
}

/* The client's put with this handle, while it writes. */
static hpl__put *writing(hpl__store *s, hpl__stclient *cl, uint64_t handle) {
  hpl__obj *o = hpl__obj_find_inst(s, handle);
  hpl__put *p = o ? o->put : NULL;
  return p && p->cl == cl && p->state == PUT_WRITING ? p : NULL;
}

void hpl__put_progress(hpl__store *s, hpl__stclient *cl, Hplpb__ProgressNote *m) {
  hpl__put *p = writing(s, cl, m->handle);
  if (!p || m->bytes > p->o->size || m->bytes <= p->cp.want) return;
  p->cp.want = m->bytes;
  put_copy_more(p);
}

/* Seal the put's object, whose bytes are all written, for request `req`:
 * a small object not yet known to the directory goes to its inline cache,
 * a larger one is registered as a complete copy (both answer once the
 * directory did), an announced one is complete at once. */
static void put_seal_now(hpl__put *p, uint64_t req, int64_t timeout_ms) {
  hpl__store *s = p->s;
  hpl__obj *o = p->o;
  p->req = req;
  if (!o->in_table) {
    hpl__session_reply(p->cl, req, HPL_ESTATE, "object was deleted before it was sealed");
    put_set_state(p, PUT_ENDED);
    put_free_maybe(p);
    return;
  }
  if (!hpl__objdig_seal(s, o, digests_ready, p)) { /* the rest is hashed first */
    p->timeout_ms = timeout_ms;
    put_set_state(p, PUT_DIGESTING);
    return;
  }
  o->progress = o->size;
  if (o->advertised) {
    put_finish(p);
    put_free_maybe(p);
    return;
  }
  int rc;
  /* small: to the directory's inline cache, unless that link has enough
   * on its way already (a burst: these are fetched from here, in parallel);
   * a published one must confirm its bytes there */
  uint64_t cap = s->cfg.inline_inflight;
  int small = o->size <= hpl__dirlink_caps(s)->inline_max;
  if (small && !p->published && cap && s->inline_out + o->size > cap && s->inline_out) {
    small = 0;
    s->ctr.inline_deferred++;
  }
  if (small) {
    p->inline_out = o->size;
    s->inline_out += o->size;
    Hplpb__InlinePutReq ip = HPLPB__INLINE_PUT_REQ__INIT;
    ip.id = o->id;
    ip.size = o->size;
    hpl__objdig_to_wire(o, 0, &ip.digest_algo, &ip.digests, &ip.digest_root);
    put_set_state(p, PUT_INLINING);
    hpl__trace("s.inline", o->id);
    rc = put_ask(p, HPL__MSG_INLINE_PUT, &ip.base, o->data, o->size, timeout_ms);
  } else { /* too much inline on its way, or an inline limit lowered since */
    put_set_state(p, PUT_REGISTERING);
    rc = put_announce(p, 1, timeout_ms);
  }
  if (rc == 0) return;
  s->inline_out -= p->inline_out; /* (no answer will come) */
  p->inline_out = 0;
  hpl__session_reply(p->cl, req, HPL_ENOMEM, "out of memory");
  if (p->whole) { /* nobody holds a handle to abort it with */
    put_undo(p, HPL_ENOMEM, "out of memory");
    put_free_maybe(p);
  } else {
    put_set_state(p, PUT_WRITING); /* the client may seal again, or abort */
  }
}

void hpl__put_seal(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__HandleReq *m) {
  hpl__put *p = writing(s, cl, m->handle);
  if (!p) {
    hpl__session_reply(cl, req, HPL_EINVAL, "no object being created with this handle");
    return;
  }
  if (p->cp.rc) {
    hpl__session_reply(cl, req, p->cp.rc, p->cp.why);
    put_drop(p, NULL);
    return;
  }
  p->seal_req = req;
  p->seal_timeout_ms = m->timeout_ms;
  p->cp.want = p->o->size;
  put_set_state(p, PUT_COPYING);
  put_copy_more(p);
}

void hpl__put_whole(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__PutReq *m,
                    const uint8_t *payload, uint64_t plen) {
  hpl__trace("s.put", m->id);
  int refused = hpl__putcheck_whole(cl, req, m, plen) != 0;
  if (!refused && hpl__putcheck_held(s, cl, req, m, payload, plen)) return;
  hpl__put *p = refused ? NULL : put_begin(s, cl, req, m->id, m->size, 1, m->timeout_ms);
  if (!p) { /* refused: bytes the client published must not stay visible */
    if (m->published) hpl__dirlink_loc_retract(s, m->id); /* the id was checked (clients.c) */
    return;
  }
  p->published = m->published;
  p->owned = m->owned;
  p->ttl_ms = m->ttl_ms;
  if (p->state != PUT_ROOM) {
    put_go(p, payload);
    return;
  }
  /* waits for room: keep the bytes until then */
  if (plen && !(p->payload = malloc(plen))) {
    hpl__room_cancel(s, &p->room);
    hpl__session_reply(cl, req, HPL_ENOMEM, "out of memory");
    put_undo(p, HPL_ENOMEM, "out of memory");
    put_free_maybe(p);
    return;
  }
  if (plen) memcpy(p->payload, payload, plen);
}

static void abort_acked(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  (void)s, (void)rep;
  hpl__creq *x = arg;
  hpl__session_reply(x->cl, x->req, 0, NULL);
  hpl__session_creq_done(x);
  free(x);
}

/* Take the put back: the directory forgets our copy (ack to `x` if not
 * NULL, else a one-way note), waiters hear it is gone. */
static void put_drop(hpl__put *p, hpl__creq *x) {
  hpl__store *s = p->s;
  hpl__obj *o = p->o;
  if (o->advertised) {
    Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
    n.id = o->id;
    n.kind = HPL__LOC_REMOVE;
    if (!x ||
        hpl__dirlink_request(s, HPL__MSG_LOC_NOTE, &n.base, NULL, 0, 5000, abort_acked, x) != 0) {
      hpl__dirlink_loc_remove(s, o->id);
      if (x) abort_acked(s, &(hpl__dl_reply){.detail = ""}, x);
    }
    o->advertised = 0;
  }
  char detail[320];
  snprintf(detail, sizeof detail, "the put of '%s' was aborted", o->id);
  put_undo(p, HPL_ENOTFOUND, detail);
  put_free_maybe(p);
}

/* Abort answers once the directory has forgotten the copy, so a get issued
 * after hpl_abort() returns waits for a new put instead of pulling from the
 * discarded region. */
void hpl__put_abort(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__HandleReq *m) {
  hpl__obj *o = hpl__obj_find_inst(s, m->handle);
  hpl__put *p = o && o->put && o->put->cl == cl &&
                        (o->put->state == PUT_WRITING || o->put->state == PUT_COPYING)
                    ? o->put
                    : NULL;
  if (p && p->state == PUT_COPYING) /* the SEAL waiting for the copy hears it too */
    hpl__session_reply(cl, p->seal_req, HPL_ECANCELED, "the put was aborted while sealing");
  hpl__creq *x = p && p->o->advertised && req ? calloc(1, sizeof *x) : NULL;
  if (x) hpl__session_creq_init(x, cl, req);
  if (p) put_drop(p, x);
  if (!x && req) hpl__session_reply(cl, req, 0, NULL);
}

void hpl__put_client_gone(hpl__store *s, hpl__stclient *cl) {
  (void)s;
  hpl__pcstage_unref(cl->stage); /* copies still out keep theirs */
  cl->stage = NULL;
  hpl__put *p, *tmp;
  DL_FOREACH_SAFE(cl->puts, p, tmp) {
    if (p->state == PUT_WRITING || p->state == PUT_COPYING || (p->state == PUT_ROOM && !p->whole))
      put_drop(p, NULL);
    /* else a directory request is out: its answer undoes the put */
  }
}
