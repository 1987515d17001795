/*
 * objects.h - the directory's object table: sizes, inline bytes and location
 * lists, and the sender choice that turns concurrent gets into a pipelined
 * broadcast. Pure data structure code (no I/O), unit-tested on its own.
 *
 * A location is one node's copy of an object: complete or partial (still
 * streaming in, from `upstream`), and how many receivers it serves right now.
 */
#ifndef HPL_DIR_OBJECTS_H
#define HPL_DIR_OBJECTS_H

#include <stddef.h>
#include <stdint.h>
#include <uthash.h>

typedef struct dir_loc {
  struct dir_loc *next;
  uint64_t node;
  int complete;
  int origin;        /* the node the object was put on (partial while writing) */
  uint64_t upstream; /* node this copy pulls from, 0 if none */
  uint32_t serving;  /* receivers pulling from this copy now */
} dir_loc;

enum {
  OBJ_PENDING = 0, /* known only because someone waits for it */
  OBJ_READY = 1,   /* has an origin, a complete copy or inline bytes */
  OBJ_LOST = 2,    /* existed, but every copy that could finish is gone */
  OBJ_FAILED = 3,  /* a reduce that was to produce it failed (fail_status) */
};

typedef struct dir_obj {
  char *id;
  UT_hash_handle hh;
  int state;
  uint64_t size;
  int has_size;
  uint8_t *inl;   /* inline bytes (size bytes) when is_inline */
  int is_inline;
  dir_loc *locs;
  uint32_t nlocs;
  uint64_t ready_seq; /* order in which objects became complete (reduce) */
  void *waiters;      /* owned by the server (acquire.c) */
  void *watchers;     /* owned by the server (reduce.c): reduces waiting for readiness */
  int fail_status;    /* OBJ_FAILED: the error gets report */
  char *fail_detail;
  uint32_t gen;       /* generation of the bytes (bumped when a reduce target
                         restarts: partial copies of older generations are void) */
} dir_obj;

typedef struct dtab {
  dir_obj *objs;
  uint32_t max_senders; /* receivers one copy may serve at once */
  /* optional: may a copy on this node serve now? (draining nodes may not) */
  int (*usable)(uint64_t node, void *arg);
  void *usable_arg;
  uint64_t seq;
  uint64_t inline_bytes; /* total inline bytes held */
  uint64_t nobjs;
} dtab;

void dtab_init(dtab *t, uint32_t max_senders);
/* Free every object (waiters/watchers must already be gone). */
void dtab_clear(dtab *t);

dir_obj *dtab_find(dtab *t, const char *id);
/* Find or create an entry (PENDING). NULL on allocation failure. */
dir_obj *dtab_get(dtab *t, const char *id);
/* Remove and free an entry (its waiters must be handled by the caller). */
void dtab_remove(dtab *t, dir_obj *o);
/* Remove the entry if nothing refers to it any more (pending, no waiters). */
void dtab_gc(dtab *t, dir_obj *o);

dir_loc *dtab_loc(dir_obj *o, uint64_t node);

/* Record a copy at `node`. For an origin (a put) the id must be free:
 * HPL_EEXIST if the object is ready with another origin or complete copies,
 * HPL_EMISMATCH if a different size is already known. A LOST object is
 * revived by a new origin. Returns 0. */
int dtab_add_loc(dtab *t, dir_obj *o, uint64_t node, uint64_t size, int complete, int origin);

/* Store `len` bytes inline (object becomes READY). HPL_EEXIST if the object
 * already exists with other content. Takes ownership of `data` on success. */
int dtab_set_inline(dtab *t, dir_obj *o, uint8_t *data, uint64_t len);

/* Mark node's copy complete: frees its upstream's serving slot. Adds the
 * location if unknown (a copy completed across a directory restart).
 * Returns 1 if the object just became complete for the first time. */
int dtab_loc_complete(dtab *t, dir_obj *o, uint64_t node, uint64_t size);

/* Drop node's copy (and free its upstream's slot). Returns 1 if removed. */
int dtab_loc_remove(dtab *t, dir_obj *o, uint64_t node);

/* True if following upstream links from `from` reaches `target`. */
int dtab_depends_on(dir_obj *o, uint64_t from, uint64_t target);

/* True if the object can be read: inline, or a complete copy exists. */
int dtab_ready(const dir_obj *o);

/* The asker's copy stops pulling from its sender (the stream failed): the
 * sender's slot is free again. */
void dtab_release_upstream(dir_obj *o, uint64_t node);

/* Choose a sender for `asker`: a complete idle copy, else a partial idle one,
 * never the asker nor a copy that (transitively) pulls from it, and `avoid`
 * (a sender that just failed or crawled) only if nothing else could ever
 * serve. On success
 * marks the sender busy, records the asker as a partial location pulling from
 * it (re-pointing an existing one) and returns 0 with *sender set.
 * Returns 1 if the asker must wait (object pending, or every candidate busy),
 * HPL_ELOST if no copy that could finish remains. */
int dtab_pick_sender(dtab *t, dir_obj *o, uint64_t asker, uint64_t avoid, uint64_t *sender);
/* Whether a complete copy other than asker's and avoid's could serve now
 * (live, below the per-copy sender limit). */
int dtab_idle_complete(dtab *t, dir_obj *o, uint64_t asker, uint64_t avoid);

/* Record `asker` as a partial copy pulling from the copy `from` (which
 * serves one more receiver). Returns 0 or HPL_ENOMEM. */
int dtab_assign(dir_obj *o, uint64_t asker, dir_loc *from);

/* `node`'s copy of `o` if it could serve `asker` now: listed, below the
 * per-copy receiver limit, on a usable node, not the asker and not pulling
 * (transitively) from it. NULL otherwise. */
dir_loc *dtab_idle_sender(dtab *t, dir_obj *o, uint64_t node, uint64_t asker);

/* Re-evaluate the lost rule: an object with no inline bytes, no complete
 * copy and no origin copy is lost (if it ever existed). Updates o->state and
 * returns 1 if the object is lost. */
int dtab_check_lost(dtab *t, dir_obj *o);

/* A node died or left: drop all its copies. Copies that pulled from it keep
 * their bytes and lose their upstream. For each object touched, `fn` is
 * called (after the change) so the server can wake waiters. */
void dtab_node_gone(dtab *t, uint64_t node, void (*fn)(dir_obj *o, void *arg), void *arg);

#endif
