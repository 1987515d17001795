/* bench_pullfloor_roles.c - bench_pullfloor's processes other than a host's
 * server: the directory (host 0) and, with --worker-proc, each host's
 * worker (bench_pullfloor.h). */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_pullfloor.h"
#include "benchfloor.h"
#include "benchstat.h"
#include "util.h"

/* The directory (host 0): which hosts' partitions of the current rep are
 * in, and where each host's LOOK is waiting. Messages are 12 bytes; a
 * connection's partial message waits in its buffer. Answers (8 bytes each,
 * at most hosts - 1 per host and round) are written blocking: they always
 * fit the socket's buffer, as a directory's small replies do. */
void hpl__pf_directory(shared *sh, int hosts, int lfd) {
  int ep = epoll_create1(EPOLL_CLOEXEC), conns = 0, seen = 0;
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0) hpl__pf_die("epoll");
  static struct { uint8_t buf[sizeof(msg) * 8]; size_t fill; } cb[1024];
  uint32_t rep = UINT32_MAX;
  uint8_t in[MAXN] = {0}, told[MAXN][MAXN] = {{0}};
  int look_fd[MAXN];
  uint64_t cpu0 = 0;
  for (;;) {
    if (seen && conns == 0) break;
    struct epoll_event evs[MAXN * 2];
    int n = epoll_wait(ep, evs, MAXN * 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) hpl__pf_die("epoll_wait");
    for (int e = 0; e < n; e++) {
      int fd = evs[e].data.fd;
      if (fd == lfd) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0 || c >= 1024) hpl__pf_die("accept");
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        hpl__sock_control(c);
        struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        conns++, seen = 1, cb[c].fill = 0;
        continue;
      }
      ssize_t k = read(fd, cb[fd].buf + cb[fd].fill, sizeof cb[fd].buf - cb[fd].fill);
      if (k <= 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        conns--;
        continue;
      }
      cb[fd].fill += (size_t)k;
      size_t off = 0;
      for (; cb[fd].fill - off >= sizeof(msg); off += sizeof(msg)) {
        msg m;
        memcpy(&m, cb[fd].buf + off, sizeof m);
        if (m.host >= (uint32_t)hosts) hpl__pf_die("directory: bad host");
        if (m.rep != rep) { /* a new round: nothing of the last one is kept */
          if (m.rep == 1) cpu0 = hpl__bench_cpu_ns(); /* round 0 warms up */
          rep = m.rep;
          memset(in, 0, sizeof in);
          memset(told, 0, sizeof told);
          for (int i = 0; i < MAXN; i++) look_fd[i] = -1;
        }
        where w[MAXN];
        int nw = 0;
        if (m.kind == MSG_LOC) {
          in[m.host] = 1;
          for (int to = 0; to < hosts; to++) /* every LOOK already waiting learns of it */
            if (look_fd[to] >= 0 && to != (int)m.host && !told[to][m.host]) {
              told[to][m.host] = 1;
              w[0] = (where){rep, m.host};
              if (hpl__floor_io(look_fd[to], &w[0], sizeof w[0], 1) != 0) hpl__pf_die("directory: write");
            }
        } else if (m.kind == MSG_LOOK) {
          look_fd[m.host] = fd;
          for (int from = 0; from < hosts; from++)
            if (in[from] && from != (int)m.host && !told[m.host][from]) {
              told[m.host][from] = 1;
              w[nw++] = (where){rep, (uint32_t)from};
            }
          if (nw && hpl__floor_io(fd, w, sizeof w[0] * (size_t)nw, 1) != 0) hpl__pf_die("directory: write");
        }
      }
      memmove(cb[fd].buf, cb[fd].buf + off, cb[fd].fill - off);
      cb[fd].fill -= off;
    }
  }
  sh->cpu_ns[MAXN] = hpl__bench_cpu_ns() - cpu0;
  close(ep);
}

/* One datagram to or from the server; anything else ends the process. */
static void wio(int sock, uint32_t kind, uint32_t rep, int wr) {
  wmsg m = {kind, rep};
  ssize_t k = wr ? send(sock, &m, sizeof m, 0) : recv(sock, &m, sizeof m, 0);
  if (k != (ssize_t)sizeof m || m.kind != kind || m.rep != rep) hpl__pf_die("worker: its server");
}

void hpl__pf_worker(shared *sh, int idx, int hosts, int reps, int sock, uint8_t *const *part,
                    uint64_t size, int mixup) {
  uint8_t *src[MAXN] = {0};
  for (int j = 0; j < hosts; j++)
    if (j != idx && !(src[j] = malloc(size))) hpl__pf_die("malloc");
  uint64_t cpu = 0;
  for (int r = 0; r <= reps; r++) {
    for (int j = 0; j < hosts; j++)
      if (j != idx) hpl__fill_pattern(src[j], size, hpl__pf_seed(r, idx, mixup ? (j + 1) % hosts : j, size));
    pthread_barrier_wait(&sh->bar); /* ready */
    pthread_barrier_wait(&sh->bar); /* start_ns[r] is set */
    uint64_t c0 = hpl__bench_cpu_ns();
    hpl__sleep_until_ns(sh->start_ns[r]);
    for (int j = 0; j < hosts; j++) /* the put's one copy, as into a store's pool */
      if (j != idx) memcpy(part[j], src[j], size);
    wio(sock, WM_PUT, (uint32_t)r, 1);
    wio(sock, WM_OK, (uint32_t)r, 0);
    wio(sock, WM_GET, (uint32_t)r, 1);
    wio(sock, WM_DONE, (uint32_t)r, 0);
    sh->end_ns[idx][r] = hpl__now_ns();
    cpu += r > 0 ? hpl__bench_cpu_ns() - c0 : 0;
    pthread_barrier_wait(&sh->bar); /* every host is done */
  }
  sh->wcpu_ns[idx] = cpu;
  for (int j = 0; j < hosts; j++) free(src[j]);
}
