//===- ApproximateMath.cpp - vectorizable f32 transcendental functions ----===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace lazymlir {
#define GEN_PASS_DEF_APPROXIMATEMATHPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// A constant of `type` (f32/f64, or a vector of them: splat).
Value floatConstant(OpBuilder &b, Location loc, Type type, double value) {
  auto vector = dyn_cast<VectorType>(type);
  auto element = cast<FloatType>(vector ? vector.getElementType() : type);
  auto attr = b.getFloatAttr(element, value);
  if (vector)
    return arith::ConstantOp::create(b, loc,
                                     DenseElementsAttr::get(vector, attr));
  return arith::ConstantOp::create(b, loc, attr);
}

Type elementTypeOf(Type type) {
  if (auto vector = dyn_cast<VectorType>(type))
    return vector.getElementType();
  return type;
}

/// f32 exp(x) = 2^n * e^r with n = round(x / ln 2) and r = x - n ln 2 in
/// [-ln 2 / 2, ln 2 / 2]: e^r by a degree-7 polynomial (Cephes' expf
/// coefficients, < 2^-22.5 relative error), then scaled by 2^n.
/// With `useLdexp`, scalar exps apply 2^n by llvm.intr.ldexp: on AVX-512 one
/// vscalefps, which gets overflow to inf and gradual underflow to denormals
/// and 0 right (upstream's expansion spends ~7 more instructions per element
/// and flushes results below 2^-126 to 0: exp(-100) gave 0, eager 3.7e-44).
/// Vectors (the LLVM dialect's ldexp takes no vectors, and
/// llvm.call_intrinsic has unknown side effects, which bufferization
/// rejects: the vectorized epilogues of contractions) and targets without a
/// vector ldexp multiply by 2^(n/2) and 2^(n - n/2) instead, each a normal
/// float built in the exponent field: the first product is exact and the
/// second rounds once, so denormal results come out right too.
struct ExpF32 : OpRewritePattern<math::ExpOp> {
  ExpF32(MLIRContext *context, bool useLdexp)
      : OpRewritePattern(context, /*benefit=*/2), useLdexp(useLdexp) {}

  bool useLdexp;

  LogicalResult matchAndRewrite(math::ExpOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    auto vector = dyn_cast<VectorType>(type);
    if (!elementTypeOf(type).isF32())
      return rewriter.notifyMatchFailure(op, "not f32");
    Location loc = op.getLoc();
    ImplicitLocOpBuilder b(loc, rewriter);
    Type i32 = vector ? Type(vector.clone(b.getI32Type())) : b.getI32Type();
    auto f32 = [&](float v) -> Value { return floatConstant(b, loc, type, v); };
    auto int32 = [&](int32_t v) -> Value {
      auto attr = b.getI32IntegerAttr(v);
      if (vector)
        return arith::ConstantOp::create(
            b, DenseElementsAttr::get(cast<ShapedType>(i32), attr));
      return arith::ConstantOp::create(b, attr);
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
    Value n =
        arith::SubIOp::create(b, arith::BitcastOp::create(b, i32, shifted),
                              int32(llvm::bit_cast<int32_t>(shifter)));

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

    // A NaN input gives NaN p (n is then some integer: bitcast is defined,
    // and NaN times any factor is NaN).
    if (useLdexp && !vector) {
      rewriter.replaceOpWithNewOp<LLVM::LoadExpOp>(op, type, p, n);
      return success();
    }
    // n in [-150, 128]: both halves in [-75, 64].
    Value n1 = arith::ShRSIOp::create(b, n, int32(1));
    Value n2 = arith::SubIOp::create(b, n, n1);
    auto pow2 = [&](Value k) -> Value {
      Value bits = arith::ShLIOp::create(
          b, arith::AddIOp::create(b, k, int32(127)), int32(23));
      return arith::BitcastOp::create(b, type, bits);
    };
    Value scaled = arith::MulFOp::create(b, p, pow2(n1));
    rewriter.replaceOpWithNewOp<arith::MulFOp>(op, scaled, pow2(n2));
    return success();
  }
};

Value compare(OpBuilder &b, Location loc, arith::CmpFPredicate predicate,
              Value x, Value y) {
  return arith::CmpFOp::create(b, loc, predicate, x, y);
}

/// Upstream's f32 log and log2 take the exponent from the bit pattern, so a
/// denormal input x < 2^-126 reads as 2^-126 (log(1e-40) gave -87.3, not
/// -92.1). Such inputs are scaled by 2^24 first and the result corrected:
/// log(x) = log(x * 2^24) - 24 ln 2. Zero, negative, NaN and inf inputs give
/// the same results scaled or not.
void scaleDenormalLogInput(Operation *op, double log2Scale) {
  OpBuilder b(op);
  Location loc = op->getLoc();
  Value x = op->getOperand(0);
  Type type = x.getType();
  Value denormal = compare(b, loc, arith::CmpFPredicate::OLT, x,
                           floatConstant(b, loc, type, 0x1p-126));
  Value scaled =
      arith::MulFOp::create(b, loc, x, floatConstant(b, loc, type, 0x1p24));
  op->setOperand(0, arith::SelectOp::create(b, loc, denormal, scaled, x));
  b.setInsertionPointAfter(op);
  Value y = op->getResult(0);
  Value corrected = arith::SubFOp::create(
      b, loc, y, floatConstant(b, loc, type, 24.0 * log2Scale));
  Value result = arith::SelectOp::create(b, loc, denormal, corrected, y);
  SmallPtrSet<Operation *, 2> exceptions = {corrected.getDefiningOp(),
                                            result.getDefiningOp()};
  y.replaceAllUsesExcept(result, exceptions);
}

/// f32 erf(x) = copysign(r(a), x), a = |x|:
///   a < 1:  a * P(a^2), P of degree 6 (erf(a) / a in a^2);
///   else:   1 - exp(-c^2) * R(1 / c), c = a clamped to [1, 4], R of degree
///           8 (erfc(c) e^(c^2), smooth in 1 / c; past 4, erf rounds to 1).
/// Both are least-squares fits on Chebyshev nodes, with the coefficients
/// rounded to f32. Measured against math.erf on 3M points of [0, 6] (f32
/// arithmetic, FMAs in the Horner steps): at most 2.4 ulp, 0.24 on average.
/// NaN propagates (the clamp is NaN-propagating), +-inf give +-1, and -0.0
/// stays -0.0.
/// The cost per element is one division, two short polynomials and an exp
/// (expanded by ExpF32). Upstream's f32 erf is a rational function over
/// three intervals: a division and 15 selects between coefficient sets per
/// element, which made GELU's forward kernel ~1.5x eager's time.
struct ErfF32 : OpRewritePattern<math::ErfOp> {
  ErfF32(MLIRContext *context) : OpRewritePattern(context, /*benefit=*/2) {}

  LogicalResult matchAndRewrite(math::ErfOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!elementTypeOf(type).isF32())
      return failure();
    static constexpr double kSmall[] = {
        7.882500358391553e-05, -0.0008018859080038965, 0.005189312621951103,
        -0.02685432881116867,  0.11283597350120544,    -0.3761262595653534,
        1.1283791065216064};
    static constexpr double kLarge[] = {
        -0.00886930339038372, 0.02565707080066204, 0.02991912141442299,
        -0.24921603500843048, 0.5022039413452148,  -0.47395461797714233,
        0.042608775198459625, 0.5589596629142761,  0.0002749496197793633};
    Location loc = op.getLoc();
    auto constant = [&](double value) {
      return floatConstant(rewriter, loc, type, value);
    };
    auto horner = [&](ArrayRef<double> coefficients, Value v) {
      Value r = constant(coefficients.front());
      for (double c : coefficients.drop_front())
        r = math::FmaOp::create(rewriter, loc, r, v, constant(c));
      return r;
    };
    Value x = op.getOperand();
    Value one = constant(1.0);
    Value a = math::AbsFOp::create(rewriter, loc, x);
    Value small = arith::MulFOp::create(
        rewriter, loc, a,
        horner(kSmall, arith::MulFOp::create(rewriter, loc, a, a)));
    Value c = arith::MinimumFOp::create(
        rewriter, loc, arith::MaximumFOp::create(rewriter, loc, a, one),
        constant(4.0));
    Value decay = math::ExpOp::create(
        rewriter, loc,
        arith::NegFOp::create(rewriter, loc,
                              arith::MulFOp::create(rewriter, loc, c, c)));
    Value tail = arith::MulFOp::create(
        rewriter, loc, decay,
        horner(kLarge, arith::DivFOp::create(rewriter, loc, one, c)));
    Value large = arith::SubFOp::create(rewriter, loc, one, tail);
    Value r = arith::SelectOp::create(
        rewriter, loc,
        compare(rewriter, loc, arith::CmpFPredicate::OLT, a, one), small,
        large);
    rewriter.replaceOpWithNewOp<math::CopySignOp>(op, r, x);
    return success();
  }
};

/// log1p and expm1 that no approximation expands: MathToLLVM lowers them as
/// log(1 + x) and exp(x) - 1, which give 0 for |x| below the epsilon (-0.0,
/// denormals, 1e-40: eager returns x) and lose all digits near 0. Instead,
/// with log and exp that are accurate (libm, for f64):
///   log1p(x) = u == 1 ? x : log(u) * (x / (u - 1)),  u = 1 + x
///   expm1(x) = u == 1 ? x : (u - 1) * (x / log(u)),  u = exp(x)
/// (Goldberg's and Kahan's forms: the rounding of u cancels), with
/// log1p(+inf) = +inf, expm1(+inf) = +inf and expm1(x) = -1 where exp(x)
/// underflows to 0. NaN propagates through every branch.
void expandLog1p(math::Log1pOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value x = op.getOperand();
  Type type = x.getType();
  Value one = floatConstant(b, loc, type, 1.0);
  Value u = arith::AddFOp::create(b, loc, one, x);
  Value d = arith::SubFOp::create(b, loc, u, one);
  Value log = math::LogOp::create(b, loc, u);
  Value r =
      arith::MulFOp::create(b, loc, log, arith::DivFOp::create(b, loc, x, d));
  r = arith::SelectOp::create(b, loc,
                              compare(b, loc, arith::CmpFPredicate::OEQ, d,
                                      floatConstant(b, loc, type, 0.0)),
                              x, r);
  Value inf = floatConstant(b, loc, type, INFINITY);
  r = arith::SelectOp::create(
      b, loc, compare(b, loc, arith::CmpFPredicate::OEQ, u, inf), u, r);
  op.replaceAllUsesWith(r);
  op.erase();
}

void expandExpm1(math::ExpM1Op op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value x = op.getOperand();
  Type type = x.getType();
  Value one = floatConstant(b, loc, type, 1.0);
  Value minusOne = floatConstant(b, loc, type, -1.0);
  Value u = math::ExpOp::create(b, loc, x);
  Value um1 = arith::SubFOp::create(b, loc, u, one);
  Value log = math::LogOp::create(b, loc, u);
  Value r =
      arith::MulFOp::create(b, loc, um1, arith::DivFOp::create(b, loc, x, log));
  r = arith::SelectOp::create(
      b, loc, compare(b, loc, arith::CmpFPredicate::OEQ, u, one), x, r);
  r = arith::SelectOp::create(
      b, loc, compare(b, loc, arith::CmpFPredicate::OEQ, um1, minusOne),
      minusOne, r);
  Value inf = floatConstant(b, loc, type, INFINITY);
  r = arith::SelectOp::create(
      b, loc, compare(b, loc, arith::CmpFPredicate::OEQ, u, inf), u, r);
  op.replaceAllUsesWith(r);
  op.erase();
}

/// x ** n with a constant n in [0, 64] (torch-mlir's pow with an int
/// exponent) as multiplications, by binary exponentiation as compiler-rt's
/// __powisf2 (x ** 0 is 1, NaN included, as in eager). math.fpowi otherwise
/// becomes llvm.intr.powi, a call per element, and vectorized (a fused
/// kernel), a powi with a vector exponent, which the LLVM dialect rejects.
/// Negative exponents keep powi: 1 / x ** n rounds twice, and eager's
/// special values (-0.0 ** -1 = -inf) come from powi.
struct FPowIConstant : OpRewritePattern<math::FPowIOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::FPowIOp op,
                                PatternRewriter &rewriter) const override {
    APInt exponent;
    if (!matchPattern(op.getRhs(), m_ConstantInt(&exponent)) ||
        exponent.isNegative() || exponent.sgt(64))
      return failure();
    uint64_t n = exponent.getZExtValue();
    Location loc = op.getLoc();
    Value base = op.getLhs(), result;
    if (n == 0)
      result = floatConstant(rewriter, loc, base.getType(), 1.0);
    for (; n; n >>= 1) {
      if (n & 1)
        result =
            result ? arith::MulFOp::create(rewriter, loc, result, base) : base;
      if (n > 1)
        base = arith::MulFOp::create(rewriter, loc, base, base);
    }
    rewriter.replaceOp(op, result);
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
    // Special values the approximations (or the default lowering) get
    // wrong; fixed around the ops before they are expanded.
    llvm::SmallVector<Operation *> special;
    getOperation().walk([&](Operation *op) {
      if (isa<math::LogOp, math::Log2Op, math::Log1pOp, math::ExpM1Op>(op))
        special.push_back(op);
    });
    for (Operation *op : special) {
      Type element = elementTypeOf(op->getResult(0).getType());
      bool approximated =
          element.isF32() && predicate(op->getName().getStringRef());
      if (auto log1p = dyn_cast<math::Log1pOp>(op)) {
        if (!approximated && isa<Float32Type, Float64Type>(element))
          expandLog1p(log1p);
      } else if (auto expm1 = dyn_cast<math::ExpM1Op>(op)) {
        if (!approximated && isa<Float32Type, Float64Type>(element))
          expandExpm1(expm1);
      } else if (!approximated) {
        continue;
      } else if (isa<math::LogOp>(op)) {
        scaleDenormalLogInput(op, M_LN2);
      } else if (isa<math::Log2Op>(op)) {
        scaleDenormalLogInput(op, 1.0);
      }
    }

    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns, predicate);
    // Preferred over upstream's exp where it applies (expm1's expansion
    // creates a math.exp, which this then expands too).
    if (predicate("math.exp"))
      patterns.add<ExpF32>(&getContext(), useLdexp);
    // Preferred over upstream's f32 erf. The exp it creates is expanded by
    // ExpF32 when exp is selected, else lowered as an unselected exp is.
    if (predicate("math.erf"))
      patterns.add<ErfF32>(&getContext());
    patterns.add<FPowIConstant>(&getContext());
    (void)applyPatternsGreedily(getOperation(), std::move(patterns));
  }
};

} // namespace
