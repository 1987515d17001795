/*
 * locs.h - the locations stores report: a put or a finished pull
 * (LOC_ADD), a copy that completed or went away (LOC_NOTE), a small
 * object's bytes (INLINE_PUT), and the complete copies a store re-reports
 * when it registers (after a directory restart or a reconnect). An
 * INLINE_PUT confirms a client's PUBLISH of the same bytes (publish.h).
 *
 * Changes the object table (objects.h) and records each change in the
 * transfer record. Callers: server.c (dispatch, the node events it wires).
 */
#ifndef HPL_DIR_LOCS_H
#define HPL_DIR_LOCS_H

#include <stddef.h>
#include <stdint.h>

#include "nodes.h"
#include "server.h"

/* Handlers (server.c's dispatch table; all need a registered node).
 * LOC_ADD replies 0, HPL_EEXIST (a put of an id that exists),
 * HPL_EMISMATCH (another size) or HPL_ENOMEM. LOC_NOTE is one-way unless
 * it carries a request id (then an empty reply comes first). INLINE_PUT
 * copies its payload (at most inline_max bytes, and the inline cache must
 * have room) and replies 0, HPL_EINVAL, HPL_EUNAVAIL, HPL_EEXIST or
 * HPL_ENOMEM. */
void hpl__dir_locs_on_add(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_locs_on_note(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_locs_on_inline_put(hpl__dir_server *s, const hpl__dir_frame *f);


/* Node event HPL__DIR_NODE_JOINED (hpl__dir_nodes_subscribe, for that event
 * only; server.c wires it): the node registered holding e->held: each
 * complete one with a valid id becomes a complete copy (entries that are
 * not are skipped). */
void hpl__dir_locs_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg);

/* HELD: one piece of what a registered node holds. A complete copy of an
 * object the directory knows (with the same size) becomes or stays a
 * complete copy of that node; an object it does not know is taken when the
 * note says `adopt`, else the node is told to DROP it (it was deleted while
 * the node was away), as is a copy whose size no longer matches. Answered
 * with a Reply.
 * First the note's deletes and reduces (store/handoff.h: what a new
 * directory learns from the stores): each delete becomes a tombstone with
 * its age, and copies of it taken already that were complete before it
 * are dropped; each finished reduce becomes a finished reduce record
 * (hpl__dir_reduce_remember) unless one exists. At most
 * HPL__DIR_HELD_TOMBS_MAX deletes and HPL__DIR_HELD_REDUCES_MAX reduces a
 * note (more: HPL_EINVAL, nothing taken). */
#define HPL__DIR_HELD_TOMBS_MAX 4096
#define HPL__DIR_HELD_REDUCES_MAX 64
void hpl__dir_locs_on_held(hpl__dir_server *s, const hpl__dir_frame *f);

/* EVICT: may the node's copies of these objects go? Each is let go (the
 * location removed at once, so no receiver is sent there again) only if
 * it is complete, serves nobody, and another complete copy on a live
 * node that is neither draining nor suspected stays (or the object is
 * inline). Answered with an EvictRep, one flag per id; at most
 * HPL__DIR_EVICT_MAX ids per request (more is HPL_EINVAL). */
#define HPL__DIR_EVICT_MAX 1024
void hpl__dir_locs_on_evict(hpl__dir_server *s, const hpl__dir_frame *f);

#endif
