/* uvconn_admit.c - connections accepted but not yet authenticated
 * (uvconn.h, hpl__conn_hs_limits): they take slots of their own, at most
 * so many in all and so many per source address, the oldest making room
 * for a newcomer; a server at its connection limit makes room the same
 * way before it refuses anyone; and failed handshakes are logged as
 * summaries, not a line each.
 *
 * Per thread, like the output bound (uvconn_out.c): a server's
 * connections live on one loop thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"
#include "uvconn_int.h"

/* Connections from one address in the handshake. */
typedef struct addr_count {
  uint8_t ip[16];
  unsigned n;
  UT_hash_handle hh;
} addr_count;

typedef struct hs_thread {
  hpl__conn *list;       /* in the handshake, oldest first (utlist DL through hs_prev/next) */
  unsigned n;
  addr_count *by_addr;   /* uthash by ip */
  unsigned max, per_addr; /* 0: the defaults */
  uint64_t evicted;
  /* failed handshakes since the last summary line */
  uint64_t failed, failed_total, last_log_ms;
  char last_label[64], last_why[96];
} hs_thread;

static _Thread_local hs_thread H;

static unsigned hs_max(void) { return H.max ? H.max : HPL__CONN_HS_MAX; }
static unsigned hs_per_addr(void) { return H.per_addr ? H.per_addr : HPL__CONN_HS_PER_ADDR; }

void hpl__conn_hs_limits(unsigned max, unsigned per_addr) {
  H.max = max;
  H.per_addr = per_addr;
}

void hpl__conn_hs_stats(uint64_t *pending, uint64_t *evicted, uint64_t *failed) {
  if (pending) *pending = H.n;
  if (evicted) *evicted = H.evicted;
  if (failed) *failed = H.failed_total;
}

/* ------------------------------------------------------------------ failures */

void hpl__conn_hs_failed(hpl__conn *c, const char *why) {
  if (c->o.auth_failures) (*c->o.auth_failures)++;
  H.failed++;
  H.failed_total++;
  snprintf(H.last_label, sizeof H.last_label, "%s", c->label);
  snprintf(H.last_why, sizeof H.last_why, "%s", why);
  uint64_t now = hpl__now_ms();
  if (H.last_log_ms && now - H.last_log_ms < HPL__CONN_HS_LOG_MS) return;
  if (H.failed == 1)
    HPL__LOG_INFO("%s: handshake failed (%s): closing", H.last_label, H.last_why);
  else
    HPL__LOG_INFO("%llu handshakes failed in the last %llu ms (%llu since the start); the "
                  "latest: %s: %s",
                  (unsigned long long)H.failed, (unsigned long long)(now - H.last_log_ms),
                  (unsigned long long)H.failed_total, H.last_label, H.last_why);
  H.failed = 0;
  H.last_log_ms = now;
}

/* ------------------------------------------------------------------ slots */

static addr_count *addr_of(const hpl__conn *c) {
  addr_count *a;
  HASH_FIND(hh, H.by_addr, c->peer_ip, sizeof c->peer_ip, a);
  return a;
}

/* Close c to make room (it is in the handshake). */
static void evict(hpl__conn *c, const char *why) {
  H.evicted++;
  hpl__conn_hs_failed(c, why);
  hpl__conn_close(c, HPL_EAUTH); /* leaves the list (hpl__conn_hs_leave) */
}

void hpl__conn_hs_join(hpl__conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  memset(c->peer_ip, 0, sizeof c->peer_ip);
  if (c->s->type == UV_TCP &&
      uv_tcp_getpeername((uv_tcp_t *)c->s, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET)
      memcpy(c->peer_ip, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    else if (ss.ss_family == AF_INET6)
      memcpy(c->peer_ip, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
  }
  addr_count *a = addr_of(c);
  uint64_t now = hpl__now_ms();
  if (a && a->n >= hs_per_addr()) { /* the oldest from the same address goes */
    /* ... if it had its chance: a burst of honest peers from one host (a
     * node's many clients) is not cut short; the total stays hard */
    for (hpl__conn *o = H.list; o && now - o->hs_since_ms >= HPL__CONN_HS_GRACE_MS; o = o->hs_next)
      if (!memcmp(o->peer_ip, c->peer_ip, sizeof c->peer_ip)) {
        evict(o, "its address has the most connections in the handshake; the oldest went");
        break;
      }
  }
  if (H.n >= hs_max() && H.list) evict(H.list, "the handshake slots are full; the oldest went");
  if (!(a = addr_of(c))) {
    if (!(a = calloc(1, sizeof *a))) {
      hpl__conn_close(c, HPL_ENOMEM);
      return;
    }
    memcpy(a->ip, c->peer_ip, sizeof a->ip);
    HASH_ADD(hh, H.by_addr, ip, sizeof a->ip, a);
  }
  a->n++;
  c->hs_since_ms = now;
  DL_APPEND2(H.list, c, hs_prev, hs_next);
  H.n++;
  c->hs_listed = 1;
}

void hpl__conn_hs_leave(hpl__conn *c) {
  if (!c->hs_listed) return;
  c->hs_listed = 0;
  DL_DELETE2(H.list, c, hs_prev, hs_next);
  H.n--;
  addr_count *a = addr_of(c);
  if (a && --a->n == 0) {
    HASH_DEL(H.by_addr, a);
    free(a);
  }
}

int hpl__conn_hs_make_room(void) {
  if (!H.list) return 0;
  evict(H.list, "the server is at its connection limit; the oldest in the handshake went");
  return 1;
}
