/*
 * cdial.h - opening a client library connection to the directory over
 * TCP: the address, connect() bounded by a deadline, the handshake
 * (auth.h) claiming a role with its key, and the RPC handle (crpc.h) that
 * tags every frame with the session's keys. One way for both paths that
 * talk to the directory themselves: direct reads (cdirect.c, role READER)
 * and admin handles (cadmin.c, role ADMIN).
 *
 * The client RPC layer tags frames but never seals them, so a directory
 * that seals its connections (--encrypt) cannot be reached this way: the
 * dial says so (HPL_EUNAVAIL) rather than sending anything after the
 * handshake.
 *
 * Callers: cdirect.c, cadmin.c.
 */
#ifndef HPL_CDIAL_H
#define HPL_CDIAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "crpc.h"

/* Where to dial: an address and its length. */
typedef struct hpl__cdial_addr {
  struct sockaddr_storage sa;
  socklen_t len;
} hpl__cdial_addr;

/* A numeric address (IPv4 or IPv6, no brackets) and a port into *out.
 * 0, or -1 if `addr` is not a numeric address. Pure. */
int hpl__cdial_numeric(const char *addr, int port, hpl__cdial_addr *out);

/* "HOST:PORT" ("[V6]:PORT" for an IPv6 address; HOST may be a name,
 * resolved with getaddrinfo, which may block on DNS) into *out: the first
 * address it resolves to. 0, or HPL_EINVAL with a detail in why[wlen]
 * (no port, a port out of range, a name that does not resolve). */
int hpl__cdial_resolve(const char *hostport, hpl__cdial_addr *out, char *why, size_t wlen);

/* What the connection claims in the handshake. */
typedef struct hpl__cdial_as {
  int role;           /* HPL__ROLE_READER, HPL__ROLE_ADMIN (auth.h) */
  const char *name;   /* the node a READER speaks for; NULL for ADMIN */
  const uint8_t *key; /* the role's key (32 bytes, auth.h); NULL: the
                         cluster has no secret, no handshake */
} hpl__cdial_as;

/* Connect to `addr` before `deadline` (hpl__now_ms() scale, UINT64_MAX:
 * none), do the handshake `as` says, and wrap the socket in an RPC handle
 * with options `o` (its keys are set here from the session). On success
 * (0) *out is owned by the caller (hpl__crpc_free). Errors, *out
 * untouched, a detail in why[wlen] (why may be NULL):
 *   HPL_ECONN      the connection was refused, or closed during the
 *                  handshake (no hoplite directory with a secret there,
 *                  or one that does not take this role);
 *   HPL_ETIMEDOUT  the deadline passed first;
 *   HPL_EAUTH      the directory's challenge fails its MAC: it holds
 *                  another cluster secret (or this key is not its role's);
 *   HPL_EUNAVAIL   the directory seals its connections (--encrypt), which
 *                  this connection cannot do;
 *   HPL_ESYS       no socket;
 *   HPL_ENOMEM. */
int hpl__cdial(const hpl__cdial_addr *addr, const hpl__cdial_as *as, const hpl__crpc_opts *o,
               uint64_t deadline, hpl__crpc **out, char *why, size_t wlen);

#endif
