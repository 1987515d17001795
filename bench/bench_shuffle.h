/*
 * bench_shuffle.h - one participant's part of bench_coll's shuffle
 * (--op shuffle, issue 42): every node puts one partition for each peer and
 * gets the partitions every peer put for it. bench_shuffle.c does the work;
 * bench_coll.c calls it (its worker processes, its participant threads and
 * its driver) and does the timing. Not a library.
 *
 * Partition (from -> to) of repetition rep is object "shuf/<rep>/<from>/<to>"
 * of `size` bytes, whose bytes depend on (from, to, rep, size), so a
 * partition delivered to the wrong node or from the wrong repetition is
 * caught. A participant's state (its partitions' bytes, the buffers it got)
 * lives in this module between the calls, one slot per node index: a
 * process may run one participant per node (threads) or just one (a worker).
 */
#ifndef HPL_BENCH_SHUFFLE_H
#define HPL_BENCH_SHUFFLE_H

#include <stddef.h>
#include <stdint.h>

#include "hoplite.h"

#define HPL__BSH_MAXN 64 /* nodes */

/* The id of partition (from -> to) of repetition rep into out[0..cap). */
void hpl__bsh_id(char *out, size_t cap, int rep, int from, int to);

/* Untimed: fill node idx's hosts-1 partitions of repetition rep (`size`
 * bytes each) in memory of this module's own, kept until the next prepare
 * of that node or hpl__bsh_free. Returns 0, HPL_EINVAL (idx or hosts out of
 * range) or HPL_ENOMEM. With HPL_BENCH_SHUFFLE_MIXUP set, node 0 fills
 * each peer's partition with the bytes meant for the next peer (a mix-up
 * hpl__bsh_check must catch; tests/CMakeLists.txt checks that it does). */
int hpl__bsh_prepare(int idx, int hosts, int rep, uint64_t size);

/* The timed part of node idx (after hpl__bsh_prepare): put its partitions
 * (hpl_put_many), then get the ones addressed to it (hpl_get_many, which
 * waits for those not put yet). On success the got buffers are held here
 * for hpl__bsh_check; on failure every one is released and the first
 * failure's HPL_E* code returned (hpl_errdetail(c) names it). */
int hpl__bsh_run(hpl_client *c, int idx, int64_t timeout_ms);

/* Untimed, once every participant is done: compare every byte of node
 * idx's got partitions with what their makers put, then release them.
 * Returns the number of wrong partitions (wrong size or bytes); each is
 * named on stderr. With HPL_BENCH_TRACE set it also prints how long the
 * timed part's puts and then its gets took. */
int hpl__bsh_check(hpl_client *c, int idx);

/* Untimed, after the checks: delete node idx's partitions of repetition
 * rep through c, a client of node idx's store (the maker: the directory
 * lets only it delete them). Returns 0 or the first failure's HPL_E*. */
int hpl__bsh_drop(hpl_client *c, int idx, int hosts, int rep);

/* Free node idx's memory in this module (its partitions' bytes). */
void hpl__bsh_free(int idx);

#endif
