/* log.c - the servers' log lines (log.h): text or JSON (through cJSON and
 * json.h), one line per call, written with a single write(2). */
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

/* The longest line hpl__log writes, its '\n' included: a message cut to a
 * line (1 KiB), every byte escaped (6x), and the other fields. */
#define LOG_JSON_MAX (1024 * 6 + 512)
/* Room for service or node, escaped and quoted (longer names are cut). */
#define LOG_NAME_ESC 160

/* buf[cap] = the NUL-terminated JSON string of s[n] (cut to fit). */
static void quote(char *buf, size_t cap, const char *s, size_t n) {
  size_t k = hpl__json_escape(buf + 1, cap - 3, s, n, HPL__JSON_FFFD, NULL);
  buf[0] = '"';
  buf[k + 1] = '"';
  buf[k + 2] = 0;
}

/* A JSON log line is printed by cJSON from nodes on the stack (members
 * added with cJSON_AddItemToObjectCS, constant keys) with
 * cJSON_PrintPreallocated: nothing is allocated, so a line is logged even
 * when memory has run out. The escaped message is made in `out` and the
 * line printed into a buffer of ours (cJSON wants a byte or two of room
 * beyond what it prints), then copied to `out`. */
size_t hpl__log_json_line(char *out, size_t cap, int64_t unix_ms, int level, const char *name,
                          int pid, const char *msg, size_t msglen, int truncated) {
  char when[48], pidtxt[16], svc[LOG_NAME_ESC], node[LOG_NAME_ESC], line[LOG_JSON_MAX];
  time_t secs = (time_t)(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(unix_ms % 1000));
  snprintf(pidtxt, sizeof pidtxt, "%d", pid); /* raw: cJSON prints numbers through doubles */
  const char *colon = strchr(name, ':');
  quote(svc, sizeof svc, name, colon ? (size_t)(colon - name) : strlen(name));
  const char *nd = colon ? colon + 1 : name;
  quote(node, sizeof node, nd, strlen(nd));
  if (cap > sizeof line) cap = sizeof line;
  cJSON root = {.type = cJSON_Object};
  cJSON m_time = {.type = cJSON_String | cJSON_IsReference, .valuestring = when};
  cJSON m_level = {.type = cJSON_String | cJSON_IsReference,
                   .valuestring = (char *)(level >= 0 && level < 4 ? level_names[level] : "info")};
  cJSON m_svc = {.type = cJSON_Raw | cJSON_IsReference, .valuestring = svc};
  cJSON m_node = {.type = cJSON_Raw | cJSON_IsReference, .valuestring = node};
  cJSON m_pid = {.type = cJSON_Raw | cJSON_IsReference, .valuestring = pidtxt};
  cJSON m_event = {.type = cJSON_Raw | cJSON_IsReference, .valuestring = out};
  cJSON m_cut = {.type = cJSON_True};
  cJSON_AddItemToObjectCS(&root, "time", &m_time);
  cJSON_AddItemToObjectCS(&root, "level", &m_level);
  cJSON_AddItemToObjectCS(&root, "service", &m_svc);
  cJSON_AddItemToObjectCS(&root, "node", &m_node);
  cJSON_AddItemToObjectCS(&root, "pid", &m_pid);
  cJSON_AddItemToObjectCS(&root, "event", &m_event);
  cJSON_AddItemToObjectCS(&root, "truncated", &m_cut);
  /* the line with an empty event, marked truncated: what it leaves of cap
   * (its '\n' kept) is the event's room */
  quote(out, cap, "", 0);
  if (!cJSON_PrintPreallocated(&root, line, (int)sizeof line, 0)) return 0;
  size_t fixed = strlen(line) + 1;
  if (fixed > cap) return 0; /* cap is below 512 */
  size_t used = 0;
  size_t k = hpl__json_escape(out + 1, cap - fixed, msg, msglen, HPL__JSON_FFFD, &used);
  out[0] = '"';
  out[k + 1] = '"';
  out[k + 2] = 0;
  if (used < msglen) truncated = 1;
  if (!truncated) cJSON_DetachItemViaPointer(&root, &m_cut);
  if (!cJSON_PrintPreallocated(&root, line, (int)sizeof line, 0)) return 0;
  size_t n = strlen(line);
  memcpy(out, line, n);
  out[n++] = '\n';
  return n;
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
