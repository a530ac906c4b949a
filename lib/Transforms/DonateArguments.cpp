//===- DonateArguments.cpp - results written into donated arguments -------===//
//
// lazymlir-donate-arguments (before one-shot bufferization) and
// lazymlir-drop-donated-results (after it): a step's new parameters and
// optimizer moments are written into the buffers their old values came in,
// when the caller donates those (Passes.td says how).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotModuleBufferize.h"
#include "mlir/Dialect/Bufferization/Transforms/Transforms.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace lazymlir {
#define GEN_PASS_DEF_DONATEARGUMENTSPASS
#define GEN_PASS_DEF_DROPDONATEDRESULTSPASS
#define GEN_PASS_DEF_GUARDDONATEDWRITESPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

constexpr llvm::StringLiteral kDonatedTo = "lazymlir.donated_to";
constexpr llvm::StringLiteral kDonatedFrom = "lazymlir.donated_from";
constexpr llvm::StringLiteral kDonated = "lazymlir.donated";
constexpr llvm::StringLiteral kCheckFlag = "__lazymlir_check_failed";

/// Ops whose tensor result is (part of) their first tensor operand's value:
/// what still reads the argument when it is returned or read later.
bool isAliasOp(Operation *op) {
  return isa<ViewLikeOpInterface, tensor::CollapseShapeOp,
             tensor::ExpandShapeOp, tensor::ExtractSliceOp, tensor::CastOp,
             tensor::ReshapeOp>(op);
}

/// The uses of `root` and, through alias ops, of the values that alias it:
/// everything that reads its value.
SmallVector<OpOperand *> aliasUses(Value root) {
  SmallVector<OpOperand *> uses;
  SmallVector<Value> todo = {root};
  while (!todo.empty()) {
    Value v = todo.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      uses.push_back(&use);
      if (isAliasOp(use.getOwner()))
        for (Value r : use.getOwner()->getResults())
          if (isa<TensorType>(r.getType()))
            todo.push_back(r);
    }
  }
  return uses;
}

/// The reassociation of a tensor or memref collapse_shape / expand_shape;
/// empty for any other op.
SmallVector<ReassociationIndices> reassociation(Operation *op) {
  if (auto c = dyn_cast<tensor::CollapseShapeOp>(op))
    return c.getReassociationIndices();
  if (auto e = dyn_cast<tensor::ExpandShapeOp>(op))
    return e.getReassociationIndices();
  if (auto c = dyn_cast<memref::CollapseShapeOp>(op))
    return c.getReassociationIndices();
  if (auto e = dyn_cast<memref::ExpandShapeOp>(op))
    return e.getReassociationIndices();
  return {};
}

/// The entry function the runtime calls, or null (absent or external).
func::FuncOp entryFunction(ModuleOp module, StringRef name) {
  auto func = module.lookupSymbol<func::FuncOp>(name);
  return func && !func.isExternal() ? func : nullptr;
}

/// The op of `block` that holds `op` (itself, or an ancestor).
Operation *inBlock(Block &block, Operation *op) {
  return block.findAncestorOpInBlock(*op);
}

struct DonateArgumentsPass
    : lazymlir::impl::DonateArgumentsPassBase<DonateArgumentsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = entryFunction(module, entry);
    if (!func)
      return;
    Block &body = func.getBody().front();
    auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
    if (!ret)
      return;
    IRRewriter rewriter(&getContext());
    // Each materialize op we insert, with what reads its argument's old value.
    llvm::DenseMap<Operation *, SmallVector<Operation *>> ours;
    llvm::SmallDenseSet<unsigned> donatedResults;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      auto to = func.getArgAttrOfType<IntegerAttr>(i, kDonatedTo);
      if (!to)
        continue;
      BlockArgument arg = func.getArgument(i);
      int64_t j = to.getInt();
      if (j < 0 || j >= func.getNumResults() ||
          func.getResultTypes()[j] != arg.getType() ||
          !isa<RankedTensorType>(arg.getType())) {
        func.emitError() << "argument " << i << " donated to result " << j
                         << ", which is not a tensor of its type";
        return signalPassFailure();
      }
      if (!donatedResults.insert(j).second) {
        func.emitError() << "result " << j << " has two donated arguments";
        return signalPassFailure();
      }
      func.setArgAttr(i, bufferization::BufferizationDialect::kWritableAttrName,
                      rewriter.getBoolAttr(true));
      func.setResultAttr(j, kDonatedFrom, rewriter.getI64IntegerAttr(i));

      // Everything that reads the old value: the argument's users and,
      // through views and reshapes, theirs. Another result that is such an
      // alias gets its own copy, taken before the argument is written.
      SmallVector<Operation *> readers;
      for (OpOperand *use : aliasUses(arg)) {
        Operation *user = use->getOwner();
        if (user != ret.getOperation()) {
          readers.push_back(user);
          continue;
        }
        Value v = use->get();
        if (use->getOperandNumber() == j && v == arg)
          continue; // returned unchanged: already in place
        if (Operation *def = v.getDefiningOp())
          rewriter.setInsertionPointAfter(inBlock(body, def));
        else
          rewriter.setInsertionPointToStart(&body);
        Location loc = v.getLoc();
        SmallVector<OpFoldResult> sizes =
            tensor::getMixedSizes(rewriter, loc, v);
        Value empty = tensor::EmptyOp::create(
            rewriter, loc, sizes,
            cast<RankedTensorType>(v.getType()).getElementType());
        auto copy = linalg::CopyOp::create(rewriter, loc, v, empty);
        use->set(copy->getResult(0));
        readers.push_back(copy);
      }
      Value value = ret.getOperand(j);
      if (value == arg)
        continue;
      // An update computed in another shape and reshaped (elementwise
      // kernels collapsed to one dimension) is computed into the argument
      // viewed in that shape (empty tensor elimination does not look
      // through reshapes: the update went into a temporary, copied).
      Value source = value, destination = arg;
      Operation *reshape = value.getDefiningOp();
      if (reshape &&
          isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(reshape) &&
          cast<RankedTensorType>(reshape->getOperand(0).getType())
              .hasStaticShape() &&
          cast<RankedTensorType>(arg.getType()).hasStaticShape()) {
        source = reshape->getOperand(0);
        OpBuilder::InsertionGuard guard(rewriter);
        rewriter.setInsertionPointToStart(&body);
        // The same view of the argument where the update reads the old
        // value (one value, so that reading and writing it in place is no
        // conflict), moved to the start; else a new one there.
        auto sameView = [&](Operation *user) {
          return isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(user) &&
                 user->getName() != reshape->getName() &&
                 user->getResult(0).getType() == source.getType() &&
                 reassociation(user) == reassociation(reshape);
        };
        auto users = arg.getUsers();
        auto view = llvm::find_if(users, sameView);
        if (view != users.end()) {
          (*view)->moveBefore(&body, body.begin());
          destination = (*view)->getResult(0);
        } else if (isa<tensor::ExpandShapeOp>(reshape)) {
          destination = tensor::CollapseShapeOp::create(rewriter, arg.getLoc(),
                                                        source.getType(), arg,
                                                        reassociation(reshape));
        } else {
          destination = tensor::ExpandShapeOp::create(rewriter, arg.getLoc(),
                                                      source.getType(), arg,
                                                      reassociation(reshape));
        }
      } else {
        reshape = nullptr;
      }
      // After the value is computed and after the last read of the old one.
      Operation *after = nullptr;
      auto later = [&](Operation *op) {
        if (!op)
          return;
        op = inBlock(body, op);
        if (op && op != ret.getOperation() &&
            (!after || after->isBeforeInBlock(op)))
          after = op;
      };
      later(source.getDefiningOp());
      for (Operation *reader : readers)
        later(reader);
      // And after every read of the new value: once materialized in the
      // argument, a later read of it would see the write as a conflict
      // (an optimizer reads the new moments to update the parameter).
      for (OpOperand *use : aliasUses(source))
        later(use->getOwner()); // the return is never `after`
      if (after)
        rewriter.setInsertionPointAfter(after);
      else
        rewriter.setInsertionPointToStart(&body);
      auto materialize = bufferization::MaterializeInDestinationOp::create(
          rewriter, value.getLoc(), source, destination);
      Value result = materialize.getResult();
      if (reshape) {
        // The argument in its own shape again (a view of the same buffer).
        Operation *back = rewriter.clone(*reshape);
        back->setOperand(0, result);
        result = back->getResult(0);
      }
      ret.setOperand(j, result);
      ours[materialize] = std::move(readers);
    }
    if (ours.empty())
      return;

    // The tensor.empty the value was computed into becomes the argument
    // (upstream's empty tensor elimination, for these ops only: other
    // insertions keep what the rest of the pipeline expects), where the op
    // computing it is the last to read the old value (fusion may have
    // recomputed the update in a later op that reads the argument too: that
    // one must still find the old value, so the update goes into a
    // temporary, copied into the argument after that read).
    // A reshaped tensor.empty (an update computed in one dimension into a
    // collapsed init) is a tensor.empty of the new shape, which the
    // elimination can replace with the argument's view of that shape.
    func.walk([&](Operation *op) {
      if (!isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(op) ||
          !op->getOperand(0).getDefiningOp<tensor::EmptyOp>())
        return;
      auto type = cast<RankedTensorType>(op->getResult(0).getType());
      if (!type.hasStaticShape())
        return;
      rewriter.setInsertionPoint(op);
      rewriter.replaceOpWithNewOp<tensor::EmptyOp>(op, type.getShape(),
                                                   type.getElementType());
    });
    bufferization::OneShotBufferizationOptions options;
    options.allowReturnAllocsFromLoops = true;
    options.bufferizeFunctionBoundaries = true;
    bufferization::OneShotAnalysisState state(module, options);
    if (failed(bufferization::analyzeModuleOp(module, state)))
      return signalPassFailure();
    auto onlyOurs = [&](RewriterBase &rewriter, SubsetInsertionOpInterface op,
                        tensor::EmptyOp empty, Operation *user) -> Value {
      auto it = ours.find(op.getOperation());
      if (it == ours.end())
        return Value();
      Operation *writer = inBlock(body, user);
      if (!writer)
        return Value();
      for (Operation *reader : it->second) {
        Operation *top = inBlock(body, reader);
        if (reader != user && (top == writer || writer->isBeforeInBlock(top)))
          return Value();
      }
      return bufferization::buildSubsetExtraction(rewriter, op, empty, user);
    };
    if (failed(bufferization::eliminateEmptyTensors(rewriter, module, state,
                                                    onlyOurs)))
      return signalPassFailure();
  }
};

/// `v` without a reshape and its inverse (the argument viewed in an
/// update's shape and back, lazymlir-donate-arguments): the buffer viewed.
Value withoutRoundTrip(Value v) {
  Operation *back = v.getDefiningOp();
  if (!back || !isa<memref::CollapseShapeOp, memref::ExpandShapeOp>(back))
    return v;
  Value inner = back->getOperand(0);
  Operation *there = inner.getDefiningOp();
  if (!there || !isa<memref::CollapseShapeOp, memref::ExpandShapeOp>(there) ||
      there->getName() == back->getName() ||
      there->getOperand(0).getType() != v.getType() ||
      reassociation(there) != reassociation(back))
    return v;
  return there->getOperand(0);
}

struct DropDonatedResultsPass
    : lazymlir::impl::DropDonatedResultsPassBase<DropDonatedResultsPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = entryFunction(getOperation(), entry);
    if (!func)
      return;
    // The arguments stay marked for lazymlir-guard-donated-writes.
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (func.removeArgAttr(i, kDonatedTo))
        func.setArgAttr(i, kDonated, UnitAttr::get(&getContext()));
    llvm::BitVector drop(func.getNumResults());
    for (unsigned j = 0, e = func.getNumResults(); j < e; ++j) {
      auto from = func.getResultAttrOfType<IntegerAttr>(j, kDonatedFrom);
      if (!from)
        continue;
      func.removeResultAttr(j, StringAttr::get(&getContext(), kDonatedFrom));
      BlockArgument arg = func.getArgument(from.getInt());
      bool ok = true;
      func.walk([&](func::ReturnOp ret) {
        Value v = ret.getOperand(j);
        while (auto cast = v.getDefiningOp<memref::CastOp>())
          v = cast.getSource();
        ok &= withoutRoundTrip(v) == arg;
      });
      if (!ok) {
        func.emitError() << "result " << j << " was not written into argument "
                         << from.getInt() << ", which was donated to it";
        return signalPassFailure();
      }
      drop.set(j);
    }
    if (drop.none())
      return;
    // An update computed in place left a copy of the argument onto itself.
    func.walk([](memref::CopyOp copy) {
      if (copy.getSource() == copy.getTarget())
        copy.erase();
    });
    func.walk([&](func::ReturnOp ret) { ret->eraseOperands(drop); });
    if (failed(func.eraseResults(drop)))
      return signalPassFailure();
  }
};

/// The value `v` is a view of: through views, casts and loop-carried
/// buffers, the buffer it was made from.
Value rootBuffer(Value v) {
  while (true) {
    if (auto view = v.getDefiningOp<ViewLikeOpInterface>()) {
      v = view.getViewSource();
      continue;
    }
    if (auto cast = v.getDefiningOp<memref::CastOp>()) {
      v = cast.getSource();
      continue;
    }
    if (auto arg = dyn_cast<BlockArgument>(v))
      if (auto loop = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()))
        if (OpOperand *init = loop.getTiedLoopInit(arg)) {
          v = init->get();
          continue;
        }
    return v;
  }
}

struct GuardDonatedWritesPass
    : lazymlir::impl::GuardDonatedWritesPassBase<GuardDonatedWritesPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = entryFunction(module, entry);
    if (!func)
      return;
    llvm::SmallPtrSet<Value, 8> donated;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (func.removeArgAttr(i, kDonated))
        donated.insert(func.getArgument(i));
    if (donated.empty() || !module.lookupSymbol(kCheckFlag))
      return;
    if (!func.getBody().hasOneBlock()) {
      func.emitError() << "donated arguments in an entry of several blocks";
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    auto writesDonated = [&](Operation *top) {
      WalkResult result = top->walk([&](Operation *op) {
        auto touches = [&](Value v) {
          return isa<BaseMemRefType>(v.getType()) &&
                 donated.contains(rootBuffer(v));
        };
        if (auto effects = dyn_cast<MemoryEffectOpInterface>(op)) {
          SmallVector<MemoryEffects::EffectInstance> list;
          effects.getEffects(list);
          for (auto &effect : list) {
            if (!isa<MemoryEffects::Write>(effect.getEffect()))
              continue;
            Value target = effect.getValue();
            if (target ? touches(target)
                       : llvm::any_of(op->getOperands(), touches))
              return WalkResult::interrupt();
          }
          return WalkResult::advance();
        }
        if (op->hasTrait<OpTrait::HasRecursiveMemoryEffects>())
          return WalkResult::advance();
        // Unknown effects: any use of a donated buffer may write it.
        return llvm::any_of(op->getOperands(), touches)
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      });
      return result.wasInterrupted();
    };
    Operation *first = nullptr;
    for (Operation &op : body.without_terminator())
      if (writesDonated(&op)) {
        first = &op;
        break;
      }
    if (!first)
      return;
    for (Operation *op = first; op != body.getTerminator();
         op = op->getNextNode()) {
      WalkResult late = op->walk([&](memref::GetGlobalOp global) {
        return global.getName() == kCheckFlag ? WalkResult::interrupt()
                                              : WalkResult::advance();
      });
      if (late.wasInterrupted()) {
        op->emitError() << "a runtime check runs after the first write into "
                           "a donated argument";
        return signalPassFailure();
      }
    }
    for (Value v : body.getTerminator()->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && def->getBlock() == &body && !def->isBeforeInBlock(first)) {
        func.emitError() << "a result computed after the first write into a "
                            "donated argument";
        return signalPassFailure();
      }

    OpBuilder b(first);
    Location loc = first->getLoc();
    auto flagType = MemRefType::get({}, b.getI32Type());
    Value flag = memref::GetGlobalOp::create(b, loc, flagType, kCheckFlag);
    Value failed = memref::LoadOp::create(b, loc, flag, ValueRange{});
    Value zero = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
    Value passed =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, failed, zero);
    auto branch = scf::IfOp::create(b, loc, passed, /*withElseRegion=*/false);
    Block *then = branch.thenBlock();
    then->getOperations().splice(then->getTerminator()->getIterator(),
                                 body.getOperations(), first->getIterator(),
                                 body.getTerminator()->getIterator());
  }
};

} // namespace
