/*
 * log.h - timestamped, levelled log lines for the servers and tools.
 * The client library never logs; only processes that own stderr do.
 */
#ifndef HPL_LOG_H
#define HPL_LOG_H

enum { HPL__LOG_ERROR = 0, HPL__LOG_WARN = 1, HPL__LOG_INFO = 2, HPL__LOG_DEBUG = 3 };

/* Process-wide settings: minimum level printed and a name shown on each line. */
void hpl__log_setup(const char *procname, int level);
/* Parse "error|warn|info|debug"; -1 if unknown. */
int hpl__log_level_parse(const char *s);
void hpl__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hpl__log_enabled(int level);

#define LOG_ERROR(...) hpl__log(HPL__LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) hpl__log(HPL__LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) hpl__log(HPL__LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) \
  do { if (hpl__log_enabled(HPL__LOG_DEBUG)) hpl__log(HPL__LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
