/*
 * faults.h - deterministic fault points for failure-injection tests
 * (--faults or $HOPLITE_FAULTS): a store that crashes, cuts, stalls or
 * paces its outgoing streams, or goes silent towards the directory. All off
 * unless set; each check is one predictable branch on `enabled`.
 *
 * Callers: main.c (parse), dataport.c (streams), dlconn.c (heartbeats),
 * dlheld.c (the re-report), rdcombine.c (combine steps), fetchgrant.c
 * (grants).
 */
#ifndef HPL_STORE_FAULTS_H
#define HPL_STORE_FAULTS_H

#include <stddef.h>
#include <stdint.h>

/* Byte counts apply to objects whose id starts with `prefix` (all objects
 * if empty) and, with to_node, to streams towards that receiver only. A
 * prefix "r:T" also matches the reduce streams into a target starting with
 * T (their keys are "r:<rid>.<slot>:<gen>:<target>"), and no object whose
 * id does not start with "r:T"; a prefix "g:T" likewise the ring
 * allreduce streams into such a target ("g:<rid>:<index>:<target>",
 * store/ring.c). */
typedef struct hpl__store_faults {
  int enabled;
  char prefix[64];
  uint64_t to_node;     /* only streams to this receiver (0: any) */
  uint64_t crash_after; /* SIGKILL ourselves after sending this many bytes */
  uint64_t drop_after;  /* cut a stream after this many bytes (once) */
  uint64_t stall_after; /* stop sending a stream after this many bytes (once) */
  uint64_t slow_send;   /* pace every stream to this many bytes/s ... */
  uint64_t slow_after;  /*   from its slow_after-th byte on (0: from the start) */
  uint64_t hb_pause_at_ms, hb_pause_ms; /* no heartbeats in [at, at+len) after start */
  uint64_t combine_delay_ms; /* every reduce combine step on the thread pool waits this long */
  uint64_t held_delay_ms;    /* re-report what we hold this long after registering */
  uint64_t grant_delay_ms;   /* handle each GRANT from the directory this long late */
  uint64_t corrupt_send;     /* flip a byte in the middle of each of the first N chunks
                                each faulty stream sends (dataport.c; the copy is unchanged) */
  uint64_t cut_reused;       /* the first N PULLs of faulty streams that arrive on a
                                connection that carried one before close it unanswered
                                (dataport.c: an idle connection let go as its peer
                                takes it again) */
  /* state */
  uint64_t sent;
  uint64_t cut_reused_done;
  int dropped, stalled;
} hpl__store_faults;

/* Parse "key=value,..." into *f (keys as in hpl__store_faults, hb_pause as
 * AT_MS:LEN_MS). Returns 0, or -1 with a message in err. */
int hpl__faults_parse(hpl__store_faults *f, const char *spec, char *err, size_t errlen);

/* Whether the stream of object `id` to node `peer` is subject to faults. */
int hpl__faults_apply(const hpl__store_faults *f, const char *id, uint64_t peer);

/* What a faulty stream must do now instead of sending. */
enum { HPL__FAULT_SEND = 0, HPL__FAULT_HOLD, HPL__FAULT_CUT, HPL__FAULT_PACE };

/* A faulty stream wants to send `want` bytes; it has sent `sent` bytes
 * since it started `elapsed_ms` ago and has `inflight` writes queued;
 * *stalled is the stream's own stall flag, *slow_from_ms its own record of
 * when (elapsed_ms + 1) it reached slow_after (0: not yet). Returns how many bytes it may
 * send now (0 with *action set: hold for good or until the queued writes
 * are out, cut the connection now, or try again in 10 ms). Raises SIGKILL
 * when the crash point is reached. Count what was sent with
 * hpl__faults_sent(). */
uint64_t hpl__faults_budget(hpl__store_faults *f, const char *id, uint64_t sent,
                            uint64_t elapsed_ms, int inflight, int *stalled, uint64_t *slow_from_ms,
                            uint64_t want, int *action);

/* Fault point corrupt_send: 1 if the next chunk of a faulty stream that
 * has flipped *done chunks so far is to be sent with a byte flipped (then
 * *done is counted up), else 0. */
int hpl__faults_corrupt_next(const hpl__store_faults *f, uint64_t *done);

/* Fault point cut_reused: a PULL of `id` from `peer` arrived on a
 * connection that has carried `before` PULLs. 1: close the connection
 * unanswered (counted), else 0. */
int hpl__faults_cut_reused(hpl__store_faults *f, const char *id, uint64_t peer, uint64_t before);

/* `n` more bytes went out on a faulty stream. */
void hpl__faults_sent(hpl__store_faults *f, uint64_t n);

/* Fault point combine_delay_ms: called on a thread-pool thread before a
 * reduce combine step (sleeps there, never on the loop). */
void hpl__faults_combine_delay(const hpl__store_faults *f);

/* Milliseconds left in the silent window (hb_pause) at `elapsed_ms` after
 * the store started; 0 when not in it. */
uint64_t hpl__faults_silent_ms(const hpl__store_faults *f, uint64_t elapsed_ms);

#endif
