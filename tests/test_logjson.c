/* test_logjson.c - the servers' JSON log lines (src/common/log.c) and the
 * one JSON string escaper (src/common/json.c): the escaping of strings
 * (quotes, backslashes, control characters, invalid UTF-8 as \ufffd, or
 * as \udcXX for ids),
 * the fields of a line, the cut of a message too long for a line, and
 * hpl__log itself in both formats (stderr captured through a pipe).
 * Lines are also read back with Python's json module (/usr/bin/python3),
 * so "valid JSON" is checked by a parser, not only by string compares. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "json.h"
#include "log.h"

/* Escape a NUL-terminated string (or n bytes) into a static buffer. */
static const char *esc_n(const char *s, size_t n) {
  static char out[4096];
  size_t used = 0;
  size_t len = hpl__json_escape(out, sizeof out - 1, s, n, HPL__JSON_FFFD, &used);
  assert_int_equal(used, n);
  out[len] = 0;
  return out;
}
#define esc(s) esc_n(s, strlen(s))

static void test_escape(void **state) {
  (void)state;
  assert_string_equal(esc("plain ascii 123"), "plain ascii 123");
  assert_string_equal(esc("say \"hi\""), "say \\\"hi\\\"");
  assert_string_equal(esc("a\\b"), "a\\\\b");
  assert_string_equal(esc("l1\nl2\r\t\b\f"), "l1\\nl2\\r\\t\\b\\f");
  assert_string_equal(esc("\x01\x1f\x7f"), "\\u0001\\u001f\\u007f");
  assert_string_equal(esc_n("a\0b", 3), "a\\u0000b");
  /* '/' needs no escape; printable ASCII passes */
  assert_string_equal(esc("a/b ~"), "a/b ~");
}

static void test_utf8(void **state) {
  (void)state;
  /* valid sequences of 2, 3 and 4 bytes are kept as they are */
  assert_string_equal(esc("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  assert_string_equal(esc("\xef\xbf\xbd"), "\xef\xbf\xbd");         /* U+FFFD itself */
  assert_string_equal(esc("\xf4\x8f\xbf\xbf"), "\xf4\x8f\xbf\xbf"); /* U+10FFFF */
  /* every byte that is not part of a valid sequence becomes \ufffd */
  assert_string_equal(esc("a\xff" "b"), "a\\ufffdb");
  assert_string_equal(esc("\x80"), "\\ufffd");                       /* stray continuation */
  assert_string_equal(esc("\xc0\xaf"), "\\ufffd\\ufffd");            /* overlong '/' */
  assert_string_equal(esc("\xe0\x80\xaf"), "\\ufffd\\ufffd\\ufffd"); /* overlong, 3 bytes */
  assert_string_equal(esc("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd"); /* surrogate D800 */
  assert_string_equal(esc("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd"); /* > 10FFFF */
  assert_string_equal(esc("x\xe2\x82"), "x\\ufffd\\ufffd");          /* cut short at the end */
  assert_string_equal(esc("\xe2\x82x"), "\\ufffd\\ufffdx");          /* cut short inside */
  assert_string_equal(esc("\xc3\xa9\xc3"), "\xc3\xa9\\ufffd");
}

/* Ids (--json, status): a byte outside valid UTF-8 becomes the lone
 * surrogate \udcXX that Python's "surrogateescape" reads back as the byte,
 * and every control character \u00XX (never \n, \t, ...: the bytes the
 * CLI's --json and hpl_status always wrote). */
static void test_escape_surrogate(void **state) {
  (void)state;
  char out[256];
  const char *in = "q\"b\\s\x01\n caf\xc3\xa9 \xff\xfe \xed\xa0\x80 x\xe2\x82";
  size_t used,
      n = hpl__json_escape(out, sizeof out - 1, in, strlen(in), HPL__JSON_SURROGATE, &used);
  out[n] = 0;
  assert_int_equal(used, strlen(in));
  assert_string_equal(out, "q\\\"b\\\\s\\u0001\\u000a caf\xc3\xa9 \\udcff\\udcfe "
                           "\\udced\\udca0\\udc80 x\\udce2\\udc82");
  in = "\t\r\b\f\x1f\x7f";
  n = hpl__json_escape(out, sizeof out - 1, in, strlen(in), HPL__JSON_SURROGATE, &used);
  out[n] = 0;
  assert_int_equal(used, strlen(in));
  assert_string_equal(out, "\\u0009\\u000d\\u0008\\u000c\\u001f\\u007f");
  n = hpl__json_quote(out, sizeof out - 1, "a\nb", 3, HPL__JSON_SURROGATE, &used);
  out[n] = 0;
  assert_string_equal(out, "\"a\\u000ab\"");
}

/* A small output buffer: escapes and characters are never split. */
static void test_escape_capacity(void **state) {
  (void)state;
  char out[8];
  size_t used;
  size_t n = hpl__json_escape(out, 7, "ab\"\x01", 4, HPL__JSON_FFFD, &used);
  assert_int_equal(n, 4); /* a b \" ; \u0001 (6) does not fit in the 3 left */
  assert_memory_equal(out, "ab\\\"", 4);
  assert_int_equal(used, 3);
  n = hpl__json_escape(out, 4, "a\xe2\x82\xac", 4, HPL__JSON_FFFD, &used);
  assert_int_equal(n, 4);
  assert_int_equal(used, 4);
  n = hpl__json_escape(out, 3, "a\xe2\x82\xac", 4, HPL__JSON_FFFD, &used);
  assert_int_equal(n, 1); /* the euro sign (3 bytes) does not fit in 2 */
  assert_int_equal(used, 1);
  assert_int_equal(hpl__json_escape(out, 0, "x", 1, HPL__JSON_FFFD, &used), 0);
  assert_int_equal(used, 0);
}

static void test_line(void **state) {
  (void)state;
  char out[1024];
  const char *msg = "put 'a\"b' done";
  size_t n = hpl__log_json_line(out, sizeof out, 1700000000123LL, HPL__LOG_WARN, "store:node1",
                                42, msg, strlen(msg), 0);
  const char *want =
      "{\"time\":\"2023-11-14T22:13:20.123Z\",\"level\":\"warn\",\"service\":\"store\","
      "\"node\":\"node1\",\"pid\":42,\"event\":\"put 'a\\\"b' done\"}\n";
  assert_int_equal(n, strlen(want));
  assert_memory_equal(out, want, n);
  /* a name without ':' is both service and node; milliseconds keep 3 digits */
  n = hpl__log_json_line(out, sizeof out, 1000000000007LL, HPL__LOG_DEBUG, "directory", 7, "x", 1,
                         0);
  want = "{\"time\":\"2001-09-09T01:46:40.007Z\",\"level\":\"debug\",\"service\":\"directory\","
         "\"node\":\"directory\",\"pid\":7,\"event\":\"x\"}\n";
  assert_int_equal(n, strlen(want));
  assert_memory_equal(out, want, n);
  n = hpl__log_json_line(out, sizeof out, 0, HPL__LOG_ERROR, "store:", 1, "", 0, 1);
  want = "{\"time\":\"1970-01-01T00:00:00.000Z\",\"level\":\"error\",\"service\":\"store\","
         "\"node\":\"\",\"pid\":1,\"event\":\"\",\"truncated\":true}\n";
  assert_int_equal(n, strlen(want));
  assert_memory_equal(out, want, n);
}

/* Read `line` with Python's json module; return the hex of the UTF-8 of
 * its "event" (or "" if it did not parse as one object with the six keys). */
static void py_event_hex(const char *line, size_t len, char *hex, size_t hexlen) {
  char path[] = "/tmp/hpl-logjson-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, line, len), (ssize_t)len);
  close(fd);
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c 'import json,sys\n"
           "d = json.loads(open(sys.argv[1], \"rb\").read())\n"
           "assert {\"time\",\"level\",\"service\",\"node\",\"pid\",\"event\"} <= set(d)\n"
           "print(d[\"event\"].encode(\"utf-8\").hex())' %s",
           path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  hex[0] = 0;
  if (!fgets(hex, (int)hexlen, p)) hex[0] = 0;
  pclose(p);
  unlink(path);
  hex[strcspn(hex, "\n")] = 0;
}

static void to_hex(const char *s, size_t n, char *hex) {
  for (size_t i = 0; i < n; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)s[i]);
  hex[2 * n] = 0;
}

/* Every byte value 1..255 in one message: the parser reads back the same
 * text, with U+FFFD (ef bf bd) for each byte outside valid UTF-8. */
static void test_line_parses(void **state) {
  (void)state;
  char msg[300], want[300 * 3 + 1], got[2048], line[4096];
  size_t m = 0, w = 0;
  for (int b = 1; b < 256; b++) msg[m++] = (char)b;
  memcpy(msg + m, "\xc3\xa9\xf0\x9f\x98\x80", 6), m += 6; /* and two valid ones */
  for (int b = 1; b < 256; b++) {
    if (b < 0x80) {
      want[w++] = (char)b;
    } else {
      memcpy(want + w, "\xef\xbf\xbd", 3), w += 3;
    }
  }
  memcpy(want + w, "\xc3\xa9\xf0\x9f\x98\x80", 6), w += 6;
  size_t n = hpl__log_json_line(line, sizeof line, 1700000000123LL, HPL__LOG_INFO, "store:n\"1",
                                1, msg, m, 0);
  char whex[sizeof want * 2 + 1];
  to_hex(want, w, whex);
  py_event_hex(line, n, got, sizeof got);
  assert_string_equal(got, whex);
}

/* A line too small for the message: cut on an escape boundary, marked,
 * and still valid JSON. */
static void test_line_cut(void **state) {
  (void)state;
  char msg[600], line[512], got[2048];
  for (size_t i = 0; i < sizeof msg; i++) msg[i] = i % 3 ? 'x' : '\n';
  size_t n = hpl__log_json_line(line, sizeof line, 1700000000123LL, HPL__LOG_INFO, "directory",
                                1, msg, sizeof msg, 0);
  assert_true(n <= sizeof line);
  const char *tail = "\",\"truncated\":true}\n";
  assert_memory_equal(line + n - strlen(tail), tail, strlen(tail));
  py_event_hex(line, n, got, sizeof got);
  assert_true(strlen(got) > 100); /* parsed, and most of the message is there */
  char whex[sizeof msg * 2 + 1];
  to_hex(msg, strlen(got) / 2, whex);
  assert_string_equal(got, whex); /* a prefix of the message */
}

/* Run `fn` with stderr going to a pipe; the bytes written land in buf. */
static size_t capture(void (*fn)(void), char *buf, size_t cap) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  int saved = dup(STDERR_FILENO);
  dup2(p[1], STDERR_FILENO);
  close(p[1]);
  fn();
  dup2(saved, STDERR_FILENO);
  close(saved);
  size_t n = 0;
  ssize_t r;
  while (n < cap - 1 && (r = read(p[0], buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  close(p[0]);
  buf[n] = 0;
  return n;
}

static void log_some(void) {
  HPL__LOG_INFO("object '%s' put", "q\"uote\nnew\x01line");
  HPL__LOG_DEBUG("not shown at info");
  HPL__LOG_WARN("second");
}

static void test_log_json(void **state) {
  (void)state;
  char buf[4096];
  hpl__log_setup("store:node7", HPL__LOG_INFO);
  assert_int_equal(hpl__log_format_parse("json"), HPL__LOG_JSON);
  assert_int_equal(hpl__log_format_parse("text"), HPL__LOG_TEXT);
  assert_int_equal(hpl__log_format_parse("xml"), -1);
  hpl__log_set_format(HPL__LOG_JSON);
  size_t n = capture(log_some, buf, sizeof buf);
  hpl__log_set_format(HPL__LOG_TEXT);
  char *nl = strchr(buf, '\n');
  assert_non_null(nl);
  assert_true(strchr(nl + 1, '\n') == buf + n - 1); /* two lines: debug filtered */
  char pid[32];
  snprintf(pid, sizeof pid, "\"pid\":%d,", (int)getpid());
  assert_non_null(strstr(buf, pid));
  assert_non_null(strstr(buf, "\"level\":\"info\",\"service\":\"store\",\"node\":\"node7\""));
  assert_non_null(strstr(buf, "\"event\":\"object 'q\\\"uote\\nnew\\u0001line' put\"}\n"));
  assert_non_null(strstr(nl + 1, "\"level\":\"warn\""));
  /* each line parses; the first one's event reads back as logged */
  char got[512], whex[512];
  const char *ev = "object 'q\"uote\nnew\x01line' put";
  to_hex(ev, strlen(ev), whex);
  py_event_hex(buf, (size_t)(nl + 1 - buf), got, sizeof got);
  assert_string_equal(got, whex);
  py_event_hex(nl + 1, (size_t)(buf + n - nl - 1), got, sizeof got);
  to_hex("second", 6, whex);
  assert_string_equal(got, whex);
}

/* The default text format is what it was: "HH:MM:SS.mmm NAME[PID] LEVEL msg". */
static void test_log_text(void **state) {
  (void)state;
  char buf[4096], want[128];
  hpl__log_setup("store:node7", HPL__LOG_INFO);
  size_t n = capture(log_some, buf, sizeof buf);
  assert_true(n > 13);
  assert_true(buf[2] == ':' && buf[5] == ':' && buf[8] == '.' && buf[12] == ' ');
  snprintf(want, sizeof want, " store:node7[%d] INFO  object 'q\"uote\nnew\x01line' put\n",
           (int)getpid());
  assert_memory_equal(buf + 12, want, strlen(want));
  assert_non_null(strstr(buf, "] WARN  second\n"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_escape),         cmocka_unit_test(test_utf8),
      cmocka_unit_test(test_escape_capacity), cmocka_unit_test(test_escape_surrogate),
      cmocka_unit_test(test_line),
      cmocka_unit_test(test_line_parses),    cmocka_unit_test(test_line_cut),
      cmocka_unit_test(test_log_json),       cmocka_unit_test(test_log_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
