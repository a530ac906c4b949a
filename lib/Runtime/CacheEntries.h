//===- CacheEntries.h - what the disk cache keeps ---------------*- C++ -*-===//
//
// The disk cache's keys (the code identity, the options, then the kernel's
// name or the graph's source) and its graph records. Internal to the runtime
// and the compiler library.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_CACHEENTRIES_H
#define LAZYMLIR_RUNTIME_CACHEENTRIES_H

#include "KernelCompiler.h"

#include <string>
#include <vector>

namespace lazymlir {

/// The disk cache and the JIT tell kernels and graphs compiled with
/// different options apart by this.
std::string describeOptions(const CompileOptions &options);

/// A kernel's object code at `tier`.
std::string kernelCacheKey(const std::string &options, Tier tier,
                           const std::string &name);
/// A kernel's MLIR (for its Full-tier recompile in a later process).
std::string sourceCacheKey(const std::string &options, const std::string &name);
/// A graph's record.
std::string graphCacheKey(const std::string &options,
                          const std::string &source);

/// Counts a graph looked up on disk (diskCacheCounts).
void countGraphLookup(bool found);

/// A graph's disk entry: what the executable needs besides machine code,
/// the kernels its entry calls, then the entry module's object.
struct GraphRecord {
  std::vector<TensorSignature> inputs, outputs;
  int64_t kernelCount = 0;
  bool hasChecks = false;
  std::vector<std::string> kernels;
  std::string object;

  std::string serialize() const;
  /// False on anything malformed.
  bool parse(const std::string &payload);
};

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_CACHEENTRIES_H
