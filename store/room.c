/* room.c - waiting for room in the pool, and letting idle copies go to
 * make it (see room.h). */
#include "room.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "dataport.h"
#include "dirlink.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "spill.h"
#include "util.h"

#define ROOM_SCAN 4096       /* idle objects looked at per run, at most */
#define ROOM_EVICT_BATCH 256 /* ids per EVICT (the directory takes up to 1024) */
#define ROOM_EVICT_ASKS 4    /* EVICT requests out at once, at most */
#define ROOM_KEEP_S 5        /* a copy the directory kept is not offered again for this long */
#define ROOM_EVICT_TIMEOUT_MS 10000

/* The module's context (s->rooms). */
typedef struct hpl__rooms {
  hpl__room *queue;          /* waiting for room, in arrival order (utlist) */
  uv_timer_t timer;        /* runs the queue: at once after a change, else at the next
                              deadline */
  int live;                    /* the timer is initialised */
  int kicked;                  /* something changed since the queue last ran */
  uint64_t evict_bytes;        /* bytes offered in EVICTs not answered yet */
  int evict_asks;              /* EVICTs out */
  uint64_t spill_inflight;     /* bytes being written to spill files */
  void (*shed)(hpl__store *s); /* hpl__room_on_shed's (NULL: none) */
  void (*refetch)(hpl__store *s, hpl__obj *o); /* hpl__room_on_refetch's (NULL: none) */
} hpl__rooms;

/* One EVICT out: the instances offered (looked up again on the answer). */
typedef struct evict_ask {
  hpl__store *s;
  uint64_t bytes;
  size_t n;
  uint64_t inst[];
} evict_ask;

static void room_run(uv_timer_t *t);

static uint32_t now_s(void) { return (uint32_t)(hpl__now_ms() / 1000); }

/* Run the queue on the next loop turn (callers may be deep in a free). */
static void kick(hpl__store *s) {
  hpl__rooms *rm = s->rooms;
  rm->kicked = 1;
  if (rm->queue && rm->live && !s->stopping) uv_timer_start(&rm->timer, room_run, 0, 0);
}

static void room_changed(hpl__store *s) { kick(s); }

void hpl__room_on_shed(hpl__store *s, void (*shed)(hpl__store *s)) {
  if (s->rooms) s->rooms->shed = shed;
}

void hpl__room_on_refetch(hpl__store *s, void (*refetch)(hpl__store *s, hpl__obj *o)) {
  if (s->rooms) s->rooms->refetch = refetch;
}

void hpl__room_describe(hpl__store *s, char *buf, size_t len) {
  uint64_t alloc = hpl__pool_allocated(s->pool), idle = hpl__obj_idle_bytes(s);
  uint64_t pinned = alloc > idle ? alloc - idle : 0, last = 0, evicting = 0;
  size_t seen = 0;
  for (hpl__obj *o = hpl__obj_idle_oldest(s); o && seen < ROOM_SCAN;
       o = hpl__obj_idle_newer(o), seen++) {
    if (o->evicting)
      evicting += o->size;
    else if (o->primary || o->keep_until > now_s())
      last += o->size;
  }
  char a[32], b[32], c[32], d[32], e[32];
  snprintf(buf, len,
           "pool %s: %s pinned (held by clients, being written, or streamed), %s idle "
           "(%s of it the cluster's only copies, which are kept; %s being let go)",
           hpl__fmt_bytes(hpl__pool_capacity(s->pool), a, sizeof a),
           hpl__fmt_bytes(pinned, b, sizeof b), hpl__fmt_bytes(idle, c, sizeof c),
           hpl__fmt_bytes(last, d, sizeof d), hpl__fmt_bytes(evicting, e, sizeof e));
}

/* ------------------------------------------------------------------ letting copies go */

/* The directory's answer: copies it let go are freed, unless they were
 * taken again meanwhile (then the directory hears of them again). */
static void evict_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  evict_ask *x = arg;
  const Hplpb__EvictRep *r = (const Hplpb__EvictRep *)rep->m;
  if (rep->status && rep->status != HPL_ECANCELED)
    HPL__LOG_INFO("evict: the directory did not answer: %s", *rep->detail ? rep->detail
                                                                    : hpl_strerror(rep->status));
  s->rooms->evict_bytes -= x->bytes;
  s->rooms->evict_asks--;
  for (size_t i = 0; i < x->n; i++) {
    hpl__obj *o = hpl__obj_find_inst(s, x->inst[i]);
    if (!o || !o->evicting) continue;
    o->evicting = 0;
    int granted = r && i < r->n_granted && r->granted[i];
    if (!granted) {
      if (r) {
        o->keep_until = now_s() + ROOM_KEEP_S;
        s->ctr.evict_refusals++;
      }
      continue;
    }
    o->advertised = 0;
    if (!o->in_table) continue;
    if (o->refs || o->state != HPL__OBJ_SEALED) {
      /* taken again since it was offered: it stays, listed again */
      hpl__dirlink_loc_complete(s, o->id, 0);
      o->advertised = 1;
      continue;
    }
    s->ctr.evictions++;
    s->ctr.evicted_bytes += o->size;
    HPL__LOG_DEBUG("evicted '%s' (%llu bytes): other copies stay", o->id,
                   (unsigned long long)o->size);
    hpl__obj_detach(s, o); /* unreferenced: freed now */
  }
  free(x);
  kick(s);
}

/* Offer idle secondary copies, oldest first, until what is being let go
 * covers `need` bytes. */
static void evict_for(hpl__store *s, uint64_t need) {
  if (s->rooms->evict_bytes >= need || s->rooms->evict_asks >= ROOM_EVICT_ASKS) return;
  evict_ask *x = malloc(sizeof *x + ROOM_EVICT_BATCH * sizeof x->inst[0]);
  char **ids = malloc(ROOM_EVICT_BATCH * sizeof *ids);
  if (!x || !ids) {
    free(x);
    free(ids);
    return;
  }
  *x = (evict_ask){.s = s};
  uint32_t now = now_s();
  size_t seen = 0;
  for (hpl__obj *o = hpl__obj_idle_oldest(s); o && seen < ROOM_SCAN && x->n < ROOM_EVICT_BATCH &&
                                         s->rooms->evict_bytes + x->bytes < need;
       o = hpl__obj_idle_newer(o), seen++) {
    if (o->primary || o->evicting || !o->advertised || !o->size || o->keep_until > now)
      continue;
    ids[x->n] = o->id;
    x->inst[x->n++] = o->inst;
    x->bytes += o->size;
  }
  if (!x->n) {
    free(x);
    free(ids);
    return;
  }
  Hplpb__EvictReq m = HPLPB__EVICT_REQ__INIT;
  m.n_ids = x->n;
  m.ids = ids;
  if (hpl__dirlink_request(s, HPL__MSG_EVICT, &m.base, NULL, 0, ROOM_EVICT_TIMEOUT_MS, evict_reply,
                           x) != 0) {
    free(x);
    free(ids);
    return;
  }
  for (size_t i = 0; i < x->n; i++) hpl__obj_find_inst(s, x->inst[i])->evicting = 1;
  s->rooms->evict_bytes += x->bytes;
  s->rooms->evict_asks++;
  free(ids);
}

/* ------------------------------------------------------------------ spilling */

/* A write to, or a read from, a spill file for o (referenced meanwhile). */
typedef struct spill_io {
  hpl__store *s;
  hpl__obj *o;
  uint64_t file;
} spill_io;

/* o's bytes are written: the file is its, and if nobody took o meanwhile
 * its buffer goes. */
static void spill_written(void *arg, int status, int err, const char *detail) {
  spill_io *x = arg;
  hpl__store *s = x->s;
  hpl__obj *o = x->o;
  (void)err;
  o->moving = 0;
  s->rooms->spill_inflight -= o->size;
  if (status == 0 && hpl__obj_set_file(s, o, x->file) != 0) {
    hpl__spill_remove(s->spill, x->file);
    status = HPL_ENOMEM;
  }
  if (status == 0) {
    s->ctr.spilled++;
    s->ctr.spilled_bytes += o->size;
    HPL__LOG_DEBUG("spilled '%s' (%llu bytes)", o->id, (unsigned long long)o->size);
  } else if (status != HPL_ECANCELED) {
    s->ctr.spill_errors++;
    HPL__LOG_WARN("spilling '%s' failed: %s", o->id, *detail ? detail : hpl_strerror(status));
  }
  hpl__obj_unref(s, o); /* idle again, unless someone took it */
  if (o->on_disk && o->on_idle) hpl__obj_drop_buffer(s, o);
  free(x);
  kick(s);
}

/* Idle copies the cluster cannot do without (put here, or the last copy),
 * oldest first, go to spill files until what is being written covers
 * `need`. One already on disk (restored earlier) just drops its buffer. */
static void spill_for(hpl__store *s, uint64_t need) {
  if (!s->spill) return;
  uint32_t now = now_s();
  size_t seen = 0;
  hpl__obj *o = hpl__obj_idle_oldest(s), *next;
  for (; o && seen < ROOM_SCAN && s->rooms->spill_inflight < need; o = next, seen++) {
    next = hpl__obj_idle_newer(o);
    if (o->evicting || o->moving || !o->size || (!o->primary && o->keep_until <= now)) continue;
    if (o->on_disk) {
      s->ctr.spill_dropped++;
      hpl__obj_drop_buffer(s, o);
      continue;
    }
    spill_io *x = malloc(sizeof *x);
    if (!x) return;
    *x = (spill_io){.s = s, .o = o};
    if (hpl__spill_write(s->spill, o->data, o->size, spill_written, x, &x->file, NULL) != 0) {
      HPL__LOG_WARN("cannot spill '%s': %s", o->id, hpl__spill_errdetail(s->spill));
      s->ctr.spill_errors++;
      free(x);
      return;
    }
    o->moving = 1;
    hpl__obj_ref(s, o); /* the buffer is the write's until it ends */
    s->rooms->spill_inflight += o->size;
  }
}

void hpl__room_corrupt(hpl__store *s, hpl__obj *o, uint64_t unit) {
  if (!o->in_table) return;
  s->ctr.corrupt_units++;
  s->ctr.spill_corrupt++;
  char detail[512];
  snprintf(detail, sizeof detail,
           "store '%s' (node %016llx): its copy of '%s' failed its digest at unit %llu when read "
           "back from its spill file; the copy is dropped",
           s->cfg.name, (unsigned long long)s->node_id, o->id, (unsigned long long)unit);
  HPL__LOG_WARN("%s", detail);
  hpl__obj_ref(s, o);
  if (o->advertised || o->primary) hpl__dirlink_loc_corrupt(s, o->id, unit);
  o->advertised = 0;
  hpl__dataport_drop(s, o);
  /* its waiters (gets) wait for a copy from elsewhere: the directory hears
   * of this copy before it is asked (one connection, in order) */
  hpl__waiter *moved = NULL, *w, *tmp;
  if (s->rooms->refetch) {
    DL_FOREACH_SAFE(o->waiters, w, tmp) {
      hpl__obj_unwait(w);
      DL_APPEND(moved, w);
    }
  }
  hpl__obj_fail(s, o, HPL_ECORRUPT, detail);
  hpl__obj_detach(s, o);
  hpl__obj *again = moved ? hpl__obj_new(s, o->id, HPL__OBJ_FETCHING) : NULL;
  DL_FOREACH_SAFE(moved, w, tmp) {
    DL_DELETE(moved, w);
    if (again) {
      hpl__obj_wait(again, w);
    } else {
      w->obj = o;
      w->done(w, HPL_ECORRUPT, detail);
    }
  }
  hpl__obj_unref(s, o); /* file and buffer go once nobody else holds o */
  if (again) {
    HPL__LOG_INFO("'%s': fetching it from another copy for the gets that wanted it", again->id);
    s->rooms->refetch(s, again);
  }
}

/* The bytes read back were checked against o's digests (thread pool). */
static void restore_checked(hpl__store *s, hpl__obj *o, int bad, uint64_t unit, void *arg) {
  (void)arg;
  o->moving = 0;
  if (bad) {
    hpl__room_corrupt(s, o, unit);
    return;
  }
  s->ctr.restored++;
  s->ctr.restored_bytes += o->size;
  HPL__LOG_DEBUG("restored '%s' (%llu bytes, digests checked)", o->id,
                 (unsigned long long)o->size);
  hpl__obj_sealed(s, o);
}

/* o's bytes are back in its buffer (or not): checked against its digests
 * before anyone sees them. */
static void restore_read(void *arg, int status, int err, const char *detail) {
  spill_io *x = arg;
  hpl__store *s = x->s;
  hpl__obj *o = x->o;
  (void)err;
  if (status == 0 && o->in_table) {
    int rc = hpl__objdig_check_all(s, o, restore_checked, NULL);
    if (rc == 0) { /* o stays moving until checked */
      hpl__obj_unref(s, o);
      free(x);
      return;
    }
    if (rc < 0) {
      status = rc;
      detail = "cannot queue the check of its digests";
    }
  }
  o->moving = 0;
  if (status == 0) {
    s->ctr.restored++;
    s->ctr.restored_bytes += o->size;
    HPL__LOG_DEBUG("restored '%s' (%llu bytes)", o->id, (unsigned long long)o->size);
    hpl__obj_sealed(s, o);
  } else {
    char why[512];
    snprintf(why, sizeof why, "cannot read '%s' back from its spill file: %s", o->id,
             *detail ? detail : hpl_strerror(status));
    if (status != HPL_ECANCELED) s->ctr.spill_errors++;
    HPL__LOG_WARN("%s", why);
    hpl__obj_drop_buffer(s, o);
    hpl__obj_fail(s, o, status == HPL_ECANCELED ? status : HPL_ESYS, why);
  }
  hpl__obj_unref(s, o);
  free(x);
}

/* Room for a spilled object's bytes (or none): read them back. */
static void restore_room(hpl__room *r, int status, const char *detail) {
  spill_io *x = r->arg;
  hpl__store *s = x->s;
  hpl__obj *o = x->o;
  free(r);
  if (status == 0 && hpl__spill_read(s->spill, x->file, 0, o->data, o->size, restore_read, x,
                                     NULL) == 0)
    return;
  char why[640];
  snprintf(why, sizeof why, "cannot restore '%s': %s", o->id,
           status ? detail : hpl__spill_errdetail(s->spill));
  HPL__LOG_WARN("%s", why);
  o->moving = 0;
  if (o->data) hpl__obj_drop_buffer(s, o);
  hpl__obj_fail(s, o, status ? status : HPL_ESYS, why);
  hpl__obj_unref(s, o);
  free(x);
}

void hpl__room_restore(hpl__store *s, hpl__obj *o) {
  if (o->state != HPL__OBJ_SPILLED || o->moving || !s->spill) return;
  spill_io *x = malloc(sizeof *x);
  hpl__room *r = malloc(sizeof *r);
  if (!x || !r) {
    free(x);
    free(r);
    hpl__obj_fail(s, o, HPL_ENOMEM, "out of memory");
    return;
  }
  *x = (spill_io){.s = s, .o = o, .file = hpl__obj_file(s, o)};
  o->moving = 1;
  hpl__obj_ref(s, o);
  char detail[640];
  int rc = hpl__room_alloc(s, o, o->size, hpl__obj_deadline(o), r, restore_room, x, detail,
                           sizeof detail);
  if (rc > 0) return;
  r->arg = x;
  restore_room(r, rc, detail);
}


/* ------------------------------------------------------------------ the queue */

static void dequeue(hpl__store *s, hpl__room *r) {
  DL_DELETE(s->rooms->queue, r);
  r->queued = 0;
}

/* Serve the queue in order; fail what is past its deadline; make room for
 * the first request still waiting; wake again at the next deadline. */
static void room_run(uv_timer_t *t) {
  hpl__store *s = t->data;
  uint64_t now = hpl__now_ms();
  hpl__room *r, *tmp;
  s->rooms->kicked = 0;
  int served = 1;
  DL_FOREACH_SAFE(s->rooms->queue, r, tmp) {
    if (served && hpl__obj_alloc(s, r->o, r->size, NULL, 0) == 0) {
      dequeue(s, r);
      HPL__LOG_DEBUG("room for '%s' (%llu bytes) after %llu ms", r->o->id,
                     (unsigned long long)r->size, (unsigned long long)(now - r->since_ms));
      r->done(r, 0, NULL);
      continue;
    }
    served = 0; /* those behind the first that waits keep waiting (in order) */
    if (r->deadline_ms > now) continue;
    char held[320], detail[512], a[32];
    hpl__room_describe(s, held, sizeof held);
    snprintf(detail, sizeof detail,
             "store '%s' found no room for %s for '%s' within %llu ms: %s", s->cfg.name,
             hpl__fmt_bytes(r->size, a, sizeof a), r->o->id,
             (unsigned long long)(now - r->since_ms), held);
    dequeue(s, r);
    s->ctr.room_timeouts++;
    HPL__LOG_INFO("%s", detail);
    r->done(r, HPL_ENOMEM, detail);
  }
  if (!s->rooms->queue) return;
  if (s->rooms->shed) s->rooms->shed(s); /* may free memory and kick the timer */
  uint64_t free_now = hpl__pool_largest_free(s->pool);
  uint64_t need = s->rooms->queue->size > free_now ? s->rooms->queue->size - free_now : 1;
  evict_for(s, need);
  /* spill only when letting copies go is not enough */
  if (s->rooms->evict_bytes < need) spill_for(s, need - s->rooms->evict_bytes);
  uint64_t next = UINT64_MAX;
  DL_FOREACH(s->rooms->queue, r) if (r->deadline_ms < next) next = r->deadline_ms;
  now = hpl__now_ms();
  if (s->rooms->kicked) next = now; /* room was made just now (a buffer dropped) */
  uv_timer_start(&s->rooms->timer, room_run, next > now ? next - now : 0, 0);
}

int hpl__room_alloc(hpl__store *s, hpl__obj *o, uint64_t size, uint64_t deadline_ms, hpl__room *r,
                    hpl__room_done_fn done, void *arg, char *detail, size_t dlen) {
  char a[32], b[32];
  if (size > hpl__pool_capacity(s->pool)) {
    snprintf(detail, dlen, "object '%s' of %s is larger than the whole pool of store '%s' (%s)",
             o->id, hpl__fmt_bytes(size, a, sizeof a), s->cfg.name,
             hpl__fmt_bytes(hpl__pool_capacity(s->pool), b, sizeof b));
    return HPL_ENOMEM;
  }
  /* nobody waits before us: try at once */
  if (!s->rooms->queue && hpl__obj_alloc(s, o, size, detail, dlen) == 0) return 0;
  uint64_t now = hpl__now_ms();
  uint64_t longest = now + s->cfg.room_wait_ms;
  if (deadline_ms > longest) deadline_ms = longest;
  if (deadline_ms <= now || !s->rooms->live || s->stopping) {
    char held[320];
    hpl__room_describe(s, held, sizeof held);
    snprintf(detail, dlen, "store '%s' has no room for %s for '%s': %s", s->cfg.name,
             hpl__fmt_bytes(size, a, sizeof a), o->id, held);
    return HPL_ENOMEM;
  }
  *r = (hpl__room){.o = o, .size = size, .deadline_ms = deadline_ms, .since_ms = now,
                   .done = done, .arg = arg, .queued = 1};
  DL_APPEND(s->rooms->queue, r);
  s->ctr.room_waits++;
  HPL__LOG_DEBUG("'%s' (%llu bytes) waits for room", o->id, (unsigned long long)size);
  uv_timer_start(&s->rooms->timer, room_run, 0, 0);
  return 1;
}

void hpl__room_cancel(hpl__store *s, hpl__room *r) {
  if (!r->queued) return;
  dequeue(s, r);
  kick(s); /* the next one may fit */
}

int hpl__room_init(hpl__store *s) {
  if (!(s->rooms = calloc(1, sizeof *s->rooms))) return HPL_ENOMEM;
  if (uv_timer_init(s->loop, &s->rooms->timer) != 0) return HPL_ESYS;
  s->rooms->timer.data = s;
  s->rooms->live = 1;
  hpl__objects_listen(s, room_changed, hpl__room_restore);
  if (s->cfg.spill_dir[0]) {
    char detail[512];
    int rc = hpl__spill_open(s->loop, s->cfg.spill_dir, 0, &s->spill, detail, sizeof detail);
    if (rc) {
      HPL__LOG_ERROR("--spill-dir: %s", detail);
      return rc;
    }
    HPL__LOG_INFO("spilling to %s (%s)", hpl__spill_dir(s->spill),
                  hpl__spill_direct(s->spill) ? "O_DIRECT" : "through the page cache");
  }
  return 0;
}

void hpl__room_stop(hpl__store *s) {
  if (!s->rooms) return;
  while (s->rooms->queue) {
    hpl__room *r = s->rooms->queue;
    dequeue(s, r);
    r->done(r, HPL_ECANCELED, "the store is stopping");
  }
  hpl__objects_listen(s, NULL, NULL);
  hpl__spill_close(s->spill); /* pending writes and reads end as cancelled */
  s->spill = NULL;
  if (s->rooms->live) uv_close((uv_handle_t *)&s->rooms->timer, NULL);
  s->rooms->live = 0;
}

void hpl__room_free(hpl__store *s) {
  free(s->rooms);
  s->rooms = NULL;
}
