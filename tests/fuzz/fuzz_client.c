/* fuzz_client.c - libFuzzer target: the client library's reading of what a
 * store (or the directory) sends back: the RPC layer's framing and reply
 * matching (src/client/crpc.c) and the unpacking of every reply type the library
 * asks for, and the tickets nobody waits on (crpc_async.c: the ready list,
 * reading without waiting, forgetting). The input is the whole byte stream from the peer, which reads
 * and drops whatever the library sends it (its requests, and the RELEASE of
 * an orphaned hold), as a store does. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "crpc.h"
#include "hoplite.h"
#include "proto.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The calls the library makes, in order; their replies must echo ids 1.. */
static const unsigned calls[] = {HPL__MSG_GET,      HPL__MSG_CREATE,   HPL__MSG_LIST,
                                 HPL__MSG_COUNTERS, HPL__MSG_TRANSFERS, HPL__MSG_REDUCE_INFO,
                                 HPL__MSG_STAT,     HPL__MSG_PEEK,     HPL__MSG_SEAL};

/* The peer's reading: everything until the library closes its end. */
static void *drain(void *arg) {
  int fd = *(int *)arg;
  uint8_t sink[65536];
  while (read(fd, sink, sizeof sink) > 0) {
  }
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 200000) return 0; /* must fit the socket buffer */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
  int sndbuf = 1 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  size_t off = 0;
  while (off < size) {
    ssize_t w = send(sv[1], data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0) break;
    off += (size_t)w;
  }
  shutdown(sv[1], SHUT_WR);
  pthread_t reader;
  if (pthread_create(&reader, NULL, drain, &sv[1]) != 0) abort();
  hpl__crpc_opts o = {.lim = {.max_msg = HPL__MAX_MSG_CTRL, .max_payload = 65536,
                              .max_type = HPL__MSG_MAX_}};
  hpl__crpc *r;
  if (hpl__crpc_new(sv[0], &o, &r) != 0) abort();
  uint64_t deadline = hpl__now_ms() + 50;
  hpl__crpc_msg m;
  if (hpl__crpc_greeting(r, deadline, &m) == 0) { /* a store's HELLO */
    Hplpb__Hello *h = (Hplpb__Hello *)hpl__crpc_msg_unpack(&m, HPL__MSG_HELLO);
    /* a refusal (status, detail: too many clients, not this user) is read
     * as hpl__cstore_open does */
    if (h && h->status) { /* read as hpl__cstore_open reads it */
      int rc = h->status < 0 && h->status >= HPL_ETOOMANY ? h->status : HPL_EPROTO;
      size_t dl = h->detail ? strlen(h->detail) : 0;
      if (!hpl_strerror(rc) || dl > HPL__MAX_MSG_CTRL) abort();
    }
    if (h) protobuf_c_message_free_unpacked(&h->base, NULL);
    int fds[HPL__CRPC_MAX_FDS];
    int n = hpl__crpc_take_fds(r, fds, HPL__CRPC_MAX_FDS);
    for (int i = 0; i < n; i++) close(fds[i]);
    hpl__crpc_msg_free(&m);
  }
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
    if (hpl__crpc_call(r, calls[i], NULL, deadline, &m) != 0) continue;
    unsigned want = hpl__msg_reply_type(calls[i]);
    ProtobufCMessage *rep = hpl__crpc_msg_unpack(&m, m.type == want ? want : HPL__MSG_REPLY);
    if (rep) {
      const char *detail;
      (void)hpl__msg_status(rep, &detail);
      protobuf_c_message_free_unpacked(rep, NULL);
    }
    hpl__crpc_msg_free(&m);
  }
  /* async tickets (ids after the calls'): read without waiting until the
   * stream ends or the deadline; odd ones taken as they become ready, even
   * ones forgotten first (their replies dropped as orphans) */
  enum { NA = 6 };
  hpl__crpc_req reqs[NA];
  void *users[NA];
  hpl__crpc_ticket *ts[NA];
  for (size_t i = 0; i < NA; i++) {
    reqs[i] = (hpl__crpc_req){.type = calls[i]};
    users[i] = (void *)(uintptr_t)(i + 1);
  }
  size_t started = 0, left = 0;
  hpl__crpc_start_async(r, reqs, NA, deadline, users, ts, &started);
  for (size_t i = 0; i < started; i++) {
    if (i % 2 == 0) hpl__crpc_forget(r, ts[i]), ts[i] = NULL;
    else left++;
  }
  while (left && hpl__ms_left(deadline) != 0) {
    int broken = hpl__crpc_pump(r, 4) != 0;
    void *u[NA];
    size_t k = hpl__crpc_ready(r, u, NA);
    for (size_t j = 0; j < k; j++) {
      size_t i = (uintptr_t)u[j] - 1;
      if (i >= started || !ts[i]) abort();
      if (hpl__crpc_finish(r, ts[i], 0, &m) == 0) hpl__crpc_msg_free(&m);
      ts[i] = NULL;
      left--;
    }
    if (broken) break;
  }
  for (size_t i = 0; i < started; i++) { /* broken: finishing returns at once */
    if (!ts[i]) continue;
    if (!hpl__crpc_broken(r)) hpl__crpc_forget(r, ts[i]);
    else if (hpl__crpc_finish(r, ts[i], 0, &m) == 0) hpl__crpc_msg_free(&m);
  }
  hpl__crpc_free(r); /* closes sv[0]: the reader sees the end */
  pthread_join(reader, NULL);
  close(sv[1]);
  return 0;
}
