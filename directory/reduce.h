/*
 * reduce.h - the directory's part of reduces: dynamic reduce trees.
 *
 * A reduce of `sources` into `target` at the sink node becomes a tree of
 * k = num_objects slots, planned (src/common/planner.c) when the first source is
 * ready and its size known. Slots are numbered in in-order and filled in
 * the order sources become ready, so the tree's in-order traversal is the
 * arrival order - with one exception: a source held by the sink takes the
 * root slot, so the result does not cross the sink's link twice. Later
 * sources are spares (subset reduce). Each slot with children runs a task
 * on the node holding its source; the directory tells it its children as
 * they are assigned. The root streams the result into the target at the
 * sink; the sink reports the target complete like any copy, which ends the
 * reduce. Objects of at most inline_max bytes are reduced here.
 *
 * The module's files are listed in reduce_int.h (messages, records, the
 * tree's decisions, crawls, requests and events). It owns its state
 * (hpl__dir_server.reduces) and the objects' `watchers` lists. It hears of
 * object changes (hpl__dtab_on_change) and of a node's life (hpl__dir_nodes_subscribe)
 * through the subscriptions server.c wires. Callers: server.c (dispatch,
 * the subscriptions, connection close, start/stop/free), acquire*.c (the
 * allreduce chain's sender), ring.c (whether a reduce into a target is
 * known), admin.c (deletes), status.c (the running reduces).
 */
#ifndef HPL_DIR_REDUCE_H
#define HPL_DIR_REDUCE_H

#include <stdint.h>

#include "nodes.h"
#include "server.h"

/* Handlers (server.c's dispatch table).
 * REDUCE: start a reduce (reply: sink node), or join the same one as an
 *   allreduce participant (joined = 1); HPL_EINVAL, HPL_EEXIST,
 *   HPL_EMISMATCH or HPL_ENOMEM otherwise.
 * REDUCE_INFO: the sources that made it into a finished reduce, waiting up
 *   to timeout_ms (< 0: no limit) for it to finish; HPL_ENOTFOUND,
 *   HPL_ETIMEDOUT, HPL_ECANCELED (the reduce was dropped).
 * REDUCE_FAIL (registered node, one-way): a slot's stream failed.
 * REDUCE_DONE (registered node, one-way): the reduce `rid` into `target`
 *   finished at this sink while no directory knew it (this one restarted
 *   since); every other node, and each one that registers within
 *   DR_AWAY_END_MS, gets REDUCE_END for it, so its tasks end now rather
 *   than when their orphan timer runs out. */
void hpl__dir_reduce_on_request(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_reduce_on_info(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_reduce_on_fail(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_reduce_on_done(hpl__dir_server *s, const hpl__dir_frame *f);

/* Object `o` changed (hpl__dtab_on_change subscriber, `srv` the hpl__dir_server):
 * sources that became ready arrive; a tree reduce whose target became
 * complete is done. */
void hpl__dir_reduce_on_change(hpl__dir_obj *o, void *srv);

/* Node events (hpl__dir_nodes_subscribe; server.c wires it):
 * HPL__DIR_NODE_TASKS_VOID: reduces the node sinks fail, its slots are refilled.
 * HPL__DIR_NODE_UNRESPONSIVE: the reduce slots on it whose output was reported
 *   silent lately are replaced now (not at the next report).
 * HPL__DIR_NODE_BACK: reduces waiting for a source they lost on it (no spare
 *   was left) take it back.
 * HPL__DIR_NODE_WELCOMED: it learns which running reduces a restarted directory
 *   adopted (REDUCE_ADOPTED), so their tasks there go on, and which ones
 *   finished while no directory knew (REDUCE_DONE notes).
 * Other events are ignored. */
void hpl__dir_reduce_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg);

/* `dc` closed: its REDUCE_INFO waiters are dropped without a reply. */
void hpl__dir_reduce_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc);

/* The module's state (hpl__dir_server.reduces), allocated here: 0 or
 * HPL_ENOMEM. */
int hpl__dir_reduce_init(hpl__dir_server *s);

/* `fn(s, target, arg)` is asked before a plain reduce into `target` starts
 * (REDUCE); a nonzero answer refuses it with HPL_EEXIST ("a ring allreduce
 * into it runs"). One at most: ring.c's, wired by server.c. */
void hpl__dir_reduce_before_start(hpl__dir_server *s,
                                  int (*fn)(hpl__dir_server *s, const char *target, void *arg),
                                  void *arg);

/* The id `target` was deleted: a reduce into it is cancelled and freed. */
void hpl__dir_reduce_target_deleted(hpl__dir_server *s, const char *target);

/* A reduce not finished yet, as `hoplite status` shows it. */
typedef struct hpl__dir_reduce_view {
  const char *target; /* valid until the loop runs again */
  uint64_t sink;
  uint32_t joined;    /* sources in the tree so far */
  uint32_t needed;    /* num_objects */
  uint32_t sources;   /* sources named */
  uint64_t elapsed_ms, size;
} hpl__dir_reduce_view;

/* The reduces running, the first `max` of them into out[]. Returns how
 * many there are in all (status.c). */
size_t hpl__dir_reduce_running(hpl__dir_server *s, hpl__dir_reduce_view *out, size_t max);

/* Free every reduce and the module's state (at the end, after the loop). */
void hpl__dir_reduce_free_all(hpl__dir_server *s);

/* A reduce a sink re-reported as finished (HeldNote.reduces: it ended
 * under a former directory): kept as a finished reduce (REDUCE_INFO
 * answers its sources, an allreduce participant joins it), as `req` asked
 * it with the sources used[0..nused) (indices into req->sources, in slot
 * order) at `sink`. Returns 0; HPL_EEXIST if a reduce into the target is
 * known already (nothing changes); HPL_EINVAL if the request or the
 * indices are not a valid reduce (a bad target or source id, more than
 * 65536 sources, nused not its num_objects, an index out of range or
 * twice, an unknown op or dtype); HPL_ENOMEM. Copies what it keeps. */
int hpl__dir_reduce_remember(hpl__dir_server *s, const Hplpb__ReduceReq *req,
                             const uint32_t *used, size_t nused, uint64_t sink);

/* Whether a reduce into `target` is known (running, or finished and kept). */
int hpl__dir_reduce_known(hpl__dir_server *s, const char *target);

/* How long a participant of an allreduce waits for its ring predecessor
 * to ask for the target before the ordinary sender rule applies. */
#define HPL__DIR_RING_WAIT_MS 50

/* The sender an allreduce participant `asker` should pull the target `o`
 * from (see reduce_tree.c). Returns 1 with *from set (an idle copy to
 * assign), 2 if the asker should wait (until since_ms + HPL__DIR_RING_WAIT_MS at
 * most), 0 for no preference. */
int hpl__dir_reduce_ring_sender(hpl__dir_server *s, hpl__dir_obj *o, uint64_t asker, uint64_t avoid,
                                uint64_t since_ms, hpl__dir_loc **from);

/* Set up / close the timer that judges crawl reports again after link
 * measurements (reduce_crawl.c; server start and stop). */
void hpl__dir_reduce_start(hpl__dir_server *s);
void hpl__dir_reduce_stop(hpl__dir_server *s);

#endif
