/*
 * localcluster.h - start and stop a hoplite cluster of real processes on
 * this machine: one hoplite-directory and N hoplite-store processes on
 * loopback, each on a port the kernel picks. Used by the `hoplite` CLI,
 * the integration tests and the benchmarks. With standby directories
 * (ha_dirs), also a local etcd and two or more directories under a leader
 * lease in it, on free ports picked up front (directory/ha.h).
 *
 * Not thread-safe. Waiting for a server to come up is event-driven
 * (inotify on the work directory), bounded by a timeout.
 *
 * Callers: `hoplite cluster up` and `hoplite demo` (cmd_cluster.c,
 * demo.c), the test harness and tests, the benchmarks (library hpltools).
 */
#ifndef HPL_LOCALCLUSTER_H
#define HPL_LOCALCLUSTER_H

#include <stdint.h>
#include <sys/types.h>

typedef struct hpl__lc hpl__lc;

typedef struct hpl__lc_opts {
  int nodes;               /* stores to start (may be 0) */
  uint64_t memory;         /* pool per store, bytes (0: 512 MiB) */
  const char *bin_dir;     /* where hoplite-directory/-store are (NULL: next to this program) */
  const char *work_dir; /* sockets, port files, logs (NULL: a new mkdtemp dir, removed at stop) */
  const char *dir_args;    /* extra arguments for the directory, space-separated (may be NULL) */
  const char *store_args;  /* extra arguments for every store (may be NULL) */
  const char *log_level;   /* servers' --log-level (NULL: info) */
  const char *host;        /* address to bind and advertise (NULL: 127.0.0.1) */
  int logs_to_stderr;      /* 1: servers log to our stderr; 0: to files in work_dir */
  int timeout_ms;          /* how long a server may take to come up (0: 10000) */
  int remove_work_dir;     /* remove work_dir (and everything in it) at stop, even if given */
  /* Emulated hosts: if netns_prefix is set, the directory runs in namespace
   * "<prefix>-h<dir_host>" and store i in "<prefix>-h<i>" (through `ip netns
   * exec`), binding and advertising host_addrs[i]; the directory listens on
   * host_addrs[dir_host]. The namespaces must exist (bench/cluster.sh up).
   * dir_host (0 by default) may be a host without a store (>= nodes): the
   * directory then has a link of its own; host_addrs must list it. */
  const char *netns_prefix;
  const char *const *host_addrs;
  int dir_host;
  /* The cluster secret: every cluster gets one (work_dir/cluster.secret,
   * mode 0600, made unless it exists) and every server is started with
   * --auth-file. no_auth: none (servers older than the secret, or tests of
   * an unauthenticated loopback cluster). */
  int no_auth;
  /* Standby directories (`hoplite cluster up --ha`): ha_dirs (2..4)
   * directories with --etcd, one leading (the first, at start), the others
   * standing by; a local etcd ($HOPLITE_ETCD, else /usr/bin/etcd: Debian's
   * etcd-server) in work_dir/etcd on free ports; stores get every
   * directory's address. 0: one directory, no etcd. Not with netns_prefix. */
  int ha_dirs;
  uint32_t lease_ms; /* the directories' --lease-ms with ha_dirs (0: 1000) */
  /* Standby directories started elsewhere (hadirs.h): every store gets
   * `--directory dir_list` and no directory is started here (dir_port is
   * then 0 and hpl__lc_restart(-1) / hpl__lc_signal(-1) refuse). NULL: one
   * directory, started here. Not copied: it must outlive the cluster. */
  const char *dir_list;
} hpl__lc_opts;

/* Start a cluster. On success *out is owned by the caller (hpl__lc_stop).
 * On failure everything started is stopped again and a message is written
 * into err[errlen]. Returns 0 or a negative HPL_E* code. */
int hpl__lc_start(const hpl__lc_opts *o, hpl__lc **out, char *err, size_t errlen);

/* Stop every process still running (SIGTERM, SIGKILL after 5 s), remove
 * the work directory if we created it, free. NULL is a no-op. */
void hpl__lc_stop(hpl__lc *lc);

int hpl__lc_nodes(const hpl__lc *lc);
/* Directory 0's port and pid (the one that led at start) and log path. */
const char *hpl__lc_socket(const hpl__lc *lc, int i); /* store i's Unix socket */
int hpl__lc_dir_port(const hpl__lc *lc);
const char *hpl__lc_work_dir(const hpl__lc *lc);
/* Path of the cluster's secret file, "" without one. */
const char *hpl__lc_secret(const hpl__lc *lc);
pid_t hpl__lc_dir_pid(const hpl__lc *lc);
pid_t hpl__lc_store_pid(const hpl__lc *lc, int i);
/* Path of store i's log file ("" when logging to stderr). */
const char *hpl__lc_store_log(const hpl__lc *lc, int i);
const char *hpl__lc_dir_log(const hpl__lc *lc);

/* Directories (1, or ha_dirs), and directory k's port, pid (0: not
 * running) and log path ("" when logging to stderr). */
int hpl__lc_dirs(const hpl__lc *lc);
int hpl__lc_dir_port_at(const hpl__lc *lc, int k);
pid_t hpl__lc_dir_pid_at(const hpl__lc *lc, int k);
const char *hpl__lc_dir_log_at(const hpl__lc *lc, int k);
/* What the stores are given: "HOST:PORT[,HOST:PORT...]" (owned by lc). */
const char *hpl__lc_dir_addrs(const hpl__lc *lc);
/* The local etcd's client URL ("" without ha_dirs) and pid (0: none). */
const char *hpl__lc_etcd_url(const hpl__lc *lc);
pid_t hpl__lc_etcd_pid(const hpl__lc *lc);

/* Which directory leads: the running one that wrote its port file last
 * (a directory under a lease writes it once it leads), waiting at most
 * timeout_ms for one to. Returns k, or -1 (none leads yet). */
int hpl__lc_leader(hpl__lc *lc, int timeout_ms);

/* The caller reaped `pid` itself (waitpid; `status` as it returned it):
 * the cluster forgets it. Returns store i (>= 0), directory k as -1-k,
 * HPL__LC_ETCD, or HPL__LC_UNKNOWN (not one of the cluster's). */
#define HPL__LC_ETCD (-1000)
#define HPL__LC_UNKNOWN (-1001)
int hpl__lc_reaped(hpl__lc *lc, pid_t pid, int status);

/* Send `sig` to store i (or directory k with i = -1-k: -1 is directory 0)
 * and, for SIGKILL and SIGTERM, reap it (waiting at most 10 s). Returns 0
 * or HPL_EINVAL. */
int hpl__lc_signal(hpl__lc *lc, int i, int sig);

/* Exit status (as from waitpid) of store i (or directory k, i = -1-k)
 * after hpl__lc_signal reaped it; -1 if unknown. */
int hpl__lc_exit_status(const hpl__lc *lc, int i);

/* Start store i again (after it was killed) with the same socket; or, with
 * i = -1-k, restart directory k on the same port (with ha_dirs it stands
 * by, not waited for, unless no other directory runs). Returns 0 or an
 * error (err as for hpl__lc_start). */
int hpl__lc_restart(hpl__lc *lc, int i, char *err, size_t errlen);

/* Check that every process the cluster still counts as running is alive.
 * Returns 0, or HPL_ECONN with a description of the first process that
 * exited (and its status) in err. A process that died is reaped. */
int hpl__lc_check(hpl__lc *lc, char *err, size_t errlen);

/* Arguments store i gets after the common ones from its next start on
 * (hpl__lc_restart), replacing those it had (copied; NULL: none). Returns 0,
 * or HPL_EINVAL (no such store, or longer than 511 bytes). */
int hpl__lc_set_store_args(hpl__lc *lc, int i, const char *extra_args);

/* Add one more store; returns its index or a negative error. */
int hpl__lc_add_store(hpl__lc *lc, const char *extra_args, char *err, size_t errlen);

/* Move the calling thread (only it) into emulated host `host`'s network
 * namespace, /run/netns/<prefix>-h<host>, as a client on that host runs.
 * Returns 0, or HPL_ESYS with errno set. */
int hpl__lc_enter_host(const char *prefix, int host);

#endif
