//===- FuseElementwise.cpp - elementwise producer-consumer fusion ---------===//
//
// Builds on upstream linalg elementwise fusion and reshape propagation; what
// is ours is which named ops are opened up for it and the policy that decides
// when fusing would recompute work (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/RuntimeGemm.h"

#include "IterationRuns.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_FUSEELEMENTWISEPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// Contractions and convolutions keep their named form: they are not
/// elementwise, and a named op is what later tiling and library calls match.
/// Fills stay named too: they initialize accumulators (outs), which
/// elementwise fusion never fuses into.
bool shouldGeneralize(linalg::LinalgOp op) {
  if (isa<linalg::GenericOp, linalg::FillOp>(op.getOperation()))
    return false;
  return !linalg::isaContractionOpInterface(op) &&
         !linalg::isaConvolutionOpInterface(op) &&
         !isa<linalg::SoftmaxOp>(op.getOperation());
}

struct GeneralizeNonContractionOps
    : public OpInterfaceRewritePattern<linalg::LinalgOp> {
  using OpInterfaceRewritePattern::OpInterfaceRewritePattern;
  LogicalResult matchAndRewrite(linalg::LinalgOp op,
                                PatternRewriter &rewriter) const override {
    if (!shouldGeneralize(op))
      return failure();
    return linalg::generalizeNamedOp(rewriter, op);
  }
};

/// Whether `size` is the size of dimension `dim` of `value`: a tensor.dim
/// of it, or the size `value` was created with (tensor.empty, through the
/// destinations of the ops that wrote it).
bool isSizeOf(Value size, Value value, int64_t dim) {
  if (auto dimOp = size.getDefiningOp<tensor::DimOp>()) {
    std::optional<int64_t> index = dimOp.getConstantIndex();
    if (dimOp.getSource() == value && index && *index == dim)
      return true;
  }
  for (int depth = 0; depth < 8 && value; ++depth) {
    if (auto empty = value.getDefiningOp<tensor::EmptyOp>()) {
      auto type = cast<RankedTensorType>(empty.getType());
      return type.isDynamicDim(dim) && empty.getDynamicSize(dim) == size;
    }
    auto result = dyn_cast<OpResult>(value);
    auto dps = result ? dyn_cast<DestinationStyleOpInterface>(result.getOwner())
                      : nullptr;
    if (!dps)
      return false;
    value = dps.getTiedOpOperand(result)->get();
  }
  return false;
}

/// Whether `size` is the trip count of loop `loop` of `op`: the size of an
/// operand dimension indexed by that loop alone.
bool isLoopSize(linalg::GenericOp op, unsigned loop, Value size) {
  for (OpOperand &operand : op->getOpOperands()) {
    AffineMap map = op.getMatchingIndexingMap(&operand);
    for (auto [dim, expr] : llvm::enumerate(map.getResults()))
      if (auto d = dyn_cast<AffineDimExpr>(expr);
          d && d.getPosition() == loop && isSizeOf(size, operand.get(), dim))
        return true;
  }
  return false;
}

/// The loop `index` is linalg.index of, inside a linalg.generic, or none.
std::optional<unsigned> indexedLoop(Value index, linalg::GenericOp &op) {
  auto indexOp = index.getDefiningOp<linalg::IndexOp>();
  if (!indexOp)
    return std::nullopt;
  op = dyn_cast<linalg::GenericOp>(indexOp->getParentOp());
  if (!op)
    return std::nullopt;
  return indexOp.getDim();
}

/// torch-mlir guards each index into a tensor with a `?` dimension against
/// that dimension being 1 (broadcast): select(size == 1, 0, i), or
/// i mod size. When `size` is the loop's own trip count, i < size already
/// gives i (size 1 means i is 0): the guard folds to i, and the access reads
/// contiguously again (a transformer's attention scores were copied by a
/// gather at 2 ns an element).
struct FoldLoopIndexGuard : public OpRewritePattern<arith::SelectOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::SelectOp select,
                                PatternRewriter &rewriter) const override {
    linalg::GenericOp op;
    std::optional<unsigned> loop = indexedLoop(select.getFalseValue(), op);
    auto cmp = select.getCondition().getDefiningOp<arith::CmpIOp>();
    if (!loop || !cmp || cmp.getPredicate() != arith::CmpIPredicate::eq ||
        !matchPattern(select.getTrueValue(), m_Zero()))
      return failure();
    Value size = matchPattern(cmp.getRhs(), m_One())   ? cmp.getLhs()
                 : matchPattern(cmp.getLhs(), m_One()) ? cmp.getRhs()
                                                       : Value();
    if (!size || !isLoopSize(op, *loop, size))
      return failure();
    rewriter.replaceOp(select, select.getFalseValue());
    return success();
  }
};

template <typename RemOp>
struct FoldLoopIndexRemainder : public OpRewritePattern<RemOp> {
  using OpRewritePattern<RemOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(RemOp rem,
                                PatternRewriter &rewriter) const override {
    linalg::GenericOp op;
    std::optional<unsigned> loop = indexedLoop(rem.getLhs(), op);
    if (!loop || !isLoopSize(op, *loop, rem.getRhs()))
      return failure();
    rewriter.replaceOp(rem, rem.getLhs());
    return success();
  }
};

unsigned bodySize(linalg::GenericOp op) {
  // The terminator is free.
  return op.getBody()->getOperations().size() - 1;
}

/// How `consumer` reads the operand the bare-yield `producer` (a transpose)
/// moves into `operand`, once the producer is fused: the consumer's map of
/// it composed through the producer's; none if the producer computes or its
/// result map is no permutation.
std::optional<AffineMap> readInPlace(linalg::LinalgOp consumer,
                                     OpOperand *operand,
                                     linalg::GenericOp producer) {
  auto yield = cast<linalg::YieldOp>(producer.getBody()->getTerminator());
  auto result = cast<OpResult>(operand->get());
  auto source =
      dyn_cast<BlockArgument>(yield.getOperand(result.getResultNumber()));
  if (!source || source.getOwner() != producer.getBody())
    return std::nullopt;
  AffineMap resultMap = producer.getIndexingMapMatchingResult(result);
  if (!resultMap.isPermutation())
    return std::nullopt;
  return producer
      .getMatchingIndexingMap(&producer->getOpOperand(source.getArgNumber()))
      .compose(inversePermutation(resultMap))
      .compose(consumer.getMatchingIndexingMap(operand));
}

/// Whether the contraction `consumer`, reading `operand` through `read` (a
/// transpose fused in place), stays fast when tiled here:
/// - its innermost parallel loop (the one tiles vectorize) is still read
///   contiguously: a B operand read transposed (n, k) makes every vector
///   load a gather, slower than materializing the transpose once;
/// - an operand the vectors do not index (A) is still read with a
///   reduction loop innermost;
/// - every run of reduction loops that lazymlir-tile-contractions would
///   merge into one still can be: an attention output read through the
///   transpose that merges its heads (b, h, s, d) splits the reduction over
///   heads x head size into two loops, which vectorize to a two-dimensional
///   reduction (7 GFLOP/s, against 160 on the materialized transpose).
bool keepsContractionFast(linalg::LinalgOp consumer, OpOperand *operand,
                          AffineMap read) {
  SmallVector<AffineMap> maps = consumer.getIndexingMapsArray();
  SmallVector<utils::IteratorType> iterators = consumer.getIteratorTypesArray();
  SmallVector<ReassociationIndices> runs =
      lazymlir::mergeableIterationRuns(maps, iterators, /*parallelRuns=*/false);
  maps[operand->getOperandNumber()] = read;
  if (lazymlir::mergeableIterationRuns(maps, iterators,
                                       /*parallelRuns=*/false) != runs)
    return false;

  SmallVector<unsigned> parallel;
  consumer.getParallelDims(parallel);
  if (parallel.empty())
    return true;
  AffineExpr vectorLoop =
      getAffineDimExpr(parallel.back(), consumer->getContext());
  std::optional<unsigned> position = read.getResultPosition(vectorLoop);
  if (position)
    return *position + 1 == read.getNumResults();
  // An operand the vectors do not index (a matmul's A) is read by tiles of
  // rows x reduction steps; read with a parallel loop innermost (a weight
  // gradient's activations, (k, m)), every tile is transposed element by
  // element: 58 GFLOP/s on a 512x2048x4112 weight gradient, against 131
  // with the transpose materialized (24 inside ViT's training step).
  bool readsReduction = llvm::any_of(read.getResults(), [&](AffineExpr e) {
    auto dim = dyn_cast<AffineDimExpr>(e);
    return dim &&
           iterators[dim.getPosition()] == utils::IteratorType::reduction;
  });
  if (!readsReduction)
    return true;
  auto innermost = dyn_cast<AffineDimExpr>(read.getResults().back());
  return innermost &&
         iterators[innermost.getPosition()] == utils::IteratorType::reduction;
}

/// An elementwise producer whose result the graph keeps (it is returned, or
/// read by something that is not a linalg op), fused into an elementwise
/// consumer that reads it element for element, with that result kept as a
/// second result of the fused op: one loop writes both, instead of the
/// producer's loop writing its result and the consumer's recomputing it
/// from the producer's inputs (or reading it back). An AdamW update was
/// three loops per parameter (the new first moment, the new second moment,
/// the parameter recomputing the second moment from the old one and the
/// gradient): 44 bytes of memory traffic per parameter, 28 as one loop.
/// Only when every other user comes after the consumer in its block (the
/// fused op takes the consumer's place).
struct FuseKeepingProducerResults : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  static bool allParallel(linalg::GenericOp op) {
    return op.getNumParallelLoops() == op.getNumLoops();
  }

  LogicalResult matchAndRewrite(linalg::GenericOp consumer,
                                PatternRewriter &rewriter) const override {
    if (!allParallel(consumer) || !consumer.hasPureTensorSemantics())
      return failure();
    for (OpOperand *operand : consumer.getDpsInputOperands()) {
      auto producer = operand->get().getDefiningOp<linalg::GenericOp>();
      if (!producer || !allParallel(producer) ||
          producer.getNumLoops() != consumer.getNumLoops() ||
          !consumer.getMatchingIndexingMap(operand).isPermutation() ||
          !linalg::areElementwiseOpsFusable(operand))
        continue;
      // The consumer reads the producer through this operand alone (another
      // operand reading it would stay an input of the fused op, read from
      // the fused op's own result).
      if (llvm::count_if(consumer->getOpOperands(), [&](OpOperand &use) {
            return use.get().getDefiningOp() == producer.getOperation();
          }) != 1)
        continue;
      bool kept = false, after = true;
      for (Operation *user : producer->getUsers()) {
        if (user == consumer.getOperation())
          continue;
        kept |= !isa<linalg::LinalgOp>(user);
        after &= user->getBlock() == consumer->getBlock() &&
                 consumer->isBeforeInBlock(user);
      }
      if (!kept || !after)
        continue;
      FailureOr<linalg::ElementwiseOpFusionResult> fused =
          linalg::fuseElementwiseOps(rewriter, operand);
      if (failed(fused))
        continue;
      for (auto [original, replacement] : fused->replacements)
        rewriter.replaceUsesWithIf(original, replacement, [&](OpOperand &use) {
          return use.getOwner() != fused->fusedOp;
        });
      rewriter.eraseOp(consumer);
      if (producer->use_empty())
        rewriter.eraseOp(producer);
      return success();
    }
    return failure();
  }
};

struct FuseElementwisePass
    : lazymlir::impl::FuseElementwisePassBase<FuseElementwisePass> {
  using Base::Base;

  bool shouldFuse(OpOperand *fusedOperand) const {
    auto producer = fusedOperand->get().getDefiningOp<linalg::GenericOp>();
    if (!producer)
      return false;
    auto consumer = dyn_cast<linalg::LinalgOp>(fusedOperand->getOwner());
    // A contraction (a matmul that reshape propagation made generic) stays
    // one: with a producer's ops in its body it is no longer recognized, and
    // lowers to scalar loops instead of tiled vector code; and each of its
    // operands is read once per tile of the loops it does not index, so a
    // fused producer would be recomputed that many times. A producer that
    // only moves data (a transpose) changes no body, only how the operand is
    // read: fused, the contraction reads it in place. Unless the consumer is
    // its only user: fusion would keep its value as a second result of the
    // contraction, which is then no contraction either; or unless reading
    // it in place would make the contraction slow (keepsContractionFast).
    bool singleUser = llvm::all_of(producer->getUsers(), [&](Operation *user) {
      return user == fusedOperand->getOwner();
    });
    if (consumer && linalg::isaContractionOpInterface(consumer)) {
      if (!singleUser || bodySize(producer) != 0)
        return false;
      std::optional<AffineMap> read =
          readInPlace(consumer, fusedOperand, producer);
      if (!read)
        return false;
      // The runtime GEMM packs its operands, so it reads any transpose in
      // place (no copy of a weight per step); one that would no longer
      // read as a GEMM's matrices stays apart.
      if (runtimeGemms) {
        SmallVector<AffineMap> maps = consumer.getIndexingMapsArray();
        bool gemm = lazymlir::isRuntimeGemm(consumer, maps);
        maps[fusedOperand->getOperandNumber()] = *read;
        if (lazymlir::isRuntimeGemm(consumer, maps))
          return true;
        if (gemm)
          return false;
      }
      return keepsContractionFast(consumer, fusedOperand, *read);
    }
    bool broadcastRead =
        consumer &&
        !consumer.getMatchingIndexingMap(fusedOperand).isPermutation();
    if (singleUser && !broadcastRead)
      return true;
    return bodySize(producer) <= maxRecomputeOps;
  }

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    func::FuncOp func = getOperation();

    {
      RewritePatternSet patterns(ctx);
      patterns.add<GeneralizeNonContractionOps, FoldLoopIndexGuard,
                   FoldLoopIndexRemainder<arith::RemSIOp>,
                   FoldLoopIndexRemainder<arith::RemUIOp>>(ctx);
      // Not converging within the iteration limit leaves valid IR; only
      // less is fused, so that is not a failure.
      (void)applyPatternsGreedily(func, std::move(patterns));
    }

    linalg::ControlFusionFn control = [this](OpOperand *operand) {
      return shouldFuse(operand);
    };
    RewritePatternSet patterns(ctx);
    // Tried before the upstream pattern (which would recompute the producer
    // in the consumer).
    patterns.add<FuseKeepingProducerResults>(ctx, /*benefit=*/2);
    linalg::populateElementwiseOpsFusionPatterns(patterns, control);
    if (propagateReshapes) {
      // Reshapes may move only where nothing is recomputed.
      linalg::ControlFusionFn reshapeControl = [](OpOperand *operand) {
        Operation *producer = operand->get().getDefiningOp();
        return producer && producer->hasOneUse();
      };
      linalg::populateFoldReshapeOpsByExpansionPatterns(patterns,
                                                        reshapeControl);
      tensor::populateBubbleUpExpandShapePatterns(patterns);
    }
    linalg::populateEraseUnusedOperandsAndResultsPatterns(patterns);
    affine::AffineApplyOp::getCanonicalizationPatterns(patterns, ctx);
    linalg::GenericOp::getCanonicalizationPatterns(patterns, ctx);
    tensor::ExpandShapeOp::getCanonicalizationPatterns(patterns, ctx);
    tensor::CollapseShapeOp::getCanonicalizationPatterns(patterns, ctx);
    tensor::EmptyOp::getCanonicalizationPatterns(patterns, ctx);
    ctx->getLoadedDialect<linalg::LinalgDialect>()->getCanonicalizationPatterns(
        patterns);
    (void)applyPatternsGreedily(
        func, std::move(patterns),
        GreedyRewriteConfig().setUseTopDownTraversal(true));
  }
};

} // namespace
