/*
 * rdtaskint.h - what rdtask.c (a slot's life), rdcombine.c (its
 * children's streams and combine steps) and rdend.c (its end) share: a
 * task's record, its states, the module's context. Nothing outside these
 * three files includes it.
 *
 * A task's life (hpl__rd_state, changed by hpl__rdtask_set_state only, which logs
 * each change at debug level):
 *
 *   WAITING --nothing left to wait for--> RUNNING --output complete--> COMPLETE
 *     |                                   |    ^                           |
 *     | cannot run here                   |    '--- a pull below its base --'
 *     v                                   |         (makes it again)
 *   FAILED            a pull below its base while a step runs
 *                                         v
 *                                     REBASING --the step done--> RUNNING
 *
 *   ended (the reduce ended, or the slot was reset) while a step runs on
 *   the thread pool: ENDED, freed when the step is done; otherwise freed
 *   at once.
 *
 * A WAITING task waits for any of: room for its output stream's buffer
 * (pending), the sink's target to get its buffer (to_target, out without
 * data), the old generation's last step, which still writes the output
 * (blocked_by), and, when it resumed a failed node's slot, the first pull of
 * its output, which says where to start (await_start). It becomes RUNNING
 * where the last of them is over (hpl__rdtask_wait_over).
 */
#ifndef HPL_STORE_RDTASKINT_H
#define HPL_STORE_RDTASKINT_H

#include <stddef.h>
#include <stdint.h>
#include <uthash.h>

#include "hoplite.h"
#include "objects.h"
#include "puller.h"
#include "rdver.h"
#include "rdtask.h"
#include "room.h"

typedef struct hpl__rd_task hpl__rd_task;

typedef enum hpl__rd_state {
  HPL__RD_WAITING = 0, /* children may not write yet: see above */
  HPL__RD_RUNNING,     /* children stream in, steps combine */
  HPL__RD_REBASING,    /* a pull below the base came while a step ran: the children start
                          over from the new base once it is done */
  HPL__RD_COMPLETE,    /* the output is complete; kept (served) until the reduce ends */
  HPL__RD_FAILED,      /* cannot run here (reported); kept until the reduce ends */
  HPL__RD_ENDED,       /* out of the table while a step ran: freed when it is done */
  HPL__RD_NSTATES
} hpl__rd_state;

/* The module's context (s->tasks). */
typedef struct hpl__rd_tasks {
  hpl__rd_task *hash;      /* by "<slot>:<target>" (uthash) */
  uv_timer_t orphans; /* ends tasks a restarted directory did not adopt (data: set
                         once initialised) */
  void (*root_released)(hpl__store *s, const char *target); /* hpl__rdtask_on_root_released's */
} hpl__rd_tasks;

typedef struct hpl__rd_child {
  hpl__rd_task *t;
  int index;
  int known;
  uint32_t slot, gen; /* the child's slot and its output's generation */
  uint64_t node;      /* where it runs */
  char addr[64];
  int port;
  char key[320];
  int internal;
  struct hpl__puller *pull;
  uint64_t recv; /* stream bytes received and checked: they count (combined) */
  uint64_t raw;  /* stream bytes received; those past recv wait for their digests */
  struct hpl__rdver *ver; /* the stream's digests (NULL: not fetched, --integrity off) */
  int corrupt_wait; /* a unit failed its digest: reported, the directory's word restarts it */
  uint8_t *ring; /* NULL for child 0, which writes into the output */
  size_t ring_size;
  int paused;
  int done;
} hpl__rd_child;

struct hpl__rd_task {
  UT_hash_handle hh;
  char hkey[340]; /* "<slot>:<target>" */
  hpl__store *s;
  char target[HPL_ID_MAX + 1];
  uint64_t rid;
  uint32_t slot, gen;
  int op, dtype;
  uint64_t size;
  uint64_t src_off;     /* own source's bytes [src_off, src_off + size) take part */
  hpl__obj *src;        /* own source (referenced) */
  hpl__watch src_watch; /* a spilled source: combining waits until it is back */
  hpl__obj *out;        /* output: a reduce stream, or the target (referenced) */
  int to_target;
  int nch;
  hpl__rd_child *ch;
  hpl__rd_state state;
  int await_start; /* resumed: waits for its output's first pull, which says where to start */
  uint64_t comb; /* bytes of out that are final */
  int working;   /* a combine step runs on the thread pool */
  uv_work_t work;
  uint64_t w_from, w_to;
  int orphan; /* the directory restarted and has not adopted the reduce */
  uint64_t orphan_at; /* when it ends unless adopted (hpl__now_ms clock) */
  /* The output stream's buffer waiting for room (referenced, not yet in the
   * table: its pullers wait as for a stream not yet made) */
  hpl__obj *pending;
  hpl__room room;
  int root_moved; /* to_target, ended because the root runs elsewhere now */
  int out_kept; /* the next generation of this slot took over `out` (and its reference) */
  /* Output bytes below `base` are never made (a resumed slot: its first pull
   * says from where); a pull below it makes the task start over there */
  uint64_t base;
  /* A slot reset while its step still ran: the old task (ENDED, working)
   * still writes the output, so the new one starts nothing until it is
   * done. */
  struct hpl__rd_task *blocked_by; /* the old task this one waits for */
  struct hpl__rd_task *successor;  /* the new task waiting for this one */
  hpl__source source;              /* its output stream's (out->source), while it is in the table */
};

/* rdtask.c: the one change of a task's state (logged); free a task out of
 * the table (ENDED instead while a step runs). */
void hpl__rdtask_set_state(hpl__rd_task *t, hpl__rd_state to);
void hpl__rdtask_free_task(hpl__rd_task *t);
/* Something a WAITING task waited for is over: if it was the last, the task
 * becomes RUNNING and its children start (hpl__rdtask_go). Nothing for a task
 * in any other state. */
void hpl__rdtask_wait_over(hpl__rd_task *t);

/* rdcombine.c. Start every known child's stream and combine what is there,
 * if children may write the output (RUNNING, REBASING or COMPLETE). */
void hpl__rdtask_go(hpl__rd_task *t);
/* Start child c's stream, if ready and not started or done. */
void hpl__rdtask_child_start(hpl__rd_task *t, hpl__rd_child *c);
/* Combine whatever every input has delivered. */
void hpl__rdtask_try_combine(hpl__rd_task *t);
/* Every child's stream from the output's base again (a rebase). */
void hpl__rdtask_restart_children(hpl__rd_task *t);

#endif
