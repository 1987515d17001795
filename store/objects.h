/*
 * objects.h - the store's object table: every object this node holds or is
 * getting (by id), every instance (by handle, so a client's handle never
 * names a newer object of the same id), and the reduce streams it produces
 * (by key, not visible to clients). An object's bytes live in the pool.
 *
 * Life: hpl__obj_new puts an object in the table; hpl__obj_detach takes
 * it out (deleted, failed, abandoned); it is freed when it is out of the
 * table and its last reference is gone. Whoever keeps a pointer across an
 * event holds a reference. Its handle finds it (hpl__obj_find_inst) until it
 * is freed, never after: handles are never reused.
 *
 * Listeners, all with callbacks, so this module calls nobody above it:
 *  - watchers (one-shot): told on every change of progress or state; a
 *    data-port sender waiting for more bytes of a partial copy;
 *  - waiters: told once, when the object is complete (status 0) or will
 *    not arrive (a negative code and a detail); a client's GET;
 *  - the one who makes room in the pool (hpl__objects_listen): told when
 *    memory is freed, an object goes idle, a spilled object is wanted;
 *  - a stream's source (hpl__source): how the data port serves a stream
 *    object whose maker is above it (a ring's pieces, a reduce task's
 *    resume point).
 *
 * Also owns the presence filter: a counter per hash slot of the ids in the
 * table, in a memfd that clients map read-only (see clients.c's HELLO).
 *
 * Cost. A record is one allocation with the id inside it (about 110 bytes
 * for a 10-character id). The indexes (by id, by handle, reduce streams by
 * key) are open-addressing tables of record pointers with a tag byte per
 * slot, between 3/8 and 3/4 full (about 20-40 bytes per object for the two
 * indexes). They grow and shrink incrementally: a new array is filled from
 * the old one at most a few hundred slots per table operation while
 * lookups consult both, so no operation rehashes a whole table. Walks
 * (store_walk_*) follow a list of the objects in the order they were
 * added, and may pause across events. Nothing here costs time in
 * proportion to the number of objects, except hpl__objects_free.
 *
 * Callers: every module of the store.
 */
#ifndef HPL_STORE_OBJECTS_H
#define HPL_STORE_OBJECTS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

enum {
  HPL__OBJ_FETCHING = 1, /* asked the directory where to get it; no buffer yet */
  HPL__OBJ_CREATING = 2, /* a local client is writing it */
  HPL__OBJ_PULLING = 3,  /* streaming in from a peer */
  HPL__OBJ_SEALED = 4,   /* complete */
  HPL__OBJ_REDUCING = 5, /* the target of a reduce produced at this node */
  HPL__OBJ_SPILLED = 6,  /* complete, but its bytes are only in a spill file (data NULL):
                            a get or a pull restores it first (room.c) */
};

typedef struct hpl__obj hpl__obj;

/* One-shot: fn runs once at the next change, then the watcher is off the
 * list (register again from fn to keep watching). */
typedef struct hpl__watch {
  struct hpl__watch *next;
  void (*fn)(struct hpl__watch *w);
} hpl__watch;

/* Told once: done(w, 0, NULL) when the object is sealed, done(w, status,
 * detail) when it fails. The waiter is off the object's list when done()
 * runs; done() owns it from then on. */
typedef struct hpl__waiter {
  struct hpl__waiter *prev, *next; /* the object's list (utlist) */
  hpl__obj *obj;
  uint64_t deadline_ms; /* UINT64_MAX: none (used to size directory waits) */
  void (*done)(struct hpl__waiter *w, int status, const char *detail);
} hpl__waiter;

struct hpl__obj {
  hpl__obj *prev, *next;    /* the objects in the order added (walks; utlist); only
                               while in the table and not internal (objects.c) */
  hpl__obj *lru_prev, *lru_next; /* the idle list (objlife.c, utlist; see
                                    hpl__obj_idle_oldest) */
  uint64_t inst;          /* instance handle, unique within this store, never 0 */
  uint64_t size;
  uint64_t progress;      /* bytes [0, progress) are final */
  uint64_t sealed_ms;     /* when it was first complete here (0: not yet; HeldObject.held_ms) */
  uint8_t *data;          /* in the pool; NULL until allocated */
  hpl__waiter *waiters;
  hpl__watch *watchers;
  const struct hpl__source *source; /* internal: how its stream is served (NULL: from
                                       data; see hpl__source) */
  /* what is being done to it, each owned by its module (NULL: nothing) */
  struct hpl__fetch *fetch;  /* fetch.c: being got from elsewhere */
  struct hpl__put *put;      /* put.c: being written by a local client */
  struct hpl__rd_sink *sink; /* rdsink.c: the target of a reduce produced here */
  struct hpl__objdig *dig;   /* objdig.c: its digests (NULL: none); freed with it */
  uint32_t gen;              /* generation of the bytes (see AcquireRep.gen) */
  uint32_t refs;             /* holds by clients + internal users */
  uint8_t state;             /* OBJ_* */
  uint8_t in_table : 1;      /* in the id table (or the reduce streams' table) */
  uint8_t internal : 1;      /* a reduce stream: by key, not visible to clients */
  uint8_t advertised : 1;    /* the directory lists this node as a holder */
  uint8_t unlisted : 1;      /* ... but names it to nobody: another node found it sending
                                corrupt units (UpstreamNote.unlisted); re-reported so */
  uint8_t inline_obj : 1;    /* small object: the directory serves it */
  uint8_t primary : 1;       /* put here (or a reduce target made here), not a copy got
                                from elsewhere: never evicted, only spilled */
  uint8_t on_idle : 1;    /* on the idle list (objlife.c) */
  uint8_t evicting : 1;   /* room.c asked the directory to let this copy go */
  uint8_t on_disk : 1;    /* a spill file holds its bytes (hpl__obj_file) */
  uint8_t moving : 1;     /* room.c: being written to or read from its spill file */
  uint32_t keep_until;    /* room.c: the directory refused to let it go (the last
                             copy); not asked again before this (seconds, store clock) */
  uint16_t id_room;       /* id[] holds up to this many characters */
  char id[];              /* NUL-terminated, at most 255 bytes (its key if internal) */
};

/* The source of a stream object (internal), installed in o->source by the
 * module that makes the stream and kept valid while o may be served (set
 * o->source to another source, or NULL, before it goes). The data port
 * serves o through it and so needs to know nothing of its maker:
 *  - bytes_at: bytes of o from `pos`: a pointer, and in *n how many of the
 *    wanted *n bytes lie there contiguously (o's bytes may be pieces of
 *    other buffers); NULL when the stream is gone (its pulls end). NULL:
 *    the bytes are o->data + pos.
 *  - pulled: a pull of o from byte `offset` arrived; called before it is
 *    served (the maker may make its bytes again from there, ending the
 *    other pulls of o). May be NULL.
 *  - keep: the objects whose buffers bytes_at points into (NULL: none): a
 *    digest job (rddig.c) that reads o's bytes off the loop holds a
 *    reference on each until it is done, so they outlive the stream's
 *    maker if need be. */
typedef struct hpl__source {
  const uint8_t *(*bytes_at)(const struct hpl__source *src, hpl__obj *o, uint64_t pos, uint64_t *n);
  void (*pulled)(const struct hpl__source *src, hpl__obj *o, uint64_t offset);
  hpl__obj *keep[2];
} hpl__source;

/* Lookups: NULL when absent. hpl__obj_find finds objects in the table,
 * hpl__obj_find_internal reduce streams in the table, hpl__obj_find_inst any
 * object (also detached, or a reduce stream) until it is freed. Each also
 * moves a few slots of a table being resized, so the store is not const. */
hpl__obj *hpl__obj_find(hpl__store *s, const char *id);
hpl__obj *hpl__obj_find_inst(hpl__store *s, uint64_t inst);
hpl__obj *hpl__obj_find_internal(hpl__store *s, const char *key);

/* The directory no longer names this node's copy of `id` (another node
 * found it sending corrupt units): remembered on the object (o->unlisted)
 * so that a HELD re-report after a directory restart says so. Nothing if
 * the object is not here. No errors. */
void hpl__obj_unlisted(hpl__store *s, const char *id);

/* New object in the table (refs 0, in_table 1, no buffer); no object of
 * that id may be in it. NULL on no memory (nothing changed). */
hpl__obj *hpl__obj_new(hpl__store *s, const char *id, int state);

/* A reduce stream (not visible to clients) of `size` bytes, buffer
 * allocated; no stream of that key may be in the table. NULL with a detail
 * on failure (nothing changed). */
hpl__obj *hpl__obj_new_internal(hpl__store *s, const char *key, uint64_t size, char *detail,
                                size_t dlen);

/* The same in two steps, for a buffer that has to wait for room:
 * hpl__obj_prep_internal makes the stream object (refs 0, NOT in the
 * table, no buffer; NULL on no memory), whose buffer the caller then
 * allocates (hpl__obj_alloc or hpl__room_alloc); hpl__obj_publish_internal
 * puts it in the table once it has its buffer: 0, or -1 (nothing changed:
 * no buffer, a stream of that key exists, or no memory). A prepared object
 * never published is freed by the last hpl__obj_unref (or free() if it
 * was never referenced and has no buffer). */
hpl__obj *hpl__obj_prep_internal(hpl__store *s, const char *key);
int hpl__obj_publish_internal(hpl__store *s, hpl__obj *o);

/* Reduce stream `o` (in the table) takes key `key`, for a new generation
 * of its slot: its buffer (whose pages the old generation has touched)
 * stays. The key may be up to HPL__STORE_KEY_SLACK characters longer than the
 * one the stream was made with (a generation has at most 10 digits). 0, or
 * -1 (nothing changed) when it does not fit or there is no memory. */
#define HPL__STORE_KEY_SLACK 10
int hpl__obj_rekey_internal(hpl__store *s, hpl__obj *o, const char *key);

/* Take it out of the table (deleted or failed); freed when refs drop to 0
 * (at once if they are 0: `o` must not be used after, unless the caller
 * holds a reference). Walks that were to return it next move past it.
 * Watchers are told. Waiters must have been answered (hpl__obj_fail). A
 * no-op if it is out already. */
void hpl__obj_detach(hpl__store *s, hpl__obj *o);

void hpl__obj_ref(hpl__store *s, hpl__obj *o);
void hpl__obj_unref(hpl__store *s, hpl__obj *o);

/* Allocate the object's buffer of `size` bytes (size 0 needs none).
 * Returns 0, or HPL_ENOMEM with a detail saying what the pool holds. */
int hpl__obj_alloc(hpl__store *s, hpl__obj *o, uint64_t size, char *detail, size_t dlen);

/* Bytes [0, progress) are now final: wake watchers (a no-op if not more
 * than before). */
void hpl__obj_progress(hpl__store *s, hpl__obj *o, uint64_t progress);

/* Wake the watchers without a change of progress: something they look at
 * besides it grew (rddig.c: more of a stream's digests are made). */
void hpl__obj_notify(hpl__obj *o);

/* The object is complete: state HPL__OBJ_SEALED, every waiter and watcher told. */
void hpl__obj_sealed(hpl__store *s, hpl__obj *o);

/* Tell every waiter of `o` that it will not arrive: status and detail. */
void hpl__obj_fail(hpl__store *s, hpl__obj *o, int status, const char *detail);

/* Watchers (see hpl__watch). Watching twice is a no-op. */
void hpl__obj_watch(hpl__obj *o, hpl__watch *w);
void hpl__obj_unwatch(hpl__obj *o, hpl__watch *w);

/* Waiters (see hpl__waiter): add at the end of the object's list, or take
 * one off without telling it. */
void hpl__obj_wait(hpl__obj *o, hpl__waiter *w);
void hpl__obj_unwait(hpl__waiter *w);

/* Latest deadline among the object's waiters (UINT64_MAX: one waits
 * without limit, or nobody waits at all). */
uint64_t hpl__obj_deadline(const hpl__obj *o);

/* The idle list: sealed objects in the table (not reduce streams) that
 * nobody references, least recently used first. An object joins at the
 * newest end when it is sealed unreferenced or its last reference goes,
 * and leaves when it is referenced again or detached. Whoever makes room
 * (room.c) picks copies to let go from here. hpl__obj_idle_bytes is the sum
 * of their sizes; a store's pinned bytes are its pool allocations less
 * these. */
hpl__obj *hpl__obj_idle_oldest(hpl__store *s);
hpl__obj *hpl__obj_idle_newer(const hpl__obj *o);
uint64_t hpl__obj_idle_bytes(const hpl__store *s);

/* Spill files. hpl__obj_set_file records that spill file `file` (of
 * s->spill) holds o's bytes (on_disk; HPL_ENOMEM if it cannot be
 * recorded); the file is removed when o is freed. hpl__obj_file gives it
 * (0: none). hpl__obj_drop_buffer frees o's pool buffer once its bytes
 * are on disk: o becomes HPL__OBJ_SPILLED, off the idle list. */
int hpl__obj_set_file(hpl__store *s, hpl__obj *o, uint64_t file);
uint64_t hpl__obj_file(hpl__store *s, const hpl__obj *o);
void hpl__obj_drop_buffer(hpl__store *s, hpl__obj *o);

/* How many objects the table holds (not counting reduce streams). */
size_t hpl__obj_count(const hpl__store *s);

/* The indexes' footprint, for tests and diagnostics: slots of the arrays
 * in use (those being drained included) and their bytes, over all three
 * indexes. Either pointer may be NULL. */
void hpl__obj_index_size(const hpl__store *s, size_t *slots, size_t *bytes);

/* A walk over every object in the table (not the reduce streams), oldest
 * first, which may pause across events (a registration sent in slices).
 * It returns each object that is in the table when it is reached exactly
 * once: objects added during the walk are returned too (after the others),
 * objects detached before they are reached are not. Anything may happen to
 * the object last returned (detached, freed) before the next call. The
 * caller owns the hpl__walk; once begun, it is linked into the store until
 * it has returned NULL or is ended, and must stay at the same address
 * until then (and end before hpl__objects_free, which forgets open walks
 * without touching them). */
typedef struct hpl__walk {
  struct hpl__walk *prev, *next; /* the store's open walks (objects.c) */
  hpl__obj *at;                  /* the object to return next (NULL: the end) */
  int open;
} hpl__walk;

/* Begin a walk (w's previous contents are ignored: end an open walk
 * first). Cannot fail. */
void hpl__obj_walk_begin(hpl__store *s, hpl__walk *w);
/* The next object, or NULL when every one was returned: the walk is then
 * ended. A walk that is not open returns NULL. */
hpl__obj *hpl__obj_walk_next(hpl__store *s, hpl__walk *w);
/* End a walk before its end (a no-op if it is not open). */
void hpl__obj_walk_end(hpl__store *s, hpl__walk *w);

/* The presence filter's memfd and slot count for HELLO (-1 if none). */
int hpl__obj_filter_fd(const hpl__store *s);
#define HPL__STORE_FILTER_SLOTS 65536

/* Who makes room in the pool (room.c) is told, through the functions it
 * registers here once at its start: changed(s) when pool memory was freed
 * or an object went idle (see hpl__obj_idle_oldest; called deep inside frees:
 * act later, on the loop), wanted(s, o) when the bytes of a spilled object
 * (HPL__OBJ_SPILLED) are wanted (hpl__obj_want). Either may be NULL. */
void hpl__objects_listen(hpl__store *s, void (*changed)(hpl__store *s),
                         void (*wanted)(hpl__store *s, hpl__obj *o));

/* A spilled object's bytes are wanted (a pull of it waits): the listener
 * reads them back. A no-op unless o is HPL__OBJ_SPILLED and someone listens. */
void hpl__obj_want(hpl__store *s, hpl__obj *o);

/* Make the module's context (s->objects: the tables, empty) and the
 * presence filter (a failure only costs clients the direct path): 0 or
 * HPL_ENOMEM. Stop: close the pool-trim timer and forget the listener
 * (hpl__store_stop). Release everything: every object in the table is detached
 * (and freed if unreferenced), the tables go; an object still referenced
 * after that is freed by its last unref without touching them. */
int hpl__objects_init(hpl__store *s);
void hpl__objects_stop(hpl__store *s);
void hpl__objects_free(hpl__store *s);

#endif
