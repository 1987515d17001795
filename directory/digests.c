/* digests.c - object digests at the directory, and corrupt reports (see
 * digests.h). */
#include "digests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "hoplite.h"
#include "log.h"

int hpl__dir_digests_take(hpl__dir_obj *o, uint32_t algo, const ProtobufCBinaryData *list,
                          const ProtobufCBinaryData *root, const uint8_t *inl, char *detail,
                          size_t dlen) {
  if (algo == HPL__DIGEST_OFF) { /* its maker has none (when none came before) */
    if (!o->dig) o->dig_none = 1;
    return 0;
  }
  if (!hpl__digest_algo_on((int)algo)) {
    snprintf(detail, dlen, "unknown digest algorithm %u for '%s'", algo, o->id);
    return HPL_EINVAL;
  }
  if (!o->has_size) {
    snprintf(detail, dlen, "digests of '%s' before its size", o->id);
    return HPL_EINVAL;
  }
  if (!list->len) { /* the origin's create: the digests follow as it writes */
    uint64_t n = hpl__digest_units(o->size);
    if (n > HPL__DIGEST_MAX_UNITS) { /* (the store makes none either) */
      if (!o->dig) o->dig_none = 1;
      return 0;
    }
    hpl__dir_dig *d = calloc(1, sizeof *d + n * HPL__DIGEST_LEN);
    if (!d) return HPL_ENOMEM;
    d->algo = algo;
    d->pending = 1;
    d->nunits = n;
    free(o->dig);
    o->dig = d;
    o->dig_none = 0;
    return 0;
  }
  int rc = hpl__dir_digests_check(o->size, algo, list, root, inl, detail, dlen);
  if (rc) return rc;
  uint64_t n = hpl__digest_units(o->size);
  hpl__dir_dig *d = calloc(1, sizeof *d + list->len);
  if (!d) return HPL_ENOMEM;
  d->algo = algo;
  d->nunits = n;
  d->known = n;
  memcpy(d->list, list->data, list->len);
  memcpy(d->root, root->data, HPL__DIGEST_LEN);
  free(o->dig);
  o->dig = d;
  o->dig_none = 0;
  return 0;
}

int hpl__dir_digests_check(uint64_t size, uint32_t algo, const ProtobufCBinaryData *list,
                           const ProtobufCBinaryData *root, const uint8_t *inl, char *detail,
                           size_t dlen) {
  if (algo == HPL__DIGEST_OFF) return 0;
  uint64_t n = hpl__digest_units(size);
  if (!hpl__digest_algo_on((int)algo) || n > HPL__DIGEST_MAX_UNITS ||
      list->len != n * HPL__DIGEST_LEN || root->len != HPL__DIGEST_LEN) {
    snprintf(detail, dlen, "digests (algorithm %u, %zu bytes) do not fit %llu bytes", algo,
             list->len, (unsigned long long)size);
    return HPL_EINVAL;
  }
  uint8_t r[HPL__DIGEST_LEN];
  hpl__digest_root((int)algo, list->data, n, r);
  if (!hpl__digest_equal(r, root->data)) {
    snprintf(detail, dlen, "digests: the root is not over the list");
    return HPL_EINVAL;
  }
  for (uint64_t u = 0; inl && u < n; u++) {
    if (!hpl__digest_check_unit((int)algo, inl, size, u, list->data)) {
      snprintf(detail, dlen, "inline bytes do not match their digest (unit %llu)",
               (unsigned long long)u);
      return HPL_EINVAL;
    }
  }
  return 0;
}

void hpl__dir_digests_fill(const hpl__dir_obj *o, uint32_t *algo, ProtobufCBinaryData *list,
                           ProtobufCBinaryData *root) {
  const hpl__dir_dig *d = o->dig;
  if (!d || d->conflict) return;
  *algo = d->algo;
  list->data = (uint8_t *)d->list;
  list->len = (size_t)(d->known * HPL__DIGEST_LEN);
  if (d->pending) return; /* the rest follows (DIGESTS) */
  root->data = (uint8_t *)d->root;
  root->len = HPL__DIGEST_LEN;
}

int hpl__dir_digests_none(const hpl__dir_obj *o) { return !o->dig && o->dig_none; }

void hpl__dir_digests_restart(hpl__dir_obj *o) {
  if (o->dig && o->dig->pending) o->dig->known = 0; /* the new bytes' follow from unit 0 */
}

void hpl__dir_digests_more(hpl__dir_server *s, hpl__dir_obj *o, const Hplpb__LocNote *m) {
  hpl__dir_dig *d = o->dig;
  uint64_t first = m->digest_first, cnt = m->digests.len / HPL__DIGEST_LEN;
  if (!d || !d->pending || m->digest_algo != d->algo || m->digests.len % HPL__DIGEST_LEN ||
      first != d->known || cnt > d->nunits - first || !cnt) {
    HPL__LOG_WARN("digests of '%s' [%llu, +%llu) do not follow the %llu known: ignored", o->id,
                  (unsigned long long)first, (unsigned long long)cnt,
                  (unsigned long long)(d ? d->known : 0));
    return;
  }
  memcpy(d->list + first * HPL__DIGEST_LEN, m->digests.data, m->digests.len);
  d->known += cnt;
  /* the copies being pulled now were told the digests known when their
   * sender was named: the rest reaches them as it comes */
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT;
  n.id = o->id;
  n.digest_algo = d->algo;
  n.digest_first = first;
  n.digests = m->digests;
  for (hpl__dir_loc *l = o->locs; l; l = l->next)
    if (!l->complete && !l->origin) hpl__dir_node_send(s, l->node, HPL__MSG_DIGESTS, 0, &n.base);
}

int hpl__dir_digests_complete(hpl__dir_server *s, hpl__dir_obj *o, const Hplpb__LocNote *m,
                              char *detail, size_t dlen) {
  uint64_t from = o->dig && o->dig->pending ? o->dig->known : UINT64_MAX;
  int rc = hpl__dir_digests_take(o, m->digest_algo, &m->digests, &m->digest_root, NULL, detail,
                                 dlen);
  hpl__dir_dig *d = o->dig;
  if (rc || from == UINT64_MAX || !d || d->pending || from > d->nunits) return rc;
  Hplpb__LocNote n = HPLPB__LOC_NOTE__INIT; /* the last units and the root */
  n.id = o->id;
  n.digest_algo = d->algo;
  n.digest_first = from;
  n.digests.data = d->list + from * HPL__DIGEST_LEN;
  n.digests.len = (size_t)((d->nunits - from) * HPL__DIGEST_LEN);
  n.digest_root.data = d->root;
  n.digest_root.len = HPL__DIGEST_LEN;
  for (hpl__dir_loc *l = o->locs; l; l = l->next)
    if (!l->complete && !l->origin) hpl__dir_node_send(s, l->node, HPL__MSG_DIGESTS, 0, &n.base);
  return 0;
}

typedef struct unlist_arg {
  hpl__dir_server *s;
  uint64_t bad;      /* the node whose copy is unlisted */
  uint64_t reporter; /* the receiver that reported it (answered by its ACQUIRE) */
} unlist_arg;

/* hpl__dtab_loc_unlist callback: a receiver pulling from the unlisted copy
 * moves off it at once (its bytes from there are suspect too). */
static void unlist_gone(hpl__dir_obj *o, uint64_t receiver, void *arg) {
  unlist_arg *a = arg;
  if (receiver == a->reporter) return;
  Hplpb__UpstreamNote u = HPLPB__UPSTREAM_NOTE__INIT;
  u.id = o->id;
  u.peer = a->bad;
  hpl__dir_node_send(a->s, receiver, HPL__MSG_UPSTREAM_GONE, 0, &u.base);
}

/* Node `bad`'s copy of o, reported by `reporter`, stops being named but
 * stays in the record: the node may still be receiving it for its own get,
 * and a delete must reach it (else it stays in that store's pool). Its
 * place in the chain goes to the reporter (whose ACQUIRE is answered next,
 * from the slot the bad copy's upstream has free now), and the bad copy's
 * own stream is told to ask again (regroup): it is then given an idle copy,
 * usually the chain's tail, instead of sharing its old sender's uplink with
 * the reporter (both then crawled, and the receivers behind them were
 * judged stragglers one after another). */
static void unlist(hpl__dir_server *s, hpl__dir_obj *o, uint64_t reporter, uint64_t bad) {
  hpl__dir_loc *l = hpl__dtab_loc(o, bad);
  if (!l || l->unlisted) return;
  unlist_arg a = {.s = s, .bad = bad, .reporter = reporter};
  Hplpb__UpstreamNote u = HPLPB__UPSTREAM_NOTE__INIT;
  u.id = o->id;
  u.peer = hpl__dtab_loc_unlist(&s->tab, o, bad, unlist_gone, &a); /* 0: not pulling */
  u.regroup = u.peer != 0;
  u.unlisted = 1; /* remembered there across a restart of this directory */
  hpl__dir_node_send(s, bad, HPL__MSG_UPSTREAM_GONE, 0, &u.base);
}

void hpl__dir_digests_corrupt(hpl__dir_server *s, hpl__dir_node *asker, hpl__dir_obj *o,
                              uint64_t bad, uint64_t unit) {
  s->ctr.corrupt_reports++;
  hpl__dir_node *n = hpl__dir_node_find(s, bad);
  if (n) n->corrupt_reports++;
  if (o->dig) {
    o->dig->bad_node = bad;
    o->dig->bad_unit = unit;
  }
  if (asker->id == bad)
    HPL__LOG_WARN("node %016llx reports that its own copy of '%s' failed its digest at unit "
                  "%llu when read back: that copy is no longer named (node reported %u times)",
                  (unsigned long long)bad, o->id, (unsigned long long)unit,
                  n ? n->corrupt_reports : 0);
  else
    HPL__LOG_WARN("node %016llx reports that node %016llx sent unit %llu of '%s' that does not "
                  "match its digest: that copy is no longer named (node reported %u times)",
                  (unsigned long long)asker->id, (unsigned long long)bad,
                  (unsigned long long)unit, o->id, n ? n->corrupt_reports : 0);
  hpl__dtab_release_upstream(o, asker->id);
  if (asker->id == bad) { /* the store drops that copy itself and pulls it again */
    hpl__dtab_loc_remove(&s->tab, o, bad);
  } else {
    unlist(s, o, asker->id, bad);
  }
  hpl__dtab_check_lost(&s->tab, o);
}

int hpl__dir_digests_held(hpl__dir_server *s, hpl__dir_obj *o, uint64_t node, uint32_t algo,
                          const ProtobufCBinaryData *list, const ProtobufCBinaryData *root) {
  if (algo == HPL__DIGEST_OFF && !o->dig) o->dig_none = 1; /* (all a restarted one can know) */
  if (algo == HPL__DIGEST_OFF || !list->len || o->is_inline || !o->has_size) return 0;
  char why[200];
  if (hpl__dir_digests_check(o->size, algo, list, root, NULL, why, sizeof why) != 0) {
    HPL__LOG_WARN("node %016llx re-reported '%s' with %s: ignored", (unsigned long long)node,
                  o->id, why);
    return 0;
  }
  hpl__dir_dig *d = o->dig;
  if (!d || d->pending) { /* none kept (this directory restarted): the first that fit */
    if (hpl__dir_digests_take(o, algo, list, root, NULL, why, sizeof why) != 0) return 0;
    o->dig->reported = 1;
    o->dig->from_node = node;
    s->ctr.held_digests++;
    return 0;
  }
  if (d->conflict || (d->algo == algo && hpl__digest_equal(d->root, root->data))) return 0;
  s->ctr.digest_conflicts++;
  if (!d->reported) { /* the origin's: that copy holds other bytes, or lies */
    HPL__LOG_WARN("node %016llx re-reported '%s' with digests its origin did not make: that "
                  "copy is not listed", (unsigned long long)node, o->id);
    hpl__dtab_loc_remove(&s->tab, o, node);
    return 1;
  }
  d->conflict = 1;
  d->conflict_node = node;
  HPL__LOG_WARN("nodes %016llx and %016llx re-reported '%s' with different digests: no copy of "
                "it can be verified, none is named", (unsigned long long)d->from_node,
                (unsigned long long)node, o->id);
  return 0;
}

int hpl__dir_digests_refused(const hpl__dir_obj *o, char *detail, size_t dlen) {
  if (!o->dig || !o->dig->conflict) return 0;
  snprintf(detail, dlen,
           "object '%s': nodes %016llx and %016llx reported copies with different digests after "
           "a directory restart; no copy can be verified",
           o->id, (unsigned long long)o->dig->from_node,
           (unsigned long long)o->dig->conflict_node);
  return 1;
}

int hpl__dir_digests_lost_detail(const hpl__dir_obj *o, char *detail, size_t dlen) {
  if (!o->dig || !o->dig->bad_node) return 0;
  snprintf(detail, dlen,
           "object '%s': no copy with the right bytes left (node %016llx sent unit %llu that "
           "does not match its digest)",
           o->id, (unsigned long long)o->dig->bad_node, (unsigned long long)o->dig->bad_unit);
  return 1;
}

int hpl__dir_digests_distrusted(uint64_t node, void *srv) {
  hpl__dir_node *n = hpl__dir_node_find(srv, node);
  return n && n->corrupt_reports >= HPL__DIR_CORRUPT_LAST_RESORT;
}
