//===- ParallelTiling.h - tiling passes' contract with parallelize-tiles -===//
//
// lazymlir-tile-contractions, lazymlir-fuse-row-reductions and
// lazymlir-vectorize-transposes tile over parallel dimensions and mark the
// tile loops; lazymlir-parallelize-tiles runs marked loops in parallel when
// they are large and safe.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_TRANSFORMS_PARALLELTILING_H
#define LAZYMLIR_TRANSFORMS_PARALLELTILING_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/IR/PatternMatch.h"

#include <limits>

namespace lazymlir {

/// On the scf.for loops of tiles over parallel dimensions (of a contraction,
/// lazymlir-tile-contractions; of a row-reduced pass,
/// lazymlir-fuse-row-reductions; of a transposed elementwise op,
/// lazymlir-vectorize-transposes): the tiled op's iteration points (i64).
/// lazymlir-parallelize-tiles runs such loops in parallel when large and safe,
/// and removes the attribute.
inline constexpr llvm::StringLiteral kParallelTilesAttr =
    "lazymlir.parallel_tiles";

/// On the tile loops of lazymlir-fuse-row-reductions, beside
/// kParallelTilesAttr: lazymlir-prefetch-row-tiles fetches the next tile's
/// rows while this one computes, and removes the attribute.
inline constexpr llvm::StringLiteral kRowTilesAttr = "lazymlir.row_tiles";

/// The iteration points of an op with a dynamic (`?`) loop range, or too
/// many to count: the tile loops of such an op count as large (parallel when
/// threads > 1); their trip counts are only known at run time.
inline constexpr int64_t kUnknownPoints = std::numeric_limits<int64_t>::max();

/// The product of `op`'s loop ranges; kUnknownPoints when one is dynamic
/// (a kDynamic range is never multiplied in).
int64_t iterationPoints(mlir::linalg::LinalgOp op);

/// After tile-and-fuse of `root` over parallel dimensions: marks the tile
/// loops kParallelTilesAttr with `sized`'s iteration points and replaces
/// `root`'s results with the loops'.
void finishParallelTiling(mlir::RewriterBase &rewriter, mlir::Operation *root,
                          const mlir::scf::SCFTileAndFuseResult &result,
                          mlir::linalg::LinalgOp sized);

/// Splits a tile loop (scf.for) whose step does not divide its constant range,
/// or whose range is dynamic, into the full tiles and a last partial one
/// (upstream peelForLoopAndSimplifyBounds): the full tiles get static
/// shapes. Returns whether it peeled.
bool peelPartialTile(mlir::RewriterBase &rewriter,
                     mlir::LoopLikeOpInterface tileLoop);

/// After peeling: each partial tile's loop has one iteration; folds it away
/// so that its slices and ops get static shapes (the full tiles' already
/// have them) and can be vectorized.
void foldPeeledTiles(mlir::Operation *root);

/// Reads each input of `op` through a tensor.cast that only forgets static
/// sizes (slices of a peeled dynamic loop, canonicalized to static shapes)
/// from the cast's source instead, so that a tile of static shape has static
/// types and vectorizes.
void foldStaticInputCasts(mlir::linalg::LinalgOp op);

} // namespace lazymlir

#endif // LAZYMLIR_TRANSFORMS_PARALLELTILING_H
