/*
 * admin.h - requests that inspect or remove objects, from clients and
 * tools (any connection, registered or not): STAT, LIST, COUNTERS, and
 * DELETE, which first has every holder drop its copy (DROP, acknowledged
 * with an empty REPLY carrying the DROP's request id). A DELETE is taken
 * only from the object's maker node (hpl__dir_obj.maker), any node once
 * the maker is gone, an ADMIN connection, or anyone under --delete-any;
 * others get HPL_EPERM naming the maker (dir_deletes_refused).
 *
 * Owns its state (hpl__dir_server.admin: deletes waiting for acks, each with a
 * timer). A DELETE leaves a tombstone (tombs.h), ends a ring allreduce or
 * a reduce into the id (ring.h, reduce.h) and forgets the object
 * (hpl__dtab_forget). The COUNTERS list is dirmetrics.c's (/metrics shows it
 * too). Callers: server.c (dispatch; a closed connection; shutdown).
 */
#ifndef HPL_DIR_ADMIN_H
#define HPL_DIR_ADMIN_H

#include "server.h"

#define HPL__DIR_LIST_PAGE 1000
#define HPL__DIR_LIST_MAX 10000
#define HPL__DIR_LIST_BYTES (4u << 20)

/* Handlers (server.c's dispatch table).
 * STAT: size, inline, copies; HPL_ENOTFOUND or HPL_ELOST otherwise.
 * LIST: one page: ready objects whose id starts with the prefix and sorts
 *   after the cursor, in id order (HPL__DIR_LIST_PAGE by default, at most
 *   HPL__DIR_LIST_MAX or HPL__DIR_LIST_BYTES); `next` is the cursor for the next
 *   page, "" after the last.
 * COUNTERS: the directory's counters by name.
 * DELETE: removes the object and every copy; the reply (0, HPL_ENOTFOUND,
 *   HPL_ENOMEM) comes once every holder acknowledged its DROP, or after
 *   2 x heartbeat_timeout_ms. A reduce into the id is cancelled.
 * DROP ack (a REPLY frame): one holder dropped its copy. */
void hpl__dir_admin_on_stat(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_admin_on_list(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_admin_on_counters(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_admin_on_delete(hpl__dir_server *s, const hpl__dir_frame *f);
void hpl__dir_admin_on_drop_ack(hpl__dir_server *s, const hpl__dir_frame *f);

/* The module's state (hpl__dir_server.admin), allocated here: 0 or HPL_ENOMEM;
 * freed at the end. */
int hpl__dir_admin_init(hpl__dir_server *s);
void hpl__dir_admin_free(hpl__dir_server *s);

/* `dc` closed: deletes it asked for finish without a reply. */
void hpl__dir_admin_conn_closed(hpl__dir_server *s, hpl__dir_conn *dc);

/* Shutdown: answer and end every pending delete now, forget the
 * tombstones. */
void hpl__dir_admin_stop(hpl__dir_server *s);

#endif
