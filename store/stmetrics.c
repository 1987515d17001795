/* stmetrics.c - the store's counters, histograms and /metrics (see
 * stmetrics.h). */
#include "stmetrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "dataport.h"
#include "dconns.h"
#include "hoplite.h"
#include "log.h"
#include "metricsrv.h"
#include "objects.h"
#include "rdtask.h"
#include "uvconn.h"

#define C(name, value, prom, help) {name, value, prom, HPL__M_COUNTER, 0, help}
#define G(name, value, prom, help) {name, value, prom, HPL__M_GAUGE, 0, help}

/* The module's context (s->metrics). */
typedef struct hpl__stmetrics {
  hpl__msrv *msrv;                        /* the /metrics endpoint (NULL: none) */
  size_t (*clients)(const hpl__store *s); /* the clients gauge (hpl__stmetrics_start's) */
} hpl__stmetrics;

/* CPU time this process has used (user + system, all threads), in us. */
static uint64_t cpu_us(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
         (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

size_t hpl__stmetrics_collect(hpl__store *s, hpl__metric *out, const char *only) {
  const hpl__store_counters *c = &s->ctr;
  uint64_t resident = !only || !strcmp(only, "pool_resident") ? hpl__pool_resident(s->pool) : 0;
  uint64_t allocated = hpl__pool_allocated(s->pool), idle = hpl__obj_idle_bytes(s);
  uint64_t clients = s->metrics && s->metrics->clients ? s->metrics->clients(s) : 0;
  hpl__conn_stats cs;
  hpl__conn_stats_get(&cs);
  const hpl__metric v[] = {
      C("cpu_us", cpu_us(), "cpu_microseconds_total",
        "CPU time the store process has used (user and system, every thread)"),
      C("data_bytes_sent", c->data_bytes_sent, "data_sent_bytes_total",
        "Object bytes sent to other stores on the data port"),
      C("data_bytes_received", c->data_bytes_received, "data_received_bytes_total",
        "Object bytes received from other stores"),
      C("pulls_served", c->pulls_served, "pulls_served_total",
        "Streams (whole copies or ranges) served to other stores to their end"),
      C("inline_deferred", c->inline_deferred, "inline_deferred_total",
        "Small puts registered as a copy here, not inline (a batch's larger object, or "
        "past --inline-inflight)"),
      C("pulls_queued", c->pulls_queued, "pulls_queued_total",
        "Copies of large objects that waited for an inbound slot (--inbound-pulls)"),
      C("pull_fill_holds", c->pull_fill_holds, "pull_fill_holds_total",
        "First fills of free inbound slots that waited for the answers of their ask round "
        "(--fill-hold-ms)"),
      C("pull_slots_lent", c->pull_slots_lent, "pull_slots_lent_total",
        "Inbound slots given up by large copies quiet for 40 ms (a queued one took them)"),
      C("pulls_made", c->pulls_made, "pulls_total",
        "Pulls (streams from other stores) started"),
      C("data_conns_opened", c->data_conns_opened, "data_connections_opened_total",
        "Connections this store opened to other stores' data ports for pulls"),
      C("data_conns_reused", c->data_conns_reused, "data_connections_reused_total",
        "Pulls that took an idle connection to their sender instead of opening one"),
      C("data_conns_windowed", c->data_conns_windowed, "data_connections_windowed_total",
        "Of those, connections opened with --pull-window as their receive buffer"),
      C("data_conns_retried", c->data_conns_retried, "data_connections_retried_total",
        "Pulls whose idle connection closed before the reply: pulled again on a new one"),
      G("data_conns_idle", hpl__dconns_idle(s), "data_connections_idle",
        "Idle connections to other stores' data ports kept for the next pull"),
      C("pull_failures", c->pull_failures, "pull_failures_total",
        "Pulls that failed (another sender was asked for)"),
      C("corrupt_units", c->corrupt_units, "corrupt_units_total",
        "Received units that did not match their digests (not counted; the sender reported)"),
      C("bytes_resent", c->bytes_resent, "resent_bytes_total",
        "Bytes received a second time after a pull broke off"),
      C("pull_resumes", c->pull_resumes, "pull_resumes_total",
        "Pulls resumed from another sender where the last one stopped"),
      C("bytes_kept_on_resume", c->bytes_kept_on_resume, "resume_kept_bytes_total",
        "Bytes already received that resumed pulls kept"),
      C("stalls", c->stalls, "pull_stalls_total",
        "Pulls that delivered nothing for --stall-timeout-ms"),
      C("stragglers", c->stragglers, "pull_stragglers_total",
        "Senders replaced for delivering far below the usual rate"),
      C("stragglers_early", c->stragglers_early, "pull_stragglers_early_total",
        "Crawling streams judged before the whole --straggler-ms (finishing would cost more "
        "than moving or starting over)"),
      C("reduce_crawl_reports", c->reduce_crawl_reports, "reduce_crawl_reports_total",
        "Reduce streams reported to the directory as crawling"),
      C("pull_suspects", c->pull_suspects, "pull_suspicions_total",
        "Streams silent for their quiet window (sender reported as suspect)"),
      C("quiet_notes", c->quiet_notes, "quiet_notes_total",
        "Streams quiet for half their window: the directory was told to probe the sender"),
      C("suspect_moves", c->suspect_moves, "suspect_moves_total",
        "Suspected streams moved to another sender on the directory's word"),
      C("restarts", c->restarts, "copy_restarts_total",
        "Copies whose bytes were voided because the object was restarted"),
      C("dir_registrations", c->dir_registrations, "directory_registrations_total",
        "Times this store registered with the directory"),
      G("held_report_objects", c->held_report_objects, "reregistration_objects",
        "Objects the last complete re-report to a new or restarted directory listed"),
      G("held_report_ms", c->held_report_ms, "reregistration_milliseconds",
        "How long that re-report took, from registering to its last piece answered"),
      C("dir_probe_moves", c->dir_probe_moves, "directory_probe_moves_total",
        "Moves to another directory found listening (leading) while ours was silent"),
      C("dir_terms_refused", c->dir_terms_refused, "directory_terms_refused_total",
        "Directories refused for a leader term older than one this store registered with "
        "(a deposed leader)"),
      C("auth_failures", c->auth_failures, "auth_failures_total",
        "Connections that failed the cluster secret handshake"),
      C("clients_refused", c->clients_refused, "clients_refused_total",
        "Local clients refused: not this store's user or group"),
      C("conns_refused", c->conns_refused, "connections_refused_total",
        "Connections closed at once for --max-connections"),
      G("clients", clients, "clients", "Local clients connected"),
      HPL__CONN_METRICS("", "Data-port connections", cs),
      G("data_conns", hpl__dataport_conns(s), "data_connections",
        "Connections open on the data port (other stores pulling)"),
      C("inline_gets", c->inline_gets, "inline_gets_total",
        "Gets of small objects answered with the directory's inline copy"),
      C("inline_puts", c->inline_puts, "inline_puts_total",
        "Puts of small objects the directory keeps inline"),
      C("local_gets", c->local_gets, "local_gets_total",
        "Gets answered at once from a sealed local copy"),
      C("remote_gets", c->remote_gets, "remote_gets_total",
        "Gets of objects this store did not hold (fetched)"),
      C("grants_taken", c->grants_taken, "grants_taken_total",
        "Senders the directory named unasked for a client's direct read (no ACQUIRE needed)"),
      C("grants_ignored", c->grants_ignored, "grants_ignored_total",
        "Grants for objects held or asked for already"),
      C("grant_waits_expired", c->grant_waits_expired, "grant_waits_expired_total",
        "Granted gets whose grant did not come in time (asked the directory instead)"),
      C("puts", c->puts, "puts_total", "Objects put and sealed here"),
      C("creates_memfd", c->creates_memfd, "creates_memfd_total",
        "Created objects whose bytes the store copied from the client's memfd (memcpy)"),
      G("objects", hpl__obj_count(s), "objects", "Objects in the store's table"),
      G("pool_capacity", hpl__pool_capacity(s->pool), "pool_capacity_bytes",
        "Size of the shared-memory pool"),
      G("pool_used", hpl__pool_used(s->pool), "pool_used_bytes",
        "Pool bytes the allocator has taken (objects, rounding, metadata)"),
      G("pool_allocated", allocated, "pool_allocated_bytes",
        "Pool bytes objects hold (sizes rounded to size classes)"),
      G("pool_high_water", hpl__pool_high_water(s->pool), "pool_high_water_bytes",
        "Most pool bytes objects ever held at once"),
      G("pool_resident", resident, "pool_resident_bytes",
        "Pool pages backed by memory"),
      C("pool_trims", c->pool_trims, "pool_trims_total",
        "Walks that gave free pool pages back to the kernel"),
      C("pool_trimmed_bytes", c->pool_trimmed_bytes, "pool_trimmed_bytes_total",
        "Bytes those walks gave back"),
      G("pinned_bytes", allocated - idle, "pinned_bytes",
        "Allocated pool bytes that cannot be let go now (held, written, serving)"),
      G("idle_bytes", idle, "idle_bytes", "Pool bytes of idle copies (may be evicted)"),
      C("evictions", c->evictions, "evictions_total", "Idle copies let go to make room"),
      C("evicted_bytes", c->evicted_bytes, "evicted_bytes_total",
        "Bytes of the copies let go to make room"),
      C("evict_refusals", c->evict_refusals, "evict_refusals_total",
        "Copies offered for eviction that the directory kept"),
      C("room_waits", c->room_waits, "room_waits_total", "Buffers that waited for room"),
      C("room_timeouts", c->room_timeouts, "room_timeouts_total",
        "Buffers that found no room in time"),
      C("sendfile_bytes", c->sendfile_bytes, "sendfile_bytes_total",
        "Stream bytes sent from the pool with sendfile(2), without a user-space copy"),
      C("paced_conns", c->paced_conns, "paced_connections_total",
        "Data-port connections whose streams leave paced to --link-rate"),
      C("pace_failures", c->pace_failures, "pace_failures_total",
        "Data-port connections the kernel would not pace (their streams left unpaced)"),
      G("reduce_tasks", hpl__rdtask_count(s), "reduce_tasks",
        "Reduce tasks this store runs or keeps until their reduce ends"),
      C("orphans_ended", c->orphans_ended, "reduce_orphans_ended_total",
        "Reduce tasks a restarted directory did not adopt, ended"),
      C("reduce_resumes", c->reduce_resumes, "reduce_resumes_total",
        "Reduce tasks that took a failed node's slot over where it stopped"),
      C("reduce_resumed_bytes", c->reduce_resumed_bytes, "reduce_resumed_bytes_total",
        "Output bytes resumed reduce tasks did not make again"),
      C("reduce_rebases", c->reduce_rebases, "reduce_rebases_total",
        "Resumed reduce tasks that made skipped bytes after all (a restarted parent)"),
      C("reduce_child_moves", c->reduce_child_moves, "reduce_child_moves_total",
        "Children's streams pulled on from a resumed slot's new node"),
      C("owned_deletes", c->owned_deletes, "owned_deletes_total",
        "Objects deleted because the client owning them left"),
      C("ttl_deletes", c->ttl_deletes, "ttl_deletes_total",
        "Objects deleted because their TTL ran out"),
      C("deletes_dropped_here", c->deletes_dropped_here, "deletes_dropped_here_total",
        "Copies dropped on the answer to this node's own DELETE (no DROP round trip)"),
      C("handoff_tombs_dropped", c->handoff_tombs_dropped, "handoff_tombs_dropped_total",
        "Deletes forgotten before a new directory could learn them (too many)"),
      C("handoff_reduces_dropped", c->handoff_reduces_dropped, "handoff_reduces_dropped_total",
        "Reduces made here whose sources were forgotten (too many)"),
      C("handoff_tombs_sent", c->handoff_tombs_sent, "handoff_tombs_sent_total",
        "Deletes re-reported to a directory at registration"),
      C("handoff_reduces_sent", c->handoff_reduces_sent, "handoff_reduces_sent_total",
        "Reduces made here re-reported to a directory at registration"),
      C("spilled", c->spilled, "spills_total", "Objects written to spill files"),
      C("spilled_bytes", c->spilled_bytes, "spilled_bytes_total",
        "Bytes written to spill files"),
      C("spill_dropped", c->spill_dropped, "spill_dropped_total",
        "Buffers freed of objects already on disk"),
      C("restored", c->restored, "restores_total", "Objects read back from spill files"),
      C("restored_bytes", c->restored_bytes, "restored_bytes_total",
        "Bytes read back from spill files"),
      C("spill_errors", c->spill_errors, "spill_errors_total",
        "Spill file writes or reads that failed"),
      C("spill_corrupt", c->spill_corrupt, "spill_corrupt_total",
        "Spilled copies dropped because a unit read back failed its digest"),
      C("ring_tasks", c->ring_tasks, "ring_tasks_total",
        "Ring allreduces this node took part in"),
      C("rings_done", c->rings_done, "rings_done_total",
        "Ring allreduces whose target this node completed"),
      C("ring_failures", c->ring_failures, "ring_failures_total",
        "Ring allreduces whose part here failed or ended unfinished"),
      C("ring_fallbacks", c->ring_fallbacks, "ring_fallbacks_total",
        "Allreduces that asked for a ring and ran none (reduced as usual)"),
      /* the node id is a label of hoplite_store_info (render) */
      {"node_id", s->node_id, NULL, HPL__M_GAUGE, 0, NULL},
  };
  size_t n = sizeof v / sizeof v[0];
  _Static_assert(sizeof v / sizeof v[0] <= HPL__STORE_METRICS_MAX, "HPL__STORE_METRICS_MAX");
  if (!only) {
    memcpy(out, v, sizeof v);
    return n;
  }
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].name, only)) {
      out[0] = v[i];
      return 1;
    }
  return 0;
}

/* ------------------------------------------------------------------ /metrics */

/* On the loop, for each scrape. */
static void render(void *arg, hpl__mbuf *b) {
  hpl__store *s = arg;
  char labels[256] = "", info[320] = "", id[24];
  hpl__m_label(labels, sizeof labels, "node", s->cfg.name);
  snprintf(id, sizeof id, "%016llx", (unsigned long long)s->node_id);
  snprintf(info, sizeof info, "%s", labels);
  hpl__m_label(info, sizeof info, "node_id", id);
  hpl__m_family(b, "hoplite_store_info", "gauge", "This store (1): its node name and node id");
  hpl__m_sample(b, "hoplite_store_info", info, 1, 0);
  hpl__metric v[HPL__STORE_METRICS_MAX];
  size_t n = hpl__stmetrics_collect(s, v, NULL);
  hpl__m_list(b, "hoplite_store_", labels, v, n);
  hpl__m_family(b, "hoplite_store_get_seconds", "histogram",
                "Client GETs from arrival to answer (errors and timeouts included)");
  hpl__m_hist(b, "hoplite_store_get_seconds", labels, &s->get_hist);
  hpl__m_family(b, "hoplite_store_put_seconds", "histogram",
                "Client puts from CREATE or PUT to the answer of their seal");
  hpl__m_hist(b, "hoplite_store_put_seconds", labels, &s->put_hist);
}

int hpl__stmetrics_start(hpl__store *s, size_t (*clients)(const hpl__store *s)) {
  if (!(s->metrics = calloc(1, sizeof *s->metrics))) return HPL_ENOMEM;
  s->metrics->clients = clients;
  return hpl__msrv_start(s->loop, &s->cfg.metrics, &s->cfg.auth, s->cfg.name, render, s,
                         &s->metrics->msrv);
}

void hpl__stmetrics_stop(hpl__store *s) {
  if (!s->metrics) return;
  hpl__msrv_stop(s->metrics->msrv);
  s->metrics->msrv = NULL;
}

void hpl__stmetrics_free(hpl__store *s) {
  free(s->metrics);
  s->metrics = NULL;
}
