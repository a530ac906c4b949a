//===- Executable.h - a compiled graph, linked and run ----------*- C++ -*-===//
//
// CpuExecutable's state. The runtime defines how it links, loads from the
// disk cache and runs; the compiler library fills one in
// (CpuExecutable::compile) and links it. Internal to the runtime and the
// compiler library.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_EXECUTABLE_H
#define LAZYMLIR_RUNTIME_EXECUTABLE_H

#include "TieredKernels.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lazymlir {

struct CpuExecutable::Impl {
  std::shared_ptr<Linkage> linkage = std::make_shared<Linkage>();
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> outputs;
  std::string llvmDialect;
  std::string cacheKey;
  int64_t kernelCount = 0;
  CompileStats stats;
  /// The packed entry point's arguments as 8-byte scalars: for each input,
  /// then each output, the memref descriptor (allocated pointer, aligned
  /// pointer, offset, sizes..., canonical strides...) with null pointers.
  std::vector<int64_t> argumentBlock;
  /// Where each buffer's allocated pointer sits in argumentBlock.
  std::vector<size_t> pointerSlots;
  /// Each buffer's size in bytes, inputs then outputs (0 for a buffer with
  /// a dynamic dimension: see `dynamic`).
  std::vector<size_t> bufferBytes;
  /// Some signature has a dynamic dimension: runs fill the descriptors'
  /// sizes and strides from their buffers' (run on BufferViews only).
  bool dynamic = false;
  /// The timed kernel call sites (compiled for the profiler), and the
  /// calls timed since takeProfileEvents.
  std::vector<ProfileSite> profileSites;
  mutable std::mutex profileMutex;
  mutable std::vector<ProfileEvent> profileEvents;
  /// Runs of a graph that has runtime checks hold this: each reads the
  /// flag its own run set.
  mutable std::mutex checkMutex;

  /// Computes the argument block and buffer sizes from the signatures.
  void buildArgumentBlock();

  /// Links the entry; kernels acquired at the Fast tier are recompiled Full
  /// by `compiler` once the graph is hot.
  void link(const CompileOptions &options, const std::string &optionsKey,
            std::string entryObject, bool hasChecks,
            std::vector<std::string> fastKernels, KernelCompiler compiler);

  /// Fills this in from the graph compiled before under `key` and its
  /// kernels, from the disk cache, and links it; false when they are not
  /// there whole.
  bool loadFromDisk(const std::string &key, const CompileOptions &options,
                    KernelCompiler compiler);

  /// Calls the entry on buffers that match the signatures, inputs first;
  /// `sizes` (required when `dynamic`): each buffer's sizes.
  void invoke(
      const std::vector<void *> &data, bool background,
      const std::vector<const std::vector<int64_t> *> *sizes = nullptr) const;
};

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_EXECUTABLE_H
