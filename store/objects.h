/*
 * objects.h - the store's object table: every object this node holds or is
 * getting (by id), every instance (by handle, so a client's handle never
 * names a newer object of the same id), and the reduce streams it produces
 * (by key, not visible to clients). An object's bytes live in the pool.
 *
 * Life: store_obj_new puts an object in the table; store_obj_detach takes
 * it out (deleted, failed, abandoned); it is freed when it is out of the
 * table and its last reference is gone. Whoever keeps a pointer across an
 * event holds a reference.
 *
 * Two kinds of listeners, both with callbacks so this module calls nobody:
 *  - watchers (one-shot): told on every change of progress or state; a
 *    data-port sender waiting for more bytes of a partial copy;
 *  - waiters: told once, when the object is complete (status 0) or will
 *    not arrive (a negative code and a detail); a client's GET.
 *
 * Also owns the presence filter: a counter per hash slot of the ids in the
 * table, in a memfd that clients map read-only (see clients.c's HELLO).
 *
 * Callers: every module of the store.
 */
#ifndef HPL_STORE_OBJECTS_H
#define HPL_STORE_OBJECTS_H

#include <stddef.h>
#include <stdint.h>
#include <uthash.h>

#include "server.h"

enum {
  OBJ_FETCHING = 1, /* asked the directory where to get it; no buffer yet */
  OBJ_CREATING = 2, /* a local client is writing it */
  OBJ_PULLING = 3,  /* streaming in from a peer */
  OBJ_SEALED = 4,   /* complete */
  OBJ_REDUCING = 5, /* the target of a reduce produced at this node */
};

typedef struct st_obj st_obj;

/* One-shot: fn runs once at the next change, then the watcher is off the
 * list (register again from fn to keep watching). */
typedef struct st_watch {
  struct st_watch *next;
  void (*fn)(struct st_watch *w);
} st_watch;

/* Told once: done(w, 0, NULL) when the object is sealed, done(w, status,
 * detail) when it fails. The waiter is off the object's list when done()
 * runs; done() owns it from then on. */
typedef struct st_waiter {
  struct st_waiter *prev, *next; /* the object's list (utlist) */
  st_obj *obj;
  uint64_t deadline_ms; /* UINT64_MAX: none (used to size directory waits) */
  void (*done)(struct st_waiter *w, int status, const char *detail);
} st_waiter;

struct st_obj {
  char *id;
  UT_hash_handle hh;      /* store->objs by id (or store->internal), while in_table */
  uint64_t inst;          /* instance handle, unique within this store */
  UT_hash_handle hh_inst; /* store->insts by inst */
  uint64_t size;
  uint8_t *data;          /* in the pool; NULL until allocated */
  int state;              /* OBJ_* */
  uint64_t progress;      /* bytes [0, progress) are final */
  uint32_t gen;           /* generation of the bytes (see AcquireRep.gen) */
  int refs;               /* holds by clients + internal users */
  int in_table;
  int internal;           /* a reduce stream: in store->internal, not store->objs */
  int advertised;         /* the directory lists this node as a holder */
  int inline_obj;         /* small object: the directory serves it */
  uint64_t created_ms;
  st_waiter *waiters;
  st_watch *watchers;
  /* what is being done to it, each owned by its module (NULL: nothing) */
  struct st_fetch *fetch; /* fetch.c: being got from elsewhere */
  struct st_put *put;     /* put.c: being written by a local client */
  struct rd_sink *sink;   /* rdsink.c: the target of a reduce produced here */
};

/* Lookups: NULL when absent. */
st_obj *store_find(store *s, const char *id);
st_obj *store_find_inst(store *s, uint64_t inst);
st_obj *store_find_internal(store *s, const char *key);

/* New object in the table (refs 0, in_table 1, no buffer). NULL on no
 * memory. */
st_obj *store_obj_new(store *s, const char *id, int state);

/* A reduce stream (not visible to clients) of `size` bytes, buffer
 * allocated; NULL with a detail on failure. */
st_obj *store_obj_new_internal(store *s, const char *key, uint64_t size, char *detail,
                               size_t dlen);

/* Take it out of the table (deleted or failed); freed when refs drop to 0.
 * Watchers are told. Waiters must have been answered (store_obj_fail). */
void store_obj_detach(store *s, st_obj *o);

void store_obj_ref(st_obj *o);
void store_obj_unref(store *s, st_obj *o);

/* Allocate the object's buffer of `size` bytes (size 0 needs none).
 * Returns 0, or HPL_ENOMEM with a detail saying what the pool holds. */
int store_obj_alloc(store *s, st_obj *o, uint64_t size, char *detail, size_t dlen);

/* Bytes [0, progress) are now final: wake watchers (a no-op if not more
 * than before). */
void store_obj_progress(store *s, st_obj *o, uint64_t progress);

/* The object is complete: state OBJ_SEALED, every waiter and watcher told. */
void store_obj_sealed(store *s, st_obj *o);

/* Tell every waiter of `o` that it will not arrive: status and detail. */
void store_obj_fail(store *s, st_obj *o, int status, const char *detail);

/* Watchers (see st_watch). Watching twice is a no-op. */
void store_watch(st_obj *o, st_watch *w);
void store_unwatch(st_obj *o, st_watch *w);

/* Waiters (see st_waiter): add at the end of the object's list, or take
 * one off without telling it. */
void store_wait(st_obj *o, st_waiter *w);
void store_unwait(st_waiter *w);

/* Latest deadline among the object's waiters (UINT64_MAX: one waits
 * without limit, or nobody waits at all). */
uint64_t store_obj_deadline(const st_obj *o);

/* The presence filter's memfd and slot count for HELLO (-1 if none). */
int store_filter_fd(const store *s);
#define STORE_FILTER_SLOTS 65536

/* Create the presence filter (a failure only costs clients the direct path)
 * and release it. */
void store_objects_init(store *s);
void store_objects_free(store *s);

#endif
