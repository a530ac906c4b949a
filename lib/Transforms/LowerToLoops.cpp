//===- LowerToLoops.cpp - loops, parallel where it pays -------------------===//

#include "lazymlir/Transforms/Passes.h"

#include "ParallelLoops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMAttrs.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/LoopInvariantCodeMotionUtils.h"

namespace lazymlir {
#define GEN_PASS_DEF_LOWERTOLOOPSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {

/// llvm.br's loop metadata attribute.
constexpr StringLiteral kLoopAnnotation = "loop_annotation";

/// The buffer `memref` is a view of: a block argument or an allocation.
Value rootBuffer(Value memref) {
  while (auto view = memref.getDefiningOp<ViewLikeOpInterface>())
    memref = view.getViewSource();
  return memref;
}

/// Carries the accumulators of `op`'s innermost run of reduction loops in
/// registers. linalgOpToLoops loads and stores each output element in the
/// innermost loop; LLVM cannot keep it in a register (it cannot tell the
/// output from the inputs it reads), so every element of a row sum waited
/// for the store of the one before: 2 GB/s, a sixth of eager's reductions.
/// Here the element is loaded once before the reduction loops, carried
/// through them as loop values (which LLVM vectorizes, the combiner being
/// reassociable: lazymlir-reassociate-reductions) and stored once after.
/// Only where it is safe: the output is not a view of the buffer of an
/// input, and the reduction loops touch it only through that one load and
/// store. `loops` (outer to inner, one per loop of `op`) is updated.
void carryReductionAccumulators(RewriterBase &rewriter, linalg::LinalgOp op,
                                SmallVectorImpl<Operation *> &loops) {
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  if (loops.size() != iterators.size() || loops.empty())
    return;
  size_t first = loops.size();
  while (first > 0 && iterators[first - 1] == utils::IteratorType::reduction)
    --first;
  if (first == loops.size())
    return;
  SmallVector<scf::ForOp> nest;
  for (size_t i = first; i < loops.size(); ++i) {
    auto loop = dyn_cast<scf::ForOp>(loops[i]);
    if (!loop)
      return;
    nest.push_back(loop);
  }
  for (Value input : op.getDpsInputs())
    for (OpOperand &init : op.getDpsInitsMutable())
      if (isa<MemRefType>(input.getType()) &&
          rootBuffer(input) == rootBuffer(init.get()))
        return;

  // Index computations of the outer loops' variables leave the nest.
  for (scf::ForOp loop : llvm::reverse(nest))
    moveLoopInvariantCode(cast<LoopLikeOpInterface>(loop.getOperation()));

  scf::ForOp outer = nest.front(), inner = nest.back();
  auto outside = [&](Value v) {
    return !outer->isAncestor(v.getParentRegion()->getParentOp()) &&
           v.getParentRegion() != &outer.getRegion();
  };
  SmallVector<memref::LoadOp> loads;
  SmallVector<memref::StoreOp> stores;
  for (OpOperand &init : op.getDpsInitsMutable()) {
    memref::LoadOp load;
    memref::StoreOp store;
    for (Operation &nested : *inner.getBody()) {
      if (auto l = dyn_cast<memref::LoadOp>(nested);
          l && l.getMemRef() == init.get()) {
        if (load)
          return;
        load = l;
      } else if (auto st = dyn_cast<memref::StoreOp>(nested);
                 st && st.getMemRef() == init.get()) {
        if (store)
          return;
        store = st;
      }
    }
    // linalgOpToLoops computes the load's and the store's indices apart.
    auto sameIndex = [](auto pair) {
      auto [a, b] = pair;
      Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
      return a == b || (x && y && isMemoryEffectFree(x) &&
                        OperationEquivalence::isEquivalentTo(
                            x, y, OperationEquivalence::IgnoreLocations));
    };
    if (!load || !store ||
        load.getIndices().size() != store.getIndices().size() ||
        !llvm::all_of(llvm::zip(load.getIndices(), store.getIndices()),
                      sameIndex) ||
        !llvm::all_of(load.getIndices(), outside))
      return;
    loads.push_back(load);
    stores.push_back(store);
  }
  // Nothing else in the nest writes memory, or reads the outputs.
  for (scf::ForOp loop : nest)
    for (Operation &nested : *loop.getBody()) {
      if (isa<scf::ForOp, scf::YieldOp>(nested) ||
          llvm::is_contained(loads, &nested) ||
          llvm::is_contained(stores, &nested))
        continue;
      if (auto load = dyn_cast<memref::LoadOp>(nested)) {
        if (llvm::any_of(op.getDpsInits(), [&](Value init) {
              return rootBuffer(init) == rootBuffer(load.getMemRef());
            }))
          return;
        continue;
      }
      if (!isMemoryEffectFree(&nested))
        return;
    }

  rewriter.setInsertionPoint(outer);
  // Outer to inner: each loop carries the accumulators, initialized by
  // the loop around it (first yielding them unchanged; the loop inside
  // then yields the new values); the outermost by one load each.
  SmallVector<Value> carried;
  for (memref::LoadOp load : loads)
    carried.push_back(memref::LoadOp::create(
        rewriter, load.getLoc(), load.getMemRef(), load.getIndices()));
  SmallVector<scf::ForOp> rebuilt;
  for (scf::ForOp loop : nest) {
    FailureOr<LoopLikeOpInterface> grown = loop.replaceWithAdditionalYields(
        rewriter, carried, /*replaceInitOperandUsesInLoop=*/false,
        [](OpBuilder &, Location, ArrayRef<BlockArgument> args) {
          return SmallVector<Value>(args.begin(), args.end());
        });
    if (failed(grown))
      return; // the loops are left as they were, which is correct
    auto forOp = cast<scf::ForOp>(grown->getOperation());
    auto args = forOp.getRegionIterArgs().take_back(loads.size());
    carried.assign(args.begin(), args.end());
    if (!rebuilt.empty()) {
      scf::ForOp parent = rebuilt.back();
      auto yield = cast<scf::YieldOp>(parent.getBody()->getTerminator());
      unsigned base = yield.getNumOperands() - loads.size();
      for (auto [i, result] :
           llvm::enumerate(forOp.getResults().take_back(loads.size())))
        rewriter.modifyOpInPlace(yield,
                                 [&] { yield->setOperand(base + i, result); });
    }
    rebuilt.push_back(forOp);
  }
  scf::ForOp innermost = rebuilt.back();
  auto yield = cast<scf::YieldOp>(innermost.getBody()->getTerminator());
  unsigned base = yield.getNumOperands() - loads.size();
  for (auto [i, load, store] : llvm::enumerate(loads, stores)) {
    rewriter.replaceAllUsesWith(load.getResult(), carried[i]);
    Value value = store.getValueToStore();
    rewriter.modifyOpInPlace(yield,
                             [&] { yield->setOperand(base + i, value); });
  }
  rewriter.setInsertionPointAfter(rebuilt.front());
  for (auto [i, store] : llvm::enumerate(stores))
    memref::StoreOp::create(
        rewriter, store.getLoc(),
        rebuilt.front().getResults().take_back(loads.size())[i],
        store.getMemRef(), loads[i].getIndices());
  for (auto [load, store] : llvm::zip(loads, stores)) {
    rewriter.eraseOp(store);
    rewriter.eraseOp(load);
  }
  for (auto [i, loop] : llvm::enumerate(rebuilt))
    loops[first + i] = loop;
}

/// Asks LLVM's loop vectorizer to vectorize the innermost loop of the
/// all-parallel `op`, lowered to `loops`, at `width` lanes, when every
/// operand reads that loop contiguously or not at all. LLVM's cost model
/// keeps long polynomial bodies scalar (erf's and tanh's approximations,
/// with their selects and divisions): BERT's GELU epilogue ran at 1.4 ns an
/// element, 8 lanes idle; and LLVM 22 ignores vectorize.enable without a
/// width. The annotation reaches the loop's latch branch through scf-to-cf
/// and cf-to-llvm.
void forceVectorization(linalg::LinalgOp op, ArrayRef<Operation *> loops,
                        unsigned width) {
  if (width < 2 || loops.empty() || op.getNumReductionLoops() != 0)
    return;
  // A body that reads memory itself (an embedding's gather) has addresses
  // LLVM cannot bound: the request would fail, with a warning.
  if (!llvm::all_of(op.getBlock()->without_terminator(), [](Operation &nested) {
        return isMemoryEffectFree(&nested);
      }))
    return;
  auto inner = dyn_cast<scf::ForOp>(loops.back());
  if (!inner || !matchPattern(inner.getStep(), m_One()))
    return;
  unsigned innermost = op.getNumLoops() - 1;
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = dyn_cast<MemRefType>(operand.get().getType());
    if (!type)
      continue;
    AffineMap map = op.getMatchingIndexingMap(&operand);
    for (auto [position, expr] : llvm::enumerate(map.getResults())) {
      if (!expr.isFunctionOfDim(innermost))
        continue;
      SmallVector<int64_t> strides;
      int64_t offset;
      if (position + 1 != map.getNumResults() || !isa<AffineDimExpr>(expr) ||
          failed(type.getStridesAndOffset(strides, offset)) ||
          strides.back() != 1)
        return;
    }
  }
  MLIRContext *ctx = op->getContext();
  auto enable = LLVM::LoopVectorizeAttr::get(
      ctx, /*disable=*/BoolAttr::get(ctx, false), /*predicateEnable=*/{},
      /*scalableEnable=*/{},
      /*width=*/IntegerAttr::get(IntegerType::get(ctx, 32), width),
      /*followupVectorized=*/{},
      /*followupEpilogue=*/{}, /*followupAll=*/{});
  // Named as llvm.br's own attribute: scf-to-cf moves it to the latch and
  // cf-to-llvm keeps it by that name.
  inner->setAttr(kLoopAnnotation,
                 LLVM::LoopAnnotationAttr::get(
                     ctx, /*disableNonforced=*/{}, /*vectorize=*/enable, {}, {},
                     {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}));
}

struct LowerToLoopsPass
    : lazymlir::impl::LowerToLoopsPassBase<LowerToLoopsPass> {
  using Base::Base;

  /// scf.if (iteration points of `loops` >= parallel-threshold) { the nest
  /// with its outer `depth` loops parallel } else { the nest as it is }.
  /// The loops come from linalgOpToLoops: from 0 by 1, bounds defined
  /// before the outermost.
  /// When `depth` covers the whole nest, its innermost loop would be the
  /// OpenMP loop itself: it is strip-mined into blocks of kBlock iterations
  /// (lazymlir::stripMineInnermost says why).
  static constexpr int64_t kBlock = 1024;
  void stripMineInnermost(RewriterBase &rewriter,
                          SmallVectorImpl<Operation *> &loops, unsigned depth) {
    // all-parallel (the GPU pipeline): every parallel loop maps to blocks
    // and threads, none is an OpenMP loop.
    if (allParallel || depth != loops.size())
      return;
    auto inner = dyn_cast<scf::ForOp>(loops.back());
    if (!inner || !matchPattern(inner.getStep(), m_One()))
      return;
    lazymlir::stripMineInnermost(rewriter, loops, kBlock);
  }

  void guardedBySize(RewriterBase &rewriter, ArrayRef<Operation *> loops,
                     unsigned depth) {
    auto outer = cast<scf::ForOp>(loops.front());
    Location loc = outer.getLoc();
    rewriter.setInsertionPoint(outer);
    Value points = arith::ConstantIndexOp::create(rewriter, loc, 1);
    for (Operation *loop : loops) {
      auto forOp = dyn_cast<scf::ForOp>(loop);
      if (!forOp || !matchPattern(forOp.getLowerBound(), m_Zero()) ||
          !matchPattern(forOp.getStep(), m_One()) ||
          !forOp.getUpperBound().getParentRegion()->isAncestor(
              outer->getParentRegion())) {
        // Not the expected nest: sequential, which is correct.
        return;
      }
      points =
          arith::MulIOp::create(rewriter, loc, points, forOp.getUpperBound());
    }
    Value threshold =
        arith::ConstantIndexOp::create(rewriter, loc, parallelThreshold);
    Value large = arith::CmpIOp::create(
        rewriter, loc, arith::CmpIPredicate::sge, points, threshold);
    auto branch = scf::IfOp::create(rewriter, loc, large, /*withElse=*/true);
    rewriter.moveOpBefore(outer, branch.elseBlock()->getTerminator());
    rewriter.setInsertionPoint(branch.thenBlock()->getTerminator());
    IRMapping mapping;
    Operation *copy = rewriter.clone(*outer, mapping);
    (void)copy;
    SmallVector<Operation *> copies = llvm::map_to_vector(
        loops, [&](Operation *loop) { return mapping.lookup(loop); });
    stripMineInnermost(rewriter, copies, depth);
    lazymlir::parallelizeLoopNest(rewriter, copies, depth);
  }

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics())
        ops.push_back(op);
    });
    for (linalg::LinalgOp op : ops) {
      rewriter.setInsertionPoint(op);
      bool large = lazymlir::isLargeKernel(op, parallelThreshold);
      // With dynamic (`?`) ranges the size is known at run time only: the
      // nest is built twice, parallel and sequential, and the iteration
      // points choose (guardedBySize).
      // Only a whole kernel: an op inside tile loops (a tile of dynamic
      // size, at most a tile's worth) is not split further.
      bool guarded = !allParallel && !large && parallelThreshold > 0 &&
                     op.hasDynamicShape() &&
                     isa<FunctionOpInterface>(op->getParentOp());
      unsigned depth = allParallel        ? lazymlir::disjointParallelDepth(op)
                       : large || guarded ? lazymlir::kernelParallelDepth(op)
                                          : 0;
      FailureOr<linalg::LinalgLoops> loops =
          linalg::linalgOpToLoops(rewriter, op);
      if (failed(loops) || loops->size() < depth) {
        op.emitError("cannot lower to loops");
        return signalPassFailure();
      }
      carryReductionAccumulators(rewriter, op, *loops);
      // The CPU's: the GPU pipeline maps parallel loops to threads.
      if (!allParallel)
        forceVectorization(op, *loops, vectorWidth);
      rewriter.eraseOp(op);
      if (depth > 0 && guarded)
        guardedBySize(rewriter, *loops, depth);
      else if (depth > 0) {
        stripMineInnermost(rewriter, *loops, depth);
        lazymlir::parallelizeLoopNest(rewriter, *loops, depth);
      }
    }
  }
};

} // namespace
