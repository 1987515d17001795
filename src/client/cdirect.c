/* cdirect.c - small objects read straight from the directory with PEEK
 * (see cdirect.h). */
#include "cdirect.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "auth.h"
#include "cdial.h"
#include "crpc.h"
#include "cwait.h"
#include "digest.h"
#include "hoplite.h"
#include "trace.h"
#include "util.h"

#define DIRECT_WAIT_MS 500        /* one exchange with the directory, at most */
#define DIRECT_PEEK_WAIT_MS 1000  /* a PEEK waits this long for an object not there yet */
#define DIRECT_BACKOFF_MS 250     /* after a failed exchange, before trying again: */
#define DIRECT_BACKOFF_MAX 30000  /*   doubling up to this while failures go on */
#define DIRECT_MAX_INLINE (16u << 20) /* the directory holds no larger inline object */
#define PEEK_MAX_MSG 1024         /* a PEEK_REP message (status, size, flag) is tiny */
#define DIRECT_FEW 8              /* requests of a call kept on the stack */
#define DIRECT_ALIGN 64           /* as HPL__POOL_ALIGN: hpl_buf_data() is 64-byte aligned */

struct hpl__cdirect {
  const uint8_t *filter; /* the store's presence filter */
  uint32_t filter_slots;
  uint64_t netns;
  uint64_t node;           /* the store's node id: a large object is granted to it */
  int publish;             /* the directory takes PUBLISH (Hello.dir_publish) */
  uint32_t inline_max;
  hpl__crpc_opts rpc_opts; /* what the directory may send back */
  hpl__cdial_addr addr; /* the directory's */
  hpl__turn turn;       /* one exchange at a time; rpc and retry_ms */
  int waiting;          /* the exchange under way may wait for its objects
                           (atomic): other gets go to the store meanwhile */
  hpl__crpc *rpc;                 /* the directory connection, NULL when there is none */
  uint64_t retry_ms;              /* no direct read before this (backing off) */
  uint64_t backoff_ms;            /* the current backoff, 0 after a success */
  int auth;                       /* the cluster has a secret: connections start with */
  uint8_t key[HPL__AUTH_KEY_LEN]; /* the handshake, as a reader, with this key */
  char name[HPL__AUTH_NAME_MAX + 1]; /* ... for this node (its store's name) */
  int sealed;                     /* the directory seals (--encrypt): no direct reads */
  uint64_t term;                  /* the leader's term (standby directories; 0: none) */
  int lost;                       /* a connection failed since hpl__cdirect_lost asked (atomic) */
};

hpl__cdirect *hpl__cdirect_new(const hpl__cstore *s) {
  if (!s->filter || !s->dir_port || s->inline_max > DIRECT_MAX_INLINE) return NULL;
  hpl__cdirect *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  if (hpl__cdial_numeric(s->dir_addr, s->dir_port, &d->addr) != 0) {
    free(d);
    return NULL;
  }
  d->filter = s->filter;
  d->filter_slots = s->filter_slots;
  d->netns = s->netns;
  d->node = s->node_id;
  d->publish = s->dir_publish;
  d->term = s->dir_term;
  d->inline_max = s->inline_max;
  if ((d->auth = s->have_reader_key)) memcpy(d->key, s->reader_key, sizeof d->key);
  snprintf(d->name, sizeof d->name, "%s", s->node_name);
  /* a reply is header, PEEK_REP and at most inline_max bytes; reading a
   * whole one in one recv hands its buffer over without a copy */
  d->rpc_opts.lim = (hpl__frame_limits){
      .max_msg = PEEK_MAX_MSG, .max_payload = s->inline_max, .max_type = HPL__MSG_MAX_};
  d->rpc_opts.rbuf_size =
      HPL__FRAME_HDR_LEN + PEEK_MAX_MSG + HPL__FRAME_TAG_LEN + (size_t)s->inline_max;
  d->rpc_opts.solo = 1; /* only the holder of d->turn uses d->rpc */
  hpl__turn_init(&d->turn);
  return d;
}

void hpl__cdirect_free(hpl__cdirect *d) {
  if (!d) return;
  hpl__crpc_free(d->rpc);
  hpl__turn_destroy(&d->turn);
  free(d);
}

/* A connection or an exchange failed (the directory unreachable, slow or
 * not ours): gets go to the store for a while, twice as long each time
 * failures go on, so a sick directory does not cost every get its wait. */
static void direct_failed(hpl__cdirect *d) {
  if (d->term) __atomic_store_n(&d->lost, 1, __ATOMIC_RELAXED); /* the leader may have moved */
  d->backoff_ms = d->backoff_ms ? d->backoff_ms * 2 : DIRECT_BACKOFF_MS;
  if (d->backoff_ms > DIRECT_BACKOFF_MAX) d->backoff_ms = DIRECT_BACKOFF_MAX;
  __atomic_store_n(&d->retry_ms, d->sealed ? UINT64_MAX : hpl__now_ms() + d->backoff_ms,
                   __ATOMIC_RELAXED);
}

int hpl__cdirect_lost(hpl__cdirect *d) {
  return d && __atomic_exchange_n(&d->lost, 0, __ATOMIC_RELAXED);
}

void hpl__cdirect_moved(hpl__cdirect *d, const char *addr, int port, int publish, uint64_t term) {
  hpl__cdial_addr a;
  if (!d || !addr || !*addr || port <= 0 || port > 65535 || hpl__cdial_numeric(addr, port, &a))
    return;
  if (hpl__turn_take(&d->turn, hpl__now_ms() + DIRECT_WAIT_MS + DIRECT_PEEK_WAIT_MS)) return;
  if (term >= d->term && memcmp(&a, &d->addr, sizeof a) != 0) {
    hpl__crpc_free(d->rpc); /* the old leader's */
    d->rpc = NULL;
    d->addr = a;
    d->term = term;
    d->publish = publish;
    d->backoff_ms = 0;
    __atomic_store_n(&d->retry_ms, d->sealed ? UINT64_MAX : 0, __ATOMIC_RELAXED);
  }
  hpl__turn_give(&d->turn);
}

/* Connect to the directory unless connected (the turn held), and
 * authenticate as a reader when the cluster has a secret (cdial.h). 0 or
 * -1. A directory that seals its connections (--encrypt) is never read
 * directly: gets go through the store, whose own link to it is sealed. */
static int dir_connect(hpl__cdirect *d, uint64_t deadline) {
  if (d->rpc) return 0;
  hpl__cdial_as as = {.role = HPL__ROLE_READER, .name = d->name, .key = d->auth ? d->key : NULL};
  int rc = hpl__cdial(&d->addr, &as, &d->rpc_opts, deadline, &d->rpc, NULL, 0);
  if (rc == 0) return 0;
  d->rpc = NULL;
  if (rc == HPL_EUNAVAIL) d->sealed = 1; /* never again: through the store */
  if (rc != HPL_ENOMEM) direct_failed(d); /* no memory is no reason to wait */
  return -1;
}

/* What a PEEK reply `m` (taken) says: HPL__DIRECT_FOUND with *out set,
 * HPL__DIRECT_GRANTED, HPL__DIRECT_ASK_STORE (no inline bytes), or -1 if
 * it is no PEEK_REP (the caller drops the connection). The RPC layer has
 * checked the reply's request id and that its lengths are within the
 * limits (payload <= inline_max). */
static int peek_result(hpl__crpc_msg *m, hpl__cdirect_obj *out) {
  Hplpb__PeekRep *rep = m->type == HPL__MSG_PEEK_REP
                            ? (Hplpb__PeekRep *)hpl__crpc_msg_unpack(m, HPL__MSG_PEEK_REP)
                            : NULL;
  if (!rep) {
    hpl__crpc_msg_free(m);
    return -1;
  }
  int found = rep->status == 0 && rep->inline_ && rep->size == m->payload_len;
  /* inline bytes that fail their digest are not taken: the store fetches
   * them and reports what it finds (HPL_ECORRUPT) */
  found = found && hpl__digest_check_bytes((int)rep->digest_algo, rep->digests.data,
                                           rep->digests.len, m->buf + m->payload_off,
                                           m->payload_len);
  int granted = !rep->inline_ && rep->granted;
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  if (granted) {
    hpl__crpc_msg_free(m);
    return HPL__DIRECT_GRANTED;
  }
  /* the object's bytes stay in the reply's buffer when they start aligned
   * there as the pool's objects are (small replies, crpc.h); else they get
   * a buffer of their own: one copy of at most inline_max bytes */
  size_t size = (size_t)m->payload_len;
  uint8_t *at = m->buf + m->payload_off;
  if (found && (uintptr_t)at % DIRECT_ALIGN == 0) {
    out->own = m->buf; /* taken over: freed with the hpl_buf */
    out->data = at;
    out->size = size;
    return HPL__DIRECT_FOUND;
  }
  void *own = NULL;
  if (found && posix_memalign(&own, DIRECT_ALIGN, size ? size : 1) != 0) own = NULL;
  if (own) memcpy(own, at, size);
  hpl__crpc_msg_free(m);
  if (!own) return HPL__DIRECT_ASK_STORE;
  out->own = own;
  out->data = own;
  out->size = size;
  return HPL__DIRECT_FOUND;
}

/* PEEKs for ids[want[0..k)], pipelined on the connection (the turn held):
 * all are sent, then every reply is read into found[] and out[]. 0, or -1
 * if the connection failed (the caller drops it; what was found stays). */
static int peek_many(hpl__cdirect *d, const char *const *ids, const size_t *want, size_t k,
                     int64_t wait_ms, uint64_t deadline, hpl__cdirect_obj *out, int *found) {
  /* a few on the stack: most gets ask for one object */
  Hplpb__PeekReq msgs_s[DIRECT_FEW];
  hpl__crpc_req reqs_s[DIRECT_FEW];
  hpl__crpc_ticket *t_s[DIRECT_FEW];
  int few = k <= DIRECT_FEW;
  Hplpb__PeekReq *msgs = few ? msgs_s : malloc(k * sizeof *msgs);
  hpl__crpc_req *reqs = few ? reqs_s : malloc(k * sizeof *reqs);
  hpl__crpc_ticket **t = few ? t_s : malloc(k * sizeof *t);
  size_t started = 0;
  int rc = msgs && reqs && t ? 0 : 1; /* no memory: ask the store, keep the connection */
  if (rc == 0) {
    for (size_t j = 0; j < k; j++) {
      hplpb__peek_req__init(&msgs[j]);
      msgs[j].id = (char *)ids[want[j]];
      msgs[j].timeout_ms = wait_ms; /* the directory holds it until the object is there */
      msgs[j].node = d->node;
      reqs[j] = (hpl__crpc_req){.type = HPL__MSG_PEEK, .m = &msgs[j].base};
    }
    hpl__trace("peek.send", ids[want[0]]);
    if (hpl__crpc_start(d->rpc, reqs, k, deadline, t, &started) != 0) rc = -1;
  }
  for (size_t j = 0; j < started; j++) {
    hpl__crpc_msg m;
    int r = hpl__crpc_finish(d->rpc, t[j], deadline, &m) != 0 ? -1 : peek_result(&m, &out[want[j]]);
    hpl__trace("peek.got", ids[want[j]]);
    if (r > 0) found[want[j]] = r;
    if (r < 0) rc = -1; /* the remaining tickets still end here */
  }
  if (!few) {
    free(msgs);
    free(reqs);
    free(t);
  }
  return rc < 0 ? -1 : 0;
}

/* Whether the calling thread shares the store's network namespace: only
 * then does a connection it makes reach the directory the way the store
 * does (a client in another namespace might route the address somewhere
 * else entirely). Asked only before connecting: a socket keeps the
 * namespace it was made in, whichever thread uses it later, so a get over
 * an open connection pays no lookup in /proc. */
static int same_netns(const hpl__cdirect *d) {
  struct stat st;
  return d->netns && stat("/proc/thread-self/ns/net", &st) == 0 && (uint64_t)st.st_ino == d->netns;
}

/* With the turn held: 0 if the connection to the directory is up (made now
 * if need be), 1 if this exchange cannot use it (the path backs off, this
 * thread is in another network namespace, connecting failed): the store. */
static int exchange_ready(hpl__cdirect *d, uint64_t deadline) {
  if (hpl__now_ms() < d->retry_ms) return 1;
  if (!d->rpc && !same_netns(d)) return 1; /* this thread cannot connect */
  return dir_connect(d, deadline) == 0 ? 0 : 1;
}

/* An exchange (the turn held) is over: rc < 0 the connection failed (it
 * is dropped and the path backs off), 0 it went well (no more backoff),
 * > 0 nothing was tried. The turn is given back. */
static void exchange_done(hpl__cdirect *d, int rc) {
  if (rc < 0) {
    hpl__crpc_free(d->rpc);
    d->rpc = NULL;
    direct_failed(d);
  } else if (rc == 0) {
    d->backoff_ms = 0;
  }
  hpl__turn_give(&d->turn);
}

size_t hpl__cdirect_get_many(hpl__cdirect *d, const char *const *ids, size_t n, uint64_t deadline,
                             hpl__cdirect_obj *out, int *found) {
  memset(found, 0, n * sizeof *found);
  if (!d || n == 0) return 0;
  if (hpl__now_ms() < __atomic_load_n(&d->retry_ms, __ATOMIC_RELAXED)) return 0; /* backing off */
  /* only ids this node certainly does not hold (their filter slot is 0) */
  size_t want_s[DIRECT_FEW], k = 0;
  size_t *want = n <= DIRECT_FEW ? want_s : malloc(n * sizeof *want);
  for (size_t i = 0; want && i < n; i++)
    if (!__atomic_load_n(&d->filter[hpl__filter_slot(ids[i], d->filter_slots)], __ATOMIC_ACQUIRE))
      want[k++] = i;
  /* An object that is not there yet is waited for at the directory, which
   * then pushes a small object's bytes straight here: up to half of what
   * is left of the timeout, at most DIRECT_PEEK_WAIT_MS, so the store path
   * keeps time for what the directory does not hold inline. */
  int64_t left = hpl__ms_left(deadline), wait_ms = DIRECT_PEEK_WAIT_MS;
  if (left >= 0 && left / 2 < wait_ms) wait_ms = left / 2;
  uint64_t dl = hpl__deadline_ms(DIRECT_WAIT_MS + wait_ms);
  if (deadline < dl) dl = deadline;
  /* nothing to ask, another get waiting at the directory (the store then),
   * or another get at it for too long */
  uint64_t turn_dl = hpl__deadline_ms(DIRECT_WAIT_MS);
  if (deadline < turn_dl) turn_dl = deadline;
  if (k == 0 || __atomic_load_n(&d->waiting, __ATOMIC_ACQUIRE) ||
      hpl__turn_take(&d->turn, turn_dl) != 0) {
    if (want != want_s) free(want);
    return 0;
  }
  __atomic_store_n(&d->waiting, wait_ms > 0, __ATOMIC_RELEASE);
  int rc = exchange_ready(d, dl) ? 1 : peek_many(d, ids, want, k, wait_ms, dl, out, found);
  __atomic_store_n(&d->waiting, 0, __ATOMIC_RELEASE);
  exchange_done(d, rc);
  if (want != want_s) free(want);
  size_t got = 0;
  for (size_t i = 0; i < n; i++) got += found[i] == HPL__DIRECT_FOUND;
  return got;
}

int hpl__cdirect_call(hpl__cdirect *d, const char *id, unsigned type, const ProtobufCMessage *m,
                      uint64_t deadline, hpl__crpc_msg *out) {
  if (!d || hpl__now_ms() < __atomic_load_n(&d->retry_ms, __ATOMIC_RELAXED)) return -1;
  /* this node may hold it: its store's answer follows what the store told
   * the directory (a note of its own put may still be on the way) */
  if (__atomic_load_n(&d->filter[hpl__filter_slot(id, d->filter_slots)], __ATOMIC_ACQUIRE))
    return -1;
  uint64_t dl = hpl__deadline_ms(DIRECT_WAIT_MS);
  if (deadline < dl) dl = deadline;
  if (__atomic_load_n(&d->waiting, __ATOMIC_ACQUIRE) || hpl__turn_take(&d->turn, dl) != 0)
    return -1; /* a get waits at the directory, or another exchange takes long */
  int rc = exchange_ready(d, dl)                          ? 1
           : hpl__crpc_call(d->rpc, type, m, dl, out) == 0 ? 0
                                                           : -1;
  exchange_done(d, rc);
  return rc == 0 ? 0 : -1;
}

/* The PUBLISHes of the items hpl__cdirect_publish may send (the turn held,
 * connected); published[] becomes what went out. 0, or -1 if the
 * connection failed (the caller drops it). */
static int publish_send(hpl__cdirect *d, const char *const *ids, const void *const *data,
                        const uint64_t *sizes, size_t n, int *published) {
  Hplpb__InlinePutReq *msgs = malloc(n * sizeof *msgs);
  hpl__crpc_req *reqs = malloc(n * sizeof *reqs);
  size_t *item = malloc(n * sizeof *item), k = 0, sent = 0;
  int rc = 0;
  if (msgs && reqs && item) { /* else nothing is published: the store path */
    for (size_t i = 0; i < n; i++) {
      if (!published[i] || sizes[i] > d->inline_max) continue;
      hplpb__inline_put_req__init(&msgs[k]);
      msgs[k].id = (char *)ids[i];
      msgs[k].size = sizes[i];
      msgs[k].node = d->node;
      reqs[k] = (hpl__crpc_req){
          .type = HPL__MSG_PUBLISH, .m = &msgs[k].base, .payload = data[i], .plen = sizes[i]};
      item[k++] = i;
    }
    if (k) hpl__trace("publish", ids[item[0]]);
    int r = hpl__crpc_send_reqs(d->rpc, reqs, k, hpl__deadline_ms(DIRECT_WAIT_MS), &sent);
    if (r == HPL_ETIMEDOUT || r == HPL_ECONN) rc = -1; /* the connection is done for */
  }
  memset(published, 0, n * sizeof *published);
  for (size_t j = 0; j < sent; j++) published[item[j]] = 1;
  free(msgs);
  free(reqs);
  free(item);
  return rc;
}

size_t hpl__cdirect_publish(hpl__cdirect *d, const char *const *ids, const void *const *data,
                            const uint64_t *sizes, size_t n, int *published) {
  /* never waits for the turn: the store path is there */
  int took = d && d->publish && n &&
             hpl__now_ms() >= __atomic_load_n(&d->retry_ms, __ATOMIC_RELAXED) &&
             !__atomic_load_n(&d->waiting, __ATOMIC_ACQUIRE) && hpl__turn_take(&d->turn, 0) == 0;
  int rc = !took                                                  ? 1
           : exchange_ready(d, hpl__deadline_ms(DIRECT_WAIT_MS)) ? 1
           : publish_send(d, ids, data, sizes, n, published);
  if (took) exchange_done(d, rc);
  if (rc > 0 && n) memset(published, 0, n * sizeof *published);
  size_t got = 0;
  for (size_t i = 0; i < n; i++) got += published[i];
  return got;
}
