/*
 * dataport.h - the data port: peers send PULL(id or reduce-stream key,
 * offset) and get the bytes [offset, size) as one frame's payload, streamed
 * from the pool as they arrive (a partial copy is forwarded as far as it
 * has arrived, then its sender waits on the object's watchers).
 *
 * A stream object (internal) is served through its source (hpl__source,
 * objects.h) when it has one, so this module knows nothing of who makes
 * it.
 *
 * Callers: server.c (start, stop, drain, free), dlconn.c (the port to
 * register), fetch.c and rdsink.c (restart an object's bytes), rdtask.c and
 * ring.c (streams appearing, pulls parked for a reduce that ended, pulls
 * of bytes made again), tests/fuzz/fuzz_store.c (hpl__dataport_serve).
 */
#ifndef HPL_STORE_DATAPORT_H
#define HPL_STORE_DATAPORT_H

#include <stdint.h>

#include "objects.h"
#include "store.h"

/* Make the module's context, bind and listen on cfg.data_host:data_port.
 * `idle` (may be NULL) runs whenever a stream ends and none is left
 * (draining uses it). Returns 0, HPL_EINVAL (bad address), HPL_ENOMEM or
 * HPL_ESYS. */
int hpl__dataport_start(hpl__store *s, void (*idle)(hpl__store *s));

/* fn(s, o, unit) runs when a spilled copy streamed from its file fails
 * its digest at `unit` (dpfile.c): the stream is ended first, the handler
 * drops the copy (room.c's hpl__room_corrupt, installed by server.c). */
void hpl__dataport_on_corrupt(hpl__store *s,
                              void (*fn)(hpl__store *s, hpl__obj *o, uint64_t unit));

/* Close the listener and every stream; free the module's context once the
 * loop has ended. */
void hpl__dataport_stop(hpl__store *s);
void hpl__dataport_free(hpl__store *s);

/* Serve an already connected stream as a data-port connection (the
 * listener's accepts; fuzz targets hand in one end of a socketpair). Takes
 * `t` (malloc'd, initialised). */
void hpl__dataport_serve(hpl__store *s, uv_stream_t *t);

/* The bound port, -1 if not bound. */
int hpl__dataport_port(hpl__store *s);

/* Connections open on the data port (the data_conns gauge). */
size_t hpl__dataport_conns(const hpl__store *s);

/* Streams in progress (not closing). */
int hpl__dataport_active(hpl__store *s);

/* The object's bytes start over from 0 under generation `gen`: cut every
 * stream of its old bytes. */
void hpl__dataport_restart(hpl__store *s, hpl__obj *o, uint32_t gen);

/* Cut every stream of the object's bytes (they are about to be replaced). */
void hpl__dataport_drop(hpl__store *s, hpl__obj *o);

/* A reduce stream `key` now exists: serve the pulls waiting for it. */
void hpl__dataport_stream_ready(hpl__store *s, const char *key);

/* The lowest offset any pull being served of `o` started at, in *offset.
 * Returns 1, or 0 if nobody pulls `o`. */
int hpl__dataport_pull_offset(hpl__store *s, const struct hpl__obj *o, uint64_t *offset);

/* Pulls parked for a stream that does not exist yet whose key `match`
 * accepts will not be served: each gets an error reply (status, detail)
 * and the connection waits for its next PULL. */
void hpl__dataport_unpark(hpl__store *s, int (*match)(const char *key, void *arg), void *arg,
                          int status, const char *detail);

#endif
