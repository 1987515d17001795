/* cmd_objects.c - `hoplite stat`, `ls`, `rm`, `transfers` and
 * `counters`: what the store and directory know of objects, as tables or
 * (stat, ls) JSON lines (cli.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "util.h"

/* One object as a JSON line on stdout: its id as bytes (json.h: \udcXX
 * for a byte outside UTF-8, so that json.loads(line)["id"].encode("utf-8",
 * "surrogateescape") is the id), and "local" unless local < 0. Printed
 * straight from the escaped id (a listing may hold millions of lines). */
static void json_object(const char *id, uint64_t size, unsigned copies, unsigned complete,
                        int inl, int local) {
  char q[6 * HPL_ID_MAX]; /* any valid id, escaped, in one piece */
  fputs("{\"id\":\"", stdout);
  for (size_t n = strlen(id), used; n; id += used, n -= used)
    fwrite(q, 1, hpl__json_escape(q, sizeof q, id, n, HPL__JSON_SURROGATE, &used), stdout);
  printf("\",\"size\":%llu,\"copies\":%u,\"complete\":%u,\"inline\":%s%s}\n",
         (unsigned long long)size, copies, complete, inl ? "true" : "false",
         local < 0 ? "" : local ? ",\"local\":true" : ",\"local\":false");
}

int hpl__cli_stat(hpl_client *c, hpl__cli_opts *o, int argc, char **argv) {
  argc = hpl__cli_take_json(o, argc, argv);
  if (argc != 1) hpl__cli_die("usage: hoplite stat ID [--json]");
  uint64_t size;
  uint32_t copies, complete;
  int inl, local = 0;
  hpl__cli_check(c, hpl_stat(c, argv[0], o->timeout_ms, &size, &copies, &complete, &inl), "stat");
  if (o->admin) local = -1; /* no store: no "local" */
  else hpl_contains(c, argv[0], o->timeout_ms, &local);
  if (o->json) {
    json_object(argv[0], size, copies, complete, inl, local);
    return 0;
  }
  char b[32];
  printf("id        %s\nsize      %llu (%s)\ncopies    %u (%u complete)\ninline    %s\n",
         argv[0], (unsigned long long)size, hpl__fmt_bytes(size, b, sizeof b), copies, complete,
         inl ? "yes (served by the directory)" : "no");
  if (local >= 0) printf("local     %s\n", local ? "yes" : "no");
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
int hpl__cli_ls(hpl_client *c, hpl__cli_opts *o, int argc, char **argv) {
  argc = hpl__cli_take_json(o, argc, argv);
  if (argc > 1) hpl__cli_die("usage: hoplite ls [PREFIX] [--json]");
  const char *prefix = argc > 0 ? argv[0] : "";
  if (!o->json) printf("%-40s %14s %7s %9s %7s\n", "ID", "SIZE", "COPIES", "COMPLETE", "INLINE");
  char *after = NULL;
  do {
    char *text, *next;
    hpl__cli_check(c, hpl_list_page(c, prefix, after, 0, o->timeout_ms, &text, &next), "ls");
    ls_page(text, o->json);
    fflush(stdout);
    hpl_free(text);
    hpl_free(after);
    after = next;
  } while (after);
  return 0;
}

/* Ids deleted per call (pipelined; the library takes up to 4096). */
#define RM_BATCH 1024

/* One id: its failure ends the program with the detail. Several: deleted
 * RM_BATCH at a time (pipelined), each failure named on stderr with its
 * reason; exit status 1 if any failed. */
int hpl__cli_rm(hpl_client *c, hpl__cli_opts *o, int argc, char **argv) {
  if (argc < 1) hpl__cli_die("usage: hoplite rm ID...");
  if (argc == 1) {
    hpl__cli_check(c, hpl_delete(c, argv[0], o->timeout_ms), "rm");
    return 0;
  }
  int rcs[RM_BATCH], failed = 0;
  for (int at = 0; at < argc; at += RM_BATCH) {
    size_t n = (size_t)(argc - at < RM_BATCH ? argc - at : RM_BATCH);
    if (hpl_delete_many(c, (const char *const *)argv + at, n, o->timeout_ms, rcs) == 0) continue;
    for (size_t i = 0; i < n; i++)
      if (rcs[i]) {
        fprintf(stderr, "%s: rm %s: %s\n", HPL__CLI_NAME, argv[at + (int)i],
                hpl_strerror(rcs[i]));
        failed = 1;
      }
  }
  return failed;
}

int hpl__cli_transfers(hpl_client *c, hpl__cli_opts *o, int argc, char **argv) {
  uint64_t since = argc > 0 ? strtoull(argv[0], NULL, 10) : 0;
  char *text;
  hpl__cli_check(c, hpl_transfers(c, since, o->timeout_ms, &text, NULL), "transfers");
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

int hpl__cli_counters(hpl_client *c, hpl__cli_opts *o, int argc, char **argv) {
  (void)argc, (void)argv;
  char *text;
  hpl__cli_check(c, hpl_counters(c, o->timeout_ms, &text), "counters");
  fputs(text, stdout);
  hpl_free(text);
  return 0;
}
