//===- ApproximateMath.cpp - vectorizable f32 transcendental functions ----===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_APPROXIMATEMATHPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// f32 exp(x) = 2^n * e^r with n = round(x / ln 2) and r = x - n ln 2 in
/// [-ln 2 / 2, ln 2 / 2]: e^r by a degree-7 polynomial (Cephes' expf
/// coefficients, < 2^-22.5 relative error), 2^n applied by llvm.intr.ldexp.
/// On AVX-512 ldexp is one vscalefps, which also gets overflow to inf and
/// gradual underflow to denormals and 0 right, so n needs no clamping and no
/// exponent-field arithmetic (upstream's expansion spends ~7 more
/// instructions per element on those and flushes results below 2^-126 to 0).
/// Elsewhere LLVM lowers vector ldexp to libm calls: only for targets with
/// a vector ldexp (the pass option).
struct ExpWithLdexp : OpRewritePattern<math::ExpOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::ExpOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    // Scalar f32 only: the LLVM dialect's ldexp op takes no vectors, and
    // llvm.call_intrinsic has unknown side effects, which bufferization
    // rejects. Scalar loops are what LLVM vectorizes; the vector exps of
    // contraction epilogues (vectorized by tile-contractions) keep
    // upstream's expansion.
    if (!type.isF32())
      return rewriter.notifyMatchFailure(op, "not a scalar f32");
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    auto f32 = [&](float v) -> Value {
      return arith::ConstantOp::create(b, b.getF32FloatAttr(v));
    };
    auto fma = [&](Value x, Value y, Value z) -> Value {
      return math::FmaOp::create(b, x, y, z);
    };

    // Inputs beyond [-104, 89] give exactly 0 or inf, as at the bounds:
    // clamping keeps n small and r in range. minimumf and maximumf carry a
    // NaN through (and are one vminps/vmaxps each against a constant).
    Value x = op.getOperand();
    x = arith::MinimumFOp::create(b, x, f32(89.0f));
    x = arith::MaximumFOp::create(b, x, f32(-104.0f));

    // n = round-to-nearest-even(x / ln 2): adding 1.5 * 2^23 leaves n in
    // the low mantissa bits (|n| <= 151 < 2^22); fma rounds only once.
    const float shifter = 12582912.0f; // 0x1.8p23
    Value shifted = fma(x, f32(1.44269504088896341f), f32(shifter));
    Value nf = arith::SubFOp::create(b, shifted, f32(shifter));
    Value n = arith::SubIOp::create(
        b, arith::BitcastOp::create(b, b.getI32Type(), shifted),
        arith::ConstantOp::create(
            b, b.getI32IntegerAttr(llvm::bit_cast<int32_t>(shifter))));

    // r = x - n ln 2, with ln 2 split in two (Cody and Waite) so that the
    // first product is exact.
    Value r = fma(nf, f32(-0.693359375f), x);
    r = fma(nf, f32(2.12194440e-4f), r);

    // e^r = 1 + r + r^2 (P5 + r (P4 + ... + r P0)).
    Value p = fma(r, f32(1.9875691500e-4f), f32(1.3981999507e-3f));
    p = fma(p, r, f32(8.3334519073e-3f));
    p = fma(p, r, f32(4.1665795894e-2f));
    p = fma(p, r, f32(1.6666665459e-1f));
    p = fma(p, r, f32(5.0000001201e-1f));
    p = fma(p, arith::MulFOp::create(b, r, r), r);
    p = arith::AddFOp::create(b, p, f32(1.0f));

    // A NaN input gives NaN p (n is then some integer: bitcast is defined).
    rewriter.replaceOpWithNewOp<LLVM::LoadExpOp>(op, type, p, n);
    return success();
  }
};

struct ApproximateMathPass
    : lazymlir::impl::ApproximateMathPassBase<ApproximateMathPass> {
  using Base::Base;

  void runOnOperation() override {
    llvm::SmallVector<std::string> selected(ops.begin(), ops.end());
    if (selected.empty())
      selected = {"math.exp",  "math.expm1", "math.log", "math.log1p",
                  "math.log2", "math.tanh",  "math.erf"};
    auto predicate = [&](StringRef name) {
      return llvm::is_contained(selected, name.str());
    };
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns, predicate);
    // Preferred over upstream's exp where it applies (expm1's expansion
    // creates a math.exp, which this then expands too).
    if (useLdexp && predicate("math.exp"))
      patterns.add<ExpWithLdexp>(&getContext(), /*benefit=*/2);
    (void)applyPatternsGreedily(getOperation(), std::move(patterns));
  }
};

} // namespace
