/*
 * admin.h - requests that inspect or remove objects, from clients and
 * tools (any connection, registered or not): STAT, LIST, COUNTERS, and
 * DELETE, which first has every holder drop its copy (DROP, acknowledged
 * with an empty REPLY carrying the DROP's request id).
 *
 * Owns its state (dir_server.admin: deletes waiting for acks, each with a
 * timer). A DELETE leaves a tombstone (tombs.h), ends a ring allreduce or
 * a reduce into the id (ring.h, reduce.h) and forgets the object
 * (dtab_forget). The COUNTERS list is dirmetrics.c's (/metrics shows it
 * too). Callers: server.c (dispatch; a closed connection; shutdown).
 */
#ifndef HPL_DIR_ADMIN_H
#define HPL_DIR_ADMIN_H

#include "server.h"

#define DIR_LIST_PAGE 1000
#define DIR_LIST_MAX 10000
#define DIR_LIST_BYTES (4u << 20)

/* Handlers (server.c's dispatch table).
 * STAT: size, inline, copies; HPL_ENOTFOUND or HPL_ELOST otherwise.
 * LIST: one page: ready objects whose id starts with the prefix and sorts
 *   after the cursor, in id order (DIR_LIST_PAGE by default, at most
 *   DIR_LIST_MAX or DIR_LIST_BYTES); `next` is the cursor for the next
 *   page, "" after the last.
 * COUNTERS: the directory's counters by name.
 * DELETE: removes the object and every copy; the reply (0, HPL_ENOTFOUND,
 *   HPL_ENOMEM) comes once every holder acknowledged its DROP, or after
 *   2 x heartbeat_timeout_ms. A reduce into the id is cancelled.
 * DROP ack (a REPLY frame): one holder dropped its copy. */
void dir_admin_on_stat(dir_server *s, const dir_frame *f);
void dir_admin_on_list(dir_server *s, const dir_frame *f);
void dir_admin_on_counters(dir_server *s, const dir_frame *f);
void dir_admin_on_delete(dir_server *s, const dir_frame *f);
void dir_admin_on_drop_ack(dir_server *s, const dir_frame *f);

/* The module's state (dir_server.admin), allocated here: 0 or HPL_ENOMEM;
 * freed at the end. */
int dir_admin_init(dir_server *s);
void dir_admin_free(dir_server *s);

/* `dc` closed: deletes it asked for finish without a reply. */
void dir_admin_conn_closed(dir_server *s, dir_conn *dc);

/* Shutdown: answer and end every pending delete now, forget the
 * tombstones. */
void dir_admin_stop(dir_server *s);

#endif
