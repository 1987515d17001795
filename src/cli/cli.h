/*
 * cli.h - what the files of the `hoplite` command share: its options for
 * object commands, ending with a message, the progress bar, and the
 * commands themselves. Callers: cli.c (arguments and dispatch) and the
 * command files (cmd_putget.c, cmd_objects.c, cmd_status.c,
 * cmd_cluster.c, demo.c, progress.c). Not part of any library.
 */
#ifndef HPL_CLI_H
#define HPL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "hoplite.h"

/* The program's name in messages. */
#define HPL__CLI_NAME "hoplite"

/* Options of the commands that talk to a store (or, --admin, to the
 * directory). */
typedef struct hpl__cli_opts {
  const char *socket;
  int node;
  int admin;             /* --admin: talk to the directory as the admin role */
  const char *directory; /* --directory HOST:PORT (NULL: $HOPLITE_DIRECTORY) */
  const char *auth_file; /* --auth-file FILE, the cluster secret (NULL: $HOPLITE_AUTH_FILE) */
  int64_t timeout_ms;
  int json; /* --json: one JSON object per line */
  double watch_s; /* status --watch: refresh every this many seconds (0: once) */
} hpl__cli_opts;

/* Print "hoplite: " and the message on stderr and exit with status 1. */
void hpl__cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A failed call (rc != 0) ends the program with its code and detail. */
void hpl__cli_check(hpl_client *c, int rc, const char *what);

/* The local cluster's work directory, /tmp/hoplite-UID/cluster. */
void hpl__cli_cluster_dir(char *out, size_t len);

/* Take --json out of a command's arguments (it may come after them);
 * sets o->json. Returns the arguments left, in order. */
int hpl__cli_take_json(hpl__cli_opts *o, int argc, char **argv);

/* ------------------------------------------------------------ progress.c */

/* Objects this large get a progress bar (when stderr is a terminal). */
#define HPL__PROGRESS_MIN (1ull << 20)
#define HPL__PROGRESS_EVERY_NS 200000000ull /* redrawn at most this often */

/* A progress bar on stderr: "put ID [####    ]  45%  45.0 MiB / 100.0 MiB
 * 12.3 MB/s  ETA 5s", redrawn in place (\r), ended with a newline. Only
 * when stderr is a terminal: nothing at all otherwise. */
typedef struct hpl__cli_progress {
  int on;
  const char *what, *id; /* kept, not copied */
  uint64_t total; /* 0: unknown (stdin) */
  uint64_t t0_ns, last_ns;
  int drawn;
} hpl__cli_progress;

/* Start a bar for `what` ("put", "get") of object `id` of `total` bytes. */
void hpl__cli_progress_init(hpl__cli_progress *p, const char *what, const char *id, uint64_t total);

/* Show `done` bytes (of p->total): at most every HPL__PROGRESS_EVERY_NS, or
 * now and for the last time with `final`. Small objects show nothing. */
void hpl__cli_progress_show(hpl__cli_progress *p, uint64_t done, int final);

/* Seconds as "42s", "3m07s" or "2h05m". */
void hpl__cli_fmt_secs(double s, char *buf, size_t len);

/* ------------------------------------------------------------ the commands */

/* Object commands: the arguments after the command's name; 0 or the exit
 * status (failures end the program through die()). */
int hpl__cli_put(hpl_client *c, hpl__cli_opts *o, int argc, char **argv);       /* cmd_putget.c */
int hpl__cli_get(hpl_client *c, hpl__cli_opts *o, int argc, char **argv);       /* cmd_putget.c */
int hpl__cli_stat(hpl_client *c, hpl__cli_opts *o, int argc, char **argv);      /* cmd_objects.c */
int hpl__cli_ls(hpl_client *c, hpl__cli_opts *o, int argc, char **argv);        /* cmd_objects.c */
int hpl__cli_rm(hpl_client *c, hpl__cli_opts *o, int argc, char **argv);        /* cmd_objects.c */
int hpl__cli_transfers(hpl_client *c, hpl__cli_opts *o, int argc, char **argv); /* cmd_objects.c */
int hpl__cli_counters(hpl_client *c, hpl__cli_opts *o, int argc, char **argv);  /* cmd_objects.c */
int hpl__cli_status(hpl_client *c, hpl__cli_opts *o, int argc, char **argv);    /* cmd_status.c */

/* Commands without a store: the arguments after the command's name. */
int hpl__cli_cluster(int argc, char **argv); /* cmd_cluster.c: `cluster up` */
int hpl__cli_secret(int argc, char **argv);  /* cmd_cluster.c: `secret` */
/* `demo`: argv[0] is "demo" (demo.c). */
int hpl__cli_demo(int argc, char **argv);

#endif
