/*
 * objtab_int.h - what the two files of the object table's storage share
 * (objtab.c: records, the id hash, the ordered index; objtab_ix.c: the
 * per-node index, a large object's indexes): a node's index. Included by
 * those files only; every other module goes through objects.h.
 */
#ifndef HPL_DIR_OBJTAB_INT_H
#define HPL_DIR_OBJTAB_INT_H

#include <stdint.h>
#include <uthash.h>

#include "objects.h"

/* A node's index: the objects it has a location in. */
typedef struct hpl__dtab_node {
  uint64_t node;
  UT_hash_handle hh;
  hpl__dir_obj **objs;
  uint64_t n, cap;
} hpl__dtab_node;

#endif
