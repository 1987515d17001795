/* test_dirtable.c - the directory's object table and sender choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hoplite.h"
#include "objects.h"
#include "util.h"

#define MB (1ull << 20)

/* A fresh table (t) holding object `id`: one complete copy of `size`
 * bytes at node 1, its origin. */
static hpl__dir_obj *with_one_copy(hpl__dtab *t, const char *id, uint64_t size) {
  hpl__dtab_init(t, 1);
  hpl__dir_obj *o = hpl__dtab_get(t, id);
  hpl__dtab_add_loc(t, o, 1, size, 1, 1);
  return o;
}

static void test_put_and_exists(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dtab_init(&t, 1);
  hpl__dir_obj *o = hpl__dtab_get(&t, "x");
  assert_int_equal(o->state, HPL__OBJ_PENDING);
  assert_int_equal(hpl__dtab_add_loc(&t, o, 1, 100 * MB, 0, 1), 0); /* origin, still writing */
  assert_int_equal(o->state, HPL__OBJ_READY);
  /* another put of the same id anywhere is refused */
  assert_int_equal(hpl__dtab_add_loc(&t, o, 2, 100 * MB, 0, 1), HPL_EEXIST);
  /* the origin re-announcing itself (after a reconnect) is fine */
  assert_int_equal(hpl__dtab_add_loc(&t, o, 1, 100 * MB, 1, 1), 0);
  assert_int_equal(o->nlocs, 1);
  assert_true(o->locs->complete);
  assert_true(o->ready_seq > 0);
  /* a copy of another size is a mismatch */
  hpl__dir_obj *o2 = hpl__dtab_get(&t, "y");
  assert_int_equal(hpl__dtab_add_loc(&t, o2, 1, 10, 1, 1), 0);
  assert_int_equal(hpl__dtab_add_loc(&t, o2, 2, 11, 1, 0), HPL_EMISMATCH);
  hpl__dtab_clear(&t);
}

static void test_inline(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dtab_init(&t, 1);
  hpl__dir_obj *o = hpl__dtab_get(&t, "small");
  uint8_t *d = malloc(5);
  memcpy(d, "hello", 5);
  assert_int_equal(hpl__dtab_set_inline(&t, o, d, 5), 0);
  assert_int_equal(t.inline_bytes, 5);
  uint8_t *d2 = malloc(5);
  assert_int_equal(hpl__dtab_set_inline(&t, o, d2, 5), HPL_EEXIST);
  free(d2);
  /* inline objects are never lost, whatever happens to nodes */
  hpl__dtab_node_gone(&t, 1, NULL, NULL, NULL);
  assert_false(hpl__dtab_check_lost(&t, o));
  hpl__dtab_remove(&t, o);
  assert_int_equal(t.inline_bytes, 0);
  hpl__dtab_clear(&t);
}

/* Concurrent receivers with one sender slot per copy form a chain. */
static void test_receivers_form_chain(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = with_one_copy(&t, "big", 64 * MB);
  uint64_t s;
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 2, 0, &s), 0);
  assert_int_equal(s, 1);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 3, 0, &s), 0);
  assert_int_equal(s, 2); /* node 1 busy: the partial copy at 2 serves */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 4, 0, &s), 0);
  assert_int_equal(s, 3);
  for (hpl__dir_loc *l = o->locs; l; l = l->next) assert_true(l->serving <= 1);
  /* 2 completes: node 1 is free again; a late receiver prefers the
   * complete idle copy */
  hpl__dtab_loc_complete(&t, o, 2, 64 * MB);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 5, 0, &s), 0);
  assert_int_equal(s, 1);
  /* 2 is complete and idle (3 pulls from it: busy) -> next goes to 4 or 5? */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 6, 0, &s), 0);
  assert_true(s == 4 || s == 5);
  hpl__dtab_clear(&t);
}

static void test_more_senders(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dtab_init(&t, 2);
  hpl__dir_obj *o = hpl__dtab_get(&t, "big");
  hpl__dtab_add_loc(&t, o, 1, MB, 1, 1);
  uint64_t s;
  hpl__dtab_pick_sender(&t, o, 2, 0, &s);
  assert_int_equal(s, 1);
  hpl__dtab_pick_sender(&t, o, 3, 0, &s);
  assert_int_equal(s, 1); /* two slots */
  hpl__dtab_pick_sender(&t, o, 4, 0, &s);
  assert_true(s == 2 || s == 3);
  hpl__dtab_clear(&t);
}

static void test_no_cycle_and_lost(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = with_one_copy(&t, "o", MB);
  uint64_t s;
  hpl__dtab_pick_sender(&t, o, 2, 0, &s); /* 1 -> 2 */
  hpl__dtab_pick_sender(&t, o, 3, 0, &s); /* 2 -> 3 */
  hpl__dtab_pick_sender(&t, o, 4, 0, &s); /* 3 -> 4 */
  assert_true(hpl__dtab_depends_on(o, 4, 2));
  assert_false(hpl__dtab_depends_on(o, 2, 4));
  /* the source dies: 2 asks again; everything else pulls from 2 */
  hpl__dtab_node_gone(&t, 1, NULL, NULL, NULL);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 2, 0, &s), HPL_ELOST);
  assert_int_equal(o->state, HPL__OBJ_LOST);
  hpl__dtab_clear(&t);
}

static void test_resume_elsewhere(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = with_one_copy(&t, "o", MB);
  hpl__dtab_add_loc(&t, o, 9, MB, 1, 0); /* a second complete copy */
  uint64_t s;
  hpl__dtab_pick_sender(&t, o, 2, 0, &s);
  assert_int_equal(s, 1);
  hpl__dtab_pick_sender(&t, o, 3, 0, &s); /* 9 is complete and idle: preferred */
  assert_int_equal(s, 9);
  hpl__dtab_pick_sender(&t, o, 4, 0, &s); /* both complete copies busy: 2 or 3 */
  uint64_t first = s;
  assert_true(first == 2 || first == 3);
  /* 4's sender fails: it asks again, must not get itself or a dependant */
  hpl__dtab_loc_remove(&t, o, first);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 4, 0, &s), 0);
  assert_true(s != 4 && s != first);
  assert_false(hpl__dtab_depends_on(o, s, 4));
  hpl__dtab_clear(&t);
}

/* Node 40 is suspected (tab.suspected): in the chain 1 -> 2 -> ... -> 80,
 * the copies at and behind it are last resorts, so a new receiver is not
 * put behind the chain's idle end while 1 can serve it again. */
static int suspect_40(uint64_t node, void *arg) {
  (void)arg;
  return node == 40;
}

/* 4 000 receivers asking one after another form one chain, each behind the
 * last; every pick looks at every copy's chain (does it pull from the
 * asker? from a suspected node?). Walking each chain from each copy made a
 * pick O(copies^3): this took hours; resolving every chain once per pick
 * (objects.c pick_marks) makes it O(copies). The same choices either way. */
static void test_long_chain_picks(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = with_one_copy(&t, "big", 1024 * MB);
  uint64_t s, t0 = hpl__now_ms();
  for (uint64_t n = 2; n <= 4000; n++) {
    assert_int_equal(hpl__dtab_pick_sender(&t, o, n, 0, &s), 0);
    assert_int_equal(s, n - 1);
  }
  uint64_t took = hpl__now_ms() - t0;
  const char *sc = getenv("HPL_TEST_TIMEOUT_SCALE");
  uint64_t bound = 20000 * (uint64_t)(sc && atoi(sc) > 0 ? atoi(sc) : 1);
  if (took > bound) fail_msg("4 000 picks along one chain took %llu ms", (unsigned long long)took);
  /* a receiver of the chain asking again (its sender failed) is not put
   * behind itself: 4000's copy pulls from it, so the chain's end is out */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 3999, 3998, &s), 1); /* waits */
  hpl__dtab_clear(&t);
  /* a suspected node in a chain: what pulls from it is a last resort */
  o = with_one_copy(&t, "s", 64 * MB);
  for (uint64_t n = 2; n <= 80; n++) assert_int_equal(hpl__dtab_pick_sender(&t, o, n, 0, &s), 0);
  t.suspected = suspect_40;
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 100, 0, &s), 1); /* 80 only, behind 40: wait */
  assert_int_equal(hpl__dtab_loc_complete(&t, o, 2, 64 * MB), 0); /* 1 serves nobody now */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 100, 0, &s), 0);
  assert_int_equal(s, 1);
  hpl__dtab_clear(&t);
}

/* Receivers behind a node whose own link crawls (3, in the chain
 * 1 -> 2 -> 3 -> 4 -> 5 -> 6) move off it around it: 4, right behind it,
 * to 3's own sender 2 (1, the only complete copy, is busy serving 2), and
 * another receiver of the slow node's to the idle end of that re-formed
 * chain, not to the complete copy (before: both to 1, each then at a
 * fraction of its uplink). */
static void test_bypass_reforms_chain(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = with_one_copy(&t, "o", 64 * MB);
  uint64_t s;
  for (uint64_t n = 2; n <= 6; n++) {
    assert_int_equal(hpl__dtab_pick_sender(&t, o, n, 0, &s), 0);
    assert_int_equal(s, n - 1);
  }
  assert_int_equal(hpl__dtab_pick_bypass(&t, o, 4, 3, &s), 0);
  assert_int_equal(s, 2);
  /* 7 pulled from 3 too (a tree) and reports it: it joins the re-formed
   * chain at its idle end, 6 (which no longer depends on 3), rather than
   * sharing 1's or 2's uplink */
  assert_int_equal(hpl__dtab_assign(&t, o, 7, hpl__dtab_loc(o, 3)), 0);
  assert_int_equal(hpl__dtab_pick_bypass(&t, o, 7, 3, &s), 0);
  assert_int_equal(s, 6);
  assert_false(hpl__dtab_depends_on(o, 7, 3));
  /* an idle complete copy still comes first */
  hpl__dtab_add_loc(&t, o, 9, 64 * MB, 1, 0);
  assert_int_equal(hpl__dtab_pick_bypass(&t, o, 5, 4, &s), 0);
  assert_int_equal(s, 9);
  hpl__dtab_clear(&t);
}

/* The crawl filter, in test_bypass_reforms_chain's chain 1..6 with 3 slow:
 * 4 moves to 2, then 7 (which pulled from 3 too) reports 3. Without the
 * filter 7 joins at 6, the idle end; but 6 reported a crawl itself lately
 * (it is behind a slow node, or slow), so 7 takes 3's own sender 2 instead.
 * With every candidate crawling, one is still picked. */
static uint64_t crawling_nodes[8];
static int is_crawling(uint64_t node, void *arg) {
  (void)arg;
  for (int i = 0; i < 8; i++)
    if (crawling_nodes[i] == node) return 1;
  return 0;
}

static void test_bypass_avoids_crawling(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dtab_init(&t, 1);
  t.crawling = is_crawling;
  memset(crawling_nodes, 0, sizeof crawling_nodes);
  hpl__dir_obj *o = hpl__dtab_get(&t, "o");
  hpl__dtab_add_loc(&t, o, 1, 64 * MB, 1, 1);
  uint64_t s;
  for (uint64_t n = 2; n <= 6; n++) assert_int_equal(hpl__dtab_pick_sender(&t, o, n, 0, &s), 0);
  assert_int_equal(hpl__dtab_pick_bypass(&t, o, 4, 3, &s), 0);
  assert_int_equal(s, 2);
  crawling_nodes[0] = 6;
  assert_int_equal(hpl__dtab_assign(&t, o, 7, hpl__dtab_loc(o, 3)), 0);
  assert_int_equal(hpl__dtab_pick_bypass(&t, o, 7, 3, &s), 0);
  assert_int_equal(s, 2); /* not 6 */
  /* 8 pulled from 3 too; every copy it could take crawls: still one */
  for (uint64_t n = 1; n <= 7; n++) crawling_nodes[n] = n;
  assert_int_equal(hpl__dtab_assign(&t, o, 8, hpl__dtab_loc(o, 3)), 0);
  assert_int_equal(hpl__dtab_pick_bypass(&t, o, 8, 3, &s), 0);
  assert_false(hpl__dtab_depends_on(o, 8, 3));
  memset(crawling_nodes, 0, sizeof crawling_nodes);
  hpl__dtab_clear(&t);
}

static void test_wait_when_all_busy(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dtab_init(&t, 1);
  hpl__dir_obj *p = hpl__dtab_get(&t, "pending");
  uint64_t s;
  assert_int_equal(hpl__dtab_pick_sender(&t, p, 2, 0, &s), 1); /* does not exist yet */
  hpl__dir_obj *o = hpl__dtab_get(&t, "o");
  hpl__dtab_add_loc(&t, o, 1, MB, 1, 1);
  hpl__dtab_pick_sender(&t, o, 2, 0, &s);
  /* 2 fails and is gone; 3 asks while 1 still counts 2 as its receiver? no:
   * removing 2 frees 1's slot */
  hpl__dtab_loc_remove(&t, o, 2);
  assert_int_equal(o->locs->serving, 0);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 3, 0, &s), 0);
  assert_int_equal(s, 1);
  /* now 1 is busy with 3 and 3 is the only other copy -> 4 gets 3 */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 4, 0, &s), 0);
  assert_int_equal(s, 3);
  hpl__dtab_clear(&t);
}

/* A sender reported as failed is avoided while others exist, and still
 * used when it is the only copy (it may only have had a hiccup). */
static void test_avoid(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = with_one_copy(&t, "o", MB);
  uint64_t s;
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 2, 0, &s), 0);
  assert_int_equal(s, 1);
  /* 2's stream from 1 broke: 2 asks again avoiding 1; 1 is the only copy */
  hpl__dtab_release_upstream(o, 2);
  assert_int_equal(o->locs->serving, 0);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 2, 1, &s), 0);
  assert_int_equal(s, 1);
  /* with a second complete copy the avoided one is passed over */
  hpl__dtab_add_loc(&t, o, 3, MB, 1, 0);
  hpl__dtab_release_upstream(o, 2);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 2, 1, &s), 0);
  assert_int_equal(s, 3);
  /* the other complete copy busy: a partial copy serves rather than the
   * avoided one */
  hpl__dtab_release_upstream(o, 2);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 4, 0, &s), 0); /* 4 takes 1 or 3 */
  uint64_t busy = s;
  uint64_t other = busy == 1 ? 3 : 1;
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 2, other, &s), 0);
  assert_int_equal(s, 4);
  hpl__dtab_clear(&t);
}

static void test_gc(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dtab_init(&t, 1);
  hpl__dir_obj *o = hpl__dtab_get(&t, "nobody");
  assert_int_equal(t.nobjs, 1);
  hpl__dtab_gc(&t, o);
  assert_int_equal(t.nobjs, 0);
  assert_null(hpl__dtab_find(&t, "nobody"));
  hpl__dtab_clear(&t);
}

/* ---- the storage: id hash (growing), ordered index, per-node index */

static void count_cb(hpl__dir_obj *o, void *arg) {
  (void)o;
  (*(int *)arg)++;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint64_t lcg(uint64_t *x) {
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return *x >> 17;
}

/* 200 k ids in random order, a third removed: every one found or not as it
 * should be, while the hash grew several times; the ordered index walks
 * them all, sorted, and pages from any cursor and prefix. */
static void test_index_and_hash(void **state) {
  (void)state;
  enum { N = 200000 };
  hpl__dtab t;
  hpl__dtab_init(&t, 1);
  char **ids = malloc(N * sizeof *ids);
  uint64_t x = 42;
  for (int i = 0; i < N; i++) {
    ids[i] = malloc(24);
    snprintf(ids[i], 24, "k%llx/%d", (unsigned long long)(lcg(&x) % 100000), i);
    assert_non_null(hpl__dtab_get(&t, ids[i]));
  }
  assert_int_equal(t.nobjs, N);
  for (int i = 0; i < N; i += 3) hpl__dtab_remove(&t, hpl__dtab_find(&t, ids[i]));
  for (int i = 0; i < N; i++) {
    hpl__dir_obj *o = hpl__dtab_find(&t, ids[i]);
    if (i % 3 == 0) assert_null(o);
    else assert_string_equal(o->id, ids[i]);
  }
  /* the walk is sorted and complete */
  char **live = malloc(N * sizeof *live);
  int n = 0;
  for (int i = 0; i < N; i++)
    if (i % 3) live[n++] = ids[i];
  qsort(live, (size_t)n, sizeof *live, cmp_str);
  int k = 0;
  for (hpl__dir_obj *o = hpl__dtab_first(&t, "", 0); o; o = hpl__dtab_next(o))
    assert_string_equal(o->id, live[k++]);
  assert_int_equal(k, n);
  assert_int_equal(t.nobjs, (uint64_t)n);
  /* from a cursor: strictly after it; from a prefix: the first with it */
  assert_string_equal(hpl__dtab_first(&t, live[100], 1)->id, live[101]);
  assert_string_equal(hpl__dtab_first(&t, live[100], 0)->id, live[100]);
  char prefix[8];
  snprintf(prefix, sizeof prefix, "%.5s", live[5000]);
  hpl__dir_obj *o = hpl__dtab_first(&t, prefix, 0);
  int first = 0;
  while (strncmp(live[first], prefix, strlen(prefix)) != 0) first++;
  assert_string_equal(o->id, live[first]);
  hpl__dtab_clear(&t);
  assert_null(hpl__dtab_first(&t, "", 0));
  for (int i = 0; i < N; i++) free(ids[i]);
  free(ids);
  free(live);
}

/* Each node's index holds exactly the objects it has a location in, through
 * random adds and removes; a node's loss visits only its own objects. */
static void test_node_index(void **state) {
  (void)state;
  enum { N = 20000, NODES = 7 };
  hpl__dtab t;
  hpl__dtab_init(&t, 1);
  hpl__dir_obj **objs = malloc(N * sizeof *objs);
  char id[32];
  uint64_t x = 7;
  for (int i = 0; i < N; i++) {
    snprintf(id, sizeof id, "o%d", i);
    objs[i] = hpl__dtab_get(&t, id);
  }
  static uint8_t has[N][NODES + 1];
  memset(has, 0, sizeof has);
  for (int r = 0; r < 100000; r++) {
    int i = (int)(lcg(&x) % N), nd = 1 + (int)(lcg(&x) % NODES);
    if (has[i][nd]) {
      assert_int_equal(hpl__dtab_loc_remove(&t, objs[i], (uint64_t)nd), 1);
      has[i][nd] = 0;
    } else {
      assert_int_equal(hpl__dtab_loc_complete(&t, objs[i], (uint64_t)nd, 10) >= 0, 1);
      has[i][nd] = 1;
    }
  }
  for (int nd = 1; nd <= NODES; nd++) {
    uint64_t want = 0, n;
    for (int i = 0; i < N; i++) want += has[i][nd];
    assert_int_equal(hpl__dtab_node_count(&t, (uint64_t)nd), want);
    hpl__dir_obj **v = hpl__dtab_node_objects(&t, (uint64_t)nd, &n);
    for (uint64_t j = 0; j < n; j++) {
      hpl__dir_loc *l = hpl__dtab_loc(v[j], (uint64_t)nd);
      assert_non_null(l);
      assert_int_equal(l->nidx, j);
    }
  }
  /* node 3's loss touches its objects only */
  uint64_t mine = hpl__dtab_node_count(&t, 3);
  static int touched;
  touched = 0;
  hpl__dtab_node_gone(&t, 3, NULL, count_cb, &touched);
  assert_int_equal((uint64_t)touched, mine);
  assert_int_equal(hpl__dtab_node_count(&t, 3), 0);
  for (int i = 0; i < N; i++) assert_null(hpl__dtab_loc(objs[i], 3));
  hpl__dtab_clear(&t);
  free(objs);
}

/* A copy reported corrupt (chain 1 -> 2 -> 3 -> 4, 3 reported by 4): its
 * location stays (a delete must reach it) but it is never named, it does
 * not keep the object alive, the reporter gets its slot on 2, and 3 itself
 * then goes to the chain's idle end. */
static uint64_t gone_seen[8];
static int ngone;
static void gone_cb(hpl__dir_obj *o, uint64_t receiver, void *arg) {
  (void)o, (void)arg;
  gone_seen[ngone++] = receiver;
}

static void test_unlisted_copy(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = with_one_copy(&t, "o", 64 * MB);
  uint64_t s;
  for (uint64_t n = 2; n <= 5; n++) assert_int_equal(hpl__dtab_pick_sender(&t, o, n, 0, &s), 0);
  /* 4 reports 3; 5 still pulls from 4 */
  hpl__dtab_release_upstream(o, 4);
  ngone = 0;
  assert_int_equal(hpl__dtab_loc_unlist(&t, o, 3, gone_cb, NULL), 2);
  assert_int_equal(ngone, 0); /* 4, its only receiver, released it already */
  assert_non_null(hpl__dtab_loc(o, 3));
  assert_true(hpl__dtab_loc(o, 3)->unlisted);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 4, 3, &s), 0);
  assert_int_equal(s, 2); /* 3's place */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 3, 0, &s), 0);
  assert_int_equal(s, 5); /* the idle end */
  assert_true(hpl__dtab_loc(o, 3)->unlisted);
  /* 3 completes (its node's own get): still never named, though a complete
   * idle copy would be preferred to the idle partial one at the end (5) */
  hpl__dtab_loc_complete(&t, o, 3, 64 * MB);
  assert_true(hpl__dtab_loc(o, 3)->complete);
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 6, 0, &s), 0);
  assert_int_equal(s, 5);
  /* a receiver of an unlisted copy is passed to the callback */
  hpl__dtab_loc(o, 3)->unlisted = 0;
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 7, 0, &s), 0);
  assert_int_equal(s, 3);
  ngone = 0;
  hpl__dtab_loc_unlist(&t, o, 3, gone_cb, NULL);
  assert_int_equal(ngone, 1);
  assert_int_equal(gone_seen[0], 7);
  assert_int_equal(hpl__dtab_loc(o, 7)->upstream, 0);
  /* only unlisted copies left: the object is lost (no copy anyone gets) */
  hpl__dir_obj *p = hpl__dtab_get(&t, "p");
  hpl__dtab_add_loc(&t, p, 1, MB, 1, 1);
  hpl__dtab_loc_unlist(&t, p, 1, NULL, NULL);
  assert_int_equal(hpl__dtab_check_lost(&t, p), 1);
  assert_int_equal(p->nlocs, 1); /* kept for a delete */
  hpl__dtab_clear(&t);
}

/* A node reported corrupt often (distrusted) is named after every other
 * idle copy, but rather than make a receiver wait; copies pulling from it
 * are not penalised (they count verified bytes only). */
static int is_distrusted(uint64_t node, void *arg) {
  (void)arg;
  return node == 3;
}

static void test_distrusted_named_last(void **state) {
  (void)state;
  hpl__dtab t;
  hpl__dir_obj *o = with_one_copy(&t, "o", 64 * MB);
  t.distrusted = is_distrusted; /* (picks only ask it) */
  uint64_t s;
  for (uint64_t n = 2; n <= 3; n++) assert_int_equal(hpl__dtab_pick_sender(&t, o, n, 0, &s), 0);
  /* 3 is the chain's idle end: the next receiver pulls from it, not waits */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 4, 0, &s), 0);
  assert_int_equal(s, 3);
  /* 4, behind it, is an ordinary copy */
  assert_int_equal(hpl__dtab_pick_sender(&t, o, 5, 0, &s), 0);
  assert_int_equal(s, 4);
  /* with another idle copy, 3 is not named */
  hpl__dir_obj *q = hpl__dtab_get(&t, "q");
  hpl__dtab_add_loc(&t, q, 3, MB, 1, 1);
  hpl__dtab_add_loc(&t, q, 2, MB, 1, 0);
  assert_int_equal(hpl__dtab_pick_sender(&t, q, 6, 0, &s), 0);
  assert_int_equal(s, 2);
  /* a strict pick (a move off a silent sender) never names it */
  hpl__dir_obj *r = hpl__dtab_get(&t, "r");
  hpl__dtab_add_loc(&t, r, 3, MB, 1, 1);
  assert_int_equal(hpl__dtab_pick_instead(&t, r, 7, 0, &s), 1);
  assert_int_equal(hpl__dtab_pick_sender(&t, r, 7, 0, &s), 0);
  assert_int_equal(s, 3);
  hpl__dtab_clear(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_index_and_hash), cmocka_unit_test(test_node_index),
      cmocka_unit_test(test_put_and_exists),   cmocka_unit_test(test_inline),
      cmocka_unit_test(test_receivers_form_chain), cmocka_unit_test(test_more_senders),
      cmocka_unit_test(test_no_cycle_and_lost), cmocka_unit_test(test_resume_elsewhere),
      cmocka_unit_test(test_bypass_reforms_chain), cmocka_unit_test(test_long_chain_picks),
      cmocka_unit_test(test_bypass_avoids_crawling),
      cmocka_unit_test(test_wait_when_all_busy), cmocka_unit_test(test_gc),
      cmocka_unit_test(test_avoid), cmocka_unit_test(test_unlisted_copy),
      cmocka_unit_test(test_distrusted_named_last),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
