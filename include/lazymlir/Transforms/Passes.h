//===- Passes.h - lazymlir transformation passes ----------------*- C++ -*-===//

#ifndef LAZYMLIR_TRANSFORMS_PASSES_H
#define LAZYMLIR_TRANSFORMS_PASSES_H

#include "mlir/IR/ValueRange.h"
#include "mlir/Pass/Pass.h"

#include <cstdint>
#include <string>

namespace mlir {
class ModuleOp;
class SymbolTable;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace lazymlir {

/// On the module, from lazymlir-count-kernels: the entry's loop nests after
/// fusion and tiling (i64); the runtime reports it as the graph's kernels.
inline constexpr llvm::StringLiteral kKernelCountAttr = "lazymlir.kernel_count";

/// On each function lazymlir-outline-kernels made (unit): the runtime
/// compiles it apart, once per process, under its content-hash name.
inline constexpr llvm::StringLiteral kOutlinedKernelAttr = "lazymlir.kernel";

/// On a float32 contraction the runtime GEMM computes (unit), from
/// lazymlir-mark-gemms: lazymlir-tile-contractions leaves it alone and
/// lazymlir-gemm-calls makes it a call.
inline constexpr llvm::StringLiteral kGemmAttr = "lazymlir.gemm";

/// On a marked bf16 contraction whose result lazymlir-mark-gemms narrowed to
/// bf16 (unit): its body rounds the sum at every step, the runtime GEMM it
/// must become sums in float32 and rounds once; lazymlir-gemm-calls fails
/// rather than leave it to the loops.
inline constexpr llvm::StringLiteral kBf16ResultAttr = "lazymlir.bf16_result";

/// On each call lazymlir-gemm-calls made: its operands' shapes, bytes and
/// flops (a dictionary), for lazymlir-instrument-kernels' site.
inline constexpr llvm::StringLiteral kGemmSiteAttr = "lazymlir.gemm_site";

/// What a profile site says of the buffers a call reads and writes: their
/// shapes ("64x128xf32, 128xf32") and their bytes (static shapes only).
std::string describeOperandShapes(mlir::ValueRange operands);
int64_t countOperandBytes(mlir::ValueRange operands);

/// The module's declaration of the runtime entry point `name`, `void
/// name(int64_t)` (private, external: the JIT binds it by name), made at the
/// module's end and added to `symbols` if the module has none.
mlir::func::FuncOp declareRuntimeI64Function(mlir::ModuleOp module,
                                             mlir::SymbolTable &symbols,
                                             llvm::StringRef name);

/// On the module, from lazymlir-instrument-kernels: one dictionary per timed
/// kernel call site (kernel, ops, shapes, bytes, flops), by site number.
inline constexpr llvm::StringLiteral kProfileSitesAttr =
    "lazymlir.profile_sites";

/// On the module, from lazymlir-gpu-launch-plan: the GPU executable's launch
/// plan (a JSON string, with the kernels' PTX).
inline constexpr llvm::StringLiteral kLaunchPlanAttr = "lazymlir.launch_plan";

/// The lowest PTX ISA version (major * 10 + minor) LLVM's NVPTX backend
/// takes for an NVIDIA `chip` (sm_80 -> 70), or 0 for a chip
/// lazymlir-verify-nvvm-targets does not accept.
int minimumPtxVersion(llvm::StringRef chip);

#define GEN_PASS_DECL
#include "lazymlir/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "lazymlir/Transforms/Passes.h.inc"

} // namespace lazymlir

#endif // LAZYMLIR_TRANSFORMS_PASSES_H
