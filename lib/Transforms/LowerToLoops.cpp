//===- LowerToLoops.cpp - loops, parallel where it pays -------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/PatternMatch.h"

namespace lazymlir {
#define GEN_PASS_DEF_LOWERTOLOOPSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// Iterations of the parallel loop wanted at least: a few per thread, so
/// that a static schedule balances.
constexpr int64_t kMinParallelIterations = 64;

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

/// How many of the leading loops with these trip counts (loops allowed to
/// run in parallel) to run as one parallel loop: the fewest whose iterations
/// number kMinParallelIterations, else all of them if that makes at least
/// two iterations. 0: none.
unsigned leadingParallelDepth(ArrayRef<int64_t> trips) {
  int64_t iterations = 1;
  for (auto [depth, trip] : llvm::enumerate(trips)) {
    iterations *= trip;
    if (iterations >= kMinParallelIterations)
      return depth + 1;
  }
  return iterations >= 2 ? trips.size() : 0;
}

struct LowerToLoopsPass
    : lazymlir::impl::LowerToLoopsPassBase<LowerToLoopsPass> {
  using Base::Base;

  bool isLarge(linalg::LinalgOp op) const {
    if (parallelThreshold <= 0 || op.hasDynamicShape())
      return false;
    int64_t points = 1;
    for (int64_t bound : op.getStaticLoopRanges())
      points *= bound;
    return points >= parallelThreshold;
  }

  /// How many outer loops of `op`'s nest to run as one parallel loop: among
  /// the leading loops writing disjointly, never the innermost of several
  /// loops (it is the one LLVM vectorizes). 0: none.
  unsigned parallelDepth(linalg::LinalgOp op) const {
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    unsigned limit = ranges.size() == 1 ? 1 : ranges.size() - 1;
    unsigned allowed = 0;
    while (allowed < limit && writesDisjointly(op, allowed))
      ++allowed;
    return leadingParallelDepth(ArrayRef(ranges).take_front(allowed));
  }

  /// Replaces the outer `depth` loops of a perfect scf.for nest by one
  /// scf.parallel over the same iteration space.
  static void parallelize(IRRewriter &rewriter, ArrayRef<Operation *> loops,
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
  }

  /// The loops of a contraction's tile nest (outer to inner) that may run
  /// as one parallel loop: marked, without loop-carried values, each the
  /// only effectful op of its parent's body. Empty when the nest uses a
  /// scratch buffer allocated outside it (hoisted out of the tile loops by
  /// buffer-loop-hoisting: threads would share it) or allocates inside.
  static SmallVector<Operation *> parallelTileNest(scf::ForOp root) {
    SmallVector<Operation *> nest;
    for (scf::ForOp loop = root; loop;) {
      if (!loop->hasAttr(lazymlir::kParallelTilesAttr) ||
          loop.getNumRegionIterArgs() != 0)
        break;
      nest.push_back(loop);
      scf::ForOp inner;
      for (Operation &op : loop.getBody()->without_terminator()) {
        if (auto forOp = dyn_cast<scf::ForOp>(op); forOp && !inner)
          inner = forOp;
        else if (!isMemoryEffectFree(&op) || inner)
          inner = nullptr, loop = nullptr; // effects besides the inner loop
      }
      if (!loop)
        break;
      loop = inner;
    }
    bool allocates = false, sharesScratch = false;
    root.walk([&](Operation *op) {
      allocates |= isa<memref::AllocOp, memref::AllocaOp>(op);
      for (Value operand : op->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!isa_and_nonnull<memref::AllocOp, memref::AllocaOp>(def) ||
            root->isAncestor(def))
          continue;
        sharesScratch |= llvm::all_of(operand.getUsers(), [&](Operation *u) {
          return isa<memref::DeallocOp>(u) || root->isAncestor(u);
        });
      }
    });
    if (allocates || sharesScratch)
      nest.clear();
    return nest;
  }

  /// How many outer loops of `nest` to run as one parallel loop (a loop
  /// without static bounds counts as enough iterations).
  static unsigned tileParallelDepth(ArrayRef<Operation *> nest) {
    SmallVector<int64_t> trips = llvm::map_to_vector(nest, [](Operation *op) {
      std::optional<APInt> trips = cast<scf::ForOp>(op).getStaticTripCount();
      return trips ? trips->getSExtValue() : kMinParallelIterations;
    });
    return leadingParallelDepth(trips);
  }

  void parallelizeTiles(IRRewriter &rewriter) {
    SmallVector<scf::ForOp> roots;
    getOperation().walk([&](scf::ForOp loop) {
      auto points =
          loop->getAttrOfType<IntegerAttr>(lazymlir::kParallelTilesAttr);
      auto parent = loop->getParentOfType<scf::ForOp>();
      if (points && points.getInt() >= parallelThreshold &&
          parallelThreshold > 0 &&
          !(parent && parent->hasAttr(lazymlir::kParallelTilesAttr)))
        roots.push_back(loop);
    });
    for (scf::ForOp root : roots) {
      SmallVector<Operation *> nest = parallelTileNest(root);
      if (unsigned depth = tileParallelDepth(nest))
        parallelize(rewriter, nest, depth);
    }
    getOperation().walk([](scf::ForOp loop) {
      loop->removeAttr(lazymlir::kParallelTilesAttr);
    });
  }

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics())
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : ops) {
      rewriter.setInsertionPoint(op);
      unsigned depth = isLarge(op) ? parallelDepth(op) : 0;
      FailureOr<linalg::LinalgLoops> loops = linalg::linalgOpToLoops(rewriter, op);
      if (failed(loops) || loops->size() < depth) {
        op.emitError("cannot lower to loops");
        return signalPassFailure();
      }
      rewriter.eraseOp(op);
      if (depth > 0)
        parallelize(rewriter, *loops, depth);
    }
    parallelizeTiles(rewriter);
  }
};

} // namespace
