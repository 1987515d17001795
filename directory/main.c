/* main.c - hoplite-directory command line. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "directory.h"
#include "hoplite.h"
#include "log.h"
#include "util.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: hoplite-directory [options]\n"
          "  --listen HOST:PORT        address to listen on (default 0.0.0.0:7700; port 0 picks one)\n"
          "  --port-file PATH          write the bound port to PATH once listening\n"
          "  --inline-max BYTES        objects up to this size are held inline (default 64K)\n"
          "  --inline-memory BYTES     cap on all inline bytes (default 1G)\n"
          "  --max-senders N           receivers one copy may serve at once (default 1)\n"
          "  --heartbeat-ms MS         heartbeat interval stores use (default 500)\n"
          "  --heartbeat-timeout-ms MS node declared dead after this silence (default 3000)\n"
          "  --reduce-latency-us US|auto   reduce cost model: per-hop latency (default 200;\n"
          "                            auto: half the heartbeat round trip stores measure)\n"
          "  --reduce-bandwidth BYTES|auto reduce cost model: link bandwidth per second\n"
          "                            (default 125M; auto: the rate of recent pulls)\n"
          "  --log-level LEVEL         error|warn|info|debug (default info)\n"
          "  --help\n");
}

static int parse_u32(const char *s, uint32_t *out) {
  uint64_t v;
  if (hpl__parse_size(s, &v) || v > UINT32_MAX) return -1;
  *out = (uint32_t)v;
  return 0;
}

int main(int argc, char **argv) {
  dir_config cfg;
  dir_config_defaults(&cfg);
  int level = HPL__LOG_INFO;
  static struct option opts[] = {{"listen", 1, 0, 'l'},
                                 {"port-file", 1, 0, 'p'},
                                 {"inline-max", 1, 0, 'i'},
                                 {"inline-memory", 1, 0, 'I'},
                                 {"max-senders", 1, 0, 's'},
                                 {"heartbeat-ms", 1, 0, 'h'},
                                 {"heartbeat-timeout-ms", 1, 0, 't'},
                                 {"reduce-latency-us", 1, 0, 'L'},
                                 {"reduce-bandwidth", 1, 0, 'B'},
                                 {"log-level", 1, 0, 'v'},
                                 {"help", 0, 0, 'H'},
                                 {0, 0, 0, 0}};
  int ch, idx = 0;
  uint64_t v;
  while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
    int bad = 0;
    switch (ch) {
      case 'l':
        bad = hpl__parse_hostport(optarg, "0.0.0.0", cfg.listen_host, sizeof cfg.listen_host,
                                 &cfg.listen_port);
        break;
      case 'p': cfg.port_file = optarg; break;
      case 'i': bad = parse_u32(optarg, &cfg.inline_max); break;
      case 'I': bad = hpl__parse_size(optarg, &cfg.inline_memory); break;
      case 's': bad = parse_u32(optarg, &cfg.max_senders) || cfg.max_senders == 0; break;
      case 'h': bad = parse_u32(optarg, &cfg.heartbeat_ms) || cfg.heartbeat_ms == 0; break;
      case 't': bad = parse_u32(optarg, &cfg.heartbeat_timeout_ms); break;
      case 'L':
        if (!strcmp(optarg, "auto")) {
          cfg.latency_auto = 1;
          break;
        }
        bad = hpl__parse_size(optarg, &v);
        cfg.reduce_latency_s = (double)v * 1e-6;
        break;
      case 'B':
        if (!strcmp(optarg, "auto")) {
          cfg.bandwidth_auto = 1;
          break;
        }
        bad = hpl__parse_size(optarg, &v) || v == 0;
        cfg.reduce_bandwidth = (double)v;
        break;
      case 'v': bad = (level = hpl__log_level_parse(optarg)) < 0; break;
      case 'H': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
    if (bad) {
      fprintf(stderr, "hoplite-directory: bad value for --%s: '%s'\n", opts[idx].name, optarg);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "hoplite-directory: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (cfg.heartbeat_timeout_ms < 2 * cfg.heartbeat_ms) {
    fprintf(stderr, "hoplite-directory: --heartbeat-timeout-ms must be at least twice --heartbeat-ms\n");
    return 2;
  }
  if (cfg.inline_max > (16u << 20)) {
    fprintf(stderr, "hoplite-directory: --inline-max is limited to 16M\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  hpl__log_setup("directory", level);
  uv_loop_t *loop = uv_default_loop();
  dir_server s;
  if (dir_server_start(&s, loop, &cfg) != 0) return 1;
  uv_run(loop, UV_RUN_DEFAULT);
  dir_reduce_free_all(&s);
  dtab_clear(&s.tab);
  for (size_t i = 0; i < DIR_XFER_CAP; i++) free(s.xlog[i].id);
  free(s.xlog);
  dir_node *n, *tmp;
  HASH_ITER(hh, s.nodes, n, tmp) {
    HASH_DEL(s.nodes, n);
    free(n);
  }
  uv_loop_close(loop);
  LOG_INFO("stopped");
  return 0;
}
