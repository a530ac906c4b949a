//===- TileContractions.cpp - tile, fuse epilogues, vectorize -------------===//
//
// Built on upstream's TilingInterface (scf::tileConsumerAndFuseProducersUsing
// SCF, scf::tileUsingSCF), im2col and the linalg vectorizer; the choices of
// what to tile, by how much and what to fuse are ours (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/ParallelTiling.h"

#include "IterationRuns.h"
#include "VectorAccumulators.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lazymlir {
#define GEN_PASS_DEF_TILECONTRACTIONSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// Marks the tiles to vectorize; loops around them may fold away during
/// cleanup, so they are found by this attribute rather than by position.
constexpr StringLiteral kVectorizeMarker = "lazymlir.vectorize";
/// On a tile whose vector loop has fewer than kRemainderLanes iterations (a
/// dynamic number): vectorized with masks.
constexpr StringLiteral kMaskedLanesMarker = "lazymlir.masked_lanes";
/// On parallel tiles of a contraction whose reduction is still to split.
constexpr StringLiteral kReductionMarker = "lazymlir.tile_reduction";

/// The largest divisor of `bound` that is at most `target` (at least 1).
int64_t pickTile(int64_t bound, int64_t target) {
  // A dynamic (`?`) loop: tiles of `target`, the remainder peeled.
  if (ShapedType::isDynamic(bound))
    return target;
  for (int64_t tile = std::min(bound, target); tile > 1; --tile)
    if (bound % tile == 0)
      return tile;
  return 1;
}

/// vector<Nxi1> is bit-packed in LLVM while a memref of i1 holds a byte per
/// element (as torch's bool does), so a vector transfer of i1 memory would
/// read the wrong bits. Such ops stay scalar (LLVM's own vectorizer knows
/// the byte layout).
bool touchesI1Memory(linalg::LinalgOp op) {
  return llvm::any_of(op->getOperandTypes(), [](Type type) {
    auto shaped = dyn_cast<ShapedType>(type);
    return shaped && shaped.getElementType().isInteger(1);
  });
}

SmallVector<OpFoldResult> asFoldResults(MLIRContext *ctx,
                                        ArrayRef<int64_t> sizes) {
  Builder b(ctx);
  return llvm::map_to_vector(sizes, [&](int64_t size) -> OpFoldResult {
    return b.getIndexAttr(size);
  });
}

/// Contractions this pass handles: static shapes, tensors, one result whose
/// indexing map lists the parallel loops in order (so the innermost parallel
/// loop is the result's contiguous dimension, the one to vectorize).
/// NHWC convolutions are tiled directly (no im2col): a tile with unit
/// output-height and filter-height/width is a 1-D convolution, which the
/// vectorizer turns into FMAs over the output channels.
bool isDirectConv(Operation *op) { return isa<linalg::Conv2DNhwcHwcfOp>(op); }

bool isTiledKind(linalg::LinalgOp op) {
  return linalg::isaContractionOpInterface(op) || isDirectConv(op);
}

bool isCandidate(linalg::LinalgOp op) {
  if (!isTiledKind(op) || !op.hasPureTensorSemantics() ||
      op.getNumDpsInits() != 1)
    return false;
  // The runtime's GEMM computes it (lazymlir-mark-gemms).
  if (op->hasAttr(lazymlir::kGemmAttr))
    return false;
  // Contractions with `?` dimensions are tiled like static ones (full tiles
  // of static shape, a peeled remainder); a convolution's window needs
  // static sizes (im2col, the 1-D downscale).
  if (op.hasDynamicShape() && !linalg::isaContractionOpInterface(op)) {
    op->emitRemark("lazymlir-tile-contractions: convolution not tiled: "
                   "dynamic dimension");
    return false;
  }
  Type elementType = getElementTypeOrSelf(op->getResult(0).getType());
  if (!elementType.isIntOrFloat())
    return false;
  AffineMap outputMap = op.getIndexingMapMatchingResult(op->getResult(0));
  SmallVector<unsigned> parallel;
  op.getParallelDims(parallel);
  if (outputMap.getNumResults() != parallel.size() || parallel.empty())
    return false;
  for (auto [expr, loop] : llvm::zip(outputMap.getResults(), parallel)) {
    auto dim = dyn_cast<AffineDimExpr>(expr);
    if (!dim || dim.getPosition() != loop)
      return false;
  }
  return true;
}

/// The elementwise op that only consumes `contraction`'s result, over the
/// same iteration space, so that it can be computed tile by tile with it.
linalg::GenericOp findEpilogue(linalg::LinalgOp contraction) {
  Value result = contraction->getResult(0);
  if (!result.hasOneUse())
    return nullptr;
  auto epilogue = dyn_cast<linalg::GenericOp>(*result.getUsers().begin());
  if (!epilogue || !linalg::isElementwise(epilogue) ||
      epilogue.getNumDpsInits() != 1)
    return nullptr;
  OpOperand &use = *result.getUses().begin();
  auto rank = cast<ShapedType>(result.getType()).getRank();
  if (epilogue.getNumLoops() != rank ||
      !epilogue.getMatchingIndexingMap(&use).isIdentity() ||
      !epilogue.getIndexingMapMatchingResult(epilogue->getResult(0))
           .isIdentity())
    return nullptr;
  return epilogue;
}

/// Merges each run of adjacent loops of one kind that every operand reads
/// as one contiguous run into one loop; runs of parallel loops only when
/// `parallelRuns` (the result is then reshaped back, which an epilogue
/// could not be fused through). Reductions: a linear layer's weight
/// gradient, reduced over batch and sequence; tiled and vectorized, two
/// reduction loops make a vector.contract with two reduction dimensions,
/// which lowers to slow code, one makes outer products. Parallel loops: a
/// projection into attention heads (batch x sequence by heads x head size)
/// becomes a plain matmul whose tiles are full vectors. Operands are
/// reshaped, not copied. Returns the op to tile (the collapsed one, or
/// `op`).
linalg::LinalgOp collapseIterationRuns(RewriterBase &rewriter,
                                       linalg::LinalgOp op, bool parallelRuns) {
  if (!isa<linalg::GenericOp>(op.getOperation()))
    return op;
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  SmallVector<ReassociationIndices> runs = lazymlir::mergeableIterationRuns(
      maps, op.getIteratorTypesArray(), parallelRuns);
  lazymlir::dropRunsOfDynamicLoops(runs, op.getStaticLoopRanges());
  // Upstream's own condition, which collapseOpIterationDims asserts.
  if (runs.empty() || !linalg::areDimSequencesPreserved(maps, runs))
    return op;
  rewriter.setInsertionPoint(op);
  FailureOr<linalg::CollapseResult> collapsed =
      linalg::collapseOpIterationDims(op, runs, rewriter);
  if (failed(collapsed))
    return op;
  rewriter.replaceOp(op, collapsed->results);
  return collapsed->collapsedOp;
}

struct TileContractionsPass
    : lazymlir::impl::TileContractionsPassBase<TileContractionsPass> {
  using Base::Base;

  /// Tiles of the first level, per loop of `op`: parallel loops only (the
  /// fill can be fused only if the reduction is not split).
  SmallVector<int64_t> parallelTiles(linalg::LinalgOp op) {
    SmallVector<int64_t> bounds = op.getStaticLoopRanges();
    SmallVector<unsigned> parallel;
    op.getParallelDims(parallel);
    SmallVector<int64_t> tiles(op.getNumLoops(), 0);
    for (auto [i, loop] : llvm::enumerate(parallel)) {
      size_t fromInner = parallel.size() - 1 - i;
      int64_t target = fromInner == 0 ? tileN : fromInner == 1 ? tileM : 1;
      tiles[loop] = fromInner == 0   ? vectorTile(bounds[loop])
                    : fromInner == 1 ? rowTile(bounds[loop])
                                     : pickTile(bounds[loop], target);
    }
    return tiles;
  }

  /// The tile of the innermost parallel loop, whose tiles are vectors: a
  /// divisor of the bound that is a whole number of 8-lane vectors (or the
  /// whole loop), else `tile-n`, and the last partial tile is peeled off
  /// (peelPartialTile). A divisor that is not (a vocabulary of 1000 gives
  /// 25) makes vectors of odd sizes: 60 GFLOP/s against 220 with the peel.
  int64_t vectorTile(int64_t bound) {
    if (ShapedType::isDynamic(bound))
      return tileN;
    if (bound <= static_cast<int64_t>(tileN))
      return bound;
    int64_t divisor = pickTile(bound, tileN);
    return divisor % 8 == 0 ? divisor : tileN;
  }

  /// The tile of the second-innermost parallel loop (the rows of a tile):
  /// a divisor of the bound, unless the largest is under half of `tile-m`
  /// (a 26-wide convolution output gives 2: each tile then does little
  /// work per load of the filter, 15 GFLOP/s); then `tile-m`, the partial
  /// tile peeled off.
  int64_t rowTile(int64_t bound) {
    if (ShapedType::isDynamic(bound))
      return tileM;
    int64_t divisor = pickTile(bound, tileM);
    return bound > static_cast<int64_t>(tileM) && 2 * divisor < tileM
               ? static_cast<int64_t>(tileM)
               : divisor;
  }

  /// Splits the two innermost tile loops of `loops` (the tiles' rows and
  /// vectors, the last two) whose step does not divide their range into
  /// full tiles and a last partial one, each of static shape once
  /// canonicalized (so that all vectorize). Returns whether it peeled.
  bool peelPartialTiles(RewriterBase &rewriter,
                        ArrayRef<LoopLikeOpInterface> loops) {
    bool peeled = false;
    for (size_t i = 0; i < std::min<size_t>(2, loops.size()); ++i)
      peeled |= lazymlir::peelPartialTile(
          rewriter, LoopLikeOpInterface(loops[loops.size() - 1 - i]));
    return peeled;
  }

  /// Whether tileReduction peeled a loop of a dynamic tile: the full steps'
  /// slices are then of static size, to be folded into static types.
  bool peeledTiles = false;

  SmallVector<int64_t> reductionTiles(linalg::LinalgOp op) {
    SmallVector<int64_t> bounds = op.getStaticLoopRanges();
    SmallVector<unsigned> reduction;
    op.getReductionDims(reduction);
    SmallVector<int64_t> tiles(op.getNumLoops(), 0);
    for (auto [i, loop] : llvm::enumerate(reduction))
      tiles[loop] =
          i + 1 == reduction.size() ? pickTile(bounds[loop], tileK) : 1;
    return tiles;
  }

  /// Options to tile an epilogue by `tiles` and fuse `contraction` and what
  /// initializes its accumulator (a fill, or an elementwise op such as a
  /// conv's bias broadcast) into the tiles: each output tile needs its own
  /// slice of the accumulator exactly once, so nothing is recomputed.
  /// Producers of the epilogue's other inputs are not fused: they could be
  /// read by several tiles.
  scf::SCFTileAndFuseOptions tileAndFuseOptions(linalg::LinalgOp contraction,
                                                ArrayRef<int64_t> tiles) {
    scf::SCFTileAndFuseOptions options;
    options.tilingOptions.setTileSizes(asFoldResults(&getContext(), tiles));
    options.tilingOptions.setLoopType(scf::SCFTilingOptions::LoopType::ForOp);
    Value accumulator = contraction.getDpsInitOperand(0)->get();
    Operation *fused = contraction.getOperation();
    options.setFusionControlFn(
        [accumulator, fused](tensor::ExtractSliceOp, OpResult producer, bool)
            -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
          Operation *owner = producer.getOwner();
          auto linalgOp = dyn_cast<linalg::LinalgOp>(owner);
          bool initializesAccumulator =
              producer == accumulator && linalgOp &&
              (isa<linalg::FillOp>(owner) || linalg::isElementwise(linalgOp));
          if (owner == fused || initializesAccumulator)
            return scf::SCFTileAndFuseOptions::ControlFnResult{};
          return std::nullopt;
        });
    return options;
  }

  /// Whether the tile loops visit the columns (the innermost parallel loop)
  /// outside the rows. Rows outside, each row of tiles reads all of B (the
  /// operand that does not depend on the rows) again: when B is larger than
  /// `stream-bytes`, it is not in the cache the next time and comes from
  /// memory for every row of tiles (ViT's 512x4112 @ 4112x2048 weight
  /// gradient, B 34 MB: 173 GFLOP/s against eager's 201, the step's
  /// largest kernel). Columns outside, B is read once, a column strip of
  /// tiles at a time, and A is read again for each strip instead: that
  /// pays when A is the smaller (B at most `stream-bytes`, or A larger,
  /// keeps the rows outside, as measured faster there).
  bool columnsOutside(linalg::LinalgOp op) {
    SmallVector<unsigned> parallel;
    op.getParallelDims(parallel);
    if (parallel.size() < 2)
      return false;
    unsigned rows = parallel[parallel.size() - 2], columns = parallel.back();
    std::optional<int64_t> aBytes, bBytes;
    for (OpOperand *input : op.getDpsInputOperands()) {
      auto type = dyn_cast<ShapedType>(input->get().getType());
      if (!type || !type.hasStaticShape() ||
          !type.getElementType().isIntOrFloat())
        return false;
      AffineMap map = op.getMatchingIndexingMap(input);
      int64_t bytes = type.getNumElements() *
                      llvm::divideCeil(type.getElementTypeBitWidth(), 8);
      bool byRows = map.isFunctionOfDim(rows);
      bool byColumns = map.isFunctionOfDim(columns);
      if (byRows && !byColumns)
        aBytes = bytes;
      else if (byColumns && !byRows)
        bBytes = bytes;
    }
    return aBytes && bBytes && *bBytes > streamBytes && *bBytes > *aBytes;
  }

  /// Tiles `contraction` (through its epilogue if it has one); returns the
  /// tiled contraction, or null if tiling failed (the op is then left as it
  /// was and lowers to loops).
  linalg::LinalgOp tileParallel(RewriterBase &rewriter,
                                linalg::LinalgOp contraction,
                                SmallVectorImpl<LoopLikeOpInterface> &loops) {
    SmallVector<int64_t> tiles = parallelTiles(contraction);
    linalg::GenericOp epilogue =
        fuseEpilogue ? findEpilogue(contraction) : nullptr;
    Operation *root = contraction;
    SmallVector<unsigned> parallel;
    contraction.getParallelDims(parallel);
    // The root's loops that hold the rows and the columns.
    unsigned rowLoop = 0, columnLoop = 0;
    if (parallel.size() >= 2) {
      rowLoop = parallel[parallel.size() - 2];
      columnLoop = parallel.back();
    }
    if (epilogue) {
      // The epilogue's loops are the contraction's parallel loops, in order.
      tiles = llvm::map_to_vector(parallel,
                                  [&](unsigned loop) { return tiles[loop]; });
      root = epilogue;
      rowLoop = parallel.size() - 2;
      columnLoop = parallel.size() - 1;
    }

    scf::SCFTileAndFuseOptions options = tileAndFuseOptions(contraction, tiles);
    if (columnsOutside(contraction)) {
      SmallVector<int64_t> order =
          llvm::to_vector(llvm::seq<int64_t>(0, tiles.size()));
      std::swap(order[rowLoop], order[columnLoop]);
      options.tilingOptions.setInterchange(order);
    }
    rewriter.setInsertionPoint(root);
    FailureOr<scf::SCFTileAndFuseResult> result =
        scf::tileConsumerAndFuseProducersUsingSCF(
            rewriter, cast<TilingInterface>(root), options);
    if (failed(result))
      return nullptr;
    // Tiles of parallel loops write disjoint parts of the result: marked
    // (with the contraction's size) for lazymlir-parallelize-tiles, which may
    // run them in parallel once buffers show what they share.
    lazymlir::finishParallelTiling(rewriter, root, *result, contraction);

    loops.assign(result->loops.begin(), result->loops.end());
    linalg::LinalgOp tiledContraction;
    for (Operation *op : result->tiledAndFusedOps) {
      auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
      if (!linalgOp)
        continue;
      op->setAttr(kVectorizeMarker, rewriter.getUnitAttr());
      if (isTiledKind(linalgOp))
        tiledContraction = linalgOp;
    }
    return tiledContraction;
  }

  /// Tiles `tile` by `tiles` (scf.for loops); returns the tiled op and its
  /// loops, or null.
  linalg::LinalgOp tileBy(RewriterBase &rewriter, linalg::LinalgOp tile,
                          ArrayRef<int64_t> tiles,
                          SmallVectorImpl<LoopLikeOpInterface> *loops) {
    scf::SCFTilingOptions options;
    options.setTileSizes(asFoldResults(&getContext(), tiles));
    options.setLoopType(scf::SCFTilingOptions::LoopType::ForOp);
    rewriter.setInsertionPoint(tile);
    FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(
        rewriter, cast<TilingInterface>(tile.getOperation()), options);
    if (failed(result))
      return nullptr;
    rewriter.replaceOp(tile, result->replacements);
    if (loops)
      loops->assign(result->loops.begin(), result->loops.end());
    auto inner = cast<linalg::LinalgOp>(result->tiledOps.front());
    inner->setAttr(kVectorizeMarker, rewriter.getUnitAttr());
    return inner;
  }

  /// Splits the reduction of a parallel tile; returns the innermost tile.
  /// A tile of a dynamic contraction may still have `?` sizes, the partial
  /// tiles of peeled tile loops; each is split so that almost every piece
  /// has a static shape and vectorizes: fewer than tile-m rows into single
  /// rows, fewer than tile-n columns into vectors of kRemainderLanes (the
  /// last fewer stay scalar), a dynamic reduction into full steps of tile-k
  /// and single steps for the rest.
  static constexpr int64_t kRemainderLanes = 8;
  linalg::LinalgOp tileReduction(RewriterBase &rewriter,
                                 linalg::LinalgOp tile) {
    SmallVector<int64_t> tiles = reductionTiles(tile);
    SmallVector<int64_t> bounds = tile.getStaticLoopRanges();
    SmallVector<unsigned> parallel, reduction;
    tile.getParallelDims(parallel);
    tile.getReductionDims(reduction);
    std::optional<unsigned> vectorDim;
    for (unsigned loop : parallel) {
      if (!ShapedType::isDynamic(bounds[loop]))
        continue;
      if (loop != parallel.back()) {
        tiles[loop] = 1;
      } else {
        tiles[loop] = kRemainderLanes;
        vectorDim = loop;
      }
    }
    if (llvm::all_of(tiles, [](int64_t t) { return t == 0; }))
      return tile;
    SmallVector<LoopLikeOpInterface> loops;
    linalg::LinalgOp inner = tileBy(rewriter, tile, tiles, &loops);
    if (!inner)
      return tile;
    // The loops, one per tiled dimension, in the order of the dimensions.
    auto loopOf = [&](unsigned dim) -> scf::ForOp {
      unsigned index = 0;
      for (unsigned d = 0; d < dim; ++d)
        index += tiles[d] != 0;
      if (tiles[dim] == 0 || index >= loops.size())
        return nullptr;
      return dyn_cast<scf::ForOp>(loops[index].getOperation());
    };
    // A dynamic reduction: full steps, then the rest in single steps.
    if (!reduction.empty() && ShapedType::isDynamic(bounds[reduction.back()]))
      if (scf::ForOp kLoop = loopOf(reduction.back())) {
        scf::ForOp partial;
        rewriter.setInsertionPoint(kLoop);
        if (succeeded(
                scf::peelForLoopAndSimplifyBounds(rewriter, kLoop, partial)) &&
            partial) {
          peeledTiles = true;
          linalg::LinalgOp rest;
          partial.walk([&](linalg::LinalgOp op) {
            if (isTiledKind(op))
              rest = op;
          });
          if (rest && rest.hasDynamicShape()) {
            SmallVector<int64_t> ones(rest.getNumLoops(), 0);
            ones[reduction.back()] = 1;
            tileBy(rewriter, rest, ones, nullptr);
          }
        }
      }
    // Fewer than tile-n columns: whole vectors, then the rest (scalar).
    if (vectorDim)
      if (scf::ForOp nLoop = loopOf(*vectorDim)) {
        scf::ForOp partial;
        rewriter.setInsertionPoint(nLoop);
        if (succeeded(
                scf::peelForLoopAndSimplifyBounds(rewriter, nLoop, partial))) {
          peeledTiles = true;
          // The last fewer than kRemainderLanes columns: vectorized with
          // masks (vectors of kRemainderLanes).
          if (partial)
            partial.walk([&](linalg::LinalgOp op) {
              if (isTiledKind(op))
                op->setAttr(kMaskedLanesMarker, rewriter.getUnitAttr());
            });
          // The sizes inside are min(lanes, columns - iv), composed with
          // the partial tile's own size (columns) so that upstream's
          // simplification does not see the loop's bound in them; in the
          // full iterations (iv + lanes <= columns) they are lanes.
          Value iv = nLoop.getInductionVar();
          nLoop.walk([&](affine::AffineMinOp min) {
            if (!llvm::is_contained(min.getOperands(), iv))
              return;
            for (AffineExpr result : min.getMap().getResults())
              if (auto c = dyn_cast<AffineConstantExpr>(result);
                  c && c.getValue() == kRemainderLanes) {
                rewriter.setInsertionPoint(min);
                rewriter.replaceOpWithNewOp<arith::ConstantIndexOp>(
                    min, kRemainderLanes);
                return;
              }
          });
        }
      }
    return inner;
  }

  /// A direct-conv tile has unit output height and filter window: rewrite
  /// it as the 1-D convolution the vectorizer handles.
  void downscaleConv(linalg::LinalgOp tile) {
    auto conv = dyn_cast<linalg::Conv2DNhwcHwcfOp>(tile.getOperation());
    if (!conv)
      return;
    PatternRewriter rewriter(&getContext());
    rewriter.setInsertionPoint(conv);
    linalg::DownscaleSizeOneWindowed2DConvolution<linalg::Conv2DNhwcHwcfOp,
                                                  linalg::Conv1DNwcWcfOp>
        downscale(&getContext());
    FailureOr<linalg::Conv1DNwcWcfOp> conv1d =
        downscale.returningMatchAndRewrite(conv, rewriter);
    if (succeeded(conv1d))
      (*conv1d)->setAttr(kVectorizeMarker, rewriter.getUnitAttr());
  }

  /// A convolution with `?` loops (a dynamic batch; the batch as the
  /// reduced channel of a weight gradient) gets those loops tiled so that
  /// its tiles are static convolutions, which im2col and the direct path
  /// handle; left whole, it lowered to scalar loops (a CNN's training step
  /// on a dynamic batch ran 15-20x slower than its static twin). A parallel
  /// `?` loop is tiled by 1 (a sample at a time) and may run in parallel,
  /// as the static conv's tiles do: each iteration writes its own slice.
  /// A reduced `?` loop accumulates, sequentially, in chunks of tile-k
  /// channels (one channel a step would leave each tile a K=1 contraction)
  /// and a remainder of single channels.
  void tileDynamicConvolutions(func::FuncOp func) {
    IRRewriter rewriter(func.getContext());
    auto dynamicConvs = [&] {
      SmallVector<linalg::LinalgOp> convs;
      func.walk([&](linalg::LinalgOp op) {
        if (!op.hasPureTensorSemantics() ||
            !linalg::isaConvolutionOpInterface(op))
          return;
        lazymlir::foldStaticInputCasts(op); // a full chunk's static slices
        if (op.hasDynamicShape())
          convs.push_back(op);
      });
      return convs;
    };
    for (bool chunks : {true, false}) {
      bool peeled = false;
      for (linalg::LinalgOp conv : dynamicConvs()) {
        SmallVector<utils::IteratorType> kinds = conv.getIteratorTypesArray();
        SmallVector<int64_t> tiles;
        for (auto [range, kind] :
             llvm::zip(conv.getStaticLoopRanges(), kinds)) {
          bool reduced = kind == utils::IteratorType::reduction;
          tiles.push_back(!ShapedType::isDynamic(range) ? 0
                          : chunks && reduced           ? int64_t(tileK)
                                                        : 1);
        }
        // Only parallel loops dynamic, and an elementwise epilogue (bias,
        // ReLU): tile the epilogue and fuse the convolution into it, so that
        // each sample's tiles below compute, finish and write their output
        // once, as a static convolution's do.
        bool reducedDynamic = llvm::any_of(llvm::enumerate(tiles), [&](auto t) {
          return t.value() &&
                 kinds[t.index()] == utils::IteratorType::reduction;
        });
        linalg::GenericOp epilogue =
            fuseEpilogue && !reducedDynamic ? findEpilogue(conv) : nullptr;
        if (epilogue) {
          SmallVector<unsigned> parallel;
          conv.getParallelDims(parallel);
          SmallVector<int64_t> epilogueTiles = llvm::map_to_vector(
              parallel, [&](unsigned loop) { return tiles[loop]; });
          rewriter.setInsertionPoint(epilogue);
          FailureOr<scf::SCFTileAndFuseResult> fusedTiles =
              scf::tileConsumerAndFuseProducersUsingSCF(
                  rewriter, cast<TilingInterface>(epilogue.getOperation()),
                  tileAndFuseOptions(conv, epilogueTiles));
          if (succeeded(fusedTiles)) {
            lazymlir::finishParallelTiling(rewriter, epilogue, *fusedTiles,
                                           conv); // unknown size: parallel
            rewriter.eraseOp(epilogue);
            // The tile loop's bound reads the old result's size: read it
            // from the accumulator (a destination has its result's shape).
            Value result = conv->getResult(0);
            for (Operation *user :
                 llvm::make_early_inc_range(result.getUsers()))
              if (auto dim = dyn_cast<tensor::DimOp>(user))
                rewriter.modifyOpInPlace(dim, [&] {
                  dim.getSourceMutable().assign(
                      conv.getDpsInitOperand(0)->get());
                });
            if (conv->use_empty())
              rewriter.eraseOp(conv);
            continue;
          }
        }
        SmallVector<LoopLikeOpInterface> loops;
        linalg::LinalgOp tile = tileBy(rewriter, conv, tiles, &loops);
        if (!tile)
          continue;
        tile->removeAttr(kVectorizeMarker); // tiled below like any conv
        auto loop = loops.begin();
        for (auto [dim, size] : llvm::enumerate(tiles)) {
          if (!size)
            continue;
          if (loop == loops.end())
            break;
          if (kinds[dim] == utils::IteratorType::parallel)
            (*loop)->setAttr(
                lazymlir::kParallelTilesAttr,
                rewriter.getI64IntegerAttr(lazymlir::kUnknownPoints));
          else if (size > 1) // full chunks of static shape, then the rest
            peeled |= lazymlir::peelPartialTile(rewriter, *loop);
          ++loop;
        }
      }
      if (peeled)
        lazymlir::foldPeeledTiles(func);
    }
  }

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    func::FuncOp func = getOperation();

    tileDynamicConvolutions(func);

    if (im2col) {
      // NCHW convolutions (channels-last off) take the matmul path.
      IRRewriter rewriter(ctx);
      SmallVector<linalg::Conv2DNchwFchwOp> convs;
      func.walk([&](linalg::Conv2DNchwFchwOp op) { convs.push_back(op); });
      for (linalg::Conv2DNchwFchwOp conv : convs) {
        rewriter.setInsertionPoint(conv);
        (void)linalg::rewriteInIm2Col(rewriter, conv);
      }
    }

    // im2col leaves the contraction in a collapsed space (n, f, oh*ow)
    // between reshapes; move the epilogue and the accumulator's producer
    // (the bias broadcast) into that space so they meet the contraction
    // directly and can be tiled with it.
    if (fuseEpilogue) {
      auto isContraction = [](Operation *op) {
        auto linalgOp = dyn_cast_or_null<linalg::LinalgOp>(op);
        return linalgOp && isTiledKind(linalgOp);
      };
      linalg::ControlFusionFn control = [&](OpOperand *operand) {
        if (auto expand = operand->get().getDefiningOp<tensor::ExpandShapeOp>())
          return isContraction(expand.getSrc().getDefiningOp());
        if (auto collapse =
                dyn_cast<tensor::CollapseShapeOp>(operand->getOwner()))
          return llvm::any_of(collapse->getUsers(), isContraction);
        return false;
      };
      RewritePatternSet patterns(ctx);
      linalg::populateFoldReshapeOpsByCollapsingPatterns(patterns, control);
      tensor::populateFoldTensorEmptyPatterns(patterns);
      (void)applyPatternsGreedily(func, std::move(patterns));
    }

    SmallVector<linalg::LinalgOp> contractions;
    func.walk([&](linalg::LinalgOp op) {
      if (isCandidate(op))
        contractions.push_back(op);
    });

    IRRewriter rewriter(ctx);
    for (linalg::LinalgOp &contraction : contractions)
      contraction = collapseIterationRuns(
          rewriter, contraction,
          /*parallelRuns=*/!(fuseEpilogue && findEpilogue(contraction)));
    bool peeled = false;
    for (linalg::LinalgOp contraction : contractions) {
      SmallVector<LoopLikeOpInterface> loops;
      linalg::LinalgOp tile = tileParallel(rewriter, contraction, loops);
      if (!tile)
        continue;
      tile->setAttr(kReductionMarker, rewriter.getUnitAttr());
      peeled |= peelPartialTiles(rewriter, loops);
    }
    if (peeled)
      lazymlir::foldPeeledTiles(func);
    // Each tile (two of a peeled loop) gets its reduction split.
    SmallVector<linalg::LinalgOp> tiles;
    func.walk([&](linalg::LinalgOp op) {
      if (op->removeAttr(kReductionMarker))
        tiles.push_back(op);
    });
    for (linalg::LinalgOp tile : tiles)
      downscaleConv(tileReduction(rewriter, tile));
    if (peeledTiles)
      lazymlir::foldPeeledTiles(func);

    // The originals are dead once their uses moved to the tile loops.
    {
      RewritePatternSet patterns(ctx);
      tensor::populateFoldTensorEmptyPatterns(patterns);
      linalg::populateEraseUnusedOperandsAndResultsPatterns(patterns);
      scf::ForOp::getCanonicalizationPatterns(patterns, ctx);
      tensor::ExtractSliceOp::getCanonicalizationPatterns(patterns, ctx);
      (void)applyPatternsGreedily(func, std::move(patterns));
    }

    SmallVector<std::pair<linalg::LinalgOp, SmallVector<int64_t>>> toVectorize;
    func.walk([&](linalg::LinalgOp op) {
      bool masked = op->removeAttr(kMaskedLanesMarker) != nullptr;
      if (!op->removeAttr(kVectorizeMarker))
        return;
      lazymlir::foldStaticInputCasts(op);
      if (!vectorize || touchesI1Memory(op))
        return;
      SmallVector<int64_t> sizes;
      if (op.hasDynamicShape()) {
        // Only the vector loop of a partial tile may be dynamic, with
        // fewer than kRemainderLanes iterations (kMaskedLanesMarker).
        SmallVector<unsigned> parallel;
        op.getParallelDims(parallel);
        sizes = op.getStaticLoopRanges();
        for (auto [loop, size] : llvm::enumerate(sizes)) {
          if (!ShapedType::isDynamic(size))
            continue;
          if (!masked || parallel.empty() || loop != parallel.back())
            return;
          size = kRemainderLanes;
        }
      }
      if (succeeded(linalg::vectorizeOpPrecondition(op, sizes)))
        toVectorize.push_back({op, sizes});
    });
    if (!vectorize)
      return;
    for (auto &[op, sizes] : toVectorize) {
      rewriter.setInsertionPoint(op);
      // Contractions go straight to vector.contract with their own indexing
      // maps, rather than through broadcasts and a multi-reduction that the
      // outer-product lowering would not recognize.
      FailureOr<linalg::VectorizationResult> result = linalg::vectorize(
          rewriter, op, /*inputVectorSizes=*/sizes, /*inputScalableVecDims=*/
          SmallVector<bool>(sizes.size(), false),
          /*vectorizeNDExtract=*/false, /*flatten1DDepthwiseConv=*/false,
          /*assumeDynamicDimsMatchVecSizes=*/false,
          /*createNamedContraction=*/true);
      if (succeeded(result))
        rewriter.replaceOp(op, result->replacements);
    }
    // Masked tiles (fewer than kRemainderLanes columns): the masked reads
    // pad the missing columns with 0 and the masked write stores only the
    // real ones, so the contraction itself needs no mask (the extra lanes'
    // sums are never stored); the reads and writes take their masks as
    // operands, which the transfer lowering turns into masked loads and
    // stores.
    {
      SmallVector<vector::MaskOp> masks;
      func.walk([&](vector::MaskOp mask) {
        if (isa_and_nonnull<vector::ContractionOp>(mask.getMaskableOp()) &&
            !mask.hasPassthru())
          masks.push_back(mask);
      });
      for (vector::MaskOp mask : masks) {
        rewriter.setInsertionPoint(mask);
        Operation *bare = rewriter.clone(*mask.getMaskableOp());
        rewriter.replaceOp(mask, bare->getResults());
      }
      RewritePatternSet maskLowering(ctx);
      vector::populateVectorMaskLoweringPatternsForSideEffectingOps(
          maskLowering);
      (void)applyPatternsGreedily(func, std::move(maskLowering));
    }

    RewritePatternSet patterns(ctx);
    vector::populateVectorTransferPermutationMapLoweringPatterns(patterns);
    vector::populateVectorReductionToContractPatterns(patterns);
    vector::populateSinkVectorOpsPatterns(patterns);
    vector::TransferReadOp::getCanonicalizationPatterns(patterns, ctx);
    vector::TransferWriteOp::getCanonicalizationPatterns(patterns, ctx);
    // The accumulator tile is read and written back on every step of the
    // reduction loop: carried as a vector instead, the epilogue reads the
    // vector the loop yields, not a scratch tile in memory (which would
    // also be shared by parallel tiles).
    lazymlir::carryVectorAccumulators(
        rewriter, func, FrozenRewritePatternSet(std::move(patterns)));
  }
};

} // namespace
