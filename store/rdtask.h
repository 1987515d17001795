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
 * hears a task through its stream's source (hpl__source, objects.h).
 */
#ifndef HPL_STORE_RDTASK_H
#define HPL_STORE_RDTASK_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "store.h"

/* REDUCE_TASK: run (or update: children assigned, a reset to a new
 * generation) the task of a slot. */
void hpl__rdtask_on_task(hpl__store *s, ProtobufCMessage *m);

/* The reduce into `target` ended (rid 0: any instance): its tasks stop.
 * target NULL: every task stops (the directory restarted, or the store
 * stops). */
void hpl__rdtask_end(hpl__store *s, const char *target, uint64_t rid);

/* Instance rid (0: any) of the reduce into `target` ended: its tasks stop
 * (hpl__rdtask_end), and pulls parked on the data port for one of its streams
 * get an error. */
void hpl__rdtask_reduce_ended(hpl__store *s, const char *target, uint64_t rid);

/* The root of the reduce into `target` moved away from this node (the
 * sink): the task that wrote the target here ends. Returns 1 if a combine
 * step of it still runs on the thread pool (it writes the target until it
 * is done; then the function registered with hpl__rdtask_on_root_released is
 * called with the target), else 0. */
int hpl__rdtask_end_root(hpl__store *s, const char *target);
void hpl__rdtask_on_root_released(hpl__store *s, void (*fn)(hpl__store *s, const char *target));

/* The directory restarted: it does not know this node's tasks. They go on
 * for HPL__RDTASK_ORPHAN_MS, in case the new directory adopts their reduce
 * (hpl__rdtask_on_adopted), and then end. */
#define HPL__RDTASK_ORPHAN_MS 3000
void hpl__rdtask_directory_restarted(hpl__store *s);

/* A stream output that does not fit waits for room this long at most; then
 * the slot is reported failed (the directory moves it elsewhere). */
#define HPL__RDTASK_ROOM_MS 10000

/* The sink's target (HPL__OBJ_REDUCING) got its buffer, after waiting for room:
 * the task writing into it here (if one waits) starts. */
struct hpl__obj;
void hpl__rdtask_target_ready(hpl__store *s, struct hpl__obj *target);

/* REDUCE_ADOPTED: a restarted directory took over instance rid of the
 * reduce into target; its tasks here go on. */
void hpl__rdtask_on_adopted(hpl__store *s, ProtobufCMessage *m);

/* Make the module's context (0 or HPL_ENOMEM); close the orphan timer
 * (hpl__store_stop); free the context once the loop has ended. */
int hpl__rdtask_init(hpl__store *s);
void hpl__rdtask_stop(hpl__store *s);
void hpl__rdtask_free(hpl__store *s);

/* How many reduce tasks s holds: running, or done and kept until their
 * reduce ends (the reduce_tasks gauge). */
size_t hpl__rdtask_count(const hpl__store *s);

/* The stream of slot `slot` (generation gen), pulled by `p`, has been
 * silent for quiet_ms: tell the directory (it probes the slot's node and
 * replaces the slot if that does not answer) and report again after
 * HPL__RDTASK_SILENT_RETRY_MS if it stays silent. */
#define HPL__RDTASK_SILENT_RETRY_MS 250
struct hpl__puller;
void hpl__rdtask_report_silent(hpl__store *s, struct hpl__puller *p, const char *target,
                               uint64_t rid, uint32_t slot, uint32_t gen, uint64_t quiet_ms);

/* The stream of slot `slot` (generation gen) crawls at `rate` bytes/s:
 * tell the directory; the stream goes on. */
void hpl__rdtask_report_slow(hpl__store *s, const char *target, uint64_t rid, uint32_t slot,
                             uint32_t gen, double rate);

/* Tell the directory unit `unit` of the stream of slot `slot` (generation
 * gen) did not match its digest (ReduceFailNote.corrupt): it moves the
 * slot to another copy of its source, or names the same stream again. */
void hpl__rdtask_report_corrupt(hpl__store *s, const char *target, uint64_t rid, uint32_t slot,
                                uint32_t gen, uint64_t unit, const char *detail);

/* Tell the directory the stream of slot `slot` (generation gen) failed. */
void hpl__rdtask_report_fail(hpl__store *s, const char *target, uint64_t rid, uint32_t slot,
                             uint32_t gen, const char *detail);

#endif
