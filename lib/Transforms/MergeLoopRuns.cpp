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

/// A reduction whose inputs all read their dimensions in one order other
/// than the loops' (a bias gradient whose loops are in NCHW order reading
/// NHWC data: batch, channels, pixels over (batch, pixels, channels)): its
/// loops are put in the inputs' order, so that the loops adjacent in memory
/// are adjacent in the nest (and merge), and the innermost loop reads
/// contiguously.
linalg::GenericOp inInputOrder(RewriterBase &rewriter, linalg::GenericOp op) {
  if (op.getNumReductionLoops() == 0 || op.getNumDpsInputs() == 0)
    return op;
  AffineMap first = op.getMatchingIndexingMap(op.getDpsInputOperand(0));
  if (!first.isPermutation() || first.isIdentity())
    return op;
  for (OpOperand *input : op.getDpsInputOperands())
    if (op.getMatchingIndexingMap(input) != first)
      return op;
  SmallVector<unsigned> order;
  for (AffineExpr result : first.getResults())
    order.push_back(cast<AffineDimExpr>(result).getPosition());
  rewriter.setInsertionPoint(op);
  FailureOr<linalg::GenericOp> reordered =
      linalg::interchangeGenericOp(rewriter, op, order);
  return succeeded(reordered) ? *reordered : op;
}

struct MergeLoopRunsPass
    : lazymlir::impl::MergeLoopRunsPassBase<MergeLoopRunsPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<linalg::GenericOp> ops;
    for (Block &block : func.getBody())
      for (auto op : block.getOps<linalg::GenericOp>())
        if (op.hasPureTensorSemantics() &&
            !linalg::isaContractionOpInterface(op) &&
            op.getBody()->getOps<linalg::IndexOp>().empty())
          ops.push_back(op);
    IRRewriter rewriter(&getContext());
    for (linalg::GenericOp op : ops) {
      op = inInputOrder(rewriter, op);
      SmallVector<AffineMap> maps = op.getIndexingMapsArray();
      SmallVector<ReassociationIndices> runs =
          lazymlir::mergeableIterationRuns(maps, op.getIteratorTypesArray(),
                                           /*parallelRuns=*/true);
      lazymlir::dropRunsOfDynamicLoops(runs, op.getStaticLoopRanges());
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
