//===- ByteBoolAccesses.cpp - booleans loaded and stored as bytes ---------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

namespace lazymlir {
#define GEN_PASS_DEF_BYTEBOOLACCESSESPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// `type` with its i1 elements (or itself, if i1) as i8; null when `type`
/// holds no i1.
Type asBytes(Type type) {
  auto i8 = IntegerType::get(type.getContext(), 8);
  if (type.isInteger(1))
    return i8;
  if (auto vector = dyn_cast<VectorType>(type))
    if (vector.getElementType().isInteger(1))
      return vector.clone(i8);
  return nullptr;
}

struct ByteBoolAccessesPass
    : lazymlir::impl::ByteBoolAccessesPassBase<ByteBoolAccessesPass> {
  void runOnOperation() override {
    OpBuilder builder(&getContext());
    getOperation()->walk([&](Operation *op) {
      if (auto load = dyn_cast<LLVM::LoadOp>(op)) {
        Type bytes = asBytes(load.getType());
        if (!bytes)
          return;
        // The clone keeps the load's alignment, volatility and metadata.
        builder.setInsertionPointAfter(load);
        Operation *wide = builder.clone(*load);
        wide->getResult(0).setType(bytes);
        auto narrow = LLVM::TruncOp::create(builder, load.getLoc(),
                                            load.getType(), wide->getResult(0));
        load.getResult().replaceAllUsesWith(narrow.getResult());
        load.erase();
        return;
      }
      if (auto store = dyn_cast<LLVM::StoreOp>(op)) {
        Type bytes = asBytes(store.getValue().getType());
        if (!bytes)
          return;
        builder.setInsertionPoint(store);
        auto wide = LLVM::ZExtOp::create(builder, store.getLoc(), bytes,
                                         store.getValue());
        store.getValueMutable().assign(wide);
      }
    });
  }
};

} // namespace
