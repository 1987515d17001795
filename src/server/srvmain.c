/* srvmain.c - option table and run sequence of the servers (see srvmain.h). */
#include "srvmain.h"

#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

static int set_log_level(void *cfg, const char *arg) {
  hpl__srv_common *c = cfg;
  return (c->log_level = hpl__log_level_parse(arg)) < 0 ? -1 : 0;
}

static int set_metrics_listen(void *cfg, const char *arg) {
  return hpl__metrics_parse_listen(&((hpl__srv_common *)cfg)->metrics, arg);
}

static int set_log_format(void *cfg, const char *arg) {
  (void)cfg;
  int f = hpl__log_format_parse(arg);
  if (f < 0) return -1;
  hpl__log_set_format(f);
  return 0;
}

/* The options every server has, after the server's own (parsed into an
 * hpl__srv_common). */
#define COFF(f) offsetof(hpl__srv_common, f)
static const hpl__opt common_opts[] = {
    {"auth-file", "PATH",
     "the cluster secret (256 bits, 64 hex digits, mode 0600; `hoplite\n"
     "secret FILE` makes one; default $HOPLITE_AUTH_FILE): every TCP\n"
     "connection must prove it holds the same secret",
     HPL__OPT_PTR, COFF(auth_file), 0, 0, 0, NULL},
    {"encrypt", NULL,
     "encrypt every TCP connection to or from this server (needs a\n"
     "secret): control frames and object streams sealed with\n"
     "ChaCha20-Poly1305 or AES-256-GCM; a connection is sealed\n"
     "when either end asks. Costs CPU on both ends (docs/operations.md)",
     HPL__OPT_FLAG, COFF(encrypt), 0, 0, 0, NULL},
    {"insecure", NULL,
     "allow listening beyond loopback without a secret (anyone who\n"
     "reaches the port can then read, write and delete objects)",
     HPL__OPT_FLAG, COFF(insecure), 0, 0, 0, NULL},
    {"log-level", "LEVEL", "error|warn|info|debug (default info)", HPL__OPT_FN, 0, 0, 0, 0,
     set_log_level},
    {"log-format", "FORMAT",
     "text|json (default text); json: one object per line with\n"
     "time (UTC), level, service, node, pid and event",
     HPL__OPT_FN, 0, 0, 0, 0, set_log_format},
    {"metrics-listen", "HOST:PORT",
     "serve Prometheus metrics at http://HOST:PORT/metrics\n"
     "(port 0 picks one; beyond loopback only with a secret or\n"
     "--insecure; with a secret every scrape needs the bearer\n"
     "token `hoplite secret --metrics-token FILE` prints)",
     HPL__OPT_FN, 0, 0, 0, 0, set_metrics_listen},
    {"metrics-port-file", "PATH", "write the metrics port to PATH once listening", HPL__OPT_PTR,
     COFF(metrics.port_file), 0, 0, 0, NULL},
    {"max-output", "BYTES",
     "replies queued to one connection at most (default 16M):\npast it its requests wait; "
     "a peer that stays past it\n--max-output-stall-ms is disconnected",
     HPL__OPT_SIZE, COFF(out_max), 0, 0, 0, NULL},
    {"max-output-stall-ms", "MS",
     "how long a connection may stay past --max-output\n(default 10000)",
     HPL__OPT_U32, COFF(out_stall_ms), 0, 1, UINT32_MAX, NULL},
    {"max-output-total", "BYTES",
     "output queued to all connections at most (default 256M):\npast it the largest queue's "
     "connection is closed",
     HPL__OPT_SIZE, COFF(out_total), 0, 0, 0, NULL},
    {"help", NULL, "this text", HPL__OPT_FLAG, 0, 0, 0, 0, NULL},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static size_t opt_count(const hpl__opt *o) {
  size_t n = 0;
  while (o[n].name) n++;
  return n;
}

static void usage_lines(FILE *f, const hpl__opt *opts) {
  for (const hpl__opt *o = opts; o->name; o++) {
    char head[64];
    snprintf(head, sizeof head, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    const char *h = o->help;
    int first = 1;
    if (strlen(head) > 26) { /* a long option name gets a line of its own */
      fprintf(f, "  %s\n", head);
      first = 0;
    }
    do {
      const char *nl = strchr(h, '\n');
      int len = nl ? (int)(nl - h) : (int)strlen(h);
      fprintf(f, "  %-26s %.*s\n", first ? head : "", len, h);
      first = 0;
      h = nl ? nl + 1 : NULL;
    } while (h);
  }
}

void hpl__srv_usage(FILE *f, const char *synopsis, const hpl__opt *opts) {
  fprintf(f, "usage: %s\n", synopsis);
  usage_lines(f, opts);
  usage_lines(f, common_opts);
}

/* Store one option's value. 0 or -1 (bad value). */
static int opt_set(const hpl__opt *o, void *cfg, const char *arg) {
  char *field = (char *)cfg + o->off;
  int bounded = o->min != 0 || o->max != 0;
  uint64_t v;
  switch (o->kind) {
    case HPL__OPT_FLAG: *(int *)field = 1; return 0;
    case HPL__OPT_SIZE:
    case HPL__OPT_U32:
      if (hpl__parse_size(arg, &v)) return -1;
      if (o->kind == HPL__OPT_U32 && v > UINT32_MAX) return -1;
      if (bounded && ((double)v < o->min || (double)v > o->max)) return -1;
      if (o->kind == HPL__OPT_SIZE)
        *(uint64_t *)field = v;
      else
        *(uint32_t *)field = (uint32_t)v;
      return 0;
    case HPL__OPT_DOUBLE: {
      char *end;
      double d = strtod(arg, &end);
      if (end == arg || *end || (bounded && (d < o->min || d >= o->max))) return -1;
      *(double *)field = d;
      return 0;
    }
    case HPL__OPT_STR:
      if (strlen(arg) >= o->len) return -1;
      memcpy(field, arg, strlen(arg) + 1);
      return 0;
    case HPL__OPT_PTR: *(const char **)field = arg; return 0;
    case HPL__OPT_FN: return o->fn(cfg, arg);
  }
  return -1;
}

int hpl__srv_parse(const char *prog, const char *synopsis, const hpl__opt *opts, void *cfg,
                   int argc, char **argv, hpl__srv_common *common) {
  memset(common, 0, sizeof *common);
  common->log_level = HPL__LOG_INFO;
  size_t n = opt_count(opts), nc = opt_count(common_opts);
  struct option *lo = calloc(n + nc + 1, sizeof *lo);
  if (!lo) return 1;
  for (size_t i = 0; i < n + nc; i++) {
    const hpl__opt *o = i < n ? &opts[i] : &common_opts[i - n];
    lo[i].name = o->name;
    lo[i].has_arg = o->kind == HPL__OPT_FLAG ? no_argument : required_argument;
    lo[i].val = 1000 + (int)i;
  }
  int ch, idx = 0, rc = -1;
  optind = 1;
  while (rc < 0 && (ch = getopt_long(argc, argv, "", lo, &idx)) != -1) {
    size_t i = (size_t)(ch - 1000);
    if (ch < 1000 || i >= n + nc) { /* getopt has printed what was wrong */
      hpl__srv_usage(stderr, synopsis, opts);
      rc = 2;
      break;
    }
    int bad;
    if (i >= n && !strcmp(lo[i].name, "help")) {
      hpl__srv_usage(stdout, synopsis, opts);
      rc = 0;
      break;
    } else if (i >= n) {
      bad = opt_set(&common_opts[i - n], common, optarg);
    } else {
      bad = opt_set(&opts[i], cfg, optarg);
    }
    if (bad) {
      fprintf(stderr, "%s: bad value for --%s: '%s'\n", prog, lo[i].name, optarg ? optarg : "");
      rc = 2;
    }
  }
  if (rc < 0 && optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
    hpl__srv_usage(stderr, synopsis, opts);
    rc = 2;
  }
  free(lo);
  return rc;
}

int hpl__srv_load_auth(const char *prog, const hpl__srv_common *common, hpl__auth *a) {
  const char *path = common->auth_file;
  if (!path) path = getenv("HOPLITE_AUTH_FILE");
  memset(a, 0, sizeof *a);
  if ((!path || !*path) && common->encrypt) {
    fprintf(stderr, "%s: --encrypt needs the cluster secret (--auth-file FILE or "
            "$HOPLITE_AUTH_FILE): the keys come from its handshake\n", prog);
    return 2;
  }
  if (!path || !*path) return -1;
  char err[512];
  if (hpl__auth_load(path, a, err, sizeof err) != 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return 2;
  }
  a->encrypt = common->encrypt;
  return -1;
}

int hpl__srv_exposure(const char *prog, const char *what, const char *host, const hpl__auth *a,
                      int insecure) {
  if (a->on || insecure || hpl__is_loopback(host)) return -1;
  fprintf(stderr,
          "%s: %s %s would let anyone who reaches it read, change and delete objects: give "
          "the cluster a secret (--auth-file FILE or $HOPLITE_AUTH_FILE; make one with "
          "`hoplite secret FILE`), or pass --insecure if this network is trusted\n",
          prog, what, host);
  return 2;
}

int hpl__srv_run(const char *logname, int level, int (*start)(void *srv, uv_loop_t *loop),
                 void (*finish)(void *srv), void *srv) {
  signal(SIGPIPE, SIG_IGN);
  hpl__log_setup(logname, level);
  uv_loop_t *loop = uv_default_loop();
  if (start(srv, loop) != 0) return 1;
  uv_run(loop, UV_RUN_DEFAULT);
  finish(srv);
  uv_loop_close(loop);
  HPL__LOG_INFO("stopped");
  return 0;
}
