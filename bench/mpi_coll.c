/*
 * mpi_coll.c - time one MPI collective the way every hoplite comparison is
 * timed (see README-bench.md, "Timing").
 *
 *   mpi_coll OP SIZE REPS [--lead-ms L]
 *     OP    bcast | reduce | allreduce   (root rank 0; f32 sum for reductions)
 *           | shuffle (MPI_Alltoall; "alltoall" is the same)
 *     SIZE  bytes (a multiple of 4 for reduce/allreduce; for shuffle the
 *           partition: each rank sends SIZE bytes to every rank)
 *     REPS  timed repetitions, after one untimed warm-up
 *
 * With HPL_BENCH_PIN=1 in its environment, rank r runs on CPU r mod the
 * CPUs (what bench_coll --pin does to hoplite's workers): the emulated
 * hosts are namespaces of one machine, so a launcher's own binding would
 * put every host's first rank on CPU 0.
 *
 * Built twice from this one file: with mpicc.mpich and with mpicc.openmpi.
 *
 * Per repetition: every rank prepares its buffers; after a barrier rank 0 reads
 * CLOCK_MONOTONIC, picks start = now + L ms (default 20) and broadcasts it
 * (8 bytes); every rank sleeps until start (clock_nanosleep, TIMER_ABSTIME),
 * runs the collective, reads CLOCK_MONOTONIC, and then does nothing until
 * the quiet end (the fair rule of README-bench.md, the same for hoplite and
 * Gloo): start + max(30 ms, 2 x the previous repetition's sample), also
 * sent by rank 0 with the start. Only then are the finish times gathered
 * at rank 0 (sample = max(finish) - start) and the bytes checked, so ranks
 * that are done take no CPU from ranks still receiving. A rank that
 * finishes after the quiet end is counted (stderr: raise nothing, it only
 * means the window was short for that repetition).  For reduce the max over all
 * ranks is used, not just the root's finish: conservative, and at most a
 * leaf's return after sending its last segment.  A rank whose start message
 * arrived after the start time is counted as late (reported on stderr;
 * raise --lead-ms if it happens).
 *
 * Every repetition is verified: bcast receivers compare all bytes against
 * the pattern of that repetition; reduce (root) and allreduce (every rank)
 * compare every element with the exact sum of small integers; shuffle:
 * every rank compares each received block with the pattern of (sender,
 * receiver, repetition), so a block from the wrong rank is caught too.
 *
 * stdout of rank 0:  "sample <rep> <seconds>" per timed repetition, then
 * "median <s> min <s> max <s>".  Exit status 0, or 1 on any mismatch or error.
 * The results are printed before MPI_Finalize, and the exit is bounded by a
 * timer (MPICH 4.0 over UCX can spin forever in MPI_Finalize).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchpin.h"

#define MC_CHECK_CHUNK (64 * 1024)
#define MC_FINALIZE_TIMEOUT_S 10
#define MC_RED_MOD 11
#define MC_QUIET_MIN 0.030  /* s: the shortest quiet window after the start */
#define MC_QUIET_FIRST 0.5  /* s: the warm-up's window (no sample yet) */

enum mc_op { MC_BCAST, MC_REDUCE, MC_ALLREDUCE, MC_SHUFFLE };

static volatile sig_atomic_t mc_exit_status;

static void mc_on_alarm(int sig)
{
    (void)sig;
    _exit(mc_exit_status);
}

static double mc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sleep until CLOCK_MONOTONIC reaches t.  Returns 1 if t had already passed. */
static int mc_sleep_until(double t)
{
    if (mc_now() >= t)
        return 1;
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
    return 0;
}

/* Broadcast pattern: 8 bytes at a time from a mix of the word index and the
 * repetition, so every byte of every repetition differs from the last. */
static inline uint64_t mc_word(size_t w, int rep)
{
    uint64_t x = (uint64_t)(w + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(rep + 1) * 0xD1B54A32D192ED03ull;
    return x ^ (x >> 29);
}

/* Fill len bytes starting at byte offset off of the pattern of rep. */
static void mc_fill_pattern(unsigned char *dst, size_t off, size_t len, int rep)
{
    /* off is always a multiple of 8 here */
    size_t w = off / 8, i = 0;
    for (; i + 8 <= len; i += 8, w++) {
        uint64_t v = mc_word(w, rep);
        memcpy(dst + i, &v, 8);
    }
    if (i < len) {
        uint64_t v = mc_word(w, rep);
        memcpy(dst + i, &v, len - i);
    }
}

/* Count bytes of buf that differ from the pattern of rep (chunk-wise, so no
 * second full-size buffer is needed). */
static size_t mc_check_pattern(const unsigned char *buf, size_t size, int rep)
{
    static unsigned char want[MC_CHECK_CHUNK];
    size_t bad = 0;
    for (size_t off = 0; off < size; off += MC_CHECK_CHUNK) {
        size_t len = size - off < MC_CHECK_CHUNK ? size - off : MC_CHECK_CHUNK;
        mc_fill_pattern(want, off, len, rep);
        if (memcmp(want, buf + off, len) != 0)
            for (size_t i = 0; i < len; i++)
                bad += want[i] != buf[off + i];
    }
    return bad;
}

/* Reduction input of rank r: element i is ((i + rep) + 3r) mod 11, a small
 * integer, so any sum over up to millions of ranks is exact in f32.  The
 * expected sum depends only on k = (i + rep) mod 11: table[k]. */
static void mc_fill_red(float *x, size_t n, int rank, int rep)
{
    int k = (int)(((size_t)rep + 3u * (size_t)rank) % MC_RED_MOD);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)k;
        if (++k == MC_RED_MOD)
            k = 0;
    }
}

static size_t mc_check_red(const float *y, size_t n, int world, int rep)
{
    float table[MC_RED_MOD];
    for (int k = 0; k < MC_RED_MOD; k++) {
        long s = 0;
        for (int r = 0; r < world; r++)
            s += (k + 3 * r) % MC_RED_MOD;
        table[k] = (float)s;
    }
    size_t bad = 0;
    int k = rep % MC_RED_MOD;
    for (size_t i = 0; i < n; i++) {
        bad += y[i] != table[k];
        if (++k == MC_RED_MOD)
            k = 0;
    }
    return bad;
}

/* Shuffle: the pattern "repetition" of the block rank `from` sends rank
 * `to`, distinct for every (from, to, rep) of up to 4096 ranks. */
static int mc_shuffle_tag(int from, int to, int rep, int world)
{
    return (rep * world + from) * world + to;
}

static int mc_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void mc_usage(void)
{
    fprintf(stderr, "usage: mpi_coll bcast|reduce|allreduce|shuffle SIZE REPS [--lead-ms L]\n");
}

int main(int argc, char **argv)
{
    int rank, world;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (hpl__bench_pin_wanted() && hpl__bench_pin(0, rank) != 0)
        perror("mpi_coll: HPL_BENCH_PIN");

    enum mc_op op = MC_BCAST;
    long long size = -1;
    int reps = -1;
    double lead = 0.020;
    int ok = argc == 4 || argc == 6;
    if (ok) {
        if (strcmp(argv[1], "bcast") == 0)
            op = MC_BCAST;
        else if (strcmp(argv[1], "reduce") == 0)
            op = MC_REDUCE;
        else if (strcmp(argv[1], "allreduce") == 0)
            op = MC_ALLREDUCE;
        else if (strcmp(argv[1], "shuffle") == 0 || strcmp(argv[1], "alltoall") == 0)
            op = MC_SHUFFLE;
        else
            ok = 0;
        size = atoll(argv[2]);
        reps = atoi(argv[3]);
        if (argc == 6) {
            if (strcmp(argv[4], "--lead-ms") == 0 && atof(argv[5]) > 0)
                lead = atof(argv[5]) / 1000.0;
            else
                ok = 0;
        }
        if (size <= 0 || size > INT_MAX || reps <= 0 ||
            (op != MC_BCAST && op != MC_SHUFFLE && size % 4 != 0))
            ok = 0;
        /* the shuffle's buffers hold world blocks of SIZE */
        if (op == MC_SHUFFLE && size > (long long)(SIZE_MAX / 2) / world)
            ok = 0;
    }
    if (!ok) {
        if (rank == 0)
            mc_usage();
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }

    size_t sz = (size_t)size, nflt = sz / 4;
    /* shuffle: buf receives world blocks of sz; sbuf sends as many */
    size_t bufsz = op == MC_SHUFFLE ? sz * (size_t)world : sz;
    unsigned char *buf = malloc(bufsz);
    unsigned char *sbuf = op == MC_SHUFFLE ? malloc(bufsz) : NULL;
    float *in = op == MC_BCAST || op == MC_SHUFFLE ? NULL : malloc(sz);
    double *samples = malloc(sizeof(double) * (size_t)reps);
    double *finishes = malloc(sizeof(double) * (size_t)world);
    if (buf == NULL || (op != MC_BCAST && op != MC_SHUFFLE && in == NULL) ||
        (op == MC_SHUFFLE && sbuf == NULL) || samples == NULL || finishes == NULL) {
        fprintf(stderr, "mpi_coll: rank %d: out of memory for %zu bytes\n", rank, sz);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    unsigned long long bad = 0;
    int late = 0, overran = 0;
    double prev = -1.0; /* rank 0: the last repetition's sample */
    for (int rep = 0; rep <= reps; rep++) { /* rep 0 is the warm-up */
        /* Prepare: outside the timed region. */
        if (op == MC_BCAST) {
            if (rank == 0)
                mc_fill_pattern(buf, 0, sz, rep);
            else
                memset(buf, rep & 1 ? 0x5a : 0xa5, sz);
        } else if (op == MC_SHUFFLE) {
            for (int to = 0; to < world; to++)
                mc_fill_pattern(sbuf + (size_t)to * sz, 0, sz,
                                mc_shuffle_tag(rank, to, rep, world));
            memset(buf, rep & 1 ? 0x5a : 0xa5, bufsz);
        } else {
            mc_fill_red(in, nflt, rank, rep);
            memset(buf, 0xff, sz); /* NaN: never equal to an expected sum */
        }

        /* Every rank has prepared before the start time is chosen; the
         * barrier's exit skew does not matter, the start lies ahead. */
        MPI_Barrier(MPI_COMM_WORLD);
        double when[2] = {0.0, 0.0}; /* start, quiet end */
        if (rank == 0) {
            when[0] = mc_now() + lead;
            double q = prev < 0 ? MC_QUIET_FIRST : 2 * prev;
            when[1] = when[0] + (q > MC_QUIET_MIN ? q : MC_QUIET_MIN);
        }
        MPI_Bcast(when, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        double start = when[0];
        int was_late = mc_sleep_until(start);
        if (rep > 0)
            late += was_late;

        switch (op) {
        case MC_BCAST:
            MPI_Bcast(buf, (int)sz, MPI_BYTE, 0, MPI_COMM_WORLD);
            break;
        case MC_REDUCE:
            MPI_Reduce(in, buf, (int)nflt, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
            break;
        case MC_ALLREDUCE:
            MPI_Allreduce(in, buf, (int)nflt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            break;
        case MC_SHUFFLE:
            MPI_Alltoall(sbuf, (int)sz, MPI_BYTE, buf, (int)sz, MPI_BYTE, MPI_COMM_WORLD);
            break;
        }
        double finish = mc_now();
        if (mc_sleep_until(when[1]) && rep > 0) /* quiet: nothing until every rank is done */
            overran++;
        MPI_Gather(&finish, 1, MPI_DOUBLE, finishes, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);

        size_t b = 0;
        if (op == MC_BCAST && rank != 0)
            b = mc_check_pattern(buf, sz, rep);
        else if (op == MC_ALLREDUCE || (op == MC_REDUCE && rank == 0))
            b = mc_check_red((const float *)buf, nflt, world, rep);
        else if (op == MC_SHUFFLE)
            for (int from = 0; from < world; from++)
                b += mc_check_pattern(buf + (size_t)from * sz, sz,
                                      mc_shuffle_tag(from, rank, rep, world));
        if (b != 0)
            fprintf(stderr, "mpi_coll: rank %d rep %d: %zu wrong %s\n", rank, rep, b,
                    op == MC_BCAST || op == MC_SHUFFLE ? "bytes" : "elements");
        bad += b;

        if (rank == 0) {
            double last = finishes[0];
            for (int r = 1; r < world; r++)
                if (finishes[r] > last)
                    last = finishes[r];
            prev = last - start;
        }
        if (rank == 0 && rep > 0) {
            samples[rep - 1] = prev;
            printf("sample %d %.9f\n", rep, samples[rep - 1]);
            fflush(stdout);
        }
    }

    unsigned long long bad_all = 0;
    int late_all = 0, overran_all = 0;
    MPI_Reduce(&bad, &bad_all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&late, &late_all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&overran, &overran_all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(samples, (size_t)reps, sizeof(double), mc_cmp_double);
        double med = reps % 2 ? samples[reps / 2] : (samples[reps / 2 - 1] + samples[reps / 2]) / 2;
        if (late_all > 0)
            fprintf(stderr, "mpi_coll: %d late starts (start message arrived after the start time); "
                            "raise --lead-ms\n", late_all);
        if (overran_all > 0)
            fprintf(stderr, "mpi_coll: %d rank finishes after the quiet window (twice the previous "
                            "sample): those ranks were not kept quiet\n", overran_all);
        if (bad_all > 0) {
            fprintf(stderr, "mpi_coll: %llu mismatches in total\n", bad_all);
            printf("mismatches %llu\n", bad_all);
        }
        printf("median %.9f min %.9f max %.9f\n", med, samples[0], samples[reps - 1]);
        fflush(stdout);
    }
    MPI_Bcast(&bad_all, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    mc_exit_status = bad_all > 0 ? 1 : 0;
    fflush(stderr);

    /* Bounded exit: if Finalize hangs, the alarm ends the process with the
     * status already decided.  HPL_MPI_FINALIZE_TIMEOUT=S sets the bound
     * (default 10 s); 0 skips MPI_Finalize and exits at once (all
     * communication is over by now; used for MPICH, whose Finalize over UCX
     * spins for the whole bound after large transfers). */
    const char *fin = getenv("HPL_MPI_FINALIZE_TIMEOUT");
    int fin_s = fin != NULL ? atoi(fin) : MC_FINALIZE_TIMEOUT_S;
    if (fin_s <= 0)
        _exit(mc_exit_status);
    signal(SIGALRM, mc_on_alarm);
    alarm((unsigned)fin_s);
    MPI_Finalize();
    free(buf);
    free(sbuf);
    free(in);
    free(samples);
    free(finishes);
    return mc_exit_status;
}
