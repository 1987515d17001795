/* uvtimer.c - timers owned by heap entries (see uvtimer.h). */
#include "uvtimer.h"

#include <stdlib.h>

static void otimer_fired(uv_timer_t *h) {
  hpl__otimer *t = h->data;
  t->cb(t->owner);
}

static void otimer_closed(uv_handle_t *h) {
  hpl__otimer *t = h->data;
  free(t->owner);
}

void hpl__otimer_start(uv_loop_t *loop, hpl__otimer *t, void *owner, uint64_t ms,
                       void (*cb)(void *owner)) {
  if (!t->live) {
    uv_timer_init(loop, &t->t);
    t->t.data = t;
    t->live = 1;
  }
  t->owner = owner;
  t->cb = cb;
  uv_timer_start(&t->t, otimer_fired, ms, 0);
}

void hpl__otimer_stop(hpl__otimer *t) {
  if (t->live) uv_timer_stop(&t->t);
}

void hpl__otimer_free(hpl__otimer *t, void *owner) {
  if (!t->live) {
    free(owner);
    return;
  }
  t->owner = owner;
  t->live = 0;
  uv_timer_stop(&t->t);
  uv_close((uv_handle_t *)&t->t, otimer_closed);
}
