/*
 * server.h - hoplite-store: one per node, one event loop, one `store`.
 * This header has the process's life cycle (start, drain, stop, free) and
 * the map of its modules; the process's own state is in store.h, and each
 * module's state is its own, reached only through its header.
 *
 * Modules, from the bottom up: a module calls only modules listed before
 * it, never one listed after it. A lower module tells an upper one through
 * a callback the upper one registered in the lower one's state (the
 * arrows), never by name.
 *
 *   the data plane (knows nothing above it)
 *   pool.c       the shared-memory pool (jemalloc arena; poolext.c: the
 *                free list and the arena's extent hooks; poolseg.c: the
 *                chunk memfds under it, which only the store can write)
 *   faults.c     deterministic fault points for failure-injection tests
 *   spill.c      spill files: buffers written to files and read back
 *                (spillapi.c: the calls; spilljob.c: the I/O jobs;
 *                spilldir.c: the spill area)
 *   objects.c    the object table: records, walks, the presence filter
 *                (objlife.c: references, progress, watchers and waiters,
 *                the idle list, the buffer and its spill file; objidx.c:
 *                the indexes). Listeners: watchers and waiters; room.c's
 *                (room changed, spilled bytes wanted); a stream's source
 *                (hpl__source: ring.c, rdtask.c)
 *   objdig.c     an object's digests: made at the origin (thread pool),
 *                taken from the directory, checked unit by unit
 *   rddig.c      a reduce stream's digests where it is made: hashed as
 *                its bytes become final, answered to its receivers
 *   dconns.c     data connections to other stores' data ports: copies'
 *                receive window (--pull-window), and idle ones kept
 *                between pulls (bounded per sender and in all, timed out)
 *   puller.c     one byte stream from a peer's data port, into an object
 *                (hpl__puller_start_into: where received bytes become its
 *                progress) or an owner's buffer (pullmon.c: watching it;
 *                pullslot.c: inbound slots, a few large copies at once);
 *                reports crawling, silence, failure to its owner (hpl__puller_ops)
 *                -> quiet senders (server.c installs dirlink.c's)
 *   rdver.c      a reduce stream's digests at its receiver: fetched from
 *                the stream's maker over the data port, units checked
 *   dataport.c   serving streams on the data port, also of partial copies
 *                and through a stream's source (dpsend.c: a stream's bytes
 *                to its socket; dpfile.c: spilled copies from their files;
 *                dpfault.c: fault points on streams)
 *                -> idle (server.c)
 *
 *   the control plane
 *   handoff.c    what a new directory learns from us besides our copies:
 *                deletes learned lately, the sources of reduces made here
 *   dirlink.c    the connection to the directory: requests, notes, the
 *                directory's messages (dlconn.c: connecting, registering,
 *                heartbeats; dlheld.c: re-reporting what we hold; dlprobe.c:
 *                a silent directory's successor found by its listening)
 *                -> handlers (server.c installs fetch's, rdtask's,
 *                rdsink's, ring's)
 *   room.c       waiting for room in the pool; letting idle copies go,
 *                spilling, reading back -> shed (rdtask.c)
 *   session.c    a local client's session: references, holds, replies
 *   lifetime.c   objects put with a lifetime: owned by their client, or a TTL
 *   fetch.c      getting an object this node lacks (fetchsm.c: its states;
 *                fetchans.c: the directory's answers; fetchgrant.c: GRANTs)
 *   get.c        a client's GET: answer, or wait while fetch brings it
 *   putcopy.c    copying a client's bytes from its own memory into an object
 *   putcheck.c   a whole PUT's checks before a put begins (sizes, lifetime, bytes
 *                held already from the client's own PUBLISH)
 *   put.c        a client's put: create, write, seal or abort (putseal.c:
 *                sealing, the directory's answers)
 *   rdtask.c     this node's slots of reduce trees (rdcombine.c: their
 *                inputs and combine steps; rdend.c: their end, orphans)
 *                -> root released (rdsink.c)
 *   rdsink.c     the reduce target at the node that asked for it
 *                (rdsinkask.c: the client's request, asking again after a
 *                directory restart)
 *   ring.c       this node's part in ring allreduces (ringin.c: its
 *                incoming stream, checked against its maker's digests)
 *   stmetrics.c  the one list of counters and gauges (COUNTERS, /metrics),
 *                the /metrics endpoint
 *   clientadm.c  who may use the local socket: modes, peer credentials,
 *                clients per user, refusals that say why
 *   clients.c    the local socket: accept, HELLO, dispatch
 *   server.c     start, signals, drain, stop (this header)
 *   main.c       the command line
 */
#ifndef HPL_STORE_SERVER_H
#define HPL_STORE_SERVER_H

#include "store.h"

/* Defaults for every field (2 GiB pool, 4 MiB chunks, ...). */
void hpl__store_config_defaults(hpl__store_config *c);

/* Start everything (pool, data port, local socket, directory link,
 * signals) on `loop`. *s is cleared first; cfg is copied. Returns 0 or an
 * HPL_E* code (the reason is logged). */
int hpl__store_start(hpl__store *s, uv_loop_t *loop, const hpl__store_config *cfg);

/* Close every handle so the loop can end (idempotent). */
void hpl__store_stop(hpl__store *s);

/* Free everything once the loop has ended (after hpl__store_stop). */
void hpl__store_free(hpl__store *s);

/* SIGTERM: stop taking work, finish serving streams (grace period), leave. */
void hpl__store_drain(hpl__store *s);

#endif
