//===- CodeGen.h - MLIR modules to host object code -------------*- C++ -*-===//
//
// The compiler's code generation: the dialects it parses, diagnostics turned
// into CompileError, and the LLVM stage of the CPU pipeline through LLVM's
// optimizer and code generator to an object file for the host. Internal to
// the compiler library.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_COMPILER_CODEGEN_H
#define LAZYMLIR_COMPILER_CODEGEN_H

#include "Runtime/KernelCompiler.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <string>
#include <vector>

namespace lazymlir {

/// Every dialect, extension and LLVM translation the compiler needs.
const mlir::DialectRegistry &dialectRegistry();

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
/// safe to call from several threads at once. The runtime's KernelCompiler.
std::string compileKernel(const std::string &text, const std::string &name,
                          const CompileOptions &options, Tier tier,
                          ObjectTimes &times);

} // namespace lazymlir

#endif // LAZYMLIR_COMPILER_CODEGEN_H
