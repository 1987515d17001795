/*
 * yield_preload.c - LD_PRELOAD shim for MPI ranks on an oversubscribed
 * machine (many emulated hosts sharing 2 cores).
 *
 * MPI ranks wait by calling a progress function in a loop: MPICH over UCX
 * calls ucp_worker_progress(), Open MPI calls opal_progress().  With more
 * ranks than cores a spinning rank keeps its core for a whole scheduler
 * tick (4 ms here) while the rank that has real work waits: a 1 KiB MPICH
 * broadcast took 4-12 ms.  This shim wraps both functions; when a call made
 * no progress (returned 0) it gives the core away:
 *   HPL_YIELD_SLEEP_US unset or 0: sched_yield()
 *   HPL_YIELD_SLEEP_US=n > 0:      nanosleep(n microseconds) (the task leaves
 *                                  the run queue; costs up to ~n + 50 us of
 *                                  latency per idle wait)
 * Progress itself is unchanged.  Each wrapper looks its real function up
 * lazily, so the shim can be preloaded into either MPI.
 *
 * Build: gcc -O2 -shared -fPIC -o yield_preload.so yield_preload.c -ldl
 * Use:   mpiexec.hydra ... -genv LD_PRELOAD /path/yield_preload.so ...
 *        mpirun.openmpi ... -x LD_PRELOAD=/path/yield_preload.so ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct ucp_worker *ucp_worker_h;
typedef unsigned (*yp_ucp_fn)(ucp_worker_h);
typedef int (*yp_opal_fn)(void);

static long yp_sleep_ns = -1; /* -1: not read yet; 0: sched_yield */

static void *yp_lookup(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        fprintf(stderr, "yield_preload: %s not found\n", name);
        abort();
    }
    return f;
}

static void yp_idle(void)
{
    if (yp_sleep_ns < 0) {
        const char *s = getenv("HPL_YIELD_SLEEP_US");
        long us = s != NULL ? atol(s) : 0;
        yp_sleep_ns = us > 0 ? us * 1000 : 0;
    }
    if (yp_sleep_ns == 0) {
        sched_yield();
    } else {
        struct timespec ts = { 0, yp_sleep_ns };
        nanosleep(&ts, NULL);
    }
}

unsigned ucp_worker_progress(ucp_worker_h worker)
{
    static yp_ucp_fn real;
    if (real == NULL)
        real = (yp_ucp_fn)yp_lookup("ucp_worker_progress");
    unsigned n = real(worker);
    if (n == 0)
        yp_idle();
    return n;
}

int opal_progress(void)
{
    static yp_opal_fn real;
    if (real == NULL)
        real = (yp_opal_fn)yp_lookup("opal_progress");
    int n = real();
    if (n <= 0)
        yp_idle();
    return n;
}
