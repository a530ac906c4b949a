//===- OutlineKernels.cpp - one function per loop nest, named by content --===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

namespace lazymlir {
#define GEN_PASS_DEF_OUTLINEKERNELSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

constexpr StringLiteral kPlaceholder = "__lazymlir_kernel";
constexpr StringLiteral kPrefix = "__lazymlir_k_";

bool holdsLoop(Operation *op) {
  return op
      ->walk([](Operation *nested) {
        return isa<scf::ForOp, scf::ParallelOp, scf::WhileOp, scf::ForallOp>(
                   nested)
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      })
      .wasInterrupted();
}

/// The first 32 hex digits of the SHA-256 of `text`.
std::string contentHash(StringRef text) {
  std::array<uint8_t, 32> digest = llvm::SHA256::hash(ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(text.data()), text.size()));
  std::string hex;
  llvm::raw_string_ostream os(hex);
  for (size_t i = 0; i < 16; ++i)
    os << llvm::format_hex_no_prefix(digest[i], 2);
  return hex;
}

struct OutlineKernelsPass
    : lazymlir::impl::OutlineKernelsPassBase<OutlineKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto entryFunc = module.lookupSymbol<func::FuncOp>(entry);
    if (!entryFunc || entryFunc.isExternal())
      return;
    SmallVector<Operation *> nests;
    for (Operation &op : entryFunc.getBody().getOps())
      if (op.getNumRegions() && holdsLoop(&op))
        nests.push_back(&op);
    SymbolTable symbols(module);
    for (Operation *nest : nests)
      outline(nest, module, symbols);
  }

  void outline(Operation *nest, ModuleOp module, SymbolTable &symbols) {
    MLIRContext *ctx = nest->getContext();
    // Globals are read in the entry and passed: a kernel then names no
    // symbol of its graph, and the same loop nest over another graph's
    // constant is the same kernel.
    SmallVector<memref::GetGlobalOp> inner;
    nest->walk([&](memref::GetGlobalOp op) { inner.push_back(op); });
    for (memref::GetGlobalOp op : inner)
      op->moveBefore(nest);

    llvm::SetVector<Value> captured;
    for (Value operand : nest->getOperands())
      captured.insert(operand);
    llvm::SetVector<Value> above;
    getUsedValuesDefinedAbove(nest->getRegions(), above);
    captured.insert(above.begin(), above.end());

    SmallVector<Value> constants, arguments;
    for (Value value : captured) {
      Operation *def = value.getDefiningOp();
      if (def && def->hasTrait<OpTrait::ConstantLike>() &&
          def->getNumOperands() == 0 && def->getNumRegions() == 0)
        constants.push_back(value);
      else
        arguments.push_back(value);
    }

    OpBuilder b(ctx);
    auto type = b.getFunctionType(ValueRange(arguments).getTypes(),
                                  nest->getResultTypes());
    auto func = func::FuncOp::create(b, nest->getLoc(), kPlaceholder, type);
    func.setPrivate();
    Block *body = func.addEntryBlock();
    b.setInsertionPointToStart(body);
    IRMapping mapping;
    for (auto [value, argument] : llvm::zip(arguments, body->getArguments()))
      mapping.map(value, argument);
    for (Value value : constants)
      mapping.map(value, b.clone(*value.getDefiningOp())->getResult(0));
    Operation *clone = b.clone(*nest, mapping);
    func::ReturnOp::create(b, nest->getLoc(), clone->getResults());

    // Named by content: printed under the placeholder name (without
    // locations), hashed.
    std::string text;
    {
      llvm::raw_string_ostream os(text);
      func->print(os, OpPrintingFlags().useLocalScope());
    }
    std::string name = (kPrefix + contentHash(text)).str();
    if (symbols.lookup(name)) {
      func->erase(); // the same kernel, outlined before
    } else {
      func.setName(name);
      func->setAttr(lazymlir::kOutlinedKernelAttr, UnitAttr::get(ctx));
      symbols.insert(func);
    }

    // The call carries the locations of the whole nest (the frontend's
    // "aten.<op>" file locations when it kept them: the profiler's origins).
    SmallVector<Location> locations;
    nest->walk([&](Operation *op) { locations.push_back(op->getLoc()); });
    b.setInsertionPoint(nest);
    auto call = func::CallOp::create(b, FusedLoc::get(ctx, locations), name,
                                     nest->getResultTypes(), arguments);
    nest->replaceAllUsesWith(call.getResults());
    nest->erase();
  }
};

} // namespace
