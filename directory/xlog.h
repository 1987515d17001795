/*
 * xlog.h - the transfer record: a ring of the latest DIR_XFER_CAP events
 * (a receiver given a sender, a copy completed or removed, a node gone, an
 * object deleted, a reduce slot reset) that hpl_transfers reads with
 * TRANSFERS, and tests replay to check the broadcast trees.
 *
 * Owns its state (hpl__dir_server.xlog). Callers: every module that changes a
 * location records it (acquire_pick.c, locs.c, nodes.c, admin.c,
 * reduce_tree.c); server.c (init/free, dispatch of TRANSFERS).
 */
#ifndef HPL_DIR_XLOG_H
#define HPL_DIR_XLOG_H

#include <stdint.h>

#include "server.h"

/* The module's state (the ring), allocated here: 0 or HPL_ENOMEM. */
int hpl__dir_xlog_init(hpl__dir_server *s);

/* Free the ring and its entries (NULL ring: a no-op). */
void hpl__dir_xlog_free(hpl__dir_server *s);

/* Record an event (HPL__XFER_*) about object `id` (copied; NULL: none),
 * overwriting the oldest entry once the ring is full. Never fails: out of
 * memory, the entry's id reads as empty. */
void hpl__dir_xlog(hpl__dir_server *s, int kind, const char *id, uint64_t receiver,
                   uint64_t sender);

/* TRANSFERS handler: the entries from `since` on (at most 40000 a reply;
 * `next` says where to go on), with a detail if older ones were lost. */
void hpl__dir_xlog_on_transfers(hpl__dir_server *s, const hpl__dir_frame *f);

#endif
