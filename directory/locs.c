/* locs.c - location updates from stores: LOC_ADD, LOC_NOTE, INLINE_PUT,
 * HELD, EVICT and the copies re-reported at REGISTER (see locs.h). */
#include "locs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "digests.h"
#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "publish.h"
#include "reduce.h"
#include "tombs.h"
#include "trace.h"
#include "util.h"
#include "xlog.h"

/* Tell `node` to drop its copy of `id` (one-way: nobody waits for it). */
static void send_drop(hpl__dir_server *s, uint64_t node, const char *id) {
  Hplpb__DropNote d = HPLPB__DROP_NOTE__INIT;
  d.id = (char *)id;
  hpl__dir_node_send(s, node, HPL__MSG_DROP, 0, &d.base);
}

/* A re-reported copy of an id that was deleted lately (tombs.h): `node`
 * is told to drop it if the id is unknown or only waited for since
 * (pending: no bytes anywhere), or if the copy is older than the delete
 * (held_ms: how long its store has held it; a delete another store
 * re-reported to a new directory may come after copies of it were taken).
 * A copy made after the delete is of a new put: kept. Returns 1 if it was
 * dropped. */
static int drop_if_deleted(hpl__dir_server *s, uint64_t node, const char *id, uint64_t held_ms) {
  uint64_t at = hpl__dir_tombs_at(s, id);
  if (!at) return 0;
  uint64_t now = hpl__now_ms();
  if (held_ms && held_ms < now - at) return 0; /* complete there after the delete */
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, id);
  if (o && o->state != HPL__OBJ_PENDING && !held_ms) return 0;
  hpl__dir_loc *l = o ? hpl__dtab_loc(o, node) : NULL;
  if (l) { /* taken before the delete was known here */
    hpl__dir_xlog(s, HPL__XFER_REMOVE, id, node, l->upstream);
    hpl__dtab_loc_remove(&s->tab, o, node);
    if (!o->locs) hpl__dtab_forget(&s->tab, o);
    else hpl__dtab_changed(&s->tab, o);
  }
  send_drop(s, node, id);
  return 1;
}

/* A delete a store re-reported (HeldNote.tombs) of an object already
 * known here (taken from re-reports before the delete came): the copies
 * complete before it are dropped; the object is forgotten if none is left. */
static void late_delete(hpl__dir_server *s, hpl__dir_obj *o, uint64_t at) {
  hpl__dir_loc *l = o->locs, *next;
  size_t dropped = 0;
  for (; l; l = next) {
    next = l->next;
    if (!l->made_ms || l->made_ms >= at) continue; /* made since: a new put */
    uint64_t node = l->node;
    hpl__dir_xlog(s, HPL__XFER_REMOVE, o->id, node, l->upstream);
    hpl__dtab_loc_remove(&s->tab, o, node);
    send_drop(s, node, o->id);
    dropped++;
  }
  if (!dropped) return;
  s->ctr.held_dropped += dropped;
  HPL__LOG_INFO("'%s' was deleted before this directory led: %zu copies dropped", o->id, dropped);
  if (!o->locs) {
    hpl__dir_xlog(s, HPL__XFER_DELETE, o->id, 0, 0);
    hpl__dtab_forget(&s->tab, o);
  } else {
    hpl__dtab_changed(&s->tab, o);
  }
}

/* The deletes and reduces a store re-reports first (store/handoff.h), in
 * bounds: 0, or HPL_EINVAL with *why set. */
static int held_handoff(hpl__dir_server *s, const Hplpb__HeldNote *m, uint64_t node,
                        const char **why) {
  if (m->n_tombs > HPL__DIR_HELD_TOMBS_MAX || m->n_reduces > HPL__DIR_HELD_REDUCES_MAX) {
    *why = "too many deletes or reduces in one HELD";
    return HPL_EINVAL;
  }
  for (size_t i = 0; i < m->n_tombs; i++) {
    const Hplpb__HeldTomb *t = m->tombs[i];
    if (!hpl__id_valid(t->id) || t->age_ms >= HPL__DIR_TOMB_MS) continue;
    hpl__dir_tombs_add_aged(s, t->id, t->age_ms);
    s->ctr.tombs_learned++;
    hpl__dir_obj *o = hpl__dtab_find(&s->tab, t->id);
    uint64_t at = hpl__dir_tombs_at(s, t->id);
    if (o && o->state != HPL__OBJ_PENDING && at) late_delete(s, o, at);
  }
  for (size_t i = 0; i < m->n_reduces; i++) {
    const Hplpb__HeldReduce *r = m->reduces[i];
    if (!r->req || !hpl__id_valid(r->req->target) || hpl__dir_tombs_has(s, r->req->target))
      continue;
    if (hpl__dir_reduce_remember(s, r->req, r->used, r->n_used, node) == 0)
      s->ctr.reduces_learned++;
  }
  return 0;
}

/* node's complete copy of o, re-reported (HELD, REGISTER): recorded,
 * unlisted again if it was found corrupt before (kept for a delete, named
 * to nobody), its digests taken. hpl__dir_digests_held's result. */
static int held_copy(hpl__dir_server *s, hpl__dir_obj *o, uint64_t node,
                     const Hplpb__HeldObject *h) {
  hpl__dtab_loc_complete(&s->tab, o, node, h->size);
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  uint64_t now = hpl__now_ms();
  if (l && h->held_ms) l->made_ms = h->held_ms < now ? now - h->held_ms : 1;
  if (h->origin) o->maker = node; /* made there (who may delete it: admin.c) */
  if (h->unlisted) {
    hpl__dtab_loc_unlist(&s->tab, o, node, NULL, NULL);
    hpl__dtab_check_lost(&s->tab, o);
  }
  if (l) hpl__dtab_recount_serving(o, l); /* receivers re-reported before it */
  return hpl__dir_digests_held(s, o, node, h->digest_algo, &h->digests, &h->digest_root);
}

/* node's copy of h->id streaming in from h->upstream (a directory new to
 * the store): recorded so the chains in flight are known here. Returns 1
 * if taken. */
static int held_partial(hpl__dir_server *s, uint64_t node, const Hplpb__HeldObject *h,
                        int adopt) {
  if (!h->upstream || !h->size || hpl__dir_tombs_at(s, h->id)) return 0;
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, h->id);
  if (!o && (!adopt || !(o = hpl__dtab_get(&s->tab, h->id)))) return 0;
  return hpl__dtab_loc_partial(&s->tab, o, node, h->size, h->upstream) == 0;
}

void hpl__dir_locs_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg) {
  (void)arg;
  uint64_t node = e->id;
  for (size_t i = 0; i < e->nheld; i++) {
    Hplpb__HeldObject *h = e->held[i];
    if (!h->complete || !hpl__id_valid(h->id)) continue;
    if (drop_if_deleted(s, node, h->id, h->held_ms)) {
      s->ctr.held_dropped++;
      continue;
    }
    hpl__dir_obj *o = hpl__dtab_get(&s->tab, h->id);
    if (!o) continue;
    held_copy(s, o, node, h);
    hpl__dtab_changed(&s->tab, o);
  }
}

void hpl__dir_locs_on_held(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__HeldNote *m = (Hplpb__HeldNote *)f->msg;
  uint64_t node = f->dc->node->id;
  size_t taken = 0, dropped = 0;
  const char *why = NULL;
  if (held_handoff(s, m, node, &why) != 0) {
    if (f->req) hpl__conn_reply(f->dc->c, f->req, HPL_EINVAL, why);
    return;
  }
  for (size_t i = 0; i < m->n_held; i++) {
    Hplpb__HeldObject *h = m->held[i];
    if (!hpl__id_valid(h->id)) continue;
    if (!h->complete) {
      taken += (size_t)held_partial(s, node, h, m->adopt);
      continue;
    }
    if (drop_if_deleted(s, node, h->id, h->held_ms)) { /* deleted before it came back */
      dropped++;
      continue;
    }
    hpl__dir_obj *o = hpl__dtab_find(&s->tab, h->id);
    if (!o && m->adopt && !(o = hpl__dtab_get(&s->tab, h->id))) continue; /* no memory: skipped */
    int other = o && o->has_size && o->size != h->size && !hpl__dtab_loc(o, node);
    if (!o || other) { /* gone, or another object of that id since */
      if (!m->adopt) {
        send_drop(s, node, h->id);
        dropped++;
      }
      continue;
    }
    if (held_copy(s, o, node, h))
      hpl__dtab_check_lost(&s->tab, o); /* its copy was not listed after all */
    hpl__dtab_changed(&s->tab, o);
    taken++;
  }
  s->ctr.held_taken += taken;
  s->ctr.held_dropped += dropped;
  if (dropped)
    HPL__LOG_INFO(
        "node %016llx re-reported %zu objects the directory no longer has: told to drop them",
        (unsigned long long)node, dropped);
  if (f->req) hpl__conn_reply(f->dc->c, f->req, 0, NULL);
}

void hpl__dir_locs_on_add(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__LocAddReq *m = (Hplpb__LocAddReq *)f->msg;
  hpl__trace("d.locadd", m->id);
  hpl__dir_obj *o = hpl__dtab_get(&s->tab, m->id);
  if (!o) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  if (o->state == HPL__OBJ_LOST && m->origin)
    hpl__dir_xlog(s, HPL__XFER_DELETE, o->id, 0, 0); /* revived */
  if (m->origin) hpl__dir_tombs_remove(s, m->id); /* put again after a delete */
  int rc = hpl__dtab_add_loc(&s->tab, o, f->dc->node->id, m->size, m->complete, m->origin);
  char detail[320] = "";
  if (rc == 0 && m->origin) o->maker = f->dc->node->id;
  if (rc == 0 && m->origin) /* the put's digests (or, at create, their algorithm) */
    rc = hpl__dir_digests_take(o, m->digest_algo, &m->digests, &m->digest_root, NULL, detail,
                               sizeof detail);
  else if (rc == 0 && m->complete) /* a copy made there (a ring's target): as a re-report */
    hpl__dir_digests_held(s, o, f->dc->node->id, m->digest_algo, &m->digests, &m->digest_root);
  if (rc == HPL_EEXIST)
    snprintf(detail, sizeof detail, "object '%s' already exists in the cluster", m->id);
  else if (rc == HPL_EMISMATCH)
    snprintf(detail, sizeof detail, "object '%s' exists with size %llu, not %llu", m->id,
             (unsigned long long)o->size, (unsigned long long)m->size);
  hpl__conn_reply(f->dc->c, f->req, rc, detail);
  hpl__dtab_changed(&s->tab, o);
}

/* Record that node's copy of o ends as `kind` (DONE or REMOVE). */
static void xlog_loc_end(hpl__dir_server *s, hpl__dir_obj *o, uint64_t node, int kind) {
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  if (!l || (kind == HPL__XFER_DONE && l->complete)) return;
  hpl__dir_xlog(s, kind, o->id, node, l->upstream);
}

void hpl__dir_locs_on_note(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__LocNote *m = (Hplpb__LocNote *)f->msg;
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, m->id);
  if (f->req) hpl__conn_reply(f->dc->c, f->req, 0, NULL); /* the sender waits for it */
  if (!o) return;
  uint64_t node = f->dc->node->id;
  if (m->kind == HPL__LOC_COMPLETE) {
    hpl__dir_cost_note_rate(s, m->rate);
    hpl__dir_loc *l = hpl__dtab_loc(o, node);
    char why[200];
    if (l && l->origin && /* the origin's digests, made by the end of its put */
        hpl__dir_digests_complete(s, o, m, why, sizeof why) != 0)
      HPL__LOG_WARN("node %016llx: %s", (unsigned long long)node, why);
    xlog_loc_end(s, o, node, HPL__XFER_DONE);
    hpl__dtab_loc_complete(&s->tab, o, node, o->size);
  } else if (m->kind == HPL__LOC_DIGESTS) {
    hpl__dir_loc *l = hpl__dtab_loc(o, node);
    if (l && l->origin) hpl__dir_digests_more(s, o, m);
    return;
  } else if (m->kind == HPL__LOC_RETRACT) {
    hpl__dir_publish_retract(s, node, o); /* o may be gone; waiters wait for a new put */
    return;
  } else if (m->kind == HPL__LOC_REMOVE && m->corrupt) {
    /* its own copy failed its digests when read back (a spill file) */
    xlog_loc_end(s, o, node, HPL__XFER_REMOVE);
    hpl__dir_digests_corrupt(s, f->dc->node, o, node, m->corrupt_unit);
  } else if (m->kind == HPL__LOC_REMOVE) {
    xlog_loc_end(s, o, node, HPL__XFER_REMOVE);
    hpl__dtab_loc_remove(&s->tab, o, node);
    if (o->state == HPL__OBJ_READY && !o->locs && !o->is_inline)
      o->state = HPL__OBJ_PENDING; /* an aborted put, nothing left: as if never put */
    else
      hpl__dtab_check_lost(&s->tab, o);
  }
  hpl__dtab_changed(&s->tab, o);
}

void hpl__dir_locs_on_inline_put(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__InlinePutReq *m = (Hplpb__InlinePutReq *)f->msg;
  hpl__trace("d.inline", m->id);
  hpl__conn *c = f->dc->c;
  uint64_t plen = f->plen;
  if (plen != m->size || plen > s->cfg.inline_max) {
    hpl__conn_reply(c, f->req, HPL_EINVAL, "inline put: size does not match payload or limit");
    return;
  }
  if (hpl__dir_publish_inline_put(s, f->dc->node->id, m->id, f->payload, plen)) {
    hpl__conn_reply(c, f->req, 0, NULL);
    return; /* served since the PUBLISH: nothing more to do */
  }
  if (s->tab.inline_bytes + plen > s->cfg.inline_memory) {
    hpl__conn_reply(c, f->req, HPL_EUNAVAIL, "directory inline cache full");
    return;
  }
  hpl__dir_obj *o = hpl__dtab_get(&s->tab, m->id);
  uint8_t *copy = malloc(plen ? plen : 1);
  if (!o || !copy) {
    free(copy);
    hpl__conn_reply(c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  if (plen) memcpy(copy, f->payload, plen);
  char why[320];
  int rc = hpl__dir_digests_check(plen, m->digest_algo, &m->digests, &m->digest_root, copy, why,
                                  sizeof why);
  if (rc) { /* bytes that do not match their own digest: not taken */
    free(copy);
    hpl__conn_reply(c, f->req, rc, why);
    hpl__dtab_gc(&s->tab, o);
    return;
  }
  rc = hpl__dtab_set_inline(&s->tab, o, copy, plen);
  if (rc == 0 && !o->maker) /* a restarted directory: the maker's HELD says (held_copy) */
    o->maker = f->dc->node->id;
  if (rc == 0 && hpl__dir_digests_take(o, m->digest_algo, &m->digests, &m->digest_root, NULL,
                                       why, sizeof why) != 0)
    HPL__LOG_WARN("inline '%s' kept without digests: %s", o->id, why); /* no memory */
  if (rc) {
    free(copy);
    char detail[320];
    snprintf(detail, sizeof detail, "object '%s' already exists in the cluster", m->id);
    hpl__conn_reply(c, f->req, rc, detail);
    return;
  }
  hpl__dtab_add_loc(&s->tab, o, f->dc->node->id, plen, 1, 0);
  hpl__conn_reply(c, f->req, 0, NULL);
  hpl__dtab_changed(&s->tab, o);
}

/* Another complete copy of o than node's that can serve: on a live node
 * that is not draining or suspected, or the inline bytes. */
static int other_copy_stays(hpl__dir_server *s, hpl__dir_obj *o, uint64_t node) {
  if (o->is_inline) return 1;
  for (hpl__dir_loc *l = o->locs; l; l = l->next) {
    if (l->node == node || !l->complete || l->unlisted) continue;
    if (s->tab.usable && !s->tab.usable(l->node, s->tab.usable_arg)) continue;
    if (s->tab.suspected && s->tab.suspected(l->node, s->tab.usable_arg)) continue;
    return 1;
  }
  return 0;
}

void hpl__dir_locs_on_evict(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__EvictReq *m = (Hplpb__EvictReq *)f->msg;
  uint64_t node = f->dc->node->id;
  size_t n = m->n_ids;
  if (n > HPL__DIR_EVICT_MAX) {
    char detail[96];
    snprintf(detail, sizeof detail, "at most %d ids per EVICT", HPL__DIR_EVICT_MAX);
    hpl__conn_reply(f->dc->c, f->req, HPL_EINVAL, detail);
    return;
  }
  protobuf_c_boolean *granted = calloc(n ? n : 1, sizeof *granted);
  if (!granted) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  for (size_t i = 0; i < n; i++) {
    if (!hpl__id_valid(m->ids[i])) continue;
    hpl__dir_obj *o = hpl__dtab_find(&s->tab, m->ids[i]);
    hpl__dir_loc *l = o ? hpl__dtab_loc(o, node) : NULL;
    /* only a complete copy nobody pulls from, with another one staying */
    if (!l || !l->complete || l->serving || !other_copy_stays(s, o, node)) continue;
    xlog_loc_end(s, o, node, HPL__XFER_REMOVE);
    hpl__dtab_loc_remove(&s->tab, o, node);
    granted[i] = 1;
    s->ctr.evictions_granted++;
    hpl__dtab_changed(&s->tab, o);
  }
  Hplpb__EvictRep r = HPLPB__EVICT_REP__INIT;
  r.n_granted = n;
  r.granted = granted;
  hpl__conn_send(f->dc->c, HPL__MSG_EVICT_REP, f->req, &r.base, NULL, 0, 0, NULL, NULL);
  free(granted);
}
