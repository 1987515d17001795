/* clients.c - the local socket: accept, HELLO, dispatch (see clients.h).
 *
 * Every connection first receives a HELLO frame carrying, by SCM_RIGHTS,
 * its end of a chunk channel (on which the pool's chunk memfds follow as
 * GET replies name them, see session.c; the client maps them read-only)
 * and the presence filter's memfd. Object regions are named by their offset
 * in the pool. Requests
 * are framed (proto.h); directory requests (stat, list, delete, transfers,
 * reduce info) are proxied.
 */
#include "clients.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <utlist.h>

#include "clientadm.h"
#include "dirlink.h"
#include "fetch.h"
#include "get.h"
#include "handoff.h"
#include "hoplite.h"
#include "lifetime.h"
#include "log.h"
#include "stmetrics.h"
#include "objects.h"
#include "put.h"
#include "rdsink.h"
#include "ring.h"
#include "session.h"
#include "util.h"

/* A client connection's read buffer: a batch of whole PUTs (hpl_put_many
 * of 64 KiB objects) takes two reads instead of eight, and most of its
 * payloads are handed up from the buffer without a copy (uvconn.h). */
#define CLIENT_RBUF (256u * 1024)

/* The module's context (s->clients). */
typedef struct hpl__clients {
  uv_pipe_t listener;
  hpl__stclient *list;   /* every session connected (utlist) */
  hpl__clientadm *adm;   /* who may connect (clientadm.c) */
  uint32_t nclients;     /* ...and their count (hpl__clients_count) */
  uint64_t next_id;      /* the last session id given */
} hpl__clients;

static void on_contains(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__IdReq *m) {
  hpl__obj *o = hpl__obj_find(s, m->id);
  Hplpb__ContainsRep r = HPLPB__CONTAINS_REP__INIT;
  r.local = o && (o->state == HPL__OBJ_SEALED || o->state == HPL__OBJ_SPILLED);
  if (o && !o->internal) { /* a copy arriving shows how far it got (get progress) */
    r.held = o->progress;
    r.size = o->size;
  }
  hpl__session_send(cl, HPL__MSG_CONTAINS_REP, req, &r.base);
}

/* COUNTERS: the list /metrics shows too (stmetrics.c), or the one counter
 * the request names. */
static void on_counters(hpl__store *s, hpl__stclient *cl, uint64_t req,
                        const Hplpb__CountersReq *m) {
  hpl__metric vals[HPL__STORE_METRICS_MAX];
  size_t n = hpl__stmetrics_collect(s, vals, m->name && m->name[0] ? m->name : NULL);
  Hplpb__CountersRep *r = hpl__metrics_counters_rep(vals, n);
  if (!r) {
    hpl__session_reply(cl, req, HPL_ENOMEM, "out of memory");
    return;
  }
  hpl__session_send(cl, HPL__MSG_COUNTERS_REP, req, &r->base);
  free(r);
}

/* Where clients may read small objects directly (see hpl_get): the
 * directory as this store reaches it now, into hm (addr: its buffer, 64
 * bytes); nothing while there is none. */
static void hello_directory(hpl__store *s, Hplpb__Hello *hm, char *addr) {
  int port = 0;
  if (!s->netns || hpl__dirlink_peer(s, addr, 64, &port) != 0) return;
  hm->dir_addr = addr;
  hm->dir_port = (uint32_t)port;
  hm->netns = s->netns;
  hm->dir_publish = hpl__dirlink_caps(s)->publish;
  hm->dir_term = hpl__dirlink_term(s);
}

/* DIR_WHERE: the directory now (a client whose direct reads failed
 * follows a new leader). */
static void on_dir_where(hpl__store *s, hpl__stclient *cl, uint64_t req) {
  Hplpb__Hello hm = HPLPB__HELLO__INIT;
  char dir_addr[64] = "";
  hello_directory(s, &hm, dir_addr);
  hpl__session_send(cl, HPL__MSG_DIR_WHERE_REP, req, &hm.base);
}

/* ------------------------------------------------------------------ proxied requests */

/* The directory's answer goes back as it came; an error (the directory's
 * or ours) as a plain Reply, which the client library reads as the outcome
 * of any request. */
static void proxy_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  (void)s;
  hpl__creq *x = arg;
  if (rep->m)
    hpl__session_send(x->cl, x->rtype, x->req, rep->m); /* of that type: dirlink checked */
  else
    hpl__session_reply(x->cl, x->req, rep->status,
                       *rep->detail                     ? rep->detail
                       : rep->status == HPL_ETIMEDOUT ? "the directory did not answer in time"
                                                 : "the directory is unreachable");
  hpl__session_creq_done(x);
  free(x);
}

/* Forward m to the directory; `done` answers the client and frees x (a
 * calloc'd record that starts with its hpl__creq; NULL: no memory, and
 * the client hears so). */
static void proxy_as(hpl__store *s, hpl__stclient *cl, const hpl__frame_hdr *h,
                     ProtobufCMessage *m, int64_t timeout_ms, hpl__creq *x,
                     hpl__dl_reply_cb done) {
  if (x) {
    hpl__session_creq_init(x, cl, h->req_id);
    x->rtype = hpl__msg_reply_type(h->type);
    if (hpl__dirlink_request(s, h->type, m, NULL, 0, timeout_ms, done, x) == 0) return;
    hpl__session_creq_done(x);
    free(x);
  }
  hpl__session_reply(cl, h->req_id, HPL_ENOMEM, "out of memory");
}

/* A request the directory answers: forwarded as it is, its answer too. */
static void proxy(hpl__store *s, hpl__stclient *cl, const hpl__frame_hdr *h, ProtobufCMessage *m,
                  int64_t timeout_ms) {
  proxy_as(s, cl, h, m, timeout_ms, calloc(1, sizeof(hpl__creq)), proxy_reply);
}

/* A client's DELETE: forwarded with drops_here, so the directory sends
 * this node no DROP for its own copy; that copy goes here once the answer
 * says the object was deleted, before the client hears it (a get here
 * after the answer finds nothing, as after a DROP). */
typedef struct del_req {
  hpl__creq x;
  char id[HPL_ID_MAX + 1];
} del_req;

static void delete_reply(hpl__store *s, const hpl__dl_reply *rep, void *arg) {
  del_req *d = arg;
  if (rep->status == 0 || rep->status == HPL_ENOTFOUND)
    hpl__handoff_deleted(s, d->id); /* for a new directory (handoff.h) */
  if (rep->status == 0 && hpl__fetch_deleted(s, d->id)) s->ctr.deletes_dropped_here++;
  proxy_reply(s, rep, &d->x); /* frees d (x comes first) */
}

static void on_delete(hpl__store *s, hpl__stclient *cl, const hpl__frame_hdr *h,
                      Hplpb__IdReq *m) {
  del_req *d = calloc(1, sizeof *d);
  if (d) snprintf(d->id, sizeof d->id, "%s", m->id); /* (checked valid by the caller) */
  m->drops_here = 1;
  proxy_as(s, cl, h, &m->base, m->timeout_ms, d ? &d->x : NULL, delete_reply);
}

/* ------------------------------------------------------------------ connection */

static const char *req_id_of(unsigned type, ProtobufCMessage *m) {
  switch (type) {
    case HPL__MSG_CREATE: return ((Hplpb__CreateReq *)m)->id;
    case HPL__MSG_PUT: return ((Hplpb__PutReq *)m)->id;
    case HPL__MSG_GET: return ((Hplpb__GetReq *)m)->id;
    case HPL__MSG_CONTAINS:
    case HPL__MSG_STAT:
    case HPL__MSG_DELETE:
    case HPL__MSG_REDUCE_INFO: return ((Hplpb__IdReq *)m)->id;
    default: return NULL;
  }
}

static void client_on_frame(hpl__conn *c, const hpl__frame_hdr *h, ProtobufCMessage *m,
                            const uint8_t *payload, uint64_t plen) {
  hpl__stclient *cl = hpl__conn_data(c);
  hpl__store *s = cl->s;
  if (plen && h->type != HPL__MSG_PUT) { /* only a PUT carries bytes */
    hpl__conn_fail(c, "unexpected payload");
    return;
  }
  const char *id = req_id_of(h->type, m);
  if (id && !hpl__id_valid(id)) {
    hpl__conn_reply(c, h->req_id, HPL_EINVAL, "invalid object id");
    return;
  }
  switch (h->type) {
    case HPL__MSG_CREATE: hpl__put_create(s, cl, h->req_id, (Hplpb__CreateReq *)m); break;
    case HPL__MSG_PROGRESS: hpl__put_progress(s, cl, (Hplpb__ProgressNote *)m); break;
    case HPL__MSG_SEAL: hpl__put_seal(s, cl, h->req_id, (Hplpb__HandleReq *)m); break;
    case HPL__MSG_PUT: hpl__put_whole(s, cl, h->req_id, (Hplpb__PutReq *)m, payload, plen); break;
    case HPL__MSG_ABORT: hpl__put_abort(s, cl, h->req_id, (Hplpb__HandleReq *)m); break;
    case HPL__MSG_GET: {
      Hplpb__GetReq *g = (Hplpb__GetReq *)m;
      hpl__get_request(s, cl, h->req_id, g->id, g->timeout_ms, g->granted);
      break;
    }
    case HPL__MSG_RELEASE: hpl__session_release(cl, ((Hplpb__HandleReq *)m)->handle); break;
    case HPL__MSG_CONTAINS: on_contains(s, cl, h->req_id, (Hplpb__IdReq *)m); break;
    case HPL__MSG_STAT: proxy(s, cl, h, m, ((Hplpb__IdReq *)m)->timeout_ms); break;
    case HPL__MSG_DELETE: on_delete(s, cl, h, (Hplpb__IdReq *)m); break;
    case HPL__MSG_LIST: proxy(s, cl, h, m, ((Hplpb__ListReq *)m)->timeout_ms); break;
    case HPL__MSG_TRANSFERS: proxy(s, cl, h, m, ((Hplpb__TransfersReq *)m)->timeout_ms); break;
    case HPL__MSG_STATUS: proxy(s, cl, h, m, ((Hplpb__StatusReq *)m)->timeout_ms); break;
    case HPL__MSG_REDUCE:
      if (((Hplpb__ReduceReq *)m)->ring)
        hpl__ring_request(s, cl, h->req_id, (Hplpb__ReduceReq *)m);
      else
        hpl__rdsink_request(s, cl, h->req_id, (Hplpb__ReduceReq *)m);
      break;
    case HPL__MSG_REDUCE_INFO: proxy(s, cl, h, m, ((Hplpb__IdReq *)m)->timeout_ms); break;
    case HPL__MSG_COUNTERS: on_counters(s, cl, h->req_id, (Hplpb__CountersReq *)m); break;
    case HPL__MSG_DIR_WHERE: on_dir_where(s, cl, h->req_id); break;
    default: {
      char why[64];
      snprintf(why, sizeof why, "unexpected %s message from a client", hpl__msg_name(h->type));
      hpl__conn_fail(c, why);
    }
  }
}

static void client_on_close(hpl__conn *c, int status) {
  (void)status;
  hpl__stclient *cl = hpl__conn_data(c);
  hpl__store *s = cl->s;
  cl->closed = 1;
  if (cl->uid_counted) hpl__clientadm_leave(s->clients->adm, cl->uid);
  cl->uid_counted = 0;
  hpl__get_client_gone(s, cl);
  hpl__put_client_gone(s, cl); /* aborts what it was still writing */
  hpl__lifetime_client_gone(s, cl); /* deletes what it owned */
  DL_DELETE(s->clients->list, cl);
  s->clients->nclients--;
  hpl__session_closed(cl);
}

/* Send the HELLO frame with the pool's memfd (and the presence filter's)
 * attached. The socket is new and the
 * frame small, so a non-blocking sendmsg completes at once. */
static int send_hello(hpl__store *s, hpl__stclient *cl, int fd) {
  Hplpb__Hello hm = HPLPB__HELLO__INIT;
  hm.pool_size = hpl__pool_capacity(s->pool);
  hm.node_id = s->node_id;
  hm.inline_max = hpl__dirlink_caps(s)->inline_max;
  hm.node_name = s->cfg.name;
  char dir_addr[64] = "";
  hello_directory(s, &hm, dir_addr);
  uint8_t rk[HPL__AUTH_KEY_LEN];
  if (s->cfg.auth.on) { /* local clients may read small objects from the directory */
    hpl__auth_role_key(&s->cfg.auth, HPL__ROLE_READER, rk);
    hm.reader_key.data = rk;
    hm.reader_key.len = sizeof rk;
  }
  /* the pool's memory goes on a channel of its own, chunk by chunk as
   * replies name it (session.c): HELLO carries the client's end */
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return HPL_ESYS;
  if (fcntl(pair[0], F_SETFL, O_NONBLOCK) != 0) {
    close(pair[0]);
    close(pair[1]);
    return HPL_ESYS;
  }
  cl->chan = pair[0]; /* the session's from now on */
  hm.pool_chunk = hpl__pool_chunk(s->pool);
  int fds[2] = {pair[1], hpl__obj_filter_fd(s)};
  int nfd = fds[1] >= 0 ? 2 : 1;
  if (nfd == 2) hm.filter_slots = HPL__STORE_FILTER_SLOTS;
  size_t len;
  uint8_t *frame = hpl__msg_frame(HPL__MSG_HELLO, 0, &hm.base, 0, &len);
  if (!frame) return HPL_ENOMEM;
  struct iovec iov = {.iov_base = frame, .iov_len = len};
  char cbuf[CMSG_SPACE(sizeof fds)];
  memset(cbuf, 0, sizeof cbuf);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfd)};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfd);
  memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfd);
  ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  close(pair[1]);
  free(frame);
  return n == (ssize_t)len ? 0 : HPL_ECONN;
}

static void on_client_accept(uv_stream_t *server, int status) {
  hpl__store *s = server->data;
  if (status < 0) return;
  uv_stream_t *p = hpl__conn_accept(server, NULL, 0);
  if (p) hpl__clients_serve(s, p);
}

void hpl__clients_serve(hpl__store *s, uv_stream_t *p) {
  hpl__stclient *cl = hpl__session_new(s, NULL, ++s->clients->next_id);
  uv_os_fd_t fd;
  int rc = !cl || uv_fileno((uv_handle_t *)p, &fd) != 0 ? HPL_ENOMEM : 0;
  char detail[200] = "";
  if (!rc)
    rc = hpl__clientadm_take(s, s->clients->adm, fd, s->clients->nclients, &cl->pid, &cl->uid,
                             detail, sizeof detail);
  if (!rc) {
    cl->uid_counted = 1;
    rc = send_hello(s, cl, fd);
  } else if (rc != HPL_ENOMEM) {
    hpl__clientadm_refuse(fd, rc, detail); /* "too many clients", not a protocol error */
  }
  if (rc) {
    if (cl && cl->uid_counted) hpl__clientadm_leave(s->clients->adm, cl->uid);
    uv_close((uv_handle_t *)p, (uv_close_cb)free);
    if (cl) hpl__session_unref(cl);
    return;
  }
  char label[48];
  snprintf(label, sizeof label, "client-%llu", (unsigned long long)cl->id);
  /* a PUT's payload is at most the inline limit the HELLO told */
  hpl__conn_opts o = {.lim = {.max_msg = HPL__MAX_MSG_CTRL,
                             .max_payload = hpl__dirlink_caps(s)->inline_max,
                             .max_type = HPL__MSG_MAX_},
                     .on_frame = client_on_frame,
                     .on_close = client_on_close,
                     .data = cl,
                     .label = label,
                     .cork = 1,
                     .out_max = (size_t)s->cfg.out_max,
                     .out_stall_ms = s->cfg.out_stall_ms,
                     .rbuf = CLIENT_RBUF};
  cl->c = hpl__conn_new(p, &o);
  if (!cl->c) { /* no on_close follows: its user's slot is given back here */
    hpl__clientadm_leave(s->clients->adm, cl->uid);
    hpl__session_unref(cl);
    return;
  }
  DL_APPEND(s->clients->list, cl);
  s->clients->nclients++;
}

size_t hpl__clients_count(const hpl__store *s) {
  return s->clients ? s->clients->nclients : 0;
}

/* Remove a socket file left by a store that died, but never one that a
 * live store is listening on. */
static int clear_stale_socket(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (!S_ISSOCK(st.st_mode)) {
    HPL__LOG_ERROR("%s exists and is not a socket", path);
    return HPL_EINVAL;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
  int err = errno;
  close(fd);
  if (rc == 0) {
    HPL__LOG_ERROR("another store is already listening on %s", path);
    return HPL_EEXIST;
  }
  if (err != ECONNREFUSED && err != ENOENT) {
    HPL__LOG_ERROR("cannot probe %s: %s", path, strerror(err));
    return HPL_ESYS;
  }
  unlink(path);
  return 0;
}

/* pool.c: a trim gave chunk k a fresh memfd: the clients that map it
 * are sent the new one, so the old one's pages go. */
static void chunk_recycled(void *arg, size_t k) {
  hpl__store *s = arg;
  hpl__stclient *cl;
  DL_FOREACH(s->clients->list, cl) hpl__session_chunk_renewed(cl, k);
}

int hpl__clients_start(hpl__store *s) {
  const char *path = s->cfg.socket_path;
  if (!path[0]) {
    HPL__LOG_ERROR("no socket path");
    return HPL_EINVAL;
  }
  int rc = hpl__clientadm_check_dir(s, path);
  if (rc) return rc;
  rc = clear_stale_socket(path);
  if (rc) return rc;
  if (!(s->clients = calloc(1, sizeof *s->clients)) ||
      !(s->clients->adm = hpl__clientadm_new()))
    return HPL_ENOMEM;
  uv_pipe_init(s->loop, &s->clients->listener, 0);
  s->clients->listener.data = s;
  if ((rc = uv_pipe_bind(&s->clients->listener, path)) ||
      (rc = hpl__conn_listen((uv_stream_t *)&s->clients->listener, 256, on_client_accept))) {
    HPL__LOG_ERROR("cannot listen on %s: %s", path, uv_strerror(rc));
    return HPL_ESYS;
  }
  if ((rc = hpl__clientadm_socket_mode(s, path))) return rc;
  hpl__pool_listen(s->pool, chunk_recycled, s);
  return 0;
}

void hpl__clients_stop(hpl__store *s) {
  if (!s->clients || uv_is_closing((uv_handle_t *)&s->clients->listener)) return;
  hpl__pool_listen(s->pool, NULL, NULL);
  hpl__conn_unlisten((uv_stream_t *)&s->clients->listener);
  uv_close((uv_handle_t *)&s->clients->listener, NULL);
  unlink(s->cfg.socket_path);
  hpl__stclient *cl;
  DL_FOREACH(s->clients->list, cl) hpl__conn_close(cl->c, 0);
}

void hpl__clients_free(hpl__store *s) {
  if (s->clients) hpl__clientadm_free(s->clients->adm);
  free(s->clients);
  s->clients = NULL;
}
