/*
 * trace.h - per-hop timestamps of the small-object path: where a get's or
 * a put's time goes between the client library, the stores and the
 * directory (bench/hops.py summarises them).
 *
 * Off unless $HOPLITE_TRACE names a file when a process first traces:
 * then every event appends one line "<ns> <pid> <event> <id>" to it with a
 * single write(2) (O_APPEND, so the lines of many processes do not mix).
 * <ns> is CLOCK_MONOTONIC, which every network namespace of one machine
 * shares, so the lines of clients, stores and the directory of an emulated
 * cluster line up. A diagnostic: the write is synchronous, so a traced
 * server pays a few microseconds per event.
 *
 * Callers: the client library's puts and gets (src/client/cput.c, cget.c,
 * cdirect.c), the servers' corked writes (src/server/uvconn_write.c,
 * uvconn_fd.c), store/put.c, puller.c (a copy's pull: queued, started,
 * answered, ended), dataport.c (a PULL arriving), directory/acquire.c and
 * locs.c.
 */
#ifndef HPL_TRACE_H
#define HPL_TRACE_H

/* Record `event` (a short word without spaces) for object `id` (NULL or ""
 * is written as "-"; an id is cut at 200 bytes and any space or control
 * byte in it becomes '_'). Thread-safe; does nothing when tracing is off, and
 * tracing that cannot open its file is off. Never fails. */
void hpl__trace(const char *event, const char *id);

#endif
