/* fetchgrant.c - GRANTs (see fetch.h): the directory naming a sender to
 * this store unasked, because a client of ours read a small object
 * directly and will GET it; a granted GET waiting for its GRANT; the fault
 * point that holds GRANTs back. The fetch itself is fetch.c's. */
#include <stdlib.h>
#include <utlist.h>

#include "dirlink.h"
#include "fetchint.h"
#include "hoplite.h"
#include "log.h"
#include "util.h"

/* The GRANT a granted GET waits for did not come in time: ask. */
static void grant_late(void *arg) {
  st_fetch *f = arg;
  f->s->ctr.grant_waits_expired++;
  LOG_INFO("'%s': the directory's grant did not come within %d ms; asking", f->o->id,
           FETCH_GRANT_WAIT_MS);
  fetch_fire(f, FEV_GRANT_LATE, &(fetch_ctx){0});
}

void fetch_grant_wait(st_fetch *f) {
  hpl__otimer_start(f->s->loop, &f->grant_timer, f, FETCH_GRANT_WAIT_MS, grant_late);
}

static void grant_now(store *s, ProtobufCMessage *m) {
  Hplpb__AcquireRep *r = (Hplpb__AcquireRep *)m;
  if (!hpl__id_valid(r->id) || r->status || r->inline_ || !r->sender_node) {
    LOG_WARN("malformed GRANT from the directory ignored");
    return;
  }
  st_obj *o = store_find(s, r->id);
  st_fetch *f = o ? o->fetch : NULL;
  if (o && !(f && f->state == FETCH_GRANT)) {
    /* held, made here, or asked for already: the directory names the same
     * sender again when that ACQUIRE reaches it, and a copy completing here
     * frees the sender it named */
    s->ctr.grants_ignored++;
    LOG_DEBUG("'%s': grant ignored (%s)", r->id, f ? "asked already" : "held here");
    return;
  }
  if (!f) {
    /* its client's GET is on the way: pull now, as a copy nobody holds yet */
    o = store_obj_new(s, r->id, OBJ_FETCHING);
    f = o ? fetch_new(s, o) : NULL;
    if (!f) {
      if (o) store_obj_detach(s, o);
      dirlink_loc_remove(s, r->id); /* the directory listed us: undo */
      return;
    }
    s->ctr.remote_gets++; /* counted here: its GET finds the fetch running */
  }
  s->ctr.grants_taken++;
  dl_reply rep = {.status = 0, .detail = "", .m = m};
  char detail[400];
  fetch_ctx x;
  fetch_event ev = fetch_answer(f, &rep, &x, detail, sizeof detail);
  fetch_fire(f, ev, &x);
}

/* Fault point grant_delay_ms: a GRANT kept (packed) until it is handled. */
typedef struct late_grant {
  hpl__otimer timer;
  struct late_grant *prev, *next; /* s->fetches->late (utlist) */
  store *s;
  size_t len;
  uint8_t msg[];
} late_grant;

static void late_grant_due(void *arg) {
  late_grant *g = arg;
  DL_DELETE(g->s->fetches->late, g);
  ProtobufCMessage *m = hpl__msg_unpack(HPL__MSG_GRANT, g->msg, g->len);
  if (m) {
    grant_now(g->s, m);
    protobuf_c_message_free_unpacked(m, NULL);
  }
  hpl__otimer_free(&g->timer, g);
}

void fetch_on_grant(store *s, ProtobufCMessage *m) {
  uint64_t delay = s->cfg.faults.grant_delay_ms;
  size_t len = delay ? protobuf_c_message_get_packed_size(m) : 0;
  late_grant *g = delay ? calloc(1, sizeof *g + len) : NULL;
  if (!g) {
    grant_now(s, m);
    return;
  }
  g->s = s;
  g->len = protobuf_c_message_pack(m, g->msg);
  DL_APPEND(s->fetches->late, g);
  hpl__otimer_start(s->loop, &g->timer, g, delay, late_grant_due);
}

void fetch_grants_stop(store *s) {
  while (s->fetches->late) { /* held back by the fault point: dropped */
    late_grant *g = s->fetches->late;
    DL_DELETE(s->fetches->late, g);
    hpl__otimer_free(&g->timer, g);
  }
}
