/* ring.c - ring allreduce groups: forming, running, over (see ring.h). */
#include "ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "cost.h"
#include "digests.h"
#include "hoplite.h"
#include "log.h"
#include "nodes.h"
#include "objects.h"
#include "reduce.h"
#include "uvtimer.h"
#include "util.h"

#define RING_MIN_SLICE (256u << 10) /* each member's slice at least this */
#define RING_MAX_MEMBERS 1024
#define RING_FORM_MIN_MS 100
#define RING_FORM_MAX_MS 2000
#define RING_KEEP_MS 10000 /* an ended group answers late requests this long */

/* A group's life (hpl__dir_ring.state; rg_set_state logs each transition). */
typedef enum rg_state {
  RG_FORMING = 0, /* waiting for a participant for every source (the forming window) */
  RG_RUNNING = 1, /* formed: every member was told its place */
  RG_OVER = 2,    /* declined, done or abandoned; kept RING_KEEP_MS for late requests */
} rg_state;

static const char *const rg_names[] = {"forming", "running", "over"};

typedef struct rg_member {
  uint64_t node;
  uint64_t req; /* its RING request, answered when the group forms or not */
  uint32_t src; /* the source it contributes */
  int reader;   /* holds no source: told "no ring, one ran" when it forms */
  int done;     /* its target is complete */
} rg_member;

typedef struct hpl__dir_ring {
  UT_hash_handle hh; /* hpl__dir_server.rings, by target */
  hpl__dir_server *srv;
  char *target;
  char **src;
  uint32_t k;
  int op, dtype;
  uint64_t size;
  rg_state state;
  uint64_t rid;                  /* 0 until it formed (a later request is told copies may exist) */
  rg_member *m;                  /* in join order, which is the ring's order (readers skipped) */
  uint32_t nm, cap, nsrc, ndone; /* members, room, those with a source, done */
  uint64_t over_ms;              /* RG_OVER since */
  hpl__otimer timer;             /* the forming window */
} hpl__dir_ring;

static void rg_set_state(hpl__dir_ring *g, rg_state to) {
  if (g->state == to) return;
  HPL__LOG_DEBUG("ring '%s': %s -> %s", g->target, rg_names[g->state], rg_names[to]);
  g->state = to;
}

static void ring_free(hpl__dir_ring *g) {
  HASH_DEL(g->srv->rings, g);
  for (uint32_t i = 0; i < g->k; i++) free(g->src[i]);
  free(g->src);
  free(g->m);
  free(g->target);
  hpl__otimer_free(&g->timer, g); /* frees g */
}

/* Groups that ended long enough ago go (a few per request: bounded). */
static void ring_expire(hpl__dir_server *s) {
  uint64_t now = hpl__now_ms();
  int n = 0;
  hpl__dir_ring *g, *tmp;
  HASH_ITER(hh, s->rings, g, tmp) {
    if (g->state == RG_OVER && now > g->over_ms + RING_KEEP_MS) ring_free(g);
    if (++n >= 16) break;
  }
}

/* "No ring" (the client reduces as usual) is a plan without nodes; its
 * rid is nonzero when a ring into the target ran (copies may exist). */
static void send_no_ring(hpl__dir_server *s, uint64_t node, uint64_t req, const char *why,
                         int ran) {
  Hplpb__RingPlan p = HPLPB__RING_PLAN__INIT;
  p.detail = (char *)why;
  p.rid = (uint64_t)ran;
  hpl__dir_node_send(s, node, HPL__MSG_RING_REP, req, &p.base);
}

/* The group will not run: every member waiting is told to reduce as usual. */
static void ring_decline(hpl__dir_ring *g, const char *why) {
  hpl__dir_server *s = g->srv;
  HPL__LOG_INFO("ring allreduce into '%s' declined (%u of %u sources joined): %s", g->target,
                g->nsrc, g->k, why);
  for (uint32_t i = 0; i < g->nm; i++)
    send_no_ring(s, g->m[i].node, g->m[i].req, why, 0);
  rg_set_state(g, RG_OVER);
  g->over_ms = hpl__now_ms();
  hpl__otimer_stop(&g->timer);
  s->ctr.rings_declined++;
}

/* The running ring ends: status 0 when every member completed. */
static void ring_end(hpl__dir_ring *g, int status, const char *detail) {
  hpl__dir_server *s = g->srv;
  Hplpb__ReduceEnd e = HPLPB__REDUCE_END__INIT;
  e.rid = g->rid;
  e.target = g->target;
  e.status = status;
  e.detail = (char *)(detail ? detail : "");
  for (uint32_t i = 0; i < g->nm; i++)
    if (!g->m[i].reader) hpl__dir_node_send(s, g->m[i].node, HPL__MSG_RING_END, 0, &e.base);
  rg_set_state(g, RG_OVER);
  g->over_ms = hpl__now_ms();
  if (status) {
    s->ctr.rings_abandoned++;
    HPL__LOG_WARN("ring allreduce into '%s' abandoned (%u of %u members done): %s", g->target,
                  g->ndone, g->nsrc, detail ? detail : hpl_strerror(status));
  } else {
    s->ctr.rings_done++;
    HPL__LOG_INFO("ring allreduce into '%s' done at all %u members", g->target, g->nsrc);
  }
}

static void ring_form_expired(void *owner) {
  hpl__dir_ring *g = owner;
  if (g->state != RG_FORMING) return;
  char why[96];
  snprintf(why, sizeof why, "only %u of %u sources had a participant in time", g->nsrc, g->k);
  ring_decline(g, why);
}

/* Every source has a member: tell each its place. */
static void ring_go(hpl__dir_ring *g) {
  hpl__dir_server *s = g->srv;
  for (uint32_t i = 0; i < g->nm; i++) { /* a member's node that keeps sending bad units */
    hpl__dir_node *dn = g->m[i].reader ? NULL : hpl__dir_node_find(s, g->m[i].node);
    if (dn && dn->corrupt_reports >= HPL__DIR_CORRUPT_LAST_RESORT) {
      char why[160];
      snprintf(why, sizeof why, "node %016llx sent corrupt units %u times",
               (unsigned long long)dn->id, dn->corrupt_reports);
      ring_decline(g, why);
      return;
    }
  }
  hpl__otimer_stop(&g->timer);
  g->rid = hpl__random_u64() | 1;
  rg_set_state(g, RG_RUNNING);
  Hplpb__ReduceChild *ch = calloc(g->nsrc, sizeof *ch);
  Hplpb__ReduceChild **chp = calloc(g->nsrc, sizeof *chp);
  if (!ch || !chp) {
    free(ch);
    free(chp);
    ring_decline(g, "out of memory");
    return;
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < g->nm; i++) {
    if (g->m[i].reader) continue;
    hpl__dir_node *dn = hpl__dir_node_find(s, g->m[i].node);
    hplpb__reduce_child__init(&ch[n]);
    ch[n].index = n;
    ch[n].node = g->m[i].node;
    ch[n].addr = dn ? dn->addr : "";
    ch[n].port = dn ? (uint32_t)dn->port : 0;
    ch[n].key = g->src[g->m[i].src];
    chp[n] = &ch[n];
    n++;
  }
  Hplpb__RingPlan p = HPLPB__RING_PLAN__INIT;
  p.rid = g->rid;
  p.n_nodes = n;
  p.nodes = chp;
  p.size = g->size;
  p.op = (uint32_t)g->op;
  p.dtype = (uint32_t)g->dtype;
  for (uint32_t i = 0, at = 0; i < g->nm; i++) {
    if (g->m[i].reader) { /* it gets the target from the members */
      send_no_ring(s, g->m[i].node, g->m[i].req, "a reader of the ring (no source here)", 1);
      continue;
    }
    p.index = at++;
    hpl__dir_node_send(s, g->m[i].node, HPL__MSG_RING_REP, g->m[i].req, &p.base);
  }
  free(ch);
  free(chp);
  s->ctr.rings_formed++;
  HPL__LOG_INFO("ring allreduce into '%s' formed: %u members (and %u readers), %llu bytes",
                g->target, g->nsrc, g->nm - g->nsrc, (unsigned long long)g->size);
}

/* Why request m cannot be a ring at all (NULL: it can be). */
static const char *request_unfit(const Hplpb__ReduceReq *m) {
  size_t k = m->n_sources;
  if (k < 3 || k > RING_MAX_MEMBERS) return "a ring needs 3 to 1024 sources";
  if (m->num_objects && m->num_objects != k) return "a ring reduces every source";
  if (m->src_offset || m->src_length) return "a ring reduces whole objects";
  if (m->op > HPL_OP_PROD || !hpl_dtype_size((int)m->dtype)) return "bad op or dtype";
  if (!hpl__id_valid(m->target)) return "invalid target id";
  for (size_t i = 0; i < k; i++) {
    if (!hpl__id_valid(m->sources[i]) || !strcmp(m->sources[i], m->target))
      return "a bad source id";
    for (size_t j = 0; j < i; j++)
      if (!strcmp(m->sources[i], m->sources[j])) return "a source named twice";
  }
  return NULL;
}

static int same_request(const hpl__dir_ring *g, const Hplpb__ReduceReq *m) {
  if (m->n_sources != g->k || (int)m->op != g->op || (int)m->dtype != g->dtype) return 0;
  for (uint32_t i = 0; i < g->k; i++)
    if (strcmp(m->sources[i], g->src[i])) return 0;
  return 1;
}

static hpl__dir_ring *ring_new(hpl__dir_server *s, const Hplpb__ReduceReq *m) {
  hpl__dir_ring *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->srv = s;
  g->k = (uint32_t)m->n_sources;
  g->op = (int)m->op;
  g->dtype = (int)m->dtype;
  g->target = strdup(m->target);
  g->src = calloc(g->k, sizeof *g->src);
  g->cap = g->k;
  g->m = calloc(g->cap, sizeof *g->m);
  int ok = g->target && g->src && g->m;
  for (uint32_t i = 0; ok && i < g->k; i++) ok = (g->src[i] = strdup(m->sources[i])) != NULL;
  if (!ok) {
    for (uint32_t i = 0; g->src && i < g->k; i++) free(g->src[i]);
    free(g->src);
    free(g->m);
    free(g->target);
    free(g);
    return NULL;
  }
  HASH_ADD_KEYPTR(hh, s->rings, g->target, strlen(g->target), g);
  /* the window: what the ring saves over reduce + broadcast, 2S/(kB) */
  uint64_t size = 0;
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, g->src[0]);
  if (o && o->has_size) size = o->size;
  double bw = hpl__dir_cost_bandwidth(s);
  uint64_t ms = bw > 0 ? (uint64_t)(2000.0 * (double)size / ((double)g->k * bw)) : 0;
  if (ms < RING_FORM_MIN_MS) ms = RING_FORM_MIN_MS;
  if (ms > RING_FORM_MAX_MS) ms = RING_FORM_MAX_MS;
  hpl__otimer_start(s->loop, &g->timer, g, ms, ring_form_expired);
  return g;
}

/* The source node `node` contributes: one it holds complete that no member
 * has claimed. Returns -2 if there is none (the node reads the result), or
 * -1 with *why set if the sizes do not fit a ring. */
static int claim_source(hpl__dir_ring *g, uint64_t node, const char **why) {
  hpl__dir_server *s = g->srv;
  size_t es = hpl_dtype_size(g->dtype);
  for (uint32_t i = 0; i < g->k; i++) {
    int taken = 0;
    for (uint32_t j = 0; j < g->nm && !taken; j++) taken = !g->m[j].reader && g->m[j].src == i;
    if (taken) continue;
    hpl__dir_obj *o = hpl__dtab_find(&s->tab, g->src[i]);
    hpl__dir_loc *l = o && hpl__dtab_ready(o) && !o->is_inline ? hpl__dtab_loc(o, node) : NULL;
    if (!l || !l->complete) continue;
    if (g->nsrc == 0) g->size = o->size;
    if (o->size != g->size || o->size % es || o->size / g->k < RING_MIN_SLICE) {
      *why = "sources too small for a ring, or of other sizes";
      return -1;
    }
    return (int)i;
  }
  return -2;
}

void hpl__dir_ring_on_request(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__ReduceReq *m = (Hplpb__ReduceReq *)f->msg;
  uint64_t node = f->dc->node->id;
  ring_expire(s);
  const char *why = s->cfg.no_rings ? "rings are off (--no-rings)" : request_unfit(m);
  if (why) {
    send_no_ring(s, node, f->req, why, 0);
    return;
  }
  hpl__dir_ring *g = NULL;
  HASH_FIND_STR(s->rings, m->target, g);
  if (!g) {
    hpl__dir_obj *t = hpl__dtab_find(&s->tab, m->target);
    if ((t && t->state == HPL__OBJ_READY) || hpl__dir_reduce_known(s, m->target)) {
      send_no_ring(s, node, f->req, "the target exists or is being reduced", 0);
      return;
    }
    if (!(g = ring_new(s, m))) {
      send_no_ring(s, node, f->req, "out of memory", 0);
      return;
    }
  }
  if (g->state != RG_FORMING) {
    send_no_ring(s, node, f->req,
                     g->rid ? "the ring into it ran already" : "the ring into it was declined",
                     g->rid != 0);
    return;
  }
  if (!same_request(g, m)) {
    ring_decline(g, "participants asked for different allreduces");
    send_no_ring(s, node, f->req, "participants asked for different allreduces",
                     0);
    return;
  }
  for (uint32_t j = 0; j < g->nm; j++)
    if (g->m[j].node == node) {
      ring_decline(g, "two participants on one node");
      send_no_ring(s, node, f->req, "two participants on one node", 0);
      return;
    }
  int src = claim_source(g, node, &why);
  if (src == -1) {
    ring_decline(g, why);
    send_no_ring(s, node, f->req, why, 0);
    return;
  }
  if (g->nm == g->cap) {
    rg_member *nm = g->cap < RING_MAX_MEMBERS ? realloc(g->m, 2 * g->cap * sizeof *nm) : NULL;
    if (!nm) {
      ring_decline(g, "too many participants");
      send_no_ring(s, node, f->req, "too many participants", 0);
      return;
    }
    g->m = nm;
    g->cap *= 2;
  }
  g->m[g->nm++] = (rg_member){.node = node, .req = f->req, .src = src < 0 ? 0 : (uint32_t)src,
                              .reader = src < 0};
  if (src >= 0 && ++g->nsrc == g->k) ring_go(g);
}

/* Member mb's incoming stream had a unit that failed its digest: its
 * predecessor (the member before it, readers skipped) made that stream, so
 * it is counted as corrupt (as a reduce slot's node is: enough reports and
 * no ring forms with it, and copies are named from it last), and the ring
 * ends (if it has not already); its clients reduce the usual way, which
 * checks every stream. */
/* The node of the member before g->m[at] in ring order, readers (which
 * send no stream) skipped: at most one step round the ring. */
static uint64_t ring_pred(const hpl__dir_ring *g, uint32_t at) {
  for (uint32_t k = 1; k < g->nm; k++) {
    uint32_t i = (at + g->nm - k) % g->nm;
    if (!g->m[i].reader) return g->m[i].node;
  }
  return g->m[at].node;
}

static void ring_corrupt(hpl__dir_ring *g, const rg_member *mb, const Hplpb__ReduceEnd *m) {
  hpl__dir_server *s = g->srv;
  uint64_t pred = ring_pred(g, (uint32_t)(mb - g->m));
  s->ctr.corrupt_reports++;
  hpl__dir_node *n = hpl__dir_node_find(s, pred);
  if (n) n->corrupt_reports++;
  char why[800];
  snprintf(why, sizeof why,
           "node %016llx sent a unit of its ring stream (unit %llu) that failed its digest at "
           "member %016llx: %s",
           (unsigned long long)pred, (unsigned long long)m->corrupt_unit,
           (unsigned long long)mb->node, m->detail && *m->detail ? m->detail : "corrupt");
  HPL__LOG_WARN("ring allreduce into '%s': %s (its corrupt reports: %u)", g->target, why,
                n ? n->corrupt_reports : 0);
  if (g->state == RG_RUNNING) ring_end(g, HPL_ECORRUPT, why);
}

void hpl__dir_ring_on_note(hpl__dir_server *s, const hpl__dir_frame *f) {
  Hplpb__ReduceEnd *m = (Hplpb__ReduceEnd *)f->msg;
  hpl__dir_ring *g = NULL;
  if (m->target) HASH_FIND_STR(s->rings, m->target, g);
  if (!g || g->rid != m->rid) return;
  /* a bad unit is counted against its sender even when the ring already
   * ended another way (a member that gave up first): the report was true */
  if (g->state != RG_RUNNING && !(g->state == RG_OVER && m->status && m->corrupt)) return;
  uint64_t node = f->dc->node->id;
  rg_member *mb = NULL;
  for (uint32_t i = 0; i < g->nm && !mb; i++)
    if (g->m[i].node == node && !g->m[i].reader) mb = &g->m[i];
  if (!mb) return;
  if (m->status && m->corrupt) {
    ring_corrupt(g, mb, m);
    return;
  }
  if (m->status) {
    char why[400];
    snprintf(why, sizeof why, "member %016llx: %s", (unsigned long long)node,
             m->detail && *m->detail ? m->detail : hpl_strerror(m->status));
    ring_end(g, m->status, why);
    return;
  }
  if (!mb->done) {
    mb->done = 1;
    if (++g->ndone == g->nsrc) ring_end(g, 0, NULL);
  }
}

int hpl__dir_ring_clash(hpl__dir_server *s, const char *target, void *arg) {
  (void)arg;
  hpl__dir_ring *g = NULL;
  HASH_FIND_STR(s->rings, target, g);
  if (!g) return 0;
  if (g->state == RG_FORMING) ring_decline(g, "a plain reduce into the target was asked for");
  return g->state == RG_RUNNING;
}

void hpl__dir_ring_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg) {
  (void)arg;
  uint64_t node = e->id;
  hpl__dir_ring *g, *tmp;
  HASH_ITER(hh, s->rings, g, tmp) {
    if (g->state == RG_OVER) continue;
    for (uint32_t i = 0; i < g->nm; i++) {
      if (g->m[i].node != node || g->m[i].reader) continue;
      char why[96];
      snprintf(why, sizeof why, "node %016llx left", (unsigned long long)node);
      if (g->state == RG_FORMING)
        ring_decline(g, why);
      else if (!g->m[i].done)
        ring_end(g, HPL_ECONN, why);
      break;
    }
  }
}

void hpl__dir_ring_target_deleted(hpl__dir_server *s, const char *target) {
  hpl__dir_ring *g = NULL;
  HASH_FIND_STR(s->rings, target, g);
  if (g && g->state == RG_RUNNING) ring_end(g, HPL_ECANCELED, "the target was deleted");
}

void hpl__dir_ring_free_all(hpl__dir_server *s) {
  hpl__dir_ring *g, *tmp;
  HASH_ITER(hh, s->rings, g, tmp) ring_free(g);
}
