/* clientadm.c - who may use the local socket (see clientadm.h). */
#include "clientadm.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uthash.h>

#include "hoplite.h"
#include "log.h"
#include "proto.h"

#define MAX_GROUPS 256 /* supplementary groups of a peer looked at */

/* Clients of one user. */
typedef struct uid_count {
  uid_t uid;
  uint32_t n;
  UT_hash_handle hh;
} uid_count;

struct hpl__clientadm {
  uid_count *by_uid; /* uthash */
};

hpl__clientadm *hpl__clientadm_new(void) { return calloc(1, sizeof(hpl__clientadm)); }

void hpl__clientadm_free(hpl__clientadm *a) {
  if (!a) return;
  uid_count *u, *tmp;
  HASH_ITER(hh, a->by_uid, u, tmp) {
    HASH_DEL(a->by_uid, u);
    free(u);
  }
  free(a);
}

/* ------------------------------------------------------------------ modes */

int hpl__clientadm_check_dir(const hpl__store *s, const char *path) {
  char dir[sizeof s->cfg.socket_path];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = 0;
  else *slash = 0;
  struct stat st;
  if (stat(dir, &st) != 0) {
    HPL__LOG_ERROR("cannot check the socket's directory %s: %s", dir, strerror(errno));
    return HPL_ESYS;
  }
  if (s->cfg.insecure) return 0;
  int group = s->cfg.allow_gid >= 0;
  unsigned mode = (unsigned)(st.st_mode & 07777);
  int ok = st.st_uid == geteuid() && !(mode & 007) &&
           (!(mode & 070) || (group && st.st_gid == (gid_t)s->cfg.allow_gid && !(mode & 020)));
  if (ok) return 0;
  if (group)
    HPL__LOG_ERROR("the socket's directory %s must belong to this user and to group %lld and be "
                   "open to that group at most (mode 0750 or 0710, owner uid %u; it has mode "
                   "%04o, owner uid %u, group %u): others could reach this store's memory, or "
                   "replace its socket (--insecure to allow)",
                   dir, (long long)s->cfg.allow_gid, (unsigned)geteuid(), mode,
                   (unsigned)st.st_uid, (unsigned)st.st_gid);
  else
    HPL__LOG_ERROR("the socket's directory %s must belong to this user and be closed to others "
                   "(mode 0700, owner uid %u; it has mode %04o, owner uid %u): other users could "
                   "reach this store's memory, or replace its socket (--insecure to allow)",
                   dir, (unsigned)geteuid(), mode, (unsigned)st.st_uid);
  return HPL_EINVAL;
}

int hpl__clientadm_socket_mode(const hpl__store *s, const char *path) {
  if (s->cfg.allow_gid < 0) return chmod(path, 0600) == 0 ? 0 : HPL_ESYS;
  if (chown(path, (uid_t)-1, (gid_t)s->cfg.allow_gid) != 0 || chmod(path, 0660) != 0) {
    HPL__LOG_ERROR("cannot give the socket %s to group %lld: %s", path,
                   (long long)s->cfg.allow_gid, strerror(errno));
    return HPL_ESYS;
  }
  return 0;
}

/* ------------------------------------------------------------------ peers */

/* Whether the peer on fd (credentials cr) is in group g: its primary
 * group, or one of its supplementary groups (SO_PEERGROUPS). */
static int peer_in_group(int fd, const struct ucred *cr, gid_t g) {
  if (cr->gid == g) return 1;
  gid_t groups[MAX_GROUPS];
  socklen_t len = sizeof groups;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) return 0;
  for (size_t i = 0; i < len / sizeof(gid_t); i++)
    if (groups[i] == g) return 1;
  return 0;
}

int hpl__clientadm_take(hpl__store *s, hpl__clientadm *a, int fd, size_t nclients, int *pid,
                        uid_t *uid, char *detail, size_t dlen) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
    snprintf(detail, dlen, "cannot read the client's credentials: %s", strerror(errno));
    s->ctr.clients_refused++;
    return HPL_EAUTH;
  }
  *pid = (int)cr.pid;
  *uid = cr.uid;
  int mine = cr.uid == geteuid() || cr.uid == 0 ||
             (s->cfg.allow_gid >= 0 && peer_in_group(fd, &cr, (gid_t)s->cfg.allow_gid));
  if (!mine) {
    snprintf(detail, dlen, "uid %u (pid %d) is not this store's user%s", (unsigned)cr.uid,
             (int)cr.pid, s->cfg.allow_gid >= 0 ? " nor in its allowed group" : "");
    HPL__LOG_WARN("refused a local client: %s", detail);
    s->ctr.clients_refused++;
    return HPL_EAUTH;
  }
  uid_count *u;
  HASH_FIND(hh, a->by_uid, &cr.uid, sizeof cr.uid, u);
  int many = u && u->n >= s->cfg.max_uid_clients;
  if (many || nclients >= s->cfg.max_conns) {
    if (many)
      snprintf(detail, dlen, "uid %u has %u clients here, the most --max-clients-per-uid allows",
               (unsigned)cr.uid, (unsigned)u->n);
    else
      snprintf(detail, dlen, "this store has %zu clients, the most --max-connections allows",
               nclients);
    if (s->ctr.conns_refused++ % 1000 == 0)
      HPL__LOG_WARN("refused a local client (pid %d): %s (%llu refused)", (int)cr.pid, detail,
                    (unsigned long long)s->ctr.conns_refused);
    return HPL_ETOOMANY;
  }
  if (!u) {
    if (!(u = calloc(1, sizeof *u))) {
      snprintf(detail, dlen, "out of memory");
      return HPL_ENOMEM;
    }
    u->uid = cr.uid;
    HASH_ADD(hh, a->by_uid, uid, sizeof u->uid, u);
  }
  u->n++;
  return 0;
}

void hpl__clientadm_leave(hpl__clientadm *a, uid_t uid) {
  uid_count *u;
  HASH_FIND(hh, a->by_uid, &uid, sizeof uid, u);
  if (u && --u->n == 0) {
    HASH_DEL(a->by_uid, u);
    free(u);
  }
}

void hpl__clientadm_refuse(int fd, int status, const char *detail) {
  Hplpb__Hello hm = HPLPB__HELLO__INIT;
  hm.status = status;
  hm.detail = (char *)detail;
  size_t len;
  uint8_t *frame = hpl__msg_frame(HPL__MSG_HELLO, 0, &hm.base, 0, &len);
  if (!frame) return;
  (void)send(fd, frame, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  free(frame);
}
