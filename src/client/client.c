/* client.c - a client handle of libhoplite (include/hoplite.h): connecting
 * to the store and closing, the per-thread error detail, and the buffers
 * the handle hands out (capi.h). What the calls do is in the other c*.c
 * files: puts (cput.c), gets (cget.c), questions about objects and their
 * deletion (cobjects.c), collectives (creduce.c), text results (ctext.c),
 * all through the requests of ccall.c. */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <utlist.h>

#include "capi.h"

/* ------------------------------------------------------------------ errors */

static __thread struct {
  const hpl_client *c;
  int connect; /* msg is a failed connect's (c NULL) */
  char msg[HPL__CERR_MAX];
} tls_err;

int hpl__cfail(const hpl_client *c, int code, const char *fmt, ...) {
  tls_err.c = c;
  tls_err.connect = c == NULL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_err.msg, sizeof tls_err.msg, fmt, ap);
  va_end(ap);
  return code;
}

const char *hpl__cfail_msg(void) { return tls_err.msg; }

const char *hpl_errdetail(const hpl_client *c) {
  if (!c) return tls_err.connect ? tls_err.msg : "";
  return tls_err.c == c ? tls_err.msg : "";
}

/* ------------------------------------------------------------------ handles */

int hpl_connect(const char *socket_path, int64_t timeout_ms, hpl_client **out) {
  if (!out) return HPL_EINVAL;
  if (!socket_path) socket_path = getenv(HPL_SOCKET_ENV);
  if (!socket_path || !*socket_path) return HPL_EINVAL;
  hpl_client *c = calloc(1, sizeof *c);
  if (!c) return HPL_ENOMEM;
  int rc = hpl__cstore_open(socket_path, hpl__deadline_ms(timeout_ms), &c->st);
  if (rc) {
    free(c);
    return rc;
  }
  const char *direct = getenv("HPL_DIRECT_GETS");
  if (!(direct && !strcmp(direct, "0"))) c->direct = hpl__cdirect_new(&c->st);
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return 0;
}

void hpl__cstage_drop(hpl__cstage st) {
  munmap(st.mem, st.len);
  if (st.fd >= 0) close(st.fd);
}

void hpl_close(hpl_client *c) {
  if (!c) return;
  hpl_buf *b, *tmp;
  DL_FOREACH_SAFE(c->bufs, b, tmp) {
    DL_DELETE(c->bufs, b);
    if (b->stage.len) hpl__cstage_drop(b->stage);
    free(b->own);
    free(b);
  }
  if (c->spare.len) hpl__cstage_drop(c->spare);
  hpl__casync_free(c);
  hpl__cdirect_free(c->direct);
  hpl__cstore_close(&c->st); /* the store releases what the buffers held */
  pthread_mutex_destroy(&c->lock);
  if (tls_err.c == c) tls_err.c = NULL;
  free(c);
}

void hpl_free(void *p) { free(p); }

/* ------------------------------------------------------------------ buffers */

hpl_buf *hpl__cbuf_link(hpl_client *c, hpl_buf *b, const char *id) {
  b->c = c;
  /* a plain copy: printf's machinery is a cold path to pull in for every get */
  size_t n = strnlen(id, sizeof b->id - 1);
  memcpy(b->id, id, n);
  b->id[n] = '\0';
  pthread_mutex_lock(&c->lock);
  DL_PREPEND(c->bufs, b);
  pthread_mutex_unlock(&c->lock);
  return b;
}

hpl_buf *hpl__cbuf_new(hpl_client *c, const char *id, uint64_t off, uint64_t size,
                       uint64_t handle, int created) {
  if (off > c->st.pool_size || size > c->st.pool_size - off) return NULL;
  hpl_buf *b = hpl__zalloc(sizeof *b);
  if (!b) return NULL;
  b->data = c->st.base + off;
  b->size = size;
  b->handle = handle;
  b->created = created;
  return hpl__cbuf_link(c, b, id);
}

int hpl__cstage_take(hpl_client *c, uint64_t size, hpl__cstage *out) {
  uint64_t need = (size + 4095) & ~(uint64_t)4095;
  pthread_mutex_lock(&c->lock);
  hpl__cstage st = c->spare;
  if (st.len >= need) c->spare = (hpl__cstage){.fd = -1};
  else st.len = 0;
  pthread_mutex_unlock(&c->lock);
  if (st.len) {
    if (mprotect(st.mem, need, PROT_READ | PROT_WRITE) == 0) {
      *out = st;
      return 0;
    }
    hpl__cstage_drop(st);
  }
  /* a memfd the store can map and copy from with memcpy (putcopy.h in the
   * store); sealed against shrinking, or the store would not take it */
  int fd = size >= HPL__CREATE_MEMFD_MIN
               ? memfd_create("hoplite-create", MFD_CLOEXEC | MFD_ALLOW_SEALING)
               : -1;
  if (fd >= 0 && (ftruncate(fd, (off_t)need) != 0 ||
                  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)) {
    close(fd);
    fd = -1;
  }
  void *m = fd >= 0 ? mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    if (fd >= 0) close(fd);
    return -1;
  }
  /* new pages: mapped in one call rather than one fault each (the spare's
   * are there already). An old kernel without MADV_POPULATE_WRITE just
   * faults as usual. */
  if (need >= (1u << 20)) madvise(m, need, MADV_POPULATE_WRITE);
  *out = (hpl__cstage){.mem = m, .len = need, .fd = fd};
  return 0;
}

void hpl__cstage_give(hpl_client *c, hpl__cstage st) {
  /* nobody writes it from now on: a write through an old pointer faults */
  if (mprotect(st.mem, st.len, PROT_NONE) != 0) {
    hpl__cstage_drop(st);
    return;
  }
  pthread_mutex_lock(&c->lock);
  if (c->spare.len < st.len) {
    hpl__cstage old = c->spare;
    c->spare = st;
    st = old;
  }
  pthread_mutex_unlock(&c->lock);
  if (st.len) hpl__cstage_drop(st);
}

hpl_buf *hpl__cbuf_created(hpl_client *c, const char *id, uint8_t *data, uint64_t size,
                           uint64_t handle, const hpl__cstage *st) {
  hpl_buf *b = hpl__zalloc(sizeof *b);
  if (!b) return NULL;
  b->data = data;
  b->size = size;
  b->handle = handle;
  b->created = 1;
  b->stage = st ? *st : (hpl__cstage){.fd = -1};
  return hpl__cbuf_link(c, b, id);
}

void hpl__cbuf_free(hpl_client *c, hpl_buf *b) {
  pthread_mutex_lock(&c->lock);
  DL_DELETE(c->bufs, b);
  pthread_mutex_unlock(&c->lock);
  /* a created buffer's own memory goes (or waits, unwritable, for the
   * next creation): a write through the old pointer faults */
  if (b->stage.len) hpl__cstage_give(c, b->stage);
  free(b->own);
  free(b);
}

void *hpl_buf_data(const hpl_buf *b) { return b ? b->data : NULL; }
uint64_t hpl_buf_size(const hpl_buf *b) { return b ? b->size : 0; }
const char *hpl_buf_id(const hpl_buf *b) { return b ? b->id : NULL; }
int hpl_buf_shared(const hpl_buf *b) { return b && !b->own && !b->created; }
