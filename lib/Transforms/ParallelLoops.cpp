//===- ParallelLoops.cpp - loop nests as scf.parallel ---------------------===//

#include "ParallelLoops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/AffineExpr.h"

#include <limits>

using namespace mlir;

namespace {

/// Whether iterations of loop `dim` write disjoint output elements: the dim
/// is parallel and indexes every output directly.
bool writesDisjointly(linalg::LinalgOp op, unsigned dim) {
  if (op.getIteratorTypesArray()[dim] != utils::IteratorType::parallel)
    return false;
  for (OpOperand &init : op.getDpsInitsMutable()) {
    AffineMap map = op.getMatchingIndexingMap(&init);
    if (!llvm::any_of(map.getResults(), [&](AffineExpr e) {
          return e == getAffineDimExpr(dim, op.getContext());
        }))
      return false;
  }
  return true;
}

} // namespace

unsigned lazymlir::leadingParallelDepth(ArrayRef<int64_t> trips) {
  int64_t iterations = 1;
  for (auto [depth, trip] : llvm::enumerate(trips)) {
    iterations *= trip;
    if (iterations >= kMinParallelIterations)
      return depth + 1;
  }
  return iterations >= 2 ? trips.size() : 0;
}

bool lazymlir::isLargeKernel(linalg::LinalgOp op, int64_t parallelThreshold) {
  if (parallelThreshold <= 0)
    return false;
  // Dynamic (`?`) ranges count as 1: large if the static ones alone are.
  int64_t points = 1;
  for (int64_t bound : op.getStaticLoopRanges()) {
    if (ShapedType::isDynamic(bound))
      continue;
    if (bound != 0 && points > std::numeric_limits<int64_t>::max() / bound)
      return true;
    points *= bound;
  }
  return points >= parallelThreshold;
}

unsigned lazymlir::kernelParallelDepth(linalg::LinalgOp op) {
  // A dynamic (`?`) loop counts as enough iterations, as a tile loop
  // without static bounds does in parallelize-tiles.
  SmallVector<int64_t> ranges =
      llvm::map_to_vector(op.getStaticLoopRanges(), [](int64_t range) {
        return ShapedType::isDynamic(range) ? kMinParallelIterations : range;
      });
  unsigned limit = ranges.size() == 1 ? 1 : ranges.size() - 1;
  unsigned allowed = 0;
  while (allowed < limit && writesDisjointly(op, allowed))
    ++allowed;
  return leadingParallelDepth(ArrayRef(ranges).take_front(allowed));
}

unsigned lazymlir::disjointParallelDepth(linalg::LinalgOp op) {
  unsigned depth = 0;
  while (depth < op.getNumLoops() && writesDisjointly(op, depth))
    ++depth;
  return depth;
}

scf::ParallelOp lazymlir::parallelizeLoopNest(RewriterBase &rewriter,
                                              ArrayRef<Operation *> loops,
                                              unsigned depth) {
  SmallVector<Value> lbs, ubs, steps;
  for (Operation *loop : loops.take_front(depth)) {
    auto forOp = cast<scf::ForOp>(loop);
    lbs.push_back(forOp.getLowerBound());
    ubs.push_back(forOp.getUpperBound());
    steps.push_back(forOp.getStep());
  }
  auto outer = cast<scf::ForOp>(loops.front());
  rewriter.setInsertionPoint(outer);
  auto parallel =
      scf::ParallelOp::create(rewriter, outer.getLoc(), lbs, ubs, steps);
  // Each level's ops (index computations, inner bounds) go into the
  // parallel body in order, the innermost level's whole body last.
  Operation *insertPoint = parallel.getBody()->getTerminator();
  for (unsigned level = 0; level < depth; ++level) {
    auto forOp = cast<scf::ForOp>(loops[level]);
    rewriter.replaceAllUsesWith(forOp.getInductionVar(),
                                parallel.getInductionVars()[level]);
    for (Operation &op : llvm::make_early_inc_range(*forOp.getBody())) {
      if (&op == forOp.getBody()->getTerminator() ||
          (level + 1 < depth && &op == loops[level + 1]))
        continue;
      rewriter.moveOpBefore(&op, insertPoint);
    }
  }
  rewriter.eraseOp(outer);
  return parallel;
}

void lazymlir::stripMineInnermost(RewriterBase &rewriter,
                                  SmallVectorImpl<Operation *> &loops,
                                  int64_t iterations) {
  auto inner = dyn_cast<scf::ForOp>(loops.back());
  if (!inner || inner.getNumRegionIterArgs() != 0)
    return;
  std::optional<int64_t> step = getConstantIntValue(inner.getStep());
  if (!step || *step <= 0)
    return;
  std::optional<APInt> trips = inner.getStaticTripCount();
  if (trips && trips->getSExtValue() <= iterations)
    return;
  Location loc = inner.getLoc();
  rewriter.setInsertionPoint(inner);
  Value block =
      arith::ConstantIndexOp::create(rewriter, loc, *step * iterations);
  auto blocks = scf::ForOp::create(rewriter, loc, inner.getLowerBound(),
                                   inner.getUpperBound(), block);
  rewriter.setInsertionPointToStart(blocks.getBody());
  Value begin = blocks.getInductionVar();
  Value end = arith::MinSIOp::create(
      rewriter, loc, arith::AddIOp::create(rewriter, loc, begin, block),
      inner.getUpperBound());
  rewriter.moveOpBefore(inner, blocks.getBody()->getTerminator());
  rewriter.modifyOpInPlace(inner, [&] {
    inner.setLowerBound(begin);
    inner.setUpperBound(end);
  });
  loops.back() = blocks;
}
