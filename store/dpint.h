/*
 * dpint.h - what dataport.c (connections, PULLs, streams from memory),
 * dpsend.c (a stream's bytes to its socket), dpfile.c (streams of spilled
 * copies, from their files) and dpfault.c (fault points on streams)
 * share: a connection's record. Nothing outside these four files
 * includes it.
 */
#ifndef HPL_STORE_DPINT_H
#define HPL_STORE_DPINT_H

#include <stdint.h>

#include "dataport.h"
#include "uvconn.h"

typedef struct hpl__sender {
  struct hpl__sender *prev, *next; /* s->dataport->senders (utlist) */
  hpl__store *s;
  hpl__conn *c;
  hpl__obj *obj; /* streaming (referenced); NULL when idle */
  uint64_t pos, end;
  int inflight;
  hpl__watch watch;
  uint64_t req_id;
  uint64_t peer;
  uint64_t offset; /* where this stream started */
  char *parked;    /* stream key this PULL waits for (not made yet) */
  uint32_t gen;    /* generation of the bytes being streamed */
  uint64_t started_ms;
  int faulty;              /* fault points apply to this stream */
  int stalled;             /* fault point: stop sending */
  uint64_t corrupted;      /* fault point corrupt_send: chunks sent with a byte flipped */
  uint64_t slow_from_ms;   /* fault point slow_after: when the pace began (faults.h) */
  uv_timer_t *timer;       /* parked: its bound; fault point slow_send: the next send */
  struct hpl__fstream *fs; /* streaming a spilled copy from its file (NULL: from memory) */
  int digests;             /* the PULL asks for digests (rddig.c), not bytes */
  uint64_t pulls;          /* PULLs this connection carried (the fault point cut_reused) */
  int head_due;            /* the PULL_REP has not gone: it goes with the first chunk */
} hpl__sender;

/* dataport.c: the stream of sd is over (served, or refused): let go of
 * its object; tell the idle function if no stream is left. */
void hpl__dataport_stream_end(hpl__sender *sd);

/* dpsend.c: send what sd's stream may send now (within its in-flight
 * budget); a write of it is done (the hpl__conn write callback, arg sd);
 * sd's timer, made on first use (NULL on no memory; closed with sd). */
void hpl__dataport_pump(hpl__sender *sd);
/* dpsend.c: the stream's PULL_REP, if it has not gone yet (sd->head_due),
 * on its own. 0, or a negative code (the connection is closing). */
int hpl__dataport_send_head(hpl__sender *sd);
void hpl__dataport_write_done(hpl__conn *c, int status, void *arg);
uv_timer_t *hpl__dataport_timer(hpl__sender *sd);

/* dpfault.c, for a stream with fault points (sd->faulty). How many of
 * `want` bytes may go now (0: none; the stream may have been cut, or a
 * pace timer started that pumps it again). Write n bytes from src with
 * one byte flipped (the object's own bytes untouched): 0 if written or
 * queued, -1 if not (no memory, or the connection closes). */
uint64_t hpl__dataport_fault_budget(hpl__sender *sd, uint64_t want);
int hpl__dataport_write_corrupted(hpl__sender *sd, const uint8_t *src, size_t n);

/* dataport.c: tell the corrupt handler (hpl__dataport_on_corrupt) that
 * o's spill file failed its digest at `unit`. */
void hpl__dataport_corrupt(hpl__store *s, hpl__obj *o, uint64_t unit);

/* dpfile.c. Stream spilled copy `o` from its spill file (the pool is not
 * touched): 0 (sd->fs set), or -1 when it cannot be (the caller reads it
 * back instead). Pump: send what is read, read ahead, end the stream
 * (from sd->pos, once the reply is out). Detach: the connection closed;
 * reads still out are cancelled, the buffers go once no read or write
 * uses them (a no-op without sd->fs). */
int hpl__dataport_file_start(hpl__sender *sd, hpl__obj *o);
void hpl__dataport_file_pump(hpl__sender *sd);
void hpl__dataport_file_detach(hpl__sender *sd);

#endif
