/* lcproc.c - starting, waiting for and reaping the processes of a local
 * cluster, free ports, the work directory's removal (see lcproc.h). */
#include "lcproc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hoplite.h"
#include "util.h"

pid_t hpl__lcp_spawn(char **argv, const char *log) {
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

static int pidfd_of(pid_t pid) { return pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1; }

int hpl__lcp_wait_files(const char *dir, const char *const *paths, int n, pid_t pid,
                        int timeout_ms) {
  int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (in >= 0) inotify_add_watch(in, dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE);
  int pfd = pidfd_of(pid);
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  int rc = HPL_ETIMEDOUT;
  for (;;) {
    for (int i = 0; i < n && rc == HPL_ETIMEDOUT; i++)
      if (access(paths[i], F_OK) == 0) rc = i;
    if (rc != HPL_ETIMEDOUT) break;
    int status;
    if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
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

/* Wait with a pidfd (no polling loop). */
int hpl__lcp_reap(pid_t pid, int timeout_ms, int *st) {
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

void hpl__lcp_stop(pid_t *pid, int sig) {
  if (*pid <= 0) return;
  kill(*pid, sig);
  if (!hpl__lcp_reap(*pid, 5000, NULL)) {
    kill(*pid, SIGKILL);
    hpl__lcp_reap(*pid, 5000, NULL);
  }
  *pid = 0;
}

int hpl__lcp_free_ports(const char *host, int n, int *ports) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  if (n < 1 || n > 16 || inet_pton(AF_INET, host, &a.sin_addr) != 1) return HPL_EINVAL;
  int fds[16], k = 0, rc = 0;
  for (; k < n; k++) {
    socklen_t len = sizeof a;
    a.sin_port = 0;
    fds[k] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[k] < 0 || bind(fds[k], (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fds[k], (struct sockaddr *)&a, &len) != 0) {
      rc = HPL_ESYS;
      if (fds[k] >= 0) k++;
      break;
    }
    ports[k] = ntohs(a.sin_port);
  }
  int e = errno;
  while (k > 0) close(fds[--k]);
  errno = e;
  return rc;
}

void hpl__lcp_rm_tree(const char *dir, int depth) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (unlink(path) != 0 && errno == EISDIR && depth > 0) hpl__lcp_rm_tree(path, depth - 1);
    }
    closedir(d);
  }
  rmdir(dir);
}

int hpl__lcp_split_args(char **argv, int argc, int max, char *buf, size_t blen,
                        const char *words) {
  if (!words || !*words) return argc;
  snprintf(buf, blen, "%s", words);
  for (char *tok = strtok(buf, " "); tok && argc < max - 1; tok = strtok(NULL, " "))
    argv[argc++] = tok;
  return argc;
}

int hpl__lcp_in_netns(char **argv, int argc, const char *ns) {
  if (!ns) return argc;
  memmove(argv + 4, argv, (size_t)(argc + 1) * sizeof *argv);
  argv[0] = "ip";
  argv[1] = "netns";
  argv[2] = "exec";
  argv[3] = (char *)ns;
  return argc + 4;
}

int hpl__lcp_bin_dir(const char *given, const char *probe, char *out, size_t len) {
  const char *env = getenv("HOPLITE_BIN_DIR");
  if (given || (env && *env)) {
    snprintf(out, len, "%s", given ? given : env);
    return 0;
  }
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  if (n <= 0) return HPL_ESYS;
  out[n] = 0;
  char *slash = strrchr(out, '/');
  if (slash) *slash = 0;
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", out, probe);
  if (access(path, X_OK) != 0 && (slash = strrchr(out, '/'))) *slash = 0;
  return 0;
}
