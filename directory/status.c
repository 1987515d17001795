/* status.c - the cluster at a glance: heartbeat stats, the nodes gone
 * lately, the STATUS snapshot (with the leader lease's state under --etcd)
 * (see status.h). */
#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ha.h"
#include "hoplite.h"
#include "reduce.h"
#include "util.h"

/* A copy a node is pulling, as its latest heartbeat listed it. */
typedef struct dir_incoming {
  char id[HPL_ID_MAX + 1];
  uint64_t sender, held, size, rate;
} dir_incoming;

/* What a node's latest scheduled heartbeat said (fixed size: a heartbeat
 * every half second reuses it). */
typedef struct hpl__dir_node_stats {
  uint64_t at_ms;
  uint64_t pool_used, pool_capacity, objects, bytes_sent, bytes_received;
  uint32_t clients;
  uint32_t nin;      /* entries of in[] */
  uint32_t in_total; /* copies arriving there, listed or not */
  dir_incoming in[HPL__STATUS_MAX_INCOMING];
} hpl__dir_node_stats;

/* A node declared dead. */
typedef struct dir_gone_node {
  uint64_t id;
  uint64_t at_ms; /* when (0: an empty slot) */
  char name[64], addr[64];
  int port;
  char why[96];
} dir_gone_node;

/* The latest HPL__STATUS_MAX_DEAD of them, a ring. */
typedef struct hpl__dir_gone {
  dir_gone_node v[HPL__STATUS_MAX_DEAD];
  size_t next;
} hpl__dir_gone;

/* A scheduled heartbeat with stats came from `n`: keep what it says
 * (replacing the previous one). Entries with an invalid id are skipped.
 * Out of memory, the node shows no stats. */
static void node_stats(hpl__dir_node *n, const Hplpb__Heartbeat *hb) {
  if (!n->stats && !(n->stats = malloc(sizeof *n->stats))) return;
  hpl__dir_node_stats *st = n->stats;
  st->at_ms = hpl__now_ms();
  st->pool_used = hb->pool_used;
  st->pool_capacity = hb->pool_capacity;
  st->objects = hb->objects;
  st->bytes_sent = hb->bytes_sent;
  st->bytes_received = hb->bytes_received;
  st->clients = hb->clients;
  st->nin = 0;
  for (size_t i = 0; i < hb->n_incoming && st->nin < HPL__STATUS_MAX_INCOMING; i++) {
    const Hplpb__Incoming *m = hb->incoming[i];
    if (!hpl__id_valid(m->id)) continue;
    dir_incoming *d = &st->in[st->nin++];
    snprintf(d->id, sizeof d->id, "%s", m->id);
    d->sender = m->sender;
    d->size = m->size;
    d->held = m->held < m->size ? m->held : m->size;
    d->rate = m->rate;
  }
  st->in_total = hb->incoming_total > st->nin ? hb->incoming_total : st->nin;
}

static void stats_free(hpl__dir_node *n) {
  free(n->stats);
  n->stats = NULL;
}

/* `n` is dead (`why`): remember it, free its stats. */
static void node_dead(hpl__dir_server *s, hpl__dir_node *n, const char *why) {
  stats_free(n);
  if (!s->gone && !(s->gone = calloc(1, sizeof *s->gone))) return;
  dir_gone_node *g = &s->gone->v[s->gone->next++ % HPL__STATUS_MAX_DEAD];
  g->id = n->id;
  g->at_ms = hpl__now_ms();
  snprintf(g->name, sizeof g->name, "%s", n->name);
  snprintf(g->addr, sizeof g->addr, "%s", n->addr);
  g->port = n->port;
  snprintf(g->why, sizeof g->why, "%s", why ? why : "");
}

void hpl__dir_status_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg) {
  (void)arg;
  if (e->type == HPL__DIR_NODE_STATS) node_stats(e->node, e->hb);
  else if (e->type == HPL__DIR_NODE_DEAD) node_dead(s, e->node, e->why);
}

void hpl__dir_status_free(hpl__dir_server *s) {
  hpl__dir_node *n, *tmp;
  HPL__DIR_NODES_ITER(s, n, tmp) stats_free(n);
  free(s->gone);
  s->gone = NULL;
}

/* ------------------------------------------------------------------ the snapshot */

/* Nodes by name, then id: the same order every refresh. */
static int node_cmp(const void *a, const void *b) {
  const Hplpb__NodeStatus *x = *(const Hplpb__NodeStatus *const *)a;
  const Hplpb__NodeStatus *y = *(const Hplpb__NodeStatus *const *)b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Everything a reply points into, freed after it is sent. */
typedef struct snap {
  Hplpb__NodeStatus *nodes, **pnodes;
  Hplpb__TransferStatus *xs, **pxs;
  Hplpb__ReduceStatus *rs, **prs;
  hpl__dir_reduce_view *rv;
} snap;

static void snap_free(snap *p) {
  free(p->nodes), free(p->pnodes), free(p->xs), free(p->pxs);
  free(p->rs), free(p->prs), free(p->rv);
}

/* With --etcd: the lease's state into r (pointing into *ha and sb[]). The
 * standbys are the directories listed in etcd but this one. */
static void ha_status(hpl__dir_server *s, Hplpb__StatusRep *r, hpl__ha_info *ha,
                      char *sb[HPL__HA_MAX_MEMBERS]) {
  hpl__ha_info_get(s->cfg.ha, ha);
  r->term = s->cfg.term;
  r->leader = s->cfg.advertise;
  r->etcd_endpoint = ha->endpoint;
  r->lease_left_ms = ha->lease_left_ms;
  r->renew_last_us = ha->renew_last_us;
  size_t k = 0;
  for (int i = 0; i < ha->nmembers && i < HPL__HA_MAX_MEMBERS; i++) {
    ha->members[i][sizeof ha->members[i] - 1] = 0;
    if (strcmp(ha->members[i], s->cfg.advertise) != 0) sb[k++] = ha->members[i];
  }
  r->n_standbys = k;
  r->standbys = sb;
}

void hpl__dir_status_on_status(hpl__dir_server *s, const hpl__dir_frame *f) {
  uint64_t now = hpl__now_ms();
  size_t live = hpl__dir_nodes_count(s), dead = 0, xfers = 0;
  for (size_t i = 0; s->gone && i < HPL__STATUS_MAX_DEAD; i++)
    if (s->gone->v[i].at_ms && !hpl__dir_node_find(s, s->gone->v[i].id)) dead++;
  hpl__dir_node *n, *tmp;
  HPL__DIR_NODES_ITER(s, n, tmp) if (n->stats) xfers += n->stats->nin;
  size_t nmax = live + dead, xmax = xfers;
  if (nmax > HPL__STATUS_MAX_NODES) nmax = HPL__STATUS_MAX_NODES;
  if (xmax > HPL__STATUS_MAX_TRANSFERS) xmax = HPL__STATUS_MAX_TRANSFERS;
  snap p = {0};
  size_t rtotal = hpl__dir_reduce_running(s, NULL, 0);
  size_t rmax = rtotal < HPL__STATUS_MAX_REDUCES ? rtotal : HPL__STATUS_MAX_REDUCES;
  p.nodes = calloc(nmax + 1, sizeof *p.nodes);
  p.pnodes = calloc(nmax + 1, sizeof *p.pnodes);
  p.xs = calloc(xmax + 1, sizeof *p.xs);
  p.pxs = calloc(xmax + 1, sizeof *p.pxs);
  p.rs = calloc(rmax + 1, sizeof *p.rs);
  p.prs = calloc(rmax + 1, sizeof *p.prs);
  p.rv = calloc(rmax + 1, sizeof *p.rv);
  if (!p.nodes || !p.pnodes || !p.xs || !p.pxs || !p.rs || !p.prs || !p.rv) {
    snap_free(&p);
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  Hplpb__StatusRep r = HPLPB__STATUS_REP__INIT;
  size_t nn = 0, nx = 0;
  uint64_t xtotal = 0;
  HPL__DIR_NODES_ITER(s, n, tmp) {
    const hpl__dir_node_stats *st = n->stats;
    if (st) xtotal += st->in_total;
    if (nn == nmax) continue;
    Hplpb__NodeStatus *v = &p.nodes[nn];
    hplpb__node_status__init(v);
    v->id = n->id;
    v->name = n->name;
    v->addr = n->addr;
    v->data_port = (uint32_t)n->port;
    v->state = (char *)hpl__dir_node_state_name(s, n, now);
    uint64_t heard = st ? st->at_ms : n->hb_last_ms ? n->hb_last_ms : n->last_seen_ms;
    v->heartbeat_age_ms = now > heard ? now - heard : 0;
    v->rtt_us = n->rtt_us;
    if (st) {
      v->stats = 1;
      v->pool_used = st->pool_used;
      v->pool_capacity = st->pool_capacity;
      v->objects = st->objects;
      v->bytes_sent = st->bytes_sent;
      v->bytes_received = st->bytes_received;
      v->clients = st->clients;
      for (uint32_t i = 0; i < st->nin && nx < xmax; i++) {
        const dir_incoming *d = &st->in[i];
        Hplpb__TransferStatus *x = &p.xs[nx];
        hplpb__transfer_status__init(x);
        x->id = (char *)d->id;
        x->sender = d->sender;
        x->receiver = n->id;
        x->held = d->held;
        x->size = d->size;
        x->rate = d->rate;
        x->age_ms = now > st->at_ms ? now - st->at_ms : 0;
        p.pxs[nx] = x;
        nx++;
      }
    }
    p.pnodes[nn] = v;
    nn++;
  }
  /* the dead, latest first */
  for (size_t k = 0; s->gone && k < HPL__STATUS_MAX_DEAD && nn < nmax; k++) {
    dir_gone_node *g = &s->gone->v[(s->gone->next + HPL__STATUS_MAX_DEAD - 1 - k) %
                                   HPL__STATUS_MAX_DEAD];
    if (!g->at_ms || hpl__dir_node_find(s, g->id)) continue;
    Hplpb__NodeStatus *v = &p.nodes[nn];
    hplpb__node_status__init(v);
    v->id = g->id;
    v->name = g->name;
    v->addr = g->addr;
    v->data_port = (uint32_t)g->port;
    v->state = "dead";
    v->heartbeat_age_ms = now > g->at_ms ? now - g->at_ms : 0;
    v->why = g->why;
    p.pnodes[nn++] = v;
  }
  qsort(p.pnodes, nn, sizeof *p.pnodes, node_cmp);
  size_t nr = hpl__dir_reduce_running(s, p.rv, rmax);
  if (nr > rmax) nr = rmax;
  for (size_t i = 0; i < nr; i++) {
    Hplpb__ReduceStatus *v = &p.rs[i];
    hplpb__reduce_status__init(v);
    v->target = (char *)p.rv[i].target;
    v->sink = p.rv[i].sink;
    v->joined = p.rv[i].joined;
    v->needed = p.rv[i].needed;
    v->sources = p.rv[i].sources;
    v->elapsed_ms = p.rv[i].elapsed_ms;
    v->size = p.rv[i].size;
    p.prs[i] = v;
  }
  r.instance = s->instance;
  r.uptime_ms = now - s->start_ms;
  r.objects = s->tab.nobjs;
  r.inline_bytes = s->tab.inline_bytes;
  r.heartbeat_ms = s->cfg.heartbeat_ms;
  r.n_nodes = nn;
  r.nodes = p.pnodes;
  r.n_transfers = nx;
  r.transfers = p.pxs;
  r.n_reduces = nr;
  r.reduces = p.prs;
  r.nodes_total = (uint32_t)(live + dead);
  r.transfers_total = xtotal > UINT32_MAX ? UINT32_MAX : (uint32_t)xtotal;
  r.reduces_total = (uint32_t)rtotal;
  if (nn < live + dead || nx < xtotal || nr < rtotal) r.detail = "lists cut at their limits";
  hpl__ha_info ha;
  char *standbys[HPL__HA_MAX_MEMBERS];
  if (s->cfg.ha) ha_status(s, &r, &ha, standbys);
  hpl__conn_send(f->dc->c, HPL__MSG_STATUS_REP, f->req, &r.base, NULL, 0, 0, NULL, NULL);
  snap_free(&p);
}
