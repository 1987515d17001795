/*
 * log.h - timestamped, levelled log lines for the servers and tools.
 * The client library never logs; only processes that own stderr do.
 */
#ifndef HPL_LOG_H
#define HPL_LOG_H

enum { HPL_LOG_ERROR = 0, HPL_LOG_WARN = 1, HPL_LOG_INFO = 2, HPL_LOG_DEBUG = 3 };

/* Process-wide settings: minimum level printed and a name shown on each line. */
void hpl_log_setup(const char *procname, int level);
/* Parse "error|warn|info|debug"; -1 if unknown. */
int hpl_log_level_parse(const char *s);
void hpl_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hpl_log_enabled(int level);

#define LOG_ERROR(...) hpl_log(HPL_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) hpl_log(HPL_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) hpl_log(HPL_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) \
  do { if (hpl_log_enabled(HPL_LOG_DEBUG)) hpl_log(HPL_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
