//===- ExpandBf16Conversions.cpp - bf16 conversions as integer arithmetic -===//
//
// lazymlir-expand-bf16-conversions: arith.truncf to bf16 and arith.extf from
// bf16 (scalars and vectors) rewritten into bitcasts, shifts and integer adds
// that LLVM's loop vectorizer widens. Left to LLVM, a truncation to bf16 on
// a host without a bf16 conversion instruction (x86 without AVX512-BF16) is
// a call per element (__truncsfbf2): every elementwise loop under bf16
// autocast ran scalar, one call per rounding.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_EXPANDBF16CONVERSIONSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// `elementType` in the shape of `like` (a scalar, or a vector's shape);
/// null for any other shaped type (a tensor: not this pass's business).
Type shapedLike(Type like, Type elementType) {
  if (auto vector = dyn_cast<VectorType>(like))
    return vector.clone(elementType);
  if (isa<ShapedType>(like))
    return nullptr;
  return elementType;
}

/// An integer constant of `type` (a scalar or a splat vector).
Value integerConstant(OpBuilder &builder, Location loc, Type type,
                      uint64_t value) {
  auto element = cast<IntegerType>(getElementTypeOrSelf(type));
  APInt bits(element.getWidth(), value);
  if (auto vector = dyn_cast<VectorType>(type))
    return arith::ConstantOp::create(builder, loc,
                                     DenseElementsAttr::get(vector, bits));
  return arith::ConstantOp::create(builder, loc,
                                   builder.getIntegerAttr(element, bits));
}

/// f32 (or f64, through f32 as c10 converts) -> bf16, rounded to nearest
/// even as eager's vectorized CPU conversion does: the rounding bias
/// 0x7FFF + the kept part's lowest bit, added to the bits (a carry into the
/// exponent rounds up to the next binade or to infinity), the high half
/// kept; every NaN -> 0xFFFF (KernelJit.cpp's scalar fallback gives the
/// same).
struct ExpandTruncF : OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(arith::TruncFOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isBF16() || op.getRoundingmodeAttr())
      return failure();
    Value in = op.getIn();
    Type inElement = getElementTypeOrSelf(in.getType());
    Type f32 = shapedLike(type, rewriter.getF32Type());
    if (!f32 || !(inElement.isF32() || inElement.isF64()))
      return failure();
    Location loc = op.getLoc();
    if (inElement.isF64())
      in = arith::TruncFOp::create(rewriter, loc, f32, in);
    Type i32 = shapedLike(type, rewriter.getI32Type());
    Type i16 = shapedLike(type, rewriter.getI16Type());
    auto constant = [&](Type t, uint64_t value) {
      return integerConstant(rewriter, loc, t, value);
    };
    Value bits = arith::BitcastOp::create(rewriter, loc, i32, in);
    Value sixteen = constant(i32, 16);
    Value lowestKept = arith::AndIOp::create(
        rewriter, loc, arith::ShRUIOp::create(rewriter, loc, bits, sixteen),
        constant(i32, 1));
    Value biased = arith::AddIOp::create(
        rewriter, loc,
        arith::AddIOp::create(rewriter, loc, bits, constant(i32, 0x7fff)),
        lowestKept);
    Value rounded = arith::TruncIOp::create(
        rewriter, loc, i16,
        arith::ShRUIOp::create(rewriter, loc, biased, sixteen));
    Value magnitude =
        arith::AndIOp::create(rewriter, loc, bits, constant(i32, 0x7fffffff));
    Value isNan =
        arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::ugt,
                              magnitude, constant(i32, 0x7f800000));
    Value result = arith::SelectOp::create(rewriter, loc, isNan,
                                           constant(i16, 0xffff), rounded);
    rewriter.replaceOpWithNewOp<arith::BitcastOp>(op, type, result);
    return success();
  }
};

/// bf16 -> f32 (or f64, through f32): the bits moved to the high half.
struct ExpandExtF : OpRewritePattern<arith::ExtFOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(arith::ExtFOp op,
                                PatternRewriter &rewriter) const override {
    Value in = op.getIn();
    Type type = op.getType();
    Type outElement = getElementTypeOrSelf(type);
    if (!getElementTypeOrSelf(in.getType()).isBF16() ||
        !(outElement.isF32() || outElement.isF64()))
      return failure();
    Type f32 = shapedLike(type, rewriter.getF32Type());
    if (!f32)
      return failure();
    Location loc = op.getLoc();
    Type i32 = shapedLike(type, rewriter.getI32Type());
    Type i16 = shapedLike(type, rewriter.getI16Type());
    Value bits = arith::ExtUIOp::create(
        rewriter, loc, i32, arith::BitcastOp::create(rewriter, loc, i16, in));
    Value shifted = arith::ShLIOp::create(
        rewriter, loc, bits, integerConstant(rewriter, loc, i32, 16));
    Value value = arith::BitcastOp::create(rewriter, loc, f32, shifted);
    if (outElement.isF64())
      value = arith::ExtFOp::create(rewriter, loc, type, value);
    rewriter.replaceOp(op, value);
    return success();
  }
};

struct ExpandBf16ConversionsPass
    : lazymlir::impl::ExpandBf16ConversionsPassBase<ExpandBf16ConversionsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<ExpandTruncF, ExpandExtF>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
