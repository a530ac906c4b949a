//===- ParallelTiling.cpp - mark tile loops for parallel execution --------===//

#include "lazymlir/Transforms/ParallelTiling.h"

using namespace mlir;

void lazymlir::finishParallelTiling(RewriterBase &rewriter, Operation *root,
                                    const scf::SCFTileAndFuseResult &result,
                                    linalg::LinalgOp sized) {
  int64_t points = 1;
  for (int64_t bound : sized.getStaticLoopRanges())
    points *= bound;
  for (LoopLikeOpInterface loop : result.loops)
    loop->setAttr(kParallelTilesAttr, rewriter.getI64IntegerAttr(points));
  for (OpResult value : root->getResults())
    if (Value replacement = result.replacements.lookup(value))
      rewriter.replaceAllUsesWith(value, replacement);
}
