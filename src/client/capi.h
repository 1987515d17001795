/*
 * capi.h - what the client library's API files share, internal to
 * libhoplite: a handle and the buffers it hands out (client.c), the
 * per-thread error detail (client.c), and requests to the store, one or a
 * pipelined batch (ccall.c), what an admin handle may do (cadmin.c).
 * Callers: client.c, ccall.c, cput.c, cget.c, cobjects.c, creduce.c,
 * ctext.c, cadmin.c, casync.c, casync_ops.c.
 */
#ifndef HPL_CAPI_H
#define HPL_CAPI_H

#include <pthread.h>
#include <stdint.h>

#include "cdirect.h"
#include "crpc.h"
#include "cstore.h"
#include "hoplite.h"
#include "proto.h"
#include "util.h"

/* Memory of this process a creation is written in: a memfd of the
 * library's (sealed against shrinking and growing), mapped read-write at
 * mem, which the store maps read-only and copies from (putcopy.h in the
 * store); fd -1: a private anonymous mapping (no memfd could be made),
 * which the store reads with process_vm_readv. len 0: none. */
typedef struct hpl__cstage {
  uint8_t *mem;
  uint64_t len;
  int fd;
} hpl__cstage;

/* A buffer handed out (hpl_buf in hoplite.h). */
struct hpl_buf {
  hpl_client *c;
  struct hpl_buf *prev, *next; /* the handle's buffers (utlist DL) */
  uint8_t *data;
  uint64_t size;
  uint64_t handle;
  int created; /* from hpl_create, not yet sealed */
  hpl__cstage stage; /* created: data is stage.mem, the library's own memory (given
                       * back when the buffer goes), from which the store copies the
                       * object (stage.len 0: the caller's memory, hpl_put) */
  uint8_t *own; /* NULL, or the library's own allocation that data points
                 * into (a small object read from the directory) */
  char id[HPL_ID_MAX + 1];
};

/* A handle (hpl_client in hoplite.h). */
struct hpl_client {
  hpl__cstore st;       /* the store connection, its pool and filter */
  hpl__cdirect *direct; /* NULL: every get goes to the store */
  int admin; /* an admin handle (hpl_connect_admin): st.rpc is a connection to the
                directory, nothing else of st is set (cadmin.c) */
  pthread_mutex_t lock; /* bufs, owned, ttl_ms */
  hpl_buf *bufs;
  int owned;       /* the lifetime of what the handle puts (hpl_set_lifetime) */
  uint64_t ttl_ms;
  /* the last sealed or aborted creation's buffer, kept for the next one so
   * its pages need not be faulted in again: PROT_NONE meanwhile (a write
   * through an old pointer faults); NULL: none (guarded by lock) */
  hpl__cstage spare;
  struct hpl__casync *async; /* NULL until an hpl_async_* call (casync.c; set under lock) */
};

/* ------------------------------------------------------------ async state (casync.c) */

/* Free c's async state (its descriptors and requests; the tickets go with
 * the connection, the buffers of completions not taken with c's list).
 * From hpl_close only, before the connection closes. */
void hpl__casync_free(hpl_client *c);

/* ------------------------------------------------------------ shared by calls */

/* The lifetime a put made now asks for (hpl_set_lifetime; cput.c). */
void hpl__clifetime(hpl_client *c, int *owned, uint64_t *ttl_ms);

/* The buffer of a GET_REP `g` (read only) for object `id`: its chunks
 * mapped, listed on c (cget.c). 0 with *out set (owned by the caller), or
 * the failure with its detail, the store's hold released. */
int hpl__cget_buf(hpl_client *c, const char *id, const Hplpb__GetRep *g, hpl_buf **out);

/* The client's checks of a reduce's arguments (creduce.c): 0, or
 * HPL_EINVAL with the detail set. */
int hpl__creduce_check(hpl_client *c, const char *target, const char *const *sources,
                       size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                       uint64_t offset, uint64_t length);

/* ------------------------------------------------------------ errors (client.c) */

/* Size of a detail, its NUL included. */
#define HPL__CERR_MAX 512

/* Set the calling thread's detail for handle c (hpl_errdetail) from fmt
 * and return code. c NULL: the detail of a connect that made no handle
 * (hpl_errdetail(NULL)). */
int hpl__cfail(const hpl_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The calling thread's last detail (set by hpl__cfail), whatever handle it
 * was for; valid until the thread's next hpl__cfail. */
const char *hpl__cfail_msg(void);

/* Return HPL_EINVAL from the calling function when c is NULL or id is not
 * a valid object id (with the detail set). */
#define HPL__CHECK_ID(c, id)                                                              \
  do {                                                                               \
    if (!(c)) return HPL_EINVAL;                                                     \
    if (!hpl__id_valid(id))                                                           \
      return hpl__cfail((c), HPL_EINVAL, "invalid object id (1-%d bytes, no control characters)", \
                  HPL_ID_MAX);                                                       \
  } while (0)

/* ------------------------------------------------------------ admin handles (cadmin.c) */

/* Fail call `call` on admin handle c with HPL_ESTATE and a detail saying
 * what an admin handle does. */
int hpl__cadmin_refuse(hpl_client *c, const char *call);

/* 1 if a request of `type` may go out on c: any on a store handle; on an
 * admin handle only those the directory answers for it (STAT, DELETE,
 * LIST, STATUS, COUNTERS, TRANSFERS, REDUCE_INFO). */
int hpl__cadmin_allows(const hpl_client *c, unsigned type);

/* Return HPL_ESTATE from the calling function (a call of hoplite.h) when c
 * is an admin handle, before anything else is done. */
#define HPL__NOT_ADMIN(c)                                                   \
  do {                                                                      \
    if ((c) && (c)->admin) return hpl__cadmin_refuse((c), __func__);        \
  } while (0)

/* ------------------------------------------------------------ buffers (client.c) */

/* A buffer over pool[off .. off+size) (checked against the pool) for
 * object `id`, listed on c: NULL if outside the pool or memory is short. */
hpl_buf *hpl__cbuf_new(hpl_client *c, const char *id, uint64_t off, uint64_t size,
                       uint64_t handle, int created);

/* Creations of at least this many bytes name their memfd to the store,
 * which copies them with memcpy; smaller ones it copies with
 * process_vm_readv, which costs less than taking the descriptor (about
 * 6 us) below this size, and they are written in a private mapping when
 * no spare memfd is there (no memfd made for them). */
#define HPL__CREATE_MEMFD_MIN (256u << 10)

/* Memory of this process for a creation of `size` bytes (size > 0): the
 * spare made writable again if it is large enough, else a new memfd
 * mapped (a private mapping if memfd_create fails, or for a creation of
 * less than HPL__CREATE_MEMFD_MIN). *out owns it (given
 * back with hpl__cstage_give). 0, or -1 if mmap fails. Thread-safe. */
int hpl__cstage_take(hpl_client *c, uint64_t size, hpl__cstage *out);

/* Give back a creation's memory (from hpl__cstage_take): it becomes the
 * spare (PROT_NONE) if it is larger than the one kept, else it is
 * unmapped and its memfd closed. Thread-safe. */
void hpl__cstage_give(hpl_client *c, hpl__cstage st);

/* Unmap a creation's memory and close its memfd, never to be reused: what
 * hpl_seal does when its SEAL timed out, since the store may still be
 * copying from it (its own mapping keeps the memfd's pages). */
void hpl__cstage_drop(hpl__cstage st);

/* A buffer for object `id` being created with store handle `handle`, whose
 * bytes are at data in this process (the store copies them from there):
 * st->len > 0 says data is st->mem, which the buffer then owns (from
 * hpl__cstage_take, given back by hpl__cbuf_free). NULL
 * if memory is short. */
hpl_buf *hpl__cbuf_created(hpl_client *c, const char *id, uint8_t *data, uint64_t size,
                           uint64_t handle, const hpl__cstage *st);

/* List b (allocated and filled by the caller, zeroed where unused) on c as
 * object `id`'s buffer. Returns b. */
hpl_buf *hpl__cbuf_link(hpl_client *c, hpl_buf *b, const char *id);

/* Take b off c's list and free it (and the bytes it owns). Tells the store
 * nothing. */
void hpl__cbuf_free(hpl_client *c, hpl_buf *b);

/* ------------------------------------------------------------ requests (ccall.c) */

/* One request to the store and its reply. On success *out (if out is not
 * NULL) is the unpacked reply of the request's reply type, owned by the
 * caller; on failure the code, with the detail set. timeout_ms is the
 * store-side timeout (< 0: none); the client waits a little longer for the
 * store's own answer. */
int hpl__ccall(hpl_client *c, unsigned type, const ProtobufCMessage *m, int64_t timeout_ms,
               ProtobufCMessage **out);

/* Before a call that may go straight to the directory (get, stat,
 * publish): if a direct exchange has failed since the last call and there
 * are standby directories (cdirect.h: hpl__cdirect_lost), ask the store
 * where the leader is now (DIR_WHERE, one short call per failure) and move
 * the direct path there. A store without a leader answers with no
 * address; nothing changes then. Never fails the caller. */
void hpl__cfollow_directory(hpl_client *c);

/* The same with a payload of plen bytes (NULL, 0: none), only read during
 * the call. */
int hpl__ccall_with(hpl_client *c, unsigned type, const ProtobufCMessage *m, const void *payload,
                    uint64_t plen, int64_t timeout_ms, ProtobufCMessage **out);

/* What the reply frame `rep` (taken: freed here) to a request of `type`
 * says, as hpl__ccall reports it: 0 and, when out is not NULL, the
 * unpacked reply of type's reply type (owned by the caller); else the
 * status the reply carries (or HPL_EPROTO), with the detail set. For
 * replies that came another way than the store (cdirect.h). */
int hpl__creply(hpl_client *c, unsigned type, hpl__crpc_msg *rep, ProtobufCMessage **out);

/* The same for a request that names one object (IdReq). */
int hpl__cid_call(hpl_client *c, unsigned type, const char *id, int64_t timeout_ms,
                  ProtobufCMessage **out);

/* A one-way note to the store about a handle it gave out (PROGRESS,
 * RELEASE): 0, or the RPC layer's failure with the detail set. */
int hpl__cnote(hpl_client *c, unsigned type, const ProtobufCMessage *m);

/* Tell the store that the handle it gave out for a get is released. */
void hpl__crelease(hpl_client *c, uint64_t handle);

/* A batch of requests, each about one of n items (ids[i], outcome rcs[i]),
 * and its first failure by item order, with that failure's detail (the
 * per-thread detail is overwritten by every later failure). */
typedef struct hpl__cbatch {
  size_t n;
  const char *const *ids; /* NULL: a single call, whose detail needs no name */
  int *rcs;
  size_t first; /* n while nothing failed */
  char why[HPL__CERR_MAX];
} hpl__cbatch;

/* One request of a batch to the store: which item it is about, the request
 * (its message in m), and the reply once it succeeded. */
typedef struct hpl__cslot {
  size_t item;
  hpl__crpc_req req;
  union {
    Hplpb__IdReq id;
    Hplpb__GetReq get;
    Hplpb__PutReq put;
    Hplpb__CreateReq create;
    Hplpb__HandleReq handle;
  } m;
  int granted;           /* get: the directory granted the object to the store */
  ProtobufCMessage *out; /* the unpacked reply, unless it is a plain Reply */
  hpl_buf *buf;          /* hpl_put_many: the region being filled */
} hpl__cslot;

/* Set up b for n items (ids may be NULL for a single call). */
void hpl__cbatch_init(hpl__cbatch *b, const char *const *ids, size_t n, int *rcs);

/* Item i's outcome; a failure's detail must have just been set (hpl__cfail()). */
void hpl__cbatch_set(hpl__cbatch *b, size_t i, int rc);

/* 0, or the first failure with its detail, naming the item. */
int hpl__cbatch_end(hpl_client *c, hpl__cbatch *b);

/* Check a batch call's arguments (`other`: the call's other array, which
 * must not be NULL either) and set up its outcome: 0, or HPL_EINVAL
 * (nothing is sent, rcs is not written). */
int hpl__cbatch_open(hpl_client *c, hpl__cbatch *b, const char *const *ids, size_t n, int *rcs,
                     const void *other);

/* A slot for each item whose id is valid (the others fail with
 * HPL_EINVAL), in item order; *k gets their number. NULL (with every item
 * failed) if memory is short, or when n is 0. Free with hpl__cslots_free. */
hpl__cslot *hpl__cbatch_slots(hpl_client *c, hpl__cbatch *b, size_t *k);

/* Free slots s[0..k) and the replies they still hold. */
void hpl__cslots_free(hpl__cslot *s, size_t k);

/* The requests of slots s[0..n) to the store, pipelined: all are sent
 * before any reply is awaited, then every reply is read into b's outcome
 * of the slot's item and, on success, s[j].out (the unpacked reply unless
 * the reply type is a plain Reply; owned by the slot). timeout_ms is the
 * store-side timeout (< 0: none); the client waits a little longer for the
 * store's own answers. */
void hpl__ccalls(hpl_client *c, hpl__cslot *s, size_t n, int64_t timeout_ms, hpl__cbatch *b);

/* STATs or DELETEs (`type`) of the batch's valid ids, pipelined; the
 * slots (with the replies) are returned for the caller to read and free
 * (hpl__cslots_free of *k). */
hpl__cslot *hpl__cid_calls(hpl_client *c, hpl__cbatch *b, unsigned type, int64_t timeout_ms,
                           size_t *k);

#endif
