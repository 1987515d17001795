/* fetchgrant.c - what the directory sends a fetch unasked (see fetch.h):
 * GRANTs, the directory naming a sender to this store because a client of
 * ours read a small object directly and will GET it (a granted GET waiting
 * for its GRANT; the fault point that holds GRANTs back); and DIGESTS, more
 * digests of an object being pulled while its origin writes it. The fetch
 * itself is fetch.c's. */
#include <stdlib.h>
#include <utlist.h>

#include "dirlink.h"
#include "fetchint.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "util.h"

void hpl__fetch_on_digests(hpl__store *s, ProtobufCMessage *m) {
  Hplpb__LocNote *n = (Hplpb__LocNote *)m;
  hpl__obj *o = hpl__id_valid(n->id) ? hpl__obj_find(s, n->id) : NULL;
  if (!o || !o->dig) return;
  char detail[200];
  if (hpl__objdig_more(o, n->digest_first, &n->digests, &n->digest_root, detail,
                       sizeof detail) != 0)
    HPL__LOG_WARN("%s", detail);
  if (o->fetch && o->fetch->pull) hpl__puller_digests_more(o->fetch->pull);
}

/* The GRANT a granted GET waits for did not come in time: ask. */
static void grant_late(void *arg) {
  hpl__fetch *f = arg;
  f->s->ctr.grant_waits_expired++;
  HPL__LOG_INFO("'%s': the directory's grant did not come within %d ms; asking", f->o->id,
                HPL__FETCH_GRANT_WAIT_MS);
  hpl__fetch_fire(f, HPL__FEV_GRANT_LATE, &(hpl__fetch_ctx){0});
}

void hpl__fetch_grant_wait(hpl__fetch *f) {
  hpl__otimer_start(f->s->loop, &f->grant_timer, f, HPL__FETCH_GRANT_WAIT_MS, grant_late);
}

static void grant_now(hpl__store *s, ProtobufCMessage *m) {
  Hplpb__AcquireRep *r = (Hplpb__AcquireRep *)m;
  if (!hpl__id_valid(r->id) || r->status || r->inline_ || !r->sender_node) {
    HPL__LOG_WARN("malformed GRANT from the directory ignored");
    return;
  }
  hpl__obj *o = hpl__obj_find(s, r->id);
  hpl__fetch *f = o ? o->fetch : NULL;
  if (o && !(f && f->state == HPL__FETCH_GRANT)) {
    /* held, made here, or asked for already: the directory names the same
     * sender again when that ACQUIRE reaches it, and a copy completing here
     * frees the sender it named */
    s->ctr.grants_ignored++;
    HPL__LOG_DEBUG("'%s': grant ignored (%s)", r->id, f ? "asked already" : "held here");
    return;
  }
  if (!f) {
    /* its client's GET is on the way: pull now, as a copy nobody holds yet */
    o = hpl__obj_new(s, r->id, HPL__OBJ_FETCHING);
    f = o ? hpl__fetch_new(s, o) : NULL;
    if (!f) {
      if (o) hpl__obj_detach(s, o);
      hpl__dirlink_loc_remove(s, r->id); /* the directory listed us: undo */
      return;
    }
    s->ctr.remote_gets++; /* counted here: its GET finds the fetch running */
  }
  s->ctr.grants_taken++;
  hpl__dl_reply rep = {.status = 0, .detail = "", .m = m};
  char detail[400];
  hpl__fetch_ctx x;
  hpl__fetch_event ev = hpl__fetch_answer(f, &rep, &x, detail, sizeof detail);
  hpl__fetch_fire(f, ev, &x);
}

/* Fault point grant_delay_ms: a GRANT kept (packed) until it is handled. */
typedef struct hpl__late_grant {
  hpl__otimer timer;
  struct hpl__late_grant *prev, *next; /* s->fetches->late (utlist) */
  hpl__store *s;
  size_t len;
  uint8_t msg[];
} hpl__late_grant;

static void late_grant_due(void *arg) {
  hpl__late_grant *g = arg;
  DL_DELETE(g->s->fetches->late, g);
  ProtobufCMessage *m = hpl__msg_unpack(HPL__MSG_GRANT, g->msg, g->len);
  if (m) {
    grant_now(g->s, m);
    protobuf_c_message_free_unpacked(m, NULL);
  }
  hpl__otimer_free(&g->timer, g);
}

void hpl__fetch_on_grant(hpl__store *s, ProtobufCMessage *m) {
  uint64_t delay = s->cfg.faults.grant_delay_ms;
  size_t len = delay ? protobuf_c_message_get_packed_size(m) : 0;
  hpl__late_grant *g = delay ? calloc(1, sizeof *g + len) : NULL;
  if (!g) {
    grant_now(s, m);
    return;
  }
  g->s = s;
  g->len = protobuf_c_message_pack(m, g->msg);
  DL_APPEND(s->fetches->late, g);
  hpl__otimer_start(s->loop, &g->timer, g, delay, late_grant_due);
}

void hpl__fetch_grants_stop(hpl__store *s) {
  while (s->fetches->late) { /* held back by the fault point: dropped */
    hpl__late_grant *g = s->fetches->late;
    DL_DELETE(s->fetches->late, g);
    hpl__otimer_free(&g->timer, g);
  }
}
