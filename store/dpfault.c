/* dpfault.c - fault points on the data port's outgoing streams (see
 * dpint.h): how much of a faulty stream may go now (faults.c decides: all,
 * a paced share, nothing while stalled, or a cut), and chunks sent with a
 * byte flipped (corrupt_send). Only dataport.c calls it. */
#include <stdlib.h>
#include <string.h>

#include "dpint.h"
#include "faults.h"
#include "hoplite.h"
#include "log.h"
#include "util.h"

static void pace_fired(uv_timer_t *t) { hpl__dataport_pump(t->data); }

uint64_t hpl__dataport_fault_budget(hpl__sender *sd, uint64_t want) {
  hpl__store *s = sd->s;
  int action;
  uint64_t n = hpl__faults_budget(&s->cfg.faults, sd->obj->id, sd->pos - sd->offset,
                                  hpl__now_ms() - sd->started_ms, sd->inflight, &sd->stalled,
                                  &sd->slow_from_ms, want, &action);
  if (action == HPL__FAULT_CUT) {
    hpl__conn_close(sd->c, HPL_ECONN);
  } else if (action == HPL__FAULT_PACE && hpl__dataport_timer(sd)) {
    uv_timer_start(sd->timer, pace_fired, 10, 0);
  }
  return n;
}

/* Fault point corrupt_send: a chunk written from a copy with its middle
 * byte flipped (the object's own bytes stay as they are). */
typedef struct bad_chunk {
  hpl__sender *sd;
  uint8_t bytes[];
} bad_chunk;

static void bad_chunk_done(hpl__conn *c, int status, void *arg) {
  bad_chunk *b = arg;
  hpl__sender *sd = b->sd;
  free(b);
  hpl__dataport_write_done(c, status, sd);
}

int hpl__dataport_write_corrupted(hpl__sender *sd, const uint8_t *src, size_t n) {
  bad_chunk *b = malloc(sizeof *b + n);
  if (!b) return -1;
  b->sd = sd;
  memcpy(b->bytes, src, n);
  b->bytes[n / 2] ^= 0x5a;
  HPL__LOG_WARN("fault corrupt_send: '%s' byte %llu flipped on its way to %016llx", sd->obj->id,
                (unsigned long long)(sd->pos + n / 2), (unsigned long long)sd->peer);
  if (hpl__conn_write(sd->c, b->bytes, n, bad_chunk_done, b) != 0) {
    free(b);
    return -1;
  }
  return 0;
}
