//===- HoistRedundantTransfers.cpp - accumulators stay in registers -------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Transforms/Hoisting.h"
#include "mlir/Dialect/Vector/Transforms/VectorTransforms.h"
#include "mlir/IR/PatternMatch.h"

namespace lazymlir {
#define GEN_PASS_DEF_HOISTREDUNDANTTRANSFERSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

namespace {
struct HoistRedundantTransfersPass
    : lazymlir::impl::HoistRedundantTransfersPassBase<
          HoistRedundantTransfersPass> {
  void runOnOperation() override {
    mlir::linalg::hoistRedundantVectorTransfers(getOperation(),
                                                /*verifyNonZeroTrip=*/true);
    // With the accumulator in registers, its last write to the per-tile
    // buffer is read right back by the epilogue: forward the value and drop
    // the dead stores, so the buffer usually disappears.
    mlir::IRRewriter rewriter(&getContext());
    mlir::vector::transferOpflowOpt(rewriter, getOperation());
  }
};
} // namespace
