/*
 * acquire_int.h - what the files of the acquire module share: its state and
 * the calls between its files. Included by those files only; every other
 * module goes through acquire.h.
 *
 * The files, bottom-up (each calls only the ones before it):
 *   acquire_pick.c  the answer to one ACQUIRE now, a PEEK's grant, the
 *                   replies that name a sender
 *   acquire_move.c  receivers that report a silent or crawling sender; the
 *                   object table's crawl filter
 *   acquire.c       ACQUIRE and PEEK, their waiters, the events the module
 *                   hears (object changes, a node unplugged)
 */
#ifndef HPL_DIR_ACQUIRE_INT_H
#define HPL_DIR_ACQUIRE_INT_H

#include <stdint.h>

#include "acquire.h"

/* The module's state (hpl__dir_server.acquire). */
struct hpl__dir_acquire {
  struct hpl__dir_crawl_rep *crawl_reps; /* crawl reports waiting for their batch, in arrival
                                            order (acquire_move.c; utlist LL) */
  uv_timer_t bcrawl_timer;          /* ...judged in batches */
};

/* ------------------------------------------------------------------ acquire_pick.c */

/* Answer the asker's ACQUIRE `req` with an error (its connection must be
 * open: node->conn). */
void hpl__dir_acquire_reply_err(hpl__dir_node *asker, uint64_t req, int status, const char *detail);

/* Answer the asker's ACQUIRE `req` with `sender`, just assigned to it in
 * the table (counted, recorded in the transfer record); HPL_EUNAVAIL
 * "sender vanished" if that node is unknown (its location is dropped). */
void hpl__dir_acquire_reply_sender(hpl__dir_server *s, hpl__dir_node *asker, uint64_t req,
                                   hpl__dir_obj *o, uint64_t sender);

/* "Stay with your sender; report it again after retry_ms if it is still
 * silent": an answer naming no sender. */
void hpl__dir_acquire_reply_stay(hpl__dir_node *asker, uint64_t req, uint64_t retry_ms);

/* Answer an ACQUIRE for `o` from `asker` if possible (inline bytes, the
 * sender a GRANT named already, the allreduce chain's predecessor, the
 * table's pick, or an error such as HPL_ELOST). Returns 1 if answered, 0
 * if the asker must keep waiting; *ring_wait (if not NULL) is set when it
 * waits for its allreduce ring predecessor (since_ms: when it asked; 0
 * disables that preference). */
int hpl__dir_acquire_try(hpl__dir_server *s, hpl__dir_node *asker, uint64_t req, hpl__dir_obj *o,
                         uint64_t avoid, uint64_t since_ms, int *ring_wait);

/* A PEEK of `o`, which is not inline, on connection `dc` from a client of
 * store `node`: name a sender to that store now (GRANT) when it may be
 * done at once (see acquire_pick.c). 1 if granted, else 0 (the store asks
 * as usual). */
int hpl__dir_acquire_peek_grant(hpl__dir_server *s, const hpl__dir_conn *dc, hpl__dir_obj *o,
                                uint64_t node);

/* ------------------------------------------------------------------ acquire_move.c */

/* An ACQUIRE that reports the asker's sender (m->failed_peer) silent
 * (m->suspect): stay, wait for the probe's verdict, or move. Answered. */
void hpl__dir_acquire_on_silent_sender(hpl__dir_server *s, hpl__dir_node *asker, uint64_t req,
                                       hpl__dir_obj *o, const Hplpb__AcquireReq *m);

/* An ACQUIRE that reports the asker's partial sender crawling
 * (m->only_complete): noted now, judged and answered with the reports of
 * the next DIR_CRAWL_BATCH_MS (or HPL_ENOMEM now). */
void hpl__dir_acquire_on_crawling_sender(hpl__dir_server *s, hpl__dir_node *asker, uint64_t req,
                                         hpl__dir_obj *o, const Hplpb__AcquireReq *m);

/* Drop node `asker`'s crawl reports without an answer (it left its
 * connection). */
void hpl__dir_acquire_drop_crawl_reports(hpl__dir_server *s, uint64_t asker);

/* Free every crawl report still waiting (the server ends). */
void hpl__dir_acquire_crawl_free(hpl__dir_server *s);

#endif
