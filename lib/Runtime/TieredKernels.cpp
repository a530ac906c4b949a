//===- TieredKernels.cpp - kernels at two tiers, graphs linked ------------===//

#include "TieredKernels.h"
#include "CacheEntries.h"
#include "DiskCache.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <malloc.h>
#include <optional>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

namespace lazymlir {

namespace {

std::atomic<uint64_t> kernelsUpgraded{0}, graphsRelinked{0};

/// Compiles kernel `name` from its MLIR `text` at `tier` and stores the
/// object in the disk cache, with the source at the Fast tier (for the Full
/// recompile of a later process).
std::string compileAndStore(const std::string &text, const std::string &name,
                            const CompileOptions &options,
                            const std::string &optionsKey,
                            const KernelCompiler &compiler, Tier tier,
                            ObjectTimes &times) {
  std::string object = compiler(text, name, options, tier, times);
  DiskCache::get().write(kernelCacheKey(optionsKey, tier, name), object);
  if (tier == Tier::Fast)
    DiskCache::get().write(sourceCacheKey(optionsKey, name), text);
  return object;
}

} // namespace

Acquired acquireKernel(const std::string &name, const std::string *text,
                       const CompileOptions &options,
                       const std::string &optionsKey,
                       const KernelCompiler &compiler, ObjectTimes &times) {
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
    return std::make_pair(compileAndStore(*text, name, options, optionsKey,
                                          compiler, tier, times),
                          KernelJit::Origin::Compiled);
  });
  if (tier == Tier::Fast && text)
    jit.keepSource(optionsKey, name, *text);
  return {origin, tier};
}

void Linkage::link() {
  auto graph = std::make_unique<LinkedGraph>(
      KernelJit::get().link(optionsKey, entryObject, options.pipeline.entry,
                            hasChecks, kCheckFlagSymbol));
  std::lock_guard<std::mutex> lock(mutex);
  current.store(graph.get(), std::memory_order_release);
  linked.push_back(std::move(graph));
}

Linkage::~Linkage() {
  for (const auto &graph : linked)
    KernelJit::get().unlink(*graph);
}

namespace {

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
      if (linkage) {
        upgrade(*linkage);
        // What compiling took went back to this thread's malloc arena,
        // which keeps it: a BERT-base graph's upgrade left 0.25 GiB there.
        malloc_trim(0);
      }
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
          std::optional<std::string> text =
              jit.source(linkage.optionsKey, name);
          if (!text)
            text =
                DiskCache::get().read(sourceCacheKey(linkage.optionsKey, name));
          if (!text)
            throw NotOnDisk();
          ObjectTimes times;
          return std::make_pair(
              compileAndStore(*text, name, linkage.options, linkage.optionsKey,
                              linkage.compiler, Tier::Full, times),
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

void requestFullTier(std::weak_ptr<Linkage> linkage) {
  BackgroundCompiler::get().request(std::move(linkage));
}

void waitForBackgroundCompiles() { BackgroundCompiler::get().waitIdle(); }
void stopBackgroundCompiles() { BackgroundCompiler::get().stop(); }
BackgroundCompileCounts backgroundCompileCounts() {
  return {kernelsUpgraded.load(), graphsRelinked.load()};
}

} // namespace lazymlir
