/* dlheld.c - re-reporting what this store holds to the directory after it
 * registered (HELD pieces: first the deletes and reduces a new directory
 * learns from us, handoff.h; then each copy with its digests, and after a
 * directory restart the small objects' bytes), a slice at a time (see
 * dirlink.h). */
#include <stdlib.h>
#include <string.h>

#include "dlint.h"
#include "handoff.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "util.h"

/* What one HELD carries at most (objects, and bytes of ids), and how many
 * objects one piece may look at. */
#define HELD_PIECE 2048
#define HELD_PIECE_BYTES (256u * 1024)
#define HELD_SCAN (4 * HELD_PIECE)
/* ...and deletes and reduces (directory/locs.c takes at most as many) */
#define HELD_TOMBS 4096
#define HELD_REDUCES 64
static void held_next(hpl__dirlink *dl);

static void held_reply(hpl__store *s, const hpl__dl_reply *r, void *arg) {
  hpl__dirlink *dl = s->dl;
  if ((uint64_t)(uintptr_t)arg != dl->held_gen) return; /* a piece sent on an older connection */
  if (r->status != 0) {
    HPL__LOG_WARN("the directory did not take what we hold: %s (%s)", hpl_strerror(r->status),
                  r->detail);
    dl->held_pre = 0;
    hpl__obj_walk_end(s, &dl->held_walk);
    return;
  }
  held_next(dl);
}

/* A complete copy of `id` is here (a reduce's target is re-reported only then). */
static int held_here(hpl__store *s, const char *id) {
  hpl__obj *o = hpl__obj_find(s, id);
  return o && (o->state == HPL__OBJ_SEALED || o->state == HPL__OBJ_SPILLED);
}

/* Before the copies: a piece of the deletes we learned lately and of the
 * reduces made here (handoff.h), so the directory records the deletes
 * before it takes a copy of them (from us or from a store after us) and
 * knows the reduces' sources. Returns 1 if a piece went, 0 when none is
 * left (the copies follow). */
static int held_pre_next(hpl__dirlink *dl) {
  hpl__store *s = dl->s;
  Hplpb__HeldTomb *tombs = malloc(HELD_TOMBS * sizeof *tombs);
  Hplpb__HeldTomb **tp = malloc(HELD_TOMBS * sizeof *tp);
  Hplpb__HeldReduce rds[HELD_REDUCES], *rp[HELD_REDUCES];
  size_t nt = 0, nr = 0;
  int sent = 0;
  if (tombs && tp) {
    nt = hpl__handoff_tombs(s, &dl->held_tomb_cur, tombs, HELD_TOMBS);
    if (nt < HELD_TOMBS) /* the deletes first: reduces once they are all out */
      nr = hpl__handoff_reduces(s, &dl->held_rd_cur, rds, HELD_REDUCES, HELD_PIECE_BYTES,
                                held_here);
  }
  if (nt || nr) {
    for (size_t i = 0; i < nt; i++) tp[i] = &tombs[i];
    for (size_t i = 0; i < nr; i++) rp[i] = &rds[i];
    Hplpb__HeldNote n = HPLPB__HELD_NOTE__INIT;
    n.n_tombs = nt;
    n.tombs = tp;
    n.n_reduces = nr;
    n.reduces = rp;
    n.adopt = dl->held_adopt;
    if (hpl__dirlink_request(s, HPL__MSG_HELD, &n.base, NULL, 0, -1, held_reply,
                             (void *)(uintptr_t)dl->held_gen) == 0) {
      s->ctr.handoff_tombs_sent += nt;
      s->ctr.handoff_reduces_sent += nr;
      sent = 1;
    } else {
      HPL__LOG_WARN("out of memory re-reporting deletes and reduces; going on with the copies");
    }
  } else if (!tombs || !tp) {
    HPL__LOG_WARN("out of memory re-reporting deletes and reduces; going on with the copies");
  }
  hpl__handoff_reduces_done(rds, nr);
  free(tombs);
  free(tp);
  if (!sent) dl->held_pre = 0;
  return sent;
}

/* Send the next piece of what we hold: complete copies the directory knew
 * of (`advertised`; one being announced right now is announced by its own
 * request), small ones included (it lists us as their holder). After a
 * restart the directory lost the small objects' bytes: they go first, each
 * in an INLINE_PUT (answered before the HELD that follows them). The next
 * piece goes when this one is answered, so the directory takes a store of
 * millions of objects in slices between its other work. */
static void held_next(hpl__dirlink *dl) {
  hpl__store *s = dl->s;
  if (dl->held_pre && held_pre_next(dl)) return;
  if (!dl->held_walk.open) return; /* the last piece was answered */
  Hplpb__HeldObject *held = malloc(HELD_PIECE * sizeof *held);
  Hplpb__HeldObject **ptrs = malloc(HELD_PIECE * sizeof *ptrs);
  if (!held || !ptrs) {
    free(held);
    free(ptrs);
    HPL__LOG_WARN("out of memory re-reporting what we hold; trying again at the next registration");
    hpl__obj_walk_end(s, &dl->held_walk);
    return;
  }
  size_t k = 0, bytes = 0, scanned = 0;
  int end = 0;
  while (k < HELD_PIECE && bytes < HELD_PIECE_BYTES && scanned < HELD_SCAN) {
    hpl__obj *o = hpl__obj_walk_next(s, &dl->held_walk);
    if (!o) {
      end = 1;
      break;
    }
    scanned++;
    if ((o->state != HPL__OBJ_SEALED && o->state != HPL__OBJ_SPILLED) || !o->advertised) continue;
    if (dl->held_inline && o->inline_obj) {
      Hplpb__InlinePutReq p = HPLPB__INLINE_PUT_REQ__INIT;
      p.id = o->id;
      p.size = o->size;
      hpl__objdig_to_wire(o, 0, &p.digest_algo, &p.digests, &p.digest_root);
      hpl__dirlink_request(s, HPL__MSG_INLINE_PUT, &p.base, o->data, o->size, -1,
                           hpl__dirlink_ignore_reply, NULL);
      bytes += o->size;
    }
    hplpb__held_object__init(&held[k]);
    held[k].id = o->id;
    held[k].size = o->size;
    held[k].complete = 1;
    held[k].inline_ = o->inline_obj;
    held[k].unlisted = o->unlisted;
    held[k].origin = o->primary;
    if (o->sealed_ms) /* (at least 1: 0 says unknown) */
      held[k].held_ms = hpl__now_ms() - o->sealed_ms + 1;
    /* its digests (at most 8 MiB for the largest object that has them) */
    hpl__objdig_to_wire(o, 0, &held[k].digest_algo, &held[k].digests, &held[k].digest_root);
    ptrs[k] = &held[k];
    bytes += strlen(o->id) + 16 + held[k].digests.len + held[k].digest_root.len;
    k++;
  }
  dl->held_sent += k;
  if (k > 0 || !end) {
    Hplpb__HeldNote n = HPLPB__HELD_NOTE__INIT;
    n.held = ptrs;
    n.n_held = k;
    n.adopt = dl->held_adopt;
    if (hpl__dirlink_request(s, HPL__MSG_HELD, &n.base, NULL, 0, -1, held_reply,
                             (void *)(uintptr_t)dl->held_gen) != 0) {
      HPL__LOG_WARN(
          "out of memory re-reporting what we hold; trying again at the next registration");
      hpl__obj_walk_end(s, &dl->held_walk);
      end = 0;
    }
  }
  free(held);
  free(ptrs);
  if (end && dl->held_sent) {
    s->ctr.held_report_objects = dl->held_sent;
    s->ctr.held_report_ms = hpl__now_ms() - dl->held_t0_ms;
    HPL__LOG_INFO("re-reported %zu objects to the directory in %llu ms", dl->held_sent,
                  (unsigned long long)s->ctr.held_report_ms);
  }
}

/* Copies streaming in, re-reported to a directory new to us (at most this
 * many: the rest it learns of as they complete). */
#define HELD_PARTIALS 1024

/* To a new directory: the copies streaming in now, with the node each is
 * pulled from, so it knows the chains in flight: a receiver whose sender
 * was lost is then given that sender's own upstream (idle now) rather
 * than a copy already serving someone. One piece, answered by nobody. */
static void held_partials(hpl__dirlink *dl) {
  hpl__store *s = dl->s;
  if (!dl->held_adopt || !dl->incoming) return;
  hpl__dl_incoming *in = malloc(HELD_PARTIALS * sizeof *in);
  Hplpb__HeldObject *held = malloc(HELD_PARTIALS * sizeof *held);
  Hplpb__HeldObject **ptrs = malloc(HELD_PARTIALS * sizeof *ptrs);
  size_t n = in && held && ptrs ? dl->incoming(s, in, HELD_PARTIALS) : 0, k = 0;
  for (size_t i = 0; i < n && i < HELD_PARTIALS; i++) {
    if (!in[i].sender || !in[i].size) continue;
    hplpb__held_object__init(&held[k]);
    held[k].id = (char *)in[i].id;
    held[k].size = in[i].size;
    held[k].upstream = in[i].sender;
    ptrs[k] = &held[k];
    k++;
  }
  if (k) {
    Hplpb__HeldNote m = HPLPB__HELD_NOTE__INIT;
    m.held = ptrs;
    m.n_held = k;
    m.adopt = 1;
    hpl__dirlink_request(s, HPL__MSG_HELD, &m.base, NULL, 0, -1, hpl__dirlink_ignore_reply, NULL);
  }
  free(in);
  free(held);
  free(ptrs);
}

/* Walk what we hold from the start, sending the first piece. */
static void held_begin(hpl__dirlink *dl) {
  held_partials(dl);
  dl->held_pre = 1;
  dl->held_tomb_cur = dl->held_rd_cur = 0;
  if (hpl__obj_count(dl->s) > 0) hpl__obj_walk_begin(dl->s, &dl->held_walk);
  held_next(dl);
}

static void held_delayed_cb(uv_timer_t *t) {
  hpl__dirlink *dl = t->data;
  if (!dl->stopping && dl->state == HPL__DL_READY) held_begin(dl);
}

void hpl__dirlink_held_start(hpl__dirlink *dl, int adopt, int with_inline) {
  hpl__store *s = dl->s;
  hpl__obj_walk_end(s, &dl->held_walk);
  dl->held_pre = 0;
  uv_timer_stop(&dl->held_delay);
  dl->held_gen++;
  dl->held_adopt = adopt;
  dl->held_inline = with_inline;
  dl->held_sent = 0;
  dl->held_t0_ms = hpl__now_ms();
  if (s->cfg.faults.held_delay_ms) /* fault point: a slow re-report */
    uv_timer_start(&dl->held_delay, held_delayed_cb, s->cfg.faults.held_delay_ms, 0);
  else
    held_begin(dl);
}

void hpl__dirlink_held_stop(hpl__dirlink *dl) {
  dl->held_pre = 0;
  hpl__obj_walk_end(dl->s, &dl->held_walk);
  dl->held_gen++;
}
