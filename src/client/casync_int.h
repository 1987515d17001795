/*
 * casync_int.h - the inside of libhoplite's asynchronous requests
 * (include/hoplite.h, hpl_async_*), shared by its two files and nothing
 * else:
 *   casync.c      the handle's async state: the descriptor, the queue of
 *                 requests waiting to go out, the deadline heap, the
 *                 completion queue, hpl_async_poll / cancel / timeout;
 *   casync_ops.c  what each operation sends in each of its phases and what
 *                 it makes of each reply (the hpl_async_* submissions).
 *
 * A request (hpl__areq) is in one state at a time: QUEUED (waiting to be
 * sent, on the queue), SENT (its ticket on the store connection, crpc.h),
 * DONE (its completion waits on the done list). An operation of several
 * exchanges (a put of a large object: CREATE, SEAL; an allreduce: a ring
 * REDUCE, maybe a plain REDUCE, a GET) goes from SENT back to QUEUED with
 * its next phase.
 */
#ifndef HPL_CASYNC_INT_H
#define HPL_CASYNC_INT_H

#include <stdint.h>
#include <uthash.h>

#include "capi.h"

typedef enum hpl__astate { HPL__AS_QUEUED, HPL__AS_SENT, HPL__AS_DONE } hpl__astate;

/* The exchange a request is at (what it sends next, or awaits). */
typedef enum hpl__aphase {
  HPL__AP_GET,    /* GET, then the object is held */
  HPL__AP_PUT,    /* PUT with the bytes as payload (inline-sized objects) */
  HPL__AP_CREATE, /* CREATE naming the caller's bytes, then SEAL */
  HPL__AP_SEAL,
  HPL__AP_ABORT,  /* a put given up after its CREATE: the store must stop copying */
  HPL__AP_STAT,
  HPL__AP_DELETE,
  HPL__AP_REDUCE, /* REDUCE (an allreduce then GETs the target) */
  HPL__AP_RING,   /* an allreduce's ring REDUCE; no ring: REDUCE, then GET */
  HPL__AP_CREATE_BUF, /* hpl_async_create: CREATE of our staging memory, then the buffer */
  HPL__AP_SEAL_BUF,   /* hpl_async_seal: SEAL of a created buffer */
} hpl__aphase;

typedef struct hpl__areq {
  uint64_t tag;
  int op; /* hpl_async_op */
  hpl__astate state;
  hpl__aphase phase;
  uint64_t deadline;  /* UINT64_MAX: none */
  int zero;           /* submitted with timeout_ms 0: the store answers at once */
  size_t hidx;        /* place in the deadline heap; SIZE_MAX: not in it */
  hpl__crpc_ticket *t; /* SENT: its ticket */
  UT_hash_handle hh;  /* the handle's requests by tag (every state) */
  struct hpl__areq *prev, *next; /* QUEUED: the queue; DONE: the done list */
  /* arguments (strings in the same allocation) */
  const char *id;     /* the object; reduce: the target */
  const void *data;   /* put: the caller's bytes */
  uint64_t dsize;
  uint64_t handle;    /* put: the store's handle after CREATE */
  hpl__cstage stage;  /* create: the memory the bytes are written in (len 0: none, or
                         the buffer has it) */
  hpl_buf *sealing;   /* seal: the buffer, freed with the request (hpl__aop_free) */
  char **sources;
  size_t nsources, num_objects;
  int rop, dtype, ran;
  /* outcome */
  int status;
  char *detail;       /* malloc'ed on failure, or NULL */
  hpl_buf *buf;
  uint64_t size;
  uint32_t copies, complete;
  int is_inline;
} hpl__areq;

typedef struct hpl__casync {
  pthread_mutex_t lock; /* everything below */
  int epfd, evfd;       /* the caller's descriptor; the eventfd in it */
  int ev_written;       /* atomic: evfd was written since hpl_async_poll last read it */
  int out_armed;        /* the socket is in epfd for EPOLLOUT as well */
  int sock_in;          /* the socket is in epfd at all (until it broke) */
  hpl__areq *by_tag;
  size_t count;         /* requests held (every state) */
  hpl__areq *queue, *done; /* utlist DL */
  hpl__areq **heap;     /* min-heap by deadline */
  size_t nheap, capheap;
} hpl__casync;

/* ---- casync.c */

/* Set request q's state (the one place it changes; traced as
 * "async.queued" / "async.sent" / "async.done", trace.h). */
void hpl__aset_state(hpl__casync *a, hpl__areq *q, hpl__astate s);

/* Complete q with status rc (0 or HPL_E*) and, on failure, the detail of
 * fmt (the request's id is prepended). q leaves the queue and the heap;
 * its completion joins the done list. */
void hpl__afail(hpl__casync *a, hpl__areq *q, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Make the descriptor poll readable (the eventfd) until the next
 * hpl_async_poll looks. */
void hpl__awake(hpl__casync *a);

/* Queue q (new, or with its next phase) to be sent. */
void hpl__aqueue(hpl__casync *a, hpl__areq *q);

/* Put q on the deadline heap (deadline set, not UINT64_MAX), or move it. */
void hpl__aheap_set(hpl__casync *a, hpl__areq *q, uint64_t deadline);

/* The handle's async state, set up on first use: 0 with *out, or
 * HPL_ESYS / HPL_ENOMEM with the detail set. a->lock not held. */
int hpl__casync_get(hpl_client *c, hpl__casync **out);

/* ---- casync_ops.c */

/* The message of q's current phase into *m (storage the caller keeps
 * until the frame is sent) and the request around it. */
typedef union hpl__amsg {
  Hplpb__GetReq get;
  Hplpb__PutReq put;
  Hplpb__CreateReq create;
  Hplpb__HandleReq handle;
  Hplpb__IdReq id;
  Hplpb__ReduceReq reduce;
} hpl__amsg;
void hpl__aop_build(hpl_client *c, hpl__areq *q, hpl__amsg *m, hpl__crpc_req *req);

/* The reply (rc 0: rep, taken) or the RPC layer's failure (rc) to q's
 * current phase: complete q, or queue its next phase. */
void hpl__aop_reply(hpl_client *c, hpl__casync *a, hpl__areq *q, int rc, hpl__crpc_msg *rep);

/* What q still owns goes as it is freed (its completion taken, or the
 * handle closing: then `closing`, and a sealing buffer is hpl_close's). */
void hpl__aop_free(hpl_client *c, hpl__areq *q, int closing);

/* q's deadline passed (or it was cancelled: rc HPL_ECANCELED) while
 * SENT or QUEUED: its ticket is forgotten already. Complete it, or (a put
 * the store may be copying) send its ABORT first. */
void hpl__aop_give_up(hpl__casync *a, hpl__areq *q, int rc);

#endif
