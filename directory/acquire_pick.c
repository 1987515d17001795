/* acquire_pick.c - the answer to one ACQUIRE now (see acquire_int.h):
 * inline bytes, the sender granted to a PEEK's store already, the
 * allreduce chain's predecessor, or the object table's pick; a PEEK's
 * grant of a sender to the client's store; and the replies that name a
 * sender, an error, or "stay with yours". */
#include <stdio.h>
#include <string.h>

#include "acquire_int.h"
#include "digests.h"
#include "hoplite.h"
#include "log.h"
#include "reduce.h"
#include "util.h"
#include "xlog.h"

void hpl__dir_acquire_reply_err(hpl__dir_node *asker, uint64_t req, int status,
                                const char *detail) {
  Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
  r.status = status;
  r.detail = (char *)detail;
  hpl__conn_send(asker->conn->c, HPL__MSG_ACQUIRE_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* Tell `asker` the sender just assigned to it: as the answer to its
 * ACQUIRE `req`, or (type GRANT, req 0) unasked. 0, or -1 if the sender is
 * unknown (its location is dropped; the caller answers). */
static int send_sender(hpl__dir_server *s, hpl__dir_node *asker, unsigned type, uint64_t req,
                       hpl__dir_obj *o, uint64_t sender) {
  hpl__dir_node *n = hpl__dir_node_find(s, sender);
  if (!n) { /* cannot happen: locations only name live nodes */
    hpl__dtab_loc_remove(&s->tab, o, sender);
    return -1;
  }
  Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
  r.size = o->size;
  r.sender_node = n->id;
  r.sender_addr = n->addr;
  r.sender_port = (uint32_t)n->port;
  r.gen = o->gen;
  hpl__dir_loc *sl = hpl__dtab_loc(o, sender);
  r.sender_complete = sl && sl->complete;
  hpl__dir_digests_fill(o, &r.digest_algo, &r.digests, &r.digest_root);
  r.digests_none = hpl__dir_digests_none(o);
  if (type == HPL__MSG_GRANT) r.id = o->id;
  hpl__conn_send(asker->conn->c, type, req, &r.base, NULL, 0, 0, NULL, NULL);
  return 0;
}

/* Answer with the sender just assigned to the asker. */
void hpl__dir_acquire_reply_sender(hpl__dir_server *s, hpl__dir_node *asker, uint64_t req,
                                   hpl__dir_obj *o, uint64_t sender) {
  if (send_sender(s, asker, HPL__MSG_ACQUIRE_REP, req, o, sender) != 0) {
    hpl__dir_acquire_reply_err(asker, req, HPL_EUNAVAIL, "sender vanished");
    return;
  }
  s->ctr.senders_assigned++;
  hpl__dir_xlog(s, HPL__XFER_ASSIGN, o->id, asker->id, sender);
  HPL__LOG_DEBUG("acquire '%s': node %016llx pulls from %016llx", o->id,
                 (unsigned long long)asker->id, (unsigned long long)sender);
}

/* Answer an ACQUIRE for `o` from `asker` if possible. Returns 1 if
 * answered, 0 if the asker must keep waiting; *ring_wait (if not NULL) is
 * set when it waits for its allreduce ring predecessor (since_ms: when it
 * asked; 0 disables that preference). */
int hpl__dir_acquire_try(hpl__dir_server *s, hpl__dir_node *asker, uint64_t req, hpl__dir_obj *o,
                         uint64_t avoid, uint64_t since_ms, int *ring_wait) {
  hpl__conn *c = asker->conn->c;
  if (ring_wait) *ring_wait = 0;
  if (o->is_inline) {
    Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
    r.size = o->size;
    r.inline_ = 1;
    r.gen = o->gen;
    hpl__dir_digests_fill(o, &r.digest_algo, &r.digests, &r.digest_root);
    hpl__conn_send(c, HPL__MSG_ACQUIRE_REP, req, &r.base, o->inl, o->size, 1, NULL, NULL);
    /* remember the holder so a delete reaches it */
    hpl__dtab_add_loc(&s->tab, o, asker->id, o->size, 1, 0);
    s->ctr.inline_served++;
    return 1;
  }
  char refused[320];
  if (hpl__dir_digests_refused(o, refused, sizeof refused)) {
    hpl__dir_acquire_reply_err(asker, req, HPL_ECORRUPT, refused);
    return 1;
  }
  hpl__dir_loc *me = hpl__dtab_loc(o, asker->id);
  if (me && me->granted) {
    /* a sender was granted to the asker (hpl__dir_acquire_peek_grant) and its store asked
     * before the GRANT reached it (it then ignores the GRANT): the same
     * sender again, whose slot the asker holds, unless it reports it */
    me->granted = 0;
    if (!avoid && !me->complete && me->upstream) {
      hpl__dir_acquire_reply_sender(s, asker, req, o, me->upstream);
      return 1;
    }
  }
  uint64_t sender = 0;
  hpl__dir_loc *from = NULL;
  int ring = since_ms ? hpl__dir_reduce_ring_sender(s, o, asker->id, avoid, since_ms, &from) : 0;
  if (ring == 2) {
    if (ring_wait) *ring_wait = 1;
    return 0;
  }
  int rc;
  if (ring == 1) {
    sender = from->node;
    rc = hpl__dtab_assign(&s->tab, o, asker->id, from);
    s->ctr.ring_assigned++;
  } else {
    rc = hpl__dtab_pick_sender(&s->tab, o, asker->id, avoid, &sender);
  }
  if (rc == 1) return 0;
  if (rc < 0) {
    char detail[320];
    if (rc == HPL_ELOST && hpl__dir_digests_lost_detail(o, detail, sizeof detail)) {
      rc = HPL_ECORRUPT; /* the copies left were dropped as corrupt */
      s->ctr.lost_replies++;
    } else if (rc == HPL_ELOST) {
      snprintf(detail, sizeof detail, "object '%s' lost: no copy that can finish remains", o->id);
      s->ctr.lost_replies++;
    } else if (o->state == HPL__OBJ_FAILED) {
      snprintf(detail, sizeof detail, "%s", o->fail_detail ? o->fail_detail : hpl_strerror(rc));
    } else {
      snprintf(detail, sizeof detail, "cannot find a sender for '%s'", o->id);
    }
    hpl__dir_acquire_reply_err(asker, req, rc, detail);
    return 1;
  }
  hpl__dir_acquire_reply_sender(s, asker, req, o, sender);
  return 1;
}

/* A PEEK of `o`, which is not inline, on connection `dc` from a client of
 * store `node`: name a sender to that store now (GRANT), as the store's own
 * ACQUIRE would, so that the client's GET does not cost another round trip
 * to the directory. Only when that store takes grants, is on the reader's
 * host (its address is the one the PEEK came from: a reader cannot make a
 * store elsewhere fetch) and holds no copy yet, no allreduce ring order
 * applies, and a sender can be assigned at once; else 0, and the store
 * asks as usual. */
int hpl__dir_acquire_peek_grant(hpl__dir_server *s, const hpl__dir_conn *dc, hpl__dir_obj *o,
                                uint64_t node) {
  hpl__dir_node *n = node ? hpl__dir_node_find(s, node) : NULL;
  if (s->cfg.no_grants || !n || !n->conn || !n->grants || n->draining || o->is_inline ||
      o->state != HPL__OBJ_READY || strcmp(n->addr, dc->peer) != 0 || hpl__dtab_loc(o, node) ||
      (o->dig && o->dig->conflict)) /* (its ACQUIRE is refused) */
    return 0;
  hpl__dir_loc *from = NULL;
  if (hpl__dir_reduce_ring_sender(s, o, node, 0, hpl__now_ms(), &from) != 0) return 0;
  uint64_t sender = 0;
  if (hpl__dtab_pick_sender(&s->tab, o, node, 0, &sender) != 0) return 0;
  if (send_sender(s, n, HPL__MSG_GRANT, 0, o, sender) != 0) {
    hpl__dtab_loc_remove(&s->tab, o, node); /* undo the assignment: the store asks */
    return 0;
  }
  hpl__dir_loc *l = hpl__dtab_loc(o, node);
  if (l) l->granted = 1;
  s->ctr.senders_assigned++;
  s->ctr.peeks_granted++;
  hpl__dir_xlog(s, HPL__XFER_ASSIGN, o->id, node, sender);
  HPL__LOG_DEBUG("peek '%s': granted to node %016llx, which pulls from %016llx", o->id,
                 (unsigned long long)node, (unsigned long long)sender);
  return 1;
}

/* "Stay with your sender; report it again after retry_ms if it is still
 * silent": an answer naming no sender. */
void hpl__dir_acquire_reply_stay(hpl__dir_node *asker, uint64_t req, uint64_t retry_ms) {
  Hplpb__AcquireRep r = HPLPB__ACQUIRE_REP__INIT;
  r.retry_ms = (uint32_t)(retry_ms > UINT32_MAX ? UINT32_MAX : retry_ms);
  hpl__conn_send(asker->conn->c, HPL__MSG_ACQUIRE_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}
