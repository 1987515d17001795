/* putseal.c - sealing a put (see putint.h): the last digests made, then
 * complete at once if announced, else to the directory's inline cache
 * (within the --inline-inflight budget, and not a batch's larger objects)
 * or registered as a copy at this node; the directory's answers; a put undone. */
#include "dirlink.h"
#include "hoplite.h"
#include "lifetime.h"
#include "objdig.h"
#include "objects.h"
#include "putint.h"
#include "room.h"
#include "trace.h"

/* Of a batch (PutReq.batch), objects larger than this are registered as
 * copies here, not sent inline: a batch's objects (a shuffle's partitions)
 * are mostly read once each, and from their makers all nodes can serve at
 * once, while inline they all cross the directory's one link. Smaller ones
 * still go inline, where one answer from the directory is cheaper than a
 * pull while the CPU, not that link, is short. The 8-host shuffle of 64 KiB
 * partitions: 18.8 ms with the --inline-inflight budget alone, 13.4 ms with
 * none of them inline. Of 16 KiB (2026-11-30, small pulls reusing their
 * connections): inline 14.5-15.6 ms against 9.5-10.0 ms as copies at
 * 1 Gbit/s, 51.7-55.5 against 9.1-11.0 ms at 200 Mbit/s; of 8 KiB 7.2-7.3
 * against 9.6 ms at 1 Gbit/s but 23.9-24.8 against 7.3-9.9 ms at
 * 200 Mbit/s (bench/results/small-objects-issue42j-2026-11-30.md). */
#define BATCH_INLINE_MAX (8u << 10)

/* The inline budget by default: every inline byte crosses the directory's
 * link twice, in and out, and a burst of small puts from every node (a
 * shuffle's partitions) meets there. 128 KiB per store suits a fast link
 * (8 hosts' shuffle of 4 KiB partitions at 1 Gbit/s: 3.4-3.6 ms all
 * inline, 5.4-6.3 ms all as copies), but at 200 Mbit/s the directory's
 * host took 7.7-8.0 ms to pass them all; half a millisecond of the link
 * (12.5 KB there, 62.5 KB at 1 Gbit/s) gave 5.2-5.8 ms at 200 Mbit/s and
 * kept 1 Gbit/s all inline. A put with nothing else out, and a published
 * one, go inline whatever the budget. */
#define INLINE_BUDGET_MAX (128u << 10)

uint64_t hpl__put_inline_budget(uint64_t asked, uint64_t link_rate) {
  if (asked != HPL__INLINE_INFLIGHT_DEFAULT) return asked;
  uint64_t b = link_rate / 8 / 2000; /* 0.5 ms */
  if (!link_rate || b > INLINE_BUDGET_MAX) return INLINE_BUDGET_MAX;
  return b ? b : 1; /* (a link under 16 kbit/s: every burst's put after the first as a copy) */
}

/* The put is over without an object: tell waiters, take it out. */
void hpl__put_undo(hpl__put *p, int status, const char *detail) {
  hpl__store *s = p->s;
  hpl__obj *o = p->o;
  if (p->published) hpl__dirlink_loc_retract(s, o->id);
  p->published = 0;
  hpl__room_cancel(s, &p->room);
  hpl__objdig_forget(o);
  hpl__put_set_state(p, HPL__PUT_ENDED);
  hpl__obj_fail(s, o, status, detail);
  if (o->put == p) o->put = NULL;
  hpl__obj_detach(s, o);
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
  hpl__put_set_state(p, HPL__PUT_ENDED);
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
int hpl__put_announce(hpl__put *p, int complete, int64_t timeout_ms) {
  Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
  a.id = p->o->id;
  a.size = p->o->size;
  a.complete = complete;
  a.origin = 1;
  /* at create only the algorithm (the digests follow with LOC_COMPLETE) */
  hpl__objdig_to_wire(p->o, !complete, &a.digest_algo, &a.digests, &a.digest_root);
  hpl__trace("s.announce", a.id);
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
  if (status == HPL_EUNAVAIL && p->state == HPL__PUT_INLINING && !abandoned && o->in_table) {
    /* the directory's inline cache is full: register an ordinary copy */
    hpl__put_set_state(p, HPL__PUT_REGISTERING);
    if (hpl__put_announce(p, 1, -1) == 0) return;
    status = HPL_ENOMEM;
    detail = "out of memory";
  }
  int creating = p->state == HPL__PUT_ANNOUNCING;
  if (p->state == HPL__PUT_ENDED || abandoned || !o->in_table) {
    /* aborted, client gone, or object deleted meanwhile: a location the
     * directory just recorded for us must go again */
    if (status == 0) hpl__dirlink_loc_remove(s, o->id);
    const char *why = "object was deleted while being put";
    if (creating)
      hpl__put_send_create_err(p->cl, p->req, HPL_ESTATE, why);
    else if (p->state != HPL__PUT_ENDED)
      hpl__session_reply(p->cl, p->req, HPL_ESTATE, why);
    if (p->state != HPL__PUT_ENDED) hpl__put_undo(p, HPL_ENOTFOUND, why);
  } else if (status != 0) {
    if (creating)
      hpl__put_send_create_err(p->cl, p->req, status, detail);
    else
      hpl__session_reply(p->cl, p->req, status, detail);
    hpl__put_undo(p, status, detail);
  } else if (creating) {
    o->advertised = 1;
    hpl__put_set_state(p, HPL__PUT_WRITING);
    hpl__put_send_create_rep(p);
  } else {
    o->advertised = 1;
    o->inline_obj = p->state == HPL__PUT_INLINING;
    if (o->inline_obj) s->ctr.inline_puts++;
    put_finish(p);
  }
  hpl__put_free_maybe(p);
}

/* The digests of a put being sealed are made: seal on (or, its client
 * gone, drop it). */
static void digests_ready(hpl__store *s, hpl__obj *o, void *arg) {
  (void)s, (void)o;
  hpl__put *p = arg;
  if (p->state != HPL__PUT_DIGESTING) return;
  hpl__put_set_state(p, HPL__PUT_WRITING);
  if (p->cl->closed && !p->whole)
    hpl__put_drop(p, NULL);
  else
    hpl__put_seal_now(p, p->req, p->timeout_ms);
}

/* Seal the put's object, whose bytes are all written, for request `req`:
 * a small object not yet known to the directory goes to its inline cache,
 * a larger one is registered as a complete copy (both answer once the
 * directory did), an announced one is complete at once. */
void hpl__put_seal_now(hpl__put *p, uint64_t req, int64_t timeout_ms) {
  hpl__store *s = p->s;
  hpl__obj *o = p->o;
  p->req = req;
  if (!o->in_table) {
    hpl__session_reply(p->cl, req, HPL_ESTATE, "object was deleted before it was sealed");
    hpl__put_set_state(p, HPL__PUT_ENDED);
    hpl__put_free_maybe(p);
    return;
  }
  if (!hpl__objdig_seal(s, o, digests_ready, p)) { /* the rest is hashed first */
    p->timeout_ms = timeout_ms;
    hpl__put_set_state(p, HPL__PUT_DIGESTING);
    return;
  }
  o->progress = o->size;
  if (o->advertised) {
    put_finish(p);
    hpl__put_free_maybe(p);
    return;
  }
  int rc;
  /* small: to the directory's inline cache, unless it is one of a batch's
   * larger objects or that link has enough on its way already (a burst:
   * these are fetched from here, in parallel); a published one must
   * confirm its bytes there */
  uint64_t cap = s->cfg.inline_inflight;
  int small = o->size <= hpl__dirlink_caps(s)->inline_max;
  if (small && !p->published &&
      ((p->batch && o->size > BATCH_INLINE_MAX) ||
       (cap && s->inline_out + o->size > cap && s->inline_out))) {
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
    hpl__put_set_state(p, HPL__PUT_INLINING);
    hpl__trace("s.inline", o->id);
    rc = put_ask(p, HPL__MSG_INLINE_PUT, &ip.base, o->data, o->size, timeout_ms);
  } else { /* too much inline on its way, or an inline limit lowered since */
    hpl__put_set_state(p, HPL__PUT_REGISTERING);
    rc = hpl__put_announce(p, 1, timeout_ms);
  }
  if (rc == 0) return;
  s->inline_out -= p->inline_out; /* (no answer will come) */
  p->inline_out = 0;
  hpl__session_reply(p->cl, req, HPL_ENOMEM, "out of memory");
  if (p->whole) { /* nobody holds a handle to abort it with */
    hpl__put_undo(p, HPL_ENOMEM, "out of memory");
    hpl__put_free_maybe(p);
  } else {
    hpl__put_set_state(p, HPL__PUT_WRITING); /* the client may seal again, or abort */
  }
}
