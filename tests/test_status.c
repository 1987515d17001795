/* test_status.c - `hoplite status` (hpl_status) against a known cluster of
 * real processes: per-node liveness, pool use and object counts as put, a
 * killed store shown dead, a paced transfer shown in flight with its
 * progress, sender, receiver and rate (and hpl_held_bytes on the receiver),
 * a reduce waiting for a missing source shown running, and the JSON form
 * read back by /usr/bin/python3's json module. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1024ull * 1024)

/* Heartbeats every 100 ms: what they carry shows up quickly. */
#define DIR_ARGS "--heartbeat-ms 100"

/* ------------------------------------------------------------------ a snapshot */

typedef struct ts_node {
  uint64_t id, age;
  char state[16], name[64], addr[80];
  int stats;
  uint64_t used, cap, objs, sent, recv;
  unsigned clients;
} ts_node;

typedef struct ts_xfer {
  uint64_t to, from, held, size, rate, age;
  char id[HPL_ID_MAX + 1];
} ts_xfer;

typedef struct ts_reduce {
  uint64_t sink, elapsed, size;
  unsigned joined, needed, sources;
  char target[HPL_ID_MAX + 1];
} ts_reduce;

typedef struct ts_status {
  uint64_t instance, uptime, hb_ms, objects, inline_bytes;
  unsigned nodes_total, xfers_total, reduces_total;
  ts_node n[16];
  size_t nn;
  ts_xfer x[64];
  size_t nx;
  ts_reduce r[16];
  size_t nr;
} ts_status;

/* hpl_status's text form, every line checked against the documented
 * layout (hoplite.h). */
static void snapshot(hpl_client *c, ts_status *st) {
  char *text;
  int rc = hpl_status(c, HPL_STATUS_TEXT, th_ms(5000), &text);
  if (rc) fail_msg("status: %s (%s)", hpl_strerror(rc), hpl_errdetail(c));
  memset(st, 0, sizeof *st);
  int clusters = 0;
  for (char *line = text, *end; *line; line = end + 1) {
    end = strchr(line, '\n');
    assert_non_null(end);
    *end = 0;
    int off = 0;
    if (!strncmp(line, "cluster ", 8)) {
      unsigned long long inst, up, hb, objs, inl;
      assert_int_equal(sscanf(line + 8, "%llx %llu %llu %llu %llu %u %u %u%n", &inst, &up, &hb,
                              &objs, &inl, &st->nodes_total, &st->xfers_total,
                              &st->reduces_total, &off),
                       8);
      assert_int_equal(line[8 + off], 0);
      st->instance = inst, st->uptime = up, st->hb_ms = hb, st->objects = objs;
      st->inline_bytes = inl;
      clusters++;
    } else if (!strncmp(line, "node ", 5)) {
      assert_true(st->nn < 16);
      ts_node *n = &st->n[st->nn++];
      unsigned long long id, age;
      char f[6][24];
      if (sscanf(line + 5, "%llx %15s %llu %23s %23s %23s %23s %23s %23s %79s %n", &id, n->state,
                 &age, f[0], f[1], f[2], f[3], f[4], f[5], n->addr, &off) != 10)
        fail_msg("bad node line '%s'", line);
      snprintf(n->name, sizeof n->name, "%s", line + 5 + off);
      n->id = id, n->age = age;
      n->stats = strcmp(f[0], "-") != 0;
      for (int i = 0; i < 6; i++) /* all six known, or none */
        assert_int_equal(strcmp(f[i], "-") != 0, n->stats);
      n->used = strtoull(f[0], NULL, 10), n->cap = strtoull(f[1], NULL, 10);
      n->objs = strtoull(f[2], NULL, 10), n->sent = strtoull(f[3], NULL, 10);
      n->recv = strtoull(f[4], NULL, 10), n->clients = (unsigned)strtoul(f[5], NULL, 10);
    } else if (!strncmp(line, "transfer ", 9)) {
      assert_true(st->nx < 64);
      ts_xfer *x = &st->x[st->nx++];
      unsigned long long to, from, held, size, rate, age;
      if (sscanf(line + 9, "%llx %llx %llu %llu %llu %llu %n", &to, &from, &held, &size, &rate,
                 &age, &off) != 6)
        fail_msg("bad transfer line '%s'", line);
      x->to = to, x->from = from, x->held = held, x->size = size, x->rate = rate, x->age = age;
      snprintf(x->id, sizeof x->id, "%s", line + 9 + off);
    } else if (!strncmp(line, "reduce ", 7)) {
      assert_true(st->nr < 16);
      ts_reduce *r = &st->r[st->nr++];
      unsigned long long sink, el, size;
      if (sscanf(line + 7, "%llx %u %u %u %llu %llu %n", &sink, &r->joined, &r->needed,
                 &r->sources, &el, &size, &off) != 6)
        fail_msg("bad reduce line '%s'", line);
      r->sink = sink, r->elapsed = el, r->size = size;
      snprintf(r->target, sizeof r->target, "%s", line + 7 + off);
    } else {
      fail_msg("unknown status line '%s'", line);
    }
  }
  assert_int_equal(clusters, 1);
  hpl_free(text);
}

static const ts_node *node_named(const ts_status *st, const char *name) {
  for (size_t i = 0; i < st->nn; i++)
    if (!strcmp(st->n[i].name, name)) return &st->n[i];
  return NULL;
}

static const ts_xfer *xfer_of(const ts_status *st, const char *id) {
  for (size_t i = 0; i < st->nx; i++)
    if (!strcmp(st->x[i].id, id)) return &st->x[i];
  return NULL;
}

static const ts_reduce *reduce_of(const ts_status *st, const char *target) {
  for (size_t i = 0; i < st->nr; i++)
    if (!strcmp(st->r[i].target, target)) return &st->r[i];
  return NULL;
}

/* Snapshots until ok(st, arg) holds; fails with `what` after `ms`. */
static void wait_status(hpl_client *c, ts_status *st, int (*ok)(const ts_status *, void *),
                        void *arg, int64_t ms, const char *what) {
  uint64_t deadline = hpl__deadline_ms(th_ms(ms));
  for (;;) {
    snapshot(c, st);
    if (ok(st, arg)) return;
    if (hpl__ms_left(deadline) <= 0) fail_msg("status never showed %s in %lld ms", what,
                                              (long long)th_ms(ms));
    th_sleep_ms(50);
  }
}

static int add(hpl__lc *lc, const char *args) {
  char err[512], full[512];
  snprintf(full, sizeof full, "--memory 64M %s", args ? args : "");
  int i = hpl__lc_add_store(lc, full, err, sizeof err);
  if (i < 0) fail_msg("add store: %s", err);
  return i;
}

/* ------------------------------------------------------------------ nodes */

typedef struct want_objs {
  uint64_t objs[3];
  uint64_t used[3]; /* the stores' own pool_used counters */
} want_objs;

static int objs_match(const ts_status *st, void *arg) {
  const want_objs *w = arg;
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "node-%d", i);
    const ts_node *n = node_named(st, name);
    if (!n || !n->stats || n->objs != w->objs[i] || n->used != w->used[i]) return 0;
  }
  return 1;
}

static int node2_dead(const ts_status *st, void *arg) {
  (void)arg;
  const ts_node *n = node_named(st, "node-2");
  return n && !strcmp(n->state, "dead");
}

/* Three stores, objects put on known nodes: each node's object count and
 * pool use as its store counts them, the directory's totals; a store
 * killed shows as dead, the others stay alive. */
static void test_nodes(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(3, 64 * MB, DIR_ARGS, NULL);
  hpl_client *cs[3] = {th_connect(lc, 0), th_connect(lc, 1), th_connect(lc, 2)};
  th_put_pattern(cs[0], "st/a0", 3 * MB, 1);
  th_put_pattern(cs[0], "st/a1", 3 * MB, 2);
  th_put_pattern(cs[0], "st/a2", 1 * MB, 3);
  th_put_pattern(cs[1], "st/b0", 2 * MB, 4);
  th_put_pattern(cs[1], "st/b1", 100, 5); /* inline: the directory holds its bytes too */
  want_objs w = {.objs = {3, 2, 0}};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(th_counter(cs[i], "objects"), w.objs[i]);
    w.used[i] = th_counter(cs[i], "pool_used");
  }
  assert_true(w.used[0] >= 7 * MB);
  ts_status st;
  wait_status(cs[2], &st, objs_match, &w, 3000, "the objects put");
  assert_int_equal(st.nodes_total, 3);
  assert_int_equal(st.nn, 3);
  assert_int_equal(st.objects, 5);
  assert_int_equal(st.inline_bytes, 100);
  assert_int_equal(st.hb_ms, 100);
  assert_true(st.uptime > 0 && st.uptime < (uint64_t)th_ms(60000));
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "node-%d", i);
    const ts_node *n = node_named(&st, name);
    assert_non_null(n);
    assert_string_equal(n->state, "alive");
    assert_int_equal(n->id, th_node_id(cs[i]));
    assert_int_equal(n->cap, 64 * MB);
    assert_true(n->age < (uint64_t)th_ms(1000));
    assert_int_equal(n->sent, 0);
    assert_int_equal(n->clients, 1); /* our own handle */
    assert_true(strncmp(n->addr, "127.0.0.1:", 10) == 0);
  }
  assert_int_equal(st.nx, 0);
  assert_int_equal(st.nr, 0);
  uint64_t instance = st.instance;
  /* node 2 killed: its connection closes, the directory declares it dead */
  uint64_t id2 = th_node_id(cs[2]);
  hpl_close(cs[2]);
  assert_int_equal(hpl__lc_signal(lc, 2, SIGKILL), 0);
  wait_status(cs[0], &st, node2_dead, NULL, 5000, "node-2 dead");
  const ts_node *n2 = node_named(&st, "node-2");
  assert_int_equal(n2->id, id2);
  assert_false(n2->stats);
  assert_true(n2->age < (uint64_t)th_ms(5000));
  assert_string_equal(node_named(&st, "node-0")->state, "alive");
  assert_string_equal(node_named(&st, "node-1")->state, "alive");
  assert_int_equal(st.nodes_total, 3);
  assert_int_equal(st.instance, instance);
  hpl_close(cs[0]);
  hpl_close(cs[1]);
  th_stop(lc, 0);
}

/* ------------------------------------------------------------------ transfers */

typedef struct want_xfer {
  const char *id;
  uint64_t size;
} want_xfer;

static int xfer_midway(const ts_status *st, void *arg) {
  const want_xfer *w = arg;
  const ts_xfer *x = xfer_of(st, w->id);
  /* 1 MiB in (a quarter of a second at the paced rate): the rate is no
   * longer the first burst's bytes over a few milliseconds */
  return x && x->held >= (1u << 20) && x->held < w->size && x->rate > 0;
}

static int xfer_gone(const ts_status *st, void *arg) {
  return xfer_of(st, ((const want_xfer *)arg)->id) == NULL && st->xfers_total == 0;
}

/* A pull paced to 4 MB/s by the sender: status shows it in flight, from
 * the sender to the receiver, part of the bytes held, at about the paced
 * rate; the receiver's store says the same through hpl_held_bytes; once
 * the get is done it is gone from the list. */
static void test_transfer(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(0, 0, DIR_ARGS, NULL);
  int a = add(lc, "--faults slow_send=4M,prefix=slow/");
  int b = add(lc, NULL);
  hpl_client *A = th_connect(lc, a), *B = th_connect(lc, b);
  const uint64_t size = 8 * MB;
  th_put_pattern(A, "slow/x", size, 7);
  uint64_t held = 1, total = 1;
  assert_int_equal(hpl_held_bytes(B, "slow/x", th_ms(2000), &held, &total), 0);
  assert_int_equal(held, 0); /* nothing there yet */
  assert_int_equal(total, 0);
  assert_int_equal(hpl_held_bytes(A, "slow/x", th_ms(2000), &held, &total), 0);
  assert_int_equal(held, size); /* complete at the origin */
  assert_int_equal(total, size);
  th_getter g = {.c = B, .id = "slow/x", .timeout = th_ms(30000), .size = size,
                 .want = th_pattern_sum(size, 7)};
  th_get_start(&g);
  want_xfer w = {"slow/x", size};
  ts_status st;
  wait_status(A, &st, xfer_midway, &w, 5000, "the transfer midway");
  const ts_xfer *x = xfer_of(&st, "slow/x");
  assert_int_equal(x->from, th_node_id(A));
  assert_int_equal(x->to, th_node_id(B));
  assert_int_equal(x->size, size);
  assert_true(x->rate < 12000000); /* paced at 4 MB/s; no more than 3x that */
  assert_true(st.xfers_total >= 1);
  assert_int_equal(hpl_held_bytes(B, "slow/x", th_ms(2000), &held, &total), 0);
  assert_int_equal(total, size);
  assert_true(held > 0 && held < size);
  th_get_join(&g);
  assert_int_equal(g.rc, 0);
  assert_true(g.ok);
  wait_status(A, &st, xfer_gone, &w, 3000, "the transfer gone");
  const ts_node *nb = NULL;
  for (size_t i = 0; i < st.nn; i++)
    if (st.n[i].id == th_node_id(B)) nb = &st.n[i];
  assert_non_null(nb);
  assert_int_equal(nb->recv, size);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* ------------------------------------------------------------------ reduces */

/* A target id that needs escaping in JSON: a quote, a backslash, a byte
 * that is not UTF-8. */
static const char odd_target[] = "st/sum\"\\\xff";

static int reduce_running(const ts_status *st, void *arg) {
  const ts_reduce *r = reduce_of(st, arg);
  for (size_t i = 0; i < st->nn; i++) /* and every node heard from */
    if (!st->n[i].stats || st->n[i].objs < 1) return 0;
  return r && r->joined == 2;
}

static int reduce_over(const ts_status *st, void *arg) {
  return reduce_of(st, arg) == NULL && st->reduces_total == 0;
}

/* What /usr/bin/python3 reads from the JSON form: the line it prints. */
static void python_reads(const char *json, const char *script, char *out, size_t len) {
  char path[] = "/tmp/hpl-status-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  close(fd);
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c '%s' < %s", script, path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  if (!fgets(out, (int)len, p)) out[0] = 0;
  int rc = pclose(p);
  unlink(path);
  if (rc != 0) fail_msg("python3 could not read the JSON (exit %d): %s", rc, json);
  out[strcspn(out, "\n")] = 0;
}

/* A reduce of three sources of which two exist waits for the third:
 * status shows it running at its sink with 2 of 3 joined, also in the JSON
 * form (its odd target read back exactly); once the third is put it
 * finishes and leaves the list. */
static void test_reduce_and_json(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, DIR_ARGS, NULL);
  hpl_client *cs[2] = {th_connect(lc, 0), th_connect(lc, 1)};
  const uint64_t size = 1 * MB; /* above the inline limit: a tree of stores */
  th_put_pattern(cs[0], "st/r0", size, 0);
  th_put_pattern(cs[1], "st/r1", size, 0);
  const char *src[] = {"st/r0", "st/r1", "st/r2"};
  assert_int_equal(hpl_reduce(cs[0], odd_target, src, 3, 0, HPL_OP_MAX, HPL_DT_U8, th_ms(5000)),
                   0);
  ts_status st;
  wait_status(cs[1], &st, reduce_running, (void *)odd_target, 3000, "the reduce running");
  const ts_reduce *r = reduce_of(&st, odd_target);
  assert_int_equal(r->sink, th_node_id(cs[0]));
  assert_int_equal(r->needed, 3);
  assert_int_equal(r->sources, 3);
  assert_int_equal(r->size, size);
  assert_true(r->elapsed < (uint64_t)th_ms(10000));
  assert_int_equal(st.reduces_total, 1);
  /* the same in JSON */
  char *json;
  assert_int_equal(hpl_status(cs[1], HPL_STATUS_JSON, th_ms(5000), &json), 0);
  assert_non_null(strchr(json, '\n'));
  assert_int_equal(strchr(json, '\n')[1], 0); /* one line */
  char got[1024];
  python_reads(json,
               "import json,sys; d=json.load(sys.stdin); r=d[\"reduces\"][0]; "
               "t=r[\"target\"].encode(\"utf-8\",\"surrogateescape\"); "
               "print(len(d[\"nodes\"]), d[\"objects\"], d[\"reduces_total\"], r[\"joined\"], "
               "r[\"needed\"], t.hex(), sorted(n[\"name\"] for n in d[\"nodes\"]), "
               "sorted(n[\"state\"] for n in d[\"nodes\"]), "
               "sum(n[\"pool_capacity\"] for n in d[\"nodes\"]))",
               got, sizeof got);
  char hex[64] = "", want[1024];
  for (size_t i = 0; odd_target[i]; i++)
    snprintf(hex + 2 * i, sizeof hex - 2 * i, "%02x", (unsigned char)odd_target[i]);
  snprintf(want, sizeof want,
           "2 %llu 1 2 3 %s ['node-0', 'node-1'] ['alive', 'alive'] %llu",
           (unsigned long long)st.objects, hex, 2 * 64 * MB);
  hpl_free(json);
  assert_string_equal(got, want);
  /* the third source comes: the reduce finishes, the list empties */
  th_put_pattern(cs[1], "st/r2", size, 0);
  hpl_buf *b;
  assert_int_equal(hpl_get(cs[0], odd_target, th_ms(10000), &b), 0);
  assert_int_equal(hpl_buf_size(b), size);
  assert_true(th_check_pattern(hpl_buf_data(b), size, 0)); /* max of equal sources */
  hpl_release(cs[0], b);
  wait_status(cs[1], &st, reduce_over, (void *)odd_target, 3000, "the reduce over");
  hpl_close(cs[0]);
  hpl_close(cs[1]);
  th_stop(lc, 0);
}

/* Bad arguments are refused without a request. */
static void test_args(void **state) {
  (void)state;
  char *out = NULL;
  assert_int_equal(hpl_status(NULL, HPL_STATUS_TEXT, 1000, &out), HPL_EINVAL);
  assert_int_equal(hpl_held_bytes(NULL, "x", 1000, NULL, NULL), HPL_EINVAL);
  assert_null(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_args),
      cmocka_unit_test_teardown(test_nodes, th_teardown),
      cmocka_unit_test_teardown(test_transfer, th_teardown),
      cmocka_unit_test_teardown(test_reduce_and_json, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
