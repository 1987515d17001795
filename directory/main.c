/* main.c - hoplite-directory command line. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ha.h"
#include "hoplite.h"
#include "server.h"
#include "log.h"
#include "srvmain.h"
#include "util.h"

static int set_listen(void *cfg, const char *arg) {
  hpl__dir_config *c = cfg;
  return hpl__parse_hostport(arg, "127.0.0.1", c->listen_host, sizeof c->listen_host,
                             &c->listen_port);
}

/* "auto" sets *is_auto, else a number (> min) scaled into *value. */
static int parse_auto(const char *arg, int *is_auto, double *value, double scale, uint64_t min) {
  uint64_t v;
  if (!strcmp(arg, "auto")) {
    *is_auto = 1;
    return 0;
  }
  if (hpl__parse_size(arg, &v) || v < min) return -1;
  *value = (double)v * scale;
  return 0;
}

static int set_latency(void *cfg, const char *arg) {
  hpl__dir_config *c = cfg;
  return parse_auto(arg, &c->latency_auto, &c->reduce_latency_s, 1e-6, 0);
}

static int set_bandwidth(void *cfg, const char *arg) {
  hpl__dir_config *c = cfg;
  return parse_auto(arg, &c->bandwidth_auto, &c->reduce_bandwidth, 1, 1);
}

static int set_advertise(void *cfg, const char *arg) {
  hpl__dir_config *c = cfg;
  char host[256];
  int port;
  if (hpl__parse_hostport(arg, "", host, sizeof host, &port) || !host[0] || !port) return -1;
  snprintf(c->advertise, sizeof c->advertise, "%s:%d", host, port);
  return 0;
}

#define OFF(f) offsetof(hpl__dir_config, f)
static const hpl__opt opts[] = {
    {"listen", "HOST:PORT",
     "address to listen on (default 127.0.0.1:7700; port 0 picks\none; beyond loopback only "
     "with a secret or --insecure)",
     HPL__OPT_FN, 0, 0, 0, 0, set_listen},
    {"port-file", "PATH", "write the bound port to PATH once listening", HPL__OPT_PTR,
     OFF(port_file), 0, 0, 0, NULL},
    {"inline-max", "BYTES", "objects up to this size are held inline (default 64K, at most 16M)",
     HPL__OPT_U32, OFF(inline_max), 0, 0, 16u << 20, NULL},
    {"inline-memory", "BYTES", "cap on all inline bytes (default 1G)", HPL__OPT_SIZE,
     OFF(inline_memory), 0, 0, 0, NULL},
    {"max-senders", "N", "receivers one copy may serve at once (default 1)", HPL__OPT_U32,
     OFF(max_senders), 0, 1, UINT32_MAX, NULL},
    {"max-connections", "N", "open connections at most (default 4096); more are closed at once",
     HPL__OPT_U32, OFF(max_conns), 0, 1, UINT32_MAX, NULL},
    {"publish-quota", "BYTES",
     "bytes clients may publish naming one node before its store\nputs them (default 64M; a "
     "client connection a quarter)",
     HPL__OPT_SIZE, OFF(publish_quota), 0, 0, 0, NULL},
    {"heartbeat-ms", "MS", "heartbeat interval stores use (default 500)", HPL__OPT_U32,
     OFF(heartbeat_ms), 0, 1, UINT32_MAX, NULL},
    {"heartbeat-timeout-ms", "MS",
     "node declared dead after this silence at most (default\n3000); less for a node whose "
     "heartbeats arrive steadily\n(mean + 8 x their jitter + half an interval, at least 3\n"
     "intervals)",
     HPL__OPT_U32, OFF(heartbeat_timeout_ms), 0, 0, 0, NULL},
    {"probe-ms", "MS",
     "a sender a receiver reports silent is probed; one that does\nnot answer within MS "
     "(default 100) serves only as a last\nresort until it is heard again",
     HPL__OPT_U32, OFF(probe_ms), 0, 1, 60000, NULL},
    {"reduce-latency-us", "US|auto",
     "reduce cost model: per-hop latency (default 200;\n"
     "auto: half the heartbeat round trip stores measure)",
     HPL__OPT_FN, 0, 0, 0, 0, set_latency},
    {"no-rings", NULL,
     "no ring allreduces: every allreduce is a reduce followed by\na broadcast (for "
     "comparisons)",
     HPL__OPT_FLAG, OFF(no_rings), 0, 0, 0, NULL},
    {"no-grants", NULL,
     "no grants: a client's direct read of a large object is told\n"
     "to ask its store, which asks the directory again (for comparisons)",
     HPL__OPT_FLAG, OFF(no_grants), 0, 0, 0, NULL},
    {"no-publish", NULL,
     "ignore clients' PUBLISH: a small object becomes visible only\n"
     "once its store has put it (for comparisons)",
     HPL__OPT_FLAG, OFF(no_publish), 0, 0, 0, NULL},
    {"delete-any", NULL,
     "let any node's clients delete any object (default: only the\n"
     "node that made it, any node once that node is gone, and\n"
     "`hoplite --admin` with the cluster secret)",
     HPL__OPT_FLAG, OFF(delete_any), 0, 0, 0, NULL},
    {"no-fanout", NULL,
     "write every reply with a system call of its own: without it, a\n"
     "loop turn that answers 2 or more connections hands those writes\n"
     "to the kernel in one io_uring submission (for comparisons)",
     HPL__OPT_FLAG, OFF(no_fanout), 0, 0, 0, NULL},
    {"fanout-thread", NULL,
     "instead of io_uring, share a loop turn's writes to 4 or more\n"
     "connections with a helper thread (on a machine with more than\n"
     "one CPU; also the fallback where the kernel refuses io_uring)",
     HPL__OPT_FLAG, OFF(fanout_thread), 0, 0, 0, NULL},
    {"etcd", "URL[,URL...]",
     "standby directories: lead only while holding a lease in this\n"
     "etcd (its client URLs); stand by, not listening, until then",
     HPL__OPT_PTR, OFF(etcd), 0, 0, 0, NULL},
    {"ha-prefix", "KEY", "with --etcd: the keys' prefix, one per cluster (default\n"
     "/hoplite/default)", HPL__OPT_PTR, OFF(ha_prefix), 0, 0, 0, NULL},
    {"lease-ms", "MS", "with --etcd: the leader lease (default 3000, at least 300);\n"
     "a leader that cannot renew it stops within it",
     HPL__OPT_U32, OFF(lease_ms), 0, 300, 600000, NULL},
    {"advertise", "HOST:PORT", "with --etcd: where stores reach this directory (default the\n"
     "--listen address, which then needs a port)", HPL__OPT_FN, 0, 0, 0, 0, set_advertise},
    {"reduce-bandwidth", "BYTES|auto",
     "reduce cost model: link bandwidth per second\n(default 125M; auto: the rate of recent pulls)",
     HPL__OPT_FN, 0, 0, 0, 0, set_bandwidth},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static char **self_argv; /* for the re-execution of a leader that lost its lease */

/* The lease is no longer certainly ours: stop serving now, by executing
 * this program again (every socket closes with the exec: they are opened
 * close-on-exec), which stands by like any standby. */
static void fence(void *arg) {
  (void)arg;
  HPL__LOG_ERROR("closing every connection and standing by again");
  execv("/proc/self/exe", self_argv);
  HPL__LOG_ERROR("cannot execute myself again: exiting");
  _exit(3);
}

static int start(void *srv, uv_loop_t *loop) {
  hpl__dir_server *s = srv;
  hpl__dir_config cfg = s->cfg; /* hpl__dir_server_start clears *s first */
  int rc = hpl__dir_server_start(s, loop, &cfg);
  if (rc == 0 && cfg.ha && (rc = hpl__ha_keep(cfg.ha, loop, fence, s)))
    HPL__LOG_ERROR("cannot start the lease thread");
  return rc;
}

static void finish(void *srv) {
  hpl__dir_server *s = srv;
  hpl__ha_stop(s->cfg.ha);
  uv_run(s->loop, UV_RUN_NOWAIT); /* (the check timer's close) */
  hpl__ha_resign(s->cfg.ha, 1);   /* a standby leads at once */
  s->cfg.ha = NULL;
  hpl__dir_server_free(s);
}

/* With --etcd: stand by until this directory leads (blocks; no loop runs
 * yet). Returns -1 to go on, else the exit status. */
static int campaign(hpl__dir_config *cfg, int log_level) {
  if (!cfg->etcd) return -1;
  if (!cfg->advertise[0]) {
    if (!cfg->listen_port) {
      fprintf(stderr, "hoplite-directory: --etcd needs a --listen port (or --advertise): "
                      "stores must know every directory's address beforehand\n");
      return 2;
    }
    snprintf(cfg->advertise, sizeof cfg->advertise, "%s:%d", cfg->listen_host, cfg->listen_port);
  }
  hpl__log_setup("directory", log_level);
  hpl__ha_cfg hc = {.endpoints = cfg->etcd, .prefix = cfg->ha_prefix, .lease_ms = cfg->lease_ms};
  snprintf(hc.advertise, sizeof hc.advertise, "%s", cfg->advertise);
  int rc = hpl__ha_campaign(&hc, &cfg->ha, &cfg->term);
  if (rc) {
    fprintf(stderr, "hoplite-directory: cannot stand by for the lead: %s\n", hpl_strerror(rc));
    return 2;
  }
  return -1;
}

int main(int argc, char **argv) {
  static hpl__dir_server s;
  const char *prog = "hoplite-directory";
  hpl__dir_config_defaults(&s.cfg);
  hpl__srv_common common;
  int rc = hpl__srv_parse(prog, "hoplite-directory [options]", opts, &s.cfg, argc, argv, &common);
  if (rc >= 0) return rc;
  s.cfg.metrics = common.metrics;
  s.cfg.out_max = common.out_max;
  s.cfg.out_stall_ms = common.out_stall_ms;
  s.cfg.out_total = common.out_total;
  if ((rc = hpl__srv_load_auth(prog, &common, &s.cfg.auth)) >= 0 ||
      (rc = hpl__srv_exposure(prog, "--listen", s.cfg.listen_host, &s.cfg.auth,
                              common.insecure)) >= 0 ||
      (rc = hpl__metrics_exposure(prog, &s.cfg.metrics, &s.cfg.auth, common.insecure)) >= 0)
    return rc;
  if (s.cfg.auth.on && !s.cfg.auth.has_secret) {
    fprintf(stderr, "hoplite-directory: --auth-file names a node credential; the directory "
            "needs the cluster secret itself (it derives every node's key from it)\n");
    return 2;
  }
  if (s.cfg.heartbeat_timeout_ms < 2 * s.cfg.heartbeat_ms) {
    fprintf(stderr,
            "hoplite-directory: --heartbeat-timeout-ms must be at least twice --heartbeat-ms\n");
    return 2;
  }
  self_argv = argv;
  if ((rc = campaign(&s.cfg, common.log_level)) >= 0) return rc;
  return hpl__srv_run("directory", common.log_level, start, finish, &s);
}
