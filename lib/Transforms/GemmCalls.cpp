//===- GemmCalls.cpp - float32 contractions as calls of the runtime GEMM --===//
//
// lazymlir-mark-gemms (MarkGemms.cpp: on tensors, before
// lazymlir-tile-contractions) marks the float32 contractions that the runtime's
// packed GEMM computes (lazymlir_sgemm_batched, lib/Runtime/Gemm.cpp: a
// micro-kernel and cache blocking chosen on the host at run time);
// lazymlir-gemm-calls (on memrefs, after bufferization) replaces each marked
// one by that call. Between them the marked op is left alone
// (lazymlir-tile-contractions skips it) and bufferizes as any linalg op: its
// init (a fill, a bias) is written into the result's buffer first and the call
// accumulates into it, as the op did; except a zero fill of all of that buffer
// right before the op, which the call makes redundant: it is erased and the
// call told to overwrite C.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/RuntimeGemm.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace lazymlir {
#define GEN_PASS_DEF_GEMMCALLSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

using lazymlir::kBf16ResultAttr;
using lazymlir::kGemmAttr;
constexpr StringLiteral kGemmFunction = "lazymlir_sgemm_batched";
constexpr StringLiteral kBf16GemmFunction = "lazymlir_bf16gemm_batched";
constexpr StringLiteral kBf16CGemmFunction = "lazymlir_bf16gemm_bf16c_batched";

/// The loops of a contraction by role: batch (in A, B and C), rows M (A and
/// C), columns N (B and C) and reduction K (A and B), each in loop order.
struct Roles {
  SmallVector<unsigned> batch, m, n, k;
};

/// The roles of `op`'s loops, if it is C += A x B with every loop in one of
/// them (maps that are projected permutations, no loop in one operand only).
std::optional<Roles> rolesOf(linalg::LinalgOp op, ArrayRef<AffineMap> maps) {
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 || maps.size() != 3)
    return std::nullopt;
  for (AffineMap map : maps)
    if (!map.isProjectedPermutation())
      return std::nullopt;
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  Roles roles;
  for (unsigned loop = 0; loop < op.getNumLoops(); ++loop) {
    bool inA = maps[0].isFunctionOfDim(loop);
    bool inB = maps[1].isFunctionOfDim(loop);
    bool inC = maps[2].isFunctionOfDim(loop);
    bool parallel = iterators[loop] == utils::IteratorType::parallel;
    if (parallel && inA && inB && inC)
      roles.batch.push_back(loop);
    else if (parallel && inA && !inB && inC)
      roles.m.push_back(loop);
    else if (parallel && !inA && inB && inC)
      roles.n.push_back(loop);
    else if (!parallel && inA && inB && !inC)
      roles.k.push_back(loop);
    else
      return std::nullopt;
  }
  if (roles.m.empty() || roles.n.empty() || roles.k.empty())
    return std::nullopt;
  return roles;
}

/// Where `loops` (in loop order) sit in the operand read through `map`: at
/// consecutive positions in that order (so that, in a buffer laid out row
/// by row, they read as one dimension), or not at all.
std::optional<SmallVector<unsigned>> positionsOf(AffineMap map,
                                                 ArrayRef<unsigned> loops) {
  SmallVector<unsigned> positions;
  for (unsigned loop : loops)
    for (auto [position, expr] : llvm::enumerate(map.getResults()))
      if (cast<AffineDimExpr>(expr).getPosition() == loop)
        positions.push_back(position);
  if (positions.empty())
    return positions;
  for (size_t i = 1; i < positions.size(); ++i)
    if (positions[i] != positions[i - 1] + 1)
      return std::nullopt;
  return positions;
}

bool isF32(Value value) {
  return getElementTypeOrSelf(value.getType()).isF32();
}

} // namespace

bool lazymlir::readsAsMatrices(linalg::LinalgOp op, ArrayRef<AffineMap> maps) {
  std::optional<Roles> roles = rolesOf(op, maps);
  if (!roles)
    return false;
  for (AffineMap map : maps)
    for (ArrayRef<unsigned> group :
         {ArrayRef<unsigned>(roles->batch), ArrayRef<unsigned>(roles->m),
          ArrayRef<unsigned>(roles->n), ArrayRef<unsigned>(roles->k)})
      if (!positionsOf(map, group))
        return false;
  return true;
}

bool lazymlir::isRuntimeGemm(linalg::LinalgOp op, ArrayRef<AffineMap> maps,
                             int64_t minSize, int64_t minWork) {
  if (!op.hasPureTensorSemantics() || !linalg::isaContractionOpInterface(op) ||
      !llvm::all_of(op->getOperands(), isF32) || !readsAsMatrices(op, maps))
    return false;
  std::optional<Roles> roles = rolesOf(op, maps);
  // Sizes known now must be large enough; a `?` role (rows of a ragged
  // batch, a growing sequence) is taken as large.
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  auto product = [&](ArrayRef<unsigned> loops) -> std::optional<int64_t> {
    int64_t size = 1;
    for (unsigned loop : loops) {
      if (ShapedType::isDynamic(ranges[loop]))
        return std::nullopt;
      size *= ranges[loop];
    }
    return size;
  };
  std::optional<int64_t> m = product(roles->m), n = product(roles->n),
                         k = product(roles->k);
  for (std::optional<int64_t> size : {m, n, k})
    if (size && *size < minSize)
      return false;
  return !(m && n && k && *m * *n * *k < minWork);
}

bool lazymlir::isRuntimeGemm(linalg::LinalgOp op, ArrayRef<AffineMap> maps) {
  MarkGemmsPassOptions defaults;
  return isRuntimeGemm(op, maps, defaults.minSize, defaults.minWork);
}

namespace {

/// One operand's view of a role: its element stride, when the role's
/// dimensions read as one (the outer ones' strides the inner ones' times
/// their sizes): a constant from a static layout, or, for a buffer laid out
/// row by row (identity layout) with `?` sizes, the innermost one's stride
/// read at run time (kDynamicStride); 0 for a role it lacks.
constexpr int64_t kDynamicStride = ShapedType::kDynamic;

std::optional<std::pair<int64_t, unsigned>>
roleStride(MemRefType type, AffineMap map, ArrayRef<unsigned> loops) {
  std::optional<SmallVector<unsigned>> positions = positionsOf(map, loops);
  if (!positions)
    return std::nullopt;
  if (positions->empty())
    return std::make_pair(int64_t(0), 0u);
  if (type.getLayout().isIdentity() && !type.hasStaticShape())
    return std::make_pair(kDynamicStride, positions->back());
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(type.getStridesAndOffset(strides, offset)))
    return std::nullopt;
  for (unsigned position : *positions)
    if (ShapedType::isDynamic(strides[position]) ||
        ShapedType::isDynamic(type.getDimSize(position)))
      return std::nullopt;
  for (size_t i = 0; i + 1 < positions->size(); ++i) {
    unsigned outer = (*positions)[i], inner = (*positions)[i + 1];
    if (strides[outer] != strides[inner] * type.getDimSize(inner))
      return std::nullopt;
  }
  return std::make_pair(strides[positions->back()], positions->back());
}

/// The buffer `value` views all of (through reshapes and casts).
Value wholeBuffer(Value value) {
  while (Operation *def = value.getDefiningOp()) {
    if (!isa<memref::ExpandShapeOp, memref::CollapseShapeOp, memref::CastOp>(
            def))
      break;
    value = def->getOperand(0);
  }
  return value;
}

/// The +0.0 fill of all of the buffer `c` views, with nothing that touches
/// memory between it and `op`: the product overwrites every element, so a
/// call that writes C instead of adding to it makes the fill redundant.
linalg::FillOp zeroFillBefore(Operation *op, Value c) {
  Value buffer = wholeBuffer(c);
  for (Operation *prev = op->getPrevNode(); prev; prev = prev->getPrevNode()) {
    if (auto fill = dyn_cast<linalg::FillOp>(prev))
      return fill.hasPureBufferSemantics() &&
                     wholeBuffer(fill.getOutputs()[0]) == buffer &&
                     matchPattern(fill.getInputs()[0], m_PosZeroFloat())
                 ? fill
                 : linalg::FillOp();
    if (!isMemoryEffectFree(prev))
      return {};
  }
  return {};
}

struct GemmCallsPass : lazymlir::impl::GemmCallsPassBase<GemmCallsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<linalg::LinalgOp> marked;
    module.walk([&](linalg::LinalgOp op) {
      if (op->hasAttr(kGemmAttr))
        marked.push_back(op);
    });
    if (marked.empty())
      return;
    MLIRContext *ctx = module.getContext();
    OpBuilder builder(ctx);
    Type i64 = builder.getI64Type();
    auto declare = [&](StringRef name) {
      auto callee = module.lookupSymbol<func::FuncOp>(name);
      if (!callee) {
        OpBuilder::InsertionGuard guard(builder);
        builder.setInsertionPointToStart(module.getBody());
        callee = func::FuncOp::create(
            builder, module.getLoc(), name,
            builder.getFunctionType(SmallVector<Type>(18, i64), {}));
        callee.setPrivate();
      }
      return callee;
    };
    for (linalg::LinalgOp op : marked) {
      op->removeAttr(kGemmAttr);
      // A bf16 result rounds once in the runtime GEMM, at every step in the
      // op's own loops: never left to them.
      bool bf16Result = op->hasAttr(kBf16ResultAttr);
      op->removeAttr(kBf16ResultAttr);
      auto leave = [&](StringRef why) {
        if (!bf16Result) {
          op->emitRemark("lazymlir-gemm-calls: ") << why;
          return;
        }
        op->emitError("lazymlir-gemm-calls: a product with a bf16 result "
                      "cannot be left to its loops: ")
            << why;
        signalPassFailure();
      };
      if (!op.hasPureBufferSemantics()) {
        leave("not bufferized; left as is");
        continue;
      }
      if (!isa<func::FuncOp>(op->getParentOp())) {
        // Moved into a loop since it was marked: a call per iteration could
        // run inside a parallel loop's scope. Loops, slow but right.
        leave("inside a loop; left to the loops");
        continue;
      }
      std::optional<Roles> roles = rolesOf(op, op.getIndexingMapsArray());
      SmallVector<Value> operands = {op.getDpsInputOperand(0)->get(),
                                     op.getDpsInputOperand(1)->get(),
                                     op.getDpsInitOperand(0)->get()};
      SmallVector<AffineMap> maps = op.getIndexingMapsArray();
      // Per operand: the strides of batch, the row role and the column role
      // (A: M, K; B: K, N; C: M, N).
      SmallVector<std::array<std::pair<int64_t, unsigned>, 3>> strides;
      bool ok = roles.has_value();
      for (unsigned i = 0; ok && i < 3; ++i) {
        auto type = cast<MemRefType>(operands[i].getType());
        ArrayRef<unsigned> rows = i == 1 ? roles->k : roles->m;
        ArrayRef<unsigned> columns = i == 0 ? roles->k : roles->n;
        auto batch = roleStride(type, maps[i], roles->batch),
             row = roleStride(type, maps[i], rows),
             column = roleStride(type, maps[i], columns);
        ok = batch && row && column;
        if (ok)
          strides.push_back({*batch, *row, *column});
      }
      if (!ok) {
        // Loops (lazymlir-lower-to-loops): slow, never wrong.
        leave("an operand's layout does not read as a matrix; left to the "
              "loops");
        continue;
      }
      // A and B in bf16 (lazymlir-mark-gemms' bf16-operands), C in float32
      // (or, marked kBf16ResultAttr, bf16): the bf16 GEMM; else all three
      // float32.
      auto elementOf = [](Value v) {
        return getElementTypeOrSelf(v.getType());
      };
      bool bf16 = elementOf(operands[0]).isBF16() &&
                  elementOf(operands[1]).isBF16() &&
                  (bf16Result ? elementOf(operands[2]).isBF16()
                              : elementOf(operands[2]).isF32());
      if (!bf16 && (bf16Result || !llvm::all_of(operands, [&](Value v) {
                      return elementOf(v).isF32();
                    }))) {
        leave("operands neither all float32 nor bf16 x bf16 -> float32; left "
              "to the loops");
        continue;
      }
      func::FuncOp callee = declare(bf16Result ? kBf16CGemmFunction
                                    : bf16     ? kBf16GemmFunction
                                               : kGemmFunction);
      linalg::FillOp zeroFill = zeroFillBefore(op, operands[2]);
      builder.setInsertionPoint(op);
      Location loc = op.getLoc();
      auto constant = [&](int64_t value) -> Value {
        return arith::ConstantIntOp::create(builder, loc, i64, value);
      };
      auto toI64 = [&](Value index) -> Value {
        return arith::IndexCastOp::create(builder, loc, i64, index);
      };
      // Each role's size: the product of its loops' (`?` ones read from
      // the buffers).
      SmallVector<Range> ranges = op.createLoopRanges(builder, loc);
      auto product = [&](ArrayRef<unsigned> loops) -> Value {
        Value size = arith::ConstantIndexOp::create(builder, loc, 1);
        for (unsigned loop : loops)
          size = arith::MulIOp::create(
              builder, loc, size,
              getValueOrCreateConstantIndexOp(builder, loc, ranges[loop].size));
        return toI64(size);
      };
      SmallVector<Value> args = {product(roles->batch), product(roles->m),
                                 product(roles->n), product(roles->k)};
      for (unsigned i = 0; i < 3; ++i) {
        Value buffer = operands[i];
        auto type = cast<MemRefType>(buffer.getType());
        auto metadata =
            memref::ExtractStridedMetadataOp::create(builder, loc, buffer);
        // The address of the operand's first element.
        Value base = memref::ExtractAlignedPointerAsIndexOp::create(
            builder, loc, buffer);
        Value bytes = arith::MulIOp::create(
            builder, loc, metadata.getOffset(),
            arith::ConstantIndexOp::create(builder, loc,
                                           type.getElementTypeBitWidth() / 8));
        args.push_back(toI64(arith::AddIOp::create(builder, loc, base, bytes)));
        for (auto [stride, position] : strides[i])
          args.push_back(stride == kDynamicStride
                             ? toI64(metadata.getStrides()[position])
                             : constant(stride));
      }
      args.push_back(constant(threads));
      args.push_back(constant(zeroFill ? 0 : 1));
      auto call = func::CallOp::create(builder, loc, callee, args);
      if (zeroFill)
        zeroFill->erase();
      // What the profiler's table says of this call (instrument-kernels):
      // the operands' shapes, their bytes and the flops when static.
      SmallVector<int64_t> loopRanges = op.getStaticLoopRanges();
      int64_t flops = 2;
      for (int64_t size : loopRanges)
        flops = ShapedType::isDynamic(size) || flops == 0 ? 0 : flops * size;
      call->setAttr(
          lazymlir::kGemmSiteAttr,
          builder.getDictionaryAttr(
              {builder.getNamedAttr(
                   "shapes", builder.getStringAttr(
                                 lazymlir::describeOperandShapes(operands))),
               builder.getNamedAttr("bytes",
                                    builder.getI64IntegerAttr(
                                        lazymlir::countOperandBytes(operands))),
               builder.getNamedAttr("flops",
                                    builder.getI64IntegerAttr(flops))}));
      op->erase();
    }
  }
};

} // namespace
