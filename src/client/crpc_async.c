/* crpc_async.c - the client's RPC layer for an event loop (crpc.h,
 * crpc_int.h): tickets nobody waits on, the ready list their replies join,
 * and reading what the socket holds without waiting. */
#include <stdio.h>
#include <stdlib.h>
#include <utlist.h>

#include "crpc_int.h"
#include "hoplite.h"
#include "util.h"

int hpl__crpc_start_async(hpl__crpc *r, const hpl__crpc_req *reqs, size_t n, uint64_t deadline,
                          void *const *users, hpl__crpc_ticket **tickets, size_t *started) {
  *started = 0;
  if (n == 0) return 0;
  if (n > HPL__CRPC_MAX_BATCH || r->solo) return HPL_EINVAL;
  int rc = hpl__crpc_enlist(r, tickets, n, 1);
  if (rc) return rc;
  /* marked before anything is sent: another thread may read the reply
   * before this returns (enlist has published the tickets under the lock) */
  pthread_mutex_lock(&r->lock);
  for (size_t i = 0; i < n; i++) {
    tickets[i]->async = 1;
    tickets[i]->user = users[i];
  }
  pthread_mutex_unlock(&r->lock);
  rc = hpl__crpc_send_frames(r, reqs, n, tickets, deadline, started);
  if (*started < n) hpl__crpc_unlist(r, tickets + *started, n - *started);
  return rc;
}

size_t hpl__crpc_ready(hpl__crpc *r, void **users, size_t max) {
  size_t k = 0;
  pthread_mutex_lock(&r->lock);
  while (k < max && r->ready) {
    pending *p = r->ready;
    DL_DELETE2(r->ready, p, rprev, rnext);
    p->in_ready = 0;
    users[k++] = p->user;
  }
  pthread_mutex_unlock(&r->lock);
  return k;
}

int hpl__crpc_ready_waiting(hpl__crpc *r) {
  pthread_mutex_lock(&r->lock);
  int any = r->ready != NULL;
  pthread_mutex_unlock(&r->lock);
  return any;
}

void hpl__crpc_forget(hpl__crpc *r, hpl__crpc_ticket *t) {
  pthread_mutex_lock(&r->lock);
  HASH_DEL(r->pending, t);
  if (t->in_ready) DL_DELETE2(r->ready, t, rprev, rnext);
  pthread_mutex_unlock(&r->lock);
  if (t->msg.buf) hpl__crpc_drop_orphan(r, &t->msg);
  free(t);
}

int hpl__crpc_pump(hpl__crpc *r, int max_reads) {
  pthread_mutex_lock(&r->lock);
  int busy = r->broken ? HPL_ECONN : r->reading;
  if (!busy) r->reading = r->pumping = 1;
  pthread_mutex_unlock(&r->lock);
  if (busy) return busy == HPL_ECONN ? HPL_ECONN : 0;
  char why[sizeof r->why] = "";
  int rc = 0;
  /* reads that do not wait, no poll before them: a read that finds
   * nothing, or less than its buffer holds, ends the pump */
  for (int i = 0; i < max_reads && rc == 0; i++) {
    int drained = 1;
    rc = hpl__crpc_read_now(r, &drained, why, sizeof why);
    if (drained) break;
  }
  pthread_mutex_lock(&r->lock);
  r->reading = r->pumping = 0;
  if (rc == HPL_ECONN) hpl__crpc_break_locked(r, "%s", why);
  pthread_cond_broadcast(&r->cv); /* a blocked caller may take the reader role */
  rc = r->broken ? HPL_ECONN : 0;
  pthread_mutex_unlock(&r->lock);
  return rc;
}

void hpl__crpc_set_notify(hpl__crpc *r, int fd, int *written) {
  pthread_mutex_lock(&r->lock);
  r->notify_fd = fd;
  r->notify_written = written;
  pthread_mutex_unlock(&r->lock);
}

int hpl__crpc_fd(const hpl__crpc *r) { return r->fd; }
