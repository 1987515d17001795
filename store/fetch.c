/* fetch.c - carrying out fetches (see fetch.h and fetchsm.h). */
#include "fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "dataport.h"
#include "dirlink.h"
#include "fetchsm.h"
#include "hoplite.h"
#include "log.h"
#include "puller.h"
#include "room.h"
#include "util.h"
#include "uvtimer.h"

/* The module's context (s->fetches). */
typedef struct st_fetches {
  struct st_fetch *list;    /* every fetch (utlist) */
  struct late_grant *late;  /* GRANTs held back by the fault point (utlist) */
} st_fetches;

typedef struct st_fetch {
  struct st_fetch *prev, *next; /* s->fetches->list (utlist) */
  store *s;
  st_obj *o;          /* referenced */
  fetch_state state;
  int asks;           /* directory requests whose answer is due */
  int busy;           /* inside fetch_fire: do not free */
  st_puller *pull;
  uint64_t sender;    /* node we pull (or pulled) from */
  uint64_t avoid;     /* sender to name as failed in the next ACQUIRE */
  int avoid_crawled;  /* ... because its stream crawled (a straggler) */
  int move_ask;       /* the MOVE ask out: ASK_CRAWL or ASK_SUSPECT */
  uint32_t insist;    /* suspect reports in a row without progress between */
  uint64_t insist_at; /* the object's progress at the last report */
  /* An answer held while the buffer waits for room (room.c): what it said */
  st_room room;
  int room_wait;
  Hplpb__AcquireRep held;
  char *held_addr;
  uint8_t *held_payload; /* an inline answer's bytes */
  /* A granted GET came before its GRANT: that is awaited (one of `asks`)
   * until grant_timer fires, then the directory is asked after all */
  int grant_wait;
  hpl__otimer grant_timer;
} st_fetch;

enum { ASK_PLAIN, ASK_CRAWL, ASK_SUSPECT };

/* What an event brings along. */
typedef struct fetch_ctx {
  int status;                 /* FA_FAIL: the waiters' error */
  const char *detail;
  const Hplpb__AcquireRep *r; /* FA_PULL: the sender */
} fetch_ctx;

static void fetch_fire(st_fetch *f, fetch_event ev, const fetch_ctx *x);
static void fetch_free_maybe(st_fetch *f);

/* ------------------------------------------------------------------ asking */

static void ask_reply(store *s, const dl_reply *rep, void *arg);
static void move_reply(store *s, const dl_reply *rep, void *arg);

/* An ACQUIRE for the object's bytes from its progress on. ASK_CRAWL: move
 * off a crawling partial sender if an idle complete copy exists;
 * ASK_SUSPECT: the sender went silent (the pull goes on meanwhile). */
static void send_ask(st_fetch *f, int kind) {
  st_obj *o = f->o;
  Hplpb__AcquireReq r = HPLPB__ACQUIRE_REQ__INIT;
  r.id = o->id;
  r.progress = o->progress;
  r.gen = o->gen;
  int64_t local; /* our own limit only guards against a directory that never answers */
  int only_complete = kind != ASK_PLAIN;
  if (only_complete) {
    f->move_ask = kind;
    r.failed_peer = f->sender;
    r.only_complete = kind == ASK_CRAWL;
    r.suspect = kind == ASK_SUSPECT;
    if (kind == ASK_SUSPECT) {
      if (o->progress != f->insist_at) f->insist = 0;
      f->insist_at = o->progress;
      r.insist = f->insist++;
    }
    r.timeout_ms = 0;
    local = kind == ASK_SUSPECT ? 2000 : 10000;
  } else {
    uint64_t deadline = store_obj_deadline(o);
    r.failed_peer = f->avoid;
    r.crawled = f->avoid && f->avoid_crawled;
    r.timeout_ms = deadline == UINT64_MAX ? -1 : hpl__ms_left(deadline);
    local = r.timeout_ms < 0 ? -1 : r.timeout_ms + 2000; /* the directory enforces the wait */
  }
  f->asks++;
  if (dirlink_request(f->s, HPL__MSG_ACQUIRE, &r.base, NULL, 0, local,
                      only_complete ? move_reply : ask_reply, f) != 0) {
    f->asks--;
    fetch_ctx x = {.status = HPL_ENOMEM, .detail = "out of memory"};
    f->busy++; /* f must outlive the event */
    fetch_fire(f, only_complete ? FEV_MOVE_NONE : FEV_REFUSED, &x);
    if (kind == ASK_SUSPECT && f->pull) puller_suspect_done(f->pull, 0);
    f->busy--;
    fetch_free_maybe(f);
  }
}

static void room_done(st_room *r, int status, const char *detail);
static fetch_event answer_bytes(st_fetch *f, const Hplpb__AcquireRep *r, const uint8_t *payload,
                                uint64_t plen, char *detail, size_t dlen, int *status);

/* No event yet: the answer waits for room (room_done goes on). */
#define FEV_HELD FEV_NEVENTS

/* Keep what the answer says until its buffer has room. FEV_HELD, or
 * FEV_BAD_SENDER with *status if it cannot be kept. */
static fetch_event hold_answer(st_fetch *f, const Hplpb__AcquireRep *r, const uint8_t *payload,
                               uint64_t plen, char *detail, size_t dlen, int *status) {
  f->held = *r;
  f->held.base.unknown_fields = NULL;
  f->held.base.n_unknown_fields = 0;
  f->held.detail = "";
  f->held_addr = strdup(r->sender_addr ? r->sender_addr : "");
  f->held.sender_addr = f->held_addr;
  f->held_payload = plen ? malloc(plen) : NULL;
  if (!f->held_addr || (plen && !f->held_payload)) {
    room_cancel(f->s, &f->room);
    free(f->held_addr);
    free(f->held_payload);
    f->held_addr = NULL;
    f->held_payload = NULL;
    snprintf(detail, dlen, "out of memory");
    *status = HPL_ENOMEM;
    return FEV_BAD_SENDER;
  }
  if (plen) memcpy(f->held_payload, payload, plen);
  f->room_wait = 1;
  LOG_INFO("'%s': waiting for room in the pool for %llu bytes", f->o->id,
           (unsigned long long)r->size);
  return FEV_HELD;
}

static void held_free(st_fetch *f) {
  free(f->held_addr);
  free(f->held_payload);
  f->held_addr = NULL;
  f->held_payload = NULL;
  f->room_wait = 0;
}

/* The buffer of a held answer: allocated (go on as the answer said), or
 * no room in time. */
static void room_done(st_room *rm, int status, const char *why) {
  st_fetch *f = rm->arg;
  char detail[640];
  fetch_ctx x = {.r = &f->held, .detail = detail, .status = status};
  fetch_event ev;
  f->room_wait = 0; /* answer_bytes may hold nothing again */
  if (status) {
    snprintf(detail, sizeof detail, "%s", why);
    ev = FEV_BAD_SENDER;
  } else {
    ev = answer_bytes(f, &f->held, f->held_payload, f->held_payload ? f->held.size : 0, detail,
                      sizeof detail, &x.status);
  }
  f->busy++;
  fetch_fire(f, ev, &x);
  f->busy--;
  held_free(f);
  fetch_free_maybe(f);
}

/* An answer naming a sender (or carrying the bytes): adopt its generation,
 * size and bytes. Returns the event it amounts to (FEV_HELD: it waits for
 * room in the pool). */
static fetch_event answer_event(st_fetch *f, const Hplpb__AcquireRep *r, const uint8_t *payload,
                                uint64_t plen, char *detail, size_t dlen, int *status) {
  store *s = f->s;
  st_obj *o = f->o;
  if (r->gen != o->gen) {
    /* the object's bytes were restarted (a reduce target): ours are void */
    if (o->progress) {
      s->ctr.restarts++;
      dataport_restart(s, o, r->gen);
    }
    o->gen = r->gen;
  }
  if (o->data && o->size != r->size) {
    snprintf(detail, dlen, "object '%s' changed size (%llu -> %llu)", o->id,
             (unsigned long long)o->size, (unsigned long long)r->size);
    *status = HPL_EMISMATCH;
    return FEV_BAD_SENDER;
  }
  if (!o->data) {
    int rc = room_alloc(s, o, r->size, store_obj_deadline(o), &f->room, room_done, f, detail,
                        dlen);
    if (rc > 0) return hold_answer(f, r, payload, plen, detail, dlen, status);
    if (rc) {
      *status = rc;
      LOG_WARN("%s", detail);
      return FEV_BAD_SENDER;
    }
  }
  return answer_bytes(f, r, payload, plen, detail, dlen, status);
}

/* The rest of an answer once the buffer is there: a sender to pull from,
 * or an inline object's bytes. */
static fetch_event answer_bytes(st_fetch *f, const Hplpb__AcquireRep *r, const uint8_t *payload,
                                uint64_t plen, char *detail, size_t dlen, int *status) {
  store *s = f->s;
  st_obj *o = f->o;
  if (!r->inline_) return FEV_SENDER;
  if (plen != r->size) {
    snprintf(detail, dlen, "inline reply of the wrong length");
    *status = HPL_EPROTO;
    return FEV_BAD_SENDER;
  }
  if (plen) memcpy(o->data, payload, plen);
  o->inline_obj = 1;
  s->ctr.inline_gets++;
  return FEV_INLINE;
}

static void ask_reply(store *s, const dl_reply *rep, void *arg) {
  (void)s;
  st_fetch *f = arg;
  const Hplpb__AcquireRep *r = (const Hplpb__AcquireRep *)rep->m; /* NULL unless status 0 */
  char detail[400];
  int status = rep->status;
  fetch_ctx x = {.r = r, .detail = detail};
  fetch_event ev;
  f->asks--;
  if (f->state == FETCH_ORPHAN || f->state == FETCH_END) {
    ev = r && !r->inline_ && r->sender_node ? FEV_SENDER : FEV_REFUSED;
  } else if (status == HPL_ETIMEDOUT) {
    snprintf(detail, sizeof detail, "object '%s' not available within the timeout", f->o->id);
    ev = FEV_TIMEOUT;
  } else if (status != 0) {
    snprintf(detail, sizeof detail, "%s", *rep->detail ? rep->detail : hpl_strerror(status));
    LOG_INFO("fetch of '%s' failed: %s", f->o->id, detail);
    ev = FEV_REFUSED;
  } else {
    ev = answer_event(f, r, rep->payload, rep->plen, detail, sizeof detail, &status);
    if (ev == FEV_HELD) return;
  }
  x.status = status;
  fetch_fire(f, ev, &x);
}

/* The answer to a crawling partial sender's report, or a silent one's: a
 * sender to move to (the directory has already moved our upstream there),
 * or none (keep pulling; a silent sender is reported again if it stays
 * silent until the retry time the directory gave). */
static void move_reply(store *s, const dl_reply *rep, void *arg) {
  st_fetch *f = arg;
  const Hplpb__AcquireRep *r = (const Hplpb__AcquireRep *)rep->m;
  f->asks--;
  int moved = r && !r->inline_ && r->sender_node && r->gen == f->o->gen;
  if (moved && f->move_ask == ASK_SUSPECT && f->state == FETCH_MOVE) {
    s->ctr.suspect_moves++;
    LOG_INFO("'%s': sender %016llx silent; moving to %016llx at %llu/%llu bytes", f->o->id,
             (unsigned long long)f->sender, (unsigned long long)r->sender_node,
             (unsigned long long)f->o->progress, (unsigned long long)f->o->size);
  }
  uint64_t retry = r && !moved ? r->retry_ms : 0; /* "stay" is a reply naming no sender */
  fetch_ctx x = {.r = r};
  f->busy++; /* the event may end the fetch: f must outlive the line below */
  fetch_fire(f, moved ? FEV_MOVE_TO : FEV_MOVE_NONE, &x);
  if (!moved && f->pull) puller_suspect_done(f->pull, retry);
  f->busy--;
  fetch_free_maybe(f);
}

/* ------------------------------------------------------------------ pulling */

static void pull_done(void *arg, int status, const char *detail) {
  st_fetch *f = arg;
  store *s = f->s;
  st_obj *o = f->o;
  f->pull = NULL;
  if (status == 0) {
    fetch_fire(f, FEV_PULLED, &(fetch_ctx){0});
    return;
  }
  s->ctr.pull_failures++;
  LOG_WARN("pull of '%s' from %016llx failed at %llu/%llu bytes: %s; asking for another sender",
           o->id, (unsigned long long)f->sender, (unsigned long long)o->progress,
           (unsigned long long)o->size, detail ? detail : hpl_strerror(status));
  f->avoid = f->sender;
  fetch_fire(f, FEV_PULL_FAILED, &(fetch_ctx){.status = status, .detail = detail});
}

static void pull_straggled(void *arg) {
  ((st_fetch *)arg)->avoid_crawled = 1;
}

static void pull_crawls(void *arg, double rate) {
  (void)rate;
  fetch_fire(arg, FEV_CRAWL, &(fetch_ctx){0});
}

static void pull_silent(void *arg, uint64_t quiet_ms) {
  st_fetch *f = arg;
  LOG_INFO("'%s': no bytes from %016llx for %llu ms at %llu/%llu bytes; asking the directory",
           f->o->id, (unsigned long long)f->sender, (unsigned long long)quiet_ms,
           (unsigned long long)f->o->progress, (unsigned long long)f->o->size);
  f->busy++; /* f must outlive the event */
  fetch_fire(f, FEV_SUSPECT, &(fetch_ctx){0});
  /* a report already out (a crawl's): the stream is watched again later */
  if (f->pull && (f->state != FETCH_MOVE || f->move_ask != ASK_SUSPECT))
    puller_suspect_done(f->pull, 0);
  f->busy--;
  fetch_free_maybe(f);
}

/* Pull the rest of the object from the sender an answer named. */
static void start_pull(st_fetch *f, const Hplpb__AcquireRep *r) {
  store *s = f->s;
  st_obj *o = f->o;
  o->state = OBJ_PULLING;
  o->advertised = 1; /* the directory lists us as a (partial) copy */
  f->sender = r->sender_node;
  f->avoid = 0;
  f->avoid_crawled = 0;
  if (o->progress >= o->size) { /* nothing left to pull (size 0) */
    fetch_fire(f, FEV_PULLED, &(fetch_ctx){0});
    return;
  }
  if (o->progress) {
    s->ctr.pull_resumes++;
    s->ctr.bytes_kept_on_resume += o->progress;
  }
  puller_ops ops = {.done = pull_done, .monitor = r->sender_complete ? 2 : 1, .gen = o->gen,
                    .slow = pull_crawls, .suspect = pull_silent, .quiet = dirlink_quiet,
                    .peer = r->sender_node, .resumable = 1, .straggled = pull_straggled};
  f->pull = puller_start_into(s, r->sender_addr, (int)r->sender_port, o->id, 0, o, o->progress, 1,
                              &ops, f);
  if (!f->pull) {
    f->avoid = f->sender;
    fetch_fire(f, FEV_PULL_FAILED,
               &(fetch_ctx){.status = HPL_ECONN,
                            .detail = "cannot start a pull (bad sender address?)"});
  }
}

/* ------------------------------------------------------------------ the machine */

static void fetch_free_maybe(st_fetch *f) {
  if (f->busy || f->asks || f->pull || f->room_wait ||
      (f->state != FETCH_END && f->state != FETCH_ORPHAN))
    return;
  store *s = f->s;
  DL_DELETE(s->fetches->list, f);
  if (f->o->fetch == f) f->o->fetch = NULL;
  store_obj_unref(s, f->o);
  hpl__otimer_free(&f->grant_timer, f);
}

static void fetch_fire(st_fetch *f, fetch_event ev, const fetch_ctx *x) {
  store *s = f->s;
  st_obj *o = f->o;
  unsigned in = 0, a;
  if (ev == FEV_TIMEOUT && o->waiters) {
    uint64_t d = store_obj_deadline(o);
    if (d == UINT64_MAX || d > hpl__now_ms() + 5) in |= FIN_WAITERS_LEFT;
  }
  fetch_state from = f->state;
  f->state = fetch_next(from, ev, in, &a);
  LOG_DEBUG("fetch '%s': %s --%s--> %s", o->id, fetch_state_name(from), fetch_event_name(ev),
            fetch_state_name(f->state));
  f->busy++;
  if ((a & FA_CANCEL_PULL) && f->pull) {
    puller_cancel(f->pull);
    f->pull = NULL;
  }
  if (a & FA_NOTE_COMPLETE) {
    dirlink_loc_complete(s, o->id, (uint64_t)puller_take_rate(s));
  }
  if (a & FA_SEAL) {
    o->advertised = 1; /* a complete copy (inline: a holder) the directory knows */
    store_obj_sealed(s, o);
  }
  if (a & FA_FAIL) store_obj_fail(s, o, x->status ? x->status : HPL_EUNAVAIL, x->detail);
  if (a & FA_LOC_REMOVE) {
    dirlink_loc_remove(s, o->id);
    o->advertised = 0;
  }
  if (a & FA_FORGET) store_obj_detach(s, o);
  if (f->state == FETCH_END || f->state == FETCH_ORPHAN) o->fetch = NULL;
  if (a & FA_ASK) send_ask(f, ASK_PLAIN);
  if (a & FA_ASK_COMPLETE) send_ask(f, ASK_CRAWL);
  if (a & FA_ASK_SUSPECT) send_ask(f, ASK_SUSPECT);
  if (a & FA_PULL) {
    if (ev == FEV_MOVE_TO) {
      LOG_INFO("'%s': the partial copy we pull from crawls; moving to the complete copy on "
               "%016llx at %llu/%llu bytes", o->id, (unsigned long long)x->r->sender_node,
               (unsigned long long)o->progress, (unsigned long long)o->size);
      s->ctr.stragglers++;
    }
    start_pull(f, x->r);
  }
  f->busy--;
  fetch_free_maybe(f);
}

/* ------------------------------------------------------------------ entry points */

/* A fetch of `o` in state ASK, asking nothing yet; NULL if out of memory. */
static st_fetch *fetch_new(store *s, st_obj *o) {
  st_fetch *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->s = s;
  f->o = o;
  f->state = FETCH_ASK;
  store_obj_ref(s, o);
  o->fetch = f;
  DL_APPEND(s->fetches->list, f);
  return f;
}

void fetch_start(store *s, st_obj *o) {
  st_fetch *f = fetch_new(s, o);
  if (!f) {
    store_obj_fail(s, o, HPL_ENOMEM, "out of memory");
    return;
  }
  f->busy++;
  send_ask(f, ASK_PLAIN);
  f->busy--;
  fetch_free_maybe(f);
}

/* The GRANT a granted GET waits for did not come in time: ask. */
static void grant_late(void *arg) {
  st_fetch *f = arg;
  f->grant_wait = 0;
  f->asks--;
  f->s->ctr.grant_waits_expired++;
  LOG_INFO("'%s': the directory's grant did not come within %d ms; asking", f->o->id,
           FETCH_GRANT_WAIT_MS);
  f->busy++;
  if (f->state == FETCH_ASK) send_ask(f, ASK_PLAIN);
  f->busy--;
  fetch_free_maybe(f);
}

void fetch_start_granted(store *s, st_obj *o) {
  st_fetch *f = fetch_new(s, o);
  if (!f) {
    store_obj_fail(s, o, HPL_ENOMEM, "out of memory");
    return;
  }
  f->grant_wait = 1;
  f->asks++;
  hpl__otimer_start(s->loop, &f->grant_timer, f, FETCH_GRANT_WAIT_MS, grant_late);
}

static void grant_now(store *s, ProtobufCMessage *m) {
  Hplpb__AcquireRep *r = (Hplpb__AcquireRep *)m;
  if (!hpl__id_valid(r->id) || r->status || r->inline_ || !r->sender_node) {
    LOG_WARN("malformed GRANT from the directory ignored");
    return;
  }
  st_obj *o = store_find(s, r->id);
  st_fetch *f = o ? o->fetch : NULL;
  if (o && !(f && f->grant_wait)) {
    /* held, made here, or asked for already: the directory names the same
     * sender again when that ACQUIRE reaches it, and a copy completing here
     * frees the sender it named */
    s->ctr.grants_ignored++;
    LOG_DEBUG("'%s': grant ignored (%s)", r->id, f ? "asked already" : "held here");
    return;
  }
  if (f) {
    f->grant_wait = 0;
    hpl__otimer_stop(&f->grant_timer);
  } else {
    /* its client's GET is on the way: pull now, as a copy nobody holds yet */
    o = store_obj_new(s, r->id, OBJ_FETCHING);
    f = o ? fetch_new(s, o) : NULL;
    if (!f) {
      if (o) store_obj_detach(s, o);
      dirlink_loc_remove(s, r->id); /* the directory listed us: undo */
      return;
    }
    f->asks++;
    s->ctr.remote_gets++; /* counted here: its GET finds the fetch running */
  }
  s->ctr.grants_taken++;
  dl_reply rep = {.status = 0, .detail = "", .m = m};
  f->busy++;
  ask_reply(s, &rep, f);
  f->busy--;
  fetch_free_maybe(f);
}

/* Fault point grant_delay_ms: a GRANT kept (packed) until it is handled. */
typedef struct late_grant {
  hpl__otimer timer;
  struct late_grant *prev, *next; /* s->fetches->late (utlist) */
  store *s;
  size_t len;
  uint8_t msg[];
} late_grant;

static void late_grant_due(void *arg) {
  late_grant *g = arg;
  DL_DELETE(g->s->fetches->late, g);
  ProtobufCMessage *m = hpl__msg_unpack(HPL__MSG_GRANT, g->msg, g->len);
  if (m) {
    grant_now(g->s, m);
    protobuf_c_message_free_unpacked(m, NULL);
  }
  hpl__otimer_free(&g->timer, g);
}

void fetch_on_grant(store *s, ProtobufCMessage *m) {
  uint64_t delay = s->cfg.faults.grant_delay_ms;
  size_t len = delay ? protobuf_c_message_get_packed_size(m) : 0;
  late_grant *g = delay ? calloc(1, sizeof *g + len) : NULL;
  if (!g) {
    grant_now(s, m);
    return;
  }
  g->s = s;
  g->len = protobuf_c_message_pack(m, g->msg);
  DL_APPEND(s->fetches->late, g);
  hpl__otimer_start(s->loop, &g->timer, g, delay, late_grant_due);
}

void fetch_upstream_gone(store *s, const char *id, uint64_t peer, int suspect) {
  st_obj *o = store_find(s, id);
  st_fetch *f = o ? o->fetch : NULL;
  if (!f || !f->pull || f->sender != peer) return;
  LOG_WARN("'%s': the node we pull it from (%016llx) is %s; asking for another sender", id,
           (unsigned long long)peer, suspect ? "not answering" : "gone");
  s->ctr.pull_failures++;
  f->avoid = peer;
  f->avoid_crawled = 0;
  fetch_fire(f, FEV_UPSTREAM_GONE, &(fetch_ctx){0});
}

void fetch_dropped(store *s, st_obj *o) {
  char detail[320];
  st_fetch *f = o->fetch;
  if (!f) return;
  snprintf(detail, sizeof detail, "object '%s' was deleted", o->id);
  o->advertised = 0;
  f->busy++;
  fetch_fire(f, FEV_DROPPED, &(fetch_ctx){.status = HPL_ENOTFOUND, .detail = detail});
  if (f->room_wait) { /* the held answer is void: undone as a late one */
    room_cancel(s, &f->room);
    fetch_fire(f, f->held.inline_ ? FEV_INLINE : FEV_SENDER, &(fetch_ctx){.r = &f->held});
    held_free(f);
  }
  f->busy--;
  fetch_free_maybe(f);
}

size_t fetch_incoming(store *s, dl_incoming *out, size_t max) {
  size_t n = 0, walked = 0;
  st_fetch *f;
  DL_FOREACH(s->fetches->list, f) {
    if (++walked > FETCH_INCOMING_WALK) break; /* a heartbeat's work stays bounded */
    if (!f->pull) continue;
    if (n < max)
      out[n] = (dl_incoming){.id = f->o->id, .sender = f->sender, .held = f->o->progress,
                            .size = f->o->size, .rate = puller_rate(f->pull)};
    n++;
  }
  return n;
}

void fetch_drain(store *s) {
  st_fetch *f, *tmp;
  DL_FOREACH_SAFE(s->fetches->list, f, tmp) {
    if (f->pull) fetch_fire(f, FEV_DRAIN, &(fetch_ctx){0});
  }
}

void fetch_stop(store *s) {
  if (!s->fetches) return;
  while (s->fetches->late) { /* held back by the fault point: dropped */
    late_grant *g = s->fetches->late;
    DL_DELETE(s->fetches->late, g);
    hpl__otimer_free(&g->timer, g);
  }
  while (s->fetches->list) {
    st_fetch *f = s->fetches->list;
    if (f->pull) puller_cancel(f->pull);
    f->pull = NULL;
    room_cancel(s, &f->room);
    held_free(f);
    f->asks = 0;
    f->busy = 0;
    f->state = FETCH_END;
    fetch_free_maybe(f);
  }
}

int fetch_init(store *s) {
  s->fetches = calloc(1, sizeof *s->fetches);
  return s->fetches ? 0 : HPL_ENOMEM;
}

void fetch_free(store *s) {
  free(s->fetches);
  s->fetches = NULL;
}
