/* localcluster.c - starting and stopping a cluster of real processes on
 * this machine (see localcluster.h). */
#include "localcluster.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "hoplite.h"
#include "util.h"

#define LC_MAX_NODES 256
#define LC_MAX_ARGS 64 /* leave 4 slots for "ip netns exec NS" */

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
  int dir_port;
  lc_proc dir;
  int n;
  lc_proc st[LC_MAX_NODES];
  char sock[LC_MAX_NODES][108];
};

int hpl__lc_nodes(const hpl__lc *lc) { return lc->n; }
const char *hpl__lc_socket(const hpl__lc *lc, int i) { return lc->sock[i]; }
int hpl__lc_dir_port(const hpl__lc *lc) { return lc->dir_port; }
const char *hpl__lc_work_dir(const hpl__lc *lc) { return lc->work; }
const char *hpl__lc_secret(const hpl__lc *lc) { return lc->secret; }
pid_t hpl__lc_dir_pid(const hpl__lc *lc) { return lc->dir.pid; }
pid_t hpl__lc_store_pid(const hpl__lc *lc, int i) { return lc->st[i].pid; }
const char *hpl__lc_store_log(const hpl__lc *lc, int i) { return lc->st[i].log; }
const char *hpl__lc_dir_log(const hpl__lc *lc) { return lc->dir.log; }

static int errf(char *err, size_t len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int errf(char *err, size_t len, int code, const char *fmt, ...) {
  if (err && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* Split `extra` on spaces into argv (in place in a copy). */
static int add_args(char **argv, int argc, char *buf, size_t blen, const char *extra) {
  if (!extra || !*extra) return argc;
  snprintf(buf, blen, "%s", extra);
  for (char *tok = strtok(buf, " "); tok && argc < LC_MAX_ARGS - 6; tok = strtok(NULL, " "))
    argv[argc++] = tok;
  return argc;
}

static pid_t spawn(char **argv, const char *log) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  /* child: die with the process that started us (a killed test or CLI
   * must not leave servers behind) */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) _exit(1);
  if (log && *log) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
  }
  /* do not inherit the parent's blocked signals (the CLI blocks SIGINT) */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(argv[0], argv);
  fprintf(stderr, "cannot exec %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

static int pidfd_of(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

/* Wait until `path` exists (written by rename) or the process dies or the
 * timeout passes. Returns 0, HPL_ETIMEDOUT or HPL_ECONN (process died). */
static int wait_file(const char *dir, const char *path, pid_t pid, int timeout_ms) {
  int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (in >= 0) inotify_add_watch(in, dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE);
  int pfd = pidfd_of(pid);
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  int rc = HPL_ETIMEDOUT;
  for (;;) {
    if (access(path, F_OK) == 0) {
      rc = 0;
      break;
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      rc = HPL_ECONN;
      break;
    }
    int64_t left = hpl__ms_left(deadline);
    if (left == 0) break;
    /* wake when the directory changes or the process exits */
    struct pollfd p[2] = {{.fd = in, .events = POLLIN}, {.fd = pfd, .events = POLLIN}};
    int r = poll(p, 2, (int)left);
    if (r > 0 && (p[0].revents & POLLIN)) {
      char buf[4096];
      while (read(in, buf, sizeof buf) > 0) {
      }
    }
  }
  if (in >= 0) close(in);
  if (pfd >= 0) close(pfd);
  return rc;
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

/* With emulated hosts, run argv inside host i's namespace: shift it right
 * by four and put "ip netns exec NS" in front. */
static void in_netns(hpl__lc *lc, int i, char **argv, int *argc, char *ns, size_t nslen) {
  if (!lc->o.netns_prefix) return;
  snprintf(ns, nslen, "%s-h%d", lc->o.netns_prefix, i);
  memmove(argv + 4, argv, (size_t)(*argc + 1) * sizeof *argv);
  argv[0] = "ip";
  argv[1] = "netns";
  argv[2] = "exec";
  argv[3] = ns;
  *argc += 4;
}

static int start_directory(hpl__lc *lc, int port, char *err, size_t errlen) {
  char exe[PATH_MAX], listen[128], pfile[PATH_MAX], buf[512];
  snprintf(exe, sizeof exe, "%s/hoplite-directory", lc->bin_dir);
  snprintf(listen, sizeof listen, "%s:%d", node_host(lc, 0), port);
  snprintf(pfile, sizeof pfile, "%s/directory.port", lc->work);
  unlink(pfile);
  char *argv[LC_MAX_ARGS] = {exe,   "--listen",    listen,   "--port-file",
                             pfile, "--log-level", lc->level};
  int argc = 7;
  if (lc->secret[0]) {
    argv[argc++] = "--auth-file";
    argv[argc++] = lc->secret;
  }
  argc = add_args(argv, argc, buf, sizeof buf, lc->dir_args);
  argv[argc] = NULL;
  char ns[64];
  in_netns(lc, 0, argv, &argc, ns, sizeof ns);
  log_path(lc, lc->dir.log, "directory");
  lc->dir.pid = spawn(argv, lc->dir.log);
  if (lc->dir.pid < 0) return errf(err, errlen, HPL_ESYS, "fork: %s", strerror(errno));
  int rc = wait_file(lc->work, pfile, lc->dir.pid, lc->o.timeout_ms);
  if (rc) {
    if (rc == HPL_ECONN) lc->dir.pid = 0;
    return errf(err, errlen, rc, "hoplite-directory did not come up (%s); log: %s",
                rc == HPL_ECONN ? "it exited" : "timeout",
                lc->dir.log[0] ? lc->dir.log : "stderr");
  }
  lc->dir_port = read_int_file(pfile);
  if (lc->dir_port <= 0) return errf(err, errlen, HPL_EPROTO, "bad port file %s", pfile);
  return 0;
}

static int start_store(hpl__lc *lc, int i, char *err, size_t errlen) {
  char exe[PATH_MAX], dir[300], rfile[PATH_MAX], mem[32], name[32], dlisten[96], buf[512],
      buf2[512];
  snprintf(exe, sizeof exe, "%s/hoplite-store", lc->bin_dir);
  if (lc->o.dir_list)
    snprintf(dir, sizeof dir, "%s", lc->o.dir_list);
  else
    snprintf(dir, sizeof dir, "%s:%d", node_host(lc, 0), lc->dir_port);
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
  lc->st[i].pid = spawn(argv, lc->st[i].log);
  if (lc->st[i].pid < 0) return errf(err, errlen, HPL_ESYS, "fork: %s", strerror(errno));
  int rc = wait_file(lc->work, rfile, lc->st[i].pid, lc->o.timeout_ms);
  if (rc) {
    if (rc == HPL_ECONN) lc->st[i].pid = 0;
    return errf(err, errlen, rc, "hoplite-store %s did not come up (%s); log: %s", name,
                rc == HPL_ECONN ? "it exited" : "timeout",
                lc->st[i].log[0] ? lc->st[i].log : "stderr");
  }
  return 0;
}

int hpl__lc_start(const hpl__lc_opts *o, hpl__lc **out, char *err, size_t errlen) {
  if (!o || !out || o->nodes < 0 || o->nodes > LC_MAX_NODES)
    return errf(err, errlen, HPL_EINVAL, "bad cluster options");
  hpl__lc *lc = calloc(1, sizeof *lc);
  if (!lc) return errf(err, errlen, HPL_ENOMEM, "out of memory");
  lc->o = *o;
  if (!lc->o.memory) lc->o.memory = 512ull << 20;
  if (!lc->o.timeout_ms) lc->o.timeout_ms = 10000;
  snprintf(lc->host, sizeof lc->host, "%s", o->host ? o->host : "127.0.0.1");
  snprintf(lc->level, sizeof lc->level, "%s", o->log_level ? o->log_level : "info");
  snprintf(lc->dir_args, sizeof lc->dir_args, "%s", o->dir_args ? o->dir_args : "");
  snprintf(lc->store_args, sizeof lc->store_args, "%s", o->store_args ? o->store_args : "");
  lc->o.dir_args = lc->dir_args;
  lc->o.store_args = lc->store_args;
  if (o->bin_dir) {
    snprintf(lc->bin_dir, sizeof lc->bin_dir, "%s", o->bin_dir);
  } else {
    ssize_t n = readlink("/proc/self/exe", lc->bin_dir, sizeof lc->bin_dir - 1);
    if (n <= 0) {
      free(lc);
      return errf(err, errlen, HPL_ESYS, "cannot find this program's directory");
    }
    lc->bin_dir[n] = 0;
    char *slash = strrchr(lc->bin_dir, '/');
    if (slash) *slash = 0;
    /* programs in a build subdirectory (tests/, bench/) find the servers
     * one level up; $HOPLITE_BIN_DIR overrides both */
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/hoplite-store", lc->bin_dir);
    const char *env = getenv("HOPLITE_BIN_DIR");
    if (env && *env) {
      snprintf(lc->bin_dir, sizeof lc->bin_dir, "%s", env);
    } else if (access(probe, X_OK) != 0 && (slash = strrchr(lc->bin_dir, '/'))) {
      *slash = 0;
    }
  }
  if (o->work_dir) {
    snprintf(lc->work, sizeof lc->work, "%s", o->work_dir);
    mkdir(lc->work, 0700);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(lc->work, sizeof lc->work, "%s/hoplite-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(lc->work)) {
      free(lc);
      return errf(err, errlen, HPL_ESYS, "mkdtemp: %s", strerror(errno));
    }
    lc->own_work = 1;
  }
  if (strlen(lc->work) + 24 >= sizeof lc->sock[0]) {
    int code = errf(err, errlen, HPL_EINVAL, "work directory path too long for Unix sockets: %s",
                    lc->work);
    if (lc->own_work) rmdir(lc->work);
    free(lc);
    return code;
  }
  int rc = 0;
  if (!o->no_auth) {
    snprintf(lc->secret, sizeof lc->secret, "%s/cluster.secret", lc->work);
    char aerr[256];
    if (access(lc->secret, F_OK) != 0 && hpl__auth_create(lc->secret, aerr, sizeof aerr) != 0)
      rc = errf(err, errlen, HPL_ESYS, "%s", aerr);
  }
  if (rc == 0 && !o->dir_list) rc = start_directory(lc, 0, err, errlen);
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

/* Reap pid, waiting at most timeout_ms (poll on a pidfd: no polling loop).
 * Returns 1 if it exited. */
static int reap_status(pid_t pid, int timeout_ms, int *st) {
  int status = -1;
  pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == pid || (r < 0 && errno == ECHILD)) {
    if (st) *st = r == pid ? status : -1;
    return 1;
  }
  int fd = pidfd_of(pid);
  if (fd >= 0) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, timeout_ms) < 0 && errno == EINTR) {
    }
    close(fd);
  }
  r = waitpid(pid, &status, WNOHANG);
  if (st) *st = r == pid ? status : -1;
  return r == pid || (r < 0 && errno == ECHILD);
}

static int reap(pid_t pid, int timeout_ms) { return reap_status(pid, timeout_ms, NULL); }

static void stop_proc(lc_proc *p, int sig) {
  if (p->pid <= 0) return;
  kill(p->pid, sig);
  if (!reap(p->pid, 5000)) {
    kill(p->pid, SIGKILL);
    reap(p->pid, 5000);
  }
  p->pid = 0;
}

/* Remove the work directory: it only holds flat files the cluster made. */
/* Remove dir and what it holds, `depth` levels of subdirectories deep
 * (the work directory holds the stores' spill directories, which hold
 * one each per store). Symbolic links are removed, never followed. */
static void rm_tree(const char *dir, int depth) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (unlink(path) != 0 && errno == EISDIR && depth > 0) rm_tree(path, depth - 1);
    }
    closedir(d);
  }
  rmdir(dir);
}

static void rm_rf(const char *dir) { rm_tree(dir, 3); }

void hpl__lc_stop(hpl__lc *lc) {
  if (!lc) return;
  /* stores first, so they do not spend their last seconds reconnecting */
  for (int i = 0; i < lc->n; i++)
    if (lc->st[i].pid > 0) kill(lc->st[i].pid, SIGTERM);
  for (int i = 0; i < lc->n; i++) stop_proc(&lc->st[i], SIGTERM);
  stop_proc(&lc->dir, SIGTERM);
  if (lc->own_work || lc->o.remove_work_dir) rm_rf(lc->work);
  free(lc);
}

int hpl__lc_signal(hpl__lc *lc, int i, int sig) {
  lc_proc *p = i < 0 ? &lc->dir : (i < lc->n ? &lc->st[i] : NULL);
  if (!p || p->pid <= 0) return HPL_EINVAL;
  if (kill(p->pid, sig) != 0) return HPL_ESYS;
  if (sig == SIGKILL || sig == SIGTERM) {
    if (!reap_status(p->pid, 10000, &p->status)) return HPL_ETIMEDOUT;
    p->pid = 0;
  }
  return 0;
}

int hpl__lc_exit_status(const hpl__lc *lc, int i) {
  const lc_proc *p = i < 0 ? &lc->dir : (i < lc->n ? &lc->st[i] : NULL);
  return p ? p->status : -1;
}

int hpl__lc_restart(hpl__lc *lc, int i, char *err, size_t errlen) {
  if (i < 0) {
    if (lc->o.dir_list) return errf(err, errlen, HPL_EINVAL, "the directories are not ours");
    if (lc->dir.pid > 0) return errf(err, errlen, HPL_EINVAL, "directory still running");
    return start_directory(lc, lc->dir_port, err, errlen);
  }
  if (i >= lc->n || lc->st[i].pid > 0)
    return errf(err, errlen, HPL_EINVAL, "store %d is running or unknown", i);
  return start_store(lc, i, err, errlen);
}

int hpl__lc_set_store_args(hpl__lc *lc, int i, const char *extra_args) {
  if (!lc || i < 0 || i >= lc->n) return HPL_EINVAL;
  if (extra_args && strlen(extra_args) >= sizeof lc->st[i].extra) return HPL_EINVAL;
  snprintf(lc->st[i].extra, sizeof lc->st[i].extra, "%s", extra_args ? extra_args : "");
  return 0;
}

int hpl__lc_add_store(hpl__lc *lc, const char *extra_args, char *err, size_t errlen) {
  if (lc->n >= LC_MAX_NODES) return errf(err, errlen, HPL_EINVAL, "too many stores");
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
  return errf(err, errlen, HPL_ECONN, "%s exited unexpectedly (%s %d); log: %s", name,
              WIFSIGNALED(status) ? "signal" : "status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
              p->log[0] ? p->log : "stderr");
}

int hpl__lc_check(hpl__lc *lc, char *err, size_t errlen) {
  int rc = check_proc(&lc->dir, "hoplite-directory", err, errlen);
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
