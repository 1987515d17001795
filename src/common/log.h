/*
 * log.h - timestamped, levelled log lines for the servers and tools.
 * The client library never logs; only processes that own stderr do.
 *
 * Two line formats (hpl__log_set_format):
 *  - text (default): "HH:MM:SS.mmm NAME[PID] LEVEL message", local time;
 *  - json: one object per line, for log collectors:
 *      {"time":"2024-05-01T12:34:56.789Z","level":"info","service":"store",
 *       "node":"node1","pid":1234,"event":"the message"}
 *    time is RFC 3339 in UTC with milliseconds; level is error|warn|info|
 *    debug (the --log-level words); service and node come from the name
 *    given to hpl__log_setup: "store:node1" gives service "store" and node
 *    "node1", a name without ':' ("directory") is both. "truncated":true is
 *    added when the message was longer than a line holds (1 KiB) and cut.
 *    Strings are escaped as JSON requires (json.h, HPL__JSON_FFFD): '"' and
 *    '\' with a backslash, control characters (and DEL) as \n, \t, \r, \b,
 *    \f or \u00XX; valid UTF-8 is kept as it is; each byte that is not part
 *    of a valid UTF-8 sequence (stray continuation bytes, overlong forms,
 *    surrogates, above U+10FFFF, a sequence cut short) becomes \ufffd, so
 *    every line is valid UTF-8 and valid JSON. The line is written in one
 *    pass, without allocating.
 * Either way a line is written with a single write(2) to stderr.
 *
 * Callers: the servers (store/, directory/, src/server/) and the
 * test harness; never the client library.
 */
#ifndef HPL_LOG_H
#define HPL_LOG_H

#include <stddef.h>
#include <stdint.h>

enum { HPL__LOG_ERROR = 0, HPL__LOG_WARN = 1, HPL__LOG_INFO = 2, HPL__LOG_DEBUG = 3 };
enum { HPL__LOG_TEXT = 0, HPL__LOG_JSON = 1 };

/* Process-wide settings: minimum level printed and a name shown on each line. */
void hpl__log_setup(const char *procname, int level);
/* Parse "error|warn|info|debug"; -1 if unknown. */
int hpl__log_level_parse(const char *s);
/* Parse "text|json" into HPL__LOG_TEXT/JSON; -1 if unknown. */
int hpl__log_format_parse(const char *s);
/* The format of every later line (HPL__LOG_TEXT or HPL__LOG_JSON; default
 * text). Kept across hpl__log_setup. */
void hpl__log_set_format(int format);
void hpl__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hpl__log_enabled(int level);

/* One JSON log line (with its '\n') into out[cap]: time `unix_ms`
 * (milliseconds since the epoch), `level` (HPL__LOG_*), process `name` (see
 * above; service and node are cut at 186 bytes escaped, which a name of
 * 31 bytes, the most hpl__log_setup keeps, never reaches), `pid`, and
 * the message msg[msglen]; `truncated` adds "truncated":true. If out is
 * too small the message is cut on an escape's or character's boundary
 * (and marked truncated); cap must be at least 512, and at most 6 KiB +
 * 512 of it is used (what a 1 KiB message needs). Returns the line's
 * length. No allocation. */
size_t hpl__log_json_line(char *out, size_t cap, int64_t unix_ms, int level, const char *name,
                          int pid, const char *msg, size_t msglen, int truncated);

#define HPL__LOG_ERROR(...) hpl__log(HPL__LOG_ERROR, __VA_ARGS__)
#define HPL__LOG_WARN(...) hpl__log(HPL__LOG_WARN, __VA_ARGS__)
#define HPL__LOG_INFO(...) hpl__log(HPL__LOG_INFO, __VA_ARGS__)
#define HPL__LOG_DEBUG(...) \
  do { if (hpl__log_enabled(HPL__LOG_DEBUG)) hpl__log(HPL__LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
