/*
 * admin.h - requests that inspect or remove objects, from clients and
 * tools (any connection, registered or not): STAT, LIST, COUNTERS, and
 * DELETE, which first has every holder drop its copy (DROP, acknowledged
 * with an empty REPLY carrying the DROP's request id).
 *
 * Owns dir_server.deletes (deletes waiting for acks, each with a timer);
 * the COUNTERS list is dirmetrics.c's (/metrics shows it too). Callers: server.c (dispatch; a closed connection;
 * shutdown).
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

/* Every DELETE is remembered (a tombstone, for DIR_TOMB_MS, at most
 * DIR_TOMB_MAX, the oldest forgotten first): a copy of the id re-reported
 * later, while the id is unknown or only waited for (pending), is answered
 * with DROP instead of bringing the deleted object back. Such copies come
 * from a restarted directory's stores (their HELD re-reports arrive a
 * piece at a time after each registration, possibly after a delete of an
 * id the new directory did not know yet) and from a store that was
 * declared dead and comes back (its copies were forgotten, so the delete's
 * DROP round did not reach it). A new put of the id ends its tombstone. */
#define DIR_TOMB_MS 60000
#define DIR_TOMB_MAX 65536
/* Whether `id` is tombstoned (1) or not (0). */
int dir_admin_tombstoned(dir_server *s, const char *id);
/* A new put of `id`: it is no longer deleted. */
void dir_admin_untomb(dir_server *s, const char *id);

/* Forget object o's bytes and copies: it is pending again (waiters, if
 * any, wait for a new put). o is freed when nobody waits for it: the
 * caller must not use it afterwards. */
void dir_admin_forget(dir_server *s, dir_obj *o);

/* `dc` closed: deletes it asked for finish without a reply. */
void dir_admin_conn_closed(dir_server *s, dir_conn *dc);

/* Shutdown: answer and end every pending delete now. */
void dir_admin_stop(dir_server *s);

#endif
