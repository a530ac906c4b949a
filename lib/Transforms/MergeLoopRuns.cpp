//===- MergeLoopRuns.cpp - one loop per contiguous run --------------------===//
//
// Builds on upstream linalg::collapseOpIterationDims; what is ours is which
// ops and runs (IterationRuns.h, shared with lazymlir-tile-contractions).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "IterationRuns.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace lazymlir {
#define GEN_PASS_DEF_MERGELOOPRUNSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct MergeLoopRunsPass
    : lazymlir::impl::MergeLoopRunsPassBase<MergeLoopRunsPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<linalg::GenericOp> ops;
    for (Block &block : func.getBody())
      for (auto op : block.getOps<linalg::GenericOp>())
        if (op.hasPureTensorSemantics() && !op.hasDynamicShape() &&
            !linalg::isaContractionOpInterface(op) &&
            op.getBody()->getOps<linalg::IndexOp>().empty())
          ops.push_back(op);
    IRRewriter rewriter(&getContext());
    for (linalg::GenericOp op : ops) {
      SmallVector<AffineMap> maps = op.getIndexingMapsArray();
      SmallVector<ReassociationIndices> runs =
          lazymlir::mergeableIterationRuns(maps, op.getIteratorTypesArray(),
                                           /*parallelRuns=*/true);
      // Upstream's own condition, which collapseOpIterationDims asserts.
      if (runs.empty() || !linalg::areDimSequencesPreserved(maps, runs))
        continue;
      rewriter.setInsertionPoint(op);
      FailureOr<linalg::CollapseResult> collapsed =
          linalg::collapseOpIterationDims(op, runs, rewriter);
      if (succeeded(collapsed))
        rewriter.replaceOp(op, collapsed->results);
    }
  }
};

} // namespace
