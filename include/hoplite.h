/*
 * hoplite.h - client library of the hoplite distributed object store.
 *
 * A task puts immutable objects into the store on its node and gets them on
 * any node. Objects live in the store's shared-memory pool: a get returns a
 * read-only view straight over that memory (zero-copy; the kernel refuses
 * any write into it: a write faults), a create hands out a writable buffer
 * of the caller's own that the store copies into the pool as it is written
 * and sealed; once sealed, nothing but the store can change the object.
 *
 * Conventions for every function in this header
 *  - Return value: 0 (HPL_OK) on success, a negative HPL_E* code on failure.
 *    hpl_strerror() names the code; hpl_errdetail() gives the detail of the
 *    last failure on a handle seen by the calling thread.
 *  - Object ids are NUL-terminated strings of 1..HPL_ID_MAX bytes with no
 *    control characters (bytes 0x01-0x1f and 0x7f). Anything else is
 *    HPL_EINVAL.
 *  - timeout_ms: how long a call may block. A negative value waits without
 *    limit, 0 fails at once with HPL_ETIMEDOUT if the answer is not
 *    immediately available. Timeouts cover the whole call, including waits
 *    for an object that does not exist yet.
 *  - Out-parameters are written only on success.
 *  - A handle (hpl_client) may be used from several threads at once. Buffers
 *    (hpl_buf) belong to the handle that returned them and must not be used
 *    after that handle is closed.
 *  - The library never prints and never calls exit().
 */
#ifndef HOPLITE_H
#define HOPLITE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HPL_API __attribute__((visibility("default")))
#else
#define HPL_API
#endif

#define HPL_VERSION_MAJOR 0
#define HPL_VERSION_MINOR 1

/* Longest object id in bytes, not counting the terminating NUL. */
#define HPL_ID_MAX 255

/* Environment variable naming the store socket when hpl_connect() gets NULL. */
#define HPL_SOCKET_ENV "HOPLITE_SOCKET"

/* Error codes: X(name, value, message). One list for the library, the
 * servers and the wire protocol. */
#define HPL_ERRNO_MAP(X)                                                       \
  X(OK, 0, "success")                                                          \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory: the store's shared-memory pool is full")       \
  X(ETIMEDOUT, -3, "timed out")                                                \
  X(ENOTFOUND, -4, "no such object")                                           \
  X(EEXIST, -5, "object already exists")                                       \
  X(ELOST, -6, "object lost: every copy is gone")                              \
  X(ECONN, -7, "connection to the store failed or was closed")                 \
  X(EPROTO, -8, "protocol error")                                              \
  X(ESYS, -9, "system call failed")                                            \
  X(ETOOBIG, -10, "too large")                                                 \
  X(EMISMATCH, -11, "objects do not match in size or type")                    \
  X(ECANCELED, -12, "operation canceled")                                      \
  X(EUNAVAIL, -13, "service unavailable")                                      \
  X(ESTATE, -14, "object is not in a state that allows this")                 \
  X(EAUTH, -15, "authentication failed: wrong or missing cluster secret")      \
  X(ECORRUPT, -16, "corrupt: no copy with the right bytes")                   \
  X(ETOOMANY, -17, "too many clients: the store's limit for this user or in all is reached") \
  X(EPERM, -18, "not allowed: only the node that made the object (or an admin) may") \
  X(EAGAIN, -19, "too many requests in flight on this handle: take completions first")

typedef enum hpl_errno {
#define HPL_ERR_ENUM_(name, value, msg) HPL_##name = (value),
  HPL_ERRNO_MAP(HPL_ERR_ENUM_)
#undef HPL_ERR_ENUM_
} hpl_errno;

/* Static message for an error code ("unknown error" for unknown codes). */
HPL_API const char *hpl_strerror(int err);
/* Static symbolic name for an error code, e.g. "HPL_ETIMEDOUT". */
HPL_API const char *hpl_errname(int err);

/* Reduction operators and element types (used from the reduce issue on). */
typedef enum hpl_op { HPL_OP_SUM = 0, HPL_OP_MIN = 1, HPL_OP_MAX = 2, HPL_OP_PROD = 3 } hpl_op;

typedef enum hpl_dtype {
  HPL_DT_U8 = 0,
  HPL_DT_I32 = 1,
  HPL_DT_I64 = 2,
  HPL_DT_F32 = 3,
  HPL_DT_F64 = 4,
  HPL_DT_U32 = 5,
  HPL_DT_U64 = 6,
  HPL_DT_I8 = 7,
} hpl_dtype;

/* Size in bytes of one element of a dtype, 0 for an unknown dtype. */
HPL_API size_t hpl_dtype_size(int dtype);

typedef struct hpl_client hpl_client; /* a connection to the local store */
typedef struct hpl_buf hpl_buf;       /* a held object (or one being created) */

/* ------------------------------------------------------------------------
 * Handles
 * ---------------------------------------------------------------------- */

/* Connect to the store listening on the Unix socket `socket_path` (NULL:
 * $HOPLITE_SOCKET) and map its shared-memory pool.
 * On success *out is a new handle owned by the caller (free with hpl_close).
 * Errors: HPL_EINVAL (no path), HPL_ECONN (cannot connect), HPL_ETIMEDOUT,
 * HPL_EPROTO (peer is not a hoplite store), HPL_ESYS (mmap failed),
 * HPL_ETOOMANY (the store has as many clients of this user as
 * --max-clients-per-uid allows, or as many in all as --max-connections),
 * HPL_EAUTH (the store does not take clients of this user or group).
 * There is no handle on failure, so no detail: the reason is in the code. */
HPL_API int hpl_connect(const char *socket_path, int64_t timeout_ms, hpl_client **out);

/* Environment variables hpl_connect_admin() reads when given NULL: the
 * directory's address ("HOST:PORT") and the cluster secret's file. */
#define HPL_DIRECTORY_ENV "HOPLITE_DIRECTORY"
#define HPL_AUTH_FILE_ENV "HOPLITE_AUTH_FILE"

/* An admin handle: a TCP connection straight to the directory at
 * `directory` ("HOST:PORT", "[V6]:PORT"; NULL: $HOPLITE_DIRECTORY) as the
 * ADMIN role, proven with the cluster secret in the file `secret_path`
 * (NULL: $HOPLITE_AUTH_FILE; the file `hoplite secret FILE` wrote, mode
 * 0600, not a node credential). The directory lets an admin delete any
 * object, whichever node made it. No store is involved: nothing is mapped.
 * timeout_ms bounds connecting and the handshake.
 * On such a handle only these work, each answered by the directory:
 * hpl_delete, hpl_delete_many, hpl_stat, hpl_stat_many, hpl_list,
 * hpl_list_page, hpl_status, hpl_transfers, hpl_reduce_sources, and
 * hpl_counters / hpl_counter (the directory's counters, not a store's).
 * Every other call fails at once with HPL_ESTATE ("an admin handle only
 * deletes, stats and lists"); hpl_release and hpl_abort do nothing.
 * On success *out is a new handle owned by the caller (free with
 * hpl_close). Errors (hpl_errdetail(NULL) then gives the detail, as
 * there is no handle):
 *   HPL_EINVAL    no secret file given (nor $HOPLITE_AUTH_FILE), a file
 *                 that is no secret (or a node's credential, or readable
 *                 by others), no directory given, an address that is not
 *                 HOST:PORT or does not resolve;
 *   HPL_ESYS      the secret file cannot be read;
 *   HPL_ECONN     cannot connect, or the peer closed during the handshake
 *                 (no directory there, or one without a cluster secret);
 *   HPL_ETIMEDOUT the directory did not answer within timeout_ms;
 *   HPL_EAUTH     the directory holds another cluster secret;
 *   HPL_EUNAVAIL  the directory seals its connections (--encrypt), which
 *                 this handle cannot do;
 *   HPL_ENOMEM. */
HPL_API int hpl_connect_admin(const char *directory, const char *secret_path, int64_t timeout_ms,
                              hpl_client **out);

/* Close a handle. Buffers not yet released are released; their memory is
 * unmapped, so pointers into them become invalid. NULL is a no-op. Must not
 * race with other calls on the same handle. */
HPL_API void hpl_close(hpl_client *c);

/* Detail of the last failed call on `c` made by the calling thread, or ""
 * if there is none; c NULL: the detail of the thread's last failed
 * hpl_connect_admin ("" if a call on a handle failed since). The string
 * belongs to the library and stays valid until the thread's next call on
 * any handle. */
HPL_API const char *hpl_errdetail(const hpl_client *c);

/* ------------------------------------------------------------------------
 * Objects
 * ---------------------------------------------------------------------- */

/* Longest TTL a put may ask for: 30 days, in milliseconds. */
#define HPL_TTL_MAX_MS (30ll * 24 * 3600 * 1000)

/* The lifetime of the objects this handle puts from now on (hpl_put,
 * hpl_create, hpl_put_many; the setting at the time of the put or create
 * counts, not the one at the seal). New handles: not owned, no TTL.
 *  - owned != 0: each object is deleted in the whole cluster (every copy,
 *    as hpl_delete) when this handle's connection to the store closes:
 *    hpl_close(), or the process dies. For task runtimes that track
 *    lineage themselves.
 *  - ttl_ms > 0: each object is deleted in the whole cluster ttl_ms after
 *    it was sealed; 0: no TTL. Both may be set; the first to come counts.
 * The store that sealed the object does the deleting, as soon as it can
 * (if the directory is unreachable, once it is back). Afterwards the object
 * is as if never put: hpl_stat gives HPL_ENOTFOUND, a get waits for a new
 * put like any get of an id that does not exist (HPL_ETIMEDOUT at its
 * timeout), the id may be used again. Copies held by clients stay readable
 * until released, as with hpl_delete. If that store stops or dies first,
 * nothing is deleted: its copies are gone with it, copies elsewhere stay
 * until deleted.
 * Errors: HPL_EINVAL (c NULL, ttl_ms < 0). A TTL above HPL_TTL_MAX_MS is
 * refused by the store: each put then fails with HPL_EINVAL. Does not
 * block and does not talk to the store. */
HPL_API int hpl_set_lifetime(hpl_client *c, int owned, int64_t ttl_ms);

/* Copy `size` bytes from `data` into a new sealed object `id` (size 0 is
 * allowed; data may then be NULL). The caller keeps ownership of `data`;
 * the store copies a large object straight from it (so it must be readable
 * by the store: this process, dumpable) before this call returns.
 * An object of at most the directory's inline limit (64 KiB by default)
 * goes to the store in one request with its bytes; unless it has a
 * lifetime (hpl_set_lifetime) the library also publishes those bytes to
 * the directory just before, so gets already waiting for the id may have
 * them before this call returns.
 * Errors: HPL_EINVAL, HPL_EEXIST (id already in use in the cluster),
 * HPL_ENOMEM (pool full), HPL_ETIMEDOUT, HPL_ECONN. On failure no object
 * exists afterwards (a published small object is taken back; gets that
 * ran meanwhile may have read its bytes). */
HPL_API int hpl_put(hpl_client *c, const char *id, const void *data, uint64_t size,
                    int64_t timeout_ms);

/* Reserve room for a new object `id` of `size` bytes and hand out a
 * writable buffer of this process's own to fill and then seal: the store
 * copies from it what hpl_buf_progress() says is final, and the rest at
 * hpl_seal(), which then unmaps it (a write through the old pointer
 * faults). On success *out is owned by the caller until it is passed to
 * hpl_seal() or hpl_abort(). Until sealed the object is visible to nobody
 * but the directory (which may already let peers pull the bytes written so
 * far, see hpl_buf_progress()).
 * Errors: as hpl_put(). */
HPL_API int hpl_create(hpl_client *c, const char *id, uint64_t size, int64_t timeout_ms,
                       hpl_buf **out);

/* Tell the store that the first `bytes` bytes of a created object are final
 * (it copies them in; they must not change after this call), so receivers
 * pulling it can forward them before the seal. Optional; bytes
 * must not decrease. Does not block. Errors: HPL_EINVAL, HPL_ECONN. */
HPL_API int hpl_buf_progress(hpl_client *c, hpl_buf *b, uint64_t bytes);

/* Seal a created object: it becomes immutable and visible everywhere.
 * Takes ownership of `b` on every return (it is freed either way).
 * Errors: HPL_EINVAL (also: the store could not read the buffer, see the
 * detail), HPL_ETIMEDOUT, HPL_ECONN, HPL_ESTATE (already deleted).
 * A timeout leaves the outcome unknown; hpl_stat() tells. */
HPL_API int hpl_seal(hpl_client *c, hpl_buf *b, int64_t timeout_ms);

/* Discard a created, unsealed object. Takes ownership of `b`. Never fails
 * from the caller's point of view; the store frees the region. Returns once
 * the cluster has forgotten the object (at most ~7 s if the store does not
 * answer), so a later get waits for a new put. */
HPL_API void hpl_abort(hpl_client *c, hpl_buf *b);

/* Get object `id`, waiting up to timeout_ms for it to exist and arrive. The
 * view is read-only shared memory (a write into it faults: SIGSEGV), valid
 * until hpl_release(); the object
 * cannot be freed while held, even if deleted. A small (inline) object that
 * this node holds no copy of is read straight from the directory into
 * memory of the library's own (still valid until hpl_release) when the
 * calling thread is in the store's network namespace and the directory
 * answers there; set HPL_DIRECT_GETS=0 in the
 * environment before hpl_connect() to always go through the store.
 * On success *out is owned by the caller (release with hpl_release).
 * Errors: HPL_EINVAL, HPL_ETIMEDOUT (object did not appear or arrive in time),
 * HPL_ELOST (every copy is gone), HPL_ENOMEM (no room in this node's pool),
 * HPL_EMISMATCH (a reduce that was to produce it failed; HPL_EINVAL if its
 * range went beyond its sources, see hpl_reduce_range; HPL_ECORRUPT if a
 * node kept sending it corrupt units: the detail then reads "reduce '<id>'
 * failed: ..." naming the node), HPL_ECORRUPT (no copy with the right bytes
 * is left), HPL_ECONN. A get waiting for, or pulling, the target of a reduce
 * that fails ends at once with that reduce's error. */
HPL_API int hpl_get(hpl_client *c, const char *id, int64_t timeout_ms, hpl_buf **out);

/* Release a buffer from hpl_get(). Takes ownership of `b`. NULL is a no-op. */
HPL_API void hpl_release(hpl_client *c, hpl_buf *b);

/* Accessors; `b` must be a live buffer. hpl_buf_data() of a created buffer is
 * writable; of a got buffer it must be treated as read-only. It is aligned to
 * 64 bytes, so arrays of any element type can be used in place. For size 0
 * the data pointer is a valid non-NULL address that must not be
 * dereferenced. */
HPL_API void *hpl_buf_data(const hpl_buf *b);
HPL_API uint64_t hpl_buf_size(const hpl_buf *b);
HPL_API const char *hpl_buf_id(const hpl_buf *b);
/* 1 if the buffer views the store's shared memory, 0 if it is the library's
 * own memory (a small object read from the directory, see hpl_get; or a
 * buffer being created) or NULL. */
HPL_API int hpl_buf_shared(const hpl_buf *b);

/* *out_local = 1 if the local store holds a complete copy of `id`, else 0.
 * Never blocks on other nodes. Errors: HPL_EINVAL, HPL_ECONN, HPL_ETIMEDOUT. */
HPL_API int hpl_contains(hpl_client *c, const char *id, int64_t timeout_ms, int *out_local);

/* Cluster-wide facts about `id` from the directory. Any out pointer may be
 * NULL. copies: locations known; complete: how many of those are complete;
 * is_inline: 1 if the directory serves the object itself.
 * Errors: HPL_EINVAL, HPL_ENOTFOUND, HPL_ETIMEDOUT, HPL_ECONN. */
HPL_API int hpl_stat(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t *size,
                     uint32_t *copies, uint32_t *complete, int *is_inline);

/* Delete `id` in the whole cluster. Copies still held by clients stay
 * readable until released, then are freed; the id can be reused at once.
 * Errors: HPL_EINVAL, HPL_ENOTFOUND, HPL_ETIMEDOUT, HPL_ECONN, HPL_EPERM
 * (in a cluster with a secret: another node made the object and is still
 * up; its clients, or an admin handle, hpl_connect_admin, may delete it). */
HPL_API int hpl_delete(hpl_client *c, const char *id, int64_t timeout_ms);

/* List objects whose id starts with `prefix` (NULL or "": all), as text,
 * in id order: one line per object,
 * "ID<TAB>SIZE<TAB>COPIES<TAB>COMPLETE<TAB>INLINE\n". The whole listing is
 * fetched page by page (see hpl_list_page); timeout_ms bounds each page.
 * On success *out is a NUL-terminated string owned by the caller (hpl_free).
 * Errors: HPL_ETIMEDOUT, HPL_ECONN, HPL_ENOMEM. */
HPL_API int hpl_list(hpl_client *c, const char *prefix, int64_t timeout_ms, char **out);

/* One page of the listing: objects whose id starts with `prefix` (NULL or
 * "": all) and sorts after `after` (NULL or "": from the first), at most
 * `max` of them (0: the directory's page size, 1000), in id order, as text
 * like hpl_list. On success *out (the page) and *next (the cursor to pass
 * as `after` for the next page, or NULL after the last page) are owned by
 * the caller (hpl_free). A listing paged this way sees every object that
 * exists throughout it exactly once. Errors: HPL_EINVAL, HPL_ETIMEDOUT,
 * HPL_ECONN. */
HPL_API int hpl_list_page(hpl_client *c, const char *prefix, const char *after, size_t max,
                          int64_t timeout_ms, char **out, char **next);

/* Counters of the local store as text, one "NAME VALUE\n" line each
 * (data_bytes_sent, data_bytes_received, pulls_served, pulls_made,
 * inline_gets, pool_used, pool_capacity, ...); on an admin handle
 * (hpl_connect_admin) the directory's (dir_nodes, dir_objects, ...).
 * *out as for hpl_list(). */
HPL_API int hpl_counters(hpl_client *c, int64_t timeout_ms, char **out);

/* One counter of the local store by name (the store is asked for that one
 * only, so a cheap counter costs no more than itself: reading `cpu_us` does
 * not make the store measure its pool's resident pages). Errors:
 * HPL_ENOTFOUND (no such counter) and those of hpl_counters(). */
HPL_API int hpl_counter(hpl_client *c, const char *name, int64_t timeout_ms, uint64_t *value);

/* The directory's record of transfers from sequence number `since` on
 * (0: the oldest kept), as text, one line per event:
 *   "SEQ T_US KIND RECEIVER SENDER ID\n"   (ID last: it may contain spaces)
 * KIND is assign (RECEIVER was told to pull from SENDER), done (RECEIVER's
 * copy completed, SENDER is free again), remove (RECEIVER's copy was
 * dropped; copies pulling from it lose their sender), node-gone (RECEIVER
 * died), delete (ID deleted everywhere), reset (the reduce into ID lost
 * the tree node on RECEIVER and restarted the affected part; SENDER is the
 * node that took over its source, or 0). Node ids are 16 hex digits (a
 * store's own id is its "node_id" counter); T_US is the directory's
 * monotonic clock. ID is "-" for node-gone. At most 40000 lines per call;
 * *next_since (if not NULL) is where to continue. *out as for hpl_list(). */
HPL_API int hpl_transfers(hpl_client *c, uint64_t since, int64_t timeout_ms, char **out,
                          uint64_t *next_since);

/* How many bytes of `id` the local store holds now: *held of *size (either
 * pointer may be NULL). A copy still arriving (a get of an object from
 * another node in progress) counts the bytes arrived so far; a complete
 * copy has *held == *size; no copy here: both 0. *size is 0 while the
 * store does not know the size yet. For progress displays; never blocks on
 * other nodes. Errors: HPL_EINVAL, HPL_ECONN, HPL_ETIMEDOUT. */
HPL_API int hpl_held_bytes(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t *held,
                           uint64_t *size);

/* Formats of hpl_status(). */
#define HPL_STATUS_TEXT 0
#define HPL_STATUS_JSON 1

/* The whole cluster as the directory sees it now (`hoplite status`): its
 * nodes with their liveness and what each one's latest heartbeat (every
 * 500 ms by default) said, the copies being pulled with their progress,
 * and the reduces running. Lists are cut at 4096 nodes (the 16 latest dead
 * ones among them), 1024 transfers (16 per node) and 256 reduces; the
 * totals say how many there are.
 * HPL_STATUS_JSON: one JSON object on one line (ending in "\n"):
 *   {"instance": HEX, "uptime_ms", "heartbeat_ms", "objects", "inline_bytes",
 *    "nodes_total", "transfers_total", "reduces_total",
 *    "nodes": [{"id": HEX, "name", "addr", "data_port", "state",
 *               "heartbeat_age_ms", "rtt_us", "pool_used", "pool_capacity",
 *               "objects", "bytes_sent", "bytes_received", "clients"
 *               (these six null when the node sent none), "why" (dead only)}],
 *    "transfers": [{"id", "from": HEX, "to": HEX, "held", "size",
 *                   "rate" (bytes/s), "age_ms" (of the report)}],
 *    "reduces": [{"target", "sink": HEX, "joined" (sources in the tree so far),
 *                 "needed", "sources", "elapsed_ms", "size" (0: unknown)}],
 *    "directory": {"leader" (its host:port), "term", "lease_left_ms",
 *                  "renew_last_us", "etcd" (the endpoint that answered last),
 *                  "standbys": ["host:port", ...]}
 *      (only from a directory leading under a lease, --etcd)}
 *   Node ids are 16 hex digits in strings; ids and names are escaped as the
 *   CLI's --json does (bytes that are not UTF-8 as \udcXX).
 * HPL_STATUS_TEXT: one line per item, fields separated by one space, the
 * last field (which may contain spaces) running to the end of the line:
 *   "cluster INSTANCE UPTIME_MS HEARTBEAT_MS OBJECTS INLINE_BYTES NODES TRANSFERS REDUCES"
 *   "directory TERM LEASE_LEFT_MS RENEW_LAST_US LEADER ETCD STANDBY[,STANDBY...]"
 *     (second, only from a directory leading under a lease, --etcd; the
 *     standbys "-" when none is listed; LEADER and each STANDBY host:port)
 *   "node ID STATE AGE_MS POOL_USED POOL_CAPACITY OBJECTS SENT RECEIVED CLIENTS ADDR:PORT NAME"
 *     (the six stats "-" when unknown, NAME "-" when empty)
 *   "transfer RECEIVER SENDER HELD SIZE RATE AGE_MS ID"
 *   "reduce SINK JOINED NEEDED SOURCES ELAPSED_MS SIZE TARGET"
 * STATE is alive, silent (missed two heartbeats, not declared dead yet),
 * suspected (did not answer the directory's probe), draining (leaving) or
 * dead (AGE_MS: since it was declared dead). The directory keeps no
 * history: rates are the streams' own, as their receivers reported them.
 * On success *out is owned by the caller (hpl_free).
 * Errors: HPL_EINVAL (format), HPL_ETIMEDOUT (also when the directory is
 * unreachable: the store waits for it), HPL_ECONN (also from a store older
 * than this call), HPL_ENOMEM. */
HPL_API int hpl_status(hpl_client *c, int format, int64_t timeout_ms, char **out);

/* ------------------------------------------------------------------------
 * Many small requests at once
 *
 * Each call sends all n requests on the handle's connection before it waits
 * for any answer (they are pipelined), then collects every answer: one
 * round trip's latency for the lot instead of n. rcs[i] gets request i's
 * outcome (0 or an HPL_E* code, as the single call would return); the
 * call returns 0 if every request succeeded, else the first failure's
 * code (hpl_errdetail names it). timeout_ms bounds the whole call. ids and
 * data stay owned by the caller; at most 4096 requests per call
 * (HPL_EINVAL beyond).
 * An invalid id fails its own request (rcs[i] = HPL_EINVAL), not the
 * others. When the call itself is refused (c NULL; ids, rcs or another
 * array NULL with n > 0; n > 4096) it returns HPL_EINVAL having sent
 * nothing and written nothing. n == 0 returns 0.
 * ---------------------------------------------------------------------- */

/* Puts (as hpl_put) of objects[i] = data[i][0..sizes[i]). A put that
 * fails leaves no object; the others stand. */
HPL_API int hpl_put_many(hpl_client *c, const char *const *ids, const void *const *data,
                         const uint64_t *sizes, size_t n, int64_t timeout_ms, int *rcs);
/* Gets (as hpl_get): bufs[i] is set where rcs[i] is 0, owned by the caller
 * (hpl_release each) - also when the call returns a failure: the requests
 * that succeeded hold their objects all the same. */
HPL_API int hpl_get_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                         hpl_buf **bufs, int *rcs);
/* Stats (as hpl_stat, sizes only; sizes may be NULL). */
HPL_API int hpl_stat_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                          uint64_t *sizes, int *rcs);
/* Deletes (as hpl_delete). */
HPL_API int hpl_delete_many(hpl_client *c, const char *const *ids, size_t n, int64_t timeout_ms,
                            int *rcs);

/* Free memory returned by the library (hpl_list, hpl_counters, ...). */
HPL_API void hpl_free(void *p);

/* ------------------------------------------------------------------------
 * Collectives
 * ---------------------------------------------------------------------- */

/* Start a reduce: `target` becomes, at this node, the element-wise `op`
 * over the first `num_objects` of `sources` to become ready (0: all of
 * them). Returns once the directory accepted the reduce; hpl_get(target)
 * waits for the result, which is an ordinary object (gets elsewhere
 * broadcast it). Sources must all have the same size, a multiple of the
 * dtype's size; if they do not, the reduce fails and hpl_get(target)
 * reports HPL_EMISMATCH. `sources` and its strings stay owned by the
 * caller. Starting the same reduce again with identical arguments (as
 * allreduce participants do) joins it; the target is then produced at the
 * node that started it first.
 * Errors: HPL_EINVAL (bad op or dtype, bad or duplicate ids, the target
 * among the sources, num_objects > nsources), HPL_EEXIST (the target exists
 * or a different reduce into it runs), HPL_EMISMATCH (sources already known
 * not to match), HPL_ETIMEDOUT, HPL_ECONN. */
HPL_API int hpl_reduce(hpl_client *c, const char *target, const char *const *sources,
                       size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                       int64_t timeout_ms);

/* A range reduce: as hpl_reduce, but `target` becomes the element-wise
 * `op` over bytes [offset, offset + length) of each of the first
 * `num_objects` sources to become ready, so it has `length` bytes (length
 * 0: up to the sources' end; offset 0 and length 0 is hpl_reduce). The
 * sources still have to be of one size. Starting it again with identical
 * arguments, the range included, joins it. `sources` and its strings stay
 * owned by the caller.
 * Errors: as hpl_reduce, and HPL_EINVAL for an offset or length that is not
 * a multiple of the dtype's size, or a range beyond sources already known;
 * if a source that becomes ready later is too small for the range, the
 * reduce fails and hpl_get(target) reports HPL_EINVAL. HPL_EEXIST: a reduce
 * into `target` over another range (or otherwise different) runs. */
HPL_API int hpl_reduce_range(hpl_client *c, const char *target, const char *const *sources,
                             size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                             uint64_t offset, uint64_t length, int64_t timeout_ms);

/* Wait for the reduce producing `target` to finish and report the sources
 * it included, as text: one id per line, in tree (arrival) order.
 * *out as for hpl_list(). Errors: HPL_ENOTFOUND (no such reduce), the
 * reduce's own failure (HPL_EMISMATCH, ...), HPL_ETIMEDOUT, HPL_ECONN. */
HPL_API int hpl_reduce_sources(hpl_client *c, const char *target, int64_t timeout_ms,
                               char **out);

/* Reduce then get: every participant calls it with the same arguments and
 * gets the result held, as hpl_get() returns it (*out owned by the caller:
 * hpl_release it); `sources` and its strings stay owned by the caller.
 * When every participant holds a complete source of its own on its own
 * node (at most one participant per node with a source; others only read
 * the result), all sources are reduced (num_objects 0 or nsources, 3 or
 * more sources, slices of at least 256 KiB) and all call within the
 * directory's forming window, the nodes run a ring (reduce-scatter, then
 * allgather: each sends 2(k-1)/k of the object). Otherwise, and when a ring
 * member fails, the call starts (or joins) a reduce and gets its result,
 * which is broadcast to each participant.
 * Errors: as hpl_reduce and hpl_get. */
HPL_API int hpl_allreduce(hpl_client *c, const char *target, const char *const *sources,
                          size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                          int64_t timeout_ms, hpl_buf **out);

/* ------------------------------------------------------------------------
 * Asynchronous requests: submit now, take the completion later, from an
 * event loop (epoll, poll, libuv's uv_poll, libevent, asyncio's
 * add_reader). See docs/async.md.
 *
 * Each hpl_async_* submission returns at once: it only queues the request
 * (and wakes the descriptor); hpl_async_poll sends queued requests while
 * poll(2) says the socket has room (it does not wait for room: the rest
 * goes on a later poll). A submission that returned 0 yields
 * exactly one completion (hpl_completion) later, whatever happens: the
 * answer, its own deadline passing (HPL_ETIMEDOUT, also when the store
 * never answers), hpl_async_cancel (HPL_ECANCELED), or the connection
 * breaking (HPL_ECONN, for every request pending then). A submission that
 * failed yields none.
 *
 * Driving it: get the handle's descriptor once (hpl_async_fd), watch it
 * for readability, and whenever it is readable, or when the time that
 * hpl_async_timeout_ms gave has passed, call hpl_async_poll until it
 * returns fewer completions than asked for. That is all a loop has to do.
 *
 * The async calls are thread-safe (a lock per handle), but meant for one
 * thread driving one handle. Blocking calls may be made on the same handle
 * meanwhile, from that thread or others: they and the async requests share
 * the store connection without disturbing each other (a blocking call that
 * reads the socket hands async replies over to the completion queue). Gets
 * and puts submitted here always go through the store (no direct reads
 * from the directory).
 * ---------------------------------------------------------------------- */

/* Most requests a handle holds at once: pending, plus completed and not
 * yet taken by hpl_async_poll. A submission beyond it fails with
 * HPL_EAGAIN. Each holds about 400 bytes (its state and its ticket on the
 * connection) plus its ids (a reduce: its sources): 26 MB for 65 536 gets
 * of short ids. */
#define HPL_ASYNC_MAX 65536

/* What an async request does. */
typedef enum hpl_async_op {
  HPL_AOP_GET = 1,
  HPL_AOP_PUT = 2,
  HPL_AOP_STAT = 3,
  HPL_AOP_DELETE = 4,
  HPL_AOP_REDUCE = 5,
  HPL_AOP_ALLREDUCE = 6,
  HPL_AOP_CREATE = 7,
  HPL_AOP_SEAL = 8,
} hpl_async_op;

/* Size of a completion's detail, its NUL included. */
#define HPL_ASYNC_DETAIL_MAX 256

/* The outcome of one async request (plain data: ctypes-friendly). */
typedef struct hpl_completion {
  uint64_t tag;   /* the caller's tag, as submitted */
  int32_t op;     /* hpl_async_op */
  int32_t status; /* 0, or an HPL_E* code; detail says what failed */
  /* get, allreduce with status 0: the object, held as hpl_get returns it;
   * owned by the caller from hpl_async_poll on (hpl_release it). NULL
   * otherwise. */
  hpl_buf *buf;
  uint64_t size;     /* get, allreduce: the object's size; stat: its size */
  uint32_t copies;   /* stat: as hpl_stat */
  uint32_t complete; /* stat: as hpl_stat */
  int32_t is_inline; /* stat: as hpl_stat */
  int32_t reserved;
  char detail[HPL_ASYNC_DETAIL_MAX]; /* "" on success */
} hpl_completion;

/* The handle's descriptor for an event loop, owned by the handle (closed
 * by hpl_close; never read or write it). It is an epoll descriptor: it
 * polls readable when completions are waiting, when the store sent
 * something, or when queued submissions can go out; then call
 * hpl_async_poll. It may also be readable with nothing to take (spurious
 * wake-ups are harmless). The first call sets the handle's async state up.
 * Errors: HPL_EINVAL (c NULL), HPL_ESTATE (an admin handle), HPL_ESYS
 * (epoll or eventfd failed), HPL_ENOMEM. */
HPL_API int hpl_async_fd(hpl_client *c, int *fd);

/* Submit a get of `id` (as hpl_get, through the store), completing within
 * timeout_ms (< 0: no deadline; the store then waits without limit for an
 * object that does not exist yet). The completion's buf is the object.
 * `id` is copied; `tag` is any value of the caller's, unique among the
 * handle's pending requests.
 * Errors (nothing submitted, no completion): HPL_EINVAL (c NULL, a bad
 * id, a tag already pending), HPL_ESTATE (an admin handle), HPL_EAGAIN
 * (HPL_ASYNC_MAX reached), HPL_ENOMEM, HPL_ECONN (the connection is
 * already broken), HPL_ESYS (as hpl_async_fd, on first use). */
HPL_API int hpl_async_get(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t tag);

/* Submit a put of `size` bytes at `data` as object `id` (as hpl_put).
 * `data` stays the caller's, but must stay valid and unchanged until the
 * completion is taken: objects up to the store's inline size are copied
 * into the socket, larger ones are copied by the store straight from
 * `data`. A put that times out or is cancelled after the store began
 * copying is aborted first (the completion waits for that, up to 5 s).
 * A cancelled or timed-out put may still have happened if the store had
 * finished it. Errors: as hpl_async_get, and HPL_EINVAL for data NULL
 * with size > 0. */
HPL_API int hpl_async_put(hpl_client *c, const char *id, const void *data, uint64_t size,
                          int64_t timeout_ms, uint64_t tag);

/* Submit a stat of `id`: the completion's size, copies, complete and
 * is_inline as hpl_stat gives them. Errors: as hpl_async_get. */
HPL_API int hpl_async_stat(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t tag);

/* Submit a delete of `id` (as hpl_delete). Errors: as hpl_async_get. */
HPL_API int hpl_async_delete(hpl_client *c, const char *id, int64_t timeout_ms, uint64_t tag);

/* Submit hpl_reduce (completing once the directory accepted the reduce)
 * or hpl_allreduce (completing with the result in buf). `target`,
 * `sources` and their strings are copied. Errors: as hpl_async_get, and
 * the argument checks of hpl_reduce (HPL_EINVAL). */
HPL_API int hpl_async_reduce(hpl_client *c, const char *target, const char *const *sources,
                             size_t nsources, size_t num_objects, hpl_op op, hpl_dtype dtype,
                             int64_t timeout_ms, uint64_t tag);
HPL_API int hpl_async_allreduce(hpl_client *c, const char *target, const char *const *sources,
                                size_t nsources, size_t num_objects, hpl_op op,
                                hpl_dtype dtype, int64_t timeout_ms, uint64_t tag);

/* Submit a create of object `id` of `size` bytes (as hpl_create): the
 * completion's buf is the object being created, owned by the caller from
 * hpl_async_poll on: write its bytes at hpl_buf_data (hpl_buf_progress
 * may say which are final), then seal it with hpl_async_seal (or hpl_seal)
 * or give it up with hpl_abort. A create cancelled or timed out after the
 * store began it leaves that creation to the store's own timeout (or the
 * connection's end). Errors: as hpl_async_get. */
HPL_API int hpl_async_create(hpl_client *c, const char *id, uint64_t size, int64_t timeout_ms,
                             uint64_t tag);

/* Submit the seal of `b`, a buffer from hpl_create or an hpl_async_create
 * completion (as hpl_seal): the completion's status says whether the
 * object is sealed. Takes ownership of b (never use it again): it is
 * freed when the completion is taken, or at once, aborted (hpl_abort), if
 * the submission fails after its argument checks. A seal that times out or
 * is cancelled may still complete at the store (with the bytes written;
 * the buffer's memory is never reused). Errors: HPL_EINVAL for b NULL or
 * not being created (b stays the caller's); otherwise as hpl_async_get. */
HPL_API int hpl_async_seal(hpl_client *c, hpl_buf *b, int64_t timeout_ms, uint64_t tag);

/* Make progress without waiting (send what is queued, read what the store
 * sent, fire passed deadlines) and move up to `max` completions into
 * out[0..max), oldest first. Returns how many (0: none now), or
 * HPL_EINVAL (c or out NULL, max < 0). Never blocks. A broken connection
 * is no error here: it completes every pending request with HPL_ECONN. */
HPL_API int hpl_async_poll(hpl_client *c, hpl_completion *out, int max);

/* Milliseconds until the earliest deadline of a pending request (0: one
 * has passed, call hpl_async_poll now), or -1 when none has a deadline.
 * For the loop's next wake-up: wait on hpl_async_fd at most this long. */
HPL_API int64_t hpl_async_timeout_ms(hpl_client *c);

/* Cancel the pending request with `tag`: it completes (at the next
 * hpl_async_poll) with HPL_ECANCELED, unless its completion is already
 * queued (then that one stands). A reply that still comes is dropped (a
 * held object released). 0, HPL_ENOTFOUND (no pending request has that
 * tag), HPL_EINVAL (c NULL). */
HPL_API int hpl_async_cancel(hpl_client *c, uint64_t tag);

/* How many requests the handle holds: pending plus completions not yet
 * taken. 0 for a handle that never went async or c NULL. */
HPL_API size_t hpl_async_count(hpl_client *c);

#ifdef __cplusplus
}
#endif
#endif /* HOPLITE_H */
