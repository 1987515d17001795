/* cmd_objects.c - `hoplite stat`, `ls`, `rm`, `transfers` and
 * `counters`: what the store and directory know of objects, as tables or
 * (stat, ls) JSON lines (cli.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util.h"

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if none starts
 * there (a stray byte, an overlong form, a surrogate, beyond U+10FFFF). A
 * NUL ends every sequence, so p is never read past its string's end. */
static size_t utf8_seq(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp, min;
  if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1f, min = 0x80;
  else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0f, min = 0x800;
  else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3fu);
  }
  return cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : n;
}

/* `s` as a JSON string. Ids are bytes: valid UTF-8 goes out as it is, '"',
 * '\\' and control characters escaped; every other byte as \udcXX, the lone
 * surrogate of Python's "surrogateescape", so that
 * json.loads(line)["id"].encode("utf-8", "surrogateescape") is the id. */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = utf8_seq(p);
    if (n == 0)
      fprintf(f, "\\udc%02x", *p++);
    else if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p++);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\u%04x", *p++);
    else {
      fwrite(p, 1, n, f);
      p += n;
    }
  }
  fputc('"', f);
}

static void json_object(const char *id, unsigned long long size, unsigned copies,
                        unsigned complete, int inl, int local) {
  fputs("{\"id\": ", stdout);
  json_str(stdout, id);
  printf(", \"size\": %llu, \"copies\": %u, \"complete\": %u, \"inline\": %s", size, copies,
         complete, inl ? "true" : "false");
  if (local >= 0) printf(", \"local\": %s", local ? "true" : "false");
  fputs("}\n", stdout);
}

int cmd_stat(hpl_client *c, conn_opts *o, int argc, char **argv) {
  argc = take_json(o, argc, argv);
  if (argc != 1) die("usage: hoplite stat ID [--json]");
  uint64_t size;
  uint32_t copies, complete;
  int inl, local = 0;
  check(c, hpl_stat(c, argv[0], o->timeout_ms, &size, &copies, &complete, &inl), "stat");
  hpl_contains(c, argv[0], o->timeout_ms, &local);
  if (o->json) {
    json_object(argv[0], (unsigned long long)size, copies, complete, inl, local);
    return 0;
  }
  char b[32];
  printf("id        %s\nsize      %llu (%s)\ncopies    %u (%u complete)\ninline    %s\n"
         "local     %s\n",
         argv[0], (unsigned long long)size, hpl__fmt_bytes(size, b, sizeof b), copies, complete,
         inl ? "yes (served by the directory)" : "no", local ? "yes" : "no");
  return 0;
}

/* Print one page of hpl_list_page text: "ID\tSIZE\tCOPIES\tCOMPLETE\tINLINE\n"
 * lines (ids hold no tabs or newlines). */
static void ls_page(char *text, int json) {
  for (char *line = text, *end; *line; line = end + 1) {
    if (!(end = strchr(line, '\n'))) break;
    *end = 0;
    char *f[5];
    int k = 0;
    for (char *t = line; k < 5; t++) {
      f[k++] = t;
      if (!(t = strchr(t, '\t'))) break;
      *t = 0;
    }
    if (k != 5) continue;
    if (json)
      json_object(f[0], strtoull(f[1], NULL, 10), (unsigned)strtoul(f[2], NULL, 10),
                  (unsigned)strtoul(f[3], NULL, 10), f[4][0] == '1', -1);
    else
      printf("%-40s %14s %7s %9s %7s\n", f[0], f[1], f[2], f[3], f[4][0] == '1' ? "yes" : "no");
  }
}

/* Page after page, each printed as it arrives: memory for one page only. */
int cmd_ls(hpl_client *c, conn_opts *o, int argc, char **argv) {
  argc = take_json(o, argc, argv);
  if (argc > 1) die("usage: hoplite ls [PREFIX] [--json]");
  const char *prefix = argc > 0 ? argv[0] : "";
  if (!o->json) printf("%-40s %14s %7s %9s %7s\n", "ID", "SIZE", "COPIES", "COMPLETE", "INLINE");
  char *after = NULL;
  do {
    char *text, *next;
    check(c, hpl_list_page(c, prefix, after, 0, o->timeout_ms, &text, &next), "ls");
    ls_page(text, o->json);
    fflush(stdout);
    hpl_free(text);
    hpl_free(after);
    after = next;
  } while (after);
  return 0;
}

int cmd_rm(hpl_client *c, conn_opts *o, int argc, char **argv) {
  if (argc != 1) die("usage: hoplite rm ID");
  check(c, hpl_delete(c, argv[0], o->timeout_ms), "rm");
  return 0;
}

int cmd_transfers(hpl_client *c, conn_opts *o, int argc, char **argv) {
  uint64_t since = argc > 0 ? strtoull(argv[0], NULL, 10) : 0;
  char *text;
  check(c, hpl_transfers(c, since, o->timeout_ms, &text, NULL), "transfers");
  printf("%-8s %-14s %-9s %-16s %-16s %s\n", "SEQ", "T_US", "KIND", "RECEIVER", "SENDER", "ID");
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    char seq[24], t[24], kind[16], r[24], snd[24];
    int off = 0;
    if (sscanf(line, "%23s %23s %15s %23s %23s %n", seq, t, kind, r, snd, &off) == 5)
      printf("%-8s %-14s %-9s %-16s %-16s %s\n", seq, t, kind, r, snd, line + off);
  }
  hpl_free(text);
  return 0;
}

int cmd_counters(hpl_client *c, conn_opts *o, int argc, char **argv) {
  (void)argc, (void)argv;
  char *text;
  check(c, hpl_counters(c, o->timeout_ms, &text), "counters");
  fputs(text, stdout);
  hpl_free(text);
  return 0;
}
