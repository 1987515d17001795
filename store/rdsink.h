/*
 * rdsink.h - the reduce target at the node that asked for the reduce (the
 * sink): the client's REDUCE request, the target object (HPL__OBJ_REDUCING)
 * held from the start and advertised as a copy in progress once the
 * directory says where the result comes from (so gets elsewhere pipeline
 * behind the reduce: allreduce), the pull of the tree root's stream, the
 * end of the reduce, and asking again after a directory restart.
 *
 * A sink hangs off its target object (o->sink) and holds a reference on it
 * until the reduce is over for this node.
 *
 * Callers: clients.c (REDUCE requests), server.c (REDUCE_SINK and
 * REDUCE_END messages, directory restart, drain, stop).
 */
#ifndef HPL_STORE_RDSINK_H
#define HPL_STORE_RDSINK_H

#include <stdint.h>

#include "proto.h"
#include "store.h"
#include "session.h"

/* A client asked for a reduce (or allreduce) into m->target at this node:
 * the directory's REDUCE_REP answers request `req` of `cl`. */
void hpl__rdsink_request(hpl__store *s, hpl__stclient *cl, uint64_t req, Hplpb__ReduceReq *m);

/* REDUCE_SINK: where the target's bytes come from (or start over). */
void hpl__rdsink_on_sink(hpl__store *s, ProtobufCMessage *m);

/* REDUCE_END: the reduce is over (status 0) or failed. */
void hpl__rdsink_on_end(hpl__store *s, ProtobufCMessage *m);

/* The directory restarted and forgot its reduces: ask again for every
 * target still being produced here. */
void hpl__rdsink_directory_restarted(hpl__store *s);

/* The store is leaving: stop pulling results. */
void hpl__rdsink_drain(hpl__store *s);

/* Make the module's context (after hpl__rdtask_init: it registers for the end
 * of a moved root's last step; 0 or HPL_ENOMEM). The store stops: free
 * every sink. Free the context once the loop has ended. */
int hpl__rdsink_init(hpl__store *s);
void hpl__rdsink_stop(hpl__store *s);
void hpl__rdsink_free(hpl__store *s);

#endif
