/* dlprobe.c - with standby directories, a directory that has gone silent
 * may have lost its lease (its host cut off): is another one leading
 * already? Only a leader listens, so a connection another address accepts
 * says so, long before the silent one's heartbeat times out (three
 * intervals). The link then moves there at once (see dlint.h). A probe
 * that meets a standby costs one refused connection. */
#include <stdlib.h>

#include "dlint.h"
#include "hoplite.h"
#include "log.h"
#include "util.h"

struct hpl__dlprobe {
  hpl__dirlink *dl; /* NULL once cancelled: the callbacks only free */
  int idx;          /* which of cfg.dir_hosts is tried */
  uv_getaddrinfo_t gai;
  uv_connect_t creq;
  uv_tcp_t tcp;
  int tcp_open; /* initialised; its close frees the probe */
  int closing;  /* uv_close called: only probe_closed frees */
  uint64_t started_ms;
};

static void probe_closed(uv_handle_t *h) { free(h->data); }

/* The probe is over: its socket closed (which frees it), or freed now. A
 * probe whose socket is closing already waits for that. */
static void probe_end(hpl__dlprobe *p) {
  if (p->dl && p->dl->probe == p) p->dl->probe = NULL;
  p->dl = NULL;
  if (p->closing) return;
  if (p->tcp_open) {
    p->closing = 1;
    p->tcp.data = p;
    uv_close((uv_handle_t *)&p->tcp, probe_closed);
  } else {
    free(p);
  }
}

static void on_connect(uv_connect_t *req, int status) {
  hpl__dlprobe *p = req->data;
  hpl__dirlink *dl = p->dl;
  if (dl && status == 0 && dl->state == HPL__DL_READY && dl->c) {
    hpl__store_config *c = &dl->s->cfg;
    HPL__LOG_WARN("the directory %s:%d is silent and %s:%d accepts connections: a new leader; "
                  "moving to it",
                  c->dir_host, c->dir_port, c->dir_hosts[p->idx], c->dir_ports[p->idx]);
    dl->s->ctr.dir_probe_moves++;
    /* the reconnect goes to the next address after dir_idx: this one */
    dl->dir_idx = (p->idx + c->ndirs - 1) % c->ndirs;
    hpl__conn_close(dl->c, HPL_ETIMEDOUT);
  }
  probe_end(p);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
  hpl__dlprobe *p = g->data;
  if (!p->dl || status < 0 || !res) {
    if (res) uv_freeaddrinfo(res);
    probe_end(p);
    return;
  }
  uv_tcp_init(p->dl->s->loop, &p->tcp);
  p->tcp_open = 1;
  p->creq.data = p;
  int rc = uv_tcp_connect(&p->creq, &p->tcp, res->ai_addr, on_connect);
  uv_freeaddrinfo(res);
  if (rc) probe_end(p);
}

/* Cancel the probe under way (a connect to a host that does not answer
 * would take the kernel a minute or more). */
static void probe_cancel(hpl__dirlink *dl) {
  hpl__dlprobe *p = dl->probe;
  if (!p) return;
  dl->probe = NULL;
  p->dl = NULL;
  if (!p->tcp_open) { /* resolving: its callback frees it (UV_ECANCELED, or the result) */
    uv_cancel((uv_req_t *)&p->gai);
    return;
  }
  probe_end(p); /* a connect under way ends with UV_ECANCELED, then the close frees */
}

static void probe_tick(uv_timer_t *t) {
  hpl__dirlink *dl = t->data;
  hpl__store_config *c = &dl->s->cfg;
  uint64_t hb = dl->probe_hb_ms, now_ns = hpl__now_ns(), now = now_ns / 1000000;
  if (dl->probe && now - dl->probe->started_ms > hb) probe_cancel(dl); /* unanswered */
  /* silent: a heartbeat unanswered for a fifth of an interval (a directory
   * answers in well under a millisecond), or nothing heard for an interval
   * and a fifth. Asking too early costs a refused connection: only a
   * leader listens, and there is another leader only once this one lost
   * its lease. */
  int unanswered = dl->hb_sent_ns >= (dl->last_heard_ms + 1) * 1000000 && /* (ms steps) */
                   now_ns - dl->hb_sent_ns > hb / 5 * 1000000;
  if (c->ndirs < 2 || dl->stopping || dl->probe || dl->state != HPL__DL_READY ||
      (!unanswered && now - dl->last_heard_ms <= hb + hb / 5))
    return;
  hpl__dlprobe *p = calloc(1, sizeof *p);
  if (!p) return;
  dl->probe_next = (dl->probe_next + 1) % c->ndirs;
  if (dl->probe_next == dl->dir_idx) dl->probe_next = (dl->probe_next + 1) % c->ndirs;
  p->dl = dl;
  p->started_ms = now;
  p->idx = dl->probe_next;
  p->gai.data = p;
  dl->probe = p;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  char port[16];
  snprintf(port, sizeof port, "%d", c->dir_ports[p->idx]);
  HPL__LOG_DEBUG("the directory is silent: is %s:%d leading?", c->dir_hosts[p->idx],
                 c->dir_ports[p->idx]);
  if (uv_getaddrinfo(dl->s->loop, &p->gai, on_resolved, c->dir_hosts[p->idx], port, &hints))
    probe_end(p);
}

void hpl__dirlink_probe_init(hpl__dirlink *dl) {
  uv_timer_init(dl->s->loop, &dl->probe_t);
  dl->probe_t.data = dl;
}

void hpl__dirlink_probe_arm(hpl__dirlink *dl, uint64_t interval_ms) {
  if (dl->s->cfg.ndirs < 2 || dl->stopping) return;
  dl->probe_hb_ms = interval_ms;
  uint64_t every = interval_ms / 5 ? interval_ms / 5 : 1;
  uv_timer_start(&dl->probe_t, probe_tick, every, every);
}

void hpl__dirlink_probe_close(hpl__dirlink *dl) {
  uv_close((uv_handle_t *)&dl->probe_t, NULL);
}

void hpl__dirlink_probe_stop(hpl__dirlink *dl) {
  if (!uv_is_closing((uv_handle_t *)&dl->probe_t)) uv_timer_stop(&dl->probe_t);
  probe_cancel(dl);
}
