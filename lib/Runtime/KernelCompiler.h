//===- KernelCompiler.h - what the runtime asks of the compiler -*- C++ -*-===//
//
// The runtime (LazyMLIRRuntime) links no pipeline and no MLIR pass: it owns
// the buffer pool, the JIT, the disk cache, tiers and the background
// compiler, and runs. Graphs are compiled by the compiler library
// (LazyMLIRCompiler, lib/Compiler), which defines CpuExecutable::compile and
// CpuExecutable::load and links the pipelines.
//
// The one thing the runtime itself asks of the compiler is to compile an
// outlined kernel (the text of a module holding it) at a tier: at the Fast
// tier while its graph is compiled, and again at the Full tier in the
// background once the graph is hot. The compiler hands that function to the
// runtime with each graph it links (CpuExecutable::Impl::link), so the
// runtime never names the compiler. Internal: shared by the two libraries
// only.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_KERNELCOMPILER_H
#define LAZYMLIR_RUNTIME_KERNELCOMPILER_H

#include "lazymlir/Runtime/CpuExecutable.h"

#include <functional>
#include <string>

namespace lazymlir {

/// How much effort code generation spends on a kernel. Fast: LLVM's -O3 IR
/// passes, then instruction selection and register allocation at -O0
/// (FastISel: several times quicker; the code runs ~15% slower). Full: -O3
/// throughout. A kernel is compiled Fast first and Full in the background
/// once its graph has run a few times (see TieredKernels.h).
enum class Tier { Fast, Full };

const char *tierName(Tier tier);

/// Seconds and sizes of object code generation, summed over modules.
struct ObjectTimes {
  double llvmStage = 0, translate = 0, optimize = 0, codegen = 0;
  int64_t instructions = 0, bytes = 0;
};

/// Compiles kernel `name` from `text` to object code for the host; throws
/// CompileError. Must be safe to call from several threads at once.
using KernelCompiler = std::function<std::string(
    const std::string &text, const std::string &name,
    const CompileOptions &options, Tier tier, ObjectTimes &times)>;

/// The pipeline settings code for this host is compiled with: `options`'
/// with threads 0 resolved to the hardware threads and useLdexp set from the
/// host's features.
CpuPipelineSettings hostPipelineSettings(const CompileOptions &options);

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_KERNELCOMPILER_H
