//===- VerifyBackendContract.cpp - check linalg-on-tensors input ----------===//
//
// The runtime hands torch buffers to the entry function, so everything at that
// boundary must map onto a torch tensor. Rejecting other input here gives the
// user one clear diagnostic instead of an obscure failure in bufferization,
// in the LLVM lowering or, worse, a mismatched call at run time.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"

namespace lazymlir {
#define GEN_PASS_DEF_VERIFYBACKENDCONTRACTPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

bool isSupportedElementType(Type type) {
  if (isa<Float16Type, BFloat16Type, Float32Type, Float64Type>(type))
    return true;
  if (auto intType = dyn_cast<IntegerType>(type))
    return intType.isSignless() &&
           llvm::is_contained({1u, 8u, 16u, 32u, 64u}, intType.getWidth());
  return false;
}

/// Returns an explanation when `type` cannot cross the runtime boundary.
std::optional<std::string> boundaryProblem(Type type) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (!tensorType)
    return "must be a ranked tensor";
  if (!isSupportedElementType(tensorType.getElementType()))
    return "has an element type the runtime cannot map to a torch dtype";
  if (tensorType.getEncoding())
    return "must not carry a tensor encoding";
  return std::nullopt;
}

bool isTorchDialectType(Type type) {
  return type.getDialect().getNamespace() == "torch";
}

struct VerifyBackendContractPass
    : lazymlir::impl::VerifyBackendContractPassBase<VerifyBackendContractPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    bool failed = false;

    // Leftover torch-dialect values mean the frontend lowering stopped early;
    // MLIR 22 only parses them with unregistered dialects allowed, so check
    // defensively rather than assume the parser rejected them.
    module.walk([&](Operation *op) {
      // The runtime parses with unregistered dialects allowed, for
      // torch-mlir's TMTensor ops, which lazymlir-lower-tm-tensor rewrites
      // before this check; nothing else unregistered can be compiled.
      if (!op->getName().isRegistered()) {
        op->emitError("unregistered op '")
            << op->getName() << "' in the backend input: the backend "
            << "cannot compile it";
        failed = true;
        return;
      }
      if (llvm::any_of(op->getResultTypes(), isTorchDialectType) ||
          llvm::any_of(op->getOperandTypes(), isTorchDialectType)) {
        op->emitError("torch-dialect value in the backend input: the "
                      "frontend did not finish lowering to linalg");
        failed = true;
      }
    });

    auto func = module.lookupSymbol<func::FuncOp>(entry);
    if (!func) {
      module.emitError() << "entry function '" << entry << "' not found";
      return signalPassFailure();
    }
    if (func.isExternal()) {
      func.emitError() << "entry function '" << entry << "' has no body";
      return signalPassFailure();
    }
    if (!func.isPublic()) {
      func.emitError() << "entry function '" << entry << "' must be public";
      failed = true;
    }

    FunctionType fnType = func.getFunctionType();
    for (auto [index, type] : llvm::enumerate(fnType.getInputs())) {
      if (auto problem = boundaryProblem(type)) {
        func.emitError() << "argument #" << index << " of type " << type << " "
                         << *problem;
        failed = true;
      }
    }
    for (auto [index, type] : llvm::enumerate(fnType.getResults())) {
      if (auto problem = boundaryProblem(type)) {
        func.emitError() << "result #" << index << " of type " << type << " "
                         << *problem;
        failed = true;
      }
    }
    if (failed)
      signalPassFailure();
  }
};

} // namespace
