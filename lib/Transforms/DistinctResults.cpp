//===- DistinctResults.cpp - no value returned twice ----------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/DenseSet.h"

namespace lazymlir {
#define GEN_PASS_DEF_DISTINCTRESULTSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct DistinctResultsPass
    : lazymlir::impl::DistinctResultsPassBase<DistinctResultsPass> {
  void runOnOperation() override {
    getOperation().walk([](func::ReturnOp ret) {
      OpBuilder b(ret);
      llvm::DenseSet<Value> seen;
      for (OpOperand &operand : ret->getOpOperands()) {
        Value value = operand.get();
        auto type = dyn_cast<RankedTensorType>(value.getType());
        if (!type || seen.insert(value).second)
          continue;
        Location loc = value.getLoc();
        SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, value);
        Value empty =
            tensor::EmptyOp::create(b, loc, sizes, type.getElementType());
        operand.set(linalg::CopyOp::create(b, loc, value, empty)->getResult(0));
      }
    });
  }
};

} // namespace
