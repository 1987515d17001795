/*
 * ring.h - ring allreduce groups.
 *
 * hpl_allreduce first asks its store for a ring (ReduceReq.ring); the store
 * asks here with RING. The participants of one allreduce form a group, one
 * member per node, each contributing a source it holds complete. Once every
 * source has a member, each member is answered with the ring (RingPlan):
 * its place and every member's node. The stores then run a reduce-scatter
 * followed by an allgather over their neighbours' streams (store/ring.c),
 * so each node sends 2(k-1)/k of the object instead of the 2x of a reduce
 * followed by a broadcast. Each member registers its complete copy of the
 * target (LOC_ADD) and says so (RING_NOTE status 0); when all have, or when
 * any member fails or leaves, the group ends and every member is told
 * (RING_END). A group that cannot form (a participant without a source of
 * its own, two on one node, sources not ready, too small, not every
 * participant within the forming window) is declined: each member is
 * answered HPL_EUNAVAIL and its client reduces the usual way, as does every
 * client of an abandoned ring. Ended groups answer late requests for a
 * while (RING_KEEP_MS), so no second ring forms for the same target.
 *
 * The forming window is what the ring would save, 2S/(kB) with the cost
 * model's bandwidth B, at least 100 ms and at most 2 s: participants that
 * come later than that cost more than the ring wins.
 *
 * Owns its state (hpl__dir_server.rings: the groups by target). Callers:
 * server.c (RING, RING_NOTE, the subscriptions it wires: node
 * events, a plain reduce into the same target; shutdown), admin.c
 * (deletes).
 */
#ifndef HPL_DIR_RING_H
#define HPL_DIR_RING_H

#include <stdint.h>

#include "nodes.h"
#include "server.h"

/* RING (a ReduceReq with ring set) from a registered node: join or start
 * the target's group; answered now (HPL_EUNAVAIL: no ring) or once the
 * group forms or is declined. */
void hpl__dir_ring_on_request(hpl__dir_server *s, const hpl__dir_frame *f);

/* RING_NOTE from a member: its target is complete (status 0) or its part
 * failed (the ring ends for all). Stale notes (another rid) are ignored; a
 * corrupt report that arrives after the ring ended another way is still
 * counted against the member that sent the bad unit. */
void hpl__dir_ring_on_note(hpl__dir_server *s, const hpl__dir_frame *f);

/* A plain reduce into `target` is asked for (hpl__dir_reduce_before_start; `arg`
 * unused): a forming group is declined (its members then join that
 * reduce). Returns 1 if a ring into it runs (the reduce is refused), else
 * 0. */
int hpl__dir_ring_clash(hpl__dir_server *s, const char *target, void *arg);

/* Node event HPL__DIR_NODE_TASKS_VOID (hpl__dir_nodes_subscribe, for that
 * event only; server.c wires it): the node is dead, or its store
 * reconnected: groups it is in end (running) or are declined (forming). */
void hpl__dir_ring_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg);

/* The target was deleted: a running ring into it ends. */
void hpl__dir_ring_target_deleted(hpl__dir_server *s, const char *target);

/* Free every group (shutdown). */
void hpl__dir_ring_free_all(hpl__dir_server *s);

#endif
