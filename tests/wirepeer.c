/* wirepeer.c - the far end of a connection in tests (see wirepeer.h). */
#include "wirepeer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void wp_bad(wp_peer *p, const char *fmt, ...) {
  if (p->bad[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->bad, sizeof p->bad, fmt, ap);
  va_end(ap);
}

int wp_read_exact(int fd, void *buf, size_t n) {
  uint8_t *b = buf;
  while (n) {
    ssize_t k = read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

int wp_write_exact(int fd, const void *buf, size_t n) {
  const uint8_t *b = buf;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

int wp_read(wp_peer *p, wp_frame *f) {
  static const hpl__frame_limits lim = {
      .max_msg = 16u << 20, .max_payload = 16u << 20, .max_type = HPL__MSG_MAX_};
  uint8_t hdr[HPL__FRAME_HDR_LEN];
  memset(f, 0, sizeof *f);
  if (wp_read_exact(p->fd, hdr, sizeof hdr) != 0) return -1;
  if (hpl__frame_decode_hdr(hdr, sizeof hdr, &lim, &f->h, NULL) != 0) {
    wp_bad(p, "the other end sent a bad frame header");
    return -1;
  }
  uint8_t *msg = malloc(f->h.msg_len + 1);
  f->payload = f->h.payload_len ? malloc(f->h.payload_len) : NULL;
  if (!msg || wp_read_exact(p->fd, msg, f->h.msg_len) != 0 ||
      (f->h.payload_len && (!f->payload || wp_read_exact(p->fd, f->payload, f->h.payload_len)))) {
    free(msg);
    wp_free(f);
    return -1;
  }
  f->m = hpl__msg_unpack(f->h.type, msg, f->h.msg_len);
  free(msg);
  if (!f->m) wp_bad(p, "undecodable %s from the other end", hpl__msg_name(f->h.type));
  return 0;
}

int wp_expect(wp_peer *p, unsigned type, wp_frame *f) {
  if (wp_read(p, f) != 0) {
    wp_bad(p, "no %s arrived", hpl__msg_name(type));
    return -1;
  }
  if (f->h.type != type) {
    wp_bad(p, "got %s, wanted %s", hpl__msg_name(f->h.type), hpl__msg_name(type));
    wp_free(f);
    return -1;
  }
  return 0;
}

void wp_free(wp_frame *f) {
  if (f->m) protobuf_c_message_free_unpacked(f->m, NULL);
  free(f->payload);
  memset(f, 0, sizeof *f);
}

void wp_send(wp_peer *p, unsigned type, uint64_t req, const ProtobufCMessage *m,
             const void *payload, size_t plen, size_t piece) {
  size_t len;
  uint8_t *f = hpl__msg_frame(type, req, m, plen, &len);
  uint8_t *all = f ? realloc(f, len + plen) : NULL;
  if (!all) {
    free(f);
    wp_bad(p, "out of memory");
    return;
  }
  if (plen) memcpy(all + len, payload, plen);
  len += plen;
  if (!piece) piece = len;
  for (size_t off = 0; off < len; off += piece) {
    if (off) usleep(20000);
    if (wp_write_exact(p->fd, all + off, len - off < piece ? len - off : piece) != 0)
      wp_bad(p, "cannot write to the other end");
  }
  free(all);
}
