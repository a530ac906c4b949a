//===- GpuSplitReductions.cpp - long reductions as parallel partials ------===//
//
// Built on upstream linalg::splitReduction; which reductions and the ratio
// are ours (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace lazymlir {
#define GEN_PASS_DEF_GPUSPLITREDUCTIONSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct GpuSplitReductionsPass
    : lazymlir::impl::GpuSplitReductionsPassBase<GpuSplitReductionsPass> {
  using Base::Base;

  /// The number of partial reductions for `op`, or 0 to leave it.
  int64_t partials(linalg::GenericOp op) {
    if (!op.hasPureTensorSemantics() || op.hasDynamicShape() ||
        op.getNumReductionLoops() != 1 || op.getNumDpsInits() != 1)
      return 0;
    SmallVector<int64_t> bounds = op.getStaticLoopRanges();
    SmallVector<unsigned> reductions;
    op.getReductionDims(reductions);
    int64_t length = bounds[reductions.front()];
    int64_t outputs = 1;
    for (auto [i, bound] : llvm::enumerate(bounds))
      if (i != reductions.front())
        outputs *= bound;
    if (length < minLength || outputs >= maxOutputs)
      return 0;
    for (int64_t r = std::min(ratio.getValue(), length / 16); r > 1; --r)
      if (length % r == 0)
        return r;
    return 0;
  }

  /// Puts `op`'s parallel loops before its reductions (each group in its
  /// order): lazymlir-lower-to-loops{all-parallel} maps leading parallel
  /// loops to threads, and a reduction loop in front of them left the whole
  /// nest to gpu-wrap-host-work, one thread for all of it (a conv bias's
  /// gradient, reduced over batch and pixels around the channels: 28 ms of
  /// an MNIST step on an H100). Each output's sum keeps its order.
  static void parallelLoopsFirst(RewriterBase &rewriter, linalg::GenericOp op) {
    SmallVector<unsigned> order;
    SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
    for (auto [i, kind] : llvm::enumerate(iterators))
      if (kind == utils::IteratorType::parallel)
        order.push_back(i);
    for (auto [i, kind] : llvm::enumerate(iterators))
      if (kind != utils::IteratorType::parallel)
        order.push_back(i);
    if (llvm::is_sorted(order))
      return;
    rewriter.setInsertionPoint(op);
    (void)linalg::interchangeGenericOp(rewriter, op, order);
  }

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<linalg::GenericOp> mixed;
    getOperation().walk([&](linalg::GenericOp op) {
      if (op.hasPureTensorSemantics() && op.getNumReductionLoops() > 0 &&
          op.getNumParallelLoops() > 0)
        mixed.push_back(op);
    });
    for (linalg::GenericOp op : mixed)
      parallelLoopsFirst(rewriter, op);

    SmallVector<std::pair<linalg::GenericOp, int64_t>> splits;
    getOperation().walk([&](linalg::GenericOp op) {
      if (int64_t r = partials(op))
        splits.push_back({op, r});
    });
    for (auto [op, r] : splits) {
      int64_t split = r;
      rewriter.setInsertionPoint(op);
      // The partials' dimension goes last among the outputs: innermost, so
      // thread x walks it.
      unsigned rank = cast<ShapedType>(op.getDpsInits()[0].getType()).getRank();
      FailureOr<linalg::SplitReductionResult> result = linalg::splitReduction(
          rewriter, cast<linalg::LinalgOp>(op.getOperation()),
          [&](linalg::LinalgOp) {
            linalg::SplitReductionOptions options;
            options.ratio = split;
            options.index = rank;
            options.innerParallel = true;
            return options;
          });
      if (failed(result))
        continue;
      // Parallel loops first: each partial is a thread that loops over its
      // elements (lazymlir-lower-to-loops parallelizes leading loops).
      auto partial =
          dyn_cast<linalg::GenericOp>(result->splitLinalgOp.getOperation());
      if (partial)
        parallelLoopsFirst(rewriter, partial);
    }
  }
};

} // namespace
