//===- Passes.h - lazymlir transformation passes ----------------*- C++ -*-===//

#ifndef LAZYMLIR_TRANSFORMS_PASSES_H
#define LAZYMLIR_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace lazymlir {

/// On the module, from lazymlir-count-kernels: the entry's loop nests after
/// fusion and tiling (i64); the runtime reports it as the graph's kernels.
inline constexpr llvm::StringLiteral kKernelCountAttr = "lazymlir.kernel_count";

/// On each function lazymlir-outline-kernels made (unit): the runtime
/// compiles it apart, once per process, under its content-hash name.
inline constexpr llvm::StringLiteral kOutlinedKernelAttr = "lazymlir.kernel";

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
