//===- Gemm.cpp - the host's GEMM kernel and its threads (see Gemm.h) -----===//

#include "lazymlir/Runtime/Gemm.h"
#include "OpenMP.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>

namespace lazymlir {

#define GEMM_ISA(ns)                                                           \
  namespace ns {                                                               \
  GemmBlocking tile();                                                         \
  void chunk(const GemmArgs &, const GemmBlocking &, int64_t, int64_t,         \
             int64_t, int64_t);                                                \
  float fmaLoop(int64_t);                                                      \
  int lanes();                                                                 \
  }
GEMM_ISA(avx512)
GEMM_ISA(avx2)
GEMM_ISA(sse2)
#undef GEMM_ISA

namespace {

struct Kernel {
  const char *isa;
  GemmChunkFn chunk;
  GemmBlocking blocking;
  float (*fmaLoop)(int64_t); // the FMA chains measureFmaPeak times
  int lanes;                 // floats per vector
};

int64_t cacheBytes(int name, int64_t fallback) {
  long bytes = sysconf(name);
  return bytes > 0 ? bytes : fallback;
}

int64_t roundDown(int64_t value, int64_t multiple) {
  return std::max(multiple, value / multiple * multiple);
}

/// The blocking of a micro-tile from the caches this host reports: a KC x NR
/// sliver of B in half of L1, an MC x KC block of A in half of L2, a
/// KC x NC panel of B in this core's share of half of L3.
GemmBlocking blockingFor(GemmBlocking tile) {
  int64_t l1 = cacheBytes(_SC_LEVEL1_DCACHE_SIZE, 32 << 10);
  int64_t l2 = cacheBytes(_SC_LEVEL2_CACHE_SIZE, 256 << 10);
  int64_t l3 = cacheBytes(_SC_LEVEL3_CACHE_SIZE, 8 << 20);
  int64_t cores = teamCores();
  tile.kc = std::clamp<int64_t>(roundDown(l1 / 2 / (tile.nr * 4), 8), 64, 1024);
  tile.mc = std::clamp<int64_t>(roundDown(l2 / 2 / (tile.kc * 4), tile.mr),
                                tile.mr, 4096 / tile.mr * tile.mr);
  tile.nc =
      std::clamp<int64_t>(roundDown(l3 / 2 / cores / (tile.kc * 4), tile.nr),
                          tile.nr, 8192 / tile.nr * tile.nr);
  return tile;
}

Kernel kernelFor(const std::string &isa) {
  if (isa == "avx512f")
    return {"avx512f", &avx512::chunk, blockingFor(avx512::tile()),
            &avx512::fmaLoop, avx512::lanes()};
  if (isa == "avx2")
    return {"avx2", &avx2::chunk, blockingFor(avx2::tile()), &avx2::fmaLoop,
            avx2::lanes()};
  return {"sse2", &sse2::chunk, blockingFor(sse2::tile()), &sse2::fmaLoop,
          sse2::lanes()};
}

bool hostHas(const std::string &isa) {
  __builtin_cpu_init();
  if (isa == "avx512f")
    return __builtin_cpu_supports("avx512f");
  if (isa == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return isa == "sse2";
}

const Kernel &hostKernel() {
  static const Kernel kernel = kernelFor(hostHas("avx512f") ? "avx512f"
                                         : hostHas("avx2")  ? "avx2"
                                                            : "sse2");
  return kernel;
}

struct Job {
  const GemmArgs *args;
  const Kernel *kernel;
  bool byRows;
  int64_t step, chunks;
  std::atomic<int64_t> next{0};
};

void runChunks(void *data) {
  Job &job = *static_cast<Job *>(data);
  const GemmArgs &g = *job.args;
  for (int64_t i; (i = job.next.fetch_add(1)) < job.chunks;) {
    int64_t begin = i * job.step;
    if (job.byRows)
      job.kernel->chunk(g, job.kernel->blocking, begin,
                        std::min(g.m, begin + job.step), 0, g.n);
    else
      job.kernel->chunk(g, job.kernel->blocking, 0, g.m, begin,
                        std::min(g.n, begin + job.step));
  }
}

void run(const GemmArgs &g, const Kernel &kernel, int threads) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0)
    return;
  // Chunks of the larger dimension, a few per thread (taken in turn, so a
  // thread whose core is busy takes fewer), each a whole number of
  // micro-tiles and at least a few of them (every chunk packs the other
  // operand again).
  Job job;
  job.args = &g;
  job.kernel = &kernel;
  job.byRows = g.m >= g.n;
  int64_t extent = job.byRows ? g.m : g.n;
  int64_t unit = job.byRows ? kernel.blocking.mr : kernel.blocking.nr;
  int64_t perThread = threads > 1 ? 3 : 1;
  int64_t chunks = std::max<int64_t>(
      1, std::min<int64_t>(threads * perThread, extent / (4 * unit)));
  job.step = (extent + chunks - 1) / chunks;
  job.step = (job.step + unit - 1) / unit * unit;
  job.chunks = (extent + job.step - 1) / job.step;
  runOnTeam(job.chunks > 1 ? threads : 1, &runChunks, &job);
}

/// Product `i` of a batch whose operands are `batchStrides` elements apart.
GemmArgs nthProduct(const GemmArgs &args, int64_t i, int64_t aBatch,
                    int64_t bBatch, int64_t cBatch) {
  GemmArgs g = args;
  g.a += i * aBatch;
  g.b += i * bBatch;
  g.c += i * cBatch;
  return g;
}

struct BatchJob {
  const GemmArgs *args;
  int64_t aBatch, bBatch, cBatch, batch;
  std::atomic<int64_t> next{0};
};

void runProducts(void *data) {
  BatchJob &job = *static_cast<BatchJob *>(data);
  const Kernel &kernel = hostKernel();
  for (int64_t i; (i = job.next.fetch_add(1)) < job.batch;) {
    GemmArgs g = nthProduct(*job.args, i, job.aBatch, job.bBatch, job.cBatch);
    kernel.chunk(g, kernel.blocking, 0, g.m, 0, g.n);
  }
}

} // namespace

void sgemmBatched(const GemmArgs &args, int64_t batch, int64_t aBatch,
                  int64_t bBatch, int64_t cBatch, int threads) {
  if (threads <= 0)
    threads = teamCores();
  const Kernel &kernel = hostKernel();
  // A product too small to split well (under ~4 micro-tile rows per thread
  // in each dimension): the threads take whole products instead.
  bool small = args.m < 4 * kernel.blocking.mr * threads &&
               args.n < 4 * kernel.blocking.nr * threads;
  if (batch > 1 && threads > 1 && (small || batch >= 4 * threads)) {
    BatchJob job;
    job.args = &args;
    job.aBatch = aBatch;
    job.bBatch = bBatch;
    job.cBatch = cBatch;
    job.batch = batch;
    runOnTeam(threads, &runProducts, &job);
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    run(nthProduct(args, i, aBatch, bBatch, cBatch), kernel, threads);
}

bool sgemmWith(const GemmArgs &args, const std::string &isa, int threads) {
  if (!isa.empty() && !hostHas(isa))
    return false;
  run(args, isa.empty() ? hostKernel() : kernelFor(isa),
      threads > 0 ? threads : teamCores());
  return true;
}

namespace {
struct PeakJob {
  float (*loop)(int64_t);
  int64_t iterations;
  std::atomic<float> sink{0.0f};
};
void runPeak(void *data) {
  PeakJob &job = *static_cast<PeakJob *>(data);
  job.sink.store(job.loop(job.iterations), std::memory_order_relaxed);
}
} // namespace

double measureFmaPeak() {
  const Kernel &kernel = hostKernel();
  int threads = teamCores();
  double best = 0.0;
  for (int round = 0; round < 3; ++round) {
    PeakJob job;
    job.loop = kernel.fmaLoop;
    job.iterations = 4'000'000;
    auto start = std::chrono::steady_clock::now();
    runOnTeam(threads, &runPeak, &job);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    double flops = 2.0 * 12 * kernel.lanes * job.iterations * threads;
    best = std::max(best, flops / seconds / 1e9);
  }
  return best;
}

std::string gemmKernelDescription() {
  const Kernel &k = hostKernel();
  return std::string(k.isa) + " " + std::to_string(k.blocking.mr) + "x" +
         std::to_string(k.blocking.nr) + ", kc " +
         std::to_string(k.blocking.kc) + " mc " +
         std::to_string(k.blocking.mc) + " nc " + std::to_string(k.blocking.nc);
}

} // namespace lazymlir

extern "C" void lazymlir_sgemm_batched(int64_t batch, int64_t m, int64_t n,
                                       int64_t k, int64_t a, int64_t aBatch,
                                       int64_t aRow, int64_t aCol, int64_t b,
                                       int64_t bBatch, int64_t bRow,
                                       int64_t bCol, int64_t c, int64_t cBatch,
                                       int64_t cRow, int64_t cCol,
                                       int64_t threads) {
  lazymlir::GemmArgs args = lazymlir::gemmArgs(
      m, n, k, static_cast<uintptr_t>(a), aRow, aCol, static_cast<uintptr_t>(b),
      bRow, bCol, static_cast<uintptr_t>(c), cRow, cCol);
  lazymlir::sgemmBatched(args, batch, aBatch, bBatch, cBatch,
                         static_cast<int>(threads));
}
