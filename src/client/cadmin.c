/* cadmin.c - admin handles of libhoplite (include/hoplite.h,
 * hpl_connect_admin): the cluster secret read, the ADMIN key derived from
 * it, the directory dialled as that role (cdial.h), and what such a handle
 * may ask (capi.h). Its requests then go through ccall.c like a store
 * handle's: the directory answers DELETE, STAT, LIST, STATUS, COUNTERS,
 * TRANSFERS and REDUCE_INFO with the messages a store proxies verbatim. */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "capi.h"
#include "cdial.h"

/* What the directory may send an admin handle: control replies (a store
 * passes the same replies on to its clients under the same limit), no
 * payloads. */
static const hpl__crpc_opts admin_rpc = {
    .lim = {.max_msg = HPL__MAX_MSG_CTRL, .max_payload = 0, .max_type = HPL__MSG_MAX_}};

int hpl__cadmin_allows(const hpl_client *c, unsigned type) {
  if (!c->admin) return 1;
  switch (type) {
    case HPL__MSG_STAT:
    case HPL__MSG_DELETE:
    case HPL__MSG_LIST:
    case HPL__MSG_STATUS:
    case HPL__MSG_COUNTERS:
    case HPL__MSG_TRANSFERS:
    case HPL__MSG_REDUCE_INFO: return 1;
    default: return 0;
  }
}

int hpl__cadmin_refuse(hpl_client *c, const char *call) {
  return hpl__cfail(c, HPL_ESTATE,
                    "%s: an admin handle (hpl_connect_admin) only deletes, stats and lists "
                    "(and reads the directory's status, counters and transfers); connect to a "
                    "store (hpl_connect) for this",
                    call);
}

/* The ADMIN role's key from the secret in file `path` into key. 0, or the
 * error with the detail set (no handle). */
static int admin_key(const char *path, uint8_t key[HPL__AUTH_KEY_LEN]) {
  hpl__auth a;
  char err[256];
  int rc = hpl__auth_load(path, &a, err, sizeof err);
  if (rc == 0 && !a.has_secret)
    rc = hpl__cfail(NULL, HPL_EINVAL,
                    "%s is node %s's credential, not the cluster secret: an admin handle "
                    "needs the secret (the file `hoplite secret FILE` wrote)",
                    path, a.name);
  else if (rc)
    rc = hpl__cfail(NULL, rc, "cluster secret %s: %s", path, err);
  else if (hpl__auth_key(&a, HPL__ROLE_ADMIN, NULL, key) != 0)
    rc = hpl__cfail(NULL, HPL_EINVAL, "no admin key derives from %s", path);
  sodium_memzero(&a, sizeof a);
  return rc;
}

int hpl_connect_admin(const char *directory, const char *secret_path, int64_t timeout_ms,
                      hpl_client **out) {
  if (!out) return hpl__cfail(NULL, HPL_EINVAL, "out is NULL");
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  if (!directory || !*directory) directory = getenv(HPL_DIRECTORY_ENV);
  if (!directory || !*directory)
    return hpl__cfail(NULL, HPL_EINVAL,
                      "no directory: pass its HOST:PORT or set $" HPL_DIRECTORY_ENV);
  if (!secret_path || !*secret_path) secret_path = getenv(HPL_AUTH_FILE_ENV);
  if (!secret_path || !*secret_path)
    return hpl__cfail(NULL, HPL_EINVAL,
                      "no cluster secret: an admin handle proves itself with the secret's "
                      "file (pass it, or set $" HPL_AUTH_FILE_ENV ")");
  hpl__cdial_addr addr;
  char why[HPL__CERR_MAX - 64];
  int rc = hpl__cdial_resolve(directory, &addr, why, sizeof why);
  if (rc) return hpl__cfail(NULL, rc, "directory %s: %s", directory, why);
  uint8_t key[HPL__AUTH_KEY_LEN];
  if ((rc = admin_key(secret_path, key)) != 0) return rc;
  hpl_client *c = calloc(1, sizeof *c);
  hpl__crpc *rpc = NULL;
  hpl__cdial_as as = {.role = HPL__ROLE_ADMIN, .name = NULL, .key = key};
  rc = c ? hpl__cdial(&addr, &as, &admin_rpc, deadline, &rpc, why, sizeof why) : HPL_ENOMEM;
  sodium_memzero(key, sizeof key);
  if (rc) {
    if (!c) snprintf(why, sizeof why, "out of memory");
    free(c);
    return hpl__cfail(NULL, rc, "directory %s: %s", directory, why);
  }
  c->admin = 1;
  c->st.rpc = rpc;
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return 0;
}
