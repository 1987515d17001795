/* server.c - the store's start, signals, drain and stop, and the wiring of
 * the directory's messages to the modules that handle them (see server.h). */
#include "server.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "clients.h"
#include "dataport.h"
#include "dconns.h"
#include "digest.h"
#include "dirlink.h"
#include "fanout.h"
#include "fetch.h"
#include "handoff.h"
#include "hoplite.h"
#include "lifetime.h"
#include "log.h"
#include "objects.h"
#include "puller.h"
#include "put.h"
#include "rdsink.h"
#include "ring.h"
#include "rdtask.h"
#include "room.h"
#include "stmetrics.h"
#include "util.h"

void hpl__store_config_defaults(hpl__store_config *c) {
  memset(c, 0, sizeof *c);
  c->memory = 2ull << 30;
  c->allow_gid = -1;
  c->max_uid_clients = HPL__DEFAULT_MAX_CONNS / 4;
  c->max_conns = HPL__DEFAULT_MAX_CONNS;
  c->chunk = 4u << 20;
  c->stall_timeout_ms = 10000;
  c->inbound_pulls = 2;
  c->fill_hold_ms = 10;
  c->inline_inflight = HPL__INLINE_INFLIGHT_DEFAULT; /* hpl__store_start: from link_rate */
  c->data_idle_ms = 3000;
  c->pull_window = HPL__PULL_WINDOW_DEFAULT; /* hpl__store_start: from link_rate */
  c->straggler_ratio = 0.2;
  c->straggler_ms = 1000;
  c->grace_ms = 5000;
  c->trim_ms = HPL__STORE_TRIM_DEFAULT; /* hpl__store_start: 10 s, never with prefault */
  c->trim_keep = 64ull << 20;
  c->room_wait_ms = 60000;
  c->integrity = HPL__DIGEST_SHA256;
}

/* ------------------------------------------------------------------ directory messages */

/* DROP: the object was deleted; our copy goes (clients holding it keep
 * reading it until they release). */
static void on_drop(hpl__store *s, ProtobufCMessage *m) {
  const char *id = ((Hplpb__DropNote *)m)->id;
  hpl__handoff_deleted(s, id); /* for a new directory (handoff.h) */
  hpl__fetch_deleted(s, id);
}

static void on_upstream_gone(hpl__store *s, ProtobufCMessage *m) {
  Hplpb__UpstreamNote *u = (Hplpb__UpstreamNote *)m;
  if (hpl__id_valid(u->id)) {
    if (u->unlisted) hpl__obj_unlisted(s, u->id);
    if (u->peer) hpl__fetch_upstream_gone(s, u->id, u->peer, u->suspect, u->regroup);
  }
}

static void on_registered(hpl__store *s, int restarted) {
  hpl__ring_directory_lost(s);
  if (restarted) {
    hpl__rdsink_directory_restarted(s);
    hpl__puller_suspect_anew(s);
  }
  /* registered again with the same directory: it has voided the reduce
   * slots this node held on the old connection (others took them over) */
  else if (s->ctr.dir_registrations > 1) hpl__rdtask_end(s, NULL, 0);
}

/* ------------------------------------------------------------------ leaving */

static void drain_grace_over(uv_timer_t *t) {
  hpl__store *s = t->data;
  HPL__LOG_WARN("grace period over: leaving with %d stream(s) unfinished (their receivers go "
                "elsewhere)", hpl__dataport_active(s));
  hpl__store_stop(s);
}

static void drain_acked(hpl__store *s, const hpl__dl_reply *r, void *arg) {
  (void)s, (void)r, (void)arg;
}

/* Draining: the last stream ended. */
static void drain_check(hpl__store *s) {
  if (!s->draining || s->stopping || hpl__dataport_active(s) > 0) return;
  HPL__LOG_INFO("every stream served: leaving cleanly");
  hpl__store_stop(s);
}

void hpl__store_drain(hpl__store *s) {
  s->draining = 1;
  HPL__LOG_INFO("SIGTERM: leaving; serving the %d stream(s) in progress for at most %u ms",
                hpl__dataport_active(s), s->cfg.grace_ms);
  Hplpb__DrainReq d = HPLPB__DRAIN_REQ__INIT;
  d.node_id = s->node_id;
  hpl__dirlink_request(s, HPL__MSG_DRAIN, &d.base, NULL, 0, 1000, drain_acked, NULL);
  hpl__clients_stop(s);
  /* our own pulls are pointless now */
  hpl__fetch_drain(s);
  hpl__rdsink_drain(s);
  uv_timer_init(s->loop, &s->grace);
  s->grace.data = s;
  uv_timer_start(&s->grace, drain_grace_over, s->cfg.grace_ms, 0);
  drain_check(s);
}

static void on_signal(uv_signal_t *sig, int signum) {
  hpl__store *s = sig->data;
  if (signum == SIGTERM && !s->draining && !s->stopping) {
    hpl__store_drain(s);
    return;
  }
  HPL__LOG_INFO("signal %d: shutting down", signum);
  hpl__store_stop(s);
}

/* ------------------------------------------------------------------ start/stop */

/* A loop turn's corked writes to many connections (the clients answered in
 * one turn, the directory link) in one io_uring submission (fanout.h). The
 * ring writes them in the order of the loop's cork list, as the loop would;
 * without io_uring every connection writes its own. */
static void start_fanout(const hpl__store_config *cfg) {
  if (cfg->no_fanout) return;
  if (hpl__fanout_start(HPL__FANOUT_RING) == 0)
    HPL__LOG_INFO("writes of one loop turn go to the kernel in one io_uring submission");
  else
    HPL__LOG_WARN("io_uring refused: every connection's writes are a system call of their own");
}

int hpl__store_start(hpl__store *s, uv_loop_t *loop, const hpl__store_config *cfg) {
  memset(s, 0, sizeof *s);
  s->loop = loop;
  s->cfg = *cfg;
  s->node_id = hpl__random_u64();
  s->start_ms = hpl__now_ms();
  hpl__conn_out_set_total((size_t)cfg->out_total);
  if (!s->cfg.name[0] && s->cfg.auth.on && !s->cfg.auth.has_secret) /* a node credential */
    snprintf(s->cfg.name, sizeof s->cfg.name, "%s", s->cfg.auth.name);
  if (!s->cfg.name[0])
    snprintf(s->cfg.name, sizeof s->cfg.name, "%016llx", (unsigned long long)s->node_id);
  char aerr[256];
  int arc = hpl__auth_bind(&s->cfg.auth, s->cfg.name, aerr, sizeof aerr);
  if (arc) { /* the directory would refuse us: say why now */
    HPL__LOG_ERROR("%s", aerr);
    return arc;
  }
  /* pages populated on purpose stay: a trimmed page faults in again on its
   * next use (seen: a 256 MiB reduce 4.8 s instead of 2.3 s on 8 emulated
   * hosts when the pools had been trimmed since the last one) */
  if (s->cfg.trim_ms == HPL__STORE_TRIM_DEFAULT) s->cfg.trim_ms = cfg->prefault ? 0 : 10000;
  s->cfg.pull_window = hpl__dconns_window(s->cfg.pull_window, cfg->link_rate);
  s->cfg.inline_inflight = hpl__put_inline_budget(s->cfg.inline_inflight, cfg->link_rate);
  int rc = hpl__pool_create(cfg->memory, s->cfg.name, cfg->prefault, &s->pool);
  if (rc) {
    HPL__LOG_ERROR("cannot create a pool of %llu bytes: %s%s", (unsigned long long)cfg->memory,
                   hpl_strerror(rc),
                   rc == HPL_EINVAL ? " (a capacity above 2^47, or MALLOC_CONF forcing retain:true)"
                   : rc == HPL_ESYS ? " (memfd_create/ftruncate/mmap failed; see errno above)"
                               : "");
    return rc;
  }
  /* each module's context, bottom up (room.c listens to the objects,
   * rdsink.c to rdtask.c) */
  if ((rc = hpl__objects_init(s)) || (rc = hpl__puller_init(s)) || (rc = hpl__room_init(s)) ||
      (rc = hpl__lifetime_init(s)) || (rc = hpl__fetch_init(s)) || (rc = hpl__rdtask_init(s)) ||
      (rc = hpl__rdsink_init(s)) || (rc = hpl__handoff_init(s)) || (rc = hpl__ring_init(s)) || (rc = hpl__stmetrics_start(s, hpl__clients_count)))
    return rc;
  struct stat ns;
  s->netns = stat("/proc/self/ns/net", &ns) == 0 ? (uint64_t)ns.st_ino : 0;
  if ((rc = hpl__dataport_start(s, drain_check)) || (rc = hpl__clients_start(s)) ||
      (rc = hpl__dirlink_start(s)))
    return rc;
  hpl__dataport_on_corrupt(s, hpl__room_corrupt);
  hpl__room_on_refetch(s, hpl__fetch_start);
  hpl__dirlink_on(s, HPL__MSG_DROP, on_drop);
  hpl__dirlink_on(s, HPL__MSG_UPSTREAM_GONE, on_upstream_gone);
  hpl__dirlink_on(s, HPL__MSG_REDUCE_TASK, hpl__rdtask_on_task);
  hpl__dirlink_on(s, HPL__MSG_REDUCE_SINK, hpl__rdsink_on_sink);
  hpl__dirlink_on(s, HPL__MSG_REDUCE_END, hpl__rdsink_on_end);
  hpl__dirlink_on(s, HPL__MSG_REDUCE_ADOPTED, hpl__rdtask_on_adopted);
  hpl__dirlink_on(s, HPL__MSG_RING_END, hpl__ring_on_end);
  hpl__dirlink_on(s, HPL__MSG_GRANT, hpl__fetch_on_grant);
  hpl__dirlink_on(s, HPL__MSG_DIGESTS, hpl__fetch_on_digests);
  hpl__dirlink_on_registered(s, on_registered);
  hpl__dirlink_on_incoming(s, hpl__fetch_incoming);
  hpl__dirlink_on_clients(s, hpl__clients_count);
  hpl__puller_on_quiet(s, hpl__dirlink_quiet);
  uv_signal_init(loop, &s->sigint);
  uv_signal_init(loop, &s->sigterm);
  s->sigint.data = s->sigterm.data = s;
  uv_signal_start(&s->sigint, on_signal, SIGINT);
  uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  start_fanout(cfg);
  char cap[32], pace[64] = "";
  if (s->cfg.link_rate)
    snprintf(pace, sizeof pace, ", streams paced for a %.6g Mbit/s link",
             (double)s->cfg.link_rate / 1e6);
  HPL__LOG_INFO("store %s (node %016llx) up: pool %s, socket %s, data port %d%s", s->cfg.name,
                (unsigned long long)s->node_id,
                hpl__fmt_bytes(hpl__pool_capacity(s->pool), cap, sizeof cap), s->cfg.socket_path,
                hpl__dataport_port(s), pace);
  return 0;
}

void hpl__store_stop(hpl__store *s) {
  if (s->stopping) return;
  s->stopping = 1;
  if (s->draining) uv_close((uv_handle_t *)&s->grace, NULL);
  hpl__rdtask_stop(s);
  hpl__objects_stop(s);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  hpl__clients_stop(s);
  hpl__dataport_stop(s);
  hpl__dirlink_stop(s); /* answers still due arrive now, as HPL_ECANCELED */
  hpl__ring_stop(s);
  hpl__fetch_stop(s);
  hpl__room_stop(s);
  hpl__lifetime_stop(s);
  hpl__rdtask_end(s, NULL, 0);
  hpl__rdsink_stop(s);
  hpl__puller_stop_all(s);
  hpl__stmetrics_stop(s);
}

void hpl__store_free(hpl__store *s) {
  hpl__fanout_stop();
  hpl__dirlink_free(s);
  hpl__clients_free(s);
  hpl__ring_free(s);
  hpl__rdsink_free(s);
  hpl__handoff_free(s);
  hpl__rdtask_free(s);
  hpl__fetch_free(s);
  hpl__lifetime_free(s);
  hpl__room_free(s);
  hpl__dataport_free(s);
  hpl__puller_free(s);
  hpl__objects_free(s);
  hpl__stmetrics_free(s);
  hpl__pool_destroy(s->pool);
  s->pool = NULL;
}
