// gloo_coll.cc - time one Gloo collective exactly as mpi_coll.c times MPI.
//
//   gloo_coll OP SIZE REPS --rank R --world W --store-dir DIR --addr IP
//             [--prefix P] [--lead-ms L] [--timeout-s T]
//     OP    bcast | reduce | allreduce   (root rank 0; f32 sum for reductions)
//     SIZE  bytes (a multiple of 4 for reduce/allreduce)
//     REPS  timed repetitions, after one untimed warm-up
//     DIR   rendezvous directory shared by all ranks (gloo FileStore); P is a
//           key prefix inside it (default "hpl"), so one directory can serve
//           several runs one after another if P differs
//     IP    address the tcp transport binds to (the emulated host's address)
//
// Uses the library's default algorithms: gloo::broadcast, gloo::reduce,
// gloo::allreduce (this libgloo 0.5 API with *Options classes).
//
// Timing, verification and output are those of mpi_coll.c: after a barrier,
// rank 0 picks start = now + L ms on CLOCK_MONOTONIC and broadcasts it (8
// bytes, gloo::broadcast); everyone sleeps until start, runs the op, reads
// CLOCK_MONOTONIC, then does nothing until the quiet end (start + max(30 ms,
// 2 x the previous sample), sent with the start: the fair rule of
// README-bench.md); only then does gloo::gather bring the finish times to
// rank 0 (sample = max(finish) - start) and are the bytes checked.  stdout of rank 0: "sample <rep> <s>" per repetition,
// then "median <s> min <s> max <s>".  Exit 0, or 1 on a mismatch or error.

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "benchpin.h"
#include <vector>

namespace {

constexpr size_t kCheckChunk = 64 * 1024;
constexpr int kRedMod = 11;

enum Op { kBcast, kReduce, kAllreduce };

// Tags keep the helper collectives apart from the measured one.
enum Tag : uint32_t { kTagBarrier = 1, kTagStart = 2, kTagOp = 3, kTagGather = 4 };

double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Sleep until CLOCK_MONOTONIC reaches t; true if t had already passed.
bool sleepUntil(double t)
{
    if (now() >= t)
        return true;
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
    }
    return false;
}

// Same byte pattern as mpi_coll.c: 8-byte words mixing word index and rep.
inline uint64_t patternWord(size_t w, int rep)
{
    uint64_t x = (uint64_t)(w + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(rep + 1) * 0xD1B54A32D192ED03ull;
    return x ^ (x >> 29);
}

void fillPattern(unsigned char* dst, size_t off, size_t len, int rep)
{
    size_t w = off / 8, i = 0;
    for (; i + 8 <= len; i += 8, w++) {
        uint64_t v = patternWord(w, rep);
        memcpy(dst + i, &v, 8);
    }
    if (i < len) {
        uint64_t v = patternWord(w, rep);
        memcpy(dst + i, &v, len - i);
    }
}

size_t checkPattern(const unsigned char* buf, size_t size, int rep)
{
    static unsigned char want[kCheckChunk];
    size_t bad = 0;
    for (size_t off = 0; off < size; off += kCheckChunk) {
        size_t len = std::min(kCheckChunk, size - off);
        fillPattern(want, off, len, rep);
        if (memcmp(want, buf + off, len) != 0)
            for (size_t i = 0; i < len; i++)
                bad += want[i] != buf[off + i];
    }
    return bad;
}

// Rank r's input element i = ((i + rep) + 3r) mod 11: sums are exact in f32.
void fillReduce(float* x, size_t n, int rank, int rep)
{
    int k = (int)(((size_t)rep + 3u * (size_t)rank) % kRedMod);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)k;
        if (++k == kRedMod)
            k = 0;
    }
}

size_t checkReduce(const float* y, size_t n, int world, int rep)
{
    float table[kRedMod];
    for (int k = 0; k < kRedMod; k++) {
        long s = 0;
        for (int r = 0; r < world; r++)
            s += (k + 3 * r) % kRedMod;
        table[k] = (float)s;
    }
    size_t bad = 0;
    int k = rep % kRedMod;
    for (size_t i = 0; i < n; i++) {
        bad += y[i] != table[k];
        if (++k == kRedMod)
            k = 0;
    }
    return bad;
}

void sumFloat(void* c, const void* a, const void* b, size_t n)
{
    gloo::sum<float>(c, a, b, n);
}

struct Args {
    Op op = kBcast;
    long long size = -1;
    int reps = -1;
    int rank = -1;
    int world = -1;
    std::string storeDir;
    std::string addr;
    std::string prefix = "hpl";
    double lead = 0.020;
    int timeoutS = 300;
};

void usage()
{
    fprintf(stderr,
            "usage: gloo_coll bcast|reduce|allreduce SIZE REPS --rank R --world W\n"
            "                 --store-dir DIR --addr IP [--prefix P] [--lead-ms L] [--timeout-s T]\n");
}

bool parseArgs(int argc, char** argv, Args& a)
{
    if (argc < 4)
        return false;
    std::string op = argv[1];
    if (op == "bcast")
        a.op = kBcast;
    else if (op == "reduce")
        a.op = kReduce;
    else if (op == "allreduce")
        a.op = kAllreduce;
    else
        return false;
    a.size = atoll(argv[2]);
    a.reps = atoi(argv[3]);
    for (int i = 4; i < argc; i += 2) {
        if (i + 1 >= argc)
            return false;
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--rank")
            a.rank = atoi(v.c_str());
        else if (k == "--world")
            a.world = atoi(v.c_str());
        else if (k == "--store-dir")
            a.storeDir = v;
        else if (k == "--addr")
            a.addr = v;
        else if (k == "--prefix")
            a.prefix = v;
        else if (k == "--lead-ms")
            a.lead = atof(v.c_str()) / 1000.0;
        else if (k == "--timeout-s")
            a.timeoutS = atoi(v.c_str());
        else
            return false;
    }
    return a.size > 0 && a.reps > 0 && a.world > 0 && a.rank >= 0 && a.rank < a.world &&
           !a.storeDir.empty() && !a.addr.empty() && a.lead > 0 && a.timeoutS > 0 &&
           (a.op == kBcast || a.size % 4 == 0);
}

int run(const Args& a)
{
    if (hpl__bench_pin_wanted() && hpl__bench_pin(0, a.rank) != 0)
        perror("gloo_coll: HPL_BENCH_PIN");
    gloo::transport::tcp::attr attr;
    attr.hostname = a.addr;
    attr.ai_family = AF_INET;
    auto dev = gloo::transport::tcp::CreateDevice(attr);

    gloo::rendezvous::FileStore fileStore(a.storeDir);
    gloo::rendezvous::PrefixStore store(a.prefix, fileStore);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(a.rank, a.world);
    ctx->setTimeout(std::chrono::milliseconds((long long)a.timeoutS * 1000));
    ctx->connectFullMesh(store, dev);
    std::shared_ptr<gloo::Context> gctx = ctx;

    const size_t sz = (size_t)a.size, nflt = sz / 4;
    std::vector<unsigned char> buf(sz);
    std::vector<float> in(a.op == kBcast ? 0 : nflt);
    std::vector<double> samples;
    std::vector<double> finishes(a.world);
    unsigned long long bad = 0;
    int late = 0, overran = 0;
    double prev = -1.0; // rank 0: the last repetition's sample

    for (int rep = 0; rep <= a.reps; rep++) { // rep 0 is the warm-up
        if (a.op == kBcast) {
            if (a.rank == 0)
                fillPattern(buf.data(), 0, sz, rep);
            else
                memset(buf.data(), rep & 1 ? 0x5a : 0xa5, sz);
        } else {
            fillReduce(in.data(), nflt, a.rank, rep);
            memset(buf.data(), 0xff, sz); // NaN: never an expected sum
        }

        gloo::BarrierOptions bo(gctx);
        bo.setTag(kTagBarrier);
        gloo::barrier(bo);

        double when[2] = { 0.0, 0.0 }; // start, quiet end
        if (a.rank == 0) {
            when[0] = now() + a.lead;
            double q = prev < 0 ? 0.5 : 2 * prev;
            when[1] = when[0] + std::max(0.030, q);
        }
        {
            gloo::BroadcastOptions so(gctx);
            so.setOutput(when, 2);
            so.setRoot(0);
            so.setTag(kTagStart);
            gloo::broadcast(so);
        }
        const double start = when[0];
        bool wasLate = sleepUntil(start);
        if (rep > 0 && wasLate)
            late++;

        if (a.op == kBcast) {
            gloo::BroadcastOptions o(gctx);
            o.setOutput(buf.data(), sz);
            o.setRoot(0);
            o.setTag(kTagOp);
            gloo::broadcast(o);
        } else if (a.op == kReduce) {
            gloo::ReduceOptions o(gctx);
            o.setInput(in.data(), nflt);
            o.setOutput(reinterpret_cast<float*>(buf.data()), nflt);
            o.setRoot(0);
            o.setReduceFunction(sumFloat);
            o.setTag(kTagOp);
            gloo::reduce(o);
        } else {
            gloo::AllreduceOptions o(gctx);
            o.setInput(in.data(), nflt);
            o.setOutput(reinterpret_cast<float*>(buf.data()), nflt);
            o.setReduceFunction(sumFloat);
            o.setTag(kTagOp);
            gloo::allreduce(o);
        }
        double finish = now();
        if (sleepUntil(when[1]) && rep > 0) // quiet until every rank is done
            overran++;
        {
            gloo::GatherOptions go(gctx);
            go.setInput(&finish, 1);
            if (a.rank == 0)
                go.setOutput(finishes.data(), (size_t)a.world);
            go.setRoot(0);
            go.setTag(kTagGather);
            gloo::gather(go);
        }

        size_t b = 0;
        if (a.op == kBcast && a.rank != 0)
            b = checkPattern(buf.data(), sz, rep);
        else if (a.op == kAllreduce || (a.op == kReduce && a.rank == 0))
            b = checkReduce(reinterpret_cast<const float*>(buf.data()), nflt, a.world, rep);
        if (b != 0)
            fprintf(stderr, "gloo_coll: rank %d rep %d: %zu wrong %s\n", a.rank, rep, b,
                    a.op == kBcast ? "bytes" : "elements");
        bad += b;

        if (a.rank == 0)
            prev = *std::max_element(finishes.begin(), finishes.end()) - start;
        if (a.rank == 0 && rep > 0) {
            double last = prev + start;
            samples.push_back(last - start);
            printf("sample %d %.9f\n", rep, last - start);
            fflush(stdout);
        }
    }

    // Totals at rank 0: mismatches and late starts of every rank.
    unsigned long long counts[3] = { bad, (unsigned long long)late, (unsigned long long)overran };
    std::vector<unsigned long long> all(a.rank == 0 ? 3 * (size_t)a.world : 0);
    {
        gloo::GatherOptions go(gctx);
        go.setInput(counts, 3);
        if (a.rank == 0)
            go.setOutput(all.data(), all.size());
        go.setRoot(0);
        go.setTag(kTagGather);
        gloo::gather(go);
    }
    unsigned long long badAll = 0, lateAll = 0, overranAll = 0;
    for (size_t i = 0; i < all.size(); i += 3) {
        badAll += all[i];
        lateAll += all[i + 1];
        overranAll += all[i + 2];
    }
    if (a.rank == 0) {
        std::sort(samples.begin(), samples.end());
        size_t n = samples.size();
        double med = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
        if (lateAll > 0)
            fprintf(stderr, "gloo_coll: %llu late starts; raise --lead-ms\n", lateAll);
        if (overranAll > 0)
            fprintf(stderr, "gloo_coll: %llu rank finishes after the quiet window (twice the "
                            "previous sample)\n", overranAll);
        if (badAll > 0) {
            fprintf(stderr, "gloo_coll: %llu mismatches in total\n", badAll);
            printf("mismatches %llu\n", badAll);
        }
        printf("median %.9f min %.9f max %.9f\n", med, samples.front(), samples.back());
        fflush(stdout);
    }
    {
        gloo::BroadcastOptions o(gctx);
        o.setOutput(&badAll, 1);
        o.setRoot(0);
        o.setTag(kTagStart);
        gloo::broadcast(o);
    }
    // Nobody closes its connections while another rank still uses them.
    gloo::BarrierOptions bo(gctx);
    bo.setTag(kTagBarrier);
    gloo::barrier(bo);
    return badAll > 0 ? 1 : 0;
}

} // namespace

int main(int argc, char** argv)
{
    Args a;
    if (!parseArgs(argc, argv, a)) {
        usage();
        return 2;
    }
    try {
        int rc = run(a);
        fflush(stdout);
        return rc;
    } catch (const std::exception& e) {
        fprintf(stderr, "gloo_coll: rank %d: %s\n", a.rank, e.what());
        return 1;
    }
}
