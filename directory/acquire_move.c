/* acquire_move.c - receivers that report their sender (see
 * acquire_int.h): one gone silent (judged by a probe's verdict, nodes.h)
 * or a partial one crawling (reports judged in batches, the chain walked
 * for the slow node), and the object table's crawl filter those reports
 * feed. */
#include <stdlib.h>
#include <string.h>
#include <utlist.h>

#include "acquire_int.h"
#include "hoplite.h"
#include "log.h"
#include "util.h"

/* A node that reported its own partial sender crawling this recently is
 * taken to be slow because of that sender, not by itself. */
#define DIR_CRAWL_MEMORY_MS 5000

/* A node that moved off a sender crawling by itself is given this long to
 * recover before the receivers below it blame it. */
#define DIR_BYPASS_GRACE_MS 1500

/* Crawl reports are judged together, this long after the first: when a
 * chain node slows, every receiver below it reports within a few tens of
 * milliseconds, and judged one by one each would find the others not yet
 * crawling and move (a cascade of moves, some onto the slow node). */
#define DIR_CRAWL_BATCH_MS 60

/* How far up a chain a crawl's origin is looked for. */
#define DIR_CHAIN_WALK_MAX 64

/* A crawl report waiting for its batch (on_crawling_sender). Names, not
 * pointers: the node or the object may be gone when the batch runs. */
typedef struct hpl__dir_crawl_rep {
  struct hpl__dir_crawl_rep *next;
  uint64_t asker, peer, req, progress;
  int innocent, peer_crawls; /* the verdict, made before any move of the batch */
  char id[];
} hpl__dir_crawl_rep;

/* The asker's sender `peer` has delivered nothing for a while (the asker
 * keeps its stream meanwhile). The culprit may be the sender (stopped, cut
 * off) or, for a partial copy, the sender's own upstream: a probe tells
 * them apart. A sender that does not answer is replaced by a copy that does
 * not depend on it; one that answers keeps its receiver (its own receiver
 * side reports its upstream), unless its copy is known complete (then the
 * path between the two is at fault) or the asker has reported the same
 * stall twice already. */
void hpl__dir_acquire_on_silent_sender(hpl__dir_server *s, hpl__dir_node *asker, uint64_t req,
                                       hpl__dir_obj *o, const Hplpb__AcquireReq *m) {
  uint64_t peer = m->failed_peer, wait = 0, sender = 0;
  s->ctr.silent_reports++;
  hpl__dir_loc *me = hpl__dtab_loc(o, asker->id);
  if (o->is_inline || (me && (me->complete || (me->upstream && me->upstream != peer)))) {
    hpl__dir_acquire_reply_stay(asker, req, 0); /* a stale report: the asker has moved already */
    return;
  }
  hpl__dir_node *pn = hpl__dir_node_find(s, peer);
  int verdict = pn ? hpl__dir_node_verdict(s, pn, asker->id, &wait) : HPL__DIR_SILENT;
  if (verdict == HPL__DIR_PROBING) {
    hpl__dir_acquire_reply_stay(asker, req, wait + 5);
    return;
  }
  if (verdict == HPL__DIR_ALIVE) {
    /* a partial copy, or one not known here: a directory that has just
     * taken over (a failover, a restart) learns of the streams in flight
     * only with the stores' next heartbeats, and a sender starved by its
     * own upstream must not lose its receiver to the source meanwhile */
    hpl__dir_loc *pl = hpl__dtab_loc(o, peer);
    if ((!pl || !pl->complete) && m->insist < 2) {
      hpl__dir_acquire_reply_stay(asker, req, 0);
      return;
    }
  }
  int rc = hpl__dtab_pick_instead(&s->tab, o, asker->id, peer, &sender);
  if (rc != 0) {
    /* nothing better idle now: keep the stream, report again later */
    hpl__dir_acquire_reply_stay(asker, req, 0);
    return;
  }
  s->ctr.suspect_moves++;
  HPL__LOG_INFO("node %016llx moves off silent sender %016llx for '%s' at %llu bytes: now %016llx",
                (unsigned long long)asker->id, (unsigned long long)peer, o->id,
                (unsigned long long)m->progress, (unsigned long long)sender);
  hpl__dir_acquire_reply_sender(s, asker, req, o, sender);
}

/* Whether `n` reported its own partial sender crawling less than `ms` ago
 * (NULL: no). */
static int reported_crawl(const hpl__dir_node *n, uint64_t now, uint64_t ms) {
  return n && n->crawl_report_ms && now - n->crawl_report_ms < ms;
}

static int blamed_recently(const hpl__dir_node *n, uint64_t now) {
  return n && n->blamed_ms && now - n->blamed_ms < HPL__DIR_CRAWLING_MS;
}

/* A node crawls if it reported its own sender crawling, or a receiver
 * reported it - unless that receiver is itself reported by its own
 * receivers: a slow host reports its sender and is reported by the nodes
 * below it, and the sender it blames is most likely fine (if it is not,
 * the receivers that move onto it report it in turn). */
int hpl__dir_acquire_crawling(uint64_t node, void *srv) {
  hpl__dir_node *n = hpl__dir_node_find(srv, node);
  uint64_t now = hpl__now_ms();
  if (reported_crawl(n, now, HPL__DIR_CRAWLING_MS)) return 1;
  if (!blamed_recently(n, now)) return 0;
  return !blamed_recently(hpl__dir_node_find(srv, n->blamed_by), now);
}

/* The verdict on report `r` (see crawl_decide): whether its sender may
 * only be as slow as its upstream - some node further up its chain
 * reported its own input crawling (the slowness starts there, or above) -
 * or has just moved off the topmost crawling node and recovers. */
static void crawl_verdict(hpl__dir_server *s, hpl__dir_crawl_rep *r, uint64_t now) {
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, r->id);
  hpl__dir_node *peer = hpl__dir_node_find(s, r->peer);
  r->peer_crawls = reported_crawl(peer, now, DIR_CRAWL_MEMORY_MS);
  int above = 0;
  hpl__dir_loc *l = o ? hpl__dtab_loc(o, r->peer) : NULL;
  for (int k = 0; l && !l->complete && l->upstream && !above && k < DIR_CHAIN_WALK_MAX; k++) {
    above = reported_crawl(hpl__dir_node_find(s, l->upstream), now, DIR_CRAWL_MEMORY_MS);
    l = hpl__dtab_loc(o, l->upstream);
  }
  r->innocent = above || (peer && peer->bypass_ms && now - peer->bypass_ms < DIR_BYPASS_GRACE_MS);
}

/* Carry out report `r`: the asker's partial sender crawls. The sender may
 * only be as slow as its upstream (crawl_verdict): a node further up the
 * chain reported its own input crawling - the receiver right below the
 * topmost such node moves, the others wait for it - or the sender has just
 * moved off that node (it is given DIR_BYPASS_GRACE_MS to recover); then
 * the asker moves only to an idle complete copy. Otherwise the sender is
 * the topmost crawling node of its chain: the slow link is its own or the
 * one into it, and both are slow in the usual case of a slow host, which
 * reports its own sender too (moving it does not help the ones below it).
 * So the asker moves to a copy that does not depend on the sender, busy or
 * not: the slow node takes little of a shared sender's bandwidth. */
static void crawl_decide(hpl__dir_server *s, hpl__dir_crawl_rep *r, uint64_t now) {
  hpl__dir_node *asker = hpl__dir_node_find(s, r->asker);
  if (!asker || !asker->conn) return; /* gone: nobody to answer */
  hpl__dir_obj *o = hpl__dtab_find(&s->tab, r->id);
  uint64_t sender = 0;
  hpl__dir_loc *me = o ? hpl__dtab_loc(o, asker->id) : NULL;
  int ours = o && !o->is_inline && me && !me->complete && me->upstream == r->peer;
  if (ours && hpl__dtab_idle_complete(&s->tab, o, asker->id, r->peer)) {
    HPL__LOG_INFO("node %016llx moves off crawling partial sender %016llx for '%s' at %llu bytes",
                  (unsigned long long)asker->id, (unsigned long long)r->peer, r->id,
                  (unsigned long long)r->progress);
    if (hpl__dir_acquire_try(s, asker, r->req, o, r->peer, 0, NULL)) {
      if (r->peer_crawls) asker->bypass_ms = now;
      return;
    }
  } else if (ours && !r->innocent &&
             hpl__dtab_pick_bypass(&s->tab, o, asker->id, r->peer, &sender) == 0) {
    HPL__LOG_INFO("node %016llx moves off slow partial sender %016llx for '%s' at %llu bytes: now "
                  "%016llx", (unsigned long long)asker->id, (unsigned long long)r->peer, r->id,
                  (unsigned long long)r->progress, (unsigned long long)sender);
    s->ctr.slow_moves++;
    if (r->peer_crawls) asker->bypass_ms = now;
    hpl__dir_acquire_reply_sender(s, asker, r->req, o, sender);
    return;
  }
  hpl__dir_acquire_reply_err(asker, r->req, HPL_EUNAVAIL,
                             "no better copy; keep the current sender");
}

/* The batch is due: every verdict first (on the chains as they were
 * reported), then the moves, in arrival order. */
static void crawl_batch(uv_timer_t *t) {
  hpl__dir_server *s = t->data;
  hpl__dir_crawl_rep *list = s->acquire->crawl_reps, *r, *tmp;
  s->acquire->crawl_reps = NULL;
  uint64_t now = hpl__now_ms();
  LL_FOREACH(list, r) crawl_verdict(s, r, now);
  LL_FOREACH_SAFE(list, r, tmp) {
    crawl_decide(s, r, now);
    hpl__dir_obj *o = hpl__dtab_find(&s->tab, r->id);
    if (o) hpl__dtab_gc(&s->tab, o);
    free(r);
  }
}

/* A receiver reports its partial sender crawling: noted at once (the
 * reporter crawls; the sender is blamed), judged with the reports that
 * come within DIR_CRAWL_BATCH_MS. */
void hpl__dir_acquire_on_crawling_sender(hpl__dir_server *s, hpl__dir_node *asker, uint64_t req,
                                         hpl__dir_obj *o, const Hplpb__AcquireReq *m) {
  uint64_t now = hpl__now_ms();
  asker->crawl_report_ms = now;
  hpl__dir_node *peer = hpl__dir_node_find(s, m->failed_peer);
  if (peer) {
    peer->blamed_ms = now;
    peer->blamed_by = asker->id;
  }
  size_t len = strlen(o->id) + 1;
  hpl__dir_crawl_rep *r = malloc(sizeof *r + len);
  if (!r) {
    hpl__dir_acquire_reply_err(asker, req, HPL_ENOMEM, "out of memory");
    return;
  }
  *r = (hpl__dir_crawl_rep){.asker = asker->id, .peer = m->failed_peer, .req = req,
                       .progress = m->progress};
  memcpy(r->id, o->id, len);
  LL_APPEND(s->acquire->crawl_reps, r);
  if (!uv_is_active((uv_handle_t *)&s->acquire->bcrawl_timer))
    uv_timer_start(&s->acquire->bcrawl_timer, crawl_batch, DIR_CRAWL_BATCH_MS, 0);
}

void hpl__dir_acquire_crawl_start(hpl__dir_server *s) {
  uv_timer_init(s->loop, &s->acquire->bcrawl_timer);
  s->acquire->bcrawl_timer.data = s;
}

void hpl__dir_acquire_crawl_stop(hpl__dir_server *s) {
  uv_close((uv_handle_t *)&s->acquire->bcrawl_timer, NULL);
}

void hpl__dir_acquire_crawl_free(hpl__dir_server *s) {
  hpl__dir_crawl_rep *r, *tmp;
  LL_FOREACH_SAFE(s->acquire->crawl_reps, r, tmp) free(r);
  s->acquire->crawl_reps = NULL;
}

void hpl__dir_acquire_drop_crawl_reports(hpl__dir_server *s, uint64_t asker) {
  hpl__dir_crawl_rep *r, *tmp;
  LL_FOREACH_SAFE(s->acquire->crawl_reps, r, tmp) {
    if (r->asker != asker) continue;
    LL_DELETE(s->acquire->crawl_reps, r);
    free(r);
  }
}
