/*
 * status.h - the cluster at a glance (`hoplite status`, hpl_status): what
 * each node's latest heartbeat said (pool use, objects, bytes moved, the
 * copies it is pulling with their progress and rate), the nodes that died
 * lately, and the reduces running, answered to STATUS.
 *
 * Owns dir_node.stats and dir_server.gone (the latest HPL__STATUS_MAX_DEAD
 * nodes declared dead). Callers: nodes.c (heartbeats, a node's end, free),
 * server.c (dispatch of STATUS, free). Everything is bounded: a heartbeat
 * lists at most HPL__STATUS_MAX_INCOMING copies (more are ignored), a reply
 * at most the HPL__STATUS_MAX_* entries of src/proto.h.
 */
#ifndef HPL_DIR_STATUS_H
#define HPL_DIR_STATUS_H

#include "nodes.h"
#include "server.h"

/* A scheduled heartbeat with stats came from `n`: keep what it says
 * (replacing the previous one). Entries with an invalid id are skipped.
 * Out of memory, the node shows no stats. */
void dir_status_heartbeat(dir_server *s, dir_node *n, const Hplpb__Heartbeat *hb);

/* `n` is gone (`why`): remember it as dead, free its stats. Called before
 * n is freed. */
void dir_status_node_gone(dir_server *s, dir_node *n, const char *why);

/* Free n's stats (the node is freed at the end). */
void dir_status_node_free(dir_node *n);

/* STATUS handler (any connection): the snapshot, or HPL_ENOMEM. */
void dir_status_on_status(dir_server *s, const dir_frame *f);

/* Free the dead nodes' record (at the end, after the loop). */
void dir_status_free(dir_server *s);

#endif
