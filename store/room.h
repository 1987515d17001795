/*
 * room.h - making room in the pool. An object's buffer that does not fit
 * now is not an error: the request waits, bounded by its deadline, while
 * room is made and memory comes back:
 *  - idle secondary copies (got from elsewhere, sealed, referenced by
 *    nobody: no client holds them, nobody streams from them) are let go,
 *    least recently used first; the directory agrees to each first (EVICT)
 *    and forgets the location before it answers, so no receiver is sent to
 *    a copy that is going away, and it never lets the cluster's last
 *    complete copy go;
 *  - clients release holds, objects are deleted, streams end.
 * Waiting requests are served in arrival order (a large one is not passed
 * by smaller ones, so it cannot starve). A request fails with HPL_ENOMEM
 * at once only if it can never fit (larger than the pool), else when its
 * deadline passes, with a detail saying what holds the memory.
 *
 * Callers: put.c (a client's create or put), fetch.c (an incoming copy),
 * rdtask.c, rdsink.c and ring.c (reduce outputs and targets), get.c
 * (reading a spilled object back), server.c (init, stop).
 * Depends on objects.c (objlife.c: the idle list; it tells us, through the listener
 * registered here, when memory is freed, an object goes idle, or a
 * spilled object is wanted), dirlink.c and spill.c.
 */
#ifndef HPL_STORE_ROOM_H
#define HPL_STORE_ROOM_H

#include <stddef.h>
#include <stdint.h>

#include "objects.h"
#include "store.h"

typedef struct hpl__room hpl__room;

/* Told once whether the buffer was allocated (status 0: o->data is set)
 * or not (HPL_ENOMEM with a detail; HPL_ECANCELED when the store stops).
 * The request is off the queue when done() runs; done() owns it again. */
typedef void (*hpl__room_done_fn)(hpl__room *r, int status, const char *detail);

/* A request waiting for room, owned by the caller, who must keep it (and
 * a reference on `o`) until done() ran or hpl__room_cancel. */
struct hpl__room {
  struct hpl__room *prev, *next; /* the store's queue (utlist) */
  hpl__obj *o;
  uint64_t size;
  uint64_t deadline_ms; /* hpl__now_ms clock */
  uint64_t since_ms;
  hpl__room_done_fn done;
  void *arg;            /* for the caller */
  int queued;
};

/* Allocate o's buffer of `size` bytes (as hpl__obj_alloc). Returns 0 if
 * it was allocated now (done is not called); 1 if r waits in the queue
 * (done is called later, exactly once, unless cancelled); or HPL_ENOMEM
 * with a detail (size larger than the pool, or the deadline has passed).
 * deadline_ms is absolute (hpl__now_ms); UINT64_MAX means the store's
 * longest wait (cfg.room_wait_ms). */
int hpl__room_alloc(hpl__store *s, hpl__obj *o, uint64_t size, uint64_t deadline_ms, hpl__room *r,
                    hpl__room_done_fn done, void *arg, char *detail, size_t dlen);

/* Take a waiting request off the queue without telling it (a no-op if it
 * is not queued). */
void hpl__room_cancel(hpl__store *s, hpl__room *r);

/* A spilled object (HPL__OBJ_SPILLED) is wanted (a get, a pull): read it back
 * into a new buffer (waiting for room like any other), then it is sealed
 * again and its waiters told; on failure they hear why. A no-op if it is
 * already on its way back or spilling is off. */
void hpl__room_restore(hpl__store *s, hpl__obj *o);

/* o's copy here failed its digest at unit `unit` when read back from its
 * spill file (restored here, or streamed by dpfile.c: server.c installs
 * this as the data port's corrupt handler): counted (corrupt_units,
 * spill_corrupt), the directory told as for a corrupt copy, its streams
 * cut, and the copy dropped (file and buffer go with o); its waiters wait
 * for a fetch from another copy (hpl__room_on_refetch), or fail with
 * HPL_ECORRUPT naming this node. A no-op if o is out of the table. */
void hpl__room_corrupt(hpl__store *s, hpl__obj *o, uint64_t unit);

/* What holds the pool, for errors: "pool 64 MiB: 60 MiB pinned ..." */
void hpl__room_describe(hpl__store *s, char *buf, size_t len);

/* While requests wait, each run of the queue first calls shed(s) (may be
 * NULL): a module above this one that holds memory it could let go
 * (rdtask.c's orphaned tasks) does so. */
void hpl__room_on_shed(hpl__store *s, void (*shed)(hpl__store *s));

/* hpl__room_corrupt moves the waiters of a dropped copy to a new object of
 * the same id (HPL__OBJ_FETCHING) and calls refetch(s, o) on it (server.c
 * installs fetch.c's hpl__fetch_start), so a get goes to another copy;
 * without it (NULL) they fail with HPL_ECORRUPT. */
void hpl__room_on_refetch(hpl__store *s, void (*refetch)(hpl__store *s, hpl__obj *o));

/* Set up (before anything is allocated: the module's context, the spill
 * directory, the objects' listener) and stop: every waiting request is
 * told HPL_ECANCELED; answers to EVICT still due are ignored. Free the
 * context once the loop has ended. */
int hpl__room_init(hpl__store *s);
void hpl__room_stop(hpl__store *s);
void hpl__room_free(hpl__store *s);

#endif
