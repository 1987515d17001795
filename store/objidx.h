/*
 * objidx.h - the object table's indexes (objects.c's alone): by id, by
 * instance handle, reduce streams by key.
 *
 * An index is an open-addressing table of record pointers with linear
 * probing and a tag byte per slot: TAG_EMPTY, TAG_GONE (a removed entry: a
 * probe goes on past it) or TAG_USED with 7 bits of the key's hash, so a
 * probe reads records only on a tag match (1 in 128 for another key).
 * Keys are unique (callers check before adding); a record's key is its id,
 * or its instance handle for the index by handle.
 *
 * Resizing is incremental. When an array would pass 3/4 full (live and
 * removed entries), or falls below 1/8 live, a new array is made for twice
 * the live entries and becomes `cur`; the old one is drained into it from
 * slot 0 up, a few slots per operation on the index (lookups included),
 * and given back once drained. Meanwhile lookups and removals consult both (a
 * drained slot is marked TAG_GONE, so probes through it still reach the
 * entries after it). An insert drains enough that the old array is empty
 * before `cur` fills (see idx_step_for_insert), so a resize never runs in
 * one go. Arrays of 64 KiB or more are mapped afresh (their zeroed pages
 * come on first touch, never all at once) and unmapped a slice at a time
 * once drained.
 *
 * Callers: objects.c only.
 */
#ifndef HPL_STORE_OBJIDX_H
#define HPL_STORE_OBJIDX_H

#include <stddef.h>
#include <stdint.h>

#include "objects.h"

typedef struct hpl__objidx_arr {
  uint8_t *tag;  /* cap tags, then (aligned) cap record pointers: one allocation */
  hpl__obj **rec;
  size_t cap;    /* 0 (no array) or a power of two */
  size_t live;   /* TAG_USED slots */
  size_t gone;   /* TAG_GONE slots */
} hpl__objidx_arr;

typedef struct hpl__objidx {
  hpl__objidx_arr cur; /* where entries are added */
  hpl__objidx_arr old; /* being drained into cur (cap 0: none) */
  size_t drain;        /* old's slots below this are drained */
  uint8_t *dead;       /* a drained mapped array, unmapped from its end a slice */
  size_t dead_len;     /*   per operation (NULL: none) */
  int by_inst;         /* keyed by instance handle, else by id */
} hpl__objidx;

/* Add o (not in x). 0, or -1 when there is no room and no memory to grow. */
int hpl__objidx_add(hpl__objidx *x, hpl__obj *o);

/* Find by id (or by inst if x is by_inst); NULL if absent. Moves a few
 * slots of a table being resized. */
hpl__obj *hpl__objidx_get(hpl__objidx *x, const char *id, uint64_t inst);

/* Remove o (a no-op if it is not in x); shrink when mostly empty. */
void hpl__objidx_del(hpl__objidx *x, hpl__obj *o);

/* How many entries x holds. */
size_t hpl__objidx_live(const hpl__objidx *x);

/* Slots of x's arrays in use (a draining one included) and their bytes,
 * added to *slots and *bytes. */
void hpl__objidx_size(const hpl__objidx *x, size_t *slots, size_t *bytes);

/* fn(o, arg) for every entry; fn must not change x. */
void hpl__objidx_each(hpl__objidx *x, void (*fn)(hpl__obj *o, void *arg), void *arg);

/* Give back every array (the records are not touched). */
void hpl__objidx_free(hpl__objidx *x);

#endif
