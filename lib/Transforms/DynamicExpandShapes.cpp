//===- DynamicExpandShapes.cpp - expand_shape into several ? sizes --------===//
//
// See Passes.td: upstream's expand-strided-metadata crashes on these.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"

namespace lazymlir {
#define GEN_PASS_DEF_DYNAMICEXPANDSHAPESPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

bool splitsIntoDynamicSizes(memref::ExpandShapeOp op) {
  MemRefType type = op.getResultType();
  return llvm::any_of(op.getReassociationIndices(), [&](const auto &group) {
    return llvm::count_if(
               group, [&](int64_t dim) { return type.isDynamicDim(dim); }) > 1;
  });
}

/// a * b, folded when both are constants.
OpFoldResult multiply(RewriterBase &rewriter, Location loc, OpFoldResult a,
                      OpFoldResult b) {
  std::optional<int64_t> x = getConstantIntValue(a), y = getConstantIntValue(b);
  if (x && y)
    return rewriter.getIndexAttr(*x * *y);
  return arith::MulIOp::create(
             rewriter, loc, getValueOrCreateConstantIndexOp(rewriter, loc, a),
             getValueOrCreateConstantIndexOp(rewriter, loc, b))
      .getResult();
}

struct DynamicExpandShapesPass
    : lazymlir::impl::DynamicExpandShapesPassBase<DynamicExpandShapesPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<memref::ExpandShapeOp> ops;
    getOperation()->walk([&](memref::ExpandShapeOp op) {
      if (splitsIntoDynamicSizes(op))
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (memref::ExpandShapeOp op : ops) {
      rewriter.setInsertionPoint(op);
      Location loc = op.getLoc();
      MemRefType type = op.getResultType();
      auto metadata =
          memref::ExtractStridedMetadataOp::create(rewriter, loc, op.getSrc());
      SmallVector<OpFoldResult> sizes = op.getMixedOutputShape();
      SmallVector<OpFoldResult> sourceStrides =
          metadata.getConstifiedMixedStrides();
      SmallVector<OpFoldResult> strides(type.getRank());
      for (auto [source, group] :
           llvm::enumerate(op.getReassociationIndices())) {
        OpFoldResult stride = sourceStrides[source];
        for (int64_t dim : llvm::reverse(group)) {
          strides[dim] = stride;
          stride = multiply(rewriter, loc, stride, sizes[dim]);
        }
      }
      OpFoldResult offset = metadata.getConstifiedMixedOffset();
      SmallVector<int64_t> staticSizes, staticStrides;
      SmallVector<Value> dynamicSizes, dynamicStrides, dynamicOffset;
      SmallVector<int64_t> staticOffset;
      dispatchIndexOpFoldResults(sizes, dynamicSizes, staticSizes);
      dispatchIndexOpFoldResults(strides, dynamicStrides, staticStrides);
      dispatchIndexOpFoldResults(offset, dynamicOffset, staticOffset);
      auto layout = StridedLayoutAttr::get(&getContext(), staticOffset.front(),
                                           staticStrides);
      auto viewType = MemRefType::get(staticSizes, type.getElementType(),
                                      layout, type.getMemorySpace());
      Value view = memref::ReinterpretCastOp::create(rewriter, loc, viewType,
                                                     metadata.getBaseBuffer(),
                                                     offset, sizes, strides);
      if (viewType != type)
        view = memref::CastOp::create(rewriter, loc, type, view);
      rewriter.replaceOp(op, view);
    }
  }
};

} // namespace
