//===- TieredKernels.h - kernels at two tiers, graphs linked ----*- C++ -*-===//
//
// Kernels are looked up in this process, then on disk, and compiled only when
// neither has them: at the Fast tier first when compiles are tiered. A graph
// whose kernels are not all Full asks the background compiler, once it has
// run CompileOptions::tierUpRuns times, to recompile them Full (by its
// KernelCompiler) and to link its entry again; runs switch to the new linkage.
// Internal to the runtime and the compiler library.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_TIEREDKERNELS_H
#define LAZYMLIR_RUNTIME_TIEREDKERNELS_H

#include "KernelCompiler.h"
#include "KernelJit.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lazymlir {

/// The global lazymlir-guard-runtime-checks sets when a check fails.
constexpr const char *kCheckFlagSymbol = "__lazymlir_check_failed";

/// A kernel at its best tier available: the Full tier, loaded or on disk;
/// else the Fast tier (with options.tiered; else Full), loaded, on disk, or
/// compiled now by `compiler` from `text` (none: throws NotOnDisk). Returns
/// where it came from and its tier.
struct NotOnDisk {};
struct Acquired {
  KernelJit::Origin origin;
  Tier tier;
};
Acquired acquireKernel(const std::string &name, const std::string *text,
                       const CompileOptions &options,
                       const std::string &optionsKey,
                       const KernelCompiler &compiler, ObjectTimes &times);

/// How an executable's entry is linked, shared with the background
/// compiler: the entry object, and the kernels still at the Fast tier. Once
/// those are Full, the entry is linked again (the new linkage resolves them
/// Full) and runs switch to it; linkages are kept until the executable dies
/// (a run may be using one).
struct Linkage {
  CompileOptions options;
  std::string optionsKey;
  /// Recompiles the Fast kernels at the Full tier.
  KernelCompiler compiler;
  std::string entryObject; // kept while kernels are Fast
  bool hasChecks = false;
  std::vector<std::string> fastKernels;
  std::atomic<const LinkedGraph *> current{nullptr};
  std::atomic<uint64_t> runs{0};
  std::atomic<bool> upgradeRequested{false};
  std::mutex mutex;
  std::vector<std::unique_ptr<LinkedGraph>> linked;

  void link();
  ~Linkage();
};

/// Queues `linkage`'s Fast kernels for their Full-tier recompile (on a
/// background thread at low priority, one kernel at a time), then its
/// relinking. Ignored once the background compiler stopped.
void requestFullTier(std::weak_ptr<Linkage> linkage);

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_TIEREDKERNELS_H
