/* bench_faults_ha.c - bench_faults' standby directories (--faults
 * dirhost): starting etcd and two directories under a lease on the
 * emulated cluster (src/cli/hadirs.h), healing the cut leader's host once
 * another directory leads, and the checks after a fault of the leading
 * directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hoplite.h"
#include "auth.h"
#include "util.h"
#include "bench_faults.h"

#define HA_ETCD_PORT 23790 /* in the switch namespace, on BASE.254 */
#define HA_DIR_PORT 7400   /* every directory's, on its host's address */

/* dirhost, once the survivors are done: wait (up to 10 s) until a
 * directory on another host leads - the cut one has lost its lease by then
 * and stands by, so the loss was for good - and heal the cut. A run
 * without a failover counts as an error. */
void hpl__bf_heal_dirhost(hpl__bf_cfg *g, int host, hpl__bf_outcome *oc, uint64_t start) {
  uint64_t end = hpl__now_ns() + 10000000000ull;
  int l;
  uint64_t term = 0;
  while ((l = hpl__hd_leader(hpl__bf_hd, 1000, &term)) < 0 || hpl__hd_host(hpl__bf_hd, l) == host) {
    if (hpl__now_ns() >= end) break;
    hpl__sleep_until_ns(hpl__now_ns() + 50000000ull);
  }
  if (l < 0 || hpl__hd_host(hpl__bf_hd, l) == host) {
    fprintf(stderr, "bench_faults: no directory on another host leads 10 s after host %d's cut\n",
            host);
    oc->other++;
  }
  oc->heal_secs = (double)(hpl__now_ns() - start) / 1e9;
  if (hpl__bf_cluster_cmd(g, "uncut", host, NULL)) hpl__bf_die("cluster.sh uncut failed");
}

/* After a fault of the leading standby directory (its host cut off, or
 * the process killed): note who leads now, restart a directory whose
 * process is gone (a cut one fenced itself and stands by again), and check
 * that the run's object (a broadcast's; a reduce's target) is known with a
 * complete copy. */
void hpl__bf_ha_after(hpl__bf_cfg *g, hpl__bf_outcome *oc, int op, const char *id) {
  int l = hpl__hd_leader(hpl__bf_hd, 10000, &oc->new_term);
  oc->new_leader_host = l < 0 ? -1 : hpl__hd_host(hpl__bf_hd, l);
  if (l < 0) {
    fprintf(stderr, "bench_faults: no directory leads 10 s after the run\n");
    oc->other++;
  }
  for (int d = 0; d < 2; d++)
    if (!hpl__hd_alive(hpl__bf_hd, d)) {
      char err[512];
      fprintf(stderr, "bench_faults: directory %d (host %d) had exited; restarted (log %s)\n", d,
              hpl__hd_host(hpl__bf_hd, d), hpl__hd_log(hpl__bf_hd, d));
      if (hpl__hd_restart(hpl__bf_hd, d, err, sizeof err)) hpl__bf_die(err);
    }
  hpl_client *c = hpl__bf_any_live(g);
  uint64_t size = 0;
  uint32_t copies = 0, complete = 0;
  int inl = 0;
  (void)op;
  int rc = c ? hpl_stat(c, id, 10000, &size, &copies, &complete, &inl) : HPL_ECONN;
  if (rc || (!complete && !inl)) {
    fprintf(stderr, "bench_faults: after the failover %s: %s, %u complete copies of %u\n", id,
            rc ? hpl_strerror(rc) : "known", complete, copies);
    oc->unstated++;
  }
}

/* --faults dirhost: etcd in the switch namespace (on BASE.254, so a cut
 * host loses it with everything else), and two standby directories, on
 * the last two hosts (neither the broadcast's source, node 0, nor the
 * receivers' only host), with the cluster's secret; the stores get both
 * addresses (o->dir_list). The work directory is made here when none is
 * given (the directories' logs go there too), and o points at it. */
int hpl__bf_ha_start(hpl__bf_cfg *g, hpl__lc_opts *o, char *work, size_t wlen) {
  char err[512], secret[300], etcd_ip[64];
  if (g->work_dir) {
    snprintf(work, wlen, "%s", g->work_dir);
    mkdir(work, 0700);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(work, wlen, "%s/hoplite-faults-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(work)) hpl__bf_die("mkdtemp failed");
    o->remove_work_dir = 1;
  }
  o->work_dir = work;
  snprintf(secret, sizeof secret, "%s/cluster.secret", work);
  if (access(secret, F_OK) != 0 && hpl__auth_create(secret, err, sizeof err)) hpl__bf_die(err);
  snprintf(etcd_ip, sizeof etcd_ip, "%s", g->addrs[0]);
  char *dot = strrchr(etcd_ip, '.');
  if (!dot) hpl__bf_die("--addrs: not IPv4 addresses");
  snprintf(dot + 1, sizeof etcd_ip - (size_t)(dot + 1 - etcd_ip), "254");
  hpl__hd_opts h = {.ndirs = 2,
                    .work_dir = work,
                    .secret = secret,
                    .netns_prefix = g->netns,
                    .host = {g->hosts - 1, g->hosts - 2},
                    .host_addr = {g->addrs[g->hosts - 1], g->addrs[g->hosts - 2]},
                    .etcd_ip = etcd_ip,
                    .etcd_port = HA_ETCD_PORT,
                    .dir_port = HA_DIR_PORT,
                    .lease_ms = g->lease_ms ? g->lease_ms : 1000,
                    .dir_args = o->dir_args,
                    .log_level = o->log_level};
  if (hpl__hd_start(&h, &hpl__bf_hd, err, sizeof err)) {
    fprintf(stderr, "bench_faults: standby directories: %s\n", err);
    return 1;
  }
  o->dir_list = hpl__hd_dir_list(hpl__bf_hd);
  return 0;
}
