//===- Gemm.cpp - the host's GEMM kernel and its threads (see Gemm.h) -----===//

#include "lazymlir/Runtime/Gemm.h"
#include "GemmScratch.h"
#include "OpenMP.h"

#include <cpuid.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <cstring>
#include <thread>
#include <vector>

namespace lazymlir {

float *gemmScratch(GemmBuffer which, size_t floats) {
  struct Buffer {
    float *data = nullptr;
    size_t capacity = 0;
    ~Buffer() { std::free(data); }
  };
  static thread_local Buffer buffers[3];
  Buffer &buffer = buffers[static_cast<int>(which)];
  if (floats > buffer.capacity) {
    std::free(buffer.data);
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    buffer.data = static_cast<float *>(std::aligned_alloc(64, bytes));
    if (!buffer.data)
      std::abort(); // out of memory for a few MB
    buffer.capacity = bytes / sizeof(float);
  }
  return buffer.data;
}

float bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return 0xffff;
  return static_cast<uint16_t>((bits + 0x7fffu + (bits >> 16 & 1u)) >> 16);
}

#define GEMM_ISA(ns)                                                           \
  namespace ns {                                                               \
  GemmBlocking tile();                                                         \
  void chunk(const GemmArgs &, const GemmBlocking &, int64_t, int64_t,         \
             int64_t, int64_t);                                                \
  void packPanel(const GemmArgs &, int64_t, int64_t, int64_t, int64_t,         \
                 int64_t, int64_t, float *);                                   \
  void panelRows(const GemmArgs &, const GemmBlocking &, int64_t, int64_t,     \
                 int64_t, int64_t, const float *, int64_t, int64_t, bool);     \
  float fmaLoop(int64_t);                                                      \
  int lanes();                                                                 \
  }
GEMM_ISA(avx512)
GEMM_ISA(avx512bf16)
GEMM_ISA(avx2)
GEMM_ISA(sse2)
#undef GEMM_ISA

namespace {

struct Kernel {
  const char *isa;
  GemmChunkFn chunk;
  GemmPackPanelFn packPanel;
  GemmPanelRowsFn panelRows;
  GemmBlocking blocking;
  float (*fmaLoop)(int64_t); // the FMA chains measureFmaPeak times
  int lanes;                 // floats per vector
  int64_t abBytes;           // bytes of an element of A and B (C: float)
};

int64_t cacheBytes(int name, int64_t fallback) {
  long bytes = sysconf(name);
  return bytes > 0 ? bytes : fallback;
}

int64_t roundDown(int64_t value, int64_t multiple) {
  return std::max(multiple, value / multiple * multiple);
}

/// The blocking of a micro-tile from the caches this host reports: a KC x NR
/// sliver of B in `l1Share` of L1 (half, BLIS's rule, or all of it: a longer
/// KC re-reads C's tile less often, which the measured choice below weighs),
/// an MC x KC block of A in half of L2, a KC x NC panel of B in this core's
/// share of half of L3 (A's and B's elements `bytes` wide). `kc` > 0: that
/// KC (one panel of a product's whole K), MC and NC from it.
GemmBlocking blockingFor(GemmBlocking tile, int64_t bytes, double l1Share,
                         int64_t kc = 0) {
  int64_t l1 = cacheBytes(_SC_LEVEL1_DCACHE_SIZE, 32 << 10);
  int64_t l2 = cacheBytes(_SC_LEVEL2_CACHE_SIZE, 256 << 10);
  // bf16 operands: twice the K per byte, and C (float32, read and written
  // once per KC) weighs twice as much at the dot product's doubled rate:
  // the sliver and the block take all of L1 and L2 (on a Zen 4, KC 512
  // instead of 256: 2048^3 ~340 -> ~375 GFLOP/s, BERT-base's 1024x768 x
  // 768x3072 ~300 -> ~335, sequential runs, noisy host).
  if (bytes == 2) {
    l1Share = 1.0;
    l2 *= 2;
  }
  int64_t l3 = cacheBytes(_SC_LEVEL3_CACHE_SIZE, 8 << 20);
  int64_t cores = teamCores();
  int64_t sliver = static_cast<int64_t>(l1 * l1Share);
  tile.kc = kc > 0 ? kc
                   : std::clamp<int64_t>(
                         roundDown(sliver / (tile.nr * bytes), 8), 64, 1024);
  tile.mc = std::clamp<int64_t>(roundDown(l2 / 2 / (tile.kc * bytes), tile.mr),
                                tile.mr, 4096 / tile.mr * tile.mr);
  tile.nc = std::clamp<int64_t>(
      roundDown(l3 / 2 / cores / (tile.kc * bytes), tile.nr), tile.nr,
      8192 / tile.nr * tile.nr);
  return tile;
}

Kernel kernelFor(const std::string &isa, double l1Share = 0.5) {
#define GEMM_KERNEL(name, ns, bytes)                                           \
  Kernel {                                                                     \
    name, &ns::chunk, &ns::packPanel, &ns::panelRows,                          \
        blockingFor(ns::tile(), bytes, l1Share), &ns::fmaLoop, ns::lanes(),    \
        bytes                                                                  \
  }
  if (isa == "avx512bf16")
    return GEMM_KERNEL("avx512bf16", avx512bf16, 2);
  if (isa == "avx512f")
    return GEMM_KERNEL("avx512f", avx512, 4);
  if (isa == "avx2")
    return GEMM_KERNEL("avx2", avx2, 4);
  return GEMM_KERNEL("sse2", sse2, 4);
#undef GEMM_KERNEL
}

bool hostHas(const std::string &isa) {
  __builtin_cpu_init();
  if (isa == "avx512bf16") {
    // CPUID leaf 7, sub-leaf 1: EAX bit 5 (AVX512_BF16).
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx512f") &&
           __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax >> 5 & 1);
  }
  if (isa == "avx512f")
    return __builtin_cpu_supports("avx512f");
  if (isa == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return isa == "sse2";
}

void run(const GemmArgs &g, const Kernel &kernel, int threads);

/// The float32 kernels' ISAs this host runs, widest first; SSE2 only
/// without AVX2 (it is never the faster then).
std::vector<const char *> hostFloatIsas() {
  std::vector<const char *> isas;
  for (const char *isa : {"avx512f", "avx2", "sse2"})
    if (hostHas(isa) && (isas.empty() || std::string(isa) != "sse2"))
      isas.push_back(isa);
  return isas;
}

/// The float32 kernels this host can run, widest first, each with B's sliver
/// in half of L1 and in all of it (when that changes KC).
std::vector<Kernel> candidateKernels() {
  std::vector<Kernel> kernels;
  for (const char *isa : hostFloatIsas()) {
    kernels.push_back(kernelFor(isa, 0.5));
    Kernel whole = kernelFor(isa, 1.0);
    if (whole.blocking.kc != kernels.back().blocking.kc)
      kernels.push_back(whole);
  }
  return kernels;
}

/// The host's float32 kernel, picked by measurement: which ISA's micro-kernel
/// and which KC run fastest depends on the core, not only on what it
/// supports (a Zen 4 executes 512-bit FMAs as two 256-bit halves, and its
/// AVX2 6x16 kernel outran the AVX-512 14x32 one by ~7%, KC 256 outran
/// KC 128 by ~7%). Each candidate multiplies 168x512 by 512x256 on this
/// thread (packing included; ~0.4 ms), in interleaved rounds; a candidate
/// replaces the one picked so far only when its best time is at least 3%
/// shorter, so near ties keep the earlier (wider, BLIS-blocked) kernel and
/// the pick, and with it the sums' order, is stable from process to process.
struct HostChoice {
  Kernel kernel;
  std::vector<std::pair<Kernel, double>> measured; // GFLOP/s, one thread
  std::vector<GemmTileRate> tiles; // measured's tiles and rates, in order
  size_t picked = 0;               // kernel's index in measured
};

HostChoice measureHostKernels() {
  std::vector<Kernel> kernels = candidateKernels();
  HostChoice choice{kernels.front(), {}, {}, 0};
  if (kernels.size() == 1) {
    choice.measured.push_back({kernels.front(), 0.0});
    choice.tiles.push_back(
        {kernels.front().blocking.mr, kernels.front().blocking.nr, 0.0});
    return choice;
  }
  constexpr int64_t m = 168, n = 256, k = 512;
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>(i % 5) - 2.0f;
  GemmArgs g = gemmArgs(m, n, k, reinterpret_cast<uintptr_t>(a.data()), k, 1,
                        reinterpret_cast<uintptr_t>(b.data()), n, 1,
                        reinterpret_cast<uintptr_t>(c.data()), n, 1);
  g.overwrite = true;
  std::vector<double> best(kernels.size(), 1e30);
  for (int round = 0; round < 9; ++round)
    for (size_t i = 0; i < kernels.size(); ++i) {
      auto start = std::chrono::steady_clock::now();
      run(g, kernels[i], 1);
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      if (round > 0) // the first round faults in the packing buffers
        best[i] = std::min(best[i], seconds);
    }
  size_t picked = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    double rate = 2.0 * m * n * k / best[i] / 1e9;
    choice.measured.push_back({kernels[i], rate});
    choice.tiles.push_back(
        {kernels[i].blocking.mr, kernels[i].blocking.nr, rate});
    if (best[i] < 0.97 * best[picked])
      picked = i;
  }
  choice.kernel = kernels[picked];
  choice.picked = picked;
  return choice;
}

const HostChoice &hostChoice() {
  static const HostChoice choice = measureHostKernels();
  return choice;
}

/// The float32 kernel for a product with C m x n on this host (pickGemmTile
/// over the measured kernels).
const Kernel &kernelForShape(int64_t m, int64_t n) {
  const HostChoice &choice = hostChoice();
  return choice.measured[pickGemmTile(choice.tiles, choice.picked, m, n)].first;
}

/// Waits, spinning a little and then yielding the core, until `ready()`.
template <typename Ready> void waitUntil(Ready ready) {
  for (int spins = 0; !ready(); ++spins) {
    if (spins < 512) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

/// A product split by rows between a team that packs each panel of B once,
/// together (the BLIS way): panel t (its KC rows of B by NC columns) is
/// packed by whichever threads claim its slivers first, into one of two
/// buffers; every thread then takes blocks of C's rows from a shared counter
/// and multiplies them by the packed panel. Two buffers let a thread pack
/// panel t + 1 while another still multiplies by panel t; a thread packs
/// into a buffer only once every block of the panel two before is done, and
/// multiplies a block of rows only once the previous panel's product on
/// those rows is (they add into the same C).
struct SharedPanels {
  struct alignas(64) Panel {
    std::atomic<int64_t> packNext{0}, packDone{0};
    std::atomic<int64_t> blockNext{0}, blockDone{0};
  };
  const GemmArgs *args;
  const Kernel *kernel;
  int64_t kPanels, panels, claim, blocks, tiles, panelFloats;
  float *buffer;
  std::unique_ptr<Panel[]> state;
  std::unique_ptr<std::atomic<int64_t>[]> blockPanels; // panels done
};

void runSharedPanels(void *data) {
  SharedPanels &job = *static_cast<SharedPanels *>(data);
  const GemmArgs &g = *job.args;
  const Kernel &kernel = *job.kernel;
  const GemmBlocking &bl = kernel.blocking;
  for (int64_t t = 0; t < job.panels; ++t) {
    SharedPanels::Panel &panel = job.state[t];
    int64_t jc = t / job.kPanels * bl.nc, pc = t % job.kPanels * bl.kc;
    int64_t nc = std::min(bl.nc, g.n - jc), kc = std::min(bl.kc, g.k - pc);
    int64_t slivers = (nc + bl.nr - 1) / bl.nr;
    float *packed = job.buffer + t % 2 * job.panelFloats;
    for (int64_t s; (s = panel.packNext.fetch_add(job.claim)) < slivers;) {
      if (t >= 2)
        waitUntil([&] {
          return job.state[t - 2].blockDone.load(std::memory_order_acquire) ==
                 job.blocks;
        });
      kernel.packPanel(g, pc, kc, jc, nc, s, std::min(slivers, s + job.claim),
                       packed);
      panel.packDone.fetch_add(std::min(slivers, s + job.claim) - s,
                               std::memory_order_release);
    }
    waitUntil([&] {
      return panel.packDone.load(std::memory_order_acquire) == slivers;
    });
    for (int64_t b; (b = panel.blockNext.fetch_add(1)) < job.blocks;) {
      std::atomic<int64_t> &done = job.blockPanels[b];
      waitUntil([&] { return done.load(std::memory_order_acquire) == t; });
      // Block b: micro-tile rows [b x tiles / blocks, (b + 1) x tiles /
      // blocks), so blocks differ by one micro-tile at most.
      int64_t r0 = b * job.tiles / job.blocks * bl.mr;
      kernel.panelRows(g, bl, pc, kc, jc, nc, packed, r0,
                       std::min(g.m, (b + 1) * job.tiles / job.blocks * bl.mr),
                       g.overwrite && pc == 0);
      done.store(t + 1, std::memory_order_release);
      panel.blockDone.fetch_add(1, std::memory_order_release);
    }
  }
}

struct Job {
  const GemmArgs *args;
  const Kernel *kernel;
  int64_t tiles, chunks; // chunk i: micro-tile columns [i x tiles / chunks,
                         // (i + 1) x tiles / chunks)
  std::atomic<int64_t> next{0};
};

void runColumnChunks(void *data) {
  Job &job = *static_cast<Job *>(data);
  const GemmArgs &g = *job.args;
  for (int64_t i; (i = job.next.fetch_add(1)) < job.chunks;) {
    int64_t nr = job.kernel->blocking.nr;
    job.kernel->chunk(g, job.kernel->blocking, 0, g.m,
                      i * job.tiles / job.chunks * nr,
                      std::min(g.n, (i + 1) * job.tiles / job.chunks * nr));
  }
}

/// C = 0: a product over an empty K that overwrites C.
void zeroC(const GemmArgs &g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j)
      g.c[i * g.cRow + j * g.cCol] = 0.0f;
}

void run(const GemmArgs &g, const Kernel &kernel, int threads) {
  if (g.m <= 0 || g.n <= 0)
    return;
  if (g.k <= 0) {
    if (g.overwrite)
      zeroC(g);
    return;
  }
  const GemmBlocking &bl = kernel.blocking;
  // Enough rows for every thread to take blocks of several micro-tiles, and
  // A at least as tall as B is wide or a full block of rows per thread: the
  // team splits C's rows and shares each packed panel of B.
  if (threads > 1 && g.m >= 4 * bl.mr * threads &&
      (g.m >= g.n || g.m >= bl.mc * threads)) {
    SharedPanels job;
    job.args = &g;
    job.kernel = &kernel;
    job.kPanels = (g.k + bl.kc - 1) / bl.kc;
    job.panels = (g.n + bl.nc - 1) / bl.nc * job.kPanels;
    // Blocks of at most MC rows, a multiple of the threads in number, each
    // a whole number of micro-tiles and within one micro-tile of the others
    // (so that equal cores end together: 1024 rows as 7 blocks of 140 and
    // one of 44 left a thread 9% more work than the other).
    job.tiles = (g.m + bl.mr - 1) / bl.mr;
    int64_t blocks = (g.m + bl.mc - 1) / bl.mc;
    job.blocks =
        std::min(job.tiles, (blocks + threads - 1) / threads * threads);
    int64_t panelCols = std::min(bl.nc, (g.n + bl.nr - 1) / bl.nr * bl.nr);
    job.claim = std::max<int64_t>(1, panelCols / bl.nr / (8 * threads));
    job.panelFloats = (panelCols * bl.kc + 15) / 16 * 16;
    job.buffer = gemmScratch(GemmBuffer::SharedPanels, 2 * job.panelFloats);
    job.state = std::make_unique<SharedPanels::Panel[]>(job.panels);
    job.blockPanels = std::make_unique<std::atomic<int64_t>[]>(job.blocks);
    for (int64_t b = 0; b < job.blocks; ++b)
      job.blockPanels[b].store(0, std::memory_order_relaxed);
    runOnTeam(threads, &runSharedPanels, &job);
    return;
  }
  // Few rows (a batch of tokens against a wide weight): chunks of columns,
  // a few per thread (taken in turn, so a thread whose core is busy takes
  // fewer), each packing the small A again, within one micro-tile of each
  // other in width.
  Job job;
  job.args = &g;
  job.kernel = &kernel;
  job.tiles = (g.n + bl.nr - 1) / bl.nr;
  job.chunks = std::max<int64_t>(
      1, std::min<int64_t>(threads * (threads > 1 ? 3 : 1), g.n / (4 * bl.nr)));
  runOnTeam(job.chunks > 1 ? threads : 1, &runColumnChunks, &job);
}

/// Product `i` of a batch whose operands are `batchStrides` elements apart
/// (A's and B's elements `abBytes` wide).
GemmArgs nthProduct(const GemmArgs &args, int64_t i, int64_t aBatch,
                    int64_t bBatch, int64_t cBatch, int64_t abBytes) {
  GemmArgs g = args;
  g.a = reinterpret_cast<const float *>(reinterpret_cast<const char *>(g.a) +
                                        i * aBatch * abBytes);
  g.b = reinterpret_cast<const float *>(reinterpret_cast<const char *>(g.b) +
                                        i * bBatch * abBytes);
  g.c = reinterpret_cast<float *>(reinterpret_cast<char *>(g.c) +
                                  i * cBatch * (g.cBf16 ? 2 : 4));
  return g;
}

struct BatchJob {
  const GemmArgs *args;
  const Kernel *kernel;
  int64_t aBatch, bBatch, cBatch, batch;
  std::atomic<int64_t> next{0};
};

void runProducts(void *data) {
  BatchJob &job = *static_cast<BatchJob *>(data);
  const Kernel &kernel = *job.kernel;
  for (int64_t i; (i = job.next.fetch_add(1)) < job.batch;) {
    GemmArgs g = nthProduct(*job.args, i, job.aBatch, job.bBatch, job.cBatch,
                            kernel.abBytes);
    kernel.chunk(g, kernel.blocking, 0, g.m, 0, g.n);
  }
}

void gemmBatched(const Kernel &kernel, const GemmArgs &args, int64_t batch,
                 int64_t aBatch, int64_t bBatch, int64_t cBatch, int threads) {
  if (threads <= 0)
    threads = teamCores();
  // A product too small to split well (under ~4 micro-tile rows per thread
  // in each dimension): the threads take whole products instead. (Products
  // over an empty K go through run, which zeroes C when it overwrites.)
  bool small = args.m < 4 * kernel.blocking.mr * threads &&
               args.n < 4 * kernel.blocking.nr * threads;
  if (args.k > 0 && batch > 1 && threads > 1 &&
      (small || batch >= 4 * threads)) {
    BatchJob job;
    job.args = &args;
    job.kernel = &kernel;
    job.aBatch = aBatch;
    job.bBatch = bBatch;
    job.cBatch = cBatch;
    job.batch = batch;
    runOnTeam(threads, &runProducts, &job);
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    run(nthProduct(args, i, aBatch, bBatch, cBatch, kernel.abBytes), kernel,
        threads);
}

/// Each product of a bf16 C computed into a float32 copy of C by `product`
/// (C's old values widened into it first when the product adds to them),
/// then rounded into C once.
template <typename Product>
void throughFloatC(const GemmArgs &args, int64_t batch, int64_t aBatch,
                   int64_t bBatch, int64_t cBatch, Product product) {
  if (args.m <= 0 || args.n <= 0)
    return;
  std::vector<float> c(static_cast<size_t>(args.m * args.n));
  for (int64_t i = 0; i < batch; ++i) {
    GemmArgs g = nthProduct(args, i, aBatch, bBatch, cBatch, 2);
    auto *to = reinterpret_cast<uint16_t *>(g.c);
    auto at = [&](int64_t r, int64_t j) -> uint16_t & {
      return to[r * g.cRow + j * g.cCol];
    };
    if (!g.overwrite)
      for (int64_t r = 0; r < g.m; ++r)
        for (int64_t j = 0; j < g.n; ++j)
          c[r * g.n + j] = bf16ToFloat(at(r, j));
    GemmArgs f = g;
    f.c = c.data();
    f.cRow = g.n;
    f.cCol = 1;
    f.cBf16 = false;
    product(f);
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t j = 0; j < g.n; ++j)
        at(r, j) = floatToBf16(c[r * g.n + j]);
  }
}

/// A bfloat16 product on a host without AVX512-BF16: A and B widened into
/// float32 copies (a bf16 value is the high half of its float), then the
/// float32 kernel.
void widenedBf16(const GemmArgs &args, int64_t batch, int64_t aBatch,
                 int64_t bBatch, int64_t cBatch, int threads) {
  if (args.cBf16) {
    throughFloatC(args, batch, aBatch, bBatch, cBatch, [&](const GemmArgs &f) {
      widenedBf16(f, 1, 0, 0, 0, threads);
    });
    return;
  }
  if (args.m <= 0 || args.n <= 0)
    return;
  std::vector<float> a(
      static_cast<size_t>(args.m * std::max<int64_t>(args.k, 0))),
      b(static_cast<size_t>(std::max<int64_t>(args.k, 0) * args.n));
  for (int64_t i = 0; i < batch; ++i) {
    GemmArgs g = nthProduct(args, i, aBatch, bBatch, cBatch, 2);
    auto *ga = reinterpret_cast<const uint16_t *>(g.a);
    auto *gb = reinterpret_cast<const uint16_t *>(g.b);
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t p = 0; p < g.k; ++p)
        a[r * g.k + p] = bf16ToFloat(ga[r * g.aRow + p * g.aCol]);
    for (int64_t p = 0; p < g.k; ++p)
      for (int64_t j = 0; j < g.n; ++j)
        b[p * g.n + j] = bf16ToFloat(gb[p * g.bRow + j * g.bCol]);
    g.a = a.data();
    g.aRow = g.k;
    g.aCol = 1;
    g.b = b.data();
    g.bRow = g.n;
    g.bCol = 1;
    run(g, kernelForShape(g.m, g.n), threads > 0 ? threads : teamCores());
  }
}

} // namespace

void sgemmBatched(const GemmArgs &args, int64_t batch, int64_t aBatch,
                  int64_t bBatch, int64_t cBatch, int threads) {
  gemmBatched(kernelForShape(args.m, args.n), args, batch, aBatch, bBatch,
              cBatch, threads);
}

void bf16GemmBatched(const GemmArgs &args, int64_t batch, int64_t aBatch,
                     int64_t bBatch, int64_t cBatch, int threads) {
  static const bool dot = hostHas("avx512bf16");
  if (!dot) {
    widenedBf16(args, batch, aBatch, bBatch, cBatch, threads);
    return;
  }
  static const Kernel kernel = kernelFor("avx512bf16");
  if (args.cBf16) {
    // A bf16 C is rounded once, as the micro-kernel stores the whole sum:
    // K in one panel when B's sliver of it fits in a quarter of L2 (K up to
    // 4096 with a 1 MiB L2), else through a float32 copy of C.
    if (args.k * kernel.blocking.nr * 2 >
        cacheBytes(_SC_LEVEL2_CACHE_SIZE, 256 << 10) / 4) {
      throughFloatC(args, batch, aBatch, bBatch, cBatch,
                    [&](const GemmArgs &f) {
                      gemmBatched(kernel, f, 1, 0, 0, 0, threads);
                    });
      return;
    }
    Kernel whole = kernel;
    whole.blocking =
        blockingFor(avx512bf16::tile(), 2, 1.0, std::max<int64_t>(args.k, 2));
    gemmBatched(whole, args, batch, aBatch, bBatch, cBatch, threads);
    return;
  }
  gemmBatched(kernel, args, batch, aBatch, bBatch, cBatch, threads);
}

bool bf16GemmWith(const GemmArgs &args, const std::string &isa, int threads) {
  if (isa == "widen") {
    widenedBf16(args, 1, 0, 0, 0, threads);
    return true;
  }
  if (!isa.empty() && (isa != "avx512bf16" || !hostHas(isa)))
    return false;
  bf16GemmBatched(args, 1, 0, 0, 0, threads);
  return true;
}

bool sgemmWith(const GemmArgs &args, const std::string &isa, int threads) {
  if (args.cBf16 || (!isa.empty() && !hostHas(isa)))
    return false;
  run(args, isa.empty() ? kernelForShape(args.m, args.n) : kernelFor(isa),
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
  int threads = teamCores();
  double best = 0.0;
  // Every ISA the host runs: the chosen GEMM kernel's need not be the one
  // with the widest FMAs.
  for (const char *isa : hostFloatIsas()) {
    Kernel kernel = kernelFor(isa);
    for (int round = 0; round < 3; ++round) {
      PeakJob job;
      job.loop = kernel.fmaLoop;
      job.iterations = 4'000'000;
      auto start = std::chrono::steady_clock::now();
      runOnTeam(threads, &runPeak, &job);
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      double flops = 2.0 * 12 * kernel.lanes * job.iterations * threads;
      best = std::max(best, flops / seconds / 1e9);
    }
  }
  return best;
}

namespace {
std::string describe(const Kernel &k) {
  return std::string(k.isa) + " " + std::to_string(k.blocking.mr) + "x" +
         std::to_string(k.blocking.nr) + ", kc " +
         std::to_string(k.blocking.kc) + " mc " +
         std::to_string(k.blocking.mc) + " nc " + std::to_string(k.blocking.nc);
}
} // namespace

size_t pickGemmTile(const std::vector<GemmTileRate> &tiles, size_t host,
                    int64_t m, int64_t n) {
  auto seconds = [&](const GemmTileRate &t) {
    if (t.rate <= 0.0)
      return 1e300;
    double rows = static_cast<double>((m + t.mr - 1) / t.mr * t.mr);
    double cols = static_cast<double>((n + t.nr - 1) / t.nr * t.nr);
    return rows * cols / t.rate;
  };
  size_t picked = host;
  for (size_t i = 0; i < tiles.size(); ++i)
    if (seconds(tiles[i]) < 0.97 * seconds(tiles[picked]))
      picked = i;
  return picked;
}

std::string gemmKernelDescription() {
  const HostChoice &choice = hostChoice();
  std::string text = describe(choice.kernel);
  if (choice.measured.size() > 1) {
    text += " (measured here, GFLOP/s on one thread:";
    for (const auto &[kernel, rate] : choice.measured)
      text += " " + std::string(kernel.isa) + " kc " +
              std::to_string(kernel.blocking.kc) + " " +
              std::to_string(static_cast<int>(rate + 0.5)) + ";";
    text.back() = ')';
  }
  return text;
}

} // namespace lazymlir

extern "C" void lazymlir_sgemm_batched(int64_t batch, int64_t m, int64_t n,
                                       int64_t k, int64_t a, int64_t aBatch,
                                       int64_t aRow, int64_t aCol, int64_t b,
                                       int64_t bBatch, int64_t bRow,
                                       int64_t bCol, int64_t c, int64_t cBatch,
                                       int64_t cRow, int64_t cCol,
                                       int64_t threads, int64_t accumulate) {
  lazymlir::GemmArgs args = lazymlir::gemmArgs(
      m, n, k, static_cast<uintptr_t>(a), aRow, aCol, static_cast<uintptr_t>(b),
      bRow, bCol, static_cast<uintptr_t>(c), cRow, cCol);
  args.overwrite = accumulate == 0;
  lazymlir::sgemmBatched(args, batch, aBatch, bBatch, cBatch,
                         static_cast<int>(threads));
}

extern "C" void lazymlir_bf16gemm_bf16c_batched(
    int64_t batch, int64_t m, int64_t n, int64_t k, int64_t a, int64_t aBatch,
    int64_t aRow, int64_t aCol, int64_t b, int64_t bBatch, int64_t bRow,
    int64_t bCol, int64_t c, int64_t cBatch, int64_t cRow, int64_t cCol,
    int64_t threads, int64_t accumulate) {
  lazymlir::GemmArgs args = lazymlir::gemmArgs(
      m, n, k, static_cast<uintptr_t>(a), aRow, aCol, static_cast<uintptr_t>(b),
      bRow, bCol, static_cast<uintptr_t>(c), cRow, cCol);
  args.overwrite = accumulate == 0;
  args.cBf16 = true;
  lazymlir::bf16GemmBatched(args, batch, aBatch, bBatch, cBatch,
                            static_cast<int>(threads));
}

extern "C" void
lazymlir_bf16gemm_batched(int64_t batch, int64_t m, int64_t n, int64_t k,
                          int64_t a, int64_t aBatch, int64_t aRow, int64_t aCol,
                          int64_t b, int64_t bBatch, int64_t bRow, int64_t bCol,
                          int64_t c, int64_t cBatch, int64_t cRow, int64_t cCol,
                          int64_t threads, int64_t accumulate) {
  lazymlir::GemmArgs args = lazymlir::gemmArgs(
      m, n, k, static_cast<uintptr_t>(a), aRow, aCol, static_cast<uintptr_t>(b),
      bRow, bCol, static_cast<uintptr_t>(c), cRow, cCol);
  args.overwrite = accumulate == 0;
  lazymlir::bf16GemmBatched(args, batch, aBatch, bBatch, cBatch,
                            static_cast<int>(threads));
}
