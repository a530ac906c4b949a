//===- ParallelTiling.cpp - mark tile loops for parallel execution --------===//

#include "lazymlir/Transforms/ParallelTiling.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

void lazymlir::finishParallelTiling(RewriterBase &rewriter, Operation *root,
                                    const scf::SCFTileAndFuseResult &result,
                                    linalg::LinalgOp sized) {
  int64_t points = iterationPoints(sized);
  for (LoopLikeOpInterface loop : result.loops)
    loop->setAttr(kParallelTilesAttr, rewriter.getI64IntegerAttr(points));
  for (OpResult value : root->getResults())
    if (Value replacement = result.replacements.lookup(value))
      rewriter.replaceAllUsesWith(value, replacement);
}

int64_t lazymlir::iterationPoints(linalg::LinalgOp op) {
  int64_t points = 1;
  for (int64_t bound : op.getStaticLoopRanges()) {
    if (ShapedType::isDynamic(bound))
      return kUnknownPoints;
    if (bound != 0 && points > kUnknownPoints / bound)
      return kUnknownPoints;
    points *= bound;
  }
  return points;
}

bool lazymlir::peelPartialTile(RewriterBase &rewriter,
                               LoopLikeOpInterface tileLoop) {
  auto loop = dyn_cast<scf::ForOp>(tileLoop.getOperation());
  if (!loop)
    return false;
  std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound());
  std::optional<int64_t> upper = getConstantIntValue(loop.getUpperBound());
  std::optional<int64_t> step = getConstantIntValue(loop.getStep());
  // A dynamic bound (a `?` dimension: batch x sequence) is peeled too: full
  // tiles of static shape, then at most one partial tile of dynamic size.
  if (!step || (lower && upper && (*upper - *lower) % *step == 0))
    return false;
  scf::ForOp partial;
  rewriter.setInsertionPoint(loop);
  return succeeded(scf::peelForLoopAndSimplifyBounds(rewriter, loop, partial));
}

void lazymlir::foldPeeledTiles(Operation *root) {
  MLIRContext *ctx = root->getContext();
  RewritePatternSet patterns(ctx);
  affine::AffineMinOp::getCanonicalizationPatterns(patterns, ctx);
  affine::AffineApplyOp::getCanonicalizationPatterns(patterns, ctx);
  scf::ForOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::ExtractSliceOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::InsertSliceOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::CastOp::getCanonicalizationPatterns(patterns, ctx);
  ctx->getLoadedDialect<linalg::LinalgDialect>()->getCanonicalizationPatterns(
      patterns);
  (void)applyPatternsGreedily(root, std::move(patterns));
}

void lazymlir::foldStaticInputCasts(linalg::LinalgOp op) {
  for (OpOperand *input : op.getDpsInputOperands())
    if (auto cast = input->get().getDefiningOp<tensor::CastOp>();
        cast && tensor::canFoldIntoConsumerOp(cast))
      input->set(cast.getSource());
}
