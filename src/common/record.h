/*
 * record.h - recording what a connection receives, for fuzz corpora: with
 * $HPL_RECORD_DIR set, each connection's incoming bytes after the
 * handshake (its frames) go to a file of their own there, up to 256 KiB.
 * Off (and free) otherwise. scripts/fuzz-corpus.sh runs the test suite with
 * it and turns the files into seeds for tests/fuzz/.
 *
 * Callers: src/server/uvconn.c (servers), src/client/crpc.c (the client
 * library).
 */
#ifndef HPL_RECORD_H
#define HPL_RECORD_H

#include <stddef.h>

typedef struct hpl__record {
  int fd;        /* -1: not recording */
  size_t bytes;  /* written so far */
} hpl__record;

/* Start recording a connection named `label` (a file
 * DIR/LABEL-PID-SEQ), or set r->fd = -1 when recording is off. */
void hpl__record_open(hpl__record *r, const char *label);
/* Append n bytes (a no-op when off or past the cap). */
void hpl__record_add(hpl__record *r, const void *p, size_t n);
void hpl__record_close(hpl__record *r);

#endif
