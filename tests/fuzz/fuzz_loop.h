/*
 * fuzz_loop.h - feeding one fuzz input to a server running in this process:
 * a socketpair, one end served by the server as a connection, the input
 * written to the other end, then EOF; the loop runs until the server has
 * closed its end (or a bound on loop turns). Shared by the server targets.
 */
#ifndef HPL_FUZZ_LOOP_H
#define HPL_FUZZ_LOOP_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

/* A connected pair: *ours stays with the caller (non-blocking), the other
 * end is returned as an initialised uv_pipe_t for the server to take. */
static uv_stream_t *fuzz_pair(uv_loop_t *loop, int *ours) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) abort();
  uv_pipe_t *p = malloc(sizeof *p);
  if (!p) abort();
  uv_pipe_init(loop, p, 0);
  if (uv_pipe_open(p, sv[1]) != 0) abort();
  *ours = sv[0];
  return (uv_stream_t *)p;
}

/* Write the input (as the socket takes it, running the loop between
 * writes), send EOF, and run the loop until the server closed its end
 * (what it sends is read and dropped). Closes `fd`. */
static void fuzz_feed(uv_loop_t *loop, int fd, const uint8_t *data, size_t size) {
  size_t off = 0;
  int eof_sent = 0, closed = 0;
  uint8_t sink[65536];
  for (int turn = 0; turn < 20000 && !closed; turn++) {
    if (off < size) {
      ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) off += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) off = size; /* closed on us */
    } else if (!eof_sent) {
      shutdown(fd, SHUT_WR);
      eof_sent = 1;
    }
    uv_run(loop, UV_RUN_NOWAIT);
    for (;;) {
      ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed = 1;
      break;
    }
  }
  close(fd);
  uv_run(loop, UV_RUN_NOWAIT); /* the server notices */
}

#endif
