//===- RuntimeGemm.h - contractions the runtime GEMM computes -*- C++ -*-===//
//
// One predicate for the passes that decide around it: lazymlir-mark-gemms
// marks what it accepts; lazymlir-fuse-elementwise fuses a transpose into a
// contraction it keeps accepting (the GEMM packs its operands, so it reads
// any transpose in place); lazymlir-fuse-row-reductions leaves what it
// accepts out of row-tile loops (a batched matmul there is a slice per
// iteration, tiled at a fraction of the GEMM's speed).
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_TRANSFORMS_RUNTIMEGEMM_H
#define LAZYMLIR_TRANSFORMS_RUNTIMEGEMM_H

#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/IR/AffineMap.h"

#include <cstdint>

namespace lazymlir {

/// Whether the runtime GEMM computes `op` (a float32 contraction on tensors)
/// when it reads its operands and result through `maps` (its own maps, or
/// the maps a fusion would give it): every loop plays one role (batch, M, N,
/// K), each role's loops sit side by side in each operand in loop order,
/// and the sizes known now reach `minSize` and `minWork` (by default
/// lazymlir-mark-gemms' own defaults, MarkGemmsPassOptions()).
bool isRuntimeGemm(mlir::linalg::LinalgOp op,
                   llvm::ArrayRef<mlir::AffineMap> maps, int64_t minSize,
                   int64_t minWork);
bool isRuntimeGemm(mlir::linalg::LinalgOp op,
                   llvm::ArrayRef<mlir::AffineMap> maps);

/// The layout half of isRuntimeGemm: `op`, with indexing maps `maps`, is
/// C += A x B whose batch, row, column and reduction loops each read as one
/// dimension of every operand (whatever the element types and sizes).
bool readsAsMatrices(mlir::linalg::LinalgOp op,
                     llvm::ArrayRef<mlir::AffineMap> maps);

/// Whether `op`, all parallel loops on tensors, only widens its one bf16
/// input to float32: its body is one `arith.extf` of that input, yielded
/// (MarkGemms.cpp; its maps are the caller's to check).
bool isBf16Widening(mlir::linalg::GenericOp op);

/// `producer`'s result `index`, which yields `arith.extf` of a bf16 value
/// into a tensor.empty it never reads, made to yield the bf16 value into a
/// new bf16 tensor.empty, in place (the extf goes when nothing else in the
/// body reads it). The float32 tensor.empty is left to the caller.
void yieldBf16InPlace(mlir::linalg::GenericOp producer, unsigned index);

} // namespace lazymlir

#endif // LAZYMLIR_TRANSFORMS_RUNTIMEGEMM_H
