/*
 * nodes_int.h - what the two files of the node module share (nodes.c: the
 * registry, the handlers, a node's end, the events; nodelive.c: liveness,
 * probes and verdicts): the module's state and the calls between the
 * files. Included by those files only; every other module goes through
 * nodes.h.
 */
#ifndef HPL_DIR_NODES_INT_H
#define HPL_DIR_NODES_INT_H

#include <stdint.h>

#include "nodes.h"

/* The module's state (hpl__dir_server.nodes). */
struct hpl__dir_nodes {
  hpl__dir_node *by_id;      /* every registered node (uthash) */
  uv_timer_t sweep, confirm; /* liveness: every heartbeat interval; suspects judged again */
  uv_timer_t probe_timer;    /* probes of reported senders judged when due */
  uint64_t sweep_due_ms;     /* when the next sweep should run */
  struct {
    unsigned events; /* HPL__DIR_NODE_EV bits */
    hpl__dir_node_fn fn;
    void *arg;
  } subs[HPL__DIR_NODES_MAX_SUBS];
  int nsubs;
};

/* What the object table's callbacks need about a node that went away
 * (nodes.c: its end; nodelive.c: it did not answer a probe). */
typedef struct hpl__dir_nodes_gone_arg {
  hpl__dir_server *s;
  uint64_t node;     /* the node */
  uint64_t reporter; /* the receiver whose report found it silent (0: none) */
} hpl__dir_nodes_gone_arg;

/* nodes.c: tell the subscribers an event about node n (or, n NULL, about
 * node `id`) with nothing else. */
void hpl__dir_nodes_emit_simple(hpl__dir_server *s, hpl__dir_node_ev type, hpl__dir_node *n,
                                uint64_t id);

/* nodes.c: the node is dead (or left): forget it (n is freed, its copies
 * dropped). */
void hpl__dir_node_gone(hpl__dir_server *s, hpl__dir_node *n, const char *why);

/* nodelive.c: the node's probe state moves to `st` (logged at debug
 * level). */
void hpl__dir_node_probe_set(hpl__dir_node *n, hpl__dir_node_probe st);

#endif
