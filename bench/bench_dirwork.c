/* bench_dirwork.c - bench_dir's client worker processes, their latency
 * histograms and the CPU each request costs every process (bench_dir.h). */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#include "bench_dir.h"

/* ---- optional library functions (newer than some libraries we run with) */

hpl__bd_list_page_fn hpl__bd_list_page;
hpl__bd_get_many_fn hpl__bd_get_many;
hpl__bd_put_many_fn hpl__bd_put_many;
hpl__bd_stat_many_fn hpl__bd_stat_many;
hpl__bd_ids_many_fn hpl__bd_delete_many;

void hpl__bd_find_functions(void) {
  hpl__bd_list_page = (hpl__bd_list_page_fn)dlsym(RTLD_DEFAULT, "hpl_list_page");
  hpl__bd_get_many = (hpl__bd_get_many_fn)dlsym(RTLD_DEFAULT, "hpl_get_many");
  hpl__bd_put_many = (hpl__bd_put_many_fn)dlsym(RTLD_DEFAULT, "hpl_put_many");
  hpl__bd_stat_many = (hpl__bd_stat_many_fn)dlsym(RTLD_DEFAULT, "hpl_stat_many");
  hpl__bd_delete_many = (hpl__bd_ids_many_fn)dlsym(RTLD_DEFAULT, "hpl_delete_many");
}


/* ---- latency histogram */

void hpl__bd_h_add(hpl__bd_hist *h, uint64_t us) {
  h->n++;
  h->sum_us += us;
  if (us > h->max_us) h->max_us = us;
  if (us < HPL__BD_H_FINE) h->fine[us]++;
  else h->coarse[us / 1000 < HPL__BD_H_COARSE ? us / 1000 : HPL__BD_H_COARSE - 1]++;
}

void hpl__bd_h_merge(hpl__bd_hist *a, const hpl__bd_hist *b) {
  a->n += b->n;
  a->sum_us += b->sum_us;
  if (b->max_us > a->max_us) a->max_us = b->max_us;
  for (int i = 0; i < HPL__BD_H_FINE; i++) a->fine[i] += b->fine[i];
  for (int i = 0; i < HPL__BD_H_COARSE; i++) a->coarse[i] += b->coarse[i];
}

double hpl__bd_h_pct(const hpl__bd_hist *h, double p) {
  uint64_t want = (uint64_t)(p * (double)h->n), seen = 0;
  for (int i = 0; i < HPL__BD_H_FINE; i++)
    if ((seen += h->fine[i]) > want) return i / 1000.0;
  for (int i = 0; i < HPL__BD_H_COARSE; i++)
    if ((seen += h->coarse[i]) > want) return (double)i;
  return h->max_us / 1000.0;
}


/* ---- worker processes */

typedef struct worker_out {
  hpl__bd_hist h;
  uint64_t ops, errors;
  uint64_t cpu_us; /* the worker's own CPU from "go" to "done" */
  int first_rc;
} worker_out;

/* The gates between the parent and its workers, so that the figures cover
 * the requests alone, not forking, connecting (a session's handshake and
 * the pool's mapping, on the client and on the servers) or closing: every
 * worker connects and says "ready", waits for "go", makes its requests,
 * says "done", and waits for "close". Pipes: each side sleeps in read. */
typedef struct gates {
  int ready[2], go[2], done[2], fin[2];
} gates;

static void gate_say(int fd) {
  char b = 1;
  while (write(fd, &b, 1) < 0 && errno == EINTR) {
  }
}

static void gate_wait(int fd) {
  char b;
  ssize_t r;
  while ((r = read(fd, &b, 1)) < 0 && errno == EINTR) {
  }
  if (r != 1) _exit(1); /* the parent is gone */
}

static uint64_t self_cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000ull +
         (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

hpl_client *hpl__bd_connect(int node) {
  hpl_client *c;
  int rc = hpl_connect(hpl__lc_socket(hpl__bd_lc, node), 10000, &c);
  if (rc) hpl__bd_die("connect", NULL, rc);
  return c;
}

const char *const hpl__bd_op_name[4] = {"put", "get", "stat", "delete"};

void hpl__bd_inline_id(char *out, size_t len, uint64_t i) { snprintf(out, len, "i%09llu", (unsigned long long)i); }

/* Worker w of n: `op` one at a time or `batch` per call, for secs seconds
 * (timed) and/or over its share of the inline ids [base, base + limit)
 * (limit > 0). Ids: untimed ranges and deletes take inline ids of their
 * share; puts otherwise make p<run>/<w>/<k>; gets and stats pick loaded
 * inline ids at random. */
static void worker(int op, int w, int n, int node, int batch, int run, uint64_t base,
                   uint64_t limit, int timed, worker_out *res, const gates *g) {
  hpl_client *c = hpl__bd_connect(node);
  gate_say(g->ready[1]);
  gate_wait(g->go[0]);
  uint64_t cpu0 = self_cpu_us();
  uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(w + 1) + (uint64_t)run;
  static uint8_t payload[HPL__BD_SMALL_MAX]; /* (one worker per process) */
  uint64_t psize = hpl__bd.small_size;
  memset(payload, w, psize);
  char ids[256][32];
  const char *idp[256];
  const void *datap[256];
  uint64_t sizes[256];
  int rcs[256];
  hpl_buf *bufs[256];
  if (batch > 256) batch = 256;
  uint64_t share = limit ? (limit + (uint64_t)n - 1) / (uint64_t)n : 0;
  uint64_t from = base + share * (uint64_t)w;
  uint64_t to = from + share > base + limit ? base + limit : from + share;
  uint64_t end = hpl__now_ms() + (uint64_t)hpl__bd.secs * 1000, k = 0;
  for (;;) {
    if ((limit && from + k >= to) || (timed && hpl__now_ms() >= end)) break;
    int m = batch;
    if (limit && (uint64_t)m > to - from - k) m = (int)(to - from - k);
    for (int j = 0; j < m; j++) {
      if (op == HPL__BD_PUT && !limit)
        snprintf(ids[j], sizeof ids[j], "p%d/%d/%llu", run, w, (unsigned long long)(k + j));
      else if (limit)
        hpl__bd_inline_id(ids[j], sizeof ids[j], from + k + (uint64_t)j);
      else {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        hpl__bd_inline_id(ids[j], sizeof ids[j], (seed >> 20) % hpl__bd.ninline);
      }
      idp[j] = ids[j];
      datap[j] = payload;
      sizes[j] = psize;
    }
    uint64_t t0 = hpl__now_ns();
    int rc = 0;
    if (batch > 1) {
      switch (op) {
        case HPL__BD_PUT: rc = hpl__bd_put_many(c, idp, datap, sizes, (size_t)m, 30000, rcs); break;
        case HPL__BD_GET: rc = hpl__bd_get_many(c, idp, (size_t)m, 30000, bufs, rcs); break;
        case HPL__BD_STAT: rc = hpl__bd_stat_many(c, idp, (size_t)m, 30000, NULL, rcs); break;
        case HPL__BD_DELETE: rc = hpl__bd_delete_many(c, idp, (size_t)m, 30000, rcs); break;
      }
      for (int j = 0; j < m; j++) {
        if (rcs[j] && !(hpl__bd.notfound_ok && rcs[j] == HPL_ENOTFOUND)) {
          res->errors++;
          if (!res->first_rc) res->first_rc = rcs[j];
        } else if (op == HPL__BD_GET) {
          hpl_release(c, bufs[j]);
        }
      }
    } else {
      hpl_buf *b;
      switch (op) {
        case HPL__BD_PUT: rc = hpl_put(c, idp[0], payload, psize, 30000); break;
        case HPL__BD_GET:
          rc = hpl_get(c, idp[0], 30000, &b);
          if (!rc) hpl_release(c, b);
          break;
        case HPL__BD_STAT: rc = hpl_stat(c, idp[0], 30000, NULL, NULL, NULL, NULL); break;
        case HPL__BD_DELETE: rc = hpl_delete(c, idp[0], 30000); break;
      }
      if (rc && !(hpl__bd.notfound_ok && rc == HPL_ENOTFOUND)) {
        res->errors++;
        if (!res->first_rc) res->first_rc = rc;
      }
    }
    uint64_t us = (hpl__now_ns() - t0) / 1000;
    for (int j = 0; j < m; j++) hpl__bd_h_add(&res->h, batch > 1 ? us : us); /* per request: its call */
    res->ops += (uint64_t)m;
    k += (uint64_t)m;
  }
  res->cpu_us = self_cpu_us() - cpu0;
  gate_say(g->done[1]);
  gate_wait(g->fin[0]);
  hpl_close(c);
}

/* A process's CPU time so far (user + system, us), from /proc/PID/stat;
 * 0 if it cannot be read. */
static uint64_t proc_cpu_us(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command may hold spaces */
  unsigned long long ut = 0, st = 0;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return 0;
  return (ut + st) * 1000000ull / (uint64_t)sysconf(_SC_CLK_TCK);
}

/* The servers' CPU so far: both stores' in *store, the directory's in *dir. */
static void servers_cpu(uint64_t *store, uint64_t *dir) {
  *store = proc_cpu_us(hpl__lc_store_pid(hpl__bd_lc, 0)) +
           proc_cpu_us(hpl__lc_store_pid(hpl__bd_lc, 1));
  *dir = proc_cpu_us(hpl__lc_dir_pid(hpl__bd_lc));
}

/* Read one byte per worker from fd; a worker that exits first (a failed
 * connect, a crash) ends the benchmark: the others are killed. */
static void gate_collect(int fd, int n, pid_t *pids) {
  for (int got = 0; got < n;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 1000) > 0) {
      char b[64];
      ssize_t r = read(fd, b, (size_t)(n - got) < sizeof b ? (size_t)(n - got) : sizeof b);
      if (r > 0) got += (int)r;
      continue;
    }
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      for (int w = 0; w < n; w++)
        if (pids[w] != p) kill(pids[w], SIGKILL);
      fprintf(stderr, "bench_dir: worker %d ended before its part was done\n", (int)p);
      exit(1);
    }
  }
}

static void gate_open(gates *g) {
  if (pipe(g->ready) || pipe(g->go) || pipe(g->done) || pipe(g->fin))
    hpl__bd_die("pipe", NULL, HPL_ESYS);
}

/* In a worker: only the ends it uses stay open, so that a parent gone
 * leaves no writer of "go" or "close" (the worker's read then ends). */
static void gate_child(gates *g) {
  close(g->ready[0]);
  close(g->go[1]);
  close(g->done[0]);
  close(g->fin[1]);
}

static void gate_release(int fd, int n) {
  for (int w = 0; w < n; w++) gate_say(fd);
}

static void gate_close(gates *g) {
  int *all[] = {g->ready, g->go, g->done, g->fin};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    close(all[i][0]);
    close(all[i][1]);
  }
}

double hpl__bd_run(int op, int n, int node, int batch, int run, uint64_t base, uint64_t limit,
                   int timed, hpl__bd_hist *h, hpl__bd_cpu *cpu) {
  worker_out *outs = mmap(NULL, sizeof *outs * (size_t)n, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (outs == MAP_FAILED) hpl__bd_die("mmap", NULL, HPL_ESYS);
  memset(outs, 0, sizeof *outs * (size_t)n);
  gates g;
  gate_open(&g);
  pid_t *pids = calloc((size_t)n, sizeof *pids);
  for (int w = 0; w < n; w++) {
    pids[w] = fork();
    if (pids[w] == 0) {
      gate_child(&g);
      worker(op, w, n, node, batch, run, base, limit, timed, &outs[w], &g);
      _exit(0);
    }
  }
  /* every worker connected: from here to "done" is what is measured */
  gate_collect(g.ready[0], n, pids);
  uint64_t st0, dir0;
  servers_cpu(&st0, &dir0);
  uint64_t t0 = hpl__now_ns();
  gate_release(g.go[1], n);
  gate_collect(g.done[0], n, pids);
  double secs = (double)(hpl__now_ns() - t0) / 1e9;
  uint64_t st1, dir1;
  servers_cpu(&st1, &dir1);
  gate_release(g.fin[1], n);
  for (int w = 0; w < n; w++) waitpid(pids[w], NULL, 0);
  gate_close(&g);
  uint64_t ops = 0, errors = 0, cl = 0;
  int first = 0;
  memset(h, 0, sizeof *h);
  for (int w = 0; w < n; w++) {
    ops += outs[w].ops;
    errors += outs[w].errors;
    cl += outs[w].cpu_us;
    if (!first) first = outs[w].first_rc;
    hpl__bd_h_merge(h, &outs[w].h);
  }
  if (errors)
    fprintf(stderr, "bench_dir: %s: %llu of %llu failed (first: %s)\n", hpl__bd_op_name[op],
            (unsigned long long)errors, (unsigned long long)ops, hpl_strerror(first));
  munmap(outs, sizeof *outs * (size_t)n);
  free(pids);
  if (cpu) {
    double k = ops ? 1.0 / (double)ops : 0;
    *cpu = (hpl__bd_cpu){.client_us = (double)cl * k,
                         .store_us = (double)(st1 - st0) * k,
                         .dir_us = (double)(dir1 - dir0) * k};
  }
  return (double)ops / secs;
}
