//===- Pipelines.h - lazymlir pass pipelines --------------------*- C++ -*-===//
//
// CpuPipelineOptions are the textual form of CpuPipelineSettings (a plain
// struct, which the runtime's CompileOptions holds too): their defaults are
// its defaults, and the compiler builds them from one.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_PIPELINES_PIPELINES_H
#define LAZYMLIR_PIPELINES_PIPELINES_H

#include "lazymlir/Support/CpuPipelineSettings.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace lazymlir {

struct CpuPipelineOptions
    : public mlir::PassPipelineOptions<CpuPipelineOptions> {
  CpuPipelineOptions() = default;
  /// The options holding `settings` (each option below has one field).
  explicit CpuPipelineOptions(const CpuPipelineSettings &settings) {
    entry = settings.entry;
    runtimeChecks = settings.runtimeChecks;
    fusion = settings.fusion;
    channelsLast = settings.channelsLast;
    threads = settings.threads;
    parallelThreshold = settings.parallelThreshold;
    useLdexp = settings.useLdexp;
    vectorWidth = settings.vectorWidth;
    bf16Gemm = settings.bf16Gemm;
    streamingStoreBytes = settings.streamingStoreBytes;
    profile = settings.profile;
  }

  Option<std::string> entry{*this, "entry",
                            llvm::cl::desc("Function the runtime calls"),
                            llvm::cl::init(CpuPipelineSettings().entry)};
  Option<bool> runtimeChecks{
      *this, "runtime-checks",
      llvm::cl::desc("Keep data-dependent indices in bounds and integer "
                     "divisors non-zero, failures in a flag "
                     "(lazymlir-guard-runtime-checks); off only to measure "
                     "what the checks cost"),
      llvm::cl::init(CpuPipelineSettings().runtimeChecks)};
  Option<bool> fusion{*this, "fusion",
                      llvm::cl::desc("Fuse elementwise producers into their "
                                     "consumers (lazymlir-fuse-elementwise)"),
                      llvm::cl::init(CpuPipelineSettings().fusion)};
  Option<bool> channelsLast{
      *this, "channels-last",
      llvm::cl::desc("Run convolutions and pooling in NHWC "
                     "(lazymlir-channels-last)"),
      llvm::cl::init(CpuPipelineSettings().channelsLast)};
  Option<unsigned> threads{
      *this, "threads",
      llvm::cl::desc("Threads that share each large kernel's parallel loop "
                     "(1: sequential; more: OpenMP worksharing loops)"),
      llvm::cl::init(CpuPipelineSettings().threads)};
  Option<int64_t> parallelThreshold{
      *this, "parallel-threshold",
      llvm::cl::desc("With threads > 1: iteration points a kernel needs to "
                     "be run in parallel (forking costs microseconds)"),
      llvm::cl::init(CpuPipelineSettings().parallelThreshold)};
  Option<bool> useLdexp{
      *this, "use-ldexp",
      llvm::cl::desc("Expand f32 exp with llvm.intr.ldexp "
                     "(lazymlir-approximate-math): for targets with a vector "
                     "ldexp (AVX-512's vscalefps); the runtime sets it from "
                     "the host's features"),
      llvm::cl::init(CpuPipelineSettings().useLdexp)};
  Option<unsigned> vectorWidth{
      *this, "vector-width",
      llvm::cl::desc("32-bit lanes of the target's vector registers: "
                     "elementwise loops are vectorized at this width "
                     "(lazymlir-lower-to-loops); 0: LLVM's cost model "
                     "decides; the runtime sets it from the host's features"),
      llvm::cl::init(CpuPipelineSettings().vectorWidth)};
  Option<bool> bf16Gemm{
      *this, "bf16-gemm",
      llvm::cl::desc("Contractions of widened bf16 operands read them in "
                     "bf16 and call the runtime's bf16 GEMM "
                     "(lazymlir-mark-gemms' bf16-operands); the runtime sets "
                     "it on hosts with AVX512-BF16"),
      llvm::cl::init(CpuPipelineSettings().bf16Gemm)};
  Option<int64_t> streamingStoreBytes{
      *this, "streaming-store-bytes",
      llvm::cl::desc("Elementwise kernels writing at least this many bytes "
                     "store them with aligned non-temporal vector stores "
                     "(lazymlir-streaming-stores); 0: never"),
      llvm::cl::init(CpuPipelineSettings().streamingStoreBytes)};
  Option<bool> profile{
      *this, "profile",
      llvm::cl::desc("Time each kernel call of the entry and list the call "
                     "sites (lazymlir-instrument-kernels): the profiler's "
                     "compile mode"),
      llvm::cl::init(CpuPipelineSettings().profile)};
};

/// linalg-on-tensors (as torch-mlir emits it) to the LLVM dialect, with the
/// entry function in destination-passing style: results become trailing
/// memref arguments that the caller allocates. It is the tensor stage
/// followed by the lowering stage.
void buildCpuPipeline(mlir::OpPassManager &pm,
                      const CpuPipelineOptions &options);

/// Checks and optimizes on tensors (contract, fusion); each linalg op left
/// afterwards becomes one loop nest (kernel).
void buildCpuTensorPipeline(mlir::OpPassManager &pm,
                            const CpuPipelineOptions &options);

/// Bufferizes with destination passing and lowers to the LLVM dialect: the
/// bufferize stage followed by the LLVM stage.
void buildCpuLoweringPipeline(mlir::OpPassManager &pm,
                              const CpuPipelineOptions &options);

/// Bufferizes with destination passing, lowers linalg to loops and outlines
/// each loop nest into a kernel function named by its content
/// (lazymlir-outline-kernels).
void buildCpuBufferizePipeline(mlir::OpPassManager &pm,
                               const CpuPipelineOptions &options);

/// One-shot bufferization with identity layouts at the function boundary and
/// the results as out-parameters (destination passing), shared by the CPU
/// and GPU pipelines.
/// `entry`: the function whose donated arguments (`lazymlir.donated_to`)
/// receive their results (lazymlir-donate-arguments); empty: none.
/// `markResults`: each out-parameter carries `bufferize.result` (for
/// lazymlir-outputs-at-first-write, which removes it).
void addBufferizeWithOutParams(mlir::OpPassManager &pm,
                               const std::string &entry = "",
                               bool markResults = false);

/// Loops and memrefs to the LLVM dialect. Runs on a whole module, or on a
/// module holding one outlined kernel (the runtime compiles each apart).
void buildCpuLLVMPipeline(mlir::OpPassManager &pm,
                          const CpuPipelineOptions &options);

struct GpuPipelineOptions
    : public mlir::PassPipelineOptions<GpuPipelineOptions> {
  Option<std::string> chip{
      *this, "chip",
      llvm::cl::desc("NVIDIA GPU architecture the kernels are compiled for "
                     "(sm_80, sm_90, ...)"),
      llvm::cl::init("sm_90")};
  Option<std::string> features{
      *this, "features",
      llvm::cl::desc("PTX features (+ptx80, ...); empty: the lowest PTX "
                     "version the chip takes"),
      llvm::cl::init("")};
  Option<std::string> libdevice{
      *this, "libdevice",
      llvm::cl::desc("Path of libdevice.10.bc, linked into every kernel "
                     "module (math ops call it); kernels that need it fail "
                     "with a diagnostic without it"),
      llvm::cl::init("")};
  Option<int64_t> blockSize{*this, "block-size",
                            llvm::cl::desc("Threads per block"),
                            llvm::cl::init(256)};
  Option<bool> fusion{*this, "fusion",
                      llvm::cl::desc("Fuse elementwise producers into their "
                                     "consumers (lazymlir-fuse-elementwise)"),
                      llvm::cl::init(true)};
};

/// linalg-on-tensors to kernels in PTX for NVIDIA GPUs: fusion, then one
/// GPU thread per output element (blocks of `block-size` threads, thread x
/// on the innermost dimension), outlined into gpu.modules lowered through
/// NVVM to PTX (gpu.binary, format isa); the host side stays a function of
/// gpu.launch_func ops on memrefs, results as out-parameters.
void buildGpuPipeline(mlir::OpPassManager &pm,
                      const GpuPipelineOptions &options);

/// Registers our passes and pipelines with the global registry (for
/// lazymlir-opt and textual pipelines).
void registerAllPassesAndPipelines();

} // namespace lazymlir

#endif // LAZYMLIR_PIPELINES_PIPELINES_H
