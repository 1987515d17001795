/*
 * dconns.h - data connections to other stores' data ports: opened with a
 * bounded receive buffer for copies (cfg.pull_window), and kept idle
 * between pulls: a pull that ended whole leaves its connection here
 * (authenticated, between frames), and the next pull from the same sender
 * takes it instead of connecting and doing the handshake again.
 *
 * The receive window. Copies from several senders converge on a node's
 * link; left to the kernel, each connection's window grows to megabytes,
 * and the switch port in front of the node fills to its limit. Every
 * control message to this node (a PULL other nodes send for its own
 * copies, the directory's answers) and the first bytes of each new copy
 * then wait behind that queue. With the window bounded to about
 * 1.25 ms of the link, each copy keeps at most that much in flight, the
 * queue stays short, and a single copy still fills the link where the
 * round trip is shorter than that (8 emulated hosts' shuffle at
 * 200 Mbit/s: 1 MiB partitions 0.38-0.41 -> 0.35-0.38 s; docs/design.md,
 * "The receive window of copies"). Where the link is faster than the path
 * between the processes (loopback) a bound only slows copies down, so it
 * applies only when the link rate is known (--link-rate) or set
 * (--pull-window). Reduce and ring streams keep the kernel's sizing: a
 * paced allreduce was 7 % slower with the bound.
 *
 * Bounded: at most HPL__DCONNS_PER_PEER idle connections per sender and
 * HPL__DCONNS_MAX in all (the least recently parked goes first), each for
 * cfg.data_idle_ms at most (one timer for all of them). An idle connection
 * the sender closes, or on which any frame arrives, is closed and
 * forgotten. The sender may still close one just as it is taken: the
 * taker must be ready for that (puller.c pulls again once on a new one).
 *
 * A connection is keyed by the sender's address and port only: every data
 * connection of a store is opened with the same credentials (cfg.auth,
 * role DATA), so any of them may carry any of its pulls.
 *
 * Callers: puller.c (open, park, take; init, close_all and free from its
 * own), server.c (window), stmetrics.c (the gauge).
 */
#ifndef HPL_STORE_DCONNS_H
#define HPL_STORE_DCONNS_H

#include <netinet/in.h>
#include <stdint.h>

#include "store.h"
#include "uvconn.h"

#define HPL__DCONNS_PER_PEER 2
#define HPL__DCONNS_MAX 64

/* The receive buffer for copies' connections (cfg.pull_window, at the
 * store's start): `asked` (--pull-window) if given, else, on a link of
 * `link_rate` bits/s, 1.25 ms of it and at least 32 KiB, and 0 (the
 * kernel sizes it) if the rate is not known (0). A buffer above what the
 * kernel lets a process set (net.core.rmem_max) is logged and 0 too: the
 * kernel would cap it there, and a set buffer is never grown again,
 * where its own sizing would have gone further. Reads that limit from
 * /proc once (at start, off the loop). */
uint64_t hpl__dconns_window(uint64_t asked, uint64_t link_rate);

/* Initialize `t` for a connection to another store's data port, its socket
 * made now so that a `window` (bytes; 0: the kernel's sizing) can be its
 * receive buffer before it connects (the window scale is agreed in the
 * handshake). Counted in data_conns_windowed; a buffer the kernel refuses
 * is logged once and the connection goes on unbounded.
 * Returns 0, or a libuv error (the handle is then not initialized). */
int hpl__dconns_open(hpl__store *s, uv_tcp_t *t, uint64_t window);

/* Make the module's context: 0 or HPL_ENOMEM. */
int hpl__dconns_init(hpl__store *s);

/* Keep c, an open data connection to `sa` whose last stream ended whole,
 * for a later pull. Takes c: it is rebound to this module (its frames and
 * close are ours from now on) and closed at once if it is not between
 * frames (hpl__conn_between_frames), the store is stopping, reuse is off
 * (cfg.data_idle_ms 0), or the cache is not up. Returns 1 if c was kept,
 * 0 if it is being closed (the caller's on_close is not called either
 * way). */
int hpl__dconns_park(hpl__store *s, const struct sockaddr_in *sa, hpl__conn *c);

/* The most recently parked idle connection to `sa` that is still open,
 * taken out of the cache (its callbacks are still this module's: the
 * caller rebinds it, hpl__conn_rebind, before it returns to the loop), or
 * NULL if there is none. */
hpl__conn *hpl__dconns_take(hpl__store *s, const struct sockaddr_in *sa);

/* Idle connections kept now (the data_conns_idle gauge). */
unsigned hpl__dconns_idle(const hpl__store *s);

/* Close every idle connection and the timer (store stopping; nothing is
 * kept after); free the context once the loop has ended. */
void hpl__dconns_close_all(hpl__store *s);
void hpl__dconns_free(hpl__store *s);

#endif
