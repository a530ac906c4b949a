//===- InstrumentKernels.cpp - time each kernel call of the entry ---------===//
//
// The profiler's compile mode (lazymlir.profile()): every call of the entry
// to an outlined kernel is bracketed by calls into the runtime that read a
// clock, and the module records what each call site is (kernel, aten ops,
// operand shapes, bytes, estimated flops) for the profiler's table.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/CastInterfaces.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/Support/raw_ostream.h"

namespace lazymlir {
#define GEN_PASS_DEF_INSTRUMENTKERNELSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

constexpr StringLiteral kBegin = "__lazymlir_profile_begin";
constexpr StringLiteral kEnd = "__lazymlir_profile_end";

/// The trip count of a loop with constant bounds, 1 otherwise.
int64_t tripCount(Value lower, Value upper, Value step) {
  std::optional<int64_t> lb = getConstantIntValue(lower),
                         ub = getConstantIntValue(upper),
                         st = getConstantIntValue(step);
  if (!lb || !ub || !st || *st <= 0 || *ub <= *lb)
    return 1;
  return (*ub - *lb + *st - 1) / *st;
}

/// Iterations of the loops around `op` (inside `kernel`) with constant
/// bounds.
int64_t enclosingIterations(Operation *op, Operation *kernel) {
  int64_t count = 1;
  for (Operation *parent = op->getParentOp(); parent && parent != kernel;
       parent = parent->getParentOp()) {
    if (auto loop = dyn_cast<scf::ForOp>(parent)) {
      count *=
          tripCount(loop.getLowerBound(), loop.getUpperBound(), loop.getStep());
    } else if (auto loop = dyn_cast<scf::ParallelOp>(parent)) {
      for (auto [lb, ub, st] : llvm::zip(loop.getLowerBound(),
                                         loop.getUpperBound(), loop.getStep()))
        count *= tripCount(lb, ub, st);
    }
  }
  return count;
}

/// Floating-point operations of one execution of `op`: its vector lanes,
/// twice for a fused multiply-add, 0 for anything but float arithmetic.
int64_t flopsOf(Operation *op) {
  if (op->getNumResults() != 1)
    return 0;
  if (auto contract = dyn_cast<vector::ContractionOp>(op)) {
    // A multiply and an add per point of its iteration space.
    if (!isa<FloatType>(getElementTypeOrSelf(contract.getResultType())))
      return 0;
    SmallVector<int64_t> bounds;
    contract.getIterationBounds(bounds);
    int64_t points = 2;
    for (int64_t bound : bounds)
      points *= bound;
    return points;
  }
  Type type = op->getResult(0).getType();
  int64_t lanes = 1;
  if (auto vector = dyn_cast<VectorType>(type)) {
    lanes = vector.getNumElements();
    type = vector.getElementType();
  }
  if (!isa<FloatType>(type))
    return 0;
  if (isa<math::FmaOp, vector::FMAOp, vector::OuterProductOp>(op))
    return 2 * lanes;
  StringRef dialect = op->getDialect()->getNamespace();
  bool arithmetic = dialect == "math" ||
                    (dialect == "arith" && !isa<arith::ConstantOp>(op) &&
                     !isa<arith::SelectOp>(op) && op->getNumOperands() > 0 &&
                     !isa<CastOpInterface>(op));
  return arithmetic ? lanes : 0;
}

int64_t estimateFlops(func::FuncOp kernel) {
  int64_t total = 0;
  kernel.walk([&](Operation *op) {
    if (int64_t flops = flopsOf(op))
      total += flops * enclosingIterations(op, kernel);
  });
  return total;
}

/// The ops the frontend named in `loc`, in order, once each: the file names
/// "op:<name>" of its FileLineColLocs, without the prefix.
std::string originOps(Location loc) {
  llvm::SetVector<StringRef> names;
  loc->walk([&](Location nested) {
    if (auto file = dyn_cast<FileLineColLoc>(nested)) {
      StringRef name = file.getFilename().getValue();
      if (name.consume_front("op:"))
        names.insert(name);
    }
    return WalkResult::advance();
  });
  return llvm::join(names, ", ");
}

} // namespace

int64_t lazymlir::countOperandBytes(ValueRange operands) {
  int64_t bytes = 0;
  for (Value value : operands) {
    auto type = dyn_cast<MemRefType>(value.getType());
    if (!type || !type.hasStaticShape())
      continue;
    int64_t bits = type.getElementTypeBitWidth();
    bytes += type.getNumElements() * ((bits + 7) / 8);
  }
  return bytes;
}

std::string lazymlir::describeOperandShapes(ValueRange operands) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      operands.getTypes(), os,
      [&](Type type) {
        if (auto memref = dyn_cast<MemRefType>(type)) {
          // A dynamic (`?`) size prints as `?`, not as kDynamic.
          llvm::interleave(
              memref.getShape(), os,
              [&](int64_t size) {
                if (ShapedType::isDynamic(size))
                  os << "?";
                else
                  os << size;
              },
              "x");
          os << (memref.getRank() ? "x" : "") << memref.getElementType();
        } else {
          os << type;
        }
      },
      ", ");
  return text;
}

func::FuncOp lazymlir::declareRuntimeI64Function(ModuleOp module,
                                                 SymbolTable &symbols,
                                                 StringRef name) {
  if (auto existing = symbols.lookup<func::FuncOp>(name))
    return existing;
  OpBuilder b(module.getBodyRegion());
  b.setInsertionPointToEnd(module.getBody());
  auto func =
      func::FuncOp::create(b, module.getLoc(), name,
                           b.getFunctionType({b.getI64Type()}, /*results=*/{}));
  func.setPrivate();
  symbols.insert(func);
  return func;
}

namespace {

struct InstrumentKernelsPass
    : lazymlir::impl::InstrumentKernelsPassBase<InstrumentKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto entryFunc = module.lookupSymbol<func::FuncOp>(entry);
    if (!entryFunc || entryFunc.isExternal())
      return;
    SymbolTable symbols(module);
    SmallVector<std::pair<func::CallOp, func::FuncOp>> calls;
    entryFunc.walk([&](func::CallOp call) {
      auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
      // Outlined kernels, and the runtime GEMM's calls (lazymlir-gemm-calls
      // left what the table says of them on the call).
      if (callee && (callee->hasAttr(lazymlir::kOutlinedKernelAttr) ||
                     call->hasAttr(lazymlir::kGemmSiteAttr)))
        calls.emplace_back(call, callee);
    });
    func::FuncOp begin =
        lazymlir::declareRuntimeI64Function(module, symbols, kBegin);
    func::FuncOp end =
        lazymlir::declareRuntimeI64Function(module, symbols, kEnd);

    MLIRContext *ctx = module.getContext();
    llvm::DenseMap<Operation *, int64_t> flops;
    SmallVector<Attribute> sites;
    for (auto [index, pair] : llvm::enumerate(calls)) {
      auto [call, callee] = pair;
      auto [it, inserted] = flops.try_emplace(callee, 0);
      if (inserted && !callee.isExternal())
        it->second = estimateFlops(callee);
      OpBuilder b(call);
      Location loc = call.getLoc();
      Value site = arith::ConstantIntOp::create(b, loc, index, 64);
      func::CallOp::create(b, loc, begin, ValueRange{site});
      b.setInsertionPointAfter(call);
      func::CallOp::create(b, loc, end, ValueRange{site});

      Builder attrs(ctx);
      if (auto gemm =
              call->getAttrOfType<DictionaryAttr>(lazymlir::kGemmSiteAttr)) {
        sites.push_back(DictionaryAttr::get(
            ctx,
            {attrs.getNamedAttr("kernel",
                                attrs.getStringAttr(callee.getSymName())),
             attrs.getNamedAttr("ops", attrs.getStringAttr(originOps(loc))),
             attrs.getNamedAttr("shapes", gemm.get("shapes")),
             attrs.getNamedAttr("bytes", gemm.get("bytes")),
             attrs.getNamedAttr("flops", gemm.get("flops"))}));
        continue;
      }
      sites.push_back(DictionaryAttr::get(
          ctx,
          {attrs.getNamedAttr("kernel",
                              attrs.getStringAttr(callee.getSymName())),
           attrs.getNamedAttr("ops", attrs.getStringAttr(originOps(loc))),
           attrs.getNamedAttr(
               "shapes", attrs.getStringAttr(lazymlir::describeOperandShapes(
                             call.getOperands()))),
           attrs.getNamedAttr(
               "bytes", attrs.getI64IntegerAttr(
                            lazymlir::countOperandBytes(call.getOperands()))),
           attrs.getNamedAttr("flops", attrs.getI64IntegerAttr(it->second))}));
    }
    module->setAttr(lazymlir::kProfileSitesAttr, ArrayAttr::get(ctx, sites));
  }
};

} // namespace
