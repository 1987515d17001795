/* bench_dirscale_node.c - bench_dirscale's emulated store nodes' connections
 * (see bench_dirscale.h): one authenticated TCP connection per node to a
 * real hoplite-directory (the handshake with its own node credential, then
 * REGISTER), frames in and out, the timer heap, and the one epoll loop all
 * nodes share. What they say on it is bench_dirscale_fetch.c's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "bench_dirscale_int.h"

/* ------------------------------------------------------------------ latency */

void hpl__ds_h_add(hpl__ds_hist *h, uint64_t us) {
  h->n++;
  if (us > h->max_us) h->max_us = us;
  if (us / 10 < HPL__DS_H_FINE) h->fine[us / 10]++;
  else h->coarse[us / 10000 < HPL__DS_H_COARSE ? us / 10000 : HPL__DS_H_COARSE - 1]++;
}

double hpl__ds_h_pct(const hpl__ds_hist *h, double p) {
  uint64_t want = (uint64_t)(p * (double)h->n), seen = 0;
  if (!h->n) return 0;
  for (int i = 0; i < HPL__DS_H_FINE; i++)
    if ((seen += h->fine[i]) > want) return i / 100.0;
  for (int i = 0; i < HPL__DS_H_COARSE; i++)
    if ((seen += h->coarse[i]) > want) return i * 10.0;
  return (double)h->max_us / 1000.0;
}

/* ------------------------------------------------------------------ timers */

void hpl__ds_timer(hpl__ds_run *r, uint64_t at, uint32_t kind, uint32_t idx, uint32_t gen) {
  if (r->nheap == r->capheap) {
    r->capheap = r->capheap ? 2 * r->capheap : 1024;
    r->heap = realloc(r->heap, r->capheap * sizeof *r->heap);
    if (!r->heap) abort();
  }
  size_t i = r->nheap++;
  hpl__ds_tev e = {at, kind, idx, gen};
  while (i && r->heap[(i - 1) / 2].at_ns > at) {
    r->heap[i] = r->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  r->heap[i] = e;
}

static hpl__ds_tev heap_pop(hpl__ds_run *r) {
  hpl__ds_tev top = r->heap[0], last = r->heap[--r->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= r->nheap) break;
    if (c + 1 < r->nheap && r->heap[c + 1].at_ns < r->heap[c].at_ns) c++;
    if (r->heap[c].at_ns >= last.at_ns) break;
    r->heap[i] = r->heap[c];
    i = c;
  }
  if (r->nheap) r->heap[i] = last;
  return top;
}

/* ------------------------------------------------------------------ output */

static void want_out(hpl__ds_run *r, int i, int on) {
  hpl__ds_node *nd = &r->nodes[i];
  if (nd->want_out == on || nd->closed) return;
  struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.u32 = (uint32_t)i};
  epoll_ctl(r->ep, EPOLL_CTL_MOD, nd->w.fd, &ev);
  nd->want_out = on;
}

static void flush(hpl__ds_run *r, int i) {
  hpl__ds_node *nd = &r->nodes[i];
  while (nd->out_off < nd->out_len) {
    ssize_t k = send(nd->w.fd, nd->out + nd->out_off, nd->out_len - nd->out_off, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (k <= 0) {
      nd->closed = 1;
      return;
    }
    nd->out_off += (size_t)k;
  }
  if (nd->out_off == nd->out_len) nd->out_off = nd->out_len = 0;
  want_out(r, i, nd->out_len > 0);
}

/* One frame to node i's directory connection (tagged with its session). */
void hpl__ds_send(hpl__ds_run *r, int i, unsigned type, uint64_t req, const ProtobufCMessage *m) {
  hpl__ds_node *nd = &r->nodes[i];
  if (nd->closed) return;
  size_t len;
  uint8_t *f = hpl__bench_wire_frame(&nd->w, type, req, m, NULL, 0, &len);
  if (!f) abort();
  if (nd->out_len + len > nd->out_cap) {
    if (nd->out_off) { /* compact first */
      memmove(nd->out, nd->out + nd->out_off, nd->out_len - nd->out_off);
      nd->out_len -= nd->out_off;
      nd->out_off = 0;
    }
    while (nd->out_len + len > nd->out_cap) nd->out_cap = nd->out_cap ? 2 * nd->out_cap : 4096;
    nd->out = realloc(nd->out, nd->out_cap);
    if (!nd->out) abort();
  }
  memcpy(nd->out + nd->out_len, f, len);
  nd->out_len += len;
  free(f);
  flush(r, i);
}

/* ------------------------------------------------------------------ input */

static void node_read(hpl__ds_run *r, int i) {
  hpl__ds_node *nd = &r->nodes[i];
  for (;;) {
    if (nd->in_cap - nd->in_len < 65536) {
      nd->in_cap = nd->in_cap ? 2 * nd->in_cap : 131072;
      nd->in = realloc(nd->in, nd->in_cap);
      if (!nd->in) abort();
    }
    ssize_t k = recv(nd->w.fd, nd->in + nd->in_len, nd->in_cap - nd->in_len, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (k <= 0) {
      if (!nd->closed) r->st.closed++;
      nd->closed = 1;
      epoll_ctl(r->ep, EPOLL_CTL_DEL, nd->w.fd, NULL);
      return;
    }
    nd->in_len += (size_t)k;
  }
  hpl__frame_limits lim = {.max_msg = 1u << 24, .max_payload = 1u << 24,
                           .max_type = HPL__MSG_MAX_, .tagged = 1};
  size_t at = 0;
  while (nd->in_len - at >= HPL__FRAME_HDR_LEN) {
    hpl__frame_hdr h;
    if (hpl__frame_decode_hdr(nd->in + at, HPL__FRAME_HDR_LEN, &lim, &h, NULL) != 0) {
      fprintf(stderr, "bench_dirscale: node %d: a bad frame header\n", i);
      nd->closed = 1;
      return;
    }
    size_t whole = HPL__FRAME_HDR_LEN + h.msg_len + HPL__FRAME_TAG_LEN + h.payload_len;
    if (nd->in_len - at < whole) break;
    const uint8_t *msg = nd->in + at + HPL__FRAME_HDR_LEN, *tag = msg + h.msg_len;
    hpl__fmac_begin(&nd->w.rx, &h, msg, h.msg_len);
    if (h.flags & HPL__FRAME_F_TAG_PAYLOAD) hpl__fmac_add(&nd->w.rx, tag + HPL__FRAME_TAG_LEN, h.payload_len);
    if (hpl__fmac_check(&nd->w.rx, tag) != 0) {
      fprintf(stderr, "bench_dirscale: node %d: a frame fails its MAC\n", i);
      nd->closed = 1;
      return;
    }
    ProtobufCMessage *m = hpl__msg_unpack(h.type, msg, h.msg_len);
    if (m) {
      hpl__ds_on_frame(r, i, &h, m);
      protobuf_c_message_free_unpacked(m, NULL);
    }
    at += whole;
  }
  if (at) {
    memmove(nd->in, nd->in + at, nd->in_len - at);
    nd->in_len -= at;
  }
}

/* ------------------------------------------------------------------ the loop */

static void fire(hpl__ds_run *r, hpl__ds_tev e) {
  switch (e.kind) {
    case HPL__DS_EV_HB: {
      hpl__ds_node *nd = &r->nodes[e.idx];
      if (nd->closed) return;
      hpl__ds_send_heartbeat(r, (int)e.idx);
      hpl__ds_timer(r, e.at_ns + (uint64_t)r->hb_ms * 1000000ull, HPL__DS_EV_HB, e.idx, 0);
      return;
    }
    default:
      hpl__ds_fetch_event(r, e.kind, e.idx, e.gen);
      return;
  }
}

/* One turn: timers due, then sockets (waiting at most until the next
 * timer or `max_ms`). Returns the number of sockets that were ready. */
int hpl__ds_turn(hpl__ds_run *r, int max_ms) {
  uint64_t now = hpl__now_ns();
  while (r->nheap && r->heap[0].at_ns <= now) fire(r, heap_pop(r));
  int wait = max_ms;
  if (r->nheap) {
    uint64_t next = r->heap[0].at_ns;
    int ms = next > now ? (int)((next - now + 999999) / 1000000) : 0;
    if (ms < wait) wait = ms;
  }
  struct epoll_event evs[256];
  int k = epoll_wait(r->ep, evs, 256, wait);
  for (int j = 0; j < k; j++) {
    int i = (int)evs[j].data.u32;
    if (evs[j].events & EPOLLOUT) flush(r, i);
    if (evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) node_read(r, i);
  }
  return k;
}

/* Turns without waiting until no socket is ready: between the blocking
 * handshakes of new nodes, the registered ones' heartbeats and answers
 * keep up (else a registration of 10 000 starves the first ones). */
void hpl__ds_drain(hpl__ds_run *r) {
  while (hpl__ds_turn(r, 0) > 0) {
  }
}

void hpl__ds_run_for(hpl__ds_run *r, int64_t ms) {
  uint64_t end = hpl__now_ms() + (uint64_t)ms;
  while (hpl__now_ms() < end) hpl__ds_turn(r, (int)(end - hpl__now_ms()));
}

int hpl__ds_wait_registered(hpl__ds_run *r, int64_t timeout_ms) {
  uint64_t end = hpl__now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int reg = 0;
    for (int i = 0; i < r->n; i++) reg += r->nodes[i].registered && !r->nodes[i].closed;
    if (reg == r->n || hpl__now_ms() >= end) return reg;
    hpl__ds_turn(r, 50);
  }
}

hpl__ds_run *hpl__ds_start(int port, const char *secret, int n) {
  hpl__ds_run *r = calloc(1, sizeof *r);
  r->n = n;
  r->nodes = calloc((size_t)n, sizeof *r->nodes);
  r->ep = epoll_create1(EPOLL_CLOEXEC);
  randombytes_buf(&r->salt, sizeof r->salt);
  r->salt = (r->salt & 0x7fffffff00000000ull) | (1ull << 62);
  for (int i = 0; i < n; i++) {
    hpl__ds_node *nd = &r->nodes[i];
    nd->id = r->salt | (uint64_t)(i + 1);
    char name[32];
    snprintf(name, sizeof name, "ds-%d", i);
    nd->w.fd = hpl__bench_tcp_connect(port);
    if (nd->w.fd < 0 || hpl__bench_wire_handshake(&nd->w, secret, HPL__ROLE_NODE, name) != 0) {
      fprintf(stderr, "bench_dirscale: node %d: cannot connect to the directory: %s\n", i,
              nd->w.fd < 0 ? strerror(errno) : "the handshake failed");
      if (nd->w.fd >= 0) close(nd->w.fd);
      r->n = i;
      hpl__ds_stop(r);
      return NULL;
    }
    fcntl(nd->w.fd, F_SETFL, fcntl(nd->w.fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(r->ep, EPOLL_CTL_ADD, nd->w.fd, &ev);
    Hplpb__RegisterReq reg = HPLPB__REGISTER_REQ__INIT;
    reg.node_id = nd->id;
    reg.addr = "127.0.0.1";
    reg.data_port = 20000 + (uint32_t)(i % 40000);
    reg.capacity = 8ull << 30;
    reg.name = name;
    reg.incarnation = r->salt ^ (uint64_t)i;
    reg.grants = 1;
    hpl__ds_send(r, i, HPL__MSG_REGISTER, HPL__DS_RQ(HPL__DS_RQ_REGISTER, (uint64_t)i), &reg.base);
    if (i % 16 == 15) hpl__ds_drain(r); /* what came meanwhile, and heartbeats due */
  }
  return r;
}

void hpl__ds_stop(hpl__ds_run *r) {
  if (!r) return;
  for (int i = 0; i < r->n; i++) {
    if (r->nodes[i].w.fd >= 0) close(r->nodes[i].w.fd);
    free(r->nodes[i].in);
    free(r->nodes[i].out);
  }
  close(r->ep);
  free(r->nodes);
  free(r->heap);
  free(r->f);
  free(r->fidx);
  free(r->w);
  free(r);
}

uint32_t hpl__ds_hb_ms(const hpl__ds_run *r) { return r->hb_ms; }

uint64_t hpl__ds_node_id(const hpl__ds_run *r, int i) { return r->nodes[i].id; }

int hpl__ds_node_index(const hpl__ds_run *r, uint64_t id) {
  if ((id & ~0xffffffffull) != r->salt) return -1;
  uint64_t i = (id & 0xffffffffull) - 1;
  return i < (uint64_t)r->n ? (int)i : -1;
}

hpl__ds_stats *hpl__ds_stats_of(hpl__ds_run *r) { return &r->st; }

void hpl__ds_stats_reset(hpl__ds_run *r) { memset(&r->st, 0, sizeof r->st); }

uint64_t hpl__ds_dir_counter(hpl__ds_run *r, const char *name) {
  r->counter_name = name;
  r->counter_val = UINT64_MAX;
  r->counter_done = 0;
  Hplpb__CountersReq c = HPLPB__COUNTERS_REQ__INIT;
  hpl__ds_send(r, 0, HPL__MSG_COUNTERS, HPL__DS_RQ(HPL__DS_RQ_COUNTERS, 0), &c.base);
  uint64_t end = hpl__now_ms() + 10000;
  while (!r->counter_done && hpl__now_ms() < end) hpl__ds_turn(r, 50);
  return r->counter_val;
}

