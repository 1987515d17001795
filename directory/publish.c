/* publish.c - small objects clients PUBLISH ahead of their store's put,
 * kept within bounds (see publish.h). */
#include "publish.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "trace.h"
#include "util.h"

/* A publish no store confirmed yet. */
typedef struct pub_entry {
  UT_hash_handle hh; /* by id */
  char *id;
  uint64_t bytes, node;
  hpl__dir_conn *dc;  /* the client's connection; NULL once it closed */
  uint64_t orphan_ms; /* when it closed */
} pub_entry;

/* Bytes published naming one node and not confirmed. */
typedef struct node_bytes {
  UT_hash_handle hh; /* by node */
  uint64_t node, bytes;
} node_bytes;

/* The module's state (s->publish). */
typedef struct hpl__dir_publish {
  pub_entry *by_id;
  node_bytes *nodes;
  uv_timer_t timer; /* the sweep of orphans */
} hpl__dir_publish;

#define SWEEP_MS 1000

static uint64_t node_quota(const hpl__dir_server *s) {
  return s->cfg.publish_quota ? s->cfg.publish_quota : HPL__DIR_PUBLISH_NODE_QUOTA;
}

static node_bytes *node_of(hpl__dir_publish *p, uint64_t node) {
  node_bytes *n;
  HASH_FIND(hh, p->nodes, &node, sizeof node, n);
  return n;
}

/* The entry goes (its publish was confirmed, retracted, forgotten). */
static void release(hpl__dir_publish *p, pub_entry *e) {
  node_bytes *n = node_of(p, e->node);
  if (n && (n->bytes -= e->bytes) == 0) {
    HASH_DEL(p->nodes, n);
    free(n);
  }
  if (e->dc) {
    e->dc->pub_bytes -= e->bytes;
    e->dc->pub_n--;
  }
  HASH_DEL(p->by_id, e);
  free(e->id);
  free(e);
}

static pub_entry *entry_of(hpl__dir_publish *p, const char *id) {
  pub_entry *e;
  HASH_FIND_STR(p->by_id, id, e);
  return e;
}

/* ------------------------------------------------------------------ PUBLISH */

/* Why a PUBLISH of `m` (plen bytes) from dc is not taken, or NULL if it may
 * be. */
static const char *refusal(hpl__dir_server *s, const hpl__dir_conn *dc,
                           const Hplpb__InlinePutReq *m, uint64_t plen, char *why, size_t wlen) {
  if (s->cfg.no_publish) return "publishing is off (--no-publish)";
  if (plen != m->size || plen > s->cfg.inline_max) return "size does not match payload or limit";
  if (!m->node) return "no store named";
  hpl__dir_node *n = hpl__dir_node_find(s, m->node);
  if (!n || !n->conn) return "the named store is not a live node";
  if (strcmp(n->addr, dc->peer) != 0) return "the named store is not on this client's host";
  /* a reader's key is its store's (auth.h): it publishes for that node only */
  const char *proven = hpl__conn_peer_name(dc->c);
  if (s->cfg.auth.on && strcmp(n->name, proven) != 0) {
    snprintf(why, wlen, "this client's key is node %s's, not node %s's", proven, n->name);
    return why;
  }
  uint64_t nq = node_quota(s);
  if (dc->pub_n >= HPL__DIR_PUBLISH_CONN_OBJECTS || dc->pub_bytes + plen > nq / 4) {
    snprintf(why, wlen, "this client's publish quota is used up (%llu bytes in %u objects its "
             "store has not put yet)", (unsigned long long)dc->pub_bytes, (unsigned)dc->pub_n);
    return why;
  }
  node_bytes *nb = node_of(s->publish, m->node);
  if (nb && nb->bytes + plen > nq) {
    snprintf(why, wlen, "the publish quota of node %016llx is used up (%llu bytes its store "
             "has not put yet; --publish-quota)", (unsigned long long)m->node,
             (unsigned long long)nb->bytes);
    return why;
  }
  if (s->tab.inline_bytes + plen > s->cfg.inline_memory) return "directory inline cache full";
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, m->id);
  if (o && o->state != HPL__OBJ_PENDING) return "the object exists";
  return NULL;
}

/* Remember o's publish by dc (plen bytes, naming `node`). 0 or -1 (no
 * memory). */
static int remember(hpl__dir_publish *p, hpl__dir_conn *dc, const char *id, uint64_t node,
                    uint64_t plen) {
  pub_entry *old = entry_of(p, id);
  if (old) release(p, old); /* a stale one (its object was forgotten meanwhile) */
  pub_entry *e = calloc(1, sizeof *e);
  node_bytes *n = node_of(p, node);
  if (!n && (n = calloc(1, sizeof *n))) {
    n->node = node;
    HASH_ADD(hh, p->nodes, node, sizeof n->node, n);
  }
  if (!e || !n || !(e->id = strdup(id))) {
    free(e);
    return -1;
  }
  e->bytes = plen;
  e->node = node;
  e->dc = dc;
  n->bytes += plen;
  dc->pub_bytes += plen;
  dc->pub_n++;
  HASH_ADD_KEYPTR(hh, p->by_id, e->id, strlen(e->id), e);
  return 0;
}

void hpl__dir_publish_on(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__InlinePutReq *m = (Hplpb__InlinePutReq *)f->msg;
  hpl__trace("d.publish", m->id);
  uint64_t plen = f->plen;
  char buf[200];
  const char *why = refusal(s, f->dc, m, plen, buf, sizeof buf);
  hpl__dir_obj *o = why ? NULL : hpl__dtab_get(&s->tab, m->id);
  uint8_t *copy = o ? malloc(plen ? plen : 1) : NULL;
  if (!why && !copy) {
    why = "out of memory";
  } else if (!why) {
    if (plen) memcpy(copy, f->payload, plen);
    if (hpl__dtab_set_inline(&s->tab, o, copy, plen) != 0) { /* another size waited for */
      free(copy);
      why = "the object exists";
    } else if (remember(s->publish, f->dc, m->id, m->node, plen) != 0) {
      hpl__dtab_forget(&s->tab, o); /* no record of it: not taken */
      o = NULL;
      why = "out of memory";
    }
  }
  if (why) {
    s->ctr.publishes_ignored++;
    HPL__LOG_DEBUG("PUBLISH of '%s' ignored: %s", m->id, why);
    if (f->req) hpl__conn_reply(f->dc->c, f->req, HPL_EUNAVAIL, why);
    if (o) hpl__dtab_gc(&s->tab, o); /* made for nothing: freed unless waited for */
    return;
  }
  o->publisher = m->node;
  o->maker = m->node;
  s->ctr.publishes++;
  if (f->req) hpl__conn_reply(f->dc->c, f->req, 0, NULL);
  hpl__dtab_changed(&s->tab, o); /* waiting PEEKs and ACQUIREs get the bytes now */
}

/* ------------------------------------------------------------------ the store's word */

int hpl__dir_publish_inline_put(hpl__dir_server *s, uint64_t node, const char *id,
                                const uint8_t *bytes, uint64_t len) {
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, id);
  if (!o || !o->publisher || !o->is_inline) return 0; /* no publish waits */
  pub_entry *e = entry_of(s->publish, id);
  if (o->publisher == node && o->size == len && (!len || memcmp(o->inl, bytes, len) == 0)) {
    o->publisher = 0; /* confirmed: an ordinary inline object with node's copy */
    hpl__dtab_add_loc(&s->tab, o, node, len, 1, 0);
    s->ctr.publishes_confirmed++;
    if (e) release(s->publish, e);
    return 1;
  }
  /* another node's, or other bytes: the id exists (bytes once served never
   * change: a store may hold them already) */
  return 0;
}

void hpl__dir_publish_retract(hpl__dir_server *s, uint64_t node, hpl__dir_obj *o) {
  if (o->publisher != node || !o->is_inline || o->locs) return; /* confirmed, or not its */
  s->ctr.publishes_retracted++;
  HPL__LOG_INFO("the put of published object '%s' failed at node %016llx: forgotten again", o->id,
                (unsigned long long)node);
  pub_entry *e = entry_of(s->publish, o->id);
  if (e) release(s->publish, e);
  hpl__dtab_forget(&s->tab, o); /* o may be gone; waiters wait for a new put */
}

/* ------------------------------------------------------------------ orphans */

void hpl__dir_publish_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc) {
  if (!dc->pub_n || !s->publish) return;
  uint64_t now = hpl__now_ms();
  pub_entry *e, *tmp;
  HASH_ITER(hh, s->publish->by_id, e, tmp) {
    if (e->dc != dc) continue;
    e->dc = NULL;
    e->orphan_ms = now;
  }
  dc->pub_bytes = 0;
  dc->pub_n = 0;
}

/* Every second: entries whose publish was settled by another way (a delete,
 * a restart of the object) go; those of a client gone for
 * HPL__DIR_PUBLISH_ORPHAN_MS that no store confirmed are forgotten. */
static void sweep(uv_timer_t *t) {
  hpl__dir_server *s = t->data;
  hpl__dir_publish *p = s->publish;
  uint64_t now = hpl__now_ms();
  pub_entry *e, *tmp;
  HASH_ITER(hh, p->by_id, e, tmp) {
    hpl__dir_obj *o = hpl__dtab_find(&s->tab, e->id);
    if (!o || o->publisher != e->node || !o->is_inline) {
      release(p, e); /* confirmed, retracted or forgotten */
    } else if (!e->dc && now - e->orphan_ms >= HPL__DIR_PUBLISH_ORPHAN_MS && o->locs) {
      release(p, e); /* stores got copies meanwhile: bytes once served stay */
    } else if (!e->dc && now - e->orphan_ms >= HPL__DIR_PUBLISH_ORPHAN_MS) {
      s->ctr.publishes_orphaned++;
      HPL__LOG_INFO("published object '%s' forgotten: its client left %llu ms ago and node "
                    "%016llx never put it", e->id, (unsigned long long)(now - e->orphan_ms),
                    (unsigned long long)e->node);
      release(p, e);
      hpl__dtab_forget(&s->tab, o);
    }
  }
}

int hpl__dir_publish_start(hpl__dir_server *s) {
  if (!(s->publish = calloc(1, sizeof *s->publish))) return HPL_ENOMEM;
  uv_timer_init(s->loop, &s->publish->timer);
  s->publish->timer.data = s;
  uv_timer_start(&s->publish->timer, sweep, SWEEP_MS, SWEEP_MS);
  return 0;
}

void hpl__dir_publish_stop(hpl__dir_server *s) {
  if (s->publish && !uv_is_closing((uv_handle_t *)&s->publish->timer))
    uv_close((uv_handle_t *)&s->publish->timer, NULL);
}

void hpl__dir_publish_free(hpl__dir_server *s) {
  hpl__dir_publish *p = s->publish;
  if (!p) return;
  pub_entry *e, *tmp;
  HASH_ITER(hh, p->by_id, e, tmp) {
    e->dc = NULL;
    release(p, e);
  }
  node_bytes *n, *nt;
  HASH_ITER(hh, p->nodes, n, nt) {
    HASH_DEL(p->nodes, n);
    free(n);
  }
  free(p);
  s->publish = NULL;
}
