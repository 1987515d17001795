/* dlconn.c - the directory link's connection (see dirlink.h): resolving,
 * connecting, registering (and what the directory says of itself),
 * heartbeats and probes, losing the connection and reconnecting with
 * backoff; the link's start and stop. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataport.h"
#include "dlint.h"
#include "faults.h"
#include "hoplite.h"
#include "log.h"
#include "util.h"

/* Reconnecting to the directory: the first retry after this long, then
 * doubling (with +-25 % jitter) up to the maximum; after a frame failed
 * its session MAC (someone on the path changes bytes) up to a larger one.
 * The backoff starts over only once a link stayed up RECONNECT_STABLE_MS
 * and did not end on a MAC failure, so a link that registers and is then
 * broken at once (a relay that corrupts what follows) is not retried 20
 * times a second. */
#define RECONNECT_MIN_MS 50
#define RECONNECT_MAX_MS 500
#define RECONNECT_TAMPERED_MAX_MS 5000
#define RECONNECT_STABLE_MS 1000
/* A connection the directory's host does not answer (SYNs lost: the host
 * cut off) is given up after this long, and the next address tried; the
 * kernel would wait a minute or more. Shorter with standbys, where another
 * address may lead. */
#define CONNECT_TIMEOUT_MS 3000
#define CONNECT_TIMEOUT_HA_MS 1000

static uint64_t connect_timeout_ms(const hpl__dirlink *dl) {
  return dl->s->cfg.ndirs > 1 ? CONNECT_TIMEOUT_HA_MS : CONNECT_TIMEOUT_MS;
}

/* The link's one state change, logged. */
static void set_state(hpl__dirlink *dl, int to) {
  static const char *n[] = {"down", "resolving", "connecting", "registering", "ready"};
  if (dl->state == to) return;
  HPL__LOG_DEBUG("directory link: %s -> %s", n[dl->state], n[to]);
  dl->state = to;
}

static void dl_connect(hpl__dirlink *dl);
static void dl_hb_cb(uv_timer_t *t);
static uint64_t hb_pause_left(hpl__dirlink *dl);
static void dl_retry_cb(uv_timer_t *t) { dl_connect(t->data); }

/* Remember the directory's numeric address as this connection reaches it. */
static void note_peer(hpl__dirlink *dl, uv_tcp_t *t) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  dl->peer_port = 0;
  if (uv_tcp_getpeername(t, (struct sockaddr *)&ss, &len) != 0) return;
  if (ss.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    if (uv_ip4_name(a, dl->peer_addr, sizeof dl->peer_addr) == 0)
      dl->peer_port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    if (uv_ip6_name(a, dl->peer_addr, sizeof dl->peer_addr) == 0)
      dl->peer_port = ntohs(a->sin6_port);
  }
}

/* ------------------------------------------------------------------ connection */

/* With several directories (standbys), the next one in the list is tried:
 * only the leader listens, so a refused connection says "not this one". */
static void next_directory(hpl__dirlink *dl) {
  hpl__store_config *c = &dl->s->cfg;
  if (c->ndirs < 2) return;
  dl->dir_idx = (dl->dir_idx + 1) % c->ndirs;
  memcpy(c->dir_host, c->dir_hosts[dl->dir_idx], sizeof c->dir_host);
  c->dir_port = c->dir_ports[dl->dir_idx];
}

static void schedule_reconnect(hpl__dirlink *dl) {
  if (dl->stopping) return;
  set_state(dl, HPL__DL_DOWN);
  next_directory(dl);
  /* a restarted directory is found within half a second; the jitter
   * (+-25 %) spreads a whole cluster's reconnects. With standbys a round
   * of the list takes as long as one try of a single directory. */
  uint64_t d = dl->backoff_ms * 3 / 4 + hpl__random_u64() % (dl->backoff_ms / 2 + 1);
  if (dl->s->cfg.ndirs > 1) d /= (uint64_t)dl->s->cfg.ndirs;
  uint64_t cap = dl->tampered ? RECONNECT_TAMPERED_MAX_MS : RECONNECT_MAX_MS;
  dl->backoff_ms = dl->backoff_ms * 2 > cap ? cap : dl->backoff_ms * 2;
  HPL__LOG_DEBUG("reconnecting to the directory in %llu ms", (unsigned long long)d);
  uv_timer_start(&dl->retry, dl_retry_cb, d, 0);
}

static void write_ready_file(hpl__store *s) {
  if (!s->cfg.ready_file) return;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", s->cfg.ready_file);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%d\n", hpl__dataport_port(s)) < 0 || fclose(f) != 0 ||
      rename(tmp, s->cfg.ready_file) != 0)
    HPL__LOG_ERROR("cannot write ready file %s", s->cfg.ready_file);
}


static void on_registered(hpl__dirlink *dl, Hplpb__RegisterRep *r) {
  hpl__store *s = dl->s;
  if (r->status != 0) {
    HPL__LOG_ERROR("directory refused registration: %s", r->detail);
    hpl__conn_close(dl->c, HPL_EPROTO);
    return;
  }
  if (r->term && r->term < dl->term) {
    HPL__LOG_WARN("the directory %s:%d leads with term %llu, older than term %llu this store "
                  "registered with: a deposed leader; trying the next directory",
                  s->cfg.dir_host, s->cfg.dir_port, (unsigned long long)r->term,
                  (unsigned long long)dl->term);
    s->ctr.dir_terms_refused++;
    hpl__conn_close(dl->c, HPL_ESTATE);
    return;
  }
  if (r->term) dl->term = r->term;
  dl->caps = (hpl__dl_caps){.inline_max = r->inline_max,
                            .max_senders = r->max_senders,
                            .quiet_notes = r->quiet_notes,
                            .rings = r->rings,
                            .publish = r->publish};
  set_state(dl, HPL__DL_READY);
  dl->ready_ms = hpl__now_ms(); /* the backoff starts over once this link proved stable */
  s->ctr.dir_registrations++;
  uint32_t hb = r->heartbeat_ms ? r->heartbeat_ms : 500;
  uv_timer_stop(&dl->hb);
  uv_timer_start(&dl->hb, dl_hb_cb, hb, hb);
  hpl__dirlink_probe_arm(dl, hb);
  int restarted = dl->registered_once && r->instance != dl->instance;
  int adopt = !dl->registered_once || restarted;
  char term[40] = "";
  if (r->term) snprintf(term, sizeof term, ", leader term %llu", (unsigned long long)r->term);
  HPL__LOG_INFO("registered with the directory %s:%d%s%s", s->cfg.dir_host, s->cfg.dir_port,
                term, restarted ? " (a new instance)" : dl->registered_once ? " (again)" : "");
  if (!dl->registered_once) write_ready_file(s);
  dl->registered_once = 1;
  dl->instance = r->instance;
  /* what we hold (its first piece: the deletes and reduces a new directory
   * does not know) before the requests queued meanwhile, which may ask of
   * them (hpl_reduce_sources just after a failover) */
  hpl__dirlink_held_start(dl, adopt, restarted);
  hpl__dirlink_flush(dl);
  if (dl->registered) dl->registered(s, restarted);
}

static void hb_reply(hpl__store *s, const hpl__dl_reply *r, void *arg) {
  (void)arg;
  int status = r->status;
  hpl__dirlink *dl = s->dl;
  if (status == 0 && dl->hb_sent_ns) {
    uint64_t rtt = (hpl__now_ns() - dl->hb_sent_ns) / 1000;
    dl->rtt_us = rtt > UINT32_MAX ? UINT32_MAX : (uint32_t)rtt;
  }
  if (status == HPL_ETIMEDOUT && dl->state == HPL__DL_READY && dl->c) {
    HPL__LOG_WARN("directory did not answer a heartbeat; reconnecting");
    hpl__conn_close(dl->c, HPL_ETIMEDOUT);
  }
}

static void dl_hb_cb(uv_timer_t *t) {
  hpl__dirlink *dl = t->data;
  if (dl->state != HPL__DL_READY) return;
  if (hb_pause_left(dl)) return; /* fault point: a node that goes silent for a while */
  hpl__store *s = dl->s;
  Hplpb__Heartbeat hbm = HPLPB__HEARTBEAT__INIT;
  hbm.node_id = s->node_id;
  hbm.rtt_us = dl->rtt_us;
  hbm.sent_us = hpl__now_ns() / 1000;
  /* what `hoplite status` shows of this node */
  hbm.stats = 1;
  hbm.pool_used = hpl__pool_used(s->pool);
  hbm.pool_capacity = hpl__pool_capacity(s->pool);
  hbm.objects = hpl__obj_count(s);
  hbm.bytes_sent = s->ctr.data_bytes_sent;
  hbm.bytes_received = s->ctr.data_bytes_received;
  hbm.clients = dl->clients ? (uint32_t)dl->clients(s) : 0;
  hpl__dl_incoming in[HPL__STATUS_MAX_INCOMING];
  Hplpb__Incoming im[HPL__STATUS_MAX_INCOMING], *ip[HPL__STATUS_MAX_INCOMING];
  size_t total = dl->incoming ? dl->incoming(s, in, HPL__STATUS_MAX_INCOMING) : 0;
  size_t n = total < HPL__STATUS_MAX_INCOMING ? total : HPL__STATUS_MAX_INCOMING;
  for (size_t i = 0; i < n; i++) {
    hplpb__incoming__init(&im[i]);
    im[i].id = (char *)in[i].id;
    im[i].sender = in[i].sender;
    im[i].held = in[i].held;
    im[i].size = in[i].size;
    im[i].rate = in[i].rate > 0 ? (uint64_t)in[i].rate : 0;
    ip[i] = &im[i];
  }
  hbm.n_incoming = n;
  hbm.incoming = ip;
  hbm.incoming_total = total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
  dl->hb_sent_ns = hpl__now_ns();
  uint64_t interval = uv_timer_get_repeat(t);
  /* a heartbeat is only useful on the connection it was sent on */
  hpl__dirlink_request(s, HPL__MSG_HEARTBEAT, &hbm.base, NULL, 0, (int64_t)(3 * interval), hb_reply,
                       NULL);
}

static void dl_on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                        const uint8_t *payload, uint64_t plen) {
  hpl__dirlink *dl = hpl__conn_data(c);
  dl->last_heard_ms = hpl__now_ms();
  if (h->req_id && h->req_id == dl->register_req) {
    if (h->type != HPL__MSG_REGISTER_REP) {
      Hplpb__Reply *r = h->type == HPL__MSG_REPLY ? (Hplpb__Reply *)m : NULL;
      HPL__LOG_ERROR("directory refused registration: %s", r ? r->detail : "unexpected reply");
      hpl__conn_close(c, HPL_EPROTO);
      return;
    }
    dl->register_req = 0;
    on_registered(dl, (Hplpb__RegisterRep *)m);
    return;
  }
  if (h->type == HPL__MSG_PROBE) {
    /* the directory checks we are alive (a receiver of ours saw no bytes
     * for a while): answer at once, on the loop, with a heartbeat */
    if (hb_pause_left(dl)) return; /* fault point: silent */
    Hplpb__Heartbeat hbm = HPLPB__HEARTBEAT__INIT;
    hbm.node_id = dl->s->node_id;
    hbm.sent_us = hpl__now_ns() / 1000;
    if (dl->state == HPL__DL_READY)
      hpl__conn_send(c, HPL__MSG_HEARTBEAT, 0, &hbm.base, NULL, 0, 0, NULL, NULL);
    return;
  }
  hpl__dirlink_frame_in(dl, c, h, m, payload, plen);
}

static void dl_on_close(hpl__conn *c, int status) {
  hpl__dirlink *dl = hpl__conn_data(c);
  dl->c = NULL;
  uv_timer_stop(&dl->hb);
  hpl__dirlink_probe_stop(dl);
  if (dl->stopping) return;
  /* HPL_EAUTH after the handshake: a frame failed its session MAC (the
   * secret was right); during it: the secret */
  int mac = status == HPL_EAUTH && hpl__conn_role(c) != 0;
  if (mac)
    HPL__LOG_WARN("lost the directory connection: a frame from it failed its session MAC check "
                  "(changed, replayed or dropped on the way: a relay or a faulty link on the "
                  "path; the cluster secret is right); will reconnect");
  else
    HPL__LOG_WARN("lost the directory connection (%s); will reconnect", hpl_strerror(status));
  if (dl->state == HPL__DL_READY && !mac && hpl__now_ms() - dl->ready_ms >= RECONNECT_STABLE_MS)
    dl->backoff_ms = RECONNECT_MIN_MS;
  dl->tampered = mac;
  /* requests sent on the dead connection go again after re-registration;
   * heartbeats are dropped */
  /* what we hold is re-reported from the start after registering */
  hpl__dirlink_held_stop(dl);
  hpl__dirlink_requests_lost(dl);
  schedule_reconnect(dl);
}

static void send_register(hpl__dirlink *dl, const char *local_ip) {
  hpl__store *s = dl->s;
  if (!s->cfg.data_addr[0]) snprintf(s->cfg.data_addr, sizeof s->cfg.data_addr, "%s", local_ip);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = s->node_id;
  r.addr = s->cfg.data_addr;
  r.data_port = s->cfg.data_adv_port ? s->cfg.data_adv_port : (uint32_t)hpl__dataport_port(s);
  r.capacity = hpl__pool_capacity(s->pool);
  r.name = s->cfg.name;
  r.incarnation = dl->incarnation;
  r.grants = 1; /* fetch.c takes them */
  /* what we hold follows in HELD pieces once the directory answers */
  dl->register_req = ++dl->next_id;
  set_state(dl, HPL__DL_REGISTERING);
  hpl__conn_send(dl->c, HPL__MSG_REGISTER, dl->register_req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* The connection under way takes too long: its handle closes (the connect
 * then ends with UV_ECANCELED, and on_connected tries the next address). */
static void connect_timeout_cb(uv_timer_t *tm) {
  hpl__dirlink *dl = tm->data;
  if (dl->state != HPL__DL_CONNECTING || !dl->tcp) return;
  HPL__LOG_WARN("the directory %s:%d does not answer a connection within %llu ms",
                dl->s->cfg.dir_host, dl->s->cfg.dir_port,
                (unsigned long long)connect_timeout_ms(dl));
  uv_tcp_t *t = dl->tcp;
  dl->tcp = NULL;
  uv_close((uv_handle_t *)t, (uv_close_cb)free);
}

static void on_connected(uv_connect_t *req, int status) {
  hpl__dirlink *dl = req->data;
  uv_tcp_t *t = dl->tcp;
  if (dl->stopping) return; /* hpl__dirlink_stop closed the handle */
  uv_timer_stop(&dl->retry); /* (the connect timeout) */
  if (!t) { /* timed out: its handle is closing already */
    schedule_reconnect(dl);
    return;
  }
  dl->tcp = NULL;
  if (status < 0) {
    HPL__LOG_WARN("cannot connect to the directory %s:%d: %s", dl->s->cfg.dir_host,
               dl->s->cfg.dir_port, uv_strerror(status));
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    schedule_reconnect(dl);
    return;
  }
  uv_tcp_nodelay(t, 1);
  hpl__conn_mark_control(t);
  note_peer(dl, t);
  char local[64] = "127.0.0.1";
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getsockname(t, (struct sockaddr *)&ss, &len) == 0)
    uv_ip4_name((struct sockaddr_in *)&ss, local, sizeof local);
  hpl__conn_opts o = {.lim = {.max_msg = HPL__MAX_MSG_CTRL, .max_payload = 16u << 20,
                             .max_type = HPL__MSG_MAX_},
                     .on_frame = dl_on_frame,
                     .on_close = dl_on_close,
                     .data = dl,
                     .label = "store->dir",
                     .auth = &dl->s->cfg.auth,
                     .auth_role = HPL__ROLE_NODE,
                     .auth_failures = &dl->s->ctr.auth_failures,
                     .cork = 1};
  dl->c = hpl__conn_new((uv_stream_t *)t, &o);
  if (!dl->c) {
    schedule_reconnect(dl);
    return;
  }
  dl->last_heard_ms = hpl__now_ms();
  send_register(dl, local);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
  hpl__dirlink *dl = g->data;
  if (dl->stopping) {
    if (res) uv_freeaddrinfo(res);
    return;
  }
  if (status < 0 || !res) {
    HPL__LOG_WARN("cannot resolve the directory host '%s': %s", dl->s->cfg.dir_host,
                  uv_strerror(status));
    schedule_reconnect(dl);
    return;
  }
  dl->tcp = malloc(sizeof *dl->tcp);
  if (!dl->tcp) {
    uv_freeaddrinfo(res);
    schedule_reconnect(dl);
    return;
  }
  uv_tcp_init(dl->s->loop, dl->tcp);
  dl->creq.data = dl;
  set_state(dl, HPL__DL_CONNECTING);
  int rc = uv_tcp_connect(&dl->creq, dl->tcp, res->ai_addr, on_connected);
  uv_freeaddrinfo(res);
  if (rc) {
    uv_close((uv_handle_t *)dl->tcp, (uv_close_cb)free);
    dl->tcp = NULL;
    schedule_reconnect(dl);
    return;
  }
  uv_timer_start(&dl->retry, connect_timeout_cb, connect_timeout_ms(dl), 0);
}

/* Fault point hb_pause: ms left in the silent window (0: not in it). */
static uint64_t hb_pause_left(hpl__dirlink *dl) {
  return hpl__faults_silent_ms(&dl->s->cfg.faults, hpl__now_ms() - dl->s->start_ms);
}

static void dl_connect(hpl__dirlink *dl) {
  if (dl->stopping) return;
  uint64_t quiet = hb_pause_left(dl);
  if (quiet) { /* a silent node does not reconnect either */
    uv_timer_start(&dl->retry, dl_retry_cb, quiet, 0);
    return;
  }
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  char port[16];
  snprintf(port, sizeof port, "%d", dl->s->cfg.dir_port);
  dl->gai.data = dl;
  set_state(dl, HPL__DL_RESOLVING);
  int rc = uv_getaddrinfo(dl->s->loop, &dl->gai, on_resolved, dl->s->cfg.dir_host, port, &hints);
  if (rc) {
    HPL__LOG_WARN("cannot resolve '%s': %s", dl->s->cfg.dir_host, uv_strerror(rc));
    schedule_reconnect(dl);
  }
}

int hpl__dirlink_start(hpl__store *s) {
  hpl__dirlink *dl = calloc(1, sizeof *dl);
  if (!dl) return HPL_ENOMEM;
  dl->s = s;
  dl->backoff_ms = RECONNECT_MIN_MS;
  dl->incarnation = hpl__random_u64();
  dl->caps = *hpl__dirlink_caps(s); /* (s->dl is not set yet: the defaults) */
  s->dl = dl;
  uv_timer_init(s->loop, &dl->retry);
  uv_timer_init(s->loop, &dl->hb);
  uv_timer_init(s->loop, &dl->held_delay);
  hpl__dirlink_probe_init(dl);
  dl->retry.data = dl->hb.data = dl->held_delay.data = dl;
  dl_connect(dl);
  return 0;
}

void hpl__dirlink_stop(hpl__store *s) {
  hpl__dirlink *dl = s->dl;
  if (!dl || dl->stopping) return;
  dl->stopping = 1;
  hpl__dirlink_probe_stop(dl);
  hpl__dirlink_held_stop(dl);
  hpl__dirlink_requests_cancel(dl);
  if (dl->c) hpl__conn_close(dl->c, 0);
  if (dl->tcp) uv_close((uv_handle_t *)dl->tcp, (uv_close_cb)free);
  dl->tcp = NULL;
  if (dl->state == HPL__DL_RESOLVING) uv_cancel((uv_req_t *)&dl->gai);
  uv_close((uv_handle_t *)&dl->retry, NULL);
  uv_close((uv_handle_t *)&dl->hb, NULL);
  uv_close((uv_handle_t *)&dl->held_delay, NULL);
  hpl__dirlink_probe_close(dl);
}

