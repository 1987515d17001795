/* pullslot.c - inbound slots: copies of 32 KiB to 4 MiB are pulled a few at
 * a time (cfg.inbound_pulls), in ring order of their senders, so senders
 * converging on this node's link do not overflow its queue.
 *
 * A copy that needs a slot is queued; free slots are filled at the end of
 * the loop turn that queued it (admit_soon) or as slots fall free
 * (hpl__pullslot_admit). While no slot is held, the first fill waits up
 * to cfg.fill_hold_ms for the answers still due to the fetches asked with
 * the queued copies (the first fill's hold). design.md ("Many copies into
 * one node") says why each rule is there.
 */
#include <utlist.h>

#include "log.h"
#include "pullint.h"
#include "trace.h"
#include "util.h"

/* A copy's pull with between these much left to come takes an inbound
 * slot (cfg.inbound_pulls). Smaller ones are about one initial TCP window.
 * Copies of 64 KiB did not take one at first (the limit began at 256 KiB),
 * but seven of them at once kept a receiver's inbound queue full for the
 * whole shuffle, and every PULL other hosts sent it waited behind them
 * (8-host 64 KiB shuffle at 200 Mbit/s: 27.0-32.8 ms with slots,
 * 36.5-38.9 without). Larger ones never wait: their streams are long
 * enough for fast retransmit to repair what a crowded queue drops, and
 * while one of them waits out a timeout the others keep the link busy
 * (measured on the 8-host shuffle: at 16 MiB, 2 slots made it 1.4x slower
 * than no limit; at 1 MiB they made it 1.7x faster). */
#define PULL_BIG (32u << 10)
#define PULL_LONG (4u << 20)

#define SLOT_QUIET_MS 40 /* a large copy quiet this long lends its slot */

static void admit_soon(uv_check_t *h);

/* The pull's one change of inbound slot state, logged. */
static void slot_set(hpl__puller *p, hpl__pull_slot to) {
  static const char *const name[] = {"none", "waiting", "held", "lent"};
  if (p->slot == to) return;
  HPL__LOG_DEBUG("%s '%s': inbound slot %s -> %s", p->label, p->key, name[p->slot], name[to]);
  p->slot = to;
}

/* Fill free slots at the end of this loop turn (once). */
static void admit_at_turn_end(hpl__pullers *ps) {
  if (ps->admit_open && !uv_is_active((uv_handle_t *)&ps->admit))
    uv_check_start(&ps->admit, admit_soon);
}

int hpl__pullslot_enter(hpl__puller *p) {
  hpl__store *s = p->s;
  hpl__pullers *ps = s->pullers;
  unsigned cap = s->cfg.inbound_pulls;
  /* a copy (reduce and ring streams are parts of schedules others wait
   * on: never held back) */
  uint64_t left = p->size > p->start ? p->size - p->start : 0;
  if (!p->into || !p->into_progress || p->internal || left < PULL_BIG || left >= PULL_LONG)
    return 0;
  if (!cap) { /* no limit: it holds one at once */
    slot_set(p, HPL__SLOT_HELD);
    ps->slots_held++;
    return 0;
  }
  slot_set(p, HPL__SLOT_WAITING); /* queued even if a slot is free: see admit_soon */
  DL_APPEND2(ps->queued, p, qprev, qnext);
  hpl__trace("s.pullq", p->key);
  if (ps->slots_held < cap) admit_at_turn_end(ps);
  return 1;
}

int hpl__pullslot_leave(hpl__puller *p) {
  hpl__pullers *ps = p->s->pullers;
  int freed = p->slot == HPL__SLOT_HELD;
  if (p->slot == HPL__SLOT_WAITING) DL_DELETE2(ps->queued, p, qprev, qnext);
  if (freed) ps->slots_held--;
  slot_set(p, HPL__SLOT_NONE);
  return freed;
}

/* A slot fell free: the queued large copy whose sender's node id follows
 * ours most closely (ids taken as a ring) takes it. Every receiver going
 * round the ring from itself is what pairwise exchange does: when many
 * nodes fetch from each other at once, each sender has about as many
 * receivers as slots, instead of the ones everybody asks first being
 * swamped. A sender of unknown id comes last. */
void hpl__pullslot_admit(hpl__store *s) {
  hpl__pullers *ps = s->pullers;
  unsigned cap = s->cfg.inbound_pulls;
  while (ps->queued && (cap == 0 || ps->slots_held < cap)) {
    hpl__puller *p = NULL, *q;
    uint64_t best = UINT64_MAX;
    for (q = ps->queued; q; q = q->qnext) {
      uint64_t dist = q->ops.peer ? q->ops.peer - s->node_id : UINT64_MAX;
      if (!p || dist < best) {
        p = q;
        best = dist;
      }
    }
    DL_DELETE2(ps->queued, p, qprev, qnext);
    slot_set(p, HPL__SLOT_HELD);
    ps->slots_held++;
    hpl__puller_begin(p, 1);
  }
  for (hpl__puller *q = ps->queued; q; q = q->qnext)
    if (!q->waited) { /* passed over: it waits its turn */
      q->waited = 1;
      s->ctr.pulls_queued++;
    }
}

/* The first fill is held while the hold's timer runs. */
static int holding(hpl__pullers *ps) {
  return uv_is_active((uv_handle_t *)&ps->hold_timer);
}

static void hold_over(uv_timer_t *t) {
  hpl__store *s = t->data;
  hpl__trace("s.pullhold_end", "timer");
  hpl__pullslot_admit(s);
}

/* The first fill's hold: no slot is held, and a queued copy's ask round
 * still has fetches waiting for their first answer. When the gets of a
 * shuffle go out before the partitions are put, the answers come as the
 * makers put, and the first maker to put would take the first slots of
 * every receiver (measured on the 8-host 1 MiB shuffle at 200 Mbit/s: one
 * sender had five receivers while another had none; 0.42-0.47 s against
 * 0.35 s with the gets sent after the puts). Waiting for the round's
 * answers lets the ring order choose among all its senders. The hold ends
 * when they are in, or after cfg.fill_hold_ms. Returns 1 if it holds. */
static int hold_first_fill(hpl__store *s) {
  hpl__pullers *ps = s->pullers;
  if (!s->cfg.fill_hold_ms || ps->slots_held || !ps->round_asking) return 0;
  hpl__puller *q = ps->queued;
  while (q && q->ops.round != ps->round) q = q->qnext;
  if (!q) return 0;
  s->ctr.pull_fill_holds++;
  hpl__trace("s.pullhold", q->key);
  uv_timer_start(&ps->hold_timer, hold_over, s->cfg.fill_hold_ms, 0);
  return 1;
}

/* Free slots are filled once the loop turn that made the copies is over
 * (a check handle runs after the turn's I/O callbacks): a get of many
 * objects has all its directory answers in by then, so the first copies
 * to go are the ring's nearest too, not the first answered (which for
 * every receiver alike would be the lowest node ids: measured on the
 * 8-host 1 MiB shuffle, nodes 0 and 1 served all seven receivers for
 * ~55 ms while the other six links idled). */
static void admit_soon(uv_check_t *h) {
  hpl__store *s = h->data;
  uv_check_stop(h);
  /* held: its end fills them. A hold that was cut is not taken again:
   * its round has no fetch asking, or a newer round has no copy queued */
  if (holding(s->pullers) || hold_first_fill(s)) return;
  hpl__pullslot_admit(s);
}

void hpl__puller_asking(hpl__store *s, uint64_t round, unsigned asking) {
  hpl__pullers *ps = s->pullers;
  if (!ps) return;
  int other = round != ps->round;
  ps->round = round;
  ps->round_asking = asking;
  if (!holding(ps) || (asking && !other)) return;
  /* the held round's answers are in (or a new round began: the held one's
   * are no longer counted): fill once this turn's copies are queued */
  uv_timer_stop(&ps->hold_timer);
  hpl__trace("s.pullhold_end", "answered");
  admit_at_turn_end(ps);
}

void hpl__puller_slot_check(hpl__puller *p, uint64_t now) {
  if (p->slot != HPL__SLOT_HELD || now - p->last_move_ms < SLOT_QUIET_MS) return;
  slot_set(p, HPL__SLOT_LENT);
  p->s->pullers->slots_held--;
  p->s->ctr.pull_slots_lent++;
  hpl__pullslot_admit(p->s);
}

void hpl__pullslot_init(hpl__store *s) {
  hpl__pullers *ps = s->pullers;
  uv_check_init(s->loop, &ps->admit);
  ps->admit.data = s;
  uv_timer_init(s->loop, &ps->hold_timer);
  ps->hold_timer.data = s;
  ps->admit_open = 1;
}

void hpl__pullslot_stop(hpl__store *s) {
  hpl__pullers *ps = s->pullers;
  if (!ps->admit_open) return;
  ps->admit_open = 0;
  uv_close((uv_handle_t *)&ps->admit, NULL);
  uv_close((uv_handle_t *)&ps->hold_timer, NULL);
}
