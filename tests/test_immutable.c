/* test_immutable.c - sealed means immutable, by the kernel (issue 40): a
 * local client can write only the object it is creating, only in its own
 * memory and only until it seals; what a get returns is mapped read-only
 * from pool memory the store alone can write. A write into it kills the
 * writer (SIGSEGV), and every other reader, local or remote, still reads
 * the original bytes. Real directory and stores on loopback.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#define MB (1024ull * 1024)

/* How a child that tried to change bytes ended. */
enum { CHILD_WROTE = 1, CHILD_REFUSED = 42, CHILD_NO_GET = 3 };

/* Run fn(arg) in a child process; returns its wait status. */
static int in_child(void (*fn)(void *arg), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    fn(arg);
    _exit(CHILD_WROTE); /* fn returns only if the write went through */
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return st;
}

/* The child died of a fault, or the kernel refused the change. */
static void assert_write_stopped(int st, const char *what) {
  if (WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS)) return;
  if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_REFUSED) return;
  fail_msg("%s: the write was not stopped (%s %d)", what,
           WIFSIGNALED(st) ? "signal" : "exit status",
           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

typedef struct writer {
  const char *socket;
  const char *id;
  uint8_t *ptr; /* write here directly (no get) when set */
  int via_mprotect;
} writer;

/* A process of the same user connects on its own, gets the object and
 * writes 16 bytes into what the get returned (or first asks the kernel to
 * make it writable). */
static void write_child(void *arg) {
  writer *w = arg;
  signal(SIGSEGV, SIG_DFL);
  signal(SIGBUS, SIG_DFL);
  if (w->ptr) {
    memset(w->ptr, 'X', 16);
    return;
  }
  hpl_client *c = NULL;
  hpl_buf *b = NULL;
  setenv("HPL_DIRECT_GETS", "0", 1); /* from the store, not the directory's copy */
  if (hpl_connect(w->socket, 5000, &c) || hpl_get(c, w->id, 10000, &b)) _exit(CHILD_NO_GET);
  uint8_t *p = hpl_buf_data(b);
  if (w->via_mprotect) {
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
    if (mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) != 0) _exit(CHILD_REFUSED);
  }
  memset(p + 1000, 'X', 16);
}

/* Every reader sees the pattern, whole. */
static void assert_intact(hpl_client *c, const char *id, uint64_t size, uint64_t seed) {
  hpl_buf *b = NULL;
  int rc = hpl_get(c, id, th_ms(10000), &b);
  if (rc) fail_msg("get %s: %s (%s)", id, hpl_strerror(rc), hpl_errdetail(c));
  assert_int_equal(hpl_buf_size(b), size);
  assert_true(th_check_pattern(hpl_buf_data(b), size, seed));
  hpl_release(c, b);
}

/* An object a client created and sealed: the creator's old pointer, and a
 * second process's get of it, cannot change it; the creator, and a remote
 * node pulling it afterwards, read the original bytes. */
static void test_sealed_object_cannot_be_written(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 256 * MB, NULL, NULL);
  hpl_client *a = th_connect(lc, 0);
  const uint64_t size = 4 * MB;
  hpl_buf *b = NULL;
  assert_int_equal(hpl_create(a, "imm/created", size, th_ms(10000), &b), 0);
  uint8_t *mine = hpl_buf_data(b);
  hpl__fill_pattern(mine, size, 11); /* the creator writes its own buffer */
  assert_int_equal(hpl_seal(a, b, th_ms(10000)), 0);

  /* after the seal, through the pointer the creator wrote with */
  writer old = {.ptr = mine};
  assert_write_stopped(in_child(write_child, &old), "write through the creator's old pointer");
  /* a second process, through its get */
  writer w = {.socket = hpl__lc_socket(lc, 0), .id = "imm/created"};
  assert_write_stopped(in_child(write_child, &w), "write into a get of a sealed object");
  w.via_mprotect = 1;
  assert_write_stopped(in_child(write_child, &w), "mprotect of a get to writable");
  /* this process too, through its own get */
  hpl_buf *g = NULL;
  assert_int_equal(hpl_get(a, "imm/created", th_ms(5000), &g), 0);
  writer mine_get = {.ptr = (uint8_t *)hpl_buf_data(g) + 4096};
  assert_write_stopped(in_child(write_child, &mine_get), "write into the creator's get");
  hpl_release(a, g);

  assert_intact(a, "imm/created", size, 11);
  hpl_client *r = th_connect(lc, 1); /* a remote puller */
  assert_intact(r, "imm/created", size, 11);
  hpl_close(r);
  hpl_close(a);
  th_stop(lc, 0);
}

/* The creation's memfd of this process (hpl_create's buffer), found in
 * /proc/self/fd; -1 if none. */
static int creation_memfd(void) {
  char path[64], link[128];
  for (int fd = 3; fd < 1024; fd++) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = 0;
    if (strstr(link, "memfd:hoplite-create")) return fd;
  }
  return -1;
}

typedef struct stage_writer {
  int go[2];      /* the parent writes a byte once the object is sealed */
  uint8_t *mine;  /* the creator's mapping, inherited writable before the seal */
  int fd;         /* and the memfd itself */
} stage_writer;

/* A child forked while the object was being created: it keeps the
 * creator's writable mapping and its memfd, and writes both after the
 * seal. Both are the creator's own memory (a copy was taken at the seal):
 * the writes go through and change nothing anyone reads. */
static void stage_child(void *arg) {
  stage_writer *w = arg;
  char x;
  if (read(w->go[0], &x, 1) != 1) _exit(CHILD_NO_GET);
  memset(w->mine, 'X', 4096);
  if (pwrite(w->fd, "XXXXXXXXXXXXXXXX", 16, 8192) != 16) _exit(CHILD_REFUSED);
  _exit(0);
}

/* hpl_create's buffer is a memfd of the client's that the store maps and
 * copies with memcpy (the creates_memfd counter says it did): whatever the
 * client, or a child that inherited its writable mapping and descriptor,
 * writes there after the seal, every reader (the creator, another local
 * process, a remote node) reads the sealed bytes. */
static void test_created_memfd_is_copied(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 256 * MB, NULL, NULL);
  hpl_client *a = th_connect(lc, 0);
  uint64_t before = th_counter(a, "creates_memfd");
  const uint64_t size = 6 * MB; /* steps on the loop and on the thread pool */
  hpl_buf *b = NULL;
  assert_int_equal(hpl_create(a, "imm/memfd", size, th_ms(10000), &b), 0);
  uint8_t *mine = hpl_buf_data(b);
  hpl__fill_pattern(mine, size, 21);
  assert_int_equal(hpl_buf_progress(a, b, 2 * MB), 0); /* copied behind the writer */
  stage_writer w = {.mine = mine, .fd = creation_memfd()};
  assert_true(w.fd >= 0);
  assert_int_equal(pipe(w.go), 0);
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) stage_child(&w);
  assert_int_equal(hpl_seal(a, b, th_ms(10000)), 0);
  assert_int_equal(write(w.go[1], "g", 1), 1);
  int st = 0;
  assert_int_equal(waitpid(child, &st, 0), child);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* its own memory: written */
  close(w.go[0]);
  close(w.go[1]);
  assert_int_equal(th_counter(a, "creates_memfd"), before + 1);

  assert_intact(a, "imm/memfd", size, 21);
  writer other = {.socket = hpl__lc_socket(lc, 0), .id = "imm/memfd"};
  assert_write_stopped(in_child(write_child, &other), "write into a get of a created object");
  hpl_client *r = th_connect(lc, 1);
  assert_intact(r, "imm/memfd", size, 21);
  hpl_close(r);
  /* the next creation reuses the buffer; its object is its own */
  assert_int_equal(hpl_create(a, "imm/memfd2", MB, th_ms(10000), &b), 0);
  hpl__fill_pattern(hpl_buf_data(b), MB, 22);
  assert_int_equal(hpl_seal(a, b, th_ms(10000)), 0);
  assert_int_equal(th_counter(a, "creates_memfd"), before + 2);
  assert_intact(a, "imm/memfd2", MB, 22);
  assert_intact(a, "imm/memfd", size, 21);
  hpl_close(a);
  th_stop(lc, 0);
}

/* A SEAL that timed out may still be carried out: the store copies from
 * the creation's memfd after the client gave up waiting. The library
 * drops that memfd instead of keeping it for the next creation, so what
 * the next creation writes never ends up in the first object. */
static void test_timed_out_seal_keeps_its_bytes(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 512 * MB, NULL, NULL);
  hpl_client *a = th_connect(lc, 0);
  const uint64_t size = 128 * MB; /* copied in several steps */
  hpl_buf *b = NULL;
  assert_int_equal(hpl_create(a, "imm/late", size, th_ms(10000), &b), 0);
  hpl__fill_pattern(hpl_buf_data(b), size, 31);
  pid_t store = hpl__lc_store_pid(lc, 0);
  assert_int_equal(kill(store, SIGSTOP), 0); /* the SEAL waits in the socket */
  assert_int_equal(hpl_seal(a, b, 200), HPL_ETIMEDOUT);
  assert_int_equal(kill(store, SIGCONT), 0);
  /* the store now copies "imm/late" while this creation is written */
  assert_int_equal(hpl_create(a, "imm/next", size, th_ms(10000), &b), 0);
  memset(hpl_buf_data(b), 'B', size);
  assert_int_equal(hpl_seal(a, b, th_ms(10000)), 0);
  /* sealed late, from the bytes it was written with: never mixed */
  assert_intact(a, "imm/late", size, 31);
  hpl_close(a);
  th_stop(lc, 0);
}

/* An object the store received from another node: a local client cannot
 * change it either; other readers there and at the origin read the
 * original. */
static void test_received_object_cannot_be_written(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 256 * MB, NULL, NULL);
  hpl_client *a = th_connect(lc, 0);
  hpl_client *r = th_connect(lc, 1);
  th_put_pattern(a, "imm/put", 3 * MB, 5);
  assert_intact(r, "imm/put", 3 * MB, 5); /* node 1 now holds a received copy */
  writer w = {.socket = hpl__lc_socket(lc, 1), .id = "imm/put"};
  assert_write_stopped(in_child(write_child, &w), "write into a received object");
  /* a small object (a store copy of it, served from the pool) too */
  th_put_pattern(a, "imm/small", 1000, 6);
  writer ws = {.socket = hpl__lc_socket(lc, 0), .id = "imm/small"};
  assert_write_stopped(in_child(write_child, &ws), "write into a small object");
  assert_intact(r, "imm/put", 3 * MB, 5);
  assert_intact(a, "imm/put", 3 * MB, 5);
  hpl_close(r);
  hpl_close(a);
  th_stop(lc, 0);
}

/* hpl_put copies the caller's bytes into the store: changing them after
 * the put returned changes nothing; a buffer the store cannot read fails
 * the put with a clear error. */
static void test_put_copies_the_bytes(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 128 * MB, NULL, NULL);
  hpl_client *a = th_connect(lc, 0);
  const uint64_t size = 20 * MB; /* copied on the store's thread pool, in steps */
  uint8_t *d = malloc(size);
  assert_non_null(d);
  hpl__fill_pattern(d, size, 9);
  assert_int_equal(hpl_put(a, "imm/copied", d, size, th_ms(10000)), 0);
  memset(d, 'Y', size);
  assert_intact(a, "imm/copied", size, 9);
  free(d);
  /* unreadable: mapped, then unmapped before the put */
  void *gone = mmap(NULL, 2 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(gone != MAP_FAILED);
  munmap(gone, 2 * MB);
  int rc = hpl_put(a, "imm/unreadable", gone, 2 * MB, th_ms(10000));
  assert_int_equal(rc, HPL_EINVAL);
  assert_non_null(strstr(hpl_errdetail(a), "cannot read the client's bytes"));
  assert_int_equal(hpl_stat(a, "imm/unreadable", th_ms(5000), NULL, NULL, NULL, NULL),
                   HPL_ENOTFOUND);
  hpl_close(a);
  th_stop(lc, 0);
}

/* RssShmem of this process, in bytes (0 if unknown). */
static uint64_t my_rss_shmem(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "RssShmem: %llu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}

/* Pages go back to the kernel also while a client that read them stays
 * connected: a trim gives the pool's free chunks fresh memfds, the store
 * sends them to the clients that mapped the old ones, and the client maps
 * them over the old ones at its next call, so the old pages go. */
static void test_client_drops_given_back_chunks(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 256 * MB, NULL, "--trim-ms 200 --trim-keep 0");
  hpl_client *c = th_connect(lc, 0);
  th_put_pattern(c, "keep", 1000, 1);
  char id[32];
  for (int i = 0; i < 6; i++) {
    snprintf(id, sizeof id, "drop/%d", i);
    th_put_pattern(c, id, 16 * MB, (uint64_t)i);
    assert_intact(c, id, 16 * MB, (uint64_t)i); /* read: the pages are mapped here */
  }
  uint64_t full = my_rss_shmem();
  for (int i = 0; i < 6; i++) {
    snprintf(id, sizeof id, "drop/%d", i);
    assert_int_equal(hpl_delete(c, id, th_ms(5000)), 0);
  }
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_counter(c, "pool_resident") > 16 * MB && hpl__ms_left(deadline) > 0) th_sleep_ms(50);
  assert_true(th_counter(c, "pool_resident") <= 16 * MB);
  /* any call at least 10 ms after the library last read the chunk channel
   * (it reads it at most that often): the new chunks are mapped */
  th_sleep_ms(20);
  assert_intact(c, "keep", 1000, 1);
  uint64_t after = my_rss_shmem();
  fprintf(stderr, "client RssShmem %llu KiB with 96 MiB read, %llu KiB after the trim\n",
          (unsigned long long)(full >> 10), (unsigned long long)(after >> 10));
  assert_true(full >= 90 * MB);
  assert_true(after <= 16 * MB);
  hpl_close(c);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sealed_object_cannot_be_written),
      cmocka_unit_test(test_received_object_cannot_be_written),
      cmocka_unit_test(test_created_memfd_is_copied),
      cmocka_unit_test(test_timed_out_seal_keeps_its_bytes),
      cmocka_unit_test(test_put_copies_the_bytes),
      cmocka_unit_test(test_client_drops_given_back_chunks),
  };
  return cmocka_run_group_tests(tests, NULL, th_teardown);
}
