/*
 * reduce_int.h - what reduce.c, reduce_tree.c and reduce_crawl.c share: the
 * reduce record and the calls between the three files. Included by those
 * only; every other module goes through reduce.h.
 */
#ifndef HPL_DIR_REDUCE_INT_H
#define HPL_DIR_REDUCE_INT_H

#include <stdint.h>

#include "planner.h"
#include "reduce.h"
#include "uvtimer.h"

typedef struct dr_slot {
  int filled;
  int src;       /* index into sources */
  uint64_t node; /* where it runs */
  uint32_t gen;
  uint64_t silent_ms; /* when its output was last reported silent (0: never) */
} dr_slot;

/* A REDUCE_INFO waiting for the reduce to finish. */
typedef struct dr_info {
  struct dr_info *prev, *next; /* dir_reduce.infos (utlist DL) */
  struct dir_reduce *r;
  dir_conn *dc;
  uint64_t req;
  hpl__otimer timer; /* its timeout, if it has one */
} dr_info;

/* A source watch: hangs off the source object's `watchers` (utlist DL). */
typedef struct dr_watch {
  struct dr_watch *prev, *next;
  struct dir_reduce *r;
  int idx;
} dr_watch;

enum { DR_WAITING = 0, DR_IN_TREE = 1, DR_SPARE = 2, DR_LOST = 3 }; /* dir_reduce.src_state */

typedef struct dir_reduce {
  UT_hash_handle hh; /* dir_server.reduces, by target */
  dir_server *srv;
  uint64_t rid; /* this instance: stream keys and store tasks carry it */
  uint32_t tgen; /* generation of the target's bytes */
  uint64_t arrivals;
  uint64_t *arr_seq; /* per source: arrival order (0: not arrived) */
  char *target;
  char **src;
  size_t nsrc;
  int *src_state; /* DR_*: waiting, in the tree, spare, lost to a failure */
  uint32_t k;
  int op, dtype;
  uint64_t sink;
  /* A range reduce takes bytes [src_off, src_off + src_len) of each source
   * (src_len 0: up to the sources' end; both 0: the whole sources). */
  uint64_t src_off, src_len;
  uint64_t size;     /* the target's: the range's length (have_size) */
  uint64_t src_size; /* the sources' (have_size) */
  int have_size;
  int inline_mode;
  uint8_t *acc; /* inline mode: running result */
  hpl__plan plan;
  int planned;
  dr_slot *slots;
  uint32_t nfilled;
  uint32_t joins; /* participants that joined (allreduce): they get the target */
  int lost_retaken; /* a straggler's slot went to a source lost earlier (once only) */
  /* a crawl report no node stood out for: judged again once the tree's
   * links are measured (reduce_crawl.c) */
  uint64_t crawl_due_ms; /* when (0: nothing pending) */
  int crawl_slot;
  uint32_t crawl_gen;
  uint64_t crawl_reporter;
  uint64_t crawl_rate;
  /* The tree of a previous directory instance, still running (the sink
   * asked again after a restart with ReduceReq.adopt_*): slots list the
   * sources in it but not their nodes; it ends when the target completes,
   * and starts over as a new tree if any of its nodes reports a failure. */
  int adopted;
  int done;   /* finished or failed */
  int status; /* 0 or the failure */
  char detail[320];
  dr_info *infos;
  uint64_t start_ms;
  struct dir_reduce *fin_prev, *fin_next; /* dir_server.reduces_done */
} dir_reduce;

/* A source counts once it is ready (complete somewhere, or inline). */
static inline int dr_src_ready(dir_obj *o) { return o && dtab_ready(o); }

/* The range is not the whole sources (once sized): a leaf slot's output is
 * then a stream its task copies from its source's range (a parent cannot
 * pull a range of an object), not the object itself. */
static inline int dr_slice(const dir_reduce *r) { return r->have_size && r->size != r->src_size; }

/* reduce.c: what is wrong with source `o` (ready) for a reduce of `dtype`
 * over bytes [off, off + len) of each source (len 0: up to the end), as a
 * negative code with `detail` written: HPL_EMISMATCH (its size is not a
 * multiple of the dtype's), HPL_EINVAL (the range goes beyond it); 0 if
 * nothing is. */
int dr_source_check(const dir_obj *o, int dtype, uint64_t off, uint64_t len, char *detail,
                    size_t dlen);

/* reduce.c: the reduce into `target`, or NULL. */
dir_reduce *dr_find(dir_server *s, const char *target);

/* reduce.c: the reduce is over (status 0: done; else failed with
 * `detail`, which a target not yet complete then reports to its gets):
 * sources are unwatched, every node involved told (REDUCE_END), info
 * waiters answered; r moves to the finished list (never freed here, so
 * callers may go on walking the reduces). A no-op if r is done already. */
void dr_finish(dir_reduce *r, int status, const char *detail);

/* reduce_tree.c: source i of r became ready (or came back): plan the tree
 * on the first arrival, then fill a slot (or keep it as a spare). May
 * finish r. */
void dr_arrival(dir_reduce *r, int i);

/* reduce_tree.c: tell every node running a slot, and the sink, that the
 * reduce ended (REDUCE_END with r->status / r->detail); every node for an
 * adopted tree, whose nodes are unknown. */
void dr_send_end(dir_reduce *r);

/* reduce_tree.c: send `type` (REDUCE_END or REDUCE_ADOPTED) for instance
 * `rid` of the reduce into r's target to every registered node. */
void dr_send_all(dir_reduce *r, unsigned type, uint64_t rid);

/* reduce_tree.c: the adopted tree failed (`why`): end it everywhere and
 * build a new one (new instance, next target generation) from the ready
 * sources. */
void dr_unadopt(dir_reduce *r, const char *why);

/* reduce.c: every source of r that is ready arrives, in the order the
 * sources became ready. May finish r. */
void dr_arrive_ready(dir_reduce *r);

/* reduce_tree.c: a live node, other than slot f's, with a complete copy of
 * slot f's source (0: none). */
uint64_t dr_other_copy(dir_reduce *r, int f);

/* reduce_tree.c: the spare source that arrived first and has a copy on a
 * live node: its index (its object in *obj), or -1. */
int dr_earliest_spare(dir_reduce *r, dir_obj **obj);

/* reduce_tree.c: the earliest source taken out of the tree by an earlier
 * failure whose copy is still on a live node, other than source `except`:
 * its index (its object in *obj), or -1. */
int dr_earliest_lost_held(dir_reduce *r, int except, dir_obj **obj);

/* reduce_tree.c: slot f failed (`why`, logged): it gets another copy of its
 * source, else a spare, else a source lost earlier, else waits; its
 * ancestors and the target restart from byte 0. A no-op on a done reduce
 * or an empty slot. */
void dr_slot_failed(dir_reduce *r, int f, const char *why);

/* reduce_tree.c: the task of r at `node` ends (REDUCE_END to it) unless the
 * node is the sink or still holds a slot. */
void dr_end_task_at(dir_reduce *r, uint64_t node);

/* reduce_tree.c: node `node` is gone (its tasks are void): reduces it
 * sinks fail, its slots are refilled. */
void dir_reduce_node_gone(dir_server *s, uint64_t node);

/* reduce_tree.c: node `node` did not answer a probe: the slots on it whose
 * output was reported silent lately are replaced now. */
void dir_reduce_node_unresponsive(dir_server *s, uint64_t node);

/* reduce_tree.c: node `node` answers again: reduces waiting for a source
 * they lost on it take it back. */
void dir_reduce_node_back(dir_server *s, uint64_t node);

/* reduce_crawl.c: slot `slot`'s output stream crawls at `rate` bytes/s,
 * says `reporter` (the node pulling it). Replaces the slot of the node
 * whose link delay stands out, if one does; otherwise measures every node
 * of the tree and judges again DR_MEASURE_WAIT_MS later (s->crawl_timer).
 * `slot` must be a filled slot of a planned, running r. */
void dr_crawl_report(dir_reduce *r, int slot, uint64_t reporter, uint64_t rate);

#endif
