/*
 * uvtimer.h - a libuv timer owned by a heap-allocated entry (a waiter, a
 * pending request, ...). libuv may still touch a timer until its close
 * callback has run, so such an entry can only be freed from there; this
 * helper owns that sequence once for every kind of entry.
 *
 * Usage: embed an hpl__otimer in the entry (zeroed, e.g. by calloc), call
 * hpl__otimer_start() as often as needed, and end the entry's life with
 * hpl__otimer_free(), which frees the entry (with free()) at once if the
 * timer was never started, else from the timer's close callback. Event-loop
 * thread only.
 *
 * Callers: store/ (dirlink.c, get.c, fetch.c) and directory/ (acquire.c,
 * admin.c, ring.c, reduce).
 */
#ifndef HPL_UVTIMER_H
#define HPL_UVTIMER_H

#include <stdint.h>
#include <uv.h>

typedef struct hpl__otimer {
  uv_timer_t t;
  void *owner;              /* the entry, freed with free() */
  void (*cb)(void *owner);  /* what a firing calls */
  int live;                 /* initialised (and not yet closed) */
} hpl__otimer;

/* (Re)arm: cb(owner) runs once after `ms` milliseconds. The first call
 * initialises the handle. */
void hpl__otimer_start(uv_loop_t *loop, hpl__otimer *t, void *owner, uint64_t ms,
                       void (*cb)(void *owner));

/* Disarm (a no-op if never started). */
void hpl__otimer_stop(hpl__otimer *t);

/* End the entry: stop the timer and free `owner`, now or once the handle
 * has closed. Neither the entry nor the timer may be used afterwards. */
void hpl__otimer_free(hpl__otimer *t, void *owner);

#endif
