/* rddig.c - a reduce stream's digests at the node that makes it (see
 * rddig.h): hashed on the thread pool as the output's bytes become final,
 * answered to the stream's receivers on the data port. */
#include "rddig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "digest.h"
#include "hoplite.h"
#include "log.h"
#include "objdig.h"

#define UNITS_PER_JOB 64u /* 8 MiB per job */
#define JOBS 4u           /* at once per stream (the size of hpl__objdig.job_u0) */

#define MAX_PIECES 8u /* a unit of a stream with a source: pieces of other buffers */

typedef struct rd_job {
  uv_work_t req;
  hpl__store *s;
  hpl__obj *o; /* referenced until the job is done */
  uint32_t epoch;
  int algo;
  uint64_t u0, u1;
  int slot;
  /* a stream with a source (a ring's): each unit's pieces, resolved on the
   * loop; the buffers they lie in are referenced (keep) until the job is done */
  hpl__digest_piece *pc; /* MAX_PIECES per unit */
  uint8_t *npc;          /* pieces per unit */
  hpl__obj *keep[2];
  uint8_t out[]; /* (u1 - u0) digests, copied to the list on the loop */
} rd_job;

/* hpl__digest_unit_pieces's at() for a stream with a source (arg: the output). */
static const uint8_t *source_at(void *arg, uint64_t pos, uint64_t *n) {
  hpl__obj *o = arg;
  return o->source->bytes_at(o->source, o, pos, n);
}

int hpl__rddig_reset(hpl__store *s, hpl__obj *o, uint64_t base) {
  uint64_t n = hpl__digest_units(o->size);
  if (!hpl__digest_algo_on(s->cfg.integrity) || n > HPL__DIGEST_MAX_UNITS) {
    free(o->dig); /* receivers are told algorithm 0 */
    o->dig = NULL;
    return 0;
  }
  hpl__objdig *d = o->dig;
  if (!d || d->nunits != n) {
    free(d);
    if (!(d = o->dig = calloc(1, sizeof *d + n * HPL__DIGEST_LEN))) return HPL_ENOMEM;
    d->nunits = n;
  }
  d->algo = (uint8_t)s->cfg.integrity;
  d->epoch++;
  d->complete = 0;
  d->inflight = 0; /* jobs still out belong to the old epoch */
  for (unsigned i = 0; i < JOBS; i++) d->job_u0[i] = UINT64_MAX;
  if (base == UINT64_MAX)
    d->first = UINT64_MAX;
  else if (base >= o->size && o->size)
    d->first = n; /* nothing left to make */
  else /* units wholly made here: from the first boundary at or past base */
    d->first = hpl__digest_unit_of(o->size, base + hpl__digest_unit(o->size) - 1);
  d->next = d->known = d->written = d->first == UINT64_MAX ? 0 : d->first;
  return 0;
}

static void job_run(uv_work_t *req) {
  rd_job *j = req->data;
  hpl__obj *o = j->o;
  for (uint64_t u = j->u0; u < j->u1; u++) {
    uint8_t *out = j->out + (u - j->u0) * HPL__DIGEST_LEN;
    if (j->pc) {
      size_t x = (size_t)(u - j->u0);
      hpl__digest_pieces(j->algo, j->pc + x * MAX_PIECES, j->npc[x], out);
      continue;
    }
    uint64_t off, len;
    hpl__digest_unit_span(o->size, u, &off, &len);
    hpl__digest_bytes(j->algo, o->data + off, (size_t)len, out);
  }
}

static void kick(hpl__store *s, hpl__obj *o);

/* Free j and drop its references on the source's buffers (not on j->o). */
static void job_free(rd_job *j) {
  for (unsigned i = 0; i < 2; i++)
    if (j->keep[i]) hpl__obj_unref(j->s, j->keep[i]);
  free(j->pc);
  free(j->npc);
  free(j);
}

static void job_done(uv_work_t *req, int status) {
  (void)status; /* canceled only when the loop ends: the object goes too */
  rd_job *j = req->data;
  hpl__store *s = j->s;
  hpl__obj *o = j->o;
  hpl__objdig *d = o->dig;
  if (d && d->epoch == j->epoch) {
    memcpy(d->list + j->u0 * HPL__DIGEST_LEN, j->out, (size_t)((j->u1 - j->u0) * HPL__DIGEST_LEN));
    d->inflight--;
    d->job_u0[j->slot] = UINT64_MAX;
    uint64_t known = d->next; /* up to the first job still running */
    for (unsigned i = 0; i < JOBS; i++)
      if (d->job_u0[i] < known) known = d->job_u0[i];
    int grew = known > d->known;
    d->known = known;
    kick(s, o);
    if (grew) hpl__obj_notify(o); /* digest requests waiting on the data port */
  }
  job_free(j);
  hpl__obj_unref(s, o);
}

/* A job for a stream with a source: its units' pieces, and references on
 * the buffers they lie in. 0, or -1 (no memory, or the source is gone). */
static int job_pieces(hpl__store *s, rd_job *j) {
  hpl__obj *o = j->o;
  size_t n = (size_t)(j->u1 - j->u0);
  j->pc = malloc(n * MAX_PIECES * sizeof *j->pc);
  j->npc = malloc(n);
  if (!j->pc || !j->npc) return -1;
  for (size_t x = 0; x < n; x++) {
    unsigned k = hpl__digest_unit_pieces(o->size, j->u0 + x, source_at, o, j->pc + x * MAX_PIECES,
                                         MAX_PIECES);
    if (k == 0) return -1; /* the source has no bytes there (gone), or too many pieces */
    j->npc[x] = (uint8_t)k;
  }
  for (unsigned i = 0; i < 2; i++)
    if ((j->keep[i] = o->source->keep[i])) hpl__obj_ref(s, j->keep[i]);
  return 0;
}

/* Queue jobs for final units that are not hashed yet. */
static void kick(hpl__store *s, hpl__obj *o) {
  hpl__objdig *d = o->dig;
  while (d->next < d->written && d->inflight < JOBS) {
    uint64_t u1 = d->written - d->next > UNITS_PER_JOB ? d->next + UNITS_PER_JOB : d->written;
    rd_job *j = calloc(1, sizeof *j + (size_t)((u1 - d->next) * HPL__DIGEST_LEN));
    if (!j) break; /* the next progress or completion tries again */
    j->s = s;
    j->o = o;
    j->epoch = d->epoch;
    j->algo = d->algo;
    j->u0 = d->next;
    j->u1 = u1;
    j->req.data = j;
    while (d->job_u0[j->slot] != UINT64_MAX) j->slot++; /* inflight < JOBS: one is free */
    int sourced = o->source && o->source->bytes_at;
    if ((sourced && job_pieces(s, j) != 0) ||
        uv_queue_work(s->loop, &j->req, job_run, job_done) != 0) {
      job_free(j);
      break;
    }
    hpl__obj_ref(s, o);
    d->job_u0[j->slot] = j->u0;
    d->next = u1;
    d->inflight++;
  }
}

void hpl__rddig_made(hpl__store *s, hpl__obj *o, uint64_t to) {
  hpl__objdig *d = o->dig;
  if (!d || d->first == UINT64_MAX) return;
  uint64_t w = to >= o->size ? d->nunits : hpl__digest_unit_of(o->size, to);
  if (w > d->written) d->written = w;
  kick(s, o);
}

int hpl__rddig_answer(const hpl__obj *o, uint64_t first, Hplpb__PullRep *r, char *detail,
                      size_t dlen) {
  const hpl__objdig *d = o->dig;
  r->size = o->size;
  if (!d) return 1; /* algorithm 0: no digests */
  if (first >= d->nunits) {
    snprintf(detail, dlen, "no unit %llu in '%s' (%llu units)", (unsigned long long)first, o->id,
             (unsigned long long)d->nunits);
    return HPL_EINVAL;
  }
  /* below where the stream is made from: the receiver's pull of its bytes
   * from there makes it again (rdtask.c stream_pulled: a rebase), and this
   * request may have come first */
  if (d->first == UINT64_MAX || first >= d->known || first < d->first) return 0;
  uint64_t n = d->known - first;
  if (n > HPL__RDDIG_PER_REPLY) n = HPL__RDDIG_PER_REPLY;
  r->digest_algo = d->algo;
  r->digest_first = first;
  r->digests.data = (uint8_t *)d->list + first * HPL__DIGEST_LEN;
  r->digests.len = (size_t)(n * HPL__DIGEST_LEN);
  return 1;
}
