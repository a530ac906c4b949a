//===- EarlyDeallocs.cpp - free each buffer right after its last use ------===//
//
// See lazymlir-early-deallocs in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace lazymlir {
#define GEN_PASS_DEF_EARLYDEALLOCSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// The last op of `block` that uses `buffer` or any value computed from it
/// (forward through every result of every user and, for a user nested in a
/// region, of its ancestor in the block), other than `dealloc`: null if
/// none; failure if such a value leaves the block (a use outside it, or
/// the block's terminator).
FailureOr<Operation *> lastUse(Value buffer, Block &block, Operation *dealloc) {
  Operation *last = nullptr;
  SmallVector<Value> todo = {buffer};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!todo.empty()) {
    Value v = todo.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (user == dealloc || !seen.insert(user).second)
        continue;
      Operation *top = block.findAncestorOpInBlock(*user);
      if (!top || top == block.getTerminator())
        return failure();
      if (!last || last->isBeforeInBlock(top))
        last = top;
      for (Value result : user->getResults())
        todo.push_back(result);
      if (top != user)
        for (Value result : top->getResults())
          todo.push_back(result);
    }
  }
  return last;
}

struct EarlyDeallocsPass
    : lazymlir::impl::EarlyDeallocsPassBase<EarlyDeallocsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<memref::DeallocOp> deallocs;
    getOperation().walk([&](memref::DeallocOp op) { deallocs.push_back(op); });
    for (memref::DeallocOp dealloc : deallocs) {
      Block &block = *dealloc->getBlock();
      auto alloc = dealloc.getMemref().getDefiningOp<memref::AllocOp>();
      if (!alloc || alloc->getBlock() != &block)
        continue;
      FailureOr<Operation *> use = lastUse(alloc.getResult(), block, dealloc);
      if (failed(use))
        continue;
      Operation *last = *use;
      if (!last || !last->isBeforeInBlock(dealloc) ||
          last->getNextNode() == dealloc.getOperation())
        continue;
      dealloc->moveAfter(last);
    }
  }
};

} // namespace
