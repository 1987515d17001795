/* reduce_msg.c - what the directory tells the stores about a reduce (see
 * reduce_int.h): a slot's task with its children (REDUCE_TASK), where the
 * sink gets the result from (REDUCE_SINK), and the end of a reduce or of
 * one node's part in it, or its adoption by a restarted directory
 * (REDUCE_END, REDUCE_ADOPTED), and the ends kept for nodes that register
 * later. The decisions are reduce_tree.c's; this file only turns a record
 * into messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "nodes.h"
#include "reduce_int.h"
#include "util.h"

/* What a parent pulls to get slot `c`'s output. */
static void child_info(hpl__dir_reduce *r, int c, Hplpb__ReduceChild *out, char *key, size_t klen) {
  hpl__dr_slot *sl = &r->slots[c];
  hpl__dir_node *n = hpl__dir_node_find(r->srv, sl->node);
  hplpb__reduce_child__init(out);
  out->slot = (uint32_t)c;
  out->gen = sl->gen;
  out->node = sl->node;
  out->addr = n ? n->addr : "";
  out->port = n ? (uint32_t)n->port : 0;
  if (!dr_slot_streams(r, c)) {
    snprintf(key, klen, "%s", r->src[sl->src]);
    out->internal = 0;
  } else {
    snprintf(key, klen, "r:%llx.%u:%u:%s", (unsigned long long)r->rid, (unsigned)c, sl->gen,
             r->target);
    out->internal = 1;
  }
  out->key = key;
}

void hpl__dir_reduce_send_task(hpl__dir_reduce *r, int slot, int resume) {
  hpl__dr_slot *sl = &r->slots[slot];
  int d = r->plan.degree, nc = r->plan.nchild[slot];
  Hplpb__ReduceChild ch[nc ? nc : 1];
  Hplpb__ReduceChild *chp[nc ? nc : 1];
  char keys[nc ? nc : 1][340];
  size_t n = 0;
  for (int i = 0; i < nc; i++) {
    int c = r->plan.child[slot * d + i];
    if (!r->slots[c].filled) continue;
    child_info(r, c, &ch[n], keys[n], sizeof keys[n]);
    ch[n].index = (uint32_t)i;
    chp[n] = &ch[n];
    n++;
  }
  Hplpb__ReduceTask t = HPLPB__REDUCE_TASK__INIT;
  t.rid = r->rid;
  t.target = r->target;
  t.slot = (uint32_t)slot;
  t.gen = sl->gen;
  t.source = r->src[sl->src];
  t.op = (uint32_t)r->op;
  t.dtype = (uint32_t)r->dtype;
  t.size = r->size;
  t.src_offset = r->src_off;
  t.nchildren = (uint32_t)nc;
  t.n_children = n;
  t.children = chp;
  t.to_target = slot == r->plan.root && sl->node == r->sink;
  t.resume = resume;
  hpl__dir_node_send(r->srv, sl->node, HPL__MSG_REDUCE_TASK, 0, &t.base);
}

void hpl__dir_reduce_send_sink(hpl__dir_reduce *r) {
  Hplpb__ReduceSink m = HPLPB__REDUCE_SINK__INIT;
  m.rid = r->rid;
  m.gen = r->tgen;
  m.target = r->target;
  m.size = r->size;
  Hplpb__ReduceChild root;
  char key[340];
  /* the sources in the tree so far: the sink names them to a restarted
   * directory, which can then adopt the tree (ReduceReq.adopt_sources) */
  char *srcs[r->k ? r->k : 1];
  for (uint32_t i = 0; r->slots && i < r->k; i++)
    if (r->slots[i].filled) srcs[m.n_sources++] = r->src[r->slots[i].src];
  m.sources = srcs;
  if (r->inline_mode) {
    m.fetch = 1;
  } else if (!r->slots[r->plan.root].filled) {
    /* no root yet (it failed): only the generation says "start over" */
  } else if (r->slots[r->plan.root].node == r->sink) {
    m.local = 1;
  } else {
    child_info(r, r->plan.root, &root, key, sizeof key);
    m.root = &root;
  }
  hpl__dir_node_send(r->srv, r->sink, HPL__MSG_REDUCE_SINK, 0, &m.base);
}

/* A REDUCE_END (or REDUCE_ADOPTED, the same message) for instance `rid`
 * of the reduce into `target`, without a status. */
static void end_msg(Hplpb__ReduceEnd *m, uint64_t rid, char *target) {
  hplpb__reduce_end__init(m);
  m->rid = rid;
  m->target = target;
  m->detail = "";
}

void hpl__dir_reduce_send_end_to(hpl__dir_node *n, unsigned type, uint64_t rid, char *target) {
  Hplpb__ReduceEnd m;
  end_msg(&m, rid, target);
  hpl__dir_node_send_to(n, type, 0, &m.base);
}

void hpl__dir_reduce_send_all_but(hpl__dir_server *s, unsigned type, uint64_t rid, char *target,
                                  uint64_t skip) {
  Hplpb__ReduceEnd m;
  end_msg(&m, rid, target);
  hpl__dir_node *n, *tmp;
  HPL__DIR_NODES_ITER(s, n, tmp)
    if (n->conn && n->id != skip) hpl__dir_node_send_to(n, type, 0, &m.base);
}

void hpl__dir_reduce_send_all(hpl__dir_reduce *r, unsigned type, uint64_t rid) {
  hpl__dir_reduce_send_all_but(r->srv, type, rid, r->target, 0);
}

void hpl__dir_reduce_send_end(hpl__dir_reduce *r, int adopted) {
  if (adopted) {
    hpl__dir_reduce_send_all(r, HPL__MSG_REDUCE_END, r->rid);
    return;
  }
  Hplpb__ReduceEnd m;
  end_msg(&m, r->rid, r->target);
  m.status = r->status;
  /* the sink fails its local gets with it: the same words as gets elsewhere
   * (the target's fail_detail, reduce_rec.c) */
  char why[sizeof r->detail + HPL_ID_MAX + 32];
  snprintf(why, sizeof why, "reduce '%s' failed: %s", r->target, r->detail);
  m.detail = r->status ? why : r->detail;
  /* every node that runs a slot, and the sink, once each */
  uint64_t sent[r->k + 1];
  size_t ns = 0;
  for (uint32_t i = 0; i <= r->k; i++) {
    uint64_t node = i < r->k ? (r->slots && r->slots[i].filled ? r->slots[i].node : 0) : r->sink;
    if (!node) continue;
    int dup = 0;
    for (size_t j = 0; j < ns; j++) dup |= sent[j] == node;
    if (dup) continue;
    sent[ns++] = node;
    hpl__dir_node_send(r->srv, node, HPL__MSG_REDUCE_END, 0, &m.base);
  }
}

/* A node that lost its slot lives on: its task there must end (the reduce
 * goes on without it), unless it is the sink or holds another slot. */
void hpl__dir_reduce_end_task_at(hpl__dir_reduce *r, uint64_t node) {
  int holds = node == r->sink;
  for (uint32_t i = 0; i < r->k && !holds; i++)
    holds = r->slots[i].filled && r->slots[i].node == node;
  if (r->life == HPL__DR_DONE || holds) return;
  Hplpb__ReduceEnd e;
  end_msg(&e, r->rid, r->target);
  hpl__dir_node_send(r->srv, node, HPL__MSG_REDUCE_END, 0, &e.base);
}

/* ------------------------------------------------------------------ ends kept for latecomers */

/* Instances ended everywhere are kept this long, this many, for nodes that
 * register later (stores re-register within a few seconds of a directory's
 * restart or a failover; a store later than that ends its orphans by their
 * own timer). */
#define DR_AWAY_ENDS 32
#define DR_AWAY_END_MS 30000

/* An instance that ended: reduce `rid` into `target`. */
typedef struct hpl__dir_away_end {
  uint64_t rid, at_ms; /* at_ms 0: an unused entry */
  char *target;        /* owned */
} hpl__dir_away_end;

int hpl__dir_reduce_end_everywhere(hpl__dir_server *s, uint64_t rid, const char *target,
                                   uint64_t skip) {
  struct hpl__dir_reduces *st = s->reduces;
  if (!st->away_ends && !(st->away_ends = calloc(DR_AWAY_ENDS, sizeof *st->away_ends))) return -1;
  hpl__dir_away_end *e = &st->away_ends[0];
  for (int i = 0; i < DR_AWAY_ENDS; i++) {
    hpl__dir_away_end *x = &st->away_ends[i];
    if (x->at_ms && x->rid == rid) return 0; /* said already */
    if (x->at_ms < e->at_ms) e = x;          /* the oldest (or an unused) entry */
  }
  char *t = strdup(target);
  if (!t) return -1;
  free(e->target);
  *e = (hpl__dir_away_end){.rid = rid, .at_ms = hpl__now_ms(), .target = t};
  /* every node's tasks of that instance end (other instances' tasks stay) */
  hpl__dir_reduce_send_all_but(s, HPL__MSG_REDUCE_END, e->rid, e->target, skip);
  return 1;
}

void hpl__dir_reduce_tell_ends(hpl__dir_server *s, hpl__dir_node *n) {
  uint64_t now = hpl__now_ms();
  for (int i = 0; s->reduces->away_ends && i < DR_AWAY_ENDS; i++) {
    const hpl__dir_away_end *e = &s->reduces->away_ends[i];
    if (e->at_ms && now - e->at_ms < DR_AWAY_END_MS)
      hpl__dir_reduce_send_end_to(n, HPL__MSG_REDUCE_END, e->rid, e->target);
  }
}

void hpl__dir_reduce_free_ends(hpl__dir_server *s) {
  for (int i = 0; s->reduces->away_ends && i < DR_AWAY_ENDS; i++)
    free(s->reduces->away_ends[i].target);
  free(s->reduces->away_ends);
  s->reduces->away_ends = NULL;
}
