/* uvconn.c - a framed connection's life (uvconn.h): wrapping a stream,
 * what the owner reads of it, closing it and freeing it once every handle
 * it made has closed. Reading, writing, the handshake and accepting are in
 * the other uvconn_*.c files (uvconn_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hoplite.h"
#include "log.h"
#include "uvconn_int.h"

void *hpl__conn_data(const hpl__conn *c) { return c->o.data; }
void hpl__conn_set_data(hpl__conn *c, void *data) { c->o.data = data; }
void hpl__conn_rebind(hpl__conn *c, hpl__conn_frame_cb on_frame, hpl__conn_close_cb on_close,
                      void *data) {
  c->o.on_frame = on_frame;
  c->o.on_close = on_close;
  c->o.data = data;
}
int hpl__conn_between_frames(const hpl__conn *c) {
  return !c->closing && c->hs == HPL__HS_OPEN && !c->held_by_owner && c->fr.state == 0 &&
         c->fr.hhave == 0 && c->srx_left == 0 && c->sout >= c->slen &&
         (!c->cur_msg || c->pgot == c->cur.payload_len);
}
const char *hpl__conn_label(const hpl__conn *c) { return c->label; }
uv_stream_t *hpl__conn_stream(hpl__conn *c) { return c->s; }
int hpl__conn_closing(const hpl__conn *c) { return c->closing; }
size_t hpl__conn_write_queue(const hpl__conn *c) { return c->wq_bytes; }
int hpl__conn_role(const hpl__conn *c) { return c->hs == HPL__HS_OPEN ? c->role : 0; }
const char *hpl__conn_peer_name(const hpl__conn *c) {
  return c->hs == HPL__HS_OPEN && c->role && !c->o.auth_role ? c->ahs.name : "";
}

/* One of the connection's handles closed; the last one frees it. */
void hpl__conn_handle_closed(uv_handle_t *h) {
  hpl__conn *c = h->data;
  if (h == (uv_handle_t *)c->s) {
    if (c->o.on_close) c->o.on_close(c, c->close_status);
  } else {
    free(h);
  }
  if (--c->handles > 0) return;
  hpl__conn_out_leave(c);
  hpl__conn_corks_leave(c);
  hpl__record_close(&c->rec);
  if (c->cur_msg) protobuf_c_message_free_unpacked(c->cur_msg, NULL);
  free(c->pbuf);
  free(c->rbuf);
  free(c->srec);
  hpl__framer_free(&c->fr);
  hpl__fmac_wipe(&c->tx);
  hpl__fmac_wipe(&c->rx);
  free(c->s);
  free(c);
}

hpl__conn *hpl__conn_new(uv_stream_t *s, const hpl__conn_opts *o) {
  /* aligned as its MAC states ask (hpl__fmac) */
  size_t size = (sizeof(hpl__conn) + _Alignof(hpl__conn) - 1) / _Alignof(hpl__conn) *
                _Alignof(hpl__conn);
  hpl__conn *c = aligned_alloc(_Alignof(hpl__conn), size);
  if (c) memset(c, 0, sizeof *c);
  size_t rcap = o->rbuf ? o->rbuf : HPL__CONN_RBUF;
  uint8_t *rbuf = malloc(rcap);
  if (!c || !rbuf) {
    free(c);
    free(rbuf);
    uv_close((uv_handle_t *)s, (uv_close_cb)free);
    return NULL;
  }
  c->sf_fd = -1;
  c->s = s;
  c->o = *o;
  static int cork_off = -1; /* HOPLITE_NO_CORK=1: every write at once (for comparisons) */
  if (cork_off < 0) cork_off = getenv("HOPLITE_NO_CORK") != NULL;
  if (cork_off) c->o.cork = 0;
  c->rbuf = rbuf;
  c->rcap = rcap;
  snprintf(c->label, sizeof c->label, "%s", o->label ? o->label : "conn");
  hpl__framer_init(&c->fr, &o->lim);
  s->data = c;
  c->handles = 1;
  hpl__record_open(&c->rec, c->label);
  hpl__conn_out_join(c);
  c->tagged = o->auth && o->auth->on;
  if (c->tagged) hpl__conn_hs_start(c);
  hpl__conn_read_start(c);
  return c;
}

void hpl__conn_close(hpl__conn *c, int status) {
  if (c->closing) return;
  if (c->cork) { /* a last reply goes before the close (and what was corked before it) */
    hpl__conn_flush_for(c);
    if (c->closing) return; /* the flush failed and closed it */
  }
  c->closing = 1;
  c->close_status = status;
  hpl__conn_hs_leave(c);
  if (c->reading) uv_read_stop(c->s);
  c->reading = 0;
  hpl__conn_drop_writes(c);
  hpl__conn_sendfile_close(c);
  if (c->timer) uv_close((uv_handle_t *)c->timer, hpl__conn_handle_closed);
  hpl__conn_out_close(c);
  if (c->idle) uv_close((uv_handle_t *)c->idle, hpl__conn_handle_closed);
  if (c->cork_prep) uv_close((uv_handle_t *)c->cork_prep, hpl__conn_handle_closed);
  if (c->cork_chk) uv_close((uv_handle_t *)c->cork_chk, hpl__conn_handle_closed);
  uv_close((uv_handle_t *)c->s, hpl__conn_handle_closed);
}

void hpl__conn_fail(hpl__conn *c, const char *why) {
  if (c->closing) return;
  HPL__LOG_WARN("%s: protocol error, closing connection: %s", c->label, why);
  hpl__conn_close(c, HPL_EPROTO);
}
