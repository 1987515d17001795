/*
 * get.h - a local client's GET: answered at once from a sealed local copy
 * (the client then holds it), else it waits, bounded by its timeout, while
 * fetch.c brings the object (or a put or reduce here completes it).
 *
 * Callers: clients.c (dispatch, a client leaving).
 */
#ifndef HPL_STORE_GET_H
#define HPL_STORE_GET_H

#include <stdint.h>

#include "store.h"
#include "session.h"

/* GET `id` for request `req` of `cl`; timeout_ms < 0: no limit, 0: only
 * what is here now. `granted`: the directory told the client it named a
 * sender to this store already (hpl__fetch_start_granted). The reply (GET_REP)
 * comes now or later. */
void hpl__get_request(hpl__store *s, hpl__stclient *cl, uint64_t req, const char *id,
                      int64_t timeout_ms, int granted);

/* The client left: its waiting GETs end without a reply. */
void hpl__get_client_gone(hpl__store *s, hpl__stclient *cl);

#endif
