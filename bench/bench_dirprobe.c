/* bench_dirprobe.c - bench_dir's phases timed by a prober, a process that
 * stats every millisecond meanwhile: listing everything (and how many
 * stores the directory declared dead), node loss and client disconnects,
 * and the directory stopped for 5 s (bench_dir.h). */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoplite.h"
#include "localcluster.h"
#include "util.h"

#include "bench_dir.h"

/* ---- server facts */

/* A directory counter through a store (they are proxied as COUNTERS? no:
 * the store answers COUNTERS itself), so read the directory's over the
 * transfer record: nodes declared dead are logged there as node-gone. */
static uint64_t nodes_gone(hpl_client *c) {
  uint64_t since = 0, n = 0;
  for (;;) {
    char *text = NULL;
    uint64_t next = since;
    if (hpl_transfers(c, since, 10000, &text, &next)) break;
    for (char *l = strstr(text, "node-gone"); l; l = strstr(l + 1, "node-gone")) n++;
    int empty = !*text;
    hpl_free(text);
    if (empty || next == since) break;
    since = next;
  }
  return n;
}

/* ---- a prober: stat latency every millisecond until told to stop */

typedef struct probe {
  volatile int stop;
  hpl__bd_hist h;
} probe;

static pid_t probe_start(probe *p, int node) {
  memset(p, 0, sizeof *p);
  pid_t pid = fork();
  if (pid == 0) {
    hpl_client *c = hpl__bd_connect(node);
    while (!p->stop) {
      uint64_t t0 = hpl__now_ns();
      hpl_stat(c, "i000000001", 10000, NULL, NULL, NULL, NULL);
      hpl__bd_h_add(&p->h, (hpl__now_ns() - t0) / 1000);
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    hpl_close(c);
    _exit(0);
  }
  return pid;
}

static void probe_stop(probe *p, pid_t pid) {
  p->stop = 1;
  waitpid(pid, NULL, 0);
}

/* ---- the phases */

void hpl__bd_listing(hpl_client *a) {
  probe *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint64_t dead0 = nodes_gone(a);
  pid_t pid = probe_start(p, 1);
  struct timespec ts = {0, 200000000};
  nanosleep(&ts, NULL);
  uint64_t t0 = hpl__now_ms(), listed = 0;
  int rc = 0;
  if (hpl__bd_list_page) {
    char *after = NULL;
    do {
      char *text = NULL, *next = NULL;
      rc = hpl__bd_list_page(a, "", after, 0, 60000, &text, &next);
      if (rc) break;
      for (char *l = text; *l; l++) listed += *l == '\n';
      hpl_free(text);
      hpl_free(after);
      after = next;
    } while (after);
    hpl_free(after);
  } else {
    char *text = NULL;
    rc = hpl_list(a, "", 600000, &text);
    if (!rc) {
      for (char *l = text; *l; l++) listed += *l == '\n';
      hpl_free(text);
    }
  }
  uint64_t took = hpl__now_ms() - t0;
  nanosleep(&ts, NULL);
  probe_stop(p, pid);
  hpl__bd_report(hpl__bd_list_page ? "list (paged): seconds" : "list (one call): seconds", (double)took / 1000.0,
         "s");
  hpl__bd_report("list: objects listed", (double)listed, "");
  if (rc) printf("  list failed: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(a));
  hpl__bd_report("list: result (0 ok)", (double)rc, "");
  hpl__bd_report("stat during list: p50", hpl__bd_h_pct(&p->h, 0.5), "ms");
  hpl__bd_report("stat during list: p99", hpl__bd_h_pct(&p->h, 0.99), "ms");
  hpl__bd_report("stat during list: max", (double)p->h.max_us / 1000.0, "ms");
  hpl__bd_report("stores declared dead during list", (double)(nodes_gone(a) - dead0), "");
  munmap(p, sizeof *p);
}

void hpl__bd_losses(void) {
  probe *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  char err[256];
  int idx = hpl__lc_add_store(hpl__bd_lc, "--memory 64M", err, sizeof err);
  if (idx < 0) {
    fprintf(stderr, "bench_dir: add store: %s\n", err);
    return;
  }
  pid_t pid = probe_start(p, 1);
  struct timespec ts = {0, 300000000};
  nanosleep(&ts, NULL);
  hpl__lc_signal(hpl__bd_lc, idx, SIGKILL);
  nanosleep(&ts, NULL);
  nanosleep(&ts, NULL);
  probe_stop(p, pid);
  hpl__bd_report("node loss (empty store killed): worst stat", (double)p->h.max_us / 1000.0, "ms");
  /* the directory's own account (newer directories log it): the last loss */
  char path[4096], line[512];
  double gone_ms = -1;
  snprintf(path, sizeof path, "%s/directory.log", hpl__lc_work_dir(hpl__bd_lc));
  FILE *f = fopen(path, "r");
  while (f && fgets(line, sizeof line, f)) {
    char *r = strstr(line, "copies dropped in ");
    if (r) gone_ms = atof(r + strlen("copies dropped in "));
  }
  if (f) fclose(f);
  hpl__bd_report("node loss: the directory's time to drop it (-1: not logged)", gone_ms < 0 ? -1 : gone_ms * 1000, "us");
  /* client disconnects at A, which holds every object */
  uint64_t t0 = hpl__now_ns();
  for (int i = 0; i < 50; i++) {
    hpl_client *c = hpl__bd_connect(0);
    hpl_stat(c, "i000000001", 10000, NULL, NULL, NULL, NULL);
    hpl_close(c);
  }
  hpl_client *c = hpl__bd_connect(0);
  uint64_t v;
  hpl_counter(c, "objects", 10000, &v); /* after the last close was handled */
  hpl_close(c);
  hpl__bd_report("client connect+stat+close at A, each",
         (double)(hpl__now_ns() - t0) / 51.0 / 1e6, "ms");
  munmap(p, sizeof *p);
}

/* The directory stops for 5 s, so the stores' heartbeats go unanswered and
 * they connect again: how long until the store holding everything is
 * listed again (the last object it loaded has a complete copy), and the
 * stat latency meanwhile (from the moment the directory runs again). */
void hpl__bd_reconnect(hpl_client *a) {
  char last[32];
  if (hpl__bd.nlarge)
    snprintf(last, sizeof last, "L%08llu", (unsigned long long)(hpl__bd.nlarge - 1));
  else
    hpl__bd_inline_id(last, sizeof last, hpl__bd.ninline ? hpl__bd.ninline - 1 : 0);
  probe *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  hpl__lc_signal(hpl__bd_lc, -1, SIGSTOP);
  struct timespec ts = {5, 0};
  nanosleep(&ts, NULL);
  hpl__lc_signal(hpl__bd_lc, -1, SIGCONT);
  uint64_t t0 = hpl__now_ms();
  pid_t pid = probe_start(p, 1);
  int listed = 0;
  while (hpl__now_ms() - t0 < 300000) {
    uint32_t complete = 0;
    if (hpl_stat(a, last, 10000, NULL, NULL, &complete, NULL) == 0 && complete > 0) {
      /* listed; but right after the pause it may still be the old listing */
      uint64_t v;
      if (hpl_counter(a, "dir_registrations", 1000, &v) != 0 || v >= 2) {
        listed = 1;
        break;
      }
    }
    struct timespec w = {0, 20000000};
    nanosleep(&w, NULL);
  }
  uint64_t took = hpl__now_ms() - t0;
  /* the store's own account of re-reporting (newer stores log it) */
  char path[4096], line[512];
  double rr_ms = -1, rr_n = 0;
  snprintf(path, sizeof path, "%s/node-0.log", hpl__lc_work_dir(hpl__bd_lc));
  for (int tries = 0; tries < 600 && rr_ms < 0; tries++) {
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      char *r = strstr(line, "re-reported ");
      unsigned long long n, ms;
      if (r && sscanf(r, "re-reported %llu objects to the directory in %llu ms", &n, &ms) == 2)
        rr_n = (double)n, rr_ms = (double)ms; /* the last one */
    }
    if (f) fclose(f);
    if (rr_ms < 0) {
      struct timespec w = {0, 100000000};
      nanosleep(&w, NULL);
    }
  }
  probe_stop(p, pid);
  /* every large object and every 100th small one is listed with a complete
   * copy again (the loaded ones; the rate phases' puts are not checked) */
  uint64_t unlisted = 0, checked = 0;
  char id[32];
  for (uint64_t i = 0; i < hpl__bd.nlarge + hpl__bd.ninline; i += i < hpl__bd.nlarge ? 1 : 100) {
    if (i < hpl__bd.nlarge)
      snprintf(id, sizeof id, "L%08llu", (unsigned long long)i);
    else
      hpl__bd_inline_id(id, sizeof id, i - hpl__bd.nlarge);
    uint32_t complete = 0;
    if (hpl_stat(a, id, 10000, NULL, NULL, &complete, NULL) != 0 || complete == 0) unlisted++;
    checked++;
  }
  hpl__bd_report("directory stopped 5 s: seconds until listed again", listed ? (double)took / 1000.0 : -1,
         "s");
  hpl__bd_report("  objects checked after it", (double)checked, "");
  hpl__bd_report("  ... without a complete copy listed", (double)unlisted, "");
  hpl__bd_report("  store A re-reported objects", rr_n, "");
  hpl__bd_report("  ... in (store's log; -1: not logged)", rr_ms, "ms");
  hpl__bd_report("  stat meanwhile: p99", hpl__bd_h_pct(&p->h, 0.99), "ms");
  hpl__bd_report("  stat meanwhile: max", (double)p->h.max_us / 1000.0, "ms");
  munmap(p, sizeof *p);
}
