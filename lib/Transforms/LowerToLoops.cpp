//===- LowerToLoops.cpp - loops, parallel where it pays -------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "ParallelLoops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
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

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics())
        ops.push_back(op);
    });
    for (linalg::LinalgOp op : ops) {
      rewriter.setInsertionPoint(op);
      unsigned depth = lazymlir::isLargeKernel(op, parallelThreshold)
                           ? lazymlir::kernelParallelDepth(op)
                           : 0;
      FailureOr<linalg::LinalgLoops> loops =
          linalg::linalgOpToLoops(rewriter, op);
      if (failed(loops) || loops->size() < depth) {
        op.emitError("cannot lower to loops");
        return signalPassFailure();
      }
      rewriter.eraseOp(op);
      if (depth > 0)
        lazymlir::parallelizeLoopNest(rewriter, *loops, depth);
    }
  }
};

} // namespace
