/*
 * lcetcd.h - the local etcd that standby directories hold their leader
 * lease in (directory/ha.h): starting one (Debian's etcd-server; a single
 * member, on given ports and data directory, optionally inside a network
 * namespace), waiting until it answers, and asking it for a key from
 * inside that namespace. Nothing here knows what the keys mean.
 *
 * Blocking (it waits for etcd with a timeout); not for an event loop.
 * Callers: localcluster.c (`hoplite cluster up --ha`) and hadirs.c
 * (bench_faults' dirhost kind, tests/test_netns_ha.c).
 */
#ifndef HPL_LCETCD_H
#define HPL_LCETCD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct hpl__lce_opts {
  const char *name;        /* the member's --name */
  const char *data_dir;    /* --data-dir (made by etcd; removing it is the caller's) */
  const char *client_urls; /* --listen-client-urls ("http://IP:PORT[,...]") */
  const char *url;         /* --advertise-client-urls: the one URL clients use */
  const char *peer_url;    /* --listen-peer-urls and --initial-advertise-peer-urls */
  int heartbeat_ms, election_ms; /* --heartbeat-interval, --election-timeout */
  const char *netns;       /* run (and ask) inside this network namespace (NULL: here) */
  const char *log;         /* its stdout and stderr (NULL or "": ours) */
  int timeout_ms;          /* how long it may take to answer */
} hpl__lce_opts;

/* The etcd binary: $HOPLITE_ETCD, else /usr/bin/etcd. 0, or HPL_EINVAL
 * with a message saying how to get one in err (it is not executable). */
int hpl__lce_binary(const char **bin, char *err, size_t errlen);

/* Start etcd as o says and wait until it answers a get of any key. *pid
 * is set as soon as it runs (0: not started); on failure the caller
 * stops it (hpl__lcp_stop). Returns 0, HPL_EINVAL (no binary: err says
 * how to get one), HPL_ESYS (fork; it exited: err names its log) or
 * HPL_ETIMEDOUT (it did not answer in o->timeout_ms). */
int hpl__lce_start(const hpl__lce_opts *o, pid_t *pid, char *err, size_t errlen);

/* Get `key` from the etcd at `url`, from a thread inside namespace
 * `netns` when given (an emulated host's etcd is reachable only there):
 * its value into val (cap bytes, terminated) and its create revision into
 * *rev (may be NULL). 0, HPL_ENOTFOUND (no such key), HPL_ESYS (no such
 * namespace, no thread) or what hpl__etcd_get returns (etcd.h). */
int hpl__lce_get(const char *url, const char *netns, const char *key, char *val, size_t cap,
                 int64_t *rev);

#endif
