//===- Passes.h - lazymlir transformation passes ----------------*- C++ -*-===//

#ifndef LAZYMLIR_TRANSFORMS_PASSES_H
#define LAZYMLIR_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace lazymlir {

/// On the scf.for loops of a contraction's tiles over parallel dimensions
/// (lazymlir-tile-contractions): the contraction's iteration points (i64).
/// lazymlir-lower-to-loops runs such loops in parallel when large and safe,
/// and removes the attribute.
inline constexpr llvm::StringLiteral kParallelTilesAttr =
    "lazymlir.parallel_tiles";

#define GEN_PASS_DECL
#include "lazymlir/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "lazymlir/Transforms/Passes.h.inc"

} // namespace lazymlir

#endif // LAZYMLIR_TRANSFORMS_PASSES_H
