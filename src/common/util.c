/* util.c - small helpers every process uses: clocks, deadlines, parsing,
 * formatting, checksums (see util.h). */
#include "util.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

void *hpl__zalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (p) memset(p, 0, size);
  return p;
}

uint64_t hpl__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t hpl__now_ms(void) { return hpl__now_ns() / 1000000ull; }

void hpl__sleep_until_ns(uint64_t t_ns) {
  struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000ull),
                        .tv_nsec = (long)(t_ns % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

int hpl__parse_size(const char *s, uint64_t *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *s == '-') return -1;
  unsigned shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
  }
  if (shift && (*end == 'i' || *end == 'I')) end++;
  if (shift && (*end == 'b' || *end == 'B')) end++;
  if (!shift && (*end == 'b' || *end == 'B')) end++;
  if (*end) return -1;
  if (shift && v > (UINT64_MAX >> shift)) return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

int hpl__parse_rate(const char *s, uint64_t *out) {
  if (!s || *s < '0' || *s > '9') return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || v <= 0) return -1;
  double mult = !strcasecmp(end, "gbit")   ? 1e9
                : !strcasecmp(end, "mbit") ? 1e6
                : !strcasecmp(end, "kbit") ? 1e3
                : !strcasecmp(end, "bit")  ? 1
                                           : 0;
  if (mult == 0 || v * mult > 1e15) return -1;
  *out = (uint64_t)(v * mult);
  return 0;
}

int hpl__parse_hostport(const char *s, const char *defhost, char *host, size_t hostlen, int *port) {
  const char *colon = strrchr(s, ':');
  if (!colon) return -1;
  size_t hl = (size_t)(colon - s);
  if (hl == 0) {
    if (!defhost || strlen(defhost) >= hostlen) return -1;
    strcpy(host, defhost);
  } else {
    if (hl >= hostlen) return -1;
    memcpy(host, s, hl);
    host[hl] = 0;
  }
  char *end;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || end == colon + 1 || *end || p < 0 || p > 65535) return -1;
  *port = (int)p;
  return 0;
}

const char *hpl__fmt_bytes(uint64_t n, char *buf, size_t len) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)n);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

uint64_t hpl__random_u64(void) {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
      v = hpl__now_ns() ^ ((uint64_t)rand() << 32);
  }
  return v;
}

uint64_t hpl__deadline_ms(int64_t timeout_ms) {
  if (timeout_ms < 0) return UINT64_MAX;
  return hpl__now_ms() + (uint64_t)timeout_ms;
}

int64_t hpl__ms_left(uint64_t deadline_ms) {
  if (deadline_ms == UINT64_MAX) return -1;
  uint64_t now = hpl__now_ms();
  return now >= deadline_ms ? 0 : (int64_t)(deadline_ms - now);
}

uint64_t hpl__checksum(const void *p, size_t len) {
  const uint8_t *b = p;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h ^ (h >> 31);
}

void hpl__fill_pattern(void *buf, size_t len, uint64_t seed) {
  uint8_t *b = buf;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(b + i, &x, 8);
  }
  for (; i < len; i++) b[i] = (uint8_t)(x >> (8 * (i & 7)));
}

uint32_t hpl__filter_slot(const char *id, uint32_t slots) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)id; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
  return (uint32_t)(h ^ (h >> 32)) & (slots - 1);
}

int hpl__is_loopback(const char *host) {
  struct in_addr a4;
  struct in6_addr a6;
  if (!strcmp(host, "localhost")) return 1;
  if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return 0;
}

int hpl__errf(char *buf, size_t len, int code, const char *fmt, ...) {
  if (buf && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
  }
  return code;
}

int hpl__sock_control(int fd) {
  static _Atomic int on = -1; /* racing first readers store the same value */
  int v = atomic_load_explicit(&on, memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("HOPLITE_CONTROL_PRIO");
    v = !(e && strcmp(e, "0") == 0);
    atomic_store_explicit(&on, v, memory_order_relaxed);
  }
  if (!v) return 0;
  int prio = 6; /* TC_PRIO_INTERACTIVE: pfifo_fast's band 0 */
  return setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof prio);
}
