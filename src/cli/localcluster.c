/* localcluster.c - starting and stopping a cluster of real processes on
 * this machine (see localcluster.h). */
#include "localcluster.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "hoplite.h"
#include "lcdir.h"
#include "lcetcd.h"
#include "lcproc.h"
#include "util.h"

#define LC_MAX_NODES 256
#define LC_MAX_ARGS 64 /* leave 4 slots for "ip netns exec NS" */
#define LC_MAX_DIRS 4

typedef struct lc_proc {
  pid_t pid;
  int status; /* of the last reaped run, -1 unknown */
  char log[PATH_MAX];
  char extra[512];
} lc_proc;

struct hpl__lc {
  hpl__lc_opts o;
  char bin_dir[PATH_MAX];
  char work[PATH_MAX];
  int own_work;
  char host[64];
  char level[16];
  char dir_args[512], store_args[512];
  char secret[PATH_MAX]; /* "" without one */
  int ndirs;                  /* directories (1, or o.ha_dirs) */
  int dir_port[LC_MAX_DIRS];
  lc_proc dir[LC_MAX_DIRS];
  char dir_list[LC_MAX_DIRS * 72]; /* what stores get: "HOST:PORT[,HOST:PORT...]" */
  /* with ha_dirs: the local etcd */
  lc_proc etcd;
  char etcd_url[96];
  char ha_prefix[64]; /* the directories' --ha-prefix */
  int n;
  lc_proc st[LC_MAX_NODES];
  char sock[LC_MAX_NODES][108];
};

int hpl__lc_nodes(const hpl__lc *lc) { return lc->n; }
const char *hpl__lc_socket(const hpl__lc *lc, int i) { return lc->sock[i]; }
int hpl__lc_dir_port(const hpl__lc *lc) { return lc->dir_port[0]; }
const char *hpl__lc_work_dir(const hpl__lc *lc) { return lc->work; }
const char *hpl__lc_secret(const hpl__lc *lc) { return lc->secret; }
pid_t hpl__lc_dir_pid(const hpl__lc *lc) { return lc->dir[0].pid; }
pid_t hpl__lc_store_pid(const hpl__lc *lc, int i) { return lc->st[i].pid; }
const char *hpl__lc_store_log(const hpl__lc *lc, int i) { return lc->st[i].log; }
const char *hpl__lc_dir_log(const hpl__lc *lc) { return lc->dir[0].log; }
int hpl__lc_dirs(const hpl__lc *lc) { return lc->ndirs; }
int hpl__lc_dir_port_at(const hpl__lc *lc, int k) { return lc->dir_port[k]; }
pid_t hpl__lc_dir_pid_at(const hpl__lc *lc, int k) { return lc->dir[k].pid; }
const char *hpl__lc_dir_log_at(const hpl__lc *lc, int k) { return lc->dir[k].log; }
const char *hpl__lc_dir_addrs(const hpl__lc *lc) { return lc->dir_list; }
const char *hpl__lc_etcd_url(const hpl__lc *lc) { return lc->etcd_url; }
pid_t hpl__lc_etcd_pid(const hpl__lc *lc) { return lc->etcd.pid; }


/* Append the words of `extra` (space-separated) to argv. */
static int add_args(char **argv, int argc, char *buf, size_t blen, const char *extra) {
  return hpl__lcp_split_args(argv, argc, LC_MAX_ARGS - 5, buf, blen, extra);
}

/* Wait for one file, as hpl__lcp_wait_files: 0 or a negative HPL_E*. */
static int wait_file(const char *dir, const char *path, pid_t pid, int timeout_ms) {
  int rc = hpl__lcp_wait_files(dir, &path, 1, pid, timeout_ms);
  return rc > 0 ? 0 : rc;
}

static int read_int_file(const char *path) {
  FILE *f = fopen(path, "r");
  int v = -1;
  if (f) {
    if (fscanf(f, "%d", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

static void log_path(hpl__lc *lc, char *out, const char *name) {
  if (lc->o.logs_to_stderr)
    out[0] = 0;
  else
    snprintf(out, PATH_MAX, "%s/%s.log", lc->work, name);
}

/* Host i's address (the emulated host's, or the cluster's single host). */
static const char *node_host(hpl__lc *lc, int i) {
  if (lc->o.netns_prefix && lc->o.host_addrs && lc->o.host_addrs[i]) return lc->o.host_addrs[i];
  return lc->host;
}

/* With emulated hosts, run argv inside host i's namespace (ns: its name). */
static void in_netns(hpl__lc *lc, int i, char **argv, int *argc, char *ns, size_t nslen) {
  if (!lc->o.netns_prefix) return;
  snprintf(ns, nslen, "%s-h%d", lc->o.netns_prefix, i);
  *argc = hpl__lcp_in_netns(argv, *argc, ns);
}

/* Directory k's port file (written once it listens: with --etcd, once it
 * leads): "directory.port", then "directory-1.port", ... */
static void port_file(const hpl__lc *lc, int k, char *out) {
  if (k == 0) snprintf(out, PATH_MAX, "%s/directory.port", lc->work);
  else snprintf(out, PATH_MAX, "%s/directory-%d.port", lc->work, k);
}

/* Start directory k on its port (0 the first time without ha_dirs: the
 * kernel's pick). `wait`: until it listens (a standby never does). */
static int start_directory(hpl__lc *lc, int k, int wait, char *err, size_t errlen) {
  char listen[128], pfile[PATH_MAX], name[32], ns[64];
  snprintf(listen, sizeof listen, "%s:%d", node_host(lc, lc->o.dir_host), lc->dir_port[k]);
  port_file(lc, k, pfile);
  unlink(pfile);
  if (lc->o.netns_prefix) snprintf(ns, sizeof ns, "%s-h%d", lc->o.netns_prefix, lc->o.dir_host);
  if (k == 0) snprintf(name, sizeof name, "directory");
  else snprintf(name, sizeof name, "directory-%d", k);
  lc_proc *d = &lc->dir[k];
  log_path(lc, d->log, name);
  hpl__lcd_opts o = {.bin_dir = lc->bin_dir,
                     .listen = listen,
                     .port_file = pfile,
                     .log_level = lc->level,
                     .secret = lc->secret,
                     .dir_args = lc->dir_args,
                     .etcd_url = lc->o.ha_dirs ? lc->etcd_url : NULL,
                     .ha_prefix = lc->ha_prefix,
                     .lease_ms = lc->o.lease_ms ? lc->o.lease_ms : 1000,
                     .netns = lc->o.netns_prefix ? ns : NULL,
                     .log = d->log};
  d->pid = hpl__lcd_spawn(&o);
  if (d->pid < 0) return hpl__errf(err, errlen, HPL_ESYS, "fork: %s", strerror(errno));
  if (!wait) return 0;
  int rc = wait_file(lc->work, pfile, d->pid, lc->o.timeout_ms);
  if (rc) {
    if (rc == HPL_ECONN) d->pid = 0;
    if (rc == HPL_ETIMEDOUT && lc->etcd.pid > 0 && hpl__lcp_reap(lc->etcd.pid, 0, NULL)) {
      lc->etcd.pid = 0;
      return hpl__errf(err, errlen, HPL_ECONN, "etcd exited, so no directory leads; log: %s",
                  lc->etcd.log[0] ? lc->etcd.log : "stderr");
    }
    return hpl__errf(err, errlen, rc, "hoplite-directory did not come up (%s); log: %s",
                rc == HPL_ECONN ? "it exited" : "timeout", d->log[0] ? d->log : "stderr");
  }
  int port = read_int_file(pfile);
  if (port <= 0) return hpl__errf(err, errlen, HPL_EPROTO, "bad port file %s", pfile);
  lc->dir_port[k] = port;
  return 0;
}

/* With ha_dirs: a local etcd in work/etcd on two free ports, fast to
 * elect (it has one member), and the directories' ports chosen now (a
 * standby does not listen, so the stores must be told every address
 * before any of them leads). */
static int start_etcd(hpl__lc *lc, char *err, size_t errlen) {
  const char *bin;
  int rc = hpl__lce_binary(&bin, err, errlen);
  if (rc) return rc;
  int ports[2 + LC_MAX_DIRS];
  if (hpl__lcp_free_ports(lc->host, 2 + lc->ndirs, ports))
    return hpl__errf(err, errlen, HPL_ESYS, "no free ports on %s: %s", lc->host,
                         strerror(errno));
  char data[PATH_MAX], purl[96];
  snprintf(data, sizeof data, "%s/etcd", lc->work);
  snprintf(lc->etcd_url, sizeof lc->etcd_url, "http://%s:%d", lc->host, ports[0]);
  snprintf(purl, sizeof purl, "http://%s:%d", lc->host, ports[1]);
  log_path(lc, lc->etcd.log, "etcd");
  hpl__lce_opts e = {.name = "hoplite",
                     .data_dir = data,
                     .client_urls = lc->etcd_url,
                     .url = lc->etcd_url,
                     .peer_url = purl,
                     .heartbeat_ms = 20,
                     .election_ms = 100,
                     .log = lc->etcd.log,
                     .timeout_ms = lc->o.timeout_ms};
  if ((rc = hpl__lce_start(&e, &lc->etcd.pid, err, errlen))) return rc;
  size_t off = 0;
  for (int k = 0; k < lc->ndirs; k++) {
    lc->dir_port[k] = ports[2 + k];
    off += (size_t)snprintf(lc->dir_list + off, sizeof lc->dir_list - off, "%s%s:%d",
                            k ? "," : "", lc->host, ports[2 + k]);
  }
  snprintf(lc->ha_prefix, sizeof lc->ha_prefix, "/hoplite/lc-%d-%016llx", (int)getpid(),
           (unsigned long long)hpl__random_u64());
  return 0;
}

static int start_store(hpl__lc *lc, int i, char *err, size_t errlen) {
  char exe[PATH_MAX], dir[sizeof lc->dir_list], rfile[PATH_MAX], mem[32], name[32], dlisten[96],
      buf[512], buf2[512];
  snprintf(exe, sizeof exe, "%s/hoplite-store", lc->bin_dir);
  /* the directories started here, or (dir_list) started elsewhere */
  snprintf(dir, sizeof dir, "%s", lc->o.dir_list ? lc->o.dir_list : lc->dir_list);
  snprintf(rfile, sizeof rfile, "%s/node-%d.ready", lc->work, i);
  snprintf(mem, sizeof mem, "%llu", (unsigned long long)lc->o.memory);
  snprintf(name, sizeof name, "node-%d", i);
  snprintf(dlisten, sizeof dlisten, "%s:0", node_host(lc, i));
  snprintf(lc->sock[i], sizeof lc->sock[i], "%s/node-%d.sock", lc->work, i);
  unlink(rfile);
  char *argv[LC_MAX_ARGS] = {exe, "--directory", dir, "--socket", lc->sock[i], "--memory", mem,
                             "--name", name, "--ready-file", rfile, "--data-listen", dlisten,
                             "--data-addr", (char *)node_host(lc, i), "--log-level", lc->level};
  int argc = 17;
  char cred[PATH_MAX];
  if (lc->secret[0]) { /* each store its node's credential, never the secret (auth.h) */
    snprintf(cred, sizeof cred, "%s/%s.cred", lc->work, name);
    hpl__auth a;
    int rc = hpl__auth_load(lc->secret, &a, err, errlen);
    if (!rc) rc = hpl__auth_write_node(&a, name, cred, err, errlen);
    sodium_memzero(&a, sizeof a);
    if (rc && rc != HPL_EEXIST) return rc; /* (a restarted store keeps its credential) */
    argv[argc++] = "--auth-file";
    argv[argc++] = cred;
  }
  argc = add_args(argv, argc, buf, sizeof buf, lc->store_args);
  argc = add_args(argv, argc, buf2, sizeof buf2, lc->st[i].extra);
  argv[argc] = NULL;
  char ns[64];
  in_netns(lc, i, argv, &argc, ns, sizeof ns);
  log_path(lc, lc->st[i].log, name);
  lc->st[i].pid = hpl__lcp_spawn(argv, lc->st[i].log);
  if (lc->st[i].pid < 0) return hpl__errf(err, errlen, HPL_ESYS, "fork: %s", strerror(errno));
  int rc = wait_file(lc->work, rfile, lc->st[i].pid, lc->o.timeout_ms);
  if (rc) {
    if (rc == HPL_ECONN) lc->st[i].pid = 0;
    return hpl__errf(err, errlen, rc, "hoplite-store %s did not come up (%s); log: %s", name,
                rc == HPL_ECONN ? "it exited" : "timeout",
                lc->st[i].log[0] ? lc->st[i].log : "stderr");
  }
  return 0;
}

int hpl__lc_start(const hpl__lc_opts *o, hpl__lc **out, char *err, size_t errlen) {
  if (!o || !out || o->nodes < 0 || o->nodes > LC_MAX_NODES)
    return hpl__errf(err, errlen, HPL_EINVAL, "bad cluster options");
  hpl__lc *lc = calloc(1, sizeof *lc);
  if (!lc) return hpl__errf(err, errlen, HPL_ENOMEM, "out of memory");
  lc->o = *o;
  if (!lc->o.memory) lc->o.memory = 512ull << 20;
  if (!lc->o.timeout_ms) lc->o.timeout_ms = 10000;
  snprintf(lc->host, sizeof lc->host, "%s", o->host ? o->host : "127.0.0.1");
  snprintf(lc->level, sizeof lc->level, "%s", o->log_level ? o->log_level : "info");
  snprintf(lc->dir_args, sizeof lc->dir_args, "%s", o->dir_args ? o->dir_args : "");
  snprintf(lc->store_args, sizeof lc->store_args, "%s", o->store_args ? o->store_args : "");
  lc->o.dir_args = lc->dir_args;
  lc->o.store_args = lc->store_args;
  if (hpl__lcp_bin_dir(o->bin_dir, "hoplite-store", lc->bin_dir, sizeof lc->bin_dir)) {
    free(lc);
    return hpl__errf(err, errlen, HPL_ESYS, "cannot find this program's directory");
  }
  if (o->work_dir) {
    snprintf(lc->work, sizeof lc->work, "%s", o->work_dir);
    mkdir(lc->work, 0700);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(lc->work, sizeof lc->work, "%s/hoplite-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(lc->work)) {
      free(lc);
      return hpl__errf(err, errlen, HPL_ESYS, "mkdtemp: %s", strerror(errno));
    }
    lc->own_work = 1;
  }
  if (strlen(lc->work) + 24 >= sizeof lc->sock[0]) {
    int code = hpl__errf(err, errlen, HPL_EINVAL,
                             "work directory path too long for Unix sockets: %s", lc->work);
    if (lc->own_work) rmdir(lc->work);
    free(lc);
    return code;
  }
  int rc = 0;
  if (!o->no_auth) {
    snprintf(lc->secret, sizeof lc->secret, "%s/cluster.secret", lc->work);
    char aerr[256];
    if (access(lc->secret, F_OK) != 0 && hpl__auth_create(lc->secret, aerr, sizeof aerr) != 0)
      rc = hpl__errf(err, errlen, HPL_ESYS, "%s", aerr);
  }
  lc->ndirs = o->dir_list ? 0 : o->ha_dirs ? o->ha_dirs : 1;
  if (rc == 0 && o->ha_dirs && (o->ha_dirs < 2 || o->ha_dirs > LC_MAX_DIRS || o->netns_prefix ||
                                o->dir_list))
    rc = hpl__errf(err, errlen, HPL_EINVAL,
              "standby directories: 2 to %d, no emulated hosts, no directories of others",
              LC_MAX_DIRS);
  if (rc == 0 && (o->dir_host < 0 || (o->dir_host && (!o->netns_prefix || !o->host_addrs ||
                                                      !o->host_addrs[o->dir_host]))))
    rc = hpl__errf(err, errlen, HPL_EINVAL,
                   "the directory on host %d: only with emulated hosts whose addresses list it",
                   o->dir_host);
  if (rc == 0 && o->ha_dirs) rc = start_etcd(lc, err, errlen);
  /* the first directory leads (the others stand by behind it) */
  for (int k = 0; rc == 0 && k < lc->ndirs; k++) rc = start_directory(lc, k, k == 0, err, errlen);
  if (rc == 0 && !o->ha_dirs && !o->dir_list)
    snprintf(lc->dir_list, sizeof lc->dir_list, "%s:%d", node_host(lc, lc->o.dir_host),
             lc->dir_port[0]);
  for (int i = 0; rc == 0 && i < o->nodes; i++) {
    lc->n = i + 1;
    rc = start_store(lc, i, err, errlen);
  }
  if (rc) {
    hpl__lc_stop(lc);
    return rc;
  }
  *out = lc;
  return 0;
}

static void stop_proc(lc_proc *p, int sig) { hpl__lcp_stop(&p->pid, sig); }

void hpl__lc_stop(hpl__lc *lc) {
  if (!lc) return;
  /* stores first, so they do not spend their last seconds reconnecting */
  for (int i = 0; i < lc->n; i++)
    if (lc->st[i].pid > 0) kill(lc->st[i].pid, SIGTERM);
  for (int i = 0; i < lc->n; i++) stop_proc(&lc->st[i], SIGTERM);
  /* every directory at once: a standby does not lead for a moment */
  for (int k = 0; k < lc->ndirs; k++)
    if (lc->dir[k].pid > 0) kill(lc->dir[k].pid, SIGTERM);
  for (int k = 0; k < lc->ndirs; k++) stop_proc(&lc->dir[k], SIGTERM);
  stop_proc(&lc->etcd, SIGTERM);
  /* (depth 3: the stores' spill directories, etcd's member/snap) */
  if (lc->own_work || lc->o.remove_work_dir) hpl__lcp_rm_tree(lc->work, 3);
  free(lc);
}

/* Store i, or directory -1-i; NULL for neither. */
static lc_proc *proc_of(const hpl__lc *lc, int i) {
  if (i >= 0) return i < lc->n ? (lc_proc *)&lc->st[i] : NULL;
  return -1 - i < lc->ndirs ? (lc_proc *)&lc->dir[-1 - i] : NULL;
}

int hpl__lc_signal(hpl__lc *lc, int i, int sig) {
  lc_proc *p = proc_of(lc, i);
  if (!p || p->pid <= 0) return HPL_EINVAL;
  if (kill(p->pid, sig) != 0) return HPL_ESYS;
  if (sig == SIGKILL || sig == SIGTERM) {
    if (!hpl__lcp_reap(p->pid, 10000, &p->status)) return HPL_ETIMEDOUT;
    if (i < 0 && lc->ndirs > 1) { /* its port file no longer says who leads */
      char f[PATH_MAX];
      port_file(lc, -1 - i, f);
      unlink(f);
    }
    p->pid = 0;
  }
  return 0;
}

int hpl__lc_exit_status(const hpl__lc *lc, int i) {
  const lc_proc *p = proc_of(lc, i);
  return p ? p->status : -1;
}

int hpl__lc_restart(hpl__lc *lc, int i, char *err, size_t errlen) {
  if (i < 0) {
    if (lc->o.dir_list)
      return hpl__errf(err, errlen, HPL_EINVAL, "the directories are not ours");
    lc_proc *d = proc_of(lc, i);
    if (!d || d->pid > 0)
      return hpl__errf(err, errlen, HPL_EINVAL, "directory running or unknown");
    /* under a lease it stands by, unless no other directory runs */
    int others = 0;
    for (int k = 0; k < lc->ndirs; k++) others += k != -1 - i && lc->dir[k].pid > 0;
    return start_directory(lc, -1 - i, !others, err, errlen);
  }
  if (i >= lc->n || lc->st[i].pid > 0)
    return hpl__errf(err, errlen, HPL_EINVAL, "store %d is running or unknown", i);
  return start_store(lc, i, err, errlen);
}

int hpl__lc_leader(hpl__lc *lc, int timeout_ms) {
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  for (;;) {
    char files[LC_MAX_DIRS][PATH_MAX];
    const char *live[LC_MAX_DIRS];
    int nlive = 0, best = -1;
    struct timespec newest = {0, 0};
    for (int k = 0; k < lc->ndirs; k++) {
      struct stat st;
      if (lc->dir[k].pid <= 0) continue;
      port_file(lc, k, files[k]);
      live[nlive++] = files[k];
      if (stat(files[k], &st) != 0) continue;
      if (best < 0 || st.st_mtim.tv_sec > newest.tv_sec ||
          (st.st_mtim.tv_sec == newest.tv_sec && st.st_mtim.tv_nsec > newest.tv_nsec))
        best = k, newest = st.st_mtim;
    }
    int64_t left = hpl__ms_left(deadline);
    if (best >= 0 || !nlive || left == 0) return best;
    if (hpl__lcp_wait_files(lc->work, live, nlive, 0, (int)left) == HPL_ETIMEDOUT) return -1;
  }
}

int hpl__lc_reaped(hpl__lc *lc, pid_t pid, int status) {
  if (pid <= 0) return HPL__LC_UNKNOWN;
  if (lc->etcd.pid == pid) {
    lc->etcd.pid = 0, lc->etcd.status = status;
    return HPL__LC_ETCD;
  }
  for (int i = -lc->ndirs; i < lc->n; i++) {
    lc_proc *p = proc_of(lc, i);
    if (p && p->pid == pid) {
      p->pid = 0, p->status = status;
      if (i < 0) { /* a dead directory's port file no longer says who leads */
        char f[PATH_MAX];
        port_file(lc, -1 - i, f);
        unlink(f);
      }
      return i;
    }
  }
  return HPL__LC_UNKNOWN;
}

int hpl__lc_set_store_args(hpl__lc *lc, int i, const char *extra_args) {
  if (!lc || i < 0 || i >= lc->n) return HPL_EINVAL;
  if (extra_args && strlen(extra_args) >= sizeof lc->st[i].extra) return HPL_EINVAL;
  snprintf(lc->st[i].extra, sizeof lc->st[i].extra, "%s", extra_args ? extra_args : "");
  return 0;
}

int hpl__lc_add_store(hpl__lc *lc, const char *extra_args, char *err, size_t errlen) {
  if (lc->n >= LC_MAX_NODES) return hpl__errf(err, errlen, HPL_EINVAL, "too many stores");
  int i = lc->n++;
  snprintf(lc->st[i].extra, sizeof lc->st[i].extra, "%s", extra_args ? extra_args : "");
  int rc = start_store(lc, i, err, errlen);
  return rc ? rc : i;
}

static int check_proc(lc_proc *p, const char *name, char *err, size_t errlen) {
  if (p->pid <= 0) return 0;
  int status;
  if (waitpid(p->pid, &status, WNOHANG) != p->pid) return 0;
  p->pid = 0;
  return hpl__errf(err, errlen, HPL_ECONN, "%s exited unexpectedly (%s %d); log: %s", name,
              WIFSIGNALED(status) ? "signal" : "status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
              p->log[0] ? p->log : "stderr");
}

int hpl__lc_check(hpl__lc *lc, char *err, size_t errlen) {
  int rc = check_proc(&lc->etcd, "etcd", err, errlen);
  for (int k = 0; rc == 0 && k < lc->ndirs; k++) {
    char name[32];
    if (k) snprintf(name, sizeof name, "hoplite-directory %d", k);
    else snprintf(name, sizeof name, "hoplite-directory");
    rc = check_proc(&lc->dir[k], name, err, errlen);
  }
  for (int i = 0; rc == 0 && i < lc->n; i++) {
    char name[32];
    snprintf(name, sizeof name, "hoplite-store node-%d", i);
    rc = check_proc(&lc->st[i], name, err, errlen);
  }
  return rc;
}

int hpl__lc_enter_host(const char *prefix, int host) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "/run/netns/%s-h%d", prefix, host);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return HPL_ESYS;
  int rc = setns(fd, CLONE_NEWNET);
  int e = errno;
  close(fd);
  errno = e;
  return rc ? HPL_ESYS : 0;
}
