//===- GuardRuntimeChecks.cpp - no out-of-bounds access, no trap ----------===//
//
// Data-dependent indices are kept in bounds and integer divisors away from
// 0 (and from -1 under INT_MIN); a violation sets the module's check flag
// (@__lazymlir_check_failed), which the runtime reads after each run,
// instead of aborting (cf.assert), trapping (idiv) or reading foreign
// memory.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace lazymlir {
#define GEN_PASS_DEF_GUARDRUNTIMECHECKSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

constexpr StringLiteral kFlagName = "__lazymlir_check_failed";

/// Whether an index value depends on data read at run time. Constants,
/// linalg.index, dims and pure scalar arithmetic on them do not; block
/// arguments bound to operands (linalg bodies, function arguments, loop
/// iteration arguments), values read from tensors or memory, and anything
/// unknown do. Loop induction variables depend on data iff their bounds do.
class DataDependence {
public:
  bool operator()(Value value) { return depends(value, 0); }

private:
  // Past this depth a value is assumed data-dependent: a needless check
  // costs a compare, never a wrong answer.
  static constexpr unsigned kMaxDepth = 64;
  llvm::DenseMap<Value, bool> memo;

  bool depends(Value value, unsigned depth) {
    if (depth > kMaxDepth)
      return true;
    auto it = memo.find(value);
    if (it != memo.end())
      return it->second;
    memo[value] = true; // cycles (loop-carried values) are data
    bool result = compute(value, depth);
    memo[value] = result;
    return result;
  }

  bool compute(Value value, unsigned depth) {
    if (auto argument = dyn_cast<BlockArgument>(value)) {
      Operation *owner = argument.getOwner()->getParentOp();
      if (auto loop = dyn_cast_or_null<scf::ForOp>(owner);
          loop && argument == loop.getInductionVar())
        return depends(loop.getLowerBound(), depth + 1) ||
               depends(loop.getUpperBound(), depth + 1) ||
               depends(loop.getStep(), depth + 1);
      if (auto loop = dyn_cast_or_null<scf::ParallelOp>(owner);
          loop && argument.getArgNumber() < loop.getNumLoops()) {
        for (Value bound : llvm::concat<Value>(
                 loop.getLowerBound(), loop.getUpperBound(), loop.getStep()))
          if (depends(bound, depth + 1))
            return true;
        return false;
      }
      if (auto loop = dyn_cast_or_null<affine::AffineForOp>(owner);
          loop && argument == loop.getInductionVar())
        return llvm::any_of(loop->getOperands(), [&](Value operand) {
          return depends(operand, depth + 1);
        });
      return true;
    }
    Operation *op = value.getDefiningOp();
    if (op->hasTrait<OpTrait::ConstantLike>() ||
        isa<linalg::IndexOp, tensor::DimOp, memref::DimOp>(op))
      return false;
    if (op->getNumRegions() || !isMemoryEffectFree(op) ||
        isa<tensor::ExtractOp>(op))
      return true;
    for (Value operand : op->getOperands()) {
      if (isa<ShapedType>(operand.getType()) || depends(operand, depth + 1))
        return true;
    }
    return false;
  }
};

/// Records failed checks in the module's flag. A check inside a
/// linalg.generic body that depends on one input element alone (and on
/// values from above) is hoisted (a divisor's only when the divisor is
/// broadcast along some loop dimension): one reduction over that input ORs
/// it for every element before the op runs, and the flag is set after it.
/// The body then keeps its clamps (selects) but no branch or store, so it
/// still vectorizes (a conditional store of the flag in the innermost loop
/// kept LLVM from vectorizing x[idx]'s row copies: 3x slower). Other checks
/// set the flag in place.
class Guard {
public:
  explicit Guard(ModuleOp module) : module(module) {}

  /// Sets the flag when `failed` (computed at the builder's point) holds.
  /// `onlyBroadcast`: hoist only the checks of an input read more than once
  /// per element.
  void check(OpBuilder &b, Location loc, Value failed,
             bool onlyBroadcast = false) {
    auto generic = dyn_cast_or_null<linalg::GenericOp>(
        b.getInsertionBlock()->getParentOp());
    if (generic) {
      if (std::optional<unsigned> input =
              hoistableInput(generic, failed, onlyBroadcast)) {
        hoisted[generic.getOperation()][*input].push_back(failed);
        return;
      }
    }
    setFlagIf(b, loc, failed);
  }

  /// Builds the hoisted checks' reductions and adds the flag's global if a
  /// check was inserted.
  void finish() {
    for (auto &[op, inputs] : hoisted)
      for (auto &[input, failures] : inputs)
        buildReduction(cast<linalg::GenericOp>(op), input, failures);
    if (!used || module.lookupSymbol(kFlagName))
      return;
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    auto tensorType = RankedTensorType::get({}, b.getI32Type());
    memref::GlobalOp::create(
        b, module.getLoc(), kFlagName, /*sym_visibility=*/StringAttr(),
        flagType(), DenseElementsAttr::get(tensorType, b.getI32IntegerAttr(0)),
        /*constant=*/false, /*alignment=*/IntegerAttr());
  }

private:
  /// `if (failed) *@__lazymlir_check_failed = 1` at the builder's point.
  void setFlagIf(OpBuilder &b, Location loc, Value failed) {
    used = true;
    auto branch = scf::IfOp::create(b, loc, failed, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    Value flag = memref::GetGlobalOp::create(b, loc, flagType(), kFlagName);
    Value one = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(1));
    memref::StoreOp::create(b, loc, one, flag, ValueRange{});
  }

  /// The ops of `generic`'s body that compute `value` from block arguments;
  /// fails on anything but pure scalar ops of the body block.
  static LogicalResult
  slice(linalg::GenericOp generic, Value value,
        llvm::SetVector<Operation *> &ops,
        llvm::SmallSetVector<BlockArgument, 2> &arguments) {
    Block *body = generic.getBody();
    SmallVector<Value> worklist = {value};
    llvm::DenseSet<Value> seen;
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      if (!seen.insert(v).second)
        continue;
      if (auto argument = dyn_cast<BlockArgument>(v)) {
        if (argument.getOwner() != body)
          return failure();
        arguments.insert(argument);
        continue;
      }
      Operation *def = v.getDefiningOp();
      if (!generic->isProperAncestor(def))
        continue; // from above: the same for every element
      if (def->getBlock() != body || def->getNumRegions() ||
          !isMemoryEffectFree(def) ||
          isa<linalg::IndexOp, tensor::ExtractOp>(def))
        return failure();
      ops.insert(def);
      llvm::append_range(worklist, def->getOperands());
    }
    return success();
  }

  /// The input whose element alone decides `condition`, if every element of
  /// that input is read by `generic` (so that checking them all checks
  /// exactly what the op reads).
  static std::optional<unsigned> hoistableInput(linalg::GenericOp generic,
                                                Value condition,
                                                bool onlyBroadcast) {
    llvm::SetVector<Operation *> ops;
    llvm::SmallSetVector<BlockArgument, 2> arguments;
    if (mlir::failed(slice(generic, condition, ops, arguments)) ||
        arguments.size() != 1)
      return std::nullopt;
    unsigned number = arguments.front().getArgNumber();
    if (number >= generic.getNumDpsInputs())
      return std::nullopt;
    OpOperand *operand = generic.getDpsInputOperand(number);
    auto type = dyn_cast<RankedTensorType>(operand->get().getType());
    AffineMap map = generic.getMatchingIndexingMap(operand);
    if (!type || !map.isProjectedPermutation() ||
        (onlyBroadcast && map.getNumResults() >= generic.getNumLoops()))
      return std::nullopt;
    // The input must be read whole by the op (its sizes the loops'), which
    // `?` sizes cannot show: the check stays in the body (still correct).
    if (!type.hasStaticShape()) {
      generic->emitRemark("lazymlir-guard-runtime-checks: check not hoisted "
                          "out of the op: dynamic dimension");
      return std::nullopt;
    }
    SmallVector<int64_t> ranges = generic.getStaticLoopRanges();
    for (auto [dim, result] : llvm::enumerate(map.getResults())) {
      if (!isa<AffineDimExpr>(result) ||
          ranges[cast<AffineDimExpr>(result).getPosition()] !=
              type.getDimSize(dim))
        return std::nullopt;
    }
    return number;
  }

  /// Before `generic`: any = OR over every element of input `number` of
  /// `failures` (recomputed from the element); if (any) set the flag.
  void buildReduction(linalg::GenericOp generic, unsigned number,
                      ArrayRef<Value> failures) {
    llvm::SetVector<Operation *> ops;
    llvm::SmallSetVector<BlockArgument, 2> arguments;
    for (Value failed : failures)
      (void)slice(generic, failed, ops, arguments);
    BlockArgument argument = generic.getBody()->getArgument(number);
    Value source = generic.getDpsInputOperand(number)->get();
    int64_t rank = cast<RankedTensorType>(source.getType()).getRank();

    OpBuilder b(generic);
    Location loc = generic.getLoc();
    MLIRContext *ctx = b.getContext();
    Value empty =
        tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{}, b.getI1Type());
    Value falseValue = arith::ConstantOp::create(b, loc, b.getBoolAttr(false));
    Value init = linalg::FillOp::create(b, loc, falseValue, empty).getResult(0);
    SmallVector<AffineMap> maps = {AffineMap::getMultiDimIdentityMap(rank, ctx),
                                   AffineMap::get(rank, 0, {}, ctx)};
    SmallVector<utils::IteratorType> iterators(rank,
                                               utils::IteratorType::reduction);
    auto reduction = linalg::GenericOp::create(
        b, loc, TypeRange{init.getType()}, ValueRange{source}, ValueRange{init},
        maps, iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
          IRMapping mapping;
          mapping.map(argument, args[0]);
          // Body order is a topological order of the slice.
          for (Operation &op : generic.getBody()->without_terminator())
            if (ops.contains(&op))
              nb.clone(op, mapping);
          Value any = args[1];
          for (Value failed : failures)
            any = arith::OrIOp::create(nb, nloc, any,
                                       mapping.lookupOrDefault(failed));
          linalg::YieldOp::create(nb, nloc, any);
        });
    Value anyFailed =
        tensor::ExtractOp::create(b, loc, reduction.getResult(0), ValueRange{});
    setFlagIf(b, loc, anyFailed);
  }

  MemRefType flagType() {
    return MemRefType::get({}, IntegerType::get(module.getContext(), 32));
  }

  ModuleOp module;
  bool used = false;
  /// Hoisted checks: generic -> input number -> failure conditions, in the
  /// order they were found (MapVector: deterministic output).
  llvm::MapVector<Operation *, llvm::MapVector<unsigned, SmallVector<Value>>>
      hoisted;
};

Value constant(OpBuilder &b, Location loc, Type type, const APInt &value) {
  return arith::ConstantOp::create(b, loc, IntegerAttr::get(type, value));
}

/// Bits of an integer or index type (index: 64, as on the host).
unsigned bitWidth(Type type) {
  return type.isIndex() ? 64 : type.getIntOrFloatBitWidth();
}

struct GuardRuntimeChecksPass
    : lazymlir::impl::GuardRuntimeChecksPassBase<GuardRuntimeChecksPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Guard guard(module);
    DataDependence dataDependent;

    SmallVector<Operation *> accesses, asserts, divisions, conversions;
    module.walk([&](Operation *op) {
      if (isa<tensor::ExtractOp, tensor::InsertOp>(op))
        accesses.push_back(op);
      else if (isa<cf::AssertOp>(op))
        asserts.push_back(op);
      else if (isa<arith::DivSIOp, arith::DivUIOp, arith::RemSIOp,
                   arith::RemUIOp, arith::FloorDivSIOp, arith::CeilDivSIOp>(op))
        divisions.push_back(op);
      else if (isa<arith::FPToSIOp, arith::FPToUIOp>(op))
        conversions.push_back(op);
    });

    for (Operation *op : accesses)
      guardAccess(op, guard, dataDependent);
    for (Operation *op : asserts) {
      auto assertOp = cast<cf::AssertOp>(op);
      OpBuilder b(assertOp);
      Location loc = assertOp.getLoc();
      Value trueValue = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
      Value failed =
          arith::XOrIOp::create(b, loc, assertOp.getArg(), trueValue);
      guard.check(b, loc, failed);
      assertOp.erase();
    }
    for (Operation *op : divisions)
      guardDivision(op, guard);
    for (Operation *op : conversions)
      guardFloatDivision(op, guard);
    guard.finish();
  }

  /// tensor.extract / tensor.insert: data-dependent indices outside
  /// [0, dim) become 0 and set the flag.
  void guardAccess(Operation *op, Guard &guard, DataDependence &dataDependent) {
    Value tensor;
    MutableOperandRange indices = [&]() -> MutableOperandRange {
      if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
        tensor = extract.getTensor();
        return extract.getIndicesMutable();
      }
      auto insert = cast<tensor::InsertOp>(op);
      tensor = insert.getDest();
      return insert.getIndicesMutable();
    }();
    auto type = cast<RankedTensorType>(tensor.getType());
    OpBuilder b(op);
    Location loc = op->getLoc();
    Value failed;
    bool empty = false;
    for (unsigned d = 0, e = indices.size(); d < e; ++d) {
      Value index = indices[d].get();
      if (!dataDependent(index))
        continue;
      if (type.getDimSize(d) == 0)
        empty = true;
      Value size =
          type.isDynamicDim(d)
              ? tensor::DimOp::create(b, loc, tensor, d).getResult()
              : arith::ConstantIndexOp::create(b, loc, type.getDimSize(d))
                    .getResult();
      Value outside =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, index, size);
      Value zero = arith::ConstantIndexOp::create(b, loc, 0);
      indices[d].set(arith::SelectOp::create(b, loc, outside, zero, index));
      failed = failed
                   ? arith::OrIOp::create(b, loc, failed, outside).getResult()
                   : outside;
    }
    if (!failed)
      return;
    guard.check(b, loc, failed);
    if (!empty)
      return;
    // No element to read or write: every access fails. An extract yields
    // zero instead, an insert leaves its destination unchanged.
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
      Type element = extract.getType();
      if (!element.isIntOrIndexOrFloat())
        return; // cannot happen with the contract's element types
      Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
      extract.replaceAllUsesWith(zero);
      extract.erase();
    } else {
      auto insert = cast<tensor::InsertOp>(op);
      insert.replaceAllUsesWith(insert.getDest());
      insert.erase();
    }
  }

  /// Integer division and remainder never trap: divisor 0 -> 1 (flag set),
  /// INT_MIN / -1 -> INT_MIN / 1 (the wrapped result).
  void guardDivision(Operation *op, Guard &guard) {
    Value lhs = op->getOperand(0), rhs = op->getOperand(1);
    Type type = rhs.getType();
    if (!type.isIntOrIndex())
      return; // vectors do not occur before vectorization
    bool isSigned = isa<arith::DivSIOp, arith::RemSIOp, arith::FloorDivSIOp,
                        arith::CeilDivSIOp>(op);
    APInt divisor;
    bool known = matchPattern(rhs, m_ConstantInt(&divisor));
    if (known && !divisor.isZero() && !(isSigned && divisor.isAllOnes()))
      return;
    unsigned width = bitWidth(type);
    OpBuilder b(op);
    Location loc = op->getLoc();
    Value zero = constant(b, loc, type, APInt(width, 0));
    Value one = constant(b, loc, type, APInt(width, 1));
    Value isZero =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rhs, zero);
    Value replace = isZero;
    if (isSigned) {
      Value minusOne = constant(b, loc, type, APInt::getAllOnes(width));
      Value isMinusOne = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                               rhs, minusOne);
      if (isa<arith::RemSIOp>(op)) {
        // x % -1 == x % 1 == 0: no need to look at the dividend.
        replace = arith::OrIOp::create(b, loc, isZero, isMinusOne);
      } else {
        Value intMin = constant(b, loc, type, APInt::getSignedMinValue(width));
        Value overflow = arith::AndIOp::create(
            b, loc,
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lhs,
                                  intMin),
            isMinusOne);
        replace = arith::OrIOp::create(b, loc, isZero, overflow);
      }
    }
    op->setOperand(1, arith::SelectOp::create(b, loc, replace, one, rhs));
    // Divisions are mostly elementwise, their loops stream: an extra pass
    // over the divisors cost more than the check in place (a // b on 1M
    // int64, one thread: hoisted 1.6x, in place 1.04x the unchecked time).
    if (!known || divisor.isZero())
      guard.check(b, loc, isZero, /*onlyBroadcast=*/true);
  }

  /// torch-mlir floor-divides integers in floating point:
  /// fptosi(floor(sitofp(a) / sitofp(b))). A zero b sets the flag (eager
  /// raises); the division is by 1.0 instead where only this conversion
  /// reads it, so that no infinity becomes a poison integer.
  void guardFloatDivision(Operation *op, Guard &guard) {
    Value value = op->getOperand(0);
    bool onlyHere = value.hasOneUse();
    while (Operation *def = value.getDefiningOp()) {
      if (!isa<math::FloorOp, math::TruncOp, math::CeilOp, math::RoundOp,
               math::RoundEvenOp>(def))
        break;
      value = def->getOperand(0);
      onlyHere &= value.hasOneUse();
    }
    auto division = value.getDefiningOp<arith::DivFOp>();
    if (!division)
      return;
    Value rhs = division.getRhs();
    Operation *conversion = rhs.getDefiningOp();
    if (!isa_and_nonnull<arith::SIToFPOp, arith::UIToFPOp>(conversion))
      return;
    Value divisor = conversion->getOperand(0);
    if (!divisor.getType().isIntOrIndex())
      return;
    APInt known;
    if (matchPattern(divisor, m_ConstantInt(&known)) && !known.isZero())
      return;
    OpBuilder b(division);
    Location loc = division.getLoc();
    Value zero = constant(b, loc, divisor.getType(),
                          APInt(bitWidth(divisor.getType()), 0));
    Value isZero =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, divisor, zero);
    if (onlyHere) {
      Value one =
          arith::ConstantOp::create(b, loc, b.getFloatAttr(rhs.getType(), 1.0));
      division.getRhsMutable().set(
          arith::SelectOp::create(b, loc, isZero, one, rhs));
    }
    guard.check(b, loc, isZero, /*onlyBroadcast=*/true);
  }
};

} // namespace
