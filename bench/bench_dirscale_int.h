/*
 * bench_dirscale_int.h - what the two files of bench_dirscale's emulated
 * nodes share (not a library): the run's state, request ids, the timer
 * heap's events, and the calls between bench_dirscale_node.c (connections,
 * frames in and out, timers, the loop) and bench_dirscale_fetch.c (what a
 * store says to the directory: heartbeats, fetches and their model, the
 * answers it handles).
 */
#ifndef HPL_BENCH_DIRSCALE_INT_H
#define HPL_BENCH_DIRSCALE_INT_H

#include "benchwire.h"
#include "hoplite.h"

#include "bench_dirscale.h"

/* request ids say what they answer: kind in the top byte, an index below */
enum { HPL__DS_RQ_REGISTER = 1, HPL__DS_RQ_HB = 2, HPL__DS_RQ_ACQUIRE = 3, HPL__DS_RQ_LOCADD = 4, HPL__DS_RQ_COUNTERS = 5 };
#define HPL__DS_RQ(kind, idx) (((uint64_t)(kind) << 56) | (uint64_t)(idx))
#define HPL__DS_RQ_KIND(req) ((int)((req) >> 56))
#define HPL__DS_RQ_IDX(req) ((req) & ((1ull << 56) - 1))

typedef struct hpl__ds_node {
  hpl__bench_wire w;
  uint64_t id;
  uint8_t *in, *out;
  size_t in_len, in_cap, out_off, out_len, out_cap;
  int registered, closed, want_out;
  uint64_t hb_sent_ns, hb_req_seq; /* the heartbeat out (0: none) */
  uint32_t rtt_us;
  uint32_t receiving, held; /* fetches receiving now; copies complete */
} hpl__ds_node;

/* the timer heap */
enum { HPL__DS_EV_HB = 1, HPL__DS_EV_ASK = 2, HPL__DS_EV_DONE = 3 };
typedef struct hpl__ds_tev {
  uint64_t at_ns;
  uint32_t kind, idx, gen;
} hpl__ds_tev;

/* a fetch waiting for its sender's copy to complete */
typedef struct hpl__ds_waiter {
  int32_t fetch, next;
  uint32_t gen;
} hpl__ds_waiter;

struct hpl__ds_run {
  int ep, n;
  hpl__ds_node *nodes;
  uint64_t salt;
  uint32_t hb_ms;
  hpl__ds_tev *heap;
  size_t nheap, capheap;
  /* the current object set */
  char prefix[32];
  int nobjs;
  uint64_t size;
  hpl__ds_fetch *f;
  int nf, capf, left; /* fetches, wanted and not finished */
  int32_t *fidx;      /* [obj * n + node]: the fetch, or -1 */
  hpl__ds_waiter *w;
  int nw, capw;
  int locadds_left, locadd_failed;
  uint64_t counter_val;
  const char *counter_name;
  int counter_done;
  hpl__ds_stats st;
};


/* ---- bench_dirscale_node.c */

/* A timer event (EV_*) at at_ns (hpl__now_ns clock). */
void hpl__ds_timer(hpl__ds_run *r, uint64_t at, uint32_t kind, uint32_t idx, uint32_t gen);
/* One frame to node i's connection, tagged with its session (queued if the
 * socket is full; a closed node's frames are dropped). */
void hpl__ds_send(hpl__ds_run *r, int i, unsigned type, uint64_t req, const ProtobufCMessage *m);
/* One loop turn waiting at most max_ms: the sockets that were ready. */
int hpl__ds_turn(hpl__ds_run *r, int max_ms);
/* Turns without waiting until no socket is ready. */
void hpl__ds_drain(hpl__ds_run *r);

/* ---- bench_dirscale_fetch.c */

/* A frame from the directory to node i (m unpacked, the caller frees it). */
void hpl__ds_on_frame(hpl__ds_run *r, int i, const hpl__frame_hdr *h, const ProtobufCMessage *m);
/* Node i's scheduled heartbeat. */
void hpl__ds_send_heartbeat(hpl__ds_run *r, int i);
/* A fetch's timer (HPL__DS_EV_ASK, HPL__DS_EV_DONE) came due. */
void hpl__ds_fetch_event(hpl__ds_run *r, uint32_t kind, uint32_t idx, uint32_t gen);

#endif
