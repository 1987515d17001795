/* ringin.c - a ring member's incoming stream (see ring.h and ringint.h):
 * pulled from the predecessor straight into the target at each slice's
 * place, each digest unit checked against the digest the predecessor
 * made of it (fetched with rdver.c, hashed here on libuv's thread pool)
 * before it is combined, passed on in our own stream, or completes the
 * target. A unit that does not match fails this member's part (the ring
 * ends; its bytes can not be pulled again: the predecessor's stream is
 * made of slices that the allgather overwrites in place), and the
 * directory hears which unit, so it counts the predecessor as corrupt. */
#include <stdio.h>
#include <string.h>

#include "digest.h"
#include "hoplite.h"
#include "log.h"
#include "ops.h"
#include "rddig.h"
#include "ringint.h"
#include "util.h"

#define RING_READ_MAX (1u << 20) /* bytes landed per read at most (bounded work) */
#define CHECK_UNITS 32u          /* units per check job at most (4 MiB) */

static uint64_t in_len(const hpl__rg_task *g) { return g->in_at[2 * g->k - 2]; }

/* Where incoming byte `pos` is in the target, and in *n how many of the
 * wanted *n lie there contiguously (to the end of its step). */
static uint8_t *in_place(const hpl__rg_task *g, uint64_t pos, uint64_t *n) {
  uint32_t st = hpl__rg_in_step(g, pos);
  uint64_t left = g->in_at[st + 1] - pos;
  if (*n > left) *n = left;
  return g->t->data + g->seg[hpl__rg_step_slice(g, g->pred, st)] + (pos - g->in_at[st]);
}

static const uint8_t *check_at(void *arg, uint64_t pos, uint64_t *n) {
  return in_place(arg, pos, n);
}

static uint8_t *in_buf(void *arg, uint64_t off, size_t *len) {
  hpl__rg_task *g = arg;
  if (off >= in_len(g)) {
    *len = 0;
    return NULL;
  }
  uint64_t n = RING_READ_MAX;
  uint8_t *p = in_place(g, off, &n);
  *len = (size_t)n;
  return p;
}

/* Combine what is checked: the first k-1 steps are partial sums of a
 * slice (whole elements only; a split element waits for its other bytes),
 * the rest are complete slices that only move on. Then our own stream
 * goes on as far, and is done when the incoming one is. */
static void combine(hpl__rg_task *g) {
  hpl__store *s = g->s;
  uint64_t avail = g->in_ok;
  while (g->in_done < avail) {
    uint32_t st = hpl__rg_in_step(g, g->in_done);
    uint64_t end = g->in_at[st + 1] < avail ? g->in_at[st + 1] : avail;
    if (st <= g->k - 2) {
      uint64_t whole = (end - g->in_done) / g->es * g->es;
      if (whole == 0) break;
      uint64_t at = g->seg[hpl__rg_step_slice(g, g->pred, st)] + (g->in_done - g->in_at[st]);
      hpl__reduce_apply(g->op, g->dtype, g->t->data + at, g->src->data + at, (size_t)whole);
      end = g->in_done + whole;
    }
    g->in_done = end;
  }
  uint64_t ready = hpl__rg_slice_len(g, g->idx) + g->in_done;
  if (ready > g->out_len) ready = g->out_len;
  hpl__obj_progress(s, g->out, ready);
  hpl__rddig_made(s, g->out, ready); /* its digests, for our successor */
  if (g->state == HPL__RG_RUNNING && g->in_pulled && g->in_done == in_len(g))
    hpl__ring_complete(g);
}

static void check(hpl__rg_task *g);

/* A check job's verdict. */
static void checked(void *arg, uint64_t bad) {
  hpl__rg_task *g = arg;
  g->job = NULL;
  if (bad != UINT64_MAX) {
    char detail[600];
    uint64_t uoff, ulen;
    hpl__digest_unit_span(in_len(g), bad, &uoff, &ulen);
    g->s->ctr.corrupt_units++;
    snprintf(detail, sizeof detail,
             "unit %llu (bytes %llu..%llu) of ring stream '%s' from node %016llx does not match "
             "the digest its maker sent",
             (unsigned long long)bad, (unsigned long long)uoff, (unsigned long long)(uoff + ulen),
             hpl__rdver_key(g->ver),
             (unsigned long long)g->pred_node);
    hpl__ring_fail(g, HPL_ECORRUPT, detail, bad); /* frees g */
    return;
  }
  uint64_t end;
  hpl__digest_unit_span(in_len(g), g->job_u1, &end, NULL); /* (the start of the next unit) */
  g->in_ok = end;
  combine(g); /* (what is checked moves on while the next units are) */
  if (g->state == HPL__RG_RUNNING) check(g);
}

/* Incoming bytes count as far as whole units match their digests (a job
 * on the thread pool at a time); unchecked without digests. */
static void check(hpl__rg_task *g) {
  if (!g->ver || hpl__rdver_algo(g->ver) == 0) {
    g->in_ok = g->in_raw;
    combine(g);
    return;
  }
  if (g->job) return; /* its verdict checks on */
  uint64_t total = in_len(g);
  if (g->in_ok >= total) { /* all checked (in_ok is a unit boundary below that) */
    combine(g);
    return;
  }
  /* units wholly landed (the last one may be short), whose digest is here */
  uint64_t u0 = hpl__digest_unit_of(total, g->in_ok);
  uint64_t u1 = g->in_raw >= total ? hpl__digest_units(total) : hpl__digest_unit_of(total, g->in_raw);
  if (u1 > hpl__rdver_known(g->ver)) u1 = hpl__rdver_known(g->ver);
  if (u1 > u0 + CHECK_UNITS) u1 = u0 + CHECK_UNITS;
  if (u1 <= u0) {
    combine(g);
    return;
  }
  hpl__obj *keep[2] = {g->t, g->src};
  g->job = hpl__rdver_check_job(g->ver, u0, u1, check_at, keep, checked, g);
  g->job_u1 = u1;
  if (!g->job) {
    hpl__ring_fail(g, HPL_ENOMEM, "cannot check the incoming stream (out of memory)", UINT64_MAX);
    return;
  }
}

static void in_got(void *arg, uint64_t off, size_t n) {
  hpl__rg_task *g = arg;
  uint64_t now = hpl__now_ms();
  if (g->last_in_ms && now - g->last_in_ms > g->gap_ms) {
    g->gap_ms = now - g->last_in_ms;
    g->gap_at = off;
  }
  g->last_in_ms = now;
  g->in_raw = off + n;
  check(g);
}

static void in_end(void *arg, int status, const char *detail) {
  hpl__rg_task *g = arg;
  g->pull = NULL;
  if (status != 0) {
    char why[400];
    snprintf(why, sizeof why, "the stream from the ring's previous member failed: %s",
             detail && *detail ? detail : hpl_strerror(status));
    hpl__ring_fail(g, status, why, UINT64_MAX);
    return;
  }
  if (g->in_raw != in_len(g)) {
    hpl__ring_fail(g, HPL_EPROTO, "the stream from the ring's previous member ended short",
                   UINT64_MAX);
    return;
  }
  g->in_pulled = 1;
  check(g); /* complete once every unit is checked and combined */
}

static void in_suspect(void *arg, uint64_t quiet_ms) {
  hpl__rg_task *g = arg;
  if (quiet_ms >= HPL__RING_QUIET_MS) {
    char why[128];
    snprintf(why, sizeof why, "nothing from the ring's previous member for %llu ms",
             (unsigned long long)quiet_ms);
    hpl__ring_fail(g, HPL_ETIMEDOUT, why, UINT64_MAX);
    return;
  }
  hpl__puller_suspect_done(g->pull, HPL__RING_QUIET_MS - quiet_ms);
}

static void digests_more(void *arg, uint64_t first, uint64_t n) {
  (void)first, (void)n;
  check(arg);
}

static void digests_failed(void *arg, int status, const char *detail) {
  hpl__rg_task *g = arg;
  char why[500];
  snprintf(why, sizeof why, "the digests of the ring's previous member's stream cannot be had: %s",
           detail);
  hpl__ring_fail(g, status ? status : HPL_ECONN, why, UINT64_MAX);
}

int hpl__ring_in_start(hpl__rg_task *g, const char *key, char *why, size_t wlen) {
  hpl__store *s = g->s;
  if (hpl__digest_algo_on(s->cfg.integrity)) {
    hpl__rdver_ops vops = {.more = digests_more, .failed = digests_failed};
    g->ver = hpl__rdver_start(s, g->pred_addr, (int)g->pred_port, key, 1, in_len(g), 0, &vops, g);
    if (!g->ver) {
      snprintf(why, wlen, "cannot fetch the digests of the stream from %s:%u", g->pred_addr,
               g->pred_port);
      return HPL_ENOMEM;
    }
  }
  hpl__puller_ops ops = {.buf = in_buf, .got = in_got, .done = in_end, .monitor = 1,
                         .no_stall = 1, .suspect = in_suspect, .peer = g->pred_node};
  g->pull = hpl__puller_start(s, g->pred_addr, (int)g->pred_port, key, 1, 0, in_len(g), &ops, g);
  if (!g->pull) {
    snprintf(why, wlen, "cannot pull from %s:%u", g->pred_addr, g->pred_port);
    return HPL_ECONN;
  }
  return 0;
}

void hpl__ring_in_stop(hpl__rg_task *g) {
  hpl__puller_cancel(g->pull);
  g->pull = NULL;
  hpl__rdver_cancel(g->ver);
  g->ver = NULL;
  hpl__rdver_job_drop(g->job);
  g->job = NULL;
}
