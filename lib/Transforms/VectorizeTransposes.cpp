//===- VectorizeTransposes.cpp - transposes as 16x16 register blocks ------===//
//
// Builds on upstream SCF tiling, linalg vectorization and the vector
// dialect's permutation-map and transpose lowerings; what is ours is which
// ops are transposes and the tile shape.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/ParallelTiling.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_VECTORIZETRANSPOSESPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

constexpr int64_t kBlock = 16;

/// For an elementwise op (all loops parallel, one output in loop order, a
/// body of arith and math ops) with an input that is a transpose: read with
/// a permutation whose innermost dimension is a loop other than the
/// innermost one: that loop. The tile is then kBlock x kBlock over it and
/// the innermost loop: rows read contiguously, transposed in registers,
/// computed on and written as rows. Other inputs may be read in loop order
/// or broadcast; every transposed input must read its rows with the same
/// loop.
std::optional<unsigned> transposedLoop(linalg::GenericOp op) {
  if (op.getNumDpsInits() != 1 || !op.hasPureTensorSemantics() ||
      op.getNumReductionLoops() != 0 || op.getNumLoops() < 2)
    return std::nullopt;
  for (Operation &inner : op.getBody()->without_terminator())
    if (!isa<arith::ArithDialect, math::MathDialect>(inner.getDialect()))
      return std::nullopt;
  for (OpOperand &operand : op->getOpOperands()) {
    Type element = getElementTypeOrSelf(operand.get().getType());
    if (!element.isIntOrFloat() || element.isInteger(1))
      return std::nullopt; // bit-packed vectors of i1 (see tile-contractions)
  }
  if (!op.getIndexingMapsArray().back().isIdentity())
    return std::nullopt;
  unsigned inner = op.getNumLoops() - 1;
  std::optional<unsigned> read;
  for (OpOperand *input : op.getDpsInputOperands()) {
    AffineMap map = op.getMatchingIndexingMap(input);
    if (!map.isProjectedPermutation(/*allowZeroInResults=*/true))
      return std::nullopt;
    if (!map.isPermutation())
      continue; // a scalar, a broadcast or a row: read as the tile needs
    unsigned loop = cast<AffineDimExpr>(map.getResults().back()).getPosition();
    if (loop == inner)
      continue; // reads contiguously already
    if (read && *read != loop)
      return std::nullopt;
    read = loop;
  }
  if (!read)
    return std::nullopt;
  // A dynamic (`?`) loop is tiled all the same: full blocks of static
  // shape, the partial ones peeled (scalar).
  SmallVector<int64_t> bounds = op.getStaticLoopRanges();
  auto shorter = [](int64_t bound) {
    return !ShapedType::isDynamic(bound) && bound < kBlock;
  };
  if (shorter(bounds[inner]) || shorter(bounds[*read]))
    return std::nullopt;
  return read;
}

/// transpose(broadcast(v)) where the broadcast only adds leading unit
/// dimensions that the transpose keeps in place: broadcast(transpose(v)),
/// so that the transpose (of a batched tile) is 2-D for the shuffle
/// lowering; the extract that follows folds the broadcast away.
struct TransposeBelowLeadingUnitBroadcast
    : public OpRewritePattern<vector::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto broadcast = op.getVector().getDefiningOp<vector::BroadcastOp>();
    if (!broadcast)
      return failure();
    auto source = dyn_cast<VectorType>(broadcast.getSourceType());
    if (!source)
      return failure();
    int64_t added =
        broadcast.getResultVectorType().getRank() - source.getRank();
    ArrayRef<int64_t> perm = op.getPermutation();
    for (int64_t i = 0; i < added; ++i)
      if (perm[i] != i || broadcast.getResultVectorType().getDimSize(i) != 1)
        return failure();
    SmallVector<int64_t> inner;
    for (int64_t p : perm.drop_front(added))
      inner.push_back(p - added);
    Value transposed = vector::TransposeOp::create(
        rewriter, op.getLoc(), broadcast.getSource(), inner);
    rewriter.replaceOpWithNewOp<vector::BroadcastOp>(
        op, op.getResultVectorType(), transposed);
    return success();
  }
};

/// transpose(broadcast(v : vector<N>) : vector<MxN>, [1, 0]) (a row of the
/// transposed loop, such as a bias): broadcast(v as vector<Nx1>), each row
/// a splat of one element instead of a 16x16 shuffle transpose.
struct TransposedRowBroadcast : public OpRewritePattern<vector::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto broadcast = op.getVector().getDefiningOp<vector::BroadcastOp>();
    if (!broadcast || op.getResultVectorType().getRank() != 2)
      return failure();
    auto source = dyn_cast<VectorType>(broadcast.getSourceType());
    if (!source || source.getRank() != 1)
      return failure();
    auto column =
        VectorType::get({source.getDimSize(0), 1}, source.getElementType());
    Value shaped = vector::ShapeCastOp::create(rewriter, op.getLoc(), column,
                                               broadcast.getSource());
    rewriter.replaceOpWithNewOp<vector::BroadcastOp>(
        op, op.getResultVectorType(), shaped);
    return success();
  }
};

/// Marks the tiled ops (peeling copies them) until they are vectorized.
constexpr llvm::StringLiteral kTileMarker = "lazymlir.transpose_tile";

struct VectorizeTransposesPass
    : lazymlir::impl::VectorizeTransposesPassBase<VectorizeTransposesPass> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    func::FuncOp func = getOperation();
    SmallVector<std::pair<linalg::GenericOp, unsigned>> transposes;
    for (Block &block : func.getBody())
      for (auto op : block.getOps<linalg::GenericOp>())
        if (std::optional<unsigned> loop = transposedLoop(op))
          transposes.push_back({op, *loop});
    if (transposes.empty())
      return;

    IRRewriter rewriter(ctx);
    SmallVector<linalg::LinalgOp> tiles;
    for (auto [op, loop] : transposes) {
      SmallVector<int64_t> sizes(op.getNumLoops(), 1);
      sizes[loop] = sizes.back() = kBlock;
      scf::SCFTileAndFuseOptions options;
      options.tilingOptions.setTileSizes(getAsIndexOpFoldResult(ctx, sizes));
      options.tilingOptions.setLoopType(scf::SCFTilingOptions::LoopType::ForOp);
      options.setFusionControlFn(
          [](tensor::ExtractSliceOp, OpResult, bool)
              -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
            return std::nullopt;
          });
      rewriter.setInsertionPoint(op);
      FailureOr<scf::SCFTileAndFuseResult> result =
          scf::tileConsumerAndFuseProducersUsingSCF(
              rewriter, cast<TilingInterface>(op.getOperation()), options);
      if (failed(result))
        continue;
      // Tiles write disjoint blocks: lazymlir-parallelize-tiles may run
      // them in parallel.
      lazymlir::finishParallelTiling(rewriter, op, *result, op);
      for (Operation *tiled : result->tiledAndFusedOps)
        tiled->setAttr(kTileMarker, rewriter.getUnitAttr());
      // A size that is not a multiple of 16 (a vocabulary of 1000): the
      // last partial block of each tile loop peeled off (innermost first,
      // so that peeling the outer loop copies both inner parts), each part
      // then of static shape.
      for (LoopLikeOpInterface tileLoop : llvm::reverse(result->loops))
        lazymlir::peelPartialTile(rewriter, tileLoop);
    }
    lazymlir::foldPeeledTiles(func);
    func.walk([&](linalg::LinalgOp op) {
      if (!op->removeAttr(kTileMarker))
        return;
      lazymlir::foldStaticInputCasts(op);
      if (!op.hasDynamicShape())
        tiles.push_back(op);
    });
    for (linalg::LinalgOp tile : tiles) {
      rewriter.setInsertionPoint(tile);
      FailureOr<linalg::VectorizationResult> vectorized =
          linalg::vectorize(rewriter, tile);
      if (succeeded(vectorized))
        rewriter.replaceOp(tile, vectorized->replacements);
    }
    // A permuted read becomes a read of rows and a vector.transpose (the
    // CPU pipeline lowers 16x16 ones to shuffles); unit dimensions of the
    // batch loops are dropped so that the transposes are 2-D.
    RewritePatternSet patterns(ctx);
    vector::populateVectorTransferPermutationMapLoweringPatterns(patterns);
    vector::populateCastAwayVectorLeadingOneDimPatterns(patterns);
    patterns.add<TransposeBelowLeadingUnitBroadcast, TransposedRowBroadcast>(
        ctx);
    vector::BroadcastOp::getCanonicalizationPatterns(patterns, ctx);
    vector::ExtractOp::getCanonicalizationPatterns(patterns, ctx);
    vector::TransferReadOp::getCanonicalizationPatterns(patterns, ctx);
    vector::TransferWriteOp::getCanonicalizationPatterns(patterns, ctx);
    vector::TransposeOp::getCanonicalizationPatterns(patterns, ctx);
    (void)applyPatternsGreedily(func, std::move(patterns));
  }
};

} // namespace
