//===- VectorAccumulators.h - accumulator tiles kept in registers -*- C++
//-*-===//
//
// Shared by lazymlir-tile-contractions and
// lazymlir-vectorize-column-reductions, which both leave vectorized tiles
// whose accumulator is read and written back in every step of a reduction
// loop.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_LIB_TRANSFORMS_VECTORACCUMULATORS_H
#define LAZYMLIR_LIB_TRANSFORMS_VECTORACCUMULATORS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"

namespace lazymlir {

/// Applies `cleanup` to `func`, then carries each accumulator tile that an
/// scf.for loop reads and writes back in every iteration through the loop
/// as a vector instead (upstream hoistLoopInvariantSubsets: it stays in
/// registers), then applies `cleanup` again.
void carryVectorAccumulators(mlir::RewriterBase &rewriter,
                             mlir::func::FuncOp func,
                             const mlir::FrozenRewritePatternSet &cleanup);

} // namespace lazymlir

#endif // LAZYMLIR_LIB_TRANSFORMS_VECTORACCUMULATORS_H
