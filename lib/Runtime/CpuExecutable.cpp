//===- CpuExecutable.cpp - compile and run linalg on the CPU --------------===//

#include "lazymlir/Runtime/CpuExecutable.h"
#include "lazymlir/Pipelines/Pipelines.h"
#include "lazymlir/Transforms/Passes.h"
#include "CodeGen.h"
#include "DiskCache.h"
#include "KernelJit.h"
#include "OpenMP.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <dlfcn.h>
#include <mutex>
#include <optional>
#include <sstream>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

using namespace mlir;

namespace lazymlir {

const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F16: return "f16";
  case ElementType::BF16: return "bf16";
  case ElementType::F32: return "f32";
  case ElementType::F64: return "f64";
  case ElementType::I1: return "i1";
  case ElementType::I8: return "i8";
  case ElementType::I16: return "i16";
  case ElementType::I32: return "i32";
  case ElementType::I64: return "i64";
  }
  return "?";
}

namespace {

/// The global lazymlir-guard-runtime-checks sets when a check fails.
constexpr const char *kCheckFlagSymbol = "__lazymlir_check_failed";

/// Bytes of one element (i1: a byte, as torch's bool).
size_t elementBytes(ElementType type) {
  switch (type) {
  case ElementType::I1:
  case ElementType::I8: return 1;
  case ElementType::F16:
  case ElementType::BF16:
  case ElementType::I16: return 2;
  case ElementType::F32:
  case ElementType::I32: return 4;
  case ElementType::F64:
  case ElementType::I64: return 8;
  }
  return 0;
}

std::optional<ElementType> toElementType(Type type) {
  if (type.isF16()) return ElementType::F16;
  if (type.isBF16()) return ElementType::BF16;
  if (type.isF32()) return ElementType::F32;
  if (type.isF64()) return ElementType::F64;
  if (type.isSignlessInteger(1)) return ElementType::I1;
  if (type.isSignlessInteger(8)) return ElementType::I8;
  if (type.isSignlessInteger(16)) return ElementType::I16;
  if (type.isSignlessInteger(32)) return ElementType::I32;
  if (type.isSignlessInteger(64)) return ElementType::I64;
  return std::nullopt;
}

/// Serves the compiled code's temporaries. Graphs run again and again with
/// the same shapes, so freed blocks are kept by size and handed out again;
/// only past `kMaxCachedBytes` of idle blocks is memory returned to the
/// system. Thread-safe: graphs may run concurrently.
class BufferPool {
public:
  static BufferPool &get() {
    static BufferPool *pool = new BufferPool(); // never destroyed: JIT code
    return *pool;                               // may run during exit
  }

  void *allocate(size_t alignment, size_t size) {
    size = roundUp(std::max<size_t>(size, 1));
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = idle.find(size);
      if (it != idle.end() && !it->second.empty()) {
        void *block = it->second.back();
        it->second.pop_back();
        idleBytes -= size;
        return block;
      }
    }
    void *block = std::aligned_alloc(std::max(alignment, kAlignment), size);
    std::lock_guard<std::mutex> lock(mutex);
    sizes[block] = size;
    return block;
  }

  void release(void *block) {
    if (!block)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    size_t size = sizes.at(block);
    if (idleBytes + size > kMaxCachedBytes) {
      sizes.erase(block);
      std::free(block);
      return;
    }
    idle[size].push_back(block);
    idleBytes += size;
  }

  size_t trim() {
    std::lock_guard<std::mutex> lock(mutex);
    size_t freed = idleBytes;
    for (auto &[size, blocks] : idle)
      for (void *block : blocks) {
        sizes.erase(block);
        std::free(block);
      }
    idle.clear();
    idleBytes = 0;
    return freed;
  }

  size_t idleSize() {
    std::lock_guard<std::mutex> lock(mutex);
    return idleBytes;
  }

private:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;
  static size_t roundUp(size_t size) {
    return (size + kAlignment - 1) / kAlignment * kAlignment;
  }

  std::mutex mutex;
  std::unordered_map<void *, size_t> sizes;
  std::unordered_map<size_t, std::vector<void *>> idle;
  size_t idleBytes = 0;
};


} // namespace

// Temporaries of compiled code (bound in the JIT by KernelJit).
extern "C" void *lazymlirAlignedAlloc(uint64_t alignment, uint64_t size) {
  return BufferPool::get().allocate(alignment, size);
}
extern "C" void *lazymlirAlloc(uint64_t size) {
  return BufferPool::get().allocate(0, size);
}
extern "C" void lazymlirFree(void *block) { BufferPool::get().release(block); }

void *allocateBuffer(size_t bytes) {
  return BufferPool::get().allocate(0, bytes);
}
void releaseBuffer(void *block) { BufferPool::get().release(block); }
size_t trimBufferPool() { return BufferPool::get().trim(); }
size_t idleBufferBytes() { return BufferPool::get().idleSize(); }

namespace {

/// This build (a digest of the library holding this code), LLVM's version,
/// the host CPU and its features.
std::string computeCodeIdentity() {
  std::string identity = "lazymlir-native;";
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&computeCodeIdentity), &info) &&
      info.dli_fname) {
    auto file = llvm::MemoryBuffer::getFile(info.dli_fname, false, false);
    if (file)
      identity += sha256Hex((*file)->getBuffer().str());
    else
      identity += std::string("unread:") + info.dli_fname;
  }
  identity += ";llvm=" LLVM_VERSION_STRING ";cpu=";
  identity += llvm::sys::getHostCPUName().str();
  std::vector<std::string> features;
  for (const auto &feature : llvm::sys::getHostCPUFeatures())
    features.push_back((feature.second ? "+" : "-") + feature.first().str());
  std::sort(features.begin(), features.end());
  for (const std::string &feature : features)
    identity += feature + ",";
  return identity;
}

std::atomic<uint64_t> graphDiskHits{0}, graphDiskMisses{0};
std::atomic<uint64_t> kernelsUpgraded{0}, graphsRelinked{0};

} // namespace

const std::string &codeIdentity() {
  static const std::string identity = computeCodeIdentity();
  return identity;
}

void configureDiskCache(const std::string &directory, uint64_t maxBytes) {
  DiskCache::get().configure(directory, maxBytes);
}

DiskCacheCounts diskCacheCounts() {
  DiskCacheStats stats = DiskCache::get().stats();
  DiskCacheCounts counts;
  counts.graphHits = graphDiskHits;
  counts.graphMisses = graphDiskMisses;
  counts.hits = stats.hits;
  counts.misses = stats.misses;
  counts.corrupt = stats.corrupt;
  counts.writes = stats.writes;
  counts.evicted = stats.evicted;
  return counts;
}

std::vector<std::string> takeDiskCacheWarnings() {
  return DiskCache::get().takeWarnings();
}

std::optional<std::string> readDiskCacheEntry(const std::string &key) {
  return DiskCache::get().read(key);
}

void writeDiskCacheEntry(const std::string &key, const std::string &payload) {
  DiskCache::get().write(key, payload);
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The disk cache and the JIT tell kernels and graphs compiled with
/// different options apart by this.
std::string describeOptions(const CompileOptions &options) {
  std::ostringstream os;
  os << "entry=" << options.entry << ";opt=" << options.optLevel
     << ";fusion=" << options.fusion << ";nhwc=" << options.channelsLast
     << ";threads=" << resolvedThreads(options)
     << ";checks=" << options.runtimeChecks;
  return os.str();
}

std::string kernelCacheKey(const std::string &options, Tier tier,
                           const std::string &name) {
  return sha256Hex(codeIdentity() + "\nkernel\n" + tierName(tier) + "\n" +
                   options + "\n" + name);
}

/// A kernel's MLIR (for its Full-tier recompile in a later process).
std::string sourceCacheKey(const std::string &options, const std::string &name) {
  return sha256Hex(codeIdentity() + "\nkernel-source\n" + options + "\n" + name);
}

std::string graphCacheKey(const std::string &options, const std::string &source) {
  return sha256Hex(codeIdentity() + "\ngraph\n" + options + "\n" + source);
}


void addTimes(CompileStats &stats, const ObjectTimes &times) {
  stats.llvmStage += times.llvmStage;
  stats.translate += times.translate;
  stats.optimize += times.optimize;
  stats.codegen += times.codegen;
  stats.llvmInstructions += times.instructions;
  stats.objectBytes += times.bytes;
}

/// Runs of a graph after which its Fast-tier kernels are recompiled Full.
constexpr uint64_t kHotRuns = 4;

/// Compiles kernel `name` from its MLIR `text` at `tier` and stores the
/// object in the disk cache, with the source at the Fast tier (for the Full
/// recompile of a later process).
std::string compileAndStore(const std::string &text, const std::string &name,
                            const CompileOptions &options,
                            const std::string &optionsKey, Tier tier,
                            ObjectTimes &times) {
  std::string object = compileKernel(text, name, options, tier, times);
  DiskCache::get().write(kernelCacheKey(optionsKey, tier, name), object);
  if (tier == Tier::Fast)
    DiskCache::get().write(sourceCacheKey(optionsKey, name), text);
  return object;
}

/// A kernel at its best tier available: the Full tier, loaded or on disk;
/// else the Fast tier, loaded, on disk, or compiled now (from `text`; none:
/// throws NotOnDisk). Returns where it came from and its tier.
struct NotOnDisk {};
struct Acquired {
  KernelJit::Origin origin;
  Tier tier;
};
Acquired acquireKernel(const std::string &name, const std::string *text,
                       const CompileOptions &options,
                       const std::string &optionsKey, ObjectTimes &times) {
  KernelJit &jit = KernelJit::get();
  llvm::orc::JITDylib &full = jit.kernels(optionsKey, Tier::Full);
  if (jit.isLoaded(full, name))
    return {KernelJit::Origin::Process, Tier::Full};
  auto fromDisk = [&](Tier tier) -> std::optional<std::string> {
    return DiskCache::get().read(kernelCacheKey(optionsKey, tier, name));
  };
  if (std::optional<std::string> object = fromDisk(Tier::Full)) {
    auto origin = jit.ensure(full, name, [&] {
      return std::make_pair(std::move(*object), KernelJit::Origin::Disk);
    });
    return {origin, Tier::Full};
  }
  Tier tier = options.tiered ? Tier::Fast : Tier::Full;
  auto origin = jit.ensure(jit.kernels(optionsKey, tier), name, [&] {
    if (tier == Tier::Fast)
      if (std::optional<std::string> object = fromDisk(Tier::Fast))
        return std::make_pair(std::move(*object), KernelJit::Origin::Disk);
    if (!text)
      throw NotOnDisk();
    return std::make_pair(
        compileAndStore(*text, name, options, optionsKey, tier, times),
        KernelJit::Origin::Compiled);
  });
  if (tier == Tier::Fast && text)
    jit.keepSource(optionsKey, name, *text);
  return {origin, tier};
}

/// A graph's disk entry: what the executable needs besides machine code,
/// the kernels its entry calls, then the entry module's object.
struct GraphRecord {
  std::vector<TensorSignature> inputs, outputs;
  int64_t numKernels = 0;
  bool hasChecks = false;
  std::vector<std::string> kernels;
  std::string object;

  std::string serialize() const {
    std::ostringstream os;
    os << "lazymlir-graph 1\n" << numKernels << " " << hasChecks << "\n";
    for (const auto *list : {&inputs, &outputs}) {
      os << list->size() << "\n";
      for (const TensorSignature &signature : *list) {
        os << int(signature.elementType) << " " << signature.shape.size();
        for (int64_t size : signature.shape)
          os << " " << size;
        os << "\n";
      }
    }
    os << kernels.size() << "\n";
    for (const std::string &kernel : kernels)
      os << kernel << "\n";
    os << object.size() << "\n";
    return os.str() + object;
  }

  /// False on anything malformed.
  bool parse(const std::string &payload) {
    std::istringstream is(payload);
    std::string magic;
    int version = 0;
    if (!(is >> magic >> version) || magic != "lazymlir-graph" || version != 1)
      return false;
    if (!(is >> numKernels >> hasChecks))
      return false;
    for (auto *list : {&inputs, &outputs}) {
      size_t count;
      if (!(is >> count) || count > (1u << 20))
        return false;
      for (size_t i = 0; i < count; ++i) {
        int type;
        size_t rank;
        if (!(is >> type >> rank) || type < 0 ||
            type > int(ElementType::I64) || rank > 64)
          return false;
        TensorSignature signature{ElementType(type), {}};
        signature.shape.resize(rank);
        for (int64_t &size : signature.shape)
          if (!(is >> size))
            return false;
        list->push_back(std::move(signature));
      }
    }
    size_t count;
    if (!(is >> count) || count > (1u << 20))
      return false;
    kernels.resize(count);
    for (std::string &kernel : kernels)
      if (!(is >> kernel))
        return false;
    size_t bytes;
    if (!(is >> bytes) || is.get() != '\n')
      return false;
    size_t offset = size_t(is.tellg());
    if (offset + bytes != payload.size())
      return false;
    object = payload.substr(offset);
    return true;
  }
};

/// How an executable's entry is linked, shared with the background
/// compiler: the entry object, and the kernels still at the Fast tier. Once
/// those are Full, the entry is linked again (the new linkage resolves them
/// Full) and runs switch to it; linkages are kept until the executable dies
/// (a run may be using one).
struct Linkage {
  CompileOptions options;
  std::string optionsKey;
  std::string entryObject; // kept while kernels are Fast
  bool hasChecks = false;
  std::vector<std::string> fastKernels;
  std::atomic<const LinkedGraph *> current{nullptr};
  std::atomic<uint64_t> runs{0};
  std::atomic<bool> upgradeRequested{false};
  std::mutex mutex;
  std::vector<std::unique_ptr<LinkedGraph>> linked;

  void link() {
    auto graph = std::make_unique<LinkedGraph>(KernelJit::get().link(
        optionsKey, entryObject, options.entry, hasChecks, kCheckFlagSymbol));
    std::lock_guard<std::mutex> lock(mutex);
    current.store(graph.get(), std::memory_order_release);
    linked.push_back(std::move(graph));
  }

  ~Linkage() {
    for (const auto &graph : linked)
      KernelJit::get().unlink(*graph);
  }
};

/// Recompiles hot graphs' Fast-tier kernels at the Full tier, one at a time,
/// on a background thread at low priority, and relinks each graph once all
/// its kernels are Full. Full kernels go to the disk cache too.
class BackgroundCompiler {
public:
  static BackgroundCompiler &get() {
    static BackgroundCompiler *compiler = new BackgroundCompiler();
    return *compiler;
  }

  void request(std::weak_ptr<Linkage> linkage) {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping)
      return;
    queue.push_back(std::move(linkage));
    if (!thread.joinable()) {
      thread = std::thread([this] { loop(); });
      // Before the C++ runtime's static destructors (LLVM's among them).
      std::atexit([] { BackgroundCompiler::get().stop(); });
    }
    wake.notify_all();
  }

  /// Until nothing is queued or compiling.
  void waitIdle() {
    std::unique_lock<std::mutex> lock(mutex);
    idle.wait(lock, [&] { return (queue.empty() && !busy) || stopping; });
  }

  /// Stops after the kernel being compiled; idempotent.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      wake.notify_all();
      idle.notify_all();
    }
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id())
      thread.join();
  }

private:
  void loop() {
    // Background work: the cores belong to the runs first.
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
    while (true) {
      std::shared_ptr<Linkage> linkage;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping)
          return;
        linkage = queue.front().lock();
        queue.pop_front();
        busy = true;
      }
      if (linkage)
        upgrade(*linkage);
      std::lock_guard<std::mutex> lock(mutex);
      busy = false;
      if (queue.empty())
        idle.notify_all();
    }
  }

  bool isStopping() {
    std::lock_guard<std::mutex> lock(mutex);
    return stopping;
  }

  void upgrade(Linkage &linkage) {
    KernelJit &jit = KernelJit::get();
    llvm::orc::JITDylib &full = jit.kernels(linkage.optionsKey, Tier::Full);
    for (const std::string &name : linkage.fastKernels) {
      if (isStopping())
        return;
      try {
        auto origin = jit.ensure(full, name, [&] {
          if (std::optional<std::string> object = DiskCache::get().read(
                  kernelCacheKey(linkage.optionsKey, Tier::Full, name)))
            return std::make_pair(std::move(*object), KernelJit::Origin::Disk);
          std::optional<std::string> text = jit.source(linkage.optionsKey, name);
          if (!text)
            text = DiskCache::get().read(sourceCacheKey(linkage.optionsKey, name));
          if (!text)
            throw NotOnDisk();
          ObjectTimes times;
          return std::make_pair(compileAndStore(*text, name, linkage.options,
                                                linkage.optionsKey, Tier::Full,
                                                times),
                                KernelJit::Origin::Compiled);
        });
        if (origin == KernelJit::Origin::Compiled)
          ++kernelsUpgraded;
        jit.dropSource(linkage.optionsKey, name);
      } catch (...) {
        return; // the graph keeps running its Fast kernels
      }
    }
    try {
      linkage.link();
      ++graphsRelinked;
    } catch (...) {
    }
  }

  std::mutex mutex;
  std::condition_variable wake, idle;
  std::deque<std::weak_ptr<Linkage>> queue;
  std::thread thread;
  bool busy = false, stopping = false;
};

} // namespace

void waitForBackgroundCompiles() { BackgroundCompiler::get().waitIdle(); }
void stopBackgroundCompiles() { BackgroundCompiler::get().stop(); }
BackgroundCompileCounts backgroundCompileCounts() {
  return {kernelsUpgraded.load(), graphsRelinked.load()};
}

struct CpuExecutable::Impl {
  std::shared_ptr<Linkage> linkage = std::make_shared<Linkage>();
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> outputs;
  std::string llvmDialect;
  std::string cacheKey;
  int64_t numKernels = 0;
  CompileStats stats;
  /// The packed entry point's arguments as 8-byte scalars: for each input,
  /// then each output, the memref descriptor (allocated pointer, aligned
  /// pointer, offset, sizes..., canonical strides...) with null pointers.
  std::vector<int64_t> argumentBlock;
  /// Where each buffer's allocated pointer sits in argumentBlock.
  std::vector<size_t> pointerSlots;
  /// Each buffer's size in bytes, inputs then outputs.
  std::vector<size_t> bufferBytes;
  /// Runs of a graph that has runtime checks hold this: each reads the
  /// flag its own run set.
  mutable std::mutex checkMutex;

  void buildArgumentBlock() {
    for (const auto *list : {&inputs, &outputs}) {
      for (const TensorSignature &signature : *list) {
        size_t bytes = elementBytes(signature.elementType);
        for (int64_t size : signature.shape)
          bytes *= size;
        bufferBytes.push_back(bytes);
        pointerSlots.push_back(argumentBlock.size());
        argumentBlock.insert(argumentBlock.end(), {0, 0, 0});
        argumentBlock.insert(argumentBlock.end(), signature.shape.begin(),
                             signature.shape.end());
        std::vector<int64_t> strides(signature.shape.size());
        int64_t stride = 1;
        for (size_t d = strides.size(); d-- > 0;) {
          strides[d] = stride;
          stride *= signature.shape[d];
        }
        argumentBlock.insert(argumentBlock.end(), strides.begin(),
                             strides.end());
      }
    }
  }

  /// Links the entry; kernels acquired at the Fast tier are upgraded once
  /// the graph is hot.
  void link(const CompileOptions &options, const std::string &optionsKey,
            std::string entryObject, bool hasChecks,
            std::vector<std::string> fastKernels) {
    linkage->options = options;
    linkage->optionsKey = optionsKey;
    linkage->entryObject = std::move(entryObject);
    linkage->hasChecks = hasChecks;
    linkage->fastKernels = std::move(fastKernels);
    linkage->link();
    if (linkage->fastKernels.empty())
      linkage->entryObject.clear();
  }

  /// Calls the entry on buffers that match the signatures, inputs first.
  void invoke(const std::vector<void *> &data, bool background) const {
    std::vector<int64_t> scalars = argumentBlock;
    for (size_t i = 0; i < data.size(); ++i) {
      auto pointer = reinterpret_cast<int64_t>(data[i]);
      scalars[pointerSlots[i]] = pointer;
      scalars[pointerSlots[i] + 1] = pointer;
    }
    std::vector<void *> args(scalars.size());
    for (size_t i = 0; i < scalars.size(); ++i)
      args[i] = &scalars[i];
    if (!linkage->fastKernels.empty() &&
        linkage->runs.fetch_add(1, std::memory_order_relaxed) + 1 == kHotRuns &&
        !linkage->upgradeRequested.exchange(true))
      BackgroundCompiler::get().request(linkage);
    if (!linkage->hasChecks) {
      const LinkedGraph *graph = linkage->current.load(std::memory_order_acquire);
      BackgroundScope scope(background);
      graph->entry(args.data());
      return;
    }
    std::lock_guard<std::mutex> lock(checkMutex);
    const LinkedGraph *graph = linkage->current.load(std::memory_order_acquire);
    {
      BackgroundScope scope(background);
      graph->entry(args.data());
    }
    if (graph->checkFlag->exchange(0, std::memory_order_relaxed) != 0)
      throw CheckFailed();
  }
};

CpuExecutable::CpuExecutable(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}
CpuExecutable::~CpuExecutable() = default;

const std::vector<TensorSignature> &CpuExecutable::inputs() const {
  return impl->inputs;
}
const std::vector<TensorSignature> &CpuExecutable::outputs() const {
  return impl->outputs;
}
int64_t CpuExecutable::numKernels() const { return impl->numKernels; }
bool CpuExecutable::hasRuntimeChecks() const { return impl->linkage->hasChecks; }
const std::string &CpuExecutable::llvmDialect() const {
  return impl->llvmDialect;
}
const CompileStats &CpuExecutable::compileStats() const { return impl->stats; }
const std::string &CpuExecutable::cacheKey() const { return impl->cacheKey; }
bool CpuExecutable::fullyOptimized() const {
  const LinkedGraph *graph = impl->linkage->current.load();
  std::lock_guard<std::mutex> lock(impl->linkage->mutex);
  return impl->linkage->fastKernels.empty() ||
         (impl->linkage->linked.size() > 1 && graph == impl->linkage->linked.back().get());
}

std::unique_ptr<CpuExecutable>
CpuExecutable::load(const std::string &cacheKey, const CompileOptions &options) {
  if (!DiskCache::get().enabled())
    return nullptr;
  auto start = Clock::now();
  std::optional<std::string> payload = DiskCache::get().read(cacheKey);
  GraphRecord record;
  if (!payload || !record.parse(*payload)) {
    ++graphDiskMisses;
    return nullptr;
  }
  initializeLLVMOnce();
  std::string optionsKey = describeOptions(options);
  auto impl = std::make_unique<Impl>();
  std::vector<std::string> fastKernels;
  try {
    for (const std::string &name : record.kernels) {
      ObjectTimes unused;
      Acquired kernel = acquireKernel(name, nullptr, options, optionsKey, unused);
      ++(kernel.origin == KernelJit::Origin::Disk ? impl->stats.kernelsFromDisk
                                                  : impl->stats.kernelsReused);
      if (kernel.tier == Tier::Fast)
        fastKernels.push_back(name);
    }
  } catch (const NotOnDisk &) {
    ++graphDiskMisses; // compiled again, and written again
    return nullptr;
  }
  impl->inputs = std::move(record.inputs);
  impl->outputs = std::move(record.outputs);
  impl->numKernels = record.numKernels;
  impl->cacheKey = cacheKey;
  impl->buildArgumentBlock();
  impl->stats.distinctKernels = record.kernels.size();
  impl->stats.fromDisk = true;
  auto linkStart = Clock::now();
  impl->link(options, optionsKey, std::move(record.object), record.hasChecks,
             std::move(fastKernels));
  impl->stats.link = since(linkStart);
  impl->stats.total = since(start);
  ++graphDiskHits;
  return std::unique_ptr<CpuExecutable>(new CpuExecutable(std::move(impl)));
}

std::unique_ptr<CpuExecutable>
CpuExecutable::compile(const std::string &source,
                       const CompileOptions &options) {
  initializeLLVMOnce();
  auto start = Clock::now();
  std::string optionsKey = describeOptions(options);
  std::string cacheKey = graphCacheKey(optionsKey, source);
  // A dump wants the LLVM dialect, which the disk cache does not keep.
  if (!options.keepLLVMDialect)
    if (auto cached = load(cacheKey, options))
      return cached;

  auto impl = std::make_unique<Impl>();
  impl->cacheKey = cacheKey;
  CompileStats &stats = impl->stats;
  // One context per compile: graphs are independent, and nothing of the
  // context is needed once the JIT holds the machine code.
  MLIRContext ctx(dialectRegistry(), MLIRContext::Threading::DISABLED);
  // torch-mlir's TMTensor ops (scatter, scan, sort) come in the generic form
  // as unregistered ops: the pipeline lowers them first, and its contract
  // check rejects any other unregistered op with a diagnostic.
  ctx.allowUnregisteredDialects();
  DiagnosticCollector diagnostics(ctx);

  auto phase = Clock::now();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&ctx), "input");
  if (!module)
    diagnostics.fail("parsing the linalg input");
  stats.parse = since(phase);
  (*module)->walk([&](Operation *) { ++stats.inputOps; });

  // The signature is read before lowering: afterwards results are
  // out-parameters and tensor types are gone. The contract pass (first in
  // the pipeline) rejects signatures this cannot express.
  if (auto func = module->lookupSymbol<func::FuncOp>(options.entry)) {
    auto collect = [](TypeRange types, std::vector<TensorSignature> &out) {
      for (Type type : types) {
        auto tensorType = dyn_cast<RankedTensorType>(type);
        if (!tensorType)
          return;
        auto elementType = toElementType(tensorType.getElementType());
        if (!elementType)
          return;
        out.push_back({*elementType, tensorType.getShape().vec()});
      }
    };
    collect(func.getArgumentTypes(), impl->inputs);
    collect(func.getResultTypes(), impl->outputs);
  }
  impl->buildArgumentBlock();

  CpuPipelineOptions pipelineOptions;
  fillPipelineOptions(pipelineOptions, options);
  phase = Clock::now();
  PassManager tensorStage(&ctx);
  buildCpuTensorPipeline(tensorStage, pipelineOptions);
  if (failed(tensorStage.run(*module)))
    diagnostics.fail("the CPU pipeline (tensor stage)");
  if (auto kernels = (*module)->getAttrOfType<IntegerAttr>(kKernelCountAttr))
    impl->numKernels = kernels.getInt();
  stats.tensorStage = since(phase);

  phase = Clock::now();
  PassManager bufferizeStage(&ctx);
  buildCpuBufferizePipeline(bufferizeStage, pipelineOptions);
  if (failed(bufferizeStage.run(*module)))
    diagnostics.fail("the CPU pipeline (bufferize stage)");

  // Each outlined kernel leaves as the text of a module of its own (the
  // unit of compilation and of caching); the entry keeps a declaration.
  struct Kernel {
    std::string name, text;
  };
  std::vector<Kernel> kernels;
  for (auto func : llvm::make_early_inc_range(module->getOps<func::FuncOp>())) {
    if (!func->hasAttr(kOutlinedKernelAttr))
      continue;
    OwningOpRef<ModuleOp> holder = ModuleOp::create(func.getLoc());
    auto clone = cast<func::FuncOp>(func->clone());
    clone->removeAttr(kOutlinedKernelAttr);
    clone.setPublic();
    holder->push_back(clone);
    Kernel kernel{func.getName().str(), {}};
    llvm::raw_string_ostream os(kernel.text);
    holder->print(os);
    kernels.push_back(std::move(kernel));
    func->removeAttr(kOutlinedKernelAttr);
    func.eraseBody();
  }
  if (auto entry = module->lookupSymbol<func::FuncOp>(options.entry))
    entry.walk([&](func::CallOp) { ++stats.loopNests; });
  stats.distinctKernels = kernels.size();
  stats.bufferizeStage = since(phase);

  // The kernels on worker threads (each distinct kernel once per process);
  // the entry module meanwhile on this one.
  std::mutex statsMutex;
  std::string firstError;
  std::vector<std::string> fastKernels;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < kernels.size();) {
      const Kernel &kernel = kernels[i];
      ObjectTimes times;
      try {
        Acquired acquired =
            acquireKernel(kernel.name, &kernel.text, options, optionsKey, times);
        std::lock_guard<std::mutex> lock(statsMutex);
        ++(acquired.origin == KernelJit::Origin::Compiled ? stats.kernelsCompiled
           : acquired.origin == KernelJit::Origin::Disk   ? stats.kernelsFromDisk
                                                          : stats.kernelsReused);
        if (acquired.tier == Tier::Fast)
          fastKernels.push_back(kernel.name);
      } catch (const std::exception &error) {
        std::lock_guard<std::mutex> lock(statsMutex);
        if (firstError.empty())
          firstError = error.what();
      }
      std::lock_guard<std::mutex> lock(statsMutex);
      addTimes(stats, times);
    }
  };
  unsigned workers = std::min<size_t>(
      std::max(1u, std::thread::hardware_concurrency()), kernels.size());
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < workers; ++i)
    threads.emplace_back(work);
  auto joinAll = [&] {
    for (std::thread &thread : threads)
      if (thread.joinable())
        thread.join();
  };

  std::string entryObject;
  bool hasChecks = false;
  ObjectTimes entryTimes;
  try {
    phase = Clock::now();
    PassManager llvmStage(&ctx);
    buildCpuLLVMPipeline(llvmStage, pipelineOptions);
    if (failed(llvmStage.run(*module)))
      diagnostics.fail("the CPU pipeline (LLVM stage)");
    // The check flag survives the lowering as an LLVM global of that name.
    hasChecks = SymbolTable::lookupSymbolIn(*module, kCheckFlagSymbol);
    if (options.keepLLVMDialect) {
      llvm::raw_string_ostream os(impl->llvmDialect);
      module->print(os);
      for (const Kernel &kernel : kernels)
        os << "\n// kernel " << kernel.name << " (before the LLVM stage)\n"
           << kernel.text;
    }
    entryTimes.llvmStage = since(phase);
    // The entry only allocates and calls kernels: one huge block of cold
    // code, compiled with no optimization (LLVM's code generator at -O2
    // took most of a transformer's compile time on it).
    std::vector<std::string> keep = {options.entry};
    if (hasChecks)
      keep.push_back(kCheckFlagSymbol);
    entryObject = emitObject(*module, keep, 0, Tier::Fast, options.entry,
                             entryTimes);
  } catch (...) {
    joinAll();
    throw;
  }
  joinAll();
  if (!firstError.empty())
    throw CompileError(firstError);
  addTimes(stats, entryTimes);

  if (DiskCache::get().enabled()) {
    GraphRecord record;
    record.inputs = impl->inputs;
    record.outputs = impl->outputs;
    record.numKernels = impl->numKernels;
    record.hasChecks = hasChecks;
    for (const Kernel &kernel : kernels)
      record.kernels.push_back(kernel.name);
    record.object = entryObject;
    DiskCache::get().write(cacheKey, record.serialize());
  }
  phase = Clock::now();
  impl->link(options, optionsKey, std::move(entryObject), hasChecks,
             std::move(fastKernels));
  stats.link = since(phase);
  stats.total = since(start);
  return std::unique_ptr<CpuExecutable>(new CpuExecutable(std::move(impl)));
}

namespace {

std::string describe(const std::vector<int64_t> &dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i)
    os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

void checkBuffer(const BufferView &buffer, const TensorSignature &signature,
                 const char *kind, size_t index) {
  auto where = [&] { return std::string(kind) + " #" + std::to_string(index); };
  if (buffer.elementType != signature.elementType)
    throw std::invalid_argument(where() + ": element type " +
                                elementTypeName(buffer.elementType) +
                                ", expected " +
                                elementTypeName(signature.elementType));
  if (buffer.sizes != signature.shape)
    throw std::invalid_argument(where() + ": shape " + describe(buffer.sizes) +
                                ", expected " + describe(signature.shape));
  if (buffer.strides.size() != buffer.sizes.size())
    throw std::invalid_argument(where() + ": strides and sizes differ in rank");
  // The compiled code assumes the identity layout; a dimension of size 1 may
  // have any stride.
  int64_t expected = 1;
  for (size_t d = buffer.sizes.size(); d-- > 0;) {
    if (buffer.sizes[d] != 1 && buffer.strides[d] != expected)
      throw std::invalid_argument(where() + ": not contiguous (strides " +
                                  describe(buffer.strides) + ")");
    expected *= buffer.sizes[d];
  }
}

} // namespace

void CpuExecutable::checkCounts(size_t numInputs, size_t numOutputs) const {
  if (numInputs != impl->inputs.size() || numOutputs != impl->outputs.size())
    throw std::invalid_argument(
        "expected " + std::to_string(impl->inputs.size()) + " inputs and " +
        std::to_string(impl->outputs.size()) + " outputs, got " +
        std::to_string(numInputs) + " and " + std::to_string(numOutputs));
}

void CpuExecutable::run(const std::vector<BufferView> &inputs,
                        const std::vector<BufferView> &outputs,
                        bool background) const {
  checkCounts(inputs.size(), outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    checkBuffer(inputs[i], impl->inputs[i], "input", i);
  for (size_t i = 0; i < outputs.size(); ++i)
    checkBuffer(outputs[i], impl->outputs[i], "output", i);

  std::vector<void *> data;
  data.reserve(inputs.size() + outputs.size());
  for (const auto *list : {&inputs, &outputs})
    for (const BufferView &buffer : *list)
      data.push_back(buffer.data);
  impl->invoke(data, background);
}

void CpuExecutable::run(const std::vector<RawBuffer> &inputs,
                        const std::vector<RawBuffer> &outputs,
                        bool background) const {
  checkCounts(inputs.size(), outputs.size());
  std::vector<void *> data;
  data.reserve(inputs.size() + outputs.size());
  auto check = [&](const std::vector<RawBuffer> &buffers,
                   const std::vector<TensorSignature> &signatures,
                   const char *kind, size_t first) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      const TensorSignature &signature = signatures[i];
      size_t bytes = impl->bufferBytes[first + i];
      if (buffers[i].bytes != bytes)
        throw std::invalid_argument(
            std::string(kind) + " #" + std::to_string(i) + ": " +
            std::to_string(buffers[i].bytes) + " bytes, expected " +
            std::to_string(bytes) + " (" +
            elementTypeName(signature.elementType) + " " +
            describe(signature.shape) + ")");
      data.push_back(buffers[i].data);
    }
  };
  check(inputs, impl->inputs, "input", 0);
  check(outputs, impl->outputs, "output", inputs.size());
  impl->invoke(data, background);
}

} // namespace lazymlir
