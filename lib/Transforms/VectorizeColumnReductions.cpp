//===- VectorizeColumnReductions.cpp - column sums in vector registers ----===//
//
// Builds on upstream SCF tiling, linalg vectorization (vector.multi_reduction)
// and loop-invariant subset hoisting; what is ours is which reductions and
// the tile shape.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/ParallelTiling.h"

#include "VectorAccumulators.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_VECTORIZECOLUMNREDUCTIONSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// Rows of a tile (of the innermost reduction loop) and its largest width.
constexpr int64_t kRows = 8;
constexpr int64_t kMaxWidth = 64;

/// On the tiles to vectorize, found again after the peeled loops are
/// folded: that canonicalization replaces linalg ops (static operand
/// shapes), so handles taken before it may point at erased ops.
constexpr StringLiteral kTileMarker = "lazymlir.column_tile";

/// The largest divisor of `bound` at most `limit` that is a multiple of 8
/// (or `bound` itself when it is at most `limit`); 0 when there is none.
int64_t widthTile(int64_t bound, int64_t limit) {
  if (bound <= limit)
    return bound;
  for (int64_t tile = limit; tile >= 8; tile -= 8)
    if (bound % tile == 0)
      return tile;
  return 0;
}

/// Tile sizes for a column reduction (reduction loops, then parallel ones;
/// every operand read along the innermost, parallel, loop), or none: the
/// innermost reduction loop by kRows, the innermost parallel loop by a
/// vector's width, every other loop by 1.
std::optional<SmallVector<int64_t>> columnTiles(linalg::GenericOp op) {
  if (op.getNumDpsInits() != 1 || !op.hasPureTensorSemantics() ||
      op.getNumReductionLoops() == 0 ||
      !op.getBody()->getOps<linalg::IndexOp>().empty())
    return std::nullopt;
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  unsigned loops = iterators.size();
  unsigned reductions = op.getNumReductionLoops();
  for (unsigned i = 0; i < loops; ++i)
    if ((i < reductions) != (iterators[i] == utils::IteratorType::reduction))
      return std::nullopt; // not all reductions outside all parallel loops
  if (reductions == loops)
    return std::nullopt;
  auto inner = getAffineDimExpr(loops - 1, op.getContext());
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = dyn_cast<ShapedType>(operand.get().getType());
    if (!type || !type.getElementType().isF32())
      return std::nullopt;
    AffineMap map = op.getMatchingIndexingMap(&operand);
    if (!map.isProjectedPermutation() || map.getNumResults() == 0 ||
        map.getResults().back() != inner)
      return std::nullopt;
  }
  SmallVector<int64_t> bounds = op.getStaticLoopRanges();
  // A dynamic (`?`) row count is tiled by kRows, the partial tile peeled
  // and split into single rows; the columns must be static (the vectors).
  if (ShapedType::isDynamic(bounds.back())) {
    op->emitRemark("lazymlir-vectorize-column-reductions: column reduction "
                   "not vectorized: dynamic dimension (the columns)");
    return std::nullopt;
  }
  int64_t width = widthTile(bounds.back(), kMaxWidth);
  if (width == 0 || (!ShapedType::isDynamic(bounds[reductions - 1]) &&
                     bounds[reductions - 1] % kRows != 0))
    return std::nullopt;
  SmallVector<int64_t> tiles(loops, 1);
  tiles[reductions - 1] = kRows;
  tiles.back() = width;
  return tiles;
}

struct VectorizeColumnReductionsPass
    : lazymlir::impl::VectorizeColumnReductionsPassBase<
          VectorizeColumnReductionsPass> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    func::FuncOp func = getOperation();
    SmallVector<std::pair<linalg::GenericOp, SmallVector<int64_t>>> found;
    for (Block &block : func.getBody())
      for (auto op : block.getOps<linalg::GenericOp>())
        if (std::optional<SmallVector<int64_t>> tiles = columnTiles(op))
          found.push_back({op, *tiles});
    if (found.empty())
      return;

    IRRewriter rewriter(ctx);
    Attribute marker = rewriter.getUnitAttr();
    bool peeled = false;
    for (auto &[op, sizes] : found) {
      unsigned reductions = op.getNumReductionLoops();
      // Read before tiling: replaceOp below erases `op`.
      unsigned rows = reductions - 1;
      bool dynamicRows = ShapedType::isDynamic(op.getStaticLoopRanges()[rows]);
      // Parallel loops outside, so that the accumulator tile is invariant
      // in the reduction loops inside and stays in registers.
      SmallVector<int64_t> order;
      for (unsigned i = reductions; i < sizes.size(); ++i)
        order.push_back(i);
      for (unsigned i = 0; i < reductions; ++i)
        order.push_back(i);
      scf::SCFTilingOptions options;
      options.setTileSizes(getAsIndexOpFoldResult(ctx, sizes));
      options.setInterchange(order);
      options.setLoopType(scf::SCFTilingOptions::LoopType::ForOp);
      rewriter.setInsertionPoint(op);
      FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(
          rewriter, cast<TilingInterface>(op.getOperation()), options);
      if (failed(result))
        continue;
      rewriter.replaceOp(op, result->replacements);
      for (Operation *tiled : result->tiledOps)
        if (isa<linalg::LinalgOp>(tiled))
          tiled->setAttr(kTileMarker, marker);
      // A dynamic row count: full tiles of kRows rows (static once the
      // peeled loop's sizes fold), then the rest row by row.
      if (!dynamicRows || result->loops.empty())
        continue;
      auto rowLoop = dyn_cast<scf::ForOp>(result->loops.back().getOperation());
      scf::ForOp partial;
      rewriter.setInsertionPoint(rowLoop);
      if (!rowLoop ||
          failed(
              scf::peelForLoopAndSimplifyBounds(rewriter, rowLoop, partial)) ||
          !partial)
        continue;
      peeled = true;
      SmallVector<linalg::LinalgOp> rest;
      partial.walk([&](linalg::LinalgOp tile) {
        tile->removeAttr(kTileMarker); // the peeled copy: tiled again by row
        rest.push_back(tile);
      });
      for (linalg::LinalgOp tile : rest) {
        SmallVector<int64_t> single(tile.getNumLoops(), 0);
        single[rows] = 1;
        scf::SCFTilingOptions byRow;
        byRow.setTileSizes(getAsIndexOpFoldResult(ctx, single));
        byRow.setLoopType(scf::SCFTilingOptions::LoopType::ForOp);
        rewriter.setInsertionPoint(tile);
        FailureOr<scf::SCFTilingResult> rowTiles = scf::tileUsingSCF(
            rewriter, cast<TilingInterface>(tile.getOperation()), byRow);
        if (failed(rowTiles))
          continue;
        rewriter.replaceOp(tile, rowTiles->replacements);
        for (Operation *tiled : rowTiles->tiledOps)
          if (isa<linalg::LinalgOp>(tiled))
            tiled->setAttr(kTileMarker, marker);
      }
    }
    if (peeled)
      lazymlir::foldPeeledTiles(func);
    SmallVector<linalg::LinalgOp> tiles;
    func.walk([&](linalg::LinalgOp tile) {
      if (tile->removeAttr(kTileMarker))
        tiles.push_back(tile);
    });
    for (linalg::LinalgOp tile : tiles) {
      lazymlir::foldStaticInputCasts(tile);
      if (tile.hasDynamicShape())
        continue;
      rewriter.setInsertionPoint(tile);
      if (failed(linalg::vectorizeOpPrecondition(tile)))
        continue;
      FailureOr<linalg::VectorizationResult> vectorized =
          linalg::vectorize(rewriter, tile);
      if (succeeded(vectorized))
        rewriter.replaceOp(tile, vectorized->replacements);
    }
    RewritePatternSet patterns(ctx);
    vector::TransferReadOp::getCanonicalizationPatterns(patterns, ctx);
    vector::TransferWriteOp::getCanonicalizationPatterns(patterns, ctx);
    tensor::ExtractSliceOp::getCanonicalizationPatterns(patterns, ctx);
    scf::ForOp::getCanonicalizationPatterns(patterns, ctx);
    // The accumulator tile, read and written in every step of the reduction
    // loops, is carried through them as a vector instead.
    lazymlir::carryVectorAccumulators(
        rewriter, func, FrozenRewritePatternSet(std::move(patterns)));
    // The reduction over a tile's rows: elementwise adds of the rows into
    // the accumulator, in row order (nothing later lowers it).
    RewritePatternSet lowering(ctx);
    vector::populateVectorMultiReductionLoweringPatterns(
        lowering, vector::VectorMultiReductionLowering::InnerParallel);
    (void)applyPatternsGreedily(func, std::move(lowering));
  }
};

} // namespace
