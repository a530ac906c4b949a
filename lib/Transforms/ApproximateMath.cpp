//===- ApproximateMath.cpp - vectorizable f32 transcendental functions ----===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_APPROXIMATEMATHPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

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
    (void)applyPatternsGreedily(getOperation(), std::move(patterns));
  }
};

} // namespace
