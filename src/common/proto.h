/*
 * proto.h - message types of the frame header and their protobuf messages.
 *
 * HPL__MSG_MAP(X): X(NAME, number, protobuf-c message type prefix). Replies to
 * a request echo its request id. Numbers are part of the wire format: append,
 * never renumber.
 *
 * Callers: every process: the servers' connections and handlers (store/,
 * directory/, src/server/uvconn*.c), the client library (src/client/),
 * the metrics text, tests.
 */
#ifndef HPL_PROTO_H
#define HPL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "hoplite.pb-c.h"

#define HPL__MSG_MAP(X)                          \
  /* client <-> store */                        \
  X(HELLO, 1, hplpb__hello)                       \
  X(CREATE, 2, hplpb__create_req)                 \
  X(CREATE_REP, 3, hplpb__create_rep)             \
  X(PROGRESS, 4, hplpb__progress_note)            \
  X(SEAL, 5, hplpb__handle_req)                   \
  X(ABORT, 6, hplpb__handle_req)                  \
  X(RELEASE, 7, hplpb__handle_req)                \
  X(GET, 8, hplpb__get_req)                       \
  X(GET_REP, 9, hplpb__get_rep)                   \
  X(CONTAINS, 10, hplpb__id_req)                  \
  X(CONTAINS_REP, 11, hplpb__contains_rep)        \
  X(STAT, 12, hplpb__id_req)                      \
  X(STAT_REP, 13, hplpb__stat_rep)                \
  X(DELETE, 14, hplpb__id_req)                    \
  X(REPLY, 15, hplpb__reply)                      \
  X(LIST, 16, hplpb__list_req)                    \
  X(LIST_REP, 17, hplpb__list_rep)                \
  X(COUNTERS, 18, hplpb__counters_req)            \
  X(COUNTERS_REP, 19, hplpb__counters_rep)        \
  X(REDUCE, 20, hplpb__reduce_req)                \
  X(REDUCE_INFO, 21, hplpb__id_req)               \
  X(REDUCE_INFO_REP, 22, hplpb__reduce_info_rep)  \
  X(TRANSFERS, 23, hplpb__transfers_req)          \
  X(TRANSFERS_REP, 24, hplpb__transfers_rep)      \
  X(PUT, 25, hplpb__put_req)                      \
  /* client <-> directory */                    \
  X(PEEK, 30, hplpb__peek_req)                      \
  X(PEEK_REP, 31, hplpb__peek_rep)                \
  /* store <-> directory */                     \
  X(REGISTER, 40, hplpb__register_req)            \
  X(REGISTER_REP, 41, hplpb__register_rep)        \
  X(HEARTBEAT, 42, hplpb__heartbeat)              \
  X(LOC_ADD, 43, hplpb__loc_add_req)              \
  X(LOC_NOTE, 44, hplpb__loc_note)                \
  X(INLINE_PUT, 45, hplpb__inline_put_req)        \
  X(ACQUIRE, 46, hplpb__acquire_req)              \
  X(ACQUIRE_REP, 47, hplpb__acquire_rep)          \
  X(DROP, 48, hplpb__drop_note)                   \
  X(REDUCE_REP, 49, hplpb__reduce_rep)            \
  X(REDUCE_TASK, 50, hplpb__reduce_task)          \
  X(REDUCE_SINK, 51, hplpb__reduce_sink)          \
  X(REDUCE_END, 52, hplpb__reduce_end)            \
  X(UPSTREAM_GONE, 53, hplpb__upstream_note)      \
  X(REDUCE_FAIL, 54, hplpb__reduce_fail_note)     \
  X(DRAIN, 55, hplpb__drain_req)                  \
  /* store <-> store */                         \
  X(PULL, 60, hplpb__pull_req)                    \
  X(PULL_REP, 61, hplpb__pull_rep)              \
  /* store -> directory, again */                 \
  X(HELD, 62, hplpb__held_note)                   \
  /* directory -> store: answer with a HEARTBEAT at once */ \
  X(PROBE, 63, hplpb__heartbeat)                  \
  /* directory -> stores: a restarted directory adopted a running reduce */ \
  X(REDUCE_ADOPTED, 64, hplpb__reduce_end)    \
  /* store -> directory: let these copies go (room.c) */ \
  X(EVICT, 65, hplpb__evict_req)                  \
  X(EVICT_REP, 66, hplpb__evict_rep)              \
  /* client -> store -> directory: the cluster's status */ \
  X(STATUS, 67, hplpb__status_req)                \
  X(STATUS_REP, 68, hplpb__status_rep)              \
  /* store -> directory: a reduce ended at its sink while no directory knew */ \
  X(REDUCE_DONE, 69, hplpb__reduce_end)          \
  /* store -> directory, one-way: nothing from node_id for half a quiet \
   * window (puller.c): probe it now (only to a directory that says it \
   * takes them, RegisterRep.quiet_notes) */ \
  X(QUIET, 70, hplpb__heartbeat)                  \
  /* store -> directory: a ring allreduce (ring.c); answered when it forms */ \
  X(RING, 71, hplpb__reduce_req)                  \
  X(RING_REP, 72, hplpb__ring_plan)               \
  /* store -> directory, one-way: this member's target is complete (status \
   * 0) or its part failed */                     \
  X(RING_NOTE, 73, hplpb__reduce_end)             \
  /* directory -> stores, one-way: the ring is over (status 0: every member \
   * completed) or abandoned */                   \
  X(RING_END, 74, hplpb__reduce_end)             \
  /* directory -> store, one-way: a sender for an object a client of the \
   * store PEEKed (PeekReq.node; only to a store that set \
   * RegisterReq.grants). The store pulls as if it had asked (fetch.c). */ \
  X(GRANT, 75, hplpb__acquire_rep)               \
  /* client -> directory, one-way: a small object's bytes, published while \
   * the client's PUT of it goes to its store (InlinePutReq.node; only when \
   * the store's Hello set dir_publish). Served at once; the store's \
   * INLINE_PUT confirms it, a LOC_RETRACT note takes it back (locs.c). */ \
  X(PUBLISH, 76, hplpb__inline_put_req)          \
  /* directory -> store, one-way: more digests of an object whose copy \
   * the store is pulling (LocNote: digest_first, digests; the root once \
   * all are known), as the origin makes them (digests.c) */ \
  X(DIGESTS, 77, hplpb__loc_note)               \
  /* client -> store: where the directory is now (DirWhereReq); the reply \
   * is a Hello with the directory's fields only */ \
  X(DIR_WHERE, 78, hplpb__dir_where_req)         \
  X(DIR_WHERE_REP, 79, hplpb__hello)

enum hpl__msg_type {
#define HPL__MSG_ENUM_(name, num, pfx) HPL__MSG_##name = (num),
  HPL__MSG_MAP(HPL__MSG_ENUM_)
#undef HPL__MSG_ENUM_
      HPL__MSG_MAX_ = 79
};

/* Transfer record kinds: a receiver was given a sender; its copy completed
 * (freeing the sender); its copy was removed (copies pulling from it lose
 * their sender); a node died (all its copies removed); an object was
 * deleted (all its copies removed). */
enum { HPL__XFER_ASSIGN = 1, HPL__XFER_DONE = 2, HPL__XFER_REMOVE = 3, HPL__XFER_NODE_GONE = 4,
       HPL__XFER_DELETE = 5, HPL__XFER_RESET = 6 };

/* LocNote kinds. */
/* LOC_RETRACT: a put this node's client PUBLISHed failed here; the directory
 * forgets the published bytes unless this node's INLINE_PUT confirmed them. */
enum { HPL__LOC_COMPLETE = 1, HPL__LOC_REMOVE = 2, HPL__LOC_FAILED = 3, HPL__LOC_RETRACT = 4,
       HPL__LOC_DIGESTS = 5 /* the origin: digests of units [digest_first, ...) made */ };

/* Descriptor of a type's message, NULL for an unknown type. */
const ProtobufCMessageDescriptor *hpl__msg_descriptor(unsigned type);

/* Name of a message type for logs ("GET", ...), "?" if unknown. */
const char *hpl__msg_name(unsigned type);

/* Unpack msg[0..len) as the message of `type`. Returns NULL if the type is
 * unknown, the bytes do not parse, or the message is not the type's.
 * The result is freed with protobuf_c_message_free_unpacked(m, NULL). */
ProtobufCMessage *hpl__msg_unpack(unsigned type, const uint8_t *msg, size_t len);

/* Encode a whole frame header + message into one malloc'd buffer of
 * HPL__FRAME_HDR_LEN + packed size bytes (*out_len). payload_len only goes in
 * the header; the caller sends the payload itself. NULL on allocation
 * failure. The caller frees the buffer. */
uint8_t *hpl__msg_frame(unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                       uint64_t payload_len, size_t *out_len);

/* The type of the reply to a request of `type` (HPL__MSG_REPLY for
 * requests answered with a plain Reply; 0 for one-way messages). Any
 * request may also be refused with a plain Reply. */
unsigned hpl__msg_reply_type(unsigned type);

/* The status and detail every reply message starts with (fields 1 and 2);
 * *detail is "" if absent. 0 for a message without them. */
int hpl__msg_status(const ProtobufCMessage *m, const char **detail);

/* One named value of a COUNTERS reply. */
typedef struct hpl__counter {
  const char *name; /* static, or outliving the reply */
  uint64_t value;
} hpl__counter;

/* A COUNTERS_REP holding `n` counters, in one malloc'd block the caller
 * frees with free() after sending it (names are not copied). NULL on no
 * memory. */
Hplpb__CountersRep *hpl__counters_rep(const hpl__counter *v, size_t n);

/* True if `id` is a valid object id (see hoplite.h). */
int hpl__id_valid(const char *id);

/* Limits shared by the processes. */
#define HPL__MAX_MSG_CTRL (16u << 20) /* list replies and reduce requests can be big */
/* How long a delete is remembered, by the directory (directory/tombs.h) and
 * by the stores that learned of it (store/handoff.h), in ms. */
#define HPL__TOMB_MS 60000
#define HPL__DEFAULT_INLINE_MAX (64u << 10)
/* Requests one peer may have waiting at a server at once (a store's
 * ACQUIREs at the directory, a client's GETs at its store, ...); more are
 * refused with HPL_EUNAVAIL. */
#define HPL__MAX_WAITING_PER_PEER 65536
/* `hoplite status`: copies arriving a heartbeat lists, and what a STATUS
 * reply lists at most (the totals say how many there are). */
#define HPL__STATUS_MAX_INCOMING 16
#define HPL__STATUS_MAX_NODES 4096
#define HPL__STATUS_MAX_TRANSFERS 1024
#define HPL__STATUS_MAX_REDUCES 256
#define HPL__STATUS_MAX_DEAD 16 /* nodes gone, latest first */
/* Default cap on a listener's open connections (--max-connections). */
#define HPL__DEFAULT_MAX_CONNS 4096

#endif
