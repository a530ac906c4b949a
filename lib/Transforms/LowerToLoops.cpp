//===- LowerToLoops.cpp - loops, parallel where it pays -------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/PatternMatch.h"

namespace lazymlir {
#define GEN_PASS_DEF_LOWERTOLOOPSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

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

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics())
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : ops) {
      rewriter.setInsertionPoint(op);
      FailureOr<linalg::LinalgLoops> loops =
          isLarge(op) ? linalg::linalgOpToParallelLoops(rewriter, op)
                      : linalg::linalgOpToLoops(rewriter, op);
      if (failed(loops)) {
        op.emitError("cannot lower to loops");
        return signalPassFailure();
      }
      rewriter.eraseOp(op);
    }
  }
};

} // namespace
