/* ha.c - the directory's leader lease in etcd: standing by, the lease
 * thread that renews it, the loop's check that fences a leader whose lease
 * is no longer certain (see ha.h). */
#include "ha.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etcd.h"
#include "hoplite.h"
#include "log.h"
#include "util.h"

struct hpl__ha {
  hpl__ha_cfg cfg;
  char endpoints[1024];
  char leader_key[HPL__ETCD_MAX_KEY + 1], member_key[HPL__ETCD_MAX_KEY + 1];
  char members_prefix[HPL__ETCD_MAX_KEY + 1];
  hpl__etcd *e; /* the campaign's thread's, then the lease thread's only */
  int64_t lease;
  int64_t mod; /* the leader key's revision as this leader last wrote it */
  pthread_t th;
  int th_started;
  pthread_mutex_t mu; /* guards what follows */
  pthread_cond_t cv;
  int stop;
  uint64_t valid_until_ms; /* the lease is ours until then (0: lost); atomic, not under mu */
  hpl__ha_info info;
  /* the loop's side */
  uv_timer_t check;
  int check_open, lost;
  void (*on_lost)(void *arg);
  void *arg;
};

/* Fenced this long before the lease could expire at etcd. */
static uint32_t margin_ms(const hpl__ha *ha) { return ha->cfg.lease_ms / 4; }

static uint64_t valid_until(hpl__ha *ha) {
  return __atomic_load_n(&ha->valid_until_ms, __ATOMIC_ACQUIRE);
}

static void set_valid_until(hpl__ha *ha, uint64_t ms) {
  __atomic_store_n(&ha->valid_until_ms, ms, __ATOMIC_RELEASE);
}

static void free_ha(hpl__ha *ha) {
  hpl__etcd_free(ha->e);
  pthread_mutex_destroy(&ha->mu);
  pthread_cond_destroy(&ha->cv);
  free(ha);
}

/* One entry per address: a directory restarted on its address (or
 * re-executed by its fence) may meet its former key still under the old
 * etcd lease, and both name the same directory. */
static void add_member(void *arg, const char *key, const char *value) {
  (void)key;
  hpl__ha_info *in = arg;
  for (int i = 0; i < in->nmembers; i++)
    if (strcmp(in->members[i], value) == 0) return;
  if (in->nmembers < HPL__HA_MAX_MEMBERS)
    snprintf(in->members[in->nmembers++], sizeof in->members[0], "%s", value);
}

/* Refresh the list of directories (lease thread, or the campaign). */
static void list_members(hpl__ha *ha) {
  hpl__ha_info tmp = {0};
  if (hpl__etcd_list(ha->e, ha->members_prefix, add_member, &tmp)) return;
  pthread_mutex_lock(&ha->mu);
  ha->info.nmembers = tmp.nmembers;
  memcpy(ha->info.members, tmp.members, sizeof tmp.members);
  pthread_mutex_unlock(&ha->mu);
}

int hpl__ha_campaign(const hpl__ha_cfg *cfg, hpl__ha **out, uint64_t *term) {
  *out = NULL;
  if (!cfg->endpoints || !cfg->prefix || cfg->lease_ms < 300 || !cfg->advertise[0] ||
      strlen(cfg->prefix) > 200 || strlen(cfg->endpoints) >= sizeof ((hpl__ha *)0)->endpoints)
    return HPL_EINVAL;
  hpl__ha *ha = calloc(1, sizeof *ha);
  if (!ha) return HPL_ENOMEM;
  pthread_mutex_init(&ha->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&ha->cv, &ca);
  pthread_condattr_destroy(&ca);
  ha->cfg = *cfg;
  snprintf(ha->endpoints, sizeof ha->endpoints, "%s", cfg->endpoints);
  ha->cfg.endpoints = ha->endpoints;
  snprintf(ha->leader_key, sizeof ha->leader_key, "%s/leader", cfg->prefix);
  snprintf(ha->members_prefix, sizeof ha->members_prefix, "%s/members/", cfg->prefix);
  /* keyed by address: a directory started again on its address takes its
   * key over from the lease of its former life */
  snprintf(ha->member_key, sizeof ha->member_key, "%s%s", ha->members_prefix, cfg->advertise);
  /* a request to one endpoint waits an eighth of a lease at most: a
   * renewal that meets a dead endpoint, or etcd electing its leader, has
   * time for several tries before the lease is no longer certain */
  int rc = hpl__etcd_new(cfg->endpoints, cfg->lease_ms / 8, &ha->e);
  if (rc) {
    free_ha(ha);
    return rc;
  }
  int64_t ttl_s = (cfg->lease_ms + 999) / 1000; /* etcd counts whole seconds */
  uint32_t poll_ms = cfg->lease_ms / 10;
  uint64_t renewed_ms = 0, warned_ms = 0, seen_at = 0;
  int64_t seen_rev = -1, seen_mod = -1;
  for (;;) {
    uint64_t t = hpl__now_ms();
    int64_t left = 0;
    if (!ha->lease) {
      /* (etcd may grant more than asked: that only keeps a dead
       * directory's keys longer; the lease that counts is ours) */
      rc = hpl__etcd_lease_grant(ha->e, ttl_s, &ha->lease, NULL);
      if (rc == 0 && (rc = hpl__etcd_put(ha->e, ha->member_key, cfg->advertise, ha->lease)))
        ha->lease = 0;
      if (rc == 0) renewed_ms = t;
    } else if (t - renewed_ms < cfg->lease_ms / 4) {
      rc = 0; /* renewed recently enough */
    } else if ((rc = hpl__etcd_lease_keepalive(ha->e, ha->lease, &left)) == 0) {
      renewed_ms = t;
    } else if (rc == HPL_ENOTFOUND) {
      ha->lease = 0; /* expired while we could not reach etcd: a new one */
      continue;
    }
    int created = 0;
    int64_t rev = 0, mod = 0;
    char cur[HPL__ETCD_MAX_VAL + 1] = "";
    if (rc == 0)
      rc = hpl__etcd_create(ha->e, ha->leader_key, cfg->advertise, ha->lease, &created, &rev,
                            &mod, cur, sizeof cur);
    if (rc == 0 && created) {
      ha->mod = rev;
      set_valid_until(ha, renewed_ms + cfg->lease_ms);
      ha->info.term = (uint64_t)rev;
      snprintf(ha->info.endpoint, sizeof ha->info.endpoint, "%s", hpl__etcd_endpoint(ha->e));
      list_members(ha);
      HPL__LOG_INFO("leading, term %llu (etcd %s, key %s, lease %u ms)",
                    (unsigned long long)ha->info.term, hpl__etcd_endpoint(ha->e), ha->leader_key,
                    cfg->lease_ms);
      *term = ha->info.term;
      *out = ha;
      return 0;
    }
    if (rc == 0 && rev != seen_rev) {
      HPL__LOG_INFO("standing by: %s leads (term %lld)", cur, (long long)rev);
      seen_rev = rev;
    }
    if (rc == 0 && mod != seen_mod) { /* renewed: seen now (after the answer, see ha.h) */
      seen_mod = mod;
      seen_at = hpl__now_ms();
    } else if (rc == 0 && hpl__now_ms() - seen_at > cfg->lease_ms) {
      /* not renewed for a lease: its leader has fenced itself; the key
       * goes unless it is renewed this very moment, and we campaign */
      int done = 0;
      if (hpl__etcd_swap(ha->e, ha->leader_key, seen_mod, NULL, 0, &done, NULL) == 0 && done) {
        HPL__LOG_WARN("the leader %s (term %lld) did not renew its key for %u ms: removed it",
                      cur, (long long)rev, cfg->lease_ms);
        continue;
      }
    } else if (rc && t - warned_ms >= cfg->lease_ms) {
      HPL__LOG_WARN("standing by: etcd (%s) not usable: %s", cfg->endpoints, hpl_strerror(rc));
      warned_ms = t;
    }
    hpl__sleep_until_ns(hpl__now_ns() + poll_ms * 1000000ull);
  }
}

/* ------------------------------------------------------------------ the lease thread */

static void *lease_thread(void *arg) {
  hpl__ha *ha = arg;
  uint32_t every = ha->cfg.lease_ms / 5, retry = ha->cfg.lease_ms / 20;
  uint64_t next = hpl__now_ms() + every;
  unsigned rounds = 0;
  pthread_mutex_lock(&ha->mu);
  while (!ha->stop) {
    uint64_t now = hpl__now_ms();
    if (now < next) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t ns = (uint64_t)ts.tv_nsec + (next - now) * 1000000ull;
      ts.tv_sec += (time_t)(ns / 1000000000ull);
      ts.tv_nsec = (long)(ns % 1000000000ull);
      pthread_cond_timedwait(&ha->cv, &ha->mu, &ts);
      continue;
    }
    pthread_mutex_unlock(&ha->mu);
    uint64_t t0 = hpl__now_ns();
    int64_t left = 0, rev = 0;
    int done = 0;
    /* the etcd lease (the keys vanish if we die), then the leader key
     * rewritten only if it is still as we last wrote it: a standby that
     * sees it unchanged for a lease takes it (see ha.h) */
    int rc = hpl__etcd_lease_keepalive(ha->e, ha->lease, &left);
    if (rc == 0 && (rc = hpl__etcd_swap(ha->e, ha->leader_key, ha->mod, ha->cfg.advertise,
                                        ha->lease, &done, &rev)) == 0) {
      if (done) ha->mod = rev;
      else rc = HPL_ENOTFOUND; /* taken, or gone: deposed */
    }
    uint64_t us = (hpl__now_ns() - t0) / 1000;
    if (rc == 0 && ++rounds % 3 == 1) list_members(ha);
    pthread_mutex_lock(&ha->mu);
    if (rc == 0) {
      if (valid_until(ha)) set_valid_until(ha, t0 / 1000000 + ha->cfg.lease_ms);
      ha->info.renewals++;
      ha->info.renew_last_us = us;
      if (us > ha->info.renew_max_us) ha->info.renew_max_us = us;
      snprintf(ha->info.endpoint, sizeof ha->info.endpoint, "%s", hpl__etcd_endpoint(ha->e));
      next = t0 / 1000000 + every;
    } else {
      ha->info.renew_failures++;
      if (rc == HPL_ENOTFOUND) set_valid_until(ha, 0); /* gone: the loop's check fences */
      next = hpl__now_ms() + retry;
    }
    if (rc) {
      pthread_mutex_unlock(&ha->mu);
      HPL__LOG_WARN("renewing the leader lease failed: %s%s", hpl_strerror(rc),
                    rc == HPL_ENOTFOUND ? " (it expired, or another directory took the key)"
                                        : "; retrying");
      pthread_mutex_lock(&ha->mu);
    }
  }
  pthread_mutex_unlock(&ha->mu);
  return NULL;
}

int hpl__ha_certain(hpl__ha *ha) { return hpl__now_ms() + margin_ms(ha) < valid_until(ha); }

void hpl__ha_fence(hpl__ha *ha) {
  if (ha->lost) return;
  ha->lost = 1;
  uint64_t until = valid_until(ha), now = hpl__now_ms();
  HPL__LOG_ERROR("the leader lease is no longer certain (%s): no longer leading",
                 !until ? "it expired at etcd, or the key was taken"
                 : now >= until ? "not renewed in time, and past it"
                                : "not renewed in time");
  if (ha->check_open) uv_timer_stop(&ha->check);
  ha->on_lost(ha->arg);
}

static void check_cb(uv_timer_t *t) {
  hpl__ha *ha = t->data;
  if (!hpl__ha_certain(ha)) hpl__ha_fence(ha);
}

int hpl__ha_keep(hpl__ha *ha, uv_loop_t *loop, void (*on_lost)(void *arg), void *arg) {
  ha->on_lost = on_lost;
  ha->arg = arg;
  if (pthread_create(&ha->th, NULL, lease_thread, ha) != 0) return HPL_ESYS;
  ha->th_started = 1;
  uv_timer_init(loop, &ha->check);
  ha->check.data = ha;
  ha->check_open = 1;
  uint32_t every = ha->cfg.lease_ms / 20;
  uv_timer_start(&ha->check, check_cb, every, every);
  uv_unref((uv_handle_t *)&ha->check); /* it does not keep a stopping loop alive */
  return 0;
}

void hpl__ha_info_get(hpl__ha *ha, hpl__ha_info *out) {
  pthread_mutex_lock(&ha->mu);
  *out = ha->info;
  pthread_mutex_unlock(&ha->mu);
  uint64_t now = hpl__now_ms(), until = valid_until(ha);
  out->lease_left_ms = until > now + margin_ms(ha) ? until - now - margin_ms(ha) : 0;
}

void hpl__ha_stop(hpl__ha *ha) {
  if (!ha || !ha->check_open) return;
  ha->check_open = 0;
  uv_close((uv_handle_t *)&ha->check, NULL);
}

void hpl__ha_resign(hpl__ha *ha, int step_down) {
  if (!ha) return;
  if (ha->th_started) {
    pthread_mutex_lock(&ha->mu);
    ha->stop = 1;
    pthread_cond_signal(&ha->cv);
    pthread_mutex_unlock(&ha->mu);
    pthread_join(ha->th, NULL);
  }
  if (step_down && ha->lease) {
    int rc = hpl__etcd_lease_revoke(ha->e, ha->lease);
    if (rc)
      HPL__LOG_WARN("could not revoke the leader lease (%s): a standby leads once it expires",
                    hpl_strerror(rc));
    else
      HPL__LOG_INFO("stepped down: the leader lease is revoked");
  }
  free_ha(ha);
}
