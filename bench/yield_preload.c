/*
 * yield_preload.c - LD_PRELOAD shim for MPICH over UCX on an oversubscribed
 * machine (many emulated hosts sharing 2 cores).
 *
 * MPICH ranks wait by calling ucp_worker_progress() in a loop.  With more
 * ranks than cores, a spinning rank keeps its core for a whole scheduler
 * tick (4 ms here) while the rank that has real work waits, so a 1 KiB
 * broadcast takes several ticks.  This shim wraps ucp_worker_progress():
 * when a call made no progress (returned 0), it calls sched_yield() so a
 * runnable rank gets the core.  Progress itself is unchanged.
 *
 * Build: gcc -O2 -shared -fPIC -o yield_preload.so yield_preload.c -ldl
 * Use:   mpiexec ... -genv LD_PRELOAD /path/yield_preload.so ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ucp_worker *ucp_worker_h;
typedef unsigned (*yp_progress_fn)(ucp_worker_h);

static yp_progress_fn yp_real;

unsigned ucp_worker_progress(ucp_worker_h worker)
{
    if (yp_real == NULL) {
        yp_real = (yp_progress_fn)dlsym(RTLD_NEXT, "ucp_worker_progress");
        if (yp_real == NULL) {
            fprintf(stderr, "yield_preload: ucp_worker_progress not found\n");
            abort();
        }
    }
    unsigned n = yp_real(worker);
    if (n == 0)
        sched_yield();
    return n;
}
