/* main.c - hoplite-store command line. */
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hoplite.h"
#include "log.h"
#include "srvmain.h"
#include "server.h"
#include "digest.h"
#include "faults.h"
#include "objects.h"
#include "util.h"

/* HOST:PORT[,HOST:PORT...]: the directory, or every standby directory
 * (the store registers with the one that leads). */
static int set_directory(void *cfg, const char *arg) {
  hpl__store_config *c = cfg;
  c->ndirs = 0;
  while (*arg) {
    size_t l = strcspn(arg, ",");
    char one[300];
    if (l == 0 || l >= sizeof one || c->ndirs == HPL__STORE_MAX_DIRS) return -1;
    memcpy(one, arg, l);
    one[l] = 0;
    int i = c->ndirs;
    if (hpl__parse_hostport(one, "127.0.0.1", c->dir_hosts[i], sizeof c->dir_hosts[i],
                            &c->dir_ports[i]) ||
        c->dir_ports[i] == 0)
      return -1;
    c->ndirs++;
    arg += l;
    if (*arg == ',') arg++;
  }
  if (!c->ndirs) return -1;
  snprintf(c->dir_host, sizeof c->dir_host, "%s", c->dir_hosts[0]);
  c->dir_port = c->dir_ports[0];
  return 0;
}

static int set_data_listen(void *cfg, const char *arg) {
  hpl__store_config *c = cfg;
  return hpl__parse_hostport(arg, "0.0.0.0", c->data_host, sizeof c->data_host, &c->data_port);
}

static int set_allow_group(void *cfg, const char *arg) {
  hpl__store_config *c = cfg;
  uint64_t v;
  if (hpl__parse_size(arg, &v) || v > UINT32_MAX) return -1;
  c->allow_gid = (int64_t)v;
  return 0;
}

static int set_link_rate(void *cfg, const char *arg) {
  hpl__store_config *c = cfg;
  uint64_t bps;
  if (!strcmp(arg, "none")) {
    c->link_rate = 0;
    return 0;
  }
  /* 8 kbit/s at least: a paced stream below that would trip every timeout */
  if (hpl__parse_rate(arg, &bps) || bps < 8000) {
    fprintf(stderr, "hoplite-store: --link-rate: '%s' is not a rate of 8kbit or more, as tc "
                    "writes it (e.g. 1gbit, 25gbit, 500mbit), or none\n", arg);
    return -1;
  }
  c->link_rate = bps;
  return 0;
}

static int set_faults(void *cfg, const char *arg) {
  hpl__store_config *c = cfg;
  char err[200];
  if (hpl__faults_parse(&c->faults, arg, err, sizeof err) == 0) return 0;
  fprintf(stderr, "hoplite-store: --faults: %s\n", err);
  return -1;
}

static int set_integrity(void *cfg, const char *arg) {
  hpl__store_config *c = cfg;
  if (hpl__digest_algo_parse(arg, &c->integrity) == 0) return 0;
  fprintf(stderr, "hoplite-store: --integrity: '%s' is not sha256, fast or off\n", arg);
  return -1;
}

#define OFF(f) offsetof(hpl__store_config, f)
static const hpl__opt opts[] = {
    {"directory", "HOST:PORT[,...]",
     "the cluster's hoplite-directory (required); with standby\n"
     "directories every one's address: the store registers with the\n"
     "one that leads, and moves to the next leader when it goes",
     HPL__OPT_FN, 0, 0, 0, 0, set_directory},
    {"socket", "PATH",
     "Unix socket for local clients\n(default $HOPLITE_SOCKET or /tmp/hoplite-UID/store.sock)",
     HPL__OPT_STR, OFF(socket_path), sizeof(((hpl__store_config *)0)->socket_path), 0, 0, NULL},
    {"memory", "BYTES", "shared-memory pool size (default 2G; K/M/G suffixes)", HPL__OPT_SIZE,
     OFF(memory), 0, 1, 1e30, NULL},
    {"data-listen", "HOST:PORT",
     "data port bind address (default: 127.0.0.1:0 when the\ndirectory is on loopback, else "
     "0.0.0.0:0; beyond loopback\nonly with a secret or --insecure)",
     HPL__OPT_FN, 0, 0, 0, 0, set_data_listen},
    {"data-addr", "ADDR",
     "address peers use to reach the data port\n(default: this host's address towards the "
     "directory)",
     HPL__OPT_STR, OFF(data_addr), sizeof(((hpl__store_config *)0)->data_addr), 0, 0, NULL},
    {"data-advertise-port", "PORT",
     "port peers use to reach the data port, when it differs\nfrom the bound one (a port "
     "forward, NAT; default: the\nbound port)",
     HPL__OPT_U32, OFF(data_adv_port), 0, 0, 65535, NULL},
    {"name", "NAME", "node name in logs and listings", HPL__OPT_STR, OFF(name),
     sizeof(((hpl__store_config *)0)->name), 0, 0, NULL},
    {"ready-file", "PATH", "write the data port to PATH once registered", HPL__OPT_PTR,
     OFF(ready_file), 0, 0, 0, NULL},
    {"chunk", "BYTES", "largest write of a data stream (default 4M)", HPL__OPT_SIZE, OFF(chunk), 0,
     4096, 1u << 30, NULL},
    {"stall-timeout-ms", "MS",
     "a pull that delivers nothing this long goes to another\nsender, keeping its bytes (default "
     "10000; 0: off)",
     HPL__OPT_U32, OFF(stall_timeout_ms), 0, 0, 0, NULL},
    {"inbound-pulls", "N",
     "copies with 32 KiB to 4 MiB left to come pulled at once;\nmore wait their turn, so "
     "senders converging on this\nnode's link do not overflow its queue (default 2; 0: no\n"
     "limit)",
     HPL__OPT_U32, OFF(inbound_pulls), 0, 0, 1024, NULL},
    {"fill-hold-ms", "MS",
     "while no inbound slot is held, the first copies of a\nget's objects wait this long at most for "
     "the directory's\nanswers about the others, so the slots go to the\nnearest senders, not "
     "the first answered (default 10;\n0: never)",
     HPL__OPT_U32, OFF(fill_hold_ms), 0, 0, 60000, NULL},
    {"inline-inflight", "BYTES",
     "small puts' bytes on their way to the directory's inline\ncache at once; a put past it "
     "is registered as a copy\nhere instead, so a burst of puts (a shuffle's partitions)\nis "
     "fetched from the nodes that made it, not all through\nthe directory's link (default: 0.5 ms "
     "of --link-rate,\nat most 128K; 128K without it; 0: no limit)",
     HPL__OPT_SIZE, OFF(inline_inflight), 0, 0, 0, NULL},
    {"pull-window", "BYTES",
     "receive buffer of the connections copies come in on,\nso copies converging on this node keep "
     "its switch queue\nshort and messages to it do not wait behind them (default:\n1.25 ms of "
     "--link-rate, at least 32K; without it, or 0:\nthe kernel sizes it; see docs/operations.md)",
     HPL__OPT_SIZE, OFF(pull_window), 0, 0, 1u << 30, NULL},
    {"data-idle-ms", "MS",
     "a connection to another store's data port whose pull\nended whole is kept this long for "
     "the next pull from\nthat store (at most 2 per store, 64 in all; default\n3000; 0: every "
     "pull connects anew)",
     HPL__OPT_U32, OFF(data_idle_ms), 0, 0, 3600000, NULL},
    {"straggler-ratio", "R",
     "a complete sender delivering below R x this node's usual\nrate for --straggler-ms is "
     "replaced the same way (default 0.2;\nratio 0: off); a partial sender that crawls so is "
     "left\nonly for an idle complete copy, when there is one",
     HPL__OPT_DOUBLE, OFF(straggler_ratio), 0, 0, 1, NULL},
    {"straggler-ms", "MS", "see --straggler-ratio (default 1000)", HPL__OPT_U32, OFF(straggler_ms),
     0, 0, 0, NULL},
    {"grace-ms", "MS",
     "SIGTERM: finish serving streams for up to MS, then leave\n(default 5000; SIGINT leaves at "
     "once)",
     HPL__OPT_U32, OFF(grace_ms), 0, 0, 0, NULL},
    {"faults", "SPEC",
     "fault points for tests (also $HOPLITE_FAULTS):\n"
     "crash_after=N,drop_after=N,stall_after=N,slow_send=BPS,\nslow_after=N,"
     "hb_pause=AT_MS:LEN_MS,combine_delay_ms=MS,corrupt_send=N,\ncut_reused=N,prefix=ID_PREFIX,to_node=HEX_ID",
     HPL__OPT_FN, 0, 0, 0, 0, set_faults},
    {"integrity", "ALGO",
     "digests of the objects put here, checked by every node\nthat receives them: sha256 "
     "(default; stops a relay and a\nstore that lies), fast (XXH3-128: accidents only), off\n"
     "(no digests; benchmarks); see docs/operations.md",
     HPL__OPT_FN, 0, 0, 0, 0, set_integrity},
    {"prefault", NULL,
     "populate the pool's pages at start and keep them (no\n--trim-ms unless given)", HPL__OPT_FLAG,
     OFF(prefault), 0, 0, 0, NULL},
    {"no-fanout", NULL,
     "write each connection's frames of a loop turn with a system\ncall of its own (default: "
     "the turn's writes to 2 or more\nconnections go to the kernel in one io_uring submission;\n"
     "for comparisons)",
     HPL__OPT_FLAG, OFF(no_fanout), 0, 0, 0, NULL},
    {"sendfile", NULL,
     "send streams from the pool with sendfile(2), without a\nuser-space copy (default: "
     "write(2); on veth links sendfile\nmeasured no cheaper, see bench/README-bench.md)",
     HPL__OPT_FLAG, OFF(sendfile), 0, 0, 0, NULL},
    {"link-rate", "RATE",
     "this host's link rate as tc writes it (1gbit, 25gbit, ...;\ndefault none): streams then "
     "leave paced at 1.25x it,\nso that where the egress is one FIFO queue (tc tbf or\nhtb "
     "shaping, as container bandwidth limits use) they\nqueue less ahead of the ACKs of "
     "streams coming in;\nsee bench/README-bench.md",
     HPL__OPT_FN, 0, 0, 0, 0, set_link_rate},
    {"trim-ms", "MS",
     "give free pool pages back to the kernel once nothing was\nfreed for MS (default 10000, "
     "with --prefault 0; 0: never):\na page given back costs a page fault when it is used again",
     HPL__OPT_U32, OFF(trim_ms), 0, 0, 0, NULL},
    {"trim-keep", "BYTES",
     "free bytes kept warm (not given back) for the next\nallocations (default 64M)", HPL__OPT_SIZE,
     OFF(trim_keep), 0, 0, 1ull << 50, NULL},
    {"spill-dir", "DIR",
     "when the pool is full and no idle copy can go, write idle\nobjects the cluster needs (puts, "
     "last copies) to files\nin DIR and free their memory; a get reads them back\n(default: off)",
     HPL__OPT_STR, OFF(spill_dir), sizeof(((hpl__store_config *)0)->spill_dir), 0, 0, NULL},
    {"room-wait-ms", "MS",
     "a create or an incoming copy that does not fit waits\nthis long at most while room is made "
     "(idle copies\nother nodes hold are let go, holds released); a\nshorter client timeout wins "
     "(default 60000)",
     HPL__OPT_U32, OFF(room_wait_ms), 0, 0, 0, NULL},
    {"max-connections", "N",
     "open data-port connections at most, and local clients at\nmost (default 4096 each); more "
     "are closed at once",
     HPL__OPT_U32, OFF(max_conns), 0, 1, UINT32_MAX, NULL},
    {"allow-group", "GID",
     "local clients of this group may connect too (default: only\nthis user and root; the "
     "socket's directory must then let\nthe group in, see --insecure)",
     HPL__OPT_FN, 0, 0, 0, 0, set_allow_group},
    {"max-clients-per-uid", "N",
     "local clients of one user at most (default 1024): one\nuser's programs cannot take every "
     "slot; the next one is\ntold HPL_ETOOMANY",
     HPL__OPT_U32, OFF(max_uid_clients), 0, 1, UINT32_MAX, NULL},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static int start(void *srv, uv_loop_t *loop) {
  hpl__store *s = srv;
  hpl__store_config cfg = s->cfg; /* hpl__store_start clears *s first */
  return hpl__store_start(s, loop, &cfg);
}

static void finish(void *srv) { hpl__store_free(srv); }

int main(int argc, char **argv) {
  static hpl__store s;
  hpl__store_config *cfg = &s.cfg;
  hpl__store_config_defaults(cfg);
  const char *prog = "hoplite-store";
  const char *synopsis = "hoplite-store --directory HOST:PORT [options]";
  hpl__srv_common common;
  int rc = hpl__srv_parse(prog, synopsis, opts, cfg, argc, argv, &common);
  if (rc >= 0) return rc;
  const char *fenv = getenv("HOPLITE_FAULTS");
  if (fenv && *fenv && !cfg->faults.enabled) {
    char err[200];
    if (hpl__faults_parse(&cfg->faults, fenv, err, sizeof err)) {
      fprintf(stderr, "hoplite-store: HOPLITE_FAULTS: %s\n", err);
      return 2;
    }
  }
  if (!cfg->dir_port) {
    fprintf(stderr, "hoplite-store: --directory HOST:PORT is required\n");
    hpl__srv_usage(stderr, synopsis, opts);
    return 2;
  }
  if (!cfg->data_host[0]) /* peers must reach the data port where they reach the directory */
    snprintf(cfg->data_host, sizeof cfg->data_host, "%s",
             hpl__is_loopback(cfg->dir_host) ? "127.0.0.1" : "0.0.0.0");
  cfg->insecure = common.insecure;
  cfg->metrics = common.metrics;
  cfg->out_max = common.out_max;
  cfg->out_stall_ms = common.out_stall_ms;
  cfg->out_total = common.out_total;
  if ((rc = hpl__srv_load_auth(prog, &common, &cfg->auth)) >= 0 ||
      (rc = hpl__srv_exposure(prog, "--data-listen", cfg->data_host, &cfg->auth,
                              common.insecure)) >= 0 ||
      (rc = hpl__metrics_exposure(prog, &cfg->metrics, &cfg->auth, common.insecure)) >= 0)
    return rc;
  if (!cfg->socket_path[0]) {
    const char *env = getenv(HPL_SOCKET_ENV);
    if (env && *env) {
      snprintf(cfg->socket_path, sizeof cfg->socket_path, "%s", env);
    } else {
      char dir[64];
      snprintf(dir, sizeof dir, "/tmp/hoplite-%u", (unsigned)getuid());
      mkdir(dir, 0700);
      snprintf(cfg->socket_path, sizeof cfg->socket_path, "%s/store.sock", dir);
    }
  }
  /* Only the store may write the pool (poolseg.c): other processes of this
   * user must not reach it through /proc/PID/mem, /proc/PID/fd or ptrace
   * either. (Also no core dumps of the pool.) */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    fprintf(stderr, "hoplite-store: prctl(PR_SET_DUMPABLE, 0) failed: other processes of this "
                    "user could write the pool through /proc\n");
  char pname[80];
  snprintf(pname, sizeof pname, "store%s%s", cfg->name[0] ? ":" : "", cfg->name);
  return hpl__srv_run(pname, common.log_level, start, finish, &s);
}
