//===- PrefetchRowTiles.cpp - fetch the next row tile while this one computes //

#include "lazymlir/Transforms/ParallelTiling.h"
#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace lazymlir {
#define GEN_PASS_DEF_PREFETCHROWTILESPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// Vector loads narrower than this many bytes are not given a prefetch each
/// (one per cache line is enough).
constexpr int64_t kMinVectorBytes = 32;

struct PrefetchRowTilesPass
    : lazymlir::impl::PrefetchRowTilesPassBase<PrefetchRowTilesPass> {
  using Base::Base;

  void runOnOperation() override {
    if (locality > 3) {
      getOperation().emitError("lazymlir-prefetch-row-tiles: locality must be "
                               "-1 (no prefetches) or 0-3, not ")
          << static_cast<int64_t>(locality);
      return signalPassFailure();
    }
    SmallVector<scf::ForOp> tiles;
    getOperation().walk([&](scf::ForOp loop) {
      if (loop->hasAttr(lazymlir::kRowTilesAttr))
        tiles.push_back(loop);
    });
    for (scf::ForOp tile : tiles) {
      if (locality >= 0)
        prefetchNextTile(tile, locality);
      tile->removeAttr(lazymlir::kRowTilesAttr);
    }
  }

  /// The slices `tile` takes of buffers defined outside it, one tile of rows
  /// each: subview %buffer[%iv, o1, ...] [step, s1, ...] [1, ...].
  static llvm::DenseMap<Value, memref::SubViewOp> tileSlices(scf::ForOp tile,
                                                             int64_t step) {
    llvm::DenseMap<Value, memref::SubViewOp> slices;
    Value iv = tile.getInductionVar();
    for (auto slice : tile.getBody()->getOps<memref::SubViewOp>()) {
      if (!tile.isDefinedOutsideOfLoop(slice.getSource()) ||
          slice.getSourceType().getRank() != slice.getType().getRank() ||
          slice.getSourceType().getRank() < 2)
        continue;
      SmallVector<OpFoldResult> offsets = slice.getMixedOffsets();
      auto first = dyn_cast<Value>(offsets.front());
      if (first != iv || getConstantIntValue(slice.getMixedSizes().front()) !=
                             std::optional<int64_t>(step))
        continue;
      if (!llvm::all_of(slice.getMixedStrides(), [](OpFoldResult s) {
            return isConstantIntValue(s, 1);
          }))
        continue;
      slices[slice.getResult()] = slice;
    }
    return slices;
  }

  void prefetchNextTile(scf::ForOp tile, int64_t hint) {
    std::optional<int64_t> step = getConstantIntValue(tile.getStep());
    if (!step)
      return;
    llvm::DenseMap<Value, memref::SubViewOp> slices = tileSlices(tile, *step);
    if (slices.empty())
      return;
    // The tile's last pass that reads a slice by vectors: it runs while the
    // next tile is wanted soonest, and computes the most per byte.
    Operation *last = nullptr;
    for (Operation &op : llvm::reverse(tile.getBody()->without_terminator())) {
      bool reads = false;
      op.walk([&](vector::LoadOp load) {
        reads |= slices.contains(load.getBase());
      });
      if (reads) {
        last = &op;
        break;
      }
    }
    if (!last)
      return;
    SmallVector<vector::LoadOp> loads;
    last->walk([&](vector::LoadOp load) {
      VectorType type = load.getVectorType();
      if (slices.contains(load.getBase()) && type.getRank() == 1 &&
          type.getNumElements() * type.getElementTypeBitWidth() / 8 >=
              kMinVectorBytes)
        loads.push_back(load);
    });
    Value iv = tile.getInductionVar();
    for (vector::LoadOp load : loads) {
      memref::SubViewOp slice = slices.lookup(load.getBase());
      OpBuilder b(load);
      Location loc = load.getLoc();
      Value source = slice.getSource();
      SmallVector<Value> indices;
      // The same row of the next tile; the last tile fetches its own last
      // rows again (never past the buffer).
      Value next = arith::AddIOp::create(
          b, loc, iv, arith::ConstantIndexOp::create(b, loc, *step));
      Value row = arith::AddIOp::create(b, loc, next, load.getIndices()[0]);
      Value rows = memref::DimOp::create(b, loc, source, 0);
      Value lastRow = arith::SubIOp::create(
          b, loc, rows, arith::ConstantIndexOp::create(b, loc, 1));
      indices.push_back(arith::MinUIOp::create(b, loc, row, lastRow));
      // The other dimensions: the element the load reads. (The offsets are
      // a local: a range-for keeps only its outermost temporary alive, and
      // drop_begin of getMixedOffsets()'s vector read it after its end.)
      SmallVector<OpFoldResult> offsets = slice.getMixedOffsets();
      for (auto [offset, index] : llvm::zip_equal(
               llvm::drop_begin(offsets), llvm::drop_begin(load.getIndices())))
        indices.push_back(arith::AddIOp::create(
            b, loc, getValueOrCreateConstantIndexOp(b, loc, offset), index));
      memref::PrefetchOp::create(b, loc, source, indices, /*isWrite=*/false,
                                 static_cast<uint32_t>(hint),
                                 /*isDataCache=*/true);
    }
  }
};

} // namespace
