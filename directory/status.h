/*
 * status.h - the cluster at a glance (`hoplite status`, hpl_status): what
 * each node's latest heartbeat said (pool use, objects, bytes moved, the
 * copies it is pulling with their progress and rate), the nodes that died
 * lately, and the reduces running, answered to STATUS; with --etcd also
 * this leader's term, its lease (ha.h) and the standby directories.
 *
 * Owns hpl__dir_node.stats and its state (hpl__dir_server.gone: the latest
 * HPL__STATUS_MAX_DEAD nodes declared dead). Callers: server.c (dispatch of
 * STATUS, the node events it wires, free). Everything is bounded: a
 * heartbeat lists at most HPL__STATUS_MAX_INCOMING copies (more are
 * ignored), a reply at most the HPL__STATUS_MAX_* entries of src/common/proto.h.
 */
#ifndef HPL_DIR_STATUS_H
#define HPL_DIR_STATUS_H

#include "nodes.h"
#include "server.h"

/* Node events (hpl__dir_nodes_subscribe; server.c wires it):
 * HPL__DIR_NODE_STATS: keep what a scheduled heartbeat with stats said
 *   (replacing the previous one). Entries with an invalid id are skipped;
 *   out of memory, the node shows no stats.
 * HPL__DIR_NODE_DEAD: remember the node as dead, free its stats.
 * Other events are ignored. */
void hpl__dir_status_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg);

/* STATUS handler (any connection): the snapshot, or HPL_ENOMEM. */
void hpl__dir_status_on_status(hpl__dir_server *s, const hpl__dir_frame *f);

/* Free every node's stats and the dead nodes' record (at the end, after
 * the loop, before the nodes are freed). */
void hpl__dir_status_free(hpl__dir_server *s);

#endif
