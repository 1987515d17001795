/* clients.c - local clients over a Unix socket (see store.h).
 *
 * Every connection first receives a HELLO frame carrying the pool's memfd
 * (SCM_RIGHTS); the client maps it once. Object regions are then named by
 * their offset in the pool. Requests are framed (proto.h); directory
 * requests (stat, list, delete) are proxied.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "hoplite.h"
#include "log.h"
#include "store.h"
#include "util.h"

void store_waiter_cancel(store *s, st_waiter *w);

static void client_unref(st_client *cl) {
  if (--cl->refs == 0 && cl->closed) free(cl);
}

void clients_client_unref(st_client *cl);
void clients_client_unref(st_client *cl) { client_unref(cl); }

void clients_waiter_unlink(st_waiter *w) {
  for (st_waiter **pp = &w->cl->waiters; *pp; pp = &(*pp)->cnext)
    if (*pp == w) {
      *pp = w->cnext;
      return;
    }
}

void clients_reply_get(store *s, st_client *cl, uint64_t req_id, st_obj *o) {
  if (cl->closed) return;
  st_hold *h = NULL;
  HASH_FIND(hh, cl->holds, &o->inst, sizeof o->inst, h);
  if (!h) {
    h = calloc(1, sizeof *h);
    if (!h) {
      clients_reply_get_err(cl, req_id, HPL_ENOMEM, "out of memory");
      return;
    }
    h->inst = o->inst;
    HASH_ADD(hh, cl->holds, inst, sizeof h->inst, h);
  }
  h->count++;
  store_obj_ref(o);
  Hplpb__GetRep r = HPLPB__GET_REP__INIT;
  r.offset = (uint64_t)(o->data - hpl__pool_base(s->pool));
  r.size = o->size;
  r.handle = o->inst;
  hpl__conn_send(cl->c, HPL__MSG_GET_REP, req_id, &r.base, NULL, 0, 0, NULL, NULL);
}

void clients_reply_get_err(st_client *cl, uint64_t req_id, int status, const char *detail) {
  if (cl->closed) return;
  Hplpb__GetRep r = HPLPB__GET_REP__INIT;
  r.status = status;
  r.detail = (char *)(detail ? detail : "");
  hpl__conn_send(cl->c, HPL__MSG_GET_REP, req_id, &r.base, NULL, 0, 0, NULL, NULL);
}

static void release_hold(store *s, st_client *cl, uint64_t inst) {
  st_hold *h = NULL;
  HASH_FIND(hh, cl->holds, &inst, sizeof inst, h);
  if (!h) return; /* unknown or already released: ignore */
  st_obj *o = store_find_inst(s, inst);
  if (--h->count == 0) {
    HASH_DEL(cl->holds, h);
    free(h);
  }
  if (o) store_obj_unref(s, o);
}

/* ------------------------------------------------------------------ create / seal */

typedef struct create_ctx {
  st_client *cl;
  st_obj *o;
  uint64_t req;
  int sealing; /* 0: LOC_ADD at create, 1: INLINE_PUT at seal, 2: LOC_ADD fallback at seal */
} create_ctx;

static void send_create_rep(store *s, st_client *cl, uint64_t req, st_obj *o) {
  Hplpb__CreateRep r = HPLPB__CREATE_REP__INIT;
  r.offset = (uint64_t)(o->data - hpl__pool_base(s->pool));
  r.handle = o->inst;
  hpl__conn_send(cl->c, HPL__MSG_CREATE_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

static void send_create_err(st_client *cl, uint64_t req, int status, const char *detail) {
  Hplpb__CreateRep r = HPLPB__CREATE_REP__INIT;
  r.status = status;
  r.detail = (char *)(detail ? detail : "");
  hpl__conn_send(cl->c, HPL__MSG_CREATE_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* A put failed after the object entered the table: take it out again. */
static void create_undo(store *s, st_obj *o, int status, const char *detail) {
  store_obj_fail(s, o, status, detail);
  o->creator = NULL;
  store_obj_detach(s, o);
  store_obj_unref(s, o); /* the creator's reference */
}

static void seal_finish(store *s, st_client *cl, uint64_t req, st_obj *o);

static void create_dir_reply(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                             const uint8_t *payload, uint64_t plen, void *arg) {
  (void)h, (void)payload, (void)plen;
  create_ctx *x = arg;
  st_obj *o = x->o;
  st_client *cl = x->cl;
  Hplpb__Reply *r = (Hplpb__Reply *)m;
  if (r) status = r->status;
  const char *detail = r && r->detail && *r->detail ? r->detail : hpl_strerror(status);
  if (x->sealing == 1 && status == HPL_EUNAVAIL) {
    /* the directory's inline cache is full: register an ordinary copy */
    Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
    a.id = o->id;
    a.size = o->size;
    a.complete = 1;
    a.origin = 1;
    x->sealing = 2;
    if (dirlink_request(s, HPL__MSG_LOC_ADD, &a.base, NULL, 0, -1, create_dir_reply, x) == 0)
      return;
    status = HPL_ENOMEM;
  }
  if (cl->closed || !o->in_table) {
    /* client gone (its cleanup aborted the object) or object dropped: a
     * location the directory just recorded for us must go again */
    if (status == 0) {
      dirlink_loc_remove(s, o->id);
    }
    const char *why = "object was deleted while being put";
    if (!cl->closed) {
      if (x->sealing)
        hpl__conn_reply(cl->c, x->req, HPL_ESTATE, why);
      else
        send_create_err(cl, x->req, HPL_ESTATE, why);
      if (o->creator == cl) { /* drop the creator's reference too */
        o->creator = NULL;
        store_obj_unref(s, o);
      }
    }
    store_obj_unref(s, o);
    client_unref(cl);
    free(x);
    return;
  }
  if (status != 0) {
    if (x->sealing) {
      hpl__conn_reply(cl->c, x->req, status, detail);
    } else {
      send_create_err(cl, x->req, status, detail);
    }
    create_undo(s, o, status, detail);
  } else if (x->sealing) {
    o->advertised = 1;
    o->inline_obj = x->sealing == 1;
    if (o->inline_obj) s->ctr.inline_puts++;
    seal_finish(s, cl, x->req, o);
  } else {
    o->advertised = 1;
    send_create_rep(s, cl, x->req, o);
  }
  store_obj_unref(s, o); /* the request's reference */
  client_unref(cl);
  free(x);
}

static int dir_req_for(store *s, st_client *cl, st_obj *o, uint64_t req, int sealing,
                       unsigned type, const ProtobufCMessage *m, const void *payload,
                       uint64_t plen, int64_t timeout_ms) {
  create_ctx *x = calloc(1, sizeof *x);
  if (!x) return HPL_ENOMEM;
  x->cl = cl;
  x->o = o;
  x->req = req;
  x->sealing = sealing;
  cl->refs++;
  store_obj_ref(o);
  int rc = dirlink_request(s, type, m, payload, plen, timeout_ms, create_dir_reply, x);
  if (rc) {
    cl->refs--;
    store_obj_unref(s, o);
    free(x);
  }
  return rc;
}

static void on_create(store *s, st_client *cl, uint64_t req, Hplpb__CreateReq *m) {
  char detail[400];
  if (m->size > hpl__pool_capacity(s->pool)) {
    char a[32], b[32];
    snprintf(detail, sizeof detail, "object '%s' of %s is larger than the whole pool (%s)", m->id,
             hpl__fmt_bytes(m->size, a, sizeof a),
             hpl__fmt_bytes(hpl__pool_capacity(s->pool), b, sizeof b));
    send_create_err(cl, req, HPL_ENOMEM, detail);
    return;
  }
  if (store_find(s, m->id)) {
    snprintf(detail, sizeof detail, "object '%s' already exists on this node", m->id);
    send_create_err(cl, req, HPL_EEXIST, detail);
    return;
  }
  st_obj *o = store_obj_new(s, m->id, OBJ_CREATING);
  if (!o) {
    send_create_err(cl, req, HPL_ENOMEM, "out of memory");
    return;
  }
  int rc = store_obj_alloc(s, o, m->size, detail, sizeof detail);
  if (rc) {
    store_obj_detach(s, o);
    send_create_err(cl, req, rc, detail);
    return;
  }
  o->creator = cl;
  store_obj_ref(o); /* the creator's reference until seal or abort */
  if (m->size <= s->inline_max) {
    send_create_rep(s, cl, req, o);
    return;
  }
  /* Large object: advertise the origin copy now so pulls can overlap the
   * client's writing. */
  Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
  a.id = o->id;
  a.size = o->size;
  a.complete = 0;
  a.origin = 1;
  if (dir_req_for(s, cl, o, req, 0, HPL__MSG_LOC_ADD, &a.base, NULL, 0, m->timeout_ms) != 0) {
    send_create_err(cl, req, HPL_ENOMEM, "out of memory");
    create_undo(s, o, HPL_ENOMEM, "out of memory");
  }
}

static st_obj *creating_obj(store *s, st_client *cl, uint64_t handle) {
  st_obj *o = store_find_inst(s, handle);
  if (!o || o->state != OBJ_CREATING || o->creator != cl) return NULL;
  return o;
}

static void on_progress(store *s, st_client *cl, Hplpb__ProgressNote *m) {
  st_obj *o = creating_obj(s, cl, m->handle);
  if (!o || m->bytes > o->size) return;
  store_obj_progress(s, o, m->bytes);
}

static void seal_finish(store *s, st_client *cl, uint64_t req, st_obj *o) {
  o->creator = NULL;
  s->ctr.puts++;
  if (!o->inline_obj) {
    Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
    n.id = o->id;
    n.kind = HPL__LOC_COMPLETE;
    dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
  }
  store_obj_sealed(s, o);
  hpl__conn_reply(cl->c, req, 0, NULL);
  store_obj_unref(s, o); /* the creator's reference */
}

static void on_seal(store *s, st_client *cl, uint64_t req, Hplpb__HandleReq *m) {
  st_obj *o = creating_obj(s, cl, m->handle);
  if (!o) {
    hpl__conn_reply(cl->c, req, HPL_EINVAL, "no object being created with this handle");
    return;
  }
  if (!o->in_table) {
    hpl__conn_reply(cl->c, req, HPL_ESTATE, "object was deleted before it was sealed");
    o->creator = NULL;
    store_obj_unref(s, o);
    return;
  }
  o->progress = o->size;
  if (o->size <= s->inline_max && !o->advertised) {
    Hplpb__InlinePutReq p = HPLPB__INLINE_PUT_REQ__INIT;
    p.id = o->id;
    p.size = o->size;
    if (dir_req_for(s, cl, o, req, 1, HPL__MSG_INLINE_PUT, &p.base, o->data, o->size,
                    m->timeout_ms) != 0)
      hpl__conn_reply(cl->c, req, HPL_ENOMEM, "out of memory");
    return;
  }
  seal_finish(s, cl, req, o);
}

static void abort_obj(store *s, st_obj *o) {
  if (o->advertised) {
    dirlink_loc_remove(s, o->id);
    o->advertised = 0;
  }
  char detail[320];
  snprintf(detail, sizeof detail, "the put of '%s' was aborted", o->id);
  create_undo(s, o, HPL_ENOTFOUND, detail);
}

/* A client's request waiting for the directory's answer. */
typedef struct client_req {
  st_client *cl;
  uint64_t req;
} client_req;

static void abort_dir_reply(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                            const uint8_t *payload, uint64_t plen, void *arg) {
  (void)s, (void)status, (void)h, (void)m, (void)payload, (void)plen;
  client_req *x = arg;
  if (!x->cl->closed) hpl__conn_reply(x->cl->c, x->req, 0, NULL);
  client_unref(x->cl);
  free(x);
}

/* Abort answers once the directory has forgotten the copy, so a get issued
 * after hpl_abort() returns waits for a new put instead of pulling from the
 * discarded region. */
static void on_abort(store *s, st_client *cl, uint64_t req, Hplpb__HandleReq *m) {
  st_obj *o = creating_obj(s, cl, m->handle);
  client_req *x = o && o->advertised ? calloc(1, sizeof *x) : NULL;
  if (x) {
    Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
    n.id = o->id;
    n.kind = HPL__LOC_REMOVE;
    x->cl = cl;
    x->req = req;
    cl->refs++;
    if (dirlink_request(s, HPL__MSG_LOC_NOTE, &n.base, NULL, 0, 5000, abort_dir_reply, x) == 0) {
      o->advertised = 0;
    } else {
      cl->refs--;
      free(x);
      x = NULL;
    }
  }
  if (o) abort_obj(s, o);
  if (!x && req) hpl__conn_reply(cl->c, req, 0, NULL);
}

static void on_contains(store *s, st_client *cl, uint64_t req, Hplpb__IdReq *m) {
  st_obj *o = store_find(s, m->id);
  Hplpb__ContainsRep r = HPLPB__CONTAINS_REP__INIT;
  r.local = o && o->state == OBJ_SEALED;
  hpl__conn_send(cl->c, HPL__MSG_CONTAINS_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

static void on_counters(store *s, st_client *cl, uint64_t req) {
  struct {
    const char *name;
    uint64_t v;
  } vals[] = {
      {"data_bytes_sent", s->ctr.data_bytes_sent},
      {"data_bytes_received", s->ctr.data_bytes_received},
      {"pulls_served", s->ctr.pulls_served},
      {"pulls_made", s->ctr.pulls_made},
      {"pull_failures", s->ctr.pull_failures},
      {"bytes_resent", s->ctr.bytes_resent},
      {"pull_resumes", s->ctr.pull_resumes},
      {"bytes_kept_on_resume", s->ctr.bytes_kept_on_resume},
      {"stalls", s->ctr.stalls},
      {"stragglers", s->ctr.stragglers},
      {"restarts", s->ctr.restarts},
      {"inline_gets", s->ctr.inline_gets},
      {"inline_puts", s->ctr.inline_puts},
      {"local_gets", s->ctr.local_gets},
      {"remote_gets", s->ctr.remote_gets},
      {"puts", s->ctr.puts},
      {"objects", HASH_COUNT(s->objs)},
      {"pool_capacity", hpl__pool_capacity(s->pool)},
      {"pool_used", hpl__pool_used(s->pool)},
      {"pool_allocated", hpl__pool_allocated(s->pool)},
      {"node_id", s->node_id},
  };
  enum { N = sizeof vals / sizeof vals[0] };
  Hplpb__Counter cs[N];
  Hplpb__Counter *ps[N];
  for (size_t i = 0; i < N; i++) {
    hplpb__counter__init(&cs[i]);
    cs[i].name = (char *)vals[i].name;
    cs[i].value = vals[i].v;
    ps[i] = &cs[i];
  }
  Hplpb__CountersRep r = HPLPB__COUNTERS_REP__INIT;
  r.n_counters = N;
  r.counters = ps;
  hpl__conn_send(cl->c, HPL__MSG_COUNTERS_REP, req, &r.base, NULL, 0, 0, NULL, NULL);
}

/* ------------------------------------------------------------------ proxied requests */

static void proxy_reply(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                        const uint8_t *payload, uint64_t plen, void *arg) {
  (void)s, (void)payload, (void)plen;
  client_req *x = arg;
  if (!x->cl->closed) {
    if (m)
      hpl__conn_send(x->cl->c, h->type, x->req, m, NULL, 0, 0, NULL, NULL);
    else
      hpl__conn_reply(x->cl->c, x->req, status,
                     status == HPL_ETIMEDOUT ? "the directory did not answer in time"
                                             : "the directory is unreachable");
  }
  client_unref(x->cl);
  free(x);
}

static void proxy(store *s, st_client *cl, const hpl__frame_hdr *h, ProtobufCMessage *m,
                  int64_t timeout_ms) {
  client_req *x = calloc(1, sizeof *x);
  if (!x) {
    hpl__conn_reply(cl->c, h->req_id, HPL_ENOMEM, "out of memory");
    return;
  }
  x->cl = cl;
  x->req = h->req_id;
  cl->refs++;
  if (dirlink_request(s, h->type, m, NULL, 0, timeout_ms, proxy_reply, x) != 0) {
    cl->refs--;
    free(x);
    hpl__conn_reply(cl->c, h->req_id, HPL_ENOMEM, "out of memory");
  }
}

/* ------------------------------------------------------------------ connection */

static const char *req_id_of(unsigned type, ProtobufCMessage *m) {
  switch (type) {
    case HPL__MSG_CREATE: return ((Hplpb__CreateReq *)m)->id;
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
  (void)payload;
  st_client *cl = hpl__conn_data(c);
  store *s = cl->s;
  if (plen) {
    hpl__conn_fail(c, "unexpected payload");
    return;
  }
  const char *id = req_id_of(h->type, m);
  if (id && !hpl__id_valid(id)) {
    hpl__conn_reply(c, h->req_id, HPL_EINVAL, "invalid object id");
    return;
  }
  switch (h->type) {
    case HPL__MSG_CREATE: on_create(s, cl, h->req_id, (Hplpb__CreateReq *)m); break;
    case HPL__MSG_PROGRESS: on_progress(s, cl, (Hplpb__ProgressNote *)m); break;
    case HPL__MSG_SEAL: on_seal(s, cl, h->req_id, (Hplpb__HandleReq *)m); break;
    case HPL__MSG_ABORT: on_abort(s, cl, h->req_id, (Hplpb__HandleReq *)m); break;
    case HPL__MSG_GET: {
      Hplpb__GetReq *g = (Hplpb__GetReq *)m;
      store_get(s, cl, h->req_id, g->id, g->timeout_ms);
      break;
    }
    case HPL__MSG_RELEASE: release_hold(s, cl, ((Hplpb__HandleReq *)m)->handle); break;
    case HPL__MSG_CONTAINS: on_contains(s, cl, h->req_id, (Hplpb__IdReq *)m); break;
    case HPL__MSG_STAT:
    case HPL__MSG_DELETE: proxy(s, cl, h, m, ((Hplpb__IdReq *)m)->timeout_ms); break;
    case HPL__MSG_LIST: proxy(s, cl, h, m, ((Hplpb__ListReq *)m)->timeout_ms); break;
    case HPL__MSG_TRANSFERS: proxy(s, cl, h, m, ((Hplpb__TransfersReq *)m)->timeout_ms); break;
    case HPL__MSG_REDUCE: reduce_client_request(s, cl, h->req_id, (Hplpb__ReduceReq *)m); break;
    case HPL__MSG_REDUCE_INFO: proxy(s, cl, h, m, ((Hplpb__IdReq *)m)->timeout_ms); break;
    case HPL__MSG_COUNTERS: on_counters(s, cl, h->req_id); break;
    default: {
      char why[64];
      snprintf(why, sizeof why, "unexpected %s message from a client", hpl__msg_name(h->type));
      hpl__conn_fail(c, why);
    }
  }
}

static void client_on_close(hpl__conn *c, int status) {
  (void)status;
  st_client *cl = hpl__conn_data(c);
  store *s = cl->s;
  cl->closed = 1;
  while (cl->waiters) {
    st_waiter *w = cl->waiters;
    cl->waiters = w->cnext;
    store_waiter_cancel(s, w);
  }
  st_hold *h, *tmp;
  HASH_ITER(hh, cl->holds, h, tmp) {
    st_obj *o = store_find_inst(s, h->inst);
    HASH_DEL(cl->holds, h);
    for (int i = 0; o && i < h->count; i++) store_obj_unref(s, o);
    free(h);
  }
  /* abort objects it was still writing (also ones already deleted) */
  st_obj *o, *otmp;
  HASH_ITER(hh_inst, s->insts, o, otmp) {
    if (o->state == OBJ_CREATING && o->creator == cl) abort_obj(s, o);
  }
  if (cl->prev) cl->prev->next = cl->next; else s->clients = cl->next;
  if (cl->next) cl->next->prev = cl->prev;
  LOG_DEBUG("client %llu disconnected", (unsigned long long)cl->id);
  cl->refs++;
  client_unref(cl);
}

/* Send the HELLO frame with the pool's memfd (and the presence filter's)
 * attached. The socket is new and the
 * frame small, so a non-blocking sendmsg completes at once. */
static int send_hello(store *s, int fd) {
  Hplpb__Hello hm = HPLPB__HELLO__INIT;
  hm.pool_size = hpl__pool_capacity(s->pool);
  hm.node_id = s->node_id;
  hm.inline_max = s->inline_max;
  hm.node_name = s->cfg.name;
  /* where clients may read small objects directly (see hpl_get) */
  char dir_addr[64] = "";
  int dir_port = 0;
  if (s->netns && dirlink_peer(s, dir_addr, sizeof dir_addr, &dir_port) == 0) {
    hm.dir_addr = dir_addr;
    hm.dir_port = (uint32_t)dir_port;
    hm.netns = s->netns;
  }
  int fds[2] = {hpl__pool_fd(s->pool), s->filter ? s->filter_fd : -1};
  int nfd = fds[1] >= 0 ? 2 : 1;
  if (nfd == 2) hm.filter_slots = STORE_FILTER_SLOTS;
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
  free(frame);
  return n == (ssize_t)len ? 0 : HPL_ECONN;
}

static void on_client_accept(uv_stream_t *server, int status) {
  store *s = server->data;
  static uint64_t next_client = 0;
  if (status < 0) return;
  uv_pipe_t *p = malloc(sizeof *p);
  st_client *cl = calloc(1, sizeof *cl);
  if (!p || !cl) {
    free(p);
    free(cl);
    return;
  }
  uv_pipe_init(s->loop, p, 0);
  uv_os_fd_t fd;
  if (uv_accept(server, (uv_stream_t *)p) != 0 || uv_fileno((uv_handle_t *)p, &fd) != 0 ||
      send_hello(s, fd) != 0) {
    uv_close((uv_handle_t *)p, (uv_close_cb)free);
    free(cl);
    return;
  }
  cl->s = s;
  cl->id = ++next_client;
  cl->refs = 0;
  char label[48];
  snprintf(label, sizeof label, "client-%llu", (unsigned long long)cl->id);
  hpl__conn_opts o = {.lim = {.max_msg = HPL__MAX_MSG_CTRL, .max_payload = 0,
                             .max_type = HPL__MSG_MAX_},
                     .on_frame = client_on_frame,
                     .on_close = client_on_close,
                     .data = cl,
                     .label = label};
  cl->next = s->clients;
  if (s->clients) s->clients->prev = cl;
  s->clients = cl;
  cl->c = hpl__conn_new((uv_stream_t *)p, &o);
  if (!cl->c) {
    s->clients = cl->next;
    if (s->clients) s->clients->prev = NULL;
    free(cl);
  }
}

/* Remove a socket file left by a store that died, but never one that a
 * live store is listening on. */
static int clear_stale_socket(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (!S_ISSOCK(st.st_mode)) {
    LOG_ERROR("%s exists and is not a socket", path);
    return HPL_EINVAL;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
  int err = errno;
  close(fd);
  if (rc == 0) {
    LOG_ERROR("another store is already listening on %s", path);
    return HPL_EEXIST;
  }
  if (err != ECONNREFUSED && err != ENOENT) {
    LOG_ERROR("cannot probe %s: %s", path, strerror(err));
    return HPL_ESYS;
  }
  unlink(path);
  return 0;
}

int clients_start(store *s) {
  const char *path = s->cfg.socket_path;
  if (!path[0]) {
    LOG_ERROR("no socket path");
    return HPL_EINVAL;
  }
  int rc = clear_stale_socket(path);
  if (rc) return rc;
  uv_pipe_init(s->loop, &s->client_listener, 0);
  s->client_listener.data = s;
  if ((rc = uv_pipe_bind(&s->client_listener, path)) ||
      (rc = uv_listen((uv_stream_t *)&s->client_listener, 256, on_client_accept))) {
    LOG_ERROR("cannot listen on %s: %s", path, uv_strerror(rc));
    return HPL_ESYS;
  }
  chmod(path, 0600);
  return 0;
}

void clients_stop(store *s) {
  if (uv_is_closing((uv_handle_t *)&s->client_listener)) return;
  uv_close((uv_handle_t *)&s->client_listener, NULL);
  unlink(s->cfg.socket_path);
  for (st_client *cl = s->clients; cl; cl = cl->next) hpl__conn_close(cl->c, 0);
}
