/*
 * clientadm.h - who may use the local socket: the socket file's and its
 * directory's modes (this user only, or its group too with --allow-group),
 * each new client's peer credentials (SO_PEERCRED, SO_PEERGROUPS: this
 * user, root, or a member of the allowed group; --insecure does not
 * change that), clients per user (--max-clients-per-uid), and the HELLO
 * that tells a refused client why before its socket is closed.
 *
 * Callers: clients.c (its listener and every connection). The per-user
 * counts are this module's state, in the context clients.c keeps for it.
 */
#ifndef HPL_STORE_CLIENTADM_H
#define HPL_STORE_CLIENTADM_H

#include <stddef.h>
#include <sys/types.h>

#include "store.h"

typedef struct hpl__clientadm hpl__clientadm;

/* The module's context (NULL without memory) and its end. */
hpl__clientadm *hpl__clientadm_new(void);
void hpl__clientadm_free(hpl__clientadm *a);

/* Before listening on `path`: its directory must be this user's and closed
 * to others (0700), or with --allow-group G belong to group G and be open
 * to the group at most (0750 or 0710); --insecure skips this check only.
 * 0, HPL_EINVAL or HPL_ESYS (logged). */
int hpl__clientadm_check_dir(const hpl__store *s, const char *path);

/* Once listening: the socket file's mode, 0600, or 0660 with group G
 * (--allow-group). 0 or HPL_ESYS (logged). */
int hpl__clientadm_socket_mode(const hpl__store *s, const char *path);

/* A new local connection on `fd`: 0 if its peer may be a client (*pid and
 * *uid set; it counts against its user until hpl__clientadm_leave), else
 * HPL_EAUTH (not this user, root or the allowed group), HPL_ETOOMANY
 * (its user has --max-clients-per-uid clients) or HPL_ENOMEM, with a
 * detail. `nclients`
 * is how many the store serves now: at --max-connections it is
 * HPL_ETOOMANY too. Counted in s->ctr (clients_refused). */
int hpl__clientadm_take(hpl__store *s, hpl__clientadm *a, int fd, size_t nclients, int *pid,
                        uid_t *uid, char *detail, size_t dlen);
void hpl__clientadm_leave(hpl__clientadm *a, uid_t uid);

/* Tell a refused client why: a HELLO with only `status` and `detail`
 * (one non-blocking write; the caller closes the socket). */
void hpl__clientadm_refuse(int fd, int status, const char *detail);

#endif
