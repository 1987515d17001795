/* casync_uv.c - the libuv adapter of libhoplite's asynchronous requests
 * (include/hoplite_uv.h, library hoplite_uv): a uv_poll_t on the handle's
 * descriptor and a uv_timer_t at its earliest deadline, both calling
 * hpl_async_poll. */
#include <stdlib.h>

#include "hoplite_uv.h"

struct hpl_uv {
  uv_poll_t poll;
  uv_timer_t timer;
  hpl_client *c;
  hpl_uv_cb cb;
  void *arg;
  int open; /* handles not closed yet */
};

static void on_timer(uv_timer_t *t);

/* The timer at the earliest deadline (none: stopped). */
static void arm_timer(hpl_uv *u) {
  int64_t ms = hpl_async_timeout_ms(u->c);
  if (ms < 0) uv_timer_stop(&u->timer);
  else uv_timer_start(&u->timer, on_timer, (uint64_t)ms, 0);
}

/* One poll per wake-up: the rest waits for the next loop turn (the
 * descriptor stays readable), so the loop's timers keep time. */
static void drive(hpl_uv *u) {
  hpl_completion comps[HPL_UV_BATCH];
  int n = hpl_async_poll(u->c, comps, HPL_UV_BATCH);
  for (int i = 0; i < n; i++) u->cb(u->c, &comps[i], u->arg);
  arm_timer(u);
}

static void on_timer(uv_timer_t *t) { drive(t->data); }

static void on_poll(uv_poll_t *p, int status, int events) {
  (void)status; /* an error on an epoll descriptor: poll anyway, it says what broke */
  (void)events;
  drive(p->data);
}

static void on_close(uv_handle_t *h) {
  hpl_uv *u = h->data;
  if (--u->open == 0) free(u);
}

int hpl_async_uv_start(uv_loop_t *loop, hpl_client *c, hpl_uv_cb cb, void *arg, hpl_uv **out) {
  if (!loop || !c || !cb || !out) return HPL_EINVAL;
  int fd;
  int rc = hpl_async_fd(c, &fd);
  if (rc) return rc;
  hpl_uv *u = calloc(1, sizeof *u);
  if (!u) return HPL_ENOMEM;
  u->c = c;
  u->cb = cb;
  u->arg = arg;
  if (uv_poll_init(loop, &u->poll, fd) != 0) {
    free(u);
    return HPL_ESYS;
  }
  uv_timer_init(loop, &u->timer);
  u->poll.data = u->timer.data = u;
  u->open = 2;
  if (uv_poll_start(&u->poll, UV_READABLE, on_poll) != 0) {
    hpl_async_uv_stop(u);
    return HPL_ESYS;
  }
  arm_timer(u);
  *out = u;
  return 0;
}

void hpl_async_uv_stop(hpl_uv *u) {
  if (!u) return;
  uv_close((uv_handle_t *)&u->poll, on_close);
  uv_close((uv_handle_t *)&u->timer, on_close);
}
