/* fetch.c - carrying out fetches (see fetch.h and fetchsm.h): the event
 * dispatcher and its actions, asking the directory and taking its
 * answers, pulling. GRANTs are in fetchgrant.c. */
#include "fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "dataport.h"
#include "dirlink.h"
#include "fetchint.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"
#include "trace.h"
#include "util.h"

enum { ASK_PLAIN, ASK_CRAWL, ASK_SUSPECT };

/* ------------------------------------------------------------------ asking */

static void ask_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg);
static void move_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg);

/* An ACQUIRE for the object's bytes from its progress on. ASK_CRAWL: move
 * off a crawling partial sender if an idle complete copy exists;
 * ASK_SUSPECT: the sender went silent (the pull goes on meanwhile). An
 * action: f is kept alive by the dispatcher. */
static void send_ask(hpl__fetch *f, int kind) {
  hpl__obj *o = f->o;
  Hplpb__AcquireReq r = HPLPB__ACQUIRE_REQ__INIT;
  r.id = o->id;
  r.progress = o->progress;
  r.gen = o->gen;
  int64_t local; /* our own limit only guards against a directory that never
                    answers */
  int only_complete = kind != ASK_PLAIN;
  if (only_complete) {
    r.failed_peer = f->sender;
    r.only_complete = kind == ASK_CRAWL;
    r.suspect = kind == ASK_SUSPECT;
    if (kind == ASK_SUSPECT) {
      if (o->progress != f->insist_at)
        f->insist = 0;
      f->insist_at = o->progress;
      r.insist = f->insist++;
    }
    r.timeout_ms = 0;
    local = kind == ASK_SUSPECT ? 2000 : 10000;
  } else {
    uint64_t deadline = hpl__obj_deadline(o);
    r.failed_peer = f->avoid;
    r.crawled = f->avoid && f->avoid_crawled;
    r.corrupt = f->avoid && f->avoid_corrupt;
    r.corrupt_unit = f->corrupt_unit;
    r.timeout_ms = deadline == UINT64_MAX ? -1 : hpl__ms_left(deadline);
    local = r.timeout_ms < 0
                ? -1
                : r.timeout_ms + 2000; /* the directory enforces the wait */
  }
  f->asks++;
  hpl__trace("s.ask", f->o->id);
  if (hpl__dirlink_request(f->s, HPL__MSG_ACQUIRE, &r.base, NULL, 0, local,
                           only_complete ? move_reply : ask_reply, f) != 0) {
    f->asks--;
    hpl__fetch_ctx x = {.status = HPL_ENOMEM, .detail = "out of memory"};
    hpl__fetch_fire(f, only_complete ? HPL__FEV_MOVE_UNSENT : HPL__FEV_REFUSED,
                    &x);
  }
}

static void ask_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  (void)s;
  hpl__fetch *f = arg;
  char detail[400];
  hpl__fetch_ctx x;
  hpl__trace("s.answer", f->o->id);
  f->asks--;
  hpl__fetch_event ev = hpl__fetch_answer(f, rep, &x, detail, sizeof detail);
  hpl__fetch_fire(f, ev, &x);
}

/* The answer to a crawling partial sender's report, or a silent one's: a
 * sender to move to (the directory has already moved our upstream there),
 * or none (keep pulling; a silent sender is reported again if it stays
 * silent until the retry time the directory gave). */
static void move_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  hpl__fetch *f = arg;
  const Hplpb__AcquireRep *r = (const Hplpb__AcquireRep *)rep->m;
  f->asks--;
  int moved = r && !r->inline_ && r->sender_node && r->gen == f->o->gen;
  if (moved && f->state == HPL__FETCH_MOVE_SUSPECT) {
    s->ctr.suspect_moves++;
    HPL__LOG_INFO(
        "'%s': sender %016llx silent; moving to %016llx at %llu/%llu bytes",
        f->o->id, (unsigned long long)f->sender,
        (unsigned long long)r->sender_node, (unsigned long long)f->o->progress,
        (unsigned long long)f->o->size);
  }
  /* "stay" is a reply naming no sender */
  hpl__fetch_ctx x = {.r = r, .retry_ms = r && !moved ? r->retry_ms : 0};
  hpl__fetch_fire(f, moved ? HPL__FEV_MOVE_TO : HPL__FEV_MOVE_NONE, &x);
}

/* ------------------------------------------------------------------ pulling */

static void pull_done(void *arg, int status, const char *detail) {
  hpl__fetch *f = arg;
  hpl__store *s = f->s;
  hpl__obj *o = f->o;
  f->avoid_corrupt = status == HPL_ECORRUPT;
  if (f->avoid_corrupt) f->corrupt_unit = hpl__puller_corrupt_unit(f->pull);
  f->pull = NULL;
  if (status == 0) {
    hpl__fetch_fire(f, HPL__FEV_PULLED, &(hpl__fetch_ctx){0});
    return;
  }
  s->ctr.pull_failures++;
  HPL__LOG_WARN("pull of '%s' from %016llx failed at %llu/%llu bytes: %s; "
                "asking for another sender",
                o->id, (unsigned long long)f->sender,
                (unsigned long long)o->progress, (unsigned long long)o->size,
                detail ? detail : hpl_strerror(status));
  f->avoid = f->sender;
  hpl__fetch_fire(f, HPL__FEV_PULL_FAILED,
                  &(hpl__fetch_ctx){.status = status, .detail = detail});
}

static void pull_straggled(void *arg) {
  ((hpl__fetch *)arg)->avoid_crawled = 1;
}

static void pull_crawls(void *arg, double rate) {
  (void)rate;
  hpl__fetch_fire(arg, HPL__FEV_CRAWL, &(hpl__fetch_ctx){0});
}

static void pull_silent(void *arg, uint64_t quiet_ms) {
  hpl__fetch *f = arg;
  HPL__LOG_INFO(
      "'%s': no bytes from %016llx for %llu ms at %llu/%llu bytes; asking the "
      "directory",
      f->o->id, (unsigned long long)f->sender, (unsigned long long)quiet_ms,
      (unsigned long long)f->o->progress, (unsigned long long)f->o->size);
  hpl__fetch_fire(f, HPL__FEV_SUSPECT, &(hpl__fetch_ctx){0});
}

/* A pull with less than this to come goes on an idle connection to its
 * sender (ops.reuse, dconns.c). For a small copy a new connection and its
 * handshake are most of the pull (8 hosts' shuffle of 64 KiB partitions:
 * 0.5-0.6x the time). For a copy of 32 KiB to 4 MiB, which waits for an
 * inbound slot (puller.c), a new connection costs its slot three crossings
 * of queues full of other streams (SYN, handshake, PULL) while the slot
 * idles: the 8-host 1 MiB shuffle took 0.38-0.43 s reused against
 * 0.46-0.50 s connecting anew at 200 Mbit/s, 0.125-0.131 against
 * 0.155-0.162 s at 1 Gbit/s (1 MiB broadcasts: no difference). Longer
 * streams connect anew: the handshake is nothing next to them, and a fresh
 * connection carries no congestion state from an earlier stream. */
#define REUSE_MAX (4u << 20)

/* Pull the rest of the object from the sender an answer named, straight
 * into its buffer (its progress grows as bytes arrive). An action. */
static void start_pull(hpl__fetch *f, const Hplpb__AcquireRep *r) {
  hpl__store *s = f->s;
  hpl__obj *o = f->o;
  o->state = HPL__OBJ_PULLING;
  o->advertised = 1; /* the directory lists us as a (partial) copy */
  f->sender = r->sender_node;
  f->avoid = 0;
  f->avoid_crawled = 0;
  f->avoid_corrupt = 0;
  if (o->progress >= o->size) { /* nothing left to pull (size 0) */
    hpl__fetch_fire(f, HPL__FEV_PULLED, &(hpl__fetch_ctx){0});
    return;
  }
  uint64_t from = hpl__objdig_resume_at(o); /* progress, or past it bytes held */
  if (from) {
    s->ctr.pull_resumes++;
    s->ctr.bytes_kept_on_resume += from;
  }
  hpl__puller_ops ops = {.done = pull_done,
                         .monitor = r->sender_complete ? 2 : 1,
                         .gen = o->gen,
                         .slow = pull_crawls,
                         .suspect = pull_silent,
                         .peer = r->sender_node,
                         .resumable = 1,
                         .straggled = pull_straggled,
                         .reuse = o->size - from < REUSE_MAX,
                         .windowed = 1,
                         .round = f->round};
  f->pull = hpl__puller_start_into(s, r->sender_addr, (int)r->sender_port,
                                   o->id, 0, o, from, 1, &ops, f);
  if (!f->pull) {
    f->avoid = f->sender;
    hpl__fetch_fire(f, HPL__FEV_PULL_FAILED,
                    &(hpl__fetch_ctx){
                        .status = HPL_ECONN,
                        .detail = "cannot start a pull (bad sender address?)"});
  }
}

/* ------------------------------------------------------------------ the
 * machine */

static void fetch_free_maybe(hpl__fetch *f) {
  if (f->busy || f->asks || f->pull ||
      (f->state != HPL__FETCH_END && f->state != HPL__FETCH_ORPHAN))
    return;
  hpl__store *s = f->s;
  DL_DELETE(s->fetches->list, f);
  if (f->o->fetch == f)
    f->o->fetch = NULL;
  hpl__obj_unref(s, f->o);
  hpl__otimer_free(&f->grant_timer, f);
}

/* Fetches that begin asking within this long of a round's first are in
 * that round (the gets of one request, or of a burst of them). */
#define ROUND_MS 2

/* f enters or leaves HPL__FETCH_ASK: the current ask round's count of
 * fetches waiting for their first answer, told to the puller (its first
 * fill waits for them; puller.h). */
static void count_asking(hpl__fetch *f, int enters) {
  hpl__fetches *fs = f->s->fetches;
  if (enters) {
    uint64_t now = hpl__now_ms();
    if (!fs->round || now - fs->round_ms > ROUND_MS) {
      fs->round++;
      fs->round_ms = now;
      fs->round_asking = 0;
    }
    f->round = fs->round;
    fs->round_asking++;
  } else if (f->round == fs->round && fs->round_asking) {
    fs->round_asking--;
  } else {
    return; /* an older round's: no longer counted */
  }
  hpl__puller_asking(f->s, fs->round, fs->round_asking);
}

/* The fetch's one state change, logged. */
static void set_state(hpl__fetch *f, hpl__fetch_state to, hpl__fetch_event ev) {
  HPL__LOG_DEBUG("fetch '%s': %s --%s--> %s", f->o->id,
                 hpl__fetch_state_name(f->state), hpl__fetch_event_name(ev),
                 hpl__fetch_state_name(to));
  if ((to == HPL__FETCH_ASK) != (f->state == HPL__FETCH_ASK))
    count_asking(f, to == HPL__FETCH_ASK);
  f->state = to;
}

void hpl__fetch_fire(hpl__fetch *f, hpl__fetch_event ev,
                     const hpl__fetch_ctx *x) {
  hpl__store *s = f->s;
  hpl__obj *o = f->o;
  unsigned in = 0, a;
  if (ev == HPL__FEV_TIMEOUT && o->waiters) {
    uint64_t d = hpl__obj_deadline(o);
    if (d == UINT64_MAX || d > hpl__now_ms() + 5)
      in |= HPL__FIN_WAITERS_LEFT;
  }
  if (f->state == HPL__FETCH_ROOM && !f->held.inline_)
    in |= HPL__FIN_HELD_SENDER;
  hpl__fetch_state from = f->state;
  set_state(f, hpl__fetch_next(from, ev, in, &a), ev);
  f->busy++; /* the actions may re-enter (fire again): f outlives them all */
  if (a & HPL__FA_GRANT_STOP)
    hpl__otimer_stop(&f->grant_timer);
  if (a & HPL__FA_UNROOM)
    hpl__room_cancel(s, &f->room);
  if ((a & HPL__FA_CANCEL_PULL) && f->pull) {
    hpl__puller_cancel(f->pull);
    f->pull = NULL;
  }
  if (a & HPL__FA_NOTE_COMPLETE)
    hpl__dirlink_loc_complete(s, o->id, (uint64_t)hpl__puller_take_rate(s));
  if (a & HPL__FA_SEAL) {
    o->advertised =
        1; /* a complete copy (inline: a holder) the directory knows */
    hpl__obj_sealed(s, o);
  }
  if (a & HPL__FA_FAIL)
    hpl__obj_fail(s, o, x->status ? x->status : HPL_EUNAVAIL, x->detail);
  if (a & HPL__FA_LOC_REMOVE) {
    hpl__dirlink_loc_remove(s, o->id);
    o->advertised = 0;
  }
  if (a & HPL__FA_FORGET)
    hpl__obj_detach(s, o);
  if (f->state == HPL__FETCH_END || f->state == HPL__FETCH_ORPHAN)
    o->fetch = NULL;
  if (a & HPL__FA_ASK)
    send_ask(f, ASK_PLAIN);
  if (a & HPL__FA_ASK_COMPLETE)
    send_ask(f, ASK_CRAWL);
  if (a & HPL__FA_ASK_SUSPECT)
    send_ask(f, ASK_SUSPECT);
  if (a & HPL__FA_PULL) {
    if (ev == HPL__FEV_MOVE_TO) {
      HPL__LOG_INFO("'%s': the partial copy we pull from crawls; moving to the "
                    "complete copy on "
                    "%016llx at %llu/%llu bytes",
                    o->id, (unsigned long long)x->r->sender_node,
                    (unsigned long long)o->progress,
                    (unsigned long long)o->size);
      s->ctr.stragglers++;
    }
    start_pull(f, x->r);
  }
  if (a & HPL__FA_GRANT_WAIT)
    hpl__fetch_grant_wait(f);
  if ((a & HPL__FA_REARM) && f->pull)
    hpl__puller_suspect_done(f->pull, x->retry_ms);
  if (from == HPL__FETCH_ROOM && f->state != HPL__FETCH_ROOM)
    hpl__fetch_held_free(f); /* (HPL__FA_PULL read it) */
  f->busy--;
  fetch_free_maybe(f);
}

/* ------------------------------------------------------------------ entry
 * points */

hpl__fetch *hpl__fetch_new(hpl__store *s, hpl__obj *o) {
  hpl__fetch *f = calloc(1, sizeof *f);
  if (!f)
    return NULL;
  f->s = s;
  f->o = o;
  f->state = HPL__FETCH_NEW;
  hpl__obj_ref(s, o);
  o->fetch = f;
  DL_APPEND(s->fetches->list, f);
  return f;
}

/* A GET starts a fetch of `o`: with HPL__FEV_START (ask the directory) or
 * HPL__FEV_GRANTED (wait for the directory's GRANT first). */
static void fetch_begin(hpl__store *s, hpl__obj *o, hpl__fetch_event ev) {
  hpl__fetch *f = hpl__fetch_new(s, o);
  if (!f) {
    hpl__obj_fail(s, o, HPL_ENOMEM, "out of memory");
    return;
  }
  hpl__fetch_fire(f, ev, &(hpl__fetch_ctx){0});
}

void hpl__fetch_start(hpl__store *s, hpl__obj *o) {
  fetch_begin(s, o, HPL__FEV_START);
}

void hpl__fetch_start_granted(hpl__store *s, hpl__obj *o) {
  fetch_begin(s, o, HPL__FEV_GRANTED);
}

void hpl__fetch_upstream_gone(hpl__store *s, const char *id, uint64_t peer,
                              int suspect, int regroup) {
  hpl__obj *o = hpl__obj_find(s, id);
  hpl__fetch *f = o ? o->fetch : NULL;
  if (!f || !f->pull || f->sender != peer)
    return;
  if (regroup) /* our copy was reported corrupt: our place behind peer went to its reporter */
    HPL__LOG_INFO("'%s': our copy is no longer named; moving off %016llx at %llu bytes", id,
                  (unsigned long long)peer, (unsigned long long)o->progress);
  else
    HPL__LOG_WARN("'%s': the node we pull it from (%016llx) is %s; asking for another sender",
                  id, (unsigned long long)peer, suspect ? "not answering" : "gone");
  s->ctr.pull_failures += !regroup;
  f->avoid = regroup ? 0 : peer;
  f->avoid_crawled = 0;
  f->avoid_corrupt = 0;
  hpl__fetch_fire(f, HPL__FEV_UPSTREAM_GONE, &(hpl__fetch_ctx){0});
}

void hpl__fetch_dropped(hpl__store *s, hpl__obj *o) {
  char detail[320];
  hpl__fetch *f = o->fetch;
  if (!f)
    return;
  snprintf(detail, sizeof detail, "object '%s' was deleted", o->id);
  o->advertised = 0;
  /* (an answer kept for room is undone as a late one) */
  hpl__fetch_fire(f, HPL__FEV_DROPPED,
                  &(hpl__fetch_ctx){.status = HPL_ENOTFOUND, .detail = detail});
}

int hpl__fetch_deleted(hpl__store *s, const char *id) {
  hpl__obj *o = hpl__id_valid(id) ? hpl__obj_find(s, id) : NULL;
  if (!o) return 0;
  HPL__LOG_DEBUG("dropping '%s' (deleted)", id);
  o->advertised = 0;
  hpl__fetch_dropped(s, o); /* (a fetch of it, if any, ends) */
  hpl__obj_detach(s, o);
  return 1;
}

size_t hpl__fetch_incoming(hpl__store *s, hpl__dl_incoming *out, size_t max) {
  size_t n = 0, walked = 0;
  hpl__fetch *f;
  DL_FOREACH(s->fetches->list, f) {
    if (++walked > HPL__FETCH_INCOMING_WALK)
      break; /* a heartbeat's work stays bounded */
    if (!f->pull)
      continue;
    if (n < max)
      out[n] = (hpl__dl_incoming){.id = f->o->id,
                                  .sender = f->sender,
                                  .held = f->o->progress,
                                  .size = f->o->size,
                                  .rate = hpl__puller_rate(f->pull)};
    n++;
  }
  return n;
}

void hpl__fetch_drain(hpl__store *s) {
  hpl__fetch *f, *tmp;
  DL_FOREACH_SAFE(s->fetches->list, f, tmp) {
    if (f->pull)
      hpl__fetch_fire(f, HPL__FEV_DRAIN, &(hpl__fetch_ctx){0});
  }
}

void hpl__fetch_stop(hpl__store *s) {
  if (!s->fetches)
    return;
  hpl__fetch_grants_stop(s);
  while (s->fetches->list) {
    hpl__fetch *f = s->fetches->list;
    if (f->pull)
      hpl__puller_cancel(f->pull);
    f->pull = NULL;
    hpl__room_cancel(s, &f->room);
    hpl__fetch_held_free(f);
    f->asks = 0;
    f->busy = 0;
    f->state = HPL__FETCH_END;
    fetch_free_maybe(f);
  }
}

int hpl__fetch_init(hpl__store *s) {
  s->fetches = calloc(1, sizeof *s->fetches);
  return s->fetches ? 0 : HPL_ENOMEM;
}

void hpl__fetch_free(hpl__store *s) {
  free(s->fetches);
  s->fetches = NULL;
}
