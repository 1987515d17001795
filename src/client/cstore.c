/* cstore.c - opening a client's connection to its store: socket, HELLO,
 * pool and presence-filter mappings (see cstore.h). */
#include "cstore.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "hoplite.h"
#include "util.h"

#define FILTER_MAX_SLOTS (1u << 24)

/* What the store may send a client: small control replies, no payloads. */
static const hpl__crpc_opts store_rpc = {
    .lim = {.max_msg = HPL__MAX_MSG_CTRL, .max_payload = 0, .max_type = HPL__MSG_MAX_}};

/* connect(2) to a Unix socket, waiting at most until the deadline when the
 * listener's backlog is full. The socket is returned to blocking writes
 * without a timeout afterwards. 0, HPL_ECONN or HPL_ETIMEDOUT. */
static int connect_until(int fd, const struct sockaddr_un *a, uint64_t deadline) {
  int64_t left = hpl__ms_left(deadline);
  struct timeval tv = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
  if (left == 0) return HPL_ETIMEDOUT;
  if (left > 0) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int rc = connect(fd, (const struct sockaddr *)a, sizeof *a);
  int err = errno;
  if (left > 0) {
    struct timeval none = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
  }
  if (rc == 0) return 0;
  return err == EAGAIN || err == EINPROGRESS ? HPL_ETIMEDOUT : HPL_ECONN;
}

/* Map the presence filter if the HELLO described a sane one; without it
 * every get goes to the store. Takes ffd. */
static void map_filter(hpl__cstore *s, int ffd, uint32_t slots) {
  struct stat st;
  if (ffd >= 0 && slots && slots <= FILTER_MAX_SLOTS && (slots & (slots - 1)) == 0 &&
      fstat(ffd, &st) == 0 && st.st_size >= (off_t)slots) {
    void *f = mmap(NULL, slots, PROT_READ, MAP_SHARED, ffd, 0);
    if (f != MAP_FAILED) {
      s->filter = f;
      s->filter_slots = slots;
    }
  }
  if (ffd >= 0) close(ffd);
}

/* Take the HELLO's facts and map what it sent. Takes memfd and ffd.
 * 0, HPL_EPROTO or HPL_ESYS. */
static int from_hello(hpl__cstore *s, const Hplpb__Hello *h, int memfd, int ffd) {
  if (memfd < 0 || h->pool_size == 0) {
    if (memfd >= 0) close(memfd);
    if (ffd >= 0) close(ffd);
    return HPL_EPROTO;
  }
  s->pool_size = h->pool_size;
  s->node_id = h->node_id;
  s->inline_max = h->inline_max;
  if (h->dir_addr && strlen(h->dir_addr) < sizeof s->dir_addr && h->dir_port &&
      h->dir_port <= 65535) {
    strcpy(s->dir_addr, h->dir_addr);
    s->dir_port = (int)h->dir_port;
    s->netns = h->netns;
    s->dir_publish = h->dir_publish;
  }
  if (h->reader_key.len == sizeof s->reader_key) {
    memcpy(s->reader_key, h->reader_key.data, sizeof s->reader_key);
    s->have_reader_key = 1;
  } else if (h->reader_key.len) {
    s->dir_port = 0; /* a key we cannot use: no direct reads */
  }
  s->base = mmap(NULL, s->pool_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  close(memfd);
  if (s->base == MAP_FAILED) {
    s->base = NULL;
    if (ffd >= 0) close(ffd);
    return HPL_ESYS;
  }
  map_filter(s, ffd, h->filter_slots);
  return 0;
}

int hpl__cstore_open(const char *path, uint64_t deadline, hpl__cstore *out) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) return HPL_EINVAL;
  strcpy(a.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return HPL_ESYS;
  int rc = connect_until(fd, &a, deadline);
  if (rc) {
    close(fd);
    return rc;
  }
  hpl__cstore s = {0};
  rc = hpl__crpc_new(fd, &store_rpc, &s.rpc);
  if (rc) return rc;
  /* HELLO: its first bytes come with the pool's memfd (and the filter's) */
  hpl__crpc_msg m;
  rc = hpl__crpc_greeting(s.rpc, deadline, &m);
  if (rc == HPL_ECONN) rc = HPL_EPROTO; /* closed or garbage: no store there */
  Hplpb__Hello *h = NULL;
  if (rc == 0) {
    if (m.type == HPL__MSG_HELLO)
      h = (Hplpb__Hello *)hpl__crpc_msg_unpack(&m, HPL__MSG_HELLO);
    hpl__crpc_msg_free(&m);
    if (!h) rc = HPL_EPROTO;
  }
  if (rc == 0) {
    int fds[2] = {-1, -1};
    hpl__crpc_take_fds(s.rpc, fds, 2);
    rc = from_hello(&s, h, fds[0], fds[1]);
  }
  if (h) protobuf_c_message_free_unpacked(&h->base, NULL);
  if (rc) {
    hpl__crpc_free(s.rpc);
    return rc;
  }
  *out = s;
  return 0;
}

void hpl__cstore_close(hpl__cstore *s) {
  hpl__crpc_free(s->rpc);
  if (s->filter) munmap((void *)s->filter, s->filter_slots);
  if (s->base) munmap(s->base, s->pool_size);
  memset(s, 0, sizeof *s);
}
