/*
 * objects.h - the directory's object table: sizes, inline bytes and location
 * lists, and the sender choice that turns concurrent gets into a pipelined
 * broadcast. Pure data structure code (no I/O), unit-tested on its own:
 * what it needs to know of nodes it asks through the filters installed in
 * dtab (usable, suspected, crawling), and it tells of a changed object
 * through the subscribers of hpl__dtab_on_change. objtab.c holds the storage
 * (records, the id hash, the ordered index, the per-node index), objects.c
 * the locations and sender choice.
 *
 * A location is one node's copy of an object: complete or partial (still
 * streaming in, from `upstream`), and how many receivers it serves right now.
 *
 * Callers: every module of directory/ (the table is hpl__dir_server.tab);
 * tests/test_dirtable.c.
 */
#ifndef HPL_DIR_OBJECTS_H
#define HPL_DIR_OBJECTS_H

#include <stddef.h>
#include <stdint.h>

/* What a location of a large object (HPL__DTAB_LOC_INDEX_MIN copies) also
 * keeps, for the object's indexes (objtab_ix.c) and its pick (objects.c): the
 * next location in its bucket of the object's node hash, its place in the
 * list (creation order), and its chain's summary, valid while pgen == the
 * object's cgen and psusp == the table's suspect_gen: the node named at
 * the chain's end that holds no location (0: none), and whether no node on
 * the chain (this one, its upstreams, that end) is suspected. */
typedef struct hpl__dir_locx {
  struct hpl__dir_loc *hn;
  uint64_t pend;
  uint32_t seq;
  uint32_t pgen, psusp;
  uint8_t pclean;
} hpl__dir_locx;

typedef struct hpl__dir_loc {
  struct hpl__dir_loc *next;
  struct hpl__dir_loc *prev; /* utlist DL: the first's is the last (O(1) append) */
  uint64_t node;
  uint64_t upstream; /* node this copy pulls from, 0 if none */
  uint64_t made_ms;  /* re-reported (HeldObject.held_ms): when it was complete there, on
                        our clock; 0: made while this directory ran (locs.c) */
  uint32_t serving;  /* receivers pulling from this copy now */
  uint32_t nidx;     /* its object's place in the node's index (objtab_ix.c) */
  uint8_t complete;
  uint8_t origin;    /* the node the object was put on (partial while writing) */
  uint8_t granted;   /* upstream was named in a GRANT its store has not answered
                        with an ACQUIRE yet (acquire.c: peek_grant) */
  uint8_t unlisted;  /* another node found it sending bytes that fail their digests
                        (hpl__dtab_loc_unlist): never named as a sender nor counted
                        as a copy, but kept so that a delete reaches its node */
  uint32_t ipos;     /* its place + 1 in its object's idle index (0: not in it) */
  hpl__dir_locx *x;  /* a large object's (NULL below HPL__DTAB_LOC_INDEX_MIN copies) */
} hpl__dir_loc;

/* A large object's indexes (objtab_ix.c; built from HPL__DTAB_LOC_INDEX_MIN
 * copies, dropped when it has none or without memory): its locations by
 * node (lh, chained through hpl__dir_locx.hn), and the idle index, a heap of
 * locations ordered complete first, then by seq, holding every location
 * serving fewer than idle_max receivers (and maybe some serving more,
 * dropped when found; idle_max 0: not built yet). */
typedef struct hpl__dir_objix {
  hpl__dir_loc **lh;
  uint32_t lh_mask;
  uint32_t cgen;     /* bumped when an upstream link changes (chain summaries) */
  uint32_t loc_seq;  /* the next location's seq */
  uint32_t ndangle;  /* copies said to pull from a node holding no location of
                        the object (hpl__dtab_loc_partial; objects.c counts) */
  hpl__dir_loc **idle;
  uint32_t nidle, idle_cap, idle_max;
} hpl__dir_objix;

enum {
  HPL__OBJ_PENDING = 0, /* known only because someone waits for it */
  HPL__OBJ_READY = 1,   /* has an origin, a complete copy or inline bytes */
  HPL__OBJ_LOST = 2,    /* existed, but every copy that could finish is gone */
  HPL__OBJ_FAILED = 3,  /* a reduce that was to produce it failed (fail_status) */
};

/* An object's digests (digests.c fills them; the record owns the one flat
 * allocation, freed with it). `pending`: the origin still writes it; the
 * digests of units [0, known) are in, the root is not. */
typedef struct hpl__dir_dig {
  uint32_t algo;      /* HPL__DIGEST_SHA256 or _FAST (digest.h) */
  uint8_t pending;
  uint64_t nunits;
  uint64_t known;
  uint64_t bad_node;  /* the last node reported sending a corrupt unit of it (0: none) */
  uint64_t bad_unit;  /* ... and that unit */
  uint8_t reported;   /* taken from a store's re-report (HELD), not the origin's put */
  uint8_t conflict;   /* re-reports disagreed: no sender is named (digests.c) */
  uint64_t from_node; /* reported: the store whose digests these are */
  uint64_t conflict_node; /* conflict: the store that disagreed */
  uint8_t root[32];
  uint8_t list[];     /* nunits * 32 */
} hpl__dir_dig;

/* An object's record: one allocation holding, in this order, its links in
 * the ordered index (levels of them, before the record), the record, and
 * its id. The first location lives in the record itself, so an object with
 * one copy costs no other allocation (inline bytes aside). */
typedef struct hpl__dir_obj {
  struct hpl__dir_obj *hnext; /* the id hash's chain */
  uint64_t size;
  uint64_t ready_seq; /* order in which objects became complete (reduce) */
  hpl__dir_loc *locs;
  uint8_t *inl;       /* inline bytes (size bytes) when is_inline */
  void *waiters;      /* owned by the server (acquire.c) */
  void *watchers;     /* owned by the server (reduce.c): reduces waiting for readiness */
  char *fail_detail;  /* HPL__OBJ_FAILED: why */
  hpl__dir_dig *dig;  /* its digests (NULL: none; digests.c) */
  uint64_t maker;     /* the node that made it: put it, published it, or made it as a
                         reduce target there; it may delete it (admin.c); 0: unknown */
  uint64_t publisher; /* inline bytes a client PUBLISHed that its store (this node)
                         has not confirmed with its INLINE_PUT yet; 0: none (locs.c) */
  uint32_t hash;      /* of the id */
  uint32_t gen;       /* generation of the bytes (bumped when a reduce target
                         restarts: partial copies of older generations are void) */
  uint32_t nlocs;
  int32_t fail_status; /* HPL__OBJ_FAILED: the error gets report */
  uint8_t state;
  uint8_t has_size;
  uint8_t is_inline;
  uint8_t dig_none;   /* no digests by its maker's word (digests.c) */
  uint8_t levels;     /* links in the ordered index */
  uint8_t loc0_used;
  hpl__dir_objix *ix;  /* a large object's indexes (NULL: none) */
  hpl__dir_loc loc0;
  char id[];
} hpl__dir_obj;

#define HPL__DTAB_LEVELS 24
#define HPL__DTAB_MAX_SUBS 4 /* subscribers to object changes (hpl__dtab_on_change) */

typedef struct hpl__dtab {
  /* the id hash: chains, two tables while it grows (moved a few buckets
   * per operation, so no single insert stalls) */
  hpl__dir_obj **ht[2];
  uint64_t hsize[2], hused[2];
  int64_t rehash;   /* next bucket of ht[0] to move, -1 when not growing */
  /* the ordered index: a skip list by id (listing, prefixes) */
  hpl__dir_obj *head[HPL__DTAB_LEVELS];
  int levels;
  uint64_t rng;
  /* the per-node index: the objects each node has a copy of */
  struct hpl__dtab_node *nodes;
  uint32_t max_senders; /* receivers one copy may serve at once */
  /* optional: may a copy on this node serve now? (draining nodes may not) */
  int (*usable)(uint64_t node, void *arg);
  /* optional: is the node suspected (silent)? Its copies, and copies
   * pulling from it, serve only as a last resort. */
  int (*suspected)(uint64_t node, void *arg);
  /* optional: did the node report its own partial sender crawling lately?
   * It is slow or waits for a slow node: a bypass picks it last. */
  int (*crawling)(uint64_t node, void *arg);
  /* optional: was the node reported sending units that fail their digests
   * often? Its own copies (not those pulling from it: they count verified
   * bytes only) are named after every other idle copy, but rather than
   * make a receiver wait: a receiver checks every unit and moves off at the
   * first bad one, while a wait costs a whole transfer. */
  int (*distrusted)(uint64_t node, void *arg);
  void *usable_arg; /* for all four */
  /* bumped when a node may have become suspected: hpl__dtab_node_unresponsive
   * and hpl__dtab_suspicion_changed. A pick trusts a chain it found free of
   * suspected nodes until then (lifting suspicion needs no call). Also bumped
   * when a pick finds `suspected` or usable_arg replaced. */
  uint64_t suspect_gen;
  int (*suspect_seen)(uint64_t node, void *arg);
  void *suspect_seen_arg;
  /* who hears of a changed object (hpl__dtab_on_change), in subscription order */
  struct {
    void (*fn)(struct hpl__dir_obj *o, void *arg);
    void *arg;
  } on_change[HPL__DTAB_MAX_SUBS];
  int nsubs;
  uint64_t seq;
  uint64_t inline_bytes; /* total inline bytes held */
  uint64_t nobjs;
} hpl__dtab;

void hpl__dtab_init(hpl__dtab *t, uint32_t max_senders);
/* Free every object (waiters/watchers must already be gone). */
void hpl__dtab_clear(hpl__dtab *t);

hpl__dir_obj *hpl__dtab_find(hpl__dtab *t, const char *id);
/* Find or create an entry (PENDING). NULL on allocation failure or an id
 * longer than HPL_ID_MAX. */
hpl__dir_obj *hpl__dtab_get(hpl__dtab *t, const char *id);
/* Remove and free an entry (its waiters must be handled by the caller). */
void hpl__dtab_remove(hpl__dtab *t, hpl__dir_obj *o);
/* Remove the entry if nothing refers to it any more (pending, no waiters). */
void hpl__dtab_gc(hpl__dtab *t, hpl__dir_obj *o);

/* Object changes are an event of the table: a module that changes an
 * object (its locations, state or bytes) calls hpl__dtab_changed, and the
 * modules above that serve what waits for objects (acquire.c's waiters,
 * reduce.c's source watches) hear of it through the callback they
 * subscribed with hpl__dtab_on_change, in the order they subscribed. The table
 * never calls anything else: subscribers are wired at server start.
 *
 * hpl__dtab_on_change: add `fn(o, arg)` to the subscribers (at most
 * HPL__DTAB_MAX_SUBS; returns 0, or -1 when full). Kept by hpl__dtab_clear.
 * hpl__dtab_changed: every subscriber hears of `o`, then the entry is dropped
 * if nothing refers to it any more (hpl__dtab_gc): `o` may be freed. */
int hpl__dtab_on_change(hpl__dtab *t, void (*fn)(hpl__dir_obj *o, void *arg), void *arg);
void hpl__dtab_changed(hpl__dtab *t, hpl__dir_obj *o);

/* The ordered index: the first object whose id is >= key (or > key with
 * after), and the next one in id order; NULL past the end. */
hpl__dir_obj *hpl__dtab_first(hpl__dtab *t, const char *key, int after);
hpl__dir_obj *hpl__dtab_next(const hpl__dir_obj *o);

/* Copies from which an object keeps its locations hashed by node and its
 * idle copies in an index (objtab_ix.c), so a pick costs O(1) amortized. */
#define HPL__DTAB_LOC_INDEX_MIN 32

/* How many objects node `node` has a copy of (its index's length). */
uint64_t hpl__dtab_node_count(hpl__dtab *t, uint64_t node);

/* For objects.c only: a new location of `node` at the end of o's list
 * (indexed under the node), and freeing one (unlinked by the caller). */
hpl__dir_loc *hpl__dtab_loc_new(hpl__dtab *t, hpl__dir_obj *o, uint64_t node);
void hpl__dtab_loc_free(hpl__dtab *t, hpl__dir_obj *o, hpl__dir_loc *l);
/* For objects.c only: the objects node `node` has copies of (a vector the
 * caller must not keep across changes), *n its length. */
hpl__dir_obj **hpl__dtab_node_objects(hpl__dtab *t, uint64_t node, uint64_t *n);

/* node's location of o, or NULL: O(1) from HPL__DTAB_LOC_INDEX_MIN copies
 * (the object's node hash), a list walk below. */
hpl__dir_loc *hpl__dtab_loc(hpl__dir_obj *o, uint64_t node);

/* For objects.c only, the idle index (see hpl__dir_objix):
 * hpl__dtab_idle_ready: builds it if o has HPL__DTAB_LOC_INDEX_MIN copies and
 * it is missing or was built for another t->max_senders; 1 if usable, 0 if
 * not (a small object, or no memory: the caller scans the list).
 * hpl__dtab_idle_note: l's serving count dropped or its complete flag
 * changed: put it in (or in its place in) a built index. Never fails: an
 * index it cannot grow is dropped (rebuilt at the next pick).
 * hpl__dtab_idle_take: takes the first location out (NULL: empty); put it
 * back with hpl__dtab_idle_note (no allocation: its room is still there). */
int hpl__dtab_idle_ready(hpl__dtab *t, hpl__dir_obj *o);
void hpl__dtab_idle_note(hpl__dir_obj *o, hpl__dir_loc *l);
hpl__dir_loc *hpl__dtab_idle_take(hpl__dir_obj *o);

/* For objects.c only: an upstream link of o changed (chain summaries are
 * stale). */
void hpl__dtab_links_changed(hpl__dir_obj *o);

/* A node may have become suspected other than through
 * hpl__dtab_node_unresponsive (which counts as this call): picks look at
 * every chain's nodes again. A `suspected` filter whose answer for a node
 * turns from 0 to 1 without either call makes picks miss it. */
void hpl__dtab_suspicion_changed(hpl__dtab *t);

/* Record a copy at `node`. For an origin (a put) the id must be free:
 * HPL_EEXIST if the object is ready with another origin or complete copies,
 * HPL_EMISMATCH if a different size is already known. A LOST object is
 * revived by a new origin. Returns 0. */
int hpl__dtab_add_loc(hpl__dtab *t, hpl__dir_obj *o, uint64_t node, uint64_t size, int complete,
                      int origin);

/* Store `len` bytes inline (object becomes READY). HPL_EEXIST if the object
 * already exists with other content. Takes ownership of `data` on success. */
int hpl__dtab_set_inline(hpl__dtab *t, hpl__dir_obj *o, uint8_t *data, uint64_t len);

/* Mark node's copy complete: frees its upstream's serving slot. Adds the
 * location if unknown (a copy completed across a directory restart).
 * Returns 1 if the object just became complete for the first time. */
int hpl__dtab_loc_complete(hpl__dtab *t, hpl__dir_obj *o, uint64_t node, uint64_t size);

/* node's copy of o is streaming in from `upstream` (re-reported to a
 * directory that just took over, HeldObject.upstream): recorded as a
 * partial location pulling from it (a complete one is left alone), the
 * upstream's copy, if known, counted as serving it. Returns 0,
 * HPL_EMISMATCH (another size), HPL_EINVAL (its own upstream) or
 * HPL_ENOMEM. */
int hpl__dtab_loc_partial(hpl__dtab *t, hpl__dir_obj *o, uint64_t node, uint64_t size,
                          uint64_t upstream);

/* l->serving counted again from the copies that name l's node as their
 * upstream (a copy re-reported after the receivers that pull from it). */
void hpl__dtab_recount_serving(hpl__dir_obj *o, hpl__dir_loc *l);

/* Drop node's copy (and free its upstream's slot). Returns 1 if removed. */
int hpl__dtab_loc_remove(hpl__dtab *t, hpl__dir_obj *o, uint64_t node);

/* Unlist node's copy: another node found it sending bytes that fail their
 * digests. The location stays (its node's get may still be running, and a
 * delete must reach it) but is never named as a sender again and does not
 * count as a copy (hpl__dtab_check_lost); its upstream's slot is freed.
 * Every receiver pulling from it loses its upstream and is passed to
 * `gone(o, receiver, arg)` (may be NULL) so it can be told to move.
 * Returns the node's upstream before (0: none, or no such location). */
uint64_t hpl__dtab_loc_unlist(hpl__dtab *t, hpl__dir_obj *o, uint64_t node,
                              void (*gone)(hpl__dir_obj *o, uint64_t receiver, void *arg),
                              void *arg);

/* True if following upstream links from `from` reaches `target`. */
int hpl__dtab_depends_on(hpl__dir_obj *o, uint64_t from, uint64_t target);

/* True if the object can be read: inline, or a complete copy exists. */
int hpl__dtab_ready(const hpl__dir_obj *o);

/* The asker's copy stops pulling from its sender (the stream failed): the
 * sender's slot is free again. */
void hpl__dtab_release_upstream(hpl__dir_obj *o, uint64_t node);

/* Choose a sender for `asker`: a complete idle copy, else a partial idle one,
 * never the asker nor a copy that (transitively) pulls from it; `avoid` (a
 * sender that just failed or crawled), copies pulling from it, and copies
 * on or pulling from suspected nodes only if nothing else could ever
 * serve; an idle copy on a distrusted node only if no other is idle. On
 * success
 * marks the sender busy, records the asker as a partial location pulling from
 * it (re-pointing an existing one) and returns 0 with *sender set.
 * Returns 1 if the asker must wait (object pending, or every candidate busy),
 * HPL_ELOST if no copy that could finish remains. */
int hpl__dtab_pick_sender(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid,
                          uint64_t *sender);
/* As hpl__dtab_pick_sender, for an asker that still has a (silent) sender:
 * never a last-resort copy nor a distrusted node's, and 1 (keep the current sender) where
 * hpl__dtab_pick_sender would make it wait. */
int hpl__dtab_pick_instead(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid,
                           uint64_t *sender);

/* For an asker whose partial sender `slow` crawls by itself: the best copy
 * that does not depend on `slow` (nor on the asker, nor on a suspected
 * node): an idle complete one, an idle partial one, slow's own sender,
 * then the least busy, regardless of the per-copy receiver limit; a copy
 * on a node that reported a crawl itself lately (dtab.crawling) or on a
 * distrusted node only if no other is left. Assigns
 * it as for hpl__dtab_pick_sender and returns 0, or 1 if there is none. */
int hpl__dtab_pick_bypass(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t slow,
                          uint64_t *sender);

/* Node `node` is suspected (it does not answer): the streams its copies
 * pull are not counted against their senders any more (a stopped receiver
 * takes no bandwidth), and `down` (may be NULL) hears of every copy pulling
 * from it (receiver's node). Nothing is removed. */
void hpl__dtab_node_unresponsive(hpl__dtab *t, uint64_t node,
                                 void (*down)(hpl__dir_obj *o, uint64_t receiver, void *arg),
                                 void *arg);

/* Forget o's bytes and copies: it is pending again (waiters, if any, wait
 * for a new put). o is freed when nothing refers to it (hpl__dtab_gc): the
 * caller must not use it afterwards. */
void hpl__dtab_forget(hpl__dtab *t, hpl__dir_obj *o);

/* Whether a complete copy other than asker's and avoid's could serve now
 * (live, below the per-copy sender limit). */
int hpl__dtab_idle_complete(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, uint64_t avoid);

/* Record `asker` as a partial copy pulling from the copy `from` (which
 * serves one more receiver). Returns 0 or HPL_ENOMEM. */
int hpl__dtab_assign(hpl__dtab *t, hpl__dir_obj *o, uint64_t asker, hpl__dir_loc *from);

/* `node`'s copy of `o` if it could serve `asker` now: listed, below the
 * per-copy receiver limit, on a usable node, not the asker and not pulling
 * (transitively) from it. NULL otherwise. */
hpl__dir_loc *hpl__dtab_idle_sender(hpl__dtab *t, hpl__dir_obj *o, uint64_t node, uint64_t asker);

/* Re-evaluate the lost rule: an object with no inline bytes, no complete
 * copy and no origin copy is lost (if it ever existed). Updates o->state and
 * returns 1 if the object is lost. */
int hpl__dtab_check_lost(hpl__dtab *t, hpl__dir_obj *o);

/* A node died or left: drop all its copies, in time proportional to how
 * many it had. Copies that pulled from it keep their bytes and lose their
 * upstream: `down` (may be NULL) hears of each first (receiver's node).
 * For each object touched, `fn` is called (after the change) so the server
 * can wake waiters; it may remove the object. */
void hpl__dtab_node_gone(hpl__dtab *t, uint64_t node,
                         void (*down)(hpl__dir_obj *o, uint64_t receiver, void *arg),
                         void (*fn)(hpl__dir_obj *o, void *arg), void *arg);

#endif
