//===- HoistRedundantTransfers.cpp - accumulators stay in registers -------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/Transforms/Hoisting.h"

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
  }
};
} // namespace
