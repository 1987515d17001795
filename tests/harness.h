/*
 * harness.h - helpers for integration tests: real hoplite-directory and
 * hoplite-store processes on loopback (port 0), driven through libhoplite.
 * Tests use cmocka; a failing test prints the servers' logs.
 */
#ifndef HPL_TEST_HARNESS_H
#define HPL_TEST_HARNESS_H

#include <pthread.h>
#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

#include "hoplite.h"
#include "localcluster.h"
#include "proto.h"

/* Timeouts in tests are multiplied by $HPL_TEST_TIMEOUT_SCALE (default 1). */
int64_t th_ms(int64_t ms);

/* Start a cluster of `nodes` stores with `memory` bytes each; extra server
 * arguments may be NULL. Fails the test on error. */
hpl__lc *th_cluster(int nodes, uint64_t memory, const char *dir_args, const char *store_args);
/* A test group's cluster (cmocka group setup): th_cluster without store
 * arguments, untracked (th_teardown leaves it to th_group_stop), and a
 * client of store i in *cs[i] for i < nc. */
hpl__lc *th_group_start(int nodes, uint64_t memory, const char *dir_args, hpl_client **const *cs,
                        int nc);
/* The group's teardown: close the nc clients, stop the cluster (its logs
 * printed if a server died meanwhile). */
void th_group_stop(hpl__lc *lc, hpl_client *const *cs, int nc);
/* Stop it; with `dump` print the servers' logs first. */
void th_stop(hpl__lc *lc, int dump);
/* cmocka teardown for tests that start their own cluster: if the test left
 * early (a failed assertion), print the logs of the clusters it started and
 * stop them. */
int th_teardown(void **state);
/* A cluster shared by a group of tests (started in a group setup): not
 * stopped by th_teardown. */
void th_untrack(hpl__lc *lc);

/* Print every server log of the cluster to stderr. */
void th_dump_logs(hpl__lc *lc);

hpl_client *th_connect(hpl__lc *lc, int node);
uint64_t th_counter(hpl_client *c, const char *name);
/* Wait (up to 20 s, scaled) until the store's counter `name` is `want`;
 * else fail the test, naming `what`. */
void th_wait_counter(hpl_client *c, const char *name, uint64_t want, const char *what);

/* Put `size` bytes of the pattern for `seed` as `id`; fails the test on error. */
void th_put_pattern(hpl_client *c, const char *id, uint64_t size, uint64_t seed);
/* 1 if buf holds the pattern for seed. */
int th_check_pattern(const void *buf, uint64_t size, uint64_t seed);

/* Add a store with `--memory <memory>` and the extra arguments `args`
 * (may be NULL) to lc; returns its index. Fails the test on error. */
int th_add_store(hpl__lc *lc, const char *memory, const char *args);
/* Put `size` bytes (whole u32s) of a pattern for `seed` as
 * `id` at c within timeout_ms, and add them elementwise into ref (size/4
 * elements, the caller's). Fails the test on error. */
void th_put_sum(hpl_client *c, const char *id, uint64_t size, uint32_t seed, uint32_t *ref,
                int64_t timeout_ms);

/* Offset of `p` inside the memfd it is mapped from (via /proc/self/maps),
 * or -1. Two processes seeing the same offset see the same shared memory. */
int64_t th_shm_offset(const void *p);

#endif

void th_sleep_ms(int ms);

/* Start a store process by hand (outside any hpl__lc), with a 64 MiB pool,
 * its directory at `dir_addr` ("host:port"), the secret file `secret`, its
 * log in `log`, and `extra` (one more argument, or NULL). Returns its pid:
 * the caller kills and reaps it. */
pid_t th_spawn_store(const char *dir_addr, const char *sock, const char *ready,
                     const char *secret, const char *log, const char *extra);

/* A get on its own thread. Set c, id, timeout, and to check the bytes
 * size and want (hpl__checksum of the expected bytes; th_pattern_sum gives
 * it for th_put_pattern's bytes), then th_get_start / th_get_join. After
 * the join: rc, ok (size and checksum as expected), ms (how long the get
 * took), done_ms (when it returned, hpl__now_ms clock). */
typedef struct th_getter {
  hpl_client *c;
  const char *id;
  int64_t timeout;
  uint64_t size, want;
  int rc, ok;
  int in_pool; /* the bytes were in the store's pool (not a private copy) */
  uint64_t ms, done_ms;
  pthread_t thread;
} th_getter;

void th_get_start(th_getter *g);
void th_get_join(th_getter *g);
uint64_t th_pattern_sum(uint64_t size, uint64_t seed);

/* ---- the directory's transfer record (hpl_transfers) */
typedef struct th_xfer {
  uint64_t seq, t_us;
  char kind[16];
  uint64_t receiver, sender;
  char id[HPL_ID_MAX + 1];
} th_xfer;

/* Every record from `since` on; *n gets the count. Caller frees. */
th_xfer *th_transfers(hpl_client *c, uint64_t since, size_t *n);

/* Replay the record for objects whose id starts with `prefix`: each
 * assign gives a receiver a sender (replacing its previous one), done and
 * remove end it, node-gone and delete end everything involved. Checks that
 * no copy ever served more than max_senders receivers at once and that no
 * assignment closed a cycle. A move (an assign to a receiver that had a
 * sender of the object before) may get a busy copy by design (the quiet
 * sender's upstream: hpl__dtab_pick_bypass), so moved receivers are left
 * out of the count. Returns the number of violations and writes the first
 * into why. *max_serving gets the highest concurrency seen (moves left out). */
int th_check_tree(const th_xfer *x, size_t n, const char *prefix, int max_senders,
                  int *max_serving, char *why, size_t whylen);

/* This store's node id (its "node_id" counter). */
uint64_t th_node_id(hpl_client *c);

/* ---- raw protocol peers: tests that speak the wire protocol themselves */

/* A TCP connection to 127.0.0.1:port (fails the test if refused). With a
 * cluster secret (hpl__lc_secret; NULL or "": none) the handshake claiming
 * `role` is done first, and must succeed. */
int th_wire_connect(int port, const char *secret, int role);
/* The handshake on fd claiming `role` with the key derived from the secret
 * file (NULL or "": nothing is done). Returns 0, or -1 if the peer refused
 * or closed. */
int th_wire_handshake(int fd, const char *secret, int role);
/* The same claiming node `name` (NODE, READER; th_wire_handshake takes a
 * new "peer-PID-N" for a NODE, "node-0" for a READER). */
int th_wire_handshake_as(int fd, const char *secret, int role, const char *name);
/* The same with a key the caller holds (hpl__auth_key of role and name). */
int th_wire_handshake_key(int fd, const uint8_t key[32], int role, const char *name);
/* After a handshake the connection has a session (auth.h): th_wire_send,
 * th_wire_frame and th_wire_wait tag and check every frame (frame.h). */
void th_wire_send(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m);
/* One whole frame as th_wire_send_payload sends it (tagged when fd has a
 * session), for tests that send it their own way; *len bytes, the caller
 * frees it; NULL without memory (no cmocka: usable from any thread, one
 * at a time per connection). */
/* 1 if fd has a session (its frames carry HPL__FRAME_TAG_LEN-byte tags). */
int th_wire_tagged(int fd);
/* The acceptor's side of the handshake on fd (a test playing a store's
 * data port): HELLO claiming a role among `roles` (bit mask of 1 << role),
 * CHALLENGE, PROOF, with the secret file's keys; then fd has a session.
 * No cmocka (usable from any thread). 0, or -1 (refused, closed, no
 * secret file). */
int th_wire_accept(int fd, const char *secret, unsigned roles);
/* A frame whose payload of plen bytes the caller sends itself after it, as
 * data-port streams are: the tag (fd's session) covers header and message
 * only (HPL__FRAME_F_TAG without _TAG_PAYLOAD). *len bytes, the caller
 * frees it; NULL without memory. No cmocka. */
uint8_t *th_wire_frame_stream(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                              uint64_t plen, size_t *len);
/* Read one frame on fd within timeout_ms, its tag checked with fd's
 * session (if any): header in *h, message bytes in *msg (malloc'ed, the
 * caller frees it; payloads of up to 1 MiB follow the message in it). No
 * cmocka. 0, or -1 (closed, timed out, bad frame or tag). */
int th_wire_read_raw(int fd, hpl__frame_hdr *h, uint8_t **msg, int64_t timeout_ms);
/* The MAC of the frames fd receives (hpl__fmac_begin/_add/_check, in the
 * order they come), NULL without a session. For tests with a parser of
 * their own. */
hpl__fmac *th_wire_rx(int fd);
uint8_t *th_wire_frame(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                       const void *payload, uint64_t plen, size_t *len);
/* The same with plen bytes of payload after the message. */
void th_wire_send_payload(int fd, unsigned type, uint64_t req, const ProtobufCMessage *m,
                          const void *payload, uint64_t plen);
/* The next frame of `type` with request id `req` (others are skipped);
 * fails the test if none arrives within 10 s (scaled). Free the result with
 * protobuf_c_message_free_unpacked. */
ProtobufCMessage *th_wire_wait(int fd, unsigned type, uint64_t req);
/* Send REGISTER `r` on fd as request `req` and wait for its answer: the
 * status, 0 from a REGISTER_REP, else the refusing Reply's, whose detail
 * goes to `detail` (may be NULL; "" on success). Frames of other requests
 * are skipped. Fails the test if nothing comes in 10 s. */
int th_wire_register(int fd, uint64_t req, const Hplpb__RegisterReq *r, char *detail, size_t dlen);
/* The same, and the frame's payload in *payload (malloc'ed, the caller
 * frees it; *plen bytes) unless payload is NULL. */
ProtobufCMessage *th_wire_wait_payload(int fd, unsigned type, uint64_t req, uint8_t **payload,
                                       uint64_t *plen);
/* 1 if the peer closes the connection within timeout_ms (what it sends
 * first is skipped). */
int th_wire_closed(int fd, int64_t timeout_ms);
/* A raw local client of store `node` of lc: its Unix socket connected and
 * the store's HELLO read (its descriptors not taken). Fails the test if
 * the store refuses. */
int th_wire_local(hpl__lc *lc, int node);
/* A directory counter, read over a connection of its own (fails the test
 * if the directory does not answer). */
uint64_t th_dir_counter(hpl__lc *lc, const char *name);
/* The same, but UINT64_MAX when the directory refuses the connection (at
 * its connection limit) instead of failing the test. */
uint64_t th_dir_counter_try(hpl__lc *lc, const char *name);
/* Store `node`'s data port. */
int th_data_port(hpl__lc *lc, int node);

/* Run the shell command fmt makes (system(3)); its status. */
int th_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* bench/cluster.sh with HPL_NS_PREFIX=prefix, quietly, and the arguments
 * fmt makes ("up 3 1gbit", "cut 2"); system()'s status. */
int th_cluster_sh(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Why emulated hosts cannot run here ("needs root for network namespaces",
 * "this machine refuses 'ip netns add'"), or NULL if they can: a test that
 * gets a reason prints it and exits 77 (skipped). */
const char *th_netns_unusable(void);

/* Bring up `hosts` emulated hosts at `rate` (bench/cluster.sh up) under
 * `prefix` and write host i's address into addrs_buf[i], pointed at by
 * addrs[i]. Fails the test (after taking down whatever came up) if the
 * cluster or an address cannot be had. */
#define TH_ADDR_LEN 32
void th_cluster_up(const char *prefix, int hosts, const char *rate, char (*addrs_buf)[TH_ADDR_LEN],
                   const char **addrs);
