//===- NoaliasAllocations.cpp - allocation results do not alias ----------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

namespace lazymlir {
#define GEN_PASS_DEF_NOALIASALLOCATIONSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

// The functions finalize-memref-to-llvm (use-generic-functions) calls for
// temporaries; the runtime binds them to its buffer pool (KernelJit.cpp).
constexpr llvm::StringLiteral kAllocators[] = {
    "_mlir_memref_to_llvm_aligned_alloc", "_mlir_memref_to_llvm_alloc"};

struct NoaliasAllocationsPass
    : lazymlir::impl::NoaliasAllocationsPassBase<NoaliasAllocationsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder builder(&getContext());
    for (llvm::StringLiteral name : kAllocators) {
      auto func = module.lookupSymbol<LLVM::LLVMFuncOp>(name);
      if (!func)
        continue;
      if (func.getNumResults() != 1 ||
          !isa<LLVM::LLVMPointerType>(func.getResultTypes()[0])) {
        func.emitError("an allocation function that does not return a "
                       "pointer");
        return signalPassFailure();
      }
      func.setResultAttr(0, LLVM::LLVMDialect::getNoAliasAttrName(),
                         builder.getUnitAttr());
    }
  }
};

} // namespace
