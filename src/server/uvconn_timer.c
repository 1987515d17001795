/* uvconn_timer.c - a framed connection's time limits (uvconn.h): the
 * handshake must end within HPL__AUTH_TIMEOUT_MS, and a frame that has
 * begun must arrive whole within HPL__CONN_FRAME_TIMEOUT_MS (a streamed
 * payload is its owner's to watch); either closes the connection with
 * HPL_ETIMEDOUT. One timer per connection, made on first use. */
#include <stdio.h>
#include <stdlib.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"
#include "uvconn_int.h"

static void conn_timer_fired(uv_timer_t *t) {
  hpl__conn *c = t->data;
  if (c->closing) return;
  uint64_t now = hpl__now_ms();
  if (c->hs != HPL__HS_OPEN) {
    char why[64];
    snprintf(why, sizeof why, "no handshake within %d ms", HPL__AUTH_TIMEOUT_MS);
    hpl__conn_hs_failed(c, why);
    hpl__conn_close(c, HPL_ETIMEDOUT);
    return;
  }
  if (!c->frame_since_ms) return;
  if (now - c->frame_since_ms >= HPL__CONN_FRAME_TIMEOUT_MS) {
    HPL__LOG_WARN("%s: a frame has been arriving for %llu ms: closing (peer too slow)", c->label,
                  (unsigned long long)(now - c->frame_since_ms));
    hpl__conn_close(c, HPL_ETIMEDOUT);
    return;
  }
  uv_timer_start(t, conn_timer_fired, c->frame_since_ms + HPL__CONN_FRAME_TIMEOUT_MS - now, 0);
}

void hpl__conn_timer_arm(hpl__conn *c, uint64_t ms) {
  if (!c->timer) {
    if (!(c->timer = malloc(sizeof *c->timer))) return;
    uv_timer_init(c->s->loop, c->timer);
    c->timer->data = c;
    c->handles++;
  }
  uv_timer_start(c->timer, conn_timer_fired, ms, 0);
}

/* After reading: a frame that has begun and not ended must end within
 * HPL__CONN_FRAME_TIMEOUT_MS (a streamed payload is its owner's to watch). */
void hpl__conn_track_frame(hpl__conn *c) {
  int mid = c->fr.state != 0 || c->fr.hhave > 0;
  if (!mid || (c->o.stream_payloads && c->have_sink)) {
    c->frame_since_ms = 0;
    return;
  }
  if (c->frame_since_ms) return;
  c->frame_since_ms = hpl__now_ms();
  hpl__conn_timer_arm(c, HPL__CONN_FRAME_TIMEOUT_MS);
}
