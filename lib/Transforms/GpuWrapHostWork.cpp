//===- GpuWrapHostWork.cpp - host-side work into one-thread kernels -------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace lazymlir {
#define GEN_PASS_DEF_GPUWRAPHOSTWORKPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// Ops that end a run: the host does them between kernels, in order.
bool isOrderedHostStep(Operation *op) {
  if (isa<scf::ParallelOp, memref::DeallocOp, func::ReturnOp>(op))
    return true;
  if (auto copy = dyn_cast<memref::CopyOp>(op))
    return cast<MemRefType>(copy.getSource().getType())
               .getLayout()
               .isIdentity() &&
           cast<MemRefType>(copy.getTarget().getType())
               .getLayout()
               .isIdentity();
  return false;
}

/// Ops the host may do anywhere, reordered with a run: they only create
/// buffers or views, or compute on values.
bool isFreeHostOp(Operation *op) {
  return isa<memref::AllocOp, memref::GetGlobalOp, ViewLikeOpInterface>(op) ||
         isMemoryEffectFree(op);
}

struct GpuWrapHostWorkPass
    : lazymlir::impl::GpuWrapHostWorkPassBase<GpuWrapHostWorkPass> {
  void runOnOperation() override {
    for (Block &block : getOperation().getBody())
      wrapRuns(block);
  }

  void wrapRuns(Block &block) {
    SmallVector<Operation *> run;
    llvm::SmallPtrSet<Operation *, 16> inRun;
    auto flush = [&]() {
      if (!run.empty())
        wrap(run, inRun);
      run.clear();
      inRun.clear();
    };
    for (Operation &op : llvm::make_early_inc_range(block)) {
      bool dependsOnRun = llvm::any_of(op.getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return def && inRun.contains(def);
      });
      if (isOrderedHostStep(&op)) {
        flush();
        continue;
      }
      // Pure arithmetic on a run's values joins it; allocations and views
      // stay host steps (one on a run's value keeps the run on the host).
      bool joins = dependsOnRun && isMemoryEffectFree(&op) &&
                   !isa<ViewLikeOpInterface>(op);
      if (isFreeHostOp(&op) && !joins)
        continue;
      run.push_back(&op);
      inRun.insert(&op);
    }
    flush();
  }

  /// Moves `run` (in order) into a one-iteration scf.parallel placed where
  /// its last op was, unless a result is used outside it.
  void wrap(ArrayRef<Operation *> run,
            const llvm::SmallPtrSetImpl<Operation *> &inRun) {
    for (Operation *op : run)
      for (Operation *user : op->getUsers()) {
        Operation *ancestor = op->getBlock()->findAncestorOpInBlock(*user);
        if (!ancestor || !inRun.contains(ancestor)) {
          op->emitWarning("lazymlir: stays on the host (its result is used "
                          "outside the work moved into a kernel)");
          return;
        }
      }
    Operation *last = run.back();
    OpBuilder builder(last->getContext());
    builder.setInsertionPointAfter(last);
    Location loc = run.front()->getLoc();
    Value zero = arith::ConstantIndexOp::create(builder, loc, 0);
    Value one = arith::ConstantIndexOp::create(builder, loc, 1);
    auto loop = scf::ParallelOp::create(builder, loc, ValueRange{zero},
                                        ValueRange{one}, ValueRange{one});
    Operation *terminator = loop.getBody()->getTerminator();
    for (Operation *op : run)
      op->moveBefore(terminator);
  }
};

} // namespace
