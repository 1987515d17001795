/* put.c - a client's put: CREATE, PROGRESS, SEAL, a whole PUT, ABORT and the
 * client leaving, as one state machine (see put.h, and putint.h for its
 * states; sealing and the directory's answers are putseal.c's). */
#include "put.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "dirlink.h"
#include "handoff.h"
#include "hoplite.h"
#include "lifetime.h"
#include "log.h"
#include "objdig.h"
#include "objects.h"
#include "putcheck.h"
#include "putint.h"
#include "putcopy.h"
#include "room.h"
#include "trace.h"
#include "util.h"

static const char *state_name(hpl__put_state st) {
  static const char *n[] = {"room",      "announcing", "writing",     "copying",
                            "digesting", "inlining",   "registering", "ended"};
  _Static_assert(sizeof n / sizeof n[0] == HPL__PUT_NSTATES, "a name per state");
  return st < HPL__PUT_NSTATES ? n[st] : "?";
}

/* The put's one state change, logged. */
void hpl__put_set_state(hpl__put *p, hpl__put_state to) {
  if (p->state == to) return;
  HPL__LOG_DEBUG("put '%s': %s -> %s", p->o->id, state_name(p->state), state_name(to));
  p->state = to;
}

void hpl__put_free_maybe(hpl__put *p) {
  if (p->state != HPL__PUT_ENDED || p->asking || p->cp.out) return;
  hpl__room_cancel(p->s, &p->room);
  free(p->payload);
  if (p->o->put == p) p->o->put = NULL;
  DL_DELETE(p->cl->puts, p);
  hpl__pcstage_unref(p->cp.stage);
  hpl__obj_unref(p->s, p->o);
  hpl__session_unref(p->cl);
  free(p);
}

void hpl__put_send_create_rep(hpl__put *p) {
  Hplpb__CreateRep r = HPLPB__CREATE_REP__INIT;
  r.offset = (uint64_t)(p->o->data - hpl__pool_base(p->s->pool));
  r.handle = p->o->inst;
  hpl__session_send(p->cl, HPL__MSG_CREATE_REP, p->req, &r.base);
}

void hpl__put_send_create_err(hpl__stclient *cl, uint64_t req, int status, const char *detail) {
  Hplpb__CreateRep r = HPLPB__CREATE_REP__INIT;
  r.status = status;
  r.detail = (char *)(detail ? detail : "");
  hpl__session_send(cl, HPL__MSG_CREATE_REP, req, &r.base);
}

/* Refuse a CREATE (with a CreateRep) or a PUT (with a Reply). */
static void put_refuse(hpl__stclient *cl, uint64_t req, int whole, int status, const char *detail) {
  if (whole)
    hpl__session_reply(cl, req, status, detail);
  else
    hpl__put_send_create_err(cl, req, status, detail);
}

static void put_room_done(hpl__room *r, int status, const char *detail);

/* A new object `id` of `size` bytes being put by the client (a primary
 * copy), in state HPL__PUT_ROOM while its buffer waits for room in the pool
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
  if (o) hpl__handoff_put(s, id); /* put again after a delete */
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
  p->state = HPL__PUT_ROOM; /* (calloc made it so) */
  hpl__obj_ref(s, o);
  hpl__session_ref(cl);
  o->put = p;
  DL_APPEND(cl->puts, p);
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : hpl__now_ms() + (uint64_t)timeout_ms;
  int rc = hpl__room_alloc(s, o, size, deadline, &p->room, put_room_done, p, detail, sizeof detail);
  if (rc > 0) return p; /* waits */
  if (rc == 0) {
    hpl__put_set_state(p, HPL__PUT_WRITING); /* put_go says what comes next */
    return p;
  }
  put_refuse(cl, req, whole, rc, detail);
  hpl__put_undo(p, rc, detail);
  hpl__put_free_maybe(p);
  return NULL;
}

static void put_copy_more(hpl__put *p);
static void put_copy_advanced(hpl__pcopier *k);

/* The buffer is allocated: a PUT's bytes go in and it is sealed; a CREATE
 * is answered (a small object at once, a large one once the directory
 * lists it, so pulls can overlap the client's writing). */
static void put_go(hpl__put *p, const uint8_t *payload) {
  hpl__obj *o = p->o;
  if (hpl__objdig_begin(p->s, o, p->s->cfg.integrity) != 0) {
    put_refuse(p->cl, p->req, p->whole, HPL_ENOMEM, "out of memory");
    hpl__put_undo(p, HPL_ENOMEM, "out of memory");
    hpl__put_free_maybe(p);
    return;
  }
  hpl__objdig_on_made(o, hpl__dirlink_digests); /* receivers pull while it is written */
  if (p->whole) {
    if (o->size) memcpy(o->data, payload, o->size);
    hpl__put_seal_now(p, p->req, p->timeout_ms);
    return;
  }
  if (o->size <= hpl__dirlink_caps(p->s)->inline_max) {
    hpl__put_set_state(p, HPL__PUT_WRITING);
    hpl__put_send_create_rep(p);
    return;
  }
  hpl__put_set_state(p, HPL__PUT_ANNOUNCING);
  if (hpl__put_announce(p, 0, p->timeout_ms) != 0) {
    hpl__put_send_create_err(p->cl, p->req, HPL_ENOMEM, "out of memory");
    hpl__put_undo(p, HPL_ENOMEM, "out of memory");
    hpl__put_free_maybe(p);
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
    hpl__put_undo(p, status, detail);
    hpl__put_free_maybe(p);
    return;
  }
  put_go(p, p->payload);
  free(p->payload);
  p->payload = NULL;
}

void hpl__put_create(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__CreateReq *m) {
  char detail[160];
  if (hpl__lifetime_check(m->ttl_ms, detail, sizeof detail)) {
    hpl__put_send_create_err(cl, req, HPL_EINVAL, detail);
    return;
  }
  if (m->size && !m->src_addr) {
    hpl__put_send_create_err(cl, req, HPL_EPROTO,
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
  if (p->state != HPL__PUT_ROOM) put_go(p, NULL);
}

/* Copy on as far as the client said (putcopy.h): the bytes that are in
 * count as arrived at once (receivers already pull them); a failure is
 * told to a SEAL waiting for it, and the put taken back; without one, the
 * SEAL that comes hears it. Once all are in, a waiting SEAL goes on. */
/* A copy of the client's bytes failed: the put is taken back, then `req`
 * (the SEAL) hears why. In that order: the directory forgets the copy
 * (LOC_REMOVE) before the client can ask it anything, so a stat right
 * after the answer finds nothing. */
static void copy_failed(hpl__put *p, uint64_t req) {
  hpl__stclient *cl = p->cl;
  int rc = p->cp.rc;
  char why[sizeof p->cp.why];
  memcpy(why, p->cp.why, sizeof why);
  hpl__session_ref(cl); /* p's reference may go with p */
  hpl__put_drop(p, NULL);
  hpl__session_reply(cl, req, rc, why);
  hpl__session_unref(cl);
}

static void put_copy_more(hpl__put *p) {
  p->cp.dst = p->o->data; /* allocated by now (HPL__PUT_WRITING or later) */
  hpl__pcopier_run(&p->cp);
  hpl__objdig_written(p->s, p->o, p->cp.copied);
  hpl__obj_progress(p->s, p->o, p->cp.copied);
  if (p->cp.rc && p->state == HPL__PUT_COPYING) {
    copy_failed(p, p->seal_req);
  } else if (!p->cp.out && p->state == HPL__PUT_COPYING && p->cp.copied == p->o->size) {
    hpl__put_set_state(p, HPL__PUT_WRITING);
    hpl__put_seal_now(p, p->seal_req, p->seal_timeout_ms);
  }
}

/* putcopy.c: a step's jobs are back. */
static void put_copy_advanced(hpl__pcopier *k) {
  hpl__put *p = k->arg;
  if (p->state == HPL__PUT_ENDED) /* aborted, or its client left, meanwhile */
    hpl__put_free_maybe(p);
  else
    put_copy_more(p);
}

/* The client's put with this handle, while it writes. */
static hpl__put *writing(hpl__store *s, hpl__stclient *cl, uint64_t handle) {
  hpl__obj *o = hpl__obj_find_inst(s, handle);
  hpl__put *p = o ? o->put : NULL;
  return p && p->cl == cl && p->state == HPL__PUT_WRITING ? p : NULL;
}

void hpl__put_progress(hpl__store *s, hpl__stclient *cl, Hplpb__ProgressNote *m) {
  hpl__put *p = writing(s, cl, m->handle);
  if (!p || m->bytes > p->o->size || m->bytes <= p->cp.want) return;
  p->cp.want = m->bytes;
  put_copy_more(p);
}

void hpl__put_seal(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__HandleReq *m) {
  hpl__put *p = writing(s, cl, m->handle);
  if (!p) {
    hpl__session_reply(cl, req, HPL_EINVAL, "no object being created with this handle");
    return;
  }
  if (p->cp.rc) {
    copy_failed(p, req);
    return;
  }
  p->seal_req = req;
  p->seal_timeout_ms = m->timeout_ms;
  p->cp.want = p->o->size;
  hpl__put_set_state(p, HPL__PUT_COPYING);
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
  p->batch = m->batch;
  p->owned = m->owned;
  p->ttl_ms = m->ttl_ms;
  if (p->state != HPL__PUT_ROOM) {
    put_go(p, payload);
    return;
  }
  /* waits for room: keep the bytes until then */
  if (plen && !(p->payload = malloc(plen))) {
    hpl__room_cancel(s, &p->room);
    hpl__session_reply(cl, req, HPL_ENOMEM, "out of memory");
    hpl__put_undo(p, HPL_ENOMEM, "out of memory");
    hpl__put_free_maybe(p);
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
void hpl__put_drop(hpl__put *p, hpl__creq *x) {
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
  hpl__put_undo(p, HPL_ENOTFOUND, detail);
  hpl__put_free_maybe(p);
}

/* Abort answers once the directory has forgotten the copy, so a get issued
 * after hpl_abort() returns waits for a new put instead of pulling from the
 * discarded region. */
void hpl__put_abort(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__HandleReq *m) {
  hpl__obj *o = hpl__obj_find_inst(s, m->handle);
  hpl__put *p = o && o->put && o->put->cl == cl &&
                        (o->put->state == HPL__PUT_WRITING || o->put->state == HPL__PUT_COPYING)
                    ? o->put
                    : NULL;
  if (p && p->state == HPL__PUT_COPYING) /* the SEAL waiting for the copy hears it too */
    hpl__session_reply(cl, p->seal_req, HPL_ECANCELED, "the put was aborted while sealing");
  hpl__creq *x = p && p->o->advertised && req ? calloc(1, sizeof *x) : NULL;
  if (x) hpl__session_creq_init(x, cl, req);
  if (p) hpl__put_drop(p, x);
  if (!x && req) hpl__session_reply(cl, req, 0, NULL);
}

void hpl__put_client_gone(hpl__store *s, hpl__stclient *cl) {
  (void)s;
  hpl__pcstage_unref(cl->stage); /* copies still out keep theirs */
  cl->stage = NULL;
  hpl__put *p, *tmp;
  DL_FOREACH_SAFE(cl->puts, p, tmp) {
    if (p->state == HPL__PUT_WRITING || p->state == HPL__PUT_COPYING ||
        (p->state == HPL__PUT_ROOM && !p->whole))
      hpl__put_drop(p, NULL);
    /* else a directory request is out: its answer undoes the put */
  }
}
