/* dpsend.c - a stream's bytes to its connection (dpint.h): at most
 * SENDER_MAX_INFLIGHT chunks of up to cfg.chunk bytes in flight, straight
 * from the pool (with sendfile when the store may) or from a stream's
 * source, as far as the copy has arrived; the fault points' budget and
 * corrupted chunks on the way (dpfault.c). Part of dataport.c's module.
 */
#include <stdlib.h>

#include "dpint.h"
#include "faults.h"
#include "hoplite.h"
#include "log.h"
#include "uvconn.h"

#define SENDER_MAX_INFLIGHT 2

void hpl__dataport_write_done(hpl__conn *c, int status, void *arg) {
  (void)c;
  hpl__sender *sd = arg;
  sd->inflight--;
  if (status) return; /* the connection is closing; on_close cleans up */
  hpl__dataport_pump(sd);
}

uv_timer_t *hpl__dataport_timer(hpl__sender *sd) {
  if (!sd->timer && (sd->timer = malloc(sizeof *sd->timer))) {
    uv_timer_init(sd->s->loop, sd->timer);
    sd->timer->data = sd;
  }
  return sd->timer;
}

/* The stream's PULL_REP: alone (n == 0), or with the first chunk src[0, n)
 * in one write (hpl__conn_send_lead; returns as hpl__conn_write_now). */
static int send_reply(hpl__sender *sd, const uint8_t *src, uint64_t n) {
  sd->head_due = 0;
  Hplpb__PullRep r = HPLPB__PULL_REP__INIT;
  r.size = sd->obj->size;
  uint64_t plen = sd->end - sd->pos;
  return n ? hpl__conn_send_lead(sd->c, HPL__MSG_PULL_REP, sd->req_id, &r.base, plen, src,
                                 (size_t)n, hpl__dataport_write_done, sd)
           : hpl__conn_send(sd->c, HPL__MSG_PULL_REP, sd->req_id, &r.base, NULL, plen, 0, NULL,
                            NULL);
}

int hpl__dataport_send_head(hpl__sender *sd) { return sd->head_due ? send_reply(sd, NULL, 0) : 0; }

/* Send as much of the object as has arrived, within the in-flight budget. */
void hpl__dataport_pump(hpl__sender *sd) {
  hpl__obj *o = sd->obj;
  if (!o || sd->fs || hpl__conn_closing(sd->c)) return;
  hpl__store *s = sd->s;
  if (o->gen != sd->gen) { /* the bytes restarted: this stream is void */
    hpl__conn_close(sd->c, HPL_ECANCELED);
    return;
  }
  /* the reply goes at once unless a plain write of the first chunk can
   * carry it now */
  if (sd->head_due && (sd->pos >= o->progress || sd->faulty || s->cfg.sendfile) &&
      hpl__dataport_send_head(sd) != 0)
    return;
  while (sd->inflight < SENDER_MAX_INFLIGHT && sd->pos < o->progress) {
    uint64_t n = o->progress - sd->pos;
    if (n > s->cfg.chunk) n = s->cfg.chunk;
    if (sd->faulty && (n = hpl__dataport_fault_budget(sd, n)) == 0) return;
    /* a stream's source may keep its bytes elsewhere (pieces of a ring's
     * target and source) */
    const uint8_t *src = o->source && o->source->bytes_at
                             ? o->source->bytes_at(o->source, o, sd->pos, &n)
                             : o->data + sd->pos;
    if (!src) {
      hpl__conn_close(sd->c, HPL_ECANCELED);
      return;
    }
    /* from the pool's memfd without a copy when the socket allows. One
     * request at a time then: a sendfile waits until nothing else is
     * queued, and one that waits for room keeps the socket full anyway */
    int bad = sd->faulty && n > 0 && s->cfg.faults.corrupt_send &&
              hpl__faults_corrupt_next(&s->cfg.faults, &sd->corrupted);
    int use_sf = s->cfg.sendfile && o->size && !bad;
    if (use_sf && sd->inflight > 0) break;
    uint64_t foff = 0, avail = 0; /* the pool is a row of memfds: one at a time */
    int pfd = use_sf ? hpl__pool_fd_at(s->pool, (uint64_t)(src - hpl__pool_base(s->pool)), &foff,
                                       &avail)
                     : -1;
    if (pfd >= 0 && n > avail) n = avail;
    int rc = pfd >= 0 ? hpl__conn_sendfile(sd->c, pfd, foff, (size_t)n,
                                           hpl__dataport_write_done, sd)
                      : 1;
    if (rc < 0) return;
    /* the stream's last chunk may end at once (a small copy is one chunk):
     * nothing follows it, so the turn is not held by more writes */
    int went = 0; /* every byte went now: no callback comes */
    if (rc == 1 && bad) {
      if (hpl__dataport_write_corrupted(sd, src, (size_t)n) != 0) return;
    } else if (rc == 1) {
      /* (a source with nothing contiguous here has no chunk to carry it) */
      if (!n && hpl__dataport_send_head(sd) != 0) return;
      int wr = sd->head_due ? send_reply(sd, src, n)
               : sd->pos + n >= sd->end
                   ? hpl__conn_write_now(sd->c, src, (size_t)n, hpl__dataport_write_done, sd)
                   : hpl__conn_write(sd->c, src, (size_t)n, hpl__dataport_write_done, sd);
      if (wr < 0) return;
      went = wr == 2;
    }
    sd->pos += n;
    s->ctr.data_bytes_sent += n;
    if (rc == 2) s->ctr.sendfile_bytes += n;
    if (sd->faulty) hpl__faults_sent(&s->cfg.faults, n);
    if (rc == 2 || went) continue; /* all went now */
    sd->inflight++;
    if (rc == 0) {
      s->ctr.sendfile_bytes += n;
      break; /* the socket is full: more when it has room */
    }
  }
  if (sd->pos < sd->end) {
    if (sd->pos >= o->progress) { /* (past it: a pull beyond a resumed stream's start) */
      if (!o->in_table && o->state != HPL__OBJ_SEALED) {
        /* our partial copy was abandoned: the receiver must go elsewhere */
        HPL__LOG_INFO("stopping the stream of '%s' at %llu bytes: copy abandoned", o->id,
                      (unsigned long long)sd->pos);
        hpl__conn_close(sd->c, HPL_ECANCELED);
        return;
      }
      hpl__obj_watch(o, &sd->watch);
    }
    return;
  }
  if (sd->inflight == 0) {
    s->ctr.pulls_served++;
    HPL__LOG_DEBUG("served '%s' [%llu, %llu) to %016llx", o->id, (unsigned long long)sd->offset,
                   (unsigned long long)sd->end, (unsigned long long)sd->peer);
    hpl__dataport_stream_end(sd);
  }
}

