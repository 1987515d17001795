/* dirmetrics.c - the directory's counters, histograms and /metrics (see
 * dirmetrics.h). */
#include "dirmetrics.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "fanout.h"
#include "ha.h"
#include "metricsrv.h"
#include "nodes.h"
#include "uvconn.h"

#define C(name, value, prom, help) {name, value, prom, HPL__M_COUNTER, 0, help}
#define G(name, value, prom, help) {name, value, prom, HPL__M_GAUGE, 0, help}

size_t hpl__dir_metrics_collect(hpl__dir_server *s, hpl__metric *out) {
  const hpl__dir_counters *c = &s->ctr;
  uint64_t fo_batches, fo_items, fo_helper, fo_partial;
  hpl__fanout_stats(&fo_batches, &fo_items, &fo_helper, &fo_partial);
  hpl__conn_stats cs;
  hpl__conn_stats_get(&cs);
  hpl__ha_info ha = {0}; /* all 0 without --etcd */
  if (s->cfg.ha) hpl__ha_info_get(s->cfg.ha, &ha);
  const hpl__metric v[] = {
      G("dir_nodes", hpl__dir_nodes_count(s), "nodes", "Stores registered"),
      G("dir_objects", s->tab.nobjs, "objects", "Objects in the directory's table"),
      G("dir_inline_bytes", s->tab.inline_bytes, "inline_bytes",
        "Bytes of small objects held inline (see --inline-memory)"),
      C("dir_acquires", c->acquires, "acquires_total", "ACQUIREs from stores (a sender asked for)"),
      C("dir_inline_served", c->inline_served, "inline_served_total",
        "ACQUIREs answered with an inline copy's bytes"),
      C("dir_senders_assigned", c->senders_assigned, "senders_assigned_total",
        "Senders assigned to receivers"),
      C("dir_ring_assigned", c->ring_assigned, "ring_assigned_total",
        "Senders assigned from an allreduce ring predecessor"),
      C("dir_peeks_served", c->peeks_served, "peeks_served_total",
        "Direct client reads of small objects answered with their bytes"),
      C("dir_peek_waits", c->peek_waits, "peek_waits_total",
        "Direct client reads that waited for their object"),
      C("dir_peeks_granted", c->peeks_granted, "peeks_granted_total",
        "Direct client reads of large objects answered by naming a sender to the client's store"),
      C("dir_direct_stats", c->direct_stats, "direct_stats_total",
        "STATs clients sent straight to the directory (objects their node does not hold)"),
      C("dir_publishes", c->publishes, "publishes_total",
        "Small objects clients published to the directory ahead of their store's put"),
      C("dir_publishes_ignored", c->publishes_ignored, "publishes_ignored_total",
        "Publishes not taken (object exists, publishing off, too large, cache full)"),
      C("dir_publishes_confirmed", c->publishes_confirmed, "publishes_confirmed_total",
        "Published objects their store's put confirmed"),
      C("dir_publishes_retracted", c->publishes_retracted, "publishes_retracted_total",
        "Published objects forgotten again because their store's put failed"),
      C("dir_publishes_orphaned", c->publishes_orphaned, "publishes_orphaned_total",
        "Published objects forgotten because their client left and no store put them"),
      C("dir_fanouts", fo_batches, "fanouts_total",
        "Loop turns whose replies to many connections were written at once (see --no-fanout)"),
      C("dir_fanout_writes", fo_items, "fanout_writes_total", "Writes made in those turns"),
      C("dir_fanout_helper_writes", fo_helper, "fanout_helper_writes_total",
        "Of those, the writes the helper thread made"),
      C("dir_fanout_partial", fo_partial, "fanout_partial_total",
        "Fan-out writes the socket took only part of (the rest followed in order)"),
      C("dir_waits", c->waits, "acquire_waits_total",
        "ACQUIREs that could not be answered at once and waited"),
      C("dir_lost_replies", c->lost_replies, "lost_replies_total",
        "ACQUIREs answered: object lost (no copy that can finish remains)"),
      C("dir_corrupt_reports", c->corrupt_reports, "corrupt_reports_total",
        "Receivers' reports of a unit that did not match its digest (that copy dropped)"),
      C("dir_nodes_dead", c->nodes_dead, "nodes_dead_total", "Nodes declared dead"),
      C("dir_reduce_resets", c->reduce_resets, "reduce_resets_total",
        "Reduce tree slots reset after a failure"),
      C("dir_auth_failures", c->auth_failures, "auth_failures_total",
        "Connections that failed the cluster secret handshake"),
      G("dir_conns", s->nconns, "connections", "Open connections (stores, clients, tools)"),
      HPL__CONN_METRICS("dir_", "Connections", cs),
      C("dir_conns_refused", c->conns_refused, "connections_refused_total",
        "Connections closed at once for --max-connections"),
      C("dir_held_taken", c->held_taken, "held_taken_total",
        "Copies confirmed or adopted from stores' HELD reports"),
      C("dir_held_digests", c->held_digests, "held_digests_total",
        "Objects whose digests a store's HELD report brought back (after a restart)"),
      C("dir_digest_conflicts", c->digest_conflicts, "digest_conflicts_total",
        "HELD reports whose digests disagreed with those kept (copy not listed, or the "
        "object refused)"),
      C("dir_held_dropped", c->held_dropped, "held_dropped_total",
        "HELD entries answered with DROP (deleted while away)"),
      C("dir_tombstones", c->tombstones, "tombstones_total",
        "Deletes remembered for a minute, so a copy re-reported later (after a directory "
        "restart, or by a store back from the dead) is dropped, not revived"),
      C("dir_tombs_learned", c->tombs_learned, "tombs_learned_total",
        "Deletes the stores re-reported at registration (learned from a former directory)"),
      C("dir_reduces_learned", c->reduces_learned, "reduces_learned_total",
        "Finished reduces whose sources their sinks re-reported at registration"),
      C("dir_takeovers_refused", c->takeovers_refused, "takeovers_refused_total",
        "Registrations as a live node's id or name from another store process, refused"),
      C("dir_deletes_refused", c->deletes_refused, "deletes_refused_total",
        "Deletes of an object another live node made, refused (HPL_EPERM)"),
      C("dir_deletes_dropped_by_asker", c->deletes_dropped_by_asker,
        "deletes_dropped_by_asker_total",
        "Copies dropped by the deleting node's own store on the answer (no DROP sent)"),
      C("dir_reconnects", c->reconnects, "reconnects_total",
        "Live nodes whose store came back on a new connection"),
      C("dir_sweep_stalls", c->sweep_stalls, "sweep_stalls_total",
        "Liveness sweeps that ran late because the loop was busy"),
      {"dir_stall_ms", c->stall_ms, "sweep_stall_seconds_total", HPL__M_COUNTER, 1,
       "How late those sweeps ran, in all"},
      C("dir_silent_reports", c->silent_reports, "silent_reports_total",
        "Receivers' reports of a silent sender"),
      C("dir_quiet_notes", c->quiet_notes, "quiet_notes_total",
        "Receivers' early notes of a sender quiet for half their window (a probe goes out)"),
      C("dir_probes", c->probes, "probes_total", "Probes sent to reported senders"),
      C("dir_measures", c->measures, "link_measures_total",
        "Probes sent to measure the links of a crawling reduce's nodes"),
      C("dir_suspects", c->suspects, "suspicions_total",
        "Senders that did not answer a probe in time"),
      C("dir_suspect_moves", c->suspect_moves, "suspect_moves_total",
        "Receivers moved off a suspected sender"),
      C("dir_slow_moves", c->slow_moves, "slow_moves_total",
        "Receivers moved off a partial sender slow by itself"),
      C("dir_reduces_adopted", c->reduces_adopted, "reduces_adopted_total",
        "Running reduce trees of a previous directory taken over"),
      C("dir_reduce_done_notes", c->reduce_done_notes, "reduce_done_notes_total",
        "Reduces a sink said had finished while no directory knew them (their tasks ended)"),
      C("dir_evictions_granted", c->evictions_granted, "evictions_granted_total",
        "Copies stores were let evict"),
      C("dir_reduce_stragglers", c->reduce_stragglers, "reduce_stragglers_total",
        "Reduce slots replaced because their node crawled"),
      C("dir_reduce_lost_reused", c->reduce_lost_reused, "reduce_lost_reused_total",
        "Sources out of a reduce tree since a failure put back for want of a spare"),
      C("dir_reduce_resumes", c->reduce_resumes, "reduce_resumes_total",
        "Failed reduce slots that went on where they stopped, on another copy of the source"),
      C("dir_reduces_inline", c->reduces_inline, "reduces_inline_total",
        "Reduces of small objects done at the directory (no tree)"),
      C("dir_rings_formed", c->rings_formed, "rings_formed_total",
        "Ring allreduces that formed (every participant joined with a source of its own)"),
      C("dir_rings_declined", c->rings_declined, "rings_declined_total",
        "Ring allreduces that could not form (their clients reduced as usual)"),
      C("dir_rings_done", c->rings_done, "rings_done_total",
        "Ring allreduces completed at every member"),
      C("dir_rings_abandoned", c->rings_abandoned, "rings_abandoned_total",
        "Ring allreduces ended by a member's failure or loss (their clients reduced as usual)"),
      G("dir_term", s->cfg.term, "term",
        "This leader's term, the etcd revision that made it lead (0: no --etcd)"),
      C("dir_lease_renewals", ha.renewals, "lease_renewals_total",
        "Renewals of the leader lease etcd confirmed"),
      C("dir_lease_renew_failures", ha.renew_failures, "lease_renew_failures_total",
        "Renewals of the leader lease that failed (retried; the fence acts if they go on)"),
      G("dir_lease_renew_last_us", ha.renew_last_us, "lease_renew_last_microseconds",
        "Round trip of the last confirmed lease renewal"),
      G("dir_lease_renew_max_us", ha.renew_max_us, "lease_renew_max_microseconds",
        "Longest round trip of a confirmed lease renewal since leading"),
      G("dir_lease_left_ms", ha.lease_left_ms, "lease_left_milliseconds",
        "How long the lease is certainly this directory's (it stops serving at 0)"),
  };
  size_t n = sizeof v / sizeof v[0];
  _Static_assert(sizeof v / sizeof v[0] <= HPL__DIR_METRICS_MAX, "HPL__DIR_METRICS_MAX");
  memcpy(out, v, sizeof v);
  return n;
}

/* ------------------------------------------------------------------ /metrics */

/* On the loop, for each scrape. */
static void render(void *arg, hpl__mbuf *b) {
  hpl__dir_server *s = arg;
  char labels[64] = "";
  hpl__m_label(labels, sizeof labels, "node", "directory");
  hpl__metric v[HPL__DIR_METRICS_MAX];
  size_t n = hpl__dir_metrics_collect(s, v);
  hpl__m_list(b, "hoplite_directory_", labels, v, n);
  hpl__m_family(b, "hoplite_directory_request_seconds", "histogram",
                "Time the loop spent handling one message, by message type");
  for (unsigned t = 0; t <= HPL__MSG_MAX_; t++) {
    if (!s->req_hist[t].count) continue;
    char type[32], tl[128];
    const char *name = hpl__msg_name(t);
    size_t i = 0;
    for (; name[i] && i < sizeof type - 1; i++) type[i] = (char)tolower((unsigned char)name[i]);
    type[i] = 0;
    snprintf(tl, sizeof tl, "%s", labels);
    hpl__m_label(tl, sizeof tl, "type", type);
    hpl__m_hist(b, "hoplite_directory_request_seconds", tl, &s->req_hist[t]);
  }
  hpl__m_family(b, "hoplite_directory_acquire_wait_seconds", "histogram",
                "ACQUIREs that waited: arrival to answer or timeout (ms resolution)");
  hpl__m_hist(b, "hoplite_directory_acquire_wait_seconds", labels, &s->acquire_wait_hist);
}

int hpl__dir_metrics_start(hpl__dir_server *s) {
  return hpl__msrv_start(s->loop, &s->cfg.metrics, &s->cfg.auth, "directory", render, s,
                         &s->msrv);
}

void hpl__dir_metrics_stop(hpl__dir_server *s) {
  hpl__msrv_stop(s->msrv);
  s->msrv = NULL;
}
