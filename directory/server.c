/* server.c - the hoplite-directory server's frame, on top of every
 * module: the listener, connections (accept, close), the dispatch table
 * from message type to handler, signals, start and free, and the wiring of
 * the events lower modules emit to the modules above that hear them (see
 * server.h). */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utlist.h>

#include "acquire.h"
#include "admin.h"
#include "cost.h"
#include "digests.h"
#include "dirmetrics.h"
#include "fanout.h"
#include "ha.h"
#include "hoplite.h"
#include "locs.h"
#include "publish.h"
#include "log.h"
#include "nodes.h"
#include "reduce.h"
#include "ring.h"
#include "status.h"
#include "tombs.h"
#include "util.h"
#include "xlog.h"

void hpl__dir_config_defaults(hpl__dir_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
  c->listen_port = 7700;
  c->ha_prefix = "/hoplite/default";
  c->lease_ms = 3000;
  c->inline_max = HPL__DEFAULT_INLINE_MAX;
  c->inline_memory = 1ull << 30;
  c->max_senders = 1;
  c->heartbeat_ms = 500;
  c->heartbeat_timeout_ms = 3000;
  c->probe_ms = 100;
  c->max_conns = HPL__DEFAULT_MAX_CONNS;
  c->reduce_latency_s = 200e-6;
  c->reduce_bandwidth = 125e6;
}


/* ------------------------------------------------------------------ dispatch */

/* Rules a message type's frames must meet before its handler runs. */
enum {
  DIR_NODE = 1,    /* only from a registered node (else a protocol error) */
  DIR_PAYLOAD = 2, /* may carry a payload (else a protocol error) */
  DIR_ID = 4,      /* its `id` field must be a valid object id (else HPL_EINVAL) */
};

typedef struct dir_route {
  hpl__dir_handler fn;
  unsigned rules; /* DIR_* */
} dir_route;

/* Every message type the directory accepts; any other is a protocol error. */
static const dir_route routes[HPL__MSG_MAX_ + 1] = {
    /* store <-> directory */
    [HPL__MSG_REGISTER] = {hpl__dir_nodes_on_register, 0},
    [HPL__MSG_HEARTBEAT] = {hpl__dir_nodes_on_heartbeat, DIR_NODE},
    [HPL__MSG_DRAIN] = {hpl__dir_nodes_on_drain, DIR_NODE},
    [HPL__MSG_QUIET] = {hpl__dir_nodes_on_quiet, DIR_NODE},
    [HPL__MSG_LOC_ADD] = {hpl__dir_locs_on_add, DIR_NODE | DIR_ID},
    [HPL__MSG_LOC_NOTE] = {hpl__dir_locs_on_note, DIR_NODE | DIR_ID},
    [HPL__MSG_INLINE_PUT] = {hpl__dir_locs_on_inline_put, DIR_NODE | DIR_ID | DIR_PAYLOAD},
    [HPL__MSG_HELD] = {hpl__dir_locs_on_held, DIR_NODE},
    [HPL__MSG_EVICT] = {hpl__dir_locs_on_evict, DIR_NODE},
    [HPL__MSG_ACQUIRE] = {hpl__dir_acquire_on_acquire, DIR_NODE | DIR_ID},
    [HPL__MSG_REDUCE_FAIL] = {hpl__dir_reduce_on_fail, DIR_NODE},
    [HPL__MSG_REDUCE_DONE] = {hpl__dir_reduce_on_done, DIR_NODE},
    [HPL__MSG_RING] = {hpl__dir_ring_on_request, DIR_NODE},
    [HPL__MSG_RING_NOTE] = {hpl__dir_ring_on_note, DIR_NODE},
    [HPL__MSG_REPLY] = {hpl__dir_admin_on_drop_ack, 0}, /* a holder dropped its copy */
    /* clients and tools (any connection) */
    [HPL__MSG_PEEK] = {hpl__dir_acquire_on_peek, DIR_ID},
    [HPL__MSG_PUBLISH] = {hpl__dir_publish_on, DIR_ID | DIR_PAYLOAD},
    [HPL__MSG_STAT] = {hpl__dir_admin_on_stat, DIR_ID},
    [HPL__MSG_DELETE] = {hpl__dir_admin_on_delete, DIR_ID},
    [HPL__MSG_LIST] = {hpl__dir_admin_on_list, 0},
    [HPL__MSG_COUNTERS] = {hpl__dir_admin_on_counters, 0},
    [HPL__MSG_TRANSFERS] = {hpl__dir_xlog_on_transfers, 0},
    [HPL__MSG_STATUS] = {hpl__dir_status_on_status, 0},
    [HPL__MSG_REDUCE] = {hpl__dir_reduce_on_request, 0},
    [HPL__MSG_REDUCE_INFO] = {hpl__dir_reduce_on_info, DIR_ID},
};

/* The message's `id` string field (NULL if it has none or it is unset). */
static const char *msg_id(const ProtobufCMessage *m) {
  const ProtobufCFieldDescriptor *fd =
      protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "id");
  if (!fd || fd->type != PROTOBUF_C_TYPE_STRING) return NULL;
  return *(const char *const *)((const char *)m + fd->offset);
}

static void on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                     const uint8_t *payload, uint64_t plen) {
  hpl__dir_conn *dc = hpl__conn_data(c);
  if (dc->srv->cfg.ha && !hpl__ha_certain(dc->srv->cfg.ha)) { /* a leader no longer */
    hpl__ha_fence(dc->srv->cfg.ha); /* (does not return: main.c's fence executes anew) */
    return;
  }
  const dir_route *rt = h->type <= HPL__MSG_MAX_ && routes[h->type].fn ? &routes[h->type] : NULL;
  unsigned rules = rt ? rt->rules : 0;
  if ((rules & DIR_ID) && !hpl__id_valid(msg_id(m))) {
    hpl__conn_reply(c, h->req_id, HPL_EINVAL, "invalid object id");
    return;
  }
  if (plen && !(rules & DIR_PAYLOAD)) {
    hpl__conn_fail(c, "unexpected payload");
    return;
  }
  if ((rules & DIR_NODE) && !dc->node) {
    hpl__conn_fail(c, "request before REGISTER");
    return;
  }
  if (hpl__conn_role(c) == HPL__ROLE_READER && h->type != HPL__MSG_PEEK &&
      h->type != HPL__MSG_PUBLISH && h->type != HPL__MSG_STAT) {
    hpl__conn_fail(c, "a reader's connection may only PEEK, STAT and PUBLISH");
    return;
  }
  if (dc->node) hpl__dir_node_heard(dc->srv, dc->node);
  if (!rt) {
    char why[64];
    snprintf(why, sizeof why, "unexpected %s message", hpl__msg_name(h->type));
    hpl__conn_fail(c, why);
    return;
  }
  hpl__dir_frame f = {.dc = dc, .req = h->req_id, .msg = m, .payload = payload, .plen = plen};
  hpl__dir_server *s = dc->srv; /* the handler may end the connection (dc) */
  uint64_t t0 = uv_hrtime();
  rt->fn(s, &f);
  hpl__hist_observe(&s->req_hist[h->type], uv_hrtime() - t0);
}

/* ------------------------------------------------------------------ connections */

static void on_close(hpl__conn *c, int status) {
  hpl__dir_conn *dc = hpl__conn_data(c);
  hpl__dir_server *s = dc->srv;
  hpl__dir_nodes_conn_closed(s, dc, status);
  hpl__dir_admin_conn_closed(s, dc);
  hpl__dir_reduce_conn_closed(s, dc);
  hpl__dir_acquire_conn_closed(s, dc);
  hpl__dir_publish_conn_closed(s, dc);
  DL_DELETE(s->conns, dc);
  s->nconns--;
  free(dc);
}

static void on_accept(uv_stream_t *server, int status) {
  hpl__dir_server *s = server->data;
  if (status < 0) {
    HPL__LOG_WARN("accept: %s", uv_strerror(status));
    return;
  }
  char host[64];
  uv_stream_t *t = hpl__conn_accept(server, host, sizeof host);
  if (t && t->type == UV_TCP) hpl__conn_mark_control((uv_tcp_t *)t); /* all of it is control */
  if (t) hpl__dir_server_serve(s, t, host);
}

void hpl__dir_server_serve(hpl__dir_server *s, uv_stream_t *t, const char *peer) {
  char label[96];
  hpl__dir_conn *dc = hpl__conn_admit(t, s->nconns, s->cfg.max_conns, &s->ctr.conns_refused,
                                      "directory", sizeof *dc);
  if (!dc) return; /* full (taken and closed at once), or no memory */
  dc->srv = s;
  snprintf(dc->peer, sizeof dc->peer, "%s", peer ? peer : "?");
  snprintf(label, sizeof label, "dir<-%s", peer);
  hpl__conn_opts o = {.lim = {.max_msg = HPL__MAX_MSG_CTRL,
                              .max_payload = s->cfg.inline_max,
                              .max_type = HPL__MSG_MAX_},
                      .stream_payloads = 0,
                      .on_frame = on_frame,
                      .on_close = on_close,
                      .data = dc,
                      .label = label,
                      .auth = &s->cfg.auth,
                      .auth_roles = 1u << HPL__ROLE_NODE | 1u << HPL__ROLE_READER | 1u << HPL__ROLE_ADMIN,
                      .auth_failures = &s->ctr.auth_failures,
                      .cork = 1,
                      .out_max = (size_t)s->cfg.out_max,
                      .out_stall_ms = s->cfg.out_stall_ms};
  dc->c = hpl__conn_new(t, &o);
  if (!dc->c) { /* the stream is closed */
    free(dc);
    return;
  }
  DL_PREPEND(s->conns, dc);
  s->nconns++;
}

/* ------------------------------------------------------------------ start, stop */

static void on_signal(uv_signal_t *sig, int signum) {
  hpl__dir_server *s = sig->data;
  HPL__LOG_INFO("signal %d: shutting down", signum);
  s->stopping = 1;
  hpl__conn_unlisten((uv_stream_t *)&s->listener);
  uv_close((uv_handle_t *)&s->listener, NULL);
  hpl__dir_liveness_stop(s);
  hpl__dir_reduce_stop(s);
  hpl__dir_acquire_crawl_stop(s);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  /* closing a connection drops its node's waiters and their timers */
  hpl__dir_conn *dc;
  DL_FOREACH(s->conns, dc) hpl__conn_close(dc->c, 0); /* on_close runs later */
  hpl__dir_admin_stop(s);
  hpl__dir_publish_stop(s);
  hpl__dir_metrics_stop(s);
}

/* Who hears what. A lower module tells the ones above it through these
 * callbacks only (it names none of them); they are kept in the lower
 * module's own state, called in the order given here. Returns 0, or
 * HPL_EINVAL (logged) when a module's table of subscribers is full: a
 * subscriber left out would never hear its events. */
static int wire(hpl__dir_server *s) {
  /* the object table asks the nodes (and the broadcast crawl reports)
   * which copies may serve */
  s->tab.usable = hpl__dir_node_usable;
  s->tab.suspected = hpl__dir_node_suspected;
  s->tab.distrusted = hpl__dir_digests_distrusted;
  s->tab.crawling = hpl__dir_acquire_crawling;
  s->tab.usable_arg = s;
  /* an object changed: its waiters first, then the reduces that watch it */
  if (hpl__dtab_on_change(&s->tab, hpl__dir_acquire_on_change, s) ||
      hpl__dtab_on_change(&s->tab, hpl__dir_reduce_on_change, s)) {
    HPL__LOG_ERROR("cannot subscribe to object changes: the object table takes %d subscribers",
                   HPL__DTAB_MAX_SUBS);
    return HPL_EINVAL;
  }
  /* a node's life */
  if (hpl__dir_nodes_subscribe(s, HPL__DIR_NODE_EV(HPL__DIR_NODE_UNPLUGGED),
                               hpl__dir_acquire_on_node, NULL) ||
      hpl__dir_nodes_subscribe(s, HPL__DIR_NODE_EV(HPL__DIR_NODE_JOINED), hpl__dir_locs_on_node,
                               NULL) ||
      hpl__dir_nodes_subscribe(
          s, HPL__DIR_NODE_EV(HPL__DIR_NODE_STATS) | HPL__DIR_NODE_EV(HPL__DIR_NODE_DEAD),
          hpl__dir_status_on_node, NULL) ||
      hpl__dir_nodes_subscribe(
          s,
          HPL__DIR_NODE_EV(HPL__DIR_NODE_WELCOMED) | HPL__DIR_NODE_EV(HPL__DIR_NODE_UNRESPONSIVE) |
              HPL__DIR_NODE_EV(HPL__DIR_NODE_BACK) | HPL__DIR_NODE_EV(HPL__DIR_NODE_TASKS_VOID),
          hpl__dir_reduce_on_node, NULL) ||
      hpl__dir_nodes_subscribe(s, HPL__DIR_NODE_EV(HPL__DIR_NODE_TASKS_VOID),
                               hpl__dir_ring_on_node, NULL)) {
    HPL__LOG_ERROR("cannot subscribe to node events: the node module takes %d subscribers",
                   HPL__DIR_NODES_MAX_SUBS);
    return HPL_EINVAL;
  }
  /* a plain reduce is asked into the target of a ring allreduce */
  hpl__dir_reduce_before_start(s, hpl__dir_ring_clash, NULL);
  return 0;
}

/* Write the bound port to cfg->port_file (through a rename, so a reader
 * never sees a partial file). Returns 0 or HPL_ESYS. */
static int write_port_file(const hpl__dir_config *cfg, int port) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", cfg->port_file);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, cfg->port_file)) {
    HPL__LOG_ERROR("cannot write port file %s", cfg->port_file);
    return HPL_ESYS;
  }
  return 0;
}

/* The fan-out of a loop turn's replies (fanout.h): io_uring, or where the
 * kernel refuses it (or with --fanout-thread) a helper thread when there is
 * a second CPU for it. */
static void start_fanout(int thread) {
  if (!thread && hpl__fanout_start(HPL__FANOUT_RING) == 0) {
    HPL__LOG_INFO("replies of one loop turn go to the kernel in one io_uring submission");
    return;
  }
  if (!thread) HPL__LOG_WARN("io_uring refused: replies of one loop turn are written one by one");
  if (sysconf(_SC_NPROCESSORS_ONLN) > 1 && hpl__fanout_start(HPL__FANOUT_THREAD) == 0)
    HPL__LOG_INFO("replies to many waiting clients are shared with a helper thread");
}

int hpl__dir_server_start(hpl__dir_server *s, uv_loop_t *loop, const hpl__dir_config *cfg) {
  memset(s, 0, sizeof *s);
  s->loop = loop;
  s->cfg = *cfg;
  /* the modules' state, bottom-up (status.c's is made when first needed) */
  hpl__dtab_init(&s->tab, cfg->max_senders);
  if (hpl__dir_xlog_init(s) || hpl__dir_cost_init(s) || hpl__dir_tombs_init(s) ||
      hpl__dir_nodes_init(s) || hpl__dir_reduce_init(s) || hpl__dir_acquire_init(s) ||
      hpl__dir_admin_init(s))
    return HPL_ENOMEM;
  int rc = wire(s);
  if (rc) return rc;
  s->instance = hpl__random_u64();
  s->start_ms = hpl__now_ms();
  /* first: a SIGINT or SIGTERM while we start up is handled once the loop
   * runs (a clean stop), not by the default action */
  uv_signal_init(loop, &s->sigint);
  uv_signal_init(loop, &s->sigterm);
  s->sigint.data = s->sigterm.data = s;
  uv_signal_start(&s->sigint, on_signal, SIGINT);
  uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  struct sockaddr_in addr;
  rc = uv_ip4_addr(cfg->listen_host, cfg->listen_port, &addr);
  if (rc) {
    HPL__LOG_ERROR("bad listen address %s: %s", cfg->listen_host, uv_strerror(rc));
    return HPL_EINVAL;
  }
  hpl__conn_out_set_total((size_t)cfg->out_total);
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  if ((rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0)) ||
      (rc = hpl__conn_listen((uv_stream_t *)&s->listener, 512, on_accept))) {
    HPL__LOG_ERROR("cannot listen on %s:%d: %s", cfg->listen_host, cfg->listen_port,
                   uv_strerror(rc));
    return HPL_ESYS;
  }
  struct sockaddr_storage ss;
  int len = sizeof ss;
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
  int port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  HPL__LOG_INFO("listening on %s:%d (inline max %u B, max senders per copy %u, heartbeat %u/%u ms)",
                cfg->listen_host, port, cfg->inline_max, cfg->max_senders, cfg->heartbeat_ms,
                cfg->heartbeat_timeout_ms);
  if ((rc = hpl__dir_metrics_start(s))) return rc; /* its port file before ours */
  if (cfg->port_file && write_port_file(cfg, port)) return HPL_ESYS;
  if ((rc = hpl__dir_publish_start(s))) return rc;
  hpl__dir_liveness_start(s);
  hpl__dir_reduce_start(s);
  hpl__dir_acquire_crawl_start(s);
  if (!cfg->no_fanout) start_fanout(cfg->fanout_thread);
  return 0;
}

void hpl__dir_server_free(hpl__dir_server *s) {
  hpl__fanout_stop();
  /* top-down: what a module hung on a lower one's records goes first */
  hpl__dir_admin_free(s);
  hpl__dir_publish_free(s);
  hpl__dir_status_free(s);
  hpl__dir_acquire_free(s);
  hpl__dir_ring_free_all(s);
  hpl__dir_reduce_free_all(s);
  hpl__dtab_clear(&s->tab);
  hpl__dir_nodes_free(s);
  hpl__dir_tombs_free(s);
  hpl__dir_cost_free(s);
  hpl__dir_xlog_free(s);
}
