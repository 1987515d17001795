/*
 * hoplite_uv.h - an optional libuv adapter for libhoplite's asynchronous
 * requests (hoplite.h, hpl_async_*): library hoplite_uv, which links
 * libuv; libhoplite itself does not.
 *
 * It watches the handle's descriptor (hpl_async_fd) with a uv_poll_t and
 * the earliest deadline with a uv_timer_t, calls hpl_async_poll when
 * either fires, and hands each completion to the caller's callback on the
 * loop's thread. Submissions (hpl_async_get, ...) are made as usual, from
 * the loop's thread; they wake the descriptor themselves.
 *
 * A wake-up (the descriptor readable, or a deadline due) hands over at most
 * HPL_UV_BATCH completions; the rest wait for the next loop turn (the
 * descriptor stays readable), so the loop's other handles (timers,
 * sockets) keep their turns while thousands complete.
 */
#ifndef HOPLITE_UV_H
#define HOPLITE_UV_H

#include <uv.h>

#include "hoplite.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hpl_uv hpl_uv;

/* Completions handed to the callback per wake-up, at most. */
#define HPL_UV_BATCH 64

/* Called once per completion. `comp` is valid during the call only; its
 * buf (a get's or allreduce's object) belongs to the callback from then
 * on (hpl_release it, now or later). */
typedef void (*hpl_uv_cb)(hpl_client *c, const hpl_completion *comp, void *arg);

/* Drive c's async requests from `loop`: 0 with *out (stop with
 * hpl_async_uv_stop before hpl_close), or the error of hpl_async_fd, or
 * HPL_ESYS (libuv refused the handles). c stays the caller's. */
HPL_API int hpl_async_uv_start(uv_loop_t *loop, hpl_client *c, hpl_uv_cb cb, void *arg,
                               hpl_uv **out);

/* Stop watching (completions not taken stay with c); the adapter frees
 * itself once libuv closed its handles (on a later loop turn). NULL: no-op. */
HPL_API void hpl_async_uv_stop(hpl_uv *u);

#ifdef __cplusplus
}
#endif
#endif
