/* test_scope.c - what a peer that is let in may do in whose name (issue
 * 41): local clients per user and group (the refusal says why), PUBLISH
 * only for a live store on the client's host and within quotas, and no
 * REGISTER as a live node's id. Real servers on loopback. */
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "harness.h"
#include "proto.h"

#define MB (1ull << 20)

/* A child process of user 65534 (in group `gid` too if gid >= 0)
 * connecting to `sock`: the hpl_connect code, or 100 if it could not
 * become that user. */
static int connect_as_other(const char *sock, int gid) {
  pid_t pid = fork();
  if (pid == 0) {
    gid_t g = (gid_t)gid;
    if (setgroups(gid >= 0 ? 1 : 0, &g) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
      _exit(100);
    hpl_client *c = NULL;
    int rc = hpl_connect(sock, 2000, &c);
    _exit(-rc); /* codes are negative */
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st) == 100 ? 100 : -WEXITSTATUS(st);
}

/* Local clients: one user's programs take at most --max-clients-per-uid
 * slots and the next one is told HPL_ETOOMANY (not "protocol error");
 * another user of the allowed group (--allow-group) still gets in; a user
 * outside it is refused with HPL_EAUTH, --insecure or not. */
static void test_local_clients(void **state) {
  (void)state;
  if (geteuid() != 0) skip(); /* needs other uids and groups */
  hpl__lc *lc =
      th_cluster(1, 64 * MB, NULL, "--insecure --allow-group 4242 --max-clients-per-uid 8");
  const char *sock = hpl__lc_socket(lc, 0);
  struct stat st;
  assert_int_equal(stat(sock, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0660); /* the group may connect */
  assert_int_equal(st.st_gid, 4242);
  assert_int_equal(chmod(hpl__lc_work_dir(lc), 0711), 0); /* others may pass through */
  hpl_client *c[16];
  int n = 0, rc = 0;
  while (n < 16 && (rc = hpl_connect(sock, th_ms(2000), &c[n])) == 0) n++;
  assert_int_equal(rc, HPL_ETOOMANY);
  assert_true(n <= 8 && n >= 6); /* the harness may hold a client or two */
  assert_int_equal(connect_as_other(sock, 4242), 0); /* another user of the group */
  assert_int_equal(connect_as_other(sock, -1), HPL_ECONN); /* the socket's mode keeps it out */
  assert_int_equal(chmod(sock, 0666), 0); /* misconfigured: the credentials still do */
  assert_int_equal(connect_as_other(sock, -1), HPL_EAUTH);
  assert_int_equal(chmod(sock, 0660), 0);
  hpl_close(c[--n]); /* a slot again */
  for (int i = 0; i < 50 && (rc = hpl_connect(sock, th_ms(2000), &c[n])) == HPL_ETOOMANY; i++)
    th_sleep_ms(20); /* the store sees the close a moment later */
  assert_int_equal(rc, 0);
  n++;
  while (n > 0) hpl_close(c[--n]);
  assert_int_equal(chmod(hpl__lc_work_dir(lc), 0700), 0);
  th_stop(lc, 0);
  /* --allow-group: the socket's directory may be the group's (0750) */
  char dir[] = "/tmp/hpl-groupdir-XXXXXX", cmd[1024];
  assert_non_null(mkdtemp(dir));
  assert_int_equal(chown(dir, 0, 4242), 0);
  assert_int_equal(chmod(dir, 0750), 0);
  const char *bin = getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR;
  snprintf(cmd, sizeof cmd, "%s/hoplite-store --directory 127.0.0.1:1 --socket %s/s.sock "
           "--memory 16M 2>/dev/null", bin, dir);
  int ex = system(cmd); /* without --allow-group: refuses to start */
  assert_true(WIFEXITED(ex) && WEXITSTATUS(ex) == 1);
  snprintf(cmd, sizeof cmd, "timeout --preserve-status -s INT 1 %s/hoplite-store --directory "
           "127.0.0.1:1 --socket %s/s.sock --memory 16M --allow-group 4242 2>/dev/null", bin, dir);
  ex = system(cmd); /* with it: runs until stopped */
  assert_true(WIFEXITED(ex) && WEXITSTATUS(ex) == 0);
  unlink(strcat(strcpy(cmd, dir), "/s.sock"));
  rmdir(dir);
}

/* PUBLISH one object as a reader on fd; the reply's status (its detail
 * into why, if not NULL). */
static int publish(int fd, uint64_t req, const char *id, uint64_t node, const void *bytes,
                   uint64_t len, char *why, size_t wlen) {
  Hplpb__InlinePutReq m = HPLPB__INLINE_PUT_REQ__INIT;
  m.id = (char *)id;
  m.size = len;
  m.node = node;
  th_wire_send_payload(fd, HPL__MSG_PUBLISH, req, &m.base, bytes, len);
  Hplpb__Reply *r = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, req);
  int st = r->status;
  if (why) snprintf(why, wlen, "%s", r->detail);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return st;
}

/* The reader key's PUBLISH: refused for a node that does not exist; a
 * client's unconfirmed bytes stop at its quota (the inline cache does not
 * fill, the producer's put goes in) and are forgotten after it leaves. */
static void test_publish_scoped(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(1, 64 * MB, "--publish-quota 4M", NULL);
  hpl_client *A = th_connect(lc, 0);
  uint64_t node = th_node_id(A);
  char why[256];
  int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_READER);
  /* a node that does not exist */
  assert_int_equal(publish(fd, 1, "pub/nonode", 0x1234, "EVIL", 4, why, sizeof why), HPL_EUNAVAIL);
  assert_non_null(strstr(why, "not a live node"));
  /* the fill: 64 KiB objects until the quota (a quarter of 4 MiB per client) */
  uint8_t *big = calloc(1, 64 * 1024);
  assert_non_null(big);
  int taken = 0, st = 0;
  char id[64];
  for (int i = 0; i < 200 && st == 0; i++) {
    snprintf(id, sizeof id, "pub/fill/%d", i);
    st = publish(fd, 100 + (uint64_t)i, id, node, big, 64 * 1024, why, sizeof why);
    taken += st == 0;
  }
  print_message("%d objects of 64 KiB published, then: %s\n", taken, why);
  assert_int_equal(st, HPL_EUNAVAIL);
  assert_non_null(strstr(why, "quota"));
  assert_true(taken <= 16);
  uint64_t inl = th_dir_counter(lc, "dir_inline_bytes");
  assert_true(inl <= 1 * MB + 64 * 1024);
  /* the producer's own put still goes in */
  th_put_pattern(A, "pub/after", 60 * 1024, 9);
  /* the client leaves: what its store never put is forgotten 10 s later */
  close(fd);
  uint64_t orphaned = 0;
  for (int i = 0; i < 150 && orphaned < (uint64_t)taken; i++) {
    th_sleep_ms(100);
    orphaned = th_dir_counter(lc, "dir_publishes_orphaned");
  }
  assert_int_equal(orphaned, (uint64_t)taken);
  assert_true(th_dir_counter(lc, "dir_inline_bytes") < inl);
  uint64_t sz;
  uint32_t cp, cm;
  int il;
  assert_int_equal(hpl_stat(A, "pub/fill/0", th_ms(2000), &sz, &cp, &cm, &il), HPL_ENOTFOUND);
  free(big);
  hpl_close(A);
  th_stop(lc, 0);
}

/* A peer holding the stores' key registers with a live node's id: before,
 * the directory dropped that node's copies (and let the peer add
 * locations in its name); now it is refused, the victim keeps its copies,
 * and a store that really reconnects (its own incarnation) still does. */
static void test_takeover_refused(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  th_put_pattern(A, "bounds/victim", 2 * MB, 5);
  int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_NODE);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = th_node_id(A);
  r.addr = "127.0.0.1";
  r.data_port = 9;
  r.name = "impostor";
  r.incarnation = 0x1234567;
  th_wire_send(fd, HPL__MSG_REGISTER, 1, &r.base);
  Hplpb__Reply *rep = (Hplpb__Reply *)th_wire_wait(fd, HPL__MSG_REPLY, 1);
  assert_int_equal(rep->status, HPL_EEXIST);
  protobuf_c_message_free_unpacked(&rep->base, NULL);
  close(fd);
  assert_int_equal(th_dir_counter(lc, "dir_takeovers_refused"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 2);
  hpl_buf *b = NULL; /* the victim's copy is still there to pull */
  assert_int_equal(hpl_get(B, "bounds/victim", th_ms(10000), &b), 0);
  assert_int_equal(hpl_buf_size(b), 2 * MB);
  hpl_release(B, b);
  uint32_t copies = 0, complete = 0;
  assert_int_equal(hpl_stat(A, "bounds/victim", th_ms(5000), NULL, &copies, &complete, NULL), 0);
  assert_int_equal(complete, 2);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_local_clients),
      cmocka_unit_test(test_publish_scoped),
      cmocka_unit_test(test_takeover_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
