/*
 * ha.h - standby directories under a leader lease in etcd (--etcd).
 *
 * Several hoplite-directory processes name the same etcd and prefix. Each
 * holds a lease of --lease-ms and lists itself under PREFIX/members/. The
 * one that creates PREFIX/leader (attached to its lease) leads: only then
 * does it listen, so stores given every directory's address reach the
 * leader and are refused by the others. Its *term* is the etcd revision
 * that created the key: every new leader's is larger, and stores refuse a
 * directory whose term is older than one they have registered with.
 *
 * The lease (--lease-ms, below a second too) is hoplite's own, kept in
 * etcd's linearizable store: every fifth of a lease the leader rewrites
 * PREFIX/leader, in a transaction that succeeds only if the key is still
 * as it last wrote it (etcd's mod revision), and renews an etcd lease the
 * key is attached to (of whole seconds, at least the lease: the keys
 * vanish when a leader dies). A standby reads the key every tenth of a
 * lease; one that has seen it unchanged for a whole lease, counted from
 * the answer that first showed that revision, deletes it in a transaction
 * that succeeds only if it is still unchanged, and campaigns.
 *
 * Fencing: the leader's loop checks, by a timer and before every request,
 * that its last confirmed rewrite was *sent* less than three quarters of
 * a lease ago. Any standby saw that revision after it was written, so it
 * cannot take the key before a whole lease after the send: the old leader
 * has stopped serving first. (Each request to etcd waits an eighth of a
 * lease at most, so a standby's answer is never older than that.) A
 * leader whose rewrite fails because the key changed has been deposed,
 * and fences at once. A leader that loses its lease re-executes itself
 * and stands by again (its sockets close with the exec).
 *
 * Nothing here runs an etcd call on the loop's thread: standing by happens
 * before the loop starts, renewals on the lease thread.
 */
#ifndef HPL_DIR_HA_H
#define HPL_DIR_HA_H

#include <stdint.h>
#include <uv.h>

typedef struct hpl__ha_cfg {
  const char *endpoints; /* --etcd: etcd's client URLs, comma-separated (NULL: no HA) */
  const char *prefix;    /* --ha-prefix: the keys' prefix (default /hoplite/default) */
  uint32_t lease_ms;     /* --lease-ms: the lease (default 3000, at least 300) */
  char advertise[280];   /* host:port stores reach this directory at (the leader key's value) */
} hpl__ha_cfg;

typedef struct hpl__ha hpl__ha;

/* What `hoplite status` and the metrics show (hpl__ha_info). */
#define HPL__HA_MAX_MEMBERS 8
typedef struct hpl__ha_info {
  uint64_t term;             /* this leader's */
  uint64_t renewals, renew_failures;
  uint64_t renew_last_us;    /* the last confirmed renewal's round trip */
  uint64_t renew_max_us;     /* the longest since leading */
  uint64_t lease_left_ms;    /* how long the lease is certainly ours */
  char endpoint[200];        /* the etcd endpoint that answered last */
  int nmembers;              /* directories listed (this one included) */
  char members[HPL__HA_MAX_MEMBERS][280];
} hpl__ha_info;

/* Stand by until this directory leads: grant an etcd lease, list this
 * directory under PREFIX/members/, and every tenth of a lease try to
 * create PREFIX/leader, deleting it first once it has stayed unchanged for
 * a lease (logging who leads meanwhile), until it succeeds.
 * Blocks: call it before the event loop runs. *out (the caller's, see
 * hpl__ha_resign) holds the lease; *term is this leader's term.
 * Errors: HPL_EINVAL (bad endpoints or settings), HPL_ENOMEM. etcd being
 * unreachable is not an error: it is retried, and logged once a lease. */
int hpl__ha_campaign(const hpl__ha_cfg *cfg, hpl__ha **out, uint64_t *term);

/* Keep the lease: start the lease thread and, on `loop`, a check every
 * twentieth of a lease that calls on_lost(arg) (on the loop) once the
 * lease is no longer certainly this directory's. on_lost must stop
 * serving at once (main.c re-executes the process). Errors: HPL_ESYS
 * (no thread). */
int hpl__ha_keep(hpl__ha *ha, uv_loop_t *loop, void (*on_lost)(void *arg), void *arg);

/* Whether the lease is still certainly this directory's (any thread;
 * cheap: an atomic load and the clock). The server asks before every
 * request, so a leader that resumes from a pause past its lease answers
 * nothing before it fences. */
int hpl__ha_certain(hpl__ha *ha);

/* Fence now (on the loop): on_lost as the periodic check would, once. */
void hpl__ha_fence(hpl__ha *ha);

/* A consistent snapshot of the lease's state (any thread). */
void hpl__ha_info_get(hpl__ha *ha, hpl__ha_info *out);

/* Stop checking (closes the loop's timer: call it before the loop's last
 * run), stop the thread, revoke the lease when `step_down` (the next
 * directory leads at once instead of after a lease), and free ha. NULL is
 * ignored. */
void hpl__ha_stop(hpl__ha *ha);
void hpl__ha_resign(hpl__ha *ha, int step_down);

#endif
