/*
 * lcdir.h - starting one hoplite-directory process of a local cluster:
 * on its address, with the cluster's secret, optionally inside a network
 * namespace and, for standby directories, under a leader lease in etcd
 * (--etcd, --ha-prefix, --lease-ms: directory/ha.h). Waiting for it is the
 * caller's (a standby does not listen until it leads).
 *
 * Callers: localcluster.c (its directory, or `hoplite cluster up --ha`'s
 * directories) and hadirs.c (standby directories on emulated hosts).
 */
#ifndef HPL_LCDIR_H
#define HPL_LCDIR_H

#include <stdint.h>
#include <sys/types.h>

typedef struct hpl__lcd_opts {
  const char *bin_dir;   /* where hoplite-directory is */
  const char *listen;    /* --listen HOST:PORT (PORT 0: the kernel's pick) */
  const char *port_file; /* --port-file (written once it listens; NULL: none) */
  const char *log_level; /* --log-level */
  const char *secret;    /* --auth-file: the cluster secret (NULL or "": none) */
  const char *dir_args;  /* more arguments, space-separated (NULL: none) */
  const char *etcd_url;  /* --etcd: under a lease (NULL: a plain directory) */
  const char *ha_prefix; /* --ha-prefix (with etcd_url) */
  uint32_t lease_ms;     /* --lease-ms (with etcd_url) */
  const char *netns;     /* run inside this network namespace (NULL: here) */
  const char *log;       /* its stdout and stderr (NULL or "": ours) */
} hpl__lcd_opts;

/* Start the directory o describes (hpl__lcp_spawn). Returns its pid, or
 * -1 with errno set (nothing started). */
pid_t hpl__lcd_spawn(const hpl__lcd_opts *o);

#endif
