/* store.c - object table, life cycle and fetch orchestration (see store.h). */
#include "store.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"

void store_config_defaults(store_config *c) {
  memset(c, 0, sizeof *c);
  c->memory = 2ull << 30;
  snprintf(c->data_host, sizeof c->data_host, "0.0.0.0");
  c->chunk = 4u << 20;
  c->stall_timeout_ms = 10000;
  c->straggler_ratio = 0.2;
  c->straggler_ms = 3000;
  c->grace_ms = 5000;
}

int store_faults_parse(store_faults *f, const char *spec, char *err, size_t errlen) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *kv = strtok(buf, ","); kv; kv = strtok(NULL, ",")) {
    char *eq = strchr(kv, '=');
    if (!eq) {
      snprintf(err, errlen, "fault '%s': expected key=value", kv);
      return -1;
    }
    *eq = 0;
    const char *k = kv, *v = eq + 1;
    uint64_t n = 0;
    int bad = 0;
    if (!strcmp(k, "prefix")) {
      snprintf(f->prefix, sizeof f->prefix, "%s", v);
      continue;
    }
    if (!strcmp(k, "to_node")) {
      char *end;
      f->to_node = strtoull(v, &end, 16);
      if (*end || !f->to_node) bad = 1;
    } else if (!strcmp(k, "hb_pause")) { /* AT_MS:LEN_MS */
      unsigned long long at, len;
      if (sscanf(v, "%llu:%llu", &at, &len) != 2) bad = 1;
      f->hb_pause_at_ms = at;
      f->hb_pause_ms = len;
    } else if (hpl__parse_size(v, &n)) {
      bad = 1;
    } else if (!strcmp(k, "crash_after")) {
      f->crash_after = n;
    } else if (!strcmp(k, "drop_after")) {
      f->drop_after = n;
    } else if (!strcmp(k, "stall_after")) {
      f->stall_after = n;
    } else if (!strcmp(k, "slow_send")) {
      f->slow_send = n;
    } else {
      snprintf(err, errlen, "unknown fault '%s' (crash_after, drop_after, stall_after, "
               "slow_send, hb_pause, prefix, to_node)", k);
      return -1;
    }
    if (bad) {
      snprintf(err, errlen, "fault '%s': bad value '%s'", k, v);
      return -1;
    }
    f->enabled = 1;
  }
  return 0;
}

st_obj *store_find(store *s, const char *id) {
  st_obj *o = NULL;
  HASH_FIND_STR(s->objs, id, o);
  return o;
}

st_obj *store_find_inst(store *s, uint64_t inst) {
  st_obj *o = NULL;
  HASH_FIND(hh_inst, s->insts, &inst, sizeof inst, o);
  return o;
}

/* The presence filter: a counter per slot of the ids in s->objs. A
 * saturated counter stays saturated (it only ever means "maybe here"). */
static void filter_count(store *s, const char *id, int delta) {
  if (!s->filter) return;
  uint8_t *c = &s->filter[hpl__filter_slot(id, STORE_FILTER_SLOTS)];
  uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
  if (v == UINT8_MAX || (delta < 0 && v == 0)) return;
  __atomic_store_n(c, (uint8_t)(v + delta), __ATOMIC_RELEASE);
}

static void filter_create(store *s) {
  s->filter_fd = -1;
  int fd = memfd_create("hoplite-filter", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, STORE_FILTER_SLOTS) != 0) {
    LOG_WARN("no presence filter (%s): clients ask this store for every get", strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  void *p = mmap(NULL, STORE_FILTER_SLOTS, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return;
  }
  s->filter_fd = fd;
  s->filter = p;
}

void store_free(store *s) {
  dirlink_free(s);
  st_obj *o, *tmp;
  HASH_ITER(hh, s->objs, o, tmp) store_obj_detach(s, o);
  if (s->filter) munmap(s->filter, STORE_FILTER_SLOTS);
  if (s->filter_fd >= 0) close(s->filter_fd);
  s->filter = NULL;
  s->filter_fd = -1;
  hpl__pool_destroy(s->pool);
  s->pool = NULL;
}

st_obj *store_obj_new(store *s, const char *id, int state) {
  st_obj *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->id = strdup(id);
  if (!o->id) {
    free(o);
    return NULL;
  }
  o->inst = ++s->next_inst;
  o->state = state;
  o->in_table = 1;
  o->created_ms = hpl__now_ms();
  HASH_ADD_KEYPTR(hh, s->objs, o->id, strlen(o->id), o);
  filter_count(s, o->id, 1);
  HASH_ADD(hh_inst, s->insts, inst, sizeof o->inst, o);
  return o;
}

st_obj *store_obj_new_internal(store *s, const char *key, uint64_t size, char *detail,
                               size_t dlen) {
  st_obj *o = calloc(1, sizeof *o);
  if (!o || !(o->id = strdup(key))) {
    free(o);
    snprintf(detail, dlen, "out of memory");
    return NULL;
  }
  o->inst = ++s->next_inst;
  o->state = OBJ_PULLING;
  o->in_table = 1;
  o->internal = 1;
  o->created_ms = hpl__now_ms();
  if (store_obj_alloc(s, o, size, detail, dlen) != 0) {
    free(o->id);
    free(o);
    return NULL;
  }
  HASH_ADD_KEYPTR(hh, s->internal, o->id, strlen(o->id), o);
  HASH_ADD(hh_inst, s->insts, inst, sizeof o->inst, o);
  transfer_internal_ready(s, key);
  return o;
}

st_obj *store_find_internal(store *s, const char *key) {
  st_obj *o = NULL;
  HASH_FIND_STR(s->internal, key, o);
  return o;
}

static void obj_free(store *s, st_obj *o) {
  HASH_DELETE(hh_inst, s->insts, o);
  free(o->reduce_req);
  if (o->data && o->size) hpl__pool_free(s->pool, o->data);
  free(o->id);
  free(o);
}

/* Tell watchers something changed. The list is one-shot: each watcher that
 * still cares registers again from its callback. */
static void obj_notify(st_obj *o) {
  st_watch *w = o->watchers;
  o->watchers = NULL;
  while (w) {
    st_watch *next = w->next;
    w->next = NULL;
    w->fn(w);
    w = next;
  }
}

void store_watch(st_obj *o, st_watch *w) {
  for (st_watch *x = o->watchers; x; x = x->next)
    if (x == w) return;
  w->next = o->watchers;
  o->watchers = w;
}

void store_unwatch(st_obj *o, st_watch *w) {
  for (st_watch **pp = &o->watchers; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      w->next = NULL;
      return;
    }
}

void store_obj_detach(store *s, st_obj *o) {
  if (!o->in_table) return;
  if (o->internal) {
    HASH_DEL(s->internal, o);
  } else {
    HASH_DEL(s->objs, o);
    filter_count(s, o->id, -1);
  }
  o->in_table = 0;
  obj_notify(o);
  if (o->refs == 0) obj_free(s, o);
}

void store_obj_ref(st_obj *o) { o->refs++; }

void store_obj_unref(store *s, st_obj *o) {
  if (--o->refs == 0 && !o->in_table) obj_free(s, o);
}

int store_obj_alloc(store *s, st_obj *o, uint64_t size, char *detail, size_t dlen) {
  o->size = size;
  if (size == 0) {
    o->data = hpl__pool_base(s->pool);
    return 0;
  }
  o->data = hpl__pool_alloc(s->pool, size);
  if (o->data) return 0;
  char a[32], b[32], c[32], d[32];
  snprintf(detail, dlen,
           "store '%s' cannot fit %s for '%s': pool %s, %s in use, largest free range %s",
           s->cfg.name, hpl__fmt_bytes(size, a, sizeof a), o->id,
           hpl__fmt_bytes(hpl__pool_capacity(s->pool), b, sizeof b),
           hpl__fmt_bytes(hpl__pool_used(s->pool), c, sizeof c),
           hpl__fmt_bytes(hpl__pool_largest_free(s->pool), d, sizeof d));
  return HPL_ENOMEM;
}

void store_obj_restart(store *s, st_obj *o, uint32_t gen) {
  LOG_INFO("'%s': restarting from byte 0 (generation %u -> %u)", o->id, o->gen, gen);
  transfer_cut_senders(s, o);
  o->progress = 0;
  o->gen = gen;
}

void store_obj_progress(store *s, st_obj *o, uint64_t progress) {
  (void)s;
  if (progress <= o->progress) return;
  o->progress = progress;
  obj_notify(o);
}

static void waiter_free(st_waiter *w);

void store_obj_sealed(store *s, st_obj *o) {
  o->state = OBJ_SEALED;
  o->progress = o->size;
  while (o->waiters) {
    st_waiter *w = o->waiters;
    o->waiters = w->next;
    clients_waiter_unlink(w);
    clients_reply_get(s, w->cl, w->req_id, o);
    waiter_free(w);
  }
  obj_notify(o);
}

void store_obj_fail(store *s, st_obj *o, int status, const char *detail) {
  (void)s;
  while (o->waiters) {
    st_waiter *w = o->waiters;
    o->waiters = w->next;
    clients_waiter_unlink(w);
    clients_reply_get_err(w->cl, w->req_id, status, detail);
    waiter_free(w);
  }
}

/* ------------------------------------------------------------------ waiters */

static void waiter_closed(uv_handle_t *h) { free(h->data); }

static void waiter_free(st_waiter *w) {
  if (w->has_timer) {
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, waiter_closed);
  } else {
    free(w);
  }
}

static void waiter_unlink_obj(st_waiter *w) {
  for (st_waiter **pp = &w->obj->waiters; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      return;
    }
}

/* Called by clients.c when the client goes away. */
void store_waiter_cancel(store *s, st_waiter *w);
void store_waiter_cancel(store *s, st_waiter *w) {
  st_obj *o = w->obj;
  waiter_unlink_obj(w);
  waiter_free(w);
  if (o->state == OBJ_FETCHING && !o->waiters && !o->fetch_active && o->refs == 0)
    store_obj_detach(s, o);
}

static void waiter_timeout(uv_timer_t *t) {
  st_waiter *w = t->data;
  store *s = w->cl->s;
  char detail[320];
  snprintf(detail, sizeof detail, "object '%s' not available within the timeout (%s)", w->obj->id,
           w->obj->state == OBJ_FETCHING ? "it does not exist yet"
           : w->obj->state == OBJ_CREATING ? "it is still being written"
                                            : "it is still arriving");
  clients_waiter_unlink(w);
  clients_reply_get_err(w->cl, w->req_id, HPL_ETIMEDOUT, detail);
  store_waiter_cancel(s, w);
}

static st_waiter *waiter_add(store *s, st_obj *o, st_client *cl, uint64_t req, int64_t timeout_ms) {
  st_waiter *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->obj = o;
  w->cl = cl;
  w->req_id = req;
  w->deadline_ms = hpl__deadline_ms(timeout_ms);
  st_waiter **pp = &o->waiters;
  while (*pp) pp = &(*pp)->next;
  *pp = w;
  w->cnext = cl->waiters;
  cl->waiters = w;
  if (timeout_ms >= 0) {
    uv_timer_init(s->loop, &w->timer);
    w->timer.data = w;
    w->has_timer = 1;
    uv_timer_start(&w->timer, waiter_timeout, (uint64_t)timeout_ms, 0);
  }
  return w;
}

/* ------------------------------------------------------------------ get / fetch */

void store_get(store *s, st_client *cl, uint64_t req_id, const char *id, int64_t timeout_ms) {
  st_obj *o = store_find(s, id);
  if (o && o->state == OBJ_SEALED) {
    s->ctr.local_gets++;
    clients_reply_get(s, cl, req_id, o);
    return;
  }
  if (timeout_ms == 0) {
    char detail[320];
    snprintf(detail, sizeof detail, "object '%s' is not in this store (timeout 0)", id);
    clients_reply_get_err(cl, req_id, HPL_ETIMEDOUT, detail);
    return;
  }
  if (!o) {
    o = store_obj_new(s, id, OBJ_FETCHING);
    if (!o) {
      clients_reply_get_err(cl, req_id, HPL_ENOMEM, "out of memory");
      return;
    }
    s->ctr.remote_gets++;
  }
  if (!waiter_add(s, o, cl, req_id, timeout_ms < 0 ? -1 : timeout_ms)) {
    clients_reply_get_err(cl, req_id, HPL_ENOMEM, "out of memory");
    return;
  }
  if (o->state == OBJ_FETCHING && !o->fetch_active) store_fetch(s, o, 0);
}

/* Latest deadline among the object's waiters (UINT64_MAX: someone waits
 * without limit or nobody waits at all, e.g. a resumed pull). */
static uint64_t obj_deadline(st_obj *o) {
  uint64_t d = 0;
  if (!o->waiters) return UINT64_MAX;
  for (st_waiter *w = o->waiters; w; w = w->next)
    if (w->deadline_ms > d) d = w->deadline_ms;
  return d;
}

static void fetch_reply(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                        const uint8_t *payload, uint64_t plen, void *arg);

void store_acquire_req(st_obj *o, uint64_t failed_peer, int64_t timeout_ms, Hplpb__AcquireReq *r) {
  hplpb__acquire_req__init(r);
  r->id = o->id;
  r->timeout_ms = timeout_ms;
  r->progress = o->progress;
  r->failed_peer = failed_peer;
  r->gen = o->gen;
}

void store_fetch(store *s, st_obj *o, uint64_t failed_peer) {
  uint64_t deadline = obj_deadline(o);
  o->fetch_active = 1;
  o->fetch_deadline_ms = deadline;
  Hplpb__AcquireReq r;
  store_acquire_req(o, failed_peer, deadline == UINT64_MAX ? -1 : hpl__ms_left(deadline), &r);
  store_obj_ref(o);
  /* the directory enforces the wait; our own limit only guards against a
   * directory that never answers */
  int64_t local = r.timeout_ms < 0 ? -1 : r.timeout_ms + 2000;
  if (dirlink_request(s, HPL__MSG_ACQUIRE, &r.base, NULL, 0, local, fetch_reply, o) != 0) {
    o->fetch_active = 0;
    store_obj_fail(s, o, HPL_ENOMEM, "out of memory");
    store_obj_unref(s, o);
  }
}

/* Give up on an object we were fetching or pulling. */
static void fetch_abandon(store *s, st_obj *o, int status, const char *detail) {
  store_obj_fail(s, o, status, detail);
  if (o->advertised) {
    dirlink_loc_remove(s, o->id);
    o->advertised = 0;
  }
  store_obj_detach(s, o);
}

static void fetch_reply(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                        const uint8_t *payload, uint64_t plen, void *arg) {
  (void)h;
  st_obj *o = arg;
  Hplpb__AcquireRep *r = (Hplpb__AcquireRep *)m;
  char detail[400];
  o->fetch_active = 0;
  if (r) status = r->status;
  if (!o->in_table) {
    /* dropped (deleted) while we asked; undo a sender assignment */
    if (status == 0 && r && !r->inline_) {
      dirlink_loc_remove(s, o->id);
    }
    store_obj_unref(s, o);
    return;
  }
  if (status == HPL_ETIMEDOUT && o->state == OBJ_FETCHING) {
    /* someone may still be willing to wait longer than the first asker */
    uint64_t d = obj_deadline(o);
    if (o->waiters && (d == UINT64_MAX || d > hpl__now_ms() + 5)) {
      store_fetch(s, o, 0);
    } else {
      snprintf(detail, sizeof detail, "object '%s' not available within the timeout", o->id);
      store_obj_fail(s, o, HPL_ETIMEDOUT, detail);
      store_obj_detach(s, o);
    }
    store_obj_unref(s, o);
    return;
  }
  if (status != 0) {
    snprintf(detail, sizeof detail, "%s", r && r->detail && *r->detail ? r->detail
                                                                       : hpl_strerror(status));
    LOG_INFO("fetch of '%s' failed: %s", o->id, detail);
    fetch_abandon(s, o, status, detail);
    store_obj_unref(s, o);
    return;
  }
  if (r->gen != o->gen) {
    /* the object's bytes were restarted (a reduce target): ours are void */
    if (o->progress) {
      s->ctr.restarts++;
      store_obj_restart(s, o, r->gen);
    }
    o->gen = r->gen;
  }
  if (o->data && o->size != r->size) {
    snprintf(detail, sizeof detail, "object '%s' changed size (%llu -> %llu)", o->id,
             (unsigned long long)o->size, (unsigned long long)r->size);
    fetch_abandon(s, o, HPL_EMISMATCH, detail);
    store_obj_unref(s, o);
    return;
  }
  if (!o->data) {
    int rc = store_obj_alloc(s, o, r->size, detail, sizeof detail);
    if (rc) {
      LOG_WARN("%s", detail);
      o->advertised = !r->inline_;
      fetch_abandon(s, o, rc, detail);
      store_obj_unref(s, o);
      return;
    }
  }
  if (r->inline_) {
    if (plen != r->size) {
      fetch_abandon(s, o, HPL_EPROTO, "inline reply of the wrong length");
    } else {
      if (plen) memcpy(o->data, payload, plen);
      o->inline_obj = 1;
      o->advertised = 1; /* the directory recorded us as a holder */
      s->ctr.inline_gets++;
      store_obj_sealed(s, o);
    }
    store_obj_unref(s, o);
    return;
  }
  o->advertised = 1;
  o->state = OBJ_PULLING;
  if (o->progress >= o->size) { /* nothing left to pull (size 0) */
    store_pull_done(s, o, 0, r->sender_node, NULL);
  } else {
    transfer_pull(s, o, r->sender_node, r->sender_addr, (int)r->sender_port, r->sender_complete);
  }
  store_obj_unref(s, o);
}

void store_pull_done(store *s, st_obj *o, int status, uint64_t sender, const char *detail) {
  if (!o->in_table) return;
  if (status == 0) {
    Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
    n.id = o->id;
    n.kind = HPL__LOC_COMPLETE;
    n.rate = (uint64_t)s->last_pull_rate;
    s->last_pull_rate = 0;
    dirlink_note(s, HPL__MSG_LOC_NOTE, &n.base);
    store_obj_sealed(s, o);
    return;
  }
  s->ctr.pull_failures++;
  LOG_WARN("pull of '%s' from %016llx failed at %llu/%llu bytes: %s; asking for another sender",
           o->id, (unsigned long long)sender, (unsigned long long)o->progress,
           (unsigned long long)o->size, detail ? detail : hpl_strerror(status));
  store_fetch(s, o, sender);
}

void store_upstream_gone(store *s, const char *id, uint64_t peer) {
  st_obj *o = store_find(s, id);
  if (!o || !o->puller || o->pull_sender != peer) return;
  LOG_WARN("'%s': the node we pull it from (%016llx) is gone; asking for another sender", id,
           (unsigned long long)peer);
  transfer_cancel(s, o);
  s->ctr.pull_failures++;
  store_fetch(s, o, peer);
}

void store_drop(store *s, const char *id) {
  st_obj *o = store_find(s, id);
  if (!o) return;
  LOG_DEBUG("dropping '%s' (deleted)", id);
  o->advertised = 0;
  if (o->state == OBJ_FETCHING || o->state == OBJ_PULLING) {
    transfer_cancel(s, o);
    char detail[320];
    snprintf(detail, sizeof detail, "object '%s' was deleted", id);
    store_obj_fail(s, o, HPL_ENOTFOUND, detail);
  }
  store_obj_detach(s, o);
}

/* ------------------------------------------------------------------ start/stop */

static void store_on_signal(uv_signal_t *sig, int signum) {
  store *s = sig->data;
  if (signum == SIGTERM && !s->draining && !s->stopping) {
    store_drain(s);
    return;
  }
  LOG_INFO("signal %d: shutting down", signum);
  store_stop(s);
}

static void drain_grace_over(uv_timer_t *t) {
  store *s = t->data;
  int n = transfer_active_senders(s);
  LOG_WARN("grace period over: leaving with %d stream(s) unfinished (their receivers go "
           "elsewhere)", n);
  store_stop(s);
}

static void drain_acked(store *s, int status, const hpl__frame_hdr *h, ProtobufCMessage *m,
                        const uint8_t *payload, uint64_t plen, void *arg) {
  (void)s, (void)status, (void)h, (void)m, (void)payload, (void)plen, (void)arg;
}

void store_drain(store *s) {
  s->draining = 1;
  LOG_INFO("SIGTERM: leaving; serving the %d stream(s) in progress for at most %u ms",
           transfer_active_senders(s), s->cfg.grace_ms);
  Hplpb__DrainReq d = HPLPB__DRAIN_REQ__INIT;
  d.node_id = s->node_id;
  dirlink_request(s, HPL__MSG_DRAIN, &d.base, NULL, 0, 1000, drain_acked, NULL);
  clients_stop(s);
  /* our own pulls are pointless now */
  st_obj *o, *tmp;
  HASH_ITER(hh, s->objs, o, tmp) if (o->puller) transfer_cancel(s, o);
  uv_timer_init(s->loop, &s->grace);
  s->grace.data = s;
  uv_timer_start(&s->grace, drain_grace_over, s->cfg.grace_ms, 0);
  store_drain_check(s);
}

void store_drain_check(store *s) {
  if (!s->draining || s->stopping || transfer_active_senders(s) > 0) return;
  LOG_INFO("every stream served: leaving cleanly");
  store_stop(s);
}

int store_start(store *s, uv_loop_t *loop, const store_config *cfg) {
  memset(s, 0, sizeof *s);
  s->loop = loop;
  s->cfg = *cfg;
  s->node_id = hpl__random_u64();
  s->inline_max = HPL__DEFAULT_INLINE_MAX;
  s->max_senders = 1;
  s->start_ms = hpl__now_ms();
  if (!s->cfg.name[0]) snprintf(s->cfg.name, sizeof s->cfg.name, "%016llx",
                                (unsigned long long)s->node_id);
  int rc = hpl__pool_create(cfg->memory, s->cfg.name, cfg->prefault, &s->pool);
  if (rc) {
    LOG_ERROR("cannot create a pool of %llu bytes: %s%s", (unsigned long long)cfg->memory,
              hpl_strerror(rc),
              rc == HPL_EINVAL ? " (a capacity above 2^47, or MALLOC_CONF forcing retain:true)"
              : rc == HPL_ESYS ? " (memfd_create/ftruncate/mmap failed; see errno above)" : "");
    return rc;
  }
  filter_create(s);
  struct stat ns;
  s->netns = stat("/proc/self/ns/net", &ns) == 0 ? (uint64_t)ns.st_ino : 0;
  if ((rc = transfer_start(s)) || (rc = clients_start(s)) || (rc = dirlink_start(s))) return rc;
  uv_signal_init(loop, &s->sigint);
  uv_signal_init(loop, &s->sigterm);
  s->sigint.data = s->sigterm.data = s;
  uv_signal_start(&s->sigint, store_on_signal, SIGINT);
  uv_signal_start(&s->sigterm, store_on_signal, SIGTERM);
  char cap[32];
  LOG_INFO("store %s (node %016llx) up: pool %s, socket %s, data port %d", s->cfg.name,
           (unsigned long long)s->node_id, hpl__fmt_bytes(hpl__pool_capacity(s->pool), cap, sizeof cap),
           s->cfg.socket_path, transfer_port(s));
  return 0;
}

void store_stop(store *s) {
  if (s->stopping) return;
  s->stopping = 1;
  if (s->draining) uv_close((uv_handle_t *)&s->grace, NULL);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  clients_stop(s);
  transfer_stop(s);
  dirlink_stop(s);
}
