//===- CpuPipelineSettings.h - the CPU pipeline's knobs ---------*- C++ -*-===//
//
// The CPU pipeline's settings and their defaults, in one place: the
// pipeline's textual options (CpuPipelineOptions, lazymlir-cpu-pipeline{...})
// take their defaults from here and are built from it, and the runtime's
// CompileOptions holds one. A plain struct with no MLIR or LLVM header, so
// that the runtime's public header can include it.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_SUPPORT_CPUPIPELINESETTINGS_H
#define LAZYMLIR_SUPPORT_CPUPIPELINESETTINGS_H

#include <cstdint>
#include <string>

namespace lazymlir {

struct CpuPipelineSettings {
  /// Function the runtime calls.
  std::string entry = "main";
  /// Keep data-dependent indices in bounds and integer divisors non-zero,
  /// failures in a flag (lazymlir-guard-runtime-checks); without them a bad
  /// index reads foreign memory or aborts. Off only to measure their cost.
  bool runtimeChecks = true;
  /// Fuse elementwise producers into their consumers
  /// (lazymlir-fuse-elementwise).
  bool fusion = true;
  /// Run convolutions and pooling in NHWC (lazymlir-channels-last).
  bool channelsLast = true;
  /// Threads that share each large kernel's parallel loop (1: sequential;
  /// more: OpenMP worksharing loops).
  unsigned threads = 1;
  /// With threads > 1: iteration points a kernel needs to be run in parallel
  /// (forking costs microseconds).
  int64_t parallelThreshold = 1 << 16;
  /// Expand f32 exp with llvm.intr.ldexp (lazymlir-approximate-math): for
  /// targets with a vector ldexp (AVX-512's vscalefps).
  bool useLdexp = false;
  /// 32-bit lanes of the host's vector registers (4: SSE, 8: AVX2, 16:
  /// AVX-512): elementwise loops are vectorized at this width
  /// (lazymlir-lower-to-loops' vector-width); 0: LLVM's cost model decides.
  unsigned vectorWidth = 8;
  /// Large contractions whose operands widen bf16 values read them in bf16
  /// and call the runtime's bf16 GEMM (lazymlir-mark-gemms' bf16-operands):
  /// for hosts with a bf16 dot product (AVX512-BF16).
  bool bf16Gemm = false;
  /// Elementwise kernels writing at least this many bytes store them with
  /// aligned non-temporal vector stores (lazymlir-streaming-stores); 0: never.
  int64_t streamingStoreBytes = 16 << 20;
  /// Time each kernel call of the entry (lazymlir-instrument-kernels): the
  /// profiler's compile mode. The module then lists the call sites.
  bool profile = false;
};

} // namespace lazymlir

#endif // LAZYMLIR_SUPPORT_CPUPIPELINESETTINGS_H
