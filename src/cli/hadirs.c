/* hadirs.c - etcd and standby directories for a local or emulated cluster
 * (see hadirs.h). */
#include "hadirs.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd.h"
#include "hoplite.h"
#include "lcdir.h"
#include "lcetcd.h"
#include "lcproc.h"
#include "util.h"

typedef struct hd_proc {
  pid_t pid;
  char log[PATH_MAX];
} hd_proc;

struct hpl__hd {
  hpl__hd_opts o;
  char bin_dir[PATH_MAX];
  char work[PATH_MAX], secret[PATH_MAX], level[16], dir_args[512];
  char prefix[128], leader_key[160];
  char etcd_ip[64], etcd_url[128], data[PATH_MAX];
  char sw_ns[80]; /* emulated: the switch namespace, where etcd runs */
  char addr[HPL__HD_MAX_DIRS][64]; /* each directory's HOST:PORT */
  char list[HPL__HD_MAX_DIRS * 64];
  hd_proc etcd, dir[HPL__HD_MAX_DIRS];
};

const char *hpl__hd_dir_list(const hpl__hd *hd) { return hd->list; }
const char *hpl__hd_etcd_url(const hpl__hd *hd) { return hd->etcd_url; }
const char *hpl__hd_leader_key(const hpl__hd *hd) { return hd->leader_key; }
int hpl__hd_host(const hpl__hd *hd, int i) { return hd->o.host[i]; }
pid_t hpl__hd_pid(const hpl__hd *hd, int i) { return hd->dir[i].pid; }
const char *hpl__hd_log(const hpl__hd *hd, int i) { return hd->dir[i].log; }
pid_t hpl__hd_etcd_pid(const hpl__hd *hd) { return hd->etcd.pid; }




static void stop_proc(hd_proc *p, int sig) { hpl__lcp_stop(&p->pid, sig); }

/* ------------------------------------------------------------------ asking etcd */

int hpl__hd_leader(hpl__hd *hd, int timeout_ms, uint64_t *term) {
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  for (;;) {
    char val[HPL__ETCD_MAX_VAL + 1];
    int64_t rev = 0;
    if (hpl__lce_get(hd->etcd_url, hd->o.netns_prefix ? hd->sw_ns : NULL, hd->leader_key, val,
                     sizeof val, &rev) == 0)
      for (int i = 0; i < hd->o.ndirs; i++)
        if (!strcmp(val, hd->addr[i])) {
          if (term) *term = (uint64_t)rev;
          return i;
        }
    if (hpl__ms_left(deadline) == 0) return -1;
    hpl__sleep_until_ns(hpl__now_ns() + 50000000ull); /* etcd tells no one when a key appears; a lease expires in steps */
  }
}

/* ------------------------------------------------------------------ processes */

/* Emulated hosts: give the bridge in the switch namespace etcd's address
 * (`ip -n NS addr replace IP/24 dev br0`: idempotent). */
static int bridge_addr(hpl__hd *hd, char *err, size_t errlen) {
  char ns[64], ip[80];
  snprintf(ns, sizeof ns, "%s-sw", hd->o.netns_prefix);
  snprintf(ip, sizeof ip, "%s/24", hd->etcd_ip);
  char *argv[] = {"ip", "-n", ns, "addr", "replace", ip, "dev", "br0", NULL};
  char log[PATH_MAX];
  snprintf(log, sizeof log, "%s/etcd.log", hd->work);
  pid_t pid = hpl__lcp_spawn(argv, log);
  int st = -1;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
    return hpl__errf(err, errlen, HPL_ESYS,
                         "cannot give the bridge in %s the address %s (log %s)", ns, ip, log);
  return 0;
}

static int start_etcd(hpl__hd *hd, char *err, size_t errlen) {
  if (hd->o.netns_prefix && bridge_addr(hd, err, errlen)) return HPL_ESYS;
  char name[32], curls[160], purl[96];
  snprintf(name, sizeof name, "hd%d", (int)getpid());
  snprintf(curls, sizeof curls, "%s,http://127.0.0.1:%d", hd->etcd_url, hd->o.etcd_port);
  snprintf(purl, sizeof purl, "http://127.0.0.1:%d", hd->o.etcd_port + 1);
  snprintf(hd->etcd.log, sizeof hd->etcd.log, "%s/etcd.log", hd->work);
  /* Short heartbeat and election times: an election among etcd's members
   * stalls the leader's renewals about that long, short against a lease. */
  hpl__lce_opts e = {.name = name,
                     .data_dir = hd->data,
                     .client_urls = curls,
                     .url = hd->etcd_url,
                     .peer_url = purl,
                     .heartbeat_ms = 50,
                     .election_ms = 500,
                     .netns = hd->o.netns_prefix ? hd->sw_ns : NULL,
                     .log = hd->etcd.log,
                     .timeout_ms = hd->o.timeout_ms};
  return hpl__lce_start(&e, &hd->etcd.pid, err, errlen);
}

static int start_dir(hpl__hd *hd, int i, char *err, size_t errlen) {
  char ns[80];
  snprintf(ns, sizeof ns, "%s-h%d", hd->o.netns_prefix ? hd->o.netns_prefix : "", hd->o.host[i]);
  snprintf(hd->dir[i].log, sizeof hd->dir[i].log, "%s/directory-%d.log", hd->work, i);
  hpl__lcd_opts d = {.bin_dir = hd->bin_dir,
                     .listen = hd->addr[i],
                     .log_level = hd->level,
                     .secret = hd->secret,
                     .dir_args = hd->dir_args,
                     .etcd_url = hd->etcd_url,
                     .ha_prefix = hd->prefix,
                     .lease_ms = hd->o.lease_ms,
                     .netns = hd->o.netns_prefix ? ns : NULL,
                     .log = hd->dir[i].log};
  hd->dir[i].pid = hpl__lcd_spawn(&d);
  if (hd->dir[i].pid < 0) return hpl__errf(err, errlen, HPL_ESYS, "fork: %s", strerror(errno));
  return 0;
}

int hpl__hd_start(const hpl__hd_opts *o, hpl__hd **out, char *err, size_t errlen) {
  if (!o || !out || o->ndirs < 1 || o->ndirs > HPL__HD_MAX_DIRS || !o->work_dir ||
      o->etcd_port <= 0 || o->etcd_port > 65534 || o->dir_port <= 0 ||
      (o->netns_prefix && !o->etcd_ip))
    return hpl__errf(err, errlen, HPL_EINVAL, "bad standby-directory options");
  hpl__hd *hd = calloc(1, sizeof *hd);
  if (!hd) return hpl__errf(err, errlen, HPL_ENOMEM, "out of memory");
  hd->o = *o;
  if (!hd->o.lease_ms) hd->o.lease_ms = 1000;
  if (!hd->o.timeout_ms) hd->o.timeout_ms = 20000;
  snprintf(hd->work, sizeof hd->work, "%s", o->work_dir);
  snprintf(hd->secret, sizeof hd->secret, "%s", o->secret ? o->secret : "");
  snprintf(hd->level, sizeof hd->level, "%s", o->log_level ? o->log_level : "info");
  snprintf(hd->dir_args, sizeof hd->dir_args, "%s", o->dir_args ? o->dir_args : "");
  uint64_t r = hpl__random_u64();
  if (o->ha_prefix)
    snprintf(hd->prefix, sizeof hd->prefix, "%s", o->ha_prefix);
  else
    snprintf(hd->prefix, sizeof hd->prefix, "/hoplite/hd-%d-%08llx", (int)getpid(),
             (unsigned long long)(r & 0xffffffffu));
  snprintf(hd->leader_key, sizeof hd->leader_key, "%s/leader", hd->prefix);
  snprintf(hd->sw_ns, sizeof hd->sw_ns, "%s-sw", o->netns_prefix ? o->netns_prefix : "");
  snprintf(hd->etcd_ip, sizeof hd->etcd_ip, "%s", o->netns_prefix ? o->etcd_ip : "127.0.0.1");
  snprintf(hd->etcd_url, sizeof hd->etcd_url, "http://%s:%d", hd->etcd_ip, o->etcd_port);
  /* etcd syncs its log on every write: in memory, so a renewal never waits for the disk */
  snprintf(hd->data, sizeof hd->data, "/dev/shm/hoplite-etcd-%d-%08llx", (int)getpid(),
           (unsigned long long)(r >> 32));
  size_t used = 0;
  for (int i = 0; i < o->ndirs; i++) {
    const char *a = o->netns_prefix ? o->host_addr[i] : "127.0.0.1";
    if (!a) {
      free(hd);
      return hpl__errf(err, errlen, HPL_EINVAL, "no address for directory %d", i);
    }
    snprintf(hd->addr[i], sizeof hd->addr[i], "%s:%d", a, o->dir_port);
    used += (size_t)snprintf(hd->list + used, sizeof hd->list - used, "%s%s", i ? "," : "",
                             hd->addr[i]);
  }
  if (hpl__lcp_bin_dir(o->bin_dir, "hoplite-directory", hd->bin_dir, sizeof hd->bin_dir)) {
    free(hd);
    return hpl__errf(err, errlen, HPL_ESYS, "cannot find this program's directory");
  }
  int rc = start_etcd(hd, err, errlen);
  for (int i = 0; rc == 0 && i < o->ndirs; i++) rc = start_dir(hd, i, err, errlen);
  if (rc == 0 && hpl__hd_leader(hd, hd->o.timeout_ms, NULL) < 0)
    rc = hpl__errf(err, errlen, HPL_ETIMEDOUT, "no directory leads after %d ms; logs in %s",
              hd->o.timeout_ms, hd->work);
  if (rc) {
    hpl__hd_stop(hd);
    return rc;
  }
  *out = hd;
  return 0;
}

void hpl__hd_stop(hpl__hd *hd) {
  if (!hd) return;
  for (int i = 0; i < hd->o.ndirs; i++)
    if (hd->dir[i].pid > 0) kill(hd->dir[i].pid, SIGTERM);
  for (int i = 0; i < hd->o.ndirs; i++) stop_proc(&hd->dir[i], SIGTERM);
  stop_proc(&hd->etcd, SIGTERM);
  hpl__lcp_rm_tree(hd->data, 16);
  free(hd);
}

int hpl__hd_signal(hpl__hd *hd, int i, int sig) {
  if (i < 0 || i >= hd->o.ndirs || hd->dir[i].pid <= 0) return HPL_EINVAL;
  if (kill(hd->dir[i].pid, sig) != 0) return HPL_ESYS;
  if (sig == SIGKILL || sig == SIGTERM) {
    if (!hpl__lcp_reap(hd->dir[i].pid, 10000, NULL)) return HPL_ETIMEDOUT;
    hd->dir[i].pid = 0;
  }
  return 0;
}

int hpl__hd_restart(hpl__hd *hd, int i, char *err, size_t errlen) {
  if (i < 0 || i >= hd->o.ndirs || hd->dir[i].pid > 0)
    return hpl__errf(err, errlen, HPL_EINVAL, "directory %d is running or unknown", i);
  return start_dir(hd, i, err, errlen);
}

int hpl__hd_alive(hpl__hd *hd, int i) {
  if (i < 0 || i >= hd->o.ndirs || hd->dir[i].pid <= 0) return 0;
  if (waitpid(hd->dir[i].pid, NULL, WNOHANG) == hd->dir[i].pid) {
    hd->dir[i].pid = 0;
    return 0;
  }
  return 1;
}
