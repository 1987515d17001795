/* tombs.c - deleted ids remembered for a while (see tombs.h): a hash by id
 * and a list oldest first, for expiry. */
#include "tombs.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <utlist.h>

#include "hoplite.h"
#include "util.h"

typedef struct dir_tomb {
  UT_hash_handle hh;
  struct dir_tomb *prev, *next; /* fifo */
  uint64_t at_ms;
  char id[];
} dir_tomb;

/* The module's state (hpl__dir_server.tombs). */
struct hpl__dir_tombs {
  dir_tomb *by_id; /* uthash */
  dir_tomb *fifo;  /* oldest first (utlist DL) */
  uint32_t n;
};

int hpl__dir_tombs_init(hpl__dir_server *s) {
  s->tombs = calloc(1, sizeof *s->tombs);
  return s->tombs ? 0 : HPL_ENOMEM;
}

static void tomb_free(struct hpl__dir_tombs *st, dir_tomb *t) {
  HASH_DEL(st->by_id, t);
  DL_DELETE(st->fifo, t);
  st->n--;
  free(t);
}

/* Drop expired tombstones (at most 64 a call: bounded work; the cap on
 * their number bounds the rest). */
static void tomb_expire(struct hpl__dir_tombs *st, uint64_t now) {
  for (int i = 0; i < 64 && st->fifo && now - st->fifo->at_ms >= HPL__DIR_TOMB_MS; i++)
    tomb_free(st, st->fifo);
}

/* Remember `id` as deleted at `at` (<= now). */
static void tomb_add_at(hpl__dir_server *s, const char *id, uint64_t now, uint64_t at) {
  struct hpl__dir_tombs *st = s->tombs;
  tomb_expire(st, now);
  dir_tomb *t;
  size_t n = strlen(id);
  HASH_FIND(hh, st->by_id, id, n, t);
  if (t) {
    if (at > t->at_ms) t->at_ms = at;
    return;
  }
  if (st->n >= HPL__DIR_TOMB_MAX) tomb_free(st, st->fifo);
  if (!(t = malloc(sizeof *t + n + 1))) return; /* no memory: not remembered */
  memcpy(t->id, id, n + 1);
  t->at_ms = at;
  HASH_ADD_KEYPTR(hh, st->by_id, t->id, n, t);
  DL_APPEND(st->fifo, t);
  st->n++;
  s->ctr.tombstones++;
}

void hpl__dir_tombs_add(hpl__dir_server *s, const char *id) {
  uint64_t now = hpl__now_ms();
  tomb_add_at(s, id, now, now);
}

void hpl__dir_tombs_add_aged(hpl__dir_server *s, const char *id, uint64_t age_ms) {
  uint64_t now = hpl__now_ms();
  if (age_ms >= HPL__DIR_TOMB_MS || age_ms >= now) return;
  tomb_add_at(s, id, now, now - age_ms);
}

uint64_t hpl__dir_tombs_at(hpl__dir_server *s, const char *id) {
  struct hpl__dir_tombs *st = s->tombs;
  if (!st->by_id) return 0;
  uint64_t now = hpl__now_ms();
  tomb_expire(st, now);
  dir_tomb *t;
  HASH_FIND(hh, st->by_id, id, strlen(id), t);
  return t && now - t->at_ms < HPL__DIR_TOMB_MS ? t->at_ms : 0;
}

int hpl__dir_tombs_has(hpl__dir_server *s, const char *id) {
  return hpl__dir_tombs_at(s, id) != 0;
}

void hpl__dir_tombs_remove(hpl__dir_server *s, const char *id) {
  struct hpl__dir_tombs *st = s->tombs;
  dir_tomb *t;
  if (!st->by_id) return;
  HASH_FIND(hh, st->by_id, id, strlen(id), t);
  if (t) tomb_free(st, t);
}

void hpl__dir_tombs_clear(hpl__dir_server *s) {
  while (s->tombs->fifo) tomb_free(s->tombs, s->tombs->fifo);
}

void hpl__dir_tombs_free(hpl__dir_server *s) {
  if (!s->tombs) return;
  hpl__dir_tombs_clear(s);
  free(s->tombs);
  s->tombs = NULL;
}
