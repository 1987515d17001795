/*
 * relay.h - an on-path TCP relay for tests: it listens on a loopback port
 * and, for every connection it accepts, opens one to a target port on
 * loopback and copies bytes both ways, on a thread of its own. What the
 * target (the server side) sends passes through a hook first, which may
 * change it in place: the tests' attacker without the cluster secret
 * (rewriting inline bytes, flipping a payload byte or a tag, recording
 * what crossed).
 *
 * Callers: test_sessions.c, test_encrypt.c, test_integrity_relay.c.
 */
#ifndef HPL_TESTS_RELAY_H
#define HPL_TESTS_RELAY_H

#include <stddef.h>
#include <stdint.h>

typedef struct th_relay th_relay;

/* Sees bytes buf[0, n) that connection `conn` (0, 1, ... in the order
 * they were accepted) carries from the target, `at` bytes into what that
 * connection carried from it so far; may change them. Runs on the relay's
 * thread. */
typedef void (*th_relay_fn)(void *arg, unsigned conn, uint64_t at, uint8_t *buf, size_t n);

/* Start a relay to loopback port `target` (fn may be NULL: bytes pass as
 * they are). Fails the test if it cannot listen. Owned by the caller:
 * th_relay_stop. At most 16 connections at once; more wait. */
th_relay *th_relay_start(int target, th_relay_fn fn, void *arg);

/* Change the target for connections accepted from now on (a store that
 * must advertise the relay's port is started after the relay). */
void th_relay_set_target(th_relay *r, int target);

/* The port it listens on. */
int th_relay_port(const th_relay *r);

/* Connections accepted so far. */
unsigned th_relay_conns(const th_relay *r);

/* Stop the thread, close every connection, free. */
void th_relay_stop(th_relay *r);

#endif
