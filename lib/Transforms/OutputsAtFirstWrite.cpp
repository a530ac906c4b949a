//===- OutputsAtFirstWrite.cpp - outputs paged in when first written ------===//
//
// lazymlir-outputs-at-first-write: the entry tells the runtime when it is
// about to write each of its out-parameters, which then gets its pages
// (Passes.td says why).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace lazymlir {
#define GEN_PASS_DEF_OUTPUTSATFIRSTWRITEPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

constexpr llvm::StringLiteral kResultAttr = "bufferize.result";
constexpr llvm::StringLiteral kReady = "lazymlir_output_ready";

/// The first op of `block` that touches `buffer`: uses it or a view of it
/// (a view op itself only names memory; its uses are followed). Null if
/// nothing does.
Operation *firstTouch(Block &block, Value buffer) {
  Operation *first = nullptr;
  SmallVector<Value> worklist{buffer};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      auto view = dyn_cast<ViewLikeOpInterface>(user);
      if (view && view.getViewSource() == value) {
        llvm::append_range(worklist, user->getResults());
        continue;
      }
      Operation *top = block.findAncestorOpInBlock(*user);
      if (top && (!first || top->isBeforeInBlock(first)))
        first = top;
    }
  }
  return first;
}

struct OutputsAtFirstWritePass
    : lazymlir::impl::OutputsAtFirstWritePassBase<OutputsAtFirstWritePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(entry);
    if (!func || func.isExternal())
      return;
    Block &body = func.getBody().front();
    SmallVector<std::pair<Value, Operation *>> outputs;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      if (!func.removeArgAttr(i, kResultAttr))
        continue;
      Value argument = func.getArgument(i);
      if (!isa<MemRefType>(argument.getType()))
        continue;
      if (Operation *first = firstTouch(body, argument))
        outputs.emplace_back(argument, first);
    }
    if (outputs.empty())
      return;

    SymbolTable symbols(module);
    func::FuncOp ready =
        lazymlir::declareRuntimeI64Function(module, symbols, kReady);
    OpBuilder b(module.getContext());
    for (auto [argument, first] : outputs) {
      b.setInsertionPoint(first);
      Location loc = first->getLoc();
      Value address =
          memref::ExtractAlignedPointerAsIndexOp::create(b, loc, argument);
      Value pointer =
          arith::IndexCastOp::create(b, loc, b.getI64Type(), address);
      func::CallOp::create(b, loc, ready, ValueRange{pointer});
    }
  }
};

} // namespace
