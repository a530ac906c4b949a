//===- MarkGemms.cpp - the contractions the runtime GEMM computes ---------===//
//
// lazymlir-mark-gemms: the contractions lazymlir::isRuntimeGemm accepts
// (GemmCalls.cpp) get `lazymlir.gemm`; with bf16-operands, those whose A
// and B widen bf16 values read them in bf16, and with bf16-results, such a
// product whose float32 result is only ever read rounded to bf16 yields
// the bf16 value (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Transforms/Passes.h"
#include "lazymlir/Transforms/RuntimeGemm.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace lazymlir {
#define GEN_PASS_DEF_MARKGEMMSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

using lazymlir::kBf16ResultAttr;
using lazymlir::kGemmAttr;

/// The bf16 value `value` widens, when it is a result of a linalg.generic
/// on tensors that yields `arith.extf` of a bf16 value computed in its body
/// into an init that the body never reads, made by tensor.empty.
arith::ExtFOp widenedBf16(Value value) {
  auto result = dyn_cast<OpResult>(value);
  auto producer = value.getDefiningOp<linalg::GenericOp>();
  if (!result || !producer || !producer.hasPureTensorSemantics())
    return {};
  unsigned index = result.getResultNumber();
  OpOperand *init = producer.getDpsInitOperand(index);
  if (!init->get().getDefiningOp<tensor::EmptyOp>() ||
      producer.payloadUsesValueFromOperand(init))
    return {};
  auto yield = cast<linalg::YieldOp>(producer.getBody()->getTerminator());
  auto extend = yield.getOperand(index).getDefiningOp<arith::ExtFOp>();
  if (!extend || !extend.getIn().getType().isBF16() ||
      !extend.getType().isF32())
    return {};
  return extend;
}

/// `value`'s producer (widenedBf16) made to yield the bf16 value itself:
/// in place when `inPlace` (nothing else reads the float32 values), else
/// in a copy of the producer. Returns the bf16 value.
Value narrowProducer(Value value, bool inPlace) {
  auto result = cast<OpResult>(value);
  auto producer = cast<linalg::GenericOp>(result.getOwner());
  unsigned index = result.getResultNumber();
  if (!inPlace) {
    OpBuilder builder(producer);
    producer = cast<linalg::GenericOp>(builder.clone(*producer));
    result = producer->getResult(index);
  }
  Operation *empty = producer.getDpsInitOperand(index)->get().getDefiningOp();
  lazymlir::yieldBf16InPlace(producer, index);
  if (empty->use_empty())
    empty->erase();
  return result;
}

/// The value the tensor.collapse_shape or tensor.expand_shape that makes
/// `value` reshapes, else `value` (a layer's input, batch by tokens by
/// features, collapsed to rows for its weight's gradient).
Value reshapeSource(Value value) {
  if (auto collapse = value.getDefiningOp<tensor::CollapseShapeOp>())
    return collapse.getSrc();
  if (auto expand = value.getDefiningOp<tensor::ExpandShapeOp>())
    return expand.getSrc();
  return value;
}

/// The bf16 value `value` widens, directly or through a reshape.
arith::ExtFOp widenedBf16ThroughReshape(Value value) {
  return widenedBf16(reshapeSource(value));
}

/// `op`'s input `operand`, now bf16, widened in its body instead.
void widenInBody(linalg::GenericOp op, OpOperand *operand) {
  BlockArgument argument = op.getMatchingBlockArgument(operand);
  Type f32 = argument.getType();
  argument.setType(getElementTypeOrSelf(operand->get().getType()));
  OpBuilder builder = OpBuilder::atBlockBegin(op.getBody());
  auto extend = arith::ExtFOp::create(builder, op.getLoc(), f32, argument);
  argument.replaceAllUsesExcept(extend, extend);
}

/// Whether every reader of `value` is a linalg.generic on tensors that
/// reads it as an input only to round it to bf16 (`arith.truncf`), directly
/// or through one reshape whose every reader is such; the readers' operands
/// are collected in `uses` (a reshape's in `reshapes`).
bool onlyReadRounded(Value value, SmallVectorImpl<OpOperand *> &uses,
                     SmallVectorImpl<Operation *> &reshapes, bool viaReshape) {
  if (value.use_empty())
    return false;
  for (OpOperand &use : value.getUses()) {
    Operation *owner = use.getOwner();
    if (!viaReshape &&
        isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(owner)) {
      reshapes.push_back(owner);
      if (!onlyReadRounded(owner->getResult(0), uses, reshapes, true))
        return false;
      continue;
    }
    auto reader = dyn_cast<linalg::GenericOp>(owner);
    if (!reader || !reader.hasPureTensorSemantics() ||
        use.getOperandNumber() >= reader.getNumDpsInputs())
      return false;
    BlockArgument argument = reader.getMatchingBlockArgument(&use);
    if (argument.use_empty() ||
        !llvm::all_of(argument.getUsers(), [](Operation *user) {
          auto round = dyn_cast<arith::TruncFOp>(user);
          return round && round.getType().isBF16() &&
                 !round.getRoundingmodeAttr();
        }))
      return false;
    uses.push_back(&use);
  }
  return true;
}

/// What a reader adds, widened from bf16, to its input `use` before
/// rounding the sum to bf16, when that is all it does with `use` (addmm's
/// bias under bf16 autocast: round(A x B + bias), the bias rounded from its
/// float32 parameter in the same body): the bf16 value, computed in the
/// body by at most a few pure ops from block arguments of the reader's
/// other inputs and values from outside the reader. The reader's loops
/// must be `use`'s dimensions in order, so that the value for an element of
/// `use` is one computed over `use`'s index space.
struct BiasBeforeRounding {
  Value bf16;                           // in the reader's body
  SmallVector<Operation *> ops;         // computing it, in body order
  SmallVector<BlockArgument> arguments; // the inputs' block arguments used
  SmallVector<Value> outside;           // the reader's inputs and captures
                                        // it reads: made before the init?
};

std::optional<BiasBeforeRounding>
biasAddedBeforeRounding(linalg::GenericOp reader, OpOperand *use) {
  BlockArgument argument = reader.getMatchingBlockArgument(use);
  if (!argument.hasOneUse() ||
      !reader.getMatchingIndexingMap(use).isIdentity() ||
      reader.getNumParallelLoops() != reader.getNumLoops())
    return std::nullopt;
  auto add = dyn_cast<arith::AddFOp>(*argument.getUsers().begin());
  if (!add || !add->hasOneUse())
    return std::nullopt;
  auto round = dyn_cast<arith::TruncFOp>(*add->getUsers().begin());
  if (!round || !round.getType().isBF16() || round.getRoundingmodeAttr())
    return std::nullopt;
  Value other = add.getLhs() == argument ? add.getRhs() : add.getLhs();
  auto widen = other.getDefiningOp<arith::ExtFOp>();
  if (!widen || !widen.getIn().getType().isBF16())
    return std::nullopt;
  BiasBeforeRounding bias{widen.getIn(), {}, {}};
  Block *body = reader.getBody();
  llvm::SmallPtrSet<Operation *, 8> inSlice;
  SmallVector<Value> work = {bias.bf16};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(value);
        arg && arg.getOwner() == body) {
      if (arg == argument || arg.getArgNumber() >= reader.getNumDpsInputs())
        return std::nullopt; // the product itself, or an output
      if (!llvm::is_contained(bias.arguments, arg)) {
        bias.arguments.push_back(arg);
        bias.outside.push_back(reader.getDpsInputs()[arg.getArgNumber()]);
      }
      continue;
    }
    Operation *def = value.getDefiningOp();
    if (!def || def->getBlock() != body) {
      bias.outside.push_back(value); // captured from outside the reader
      continue;
    }
    if (inSlice.contains(def))
      continue;
    if (!isPure(def) || def->getNumRegions() || inSlice.size() >= 8)
      return std::nullopt;
    inSlice.insert(def);
    llvm::append_range(work, def->getOperands());
  }
  for (Operation &op : *body)
    if (inSlice.contains(&op))
      bias.ops.push_back(&op);
  llvm::sort(bias.arguments, [](BlockArgument x, BlockArgument y) {
    return x.getArgNumber() < y.getArgNumber();
  });
  return bias;
}

/// A chosen bf16 contraction (`op`, a generic reading bf16 A and B) whose
/// float32 result is a +0.0 fill's and is only ever read rounded to bf16
/// (onlyReadRounded): made to yield the bf16 value, marked
/// kBf16ResultAttr, and its readers read that value where they rounded it.
/// The runtime GEMM rounds each sum once as it stores it, to the same
/// value (lazymlir-expand-bf16-conversions' rounding), and C moves half the
/// bytes: a layer's output under bf16 autocast, the gradients of its input
/// and weight.
void narrowResult(linalg::GenericOp op) {
  if (op->getNumResults() != 1)
    return;
  Value result = op->getResult(0);
  auto type = dyn_cast<RankedTensorType>(result.getType());
  auto fill = op.getDpsInitOperand(0)->get().getDefiningOp<linalg::FillOp>();
  if (!type || !type.getElementType().isF32() || !fill ||
      !matchPattern(fill.getInputs()[0], m_PosZeroFloat()))
    return;
  SmallVector<OpOperand *> uses;
  SmallVector<Operation *> reshapes;
  // Its one reader adds a bf16 bias first: the bias, broadcast in bf16, is
  // the product's init (C += A x B, rounded once: the same sum).
  std::optional<BiasBeforeRounding> bias;
  if (result.hasOneUse())
    if (auto reader = dyn_cast<linalg::GenericOp>(*result.getUsers().begin());
        reader && reader.hasPureTensorSemantics() &&
        result.getUses().begin()->getOperandNumber() < reader.getNumDpsInputs())
      bias = biasAddedBeforeRounding(reader, &*result.getUses().begin());
  if (bias) {
    // What it reads must be visible at the product: the init is made there.
    for (Value value : bias->outside) {
      Operation *at = value.getParentBlock()->findAncestorOpInBlock(*op);
      Operation *def = value.getDefiningOp();
      if (!at || (def && !def->isBeforeInBlock(at)))
        return;
    }
    uses.push_back(&*result.getUses().begin());
  } else if (!onlyReadRounded(result, uses, reshapes, false)) {
    return;
  }
  MLIRContext *ctx = op.getContext();
  Type bf16 = BFloat16Type::get(ctx);
  OpBuilder builder(op);
  Location loc = op.getLoc();
  Value empty = tensor::EmptyOp::create(
      builder, loc, tensor::getMixedSizes(builder, loc, result), bf16);
  Value init;
  if (bias) {
    // The value the reader computed from its other inputs, computed over
    // C's index space (the reader's loops) into a bf16 tensor.
    auto reader = cast<linalg::GenericOp>(*result.getUsers().begin());
    SmallVector<Value> inputs;
    SmallVector<AffineMap> maps;
    for (BlockArgument arg : bias->arguments) {
      OpOperand *input = reader.getDpsInputOperand(arg.getArgNumber());
      inputs.push_back(input->get());
      maps.push_back(reader.getMatchingIndexingMap(input));
    }
    maps.push_back(builder.getMultiDimIdentityMap(type.getRank()));
    init = linalg::GenericOp::create(
               builder, loc, TypeRange{empty.getType()}, inputs,
               ValueRange{empty}, maps,
               SmallVector<utils::IteratorType>(type.getRank(),
                                                utils::IteratorType::parallel),
               [&](OpBuilder &b, Location l, ValueRange args) {
                 IRMapping mapping;
                 for (auto [arg, value] : llvm::zip(bias->arguments, args))
                   mapping.map(arg, value);
                 for (Operation *slice : bias->ops)
                   b.clone(*slice, mapping);
                 linalg::YieldOp::create(b, l,
                                         mapping.lookupOrDefault(bias->bf16));
               })
               .getResult(0);
  } else {
    Value zero =
        arith::ConstantOp::create(builder, loc, builder.getZeroAttr(bf16));
    init = linalg::FillOp::create(builder, loc, zero, empty).getResult(0);
  }
  OpOperand *out = op.getDpsInitOperand(0);
  out->set(init);
  // The body: the old value widened where it was read, the sum rounded.
  BlockArgument accumulator = op.getMatchingBlockArgument(out);
  accumulator.setType(bf16);
  builder.setInsertionPointToStart(op.getBody());
  auto widened =
      arith::ExtFOp::create(builder, loc, builder.getF32Type(), accumulator);
  accumulator.replaceAllUsesExcept(widened, widened);
  auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
  builder.setInsertionPoint(yield);
  yield.setOperand(
      0, arith::TruncFOp::create(builder, loc, bf16, yield.getOperand(0)));
  result.setType(type.clone(bf16));
  op->setAttr(kBf16ResultAttr, UnitAttr::get(ctx));
  for (Operation *reshape : reshapes) {
    auto shaped = cast<RankedTensorType>(reshape->getResult(0).getType());
    reshape->getResult(0).setType(shaped.clone(bf16));
  }
  for (OpOperand *use : uses) {
    auto reader = cast<linalg::GenericOp>(use->getOwner());
    BlockArgument argument = reader.getMatchingBlockArgument(use);
    argument.setType(bf16);
    for (Operation *user : llvm::make_early_inc_range(argument.getUsers())) {
      if (auto add = dyn_cast<arith::AddFOp>(user)) { // the bias, now in C
        Operation *round = *add->getUsers().begin();
        Operation *widen =
            (add.getLhs() == argument ? add.getRhs() : add.getLhs())
                .getDefiningOp();
        round->getResult(0).replaceAllUsesWith(argument);
        round->erase();
        add->erase();
        if (widen->use_empty())
          widen->erase();
        continue;
      }
      user->getResult(0).replaceAllUsesWith(argument);
      user->erase();
    }
  }
  if (fill->use_empty()) {
    Operation *oldEmpty = fill.getOutputs()[0].getDefiningOp();
    fill->erase();
    if (oldEmpty && oldEmpty->use_empty() && isPure(oldEmpty))
      oldEmpty->erase();
  }
}

/// The bf16 value a linalg.generic only widens, read through a
/// permutation (`extf` of its one input, nothing else: a transposed bf16
/// weight's float32 copy), and that permutation; else none.
std::optional<std::pair<Value, AffineMap>> permutedWidening(Value value) {
  auto producer = value.getDefiningOp<linalg::GenericOp>();
  if (!producer || !lazymlir::isBf16Widening(producer))
    return std::nullopt;
  SmallVector<AffineMap> maps = producer.getIndexingMapsArray();
  if (!maps[1].isIdentity() || !maps[0].isPermutation())
    return std::nullopt;
  return std::make_pair(producer.getDpsInputs()[0], maps[0]);
}

struct MarkGemmsPass : lazymlir::impl::MarkGemmsPassBase<MarkGemmsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> marked;
    getOperation().walk([&](linalg::LinalgOp op) {
      // Only a whole contraction: one that an earlier pass fused into a
      // loop (a row reduction's rows, lazymlir-fuse-row-reductions) is a
      // slice per iteration, tiled where it is.
      if (isa<func::FuncOp>(op->getParentOp()) &&
          lazymlir::isRuntimeGemm(op, op.getIndexingMapsArray(), minSize,
                                  minWork)) {
        op->setAttr(kGemmAttr, UnitAttr::get(op->getContext()));
        marked.push_back(op);
      }
    });
    if (bf16Operands)
      readBf16Operands(marked);
  }

  /// The marked contractions whose A and B both widen bf16 values read
  /// those values in bf16: a producer that only such contractions read is
  /// narrowed in place, one that something else reads too (a bias gradient
  /// summing the same output gradient) is copied, the copy narrowed.
  void readBf16Operands(ArrayRef<linalg::LinalgOp> marked) {
    SmallVector<Operation *> chosen;
    llvm::SmallPtrSet<Operation *, 8> isChosen;
    for (linalg::LinalgOp op : marked)
      if (widenedBf16ThroughReshape(op.getDpsInputOperand(0)->get()) &&
          widenedBf16ThroughReshape(op.getDpsInputOperand(1)->get())) {
        chosen.push_back(op);
        isChosen.insert(op);
      }
    auto onlyChosenRead = [&](Value value) {
      return llvm::all_of(value.getUses(), [&](OpOperand &use) {
        return isChosen.contains(use.getOwner()) && use.getOperandNumber() < 2;
      });
    };
    // Each float32 value's bf16 value, made once for all its readers (at
    // its first reader, before any of its uses is redirected).
    llvm::DenseMap<Value, Value> narrowed;
    IRRewriter rewriter(&getContext());
    llvm::SetVector<Operation *> folded; // copies read in place instead
    // Generalized first (their maps change below), the chosen set with them.
    for (Operation *&op : chosen) {
      if (isa<linalg::GenericOp>(op))
        continue;
      rewriter.setInsertionPoint(op);
      isChosen.erase(op);
      FailureOr<linalg::GenericOp> general =
          linalg::generalizeNamedOp(rewriter, cast<linalg::LinalgOp>(op));
      if (failed(general)) {
        op->emitError("lazymlir-mark-gemms: cannot generalize");
        return signalPassFailure();
      }
      op = *general;
      op->setAttr(kGemmAttr, rewriter.getUnitAttr());
      isChosen.insert(op);
    }
    for (Operation *op : chosen) {
      auto generic = cast<linalg::GenericOp>(op);
      SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
      for (unsigned i = 0; i < 2; ++i) {
        Value value = generic->getOperand(i);
        // A copy that only widens and transposes a bf16 value (a bf16
        // weight, transposed for x W^T): read that value in place.
        if (auto widening = permutedWidening(value)) {
          SmallVector<AffineMap> trial = maps;
          trial[i] = widening->second.compose(maps[i]);
          if (lazymlir::readsAsMatrices(generic, trial)) {
            maps = trial;
            generic->setOperand(i, widening->first);
            folded.insert(value.getDefiningOp());
            continue;
          }
        }
        auto it = narrowed.find(value);
        if (it == narrowed.end())
          it = narrowed.try_emplace(value, narrowOperand(value, onlyChosenRead))
                   .first;
        generic->setOperand(i, it->second);
      }
      generic.setIndexingMapsAttr(rewriter.getAffineMapArrayAttr(maps));
      for (unsigned i = 0; i < 2; ++i)
        if (OpOperand *operand = generic.getDpsInputOperand(i);
            generic.getMatchingBlockArgument(operand).getType().isF32())
          widenInBody(generic, operand);
      if (bf16Results)
        narrowResult(generic);
    }
    // Copies read in place now (before the reshapes below: a reshape of
    // one erases it too once nothing reads it).
    for (Operation *copy : folded)
      if (copy->use_empty()) {
        Operation *empty =
            cast<linalg::GenericOp>(copy).getDpsInits()[0].getDefiningOp();
        copy->erase();
        if (empty && empty->use_empty() && isPure(empty))
          empty->erase();
      }
    // Reshapes of float32 values only the narrowed contractions read, and
    // then their producers if nothing else reads them.
    SmallVector<Operation *> unread;
    for (auto &[value, bf16] : narrowed)
      if (Operation *reshape = value.getDefiningOp();
          reshape && value.use_empty() &&
          isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(reshape))
        unread.push_back(reshape);
    for (Operation *reshape : unread) {
      Operation *producer = reshape->getOperand(0).getDefiningOp();
      reshape->erase();
      if (producer && producer->use_empty() && isPure(producer))
        producer->erase();
    }
  }

  /// The bf16 value a chosen contraction reads for its float32 operand
  /// `value`: the producer narrowed (in place when `onlyChosenRead`), or,
  /// for a reshape of a producer's result, a narrowed copy of the producer
  /// reshaped alike (the float32 reshape is erased once nothing reads it).
  template <typename OnlyChosenRead>
  Value narrowOperand(Value value, OnlyChosenRead onlyChosenRead) {
    Value source = reshapeSource(value);
    if (source == value)
      return narrowProducer(value, onlyChosenRead(value));
    Value narrow = narrowProducer(source, false);
    Operation *reshape = value.getDefiningOp();
    OpBuilder builder(reshape);
    Operation *copy = builder.clone(*reshape);
    copy->setOperand(0, narrow);
    auto type = cast<RankedTensorType>(value.getType());
    copy->getResult(0).setType(
        type.clone(cast<RankedTensorType>(narrow.getType()).getElementType()));
    return copy->getResult(0);
  }
};

} // namespace

bool lazymlir::isBf16Widening(linalg::GenericOp op) {
  if (op->getNumResults() != 1 || op.getNumDpsInputs() != 1 ||
      !op.hasPureTensorSemantics() ||
      op.getNumParallelLoops() != op.getNumLoops())
    return false;
  Block *body = op.getBody();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  auto extend = yield.getOperand(0).getDefiningOp<arith::ExtFOp>();
  return extend && extend.getIn() == body->getArgument(0) &&
         &body->front() == extend.getOperation() &&
         extend.getIn().getType().isBF16() && extend.getType().isF32();
}

void lazymlir::yieldBf16InPlace(linalg::GenericOp producer, unsigned index) {
  auto yield = cast<linalg::YieldOp>(producer.getBody()->getTerminator());
  auto extend = yield.getOperand(index).getDefiningOp<arith::ExtFOp>();
  OpOperand *init = producer.getDpsInitOperand(index);
  auto empty = init->get().getDefiningOp<tensor::EmptyOp>();
  OpBuilder builder(producer);
  Type bf16 = extend.getIn().getType();
  auto narrowEmpty = tensor::EmptyOp::create(builder, empty.getLoc(),
                                             empty.getMixedSizes(), bf16);
  init->set(narrowEmpty);
  producer.getMatchingBlockArgument(init).setType(bf16);
  producer->getResult(index).setType(narrowEmpty.getType());
  yield.setOperand(index, extend.getIn());
  if (extend->use_empty())
    extend->erase();
}
