/*
 * acquire.h - sender choice: where a store pulls an object from (ACQUIRE),
 * or a client's direct read of a small object (PEEK).
 *
 * An ACQUIRE that cannot be answered yet (the object is pending, or every
 * copy is busy) becomes a waiter: on the object's list (objects.h
 * hpl__dir_obj.waiters, in arrival order) and on the asking node's list
 * (nodes.h hpl__dir_node.waiters), with a timer for its deadline and for the end
 * of an allreduce ring wait. A waiter belongs to its node, not to a
 * connection (a PEEK's waiter does: hpl__dir_conn.peeks): it is answered on
 * node->conn, and the node's waiters are dropped whenever the node leaves
 * its connection (HPL__DIR_NODE_UNPLUGGED), so no waiter outlives the
 * connection it must answer on. Waiters are served when their object
 * changes (hpl__dtab_on_change).
 *
 * Files: acquire_int.h lists them (the answer now, silent and crawling
 * senders, requests and waiters). Owns its state (hpl__dir_server.acquire),
 * hpl__dir_waiter, the objects' waiter lists, and the broadcast crawl fields of
 * hpl__dir_node. Callers: server.c (dispatch, the subscriptions it wires,
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
 * connection's list (hpl__dir_conn.peeks), dropped when the connection closes. */
void hpl__dir_acquire_on_acquire(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_acquire_on_peek(hpl__dir_server *s, const hpl__dir_frame *f);

/* Object `o` changed (hpl__dtab_on_change subscriber, `srv` the hpl__dir_server):
 * answer every waiter of `o` that can be answered now (a sender, or an
 * error such as HPL_ELOST), in arrival order, until a pass serves no one
 * an allreduce ring successor could use. Does not free `o`. */
void hpl__dir_acquire_on_change(hpl__dir_obj *o, void *srv);

/* Drop the PEEKs waiting on connection `dc` without a reply (it closed). */
void hpl__dir_acquire_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc);

/* Node event HPL__DIR_NODE_UNPLUGGED (hpl__dir_nodes_subscribe, for that
 * event only; server.c wires it): drops every waiter and pending crawl
 * report of the node without a reply (it is gone or moves to another
 * connection) and frees the objects left unreferenced. */
void hpl__dir_acquire_on_node(hpl__dir_server *s, const hpl__dir_node_event *e, void *arg);

/* dtab's crawl filter (dtab.crawling, `srv` the hpl__dir_server): within
 * HPL__DIR_CRAWLING_MS the node reported its own sender crawling, or a receiver
 * that no node reported in that time reported it crawling. */
#define HPL__DIR_CRAWLING_MS 1000
int hpl__dir_acquire_crawling(uint64_t node, void *srv);

/* The timer that judges broadcast crawl reports in batches (s->bcrawl_timer):
 * set up at server start, closed when it stops (server.c). */
void hpl__dir_acquire_crawl_start(hpl__dir_server *s);
void hpl__dir_acquire_crawl_stop(hpl__dir_server *s);

/* The module's state (hpl__dir_server.acquire), allocated here: 0 or
 * HPL_ENOMEM. */
int hpl__dir_acquire_init(hpl__dir_server *s);

/* Free the crawl reports still waiting for their batch and the module's
 * state (the server ends). */
void hpl__dir_acquire_free(hpl__dir_server *s);

#endif
