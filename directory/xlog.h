/*
 * xlog.h - the transfer record: a ring of the latest DIR_XFER_CAP events
 * (a receiver given a sender, a copy completed or removed, a node gone, an
 * object deleted, a reduce slot reset) that hpl_transfers reads with
 * TRANSFERS, and tests replay to check the broadcast trees.
 *
 * Owns its state (dir_server.xlog). Callers: every module that changes a
 * location records it (acquire_pick.c, locs.c, nodes.c, admin.c,
 * reduce_tree.c); server.c (init/free, dispatch of TRANSFERS).
 */
#ifndef HPL_DIR_XLOG_H
#define HPL_DIR_XLOG_H

#include <stdint.h>

#include "server.h"

/* The module's state (the ring), allocated here: 0 or HPL_ENOMEM. */
int dir_xlog_init(dir_server *s);

/* Free the ring and its entries (NULL ring: a no-op). */
void dir_xlog_free(dir_server *s);

/* Record an event (HPL__XFER_*) about object `id` (copied; NULL: none),
 * overwriting the oldest entry once the ring is full. Never fails: out of
 * memory, the entry's id reads as empty. */
void dir_xlog(dir_server *s, int kind, const char *id, uint64_t receiver, uint64_t sender);

/* TRANSFERS handler: the entries from `since` on (at most 40000 a reply;
 * `next` says where to go on), with a detail if older ones were lost. */
void dir_xlog_on_transfers(dir_server *s, const dir_frame *f);

#endif
