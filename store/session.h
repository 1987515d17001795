/*
 * session.h - one local client's session: the connection it came on, the
 * objects it holds (one reference per GET not yet released), its pending
 * GETs and puts (owned by get.c and put.c, listed here so its departure
 * costs only what it had), and a reference count so that requests still
 * waiting on the directory can answer (or find it gone) safely.
 *
 * Callers: clients.c (creates and closes sessions; the proxy of directory
 * requests), get.c, put.c, rdsink.c, ring.c (replies), lifetime.c (the
 * objects a client owns).
 */
#ifndef HPL_STORE_SESSION_H
#define HPL_STORE_SESSION_H

#include <stdint.h>
#include <sys/types.h>
#include <uthash.h>

#include "objects.h"
#include "proto.h"
#include "store.h"
#include "uvconn.h"

/* A held object: the client got it `count` times and has not released. */
typedef struct hpl__hold {
  uint64_t inst;
  int count;
  UT_hash_handle hh;
} hpl__hold;

typedef struct hpl__stclient {
  struct hpl__stclient *prev, *next; /* clients.c's list (utlist) */
  hpl__store *s;
  hpl__conn *c;
  uint64_t id;
  hpl__hold *holds;
  struct hpl__get_waiter *waiters; /* get.c */
  uint32_t nwaiters;
  struct hpl__put *puts;       /* put.c */
  struct hpl__lt_owned *owned; /* lifetime.c: instances it put with `owned` */
  int refs;
  int closed;
  int pid; /* the process that connected (SO_PEERCRED): puts copy its bytes from it */
  uid_t uid;       /* its user (SO_PEERCRED) */
  int uid_counted; /* counted among its user's clients (clientadm.c) */
  struct hpl__pcstage *stage; /* put.c: its last creation memfd, mapped (putcopy.h);
                                 dropped when it leaves */
  int chan; /* the chunk channel: our end of a SOCK_SEQPACKET pair whose other end
               went with the HELLO; the pool's chunk memfds go to the client on it
               (-1: none yet) */
  uint32_t *sent_gen; /* per pool chunk: the generation whose memfd the client got */
  uint32_t npending;  /* requests waiting elsewhere (hpl__creq): at
                         HPL__SESSION_MAX_PENDING the client is not read */
} hpl__stclient;

/* A client's requests waiting for the directory at most: at this many its
 * connection is held (nothing more is read from it) until half are
 * answered, so a client cannot make its store queue unbounded work (and
 * replies) however fast it sends. */
#define HPL__SESSION_MAX_PENDING 256u

/* A client's request waiting for an answer from elsewhere (the directory):
 * keeps the session alive; answering a closed session is a no-op. */
typedef struct hpl__creq {
  hpl__stclient *cl;
  uint64_t req;
  unsigned rtype; /* the reply type the client waits for (if the owner needs it) */
} hpl__creq;

/* New session on connection `c` (the connection's data is set by the
 * caller; chan -1 until the caller sets it, then owned by the session).
 * Returns NULL on no memory. The session is freed once closed and
 * unreferenced (or by hpl__session_unref before it was ever used). */
hpl__stclient *hpl__session_new(hpl__store *s, hpl__conn *c, uint64_t id);
/* The connection closed: release the holds and drop the creator's
 * reference (get.c and put.c must have let go of theirs first). */
void hpl__session_closed(hpl__stclient *cl);

void hpl__session_ref(hpl__stclient *cl);
void hpl__session_unref(hpl__stclient *cl);

/* Send a message / a Reply{status, detail} for request `req` (no-ops on a
 * closed session). */
void hpl__session_send(hpl__stclient *cl, unsigned type, uint64_t req, const ProtobufCMessage *m);
void hpl__session_reply(hpl__stclient *cl, uint64_t req, int status, const char *detail);

/* Before a reply naming pool bytes [off, off + size): send the client, on
 * its chunk channel, the memfds of the chunks they lie in that it has not
 * got at their current generation (one message, non-blocking), and write
 * the generation of every one of those chunks to gens[] (room for
 * HPL__POOL_MAX_CHUNKS), *ngens of them (0 for size 0). Returns 0, or
 * HPL_ESYS with a detail when the channel refuses the message (full: the
 * client does not read it; or closed). */
int hpl__session_chunks(hpl__stclient *cl, uint64_t off, uint64_t size, uint32_t *gens,
                        size_t *ngens, char *detail, size_t dlen);

/* Chunk k of the pool got a fresh memfd (a trim gave its pages back): a
 * client that maps the old one is sent the new one at once (non-blocking;
 * if its channel is full, its next GET in the chunk sends it), so it drops
 * the old pages at its next call into the library. */
void hpl__session_chunk_renewed(hpl__stclient *cl, size_t k);

/* Record that the client holds `o` once more (takes a reference).
 * Returns 0 or HPL_ENOMEM. */
int hpl__session_hold(hpl__stclient *cl, hpl__obj *o);
/* RELEASE: one hold of instance `inst` ends (unknown handles are ignored). */
void hpl__session_release(hpl__stclient *cl, uint64_t inst);

/* Requests waiting elsewhere: init takes a session reference, done
 * drops it; between the two the request counts in cl->npending. */
void hpl__session_creq_init(hpl__creq *x, hpl__stclient *cl, uint64_t req);
void hpl__session_creq_done(hpl__creq *x);

#endif
