//===- ReassociateReductions.cpp - vectorizable fp reductions -------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace lazymlir {
#define GEN_PASS_DEF_REASSOCIATEREDUCTIONSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct ReassociateReductionsPass
    : lazymlir::impl::ReassociateReductionsPassBase<ReassociateReductionsPass> {
  void runOnOperation() override {
    getOperation().walk([](linalg::GenericOp op) {
      if (op.getNumReductionLoops() == 0)
        return;
      auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
      for (auto [init, yielded] :
           llvm::zip(op.getRegionOutputArgs(), yield.getValues())) {
        Operation *combiner = yielded.getDefiningOp();
        if (!combiner || !llvm::is_contained(combiner->getOperands(), init))
          continue;
        arith::FastMathFlags flag;
        if (isa<arith::AddFOp, arith::MulFOp>(combiner))
          flag = arith::FastMathFlags::reassoc;
        else if (isa<arith::MaximumFOp, arith::MinimumFOp>(combiner))
          flag = arith::FastMathFlags::nsz;
        else
          continue;
        auto fastmath = cast<arith::ArithFastMathInterface>(combiner);
        auto flags = fastmath.getFastMathFlagsAttr().getValue() | flag;
        combiner->setAttr(
            fastmath.getFastMathAttrName(),
            arith::FastMathFlagsAttr::get(op.getContext(), flags));
      }
    });
  }
};

} // namespace
