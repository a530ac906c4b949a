//===- ReadonlyArguments.cpp - never write into the caller's tensors ------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace lazymlir {
#define GEN_PASS_DEF_READONLYARGUMENTSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct ReadonlyArgumentsPass
    : lazymlir::impl::ReadonlyArgumentsPassBase<ReadonlyArgumentsPass> {
  using Base::Base;

  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>(entry);
    if (!func || func.isExternal())
      return;
    OpBuilder b(func);
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (isa<TensorType>(func.getArgument(i).getType()))
        func.setArgAttr(i,
                        bufferization::BufferizationDialect::kWritableAttrName,
                        b.getBoolAttr(false));
  }
};

} // namespace
