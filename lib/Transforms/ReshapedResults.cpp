//===- ReshapedResults.cpp - reshaped results computed in place -----------===//
//
// A result the entry function returns through a reshape (AdamW's fused
// update computes a 512x2048 parameter as 1048576 values and returns their
// expand_shape; attention's output is a 512x8x64 computed and returned
// collapsed) bufferizes to a view of a temporary, which
// buffer-results-to-out-params cannot replace by the out-parameter: it
// copies the view into it after the run, on one thread (108 such copies in
// a BERT h512 training step). When the reshaped value is computed by an op
// that writes into a tensor.empty (a destination-style op, a tile loop's
// initial value), that op writes instead into the inverse reshape of an
// empty tensor of the returned shape: after bufferization the returned
// value is that allocation again (the reshapes fold), and it becomes the
// out-parameter itself. The empty tensor may be further down a chain of
// in-place writers used once each (a product accumulating into a zero
// fill of an empty tensor), or be any tensor a linalg op writes over
// without reading it.
//
//===----------------------------------------------------------------------===//

#include "Destinations.h"
#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace lazymlir {
#define GEN_PASS_DEF_RESHAPEDRESULTSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

using lazymlir::destinationOf;

/// Whether `destination`'s value is never read: a linalg op's init whose
/// payload ignores it (an elementwise op writing over a tensor of the right
/// shape, such as the parameter it updates).
bool overwritten(OpOperand &destination) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(destination.getOwner());
  return linalgOp && !linalgOp.payloadUsesValueFromOperand(&destination);
}

struct ReshapedResultsPass
    : lazymlir::impl::ReshapedResultsPassBase<ReshapedResultsPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    func.walk([&](func::ReturnOp ret) {
      for (Value value : ret.getOperands()) {
        auto type = dyn_cast<RankedTensorType>(value.getType());
        Operation *reshape = value.getDefiningOp();
        if (!type || !type.hasStaticShape() || !reshape ||
            !isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(reshape))
          continue;
        auto source = dyn_cast<OpResult>(reshape->getOperand(0));
        if (!source || source.getOwner()->getBlock() != ret->getBlock())
          continue;
        // Down the chain of in-place writers (a product accumulating into
        // a zero fill, the fill into an empty tensor) to the empty tensor.
        OpOperand *destination = destinationOf(source);
        while (destination &&
               !destination->get().getDefiningOp<tensor::EmptyOp>() &&
               !overwritten(*destination)) {
          auto writer = dyn_cast<OpResult>(destination->get());
          destination = writer && writer.hasOneUse() &&
                                writer.getOwner()->getBlock() == ret->getBlock()
                            ? destinationOf(writer)
                            : nullptr;
        }
        if (!destination || destination->get().getType() != source.getType())
          continue;
        auto sourceType = cast<RankedTensorType>(source.getType());
        OpBuilder b(destination->getOwner());
        Location loc = reshape->getLoc();
        Value empty = tensor::EmptyOp::create(b, loc, type.getShape(),
                                              type.getElementType());
        Value inverse;
        if (auto expand = dyn_cast<tensor::ExpandShapeOp>(reshape))
          inverse = tensor::CollapseShapeOp::create(
              b, loc, sourceType, empty, expand.getReassociationIndices());
        else
          inverse = tensor::ExpandShapeOp::create(
              b, loc, sourceType, empty,
              cast<tensor::CollapseShapeOp>(reshape).getReassociationIndices());
        destination->set(inverse);
      }
    });
  }
};

} // namespace
