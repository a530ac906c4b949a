//===- PrivatizeTileScratch.cpp - one scratch tensor per parallel tile ----===//
//
// A tile loop marked for parallel execution (kParallelTilesAttr) must not
// share a scratch buffer between its iterations. tensor.empty is pure, so CSE
// merges an empty tensor inside a tile loop (extract_slice of a full-size
// empty folds to one of the tile's shape) with an identical one defined
// before the loop; one-shot bufferization then gives every iteration the one
// buffer allocated outside, and the threads running the iterations race on
// it (GPT-2: the position embeddings' broadcast buffer became every tile's
// layer-norm output). Each use inside such a loop of an empty tensor defined
// outside it gets its own clone, right before the user, so bufferization
// allocates per iteration.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/ParallelTiling.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace lazymlir {
#define GEN_PASS_DEF_PRIVATIZETILESCRATCHPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct PrivatizeTileScratchPass
    : lazymlir::impl::PrivatizeTileScratchPassBase<PrivatizeTileScratchPass> {
  void runOnOperation() override {
    getOperation().walk([](scf::ForOp loop) {
      if (!loop->hasAttr(lazymlir::kParallelTilesAttr))
        return;
      loop.getBody()->walk([&](Operation *user) {
        for (OpOperand &operand : user->getOpOperands()) {
          auto empty = operand.get().getDefiningOp<tensor::EmptyOp>();
          if (!empty || loop->isAncestor(empty))
            continue;
          OpBuilder b(user);
          operand.set(b.clone(*empty)->getResult(0));
        }
      });
    });
  }
};

} // namespace
