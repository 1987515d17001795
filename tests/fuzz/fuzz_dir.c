/* fuzz_dir.c - libFuzzer target: hoplite-directories in this process, each
 * input one connection's bytes. An input that opens with a handshake HELLO
 * ("HPLA", auth.h) goes to a directory holding a secret: the HELLO's role
 * and node name are proven as a genuine peer would (fuzz_feed_authed), so
 * the name checks, the roles (NODE, READER, ADMIN; DATA is refused) and
 * what each may do (REGISTER bound to the name, PUBLISH for its own node,
 * DELETE by the maker) are reached; a live node, "fuzz-maker", made
 * "fuzz/made" there and stays connected, so another node's DELETE of it is
 * refused and a NODE connection under its name is a takeover. Any other
 * input goes to a directory without a secret (bytes reach the framer and
 * the dispatch). Their state (nodes, objects, reduces) lives on from input
 * to input, as a long-running directory's does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_loop.h"
#include "log.h"
#include "proto.h"
#include "server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAKER_ID 0x6d616b6572ull /* "maker" */

static hpl__dir_server srv, asrv; /* without and with a secret */
static uv_loop_t *loop;
static int maker_fd = -1;
static hpl__fmac maker_tx; /* the maker's session (64-byte aligned) */

/* One frame of `type` from the maker (tagged), with plen bytes of payload. */
static void maker_send(unsigned type, uint64_t req, const ProtobufCMessage *m, const void *payload,
                       uint64_t plen) {
  size_t len, n;
  uint8_t *f = hpl__msg_frame(type, req, m, plen, &len);
  uint8_t *all = f ? malloc(len + plen + 1) : NULL;
  if (!all) abort();
  memcpy(all, f, len);
  if (plen) memcpy(all + len, payload, plen);
  uint8_t *tagged = fuzz_tag_frames(&maker_tx, all, len + plen, &n);
  if (!tagged || send(maker_fd, tagged, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n) abort();
  free(tagged);
  free(all);
  free(f);
}

/* What the directory sent the maker, read and dropped; 0 once it closed. */
static int maker_drain(void) {
  uint8_t sink[65536];
  for (;;) {
    ssize_t n = recv(maker_fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

/* The maker as a store would be: NODE "fuzz-maker" on the authenticated
 * directory, registered, the maker of "fuzz/made" (LOC_ADD origin) and of
 * "fuzz/made-inline" (INLINE_PUT). */
static void maker_open(void) {
  int fd;
  uv_stream_t *t = fuzz_pair(loop, &fd);
  hpl__dir_server_serve(&asrv, t, "fuzz");
  maker_fd = fd;
  hpl__auth_hs hs;
  uint8_t hello[HPL__AUTH_HELLO_LEN], chal[HPL__AUTH_CHALLENGE_LEN], proof[HPL__AUTH_PROOF_LEN];
  uint8_t rk[HPL__AUTH_KEY_LEN];
  hpl__auth_open(&hs, HPL__ROLE_NODE, "fuzz-maker", 0, hello);
  hpl__auth_keys k;
  if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello ||
      fuzz_read(loop, fd, chal, sizeof chal) != 0 ||
      hpl__auth_key(&asrv.cfg.auth, HPL__ROLE_NODE, "fuzz-maker", rk) != 0 ||
      hpl__auth_answer(&hs, rk, chal, proof) != 0 ||
      send(fd, proof, sizeof proof, MSG_NOSIGNAL) != (ssize_t)sizeof proof)
    abort();
  hpl__auth_session(&hs, rk, 1, &k);
  hpl__fmac_init_as(&maker_tx, k.send, k.gmac);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = MAKER_ID;
  r.addr = "fuzz"; /* the host fuzz connections come from: its readers may publish */
  r.data_port = 9;
  r.name = "fuzz-maker";
  maker_send(HPL__MSG_REGISTER, 1, &r.base, NULL, 0);
  for (int i = 0; i < 50; i++) uv_run(loop, UV_RUN_NOWAIT);
  Hplpb__InlinePutReq ip = HPLPB__INLINE_PUT_REQ__INIT;
  ip.id = "fuzz/made-inline";
  ip.size = 5;
  maker_send(HPL__MSG_INLINE_PUT, 2, &ip.base, "bytes", 5);
}

/* "fuzz/made" is the maker's again (an input may have deleted it). */
static void maker_remake(void) {
  if (maker_fd >= 0 && !maker_drain()) {
    close(maker_fd); /* the directory cut it: a new one */
    maker_fd = -1;
  }
  if (maker_fd < 0) maker_open();
  Hplpb__LocAddReq a = HPLPB__LOC_ADD_REQ__INIT;
  a.id = "fuzz/made";
  a.size = 1000;
  a.complete = 1;
  a.origin = 1;
  maker_send(HPL__MSG_LOC_ADD, 3, &a.base, NULL, 0);
  for (int i = 0; i < 4; i++) uv_run(loop, UV_RUN_NOWAIT);
  (void)maker_drain();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  hpl__log_setup("fuzz-dir", getenv("HPL_FUZZ_LOG") ? HPL__LOG_DEBUG : -1);
  loop = uv_default_loop();
  hpl__dir_config cfg;
  hpl__dir_config_defaults(&cfg);
  cfg.listen_port = 0;
  cfg.inline_memory = 16u << 20; /* what inputs may pile up inline */
  if (hpl__dir_server_start(&srv, loop, &cfg) != 0) abort();
  /* the second one holds a fixed secret; its nodes are never swept (the
   * maker sends no heartbeats) */
  char path[] = "/tmp/hpl-fuzz-secret-XXXXXX", err[256];
  int fd = mkstemp(path);
  const char *hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
  if (fd < 0 || fchmod(fd, 0600) != 0 || write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex))
    abort();
  close(fd);
  if (hpl__auth_load(path, &cfg.auth, err, sizeof err) != 0) abort();
  unlink(path);
  cfg.heartbeat_ms = 1u << 28;
  cfg.heartbeat_timeout_ms = 1u << 30;
  cfg.probe_ms = 60000;
  if (hpl__dir_server_start(&asrv, loop, &cfg) != 0) abort();
  maker_open();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd;
  int authed = size >= HPL__AUTH_HELLO_LEN && !memcmp(data, "HPLA", 4);
  if (authed) maker_remake();
  uv_stream_t *t = fuzz_pair(loop, &fd);
  hpl__dir_server_serve(authed ? &asrv : &srv, t, "fuzz");
  if (authed)
    fuzz_feed_authed(loop, fd, &asrv.cfg.auth, data, size);
  else
    fuzz_feed(loop, fd, data, size);
  return 0;
}
