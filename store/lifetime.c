/* lifetime.c - objects put with a lifetime: owned by their client, or a
 * TTL (see lifetime.h).
 *
 * Two sources of deletes feed one timer: the owned instances of sessions
 * that left (a FIFO of the sessions' lists, due at once) and a min-heap of
 * (deadline, instance) for TTLs and for deletes asked again later. The
 * timer runs at once while the FIFO has work, else at the heap's earliest
 * deadline; each run starts at most HPL__LIFETIME_BATCH deletes.
 */
#include "lifetime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "dirlink.h"
#include "hoplite.h"
#include "log.h"
#include "util.h"

#define LT_RETRY_MS 500 /* the directory did not delete what we still hold: again after */
#define LT_TRIES 40     /*   ...at most this many times (20 s) */

enum { LT_OWNED = 0, LT_TTL = 1 };

/* A session's owned instances (some may be long gone: pruned when full);
 * after the session left, a piece of the FIFO (`at`: the next to do). */
typedef struct hpl__lt_owned {
  struct hpl__lt_owned *prev, *next; /* hpl__lifetime.left (utlist), once the session left */
  size_t n, cap, at;
  uint64_t inst[];
} hpl__lt_owned;

/* Delete instance `inst` once hpl__now_ms() >= due. */
typedef struct lt_due {
  uint64_t due, inst;
  uint8_t kind, tries;
} lt_due;

/* The module's context (s->lt). */
typedef struct hpl__lifetime {
  lt_due *heap; /* min-heap by due */
  size_t n, cap;
  hpl__lt_owned *left;   /* sessions that left, oldest first (utlist) */
  uint32_t inflight;     /* DELETEs waiting for the directory */
  uv_timer_t timer;      /* the one timer: the earliest deadline, or at once */
  int live;              /* the timer is initialised */
} hpl__lifetime;

/* One DELETE out. */
typedef struct lt_req {
  uint64_t inst;
  uint8_t kind, tries;
} lt_req;

int hpl__lifetime_check(uint64_t ttl_ms, char *detail, size_t dlen) {
  if (ttl_ms <= HPL__LIFETIME_TTL_MAX_MS) return 0;
  snprintf(detail, dlen, "ttl of %llu ms is longer than the longest allowed, %llu ms (30 days)",
           (unsigned long long)ttl_ms, (unsigned long long)HPL__LIFETIME_TTL_MAX_MS);
  return HPL_EINVAL;
}

/* ------------------------------------------------------------------ the heap */

static int heap_push(hpl__lifetime *lt, uint64_t due, uint64_t inst, int kind, int tries) {
  if (lt->n == lt->cap) {
    size_t cap = lt->cap ? lt->cap * 2 : 64;
    lt_due *h = realloc(lt->heap, cap * sizeof *h);
    if (!h) return HPL_ENOMEM;
    lt->heap = h;
    lt->cap = cap;
  }
  size_t i = lt->n++;
  lt_due e = {.due = due, .inst = inst, .kind = (uint8_t)kind, .tries = (uint8_t)tries};
  while (i > 0 && lt->heap[(i - 1) / 2].due > due) {
    lt->heap[i] = lt->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  lt->heap[i] = e;
  return 0;
}

static lt_due heap_pop(hpl__lifetime *lt) {
  lt_due top = lt->heap[0], last = lt->heap[--lt->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= lt->n) break;
    if (c + 1 < lt->n && lt->heap[c + 1].due < lt->heap[c].due) c++;
    if (lt->heap[c].due >= last.due) break;
    lt->heap[i] = lt->heap[c];
    i = c;
  }
  if (lt->n) lt->heap[i] = last;
  if (lt->cap > 1024 && lt->n < lt->cap / 4) { /* give memory back after a wave */
    lt_due *h = realloc(lt->heap, (lt->cap / 2) * sizeof *h);
    if (h) {
      lt->heap = h;
      lt->cap /= 2;
    }
  }
  return top;
}

/* ------------------------------------------------------------------ deletes */

static void lt_run(uv_timer_t *t);

/* Arm the timer for what is due next (nothing while the directory has
 * HPL__LIFETIME_INFLIGHT deletes: each answer arms it again). */
static void schedule(hpl__store *s) {
  hpl__lifetime *lt = s->lt;
  if (!lt->live || s->stopping) return;
  if (lt->inflight >= HPL__LIFETIME_INFLIGHT || (!lt->left && !lt->n)) {
    uv_timer_stop(&lt->timer);
    return;
  }
  uint64_t delay = 0;
  if (!lt->left) {
    uint64_t now = hpl__now_ms(), due = lt->heap[0].due;
    delay = due > now ? due - now : 0;
  }
  uv_timer_start(&lt->timer, lt_run, delay, 0);
}

/* The object this store sealed, if it is still in the table (an instance
 * is only ever one object: one deleted, or deleted and put again, is not). */
static hpl__obj *still_here(hpl__store *s, uint64_t inst) {
  hpl__obj *o = hpl__obj_find_inst(s, inst);
  return o && o->in_table && !o->internal ? o : NULL;
}

static void delete_start(hpl__store *s, uint64_t inst, int kind, int tries);

static void delete_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  lt_req *q = arg;
  hpl__lifetime *lt = s->lt;
  lt->inflight--;
  const char *what = q->kind == LT_OWNED ? "owned" : "ttl";
  if (rep->status == 0) {
    if (q->kind == LT_OWNED)
      s->ctr.owned_deletes++;
    else
      s->ctr.ttl_deletes++;
  } else if (rep->status != HPL_ECANCELED && !s->stopping) {
    /* The directory's DROP for our copy comes before its answer: a copy
     * still here means the directory did not know the object (it restarted
     * and has not taken our re-report yet) or could not delete it now. */
    hpl__obj *o = still_here(s, q->inst);
    if (o && q->tries + 1 < LT_TRIES) {
      if (heap_push(lt, hpl__now_ms() + LT_RETRY_MS, q->inst, q->kind, q->tries + 1) != 0)
        HPL__LOG_WARN("%s delete of '%s': out of memory; the object stays", what, o->id);
    } else if (o) {
      HPL__LOG_WARN("%s delete of '%s' failed %d times (%s: %s); the object stays", what, o->id,
                    LT_TRIES, hpl_strerror(rep->status), rep->detail);
    }
  }
  free(q);
  schedule(s);
}

/* Ask the directory to delete the object (if it is still here): it drops
 * every copy, ours included, before it answers. */
static void delete_start(hpl__store *s, uint64_t inst, int kind, int tries) {
  hpl__obj *o = still_here(s, inst);
  if (!o) return; /* deleted by someone else meanwhile (or never sealed) */
  lt_req *q = malloc(sizeof *q);
  Hplpb__IdReq r = HPLPB__ID_REQ__INIT;
  r.id = o->id;
  r.timeout_ms = -1;
  if (q) *q = (lt_req){.inst = inst, .kind = (uint8_t)kind, .tries = (uint8_t)tries};
  if (!q || hpl__dirlink_request(s, HPL__MSG_DELETE, &r.base, NULL, 0, -1, delete_reply, q) != 0) {
    free(q);
    if (heap_push(s->lt, hpl__now_ms() + LT_RETRY_MS, inst, kind, tries) != 0)
      HPL__LOG_WARN("delete of '%s': out of memory; the object stays", o->id);
    return;
  }
  s->lt->inflight++;
  HPL__LOG_DEBUG("deleting '%s' (%s)", o->id, kind == LT_OWNED ? "its owner left" : "ttl over");
}

/* Start what is due: owned objects of sessions that left first, then
 * expired deadlines; at most HPL__LIFETIME_BATCH per run. */
static void lt_run(uv_timer_t *t) {
  hpl__store *s = t->data;
  hpl__lifetime *lt = s->lt;
  if (s->stopping) return;
  uint64_t now = hpl__now_ms();
  for (int budget = HPL__LIFETIME_BATCH; budget > 0 && lt->inflight < HPL__LIFETIME_INFLIGHT;
       budget--) {
    if (lt->left) {
      hpl__lt_owned *w = lt->left;
      uint64_t inst = w->inst[w->at++];
      if (w->at == w->n) {
        DL_DELETE(lt->left, w);
        free(w);
      }
      delete_start(s, inst, LT_OWNED, 0);
    } else if (lt->n && lt->heap[0].due <= now) {
      lt_due e = heap_pop(lt);
      delete_start(s, e.inst, e.kind, e.tries);
    } else {
      break;
    }
  }
  schedule(s);
}

/* ------------------------------------------------------------------ owners and TTLs */

/* Remember that the session owns instance `inst`. A full list first drops
 * what is gone; it grows only if more than half is still here. */
static int owned_add(hpl__store *s, hpl__stclient *cl, uint64_t inst) {
  hpl__lt_owned *w = cl->owned;
  if (w && w->n == w->cap) {
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++)
      if (still_here(s, w->inst[i])) w->inst[k++] = w->inst[i];
    w->n = k;
  }
  if (!w || w->n > w->cap / 2) {
    size_t cap = w ? w->cap * 2 : 16;
    hpl__lt_owned *g = realloc(w, sizeof *g + cap * sizeof g->inst[0]);
    if (!g) return HPL_ENOMEM;
    if (!w) g->n = 0;
    g->cap = cap;
    g->prev = g->next = NULL;
    g->at = 0;
    cl->owned = w = g;
  }
  w->inst[w->n++] = inst;
  return 0;
}

void hpl__lifetime_sealed(hpl__store *s, hpl__stclient *cl, hpl__obj *o, int owned,
                          uint64_t ttl_ms) {
  hpl__lifetime *lt = s->lt;
  if (!lt || s->stopping) return;
  uint64_t now = hpl__now_ms();
  int rc = 0;
  if (ttl_ms) rc = heap_push(lt, now + ttl_ms, o->inst, LT_TTL, 0);
  if (owned && rc == 0)
    rc = cl->closed ? heap_push(lt, now, o->inst, LT_OWNED, 0) /* it left already */
                    : owned_add(s, cl, o->inst);
  if (rc) HPL__LOG_WARN("out of memory noting the lifetime of '%s': it stays until deleted", o->id);
  schedule(s);
}

void hpl__lifetime_client_gone(hpl__store *s, hpl__stclient *cl) {
  hpl__lt_owned *w = cl->owned;
  cl->owned = NULL;
  if (!w) return;
  hpl__lifetime *lt = s->lt;
  if (!lt || s->stopping || w->n == 0) {
    free(w);
    return;
  }
  HPL__LOG_DEBUG("client %llu left: deleting the objects it owned (%zu put)",
           (unsigned long long)cl->id, w->n);
  w->at = 0;
  DL_APPEND(lt->left, w);
  schedule(s);
}

/* ------------------------------------------------------------------ life */

int hpl__lifetime_init(hpl__store *s) {
  s->lt = calloc(1, sizeof *s->lt);
  if (!s->lt) return HPL_ENOMEM;
  if (uv_timer_init(s->loop, &s->lt->timer) != 0) return HPL_ESYS;
  s->lt->timer.data = s;
  s->lt->live = 1;
  return 0;
}

void hpl__lifetime_stop(hpl__store *s) {
  if (!s->lt) return;
  if (s->lt->live) uv_close((uv_handle_t *)&s->lt->timer, NULL);
  s->lt->live = 0;
}

void hpl__lifetime_free(hpl__store *s) {
  hpl__lifetime *lt = s->lt;
  if (!lt) return;
  hpl__lt_owned *w, *tmp;
  DL_FOREACH_SAFE(lt->left, w, tmp) {
    DL_DELETE(lt->left, w);
    free(w);
  }
  free(lt->heap);
  free(lt);
  s->lt = NULL;
}
