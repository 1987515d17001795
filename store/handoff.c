/* handoff.c - deletes learned lately and reduces made here, kept for a
 * new directory (see handoff.h): two FIFOs, the tombstones also hashed by
 * id, the reduces by target. */
#include "handoff.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "log.h"
#include "util.h"

typedef struct ho_tomb {
  UT_hash_handle hh;
  struct ho_tomb *prev, *next; /* oldest first (utlist DL) */
  uint64_t at_ms, seq;
  char id[];
} ho_tomb;

typedef struct ho_reduce {
  UT_hash_handle hh;
  struct ho_reduce *prev, *next; /* oldest first (utlist DL) */
  uint64_t seq;
  uint8_t *req; /* packed ReduceReq */
  size_t req_len;
  uint32_t *used;
  size_t nused;
  char target[];
} ho_reduce;

/* The module's state (s->handoff). */
struct hpl__handoff {
  ho_tomb *tombs, *tomb_fifo;
  size_t ntombs;
  ho_reduce *reduces, *rd_fifo;
  size_t nreduces, rd_bytes;
  uint64_t seq; /* the last given out (cursors of readers) */
};

int hpl__handoff_init(hpl__store *s) {
  s->handoff = calloc(1, sizeof *s->handoff);
  return s->handoff ? 0 : HPL_ENOMEM;
}

static void tomb_free(struct hpl__handoff *h, ho_tomb *t) {
  HASH_DEL(h->tombs, t);
  DL_DELETE(h->tomb_fifo, t);
  h->ntombs--;
  free(t);
}

static size_t reduce_bytes(const ho_reduce *r) {
  return sizeof *r + strlen(r->target) + r->req_len + r->nused * sizeof *r->used;
}

static void reduce_free(struct hpl__handoff *h, ho_reduce *r) {
  HASH_DEL(h->reduces, r);
  DL_DELETE(h->rd_fifo, r);
  h->nreduces--;
  h->rd_bytes -= reduce_bytes(r);
  free(r->req);
  free(r->used);
  free(r);
}

/* Forget expired tombstones (at most 64 a call: bounded work). */
static void tombs_expire(struct hpl__handoff *h, uint64_t now) {
  for (int i = 0; i < 64 && h->tomb_fifo && now - h->tomb_fifo->at_ms >= HPL__TOMB_MS; i++)
    tomb_free(h, h->tomb_fifo);
}

void hpl__handoff_deleted(hpl__store *s, const char *id) {
  struct hpl__handoff *h = s->handoff;
  if (!h || !hpl__id_valid(id)) return;
  size_t n = strlen(id);
  ho_reduce *r;
  HASH_FIND(hh, h->reduces, id, n, r);
  if (r) reduce_free(h, r);
  uint64_t now = hpl__now_ms();
  tombs_expire(h, now);
  ho_tomb *t;
  HASH_FIND(hh, h->tombs, id, n, t);
  if (t) tomb_free(h, t); /* deleted again: remembered from now */
  if (h->ntombs >= HPL__HANDOFF_TOMBS_MAX) {
    tomb_free(h, h->tomb_fifo);
    s->ctr.handoff_tombs_dropped++;
  }
  if (!(t = malloc(sizeof *t + n + 1))) {
    HPL__LOG_WARN("out of memory remembering the delete of '%s' for a new directory", id);
    return;
  }
  memcpy(t->id, id, n + 1);
  t->at_ms = now;
  t->seq = ++h->seq;
  HASH_ADD_KEYPTR(hh, h->tombs, t->id, n, t);
  DL_APPEND(h->tomb_fifo, t);
  h->ntombs++;
}

void hpl__handoff_put(hpl__store *s, const char *id) {
  struct hpl__handoff *h = s->handoff;
  if (!h) return;
  ho_tomb *t;
  HASH_FIND(hh, h->tombs, id, strlen(id), t);
  if (t) tomb_free(h, t);
  hpl__handoff_reduce_forget(s, id); /* (an earlier object of the id) */
}

typedef struct ho_name {
  const char *id;
  uint32_t idx;
} ho_name;

static int name_cmp(const void *a, const void *b) {
  return strcmp(((const ho_name *)a)->id, ((const ho_name *)b)->id);
}

/* Index of each used source among the request's (in slot order), found in
 * a sorted copy of the names (a reduce has up to 65536 sources); 0, or -1
 * when one is not there (or no memory). */
static int used_indices(const Hplpb__ReduceReq *m, char *const *used, size_t nused,
                        uint32_t *out) {
  ho_name *names = malloc((m->n_sources ? m->n_sources : 1) * sizeof *names);
  if (!names) return -1;
  for (size_t i = 0; i < m->n_sources; i++) names[i] = (ho_name){m->sources[i], (uint32_t)i};
  qsort(names, m->n_sources, sizeof *names, name_cmp);
  int rc = 0;
  for (size_t j = 0; j < nused && rc == 0; j++) {
    ho_name key = {used[j], 0};
    const ho_name *f = bsearch(&key, names, m->n_sources, sizeof *names, name_cmp);
    if (f) out[j] = f->idx;
    else rc = -1;
  }
  free(names);
  return rc;
}

void hpl__handoff_reduce_forget(hpl__store *s, const char *target) {
  struct hpl__handoff *h = s->handoff;
  ho_reduce *r;
  if (!h || !h->reduces) return;
  HASH_FIND(hh, h->reduces, target, strlen(target), r);
  if (r) reduce_free(h, r);
}

void hpl__handoff_reduce_sources(hpl__store *s, const char *target, const uint8_t *req,
                                 size_t req_len, char *const *used, size_t nused) {
  struct hpl__handoff *h = s->handoff;
  if (!h || !req || !nused) return;
  Hplpb__ReduceReq *m = (Hplpb__ReduceReq *)hpl__msg_unpack(HPL__MSG_REDUCE, req, req_len);
  if (!m) return;
  size_t want = m->num_objects ? m->num_objects : m->n_sources;
  size_t n = strlen(target);
  ho_reduce *r = NULL;
  uint32_t *idx = nused == want ? malloc(nused * sizeof *idx) : NULL;
  int ok = idx && strcmp(m->target, target) == 0 && used_indices(m, used, nused, idx) == 0;
  protobuf_c_message_free_unpacked(&m->base, NULL);
  if (!ok || !(r = calloc(1, sizeof *r + n + 1)) || !(r->req = malloc(req_len))) {
    if (nused == want) /* (fewer: the tree is not full yet) */
      HPL__LOG_WARN("reduce '%s': its sources are not kept for a new directory", target);
    free(idx);
    free(r);
    return;
  }
  memcpy(r->target, target, n + 1);
  memcpy(r->req, req, req_len);
  r->req_len = req_len;
  r->used = idx;
  r->nused = nused;
  r->seq = ++h->seq;
  ho_reduce *old;
  HASH_FIND(hh, h->reduces, target, n, old);
  if (old) reduce_free(h, old);
  while (h->rd_fifo && (h->nreduces >= HPL__HANDOFF_REDUCES_MAX ||
                        h->rd_bytes + reduce_bytes(r) > HPL__HANDOFF_REDUCE_BYTES)) {
    reduce_free(h, h->rd_fifo);
    s->ctr.handoff_reduces_dropped++;
  }
  HASH_ADD_KEYPTR(hh, h->reduces, r->target, n, r);
  DL_APPEND(h->rd_fifo, r);
  h->nreduces++;
  h->rd_bytes += reduce_bytes(r);
}

size_t hpl__handoff_tombs(hpl__store *s, uint64_t *cursor, Hplpb__HeldTomb *out, size_t max) {
  struct hpl__handoff *h = s->handoff;
  uint64_t now = hpl__now_ms();
  tombs_expire(h, now);
  size_t k = 0;
  for (ho_tomb *t = h->tomb_fifo; t && k < max; t = t->next) {
    if (t->seq <= *cursor || now - t->at_ms >= HPL__TOMB_MS) continue;
    hplpb__held_tomb__init(&out[k]);
    out[k].id = t->id;
    out[k].age_ms = now - t->at_ms;
    k++;
    *cursor = t->seq;
  }
  return k;
}

size_t hpl__handoff_reduces(hpl__store *s, uint64_t *cursor, Hplpb__HeldReduce *out, size_t max,
                            size_t max_bytes, int (*is_held)(hpl__store *s, const char *id)) {
  struct hpl__handoff *h = s->handoff;
  size_t k = 0, bytes = 0;
  for (ho_reduce *r = h->rd_fifo; r && k < max && bytes < max_bytes; r = r->next) {
    if (r->seq <= *cursor) continue;
    *cursor = r->seq;
    if (!is_held(s, r->target)) continue;
    Hplpb__ReduceReq *m =
        (Hplpb__ReduceReq *)hpl__msg_unpack(HPL__MSG_REDUCE, r->req, r->req_len);
    if (!m) continue;
    hplpb__held_reduce__init(&out[k]);
    out[k].req = m;
    out[k].used = r->used;
    out[k].n_used = r->nused;
    bytes += r->req_len + r->nused * 4;
    k++;
  }
  return k;
}

void hpl__handoff_reduces_done(Hplpb__HeldReduce *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (out[i].req) protobuf_c_message_free_unpacked(&out[i].req->base, NULL);
}

void hpl__handoff_free(hpl__store *s) {
  struct hpl__handoff *h = s->handoff;
  if (!h) return;
  while (h->tomb_fifo) tomb_free(h, h->tomb_fifo);
  while (h->rd_fifo) reduce_free(h, h->rd_fifo);
  free(h);
  s->handoff = NULL;
}
