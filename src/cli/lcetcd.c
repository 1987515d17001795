/* lcetcd.c - starting a local etcd for standby directories, waiting for
 * it, asking it for a key (see lcetcd.h). */
#include "lcetcd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd.h"
#include "hoplite.h"
#include "lcproc.h"
#include "util.h"

#define LCE_DEFAULT_BIN "/usr/bin/etcd"

int hpl__lce_binary(const char **bin, char *err, size_t errlen) {
  const char *b = getenv("HOPLITE_ETCD");
  if (!b || !*b) b = LCE_DEFAULT_BIN;
  *bin = b;
  if (access(b, X_OK) != 0)
    return hpl__errf(err, errlen, HPL_EINVAL,
                         "standby directories need etcd, and %s is not there: install Debian's "
                         "etcd-server package (apt-get install etcd-server), or set $HOPLITE_ETCD "
                         "to an etcd binary",
                         b);
  return 0;
}

/* A get from a thread of its own (setns moves only the calling thread). */
typedef struct ask {
  const char *url, *netns, *key;
  char *val;
  size_t cap;
  int64_t rev;
  int rc;
} ask;

static void *ask_main(void *arg) {
  ask *a = arg;
  if (a->netns) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "/run/netns/%s", a->netns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      if (fd >= 0) close(fd);
      a->rc = HPL_ESYS;
      return NULL;
    }
    close(fd);
  }
  hpl__etcd *e;
  if ((a->rc = hpl__etcd_new(a->url, 500, &e)) != 0) return NULL;
  a->rc = hpl__etcd_get(e, a->key, a->val, a->cap, &a->rev);
  hpl__etcd_free(e);
  return NULL;
}

int hpl__lce_get(const char *url, const char *netns, const char *key, char *val, size_t cap,
                 int64_t *rev) {
  ask a = {.url = url, .netns = netns, .key = key, .val = val, .cap = cap};
  if (!netns) {
    ask_main(&a);
  } else {
    pthread_t t;
    if (pthread_create(&t, NULL, ask_main, &a) != 0) return HPL_ESYS;
    pthread_join(t, NULL);
  }
  if (rev) *rev = a.rev;
  return a.rc;
}

int hpl__lce_start(const hpl__lce_opts *o, pid_t *pid, char *err, size_t errlen) {
  const char *bin;
  *pid = 0;
  int rc = hpl__lce_binary(&bin, err, errlen);
  if (rc) return rc;
  char exe[PATH_MAX], cluster[160], hb[16], el[16];
  snprintf(exe, sizeof exe, "%s", bin);
  snprintf(cluster, sizeof cluster, "%s=%s", o->name, o->peer_url);
  snprintf(hb, sizeof hb, "%d", o->heartbeat_ms);
  snprintf(el, sizeof el, "%d", o->election_ms);
  char *argv[40] = {exe, "--name", (char *)o->name, "--data-dir", (char *)o->data_dir,
                    "--listen-client-urls", (char *)o->client_urls,
                    "--advertise-client-urls", (char *)o->url,
                    "--listen-peer-urls", (char *)o->peer_url,
                    "--initial-advertise-peer-urls", (char *)o->peer_url,
                    "--initial-cluster", cluster, "--heartbeat-interval", hb,
                    "--election-timeout", el, "--logger", "zap", "--log-level", "warn"};
  int argc = 0;
  while (argv[argc]) argc++;
  hpl__lcp_in_netns(argv, argc, o->netns);
  *pid = hpl__lcp_spawn(argv, o->log);
  if (*pid < 0) {
    *pid = 0;
    return hpl__errf(err, errlen, HPL_ESYS, "fork: %s", strerror(errno));
  }
  const char *log = o->log && *o->log ? o->log : "stderr";
  uint64_t deadline = hpl__deadline_ms(o->timeout_ms);
  for (;;) {
    char val[HPL__ETCD_MAX_VAL + 1];
    rc = hpl__lce_get(o->url, o->netns, "/hoplite/lcetcd-probe", val, sizeof val, NULL);
    if (rc == 0 || rc == HPL_ENOTFOUND) return 0;
    if (waitpid(*pid, NULL, WNOHANG) == *pid) {
      *pid = 0;
      return hpl__errf(err, errlen, HPL_ESYS, "etcd exited; log: %s", log);
    }
    if (hpl__ms_left(deadline) == 0)
      return hpl__errf(err, errlen, HPL_ETIMEDOUT, "etcd did not answer at %s; log: %s",
                           o->url, log);
    hpl__sleep_until_ns(hpl__now_ns() + 50000000ull); /* etcd says nothing when it is up */
  }
}
