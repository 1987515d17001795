/*
 * pullint.h - what puller.c (the stream) and pullmon.c (watching it)
 * share: a pull's record and the module's context. Nothing outside these
 * two files includes it.
 */
#ifndef HPL_STORE_PULLINT_H
#define HPL_STORE_PULLINT_H

#include <netinet/in.h>
#include <stdint.h>

#include "puller.h"
#include "uvconn.h"

/* A pull's inbound slot (pullslot.c: copies with 32 KiB to 4 MiB to come
 * take one, --inbound-pulls of them at once). */
typedef enum hpl__pull_slot {
  HPL__SLOT_NONE,    /* needs none (small, long, or a reduce or ring stream) */
  HPL__SLOT_WAITING, /* queued for one: not connected, not monitored yet */
  HPL__SLOT_HELD,    /* streaming in one */
  HPL__SLOT_LENT,    /* gave it up, quiet (a lost tail waiting out its timeout); streams on */
} hpl__pull_slot;

/* The module's context (s->pullers). */
typedef struct hpl__pullers {
  hpl__puller *list;     /* every pull running (utlist) */
  double rate_ewma;      /* bytes/s of recent pulls from complete senders */
  double last_pull_rate; /* of the pull that just completed (0: not measured) */
  unsigned straggler_streak; /* senders judged stragglers since a pull last went at a
                                healthy rate: our own link may be the slow one, so
                                each one widens the window */
  int (*quiet)(hpl__store *s, uint64_t peer); /* hpl__puller_on_quiet's (may be NULL) */
  hpl__puller *queued;   /* copies waiting for an inbound slot (utlist, via qprev/qnext) */
  unsigned slots_held;   /* copies holding one (cfg.inbound_pulls at most) */
  uv_check_t admit;      /* admits queued copies once this loop turn's answers are in */
  int admit_open;        /*   ...initialised and not closed (with hold_timer) */
  uv_timer_t hold_timer; /* runs while the first fill is held (pullslot.c: while no slot
                            is held, queued copies wait at most cfg.fill_hold_ms for the
                            answers still due to their ask round) */
  uint64_t round;        /* the fetches' current ask round (hpl__puller_asking) */
  unsigned round_asking; /*   ...its fetches still waiting for their first answer */
} hpl__pullers;

struct hpl__puller {
  struct hpl__puller *prev, *next; /* s->pullers->list (utlist) */
  struct hpl__puller *qprev, *qnext; /* s->pullers->queued while waiting (utlist) */
  hpl__pull_slot slot;   /* its inbound slot (puller.c) */
  int waited;            /* was passed over for a slot (counted in pulls_queued) */
  struct sockaddr_in sa; /* the sender's data port */
  hpl__store *s;
  hpl__puller_ops ops;
  void *arg;
  hpl__obj *into;     /* hpl__puller_start_into: the object the bytes land in */
  int into_progress;  /*   ...and whether they are its progress */
  char key[320];
  int internal;
  uv_tcp_t *tcp; /* while connecting */
  uv_connect_t creq;
  hpl__conn *c;
  int reused;    /* c was an idle connection to the sender (dconns.c) */
  int replied;   /* its PULL_REP arrived */
  uint64_t start; /* stream offset requested */
  uint64_t size;  /* whole stream size */
  uint64_t got;   /* bytes received after start */
  uint64_t corrupt_unit; /* the unit that failed its digest (ended HPL_ECORRUPT) */
  int all_in;            /* every byte arrived; some wait for their digests */
  int finished;   /* done, failed or cancelled: ignore further events */
  int paused;     /* the owner has no room: not a stall */
  uv_timer_t monitor;
  uint64_t last_move_ms; /* when bytes last arrived */
  uint64_t slow_next_ms; /* monitor 1: next time a crawl may be reported */
  uint64_t started_ms;
  uint64_t samp_ms[32], samp_got[32]; /* (time, bytes) every sample, a ring */
  int nsamp;
  unsigned ticks;
  uint64_t last_tick_ms;
  double rate;            /* bytes/s while bytes flow (EWMA of samples, 0: unknown) */
  int suspecting;         /* `suspect` called, owner not done yet */
  uint64_t noted_move_ms; /* last_move_ms when the QUIET note went out (one per quiet spell) */
  uint64_t suspect_after; /* no `suspect` call before this time */
  int closes; /* handles still closing after the end */
  char label[48];
};

/* puller.c: the stream is over (done, failed or cancelled): release
 * everything and, if `report`, tell the owner (done()). */
void hpl__puller_end(hpl__puller *p, int status, const char *detail, int report);

/* puller.c, from the monitor's tick: a large copy that has received
 * nothing for a while (its stream waits out a retransmission timeout, or
 * its sender is slow) lets a queued one have its slot, so the link is not
 * left idle; it goes on without one. */
void hpl__puller_slot_check(hpl__puller *p, uint64_t now);

/* puller.c: connect (or take an idle connection) and send PULL; the pull
 * holds its slot if it needs one. A failure ends it, reported to its owner
 * if `report`. */
void hpl__puller_begin(hpl__puller *p, int report);

/* pullslot.c: a new pull. A copy of 32 KiB to 4 MiB needs an inbound slot:
 * returns 1 if it was queued for one (hpl__puller_begin runs when it gets
 * it), 0 if it is to begin now (holding a slot if it needs one). */
int hpl__pullslot_enter(hpl__puller *p);
/* pullslot.c, as p ends: out of the queue, its slot given back; 1 if a
 * slot fell free (call hpl__pullslot_admit once p is done with). */
int hpl__pullslot_leave(hpl__puller *p);
/* pullslot.c: free slots go to queued copies, nearest sender first. */
void hpl__pullslot_admit(hpl__store *s);
/* pullslot.c: set up (from hpl__puller_init); close the handles
 * (from hpl__puller_stop_all, before the pulls end: nothing more is
 * admitted). */
void hpl__pullslot_init(hpl__store *s);
void hpl__pullslot_stop(hpl__store *s);

/* pullmon.c: start the monitor's timer (ops.monitor set); the pull
 * completed: a full-speed sample for this node's usual rate. */
void hpl__puller_monitor_start(hpl__puller *p);
void hpl__puller_sample_whole(hpl__puller *p);

#endif
