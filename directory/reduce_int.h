/*
 * reduce_int.h - what the files of the reduce module share: the reduce
 * record, the module's state, and the calls between the files. Included by
 * those files only; every other module goes through reduce.h.
 *
 * The files, bottom-up (each calls only the ones before it):
 *   reduce_msg.c    what the directory tells stores about a reduce
 *                   (REDUCE_TASK, REDUCE_SINK, REDUCE_END, REDUCE_ADOPTED):
 *                   every message of the module is built there
 *   reduce_rec.c    the records: the table by target, a reduce's life
 *                   (hpl__dir_reduce_set_life), source watches, finishing, the finished
 *                   ones kept, REDUCE_INFO waiters
 *   reduce_tree.c   the tree's decisions: the plan, which slot an arriving
 *                   source fills and on which node, a failed slot's
 *                   replacement, the allreduce chain's sender
 *   reduce_crawl.c  which node of a crawling tree is slow
 *   reduce.c        the requests (REDUCE, REDUCE_FAIL, REDUCE_DONE) and
 *                   the events the module hears (object changes, nodes)
 */
#ifndef HPL_DIR_REDUCE_INT_H
#define HPL_DIR_REDUCE_INT_H

#include <stdint.h>

#include "planner.h"
#include "reduce.h"
#include "uvtimer.h"

typedef struct hpl__dr_slot {
  int filled;
  int src;       /* index into sources */
  uint64_t node; /* where it runs */
  uint32_t gen;
  uint64_t silent_ms; /* when its output was last reported silent (0: never) */
  uint32_t corrupt;   /* its stream's units that failed their digest on this node
                         with no other copy to go to (hpl__dir_reduce_slot_corrupt) */
} hpl__dr_slot;

/* A REDUCE_INFO waiting for the reduce to finish. */
typedef struct hpl__dr_info {
  struct hpl__dr_info *prev, *next; /* hpl__dir_reduce.infos (utlist DL) */
  struct hpl__dir_reduce *r;
  hpl__dir_conn *dc;
  uint64_t req;
  hpl__otimer timer; /* its timeout, if it has one */
} hpl__dr_info;

/* A source watch: hangs off the source object's `watchers` (utlist DL). */
typedef struct hpl__dr_watch {
  struct hpl__dr_watch *prev, *next;
  struct hpl__dir_reduce *r;
  int idx;
} hpl__dr_watch;

/* Where a source stands (hpl__dir_reduce.src_state; hpl__dir_reduce_set_src logs changes). */
typedef enum hpl__dr_src {
  HPL__DR_WAITING = 0, /* not ready (or not arrived) yet */
  HPL__DR_IN_TREE = 1, /* fills a slot (or was combined, inline) */
  HPL__DR_SPARE = 2,   /* arrived once every slot was filled (subset reduce) */
  HPL__DR_LOST = 3,    /* taken out of the tree by a failure (counts again once back) */
} hpl__dr_src;

/* A reduce's life (hpl__dir_reduce.life; hpl__dir_reduce_set_life logs each transition). */
typedef enum hpl__dr_life {
  HPL__DR_OPEN,    /* no tree yet: waiting for its first source to plan one */
  HPL__DR_ADOPTED, /* the tree of a previous directory instance runs on: the
                      sources in it are known, not their nodes; never planned here */
  HPL__DR_RUNNING, /* planned: its tree runs on the stores, or (inline_mode) it is
                      reduced here as the sources arrive */
  HPL__DR_DONE,    /* finished (status 0) or failed; kept a while (REDUCE_INFO, joins) */
} hpl__dr_life;

/* Nodes a reduce remembers as having lied in it (hpl__dir_reduce.liars). */
#define HPL__DIR_REDUCE_LIARS_MAX 8

typedef struct hpl__dir_reduce {
  UT_hash_handle hh; /* the module's table, by target */
  hpl__dir_server *srv;
  hpl__dr_life life;
  uint64_t rid; /* this instance: stream keys and store tasks carry it */
  uint32_t tgen; /* generation of the target's bytes */
  uint64_t arrivals;
  uint64_t *arr_seq; /* per source: arrival order (0: not arrived) */
  char *target;
  char **src;
  size_t nsrc;
  hpl__dr_src *src_state;
  uint32_t k;
  int op, dtype;
  uint64_t sink;
  /* A range reduce takes bytes [src_off, src_off + src_len) of each source
   * (src_len 0: up to the sources' end; both 0: the whole sources). */
  uint64_t src_off, src_len;
  uint64_t size;     /* the target's: the range's length (0 until planned) */
  uint64_t src_size; /* the sources' (0 until planned) */
  int inline_mode;   /* the plan: small, reduced at the directory */
  uint8_t *acc;      /* inline mode: running result */
  hpl__plan plan;    /* (degree 0: none made) */
  hpl__dr_slot *slots;
  uint32_t nfilled;
  uint32_t joins; /* participants that joined (allreduce): they get the target */
  int lost_retaken; /* a straggler's slot went to a source lost earlier (once only) */
  /* nodes whose slot's stream failed its digests in this reduce
   * (hpl__dir_reduce_slot_corrupt): no slot goes to them again (pick_node) */
  uint64_t liars[HPL__DIR_REDUCE_LIARS_MAX];
  uint32_t nliars;
  /* a crawl report no node stood out for: judged again once the tree's
   * links are measured (reduce_crawl.c) */
  uint64_t crawl_due_ms; /* when (0: nothing pending) */
  int crawl_slot;
  uint32_t crawl_gen;
  uint64_t crawl_reporter;
  uint64_t crawl_rate;
  int status; /* HPL__DR_DONE: 0 or the failure */
  char detail[320];
  hpl__dr_info *infos;
  uint64_t start_ms;
  struct hpl__dir_reduce *fin_prev, *fin_next; /* the module's finished list */
} hpl__dir_reduce;

/* The module's state (hpl__dir_server.reduces). */
struct hpl__dir_reduces {
  hpl__dir_reduce *by_target;  /* every reduce, by target (uthash) */
  hpl__dir_reduce *done;       /* the finished ones, oldest first (utlist DL) */
  size_t ndone;
  struct hpl__dir_away_end *away_ends; /* instances ended lately, a ring (reduce_msg.c) */
  uv_timer_t crawl_timer;              /* crawls judged again after measurements (reduce_crawl.c) */
  /* asked before a plain reduce starts (hpl__dir_reduce_before_start) */
  int (*before_start)(hpl__dir_server *s, const char *target, void *arg);
  void *before_start_arg;
};

/* A source counts once it is ready (complete somewhere, or inline). */
static inline int dr_src_ready(hpl__dir_obj *o) { return o && hpl__dtab_ready(o); }

/* The range is not the whole sources (once planned; both sizes are 0
 * before): a leaf slot's output is then a stream its task copies from its
 * source's range (a parent cannot pull a range of an object), not the
 * object itself. */
static inline int dr_slice(const hpl__dir_reduce *r) { return r->size != r->src_size; }

/* Whether slot `c`'s output is a reduce stream made by its task: it has
 * children, or the reduce is over a range of the sources (a leaf's task
 * copies its source's range into a stream). Otherwise it is the source
 * object itself, pulled as any object. */
static inline int dr_slot_streams(const hpl__dir_reduce *r, int c) {
  return r->plan.nchild[c] > 0 || dr_slice(r);
}

/* A planned tree running on the stores (not reduced here, not adopted). */
static inline int dr_tree_runs(const hpl__dir_reduce *r) {
  return r->life == HPL__DR_RUNNING && !r->inline_mode;
}

/* ------------------------------------------------------------------ reduce_msg.c */

/* (Re)send slot `slot`'s task to its node, with every child known so far;
 * `resume`: the slot resumed there (hpl__dir_reduce_slot_failed), its task starts where
 * its parent's pull does. */
void hpl__dir_reduce_send_task(hpl__dir_reduce *r, int slot, int resume);

/* Tell the sink where the result comes from (the root slot, inline bytes
 * at the directory, or nothing yet: the target's generation starts over). */
void hpl__dir_reduce_send_sink(hpl__dir_reduce *r);

/* Send `type` (REDUCE_END or REDUCE_ADOPTED) for instance `rid` of the
 * reduce into `target` (no status) to node n: its tasks of that instance
 * end, or go on under a restarted directory that adopted the tree. */
void hpl__dir_reduce_send_end_to(hpl__dir_node *n, unsigned type, uint64_t rid, char *target);

/* The same to every registered node but `skip` (0: none). */
void hpl__dir_reduce_send_all_but(hpl__dir_server *s, unsigned type, uint64_t rid, char *target,
                                  uint64_t skip);

/* The same for r's target to every registered node. */
void hpl__dir_reduce_send_all(hpl__dir_reduce *r, unsigned type, uint64_t rid);

/* Instance `rid` of the reduce into `target` (copied) ended: REDUCE_END
 * to every registered node but `skip` (0: none), and kept a while for the
 * nodes that register later (a failover's or a restart's latecomers, whose
 * tasks of it would run on for nothing). Returns 1, 0 (told already) or -1
 * (out of memory: nothing sent). */
int hpl__dir_reduce_end_everywhere(hpl__dir_server *s, uint64_t rid, const char *target,
                                   uint64_t skip);

/* Node n registered: REDUCE_END for every instance kept above. */
void hpl__dir_reduce_tell_ends(hpl__dir_server *s, hpl__dir_node *n);

/* Free what the two above keep (the module's end). */
void hpl__dir_reduce_free_ends(hpl__dir_server *s);

/* Tell every node running a slot, and the sink, that the reduce ended
 * (REDUCE_END with r->status / r->detail); every node when the tree was
 * `adopted` (its nodes are unknown). */
void hpl__dir_reduce_send_end(hpl__dir_reduce *r, int adopted);

/* The task of r at `node` ends (REDUCE_END to it) unless the node is the
 * sink or still holds a slot, or r is done. */
void hpl__dir_reduce_end_task_at(hpl__dir_reduce *r, uint64_t node);

/* ------------------------------------------------------------------ reduce_rec.c */

/* The reduce into `target`, or NULL. */
hpl__dir_reduce *hpl__dir_reduce_find(hpl__dir_server *s, const char *target);

/* A new reduce record for request m (k of its sources, sunk at `sink`),
 * in the table, its sources watched; NULL when out of memory. */
hpl__dir_reduce *hpl__dir_reduce_new(hpl__dir_server *s, Hplpb__ReduceReq *m, uint32_t k,
                                     uint64_t sink);

/* Move r's life to `to` (logged at debug level). */
void hpl__dir_reduce_set_life(hpl__dir_reduce *r, hpl__dr_life to);

/* Move source i's state to `to` (logged at debug level). */
void hpl__dir_reduce_set_src(hpl__dir_reduce *r, size_t i, hpl__dr_src to);

/* The reduce is over (status 0: done; else failed with `detail`, which a
 * target not yet complete then reports to its gets): sources are
 * unwatched, every node involved told (REDUCE_END), info waiters answered;
 * r moves to the finished list (never freed here, so callers may go on
 * walking the reduces). A no-op if r is done already. */
void hpl__dir_reduce_finish(hpl__dir_reduce *r, int status, const char *detail);

/* Free every reduce and the module's state (at the end). */
void hpl__dir_reduce_free_recs(hpl__dir_server *s);

/* Drop the oldest finished reduces beyond the cap (before a new one
 * starts: never while a caller walks the reduces). */
void hpl__dir_reduce_trim(hpl__dir_server *s);

/* ------------------------------------------------------------------ reduce_tree.c */

/* What is wrong with source `o` (ready) for a reduce of `dtype` over bytes
 * [off, off + len) of each source (len 0: up to the end), as a negative
 * code with `detail` written: HPL_EMISMATCH (its size is not a multiple of
 * the dtype's), HPL_EINVAL (the range goes beyond it); 0 if nothing is. */
int hpl__dir_reduce_source_check(const hpl__dir_obj *o, int dtype, uint64_t off, uint64_t len,
                                 char *detail, size_t dlen);

/* Source i of r became ready (or came back): plan the tree on the first
 * arrival, then fill a slot (or keep it as a spare). May finish r. */
void hpl__dir_reduce_arrival(hpl__dir_reduce *r, int i);

/* Every source of r that is ready arrives, in the order the sources
 * became ready. May finish r. */
void hpl__dir_reduce_arrive_ready(hpl__dir_reduce *r);

/* The adopted tree failed (`why`): end it everywhere and build a new one
 * (new instance, next target generation) from the ready sources. */
void hpl__dir_reduce_unadopt(hpl__dir_reduce *r, const char *why);

/* A live node, other than slot f's, with a complete copy of slot f's
 * source (0: none). */
uint64_t hpl__dir_reduce_other_copy(hpl__dir_reduce *r, int f);

/* The spare source that arrived first and has a copy on a live node: its
 * index (its object in *obj), or -1. */
int hpl__dir_reduce_earliest_spare(hpl__dir_reduce *r, hpl__dir_obj **obj);

/* The earliest source taken out of the tree by an earlier failure whose
 * copy is still on a live node, other than source `except`: its index (its
 * object in *obj), or -1. */
int hpl__dir_reduce_earliest_lost_held(hpl__dir_reduce *r, int except, hpl__dir_obj **obj);

/* Slot f failed (`why`, logged): it gets another copy of its source, else
 * a spare, else a source lost earlier, else waits; its ancestors and the
 * target restart from byte 0. A no-op on a done reduce or an empty slot. */
void hpl__dir_reduce_slot_failed(hpl__dir_reduce *r, int f, const char *why);
/* Slot f's stream sent unit `unit` that did not match the digest its node
 * made (ReduceFailNote.corrupt, from `reporter`): counted (corrupt_reports,
 * and on the node). If another copy of its source can take the slot over
 * where it stopped (as hpl__dir_reduce_slot_failed would resume it), it
 * does; otherwise nothing is reset: the receiver (the parent's task, or
 * the sink) is told the same stream again and pulls it again from its
 * last checked unit (a unit changed on the way is no fault of the source),
 * up to HPL__DIR_REDUCE_CORRUPT_MAX times; then a spare source takes the
 * slot (hpl__dir_reduce_slot_failed), or without one the reduce fails with
 * HPL_ECORRUPT, its detail naming the node. */
#define HPL__DIR_REDUCE_CORRUPT_MAX 3
void hpl__dir_reduce_slot_corrupt(hpl__dir_reduce *r, int f, uint64_t reporter, uint64_t unit,
                                  const char *detail);

/* ------------------------------------------------------------------ reduce_crawl.c */

/* Slot `slot`'s output stream crawls at `rate` bytes/s, says `reporter`
 * (the node pulling it). Replaces the slot of the node whose link delay
 * stands out, if one does; otherwise measures every node of the tree and
 * judges again DR_MEASURE_WAIT_MS later (the module's crawl_timer). `slot`
 * must be a filled slot of a running tree (dr_tree_runs). */
void hpl__dir_reduce_crawl_report(hpl__dir_reduce *r, int slot, uint64_t reporter, uint64_t rate);

#endif
