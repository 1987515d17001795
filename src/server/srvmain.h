/*
 * srvmain.h - what the two servers' main() share: a declarative option
 * table (parsing, bounds, the usage text), the options every server has
 * (--log-level, --auth-file, --insecure, --metrics-listen, --help), the
 * exposure rule (no secret: loopback only), and the run sequence (log
 * setup, SIGPIPE ignored, start on the default loop, run, free, close the
 * loop).
 *
 * Callers: directory/main.c and store/main.c only.
 */
#ifndef HPL_SRVMAIN_H
#define HPL_SRVMAIN_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "metricsrv.h"

enum {
  HPL__OPT_FLAG,   /* int at off, set to 1 (no argument) */
  HPL__OPT_SIZE,   /* uint64_t at off: a byte size with K/M/G/T suffix, in [min, max] */
  HPL__OPT_U32,    /* uint32_t at off: a number (suffixes allowed), in [min, max] */
  HPL__OPT_DOUBLE, /* double at off, in [min, max) */
  HPL__OPT_STR,    /* char[len] at off: copied, must fit */
  HPL__OPT_PTR,    /* const char * at off: points into argv */
  HPL__OPT_FN,     /* fn(cfg, arg) parses it: 0 or -1 for a bad value */
};

typedef struct hpl__opt {
  const char *name; /* long option, without "--" */
  const char *arg;  /* shown in the usage ("BYTES"); NULL for a flag */
  const char *help; /* '\n' starts a continuation line */
  int kind;         /* HPL__OPT_* */
  size_t off;       /* offsetof the field in the config struct */
  size_t len;       /* HPL__OPT_STR: the buffer's size */
  double min, max;  /* numeric bounds (both 0: none) */
  int (*fn)(void *cfg, const char *arg);
} hpl__opt;

/* The options every server has. */
typedef struct hpl__srv_common {
  int log_level;            /* --log-level (default info) */
  const char *auth_file;    /* --auth-file, else $HOPLITE_AUTH_FILE, else NULL */
  int insecure;             /* --insecure: listen beyond loopback without a secret */
  int encrypt;              /* --encrypt: seal every connection (auth.h) */
  hpl__metrics_cfg metrics; /* --metrics-listen, --metrics-port-file (metricsrv.h) */
  uint64_t out_max;         /* --max-output, per connection (uvconn.h; 0: its default) */
  uint32_t out_stall_ms;    /* --max-output-stall-ms (0: default) */
  uint64_t out_total;       /* --max-output-total, all connections (0: default) */
} hpl__srv_common;

/* Parse argv with `opts` (ended by an entry whose name is NULL) plus the
 * common options into *common. `cfg` holds the defaults on entry. Prints the
 * usage for --help (stdout) or a message naming the option for a bad value,
 * an unknown option or a stray argument (stderr).
 * Returns -1 to go on, or the exit code the program should end with. */
int hpl__srv_parse(const char *prog, const char *synopsis, const hpl__opt *opts, void *cfg,
                   int argc, char **argv, hpl__srv_common *common);

/* Load the cluster secret the common options name into *a (a->on = 0 when
 * none is named). Returns -1 to go on, or 2 after printing why not. */
int hpl__srv_load_auth(const char *prog, const hpl__srv_common *common, hpl__auth *a);

/* The exposure rule: listening on `host` (for `what`, e.g. "--listen") is
 * allowed on loopback, or with a secret, or with --insecure. Returns -1 to
 * go on, or 2 after printing what to do. */
int hpl__srv_exposure(const char *prog, const char *what, const char *host, const hpl__auth *a,
                      int insecure);

/* Print the usage text of `opts` (as --help does). */
void hpl__srv_usage(FILE *f, const char *synopsis, const hpl__opt *opts);

/* Run a server: set up logging as `logname` at `level`, ignore SIGPIPE,
 * start(srv, loop) on the default loop (non-zero: exit status 1), run the
 * loop until it has nothing left, then finish(srv) and close the loop.
 * Returns the process exit status. */
int hpl__srv_run(const char *logname, int level, int (*start)(void *srv, uv_loop_t *loop),
                 void (*finish)(void *srv), void *srv);

#endif
