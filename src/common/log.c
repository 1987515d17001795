/* log.c - the servers' log lines (log.h): text or JSON (strings escaped
 * by json.h), one line per call, written with a single write(2). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "json.h"

static int log_level = HPL__LOG_INFO;
static int log_format = HPL__LOG_TEXT;
static char log_name[32] = "hoplite";

static const char *const level_names[] = {"error", "warn", "info", "debug"};

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

/* The longest line hpl__log writes, its '\n' included: a message cut to a
 * line (1 KiB), every byte escaped (6x), and the other fields. */
#define LOG_JSON_MAX (1024 * 6 + 512)
/* "service":"S","node":"N" for names of up to 31 bytes (all log_name
 * keeps), every byte escaped (6x); longer names are cut. */
#define LOG_NAMES_MAX (2 * (6 * 31 + 2) + 20)
/* The longest end of a line, after the message's closing quote. */
static const char tail_cut[] = ",\"truncated\":true}\n", tail[] = "}\n";

/* `"service":"S","node":"N"` of a process name "S:N" (or "S" for both)
 * into out[LOG_NAMES_MAX]; returns its length. */
static size_t log_names(char *out, const char *name) {
  const size_t half = 6 * 31 + 2; /* a name's room, quotes included */
  const char *colon = strchr(name, ':');
  const char *node = colon ? colon + 1 : name;
  size_t o = 0;
  memcpy(out, "\"service\":", 10), o += 10;
  o += hpl__json_quote(out + o, half, name, colon ? (size_t)(colon - name) : strlen(name),
                       HPL__JSON_FFFD, NULL);
  memcpy(out + o, ",\"node\":", 8), o += 8;
  o += hpl__json_quote(out + o, half, node, strlen(node), HPL__JSON_FFFD, NULL);
  return o;
}

/* log_name's service and node, escaped once (by hpl__log_setup), for every
 * line hpl__log writes. */
#define LOG_NAMES_DEFAULT "\"service\":\"hoplite\",\"node\":\"hoplite\""
static char names_json[LOG_NAMES_MAX] = LOG_NAMES_DEFAULT;
static size_t names_len = sizeof LOG_NAMES_DEFAULT - 1;

void hpl__log_setup(const char *procname, int level) {
  if (procname) {
    snprintf(log_name, sizeof log_name, "%s", procname);
    names_len = log_names(names_json, log_name);
  }
  log_level = level;
}

/* hpl__log_json_line with the names already as JSON (names[nlen], see
 * log_names): written straight into out in one pass, the longest tail's
 * room kept while the message is escaped into place. */
static size_t json_line(char *out, size_t cap, int64_t unix_ms, int level, const char *names,
                        size_t nlen, int pid, const char *msg, size_t msglen, int truncated) {
  if (cap > LOG_JSON_MAX) cap = LOG_JSON_MAX;
  time_t secs = (time_t)(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  int n = snprintf(out, cap, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"level\":\"%s\",",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   (int)(unix_ms % 1000), level >= 0 && level < 4 ? level_names[level] : "info");
  if (n < 0 || (size_t)n >= cap || cap - (size_t)n < nlen + 32) return 0;
  size_t o = (size_t)n;
  memcpy(out + o, names, nlen), o += nlen;
  n = snprintf(out + o, cap - o, ",\"pid\":%d,\"event\":", pid);
  if (n < 0 || cap - o < (size_t)n + 2 + sizeof tail_cut - 1) return 0;
  o += (size_t)n;
  size_t used = 0;
  o += hpl__json_quote(out + o, cap - o - (sizeof tail_cut - 1), msg, msglen, HPL__JSON_FFFD,
                       &used);
  if (used < msglen) truncated = 1;
  const char *t = truncated ? tail_cut : tail;
  size_t tl = truncated ? sizeof tail_cut - 1 : sizeof tail - 1;
  memcpy(out + o, t, tl);
  return o + tl;
}

size_t hpl__log_json_line(char *out, size_t cap, int64_t unix_ms, int level, const char *name,
                          int pid, const char *msg, size_t msglen, int truncated) {
  char names[LOG_NAMES_MAX];
  size_t nlen = log_names(names, name);
  return json_line(out, cap, unix_ms, level, names, nlen, pid, msg, msglen, truncated);
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
    char json[LOG_JSON_MAX]; /* every byte escaped (6x) plus the fields */
    int64_t ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    size_t jl = json_line(json, sizeof json, ms, level, names_json, names_len, (int)getpid(),
                          line, len, (int)cut);
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
