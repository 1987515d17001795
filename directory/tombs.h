/*
 * tombs.h - deleted ids remembered for a while (tombstones).
 *
 * Every DELETE is remembered (for HPL__DIR_TOMB_MS, at most HPL__DIR_TOMB_MAX, the
 * oldest forgotten first): a copy of the id re-reported later, while the id
 * is unknown or only waited for (pending), is answered with DROP instead of
 * bringing the deleted object back. Such copies come from a restarted
 * directory's stores (their HELD re-reports arrive a piece at a time after
 * each registration, possibly after a delete of an id the new directory did
 * not know yet) and from a store that was declared dead and comes back (its
 * copies were forgotten, so the delete's DROP round did not reach it). A
 * new put of the id ends its tombstone.
 *
 * A directory that takes over learns the deletes the stores know of
 * (HeldNote.tombs, with their age): hpl__dir_tombs_add_aged. Such a
 * tombstone is put at the end of the expiry list, so it may outlive its
 * window there until the older ones ahead of it go (has/at check the time).
 *
 * Owns its state (hpl__dir_server.tombs). Callers: admin.c (DELETE adds one;
 * shutdown), locs.c (re-reported copies and deletes; a new put), server.c
 * (init, free).
 */
#ifndef HPL_DIR_TOMBS_H
#define HPL_DIR_TOMBS_H

#include "server.h"

#define HPL__DIR_TOMB_MS HPL__TOMB_MS
#define HPL__DIR_TOMB_MAX 65536

/* The module's state, allocated here: 0 or HPL_ENOMEM. */
int hpl__dir_tombs_init(hpl__dir_server *s);

/* Remember that `id` was deleted now (counted in tombstones; out of
 * memory, it is not remembered). */
void hpl__dir_tombs_add(hpl__dir_server *s, const char *id);

/* Remember that `id` was deleted `age_ms` ago, as a store re-reported it
 * (HeldNote.tombs: a new directory learns the deletes of the old one); an
 * age of HPL__DIR_TOMB_MS or more is ignored. A tombstone held already
 * keeps the later of the two times. */
void hpl__dir_tombs_add_aged(hpl__dir_server *s, const char *id, uint64_t age_ms);

/* Whether `id` was deleted less than HPL__DIR_TOMB_MS ago (1) or not (0). */
int hpl__dir_tombs_has(hpl__dir_server *s, const char *id);

/* When `id` was deleted (hpl__now_ms clock), if less than HPL__DIR_TOMB_MS
 * ago; else 0. */
uint64_t hpl__dir_tombs_at(hpl__dir_server *s, const char *id);

/* A new put of `id`: it is no longer deleted. */
void hpl__dir_tombs_remove(hpl__dir_server *s, const char *id);

/* Forget every tombstone (shutdown) / and free the state (the end). */
void hpl__dir_tombs_clear(hpl__dir_server *s);
void hpl__dir_tombs_free(hpl__dir_server *s);

#endif
