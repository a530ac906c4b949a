//===- ChannelsLast.cpp - NCHW convolutions and pooling to NHWC -----------===//
//
// Model: IREE's ConvertConvToChannelsLast. Unlike it, we do not propagate
// transposes with patterns of our own: our elementwise fusion composes
// them away (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_CHANNELSLASTPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

// linalg.transpose: result dim i is source dim perm[i].
constexpr int64_t kNchwToNhwc[] = {0, 2, 3, 1};
constexpr int64_t kNhwcToNchw[] = {0, 3, 1, 2};
constexpr int64_t kFchwToHwcf[] = {2, 3, 1, 0};
constexpr int64_t kChwToHwc[] = {1, 2, 0};

Value transpose(OpBuilder &b, Location loc, Value value,
                ArrayRef<int64_t> perm) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, value);
  applyPermutationToVector(sizes, perm);
  Value empty = tensor::EmptyOp::create(b, loc, sizes, type.getElementType());
  return linalg::TransposeOp::create(b, loc, value, empty, perm)->getResult(0);
}

/// Rewrites `op` (operands: input, filter or window; one init) as `NhwcOp`
/// on transposed operands, transposing the result back.
template <typename NchwOp, typename NhwcOp>
struct ToChannelsLast : public OpRewritePattern<NchwOp> {
  ToChannelsLast(MLIRContext *ctx, ArrayRef<int64_t> secondOperandPerm)
      : OpRewritePattern<NchwOp>(ctx), secondOperandPerm(secondOperandPerm) {}

  LogicalResult matchAndRewrite(NchwOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.hasPureTensorSemantics())
      return rewriter.notifyMatchFailure(op, "needs tensor semantics");
    Location loc = op.getLoc();
    Value input = transpose(rewriter, loc, op.getInputs()[0], kNchwToNhwc);
    Value second = op.getInputs()[1];
    if (!secondOperandPerm.empty())
      second = transpose(rewriter, loc, second, secondOperandPerm);
    Value init = transpose(rewriter, loc, op.getOutputs()[0], kNchwToNhwc);
    auto nhwc =
        NhwcOp::create(rewriter, loc, init.getType(), ValueRange{input, second},
                       ValueRange{init}, op.getStrides(), op.getDilations());
    rewriter.replaceOp(
        op, transpose(rewriter, loc, nhwc->getResult(0), kNhwcToNchw));
    return success();
  }

  /// Empty for pooling: its window operand has no layout.
  SmallVector<int64_t> secondOperandPerm;
};

/// transpose(pad(x)) -> pad(transpose(x)), for a constant pad used once.
struct SwapPadAndTranspose : public OpRewritePattern<linalg::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto pad = op.getInput().getDefiningOp<tensor::PadOp>();
    if (!pad || !pad->hasOneUse() || !op.hasPureTensorSemantics())
      return failure();
    Value padValue = pad.getConstantPaddingValue();
    if (!padValue || pad.getNofold())
      return failure();
    ArrayRef<int64_t> perm = op.getPermutation();
    SmallVector<OpFoldResult> low = pad.getMixedLowPad();
    SmallVector<OpFoldResult> high = pad.getMixedHighPad();
    applyPermutationToVector(low, perm);
    applyPermutationToVector(high, perm);
    Location loc = op.getLoc();
    Value source = transpose(rewriter, loc, pad.getSource(), perm);
    auto newPad =
        tensor::PadOp::create(rewriter, loc, op.getResult()[0].getType(),
                              source, low, high, padValue, /*nofold=*/false);
    rewriter.replaceOp(op, newPad.getResult());
    return success();
  }
};

struct ChannelsLastPass
    : lazymlir::impl::ChannelsLastPassBase<ChannelsLastPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    RewritePatternSet patterns(ctx);
    patterns.add<
        ToChannelsLast<linalg::Conv2DNchwFchwOp, linalg::Conv2DNhwcHwcfOp>>(
        ctx, kFchwToHwcf);
    patterns.add<ToChannelsLast<linalg::DepthwiseConv2DNchwChwOp,
                                linalg::DepthwiseConv2DNhwcHwcOp>>(ctx,
                                                                   kChwToHwc);
    patterns.add<
        ToChannelsLast<linalg::PoolingNchwMaxOp, linalg::PoolingNhwcMaxOp>>(
        ctx, ArrayRef<int64_t>{});
    patterns.add<
        ToChannelsLast<linalg::PoolingNchwSumOp, linalg::PoolingNhwcSumOp>>(
        ctx, ArrayRef<int64_t>{});
    patterns.add<SwapPadAndTranspose>(ctx);
    (void)applyPatternsGreedily(getOperation(), std::move(patterns));
  }
};

} // namespace
