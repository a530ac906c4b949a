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
/// (forward through every result of every user, and the values nested ops
/// yield), other than `dealloc`; null if none.
Operation *lastUse(Value buffer, Block &block, Operation *dealloc) {
  Operation *last = nullptr;
  SmallVector<Value> todo = {buffer};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!todo.empty()) {
    Value v = todo.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (user == dealloc || !seen.insert(user).second)
        continue;
      Operation *top = block.findAncestorOpInBlock(*user);
      if (!top)
        continue; // used outside this block: handled by the caller's check
      if (!last || last->isBeforeInBlock(top))
        last = top;
      // What the user computes from the buffer (a view, an address) and,
      // for a user nested in a region, what its ancestor in the block
      // returns.
      for (Value result : user->getResults())
        todo.push_back(result);
      if (top != user)
        for (Value result : top->getResults())
          todo.push_back(result);
    }
  }
  return last;
}

/// Whether every use of `buffer` and of what is computed from it lies in
/// `block` (no value derived from it flows out of the block).
bool staysInBlock(Value buffer, Block &block) {
  SmallVector<Value> todo = {buffer};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!todo.empty()) {
    Value v = todo.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (!seen.insert(user).second)
        continue;
      Operation *top = block.findAncestorOpInBlock(*user);
      if (!top || (user->hasTrait<OpTrait::IsTerminator>() &&
                   user->getBlock() == &block))
        return false;
      for (Value result : user->getResults())
        todo.push_back(result);
      if (top != user)
        for (Value result : top->getResults())
          todo.push_back(result);
    }
  }
  return true;
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
      if (!alloc || alloc->getBlock() != &block ||
          !staysInBlock(alloc.getResult(), block))
        continue;
      Operation *last = lastUse(alloc.getResult(), block, dealloc);
      if (!last || !last->isBeforeInBlock(dealloc) ||
          last->getNextNode() == dealloc.getOperation())
        continue;
      dealloc->moveAfter(last);
    }
  }
};

} // namespace
