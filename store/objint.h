/*
 * objint.h - what the object table's files share (objects.c: the table,
 * lookups, walks, making records, the presence filter; objlife.c: a
 * record's life once made: references, the idle list, its buffer and spill
 * file, watchers and waiters): the module's context and the calls between
 * the files. Nothing outside the module includes it.
 */
#ifndef HPL_STORE_OBJINT_H
#define HPL_STORE_OBJINT_H

#include <stdint.h>
#include <uthash.h>

#include "objects.h"
#include "objidx.h"

/* The module's context (s->objects), made by hpl__objects_init. */
typedef struct hpl__objects {
  hpl__objidx by_id;        /* objects in the table (hpl__obj_find) */
  hpl__objidx by_inst;      /* every object until freed (hpl__obj_find_inst) */
  hpl__objidx internal;     /* reduce streams in the table (hpl__obj_find_internal) */
  hpl__obj *first;          /* objects in by_id, oldest first (walks; utlist) */
  hpl__walk *walks;         /* open walks */
  hpl__obj *idle_first;     /* the idle list, least recently used first (utlist) */
  uint64_t idle_bytes;
  struct hpl__obj_filerec *files; /* spill files by instance (few objects have one) */
  uint64_t next_inst;             /* the last instance handle given */
  int filter_fd;                  /* presence filter shared read-only with clients (-1: none) */
  uint8_t *filter;
  uv_timer_t trim; /* gives free pool pages back once frees pause (cfg.trim_ms) */
  int trim_live;   /* the timer is initialised */
  /* the listener (who makes room in the pool): pool memory was freed or an
   * object went idle; a spilled object's bytes are wanted */
  void (*changed)(hpl__store *s);
  void (*wanted)(hpl__store *s, hpl__obj *o);
} hpl__objects;

/* An object's spill file (hpl__obj_set_file), by its instance. */
typedef struct hpl__obj_filerec {
  uint64_t inst, file;
  UT_hash_handle hh;
} hpl__obj_filerec;

/* objlife.c: o leaves the idle list (if it is on it). */
void hpl__obj_idle_del(hpl__store *s, hpl__obj *o);

/* objlife.c: the record is freed: out of the by-instance index, its spill
 * file removed, its buffer back to the pool, its digests freed. */
void hpl__obj_free(hpl__store *s, hpl__obj *o);

#endif
