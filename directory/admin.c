/* admin.c - STAT, LIST, COUNTERS and DELETE with its DROP round (see
 * admin.h). */
#include "admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dirmetrics.h"
#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "reduce.h"
#include "ring.h"
#include "tombs.h"
#include "util.h"
#include "uvtimer.h"
#include "xlog.h"

/* Copies of an object: how many, how many complete. */
static void count_copies(const hpl__dir_obj *o, uint32_t *copies, uint32_t *complete) {
  *copies = *complete = 0;
  for (const hpl__dir_loc *l = o->locs; l; l = l->next) {
    if (l->unlisted) continue; /* reported corrupt: not a copy anyone gets */
    (*copies)++;
    *complete += (uint32_t)l->complete;
  }
}

void hpl__dir_admin_on_stat(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__IdReq *m = (Hplpb__IdReq *)f->msg;
  Hplpb__StatRep r = HPLPB__STAT_REP__INIT;
  if (hpl__conn_role(f->dc->c) == HPL__ROLE_READER) s->ctr.direct_stats++;
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, m->id);
  char detail[320] = "";
  if (!o || o->state == HPL__OBJ_PENDING) {
    r.status = HPL_ENOTFOUND;
    snprintf(detail, sizeof detail, "no object '%s'", m->id);
  } else if (o->state == HPL__OBJ_LOST) {
    r.status = HPL_ELOST;
    snprintf(detail, sizeof detail, "object '%s' lost", m->id);
  } else {
    r.size = o->size;
    r.inline_ = o->is_inline;
    count_copies(o, &r.copies, &r.complete);
  }
  r.detail = detail;
  hpl__conn_send(f->dc->c, HPL__MSG_STAT_REP, f->req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* ------------------------------------------------------------------ listing */


/* LIST: one page in id order from the ordered index, without scanning
 * anything outside the page (and at most a bounded number of entries that
 * are not objects yet). */
void hpl__dir_admin_on_list(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__ListReq *m = (Hplpb__ListReq *)f->msg;
  Hplpb__ListRep r = HPLPB__LIST_REP__INIT;
  const char *prefix = m->prefix ? m->prefix : "";
  const char *after = m->after && *m->after ? m->after : NULL;
  size_t plen = strlen(prefix), limit = m->limit ? m->limit : HPL__DIR_LIST_PAGE;
  if (limit > HPL__DIR_LIST_MAX) limit = HPL__DIR_LIST_MAX;
  Hplpb__ObjInfo *infos = calloc(limit, sizeof *infos);
  Hplpb__ObjInfo **ptrs = calloc(limit, sizeof *ptrs);
  if (!infos || !ptrs) {
    free(infos);
    free(ptrs);
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  /* from the later of the prefix and the cursor */
  hpl__dir_obj *o = after && strcmp(after, prefix) >= 0 ? hpl__dtab_first(&s->tab, after, 1)
                                                   : hpl__dtab_first(&s->tab, prefix, 0);
  size_t n = 0, scanned = 0, bytes = 0;
  const char *last = NULL;
  for (; o && !strncmp(o->id, prefix, plen); o = hpl__dtab_next(o)) {
    if (n == limit || bytes > HPL__DIR_LIST_BYTES || scanned++ > 4 * limit + 1024) break;
    last = o->id;
    if (o->state != HPL__OBJ_READY) continue;
    Hplpb__ObjInfo *i = &infos[n];
    hplpb__obj_info__init(i);
    i->id = o->id;
    i->size = o->size;
    i->inline_ = o->is_inline;
    count_copies(o, &i->copies, &i->complete);
    ptrs[n++] = i;
    bytes += strlen(o->id) + 32;
  }
  /* more to come: the client asks again after the last entry seen */
  r.next = (char *)(o && !strncmp(o->id, prefix, plen) && last ? last : "");
  r.n_objects = n;
  r.objects = ptrs;
  hpl__conn_send(f->dc->c, HPL__MSG_LIST_REP, f->req, &r.base, NULL, 0, 0, NULL, NULL);
  free(infos);
  free(ptrs);
}

/* ------------------------------------------------------------------ counters */

/* COUNTERS: the list /metrics shows too (dirmetrics.c). */
void hpl__dir_admin_on_counters(hpl__dir_server *s, const hpl__dir_frame *f) {
  hpl__metric vals[HPL__DIR_METRICS_MAX];
  size_t n = hpl__dir_metrics_collect(s, vals);
  Hplpb__CountersRep *r = hpl__metrics_counters_rep(vals, n);
  if (!r) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  hpl__conn_send(f->dc->c, HPL__MSG_COUNTERS_REP, f->req, &r->base, NULL, 0, 0, NULL, NULL);
  free(r);
}

/* ------------------------------------------------------------------ delete */

/* The module's state (hpl__dir_server.admin). */
struct hpl__dir_admin {
  struct dir_delete *deletes; /* deletes waiting for DROP acks, by op (uthash) */
  uint64_t next_op;           /* the last op given out */
};

int hpl__dir_admin_init(hpl__dir_server *s) {
  s->admin = calloc(1, sizeof *s->admin);
  return s->admin ? 0 : HPL_ENOMEM;
}

/* A delete waiting for every holder to acknowledge its DROP. */
typedef struct dir_delete {
  uint64_t op; /* request id of the DROPs */
  UT_hash_handle hh;
  hpl__dir_server *srv;
  hpl__dir_conn *dc; /* the deleter (NULL once it disconnected) */
  uint64_t req;
  int pending;
  hpl__otimer timer;
} dir_delete;

static void delete_finish(dir_delete *d) {
  hpl__dir_server *s = d->srv;
  HASH_DEL(s->admin->deletes, d);
  if (d->dc) hpl__conn_reply(d->dc->c, d->req, 0, NULL);
  hpl__otimer_free(&d->timer, d);
}

static void delete_timeout(void *owner) {
  dir_delete *d = owner;
  HPL__LOG_WARN("delete: %d holder(s) did not acknowledge in time", d->pending);
  delete_finish(d);
}

void hpl__dir_admin_on_drop_ack(hpl__dir_server *s, const hpl__dir_frame *f) {
  uint64_t op = f->req;
  dir_delete *d = NULL;
  HASH_FIND(hh, s->admin->deletes, &op, sizeof op, d);
  if (d && --d->pending <= 0) delete_finish(d);
}

/* The id was deleted: a ring allreduce into it ends, a reduce into it is
 * cancelled. */
static void target_deleted(hpl__dir_server *s, const char *id) {
  hpl__dir_ring_target_deleted(s, id);
  hpl__dir_reduce_target_deleted(s, id);
}

/* Delete: every holder drops its copy before the deleter hears back, so
 * once hpl_delete returns no store serves the old bytes to new gets. */
/* Who may delete object o (docs/design.md, "Who may delete"): an admin
 * (the CLI holding the cluster secret), any node under --delete-any, the
 * node that made it (o->maker: it put or published it, or a reduce made it
 * there) while that node is registered, and once it is gone any node (its
 * clients are gone with it). A connection that is no node and no admin
 * (a tool of a cluster without a secret) is treated as an admin: without
 * a secret nothing is proven anyway. */
static int may_delete(hpl__dir_server *s, const hpl__dir_conn *dc, const hpl__dir_obj *o) {
  int role = hpl__conn_role(dc->c);
  if (role == HPL__ROLE_ADMIN || s->cfg.delete_any || (!dc->node && !s->cfg.auth.on)) return 1;
  if (!dc->node) return 0;
  if (!o->maker || o->maker == dc->node->id) return 1;
  const hpl__dir_node *maker = hpl__dir_node_find(s, o->maker);
  return !maker || !maker->conn; /* its maker is gone */
}

void hpl__dir_admin_on_delete(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__IdReq *m = (Hplpb__IdReq *)f->msg;
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, m->id);
  if (o && o->state != HPL__OBJ_PENDING && !may_delete(s, f->dc, o)) {
    const hpl__dir_node *maker = hpl__dir_node_find(s, o->maker);
    char detail[400];
    snprintf(detail, sizeof detail, "object '%s' was made on node %s: only that node's clients "
             "may delete it (or `hoplite --admin`, or any node if the directory runs with "
             "--delete-any)", m->id, maker ? maker->name : "?");
    s->ctr.deletes_refused++;
    hpl__conn_reply(f->dc->c, f->req, HPL_EPERM, detail);
    return;
  }
  if (!o || o->state == HPL__OBJ_PENDING) {
    char detail[320];
    snprintf(detail, sizeof detail, "no object '%s'", m->id);
    hpl__dir_tombs_add(s, m->id); /* a copy not re-reported yet is dropped when it is */
    target_deleted(s, m->id); /* a reduce that never produced it */
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOTFOUND, detail);
    return;
  }
  dir_delete *d = calloc(1, sizeof *d);
  if (!d) {
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  d->op = ++s->admin->next_op;
  d->srv = s;
  d->dc = f->dc;
  d->req = f->req;
  Hplpb__DropNote note = HPLPB__DROP_NOTE__INIT;
  note.id = o->id;
  /* a store asking with drops_here drops its own copy on our answer */
  uint64_t asker = m->drops_here && f->dc->node ? f->dc->node->id : 0;
  for (hpl__dir_loc *l = o->locs; l; l = l->next) {
    if (asker && l->node == asker) {
      s->ctr.deletes_dropped_by_asker++;
      continue;
    }
    if (hpl__dir_node_send(s, l->node, HPL__MSG_DROP, d->op, &note.base) == 0) d->pending++;
  }
  hpl__dir_xlog(s, HPL__XFER_DELETE, o->id, 0, 0);
  hpl__dir_tombs_add(s, o->id); /* a copy on a node away now is dropped when it comes back */
  target_deleted(s, o->id);
  hpl__dtab_forget(&s->tab, o);
  HASH_ADD(hh, s->admin->deletes, op, sizeof d->op, d);
  if (d->pending == 0) {
    delete_finish(d);
    return;
  }
  hpl__otimer_start(s->loop, &d->timer, d, 2 * (uint64_t)s->cfg.heartbeat_timeout_ms,
                    delete_timeout);
}

void hpl__dir_admin_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc) {
  dir_delete *d, *dtmp;
  HASH_ITER(hh, s->admin->deletes, d, dtmp) if (d->dc == dc) d->dc = NULL;
}

void hpl__dir_admin_stop(hpl__dir_server *s) {
  dir_delete *d, *dtmp;
  HASH_ITER(hh, s->admin->deletes, d, dtmp) delete_finish(d);
  hpl__dir_tombs_clear(s);
}

void hpl__dir_admin_free(hpl__dir_server *s) {
  free(s->admin);
  s->admin = NULL;
}
