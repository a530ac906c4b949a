//===- CpuExecutable.h - compile and run linalg on the CPU ------*- C++ -*-===//
//
// The runtime's whole interface. It deliberately includes no MLIR or LLVM
// header, so that the Python bindings compile quickly and know nothing of
// MLIR, and it knows nothing of torch: buffers come in as raw views.
//
// Two libraries implement it. CpuExecutable::compile and CpuExecutable::load
// are LazyMLIRCompiler's (lib/Compiler: parsing, the pipelines, code
// generation; load because a loaded graph's kernels are recompiled at full
// effort later); everything else, LazyMLIRRuntime's (lib/Runtime: the buffer
// pool, the JIT, the disk cache, tiers, runs), which links no pipeline. Link
// LazyMLIRCompiler to compile.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_CPUEXECUTABLE_H
#define LAZYMLIR_RUNTIME_CPUEXECUTABLE_H

#include "lazymlir/Support/CpuPipelineSettings.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lazymlir {

enum class ElementType : uint8_t { F16, BF16, F32, F64, I1, I8, I16, I32, I64 };

/// Name as in MLIR ("f32", "i1", ...).
const char *elementTypeName(ElementType type);

/// A dimension whose size each run's buffers give (a `?` in the IR).
constexpr int64_t kDynamicSize = -1;

/// One argument or result of the entry function; dynamic dimensions are
/// kDynamicSize.
struct TensorSignature {
  ElementType elementType;
  std::vector<int64_t> shape;

  bool isDynamic() const;
};

/// A caller-owned contiguous buffer of a known signature: its address and
/// its size in bytes (the one check a run on raw buffers makes); for a
/// graph with dynamic dimensions, also its sizes (empty otherwise).
struct RawBuffer {
  void *data;
  size_t bytes;
  std::vector<int64_t> sizes = {};
};

/// A caller-owned buffer. Sizes and strides count elements.
struct BufferView {
  void *data;
  ElementType elementType;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

/// A kernel call site of a graph compiled for the profiler
/// (CpuPipelineSettings::profile; lazymlir-instrument-kernels): the kernel,
/// the ops its loops came from, its operands' shapes, their bytes and the
/// estimated floating-point operations of one call.
struct ProfileSite {
  std::string kernel, ops, shapes;
  int64_t bytes = 0, flops = 0;
};

/// One timed kernel call: its site and CLOCK_MONOTONIC nanoseconds.
struct ProfileEvent {
  int64_t site, startNs, endNs;
};

struct CompileOptions {
  /// The pipeline's settings (entry, fusion, channelsLast, threads,
  /// runtimeChecks, ...), with two differences: threads 0, the default here,
  /// means all hardware threads, and useLdexp is set from the host's features
  /// (the code is compiled for the host).
  CpuPipelineSettings pipeline = allThreads();
  /// LLVM optimization level (0-3) for the IR passes and code generation.
  unsigned optLevel = 3;
  /// Keep the LLVM-dialect module's text (for dumps).
  bool keepLLVMDialect = false;
  /// Compile kernels with little code generation effort first (about 15%
  /// slower code, several times quicker to compile) and again at full
  /// effort in the background once their graph has run tierUpRuns times; runs
  /// switch to the optimized code when it is ready. Off: full effort at once.
  bool tiered = true;
  /// With `tiered`: runs of a graph after which its kernels are recompiled
  /// at full effort (at least 1).
  unsigned tierUpRuns = 4;
  /// Arguments the caller donates to results, as pairs (argument, result)
  /// flattened: each result is written into its argument's buffer and
  /// leaves the signature (lazymlir-donate-arguments); the run's outputs
  /// are the other results. Part of the graph's cache key.
  std::vector<int64_t> donate;

private:
  static CpuPipelineSettings allThreads() {
    CpuPipelineSettings settings;
    settings.threads = 0;
    return settings;
  }
};

/// The background compiler's work so far: kernels recompiled at full
/// effort, graphs switched to them.
struct BackgroundCompileCounts {
  uint64_t kernelsUpgraded = 0, graphsRelinked = 0;
};
BackgroundCompileCounts backgroundCompileCounts();
/// Blocks until the background compiler has nothing queued or running.
void waitForBackgroundCompiles();
/// Stops the background compiler after the kernel it is compiling (call
/// before the process exits); later requests are ignored.
void stopBackgroundCompiles();

/// Where a compile's time went and how big it was. Times are seconds; the
/// per-kernel phases (llvmStage, translate, optimize, codegen) are summed
/// over the kernels, which compile in parallel, so they can exceed `total`,
/// the wall time.
struct CompileStats {
  double parse = 0, tensorStage = 0, bufferizeStage = 0, llvmStage = 0,
         translate = 0, optimize = 0, codegen = 0, link = 0, total = 0;
  /// Ops of the linalg input; loop nests the entry calls; distinct kernels
  /// among them; of those, compiled now, already in this process, read from
  /// the disk cache.
  int64_t inputOps = 0, loopNests = 0, distinctKernels = 0, kernelsCompiled = 0,
          kernelsReused = 0, kernelsFromDisk = 0;
  /// LLVM IR instructions after optimization, and object code bytes, of what
  /// was compiled now.
  int64_t llvmInstructions = 0, objectBytes = 0;
  /// The whole graph came from the disk cache (nothing compiled).
  bool fromDisk = false;
};

/// The persistent compile cache (off until configured): compiled graphs and
/// kernels as object code, keyed by their IR and everything that changes
/// the code (this build, LLVM, the options, the host CPU and its features).
void configureDiskCache(const std::string &directory, uint64_t maxBytes);
struct DiskCacheCounts {
  /// Graphs looked up on disk: found whole, or not (then compiled).
  uint64_t graphHits = 0, graphMisses = 0;
  /// Entries of any kind read, missing, corrupt (deleted, reported),
  /// written, evicted (least recently used, over the size limit).
  uint64_t hits = 0, misses = 0, corrupt = 0, writes = 0, evicted = 0;
};
DiskCacheCounts diskCacheCounts();
/// Warnings (a corrupt entry, an unwritable directory) since the last call.
std::vector<std::string> takeDiskCacheWarnings();
/// Raw entries for callers' own records (bytes), keyed by hex digits.
std::optional<std::string> readDiskCacheEntry(const std::string &key);
void writeDiskCacheEntry(const std::string &key, const std::string &payload);
/// What, besides the IR and options, changes compiled code: a digest of
/// this build, the LLVM version, the host CPU and its features.
const std::string &codeIdentity();

/// Memory from the runtime's buffer pool, which also serves compiled code's
/// temporaries: blocks freed are kept by size and handed out again, already
/// paged in (a fresh large block costs a page fault per 4 KiB when first
/// written). 64-byte aligned. Thread-safe.
void *allocateBuffer(size_t bytes);
/// The same for a graph run eagerly (torch's own ops): such blocks, when
/// idle, are given back as soon as compiled code asks for a size the pool
/// lacks, instead of being kept beside the compiled graphs' blocks.
void *allocateEagerBuffer(size_t bytes);
void releaseBuffer(void *block);
/// An output's buffer: a large one gets its pages only when the graph is
/// about to write it (outputBufferReady; compiled entries call it before
/// the first kernel that writes the output), moved in from idle blocks.
/// Until then it holds no memory. Released with releaseBuffer.
void *allocateOutputBuffer(size_t bytes);
/// Pages for an allocateOutputBuffer block about to be written (moved in
/// from the pool's idle blocks, else fresh); a no-op for any other pointer
/// and on later calls.
void outputBufferReady(void *block);
/// Returns the pool's idle blocks to the system; returns how many bytes.
size_t trimBufferPool();
/// Bytes the pool holds idle.
size_t idleBufferBytes();

/// The pool's bytes in use, the most it had in use at once (since the last
/// trim), its idle bytes, and the bytes of pages moved in from idle blocks
/// so far (outputs at their first write, new blocks of sizes no idle one
/// fits).
struct BufferPoolStats {
  size_t inUse, peakInUse, idle, recycled;
};
BufferPoolStats bufferPoolStats();

/// The host thread brackets each blocking wait for background runs with
/// these (see CpuExecutable::run). Thread-safe; calls may nest.
void beginHostWait();
void endHostWait();

/// A compile failure; what() carries MLIR's diagnostics.
class CompileError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A run found a runtime check violated (an index out of range, an integer
/// division by zero): the compiled code kept every access inside its buffers
/// and trapped on nothing, but the outputs are not meaningful. Thrown after
/// the run completed.
class CheckFailed : public std::runtime_error {
public:
  CheckFailed()
      : std::runtime_error("lazymlir: a runtime check failed (index out of "
                           "range or integer division by zero)") {}
};

/// linalg-on-tensors text, lowered by the CPU pipeline and JIT-compiled with
/// the host's features. Calls are thread-safe.
class CpuExecutable {
public:
  /// Throws CompileError. Looks the graph up in the disk cache first, and
  /// each of its kernels in this process and on disk; writes what it
  /// compiled to the disk cache.
  static std::unique_ptr<CpuExecutable> compile(const std::string &source,
                                                const CompileOptions &options);
  /// The graph compiled before under `cacheKey` (see cacheKey()), from the
  /// disk cache, with no MLIR work; null when it is not there whole.
  static std::unique_ptr<CpuExecutable> load(const std::string &cacheKey,
                                             const CompileOptions &options);
  ~CpuExecutable();

  const std::vector<TensorSignature> &inputs() const;
  const std::vector<TensorSignature> &outputs() const;
  /// Whether the compiled code has runtime checks (a flag read after runs).
  bool hasRuntimeChecks() const;
  /// Some input or output has a dynamic dimension (kDynamicSize): runs
  /// take buffers with shapes (not RawBuffers).
  bool isDynamic() const;
  /// Loop nests in the compiled entry function after fusion and tiling
  /// (lazymlir-count-kernels).
  int64_t kernelCount() const;
  /// Empty unless CompileOptions::keepLLVMDialect was set.
  const std::string &llvmDialect() const;
  const CompileStats &compileStats() const;
  /// The disk cache's key of this graph (source and options).
  const std::string &cacheKey() const;
  /// Whether runs use full-effort code only (no kernel is waiting for its
  /// background recompile).
  bool fullyOptimized() const;
  /// The timed kernel call sites (empty unless compiled for the profiler).
  const std::vector<ProfileSite> &profileSites() const;
  /// The kernel calls timed since the last call, of every run.
  std::vector<ProfileEvent> takeProfileEvents() const;

  /// Runs the entry function on `inputs`, writing into the caller-allocated
  /// `outputs` (destination-passing). Every buffer must match its signature
  /// and be contiguous; throws std::invalid_argument otherwise.
  ///
  /// Throws CheckFailed when a runtime check of the compiled code failed
  /// (lazymlir-guard-runtime-checks); the outputs are then garbage. Runs of
  /// one executable that has checks are serialized, so that each reports
  /// its own failures.
  ///
  /// `background`: the caller is a worker running this while the host thread
  /// (the one that submits work) may be busy on a core of its own. A
  /// parallel loop started while the host is not blocked in a wait
  /// (beginHostWait) keeps one thread of a machine-sized team asleep until
  /// the host waits, which wakes it for the chunks left: a team thread that
  /// the OS deschedules in favour of the host would stall every barrier.
  void run(const std::vector<BufferView> &inputs,
           const std::vector<BufferView> &outputs,
           bool background = false) const;

  /// The same on raw buffers, for a caller that allocated them to the
  /// signatures: each must be contiguous with the signature's element type,
  /// which is not checked; counts and byte sizes are (std::invalid_argument).
  /// The per-call cost is a copy of a precomputed argument block. A graph
  /// with dynamic dimensions needs each buffer's sizes too: their rank,
  /// static sizes and byte count are checked against the signature.
  void run(const std::vector<RawBuffer> &inputs,
           const std::vector<RawBuffer> &outputs,
           bool background = false) const;

private:
  void checkCounts(size_t numInputs, size_t numOutputs) const;
  struct Impl;
  explicit CpuExecutable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_CPUEXECUTABLE_H
