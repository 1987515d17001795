/* test_scope.c - what a peer that is let in may do in whose name (issue
 * 41): local clients per user and group (the refusal says why), PUBLISH
 * only for a live store on the client's host, its own, and within quotas,
 * no REGISTER as a live node's id or name, node credentials that prove one
 * name only, and deletes by the node that made the object. Real servers on
 * loopback. */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
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
#include "util.h"

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
  assert_int_equal(th_wire_register(fd, 1, &r, NULL, 0), HPL_EEXIST);
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


/* Node credentials (auth.h): each store of a local cluster holds its own,
 * never the secret; it derives only its own node's keys; a handshake
 * claiming another name with it fails; the proven name cannot register
 * twice while live; a store cannot run as another name than its
 * credential's. */
static void test_node_credentials(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  if (!hpl__lc_secret(lc)[0]) skip(); /* HPL_TEST_NO_AUTH */
  hpl_client *A = th_connect(lc, 0);
  th_put_pattern(A, "cred/a", 1 * MB, 3);
  char cred[512], err[256], text[1024] = "";
  snprintf(cred, sizeof cred, "%s/node-0.cred", hpl__lc_work_dir(lc));
  struct stat st;
  assert_int_equal(stat(cred, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  hpl__auth sec, c0;
  assert_int_equal(hpl__auth_load(hpl__lc_secret(lc), &sec, err, sizeof err), 0);
  assert_int_equal(hpl__auth_load(cred, &c0, err, sizeof err), 0);
  int fd = open(cred, O_RDONLY);
  assert_true(fd >= 0 && read(fd, text, sizeof text - 1) > 0);
  close(fd);
  char sechex[65];
  for (int i = 0; i < 32; i++) snprintf(sechex + 2 * i, 3, "%02x", sec.key[i]);
  assert_null(strstr(text, sechex)); /* the secret is not in it */
  assert_false(c0.has_secret);
  assert_string_equal(c0.name, "node-0");
  uint8_t k1[HPL__AUTH_KEY_LEN], k2[HPL__AUTH_KEY_LEN];
  assert_int_equal(hpl__auth_key(&c0, HPL__ROLE_NODE, "node-0", k1), 0);
  assert_int_equal(hpl__auth_key(&sec, HPL__ROLE_NODE, "node-0", k2), 0);
  assert_memory_equal(k1, k2, sizeof k1);
  assert_int_equal(hpl__auth_key(&c0, HPL__ROLE_NODE, "node-1", k1), HPL_EAUTH);
  assert_int_equal(hpl__auth_key(&c0, HPL__ROLE_READER, "node-1", k1), HPL_EAUTH);
  assert_int_equal(hpl__auth_key(&c0, HPL__ROLE_ADMIN, NULL, k1), HPL_EAUTH);
  /* node-0's key claiming node-1: the handshake fails */
  uint64_t fails0 = th_dir_counter(lc, "dir_auth_failures");
  assert_int_equal(hpl__auth_key(&c0, HPL__ROLE_NODE, "node-0", k1), 0);
  fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(th_wire_handshake_key(fd, k1, HPL__ROLE_NODE, "node-1"), -1);
  close(fd);
  assert_true(th_dir_counter(lc, "dir_auth_failures") > fails0);
  /* node-0's key as node-0, a new process (id): node-0 is live, refused */
  fd = th_wire_connect(hpl__lc_dir_port(lc), NULL, 0);
  assert_int_equal(th_wire_handshake_key(fd, k1, HPL__ROLE_NODE, "node-0"), 0);
  Hplpb__RegisterReq r = HPLPB__REGISTER_REQ__INIT;
  r.node_id = 0x5ca1ab1e;
  r.addr = "127.0.0.1";
  r.data_port = 9;
  r.incarnation = 7;
  char detail[256];
  assert_int_equal(th_wire_register(fd, 1, &r, detail, sizeof detail), HPL_EEXIST);
  assert_non_null(strstr(detail, "node-0"));
  close(fd);
  assert_int_equal(th_dir_counter(lc, "dir_takeovers_refused"), 1);
  assert_int_equal(th_dir_counter(lc, "dir_nodes"), 2);
  hpl_buf *b = NULL; /* node-0 still serves its copy */
  hpl_client *B = th_connect(lc, 1);
  assert_int_equal(hpl_get(B, "cred/a", th_ms(10000), &b), 0);
  assert_true(th_check_pattern(hpl_buf_data(b), 1 * MB, 3));
  hpl_release(B, b);
  /* a store given node-1's credential cannot run as node-9 */
  char cmd[2048], log[600];
  snprintf(log, sizeof log, "%s/node9.log", hpl__lc_work_dir(lc));
  snprintf(cmd, sizeof cmd, "timeout 10 %s/hoplite-store --directory 127.0.0.1:%d --socket "
           "%s/n9.sock --memory 16M --name node-9 --auth-file %s/node-1.cred 2>%s",
           getenv("HOPLITE_BIN_DIR") ? getenv("HOPLITE_BIN_DIR") : HPL_BIN_DIR,
           hpl__lc_dir_port(lc), hpl__lc_work_dir(lc), hpl__lc_work_dir(lc), log);
  int ex = system(cmd);
  assert_true(WIFEXITED(ex) && WEXITSTATUS(ex) != 0 && WEXITSTATUS(ex) != 124);
  fd = open(log, O_RDONLY);
  memset(text, 0, sizeof text);
  assert_true(fd >= 0 && read(fd, text, sizeof text - 1) > 0);
  close(fd);
  assert_non_null(strstr(text, "the node credential is node 'node-1', not 'node-9'"));
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* A reader's key is its store's: a client of node-0 cannot publish in the
 * name of node-1, though node-1 is live on the same host. */
static void test_reader_own_node(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  if (!hpl__lc_secret(lc)[0]) skip();
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  char why[256];
  int fd = th_wire_connect(hpl__lc_dir_port(lc), hpl__lc_secret(lc), HPL__ROLE_READER);
  assert_int_equal(publish(fd, 1, "own/b", th_node_id(B), "EVIL", 4, why, sizeof why),
                   HPL_EUNAVAIL);
  assert_non_null(strstr(why, "node-0's, not node node-1's"));
  assert_int_equal(publish(fd, 2, "own/a", th_node_id(A), "GOOD", 4, why, sizeof why), 0);
  close(fd);
  /* node-1's producer puts its object of that id: nothing squats it */
  th_put_pattern(B, "own/b", 100, 4);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

/* Who may delete (admin.c): the node that made an object (its clients),
 * not another live node (HPL_EPERM, the detail names the maker, counted),
 * also after a directory restart (the maker is re-reported in HELD), and
 * any node once the maker is gone. */
static void test_delete_maker(void **state) {
  (void)state;
  hpl__lc *lc = th_cluster(2, 64 * MB, NULL, NULL);
  hpl_client *A = th_connect(lc, 0), *B = th_connect(lc, 1);
  th_put_pattern(A, "del/big", 2 * MB, 1);
  th_put_pattern(A, "del/small", 1000, 2);
  th_put_pattern(A, "del/mine", 1000, 3);
  assert_int_equal(hpl_delete(B, "del/big", th_ms(5000)), HPL_EPERM);
  assert_non_null(strstr(hpl_errdetail(B), "node-0"));
  assert_int_equal(hpl_delete(B, "del/small", th_ms(5000)), HPL_EPERM);
  assert_int_equal(th_dir_counter(lc, "dir_deletes_refused"), 2);
  assert_int_equal(hpl_delete(A, "del/mine", th_ms(5000)), 0);
  hpl_buf *b = NULL;
  assert_int_equal(hpl_get(B, "del/big", th_ms(10000), &b), 0); /* still there */
  hpl_release(B, b);
  /* the directory restarts: the maker comes back with the re-report */
  char err[256];
  assert_int_equal(hpl__lc_signal(lc, -1, SIGKILL), 0);
  if (hpl__lc_restart(lc, -1, err, sizeof err)) fail_msg("restart: %s", err);
  uint64_t deadline = hpl__deadline_ms(th_ms(10000));
  while (th_dir_counter_try(lc, "dir_held_taken") < 2 && hpl__ms_left(deadline) > 0)
    th_sleep_ms(20);
  assert_int_equal(hpl_delete(B, "del/big", th_ms(5000)), HPL_EPERM);
  /* node-0 goes: its objects are anyone's to delete */
  assert_int_equal(hpl__lc_signal(lc, 0, SIGKILL), 0);
  deadline = hpl__deadline_ms(th_ms(10000));
  while (th_dir_counter(lc, "dir_nodes") > 1 && hpl__ms_left(deadline) > 0) th_sleep_ms(20);
  assert_int_equal(hpl_delete(B, "del/big", th_ms(5000)), 0);
  assert_int_equal(hpl_get(B, "del/big", 200, &b), HPL_ETIMEDOUT);
  hpl_close(A);
  hpl_close(B);
  th_stop(lc, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_local_clients),
      cmocka_unit_test(test_publish_scoped),
      cmocka_unit_test(test_takeover_refused),
      cmocka_unit_test(test_node_credentials),
      cmocka_unit_test(test_reader_own_node),
      cmocka_unit_test(test_delete_maker),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
