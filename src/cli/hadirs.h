/*
 * hadirs.h - standby directories for a local or emulated cluster: one etcd
 * (Debian's etcd-server) and several hoplite-directory processes under a
 * leader lease in it (--etcd, --ha-prefix, --lease-ms), each on an address
 * and port fixed up front (a standby does not listen until it leads, so
 * stores must be given every address beforehand: hpl__hd_dir_list).
 *
 * With emulated hosts (netns_prefix) directory i runs in namespace
 * "<prefix>-h<host[i]>" and etcd in the switch namespace "<prefix>-sw",
 * where it gets an address of its own on the bridge (etcd_ip): cutting a
 * host's switch port cuts it off from etcd as from every other host.
 * Without, everything runs on 127.0.0.1.
 *
 * Not thread-safe; blocking (it waits for processes with timeouts). The
 * stores are started separately (localcluster.h, opts.dir_list).
 *
 * Callers: bench/bench_faults.c (the dirhost fault), tests/test_netns_ha.c.
 */
#ifndef HPL_HADIRS_H
#define HPL_HADIRS_H

#include <stdint.h>
#include <sys/types.h>

#define HPL__HD_MAX_DIRS 4

typedef struct hpl__hd hpl__hd;

typedef struct hpl__hd_opts {
  int ndirs;                /* directories, 1..HPL__HD_MAX_DIRS */
  const char *bin_dir;      /* where hoplite-directory is (NULL: as localcluster finds it) */
  const char *work_dir;     /* logs and etcd's data (required; must exist) */
  const char *secret;       /* the cluster secret file (--auth-file; NULL: none) */
  const char *netns_prefix; /* emulated hosts (NULL: loopback) */
  int host[HPL__HD_MAX_DIRS];              /* directory i's emulated host */
  const char *host_addr[HPL__HD_MAX_DIRS]; /* ... and its address there */
  const char *etcd_ip;      /* emulated: etcd's address on the bridge (e.g. BASE.254) */
  int etcd_port;            /* etcd's client port (its peer port is the next one) */
  int dir_port;             /* every directory's --listen port */
  uint32_t lease_ms;        /* --lease-ms (0: 1000) */
  const char *ha_prefix;    /* --ha-prefix (NULL: /hoplite/<pid>-<random>) */
  const char *dir_args;     /* more arguments for every directory, space-separated (may be NULL) */
  const char *log_level;    /* directories' --log-level (NULL: info) */
  int timeout_ms;           /* how long etcd and the first leader may take (0: 20000) */
} hpl__hd_opts;

/* Start etcd, wait until it answers, start every directory and wait until
 * one leads. On success *out is the caller's (hpl__hd_stop). On failure
 * everything started is stopped and err[errlen] says what failed (the log
 * to read). Returns 0, HPL_EINVAL (bad options), HPL_ESYS (fork, files),
 * HPL_ETIMEDOUT (etcd or the first leader did not come up). */
int hpl__hd_start(const hpl__hd_opts *o, hpl__hd **out, char *err, size_t errlen);

/* Stop the directories (SIGTERM: a leader revokes its lease) and etcd,
 * remove etcd's data directory, free. NULL is a no-op. */
void hpl__hd_stop(hpl__hd *hd);

/* "HOST:PORT,HOST:PORT,...": every directory, for the stores' --directory.
 * Owned by hd. */
const char *hpl__hd_dir_list(const hpl__hd *hd);

/* The etcd endpoint ("http://IP:PORT") and the leader key (PREFIX/leader).
 * Owned by hd. */
const char *hpl__hd_etcd_url(const hpl__hd *hd);
const char *hpl__hd_leader_key(const hpl__hd *hd);

/* Which directory leads according to etcd (the leader key's value matched
 * against the directories' addresses), asked from inside the switch
 * namespace when emulated; its term (the key's create revision) in *term
 * (may be NULL). Waits up to timeout_ms for a leader. Returns the index,
 * or -1 (no leader in time, or etcd not reachable). */
int hpl__hd_leader(hpl__hd *hd, int timeout_ms, uint64_t *term);

/* Directory i's emulated host, pid (0: not running) and log file. */
int hpl__hd_host(const hpl__hd *hd, int i);
pid_t hpl__hd_pid(const hpl__hd *hd, int i);
const char *hpl__hd_log(const hpl__hd *hd, int i);
pid_t hpl__hd_etcd_pid(const hpl__hd *hd);

/* Send `sig` to directory i; SIGKILL and SIGTERM are reaped (at most 10 s).
 * Returns 0 or HPL_EINVAL (no such directory running). */
int hpl__hd_signal(hpl__hd *hd, int i, int sig);

/* Start directory i again (after hpl__hd_signal ended it); it stands by
 * (or leads, if no one does). Returns 0 or HPL_EINVAL / HPL_ESYS. */
int hpl__hd_restart(hpl__hd *hd, int i, char *err, size_t errlen);

/* 1 if directory i's process is alive (it may lead or stand by), else 0
 * (it exited: reaped). */
int hpl__hd_alive(hpl__hd *hd, int i);

#endif
