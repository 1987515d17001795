/*
 * rdsinkint.h - what the files of the rdsink module share (rdsink.c: a
 * sink's record, its end, REDUCE_SINK and REDUCE_END; rdsinkask.c: the
 * client's REDUCE request, asking again after a directory restart): the
 * sink's record, the module's context and the calls between the files.
 * Nothing outside the module includes it.
 */
#ifndef HPL_STORE_RDSINKINT_H
#define HPL_STORE_RDSINKINT_H

#include <stddef.h>
#include <stdint.h>

#include "objects.h"
#include "puller.h"
#include "rdsink.h"
#include "rdver.h"
#include "room.h"

/* The module's context (s->sinks). */
typedef struct hpl__rd_sinks {
  struct hpl__rd_sink *list; /* every sink (utlist) */
} hpl__rd_sinks;

typedef struct hpl__rd_sink {
  struct hpl__rd_sink *prev, *next; /* s->sinks->list (utlist) */
  hpl__store *s;
  hpl__obj *o;        /* the target, referenced */
  hpl__puller *pull;  /* the root's stream, when the root runs elsewhere */
  hpl__rdver *ver;    /* its digests (NULL: not checked, --integrity off here) */
  uint64_t rid;       /* the reduce instance being pulled */
  uint32_t slot, gen; /* the root's slot and generation being pulled */
  uint64_t root_node; /* where that root runs */
  uint8_t *req;       /* the packed ReduceReq, to ask again after a */
  size_t req_len;     /*   directory restart */
  int local;          /* the root's task runs here and writes the target */
  char **srcs;        /* the sources in the tree (REDUCE_SINK), to name to */
  size_t nsrcs;       /*   a restarted directory, which may adopt the tree */
  uint64_t adopting;  /* the instance offered to a restarted directory */
  /* The root moved away while the old local root's combine step still
   * wrote the target: the root's stream to pull once it is done */
  char *pend_key;     /* NULL: none */
  char pend_addr[64];
  int pend_port, pend_internal;
  /* The target's buffer waits for room: the last REDUCE_SINK (packed) is
   * acted on once it has it */
  hpl__room room;
  uint8_t *wait_msg;
  size_t wait_len;
  uint64_t wait_rid;
  int64_t timeout_ms; /* the client's, for the room wait (<= 0: the store's longest) */
} hpl__rd_sink;

/* rdsink.c: the root's stream and its digests are no longer pulled. */
void hpl__rdsink_stop_pull(hpl__rd_sink *k);

/* rdsink.c: the reduce is over for this node (or was never ours): let go
 * of it (k is freed). */
void hpl__rdsink_end(hpl__rd_sink *k);

/* rdsink.c: the target will not be made here: its waiters fail, it is
 * forgotten (k is freed). */
void hpl__rdsink_fail(hpl__rd_sink *k, int status, const char *detail);

/* rdsink.c: the target is made elsewhere after all: get it like any object
 * (at_directory: the directory reduced it and holds the only copy; k is
 * freed). */
void hpl__rdsink_fetch_instead(hpl__rd_sink *k, int at_directory);

/* rdsink.c: the target's copy in progress is advertised (again) to the
 * directory. */
void hpl__rdsink_advertise(hpl__store *s, hpl__obj *o);

#endif
