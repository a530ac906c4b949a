//===- GpuTileParallelLoops.cpp - scf.parallel into blocks of threads -----===//
//
// Built on upstream scf::tileParallelLoop; the tile shape is ours (see
// Passes.td).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

namespace lazymlir {
#define GEN_PASS_DEF_GPUTILEPARALLELLOOPSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct GpuTileParallelLoopsPass
    : lazymlir::impl::GpuTileParallelLoopsPassBase<GpuTileParallelLoopsPass> {
  using Base::Base;

  /// Threads per dimension of a block for `loop`, or none when a bound is
  /// not constant: innermost first, each dimension taking what the block
  /// has left.
  std::optional<SmallVector<int64_t>> blockShape(scf::ParallelOp loop) {
    SmallVector<int64_t> tiles(loop.getNumLoops(), 1);
    int64_t left = blockSize;
    for (int64_t dim = loop.getNumLoops() - 1; dim >= 0; --dim) {
      std::optional<int64_t> lower =
          getConstantIntValue(loop.getLowerBound()[dim]);
      std::optional<int64_t> upper =
          getConstantIntValue(loop.getUpperBound()[dim]);
      std::optional<int64_t> step = getConstantIntValue(loop.getStep()[dim]);
      if (!lower || !upper || !step || *step != 1)
        return std::nullopt;
      int64_t trip = std::max<int64_t>(1, *upper - *lower);
      tiles[dim] = std::min(trip, left);
      left = std::max<int64_t>(1, left / tiles[dim]);
    }
    return tiles;
  }

  void runOnOperation() override {
    if (blockSize < 1) {
      getOperation().emitError("lazymlir-gpu-tile-parallel-loops: block-size "
                               "must be positive, got ")
          << static_cast<int64_t>(blockSize);
      return signalPassFailure();
    }
    SmallVector<scf::ParallelOp> outermost;
    getOperation().walk([&](scf::ParallelOp loop) {
      if (!loop->getParentOfType<scf::ParallelOp>())
        outermost.push_back(loop);
    });
    for (scf::ParallelOp loop : outermost)
      if (std::optional<SmallVector<int64_t>> tiles = blockShape(loop))
        scf::tileParallelLoop(loop, *tiles, /*noMinMaxBounds=*/true);
  }
};

} // namespace
