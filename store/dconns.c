/* dconns.c - data connections for pulls: their receive window, and idle
 * ones kept between pulls (see dconns.h).
 *
 * One list, least recently parked first: the oldest is the one the timer
 * waits for, and the one the caps let go. It holds HPL__DCONNS_MAX entries
 * at most, so a walk of it (taking, counting a sender's) is short.
 */
#include "dconns.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"

struct hpl__dconns;

/* One idle connection; the connection's data while it is listed. */
typedef struct dconn {
  struct dconn *prev, *next; /* d->list (utlist), oldest first */
  struct hpl__dconns *d;
  struct sockaddr_in sa;     /* the sender's data port */
  hpl__conn *c;
  uint64_t since;            /* when it was parked (loop time, ms) */
} dconn;

/* The module's context (s->dconns). */
typedef struct hpl__dconns {
  dconn *list;
  unsigned n;
  uv_timer_t timer; /* the oldest one's idle time (made on the first park) */
  int timer_open;
  int closed;       /* close_all ran: nothing is kept any more */
  int warned;       /* a receive buffer the kernel refused was logged */
} hpl__dconns;

static int same_peer(const struct sockaddr_in *a, const struct sockaddr_in *b) {
  return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* Unlist e; its connection is no longer ours to track (data NULL). */
static hpl__conn *unlist(dconn *e) {
  hpl__conn *c = e->c;
  DL_DELETE(e->d->list, e);
  e->d->n--;
  hpl__conn_set_data(c, NULL);
  free(e);
  return c;
}

/* A kept connection's frame: nothing was asked on it, so any is wrong. */
static void idle_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                       const uint8_t *payload, uint64_t plen) {
  (void)m, (void)payload, (void)plen;
  HPL__LOG_DEBUG("%s: %s frame on an idle connection: closed", hpl__conn_label(c),
                 hpl__msg_name(h->type));
  dconn *e = hpl__conn_data(c);
  if (e) unlist(e);
  hpl__conn_close(c, HPL_EPROTO);
}

/* Gone (the sender closed it, or we let it go): one still listed is
 * forgotten. */
static void idle_closed(hpl__conn *c, int status) {
  dconn *e = hpl__conn_data(c);
  if (!e) return;
  HPL__LOG_DEBUG("%s: idle connection closed by the sender (%s)", hpl__conn_label(c),
                 hpl_strerror(status ? status : HPL_ECONN));
  unlist(e);
}

/* Let e's connection go (a cap, its idle time, the store stopping). */
static void let_go(dconn *e) { hpl__conn_close(unlist(e), 0); }

static void expire(uv_timer_t *t);

/* The timer waits for the oldest one's idle time (none: stopped). */
static void arm(hpl__store *s) {
  hpl__dconns *d = s->dconns;
  if (!d->list) {
    uv_timer_stop(&d->timer);
    return;
  }
  uint64_t now = uv_now(s->loop), due = d->list->since + s->cfg.data_idle_ms;
  uv_timer_start(&d->timer, expire, due > now ? due - now : 0, 0);
}

static void expire(uv_timer_t *t) {
  hpl__store *s = t->data;
  hpl__dconns *d = s->dconns;
  uint64_t now = uv_now(s->loop);
  while (d->list && now - d->list->since >= s->cfg.data_idle_ms) let_go(d->list);
  arm(s);
}

uint64_t hpl__dconns_window(uint64_t asked, uint64_t link_rate) {
  uint64_t w = asked;
  if (w == HPL__PULL_WINDOW_DEFAULT) {
    w = link_rate / 8 * 5 / 4000; /* 1.25 ms */
    if (link_rate && w < (32u << 10)) w = 32u << 10;
  }
  unsigned long long max = 0;
  FILE *f = w ? fopen("/proc/sys/net/core/rmem_max", "r") : NULL;
  if (f && fscanf(f, "%llu", &max) == 1 && w > max) {
    HPL__LOG_WARN("--pull-window: %llu bytes is above net.core.rmem_max (%llu), which the "
                  "kernel would cap it to: copies' windows are left to the kernel",
                  (unsigned long long)w, max);
    w = 0;
  }
  if (f) fclose(f);
  return w;
}

int hpl__dconns_open(hpl__store *s, uv_tcp_t *t, uint64_t window) {
  int rc = uv_tcp_init_ex(s->loop, t, AF_INET); /* (data ports are IPv4: struct sockaddr_in) */
  if (rc || !window) return rc;
  int want = window > INT32_MAX / 2 ? INT32_MAX / 2 : (int)window;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)t, &fd) == 0 &&
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want) == 0) {
    s->ctr.data_conns_windowed++; /* (within rmem_max: hpl__dconns_window) */
  } else if (s->dconns && !s->dconns->warned) {
    s->dconns->warned = 1;
    HPL__LOG_WARN("data connections: receive buffer of %d bytes refused (%s): the kernel "
                  "sizes it",
                  want, strerror(errno));
  }
  return 0;
}

int hpl__dconns_init(hpl__store *s) {
  s->dconns = calloc(1, sizeof *s->dconns);
  return s->dconns ? 0 : HPL_ENOMEM;
}

int hpl__dconns_park(hpl__store *s, const struct sockaddr_in *sa, hpl__conn *c) {
  hpl__dconns *d = s->dconns;
  hpl__conn_rebind(c, idle_frame, idle_closed, NULL);
  dconn *e = NULL;
  if (d && !d->closed && !s->stopping && s->cfg.data_idle_ms && hpl__conn_between_frames(c))
    e = calloc(1, sizeof *e);
  if (!e) {
    hpl__conn_close(c, 0);
    return 0;
  }
  if (!d->timer_open) {
    uv_timer_init(s->loop, &d->timer);
    d->timer.data = s;
    d->timer_open = 1;
  }
  dconn *x, *oldest = NULL;
  unsigned mine = 0;
  DL_FOREACH(d->list, x) {
    if (!same_peer(&x->sa, sa)) continue;
    if (!oldest) oldest = x;
    mine++;
  }
  if (mine >= HPL__DCONNS_PER_PEER) let_go(oldest);
  if (d->n >= HPL__DCONNS_MAX) let_go(d->list);
  e->d = d;
  e->sa = *sa;
  e->c = c;
  e->since = uv_now(s->loop);
  hpl__conn_set_data(c, e);
  DL_APPEND(d->list, e);
  d->n++;
  if (!uv_is_active((uv_handle_t *)&d->timer)) arm(s);
  return 1;
}

hpl__conn *hpl__dconns_take(hpl__store *s, const struct sockaddr_in *sa) {
  hpl__dconns *d = s->dconns;
  if (!d || !d->list) return NULL;
  for (dconn *e = d->list->prev;; e = e->prev) { /* newest first (utlist: head->prev is the tail) */
    if (same_peer(&e->sa, sa) && !hpl__conn_closing(e->c)) {
      int oldest = e == d->list;
      hpl__conn *c = unlist(e);
      if (oldest) arm(s);
      return c;
    }
    if (e == d->list) return NULL;
  }
}

unsigned hpl__dconns_idle(const hpl__store *s) { return s->dconns ? s->dconns->n : 0; }

void hpl__dconns_close_all(hpl__store *s) {
  hpl__dconns *d = s->dconns;
  if (!d) return;
  d->closed = 1;
  while (d->list) let_go(d->list);
  if (d->timer_open) uv_close((uv_handle_t *)&d->timer, NULL);
  d->timer_open = 0;
}

void hpl__dconns_free(hpl__store *s) {
  free(s->dconns);
  s->dconns = NULL;
}
