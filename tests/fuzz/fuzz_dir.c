/* fuzz_dir.c - libFuzzer target: a hoplite-directory in this process (no
 * secret, so bytes reach the framer and the dispatch), each input one
 * connection's bytes. Its state (nodes, objects, reduces) lives on from
 * input to input, as a long-running directory's does. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_loop.h"
#include "log.h"
#include "server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static hpl__dir_server srv;
static uv_loop_t *loop;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  hpl__log_setup("fuzz-dir", getenv("HPL_FUZZ_LOG") ? HPL__LOG_DEBUG : -1);
  loop = uv_default_loop();
  hpl__dir_config cfg;
  hpl__dir_config_defaults(&cfg);
  cfg.listen_port = 0;
  cfg.inline_memory = 16u << 20; /* what inputs may pile up inline */
  if (hpl__dir_server_start(&srv, loop, &cfg) != 0) abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd;
  uv_stream_t *t = fuzz_pair(loop, &fd);
  hpl__dir_server_serve(&srv, t, "fuzz");
  fuzz_feed(loop, fd, data, size);
  return 0;
}
