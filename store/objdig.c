/* objdig.c - an object's digests in the store: made at the origin on the
 * thread pool, taken from the directory, checked before bytes count (see
 * objdig.h). */
#include "objdig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "hoplite.h"
#include "log.h"

/* Bytes one thread-pool job hashes, at most and at least, and jobs per
 * object at once: a whole put's bytes are hashed by several threads side
 * by side, so what is waiting (up to JOBS_PER_OBJECT jobs' worth) is
 * split between them. A job of at least JOB_MIN bytes keeps the loop's
 * cost per job (its completion's wake-up, ~20-30 us) small next to the
 * hash (~0.25 ms for 256 KiB with SHA-NI); digests become known job by
 * job, so relays of a put still being hashed count its first bytes after
 * the first job, not after the whole object. */
#define JOB_MAX (8u << 20)
#define JOB_MIN (256u << 10)
#define JOBS_PER_OBJECT 4u /* (the size of hpl__objdig.job_u0) */
/* At seal, what is left to hash is hashed on the loop when it is at most
 * this: a trip through the thread pool costs a thread's wake-up and the
 * loop's (an eventfd write, a wake, a read: ~20-30 us of CPU), more than
 * the hash of a small object itself (~0.1 us at 100 B). At the limit the
 * loop hashes for ~65 us (SHA-256 with SHA-NI runs at ~1 GB/s on the 2-core
 * VM of the benchmarks): about two trips' CPU, short enough to keep the
 * loop responsive; anything longer goes to the pool. */
#define SEAL_ON_LOOP_MAX (64u << 10)

typedef struct dig_job {
  uv_work_t req;
  hpl__store *s;
  hpl__obj *o; /* referenced until the job is done */
  uint64_t u0, u1;
  int slot;     /* in o->dig->job_u0 */
} dig_job;

static hpl__objdig *dig_new(uint64_t size, int algo) {
  uint64_t n = hpl__digest_units(size);
  if (!hpl__digest_algo_on(algo) || n > HPL__DIGEST_MAX_UNITS) return NULL;
  hpl__objdig *d = calloc(1, sizeof *d + n * HPL__DIGEST_LEN);
  if (!d) return NULL;
  d->algo = (uint8_t)algo;
  d->nunits = n;
  for (int i = 0; i < 4; i++) d->job_u0[i] = UINT64_MAX;
  return d;
}

int hpl__objdig_begin(hpl__store *s, hpl__obj *o, int algo) {
  (void)s;
  if (o->dig || !hpl__digest_algo_on(algo) ||
      hpl__digest_units(o->size) > HPL__DIGEST_MAX_UNITS)
    return 0;
  o->dig = dig_new(o->size, algo);
  return o->dig ? 0 : HPL_ENOMEM;
}

static void job_run(uv_work_t *req) {
  dig_job *j = req->data;
  hpl__obj *o = j->o;
  hpl__digest_units_make(o->dig->algo, o->data, o->size, j->u0, j->u1, o->dig->list);
}

static void kick(hpl__store *s, hpl__obj *o);

/* Every unit is hashed: the root, then whoever waits for it. */
static void finish(hpl__store *s, hpl__obj *o) {
  hpl__objdig *d = o->dig;
  hpl__digest_root(d->algo, d->list, d->nunits, d->root);
  d->complete = 1;
  d->known = d->nunits;
  HPL__LOG_DEBUG("'%s': %llu %s digests made", o->id, (unsigned long long)d->nunits,
                 hpl__digest_algo_name(d->algo));
  void (*ready)(hpl__store *, hpl__obj *, void *) = d->ready;
  d->ready = NULL;
  if (ready) ready(s, o, d->ready_arg);
}

static void job_done(uv_work_t *req, int status) {
  (void)status; /* canceled only when the loop ends: the object goes too */
  dig_job *j = req->data;
  hpl__store *s = j->s;
  hpl__obj *o = j->o;
  hpl__objdig *d = o->dig;
  d->inflight--;
  d->done += j->u1 - j->u0;
  d->job_u0[j->slot] = UINT64_MAX;
  free(j);
  /* known: up to the first job still running (jobs are queued in order) */
  uint64_t known = d->next;
  for (int i = 0; i < 4; i++)
    if (d->job_u0[i] < known) known = d->job_u0[i];
  int grew = known > d->known;
  d->known = known;
  kick(s, o);
  if (grew && d->made && !(d->sealed && d->done == d->nunits)) d->made(s, o);
  if (d->sealed && !d->complete && d->done == d->nunits) finish(s, o);
  hpl__obj_unref(s, o);
}

/* Queue jobs for units the client has written that are not hashed yet. */
static void kick(hpl__store *s, hpl__obj *o) {
  hpl__objdig *d = o->dig;
  uint64_t limit = d->sealed ? d->nunits : d->written;
  if (d->next >= limit || d->inflight >= JOBS_PER_OBJECT) return;
  uint64_t unit = hpl__digest_unit(o->size);
  /* what waits, split between the jobs that may start now */
  uint64_t free_jobs = JOBS_PER_OBJECT - d->inflight;
  uint64_t per_job = (limit - d->next + free_jobs - 1) / free_jobs;
  if (per_job * unit < JOB_MIN) per_job = (JOB_MIN + unit - 1) / unit;
  if (per_job * unit > JOB_MAX) per_job = JOB_MAX / unit;
  while (d->next < limit && d->inflight < JOBS_PER_OBJECT) {
    dig_job *j = calloc(1, sizeof *j);
    if (!j) break; /* the next completion (or seal) tries again */
    j->s = s;
    j->o = o;
    j->u0 = d->next;
    j->u1 = limit - d->next > per_job ? d->next + per_job : limit;
    j->req.data = j;
    j->slot = 0;
    while (d->job_u0[j->slot] != UINT64_MAX) j->slot++; /* inflight < 4: one is free */
    if (uv_queue_work(s->loop, &j->req, job_run, job_done) != 0) {
      free(j);
      break;
    }
    hpl__obj_ref(s, o);
    d->job_u0[j->slot] = j->u0;
    d->next = j->u1;
    d->inflight++;
  }
}

void hpl__objdig_on_made(hpl__obj *o, void (*made)(hpl__store *s, hpl__obj *o)) {
  if (o->dig) o->dig->made = made;
}

void hpl__objdig_written(hpl__store *s, hpl__obj *o, uint64_t bytes) {
  hpl__objdig *d = o->dig;
  if (!d || d->sealed) return;
  uint64_t full = hpl__digest_unit_of(o->size, bytes);
  if (bytes >= o->size) full = d->nunits;
  if (full > d->written) d->written = full;
  kick(s, o);
}

int hpl__objdig_seal(hpl__store *s, hpl__obj *o,
                     void (*ready)(hpl__store *s, hpl__obj *o, void *arg), void *arg) {
  hpl__objdig *d = o->dig;
  if (!d || d->complete) return 1;
  d->sealed = 1;
  d->written = d->nunits;
  if (d->done == d->nunits && d->inflight == 0) { /* hashed as it was written */
    finish(s, o);
    return 1;
  }
  uint64_t from = d->next * hpl__digest_unit(o->size); /* units below `next` are hashed or queued */
  if (d->inflight == 0 && from <= o->size && o->size - from <= SEAL_ON_LOOP_MAX) {
    hpl__digest_units_make(d->algo, o->data, o->size, d->next, d->nunits, d->list);
    d->done += d->nunits - d->next;
    d->next = d->nunits;
    finish(s, o);
    return 1;
  }
  d->ready = ready;
  d->ready_arg = arg;
  kick(s, o);
  return 0;
}

void hpl__objdig_forget(hpl__obj *o) {
  if (o->dig) o->dig->ready = NULL;
}

void hpl__objdig_drop(hpl__obj *o) {
  hpl__objdig *d = o->dig;
  if (!d) return;
  if (d->inflight) { /* (their job_done still uses the record) */
    d->ready = NULL;
    d->made = NULL;
    return;
  }
  free(d);
  o->dig = NULL;
}

int hpl__objdig_make_all(hpl__store *s, hpl__obj *o, int algo,
                         void (*ready)(hpl__store *s, hpl__obj *o, void *arg), void *arg) {
  hpl__objdig *d = o->dig;
  if (d && d->complete) return 1;
  if (d && d->inflight) { /* being made already: the caller hears when they are */
    d->sealed = 1;
    d->written = d->nunits;
    d->ready = ready;
    d->ready_arg = arg;
    kick(s, o);
    return 0;
  }
  void (*made)(hpl__store *, hpl__obj *) = d ? d->made : NULL;
  uint64_t sent = d ? d->sent : 0;
  free(d);
  o->dig = NULL;
  if (hpl__objdig_begin(s, o, algo) != 0) {
    HPL__LOG_WARN("'%s': no memory for its digests: its copies elsewhere are refused", o->id);
    return 1;
  }
  if (!o->dig) return 1;
  o->dig->made = made;
  o->dig->sent = sent; /* (those sent are the same digests: the same bytes) */
  return hpl__objdig_seal(s, o, ready, arg);
}

void hpl__objdig_to_wire(const hpl__obj *o, int algo_only, uint32_t *algo,
                         ProtobufCBinaryData *list, ProtobufCBinaryData *root) {
  const hpl__objdig *d = o->dig;
  *algo = 0;
  *list = (ProtobufCBinaryData){0};
  *root = (ProtobufCBinaryData){0};
  if (!d || (!d->complete && !algo_only)) return;
  *algo = d->algo;
  if (!d->complete) return;
  list->data = (uint8_t *)d->list;
  list->len = (size_t)(d->nunits * HPL__DIGEST_LEN);
  root->data = (uint8_t *)d->root;
  root->len = HPL__DIGEST_LEN;
}

int hpl__objdig_take(hpl__obj *o, uint64_t size, uint32_t algo, const ProtobufCBinaryData *list,
                     const ProtobufCBinaryData *root, char *detail, size_t dlen) {
  if (o->dig || algo == HPL__DIGEST_OFF) return 0;
  uint64_t n = hpl__digest_units(size);
  int all = list->len == n * HPL__DIGEST_LEN;
  if (!hpl__digest_algo_on((int)algo) || n > HPL__DIGEST_MAX_UNITS ||
      list->len > n * HPL__DIGEST_LEN || list->len % HPL__DIGEST_LEN ||
      (all && root->len != HPL__DIGEST_LEN)) {
    snprintf(detail, dlen, "digests of '%s' do not fit it (algorithm %u, %zu bytes for %llu units)",
             o->id, algo, list->len, (unsigned long long)n);
    return HPL_EPROTO;
  }
  uint8_t r[HPL__DIGEST_LEN];
  if (all) hpl__digest_root((int)algo, list->data, n, r); /* 2048 digests: ~40 us */
  if (all && !hpl__digest_equal(r, root->data)) {
    snprintf(detail, dlen, "digests of '%s': the root is not over the list", o->id);
    return HPL_EPROTO;
  }
  hpl__objdig *d = dig_new(size, (int)algo);
  if (!d) {
    snprintf(detail, dlen, "out of memory");
    return HPL_ENOMEM;
  }
  if (list->len) memcpy(d->list, list->data, list->len);
  d->known = list->len / HPL__DIGEST_LEN;
  if (all) memcpy(d->root, root->data, HPL__DIGEST_LEN);
  d->complete = (uint8_t)all;
  o->dig = d;
  return 0;
}

int hpl__objdig_needed(const hpl__store *s, uint64_t size) {
  return hpl__digest_algo_on(s->cfg.integrity) && size > 0 &&
         hpl__digest_units(size) <= HPL__DIGEST_MAX_UNITS;
}

int hpl__objdig_more(hpl__obj *o, uint64_t first, const ProtobufCBinaryData *list,
                     const ProtobufCBinaryData *root, char *detail, size_t dlen) {
  hpl__objdig *d = o->dig;
  if (!d || d->complete) return 0;
  uint64_t cnt = list->len / HPL__DIGEST_LEN;
  if (list->len % HPL__DIGEST_LEN || first > d->nunits || cnt > d->nunits - first) {
    snprintf(detail, dlen, "digests of '%s' [%llu, +%llu) do not fit it", o->id,
             (unsigned long long)first, (unsigned long long)cnt);
    return HPL_EPROTO;
  }
  if (first <= d->known && first + cnt > d->known) { /* (else a gap, or nothing new) */
    uint64_t skip = d->known - first;
    memcpy(d->list + d->known * HPL__DIGEST_LEN, list->data + skip * HPL__DIGEST_LEN,
           (size_t)((cnt - skip) * HPL__DIGEST_LEN));
    d->known = first + cnt;
  }
  if (d->known < d->nunits || !root->len) return 0; /* the root comes last */
  uint8_t r[HPL__DIGEST_LEN];
  hpl__digest_root(d->algo, d->list, d->nunits, r);
  if (root->len != HPL__DIGEST_LEN || !hpl__digest_equal(r, root->data)) {
    d->known = 0; /* nothing is checkable against a list the root disowns */
    snprintf(detail, dlen, "digests of '%s': the root is not over the list", o->id);
    return HPL_EPROTO;
  }
  memcpy(d->root, r, HPL__DIGEST_LEN);
  d->complete = 1;
  return 0;
}

uint64_t hpl__objdig_resume_at(const hpl__obj *o) {
  const hpl__objdig *d = o->dig;
  uint64_t at = d && d->have > o->progress ? d->have : o->progress;
  return at > o->size ? o->size : at;
}

uint64_t hpl__objdig_verify(hpl__obj *o, uint64_t have, int *bad, uint64_t *bad_unit) {
  hpl__objdig *d = o->dig;
  *bad = 0;
  if (!d) return have;
  if (have > d->have) d->have = have;
  uint64_t u = hpl__digest_unit_of(o->size, o->progress); /* a unit boundary (or size) */
  uint64_t upto = have >= o->size ? d->nunits : hpl__digest_unit_of(o->size, have);
  if (upto > d->known) upto = d->known;
  uint64_t ok = o->progress;
  for (; u < upto; u++) {
    if (!hpl__digest_check_unit(d->algo, o->data, o->size, u, d->list)) {
      *bad = 1;
      *bad_unit = u;
      d->have = ok; /* the unit's bytes go */
      return ok;
    }
    uint64_t off, len;
    hpl__digest_unit_span(o->size, u, &off, &len);
    ok = off + len;
  }
  return ok > o->progress ? ok : o->progress;
}

int hpl__objdig_check_span(const hpl__objdig *d, uint64_t size, const uint8_t *buf, uint64_t off,
                           uint64_t len, uint64_t *bad_unit) {
  if (!d || len == 0) return 1;
  uint64_t u = hpl__digest_unit_of(size, off);
  uint64_t end = off + len;
  for (; u < d->known; u++) {
    uint64_t uo, ul;
    hpl__digest_unit_span(size, u, &uo, &ul);
    if (uo < off || uo + ul > end) break;
    uint8_t h[HPL__DIGEST_LEN];
    hpl__digest_bytes(d->algo, buf + (uo - off), (size_t)ul, h);
    if (!hpl__digest_equal(h, d->list + u * HPL__DIGEST_LEN)) {
      *bad_unit = u;
      return 0;
    }
  }
  return 1;
}

typedef struct check_job {
  uv_work_t req;
  hpl__store *s;
  hpl__obj *o; /* referenced until the job is done */
  int bad;
  uint64_t unit;
  void (*done)(hpl__store *s, hpl__obj *o, int bad, uint64_t unit, void *arg);
  void *arg;
} check_job;

static void check_run(uv_work_t *req) {
  check_job *j = req->data;
  hpl__obj *o = j->o;
  j->bad = !hpl__objdig_check_span(o->dig, o->size, o->data, 0, o->size, &j->unit);
}

static void check_done(uv_work_t *req, int status) {
  (void)status; /* canceled only when the loop ends */
  check_job *j = req->data;
  hpl__store *s = j->s;
  hpl__obj *o = j->o;
  j->done(s, o, j->bad, j->unit, j->arg);
  hpl__obj_unref(s, o);
  free(j);
}

int hpl__objdig_check_all(hpl__store *s, hpl__obj *o,
                          void (*done)(hpl__store *s, hpl__obj *o, int bad, uint64_t unit,
                                       void *arg),
                          void *arg) {
  if (!o->dig || !o->dig->known || !o->data) return 1;
  check_job *j = calloc(1, sizeof *j);
  if (!j) return HPL_ENOMEM;
  *j = (check_job){.s = s, .o = o, .done = done, .arg = arg};
  j->req.data = j;
  if (uv_queue_work(s->loop, &j->req, check_run, check_done) != 0) {
    free(j);
    return HPL_ESYS;
  }
  hpl__obj_ref(s, o);
  return 0;
}
