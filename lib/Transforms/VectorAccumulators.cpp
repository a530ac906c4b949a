//===- VectorAccumulators.cpp - accumulator tiles kept in registers -------===//

#include "VectorAccumulators.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/LoopInvariantCodeMotionUtils.h"

using namespace mlir;

void lazymlir::carryVectorAccumulators(RewriterBase &rewriter,
                                       func::FuncOp func,
                                       const FrozenRewritePatternSet &cleanup) {
  (void)applyPatternsGreedily(func, cleanup);
  SmallVector<LoopLikeOpInterface> loops;
  func.walk([&](scf::ForOp loop) { loops.push_back(loop); });
  for (LoopLikeOpInterface loop : loops)
    (void)hoistLoopInvariantSubsets(rewriter, loop);
  (void)applyPatternsGreedily(func, cleanup);
}
