/*
 * store.h - hoplite-store: one per node, one event loop.
 *
 * Modules:
 *   store.c    object table and life cycle (create, seal, get, release,
 *              delete), waiters, progress notification, fetch orchestration
 *   clients.c  local clients over a Unix socket (memfd handed over once)
 *   dirlink.c  the connection to the directory: requests, heartbeats,
 *              reconnect with backoff and re-registration
 *   transfer.c the data port (serving pulls, also from partial copies) and
 *              pulls from peers
 */
#ifndef HPL_STORE_H
#define HPL_STORE_H

#include <stdint.h>
#include <uthash.h>
#include <uv.h>

#include "pool.h"
#include "uvconn.h"

/* Deterministic fault points for failure-injection tests (--faults or
 * $HOPLITE_FAULTS). All off unless set; each check is one predictable
 * branch on `enabled`. Byte counts apply to objects whose id starts with
 * `prefix` (all objects if empty). */
typedef struct store_faults {
  int enabled;
  char prefix[64];
  uint64_t to_node;     /* only streams to this receiver (0: any) */
  uint64_t crash_after; /* SIGKILL ourselves after sending this many bytes */
  uint64_t drop_after;  /* cut a stream after this many bytes (once) */
  uint64_t stall_after; /* stop sending a stream after this many bytes (once) */
  uint64_t slow_send;   /* pace every stream to this many bytes/s */
  uint64_t hb_pause_at_ms, hb_pause_ms; /* no heartbeats in [at, at+len) after start */
  /* state */
  uint64_t sent;
  int dropped, stalled;
} store_faults;

/* Parse "key=value,..." (see store_faults). 0 or -1 with a message. */
int store_faults_parse(store_faults *f, const char *spec, char *err, size_t errlen);

typedef struct store_config {
  char dir_host[256];
  int dir_port;
  char socket_path[108];
  uint64_t memory;           /* pool capacity */
  char data_host[64];        /* data port bind address */
  int data_port;             /* 0: any */
  char data_addr[64];        /* advertised address ("" = the one facing the directory) */
  char name[64];
  const char *ready_file;    /* written once registered: "<data_port>\n" */
  uint64_t chunk;            /* largest write of a data stream */
  int prefault;
  uint32_t stall_timeout_ms; /* pull with no bytes this long is abandoned (0: never) */
  double straggler_ratio;    /* a complete sender delivering below this fraction of */
  uint32_t straggler_ms;     /*   our usual rate for this long is replaced (0: off) */
  uint32_t grace_ms;         /* SIGTERM: time to finish serving before leaving */
  store_faults faults;
} store_config;

void store_config_defaults(store_config *c);

enum {
  OBJ_FETCHING = 1, /* asked the directory where to get it; no buffer yet */
  OBJ_CREATING = 2, /* a local client is writing it */
  OBJ_PULLING = 3,  /* streaming in from a peer */
  OBJ_SEALED = 4,   /* complete */
  OBJ_REDUCING = 5, /* the target of a reduce produced at this node */
};

struct store;
struct st_client;
typedef struct st_puller st_puller;

/* A local client's get waiting for an object to be complete. */
typedef struct st_waiter {
  struct st_waiter *next;   /* in the object's list */
  struct st_waiter *cnext;  /* in the client's list */
  struct st_obj *obj;
  struct st_client *cl;
  uint64_t req_id;
  uint64_t deadline_ms;     /* UINT64_MAX: none */
  uv_timer_t timer;
  int has_timer;
} st_waiter;

/* Someone who wants to hear when an object's progress or state changes
 * (a data-port sender streaming a partial copy, a parked pull request). */
typedef struct st_watch {
  struct st_watch *next;
  void (*fn)(struct st_watch *w);
} st_watch;

typedef struct st_obj {
  char *id;
  UT_hash_handle hh;      /* store->objs by id, while in_table */
  uint64_t inst;          /* instance handle, unique within this store */
  UT_hash_handle hh_inst; /* store->insts by inst */
  uint64_t size;
  uint8_t *data;          /* in the pool; NULL while FETCHING */
  int state;
  uint64_t progress;      /* bytes [0, progress) are final */
  int refs;               /* holds by clients + internal users */
  int in_table;
  int advertised;         /* the directory has a location for us */
  int inline_obj;         /* small object: the directory serves it */
  struct st_client *creator;
  st_waiter *waiters;
  st_watch *watchers;
  struct st_puller *puller;
  int fetch_active;       /* an ACQUIRE is outstanding */
  int soft_asking;        /* an only_complete ACQUIRE (crawling partial sender) is outstanding */
  uint64_t fetch_deadline_ms;
  uint64_t created_ms;
  int internal;           /* a reduce stream: in store->internal, not store->objs */
  uint32_t gen;           /* generation of the bytes (see AcquireRep.gen) */
  uint64_t pull_sender;   /* node the current pull reads from */
  void *reduce_req;       /* OBJ_REDUCING at the sink: the packed ReduceReq */
  size_t reduce_req_len;
} st_obj;

/* A held object: the client got it `count` times and has not released. */
typedef struct st_hold {
  uint64_t inst;
  int count;
  UT_hash_handle hh;
} st_hold;

/* A local client connection. Freed when closed and no directory request
 * made on its behalf is still pending (refs). */
typedef struct st_client {
  struct st_client *prev, *next;
  struct store *s;
  hpl__conn *c;
  uint64_t id;
  st_hold *holds;
  st_waiter *waiters;
  int refs;
  int closed;
} st_client;

typedef struct store_counters {
  uint64_t data_bytes_sent, data_bytes_received, pulls_served, pulls_made, pull_failures,
      inline_gets, inline_puts, local_gets, remote_gets, puts, deletes, bytes_resent,
      pull_resumes, bytes_kept_on_resume, stalls, stragglers, restarts;
} store_counters;

/* Directory request completion: status is the reply's status (or a local
 * error such as HPL_ETIMEDOUT / HPL_ECONN with m == NULL). */
typedef void (*dl_reply_cb)(struct store *s, int status, const hpl__frame_hdr *h,
                            ProtobufCMessage *m, const uint8_t *payload, uint64_t plen, void *arg);

typedef struct store {
  uv_loop_t *loop;
  store_config cfg;
  hpl__pool *pool;
  uint64_t node_id;
  st_obj *objs;  /* by id */
  st_obj *insts; /* by instance */
  st_obj *internal; /* reduce streams by key */
  struct rd_task *tasks; /* reduce.c */
  uint64_t next_inst;
  uint32_t inline_max;
  uint32_t max_senders;
  store_counters ctr;
  int stopping;
  int draining; /* SIGTERM: leaving once current streams are served */
  uv_timer_t grace;
  double rate_ewma; /* bytes/s of recent pulls from complete senders */
  double last_pull_rate; /* of the pull that just completed (0: not measured) */
  uint64_t start_ms;
  /* clients.c */
  uv_pipe_t client_listener;
  struct st_client *clients;
  /* transfer.c */
  uv_tcp_t data_listener;
  int data_port_bound;
  struct st_sender *senders;
  struct st_puller *pullers;
  /* dirlink.c */
  struct dirlink *dl;
  uv_signal_t sigint, sigterm;
  /* presence filter shared read-only with clients (store.c) */
  int filter_fd;
  uint8_t *filter;
  uint64_t netns; /* inode of this process's network namespace, 0 if unknown */
} store;

#define STORE_FILTER_SLOTS 65536

/* ---- store.c */
int store_start(store *s, uv_loop_t *loop, const store_config *cfg);
void store_stop(store *s);
/* Free everything once the loop has ended (after store_stop). */
void store_free(store *s);
st_obj *store_find(store *s, const char *id);
st_obj *store_find_inst(store *s, uint64_t inst);
/* New object in the table (refs = 0, in_table = 1). NULL on no memory. */
st_obj *store_obj_new(store *s, const char *id, int state);
/* A reduce stream (not visible to clients) of `size` bytes, buffer
 * allocated; NULL with a detail on failure. */
st_obj *store_obj_new_internal(store *s, const char *key, uint64_t size, char *detail,
                               size_t dlen);
st_obj *store_find_internal(store *s, const char *key);
/* Take it out of the table (deleted or failed); freed when refs drop to 0. */
void store_obj_detach(store *s, st_obj *o);
void store_obj_ref(st_obj *o);
void store_obj_unref(store *s, st_obj *o);
/* Allocate the object's buffer; HPL_ENOMEM with a detail in buf on failure. */
int store_obj_alloc(store *s, st_obj *o, uint64_t size, char *detail, size_t dlen);
/* Bytes [0, progress) are now final: wake watchers. */
void store_obj_progress(store *s, st_obj *o, uint64_t progress);
/* The object is complete and sealed: wake everyone. */
void store_obj_sealed(store *s, st_obj *o);
/* Fail every waiter of `o` with `status` (the object will not arrive). */
void store_obj_fail(store *s, st_obj *o, int status, const char *detail);
void store_watch(st_obj *o, st_watch *w);
void store_unwatch(st_obj *o, st_watch *w);
/* A client get: hold and reply at once, wait, or start a fetch. */
void store_get(store *s, struct st_client *cl, uint64_t req_id, const char *id,
               int64_t timeout_ms);
/* The directory says: drop your copy of id. */
void store_drop(store *s, const char *id);
/* The directory says: the node we pull `id` from is gone. */
void store_upstream_gone(store *s, const char *id, uint64_t peer);
/* SIGTERM: stop taking work, finish serving streams (grace period), leave. */
void store_drain(store *s);
/* Draining: a stream finished; leave if it was the last. */
void store_drain_check(store *s);
/* Active data-port streams. */
int transfer_active_senders(store *s);
/* (Re)start a fetch of `o` through the directory; `failed_peer` names a
 * sender whose stream just failed. */
void store_fetch(store *s, st_obj *o, uint64_t failed_peer);
/* Fill *r (overwritten) with an ACQUIRE for o: its id, progress and
 * generation; r->id points into o. */
void store_acquire_req(st_obj *o, uint64_t failed_peer, int64_t timeout_ms, Hplpb__AcquireReq *r);
/* The pull of `o` finished (status 0) or failed. */
void store_pull_done(store *s, st_obj *o, int status, uint64_t sender, const char *detail);

/* ---- clients.c */
int clients_start(store *s);
void clients_stop(store *s);
/* Send a GET reply holding `o` for the client (takes a ref for it). */
void clients_reply_get(store *s, struct st_client *cl, uint64_t req_id, st_obj *o);
void clients_reply_get_err(struct st_client *cl, uint64_t req_id, int status, const char *detail);
/* Waiter bookkeeping shared with store.c */
void clients_waiter_unlink(st_waiter *w);

/* ---- dirlink.c */
int dirlink_start(store *s);
void dirlink_stop(store *s);
/* After the loop has ended. */
void dirlink_free(store *s);
int dirlink_ready(store *s);
/* Send a request to the directory; cb runs exactly once (reply, timeout
 * after timeout_ms < 0: none, or connection loss if not retried). Requests
 * made while disconnected are queued and sent after re-registration.
 * payload (if any) is copied. Returns 0 or HPL_ENOMEM (cb not called). */
int dirlink_request(store *s, unsigned type, const ProtobufCMessage *m, const void *payload,
                    uint64_t plen, int64_t timeout_ms, dl_reply_cb cb, void *arg);
/* One-way note; dropped while disconnected (re-registration resyncs). */
void dirlink_note(store *s, unsigned type, const ProtobufCMessage *m);
/* Note that this node no longer holds (or pulls) `id`: a LOC_NOTE REMOVE. */
void dirlink_loc_remove(store *s, const char *id);
/* The directory's numeric address and port as this store's link reaches
 * it. Returns 0, or -1 while not registered. */
int dirlink_peer(store *s, char *addr, size_t alen, int *port);

/* ---- transfer.c */
int transfer_start(store *s);
void transfer_stop(store *s);
int transfer_port(store *s);
/* A byte stream pulled from a peer's data port (an object or a reduce
 * stream). buf() says where stream bytes from `off` (counted from the
 * requested offset) go, with room in *len (0: pause; call
 * transfer_stream_paused and later transfer_stream_resume); got() reports
 * bytes written there; done() runs once when the stream completed (status
 * 0) or failed, never after transfer_stream_cancel(). */
typedef struct xfer_ops {
  uint8_t *(*buf)(void *arg, uint64_t off, size_t *len);
  void (*got)(void *arg, uint64_t off, size_t n);
  void (*done)(void *arg, int status, const char *detail);
  int monitor;  /* 1: stall detection; 2: also straggler detection (the
                   sender's copy is complete, so it could go full speed) */
  /* monitor 1: the stream crawls (below the straggler ratio for
   * straggler_ms) although the sender's copy is partial, so it may only be
   * waiting for its own upstream; called at most once per straggler_ms, the
   * stream goes on (may be NULL) */
  void (*slow)(void *arg);
  uint32_t gen; /* generation the receiver's bytes belong to */
} xfer_ops;

/* Start pulling `key` (an object id, or with internal a reduce stream key)
 * from addr:port, bytes [offset, size). NULL if it cannot start (done()
 * is not called then). */
st_puller *transfer_stream(store *s, const char *addr, int port, const char *key, int internal,
                           uint64_t offset, uint64_t size, const xfer_ops *ops, void *arg);
void transfer_stream_cancel(st_puller *p);
void transfer_stream_paused(st_puller *p);
void transfer_stream_resume(st_puller *p);

/* Pull `o` (buffer allocated, progress = bytes held) from a peer. */
void transfer_pull(store *s, st_obj *o, uint64_t sender, const char *addr, int port,
                   int sender_complete);
/* Abandon the pull of `o` (object dropped). */
void transfer_cancel(store *s, st_obj *o);
/* A reduce stream appeared: serve pulls that were waiting for it. */
void transfer_internal_ready(store *s, const char *key);
/* Pulls waiting for streams of a reduce that ended get an error. */
void transfer_internal_fail(store *s, const char *target);

/* ---- reduce.c */
/* A client asked for a reduce (or allreduce) into `target` at this node. */
void reduce_client_request(store *s, struct st_client *cl, uint64_t req, Hplpb__ReduceReq *m);
/* Directory messages. */
void reduce_on_task(store *s, Hplpb__ReduceTask *m);
void reduce_on_sink(store *s, Hplpb__ReduceSink *m);
void reduce_on_end(store *s, Hplpb__ReduceEnd *m);
/* Key of a reduce stream. */
void reduce_stream_key(char *out, size_t len, const char *target, uint64_t rid, uint32_t slot,
                       uint32_t gen);
/* The directory restarted: its reduces are gone. Drop our tasks and ask
 * again for the reduces whose target we produce. */
void reduce_directory_restarted(store *s);
/* Restart an object's bytes from 0 under a new generation: streams of the
 * old bytes to other nodes are cut. */
void store_obj_restart(store *s, st_obj *o, uint32_t gen);
/* Cut every stream of `o` to peers (its bytes are void). */
void transfer_cut_senders(store *s, st_obj *o);

#endif
