/*
 * rdtask.h - this node's slots in reduce trees. The directory assigns a
 * slot to a node holding one of the sources; a slot with children runs a
 * task here that pulls every child's stream (a leaf child's stream is its
 * source object, an inner child's is that child's output), combines them
 * chunk by chunk with its own source, and exposes the combined prefix as a
 * reduce stream its parent pulls - or, at the sink, writes the target.
 *
 * Callers: server.c (REDUCE_TASK messages, registration, init, stop,
 * free), rdsink.c (the end of a reduce, the target's buffer, failure
 * reports, directory restart), stmetrics.c (the count). The data port
 * hears a task through its stream's source (st_source, objects.h).
 */
#ifndef HPL_STORE_RDTASK_H
#define HPL_STORE_RDTASK_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "store.h"

/* REDUCE_TASK: run (or update: children assigned, a reset to a new
 * generation) the task of a slot. */
void rdtask_on_task(store *s, ProtobufCMessage *m);

/* The reduce into `target` ended (rid 0: any instance): its tasks stop.
 * target NULL: every task stops (the directory restarted, or the store
 * stops). */
void rdtask_end(store *s, const char *target, uint64_t rid);

/* Instance rid (0: any) of the reduce into `target` ended: its tasks stop
 * (rdtask_end), and pulls parked on the data port for one of its streams
 * get an error. */
void rdtask_reduce_ended(store *s, const char *target, uint64_t rid);

/* The root of the reduce into `target` moved away from this node (the
 * sink): the task that wrote the target here ends. Returns 1 if a combine
 * step of it still runs on the thread pool (it writes the target until it
 * is done; then the function registered with rdtask_on_root_released is
 * called with the target), else 0. */
int rdtask_end_root(store *s, const char *target);
void rdtask_on_root_released(store *s, void (*fn)(store *s, const char *target));

/* The directory restarted: it does not know this node's tasks. They go on
 * for RDTASK_ORPHAN_MS, in case the new directory adopts their reduce
 * (rdtask_on_adopted), and then end. */
#define RDTASK_ORPHAN_MS 3000
void rdtask_directory_restarted(store *s);

/* A stream output that does not fit waits for room this long at most; then
 * the slot is reported failed (the directory moves it elsewhere). */
#define RDTASK_ROOM_MS 10000

/* The sink's target (OBJ_REDUCING) got its buffer, after waiting for room:
 * the task writing into it here (if one waits) starts. */
struct st_obj;
void rdtask_target_ready(store *s, struct st_obj *target);

/* REDUCE_ADOPTED: a restarted directory took over instance rid of the
 * reduce into target; its tasks here go on. */
void rdtask_on_adopted(store *s, ProtobufCMessage *m);

/* Make the module's context (0 or HPL_ENOMEM); close the orphan timer
 * (store_stop); free the context once the loop has ended. */
int rdtask_init(store *s);
void rdtask_stop(store *s);
void rdtask_free(store *s);

/* How many reduce tasks s holds: running, or done and kept until their
 * reduce ends (the reduce_tasks gauge). */
size_t rdtask_count(const store *s);

/* The stream of slot `slot` (generation gen), pulled by `p`, has been
 * silent for quiet_ms: tell the directory (it probes the slot's node and
 * replaces the slot if that does not answer) and report again after
 * RDTASK_SILENT_RETRY_MS if it stays silent. */
#define RDTASK_SILENT_RETRY_MS 250
struct st_puller;
void rdtask_report_silent(store *s, struct st_puller *p, const char *target, uint64_t rid,
                          uint32_t slot, uint32_t gen, uint64_t quiet_ms);

/* The stream of slot `slot` (generation gen) crawls at `rate` bytes/s:
 * tell the directory; the stream goes on. */
void rdtask_report_slow(store *s, const char *target, uint64_t rid, uint32_t slot, uint32_t gen,
                        double rate);

/* Tell the directory the stream of slot `slot` (generation gen) failed. */
void rdtask_report_fail(store *s, const char *target, uint64_t rid, uint32_t slot, uint32_t gen,
                        const char *detail);

#endif
