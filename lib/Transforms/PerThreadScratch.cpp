//===- PerThreadScratch.cpp - a parallel loop's scratch once per thread ---===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/IR/PatternMatch.h"

namespace lazymlir {
#define GEN_PASS_DEF_PERTHREADSCRATCHPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct PerThreadScratchPass
    : lazymlir::impl::PerThreadScratchPassBase<PerThreadScratchPass> {
  using Base::Base;

  /// The one dealloc of `alloc`, in its block, when every other use is
  /// inside that block too; null otherwise.
  static memref::DeallocOp soleDealloc(memref::AllocOp alloc) {
    memref::DeallocOp dealloc;
    Block *block = alloc->getBlock();
    for (Operation *user : alloc->getUsers()) {
      if (!block->findAncestorOpInBlock(*user))
        return nullptr;
      if (auto d = dyn_cast<memref::DeallocOp>(user)) {
        if (dealloc || d->getBlock() != block)
          return nullptr;
        dealloc = d;
      }
    }
    return dealloc;
  }

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    getOperation().walk([&](omp::WsloopOp loop) {
      auto parallel = dyn_cast<omp::ParallelOp>(loop->getParentOp());
      if (!parallel)
        return;
      // The body of each iteration: the loop nest's block, or the block of
      // the alloca scope convert-scf-to-openmp wraps it in.
      auto nest = dyn_cast<omp::LoopNestOp>(loop.getWrappedLoop());
      if (!nest)
        return;
      SmallVector<Block *> bodies = {&nest.getRegion().front()};
      for (auto scope :
           nest.getRegion().front().getOps<memref::AllocaScopeOp>())
        bodies.push_back(&scope.getBodyRegion().front());
      for (Block *body : bodies) {
        for (auto alloc :
             llvm::make_early_inc_range(body->getOps<memref::AllocOp>())) {
          if (!llvm::all_of(alloc->getOperands(), [&](Value v) {
                return !parallel->isAncestor(v.getParentBlock()->getParentOp());
              }))
            continue; // sizes computed inside the loop
          memref::DeallocOp dealloc = soleDealloc(alloc);
          if (!dealloc)
            continue;
          MemRefType type = alloc.getType();
          bool small =
              type.hasStaticShape() &&
              type.getNumElements() * type.getElementTypeBitWidth() / 8 <=
                  maxStackBytes;
          rewriter.setInsertionPoint(loop);
          if (small) {
            // omp.parallel is an automatic allocation scope: the stack
            // memory lives until its thread leaves the region.
            auto stack = memref::AllocaOp::create(
                rewriter, alloc.getLoc(), type, alloc.getDynamicSizes(),
                alloc.getSymbolOperands(), alloc.getAlignmentAttr());
            rewriter.replaceAllUsesWith(alloc.getResult(), stack.getResult());
            rewriter.eraseOp(dealloc);
            rewriter.eraseOp(alloc);
          } else {
            alloc->moveBefore(loop);
            dealloc->moveAfter(loop);
          }
        }
      }
    });
  }
};

} // namespace
