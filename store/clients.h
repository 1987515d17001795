/*
 * clients.h - the local socket: accept clients (the Unix socket's peers),
 * send each the HELLO with the pool's memfd, read their requests and hand
 * each to the module that serves it (get.c, put.c, rdsink.c, a proxy for
 * requests the directory answers, counters and contains here).
 *
 * Callers: server.c (start, stop, free, the count), tests/fuzz/fuzz_store.c
 * (hpl__clients_serve).
 */
#ifndef HPL_STORE_CLIENTS_H
#define HPL_STORE_CLIENTS_H

#include "store.h"

/* Make the module's context and listen on cfg.socket_path (a stale socket
 * file left by a dead store is removed; a live store's is not). Returns 0,
 * HPL_EINVAL, HPL_EEXIST, HPL_ENOMEM or HPL_ESYS (logged). */
int hpl__clients_start(hpl__store *s);

/* Serve an already connected Unix stream as a local client (the
 * listener's accepts; fuzz targets hand in one end of a socketpair). Takes
 * `p` (malloc'd, initialised): HELLO, then requests. */
void hpl__clients_serve(hpl__store *s, uv_stream_t *p);

/* Local clients connected (the clients gauge; server.c hands it to
 * dirlink.c's heartbeats and stmetrics.c as a callback). */
size_t hpl__clients_count(const hpl__store *s);

/* Stop accepting, remove the socket file, close every client (idempotent).
 * Free the module's context once the loop has ended. */
void hpl__clients_stop(hpl__store *s);
void hpl__clients_free(hpl__store *s);

#endif
