/* main.c - hoplite-store command line. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hoplite.h"
#include "log.h"
#include "store.h"
#include "util.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: hoplite-store --directory HOST:PORT [options]\n"
          "  --directory HOST:PORT   the cluster's hoplite-directory (required)\n"
          "  --socket PATH           Unix socket for local clients\n"
          "                          (default $HOPLITE_SOCKET or /tmp/hoplite-UID/store.sock)\n"
          "  --memory BYTES          shared-memory pool size (default 2G; K/M/G suffixes)\n"
          "  --data-listen HOST:PORT data port bind address (default 0.0.0.0:0)\n"
          "  --data-addr ADDR        address peers use to reach the data port\n"
          "                          (default: this host's address towards the directory)\n"
          "  --name NAME             node name in logs and listings\n"
          "  --ready-file PATH       write the data port to PATH once registered\n"
          "  --chunk BYTES           largest write of a data stream (default 4M)\n"
          "  --stall-timeout-ms MS   a pull that delivers nothing this long goes to another\n"
          "                          sender, keeping its bytes (default 10000; 0: off)\n"
          "  --straggler-ratio R     a complete sender delivering below R x this node's usual\n"
          "  --straggler-ms MS       rate for MS is replaced the same way (default 0.2, 3000;\n"
          "                          ratio 0: off); a partial sender that crawls so is left\n"
          "                          only for an idle complete copy, when there is one\n"
          "  --grace-ms MS           SIGTERM: finish serving streams for up to MS, then leave\n"
          "                          (default 5000; SIGINT leaves at once)\n"
          "  --faults SPEC           fault points for tests (also $HOPLITE_FAULTS):\n"
          "                          crash_after=N,drop_after=N,stall_after=N,slow_send=BPS,\n"
          "                          hb_pause=AT_MS:LEN_MS,prefix=ID_PREFIX,to_node=HEX_ID\n"
          "  --prefault              populate the pool's pages at start\n"
          "  --log-level LEVEL       error|warn|info|debug (default info)\n"
          "  --help\n");
}

int main(int argc, char **argv) {
  store_config cfg;
  store_config_defaults(&cfg);
  int level = HPL__LOG_INFO;
  int have_dir = 0;
  static struct option opts[] = {{"directory", 1, 0, 'd'},
                                 {"socket", 1, 0, 's'},
                                 {"memory", 1, 0, 'm'},
                                 {"data-listen", 1, 0, 'l'},
                                 {"data-addr", 1, 0, 'a'},
                                 {"name", 1, 0, 'n'},
                                 {"ready-file", 1, 0, 'r'},
                                 {"chunk", 1, 0, 'c'},
                                 {"stall-timeout-ms", 1, 0, 't'},
                                 {"prefault", 0, 0, 'P'},
                                 {"straggler-ratio", 1, 0, 'R'},
                                 {"straggler-ms", 1, 0, 'S'},
                                 {"grace-ms", 1, 0, 'g'},
                                 {"faults", 1, 0, 'f'},
                                 {"log-level", 1, 0, 'v'},
                                 {"help", 0, 0, 'H'},
                                 {0, 0, 0, 0}};
  int ch, idx = 0;
  uint64_t v;
  while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
    int bad = 0;
    switch (ch) {
      case 'd':
        bad = hpl__parse_hostport(optarg, "127.0.0.1", cfg.dir_host, sizeof cfg.dir_host,
                                 &cfg.dir_port) || cfg.dir_port == 0;
        have_dir = !bad;
        break;
      case 's':
        bad = strlen(optarg) >= sizeof cfg.socket_path;
        if (!bad) snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", optarg);
        break;
      case 'm': bad = hpl__parse_size(optarg, &cfg.memory) || cfg.memory == 0; break;
      case 'l':
        bad = hpl__parse_hostport(optarg, "0.0.0.0", cfg.data_host, sizeof cfg.data_host,
                                 &cfg.data_port);
        break;
      case 'a':
        bad = strlen(optarg) >= sizeof cfg.data_addr;
        if (!bad) snprintf(cfg.data_addr, sizeof cfg.data_addr, "%s", optarg);
        break;
      case 'n':
        bad = strlen(optarg) >= sizeof cfg.name;
        if (!bad) snprintf(cfg.name, sizeof cfg.name, "%s", optarg);
        break;
      case 'r': cfg.ready_file = optarg; break;
      case 'c': bad = hpl__parse_size(optarg, &cfg.chunk) || cfg.chunk < 4096 || cfg.chunk > (1u << 30); break;
      case 't':
        bad = hpl__parse_size(optarg, &v) || v > UINT32_MAX;
        cfg.stall_timeout_ms = (uint32_t)v;
        break;
      case 'P': cfg.prefault = 1; break;
      case 'R': {
        char *end;
        cfg.straggler_ratio = strtod(optarg, &end);
        bad = *end || cfg.straggler_ratio < 0 || cfg.straggler_ratio >= 1;
        break;
      }
      case 'S':
        bad = hpl__parse_size(optarg, &v) || v > UINT32_MAX;
        cfg.straggler_ms = (uint32_t)v;
        break;
      case 'g':
        bad = hpl__parse_size(optarg, &v) || v > UINT32_MAX;
        cfg.grace_ms = (uint32_t)v;
        break;
      case 'f': {
        char err[200];
        if (store_faults_parse(&cfg.faults, optarg, err, sizeof err)) {
          fprintf(stderr, "hoplite-store: --faults: %s\n", err);
          return 2;
        }
        break;
      }
      case 'v': bad = (level = hpl__log_level_parse(optarg)) < 0; break;
      case 'H': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
    if (bad) {
      fprintf(stderr, "hoplite-store: bad value for --%s: '%s'\n", opts[idx].name, optarg);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "hoplite-store: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  const char *fenv = getenv("HOPLITE_FAULTS");
  if (fenv && *fenv && !cfg.faults.enabled) {
    char err[200];
    if (store_faults_parse(&cfg.faults, fenv, err, sizeof err)) {
      fprintf(stderr, "hoplite-store: HOPLITE_FAULTS: %s\n", err);
      return 2;
    }
  }
  if (!have_dir) {
    fprintf(stderr, "hoplite-store: --directory HOST:PORT is required\n");
    usage(stderr);
    return 2;
  }
  if (!cfg.socket_path[0]) {
    const char *env = getenv(HPL_SOCKET_ENV);
    if (env && *env) {
      snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", env);
    } else {
      char dir[64];
      snprintf(dir, sizeof dir, "/tmp/hoplite-%u", (unsigned)getuid());
      mkdir(dir, 0700);
      snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s/store.sock", dir);
    }
  }
  signal(SIGPIPE, SIG_IGN);
  char pname[80];
  snprintf(pname, sizeof pname, "store%s%s", cfg.name[0] ? ":" : "", cfg.name);
  hpl__log_setup(pname, level);
  uv_loop_t *loop = uv_default_loop();
  store s;
  if (store_start(&s, loop, &cfg) != 0) return 1;
  uv_run(loop, UV_RUN_DEFAULT);
  dirlink_free(&s);
  st_obj *o, *tmp;
  HASH_ITER(hh, s.objs, o, tmp) store_obj_detach(&s, o);
  store_release(&s);
  hpl__pool_destroy(s.pool);
  uv_loop_close(loop);
  LOG_INFO("stopped");
  return 0;
}
