/* log.c - see log.h. One line per call, written with a single write(2). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int log_level = HPL__LOG_INFO;
static int log_format = HPL__LOG_TEXT;
static char log_name[32] = "hoplite";

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void hpl__log_setup(const char *procname, int level) {
  if (procname) snprintf(log_name, sizeof log_name, "%s", procname);
  log_level = level;
}

int hpl__log_enabled(int level) { return level <= log_level; }

int hpl__log_level_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, level_names[i]) == 0) return i;
  return -1;
}

int hpl__log_format_parse(const char *s) {
  if (!strcmp(s, "text")) return HPL__LOG_TEXT;
  if (!strcmp(s, "json")) return HPL__LOG_JSON;
  return -1;
}

void hpl__log_set_format(int format) {
  log_format = format == HPL__LOG_JSON ? HPL__LOG_JSON : HPL__LOG_TEXT;
}

/* Length of the valid UTF-8 sequence starting at s[0] (1-4), or 0 if the
 * bytes there do not start one (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF, no sequence cut short by n). */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;      /* overlong */
    else if (c == 0xed) hi = 0x9f; /* surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;      /* overlong */
    else if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

size_t hpl__log_json_escape(char *out, size_t cap, const char *s, size_t n, size_t *used) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  size_t o = 0, i = 0;
  while (i < n) {
    unsigned c = u[i];
    char esc[6];
    const char *piece = esc;
    size_t plen, in = 1;
    if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c, plen = 2;
    } else if (c < 0x20 || c == 0x7f) {
      const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r"
                        : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
      if (named) {
        piece = named, plen = 2;
      } else {
        memcpy(esc, "\\u00", 4);
        esc[4] = hex[c >> 4], esc[5] = hex[c & 15], plen = 6;
      }
    } else if ((in = utf8_len(u + i, n - i)) == 0) {
      piece = "\\ufffd", plen = 6, in = 1; /* one replacement per bad byte */
    } else {
      piece = s + i, plen = in; /* ASCII or a whole valid UTF-8 sequence */
    }
    if (cap - o < plen) break;
    memcpy(out + o, piece, plen);
    o += plen;
    i += in;
  }
  if (used) *used = i;
  return o;
}

/* Append s[n] to out[cap] at *o as far as it fits. */
static void put(char *out, size_t cap, size_t *o, const char *s, size_t n) {
  if (n > cap - *o) n = cap - *o;
  memcpy(out + *o, s, n);
  *o += n;
}

static void put_esc(char *out, size_t cap, size_t *o, const char *s, size_t n) {
  *o += hpl__log_json_escape(out + *o, cap - *o, s, n, NULL);
}

size_t hpl__log_json_line(char *out, size_t cap, int64_t unix_ms, int level, const char *name,
                          int pid, const char *msg, size_t msglen, int truncated) {
  static const char tail_cut[] = "\",\"truncated\":true}\n", tail[] = "\"}\n";
  char head[96];
  time_t secs = (time_t)(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  int n = snprintf(head, sizeof head,
                   "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"level\":\"%s\","
                   "\"service\":\"",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   (int)(unix_ms % 1000), level >= 0 && level < 4 ? level_names[level] : "info");
  if (n < 0 || (size_t)n >= sizeof head) n = 0; /* a year beyond 9999 */
  size_t o = 0;
  /* room for the longest tail, reserved while the rest is written */
  size_t body = cap - (sizeof tail_cut - 1);
  put(out, body, &o, head, (size_t)n);
  const char *colon = strchr(name, ':');
  size_t slen = colon ? (size_t)(colon - name) : strlen(name);
  const char *node = colon ? colon + 1 : name;
  put_esc(out, body, &o, name, slen);
  put(out, body, &o, "\",\"node\":\"", 10);
  put_esc(out, body, &o, node, strlen(node));
  n = snprintf(head, sizeof head, "\",\"pid\":%d,\"event\":\"", pid);
  put(out, body, &o, head, (size_t)n);
  size_t used = 0;
  o += hpl__log_json_escape(out + o, body - o, msg, msglen, &used);
  if (used < msglen) truncated = 1;
  if (truncated)
    put(out, cap, &o, tail_cut, sizeof tail_cut - 1);
  else
    put(out, cap, &o, tail, sizeof tail - 1);
  return o;
}

void hpl__log(int level, const char *fmt, ...) {
  if (level > log_level) return;
  static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  char line[1024];
  struct timeval tv;
  struct tm tm;
  gettimeofday(&tv, NULL);
  if (log_format == HPL__LOG_JSON) {
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    size_t len = (size_t)m, cut = 0;
    if (len > sizeof line - 1) len = sizeof line - 1, cut = 1;
    char json[sizeof line * 6 + 512]; /* every byte escaped (6x) plus the fields */
    int64_t ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    size_t jl = hpl__log_json_line(json, sizeof json, ms, level, log_name, (int)getpid(), line,
                                   len, (int)cut);
    ssize_t w = write(STDERR_FILENO, json, jl);
    (void)w;
    return;
  }
  localtime_r(&tv.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s[%d] %-5s ", tm.tm_hour, tm.tm_min,
                   tm.tm_sec, (long)tv.tv_usec / 1000, log_name, (int)getpid(), tags[level]);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) m = 0;
  size_t len = (size_t)n + (size_t)m;
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}
