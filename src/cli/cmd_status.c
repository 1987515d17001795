/* cmd_status.c - `hoplite status [--watch [SECONDS]] [--json]`: the
 * cluster's nodes, transfers in flight and reduces running, and under a
 * leader lease the directories (hpl_status),
 * as tables or JSON lines, once or every SECONDS (cli.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

/* One node of a status snapshot (an hpl_status text "node" line). */
typedef struct st_node {
  char id[17], state[16], addr[80], name[96];
  unsigned long long age;
  int stats;
  unsigned long long used, cap, objs, sent, recv;
  unsigned clients;
} st_node;

/* A node's name for the tables: its name, else its id's first 8 digits. */
static const char *node_label(const st_node *v, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].id, id)) return strcmp(v[i].name, "-") ? v[i].name : v[i].id;
  return id;
}

static void fmt_ms(unsigned long long ms, char *buf, size_t len) {
  if (ms < 10000) snprintf(buf, len, "%.1fs", (double)ms / 1000);
  else hpl__cli_fmt_secs((double)ms / 1000, buf, len);
}

/* The "directory TERM LEASE_LEFT_MS RENEW_LAST_US LEADER ETCD STANDBYS"
 * line (after its first word) as "directory: leader ADDR, term T, lease
 * 2.2 s left (renewed in 1.1 ms); standbys: ADDR, ...; etcd URL". */
static void lease_render(const char *line) {
  unsigned long long term, left, us;
  char leader[288], etcd[208], sb[2400];
  if (sscanf(line, "%llu %llu %llu %287s %207s %2399s", &term, &left, &us, leader, etcd, sb) != 6)
    return;
  printf("directory: leader %s, term %llu, lease %.1f s left (renewed in %.1f ms); standbys: ",
         leader, term, (double)left / 1000, (double)us / 1000);
  if (!strcmp(sb, "-")) printf("none");
  for (char *p = sb, *c; strcmp(sb, "-") && p; p = c ? c + 1 : NULL) {
    if ((c = strchr(p, ','))) *c = 0;
    printf("%s%s", p == sb ? "" : ", ", p);
  }
  printf("; etcd %s\n", etcd);
}

/* Render an hpl_status text snapshot as tables on stdout. */
static void status_render(char *text) {
  size_t nn = 0, cap = 16;
  st_node *v = malloc(cap * sizeof *v);
  char *xfers = NULL, *reduces = NULL; /* their lines, kept for after the nodes */
  size_t nx = 0, nr = 0;
  unsigned long long up = 0, hb = 0, objs = 0, inl = 0;
  unsigned tn = 0, tx = 0, tr = 0;
  char inst[17] = "?";
  char *dirline = NULL; /* the "directory" line: a leader under a lease */
  if (!v) hpl__cli_die("out of memory");
  for (char *line = text, *end; *line; line = end + 1) {
    if (!(end = strchr(line, '\n'))) break;
    *end = 0;
    int off = 0;
    if (!strncmp(line, "cluster ", 8)) {
      sscanf(line + 8, "%16s %llu %llu %llu %llu %u %u %u", inst, &up, &hb, &objs, &inl, &tn,
             &tx, &tr);
    } else if (!strncmp(line, "directory ", 10)) {
      dirline = line + 10;
    } else if (!strncmp(line, "node ", 5)) {
      if (nn == cap && !(v = realloc(v, (cap *= 2) * sizeof *v))) hpl__cli_die("out of memory");
      st_node *n = &v[nn];
      char f[6][24];
      if (sscanf(line + 5, "%16s %15s %llu %23s %23s %23s %23s %23s %23s %79s %n", n->id,
                 n->state, &n->age, f[0], f[1], f[2], f[3], f[4], f[5], n->addr, &off) != 10)
        continue;
      snprintf(n->name, sizeof n->name, "%s", line + 5 + off);
      n->stats = strcmp(f[0], "-") != 0;
      n->used = strtoull(f[0], NULL, 10), n->cap = strtoull(f[1], NULL, 10);
      n->objs = strtoull(f[2], NULL, 10), n->sent = strtoull(f[3], NULL, 10);
      n->recv = strtoull(f[4], NULL, 10), n->clients = (unsigned)strtoul(f[5], NULL, 10);
      nn++;
    } else if (!strncmp(line, "transfer ", 9)) {
      nx++;
      if (!xfers) xfers = line;
    } else if (!strncmp(line, "reduce ", 7)) {
      nr++;
      if (!reduces) reduces = line;
    }
  }
  char b1[32], b2[32], b3[32], b4[32];
  fmt_ms(up, b1, sizeof b1);
  printf("hoplite cluster  instance %s  up %s  %u node%s  %llu objects (%s inline)\n\n", inst, b1,
         tn, tn == 1 ? "" : "s", objs, hpl__fmt_bytes(inl, b2, sizeof b2));
  if (dirline) lease_render(dirline);
  printf("%-16s %-9s %9s  %-28s %8s %10s %10s  %s\n", "NODE", "STATE", "HEARTBEAT", "POOL USED",
         "OBJECTS", "SENT", "RECEIVED", "ADDRESS");
  for (size_t i = 0; i < nn; i++) {
    st_node *n = &v[i];
    char pool[64] = "-", o[24] = "-", sent[24] = "-", recv[24] = "-", age[32];
    if (n->stats) {
      hpl__fmt_bytes(n->used, b3, sizeof b3);
      hpl__fmt_bytes(n->cap, b4, sizeof b4);
      snprintf(pool, sizeof pool, "%s / %s (%d%%)", b3, b4,
               n->cap ? (int)((double)n->used * 100 / (double)n->cap) : 0);
      snprintf(o, sizeof o, "%llu", n->objs);
      hpl__fmt_bytes(n->sent, sent, sizeof sent);
      hpl__fmt_bytes(n->recv, recv, sizeof recv);
    }
    fmt_ms(n->age, age, sizeof age);
    printf("%-16s %-9s %9s  %-28s %8s %10s %10s  %s\n", node_label(n, 1, n->id), n->state, age,
           pool, o, sent, recv, n->addr);
  }
  if (tn > nn) printf("... and %u more\n", tn - (unsigned)nn);
  printf("\nTRANSFERS IN FLIGHT: %u\n", tx);
  if (nx)
    printf("%-32s %-16s %-16s %-30s %10s\n", "OBJECT", "FROM", "TO", "PROGRESS", "RATE");
  for (char *line = xfers; line && nx; line += strlen(line) + 1) {
    if (strncmp(line, "transfer ", 9)) continue;
    nx--;
    char to[17], from[17], pct[64];
    unsigned long long held, size, rate, age;
    int off = 0;
    if (sscanf(line + 9, "%16s %16s %llu %llu %llu %llu %n", to, from, &held, &size, &rate, &age,
               &off) != 6)
      continue;
    hpl__fmt_bytes(held, b3, sizeof b3);
    hpl__fmt_bytes(size, b4, sizeof b4);
    snprintf(pct, sizeof pct, "%s / %s %3d%%", b3, b4,
             size ? (int)((double)held * 100 / (double)size) : 0);
    char r[24];
    snprintf(r, sizeof r, "%.1f MB/s", (double)rate / 1e6);
    printf("%-32s %-16s %-16s %-30s %10s\n", line + 9 + off, node_label(v, nn, from),
           node_label(v, nn, to), pct, r);
  }
  printf("\nREDUCES RUNNING: %u\n", tr);
  if (nr) printf("%-32s %-16s %-10s %9s  %s\n", "TARGET", "SINK", "JOINED", "ELAPSED", "SIZE");
  for (char *line = reduces; line && nr; line += strlen(line) + 1) {
    if (strncmp(line, "reduce ", 7)) continue;
    nr--;
    char sink[17], joined[32], el[32];
    unsigned j, need, srcs;
    unsigned long long ms, size;
    int off = 0;
    if (sscanf(line + 7, "%16s %u %u %u %llu %llu %n", sink, &j, &need, &srcs, &ms, &size,
               &off) != 6)
      continue;
    snprintf(joined, sizeof joined, "%u/%u", j, need);
    fmt_ms(ms, el, sizeof el);
    printf("%-32s %-16s %-10s %9s  %s\n", line + 7 + off, node_label(v, nn, sink), joined, el,
           size ? hpl__fmt_bytes(size, b3, sizeof b3) : "?");
  }
  free(v);
}

/* `hoplite status [--watch [SECONDS]] [--json]`: one snapshot, or one
 * every SECONDS until Ctrl-C (the screen cleared in between on a
 * terminal; without one, snapshots follow each other, a blank line apart,
 * or one JSON object per line). */
int hpl__cli_status(hpl_client *c, hpl__cli_opts *o, int argc, char **argv) {
  argc = hpl__cli_take_json(o, argc, argv);
  if (argc > 0) hpl__cli_die("usage: hoplite status [--watch [SECONDS]] [--json]");
  int tty = isatty(STDOUT_FILENO);
  for (int first = 1;; first = 0) {
    char *text;
    int rc = hpl_status(c, o->json ? HPL_STATUS_JSON : HPL_STATUS_TEXT, o->timeout_ms, &text);
    if (rc && (!o->watch_s || rc == HPL_ECONN)) hpl__cli_check(c, rc, "status");
    if (o->watch_s && tty && !o->json) fputs("\033[H\033[2J", stdout);
    else if (o->watch_s && !first && !o->json) fputc('\n', stdout);
    if (o->watch_s && !o->json) {
      time_t now = time(NULL);
      char when[64];
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
      printf("every %.1fs   %s   (Ctrl-C ends)\n", o->watch_s, when);
    }
    if (rc)
      printf("status: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(c));
    else if (o->json)
      fputs(text, stdout);
    else
      status_render(text);
    if (!rc) hpl_free(text);
    fflush(stdout);
    if (!o->watch_s) return 0;
    struct timespec ts = {.tv_sec = (time_t)o->watch_s,
                          .tv_nsec = (long)((o->watch_s - (double)(time_t)o->watch_s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}
