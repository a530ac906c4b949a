//===- CountKernels.cpp - kernels per compiled graph ----------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"

namespace lazymlir {
#define GEN_PASS_DEF_COUNTKERNELSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

struct CountKernelsPass
    : lazymlir::impl::CountKernelsPassBase<CountKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(entry);
    if (!func || func.isExternal())
      return;
    int64_t kernels = 0;
    for (Operation &op : func.getBody().getOps())
      if (isa<linalg::LinalgOp, scf::ForOp, scf::ForallOp>(op))
        ++kernels;
    module->setAttr(
        lazymlir::kKernelCountAttr,
        IntegerAttr::get(IntegerType::get(&getContext(), 64), kernels));
  }
};

} // namespace
