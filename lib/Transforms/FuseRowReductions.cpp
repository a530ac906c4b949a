//===- FuseRowReductions.cpp - reductions and their consumer by row tiles -===//
//
// Built on upstream's scf::tileConsumerAndFuseProducersUsingSCF; what is
// fused and the tile size are ours (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/ParallelTiling.h"
#include "lazymlir/Transforms/RuntimeGemm.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_FUSEROWREDUCTIONSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

bool isReduction(linalg::LinalgOp op) { return op.getNumReductionLoops() > 0; }

/// Whether `op` walks rows like a consumer whose first loop has `rows`
/// iterations: its first loop is parallel with that size and indexes first
/// every output and every operand in `shared`. A dynamic (`?`) row count
/// matches any: the ops are chained through operands indexed by the row
/// loop first (checked below), which makes their row counts equal.
bool isRowLocal(linalg::LinalgOp op, int64_t rows,
                const llvm::SetVector<Operation *> &fused) {
  if (!isa<linalg::GenericOp, linalg::FillOp>(op) || op.getNumLoops() == 0 ||
      !op.hasOnlyProjectedPermutations() ||
      op.getIteratorTypesArray().front() != utils::IteratorType::parallel)
    return false;
  int64_t own = op.getStaticLoopRanges().front();
  if (own != rows && !ShapedType::isDynamic(own) &&
      !ShapedType::isDynamic(rows))
    return false;
  AffineExpr first = getAffineDimExpr(0, op.getContext());
  for (OpOperand &operand : op->getOpOperands()) {
    Operation *producer = operand.get().getDefiningOp();
    // A reduction reads rows of all its operands (softmax's max and sum,
    // layer norm's moments): one that reads an operand across rows is a
    // contraction (a matmul's weight), not a row reduction; a contraction in
    // the row loop raced between the loop's threads (GPT-2's layer norm and
    // qkv projection gave nondeterministic results) and is tile-contractions'
    // job anyway.
    bool shared =
        op.isDpsInit(&operand) || (producer && fused.contains(producer)) ||
        (isReduction(op) && isa<RankedTensorType>(operand.get().getType()) &&
         cast<RankedTensorType>(operand.get().getType()).getRank() > 0);
    if (!shared || !isa<ShapedType>(operand.get().getType()))
      continue;
    AffineMap map = op.getMatchingIndexingMap(&operand);
    if (map.getNumResults() == 0 || map.getResult(0) != first)
      return false;
  }
  return true;
}

/// Whether a runtime GEMM reads `value` as A or B, directly or through a
/// reshape.
bool gemmReads(Value value) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(user)) {
      if (gemmReads(user->getResult(0)))
        return true;
      continue;
    }
    auto linalgOp = dyn_cast<linalg::LinalgOp>(user);
    if (linalgOp && use.getOperandNumber() < 2 &&
        lazymlir::isRuntimeGemm(linalgOp, linalgOp.getIndexingMapsArray()))
      return true;
  }
  return false;
}

struct FuseRowReductionsPass
    : lazymlir::impl::FuseRowReductionsPassBase<FuseRowReductionsPass> {
  using Base::Base;

  /// The ops to fuse into a row-tile loop of `root`, or none.
  llvm::SetVector<Operation *> fusedWith(linalg::GenericOp root) {
    llvm::SetVector<Operation *> fused;
    if (root.getNumLoops() < 2 ||
        root.getNumParallelLoops() != root.getNumLoops() ||
        root.getNumDpsInits() != 1)
      return fused;
    int64_t rows = root.getStaticLoopRanges().front();
    Block *block = root->getBlock();
    // Candidates: linalg producers in the same block, transitively.
    fused.insert(root);
    for (size_t i = 0; i < fused.size(); ++i)
      for (Value operand : fused[i]->getOperands())
        if (auto producer = operand.getDefiningOp<linalg::LinalgOp>();
            producer && producer->getBlock() == block)
          fused.insert(producer);
    // Drop what is read outside the set or is not row-local, until stable.
    for (bool changed = true; changed;) {
      changed = false;
      for (Operation *op : llvm::to_vector(fused)) {
        if (op == root.getOperation())
          continue;
        bool usedOutside = llvm::any_of(op->getUsers(), [&](Operation *user) {
          return !fused.contains(user);
        });
        // A contraction the runtime GEMM computes stays whole (a batched
        // matmul whose batch is the rows, attention's scores and output):
        // in the loop it would be a slice per row tile, tiled at a fraction
        // of the GEMM's speed.
        auto linalgOp = cast<linalg::LinalgOp>(op);
        if (usedOutside || !isRowLocal(linalgOp, rows, fused) ||
            (runtimeGemms && lazymlir::isRuntimeGemm(
                                 linalgOp, linalgOp.getIndexingMapsArray()))) {
          fused.remove(op);
          changed = true;
        }
      }
    }
    if (!isRowLocal(root, rows, fused) ||
        llvm::none_of(fused, [](Operation *op) {
          return isReduction(cast<linalg::LinalgOp>(op));
        }))
      fused.clear();
    return fused;
  }

  /// Rows per tile: the fewest dividing the row count whose slice of the
  /// root's largest input spans tileBytes. With a dynamic row count, that
  /// many rows (the last tile is partial); a dynamic row length counts as
  /// kDynamicRowElements elements.
  static constexpr int64_t kDynamicRowElements = 1024;
  int64_t rowsPerTile(linalg::GenericOp root) {
    int64_t rows = root.getStaticLoopRanges().front();
    int64_t rowBytes = 1;
    for (Value input : root.getDpsInputs()) {
      auto type = dyn_cast<RankedTensorType>(input.getType());
      if (!type || type.getRank() == 0 || type.getElementTypeBitWidth() < 8)
        continue;
      int64_t elements = 1;
      for (int64_t size : type.getShape().drop_front())
        elements *= ShapedType::isDynamic(size)
                        ? kDynamicRowElements
                        : std::min<int64_t>(size, int64_t(1) << 32);
      rowBytes =
          std::max(rowBytes, elements * type.getElementTypeBitWidth() / 8);
    }
    int64_t wanted = std::max<int64_t>(1, tileBytes / rowBytes);
    if (ShapedType::isDynamic(rows))
      return wanted;
    for (int64_t tile = std::min(wanted, rows); tile <= rows; ++tile)
      if (rows % tile == 0)
        return tile;
    return rows;
  }

  /// Drops unit dimensions of reductions and their consumers (torch-mlir's
  /// keepdim reductions index their 4096x1 results as (d0, 0), which tiling
  /// cannot slice), so that their maps are projected permutations; fills
  /// follow through the reshapes.
  LogicalResult dropUnitDims() {
    linalg::ControlDropUnitDims options;
    // Only reductions and their direct consumers: elsewhere (a conv's
    // epilogue with a batch of 1) the reshapes dropping adds would stand
    // between ops that later passes fuse.
    auto reduces = [](Operation *op) {
      auto generic = dyn_cast_or_null<linalg::GenericOp>(op);
      return generic && isReduction(generic);
    };
    options.controlFn = [reduces](Operation *op) -> SmallVector<unsigned> {
      auto generic = dyn_cast<linalg::GenericOp>(op);
      if (!generic ||
          !(reduces(generic) ||
            llvm::any_of(generic->getOperands(), [&](Value operand) {
              return reduces(operand.getDefiningOp());
            })))
        return {};
      return llvm::to_vector(llvm::seq<unsigned>(0, generic.getNumLoops()));
    };
    RewritePatternSet patterns(&getContext());
    linalg::populateFoldUnitExtentDimsPatterns(patterns, options);
    tensor::populateReassociativeReshapeFoldingPatterns(patterns);
    tensor::CollapseShapeOp::getCanonicalizationPatterns(patterns,
                                                         &getContext());
    tensor::ExpandShapeOp::getCanonicalizationPatterns(patterns, &getContext());
    // fill then collapse_shape -> fill of the collapsed tensor: the
    // reductions' fills become their direct producers (fused with them).
    linalg::FillOp::getCanonicalizationPatterns(patterns, &getContext());
    return applyPatternsGreedily(getOperation(), std::move(patterns));
  }

  /// A generic that yields a bf16 value widened (`extf(truncf(...))`:
  /// bf16 autocast's rounding, attention's probabilities) and that a
  /// runtime GEMM reads: made to yield the bf16 value, a separate widening
  /// after it. Fused into a row loop (a softmax's normalization), the
  /// loop's result is then the bf16 value, which lazymlir-mark-gemms'
  /// bf16-operands gives to the GEMM as it is; the widening, never a root
  /// (below), stays out of the loop.
  void splitWideningsForGemms() {
    SmallVector<linalg::GenericOp> candidates;
    getOperation().walk([&](linalg::GenericOp op) {
      if (op->getNumResults() != 1 || !op.hasPureTensorSemantics() ||
          op.getNumParallelLoops() != op.getNumLoops() ||
          lazymlir::isBf16Widening(op) ||
          !op.getDpsInitOperand(0)->get().getDefiningOp<tensor::EmptyOp>() ||
          op.payloadUsesValueFromOperand(op.getDpsInitOperand(0)))
        return;
      auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
      auto extend = yield.getOperand(0).getDefiningOp<arith::ExtFOp>();
      if (extend && extend.getIn().getType().isBF16() &&
          extend.getType().isF32() && gemmReads(op->getResult(0)))
        candidates.push_back(op);
    });
    for (linalg::GenericOp op : candidates) {
      Value wide = op->getResult(0);
      auto type = cast<RankedTensorType>(wide.getType());
      Value empty = op.getDpsInitOperand(0)->get(); // the widening's init
      lazymlir::yieldBf16InPlace(op, 0);
      OpBuilder builder(op);
      builder.setInsertionPointAfter(op);
      SmallVector<AffineMap> maps(
          2, builder.getMultiDimIdentityMap(type.getRank()));
      auto widen = linalg::GenericOp::create(
          builder, op.getLoc(), TypeRange{type}, ValueRange{wide},
          ValueRange{empty}, maps,
          SmallVector<utils::IteratorType>(type.getRank(),
                                           utils::IteratorType::parallel),
          [](OpBuilder &b, Location loc, ValueRange args) {
            linalg::YieldOp::create(
                b, loc,
                arith::ExtFOp::create(b, loc, b.getF32Type(), args[0])
                    .getResult());
          });
      wide.replaceAllUsesExcept(widen->getResult(0), widen);
    }
  }

  void runOnOperation() override {
    if (failed(dropUnitDims()))
      return signalPassFailure();
    if (runtimeGemms)
      splitWideningsForGemms();
    SmallVector<linalg::GenericOp> roots;
    for (Operation &op : getOperation().getBody().getOps())
      if (auto generic = dyn_cast<linalg::GenericOp>(op);
          generic && !(runtimeGemms && lazymlir::isBf16Widening(generic)))
        roots.push_back(generic);
    IRRewriter rewriter(&getContext());
    llvm::DenseSet<Operation *> erased;
    bool peeled = false;
    // Last consumers first: a fused reduction is no longer a root.
    for (linalg::GenericOp root : llvm::reverse(roots)) {
      if (erased.contains(root))
        continue; // fused into a later root's tile loop
      llvm::SetVector<Operation *> fused = fusedWith(root);
      if (fused.empty())
        continue;
      int64_t tile = rowsPerTile(root);
      SmallVector<OpFoldResult> tiles(root.getNumLoops(),
                                      rewriter.getIndexAttr(0));
      tiles.front() = rewriter.getIndexAttr(tile);
      scf::SCFTileAndFuseOptions options;
      options.tilingOptions.setTileSizes(tiles);
      options.tilingOptions.setLoopType(scf::SCFTilingOptions::LoopType::ForOp);
      options.setFusionControlFn(
          [&](tensor::ExtractSliceOp, OpResult producer, bool)
              -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
            if (fused.contains(producer.getOwner()))
              return scf::SCFTileAndFuseOptions::ControlFnResult{};
            return std::nullopt;
          });
      rewriter.setInsertionPoint(root);
      FailureOr<scf::SCFTileAndFuseResult> result =
          scf::tileConsumerAndFuseProducersUsingSCF(
              rewriter, cast<TilingInterface>(root.getOperation()), options);
      if (failed(result))
        continue;
      lazymlir::finishParallelTiling(rewriter, root, *result, root);
      if (!result->loops.empty())
        result->loops.front()->setAttr(lazymlir::kRowTilesAttr,
                                       rewriter.getUnitAttr());
      // A dynamic row count: the full tiles (of static size, so that their
      // temporaries are too: allocated once per thread, not per tile, and
      // the tile loop can run in parallel), then the last partial one.
      if (ShapedType::isDynamic(root.getStaticLoopRanges().front()) &&
          !result->loops.empty())
        peeled |= lazymlir::peelPartialTile(rewriter, result->loops.front());
      // The originals are dead now: erase them, users first.
      for (bool progress = true; progress;) {
        progress = false;
        for (Operation *op : fused) {
          if (erased.contains(op) || !op->use_empty())
            continue;
          rewriter.eraseOp(op);
          erased.insert(op);
          progress = true;
        }
      }
    }
    if (peeled)
      lazymlir::foldPeeledTiles(getOperation());
  }
};

} // namespace
