//===- CodeGen.h - MLIR modules to host object code -------------*- C++ -*-===//
//
// The runtime's code generation: the dialects it parses, diagnostics turned
// into CompileError, and the LLVM stage of the CPU pipeline through LLVM's
// optimizer and code generator to an object file for the host. Internal to
// the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_CODEGEN_H
#define LAZYMLIR_RUNTIME_CODEGEN_H

#include "lazymlir/Runtime/CpuExecutable.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <string>
#include <vector>

namespace lazymlir {

/// How much effort code generation spends on a kernel. Fast: LLVM's -O3 IR
/// passes, then instruction selection and register allocation at -O0
/// (FastISel: several times quicker; the code runs ~15% slower). Full: -O3
/// throughout. A kernel is compiled Fast first and Full in the background
/// once its graph has run a few times (see CpuExecutable).
enum class Tier { Fast, Full };

const char *tierName(Tier tier);

/// Every dialect, extension and LLVM translation the runtime needs.
const mlir::DialectRegistry &dialectRegistry();

/// Native target and asm printer, once per process.
void initializeLLVMOnce();

/// Collects every diagnostic of a context, so a failure reports what MLIR
/// said rather than just "failed".
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext &ctx);
  [[noreturn]] void fail(const std::string &stage) const;

private:
  std::string text;
  mlir::ScopedDiagnosticHandler handler;
};

/// Seconds and sizes of object code generation, summed over modules.
struct ObjectTimes {
  double llvmStage = 0, translate = 0, optimize = 0, codegen = 0;
  int64_t instructions = 0, bytes = 0;
};

/// An LLVM-dialect module to object code for the host: LLVM IR passes at
/// `irOptLevel` (0-3), code generation at `tier` (the entry module: Fast
/// with irOptLevel 0). Every definition but `keep` becomes internal. With
/// `packedEntry` non-empty, adds `<packedEntry>_packed(void **)`, which
/// calls it with each argument loaded from args[i], and keeps it.
std::string emitObject(mlir::ModuleOp module,
                       const std::vector<std::string> &keep,
                       unsigned irOptLevel, Tier tier,
                       const std::string &packedEntry, ObjectTimes &times);

/// The CPU pipeline's LLVM stage and emitObject on one outlined kernel (the
/// text of a module holding its function `name`), in a context of its own:
/// safe to call from several threads at once.
std::string compileKernel(const std::string &text, const std::string &name,
                          const CompileOptions &options, Tier tier,
                          ObjectTimes &times);

/// The pipeline's options for compile options (threads resolved, host
/// features).
void fillPipelineOptions(struct CpuPipelineOptions &pipeline,
                         const CompileOptions &options);
unsigned resolvedThreads(const CompileOptions &options);

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_CODEGEN_H
