/* uvconn_cork.c - a corking connection's small frames (uvconn.h): those
 * made in one loop turn wait for the turn's end and go out in one write,
 * through the list of corked connections of its loop, in the order their
 * first frames were made (part of the framed connection's writing,
 * uvconn_write.c). */
#include <pthread.h>
#include <stdlib.h>
#include <utlist.h>

#include "fanout.h"
#include "trace.h"
#include "uvconn_int.h"

/* ------------------------------------------------------------------ each loop's cork list */

static hpl__conn_corks *all_corks; /* every loop's list (utlist LL); found once per connection */
static pthread_mutex_t all_corks_mu = PTHREAD_MUTEX_INITIALIZER;

/* The cork list of `loop` (made on first use), with one more user; NULL
 * without memory. */
static hpl__conn_corks *corks_join(uv_loop_t *loop) {
  hpl__conn_corks *k;
  pthread_mutex_lock(&all_corks_mu);
  LL_SEARCH_SCALAR(all_corks, k, loop, loop);
  if (!k && (k = calloc(1, sizeof *k))) {
    k->loop = loop;
    LL_PREPEND(all_corks, k);
  }
  if (k) k->users++;
  pthread_mutex_unlock(&all_corks_mu);
  return k;
}

void hpl__conn_corks_leave(hpl__conn *c) {
  hpl__conn_corks *k = c->corks;
  if (!k) return;
  if (c->cork_listed) {
    DL_DELETE2(k->list, c, cork_prev, cork_next);
    c->cork_listed = 0;
  }
  c->corks = NULL;
  pthread_mutex_lock(&all_corks_mu);
  if (--k->users == 0) {
    LL_DELETE(all_corks, k);
    free(k);
  }
  pthread_mutex_unlock(&all_corks_mu);
}

/* ------------------------------------------------------------------ corked writes */

static void conn_flush_one(hpl__conn *c);

/* Flush every corked connection of the loop, in order (with a fan-out,
 * the ones with nothing queued before their corked frames go first, all
 * at once). */
static void conn_flush(hpl__conn_corks *k) {
  if (k->flushing) return;
  k->flushing = 1;
  if (hpl__fanout_on()) hpl__conn_flush_fanout(k);
  while (k->list) {
    hpl__conn *c = k->list;
    DL_DELETE2(k->list, c, cork_prev, cork_next);
    c->cork_listed = 0;
    conn_flush_one(c);
  }
  k->flushing = 0;
}

/* Before the loop polls, and after it ran the I/O callbacks. */
static void cork_prep_cb(uv_prepare_t *h) { conn_flush(((hpl__conn *)h->data)->corks); }
static void cork_chk_cb(uv_check_t *h) { conn_flush(((hpl__conn *)h->data)->corks); }

void hpl__conn_flush_for(hpl__conn *c) {
  hpl__conn_corks *k = c->corks;
  if (!k->flushing) {
    conn_flush(k);
    return;
  }
  if (c->cork_listed) {
    DL_DELETE2(k->list, c, cork_prev, cork_next);
    c->cork_listed = 0;
  }
  conn_flush_one(c);
}

hpl__conn_wreq *hpl__conn_cork_take(hpl__conn *c, struct iovec *iov, unsigned *k) {
  if (c->cork_prep) uv_prepare_stop(c->cork_prep);
  if (c->cork_chk) uv_check_stop(c->cork_chk);
  hpl__conn_wreq *list = c->cork;
  c->cork = NULL;
  c->cork_n = 0;
  c->wq_bytes -= c->cork_bytes;
  c->cork_bytes = 0;
  *k = 0;
  if (c->wq_bytes) return list;
  for (hpl__conn_wreq *w = list; w && *k < HPL__CORK_MAX_FRAMES; w = w->next) {
    iov[*k].iov_base = w->bufs[0].base;
    iov[*k].iov_len = w->bufs[0].len;
    (*k)++;
  }
  return list;
}

void hpl__conn_cork_finish(hpl__conn *c, hpl__conn_wreq *list, size_t done) {
  while (list) {
    hpl__conn_wreq *w = list;
    list = w->next;
    if (done >= w->bytes) {
      done -= w->bytes;
      hpl__conn_wreq_free(c, w);
      continue;
    }
    w->bufs[0].base += done;
    w->bufs[0].len -= done;
    w->bytes -= done;
    done = 0;
    if (c->closing) { /* an earlier write failed and closed it */
      hpl__conn_wreq_free(c, w);
      continue;
    }
    uv_buf_t rest = w->bufs[0]; /* uv_write copies the array */
    hpl__conn_queue_write(c, w, &rest, 1);
  }
}

/* Send what c has corked: one write for all of it when nothing else is
 * queued; what the socket does not take becomes write requests, in order. */
static void conn_flush_one(hpl__conn *c) {
  struct iovec iov[HPL__CORK_MAX_FRAMES];
  unsigned k;
  hpl__conn_wreq *list = hpl__conn_cork_take(c, iov, &k);
  hpl__trace("flush", NULL);
  int n = k ? uv_try_write(c->s, (const uv_buf_t *)iov, k) : 0;
  hpl__conn_cork_finish(c, list, n > 0 ? (size_t)n : 0);
}

int hpl__conn_cork(hpl__conn *c, hpl__conn_wreq *w, uv_buf_t buf) {
  if (!c->cork_prep) {
    uv_prepare_t *p = malloc(sizeof *p);
    uv_check_t *k = malloc(sizeof *k);
    hpl__conn_corks *ks = p && k ? corks_join(c->s->loop) : NULL;
    if (!ks) {
      free(p);
      free(k);
      return -1;
    }
    uv_loop_t *loop = c->s->loop;
    uv_prepare_init(loop, p);
    uv_check_init(loop, k);
    p->data = k->data = c;
    c->cork_prep = p;
    c->cork_chk = k;
    c->corks = ks;
    c->handles += 2;
  }
  w->bufs[0] = buf;
  w->nbufs = 1;
  DL_APPEND(c->cork, w);
  c->cork_n++;
  c->cork_bytes += w->bytes;
  c->wq_bytes += w->bytes;
  if (c->cork_n == 1) {
    uv_prepare_start(c->cork_prep, cork_prep_cb);
    uv_check_start(c->cork_chk, cork_chk_cb);
    if (!c->cork_listed) {
      DL_APPEND2(c->corks->list, c, cork_prev, cork_next);
      c->cork_listed = 1;
    }
  }
  if (c->cork_n >= HPL__CORK_MAX_FRAMES || c->cork_bytes >= HPL__CORK_MAX_BYTES)
    conn_flush(c->corks);
  return 0;
}
