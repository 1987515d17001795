/* fuzz_store.c - libFuzzer target: a hoplite-store in this process (no
 * directory reachable, no secret), each input one connection's bytes: the
 * first byte says whether to its client socket (HELLO first, then
 * requests) or to its data port, and (bit 1) whether the store is full for
 * a client then: it refuses it with a HELLO saying why (status, detail:
 * its user's clients, bit 2 clear, or all clients over the limit), as when
 * one user's programs hold every slot. An input that opens with a
 * handshake HELLO ("HPLA", auth.h) goes to the data port of a second store
 * that holds a node credential (`hoplite secret --node`): the HELLO's role
 * and name are proven as a genuine peer would, so only DATA gets through
 * (fuzz_feed_authed), and the frames after it are tagged. The stores'
 * objects live on from input to input; one local client of the first
 * stays connected throughout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clients.h"
#include "dataport.h"
#include "fuzz_loop.h"
#include "log.h"
#include "server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static hpl__store st, ast; /* without a secret; with node fuzz-store's credential */
static hpl__auth secret;  /* the cluster's: what a genuine peer derives its key from */
static uv_loop_t *loop;
static int held_fd = -1; /* a local client of this process's user, connected throughout */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  hpl__log_setup("fuzz-store", getenv("HPL_FUZZ_LOG") ? HPL__LOG_DEBUG : -1);
  loop = uv_default_loop();
  hpl__store_config cfg;
  hpl__store_config_defaults(&cfg);
  static char dir[] = "/tmp/hpl-fuzz-XXXXXX";
  if (!mkdtemp(dir)) abort();
  snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s/store.sock", dir);
  snprintf(cfg.dir_host, sizeof cfg.dir_host, "127.0.0.1");
  cfg.dir_port = 1; /* nobody: requests to the directory wait, then time out */
  snprintf(cfg.data_host, sizeof cfg.data_host, "127.0.0.1");
  cfg.memory = 64u << 20;
  if (hpl__store_start(&st, loop, &cfg) != 0) abort();
  uv_stream_t *t = fuzz_pair(loop, &held_fd);
  hpl__clients_serve(&st, t);
  char sp[512], cp[512], err[256];
  snprintf(sp, sizeof sp, "%s/secret", dir);
  snprintf(cp, sizeof cp, "%s/fuzz-store.cred", dir);
  if (hpl__auth_create(sp, err, sizeof err) != 0 || hpl__auth_load(sp, &secret, err, sizeof err) ||
      hpl__auth_write_node(&secret, "fuzz-store", cp, err, sizeof err) != 0 ||
      hpl__auth_load(cp, &cfg.auth, err, sizeof err) != 0)
    abort();
  unlink(sp);
  unlink(cp);
  snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s/astore.sock", dir);
  cfg.memory = 16u << 20;
  if (hpl__store_start(&ast, loop, &cfg) != 0) abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int fd;
  uv_stream_t *t = fuzz_pair(loop, &fd);
  if (size >= HPL__AUTH_HELLO_LEN && !memcmp(data, "HPLA", 4)) {
    hpl__dataport_serve(&ast, t);
    fuzz_feed_authed(loop, fd, &secret, data, size);
    return 0;
  }
  uint32_t uid_max = st.cfg.max_uid_clients, conn_max = st.cfg.max_conns;
  if (data[0] & 1) {
    hpl__dataport_serve(&st, t);
  } else {
    if ((data[0] & 6) == 2) st.cfg.max_uid_clients = 1; /* held_fd has the one */
    if ((data[0] & 6) == 6) st.cfg.max_conns = 1;
    hpl__clients_serve(&st, t);
    st.cfg.max_uid_clients = uid_max;
    st.cfg.max_conns = conn_max;
  }
  fuzz_feed(loop, fd, data + 1, size - 1);
  uint8_t sink[4096]; /* what the store sent the held client (its HELLO) */
  while (recv(held_fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  return 0;
}
