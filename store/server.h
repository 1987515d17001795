/*
 * server.h - hoplite-store: one per node, one event loop, one `store`.
 *
 * This header owns the process's top-level state (struct store), its
 * configuration and counters, and its life cycle (start, drain, stop,
 * free). Every module of the store receives the `store *`; each module's
 * own state hangs off it in the block marked with the module's name and is
 * touched by that module only.
 *
 * Modules, from the bottom up (a module calls only modules listed before
 * it, never one listed after it):
 *   pool.c      the shared-memory pool (jemalloc arena over a memfd)
 *   faults.c    deterministic fault points for failure-injection tests
 *   objects.c   the object table: ids, buffers, references, progress,
 *               watchers and waiters; the presence filter
 *   stmetrics.c the one list of counters (COUNTERS, /metrics), the request
 *               histograms, the /metrics endpoint
 *   puller.c    the generic puller: one byte stream from a peer's data port
 *   dataport.c  the data port: serving streams (also of partial copies)
 *   dirlink.c   the connection to the directory: requests, heartbeats,
 *               reconnects, re-registration
 *   room.c      waiting for room in the pool; letting idle copies go
 *   session.c   a local client's session: references, holds, replies
 *   lifetime.c  objects put with a lifetime: owned by their client, or a TTL
 *   fetch.c     getting an object this node lacks (fetchsm.c: its states)
 *   get.c       a client's GET: answer, or wait while fetch brings it
 *   put.c       a client's put: create, write, seal or abort
 *   rdtask.c    this node's slots of reduce trees
 *   rdsink.c    the reduce target at the node that asked for it
 *   clients.c   the local socket: accept, HELLO, dispatch
 *   server.c    start, signals, drain, stop (this header)
 *   main.c      the command line
 */
#ifndef HPL_STORE_SERVER_H
#define HPL_STORE_SERVER_H

#include "store.h"

/* Defaults for every field (2 GiB pool, 4 MiB chunks, ...). */
void store_config_defaults(store_config *c);

/* Start everything (pool, data port, local socket, directory link,
 * signals) on `loop`. *s is cleared first; cfg is copied. Returns 0 or an
 * HPL_E* code (the reason is logged). */
int store_start(store *s, uv_loop_t *loop, const store_config *cfg);

/* Close every handle so the loop can end (idempotent). */
void store_stop(store *s);

/* Free everything once the loop has ended (after store_stop). */
void store_free(store *s);

/* SIGTERM: stop taking work, finish serving streams (grace period), leave. */
void store_drain(store *s);

#endif
