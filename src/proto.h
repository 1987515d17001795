/*
 * proto.h - message types of the frame header and their protobuf messages.
 *
 * HPL_MSG_MAP(X): X(NAME, number, protobuf-c message type prefix). Replies to
 * a request echo its request id. Numbers are part of the wire format: append,
 * never renumber.
 */
#ifndef HPL_PROTO_H
#define HPL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "hoplite.pb-c.h"

#define HPL_MSG_MAP(X)                          \
  /* client <-> store */                        \
  X(HELLO, 1, hpl__hello)                       \
  X(CREATE, 2, hpl__create_req)                 \
  X(CREATE_REP, 3, hpl__create_rep)             \
  X(PROGRESS, 4, hpl__progress_note)            \
  X(SEAL, 5, hpl__handle_req)                   \
  X(ABORT, 6, hpl__handle_req)                  \
  X(RELEASE, 7, hpl__handle_req)                \
  X(GET, 8, hpl__get_req)                       \
  X(GET_REP, 9, hpl__get_rep)                   \
  X(CONTAINS, 10, hpl__id_req)                  \
  X(CONTAINS_REP, 11, hpl__contains_rep)        \
  X(STAT, 12, hpl__id_req)                      \
  X(STAT_REP, 13, hpl__stat_rep)                \
  X(DELETE, 14, hpl__id_req)                    \
  X(REPLY, 15, hpl__reply)                      \
  X(LIST, 16, hpl__list_req)                    \
  X(LIST_REP, 17, hpl__list_rep)                \
  X(COUNTERS, 18, hpl__counters_req)            \
  X(COUNTERS_REP, 19, hpl__counters_rep)        \
  X(REDUCE, 20, hpl__reduce_req)                \
  X(REDUCE_INFO, 21, hpl__id_req)               \
  X(REDUCE_INFO_REP, 22, hpl__reduce_info_rep)  \
  X(TRANSFERS, 23, hpl__transfers_req)          \
  X(TRANSFERS_REP, 24, hpl__transfers_rep)      \
  /* client <-> directory */                    \
  X(PEEK, 30, hpl__id_req)                      \
  X(PEEK_REP, 31, hpl__peek_rep)                \
  /* store <-> directory */                     \
  X(REGISTER, 40, hpl__register_req)            \
  X(REGISTER_REP, 41, hpl__register_rep)        \
  X(HEARTBEAT, 42, hpl__heartbeat)              \
  X(LOC_ADD, 43, hpl__loc_add_req)              \
  X(LOC_NOTE, 44, hpl__loc_note)                \
  X(INLINE_PUT, 45, hpl__inline_put_req)        \
  X(ACQUIRE, 46, hpl__acquire_req)              \
  X(ACQUIRE_REP, 47, hpl__acquire_rep)          \
  X(DROP, 48, hpl__drop_note)                   \
  X(REDUCE_REP, 49, hpl__reduce_rep)            \
  X(REDUCE_TASK, 50, hpl__reduce_task)          \
  X(REDUCE_SINK, 51, hpl__reduce_sink)          \
  X(REDUCE_END, 52, hpl__reduce_end)            \
  X(UPSTREAM_GONE, 53, hpl__upstream_note)      \
  X(REDUCE_FAIL, 54, hpl__reduce_fail_note)     \
  X(DRAIN, 55, hpl__drain_req)                  \
  /* store <-> store */                         \
  X(PULL, 60, hpl__pull_req)                    \
  X(PULL_REP, 61, hpl__pull_rep)

enum hpl_msg_type {
#define HPL_MSG_ENUM_(name, num, pfx) HPL_MSG_##name = (num),
  HPL_MSG_MAP(HPL_MSG_ENUM_)
#undef HPL_MSG_ENUM_
      HPL_MSG_MAX_ = 61
};

/* Transfer record kinds: a receiver was given a sender; its copy completed
 * (freeing the sender); its copy was removed (copies pulling from it lose
 * their sender); a node died (all its copies removed); an object was
 * deleted (all its copies removed). */
enum { HPL_XFER_ASSIGN = 1, HPL_XFER_DONE = 2, HPL_XFER_REMOVE = 3, HPL_XFER_NODE_GONE = 4,
       HPL_XFER_DELETE = 5, HPL_XFER_RESET = 6 };

/* LocNote kinds. */
enum { HPL_LOC_COMPLETE = 1, HPL_LOC_REMOVE = 2, HPL_LOC_FAILED = 3 };

/* Descriptor of a type's message, NULL for an unknown type. */
const ProtobufCMessageDescriptor *hpl_msg_descriptor(unsigned type);

/* Name of a message type for logs ("GET", ...), "?" if unknown. */
const char *hpl_msg_name(unsigned type);

/* Unpack msg[0..len) as the message of `type`. Returns NULL if the type is
 * unknown, the bytes do not parse, or the message is not the type's.
 * The result is freed with protobuf_c_message_free_unpacked(m, NULL). */
ProtobufCMessage *hpl_msg_unpack(unsigned type, const uint8_t *msg, size_t len);

/* Encode a whole frame header + message into one malloc'd buffer of
 * HPL_FRAME_HDR_LEN + packed size bytes (*out_len). payload_len only goes in
 * the header; the caller sends the payload itself. NULL on allocation
 * failure. The caller frees the buffer. */
uint8_t *hpl_msg_frame(unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                       uint64_t payload_len, size_t *out_len);

/* True if `id` is a valid object id (see hoplite.h). */
int hpl_id_valid(const char *id);

/* Limits shared by the processes. */
#define HPL_MAX_MSG_CTRL (16u << 20) /* list replies and reduce requests can be big */
#define HPL_DEFAULT_INLINE_MAX (64u << 10)

#endif
