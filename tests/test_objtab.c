/* test_objtab.c - the store's object table alone (store/objects.c): lookups
 * by id, by handle and of reduce streams, a million ids with random
 * removals and re-inserts, walks (also paused, and while objects come and
 * go), growth and shrinking, the presence filter, and what it costs: bytes
 * per object and the slowest single insert at a million objects.
 *
 * HPL_OBJTAB_N overrides the number of ids of the large cases (1000000). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <cmocka.h>
#include <jemalloc/jemalloc.h>

#include "hoplite.h"
#include "objects.h"
#include "util.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static size_t big_n(void) {
  const char *e = getenv("HPL_OBJTAB_N");
  return e && atol(e) > 0 ? (size_t)atol(e) : 1000000;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* xorshift64* */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}

static void id_of(size_t i, char *id) { snprintf(id, 16, "i%09zu", i); } /* 10 characters */

static hpl__store *new_store(void) {
  hpl__store *s = calloc(1, sizeof *s);
  assert_non_null(s);
  assert_int_equal(hpl__pool_create(16ull << 20, "objtab", 0, &s->pool), 0);
  assert_int_equal(hpl__objects_init(s), 0);
  return s;
}

static void free_store(hpl__store *s) {
  hpl__objects_free(s);
  hpl__pool_destroy(s->pool);
  free(s);
}

/* The filter's count for id's slot, read as a client does (its memfd
 * mapped read-only); 1 when there is no filter. */
static uint8_t filter_at(hpl__store *s, const char *id) {
  int fd = hpl__obj_filter_fd(s);
  if (fd < 0) return 1;
  uint8_t *f = mmap(NULL, HPL__STORE_FILTER_SLOTS, PROT_READ, MAP_SHARED, fd, 0);
  assert_true(f != MAP_FAILED);
  uint8_t v = f[hpl__filter_slot(id, HPL__STORE_FILTER_SLOTS)];
  munmap(f, HPL__STORE_FILTER_SLOTS);
  return v;
}

/* ------------------------------------------------------------------ basics */

static void test_basics(void **state) {
  (void)state;
  hpl__store *s = new_store();
  assert_null(hpl__obj_find(s, "x"));
  assert_null(hpl__obj_find_inst(s, 1));
  assert_int_equal(hpl__obj_count(s), 0);
  hpl__obj *o = hpl__obj_new(s, "x", HPL__OBJ_CREATING);
  assert_non_null(o);
  assert_string_equal(o->id, "x");
  assert_int_equal(o->state, HPL__OBJ_CREATING);
  assert_int_equal(o->refs, 0);
  assert_true(o->in_table);
  assert_false(o->internal);
  assert_null(o->data);
  assert_true(o->inst != 0);
  assert_ptr_equal(hpl__obj_find(s, "x"), o);
  assert_ptr_equal(hpl__obj_find_inst(s, o->inst), o);
  assert_int_equal(hpl__obj_count(s), 1);
  assert_true(filter_at(s, "x") >= 1);

  /* a reduce stream: by key only, not counted, not in the filter's count */
  char detail[256];
  uint8_t before = filter_at(s, "k");
  hpl__obj *k = hpl__obj_new_internal(s, "k", 0, detail, sizeof detail);
  assert_non_null(k);
  assert_true(k->internal);
  assert_null(hpl__obj_find(s, "k"));
  assert_ptr_equal(hpl__obj_find_internal(s, "k"), k);
  assert_null(hpl__obj_find_internal(s, "x"));
  assert_ptr_equal(hpl__obj_find_inst(s, k->inst), k);
  assert_int_equal(hpl__obj_count(s), 1);
  assert_int_equal(filter_at(s, "k"), before);
  /* the same key as an object is another record */
  hpl__obj *xk = hpl__obj_new_internal(s, "x", 4096, detail, sizeof detail);
  assert_non_null(xk);
  assert_non_null(xk->data);
  assert_ptr_equal(hpl__obj_find(s, "x"), o);
  assert_ptr_equal(hpl__obj_find_internal(s, "x"), xk);
  hpl__obj_detach(s, xk);
  assert_null(hpl__obj_find_internal(s, "x"));

  /* detached but referenced: out of the table, still found by handle */
  uint64_t inst = o->inst;
  hpl__obj_ref(s, o);
  hpl__obj_detach(s, o);
  assert_false(o->in_table);
  assert_null(hpl__obj_find(s, "x"));
  assert_int_equal(hpl__obj_count(s), 0);
  assert_ptr_equal(hpl__obj_find_inst(s, inst), o);
  assert_int_equal(filter_at(s, "x"), hpl__obj_filter_fd(s) < 0);
  /* a new object of the same id gets another handle */
  hpl__obj *o2 = hpl__obj_new(s, "x", HPL__OBJ_FETCHING);
  assert_non_null(o2);
  assert_true(o2->inst != inst);
  assert_ptr_equal(hpl__obj_find(s, "x"), o2);
  assert_ptr_equal(hpl__obj_find_inst(s, inst), o);
  hpl__obj_detach(s, o); /* no-op: out already */
  hpl__obj_unref(s, o);  /* freed */
  assert_null(hpl__obj_find_inst(s, inst));
  assert_ptr_equal(hpl__obj_find_inst(s, o2->inst), o2);

  /* a long id (the largest allowed) */
  char longid[256];
  memset(longid, 'z', 255);
  longid[255] = 0;
  hpl__obj *l = hpl__obj_new(s, longid, HPL__OBJ_SEALED);
  assert_non_null(l);
  assert_ptr_equal(hpl__obj_find(s, longid), l);
  longid[254] = 'y';
  assert_null(hpl__obj_find(s, longid));

  hpl__obj_detach(s, k);
  assert_null(hpl__obj_find_internal(s, "k"));
  free_store(s);
}

/* ------------------------------------------------------------------ a million ids */

typedef struct shadow {
  hpl__obj **obj;   /* by index: the live record, or NULL */
  uint64_t *inst;   /* its handle (or the last one it had) */
  size_t n, live;
} shadow;

static void check_all(hpl__store *s, shadow *sh) {
  char id[16];
  for (size_t i = 0; i < sh->n; i++) {
    id_of(i, id);
    hpl__obj *o = hpl__obj_find(s, id);
    assert_ptr_equal(o, sh->obj[i]);
    if (sh->inst[i]) assert_ptr_equal(hpl__obj_find_inst(s, sh->inst[i]), sh->obj[i]);
  }
  assert_int_equal(hpl__obj_count(s), sh->live);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t rss_anon(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "RssAnon: %zu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}

static size_t je_allocated(void) {
  uint64_t epoch = 1;
  size_t sz = sizeof epoch, allocated = 0;
  mallctl("epoch", &epoch, &sz, &epoch, sz);
  sz = sizeof allocated;
  if (mallctl("stats.allocated", &allocated, &sz, NULL, 0) != 0) return 0;
  return allocated;
}

static void test_million(void **state) {
  (void)state;
  size_t n = big_n();
  shadow sh = {.obj = calloc(n, sizeof(hpl__obj *)), .inst = calloc(n, sizeof(uint64_t)), .n = n};
  assert_non_null(sh.obj);
  assert_non_null(sh.inst);
  hpl__store *s = new_store();
  char id[16];

  /* load: the cost of each insert, and of everything (wall time includes
   * being descheduled on a loaded machine; thread CPU time does not) */
  float *took = malloc(n * sizeof *took);
  assert_non_null(took);
  memset(took, 0, n * sizeof *took);
  size_t rss0 = rss_anon(), je0 = je_allocated();
  double worst = 0, worst_cpu = 0, t0 = now_s();
  size_t worst_at = 0, worst_cpu_at = 0;
  for (size_t i = 0; i < n; i++) {
    id_of(i, id);
    double a = now_s(), c = cpu_s();
    hpl__obj *o = hpl__obj_new(s, id, HPL__OBJ_SEALED);
    double d = now_s() - a, dc = cpu_s() - c;
    took[i] = (float)d;
    if (d > worst) worst = d, worst_at = i;
    if (dc > worst_cpu) worst_cpu = dc, worst_cpu_at = i;
    assert_non_null(o);
    sh.obj[i] = o;
    sh.inst[i] = o->inst;
  }
  double load = now_s() - t0;
  size_t slower = 0; /* inserts slower than 100 us */
  for (size_t i = 0; i < n; i++) slower += took[i] > 100e-6f;
  sh.live = n;
  size_t slots, ibytes;
  hpl__obj_index_size(s, &slots, &ibytes);
  size_t rss = rss_anon() - rss0, je = je_allocated() - je0;
  printf("  %zu inserts: %.0f ns each on average; slowest %.1f us (insert %zu), in thread "
         "CPU time %.1f us (insert %zu); %zu took over 100 us\n",
         n, load * 1e9 / (double)n, worst * 1e6, worst_at, worst_cpu * 1e6, worst_cpu_at, slower);
  printf("  per object: records %.1f B (allocator), indexes %.1f B (%zu slots), "
         "RssAnon growth %.1f B\n",
         (double)je / (double)n, (double)ibytes / (double)n, slots, (double)rss / (double)n);
  if (!UNDER_ASAN && n >= 100000) {
    if (je) assert_true(je + ibytes <= 200 * n);
    assert_true(rss <= 200 * n);
  }
  free(took);
  check_all(s, &sh);

  /* random removals (detach of unreferenced: freed), some kept referenced */
  t0 = now_s();
  double worst_del = 0;
  for (size_t k = 0; k < n / 2; k++) {
    size_t i = rnd() % n;
    hpl__obj *o = sh.obj[i];
    if (!o) continue;
    double a = now_s();
    hpl__obj_detach(s, o);
    double d = now_s() - a;
    if (d > worst_del) worst_del = d;
    sh.obj[i] = NULL;
    sh.live--;
  }
  printf("  removals: slowest %.1f us, %.1f s in all\n", worst_del * 1e6, now_s() - t0);
  check_all(s, &sh);
  /* freed: their handles find nothing */
  for (size_t i = 0; i < n; i++)
    if (!sh.obj[i]) assert_null(hpl__obj_find_inst(s, sh.inst[i]));

  /* re-inserts: new handles; the old ones still find nothing (even when the
   * allocator hands the new record the old one's address) */
  uint64_t *old = malloc(n * sizeof *old);
  assert_non_null(old);
  memcpy(old, sh.inst, n * sizeof *old);
  for (size_t k = 0; k < n / 2; k++) {
    size_t i = rnd() % n;
    if (sh.obj[i]) continue;
    id_of(i, id);
    hpl__obj *o = hpl__obj_new(s, id, HPL__OBJ_FETCHING);
    assert_non_null(o);
    assert_true(o->inst > old[i]);
    sh.obj[i] = o;
    sh.inst[i] = o->inst;
    sh.live++;
  }
  check_all(s, &sh);
  for (size_t i = 0; i < n; i++)
    if (old[i] != sh.inst[i]) assert_null(hpl__obj_find_inst(s, old[i]));
  free(old);

  /* mixed churn: inserts, removals, referenced removals freed later */
  hpl__obj **held = calloc(n / 8 + 1, sizeof *held);
  uint64_t *held_inst = calloc(n / 8 + 1, sizeof *held_inst);
  size_t nheld = 0;
  for (size_t k = 0; k < n / 4; k++) {
    size_t i = rnd() % n;
    id_of(i, id);
    if (sh.obj[i]) {
      hpl__obj *o = sh.obj[i];
      if (nheld <= n / 8 && (rnd() & 3) == 0) {
        hpl__obj_ref(s, o);
        held[nheld] = o;
        held_inst[nheld++] = o->inst;
      }
      hpl__obj_detach(s, o);
      sh.obj[i] = NULL;
      sh.live--;
    } else {
      hpl__obj *o = hpl__obj_new(s, id, HPL__OBJ_SEALED);
      assert_non_null(o);
      sh.obj[i] = o;
      sh.inst[i] = o->inst;
      sh.live++;
    }
  }
  for (size_t j = 0; j < nheld; j++) {
    assert_ptr_equal(hpl__obj_find_inst(s, held_inst[j]), held[j]);
    assert_false(held[j]->in_table);
  }
  for (size_t j = 0; j < nheld; j++) {
    hpl__obj_unref(s, held[j]);
    assert_null(hpl__obj_find_inst(s, held_inst[j]));
  }
  free(held);
  free(held_inst);
  check_all(s, &sh);

  /* shrink: remove all but a few; the indexes follow */
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    if (!sh.obj[i]) continue;
    if (kept < 100) {
      kept++;
      continue;
    }
    hpl__obj_detach(s, sh.obj[i]);
    sh.obj[i] = NULL;
    sh.live--;
  }
  for (int r = 0; r < 100000; r++) hpl__obj_find(s, "nothing"); /* lookups finish draining */
  check_all(s, &sh);
  size_t slots2;
  hpl__obj_index_size(s, &slots2, NULL);
  printf("  after removing all but %zu: %zu index slots (from %zu)\n", kept, slots2, slots);
  assert_true(slots2 <= 4096);

  free_store(s);
  free(sh.obj);
  free(sh.inst);
}

/* ------------------------------------------------------------------ growth */

/* Grow and shrink repeatedly, checking everything at each step: entries are
 * found whether they are in the new array or still in the old one. */
static void test_grow_shrink(void **state) {
  (void)state;
  hpl__store *s = new_store();
  enum { N = 5000 };
  shadow sh = {.obj = calloc(N, sizeof(hpl__obj *)), .inst = calloc(N, sizeof(uint64_t)), .n = N};
  char id[16];
  size_t max_slots = 0, min_slots = SIZE_MAX;
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < N; i++) {
      id_of(i, id);
      hpl__obj *o = hpl__obj_new(s, id, HPL__OBJ_SEALED);
      assert_non_null(o);
      sh.obj[i] = o;
      sh.inst[i] = o->inst;
      sh.live++;
      if (i % 97 == 0) check_all(s, &sh);
    }
    size_t slots;
    hpl__obj_index_size(s, &slots, NULL);
    if (slots > max_slots) max_slots = slots;
    for (size_t i = 0; i < N; i++) {
      size_t j = (i * 7919) % N; /* every index once, scattered */
      hpl__obj_detach(s, sh.obj[j]);
      sh.obj[j] = NULL;
      sh.live--;
      if (i % 89 == 0) check_all(s, &sh);
    }
    for (int r = 0; r < 1000; r++) hpl__obj_find(s, "nothing");
    hpl__obj_index_size(s, &slots, NULL);
    if (slots < min_slots) min_slots = slots;
    check_all(s, &sh);
  }
  assert_true(max_slots >= 2 * N * 4 / 3); /* two indexes, at most 3/4 full */
  assert_true(min_slots <= 3 * 64);    /* back to small arrays */
  free(sh.obj);
  free(sh.inst);
  free_store(s);
}

/* ------------------------------------------------------------------ walks */

/* Walk everything; count how often each index is returned. */
static void walk_count(hpl__store *s, size_t n, uint8_t *seen) {
  memset(seen, 0, n);
  hpl__walk w;
  hpl__obj_walk_begin(s, &w);
  for (hpl__obj *o; (o = hpl__obj_walk_next(s, &w));) {
    size_t i = (size_t)atol(o->id + 1);
    assert_true(i < n);
    seen[i]++;
  }
  assert_null(hpl__obj_walk_next(s, &w)); /* ended */
}

static void test_walk(void **state) {
  (void)state;
  hpl__store *s = new_store();
  size_t n = big_n() / 10;
  uint8_t *seen = malloc(n);
  hpl__obj **obj = calloc(n, sizeof *obj);
  char id[16];

  /* an empty table */
  walk_count(s, n, seen);
  for (size_t i = 0; i < n; i++) {
    id_of(i, id);
    obj[i] = hpl__obj_new(s, id, HPL__OBJ_SEALED);
  }
  walk_count(s, n, seen);
  for (size_t i = 0; i < n; i++) assert_int_equal(seen[i], 1);

  /* removing the object just returned, every other time */
  memset(seen, 0, n);
  hpl__walk w;
  hpl__obj_walk_begin(s, &w);
  int flip = 0;
  for (hpl__obj *o; (o = hpl__obj_walk_next(s, &w));) {
    size_t i = (size_t)atol(o->id + 1);
    seen[i]++;
    if ((flip ^= 1)) {
      hpl__obj_detach(s, o);
      obj[i] = NULL;
    }
  }
  for (size_t i = 0; i < n; i++) assert_int_equal(seen[i], 1);
  assert_int_equal(hpl__obj_count(s), n - (n + 1) / 2);

  /* a paused walk while objects come and go (the indexes resize meanwhile):
   * every object there throughout is returned once, every one removed
   * before it was reached never, every one added is returned once */
  for (size_t i = 0; i < n; i++)
    if (!obj[i]) {
      id_of(i, id);
      obj[i] = hpl__obj_new(s, id, HPL__OBJ_SEALED);
    }
  uint8_t *throughout = calloc(n, 1), *added = calloc(n, 1), *removed = calloc(n, 1);
  for (size_t i = 0; i < n; i++) throughout[i] = 1;
  memset(seen, 0, n);
  hpl__walk w2; /* a second walk, ended early */
  hpl__obj_walk_begin(s, &w);
  hpl__obj_walk_begin(s, &w2);
  assert_non_null(hpl__obj_walk_next(s, &w2));
  for (;;) {
    hpl__obj *o = NULL;
    for (int k = 0; k < 1000 && (o = hpl__obj_walk_next(s, &w)); k++) {
      size_t i = (size_t)atol(o->id + 1);
      seen[i]++;
      if (removed[i]) fail_msg("walk returned %s, removed before it was reached", o->id);
    }
    if (!o) break;
    /* between slices: remove some (also the one about to be returned next),
     * add back some removed earlier */
    for (int k = 0; k < 800; k++) {
      size_t i = rnd() % n;
      if (obj[i]) {
        if (!seen[i]) removed[i] = 1;
        throughout[i] = 0;
        hpl__obj_detach(s, obj[i]);
        obj[i] = NULL;
      } else if (!seen[i] && !added[i]) {
        id_of(i, id);
        obj[i] = hpl__obj_new(s, id, HPL__OBJ_SEALED);
        added[i] = 1;
        removed[i] = 0;
      }
    }
    if (w.at) { /* the next one */
      size_t i = (size_t)atol(w.at->id + 1);
      if (!seen[i]) removed[i] = 1;
      throughout[i] = 0;
      hpl__obj_detach(s, obj[i]);
      obj[i] = NULL;
    }
  }
  hpl__obj_walk_end(s, &w2);
  hpl__obj_walk_end(s, &w2); /* twice: a no-op */
  assert_null(hpl__obj_walk_next(s, &w2));
  for (size_t i = 0; i < n; i++) {
    if (throughout[i]) assert_int_equal(seen[i], 1);
    assert_true(seen[i] <= 1);
    if (added[i] && obj[i]) assert_int_equal(seen[i], 1);
    if (removed[i]) assert_int_equal(seen[i], 0);
  }

  /* a walk at its end returns an object added then */
  hpl__obj_walk_begin(s, &w);
  while (w.at) hpl__obj_walk_next(s, &w);
  hpl__obj *late = hpl__obj_new(s, "late", HPL__OBJ_SEALED);
  assert_ptr_equal(hpl__obj_walk_next(s, &w), late);
  assert_null(hpl__obj_walk_next(s, &w));

  free(throughout);
  free(added);
  free(removed);
  free(seen);
  free(obj);
  free_store(s);
}

/* ------------------------------------------------------------------ teardown */

/* hpl__objects_free with referenced records: they are freed by their last
 * unref afterwards, without the tables. */
static void test_free_with_refs(void **state) {
  (void)state;
  hpl__store *s = new_store();
  char detail[256];
  hpl__obj *a = hpl__obj_new(s, "a", HPL__OBJ_SEALED);
  hpl__obj *b = hpl__obj_new(s, "b", HPL__OBJ_SEALED);
  hpl__obj *k = hpl__obj_new_internal(s, "k", 100, detail, sizeof detail);
  hpl__obj *k2 = hpl__obj_new_internal(s, "k2", 100, detail, sizeof detail);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(k);
  assert_non_null(k2);
  hpl__obj_ref(s, a);
  hpl__obj_ref(s, k);
  hpl__objects_free(s);
  assert_false(a->in_table);
  assert_false(k->in_table);
  assert_null(hpl__obj_find(s, "a"));
  assert_null(hpl__obj_find_inst(s, a->inst));
  hpl__obj_unref(s, a);
  hpl__obj_unref(s, k);
  hpl__pool_destroy(s->pool);
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_basics),
      cmocka_unit_test(test_grow_shrink),
      cmocka_unit_test(test_walk),
      cmocka_unit_test(test_free_with_refs),
      cmocka_unit_test(test_million),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
