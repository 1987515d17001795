/*
 * digests.h - object digests at the directory: taken from the origin's
 * LOC_ADD / LOC_NOTE / INLINE_PUT and kept in the object's record
 * (hpl__dir_obj.dig), handed out with every sender the directory names
 * (AcquireRep, GRANT) and with inline bytes (AcquireRep, PeekRep), and the
 * receivers' reports of a corrupt unit: that copy is no longer named, the
 * report is counted, and a node reported CORRUPT_LAST_RESORT times serves
 * only as a last resort (like a suspected one).
 *
 * Callers: locs.c (taking them), acquire_pick.c / acquire.c (handing them
 * out, corrupt reports, the error when no good copy is left), server.c
 * (the last-resort filter it installs in the table).
 */
#ifndef HPL_DIR_DIGESTS_H
#define HPL_DIR_DIGESTS_H

#include <stddef.h>
#include <stdint.h>

#include "nodes.h"
#include "server.h"

/* Reports after which a node is distrusted: its copies are named last. */
#define HPL__DIR_CORRUPT_LAST_RESORT 3

/* The digest fields of a message about `o` (its size known, or `inl`:
 * its inline bytes, which must match): algo 0 leaves o alone; an algorithm
 * with no list marks o's digests pending (no sender is named until they
 * come); a list must have one digest per unit and its root. 0, or
 * HPL_EINVAL with a detail (nothing changed), or HPL_ENOMEM. */
int hpl__dir_digests_take(hpl__dir_obj *o, uint32_t algo, const ProtobufCBinaryData *list,
                          const ProtobufCBinaryData *root, const uint8_t *inl, char *detail,
                          size_t dlen);

/* Whether digest fields fit an object of `size` bytes (and its bytes `inl`
 * if not NULL): 0, or HPL_EINVAL with a detail. algo 0 fits anything. */
int hpl__dir_digests_check(uint64_t size, uint32_t algo, const ProtobufCBinaryData *list,
                           const ProtobufCBinaryData *root, const uint8_t *inl, char *detail,
                           size_t dlen);

/* Point a reply's digest fields at o's (nothing when it has none or they
 * are pending); valid while o is. */
void hpl__dir_digests_fill(const hpl__dir_obj *o, uint32_t *algo, ProtobufCBinaryData *list,
                           ProtobufCBinaryData *root);

/* 1 if o has no digests by its maker's word (its origin's LOC_ADD,
 * LOC_COMPLETE or INLINE_PUT said algorithm 0, or it is too large for a
 * digest list; or, after a restart of this directory, every copy was
 * re-reported without them), so a receiver may count its bytes unchecked
 * (AcquireRep.digests_none); 0 while it has digests or nobody said. The
 * directory is the authority on an object's algorithm: a receiver with
 * --integrity on refuses a sender named without digests unless this says
 * so. */
int hpl__dir_digests_none(const hpl__dir_obj *o);

/* o is a reduce target whose bytes start over (a new generation): its
 * pending digests are known from unit 0 again (the sink sends the new
 * bytes' as they come). */
void hpl__dir_digests_restart(hpl__dir_obj *o);

/* The origin's LOC_NOTE(DIGESTS): digests of the next units of o, which
 * it still writes; passed on (DIGESTS) to every node pulling a copy. Ones
 * that do not follow the known units are ignored (logged). */
void hpl__dir_digests_more(hpl__dir_server *s, hpl__dir_obj *o, const Hplpb__LocNote *m);

/* The origin's LOC_COMPLETE: all of o's digests and the root
 * (hpl__dir_digests_take); the units not passed on yet go to every node
 * pulling a copy. 0 or as hpl__dir_digests_take. */
int hpl__dir_digests_complete(hpl__dir_server *s, hpl__dir_obj *o, const Hplpb__LocNote *m,
                              char *detail, size_t dlen);

/* `asker` reports that node `bad` sent unit `unit` of o that did not match
 * its digest: counted (corrupt_reports, and on the node), the asker's slot
 * on it is freed, and bad's copy is unlisted (hpl__dtab_loc_unlist: kept in
 * the record, so a delete reaches it, but never named again); receivers
 * still pulling from it are told to move (UPSTREAM_GONE), and bad's own
 * stream is told to ask again (UPSTREAM_GONE regroup) so the asker can take
 * its place behind its sender. When bad is the asker (its own copy failed
 * when read back, and it drops it) the location is removed instead. The
 * caller then picks another sender as usual. */
void hpl__dir_digests_corrupt(hpl__dir_server *s, hpl__dir_node *asker, hpl__dir_obj *o,
                              uint64_t bad, uint64_t unit);

/* A copy re-reported by `node` (HELD: after a restart of this directory,
 * or a reconnect of that store) with its digests; the location is listed
 * already. The rule: digests the origin gave at its put are kept, and a
 * copy whose root differs is not listed (its location is removed). An
 * object with no digests takes the first reported ones that fit its size
 * (root over the list). When a later report disagrees with reported ones,
 * nobody can say which is right: the object is marked conflicting and no
 * sender is named for it (hpl__dir_digests_refused). Returns 1 if node's
 * copy was removed, else 0. Counted: held_digests, digest_conflicts. */
int hpl__dir_digests_held(hpl__dir_server *s, hpl__dir_obj *o, uint64_t node, uint32_t algo,
                          const ProtobufCBinaryData *list, const ProtobufCBinaryData *root);

/* 1 with an HPL_ECORRUPT detail if no sender may be named for o (its
 * re-reported digests conflict), else 0. */
int hpl__dir_digests_refused(const hpl__dir_obj *o, char *detail, size_t dlen);

/* For an ACQUIRE of o that found no copy left: 1 with an HPL_ECORRUPT
 * detail naming the node if copies were dropped as corrupt, else 0. */
int hpl__dir_digests_lost_detail(const hpl__dir_obj *o, char *detail, size_t dlen);

/* The table's distrust filter (hpl__dtab.distrusted): a node reported
 * sending corrupt units HPL__DIR_CORRUPT_LAST_RESORT times or more. Its own
 * copies are named last (after every other idle copy, rather than make a
 * receiver wait); copies pulling from it are not affected (they count
 * verified bytes only). Silent nodes are hpl__dtab.suspected's. */
int hpl__dir_digests_distrusted(uint64_t node, void *srv);

#endif
