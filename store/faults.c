/* faults.c - every fault point of the store (see faults.h). */
#include "faults.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

int hpl__faults_parse(hpl__store_faults *f, const char *spec, char *err, size_t errlen) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", spec);
  char *save = NULL;
  for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) {
      snprintf(err, errlen, "fault '%s': expected key=value", kv);
      return -1;
    }
    *eq = 0;
    const char *k = kv, *v = eq + 1;
    uint64_t n = 0;
    int bad = 0;
    if (!strcmp(k, "prefix")) {
      snprintf(f->prefix, sizeof f->prefix, "%s", v);
      continue;
    }
    if (!strcmp(k, "to_node")) {
      char *end;
      f->to_node = strtoull(v, &end, 16);
      if (*end || !f->to_node) bad = 1;
    } else if (!strcmp(k, "hb_pause")) { /* AT_MS:LEN_MS */
      unsigned long long at, len;
      if (sscanf(v, "%llu:%llu", &at, &len) != 2) {
        bad = 1;
      } else {
        f->hb_pause_at_ms = at;
        f->hb_pause_ms = len;
      }
    } else if (hpl__parse_size(v, &n)) {
      bad = 1;
    } else if (!strcmp(k, "crash_after")) {
      f->crash_after = n;
    } else if (!strcmp(k, "drop_after")) {
      f->drop_after = n;
    } else if (!strcmp(k, "stall_after")) {
      f->stall_after = n;
    } else if (!strcmp(k, "slow_send")) {
      f->slow_send = n;
    } else if (!strcmp(k, "slow_after")) {
      f->slow_after = n;
    } else if (!strcmp(k, "combine_delay_ms")) {
      f->combine_delay_ms = n;
    } else if (!strcmp(k, "held_delay_ms")) {
      f->held_delay_ms = n;
    } else if (!strcmp(k, "grant_delay_ms")) {
      f->grant_delay_ms = n;
    } else if (!strcmp(k, "corrupt_send")) {
      f->corrupt_send = n;
    } else if (!strcmp(k, "cut_reused")) {
      f->cut_reused = n;
    } else {
      snprintf(err, errlen,
               "unknown fault '%s' (crash_after, drop_after, stall_after, "
               "slow_send, slow_after, hb_pause, combine_delay_ms, held_delay_ms, grant_delay_ms, "
               "corrupt_send, cut_reused, "
               "prefix, to_node)",
               k);
      return -1;
    }
    if (bad) {
      snprintf(err, errlen, "fault '%s': bad value '%s'", k, v);
      return -1;
    }
    f->enabled = 1;
  }
  return 0;
}

int hpl__faults_corrupt_next(const hpl__store_faults *f, uint64_t *done) {
  if (*done >= f->corrupt_send) return 0;
  (*done)++;
  return 1;
}

/* Whether `id` matches the prefix: it starts with it, or (a prefix "r:T"
 * or "g:T") it is a reduce stream "r:<rid>.<slot>:<gen>:<target>" or a
 * ring stream "g:<rid>:<index>:<target>" whose target starts with T. */
static int prefix_match(const char *prefix, const char *id) {
  size_t n = strlen(prefix);
  if (!strncmp(id, prefix, n)) return 1;
  if ((strncmp(prefix, "r:", 2) != 0 && strncmp(prefix, "g:", 2) != 0) ||
      strncmp(id, prefix, 2) != 0)
    return 0;
  const char *t = strchr(id + 2, ':'); /* after <rid>.<slot> */
  if (t) t = strchr(t + 1, ':');       /* after <gen> */
  return t && !strncmp(t + 1, prefix + 2, n - 2);
}

int hpl__faults_apply(const hpl__store_faults *f, const char *id, uint64_t peer) {
  return f->enabled && prefix_match(f->prefix, id) && (!f->to_node || f->to_node == peer);
}

uint64_t hpl__faults_budget(hpl__store_faults *f, const char *id, uint64_t sent,
                            uint64_t elapsed_ms, int inflight, int *stalled, uint64_t *slow_from_ms,
                            uint64_t want, int *action) {
  *action = HPL__FAULT_HOLD;
  if (f->crash_after && f->sent >= f->crash_after) {
    HPL__LOG_WARN("fault point: crashing after sending %llu bytes", (unsigned long long)f->sent);
    raise(SIGKILL);
  }
  if (f->drop_after && !f->dropped && sent >= f->drop_after) {
    if (inflight > 0) return 0; /* cut exactly there: let queued bytes go first */
    f->dropped = 1;
    HPL__LOG_WARN("fault point: dropping the stream of '%s' after %llu bytes", id,
                  (unsigned long long)sent);
    *action = HPL__FAULT_CUT;
    return 0;
  }
  if (*stalled || (f->stall_after && !f->stalled && sent >= f->stall_after)) {
    if (!*stalled)
      HPL__LOG_WARN("fault point: stalling the stream of '%s' after %llu bytes", id,
                    (unsigned long long)sent);
    f->stalled = *stalled = 1;
    return 0;
  }
  uint64_t cap = want;
  if (f->crash_after && f->crash_after - f->sent < cap) cap = f->crash_after - f->sent;
  if (f->drop_after && !f->dropped && f->drop_after - sent < cap) cap = f->drop_after - sent;
  if (f->stall_after && !f->stalled && f->stall_after - sent < cap) cap = f->stall_after - sent;
  if (f->slow_send && sent < f->slow_after) {
    if (f->slow_after - sent < cap) cap = f->slow_after - sent; /* full speed up to there */
  } else if (f->slow_send) {
    if (f->slow_after && !*slow_from_ms) {
      *slow_from_ms = elapsed_ms + 1;
      HPL__LOG_WARN("fault point: pacing the stream of '%s' to %llu B/s after %llu bytes", id,
                    (unsigned long long)f->slow_send, (unsigned long long)sent);
    }
    uint64_t since = *slow_from_ms ? elapsed_ms + 1 - *slow_from_ms : elapsed_ms;
    uint64_t allowed = f->slow_after + f->slow_send * since / 1000 + 65536;
    if (sent >= allowed) {
      *action = HPL__FAULT_PACE;
      return 0;
    }
    if (allowed - sent < cap) cap = allowed - sent;
  }
  *action = HPL__FAULT_SEND;
  return cap;
}

void hpl__faults_sent(hpl__store_faults *f, uint64_t n) { f->sent += n; }

void hpl__faults_combine_delay(const hpl__store_faults *f) {
  if (!f->combine_delay_ms) return;
  struct timespec ts = {(time_t)(f->combine_delay_ms / 1000),
                        (long)(f->combine_delay_ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

uint64_t hpl__faults_silent_ms(const hpl__store_faults *f, uint64_t elapsed_ms) {
  if (!f->hb_pause_ms) return 0;
  if (elapsed_ms < f->hb_pause_at_ms || elapsed_ms >= f->hb_pause_at_ms + f->hb_pause_ms) return 0;
  return f->hb_pause_at_ms + f->hb_pause_ms - elapsed_ms;
}

int hpl__faults_cut_reused(hpl__store_faults *f, const char *id, uint64_t peer, uint64_t before) {
  if (!f->enabled || !before || f->cut_reused_done >= f->cut_reused ||
      !hpl__faults_apply(f, id, peer))
    return 0;
  f->cut_reused_done++;
  HPL__LOG_INFO("fault: PULL of '%s' on a connection that carried %llu before: closed unanswered",
                id, (unsigned long long)before);
  return 1;
}
