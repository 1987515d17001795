/*
 * acquire.h - sender choice: where a store pulls an object from (ACQUIRE),
 * or a client's direct read of a small object (PEEK).
 *
 * An ACQUIRE that cannot be answered yet (the object is pending, or every
 * copy is busy) becomes a waiter: on the object's list (objects.h
 * dir_obj.waiters, in arrival order) and on the asking node's list
 * (nodes.h dir_node.waiters), with a timer for its deadline and for the end
 * of an allreduce ring wait. A waiter belongs to its node, not to a
 * connection (a PEEK's waiter does: dir_conn.peeks): it is answered on
 * node->conn, and the node's waiters are dropped whenever the node leaves
 * its connection (DIR_NODE_UNPLUGGED), so no waiter outlives the
 * connection it must answer on. Waiters are served when their object
 * changes (dtab_on_change).
 *
 * Files: acquire_int.h lists them (the answer now, silent and crawling
 * senders, requests and waiters). Owns its state (dir_server.acquire),
 * dir_waiter, the objects' waiter lists, and the broadcast crawl fields of
 * dir_node. Callers: server.c (dispatch, the subscriptions it wires,
 * connection close, start/stop/free).
 */
#ifndef HPL_DIR_ACQUIRE_H
#define HPL_DIR_ACQUIRE_H

#include "nodes.h"
#include "server.h"

/* Handlers (server.c's dispatch table). ACQUIRE needs a registered node:
 * it names the asker's sender, inline bytes, an error, or waits. PEEK may
 * come from any connection: inline bytes or HPL_ENOTFOUND; a PEEK with a
 * timeout for an object that is not ready yet waits for it on the
 * connection's list (dir_conn.peeks), dropped when the connection closes. */
void dir_acquire_on_acquire(dir_server *s, const dir_frame *f);
void dir_acquire_on_peek(dir_server *s, const dir_frame *f);

/* Object `o` changed (dtab_on_change subscriber, `srv` the dir_server):
 * answer every waiter of `o` that can be answered now (a sender, or an
 * error such as HPL_ELOST), in arrival order, until a pass serves no one
 * an allreduce ring successor could use. Does not free `o`. */
void dir_acquire_on_change(dir_obj *o, void *srv);

/* Drop the PEEKs waiting on connection `dc` without a reply (it closed). */
void dir_acquire_conn_closed(dir_server *s, dir_conn *dc);

/* Node events (dir_nodes_subscribe; server.c wires it): DIR_NODE_UNPLUGGED
 * drops every waiter and pending crawl report of the node without a reply
 * (it is gone or moves to another connection) and frees the objects left
 * unreferenced. Other events are ignored. */
void dir_acquire_on_node(dir_server *s, const dir_node_event *e, void *arg);

/* dtab's crawl filter (dtab.crawling, `srv` the dir_server): within
 * DIR_CRAWLING_MS the node reported its own sender crawling, or a receiver
 * that no node reported in that time reported it crawling. */
#define DIR_CRAWLING_MS 1000
int dir_acquire_crawling(uint64_t node, void *srv);

/* The timer that judges broadcast crawl reports in batches (s->bcrawl_timer):
 * set up at server start, closed when it stops (server.c). */
void dir_acquire_crawl_start(dir_server *s);
void dir_acquire_crawl_stop(dir_server *s);

/* The module's state (dir_server.acquire), allocated here: 0 or
 * HPL_ENOMEM. */
int dir_acquire_init(dir_server *s);

/* Free the crawl reports still waiting for their batch and the module's
 * state (the server ends). */
void dir_acquire_free(dir_server *s);

#endif
