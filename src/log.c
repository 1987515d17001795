/* log.c - see log.h. One line per call, written with a single write(2). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int log_level = HPL__LOG_INFO;
static char log_name[32] = "hoplite";

void hpl__log_setup(const char *procname, int level) {
  if (procname) snprintf(log_name, sizeof log_name, "%s", procname);
  log_level = level;
}

int hpl__log_enabled(int level) { return level <= log_level; }

int hpl__log_level_parse(const char *s) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

void hpl__log(int level, const char *fmt, ...) {
  if (level > log_level) return;
  static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  char line[1024];
  struct timeval tv;
  struct tm tm;
  gettimeofday(&tv, NULL);
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
