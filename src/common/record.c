/* record.c - incoming bytes to files for fuzz corpora (see record.h). */
#include "record.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define RECORD_CAP (256u << 10)

void hpl__record_open(hpl__record *r, const char *label) {
  static unsigned seq;
  r->fd = -1;
  r->bytes = 0;
  const char *dir = getenv("HPL_RECORD_DIR");
  if (!dir || !*dir) return;
  char path[512], name[64];
  snprintf(name, sizeof name, "%s", label ? label : "conn");
  for (char *c = name; *c; c++)
    if (*c == '/' || *c == '<' || *c == '>' || *c == ':') *c = '_';
  snprintf(path, sizeof path, "%s/%s-%d-%u", dir, name, (int)getpid(),
           __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
  r->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
}

void hpl__record_add(hpl__record *r, const void *p, size_t n) {
  if (r->fd < 0 || r->bytes >= RECORD_CAP) return;
  if (n > RECORD_CAP - r->bytes) n = RECORD_CAP - r->bytes;
  ssize_t w = write(r->fd, p, n);
  if (w > 0) r->bytes += (size_t)w;
}

void hpl__record_close(hpl__record *r) {
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
}
