/* cstore.c - opening a client's connection to its store: socket, HELLO,
 * pool and presence-filter mappings (see cstore.h). */
#include "cstore.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "cwait.h"
#include "hoplite.h"
#include "util.h"

#define FILTER_MAX_SLOTS (1u << 24)
/* At most this many chunks (the store's HPL__POOL_MAX_CHUNKS) and this
 * long to wait for a chunk the store says it sent. */
#define CHUNKS_MAX 128
#define CHUNK_WAIT_MS 10000
#define CHUNK_POLL_MS 10 /* hpl__cstore_poll reads the channel at most this often */
/* The send buffer asked for on the store connection: hpl_put_many's
 * 7 x 64 KiB (a shuffle's partitions, sent whole) fit at once, where the
 * default 208 KiB took three rounds of writing and waking. 8-host 64 KiB
 * shuffle at 1 Gbit/s, 2 cores, alternating rounds of 2026-12-03: 3.5-8.5 %
 * faster with SHA-256 (4 rounds), 6-15 % with digests off (6 rounds). */
#define CLIENT_STORE_SNDBUF (2 << 20)

/* The pool's chunks as this client maps them. */
typedef struct hpl__cchunks {
  pthread_mutex_t mu; /* the channel and gen[] */
  int chan;           /* the chunk channel (SOCK_SEQPACKET) */
  uint64_t chunk;     /* bytes per chunk */
  size_t n;
  uint32_t gen[CHUNKS_MAX]; /* the generation mapped (0: none) */
  uint64_t polled_ms;       /* when hpl__cstore_poll last read the channel (atomic) */
  int mapped;               /* some chunk was ever mapped (atomic): before that,
                               there is nothing the channel could renew */
} hpl__cchunks;

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

/* The store copies this process's puts out of its memory (putcopy.h in
 * the store), which the kernel allows a process of the same user; under
 * Yama's ptrace_scope 1 only if this process names it as its tracer, as
 * here (a no-op without Yama; the last store connected to is the one). */
static void let_store_read(int fd) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.pid > 0)
    prctl(PR_SET_PTRACER, (unsigned long)cr.pid, 0, 0, 0);
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

/* Take the HELLO's facts and map what it sent. Takes chan and ffd.
 * 0, HPL_EPROTO or HPL_ESYS. */
static int from_hello(hpl__cstore *s, const Hplpb__Hello *h, int chan, int ffd) {
  uint64_t nch = h->pool_chunk ? (h->pool_size + h->pool_chunk - 1) / h->pool_chunk : 0;
  if (chan < 0 || h->pool_size == 0 || nch == 0 || nch > CHUNKS_MAX) {
    if (chan >= 0) close(chan);
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
    s->dir_term = h->dir_term;
  }
  if (h->node_name && strlen(h->node_name) < sizeof s->node_name)
    strcpy(s->node_name, h->node_name);
  if (h->reader_key.len == sizeof s->reader_key) {
    memcpy(s->reader_key, h->reader_key.data, sizeof s->reader_key);
    s->have_reader_key = 1;
  } else if (h->reader_key.len) {
    s->dir_port = 0; /* a key we cannot use: no direct reads */
  }
  s->chunks = calloc(1, sizeof *s->chunks);
  /* the range only: chunks are mapped into it as replies name them */
  s->base = s->chunks ? mmap(NULL, s->pool_size, PROT_NONE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                      : MAP_FAILED;
  if (s->base == MAP_FAILED) {
    s->base = NULL;
    free(s->chunks);
    s->chunks = NULL;
    close(chan);
    if (ffd >= 0) close(ffd);
    return HPL_ESYS;
  }
  pthread_mutex_init(&s->chunks->mu, NULL);
  s->chunks->chan = chan;
  s->chunks->chunk = h->pool_chunk;
  s->chunks->n = (size_t)nch;
  map_filter(s, ffd, h->filter_slots);
  return 0;
}

/* Read one message of the chunk channel (waiting up to CHUNK_WAIT_MS, or
 * not at all unless `wait`) and map the chunks it carries. Called with mu
 * held. 0, 1 (nothing there and not `wait`), or HPL_EPROTO. */
static int chunks_read(hpl__cstore *s, int wait, char *why, size_t wlen) {
  hpl__cchunks *k = s->chunks;
  int pr = hpl__cwait_poll(k->chan, POLLIN, hpl__deadline_ms(wait ? CHUNK_WAIT_MS : 0));
  if (pr == 0 && !wait) return 1;
  if (pr <= 0) {
    snprintf(why, wlen, "the store did not send the pool's memory it named (%s)",
             pr == 0 ? "nothing on the chunk channel" : strerror(errno));
    return HPL_EPROTO;
  }
  uint32_t msg[1 + 2 * CHUNKS_MAX];
  char cbuf[CMSG_SPACE(sizeof(int) * CHUNKS_MAX)];
  struct iovec iov = {.iov_base = msg, .iov_len = sizeof msg};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                      .msg_controllen = sizeof cbuf};
  /* poll said a message is there, and mu keeps other threads off the
   * channel: this never waits */
  ssize_t got = recvmsg(k->chan, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  int fds[CHUNKS_MAX];
  size_t nfd = 0;
  for (struct cmsghdr *cm = got > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t m = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < m && nfd < CHUNKS_MAX; i++)
      memcpy(&fds[nfd++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
  }
  int rc = 0;
  if (got < 4 || msg[0] != nfd || (size_t)got != (1 + 2 * (size_t)msg[0]) * sizeof *msg ||
      (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    snprintf(why, wlen, "a malformed message on the chunk channel (%zd bytes, %zu descriptors)",
             got, nfd);
    rc = HPL_EPROTO;
  }
  for (size_t i = 0; i < nfd; i++) {
    uint32_t c = rc ? 0 : msg[1 + 2 * i];
    if (!rc && c >= k->n) {
      snprintf(why, wlen, "chunk %u named on the chunk channel is past the pool", c);
      rc = HPL_EPROTO;
    }
    if (!rc) {
      uint64_t at = (uint64_t)c * k->chunk;
      uint64_t len = s->pool_size - at < k->chunk ? s->pool_size - at : k->chunk;
      /* read-only: the memfd is sealed against writable mappings anyway */
      if (mmap(s->base + at, len, PROT_READ, MAP_SHARED | MAP_FIXED, fds[i], 0) == MAP_FAILED) {
        snprintf(why, wlen, "cannot map chunk %u of the pool: %s", c, strerror(errno));
        rc = HPL_EPROTO;
      } else {
        k->gen[c] = msg[2 + 2 * i];
        __atomic_store_n(&k->mapped, 1, __ATOMIC_RELAXED);
      }
    }
    close(fds[i]);
  }
  return rc;
}

void hpl__cstore_poll(hpl__cstore *s) {
  hpl__cchunks *k = s->chunks;
  char why[200];
  /* a client that never mapped a chunk (its gets all came from the
   * directory whole) has nothing to renew: no syscall */
  if (!k || !__atomic_load_n(&k->mapped, __ATOMIC_RELAXED)) return;
  /* at most every CHUNK_POLL_MS: a syscall per get and release is a tenth
   * of a small get's CPU, and pages given back can wait that long */
  uint64_t now = hpl__now_ms();
  if (now - __atomic_load_n(&k->polled_ms, __ATOMIC_RELAXED) < CHUNK_POLL_MS) return;
  if (pthread_mutex_trylock(&k->mu) != 0) return; /* another thread reads it */
  __atomic_store_n(&k->polled_ms, now, __ATOMIC_RELAXED);
  while (chunks_read(s, 0, why, sizeof why) == 0) continue;
  pthread_mutex_unlock(&k->mu);
}

int hpl__cstore_map(hpl__cstore *s, uint64_t off, uint64_t size, const uint32_t *gens,
                    size_t ngens, char *why, size_t wlen) {
  hpl__cchunks *k = s->chunks;
  if (size == 0) return 0;
  if (!k || off > s->pool_size || size > s->pool_size - off) {
    snprintf(why, wlen, "store returned a region outside the pool");
    return HPL_EPROTO;
  }
  size_t first = (size_t)(off / k->chunk), last = (size_t)((off + size - 1) / k->chunk);
  if (ngens != last - first + 1) {
    snprintf(why, wlen, "store named %zu chunk generations for a region in %zu chunks", ngens,
             last - first + 1);
    return HPL_EPROTO;
  }
  int rc = 0;
  pthread_mutex_lock(&k->mu);
  for (size_t c = first; c <= last && rc == 0; c++) {
    while (rc == 0 && k->gen[c] < gens[c - first]) rc = chunks_read(s, 1, why, wlen);
    if (rc == 0 && k->gen[c] != gens[c - first]) { /* a held object's chunk never changes */
      snprintf(why, wlen, "chunk %zu of the pool is at generation %u here, the store says %u", c,
               k->gen[c], gens[c - first]);
      rc = HPL_EPROTO;
    }
  }
  pthread_mutex_unlock(&k->mu);
  return rc;
}

int hpl__cstore_open(const char *path, uint64_t deadline, hpl__cstore *out) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) return HPL_EINVAL;
  strcpy(a.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return HPL_ESYS;
  /* a batch of whole PUTs goes out in one write rather than a socket
   * buffer at a time, each a wake-up of the store and then of this
   * process (the kernel caps it at net.core.wmem_max, and doubles it) */
  int sndbuf = CLIENT_STORE_SNDBUF;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  int rc = connect_until(fd, &a, deadline);
  if (rc) {
    close(fd);
    return rc;
  }
  let_store_read(fd);
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
    /* a store that refuses this client says why (too many clients, not its
     * user or group) instead of just closing */
    else if (h->status) rc = h->status < 0 && h->status >= HPL_ETOOMANY ? h->status : HPL_EPROTO;
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
  if (s->chunks) {
    close(s->chunks->chan);
    pthread_mutex_destroy(&s->chunks->mu);
    free(s->chunks);
  }
  memset(s, 0, sizeof *s);
}
