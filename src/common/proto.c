/* proto.c - message-type table and pack/unpack helpers (see proto.h). */
#include "proto.h"

#include <stdlib.h>
#include <string.h>

#include "hoplite.h"

const ProtobufCMessageDescriptor *hpl__msg_descriptor(unsigned type) {
  switch (type) {
#define HPL__MSG_DESC_(name, num, pfx) \
  case num:                           \
    return &pfx##__descriptor;
    HPL__MSG_MAP(HPL__MSG_DESC_)
#undef HPL__MSG_DESC_
    default:
      return NULL;
  }
}

const char *hpl__msg_name(unsigned type) {
  switch (type) {
#define HPL__MSG_NAME_(name, num, pfx) \
  case num:                           \
    return #name;
    HPL__MSG_MAP(HPL__MSG_NAME_)
#undef HPL__MSG_NAME_
    default:
      return "?";
  }
}

ProtobufCMessage *hpl__msg_unpack(unsigned type, const uint8_t *msg, size_t len) {
  const ProtobufCMessageDescriptor *d = hpl__msg_descriptor(type);
  if (!d) return NULL;
  return protobuf_c_message_unpack(d, NULL, len, msg);
}

uint8_t *hpl__msg_frame(unsigned type, uint64_t req_id, const ProtobufCMessage *m,
                       uint64_t payload_len, size_t *out_len) {
  size_t mlen = m ? protobuf_c_message_get_packed_size(m) : 0;
  uint8_t *buf = malloc(HPL__FRAME_HDR_LEN + mlen + 1);
  if (!buf) return NULL;
  hpl__frame_hdr h = {.type = (uint16_t)type,
                     .flags = 0,
                     .msg_len = (uint32_t)mlen,
                     .req_id = req_id,
                     .payload_len = payload_len};
  hpl__frame_encode_hdr(&h, buf);
  if (mlen) protobuf_c_message_pack(m, buf + HPL__FRAME_HDR_LEN);
  *out_len = HPL__FRAME_HDR_LEN + mlen;
  return buf;
}

int hpl__id_valid(const char *id) {
  if (!id) return 0;
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)id; *p; p++, n++) {
    if (*p < 0x20 || *p == 0x7f) return 0;
    if (n >= HPL_ID_MAX) return 0;
  }
  return n > 0;
}

const char *hpl_strerror(int err) {
  switch (err) {
#define HPL_ERR_STR_(name, value, msg) \
  case value:                          \
    return msg;
    HPL_ERRNO_MAP(HPL_ERR_STR_)
#undef HPL_ERR_STR_
    default:
      return "unknown error";
  }
}

const char *hpl_errname(int err) {
  switch (err) {
#define HPL_ERR_NAME_(name, value, msg) \
  case value:                           \
    return "HPL_" #name;
    HPL_ERRNO_MAP(HPL_ERR_NAME_)
#undef HPL_ERR_NAME_
    default:
      return "HPL_E?";
  }
}

size_t hpl_dtype_size(int dtype) {
  switch (dtype) {
    case HPL_DT_U8:
    case HPL_DT_I8:
      return 1;
    case HPL_DT_I32:
    case HPL_DT_U32:
    case HPL_DT_F32:
      return 4;
    case HPL_DT_I64:
    case HPL_DT_U64:
    case HPL_DT_F64:
      return 8;
    default:
      return 0;
  }
}

Hplpb__CountersRep *hpl__counters_rep(const hpl__counter *v, size_t n) {
  struct block {
    Hplpb__CountersRep r;
    Hplpb__Counter *ps[];
  } *b = malloc(sizeof *b + n * (sizeof(Hplpb__Counter *) + sizeof(Hplpb__Counter)));
  if (!b) return NULL;
  Hplpb__Counter *cs = (Hplpb__Counter *)(b->ps + n);
  hplpb__counters_rep__init(&b->r);
  for (size_t i = 0; i < n; i++) {
    hplpb__counter__init(&cs[i]);
    cs[i].name = (char *)v[i].name;
    cs[i].value = v[i].value;
    b->ps[i] = &cs[i];
  }
  b->r.n_counters = n;
  b->r.counters = b->ps;
  return &b->r;
}

unsigned hpl__msg_reply_type(unsigned type) {
  switch (type) {
    case HPL__MSG_CREATE: return HPL__MSG_CREATE_REP;
    case HPL__MSG_GET: return HPL__MSG_GET_REP;
    case HPL__MSG_CONTAINS: return HPL__MSG_CONTAINS_REP;
    case HPL__MSG_STAT: return HPL__MSG_STAT_REP;
    case HPL__MSG_LIST: return HPL__MSG_LIST_REP;
    case HPL__MSG_COUNTERS: return HPL__MSG_COUNTERS_REP;
    case HPL__MSG_REDUCE: return HPL__MSG_REDUCE_REP;
    case HPL__MSG_REDUCE_INFO: return HPL__MSG_REDUCE_INFO_REP;
    case HPL__MSG_TRANSFERS: return HPL__MSG_TRANSFERS_REP;
    case HPL__MSG_PEEK: return HPL__MSG_PEEK_REP;
    case HPL__MSG_REGISTER: return HPL__MSG_REGISTER_REP;
    case HPL__MSG_ACQUIRE: return HPL__MSG_ACQUIRE_REP;
    case HPL__MSG_PULL: return HPL__MSG_PULL_REP;
    case HPL__MSG_EVICT: return HPL__MSG_EVICT_REP;
    case HPL__MSG_STATUS: return HPL__MSG_STATUS_REP;
    case HPL__MSG_RING: return HPL__MSG_RING_REP;
    case HPL__MSG_DIR_WHERE: return HPL__MSG_DIR_WHERE_REP;
    case HPL__MSG_PUT:
    case HPL__MSG_SEAL:
    case HPL__MSG_ABORT:
    case HPL__MSG_DELETE:
    case HPL__MSG_HEARTBEAT:
    case HPL__MSG_LOC_ADD:
    case HPL__MSG_LOC_NOTE:
    case HPL__MSG_INLINE_PUT:
    case HPL__MSG_DROP:
    case HPL__MSG_DRAIN:
    case HPL__MSG_HELD: return HPL__MSG_REPLY;
    default: return 0;
  }
}

int hpl__msg_status(const ProtobufCMessage *m, const char **detail) {
  const ProtobufCFieldDescriptor *fs =
      protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "status");
  const ProtobufCFieldDescriptor *fd =
      protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "detail");
  if (detail) {
    const char *d = fd && fd->type == PROTOBUF_C_TYPE_STRING
                        ? *(const char *const *)((const char *)m + fd->offset)
                        : NULL;
    *detail = d ? d : "";
  }
  if (!fs || fs->type != PROTOBUF_C_TYPE_SINT32) return 0;
  return *(const int32_t *)((const char *)m + fs->offset);
}
