/* ctext.c - the client library's text results (include/hoplite.h):
 * listing page by page, counters, the transfer record, a reduce's sources,
 * the cluster's status (lines, or JSON through cJSON and json.h). Each is
 * one NUL-terminated string, freed with hpl_free. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi.h"
#include "json.h"

/* ------------------------------------------------------------------ text results */

/* Growable text. */
typedef struct text {
  char *p;
  size_t len, cap;
} text;

static int text_addf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int text_addf(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if (t->p && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return 0;
    }
    size_t cap = (t->cap ? t->cap * 2 : 256) + (size_t)n;
    char *np = realloc(t->p, cap);
    if (!np) return -1;
    t->p = np;
    t->cap = cap;
  }
}

/* Appends line i of a reply; 0 or -1 (no memory). */
typedef int (*line_fn)(text *t, const ProtobufCMessage *rep, size_t i);

/* The one way list-style results are made: lines 0..n-1 of `rep`, rendered
 * by `line`, become one NUL-terminated string for *out (owned by the
 * caller, freed with hpl_free). Frees rep either way. */
static int text_result(hpl_client *c, ProtobufCMessage *rep, size_t n, line_fn line, char **out) {
  text t = {0};
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) rc = line(&t, rep, i);
  if (rc == 0 && !t.p) rc = text_addf(&t, "%s", "");
  protobuf_c_message_free_unpacked(rep, NULL);
  if (rc) {
    free(t.p);
    return hpl__cfail(c, HPL_ENOMEM, "out of memory");
  }
  *out = t.p;
  return 0;
}

static int counter_line(text *t, const ProtobufCMessage *rep, size_t i) {
  const Hplpb__Counter *k = ((const Hplpb__CountersRep *)rep)->counters[i];
  return text_addf(t, "%s %llu\n", k->name, (unsigned long long)k->value);
}

static int transfer_line(text *t, const ProtobufCMessage *rep, size_t i) {
  static const char *kinds[] = {"?", "assign", "done", "remove", "node-gone", "delete", "reset"};
  const Hplpb__Transfer *x = ((const Hplpb__TransfersRep *)rep)->transfers[i];
  return text_addf(t, "%llu %llu %s %016llx %016llx %s\n", (unsigned long long)x->seq,
                   (unsigned long long)x->t_us, x->kind < 7 ? kinds[x->kind] : "?",
                   (unsigned long long)x->receiver, (unsigned long long)x->sender,
                   x->id && *x->id ? x->id : "-");
}

static int source_line(text *t, const ProtobufCMessage *rep, size_t i) {
  return text_addf(t, "%s\n", ((const Hplpb__ReduceInfoRep *)rep)->sources[i]);
}

/* ------------------------------------------------------------------ listing */

/* Ids sort as strcmp() orders them (unsigned bytes), as the directory's
 * index does. */
static int info_cmp(const void *a, const void *b) {
  return strcmp((*(const Hplpb__ObjInfo *const *)a)->id, (*(const Hplpb__ObjInfo *const *)b)->id);
}

/* One page of the listing (after `after`, NULL: from the start; at most
 * `max` objects, 0: the directory's page size), appended to *t as text
 * lines; *next is the cursor for the next page (malloc'd) or NULL after
 * the last. A directory older than paging ignores after and limit and
 * sends everything in id-less order with no cursor: the page is cut to
 * what the request asked for here (after `after`, under `prefix`, sorted,
 * at most `max`), so paging works against it too, if slowly. */
static int list_page(hpl_client *c, const char *prefix, const char *after, size_t max,
                     int64_t timeout_ms, text *t, char **next) {
  Hplpb__ListReq r = HPLPB__LIST_REQ__INIT;
  r.prefix = (char *)prefix;
  r.after = (char *)(after ? after : "");
  r.limit = max > UINT32_MAX ? UINT32_MAX : (uint32_t)max;
  r.timeout_ms = timeout_ms;
  Hplpb__ListRep *rep = NULL;
  int rc = hpl__ccall(c, HPL__MSG_LIST, &r.base, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  const Hplpb__ObjInfo **v = malloc((rep->n_objects ? rep->n_objects : 1) * sizeof *v);
  size_t nv = 0, plen = strlen(prefix);
  int sorted = 1;
  for (size_t i = 0; v && i < rep->n_objects; i++) {
    const Hplpb__ObjInfo *o = rep->objects[i];
    if (strncmp(o->id, prefix, plen) != 0 || (after && strcmp(o->id, after) <= 0)) continue;
    if (nv && strcmp(v[nv - 1]->id, o->id) >= 0) sorted = 0;
    v[nv++] = o;
  }
  if (!sorted) qsort(v, nv, sizeof *v, info_cmp);
  const char *cursor = rep->next ? rep->next : "";
  if (max && nv > max) { /* a directory that ignored the limit */
    nv = max;
    cursor = v[max - 1]->id;
  }
  if (!v)
    rc = hpl__cfail(c, HPL_ENOMEM, "out of memory");
  else if (*cursor && after && strcmp(cursor, after) <= 0)
    rc = hpl__cfail(c, HPL_EPROTO, "the directory's listing cursor '%s' does not move past '%s'",
                    cursor, after);
  for (size_t i = 0; rc == 0 && i < nv; i++)
    if (text_addf(t, "%s\t%llu\t%u\t%u\t%d\n", v[i]->id, (unsigned long long)v[i]->size,
                  v[i]->copies, v[i]->complete, v[i]->inline_ ? 1 : 0) != 0)
      rc = hpl__cfail(c, HPL_ENOMEM, "out of memory");
  if (rc == 0 && !t->p && text_addf(t, "%s", "") != 0)
    rc = hpl__cfail(c, HPL_ENOMEM, "out of memory");
  *next = NULL;
  if (rc == 0 && *cursor && !(*next = strdup(cursor)))
    rc = hpl__cfail(c, HPL_ENOMEM, "out of memory");
  free(v);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return rc;
}

/* A prefix or cursor: NULL or "" (none), else like an id. */
static int list_arg_ok(const char *s) { return !s || !*s || hpl__id_valid(s); }

int hpl_list_page(hpl_client *c, const char *prefix, const char *after, size_t max,
                  int64_t timeout_ms, char **out, char **next) {
  if (!c) return HPL_EINVAL;
  if (!out || !next) return hpl__cfail(c, HPL_EINVAL, "out and next must not be NULL");
  if (!list_arg_ok(prefix) || !list_arg_ok(after))
    return hpl__cfail(c, HPL_EINVAL,
                      "prefix and after must be like ids (at most %d bytes, no control "
                      "characters)",
                      HPL_ID_MAX);
  text t = {0};
  char *nx;
  int rc = list_page(c, prefix ? prefix : "", after && *after ? after : NULL, max, timeout_ms, &t,
                     &nx);
  if (rc) {
    free(t.p);
    return rc;
  }
  *out = t.p;
  *next = nx;
  return 0;
}

int hpl_list(hpl_client *c, const char *prefix, int64_t timeout_ms, char **out) {
  if (!c) return HPL_EINVAL;
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  text t = {0};
  char *after = NULL;
  int rc;
  /* the timeout is for the whole listing, not for each page */
  uint64_t deadline = hpl__deadline_ms(timeout_ms);
  do {
    char *nx;
    int64_t left = timeout_ms < 0 ? -1 : hpl__ms_left(deadline);
    if (after && left == 0) /* the first page always goes */
      rc = hpl__cfail(c, HPL_ETIMEDOUT, "the listing took longer than %lld ms",
                      (long long)timeout_ms);
    else
      rc = list_page(c, prefix ? prefix : "", after, 0, left, &t, &nx);
    free(after);
    after = rc ? NULL : nx;
  } while (after);
  if (rc) {
    free(t.p);
    return rc;
  }
  *out = t.p;
  return 0;
}

/* COUNTERS: all of them (name NULL), or the one named (the reply may still
 * hold them all, from a server that does not know the field). */
static int counters_call(hpl_client *c, const char *name, int64_t timeout_ms,
                         Hplpb__CountersRep **rep) {
  Hplpb__CountersReq r = HPLPB__COUNTERS_REQ__INIT;
  r.timeout_ms = timeout_ms;
  r.name = (char *)(name ? name : "");
  return hpl__ccall(c, HPL__MSG_COUNTERS, &r.base, timeout_ms,
              (ProtobufCMessage **)rep);
}

int hpl_counters(hpl_client *c, int64_t timeout_ms, char **out) {
  if (!c) return HPL_EINVAL;
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  Hplpb__CountersRep *rep = NULL;
  int rc = counters_call(c, NULL, timeout_ms, &rep);
  return rc ? rc : text_result(c, &rep->base, rep->n_counters, counter_line, out);
}

int hpl_counter(hpl_client *c, const char *name, int64_t timeout_ms, uint64_t *value) {
  if (!c || !name) return c ? hpl__cfail(c, HPL_EINVAL, "name is NULL") : HPL_EINVAL;
  Hplpb__CountersRep *rep = NULL;
  int rc = counters_call(c, name, timeout_ms, &rep);
  if (rc) return rc;
  rc = hpl__cfail(c, HPL_ENOTFOUND, "no counter '%s'", name);
  for (size_t i = 0; i < rep->n_counters; i++)
    if (strcmp(rep->counters[i]->name, name) == 0) {
      if (value) *value = rep->counters[i]->value;
      rc = 0;
      break;
    }
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  return rc;
}

int hpl_transfers(hpl_client *c, uint64_t since, int64_t timeout_ms, char **out,
                  uint64_t *next_since) {
  if (!c) return HPL_EINVAL;
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  Hplpb__TransfersReq r = HPLPB__TRANSFERS_REQ__INIT;
  r.since = since;
  r.timeout_ms = timeout_ms;
  Hplpb__TransfersRep *rep = NULL;
  int rc = hpl__ccall(c, HPL__MSG_TRANSFERS, &r.base, timeout_ms,
                (ProtobufCMessage **)&rep);
  if (rc) return rc;
  uint64_t next = rep->next;
  rc = text_result(c, &rep->base, rep->n_transfers, transfer_line, out);
  if (rc == 0 && next_since) *next_since = next;
  return rc;
}

int hpl_reduce_sources(hpl_client *c, const char *target, int64_t timeout_ms, char **out) {
  HPL__CHECK_ID(c, target);
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  Hplpb__ReduceInfoRep *rep = NULL;
  int rc = hpl__cid_call(c, HPL__MSG_REDUCE_INFO, target, timeout_ms, (ProtobufCMessage **)&rep);
  return rc ? rc : text_result(c, &rep->base, rep->n_sources, source_line, out);
}

/* ------------------------------------------------------------------ status */

/* Ids, names and other free text of the JSON form: bytes, as json.h
 * writes them (\udcXX for a byte outside UTF-8, as the CLI's --json). */
#define BYTES HPL__JSON_SURROGATE

/* o once all its members went in (ok), else NULL (o freed). */
static cJSON *built(cJSON *o, int ok) {
  if (ok) return o;
  cJSON_Delete(o);
  return NULL;
}

static cJSON *status_node(const Hplpb__NodeStatus *n) {
  static const char *const stat_keys[] = {"pool_used",  "pool_capacity",  "objects",
                                          "bytes_sent", "bytes_received", "clients"};
  const uint64_t stats[] = {n->pool_used,  n->pool_capacity,  n->objects,
                            n->bytes_sent, n->bytes_received, n->clients};
  cJSON *o = cJSON_CreateObject();
  int ok = o && hpl__json_add_hex(o, "id", n->id) &&
           hpl__json_add_bytes(o, "name", n->name, BYTES) &&
           hpl__json_add_bytes(o, "addr", n->addr, BYTES) &&
           hpl__json_add_u64(o, "data_port", n->data_port) &&
           hpl__json_add_bytes(o, "state", n->state, BYTES) &&
           hpl__json_add_u64(o, "heartbeat_age_ms", n->heartbeat_age_ms) &&
           hpl__json_add_u64(o, "rtt_us", n->rtt_us);
  for (size_t i = 0; ok && i < 6; i++) /* null: the node sent no statistics */
    ok = (n->stats ? hpl__json_add_u64(o, stat_keys[i], stats[i])
                   : cJSON_AddNullToObject(o, stat_keys[i])) != NULL;
  if (ok && n->why && *n->why) ok = hpl__json_add_bytes(o, "why", n->why, BYTES) != NULL;
  return built(o, ok);
}

static cJSON *status_transfer(const Hplpb__TransferStatus *x) {
  cJSON *o = cJSON_CreateObject();
  int ok = o && hpl__json_add_bytes(o, "id", x->id, BYTES) &&
           hpl__json_add_hex(o, "from", x->sender) && hpl__json_add_hex(o, "to", x->receiver) &&
           hpl__json_add_u64(o, "held", x->held) && hpl__json_add_u64(o, "size", x->size) &&
           hpl__json_add_u64(o, "rate", x->rate) && hpl__json_add_u64(o, "age_ms", x->age_ms);
  return built(o, ok);
}

static cJSON *status_reduce(const Hplpb__ReduceStatus *x) {
  cJSON *o = cJSON_CreateObject();
  int ok = o && hpl__json_add_bytes(o, "target", x->target, BYTES) &&
           hpl__json_add_hex(o, "sink", x->sink) && hpl__json_add_u64(o, "joined", x->joined) &&
           hpl__json_add_u64(o, "needed", x->needed) &&
           hpl__json_add_u64(o, "sources", x->sources) &&
           hpl__json_add_u64(o, "elapsed_ms", x->elapsed_ms) &&
           hpl__json_add_u64(o, "size", x->size);
  return built(o, ok);
}

/* Add item to array a; 0 when item is NULL (no memory). */
static int add_to(cJSON *a, cJSON *item) { return item && cJSON_AddItemToArray(a, item); }

/* The leader lease of a directory under --etcd (r->term != 0). */
static cJSON *status_directory(const Hplpb__StatusRep *r) {
  cJSON *o = cJSON_CreateObject(), *sb = NULL;
  int ok = o && hpl__json_add_bytes(o, "leader", r->leader, BYTES) &&
           hpl__json_add_u64(o, "term", r->term) &&
           hpl__json_add_u64(o, "lease_left_ms", r->lease_left_ms) &&
           hpl__json_add_u64(o, "renew_last_us", r->renew_last_us) &&
           hpl__json_add_bytes(o, "etcd", r->etcd_endpoint, BYTES) &&
           (sb = cJSON_AddArrayToObject(o, "standbys"));
  for (size_t i = 0; ok && i < r->n_standbys; i++)
    ok = add_to(sb, cJSON_CreateString(r->standbys[i] ? r->standbys[i] : ""));
  return built(o, ok);
}

/* The status as one JSON object on one line (malloc'd), or NULL without
 * memory. */
static char *status_json(const Hplpb__StatusRep *r) {
  cJSON *o = cJSON_CreateObject(), *nodes = NULL, *xfers = NULL, *reduces = NULL;
  int ok = o && hpl__json_add_hex(o, "instance", r->instance) &&
           hpl__json_add_u64(o, "uptime_ms", r->uptime_ms) &&
           hpl__json_add_u64(o, "heartbeat_ms", r->heartbeat_ms) &&
           hpl__json_add_u64(o, "objects", r->objects) &&
           hpl__json_add_u64(o, "inline_bytes", r->inline_bytes) &&
           hpl__json_add_u64(o, "nodes_total", r->nodes_total) &&
           hpl__json_add_u64(o, "transfers_total", r->transfers_total) &&
           hpl__json_add_u64(o, "reduces_total", r->reduces_total) &&
           (nodes = cJSON_AddArrayToObject(o, "nodes")) &&
           (xfers = cJSON_AddArrayToObject(o, "transfers")) &&
           (reduces = cJSON_AddArrayToObject(o, "reduces"));
  for (size_t i = 0; ok && i < r->n_nodes; i++) ok = add_to(nodes, status_node(r->nodes[i]));
  for (size_t i = 0; ok && i < r->n_transfers; i++)
    ok = add_to(xfers, status_transfer(r->transfers[i]));
  for (size_t i = 0; ok && i < r->n_reduces; i++)
    ok = add_to(reduces, status_reduce(r->reduces[i]));
  if (ok && r->term) {
    cJSON *d = status_directory(r);
    ok = d && cJSON_AddItemToObject(o, "directory", d);
    if (!ok) cJSON_Delete(d);
  }
  char *line = ok ? hpl__json_line(o) : NULL;
  cJSON_Delete(o);
  return line;
}

/* A node's name or a free-text field as the last word of a line: "-" when
 * empty; newlines (never in ids) would break the lines, so they go as '?'. */
static int last_word(text *t, const char *v) {
  if (!v || !*v) return text_addf(t, "-\n");
  for (const char *p = v; *p; p++)
    if (text_addf(t, "%c", *p == '\n' || *p == '\r' ? '?' : *p)) return -1;
  return text_addf(t, "\n");
}

/* An address or URL as one word of a line: "-" when empty or when it
 * holds a space, a comma or a control character (never in the addresses
 * and URLs a directory is configured with). */
static const char *word(const char *v) {
  if (!v || !*v) return "-";
  for (const char *p = v; *p; p++)
    if ((unsigned char)*p <= ' ' || *p == ',' || *p == 0x7f) return "-";
  return v;
}

static int status_lines(text *t, const Hplpb__StatusRep *r) {
  int rc = text_addf(t, "cluster %016llx %llu %u %llu %llu %u %u %u\n",
                     (unsigned long long)r->instance, (unsigned long long)r->uptime_ms,
                     r->heartbeat_ms, (unsigned long long)r->objects,
                     (unsigned long long)r->inline_bytes, r->nodes_total, r->transfers_total,
                     r->reduces_total);
  if (rc == 0 && r->term) { /* a leader under a lease (--etcd) */
    rc = text_addf(t, "directory %llu %llu %llu %s %s ", (unsigned long long)r->term,
                   (unsigned long long)r->lease_left_ms, (unsigned long long)r->renew_last_us,
                   word(r->leader), word(r->etcd_endpoint));
    for (size_t i = 0; rc == 0 && i < r->n_standbys; i++)
      rc = text_addf(t, "%s%s", i ? "," : "", word(r->standbys[i]));
    if (rc == 0) rc = text_addf(t, "%s\n", r->n_standbys ? "" : "-");
  }
  for (size_t i = 0; rc == 0 && i < r->n_nodes; i++) {
    const Hplpb__NodeStatus *n = r->nodes[i];
    char st[160] = "- - - - - -";
    if (n->stats)
      snprintf(st, sizeof st, "%llu %llu %llu %llu %llu %u", (unsigned long long)n->pool_used,
               (unsigned long long)n->pool_capacity, (unsigned long long)n->objects,
               (unsigned long long)n->bytes_sent, (unsigned long long)n->bytes_received,
               n->clients);
    rc = text_addf(t, "node %016llx %s %llu %s %s:%u ", (unsigned long long)n->id, n->state,
                   (unsigned long long)n->heartbeat_age_ms, st, *n->addr ? n->addr : "-",
                   n->data_port);
    if (rc == 0) rc = last_word(t, n->name);
  }
  for (size_t i = 0; rc == 0 && i < r->n_transfers; i++) {
    const Hplpb__TransferStatus *x = r->transfers[i];
    rc = text_addf(t, "transfer %016llx %016llx %llu %llu %llu %llu %s\n",
                   (unsigned long long)x->receiver, (unsigned long long)x->sender,
                   (unsigned long long)x->held, (unsigned long long)x->size,
                   (unsigned long long)x->rate, (unsigned long long)x->age_ms, x->id);
  }
  for (size_t i = 0; rc == 0 && i < r->n_reduces; i++) {
    const Hplpb__ReduceStatus *x = r->reduces[i];
    rc = text_addf(t, "reduce %016llx %u %u %u %llu %llu %s\n", (unsigned long long)x->sink,
                   x->joined, x->needed, x->sources, (unsigned long long)x->elapsed_ms,
                   (unsigned long long)x->size, x->target);
  }
  return rc;
}

int hpl_status(hpl_client *c, int format, int64_t timeout_ms, char **out) {
  if (!c) return HPL_EINVAL;
  if (!out) return hpl__cfail(c, HPL_EINVAL, "out must not be NULL");
  if (format != HPL_STATUS_TEXT && format != HPL_STATUS_JSON)
    return hpl__cfail(c, HPL_EINVAL, "unknown status format %d", format);
  Hplpb__StatusReq r = HPLPB__STATUS_REQ__INIT;
  r.timeout_ms = timeout_ms;
  Hplpb__StatusRep *rep = NULL;
  int rc = hpl__ccall(c, HPL__MSG_STATUS, &r.base, timeout_ms, (ProtobufCMessage **)&rep);
  if (rc) return rc;
  text t = {0};
  if (format == HPL_STATUS_JSON)
    rc = (t.p = status_json(rep)) ? 0 : -1;
  else
    rc = status_lines(&t, rep);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  if (rc) {
    free(t.p);
    return hpl__cfail(c, HPL_ENOMEM, "out of memory");
  }
  *out = t.p;
  return 0;
}
