/* xlog.c - the transfer record, a ring of the latest events (see xlog.h). */
#include "xlog.h"

#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "util.h"

#define DIR_XFER_CAP 65536

/* One entry of the record. */
typedef struct dir_xfer {
  uint64_t seq, t_us;
  int kind;
  char *id;
  uint64_t receiver, sender;
} dir_xfer;

/* The module's state (hpl__dir_server.xlog): the ring and how many entries
 * were ever recorded. */
struct hpl__dir_xlog_ring {
  uint64_t seq;
  dir_xfer v[DIR_XFER_CAP];
};

int hpl__dir_xlog_init(hpl__dir_server *s) {
  s->xlog = calloc(1, sizeof *s->xlog);
  return s->xlog ? 0 : HPL_ENOMEM;
}

void hpl__dir_xlog_free(hpl__dir_server *s) {
  for (size_t i = 0; s->xlog && i < DIR_XFER_CAP; i++) free(s->xlog->v[i].id);
  free(s->xlog);
  s->xlog = NULL;
}

void hpl__dir_xlog(hpl__dir_server *s, int kind, const char *id, uint64_t receiver,
                   uint64_t sender) {
  if (!s->xlog) return;
  dir_xfer *x = &s->xlog->v[s->xlog->seq % DIR_XFER_CAP];
  free(x->id);
  x->seq = s->xlog->seq++;
  x->t_us = hpl__now_ns() / 1000;
  x->kind = kind;
  x->id = strdup(id ? id : ""); /* NULL (no memory) is sent as "" */
  x->receiver = receiver;
  x->sender = sender;
}

void hpl__dir_xlog_on_transfers(hpl__dir_server *s, const hpl__dir_frame *f) {
  enum { MAX_ENTRIES = 40000 };
  Hplpb__TransfersReq *m = (Hplpb__TransfersReq *)f->msg;
  uint64_t first = s->xlog->seq > DIR_XFER_CAP ? s->xlog->seq - DIR_XFER_CAP : 0;
  uint64_t from = m->since < first ? first : m->since;
  size_t n = from < s->xlog->seq ? (size_t)(s->xlog->seq - from) : 0;
  if (n > MAX_ENTRIES) n = MAX_ENTRIES;
  Hplpb__Transfer *ts = calloc(n ? n : 1, sizeof *ts);
  Hplpb__Transfer **ps = calloc(n ? n : 1, sizeof *ps);
  if (!ts || !ps) {
    free(ts);
    free(ps);
    hpl__conn_reply(f->dc->c, f->req, HPL_ENOMEM, "out of memory");
    return;
  }
  for (size_t i = 0; i < n; i++) {
    dir_xfer *x = &s->xlog->v[(from + i) % DIR_XFER_CAP];
    hplpb__transfer__init(&ts[i]);
    ts[i].seq = x->seq;
    ts[i].t_us = x->t_us;
    ts[i].kind = (uint32_t)x->kind;
    ts[i].id = x->id ? x->id : ""; /* NULL: no memory to record it */
    ts[i].receiver = x->receiver;
    ts[i].sender = x->sender;
    ps[i] = &ts[i];
  }
  Hplpb__TransfersRep r = HPLPB__TRANSFERS_REP__INIT;
  r.n_transfers = n;
  r.transfers = ps;
  r.next = from + n;
  if (from > m->since) r.detail = "older entries were overwritten";
  hpl__conn_send(f->dc->c, HPL__MSG_TRANSFERS_REP, f->req, &r.base, NULL, 0, 0, NULL, NULL);
  free(ts);
  free(ps);
}
